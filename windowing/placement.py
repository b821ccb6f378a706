"""Which kernel task replays which rows: the kernel stage sized from the data.

The driver knows each worker's accepted events (one small aggregation). From them:

* the stage gets ``T = max(task slots, ceil(events / eventsPerTask))`` tasks' worth of
  work, ``P = ceil(events / T)`` events each: ten times the history, ten times the tasks;
* a worker of at most ``1.5 max(P, events / S)`` events (``S`` task slots) stays
  **whole** in one task, which builds the worker's timeline from its own events; whole
  workers share tasks, packed largest first into the emptiest of ``ceil(whole events /
  P)`` tasks. The ``events / S`` term: a worker is spread only when keeping it whole would
  make its task the stage's long pole. Spreading costs a pass over the worker's rows for
  its timeline (~0.7 µs an event, a third of a replay's time), which buys nothing when
  there are at least as many workers as slots and none is much larger than a slot's share:
  100 M events over 8 workers on 2 slots took 311 s spread over 104 tasks and 203 s
  whole in 8 (docs/architecture.md, "Scale"). On a cluster of many slots the same
  history is spread;
* a larger worker is **spread** over ``ceil(n / P)`` tasks of its own by key hash; its
  timeline, one row per (worker, batch), is summed up by Spark and sent to each of them
  with the rows (never to the driver);
* a larger worker of an unkeyed pipeline (one key) with tumbling or sliding windows is
  **sliced** over ``ceil(n / P)`` tasks of its own by window
  (:mod:`windowing.kernel.slices`): each gets its timeline and its key's batches, summed
  up by Spark the same way. Without slicing (sessions, ``spark.rewindow.slices=off``) it
  stays whole;
* a spread worker's hot keys (over ``1.5 P`` events, found by one more aggregation only
  when a worker is spread: :func:`with_hot_keys`) are sliced the same way, over tasks
  of their own.

A task's memory is bounded apart from this, by ``eventsPerChunk`` (:mod:`windowing.chunks`):
the plan decides parallelism, not what fits.

Every row of a task carries an int whose Spark hash lands in the task's partition
(:func:`salts`), so ``repartition(n, salt)`` puts it there exactly.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

#: ``spark.rewindow.eventsPerTask``: events per kernel task the stage is sized for.
EVENTS_PER_TASK_CONF = "spark.rewindow.eventsPerTask"
EVENTS_PER_TASK = 1_000_000
#: ``spark.rewindow.eventsPerChunk``: rows a kernel task replays in one kernel call, at most
#: (its Python worker peaks at ~1.4 KB an event of it: 2.8 GB at the default, measured).
EVENTS_PER_CHUNK_CONF = "spark.rewindow.eventsPerChunk"
EVENTS_PER_CHUNK = 2_000_000
#: A worker stays whole up to this many times a task's share of events (or a slot's).
WHOLE_SLACK = 1.5
#: ``spark.rewindow.taskSlots``: the tasks the kernel stage runs at once, as the plan
#: assumes them. Default: the session's ``defaultParallelism``; with dynamic allocation,
#: ``maxExecutors`` times ``spark.executor.cores`` (unbounded: no slot term at all), as the
#: executors the plan is made for may not have started yet.
TASK_SLOTS_CONF = "spark.rewindow.taskSlots"
#: ``spark.rewindow.slices``: ``auto`` (default) slices a large unkeyed worker's windows
#: over several tasks; ``off`` keeps it whole (one task, in bounded pieces), to compare.
SLICES_CONF = "spark.rewindow.slices"


@dataclass(frozen=True)
class TaskPlan:
    """``whole[w]``: the task of whole worker ``w``; ``spread[w]``: the first of worker
    ``w``'s tasks and how many it has (its keys go to ``first + pmod(hash(key), n)``);
    ``sliced[w]``: the same for a worker whose one key is replayed in ``n`` slices of its
    windows (slice ``i`` in task ``first + i``). ``tasks``: the number of tasks (all used)."""

    tasks: int
    whole: Mapping[Any, int] = field(default_factory=dict)
    spread: Mapping[Any, tuple[int, int]] = field(default_factory=dict)
    sliced: Mapping[Any, tuple[int, int]] = field(default_factory=dict)
    #: ``hot[(w, k)]``: key ``k`` of spread worker ``w``, replayed in ``n`` slices of its
    #: windows (slice ``i`` in task ``first + i``), out of its worker's tasks.
    hot: Mapping[tuple[Any, Any], tuple[int, int]] = field(default_factory=dict)
    #: The events a task was planned for.
    share: int = field(default=0, compare=False)

    @property
    def split(self) -> dict[Any, tuple[int, int]]:
        """The workers over several tasks, spread or sliced: (first task, tasks)."""
        return {**self.spread, **self.sliced}


def plan_tasks(
    worker_events: Mapping[Any, int],
    keyed: bool,
    events_per_task: int,
    slots: int | None,
    force_whole: bool = False,
    sliceable: bool = False,
) -> TaskPlan:
    """The task plan for workers with ``worker_events`` accepted events each (see the
    module's docstring); ``force_whole``: every worker whole (``spark.rewindow.commits=tasks``);
    ``sliceable``: an unkeyed pipeline's large workers may be sliced by window."""
    total = sum(worker_events.values())
    if not worker_events:
        return TaskPlan(1, share=max(1, events_per_task))
    target_tasks = max(slots or 1, -(-total // max(1, events_per_task)))
    share = max(1, -(-total // target_tasks))
    ordered = sorted(worker_events, key=lambda w: (-worker_events[w], repr(w)))
    whole_up_to = WHOLE_SLACK * max(share, total / slots if slots else 0)
    large = [] if force_whole else [w for w in ordered if worker_events[w] > whole_up_to]
    spread_workers = large if keyed else []
    sliced_workers = large if not keyed and sliceable else []
    whole_workers = [w for w in ordered if w not in set(spread_workers) | set(sliced_workers)]
    whole: dict[Any, int] = {}
    if whole_workers:
        bins = max(1, min(len(whole_workers), -(-sum(worker_events[w] for w in whole_workers) // share)))
        heap = [(0, i) for i in range(bins)]
        for w in whole_workers:  # largest first into the emptiest bin
            load, i = heapq.heappop(heap)
            whole[w] = i
            heapq.heappush(heap, (load + worker_events[w], i))
        used = sorted(set(whole.values()))
        renumber = {b: i for i, b in enumerate(used)}
        whole = {w: renumber[b] for w, b in whole.items()}
    next_task = len(set(whole.values()))
    spread: dict[Any, tuple[int, int]] = {}
    sliced: dict[Any, tuple[int, int]] = {}
    for w in [*spread_workers, *sliced_workers]:
        n = -(-worker_events[w] // share)
        (spread if keyed else sliced)[w] = (next_task, n)
        next_task += n
    return TaskPlan(max(1, next_task), whole, spread, sliced, share=share)


#: The settings :func:`task_slots` reads.
SLOT_SETTINGS = (
    TASK_SLOTS_CONF,
    "spark.dynamicAllocation.enabled",
    "spark.dynamicAllocation.maxExecutors",
    "spark.executor.cores",
)


def positive_setting(key: str, raw: str | None, default: int) -> int:
    """A positive whole-number setting ``key`` from its ``raw`` value (``1_000`` allowed),
    or ``default`` when it is unset or blank.

    Raises:
        ValueError: it is set to anything but a positive whole number.
    """
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip().replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{key}: {raw!r} is not a positive number")
    return value


def task_slots(settings: Mapping[str, str | None], parallelism: int | None) -> int | None:
    """The task slots the plan assumes (None: not known): :data:`TASK_SLOTS_CONF` if set;
    else under dynamic allocation its most executors times their cores (None when
    unbounded: the executors may not have started when the plan is made); else the
    session's ``parallelism`` (None over Spark Connect).

    Raises:
        ValueError: a setting is not a positive whole number.
    """

    def positive(key: str, default: int) -> int:
        return positive_setting(key, settings.get(key), default)

    slots = positive(TASK_SLOTS_CONF, 0)
    if slots:
        return slots
    if str(settings.get("spark.dynamicAllocation.enabled") or "").strip().lower() == "true":
        most = positive("spark.dynamicAllocation.maxExecutors", 0)  # 0: unbounded (Spark's default)
        return most * positive("spark.executor.cores", 1) if 0 < most < 1 << 20 else None
    return parallelism


def hot_key_threshold(plan: TaskPlan) -> int:
    """A spread worker's key with more events than this is hot: sliced by window."""
    return int(WHOLE_SLACK * plan.share)


def with_hot_keys(plan: TaskPlan, key_events: Mapping[tuple[Any, Any], int]) -> TaskPlan:
    """``plan`` with each hot key of a spread worker (``key_events``: its events, over
    :func:`hot_key_threshold`) sliced over ``ceil(events / share)`` tasks of its own,
    after the plan's tasks, largest first."""
    if not key_events:
        return plan
    share = max(1, plan.share)
    hot: dict[tuple[Any, Any], tuple[int, int]] = {}
    next_task = plan.tasks
    for wk in sorted(key_events, key=lambda wk: (-key_events[wk], repr(wk))):
        n = -(-key_events[wk] // share)
        hot[wk] = (next_task, n)
        next_task += n
    return TaskPlan(next_task, plan.whole, plan.spread, plan.sliced, hot, plan.share)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def spark_hash_ints(values: np.ndarray, seed: int = 42) -> np.ndarray:
    """Spark's ``hash()`` of int values (``Murmur3_x86_32.hashInt``), vectorised."""
    with np.errstate(over="ignore"):
        k1 = values.astype(np.int64).astype(np.uint32)
        k1 = k1 * np.uint32(0xCC9E2D51)
        k1 = _rotl(k1, 15)
        k1 = k1 * np.uint32(0x1B873593)
        h1 = np.uint32(seed) ^ k1
        h1 = _rotl(h1, 13)
        h1 = h1 * np.uint32(5) + np.uint32(0xE6546B64)
        h1 ^= np.uint32(4)
        h1 ^= h1 >> np.uint32(16)
        h1 = h1 * np.uint32(0x85EBCA6B)
        h1 ^= h1 >> np.uint32(13)
        h1 = h1 * np.uint32(0xC2B2AE35)
        h1 ^= h1 >> np.uint32(16)
    return h1.astype(np.int32).astype(np.int64)


def salts(n: int) -> list[int]:
    """For each partition ``p < n``, the smallest int whose Spark hash falls in ``p`` (as
    ``repartition(n, col)`` places rows: ``pmod(hash(col), n)``)."""
    out = np.full(n, -1, dtype=np.int64)
    start = 0
    while (out < 0).any():
        block = np.arange(start, start + max(4096, 8 * n), dtype=np.int64)
        part = np.mod(spark_hash_ints(block), n)
        missing = out[part] < 0
        # The first value of each still-missing partition in this block.
        first = np.unique(part[missing], return_index=True)
        out[first[0]] = block[missing][first[1]]
        start += len(block)
    return [int(v) for v in out]
