"""Every delay of a lean what-if variant from one pass: the delay sweep.

The lateness analysis (:mod:`windowing.whatif`) replays a history under a grid of
``delayWindowClose`` values D for each watermark strategy and lateness mode. For tumbling
and sliding windows without an idle timeout, those replays differ only in D, and D enters
the rules in two comparisons (contract sections 2, 4, 5):

* a pair (event, window ``[ws, we)``) is late when ``we <= W_before - D``
  (``WINDOW_CLOSED``) or ``t < W_before - D`` (``BEFORE_WATERMARK``), with ``W_before``
  the key's raw watermark as of its previous commit;
* an open window closes at the first commit of its key with ``we <= W_after - D``.

The raw watermarks ``W`` do not depend on D (candidates include late events), nor do the
events' keys, batches, windows or the workers' clocks. So one pass computes what every D
shares: the events in arrival order per key, the key batches with their raw watermarks
(:class:`windowing.kernel._KeyBatches` at D = 0), every (event, window) pair and the
windows they form, sorted once. Per D it is then a comparison per pair (late or not), a
count per window (its accepted events; a window exists under D when it has one, or was
carried open from the previous partition under D) and a segmented binary search per
window (the commit that closes it). That is what a replay with ``delayWindowClose: D``
does, window for window: :func:`sweep` gives, per D, the outputs
:func:`windowing.kernel.process` gives for the lean variant (the closed windows' ends,
reasons and emit times; the late pairs; the carried state; the counters), and
``tests/windowing/test_sweep.py`` checks them equal on generated cases.

Not covered (the caller replays those variants through the kernel): session windows
(an accepted event merges sessions, so windows depend on D beyond a count), an idle
timeout (under the event-time clock a key's idleness moves with D, and flushed windows
reopen), and replays that flush at their end or continue from one that did (the state
then holds emitted-window counters).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from windowing import kernel as K
from windowing import metrics
from windowing.arrays import MIN_TIMESTAMP, sat_sub, seg_searchsorted
from windowing.config import Lateness, Pipeline, WatermarkStrategy, WindowType


def sweepable(pipeline: Pipeline) -> bool:
    """Whether :func:`sweep` replays this pipeline's lean variants (module docstring)."""
    w = pipeline.window
    return w.type in (WindowType.TUMBLING, WindowType.SLIDING) and w.idle_timeout_ms is None


@dataclass(frozen=True)
class Lean:
    """One lean variant to replay: its delay, kernel spec and label (its state rows')."""

    delay_ms: int
    spec: K.Spec
    label: str
    keep_late: bool = False


@dataclass(frozen=True)
class _Windows:
    """Every (key, window) some (event, window) pair of this replay falls in, sorted by
    (key, start, end), and each pair's event and window (the same under every strategy,
    lateness mode and delay)."""

    key: np.ndarray  # key id of each window
    start: np.ndarray
    end: np.ndarray
    pair_window: np.ndarray  # window of each pair
    pair_event: np.ndarray  # event (arrival-order position) of each pair
    pair_start: np.ndarray
    pair_end: np.ndarray


def _windows(ev: K._Events, pipeline: Pipeline) -> _Windows:
    pe, ws, we = K._assign(ev.t, pipeline.window)
    pg = ev.g[pe]
    order = np.lexsort((we, ws, pg))
    pe, ws, we, pg = pe[order], ws[order], we[order], pg[order]
    if len(pe):
        new = np.concatenate(([True], (pg[1:] != pg[:-1]) | (ws[1:] != ws[:-1]) | (we[1:] != we[:-1])))
    else:
        new = np.zeros(0, dtype=bool)
    first = np.flatnonzero(new)
    return _Windows(key=pg[first], start=ws[first], end=we[first], pair_window=np.cumsum(new) - 1,
                    pair_event=pe, pair_start=ws, pair_end=we)


@dataclass(frozen=True)
class _Strategy:
    """What one watermark strategy's variants share: the key batches with their raw
    watermarks, the workers' clocks at them, and each pair's raw watermark before it."""

    keys: K._Keys
    batches: K._KeyBatches
    clocks: K._Idle
    pair_watermark: np.ndarray


