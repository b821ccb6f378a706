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

An input of at most one task's worth of events, by its files' footers, is not counted:
:func:`hashed_plan` places every worker whole by its value (integers: Kafka partitions, one
a task) or the hash of it, over a few tasks a slot, and the tasks count its rejected rows
(one Spark job fewer a small replay).

A task's memory is bounded apart from this, by ``eventsPerChunk`` (:mod:`windowing.runner.chunks`):
the plan decides parallelism, not what fits.

Every row of a task carries an int whose Spark hash lands in the task's partition
(:func:`salts`, from Spark's Murmur3 hash of an int, :func:`spark_hash_ints`), so
``repartition(n, salt)`` puts it there exactly: :func:`kernel_input` places the kernel's
input rows by the plan, in Spark expressions (a literal map of the workers, or a broadcast
join), and :func:`hot_keys` finds the spread workers' hot keys.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, cast

import numpy as np
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegerType, StructField, StructType

from windowing import kernel as K
from windowing.config import ConfigError, Pipeline
from windowing.contract import EVENT_MS_COLUMN, KIND_COLUMN
from windowing.kernel import slices
from windowing.kernel.inputs import hashable
from windowing.runner.columns import col, floor_div_expr
from windowing.runner.normalise import REJECT_REASON

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

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
    #: Every worker whole, in task ``pmod(worker, tasks)`` for integer workers, else
    #: ``pmod(hash(worker), tasks)`` (:func:`hashed_plan`, :func:`worker_spread`): a plan
    #: made without counting the rows per worker.
    hashed: bool = False

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


#: A small input's tasks per task slot, when its workers are placed without a count
#: (:func:`hashed_plan`): Spark hands the tasks to slots as they free, which evens out
#: what the placement does not (workers of other values than 0 to n-1, a hash's collisions).
HASHED_TASKS_PER_SLOT = 4
#: ... and at least this many of its rows a task (a task has a fixed cost: an hour of the
#: quick start's history, ~800 events, is one task, not eight).
HASHED_TASK_ROWS = 50_000
#: Worker types Spark tells apart as the kernel does, looked up in a literal map
#: (:func:`placement_columns`) or placed by their hash (:func:`hashed_plan`). Not floats:
#: Spark hashes -0.0 and 0.0 apart, and they are one value for its equality.
HASHABLE_WORKER_TYPES = ("string", "integer", "long", "short", "byte", "boolean", "date", "timestamp")
#: Worker types placed by their value itself under a plan without the count: Kafka
#: partitions, numbered from 0, land one a task (their hashes collide: workers 0-7 over 8
#: tasks by hash left 3 tasks empty and gave one 3 workers).
INTEGRAL_WORKER_TYPES = ("integer", "long", "short", "byte")


def hashed_plan(worker_type: str | None, slots: int | None, rows: int | None, most: int) -> TaskPlan | None:
    """A plan without the rows per worker: every worker whole, in task
    ``pmod(worker, n)`` (:func:`worker_spread`: integer workers by their value, others by
    their Spark hash), ``n`` being :data:`HASHED_TASKS_PER_SLOT` tasks per slot, but
    one per :data:`HASHED_TASK_ROWS` of the input's ``rows`` at most (or ``most`` tasks
    when they are not known); one task without a worker column (one worker). None when
    the workers' type (``worker_type``, Spark's ``typeName``; None: no worker column) does
    not hash as the kernel tells them apart.

    The rows are the same whatever the plan; it only places the work. Made for an input
    of at most one task's worth of events (``spark.rewindow.eventsPerTask``), where a
    count of its rows per worker (a Spark job) costs more than the balance it buys
    (docs/architecture.md, "A plan without the count")."""
    if worker_type is not None and worker_type not in HASHABLE_WORKER_TYPES:
        return None
    cap = most if rows is None else -(-rows // HASHED_TASK_ROWS)
    tasks = 1 if worker_type is None else max(1, min(HASHED_TASKS_PER_SLOT * max(1, slots or 1), cap))
    return TaskPlan(tasks, hashed=True)


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


# --------------------------------------------------------------------------- the session's settings


def slices_on(spark: SparkSession) -> bool:
    """``spark.rewindow.slices``: ``auto`` (default) or ``off``."""
    mode = str(spark.conf.get(SLICES_CONF, "auto") or "auto").strip().lower()
    if mode not in ("auto", "off"):
        raise ConfigError(f"{SLICES_CONF}: {mode!r} is not one of auto, off")
    return mode == "auto"


def int_setting(spark: SparkSession, key: str, default: int) -> int:
    """A positive integer session setting (``key``), or ``default``."""
    try:
        return positive_setting(key, spark.conf.get(key, None), default)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def session_slots(spark: SparkSession) -> int | None:
    """How many tasks the session runs at once (:func:`task_slots`)."""
    settings = {k: spark.conf.get(k, None) for k in SLOT_SETTINGS}
    try:
        parallelism: int | None = int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        parallelism = None
    try:
        return task_slots(settings, parallelism)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# --------------------------------------------------------------------------- rows to tasks


def kernel_input(
    spark: SparkSession,
    pipeline: Pipeline,
    events: DataFrame,
    state_rows: DataFrame | None = None,
    plan: TaskPlan | None = None,
    timeline_rows: DataFrame | None = None,
) -> tuple[DataFrame, dict[str, str], int]:
    """The kernel's input: ``events`` and the carried ``state_rows`` (or None), each row in
    the task ``plan`` gives its worker and key (with ``timeline_rows``, the spread and
    sliced workers' timelines, see :func:`windowing.runner.timelines.split_timeline_rows`);
    without a plan, hash-partitioned by (worker, key) into ``spark.sql.shuffle.partitions``
    partitions. Returns ``(input,
    names, partitions)``: PySpark's mapInArrow resolves columns by name, which a dot in a
    name breaks, so such columns go under a safe name and ``names`` maps it back (the task
    puts the real name back)."""
    kernel_in = events if state_rows is None else events.unionByName(state_rows, allowMissingColumns=True)
    if plan is not None:
        nparts = plan.tasks
        kernel_in = with_task(kernel_in, pipeline, plan)
        if timeline_rows is not None:
            kernel_in = kernel_in.unionByName(timeline_rows, allowMissingColumns=True)
        # Each task's salt from a literal array, one SQL expression (one py4j call, not a ``lit``
        # per task: hundreds on a cluster), as :func:`_literal_map` builds its maps.
        salt = F.element_at(F.expr(f"array({', '.join(map(str, salts(nparts)))})"), F.col(TASK_COLUMN) + 1)
        kernel_in = kernel_in.repartition(nparts, salt).drop(TASK_COLUMN)
    else:
        part_cols = [col(c) for c in pipeline.id_columns]
        nparts = int(cast(str, spark.conf.get("spark.sql.shuffle.partitions")))  # set in every session
        kernel_in = kernel_in.repartition(nparts, *part_cols) if part_cols else kernel_in.repartition(1)
    names = kernel_in.columns
    safe = [f"__d{i}" if ("." in c or "`" in c) else c for i, c in enumerate(names)]
    if safe != names:
        kernel_in = kernel_in.toDF(*safe)
    return kernel_in, dict(zip(safe, names)), nparts


#: The kernel input's task column while it is placed (dropped after the shuffle).
TASK_COLUMN = "__task"
#: Workers looked up in a literal map up to this many (Spark scans it); a broadcast join beyond.
MAX_WORKER_MAP = 64


def placement_columns(df: DataFrame, pipeline: Pipeline, plan: TaskPlan) -> tuple[DataFrame, Column, Column]:
    """``df`` (joined with the plan if need be) and two int columns: each row's worker's
    first task and number of tasks (1 for a whole worker)."""
    wcol = pipeline.source.worker
    entries = {**{w: (t, 1) for w, t in plan.whole.items()}, **plan.split}
    if wcol is None:
        first, n = entries.get(0, (0, 1))
        return df, F.lit(first), F.lit(n)
    dtype = df.schema[wcol].dataType
    if len(entries) <= MAX_WORKER_MAP and dtype.typeName() in HASHABLE_WORKER_TYPES:
        cols = []
        for i in (0, 1):
            keyed = [(w, v[i]) for w, v in entries.items() if w is not None]  # a null worker: no map key
            looked = _literal_map(keyed, dtype)[col(wcol)] if keyed else F.lit(None).cast("int")
            if None in entries:
                looked = F.when(col(wcol).isNull(), F.lit(entries[None][i])).otherwise(looked)
            cols.append(looked)
        return df, cols[0], cols[1]
    schema = StructType(
        [StructField("__pw", dtype), StructField("__pfirst", IntegerType()), StructField("__pn", IntegerType())]
    )
    # Plain values again (``kernel.inputs.hashable``'s one NaN is a float subclass Spark refuses).
    table = df.sparkSession.createDataFrame(
        [(float(w) if isinstance(w, float) else w, v[0], v[1]) for w, v in entries.items()], schema
    )
    joined = df.join(F.broadcast(table), col(wcol).eqNullSafe(F.col("__pw")), "left").drop("__pw")
    return joined, F.col("__pfirst"), F.col("__pn")


def _literal_map(pairs: list[tuple[Any, int]], dtype: DataType) -> Column:
    """A literal map of ``pairs`` (worker -> int), its keys of type ``dtype``. Integer
    workers (Kafka partitions) as one SQL expression, one py4j call; others as one
    ``lit`` per key and value (three py4j calls a worker)."""
    if dtype.typeName() in INTEGRAL_WORKER_TYPES and all(type(w) is int for w, _ in pairs):
        sql = dtype.simpleString()
        return F.expr("map(" + ", ".join(f"CAST({w} AS {sql}), {v}" for w, v in pairs) + ")")
    literals: list[Column] = []
    for w, v in pairs:
        literals += [F.lit(w).cast(dtype), F.lit(v)]
    return F.create_map(*literals)


def _key_hash(pipeline: Pipeline, df: DataFrame) -> Column:
    """Spark's hash of the key's columns, every NaN as one (the kernel's one NaN key)."""
    if not pipeline.window.keys:
        return F.lit(0)
    parts = []
    for key in pipeline.window.keys:
        keyed = col(key)
        if df.schema[key].dataType.typeName() in ("float", "double"):
            keyed = F.when(F.isnan(keyed), F.lit(float("nan")).cast(df.schema[key].dataType)).otherwise(keyed)
        parts.append(keyed)
    return F.hash(*parts)


def worker_spread(df: DataFrame, wcol: str) -> Column:
    """What places a worker under a plan without the count (``pmod(_, tasks)``): an integer
    worker's value (null: 0), any other's Spark hash."""
    if df.schema[wcol].dataType.typeName() in INTEGRAL_WORKER_TYPES:
        return F.coalesce(col(wcol).cast("long"), F.lit(0).cast("long"))
    return F.hash(col(wcol))


def with_task(df: DataFrame, pipeline: Pipeline, plan: TaskPlan) -> DataFrame:
    """``df`` with :data:`TASK_COLUMN`: the task of each row's worker and key under ``plan`` (a
    sliced worker's rows: of their windows, :func:`_slice_offsets`)."""
    if plan.hashed:
        wcol = pipeline.source.worker
        task = F.pmod(worker_spread(df, wcol), F.lit(plan.tasks)) if wcol and plan.tasks > 1 else F.lit(0)
        return df.withColumn(TASK_COLUMN, task.cast("int"))
    df, first, n = placement_columns(df, pipeline, plan)
    if plan.sliced or plan.hot:
        for c, t in ((KIND_COLUMN, "byte"), (f"{K.STATE_PREFIX}window_start_ms", "bigint")):
            if c not in df.columns:  # no carried state
                df = df.withColumn(c, F.lit(None).cast(t))
    if plan.sliced:  # an unkeyed pipeline: n > 1 only for a sliced worker
        df = df.withColumn("__pfirst", first).withColumn("__slice", F.explode(_slice_offsets(pipeline, n)))
        task = (F.col("__pfirst") + F.col("__slice")).cast("int")
        return df.withColumn(TASK_COLUMN, task).drop("__pfirst", "__pn", "__slice")
    task = first if not plan.spread else first + F.pmod(_key_hash(pipeline, df), n)
    if plan.hot:  # a hot key's rows go to its slices (by window), the others by key hash
        df = with_hot(df.withColumn("__ptask", task), pipeline, plan)
        hot = F.col("__hfirst").isNotNull()
        df = df.withColumn(
            "__slice", F.explode(F.when(hot, _slice_offsets(pipeline, F.col("__hn"))).otherwise(F.array(F.lit(0))))
        )
        task = F.when(hot, F.col("__hfirst") + F.col("__slice")).otherwise(F.col("__ptask")).cast("int")
        return df.withColumn(TASK_COLUMN, task).drop("__pfirst", "__pn", "__ptask", "__hfirst", "__hn", "__slice")
    return df.withColumn(TASK_COLUMN, task).drop("__pfirst", "__pn")


def _slice_offsets(pipeline: Pipeline, n: Column) -> Column:
    """Per row of a worker in ``n`` slices of its windows (:mod:`windowing.kernel.slices`),
    the slices it goes to: an event to that of its latest window start and that of its
    earliest window; a key row to every slice; a carried window or counter to that of its
    start. (``n`` is 1 for a whole worker: slice 0.)"""
    w = pipeline.window
    block, off = slices.block_ms(w), w.offset_ms
    step = cast(int, w.span_ms if w.slide_ms is None else w.slide_ms)
    span = cast(int, w.span_ms)
    latest = f"({floor_div_expr(f'{EVENT_MS_COLUMN} - {off}', step)}) * {step} + {off}"
    earliest = f"({floor_div_expr(f'{EVENT_MS_COLUMN} - {span} - {off}', step)}) * {step} + {off + step}"
    by_latest = F.pmod(F.expr(floor_div_expr(f"{EVENT_MS_COLUMN} - {off}", block)), n)
    by_earliest = F.pmod(F.expr(floor_div_expr(f"least({earliest}, {latest}) - {off}", block)), n)
    by_window = F.pmod(F.expr(floor_div_expr(f"`{K.STATE_PREFIX}window_start_ms` - {off}", block)), n)
    kind = F.col(KIND_COLUMN)
    return (
        F.when(kind.isNull() | (kind == K.EVENT), F.array_distinct(F.array(by_latest, by_earliest)))
        .when(kind == K.STATE_KEY, F.sequence(F.lit(0), n - 1))
        .otherwise(F.array(by_window))
    )


# --------------------------------------------------------------------------- hot keys


#: Key types a hot key may have to be sliced: they group, join and hash alike in Spark and
#: in the kernel (not floats: Spark groups -0.0 with 0.0, the kernel keeps them apart).
_HOT_KEY_TYPES = ("string", "integer", "long", "short", "byte", "boolean", "date")


#: Hot keys are found in a sample of the spread workers' rows holding about this many rows
#: of a key at the threshold (a key over it is a hot key to ±1 %, 3 standard deviations).
HOT_KEY_SAMPLE = 100_000


def hot_keys(pipeline: Pipeline, norm: DataFrame, plan: TaskPlan) -> dict[tuple[Any, Any], int]:
    """The spread workers' hot keys (:func:`windowing.runner.placement.hot_key_threshold`) and
    their events: one Spark aggregation over the spread workers' rows, a row per hot key
    back (at most events / threshold).

    Over a threshold of more than :data:`HOT_KEY_SAMPLE` events the rows are sampled
    (Bernoulli, a fixed seed) and the events estimated: the plan only places the work,
    whatever it says the rows are the same (a hot key's slices replay what the key would
    whole), and counting every (worker, key) of a billion rows is a pass over them."""
    keys = pipeline.window.keys
    if any(norm.schema[k].dataType.typeName() not in _HOT_KEY_TYPES for k in keys):
        return {}
    wcol = pipeline.source.worker
    accepted = norm.where(F.col(REJECT_REASON).isNull())
    accepted, _, n = placement_columns(accepted, pipeline, TaskPlan(plan.tasks, {}, plan.spread))
    threshold = hot_key_threshold(plan)
    fraction = min(1.0, HOT_KEY_SAMPLE / max(threshold, 1))
    accepted = accepted.where(n.isNotNull())
    if fraction < 1.0:
        accepted = accepted.sample(fraction=fraction, seed=0)
    group = [*([col(wcol).alias("__w")] if wcol else []), *[col(k).alias(f"__k{i}") for i, k in enumerate(keys)]]
    counted = (
        accepted.groupBy(*group).agg(F.count(F.lit(1)).alias("n")).where(F.col("n") > threshold * fraction).toArrow()
    )
    return {
        (hashable(r["__w"]) if wcol else 0, key_value(r, len(keys))): int(round(int(r["n"]) / fraction))
        for r in counted.to_pylist()
    }


def key_value(row: Mapping[str, Any], parts: int, prefix: str = "__k") -> Any:
    """A hot key as :attr:`TaskPlan.hot` holds it, from ``row``'s ``__k0``, ``__k1``, ...: the
    value of a key of one column, the tuple of a key of several."""
    values = tuple(row[f"{prefix}{i}"] for i in range(parts))
    return values[0] if parts == 1 else values


def key_parts(key: Any, parts: int) -> tuple[Any, ...]:
    """The columns' values of a hot key as :func:`key_value` gives it."""
    return (key,) if parts == 1 else tuple(key)


def _hot_table(df: DataFrame, pipeline: Pipeline, plan: TaskPlan) -> DataFrame:
    """The plan's hot keys as a small table: worker ``__hw``, key ``__hk0``, ``__hk1``, ...,
    first task ``__hfirst`` and slices ``__hn``."""
    wcol, keys = pipeline.source.worker, pipeline.window.keys
    fields = [
        *([StructField("__hw", df.schema[wcol].dataType)] if wcol else []),
        *[StructField(f"__hk{i}", df.schema[k].dataType) for i, k in enumerate(keys)],
        StructField("__hfirst", IntegerType()),
        StructField("__hn", IntegerType()),
    ]
    rows = [
        (*([float(w) if isinstance(w, float) else w] if wcol else []), *key_parts(k, len(keys)), first, n)
        for (w, k), (first, n) in plan.hot.items()
    ]
    return df.sparkSession.createDataFrame(rows, StructType(fields))


def with_hot(df: DataFrame, pipeline: Pipeline, plan: TaskPlan, how: str = "left") -> DataFrame:
    """``df`` joined (broadcast) with the hot keys: ``__hfirst`` and ``__hn`` set on the
    rows of a hot key."""
    wcol, keys = pipeline.source.worker, pipeline.window.keys
    cond = col(keys[0]).eqNullSafe(F.col("__hk0"))
    for i, k in enumerate(keys[1:], 1):
        cond = cond & col(k).eqNullSafe(F.col(f"__hk{i}"))
    if wcol:
        cond = cond & col(wcol).eqNullSafe(F.col("__hw"))
    hot = [f"__hk{i}" for i in range(len(keys))]
    return df.join(F.broadcast(_hot_table(df, pipeline, plan)), cond, how).drop("__hw", *hot)
