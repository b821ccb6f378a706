"""Every delay of a lean what-if variant from one pass: the delay sweep.

The lateness analysis (:mod:`windowing.lateness.whatif`) replays a history under a grid of
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
(:class:`windowing.kernel.phases.KeyBatches` at D = 0), every (event, window) pair and the
windows they form, sorted once. Per D it is then a comparison per pair (late or not), a
count per window (its accepted events; a window exists under D when it has one, or was
carried open from the previous partition under D) and a segmented binary search per
window (the commit that closes it). That is what a replay with ``delayWindowClose: D``
does, window for window: :func:`sweep` gives, per D, the outputs
:func:`windowing.kernel.process` gives for the lean variant (the closed windows' ends,
reasons and emit times; the late pairs; the carried state; the counters), and
``tests/windowing/lateness/test_sweep.py`` checks them equal on generated cases.

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
from windowing.contract import CLOSE_REASONS, WATERMARK_REASON, WINDOW_KIND
from windowing.kernel.phases import (
    IdleClocks,
    KeyBatches,
    KeyIds,
    LatePairs,
    SortedEvents,
    key_state_rows,
    state_column,
    state_rows,
    with_event_columns,
)


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
    first_pair: np.ndarray  # each window's first pair
    end_pair: np.ndarray  # one past each window's last pair
    pair_window: np.ndarray  # window of each pair
    pair_event: np.ndarray  # event (arrival-order position) of each pair
    pair_start: np.ndarray
    pair_end: np.ndarray
    by_event: np.ndarray  # the pairs ordered by event (an event's pairs in a row)
    event_first: np.ndarray | None  # per event, its first pair in ``by_event`` (None: an event has none)


def _windows(sorted_events: SortedEvents, pipeline: Pipeline) -> _Windows:
    pe, ws, we = K.assign_windows(sorted_events.t, pipeline.window)
    pg = sorted_events.g[pe]
    order = np.lexsort((we, ws, pg))
    pe, ws, we, pg = pe[order], ws[order], we[order], pg[order]
    if len(pe):
        new = np.concatenate(([True], (pg[1:] != pg[:-1]) | (ws[1:] != ws[:-1]) | (we[1:] != we[:-1])))
    else:
        new = np.zeros(0, dtype=bool)
    first = np.flatnonzero(new)
    by_event = np.argsort(pe, kind="stable")
    firsts = np.searchsorted(pe[by_event], np.arange(sorted_events.n))
    # None: an event in no window (not for these window types); see _slack.
    event_first = None if len(pe) and (np.diff(np.append(firsts, len(pe))) == 0).any() else firsts
    return _Windows(
        key=pg[first],
        start=ws[first],
        end=we[first],
        first_pair=first,
        end_pair=np.append(first[1:], len(pe)).astype(np.int64),
        pair_window=np.cumsum(new) - 1,
        pair_event=pe,
        pair_start=ws,
        pair_end=we,
        by_event=by_event,
        event_first=event_first,
    )


@dataclass(frozen=True)
class _Strategy:
    """What one watermark strategy's variants share: the key batches with their raw
    watermarks, the workers' clocks at them, and each pair's raw watermark before it."""

    keys: KeyIds
    batches: KeyBatches
    clocks: IdleClocks
    pair_watermark: np.ndarray
    closing: "_Closing"


def sweep(
    table: pa.Table,
    groups: Sequence[Sequence[Lean]],
    variant_col: str,
    timelines: Mapping[WatermarkStrategy, Mapping[Any, K.Timeline]],
) -> dict[str, K.KernelOutput]:
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
    table = with_event_columns(table, raw)
    variant_of = (
        np.asarray(table[variant_col].to_pylist(), dtype=object)
        if variant_col in table.column_names
        else np.full(table.num_rows, None, dtype=object)
    )
    # Keys and events are those of every variant; windows and pairs those of every
    # strategy, lateness mode and delay: computed once.
    keys = KeyIds(table, raw)
    sorted_events = SortedEvents(table, raw, keys)
    wins = _windows(sorted_events, raw.pipeline)
    strategies: dict[WatermarkStrategy, _Strategy] = {}
    out = {}
    for group in groups:
        strategy = group[0].spec.pipeline.window.watermark_strategy
        if strategy not in strategies:
            strategies[strategy] = _strategy(
                table,
                keys,
                sorted_events,
                wins,
                _at_delay(group[0].spec, 0),
                variant_of,
                {v.label for g in groups for v in g if g[0].spec.pipeline.window.watermark_strategy is strategy},
                timelines[strategy],
            )
        slack = _slack(sorted_events, strategies[strategy], wins, group[0].spec.pipeline.window.lateness)
        for v in group:
            rows = np.flatnonzero((keys.kind == K.STATE_WINDOW) & (variant_of == v.label))
            carried = _Carried(
                key=keys.gid[rows],
                start=_scol(table, "window_start_ms", rows),
                end=_scol(table, "window_end_ms", rows),
                emissions=_scol(table, "emissions", rows),
                events=_scol(table, "events", rows),
            )
            out[v.label] = _replay_at(v, sorted_events, strategies[strategy], wins, slack, carried)
    return out


def _strategy(
    table: pa.Table,
    keys: KeyIds,
    sorted_events: SortedEvents,
    wins: _Windows,
    raw: K.Spec,
    variant_of: np.ndarray,
    labels: set[str],
    timelines: Mapping[Any, K.Timeline],
) -> _Strategy:
    """The key batches under ``raw``'s strategy, starting from the key watermarks its
    variants carried (the same in each of them: they do not depend on D or the mode)."""
    keys = copy.copy(keys)
    keys.wm0 = np.full(keys.n, MIN_TIMESTAMP, dtype=np.int64)
    rows = np.flatnonzero(keys.kind == K.STATE_KEY)
    rows = rows[np.isin(variant_of[rows], list(labels))]
    if len(rows):
        keys.wm0[keys.gid[rows]] = state_column(table, "watermark_ms", rows).fill_null(MIN_TIMESTAMP).to_numpy()
    key_batches = KeyBatches(sorted_events, keys, raw)
    return _Strategy(
        keys,
        key_batches,
        IdleClocks(key_batches, keys, raw, timelines),
        key_batches.eff_before[key_batches.of_event[wins.pair_event]],
        _Closing(key_batches.wm_after, key_batches.g, keys.n),
    )


class _Closing:
    """Per window end and delay D, the first key batch whose raw watermark reaches
    ``end + D`` (``wm - D >= end``): :func:`windowing.arrays.seg_searchsorted` over the key
    batches' watermarks, with the batches' keys encoded once for every delay."""

    def __init__(self, wm_after: np.ndarray, g: np.ndarray, n_keys: int):
        self.wm, self.g = wm_after, g
        real = wm_after != MIN_TIMESTAMP
        self.lo, self.hi = (int(wm_after[real].min()), int(wm_after[real].max())) if real.any() else (0, 0)
        self.width = self.hi - self.lo + 3  # minus infinity, the values, and "above them all"
        self.enc = (
            g.astype(np.int64) * self.width + np.where(real, wm_after - (self.lo - 1), 0)
            if self.width * (n_keys + 1) < 2**62
            else None
        )

    def search(self, end: np.ndarray, key: np.ndarray, delay: int) -> np.ndarray:
        """Like ``seg_searchsorted(sat_sub(wm_after, delay), g, end, key)``."""
        if self.enc is None or not len(key):
            return seg_searchsorted(sat_sub(self.wm, delay), self.g, end, key)
        # wm - D >= end, with wm real, is wm >= end + D; clipped to [lo, hi + 1] (hi + 1: none).
        q = np.where(end > self.hi + 1 - delay, self.hi + 1, np.maximum(end, self.lo - delay) + delay)
        found: np.ndarray = np.searchsorted(
            self.enc, key.astype(np.int64) * self.width + (q - (self.lo - 1)), side="left"
        )
        return found


@dataclass(frozen=True)
class _Carried:
    """A variant's windows carried open from the previous partition."""

    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    emissions: np.ndarray  # emitted before (the state's ``emissions``)
    events: np.ndarray


