"""Tumbling and sliding windows, computed without a per-event loop.

Algorithm: every event is assigned to its windows (:mod:`.assignment`); an (event,
window) pair is late against the effective watermark of the key's previous batch (an
array comparison); accepted pairs and carried windows are grouped by (key, generation,
start, end) with one ``lexsort``; a window closes at the first of its key's batches
whose effective watermark reaches its end (a segmented ``searchsorted``), unless its
generation ended with an idle flush first; what is left open is flushed at the end of
input or carried. Emission numbers continue the carried counters.

Invariants: groups are sorted by (key, generation, start, end) and, within a group,
carried partials come before events in arrival order; an emitted row's emit time is its
worker's clock at the emitting commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from windowing.arrays import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    packed_keys,
    sat_sub,
    seg_rank,
    seg_searchsorted,
    sort_order,
)
from windowing.config import Lateness
from windowing.contract import AGGREGATE, END_OF_INPUT, IDLE, OPEN, WATERMARK
from windowing.kernel.aggregates import (
    Domains,
    EventInput,
    InputKey,
    Prefixes,
    event_inputs,
    reduce_groups,
    state_partials,
    value_domains,
)
from windowing.kernel.assignment import WindowAssignment, assign_windows
from windowing.kernel.clocks import IdleClocks, snapshot_times
from windowing.kernel.inputs import STATE_EMITTED, STATE_WINDOW, KeyBatches, KeyIds, SortedEvents, state_column
from windowing.kernel.outputs import Groups, LatePairs
from windowing.kernel.slices import WindowSlice
from windowing.kernel.spec import Spec

if TYPE_CHECKING:
    from numpy.typing import NDArray


@dataclass(frozen=True)
class _CarriedWindows:
    """The open windows carried from earlier partitions (``window`` state rows)."""

    rows: np.ndarray  # their rows in the kernel's table
    key: np.ndarray
    start: np.ndarray
    end: np.ndarray
    emissions: np.ndarray  # emissions before (the counter of the emitted window it reopens)
    events: np.ndarray  # accepted events so far

    @staticmethod
    def read(keyset: KeyIds) -> _CarriedWindows:
        rows = np.flatnonzero(keyset.kind == STATE_WINDOW)
        table = keyset.table

        def ints(name: str) -> NDArray[np.int64]:
            values: NDArray[np.int64] = pc.fill_null(state_column(table, name, rows), 0).to_numpy().astype(np.int64)
            return values

        return _CarriedWindows(
            rows, keyset.gid[rows], ints("window_start_ms"), ints("window_end_ms"), ints("emissions"), ints("events")
        )

    @property
    def n(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class _WindowGroups:
    """Carried windows and accepted (event, window) pairs, grouped by (key, generation,
    window start, window end): one group per output row.

    ``member_*`` are per member (carried windows and pairs), sorted by (key, generation,
    start, end, arrival position), carried windows (position -1) first in their group;
    the other arrays are per group.
    """

    member_group: np.ndarray  # the group of each member
    member_event: np.ndarray  # the event of each pair (index in arrival order); -1 for a carried window
    member_is_event: np.ndarray
    key: np.ndarray
    generation: np.ndarray
    start: np.ndarray
    end: np.ndarray
    carried_index: np.ndarray  # per group: its carried window (index into _CarriedWindows), or -1
    carried_group: np.ndarray  # per carried window: its group
    events: np.ndarray  # per group: accepted events, carried ones included

    @property
    def n(self) -> int:
        return len(self.key)

    @property
    def event_group(self) -> np.ndarray:
        """The group of each pair, in member order."""
        group: np.ndarray = self.member_group[self.member_is_event]
        return group

    @property
    def event_index(self) -> np.ndarray:
        """The event of each pair, in member order."""
        event: np.ndarray = self.member_event[self.member_is_event]
        return event


@dataclass
class _Closing:
    """How each group left (or did not leave) the open state: reason and emit fields."""

    reason: np.ndarray
    emit_batch: np.ndarray
    emit_watermark: np.ndarray
    emit_time: np.ndarray

    @staticmethod
    def all_open(n: int) -> _Closing:
        return _Closing(
            np.full(n, OPEN, dtype=np.int8),
            np.zeros(n, dtype=np.int64),
            np.full(n, MIN_TIMESTAMP, dtype=np.int64),
            np.full(n, MIN_TIMESTAMP, dtype=np.int64),
        )


def fixed_windows(
    sorted_events: SortedEvents,
    key_batches: KeyBatches,
    keyset: KeyIds,
    idle: IdleClocks,
    spec: Spec,
    flush_at_end: bool,
    window_slice: WindowSlice | None = None,
) -> tuple[Groups, LatePairs, Groups | None]:
    """Tumbling and sliding windows of every key at once (no per-event loop).

    Events arrive sorted by (key, arrival order). Returns one row per (key, generation,
    window) with its closing (:class:`Groups`; still open: reason OPEN), the late (event,
    window) pairs, and, with ``atAggregate``, one snapshot row per accepted pair.

    Invariants: a pair is late against the effective watermark *before* its event's batch
    (so a batch never makes its own events late); a window closes at the first of its
    key's batches whose effective watermark reaches its end, or at the idle flush that
    ends its generation, whichever comes first; each group's aggregate folds its carried
    partial first, then its events in arrival order.

    With ``window_slice``, only the pairs of windows in that slice are replayed
    (:mod:`.slices`: the key batches then come from key-batch rows).
    """
    domains = value_domains(keyset, spec.aggregators)
    inputs = event_inputs(sorted_events, spec.aggregators, domains)
    pairs = assign_windows(sorted_events.t, spec.window)
    if window_slice is not None:
        owned = window_slice.owns(pairs.start)
        pairs = WindowAssignment(pairs.event[owned], pairs.start[owned], pairs.end[owned])
    watermark_before = key_batches.eff_before[key_batches.of_event[pairs.event]]
    if spec.window.lateness is Lateness.WINDOW_CLOSED:
        late = pairs.end <= watermark_before
    else:
        late = sorted_events.t[pairs.event] < watermark_before
    late_out = LatePairs(pairs.event[late], pairs.start[late], pairs.end[late], watermark_before[late])
    accepted = WindowAssignment(pairs.event[~late], pairs.start[~late], pairs.end[~late])
    carried = _CarriedWindows.read(keyset)
    wg = _group_windows(
        carried, accepted, sorted_events.g[accepted.event], idle.gen[key_batches.of_event[accepted.event]]
    )
    carried_partials = state_partials(spec.aggregators, keyset, carried.rows, domains) if carried.n else None
    partials = reduce_groups(
        spec.aggregators, inputs, wg.event_group, wg.n, wg.event_index, carried_partials, wg.carried_group, domains
    )
    closing = _close_windows(wg, key_batches, idle, keyset, spec, flush_at_end)

    groups = Groups(spec, domains)
    groups.created = np.bincount(wg.key[wg.carried_index < 0], minlength=keyset.n)
    carried_emissions = (
        np.where(wg.carried_index >= 0, carried.emissions[np.maximum(wg.carried_index, 0)], 0)
        if carried.n
        else np.zeros(wg.n, dtype=np.int64)
    )
    emission, reopen = _emissions(keyset, wg, closing.reason, carried_emissions, key_batches.eff_final)
    groups.idle_flushes = _count_idle_flushes(closing.reason, wg.key, wg.generation, keyset.n)
    groups.set(
        wg.key,
        wg.start,
        wg.end,
        closing.reason,
        closing.emit_batch,
        closing.emit_watermark,
        emission,
        wg.events,
        partials,
        reopen,
        emit_time=closing.emit_time,
    )

    snaps = None
    if spec.snapshots:
        snaps = _snapshots(
            spec,
            domains,
            inputs,
            wg,
            emission,
            carried_partials,
            carried,
            sorted_events,
            key_batches,
            snapshot_time=snapshot_times(sorted_events, key_batches, idle),
        )
    return groups, late_out, snaps


def _group_windows(
    carried: _CarriedWindows, accepted: WindowAssignment, pair_key: np.ndarray, pair_generation: np.ndarray
) -> _WindowGroups:
    """Group carried windows (generation 0) and accepted pairs (of keys ``pair_key`` and
    generations ``pair_generation``) by (key, generation, start, end) with one ``lexsort``."""
    n_carried = carried.n
    key = np.concatenate([carried.key, pair_key])
    generation = np.concatenate([np.zeros(n_carried, np.int64), pair_generation])
    start = np.concatenate([carried.start, accepted.start])
    end = np.concatenate([carried.end, accepted.end])
    event = np.concatenate([np.full(n_carried, -1, np.int64), accepted.event])  # arrival order; carried first
    # One sort of the keys packed into an int64 when they fit (by end - start: the same
    # order for equal starts, and one value for windows of one size).
    order = sort_order(packed_keys([event, end - start, start, generation, key]), stable=True)
    key, generation, start, end, event = (x[order] for x in (key, generation, start, end, event))
    if len(order):
        new_group = np.concatenate(
            (
                [True],
                (key[1:] != key[:-1])
                | (generation[1:] != generation[:-1])
                | (start[1:] != start[:-1])
                | (end[1:] != end[:-1]),
            )
        )
    else:
        new_group = np.zeros(0, dtype=bool)
    member_group = np.cumsum(new_group) - 1
    n_groups = int(member_group[-1]) + 1 if len(order) else 0
    firsts = np.flatnonzero(new_group)
    is_carried = order < n_carried
    carried_index = np.full(n_groups, -1, dtype=np.int64)
    carried_index[member_group[is_carried]] = order[is_carried]
    carried_group = np.zeros(n_carried, dtype=np.int64)
    carried_group[order[is_carried]] = member_group[is_carried]
    is_event = ~is_carried
    events = np.bincount(member_group[is_event], minlength=n_groups).astype(np.int64)
    if n_carried:
        np.add.at(events, member_group[is_carried], carried.events[order[is_carried]])
    return _WindowGroups(
        member_group,
        event,
        is_event,
        key[firsts],
        generation[firsts],
        start[firsts],
        end[firsts],
        carried_index,
        carried_group,
        events,
    )


def _close_windows(
    wg: _WindowGroups, key_batches: KeyBatches, idle: IdleClocks, keyset: KeyIds, spec: Spec, flush_at_end: bool
) -> _Closing:
    """Each group's closing: WATERMARK at the first of its key's batches whose effective
    watermark reaches its end, unless its generation ended with an idle flush first (IDLE);
    then END_OF_INPUT for what is still open if ``flush_at_end``."""
    pos = seg_searchsorted(key_batches.eff_after, key_batches.g, wg.end, wg.key)
    key_last = key_batches.key_last[wg.key]
    has_wm = (pos < key_batches.n) & (pos <= np.where(key_last >= 0, key_last, -1))
    if key_batches.n:
        has_wm &= np.take(key_batches.g, np.minimum(pos, key_batches.n - 1), mode="clip") == wg.key
    else:
        has_wm &= False
    end_kb, end_fired = _generation_ends(key_batches, idle, wg.key, wg.generation)
    closing = _Closing.all_open(wg.n)
    by_wm = has_wm & (~end_fired | (pos <= end_kb))
    closing.reason[by_wm] = WATERMARK
    if key_batches.n:
        at = np.minimum(pos, key_batches.n - 1)[by_wm]
        closing.emit_batch[by_wm] = key_batches.batch[at]
        closing.emit_watermark[by_wm] = key_batches.eff_after[at]
        closing.emit_time[by_wm] = idle.kb_clock[at]
    by_idle = end_fired & ~by_wm
    closing.reason[by_idle] = IDLE
    _set_idle_emit(closing, by_idle, end_kb, wg.key, idle, key_batches, keyset, spec)
    if flush_at_end:
        _flush_open(closing, wg.key, idle, key_batches)
    return closing


def _generation_ends(
    key_batches: KeyBatches, idle: IdleClocks, keys: np.ndarray, generations: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each (key, generation): the key batch after which it was flushed idle (-1:
    before the key's first batch) and whether it was flushed at all."""
    fired = np.flatnonzero(idle.kb_fire)
    width = np.int64(max(int(generations.max(initial=0)), int(idle.gen.max(initial=0))) + 2)
    # generation x of key g ends at the fired batch j with gen[j] == x
    fired_code = key_batches.g[fired].astype(np.int64) * width + idle.gen[fired]
    query_code = keys.astype(np.int64) * width + generations
    i = np.searchsorted(fired_code, query_code)
    found = i < len(fired_code)
    found[found] = fired_code[i[found]] == query_code[found]
    end_kb = np.full(len(keys), MAX_TIMESTAMP, dtype=np.int64)
    end_kb[found] = fired[i[found]]
    before_first = (generations == 0) & idle.pre_fire[keys]
    end_kb[before_first] = -1
    return end_kb, found | before_first


