"""Worker clocks and idle flushes: each worker's timeline of commits and where each key
goes idle.

Algorithm: a worker's global watermark and processing clock after each commit are
running maxima over its batches (:func:`worker_timelines`). A key goes idle after one of
its batches when a commit at or after it, and before the key's next batch, brings the
worker's clock (event-time: the effective global watermark; processing-time: the
greatest arrival) to the key's last activity + ``idleTimeout``: one ``searchsorted`` in
the worker's timeline per key batch. With the processing-time clock a heartbeat tick
can only flush the key in the gap just before that commit (:func:`_heartbeat_flush`), so
ticks are never listed.

Invariants: every flush ends a *generation* of the key's windows; ``IdleClocks.gen`` numbers
the generations of each key batch from 0 (carried windows are generation 0); emit
times are always a worker clock value from the timeline (or the tick).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Mapping, cast

import numpy as np
import pyarrow as pa

from windowing.arrays import (
    MIN_TIMESTAMP,
    group_codes,
    packed_keys,
    sat_add,
    sat_sub,
    searchsorted_left,
    sort_order,
)
from windowing.config import Clock, Pipeline, WatermarkStrategy
from windowing.contract import ARRIVAL_MS_COLUMN, BATCH_COLUMN, EVENT_MS_COLUMN, KIND_COLUMN, WORKER_KIND
from windowing.kernel.inputs import EVENT, KeyBatches, KeyIds, SortedEvents, as_int64, hashable
from windowing.kernel.spec import Spec, Timeline

if TYPE_CHECKING:
    from numpy.typing import NDArray


def worker_timelines(
    pipeline: Pipeline, commits: Mapping[Any, tuple[np.ndarray, ...]], carried: Mapping[Any, dict[str, Any]]
) -> tuple[dict[Any, Timeline], list[dict[str, Any]]]:
    """Each worker's timeline, and its state row, from its commits in this replay.

    ``commits[worker]`` holds the worker's batches in order with, per batch, the watermark
    candidate over all its events, the greatest and the smallest arrival time (see
    :func:`commit_summary`); ``carried[worker]`` the worker row of the carried state
    (``batch``, ``watermark_ms``, ``clock_ms``). A worker in either gets a timeline: the
    global watermark and the clock are running maxima that start from the carried ones.
    Only what the kernel reads is kept (see :class:`Timeline`).
    """
    w = pipeline.window
    timelines: dict[Any, Timeline] = {}
    rows = []
    empty = np.zeros(0, dtype=np.int64)
    keep_geff = w.idle_timeout_ms is not None and w.idle_clock is Clock.EVENT_TIME
    keep_min_arrival = pipeline.idle_heartbeat_ms > 0
    for wv in sorted(dict.fromkeys([*commits, *carried]), key=repr):
        batches, cand, arr, min_arr = commits.get(wv, (empty,) * 4)
        s0 = carried.get(wv, {})
        wm0 = s0.get("watermark_ms")
        clock0 = s0.get("clock_ms")
        gwm = np.maximum.accumulate(np.concatenate([[MIN_TIMESTAMP if wm0 is None else wm0], cand]))[1:]
        clock = np.maximum.accumulate(np.concatenate([[MIN_TIMESTAMP if clock0 is None else clock0], arr]))[1:]
        last_batch = int(batches[-1]) if len(batches) else s0.get("batch")
        timelines[wv] = Timeline(
            batches,
            sat_sub(gwm, w.delay_ms) if keep_geff else empty,
            clock,
            last_batch,
            min_arr if keep_min_arrival else empty,
            batch0=s0.get("batch"),
            clock0=MIN_TIMESTAMP if clock0 is None else clock0,
        )
        rows.append(
            {
                "state_kind": WORKER_KIND,
                "fingerprint": pipeline.fingerprint(),
                **({pipeline.source.worker: wv} if pipeline.source.worker else {}),
                "batch": last_batch,
                "watermark_ms": int(gwm[-1]) if len(gwm) and gwm[-1] != MIN_TIMESTAMP else wm0,
                "clock_ms": int(clock[-1]) if len(clock) and clock[-1] != MIN_TIMESTAMP else clock0,
            }
        )
    return timelines, rows


def commit_summary(table: pa.Table, spec: "Spec") -> dict[Any, tuple[np.ndarray, ...]]:
    """Per worker of the events in ``table`` (with :func:`with_event_columns`): its
    batches in order and, per batch, the watermark candidate, the greatest and the
    smallest arrival time. This is the engine's per-(worker, batch) Spark summary, for a
    task that holds every event of its workers."""
    rows = np.flatnonzero(table[KIND_COLUMN].to_numpy() == EVENT)
    if not len(rows):
        return {}
    wcol = spec.worker_col
    events = table.select([BATCH_COLUMN, EVENT_MS_COLUMN, ARRIVAL_MS_COLUMN, *([wcol] if wcol else [])])
    if len(rows) < table.num_rows:
        events = events.take(pa.array(rows))
    batch, evt, arr = (as_int64(events[c]) for c in (BATCH_COLUMN, EVENT_MS_COLUMN, ARRIVAL_MS_COLUMN))
    codes = group_codes(events[wcol]) if wcol else np.zeros(len(rows), dtype=np.int64)
    # By (worker, batch); the order within a batch does not matter (its max and min).
    order = sort_order(packed_keys([batch, codes]))
    codes, batch, evt, arr = codes[order], batch[order], evt[order], arr[order]
    starts = np.flatnonzero(np.concatenate([[True], (codes[1:] != codes[:-1]) | (batch[1:] != batch[:-1])]))
    pick = np.minimum if spec.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else np.maximum
    per_batch = (
        batch[starts],
        pick.reduceat(evt, starts),
        np.maximum.reduceat(arr, starts),
        np.minimum.reduceat(arr, starts),
    )
    bcodes = codes[starts]
    worker_starts = np.flatnonzero(np.concatenate([[True], bcodes[1:] != bcodes[:-1]]))
    values = (
        table[wcol].take(pa.array(rows[order][starts[worker_starts]])).to_pylist() if wcol else [0] * len(worker_starts)
    )
    ends = np.append(worker_starts[1:], len(starts))
    return {hashable(v): tuple(c[a:b] for c in per_batch) for v, a, b in zip(values, worker_starts, ends)}


class IdleClocks:
    """Where each key goes idle, and the worker's clock at the key's commits.

    ``kb_fire[j]``: the key goes idle after its batch j and before its next one; it is
    flushed with emit batch ``kb_batch[j]`` and emit time ``kb_time[j]``: at a worker
    commit (that batch, the clock after it) or at a heartbeat tick (the last committed
    batch, the tick). ``pre_fire[g]``: key g (with carried windows) goes idle before its
    first batch of this replay (``pre_batch[g]``, ``pre_time[g]``). ``gen[j]``: the
    generation of batch j's windows.

    ``kb_clock[j]``: the worker's clock after committing key batch j (the emit time of
    what that commit closes); ``kb_clock_before[j]``: its clock before that batch.
    ``last_batch[g]``, ``last_clock[g]``: the worker's last commit (for END_OF_INPUT).
    """

    def __init__(self, key_batches: KeyBatches, keyset: KeyIds, spec: Spec, timelines: Mapping[Any, Timeline]):
        self.kb_fire = np.zeros(key_batches.n, dtype=bool)
        self.kb_batch = np.zeros(key_batches.n, dtype=np.int64)
        self.kb_time = np.zeros(key_batches.n, dtype=np.int64)
        self.kb_clock = np.full(key_batches.n, MIN_TIMESTAMP, dtype=np.int64)
        self.kb_clock_before = np.full(key_batches.n, MIN_TIMESTAMP, dtype=np.int64)
        self.pre_fire = np.zeros(keyset.n, dtype=bool)
        self.pre_batch = np.zeros(keyset.n, dtype=np.int64)
        self.pre_time = np.zeros(keyset.n, dtype=np.int64)
        self.last_batch = np.full(keyset.n, MIN_TIMESTAMP, dtype=np.int64)
        self.last_clock = np.full(keyset.n, MIN_TIMESTAMP, dtype=np.int64)
        # Workers as integer ids: an object array's == would find no NaN worker (NaN != NaN).
        worker_ids: dict[Hashable, int] = {}
        worker_of_key = np.array(
            [worker_ids.setdefault(hashable(v), len(worker_ids)) for v in keyset.worker_values], dtype=np.int64
        )
        for worker, worker_id in worker_ids.items():
            tl = timelines.get(worker)
            if tl is None:
                continue
            of_worker = worker_of_key == worker_id
            if tl.last_batch is not None:
                self.last_batch[of_worker] = tl.last_batch
            self.last_clock[of_worker] = tl.last_clock
            if len(tl.batches) == 0:
                continue
            batches = np.flatnonzero(of_worker[key_batches.g])  # the worker's key batches
            commit = searchsorted_left(tl.batches, key_batches.batch[batches])  # each key batch's commit
            if len(batches):
                self.kb_clock[batches] = tl.clock[commit]
                self.kb_clock_before[batches] = np.where(commit > 0, tl.clock[np.maximum(commit - 1, 0)], tl.clock0)
            if spec.window.idle_timeout_ms is None:
                continue
            self._after_batches(tl, key_batches, batches, commit, spec)
            self._before_first_batch(tl, key_batches, keyset, np.flatnonzero(of_worker), spec)
        self.gen = self._generations(key_batches)

    def _after_batches(
        self, tl: Timeline, key_batches: KeyBatches, batches: np.ndarray, commit: np.ndarray, spec: Spec
    ) -> None:
        """Idle flushes after each of the key batches ``batches`` (of one worker, committed at
        ``commit``): from the first commit c (at or after the batch's own) whose clock
        reaches activity + timeout, if c comes before the key's next batch; a heartbeat tick
        just before c flushes it earlier (or, when c is the next batch's commit, at all)."""
        if not len(batches):
            return
        w = spec.window
        n_commits = len(tl.batches)
        series = tl.geff if w.idle_clock is Clock.EVENT_TIME else tl.clock
        last_of_key = np.append(key_batches.g[batches][1:] != key_batches.g[batches][:-1], True)
        next_commit = np.where(last_of_key, n_commits, np.append(commit[1:], n_commits))
        activity = (key_batches.maxev_after if w.idle_clock is Clock.EVENT_TIME else key_batches.maxarr_after)[batches]
        due = sat_add(activity, cast(int, w.idle_timeout_ms))  # not None: only run with a timeout
        reaching = np.maximum(commit, np.searchsorted(series, due, side="left"))
        at_tick, tick = _heartbeat_flush(tl, spec.pipeline.idle_heartbeat_ms, due, reaching, commit + 1, next_commit)
        at_commit = ~at_tick & (reaching < next_commit)
        at = np.minimum(reaching, n_commits - 1)
        self.kb_fire[batches] = at_tick | at_commit
        self.kb_batch[batches] = np.where(at_tick, tl.batches[np.maximum(at - 1, 0)], tl.batches[at])
        self.kb_time[batches] = np.where(at_tick, tick, tl.clock[at])

    def _before_first_batch(
        self, tl: Timeline, key_batches: KeyBatches, keyset: KeyIds, keys: np.ndarray, spec: Spec
    ) -> None:
        """Idle flushes of the worker's ``keys`` with carried state before their first batch
        of this replay (a tick may come before this replay's first commit: commit 0 is
        after the carried clock)."""
        w = spec.window
        n_commits = len(tl.batches)
        series = tl.geff if w.idle_clock is Clock.EVENT_TIME else tl.clock
        activity = keyset.maxev0[keys] if w.idle_clock is Clock.EVENT_TIME else keyset.maxarr0[keys]
        keys, activity = keys[activity != MIN_TIMESTAMP], activity[activity != MIN_TIMESTAMP]
        if not len(keys):
            return
        first = key_batches.key_first[keys]
        next_commit = np.full(len(keys), n_commits, dtype=np.int64)
        has = first >= 0
        next_commit[has] = searchsorted_left(tl.batches, key_batches.batch[first[has]])
        due = sat_add(activity, cast(int, w.idle_timeout_ms))  # not None: only run with a timeout
        reaching = np.searchsorted(series, due, side="left")
        at_tick, tick = _heartbeat_flush(
            tl, spec.pipeline.idle_heartbeat_ms, due, reaching, np.zeros(len(keys), np.int64), next_commit
        )
        at_commit = ~at_tick & (reaching < next_commit)
        at = np.minimum(reaching, n_commits - 1)
        self.pre_fire[keys] = at_tick | at_commit
        before = (
            tl.batches[np.maximum(at - 1, 0)]
            if tl.batch0 is None
            else np.where(at > 0, tl.batches[np.maximum(at - 1, 0)], tl.batch0)
        )
        self.pre_batch[keys] = np.where(at_tick, before, tl.batches[at])
        self.pre_time[keys] = np.where(at_tick, tick, tl.clock[at])

    def _generations(self, key_batches: KeyBatches) -> np.ndarray:
        """Generation of each key batch: flushes before it, including the one before its first batch."""
        if not key_batches.n:
            return np.zeros(0, dtype=np.int64)
        fired = self.kb_fire.astype(np.int64)
        before = np.cumsum(fired) - fired
        counts = np.diff(np.append(key_batches.first_of_key, key_batches.n))
        base = np.repeat(before[key_batches.first_of_key], counts)
        generation: NDArray[np.int64] = before - base + self.pre_fire[key_batches.g].astype(np.int64)
        return generation


def _heartbeat_flush(
    tl: Timeline,
    heartbeat_ms: int,
    due: np.ndarray,
    reaching: np.ndarray,
    earliest: np.ndarray,
    next_commit: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Which idle flushes a heartbeat tick makes, and the tick (contract section 5.2).

    A key falls due at ``due`` (activity + idleTimeout); ``reaching`` (c below) is the
    first commit at or after the key's own whose clock reaches ``due`` (the number of
    commits: none). Ticks are the multiples of ``heartbeat_ms`` strictly between a
    commit's clock (``clock0`` before commit 0) and the smallest arrival of the next
    batch. Every tick before commit ``c - 1`` lies below ``clock[c - 1] < due``, so only
    the gap just before commit ``c`` can flush the key: at its first tick ``>= due`` if
    that is before ``min_arrival[c]``. The gap must lie after the key's own commit
    (``c >= earliest``) and before its next batch (``c <= next_commit``); after the
    worker's last batch there is no gap (no next batch, no tick).

    Returns (flushed at a tick, that tick) per key.
    """
    n_commits = len(tl.batches)
    if not heartbeat_ms or not len(reaching):
        return np.zeros(len(reaching), dtype=bool), np.zeros(len(reaching), dtype=np.int64)
    at = np.minimum(reaching, n_commits - 1)
    clock_before = np.where(reaching > 0, tl.clock[np.maximum(at - 1, 0)], tl.clock0)
    ok = (reaching < n_commits) & (reaching >= earliest) & (reaching <= next_commit) & (clock_before != MIN_TIMESTAMP)
    start = np.where(ok, np.maximum(due, clock_before + ok), 0)  # strictly after the commit's clock
    tick = start + np.mod(-start, heartbeat_ms)  # the first multiple of the heartbeat >= start
    ok &= tick < tl.min_arrival[at]
    return ok, tick


def snapshot_times(sorted_events: SortedEvents, key_batches: KeyBatches, idle: IdleClocks) -> np.ndarray:
    """Emit time of each event's ``atAggregate`` snapshots: the worker's clock as the event
    is processed, before its batch commits: the greatest arrival time the worker has
    seen, this event's included (its batch's earlier events arrived no later than it)."""
    if not sorted_events.n:
        return np.zeros(0, np.int64)
    times: NDArray[np.int64] = np.maximum(idle.kb_clock_before[key_batches.of_event], sorted_events.arr)
    return times