def _scol(table: pa.Table, name: str, rows: np.ndarray) -> np.ndarray:
    return np.asarray(state_column(table, name, rows).fill_null(0).to_numpy(), dtype=np.int64)


def _at_delay(spec: K.Spec, delay_ms: int) -> K.Spec:
    w = replace(spec.pipeline.window, delay_ms=delay_ms)
    return replace(spec, pipeline=replace(spec.pipeline, window=w))


@dataclass(frozen=True)
class _Slack:
    """One strategy and lateness mode: each pair's slack (late under D exactly when
    ``D <= slack``; minus infinity before the key's first commit), and each event's."""

    pair: np.ndarray
    window_min: np.ndarray  # per window: a window exists under D when some pair has slack < D
    event: np.ndarray  # every event's (its greatest pair's): the late events


def _slack(sorted_events: SortedEvents, st: _Strategy, wins: _Windows, lateness: Lateness) -> _Slack:
    wm = st.pair_watermark
    if lateness is Lateness.WINDOW_CLOSED:
        slack = wm - wins.pair_end  # late: end <= wm - D
    else:
        slack = wm - sorted_events.t[wins.pair_event] - 1  # late: t < wm - D
    slack[wm == MIN_TIMESTAMP] = MIN_TIMESTAMP
    if wins.event_first is not None and sorted_events.n:
        event_slack = np.maximum.reduceat(slack[wins.by_event], wins.event_first)
    else:
        event_slack = np.full(sorted_events.n, MIN_TIMESTAMP, np.int64)
        np.maximum.at(event_slack, wins.pair_event, slack)
    firsts = wins.first_pair
    return _Slack(
        pair=slack, window_min=np.minimum.reduceat(slack, firsts) if len(firsts) else slack[:0], event=event_slack
    )