def sweep(table: pa.Table, groups: Sequence[Sequence[Lean]], variant_col: str,
          timelines: Mapping[WatermarkStrategy, Mapping[Any, K.Timeline]]) -> dict[str, K.KernelOutput]:
    """Replay the lean variants of the complete keys in ``table``: ``groups`` of variants
    that differ only in their delay (one watermark strategy and lateness mode each).

    ``table``: the events and the carried state rows of these variants (``variant_col``
    names each state row's variant). ``timelines``: per strategy, the workers' timelines at
    delay 0 (without an idle timeout the kernel reads only their clocks, which do not depend
    on D). Returns per variant label what :func:`windowing.kernel.process` returns for its
    spec, with the aggregates cut to ``window_end``, ``emit_reason`` and ``emit_time`` (what
    the what-if sums read) and the late pairs only where ``keep_late``.
    """
    first = groups[0][0].spec
    raw = _at_delay(first, 0)
    table = K.with_event_columns(table, raw)
    variant_of = (np.asarray(table[variant_col].to_pylist(), dtype=object) if variant_col in table.column_names
                  else np.full(table.num_rows, None, dtype=object))
    # Keys and events are those of every variant; windows and pairs those of every
    # strategy, lateness mode and delay: computed once.
    keys = K._Keys(table, raw)
    ev = K._Events(table, raw, keys)
    wins = _windows(ev, raw.pipeline)
    strategies: dict[WatermarkStrategy, _Strategy] = {}
    out = {}
    for group in groups:
        strategy = group[0].spec.pipeline.window.watermark_strategy
        if strategy not in strategies:
            strategies[strategy] = _strategy(table, keys, ev, wins, _at_delay(group[0].spec, 0), variant_of,
                                             {v.label for g in groups for v in g
                                              if g[0].spec.pipeline.window.watermark_strategy is strategy},
                                             timelines[strategy])
        for v in group:
            rows = np.flatnonzero((keys.kind == K.STATE_WINDOW) & (variant_of == v.label))
            carried = _Carried(key=keys.gid[rows], start=_scol(table, "window_start_ms", rows),
                               end=_scol(table, "window_end_ms", rows), emissions=_scol(table, "emissions", rows),
                               events=_scol(table, "events", rows))
            out[v.label] = _replay_at(v, ev, strategies[strategy], wins, carried)
    return out


def _strategy(table: pa.Table, keys: K._Keys, ev: K._Events, wins: _Windows, raw: K.Spec, variant_of: np.ndarray,
              labels: set[str], timelines: Mapping[Any, K.Timeline]) -> _Strategy:
    """The key batches under ``raw``'s strategy, starting from the key watermarks its
    variants carried (the same in each of them: they do not depend on D or the mode)."""
    keys = copy.copy(keys)
    keys.wm0 = np.full(keys.n, MIN_TIMESTAMP, dtype=np.int64)
    rows = np.flatnonzero((keys.kind == K.STATE_KEY) & np.isin(variant_of, list(labels)))
    if len(rows):
        keys.wm0[keys.gid[rows]] = K._scol(table, "watermark_ms", rows).fill_null(MIN_TIMESTAMP).to_numpy()
    kb = K._KeyBatches(ev, keys, raw)
    return _Strategy(keys, kb, K._Idle(kb, keys, raw, timelines), kb.eff_before[kb.of_event[wins.pair_event]])


@dataclass(frozen=True)
class _Carried:
    """A variant's windows carried open from the previous partition."""

    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    emissions: np.ndarray  # emitted before (the state's ``emissions``)
    events: np.ndarray


def _scol(table: pa.Table, name: str, rows: np.ndarray) -> np.ndarray:
    return np.asarray(K._scol(table, name, rows).fill_null(0).to_numpy(), dtype=np.int64)


def _at_delay(spec: K.Spec, delay_ms: int) -> K.Spec:
    w = replace(spec.pipeline.window, delay_ms=delay_ms)
    return replace(spec, pipeline=replace(spec.pipeline, window=w))


