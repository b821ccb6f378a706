"""Session windows: a sequential merge per key (docs/semantics.md section 7).

Algorithm: merges are order-dependent (an event can bridge two sessions, and
``maximumDuration`` makes a merge skip), so each key's events are walked in arrival
order in a tight Python loop: an accepted event joins every open session within the gap
(in start order), their aggregates combine and the event is applied; after each of the
key's batches, sessions whose end + gap the effective watermark reaches close
(WATERMARK), then those past ``maximumDuration`` (MAX_DURATION); an idle flush closes
all the key's open sessions.

Invariants: ``first`` and ``last`` are by arrival order, so their partials keep the
arrival position of their value (see :func:`session_windows`); carried values rank before
every event of this replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow.compute as pc

from windowing.arrays import MIN_TIMESTAMP, sat_sub
from windowing.config import Lateness
from windowing.contract import AGGREGATE, END_OF_INPUT, IDLE, MAX_DURATION, OPEN, WATERMARK
from windowing.kernel.aggregates import (
    Accumulator,
    Aggregator,
    ArrivalAggregator,
    Domains,
    EventInput,
    InputKey,
    event_inputs,
    state_partials,
    value_domains,
)
from windowing.kernel.clocks import IdleClocks, snapshot_times
from windowing.kernel.inputs import STATE_EMITTED, STATE_WINDOW, KeyBatches, KeyIds, SortedEvents, state_column
from windowing.kernel.outputs import Groups, LatePairs
from windowing.kernel.spec import Spec


@dataclass(slots=True)
class _Session:
    """One open session of a key: ``[start, end]`` are its earliest and latest event times
    (the window is ``[start, end + gap)``), ``accs`` one accumulator per aggregate."""

    start: int
    end: int
    events: int
    accs: list[Accumulator]


class _SessionRow(NamedTuple):
    """One session window as :func:`session_windows` emits it (or keeps it open)."""

    key: int
    start: int
    end: int
    reason: int
    batch: int
    watermark: int
    emission: int
    events: int
    accs: list[Accumulator]
    time: int


def _by_start(session: _Session) -> int:
    return session.start


def session_windows(
    sorted_events: SortedEvents,
    key_batches: KeyBatches,
    keyset: KeyIds,
    idle: IdleClocks,
    spec: Spec,
    flush_at_end: bool,
) -> tuple[Groups, LatePairs, Groups | None]:
    """Session windows: a tight sequential merge per key (docs/semantics.md section 7).

    Events arrive sorted by (key, arrival order); returns one row per session window that
    closed or stays open (:class:`Groups`), the late events (one "pair" each, its window
    ``[t, t]``), and with ``atAggregate`` one snapshot row per accepted event.

    Merges are order-dependent (an event can bridge two sessions; maximumDuration makes a
    merge skip), so each key's events are walked in arrival order; aggregates of merged
    sessions combine in start order, then the event is applied.

    ``first`` and ``last`` are by arrival order (contract section 7), and a merge can join
    a session that started later but arrived earlier, so each such partial keeps the
    arrival position of its value and a merge takes the earliest / latest one. Here a
    position is one int per key: an event's index in arrival order (``sorted_events``), and for
    values carried from earlier partitions a negative rank of their (batch, seq) pairs
    (:meth:`Spec.partial_fields`). Every carried value arrived before every event here,
    since a worker's batches only grow across partitions (older ones are rejected), so
    carried positions rank below events, and among themselves by (batch, seq).
    """
    domains = value_domains(keyset, spec.aggregators)
    carried, carried_batch, carried_seq = _carried_sessions(spec.aggregators, keyset, domains)
    inputs = event_inputs(sorted_events, spec.aggregators, domains)
    loop = _SessionLoop(spec, sorted_events, key_batches, idle, keyset, inputs)
    for key in sorted(set(key_batches.g.tolist()) | set(carried)):
        loop.run_key(key, carried.get(key, []), flush_at_end)

    groups = _rows_to_groups(spec, domains, loop.out)
    groups.created, groups.idle_flushes = np.array(loop.created, np.int64), np.array(loop.idle_flushes, np.int64)
    # Positions back to (batch, seq) for the state: carried ones first, then the events'.
    event_seq = np.zeros(0, np.int64)
    if sorted_events.n:
        event_seq = np.arange(sorted_events.n, dtype=np.int64) - key_batches.start[key_batches.of_event]
    all_batch, all_seq = np.concatenate([carried_batch, sorted_events.batch]), np.concatenate([carried_seq, event_seq])
    for agg, partial in zip(spec.aggregators, groups.partials):
        if isinstance(agg, ArrivalAggregator) and agg.keeps_arrival:
            at = np.where(partial.code >= 0, partial.position + len(carried_batch), 0)
            partial.arrival = (all_batch[at], all_seq[at]) if len(all_batch) else (at, at)
    groups.reopenable = loop.reopenable()
    snap_groups = None
    if spec.snapshots:
        snap_groups = _rows_to_groups(spec, domains, loop.snaps)
        snap_groups.reopenable = (np.zeros(0, np.int64),) * 4
    late = [np.array(x, np.int64) for x in loop.late]
    return groups, LatePairs(late[0], late[1], late[1], late[2]), snap_groups


class _SessionLoop:
    """The per-key merge loop and what it emits: ``out`` (closed and open sessions),
    ``snaps`` (``atAggregate`` rows), ``late`` (event, event time, watermark) and the
    per-key counters. ``counters[(key, start, end)]`` counts the emissions of a window,
    the carried ones included."""

    def __init__(
        self,
        spec: Spec,
        sorted_events: SortedEvents,
        key_batches: KeyBatches,
        idle: IdleClocks,
        keyset: KeyIds,
        inputs: dict[InputKey, EventInput],
    ):
        w = spec.window
        self.spec, self.key_batches, self.idle, self.keyset = spec, key_batches, idle, keyset
        self.gap_ms, self.max_duration_ms = w.gap_ms, w.maximum_duration_ms
        self.closed_mode = w.lateness is Lateness.WINDOW_CLOSED
        self.aggregators: list[Aggregator] = spec.aggregators
        # Per aggregate: (values, valid) per event as Python lists.
        self.event_inputs = [agg.session_inputs(inputs.get(agg.input_key), sorted_events.n) for agg in self.aggregators]
        self.counters = _carried_counters(keyset)
        self.out: list[_SessionRow] = []
        self.snaps: list[_SessionRow] = []
        self.late: tuple[list[int], list[int], list[int]] = ([], [], [])
        self.created, self.idle_flushes = [0] * keyset.n, [0] * keyset.n  # per key
        # The loop reads Python lists: NumPy scalars one at a time are slow.
        self.event_time = sorted_events.t.tolist()
        self.batch_start = key_batches.start.tolist() + [sorted_events.n]
        self.eff_before, self.eff_after = key_batches.eff_before.tolist(), key_batches.eff_after.tolist()
        self.kb_batch, self.kb_clock = key_batches.batch.tolist(), idle.kb_clock.tolist()
        self.fire, self.fire_batch = idle.kb_fire.tolist(), idle.kb_batch.tolist()
        self.fire_time = idle.kb_time.tolist()
        self.event_batch = sorted_events.batch.tolist()
        self.snapshot_time = snapshot_times(sorted_events, key_batches, idle).tolist()

    def emit(self, key: int, s: _Session, reason: int, batch: int, watermark: int, time: int) -> None:
        window = (key, s.start, s.end)
        self.counters[window] = self.counters.get(window, 0) + 1
        self.out.append(
            _SessionRow(key, s.start, s.end, reason, batch, watermark, self.counters[window], s.events, s.accs, time)
        )

    def run_key(self, key: int, open_: list[_Session], flush_at_end: bool) -> None:
        """Replay one key: its carried sessions ``open_``, then its batches in order."""
        idle, key_batches = self.idle, self.key_batches
        if open_ and idle.pre_fire[key]:
            carried_wm = int(sat_sub(self.keyset.wm0[key : key + 1], self.spec.window.delay_ms)[0])
            for s in sorted(open_, key=_by_start):
                self.emit(key, s, IDLE, int(idle.pre_batch[key]), carried_wm, int(idle.pre_time[key]))
            open_ = []
            self.idle_flushes[key] += 1
        first = int(key_batches.key_first[key])
        for j in range(first, int(key_batches.key_last[key]) + 1) if first >= 0 else ():
            eff = self.eff_before[j]
            for i in range(self.batch_start[j], self.batch_start[j + 1]):
                open_ = self.add_event(key, i, eff, open_)
            open_ = self.close_after_batch(key, j, open_)
        final_eff = int(key_batches.eff_final[key])
        for s in sorted(open_, key=_by_start):
            if flush_at_end:
                self.emit(key, s, END_OF_INPUT, int(idle.last_batch[key]), final_eff, int(idle.last_clock[key]))
            else:
                emission = self.counters.get((key, s.start, s.end), 0) + 1
                self.out.append(
                    _SessionRow(key, s.start, s.end, OPEN, 0, MIN_TIMESTAMP, emission, s.events, s.accs, MIN_TIMESTAMP)
                )

    def add_event(self, key: int, i: int, eff: int, open_: list[_Session]) -> list[_Session]:
        """Event ``i`` against the key's open sessions (``eff``: the effective watermark
        before its batch): late, or merged with every session within the gap, in start
        order, unless the merged session would reach ``maximumDuration``."""
        gap, max_duration = self.gap_ms, self.max_duration_ms
        t = self.event_time[i]
        if eff != MIN_TIMESTAMP and ((t + gap <= eff) if self.closed_mode else (t < eff)):
            self.late[0].append(i)
            self.late[1].append(t)
            self.late[2].append(eff)
            return open_
        lo, hi, merged, rest = t, t, [], []
        for s in sorted(open_, key=_by_start):
            if s.start - gap < t < s.end + gap and not (
                max_duration and max(hi, s.end) - min(lo, s.start) >= max_duration
            ):
                merged.append(s)
                lo, hi = min(lo, s.start), max(hi, s.end)
            else:
                rest.append(s)
        accs, events = [agg.empty() for agg in self.aggregators], 0
        for s in merged:
            for agg, acc, other in zip(self.aggregators, accs, s.accs):
                agg.combine(acc, other)
            events += s.events
        if not merged:
            self.created[key] += 1
        for agg, acc, (values, valid) in zip(self.aggregators, accs, self.event_inputs):
            if valid[i]:
                agg.apply(acc, values[i], i)
        session = _Session(lo, hi, events + 1, accs)
        if self.spec.snapshots:
            self.snaps.append(
                _SessionRow(
                    key,
                    lo,
                    hi,
                    AGGREGATE,
                    self.event_batch[i],
                    eff,
                    self.counters.get((key, lo, hi), 0) + 1,
                    events + 1,
                    [agg.copy(acc) for agg, acc in zip(self.aggregators, accs)],
                    self.snapshot_time[i],
                )
            )
        return rest + [session]

    def close_after_batch(self, key: int, j: int, open_: list[_Session]) -> list[_Session]:
        """After key batch ``j`` commits: WATERMARK for sessions whose end + gap its
        effective watermark reaches, else MAX_DURATION past ``maximumDuration``; then an
        idle flush closes the rest (IDLE)."""
        eff, max_duration = self.eff_after[j], self.max_duration_ms
        keep = []
        for s in sorted(open_, key=_by_start):
            if eff != MIN_TIMESTAMP and s.end + self.gap_ms <= eff:
                self.emit(key, s, WATERMARK, self.kb_batch[j], eff, self.kb_clock[j])
            elif eff != MIN_TIMESTAMP and max_duration and s.start + max_duration <= eff:
                self.emit(key, s, MAX_DURATION, self.kb_batch[j], eff, self.kb_clock[j])
            else:
                keep.append(s)
        if self.fire[j] and keep:
            for s in keep:
                self.emit(key, s, IDLE, self.fire_batch[j], eff, self.fire_time[j])
            self.idle_flushes[key] += 1
            return []
        return keep

    def reopenable(self) -> tuple[np.ndarray, ...]:
        """(key, start, end, emissions) of emitted sessions a later event may reopen: not
        open now, and end + gap past the key's final effective watermark."""
        open_windows = {(r.key, r.start, r.end) for r in self.out if r.reason == OPEN}
        eff_final = self.key_batches.eff_final
        keep = [
            (key, start, end, n)
            for (key, start, end), n in sorted(self.counters.items())
            if (key, start, end) not in open_windows and end + self.gap_ms > int(eff_final[key])
        ]
        return tuple(np.array([r[i] for r in keep], dtype=np.int64) for i in range(4))


