"""Session windows: a sequential merge per key (docs/semantics.md section 7).

Algorithm: merges are order-dependent (an event can bridge two sessions, and
``maximumDuration`` makes a merge skip), so each key's events are walked in arrival
order in a tight Python loop: an accepted event joins every open session within the gap
(in start order), their aggregates combine and the event is applied; after each of the
key's batches, sessions whose end + gap the effective watermark reaches close
(WATERMARK), then those past ``maximumDuration`` (MAX_DURATION); an idle flush closes
all the key's open sessions.

Invariants: ``first`` and ``last`` are by arrival order, so their partials keep the
arrival position of their value (see :func:`_sessions`); carried values rank before
every event of this replay.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow.compute as pc

from windowing.arrays import (
    MIN_TIMESTAMP,
    sat_sub,
)
from windowing.config import Lateness
from windowing.kernel.aggregates import _dkey, _domains, _state_partials, _value_arrays
from windowing.kernel.clocks import _snapshot_times
from windowing.kernel.decimals import _sum_dtype
from windowing.kernel.inputs import _scol
from windowing.kernel.outputs import _Groups, _Late
from windowing.kernel.spec import (
    AGGREGATE,
    END_OF_INPUT,
    IDLE,
    MAX_DURATION,
    OPEN,
    STATE_EMITTED,
    STATE_WINDOW,
    WATERMARK,
    Spec,
)


def _sessions(ev, kb, k, idle, spec, flush_at_end):
    """Session windows: a tight sequential merge per key (docs/semantics.md section 7).

    Merges are order-dependent (an event can bridge two sessions; maximumDuration makes a
    merge skip), so each key's events are walked in arrival order; aggregates of merged
    sessions combine in start order, then the event is applied.

    ``first`` and ``last`` are by arrival order (contract section 7), and a merge can join
    a session that started later but arrived earlier, so each such partial keeps the
    arrival position of its value and a merge takes the earliest / latest one. Here a
    position is one int per key: an event's index in arrival order (``ev``), and for
    values carried from earlier partitions a negative rank of their (batch, seq) pairs
    (:meth:`Spec.partial_fields`). Every carried value arrived before every event here,
    since a worker's batches only grow across partitions (older ones are rejected), so
    carried positions rank below events, and among themselves by (batch, seq).
    """
    w = spec.window
    G, M = w.gap_ms, w.maximum_duration_ms
    closed_mode = w.lateness is Lateness.WINDOW_CLOSED
    aggs = spec.pipeline.aggregates
    domains = _domains(spec, k, ev)
    values = _value_arrays(spec, ev, domains)
    # Per-event, per-aggregate inputs as Python lists: (kind, value, valid).
    ev_inputs = []
    for a in aggs:
        if a.type == "count":
            v = values[("valid", a.column)][0].tolist() if a.column else [True] * ev.n
            ev_inputs.append((v, v))
        elif a.type in ("sum", "avg"):
            vals, valid = values[("num", a.column)]
            ev_inputs.append((vals.tolist(), valid.tolist()))
        else:
            codes, valid = values[("code", *_dkey(a))]
            ev_inputs.append((codes.tolist(), valid.tolist()))
    kinds = [a.type for a in aggs]

    def empty():
        return [[0, 0, -1, set(), 0] for _ in aggs]  # n, s, code, members, arrival position of code

    def apply(parts, i):
        for p, kind, (v, ok) in zip(parts, kinds, ev_inputs):
            if not ok[i]:
                continue
            if kind == "count":
                p[0] += 1
            elif kind in ("sum", "avg"):
                p[1] = p[1] + v[i]
                p[0] += 1
            elif kind == "distinct":
                p[3].add(v[i])
            elif kind == "min":
                p[2] = v[i] if p[2] < 0 else min(p[2], v[i])
            elif kind == "max":
                p[2] = max(p[2], v[i])
            elif kind == "first":
                if p[2] < 0:
                    p[2], p[4] = v[i], i
            else:
                p[2], p[4] = v[i], i

    def combine(acc, other):
        for p, q, kind in zip(acc, other, kinds):
            p[0] += q[0]
            if kind in ("sum", "avg"):
                p[1] = p[1] + q[1]
            elif kind == "distinct":
                p[3] |= q[3]
            elif kind == "min":
                p[2] = q[2] if p[2] < 0 else (min(p[2], q[2]) if q[2] >= 0 else p[2])
            elif kind == "max":
                p[2] = max(p[2], q[2])
            elif kind == "first":  # the value that arrived first, whichever session holds it
                if q[2] >= 0 and (p[2] < 0 or q[4] < p[4]):
                    p[2], p[4] = q[2], q[4]
            elif kind == "last":
                if q[2] >= 0 and (p[2] < 0 or q[4] > p[4]):
                    p[2], p[4] = q[2], q[4]

    # Carried sessions and emission counters, per key.
    t = k.table
    srows = np.flatnonzero(k.kind == STATE_WINDOW)
    carried: dict[int, list] = {}
    at_pos, at_batch, at_seq = None, np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(srows):
        sp = _state_partials(spec, k, srows, domains)
        at_pos, at_batch, at_seq = _carried_positions(spec, sp)
        s_ws = _scol(t, "window_start_ms", srows).to_numpy().tolist()
        s_we = _scol(t, "window_end_ms", srows).to_numpy().tolist()
        s_events = pc.fill_null(_scol(t, "events", srows), 0).to_numpy().tolist()
        members = [[set() for _ in srows] for _ in aggs]
        for ai, a in enumerate(aggs):
            if a.type == "distinct":
                for r, c in zip(*(x.tolist() for x in sp[ai]["members"])):
                    members[ai][r].add(c)
        for r, g in enumerate(k.gid[srows].tolist()):
            parts = []
            for ai in range(len(aggs)):
                p = sp[ai]
                parts.append([int(p["n"][r]) if "n" in p else 0,
                              _py(p["s"][r]) if "s" in p else 0,
                              int(p["code"][r]) if "code" in p else -1,
                              members[ai][r],
                              int(at_pos[ai][r]) if at_pos is not None and at_pos[ai] is not None else 0])
            carried.setdefault(g, []).append([s_ws[r], s_we[r], s_events[r], parts])
    erows = np.flatnonzero(k.kind == STATE_EMITTED)
    counters: dict[tuple, int] = {}
    if len(erows):
        for g, a0, b0, n0 in zip(k.gid[erows].tolist(),
                                 _scol(t, "window_start_ms", erows).to_pylist(),
                                 _scol(t, "window_end_ms", erows).to_pylist(),
                                 _scol(t, "emissions", erows).to_pylist()):
            counters[(g, a0, b0)] = n0

    out: list[_Row] = []
    snaps: list[_Row] = []
    late = ([], [], [])
    created, idle_flushes = [0] * k.n, [0] * k.n  # per key
    ts = ev.t.tolist()
    kb_start = kb.start.tolist() + [ev.n]
    eff_before, eff_after = kb.eff_before.tolist(), kb.eff_after.tolist()
    kb_batch, kb_fire, fire_batch = kb.batch.tolist(), idle.kb_fire.tolist(), idle.kb_batch.tolist()
    kb_clock, fire_time = idle.kb_clock.tolist(), idle.kb_time.tolist()
    ev_batch = ev.batch.tolist()
    snap_time = _snapshot_times(ev, kb, idle).tolist()

    def emit(g, s, reason, batch, wm, time):
        key = (g, s[0], s[1])
        counters[key] = counters.get(key, 0) + 1
        out.append(_Row(g, s[0], s[1], reason, batch, wm, counters[key], s[2], s[3], time))

    keys = sorted(set(kb.g.tolist()) | set(carried))
    for g in keys:
        open_ = carried.get(g, [])
        if open_ and idle.pre_fire[g]:
            for s in sorted(open_, key=lambda s: s[0]):
                emit(g, s, IDLE, int(idle.pre_batch[g]), int(sat_sub(k.wm0[g:g + 1], w.delay_ms)[0]),
                     int(idle.pre_time[g]))
            open_ = []
            idle_flushes[g] += 1
        j0 = int(kb.key_first[g])
        for j in (range(j0, int(kb.key_last[g]) + 1) if j0 >= 0 else ()):
            eff = eff_before[j]
            for i in range(kb_start[j], kb_start[j + 1]):
                te = ts[i]
                if eff != MIN_TIMESTAMP and ((te + G <= eff) if closed_mode else (te < eff)):
                    late[0].append(i), late[1].append(te), late[2].append(eff)
                    continue
                lo, hi, merged, rest = te, te, [], []
                for s in sorted(open_, key=lambda s: s[0]):
                    if s[0] - G < te < s[1] + G and not (M and max(hi, s[1]) - min(lo, s[0]) >= M):
                        merged.append(s)
                        lo, hi = min(lo, s[0]), max(hi, s[1])
                    else:
                        rest.append(s)
                parts, events = empty(), 0
                for s in merged:
                    combine(parts, s[3])
                    events += s[2]
                if not merged:
                    created[g] += 1
                apply(parts, i)
                session = [lo, hi, events + 1, parts]
                open_ = rest + [session]
                if snaps is not None and spec.snapshots:
                    snaps.append(_Row(g, lo, hi, AGGREGATE, ev_batch[i], eff,
                                      counters.get((g, lo, hi), 0) + 1, events + 1, _copy_parts(parts),
                                      snap_time[i]))
            eff = eff_after[j]
            keep = []
            for s in sorted(open_, key=lambda s: s[0]):
                if eff != MIN_TIMESTAMP and s[1] + G <= eff:
                    emit(g, s, WATERMARK, kb_batch[j], eff, kb_clock[j])
                elif eff != MIN_TIMESTAMP and M and s[0] + M <= eff:
                    emit(g, s, MAX_DURATION, kb_batch[j], eff, kb_clock[j])
                else:
                    keep.append(s)
            open_ = keep
            if kb_fire[j] and open_:
                for s in open_:
                    emit(g, s, IDLE, fire_batch[j], eff, fire_time[j])
                open_ = []
                idle_flushes[g] += 1
        final_eff = int(kb.eff_final[g])
        for s in sorted(open_, key=lambda s: s[0]):
            if flush_at_end:
                emit(g, s, END_OF_INPUT, int(idle.last_batch[g]), final_eff, int(idle.last_clock[g]))
            else:
                out.append(_Row(g, s[0], s[1], OPEN, 0, MIN_TIMESTAMP, counters.get((g, s[0], s[1]), 0) + 1,
                                s[2], s[3], MIN_TIMESTAMP))

    groups = _rows_to_groups(spec, domains, out)
    groups.created, groups.idle_flushes = np.array(created, np.int64), np.array(idle_flushes, np.int64)
    # Positions back to (batch, seq) for the state: carried ones first, then the events'.
    ev_seq = np.arange(ev.n, dtype=np.int64) - kb.start[kb.of_event] if ev.n else np.zeros(0, np.int64)
    all_batch, all_seq = np.concatenate([at_batch, ev.batch]), np.concatenate([at_seq, ev_seq])
    for a, p in zip(aggs, groups.partials):
        if spec.keeps_arrival(a):
            idx = np.where(p["code"] >= 0, p["pos"] + len(at_batch), 0)
            p["at"] = (all_batch[idx], all_seq[idx]) if len(all_batch) else (idx, idx)
    open_keys = {(r.g, r.start, r.end) for r in out if r.reason == OPEN}
    keep = [(g, a0, b0, n0) for (g, a0, b0), n0 in sorted(counters.items())
            if (g, a0, b0) not in open_keys and b0 + G > int(kb.eff_final[g])]
    groups.reopenable = tuple(np.array([r[i] for r in keep], dtype=np.int64) for i in range(4))
    snap_groups = None
    if spec.snapshots:
        snap_groups = _rows_to_groups(spec, domains, snaps)
        snap_groups.reopenable = (np.zeros(0, np.int64),) * 4
    late_out = _Late(np.array(late[0], np.int64), np.array(late[1], np.int64), np.array(late[1], np.int64),
                     np.array(late[2], np.int64))
    return groups, late_out, snap_groups


def _carried_positions(spec: Spec, sp: list[dict]):
    """Arrival positions (see :func:`_sessions`) of carried ``first`` / ``last`` values.

    Returns, per aggregate, the positions of its carried values (None for aggregates
    that keep none), and the (batch, seq) of positions ``-K .. -1`` in order.
    """
    fl = [i for i, a in enumerate(spec.pipeline.aggregates) if spec.keeps_arrival(a)]
    out: list = [None] * len(sp)
    if not fl:
        return out, np.zeros(0, np.int64), np.zeros(0, np.int64)
    b = np.concatenate([sp[i]["at"][0] for i in fl])
    q = np.concatenate([sp[i]["at"][1] for i in fl])
    order = np.lexsort((q, b))
    pos = np.empty(len(b), dtype=np.int64)
    pos[order] = np.arange(len(b), dtype=np.int64) - len(b)
    n = len(b) // len(fl)
    for j, i in enumerate(fl):
        out[i] = pos[j * n:(j + 1) * n]
    return out, b[order], q[order]


def _py(v):
    """A NumPy scalar as a Python number (decimal sums already are Python ints)."""
    return v.item() if isinstance(v, np.generic) else v


def _copy_parts(parts):
    return [[p[0], p[1], p[2], set(p[3]), p[4]] for p in parts]


class _Row(NamedTuple):
    """One session window as :func:`_sessions` emits it (or keeps it open)."""

    g: int
    start: int
    end: int
    reason: int
    batch: int
    wm: int
    emission: int
    events: int
    parts: list
    time: int


def _rows_to_groups(spec, domains, rows: list[_Row]) -> _Groups:
    groups = _Groups(spec, domains)
    partials = []
    for ai, a in enumerate(spec.pipeline.aggregates):
        ps = [r.parts[ai] for r in rows]
        p: dict[str, Any] = {"n": np.array([q[0] for q in ps], dtype=np.int64)}
        if a.type in ("sum", "avg"):
            p["s"] = np.array([q[1] for q in ps], dtype=_sum_dtype(spec.value_type(a)))
        elif a.type == "distinct":
            p["dcount"] = np.array([len(q[3]) for q in ps], dtype=np.int64)
            gi = [r for r, q in enumerate(ps) for _ in q[3]]
            ci = [c for q in ps for c in sorted(q[3])]
            p["members"] = (np.array(gi, dtype=np.int64), np.array(ci, dtype=np.int64))
        elif a.type != "count":
            p["code"] = np.array([q[2] for q in ps], dtype=np.int64)
            if spec.keeps_arrival(a):
                p["pos"] = np.array([q[4] for q in ps], dtype=np.int64)
        partials.append(p)
    def column(name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in rows], dtype=np.int64)

    groups.set(column("g"), column("start"), column("end"), column("reason").astype(np.int8), column("batch"),
               column("wm"), column("emission"), column("events"), partials, emit_time=column("time"))
    return groups