def _set_idle_emit(
    closing: _Closing,
    mask: np.ndarray,
    end_kb: np.ndarray,
    keys: np.ndarray,
    idle: IdleClocks,
    key_batches: KeyBatches,
    keyset: KeyIds,
    spec: Spec,
) -> None:
    """Fill the emit fields of the groups in ``mask``, closed by the idle flush that ended
    their generation: after key batch ``end_kb`` (its flush batch, its effective watermark,
    the flush time), or, for ``end_kb == -1``, before the key's first batch of this replay
    (the carried watermark and the ``pre_*`` flush of :class:`IdleClocks`).

    Invariant: every group in ``mask`` has a flush (``_generation_ends`` found one).
    """
    j = end_kb[mask]
    before_first = j < 0
    jj = np.maximum(j, 0)
    g = keys[mask]
    carried_wm = sat_sub(keyset.wm0[g], spec.window.delay_ms)
    closing.emit_batch[mask] = np.where(before_first, idle.pre_batch[g], idle.kb_batch[jj] if key_batches.n else 0)
    after = key_batches.eff_after[jj] if key_batches.n else MIN_TIMESTAMP
    closing.emit_watermark[mask] = np.where(before_first, carried_wm, after)
    closing.emit_time[mask] = np.where(before_first, idle.pre_time[g], idle.kb_time[jj] if key_batches.n else 0)