def _carried_counters(keyset: KeyIds) -> dict[tuple[int, int, int], int]:
    """Emissions so far per (key, start, end), from the ``emitted`` state rows and from
    the carried open sessions: an open row's ``emissions`` is the count of the window it
    reopened (emitted, then reopened by a later event before the state was written), so a
    flush in the next replay numbers its emission on from there, as one replay would."""
    rows = np.flatnonzero((keyset.kind == STATE_EMITTED) | (keyset.kind == STATE_WINDOW))
    counters: dict[tuple[int, int, int], int] = {}
    if len(rows):
        t = keyset.table
        for key, start, end, n in zip(
            keyset.gid[rows].tolist(),
            state_column(t, "window_start_ms", rows).to_pylist(),
            state_column(t, "window_end_ms", rows).to_pylist(),
            state_column(t, "emissions", rows).to_pylist(),
        ):
            if n:
                counters[(key, start, end)] = max(n, counters.get((key, start, end), 0))
    return counters


def _carried_sessions(
    aggregators: list[Aggregator], keyset: KeyIds, domains: Domains
) -> tuple[dict[int, list[_Session]], np.ndarray, np.ndarray]:
    """The carried sessions per key, and the (batch, seq) of carried arrival positions
    ``-K .. -1`` in order (see :func:`_carried_positions`)."""
    rows = np.flatnonzero(keyset.kind == STATE_WINDOW)
    if not len(rows):
        return {}, np.zeros(0, np.int64), np.zeros(0, np.int64)
    partials = state_partials(aggregators, keyset, rows, domains)
    positions, at_batch, at_seq = _carried_positions(aggregators, partials)
    t = keyset.table
    starts = state_column(t, "window_start_ms", rows).to_numpy().tolist()
    ends = state_column(t, "window_end_ms", rows).to_numpy().tolist()
    events = pc.fill_null(state_column(t, "events", rows), 0).to_numpy().tolist()
    per_aggregate = [agg.carried(partial, pos) for agg, partial, pos in zip(aggregators, partials, positions)]
    carried: dict[int, list[_Session]] = {}
    for r, key in enumerate(keyset.gid[rows].tolist()):
        accs = [accs_of_aggregate[r] for accs_of_aggregate in per_aggregate]
        carried.setdefault(key, []).append(_Session(starts[r], ends[r], events[r], accs))
    return carried, at_batch, at_seq