def _replay_at(
    v: Lean, sorted_events: SortedEvents, st: _Strategy, wins: _Windows, sl: _Slack, carried: _Carried
) -> K.KernelOutput:
    """One delay: the windows that exist, where each closes, the late pairs, the outputs.

    Per window, not per pair: a window exists under D when its least slack is below D
    (or it was carried open under D), and only the windows left open need their count of
    accepted events (the carried state's).
    """
    spec, delay, keyset, key_batches, idle = v.spec, v.delay_ms, st.keys, st.batches, st.clocks
    exists = sl.window_min < delay
    # The carried windows: those with pairs in this replay join theirs, the others stay apart.
    at = seg_searchsorted(wins.start, wins.key, carried.start, carried.key)
    safe_at = np.minimum(at, max(len(wins.key) - 1, 0))
    matched = (
        (at < len(wins.key))
        & (wins.key[safe_at] == carried.key)
        & (wins.start[safe_at] == carried.start)
        & (wins.end[safe_at] == carried.end)
        if len(wins.key)
        else np.zeros(len(carried.key), bool)
    )
    created = exists.copy()
    created[safe_at[matched]] = False
    exists[safe_at[matched]] = True
    live = np.flatnonzero(exists)
    prior = np.zeros(len(wins.key), np.int64)
    prior[safe_at[matched]] = carried.emissions[matched]
    before = np.zeros(len(wins.key), np.int64)
    before[safe_at[matched]] = carried.events[matched]
    apart = ~matched
    key = np.concatenate([wins.key[live], carried.key[apart]])
    start = np.concatenate([wins.start[live], carried.start[apart]])
    end = np.concatenate([wins.end[live], carried.end[apart]])
    prior = np.concatenate([prior[live], carried.emissions[apart]])
    # Closing: the first commit of the key whose effective watermark reaches the end.
    pos = st.closing.search(end, key, delay)
    last = key_batches.key_last[key]
    safe = np.minimum(pos, max(key_batches.n - 1, 0))
    closed = (pos < key_batches.n) & (pos <= last) & (last >= 0)
    if key_batches.n:
        closed &= key_batches.g[safe] == key
    emit_time = idle.kb_clock[safe[closed]] if key_batches.n else np.zeros(0, np.int64)
    is_open = ~closed
    # Accepted events of the open windows: their pairs with slack < D, plus what they carried.
    open_live = live[is_open[: len(live)]]
    kept = np.concatenate([[0], np.cumsum(sl.pair < delay)])
    accepted = kept[wins.end_pair[open_live]] - kept[wins.first_pair[open_live]] + before[open_live]
    events = np.concatenate([accepted, carried.events[apart][is_open[len(live) :]]])
    state = pa.concat_tables(
        [
            key_state_rows(keyset, key_batches, spec),
            _window_state(spec, keyset, key[is_open], start[is_open], end[is_open], prior[is_open], events),
        ]
    )
    aggregates = pa.table(
        {
            "window_end": K.ts_array(end[closed]),
            "emit_reason": pa.array([WATERMARK_REASON] * int(closed.sum()), pa.string()),
            "emit_time": K.ts_array(emit_time),
        }
    )
    late_pairs = int(np.count_nonzero(sl.pair >= delay))
    if v.keep_late:
        rows = np.flatnonzero(sl.pair >= delay)
        missed = LatePairs(
            wins.pair_event[rows], wins.pair_start[rows], wins.pair_end[rows], sat_sub(st.pair_watermark[rows], delay)
        )
        late_table = missed.table(sorted_events, spec)
    else:
        late_table = spec.late_schema().empty_table()
    counters = {
        metrics.EVENTS: sorted_events.n,
        metrics.LATE_PAIRS: late_pairs,
        metrics.LATE_EVENTS: int(np.count_nonzero(sl.event >= delay)),
        metrics.WINDOWS_CREATED: int(created.sum()),
        metrics.CLOSED_PREFIX + WATERMARK_REASON: int(closed.sum()),
        **{metrics.CLOSED_PREFIX + r: 0 for r in CLOSE_REASONS if r != WATERMARK_REASON},
        metrics.SNAPSHOTS: 0,
        metrics.IDLE_KEYS_REMOVED: 0,
        metrics.KEYS_SEEN: int((key_batches.key_first >= 0).sum()),
        metrics.KEYS_HELD: _distinct(key[is_open], keyset.n),
        metrics.OPEN_WINDOWS: int(is_open.sum()),
    }
    return K.KernelOutput(aggregates, late_table, state, counters)


def _distinct(ids: np.ndarray, n: int) -> int:
    """How many distinct values ``ids`` (in ``0 .. n-1``) holds."""
    seen = np.zeros(n, bool)
    seen[ids] = True
    return int(np.count_nonzero(seen))


def _window_state(
    spec: K.Spec,
    keyset: KeyIds,
    key: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    emissions: np.ndarray,
    events: np.ndarray,
) -> pa.Table:
    """State rows of the windows left open, as the kernel writes them for a lean variant
    (its one aggregate is a plain count: its partial is the window's event count)."""
    (count,) = spec.pipeline.aggregates
    columns = {
        "window_start_ms": pa.array(start, pa.int64()),
        "window_end_ms": pa.array(end, pa.int64()),
        "emissions": pa.array(emissions, pa.int64()),
        "events": pa.array(events, pa.int64()),
        f"partial_{count.name}": pa.array(events, pa.int64()),
    }
    return state_rows(spec, keyset, key, WINDOW_KIND, columns)