def _flush_open(closing: _Closing, keys: np.ndarray, idle: IdleClocks, key_batches: KeyBatches) -> None:
    """END_OF_INPUT for every group still open, at its worker's last commit."""
    still_open = closing.reason == OPEN
    g = keys[still_open]
    closing.reason[still_open] = END_OF_INPUT
    closing.emit_batch[still_open] = idle.last_batch[g]
    closing.emit_watermark[still_open] = key_batches.eff_final[g]
    closing.emit_time[still_open] = idle.last_clock[g]


def _count_idle_flushes(reason: np.ndarray, keys: np.ndarray, generations: np.ndarray, n_keys: int) -> np.ndarray:
    """Idle flushes per key: its distinct generations that ended IDLE."""
    m = reason == IDLE
    if not m.any():
        return np.zeros(n_keys, dtype=np.int64)
    flushes = np.unique(np.stack([keys[m], generations[m]], axis=1), axis=0)
    return np.bincount(flushes[:, 0], minlength=n_keys)


def _emissions(
    keyset: KeyIds, wg: _WindowGroups, reason: np.ndarray, carried_emissions: np.ndarray, final_eff: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Emission number of every group and the counters of re-openable emitted windows.

    A (key, window) emitted before, in this replay or an earlier one, gets the next number:
    the carried counter (``emitted`` state row) + the carried emissions of its first group
    (``carried_emissions``: those of a carried open window) + its rank among the window's
    groups (one per generation) + 1. A counter is kept while the window could still reopen:
    its last group is not open and did not close by the watermark, and its end is past the
    key's final effective watermark ``final_eff``.
    """
    t = keyset.table
    counter_rows = np.flatnonzero(keyset.kind == STATE_EMITTED)
    n_counters = len(counter_rows)
    counted = state_column(t, "emissions", counter_rows).to_numpy().astype(np.int64)
    # Carried counters and groups, sorted into runs of one (key, start, end), counters first.
    key = np.concatenate([keyset.gid[counter_rows], wg.key])
    start = np.concatenate([state_column(t, "window_start_ms", counter_rows).to_numpy().astype(np.int64), wg.start])
    end = np.concatenate([state_column(t, "window_end_ms", counter_rows).to_numpy().astype(np.int64), wg.end])
    is_group = np.concatenate([np.zeros(n_counters, np.int64), np.ones(wg.n, np.int64)])
    generation = np.concatenate([np.full(n_counters, -1, np.int64), wg.generation])
    order = np.lexsort((generation, is_group, end, start, key))
    key, start, end = key[order], start[order], end[order]
    if len(order):
        run_start = np.concatenate(([True], (key[1:] != key[:-1]) | (start[1:] != start[:-1]) | (end[1:] != end[:-1])))
    else:
        run_start = np.zeros(0, bool)
    run = np.cumsum(run_start) - 1
    n_runs = int(run[-1]) + 1 if len(order) else 0
    is_counter = order < n_counters
    base = np.zeros(n_runs, dtype=np.int64)
    base[run[is_counter]] = counted[order[is_counter]]
    groups_at = np.flatnonzero(~is_counter)  # sorted positions of the groups
    group_of = order[groups_at] - n_counters
    rank = seg_rank(run[groups_at]) if len(groups_at) else np.zeros(0, np.int64)
    first_carried = np.zeros(n_runs, dtype=np.int64)
    first_carried[run[groups_at[rank == 0]]] = carried_emissions[group_of[rank == 0]]
    emission = np.zeros(wg.n, dtype=np.int64)
    emission[group_of] = base[run[groups_at]] + first_carried[run[groups_at]] + rank + 1
    # Re-openable counters: runs whose last group is emitted (or only a carried counter).
    last = np.flatnonzero(np.append(run_start[1:], True) if len(order) else np.zeros(0, bool))
    last_is_group = ~is_counter[last]
    last_group = order[last][last_is_group] - n_counters
    total = base[run[last]]
    total[last_is_group] = emission[last_group]
    open_or_by_wm = np.zeros(len(last), dtype=bool)
    open_or_by_wm[last_is_group] = (reason[last_group] == OPEN) | (reason[last_group] == WATERMARK)
    keep = ~open_or_by_wm & (total > 0) & (end[last] > final_eff[key[last]])
    return emission, (key[last][keep], start[last][keep], end[last][keep], total[keep])


def _snapshots(
    spec: Spec,
    domains: Domains,
    inputs: dict[InputKey, EventInput],
    wg: _WindowGroups,
    emission: np.ndarray,
    carried_partials: list[Any] | None,
    carried: _CarriedWindows,
    sorted_events: SortedEvents,
    key_batches: KeyBatches,
    snapshot_time: np.ndarray,
) -> Groups:
    """atAggregate: one row per accepted (event, window) with the window's running aggregate
    (emitted at ``snapshot_time`` of its event, see :func:`snapshot_times`).

    Each snapshot is "the group so far": its carried partial and its events up to this
    one, in arrival order (:meth:`Aggregator.running`).
    """
    group, event = wg.event_group, wg.event_index
    carried_index_of_group = np.full(wg.n, -1, dtype=np.int64)
    carried_index_of_group[wg.carried_group] = np.arange(len(wg.carried_group))
    prefixes = Prefixes(group, event, seg_rank(group), carried_index_of_group[group], wg.carried_group, wg.n)
    partials = [
        agg.running(
            inputs.get(agg.input_key), prefixes, carried_partials[i] if carried_partials is not None else None, domains
        )
        for i, agg in enumerate(spec.aggregators)
    ]
    events = prefixes.rank + 1 + (prefixes.carried(carried.events) if carried.n else 0)
    n = len(group)
    snaps = Groups(spec, domains)
    snaps.set(
        wg.key[group],
        wg.start[group],
        wg.end[group],
        np.full(n, AGGREGATE, np.int8),
        sorted_events.batch[event],
        key_batches.eff_before[key_batches.of_event[event]],
        emission[group],
        events,
        partials,
        (np.zeros(0, np.int64),) * 4,
        emit_time=snapshot_time[event],
    )
    return snaps