def _carried_positions(
    aggregators: list[Aggregator], partials: list[Any]
) -> tuple[list[np.ndarray | None], np.ndarray, np.ndarray]:
    """Arrival positions (see :func:`session_windows`) of carried ``first`` / ``last`` values.

    Returns, per aggregate, the positions of its carried values (None for aggregates
    that keep none), and the (batch, seq) of positions ``-K .. -1`` in order.
    """
    keeping = [i for i, agg in enumerate(aggregators) if isinstance(agg, ArrivalAggregator) and agg.keeps_arrival]
    out: list[np.ndarray | None] = [None] * len(partials)
    if not keeping:
        return out, np.zeros(0, np.int64), np.zeros(0, np.int64)
    batch = np.concatenate([partials[i].arrival[0] for i in keeping])
    seq = np.concatenate([partials[i].arrival[1] for i in keeping])
    order = np.lexsort((seq, batch))
    pos = np.empty(len(batch), dtype=np.int64)
    pos[order] = np.arange(len(batch), dtype=np.int64) - len(batch)
    n = len(batch) // len(keeping)
    for j, i in enumerate(keeping):
        out[i] = pos[j * n : (j + 1) * n]
    return out, batch[order], seq[order]


def _rows_to_groups(spec: Spec, domains: Domains, rows: list[_SessionRow]) -> Groups:
    groups = Groups(spec, domains)
    partials = [agg.collect([r.accs[i] for r in rows]) for i, agg in enumerate(spec.aggregators)]

    def column(name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in rows], dtype=np.int64)

    groups.set(
        column("key"),
        column("start"),
        column("end"),
        column("reason").astype(np.int8),
        column("batch"),
        column("watermark"),
        column("emission"),
        column("events"),
        partials,
        emit_time=column("time"),
    )
    return groups