def _replay_at(v: Lean, ev: K._Events, st: _Strategy, wins: _Windows, carried: _Carried) -> K.KernelOutput:
    """One delay: late pairs, the windows that exist, where each closes, the outputs."""
    spec, delay, k, kb, idle = v.spec, v.delay_ms, st.keys, st.batches, st.clocks
    w = spec.pipeline.window
    eff_before = sat_sub(st.pair_watermark, delay)
    if w.lateness is Lateness.WINDOW_CLOSED:
        late = wins.pair_end <= eff_before
    else:
        late = ev.t[wins.pair_event] < eff_before
    accepted = np.bincount(wins.pair_window[~late], minlength=len(wins.key)).astype(np.int64)
    # The windows under D: those with an accepted event, and the carried ones (merged).
    live = np.flatnonzero(accepted > 0)
    key = np.concatenate([wins.key[live], carried.key])
    start = np.concatenate([wins.start[live], carried.start])
    end = np.concatenate([wins.end[live], carried.end])
    events = np.concatenate([accepted[live], carried.events])
    is_carried = np.concatenate([np.zeros(len(live), bool), np.ones(len(carried.key), bool)])
    prior = np.concatenate([np.zeros(len(live), np.int64), carried.emissions])
    order = np.lexsort((~is_carried, end, start, key))  # a carried window first among equals
    key, start, end, events, is_carried, prior = (x[order] for x in (key, start, end, events, is_carried, prior))
    if len(key):
        new = np.concatenate(([True], (key[1:] != key[:-1]) | (start[1:] != start[:-1]) | (end[1:] != end[:-1])))
    else:
        new = np.zeros(0, bool)
    first = np.flatnonzero(new)
    events = np.add.reduceat(events, first) if len(first) else events
    key, start, end, created, prior = key[first], start[first], end[first], ~is_carried[first], prior[first]
    # Closing: the first commit of the key whose effective watermark reaches the end.
    eff_after = sat_sub(kb.wm_after, delay)
    pos = seg_searchsorted(eff_after, kb.g, end, key)
    last = kb.key_last[key]
    closed = (pos < kb.n) & (pos <= last) & (last >= 0)
    safe = np.minimum(pos, max(kb.n - 1, 0))
    if kb.n:
        closed &= kb.g[safe] == key
    reason = np.where(closed, K.WATERMARK, K.OPEN).astype(np.int8)
    emit_time = np.full(len(key), MIN_TIMESTAMP, np.int64)
    emit_time[closed] = idle.kb_clock[safe[closed]]
    is_open = reason == K.OPEN
    late_pairs = np.flatnonzero(late)
    state = pa.concat_tables([K._key_state_rows(k, kb, spec),
                              _window_state(spec, k, key[is_open], start[is_open], end[is_open],
                                            prior[is_open], events[is_open])])
    emitted = ~is_open
    names = np.array([None, *[K.REASON_NAMES[i] for i in range(1, 6)]], dtype=object)
    aggregates = pa.table({"window_end": K._ts(end[emitted]),
                           "emit_reason": pa.array(names[reason[emitted]], pa.string()),
                           "emit_time": K._ts(emit_time[emitted])})
    if v.keep_late:
        pe = wins.pair_event[late_pairs]
        missed = K._Late(pe, wins.pair_start[late_pairs], wins.pair_end[late_pairs],  # type: ignore[no-untyped-call]
                         eff_before[late_pairs])
        late_table = missed.table(ev, spec)
    else:
        late_table = spec.late_schema().empty_table()
    late_events = np.unique(wins.pair_event[late_pairs])
    counters = {
        metrics.EVENTS: ev.n,
        metrics.LATE_PAIRS: len(late_pairs),
        metrics.LATE_EVENTS: len(late_events),
        metrics.WINDOWS_CREATED: int(created.sum()),
        **{metrics.CLOSED_PREFIX + K.REASON_NAMES[r]: int((reason == r).sum())
           for r in (K.WATERMARK, K.IDLE, K.MAX_DURATION, K.END_OF_INPUT)},
        metrics.SNAPSHOTS: 0,
        metrics.IDLE_KEYS_REMOVED: 0,
        metrics.KEYS_SEEN: int((kb.key_first >= 0).sum()),
        metrics.KEYS_HELD: len(np.unique(key[is_open])),
        metrics.OPEN_WINDOWS: int(is_open.sum()),
    }
    return K.KernelOutput(aggregates, late_table, state, counters)


def _window_state(spec: K.Spec, k: K._Keys, key: np.ndarray, start: np.ndarray, end: np.ndarray,
                  emissions: np.ndarray, events: np.ndarray) -> pa.Table:
    """State rows of the windows left open, as the kernel writes them for a lean variant
    (its one aggregate is a plain count: its partial is the window's event count)."""
    (count,) = spec.pipeline.aggregates
    cols = K._state_base(spec, k, key, "window")
    cols.update(window_start_ms=pa.array(start, pa.int64()), window_end_ms=pa.array(end, pa.int64()),
                emissions=pa.array(emissions, pa.int64()), events=pa.array(events, pa.int64()))
    cols[f"partial_{count.name}"] = pa.array(events, pa.int64())
    return K._fill_state(cols, len(key), spec)
