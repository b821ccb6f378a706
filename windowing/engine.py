"""Run a replay on Spark: normalise, build worker timelines, run the kernel per key.

Phases (see docs/architecture.md):

1. **Normalise** in Spark expressions: ``arrival_ms``, ``event_ms``, the batch and a
   rejection reason for rows that cannot be processed.
2. **Worker timelines**: each worker's global watermark and clock after every commit,
   from its watermark candidates and arrival maxima per batch. When there are at least
   as many workers as task slots and each fits a task, the kernel tasks hold whole
   workers and build them from their own events; otherwise one Spark aggregation per
   (worker, batch) gives them to the driver (one row per batch, not per event).
3. **Per-key kernel**: events and carried state rows are hash-partitioned by
   (worker, key), or by worker (above), and each partition runs
   :func:`windowing.kernel.process` through ``mapInArrow`` — many keys per call,
   vectorised with NumPy.
4. **Outputs**: emitted windows, late events, rejected rows, the new state, metrics.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

from windowing import chunks, placement
from windowing import kernel as K
from windowing import metrics as replay_metrics
from windowing.columns import col as _col
from windowing.columns import epoch_ms, epoch_ms_unchecked, in_range
from windowing.config import ConfigError, Pipeline, Trigger, WatermarkStrategy, check_input_columns
from windowing.contract import (
    ARRIVAL_NULL,
    ARRIVAL_OUT_OF_RANGE,
    ARRIVAL_UNPARSEABLE,
    BATCH_COMMITTED,
    BATCH_NULL,
    EVENT_OUT_OF_RANGE,
    EVENT_TIME_NULL,
    EVENT_TIME_UNPARSEABLE,
    FUTURE_SKEW,
    KEY_KIND,
    WINDOW_KIND,
    WORKER_KIND,
)
from windowing.io import StateError, input_error_from
from windowing.kernel import slices
from windowing.lake import display
from windowing.spark import check_workers

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession

REJECT_REASON = "reason"


class StateMismatchError(ValueError):
    """The carried state was written by a different pipeline configuration."""


@dataclass
class ReplayResult:
    """What one replay produced.

    ``aggregates``, ``late_events`` and ``state`` are views of the kernel's output, which
    Spark holds (persisted) from the one kernel pass; ``rejected`` is a lazy view of the
    input. Write them with :func:`windowing.io.write_outputs`; :meth:`unpersist`
    releases the kernel's output.
    """

    aggregates: DataFrame
    late_events: DataFrame
    rejected: DataFrame
    state: DataFrame
    metrics: replay_metrics.ReplayMetrics
    #: The input files Spark read (to name a damaged one if a later write fails on it).
    input_files: tuple[str, ...] = ()
    _persisted: DataFrame | None = field(default=None, repr=False)

    def unpersist(self) -> None:
        if self._persisted is not None:
            self._persisted.unpersist()
            self._persisted = None


def replay(
    spark: SparkSession,
    pipeline: Pipeline,
    events_df: DataFrame,
    state: DataFrame | None = None,
    flush_at_end: bool | None = None,
) -> ReplayResult:
    """Replay ``events_df`` through ``pipeline``'s window, continuing from ``state``.

    Args:
        spark: the SparkSession.
        pipeline: a validated :class:`~windowing.config.Pipeline`.
        events_df: the historical events (any row order, any partitioning).
        state: the ``state`` DataFrame of the previous replay (the previous partition),
            or None to start from nothing.
        flush_at_end: emit every still-open window with reason ``END_OF_INPUT`` after
            the last batch; defaults to ``pipeline.flush_at_end``.

    Returns:
        :class:`ReplayResult` with ``aggregates``, ``late_events``, ``rejected`` and
        ``state`` DataFrames and its ``metrics``
        (:class:`windowing.metrics.ReplayMetrics`).

    Raises:
        ConfigError: a configured column is missing or has an unusable type, or an input
            column has the name of a column late_events adds.
        StateMismatchError: ``state`` was written under another configuration.
        WorkerEnvironmentError: Spark's Python workers cannot run the kernel (see
            :func:`windowing.spark.check_workers`).
    """
    flush = pipeline.flush_at_end if flush_at_end is None else bool(flush_at_end)
    input_cols = list(events_df.columns)
    norm = _checked_input(spark, pipeline, events_df)
    worker_state, key_state = _split_state(spark, pipeline, state, events_df)
    if worker_state:
        norm = _reject_committed(spark, pipeline, norm, worker_state)
    inputs = events_df.inputFiles()
    commits = _worker_commits(spark, pipeline, norm, worker_state, inputs)
    kernel = _launch_kernel(spark, pipeline, events_df, norm, input_cols, key_state, commits, flush)
    try:
        side = _collect_side_outputs(kernel, spark, pipeline, inputs, commits.worker_rows)
    except BaseException:
        kernel.out.unpersist()
        raise
    aggregates, late, state_out = _datasets(spark, kernel, side)
    rejected = _rejected(norm, input_cols, commits.rejected_counts)
    metrics = _metrics(
        side.counts,
        _lateness(side.counts.get("late", 0), late, F, side.lateness_ms),
        commits.rejected_counts,
        side.worker_rows,
        pipeline,
        side.by_worker,
    )
    return ReplayResult(
        aggregates, late, rejected, state_out, metrics, input_files=tuple(inputs), _persisted=kernel.out
    )


def _checked_input(spark: SparkSession, pipeline: Pipeline, events_df: DataFrame) -> DataFrame:
    """Phase 1: ``events_df`` checked against the pipeline's columns and normalised
    (:func:`_normalise`), once the session is set for the replay and its Python workers
    are known to run rewindow."""
    _check_columns(pipeline, events_df)
    _check_late_columns(pipeline, events_df)
    norm = _normalise(pipeline, events_df)
    _commits_mode(spark)
    # After every check that runs no job; before the first: one tiny job, once per session,
    # so that workers without rewindow's packages give a clear error, not a worker traceback.
    check_workers(spark)
    return norm


@dataclass
class _WorkerCommits:
    """Phase 2's results: rejected rows per reason, the carried worker state by worker,
    the kernel stage's task plan (None: the (worker, batch) summary was collected to the
    driver, ``spark.rewindow.commits=driver``), the workers' timelines built in the driver
    and their state rows so far."""

    rejected_counts: dict[str, int]
    carried: dict[Any, Any]
    plan: placement.TaskPlan | None
    timelines: dict[Any, Any]
    worker_rows: list[dict[str, Any]]


def _worker_commits(
    spark: SparkSession, pipeline: Pipeline, norm: DataFrame, worker_state: list[dict[str, Any]], inputs: Sequence[str]
) -> _WorkerCommits:
    """Phase 2: the workers' commits. Rows per worker (and rejected rows per reason) first;
    from them the kernel stage's plan (:func:`windowing.placement.plan_tasks`): tasks
    holding whole workers build their timelines from their own events, tasks of a worker
    spread over several get its (worker, batch) summary from Spark with their rows. Only
    carried workers without events in this replay get their timelines here. With
    ``spark.rewindow.commits=driver`` the summary is collected and every task gets every
    timeline (kept to compare: the output is the same)."""
    wcol = pipeline.source.worker
    wexpr = _col(wcol) if wcol else F.lit(0)
    with _naming_bad_files(inputs):
        folded = _fold(norm, wexpr)
    rejected_counts, worker_events = _folded_counts(folded)
    carried = {K.hashable(s["worker"]): s for s in worker_state}
    mode = _commits_mode(spark)
    if mode != "driver":
        sliceable = slices.sliceable(pipeline.window) and _slices_on(spark)
        plan = placement.plan_tasks(
            worker_events,
            pipeline.window.key is not None,
            _int_conf(spark, placement.EVENTS_PER_TASK_CONF, placement.EVENTS_PER_TASK),
            _task_slots(spark),
            force_whole=mode == "tasks",
            sliceable=sliceable,
        )
        if plan.spread and sliceable:
            with _naming_bad_files(inputs):
                plan = placement.with_hot_keys(plan, _hot_keys(pipeline, norm, plan))
        timelines, worker_rows = K.worker_timelines(
            pipeline, {}, {w: s for w, s in carried.items() if w not in worker_events}
        )
        return _WorkerCommits(rejected_counts, carried, plan, timelines, worker_rows)
    cand = F.min("__evt") if pipeline.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else F.max("__evt")
    with _naming_bad_files(inputs):
        summary = _summary(norm, cand, wexpr)
    timelines, worker_rows = summary_timelines(pipeline, summary, worker_state)
    return _WorkerCommits(rejected_counts, carried, None, timelines, worker_rows)


#: Key types a hot key may have to be sliced: they group, join and hash alike in Spark and
#: in the kernel (not floats: Spark groups -0.0 with 0.0, the kernel keeps them apart).
_HOT_KEY_TYPES = ("string", "integer", "long", "short", "byte", "boolean", "date")


#: Hot keys are found in a sample of the spread workers' rows holding about this many rows
#: of a key at the threshold (a key over it is a hot key to ±1 %, 3 standard deviations).
HOT_KEY_SAMPLE = 100_000


def _hot_keys(pipeline: Pipeline, norm: DataFrame, plan: placement.TaskPlan) -> dict[tuple[Any, Any], int]:
    """The spread workers' hot keys (:func:`windowing.placement.hot_key_threshold`) and
    their events: one Spark aggregation over the spread workers' rows, a row per hot key
    back (at most events / threshold).

    Over a threshold of more than :data:`HOT_KEY_SAMPLE` events the rows are sampled
    (Bernoulli, a fixed seed) and the events estimated: the plan only places the work,
    whatever it says the rows are the same (a hot key's slices replay what the key would
    whole), and counting every (worker, key) of a billion rows is a pass over them."""
    key = cast(str, pipeline.window.key)
    if norm.schema[key].dataType.typeName() not in _HOT_KEY_TYPES:
        return {}
    wcol = pipeline.source.worker
    accepted = norm.where(F.col(REJECT_REASON).isNull())
    accepted, _, n = _placement_columns(accepted, pipeline, placement.TaskPlan(plan.tasks, {}, plan.spread))
    threshold = placement.hot_key_threshold(plan)
    fraction = min(1.0, HOT_KEY_SAMPLE / max(threshold, 1))
    accepted = accepted.where(n.isNotNull())
    if fraction < 1.0:
        accepted = accepted.sample(fraction=fraction, seed=0)
    group = [*([_col(wcol).alias("__w")] if wcol else []), _col(key).alias("__k")]
    counted = (
        accepted.groupBy(*group).agg(F.count(F.lit(1)).alias("n")).where(F.col("n") > threshold * fraction).toArrow()
    )
    return {
        (K.hashable(r["__w"]) if wcol else 0, r["__k"]): int(round(int(r["n"]) / fraction)) for r in counted.to_pylist()
    }


def _hot_table(df: DataFrame, pipeline: Pipeline, plan: placement.TaskPlan) -> DataFrame:
    """The plan's hot keys as a small table: worker ``__hw``, key ``__hk``, first task
    ``__hfirst`` and slices ``__hn``."""
    wcol, key = pipeline.source.worker, cast(str, pipeline.window.key)
    fields = [
        *([StructField("__hw", df.schema[wcol].dataType)] if wcol else []),
        StructField("__hk", df.schema[key].dataType),
        StructField("__hfirst", IntegerType()),
        StructField("__hn", IntegerType()),
    ]
    rows = [
        (*([float(w) if isinstance(w, float) else w] if wcol else []), k, first, n)
        for (w, k), (first, n) in plan.hot.items()
    ]
    return df.sparkSession.createDataFrame(rows, StructType(fields))


def _with_hot(df: DataFrame, pipeline: Pipeline, plan: placement.TaskPlan, how: str = "left") -> DataFrame:
    """``df`` joined (broadcast) with the hot keys: ``__hfirst`` and ``__hn`` set on the
    rows of a hot key."""
    wcol, key = pipeline.source.worker, cast(str, pipeline.window.key)
    cond = _col(key).eqNullSafe(F.col("__hk"))
    if wcol:
        cond = cond & _col(wcol).eqNullSafe(F.col("__hw"))
    return df.join(F.broadcast(_hot_table(df, pipeline, plan)), cond, how).drop("__hw", "__hk")


def _slices_on(spark: SparkSession) -> bool:
    """``spark.rewindow.slices``: ``auto`` (default) or ``off``."""
    mode = str(spark.conf.get(placement.SLICES_CONF, "auto") or "auto").strip().lower()
    if mode not in ("auto", "off"):
        raise ConfigError(f"{placement.SLICES_CONF}: {mode!r} is not one of auto, off")
    return mode == "auto"


def _int_conf(spark: SparkSession, key: str, default: int) -> int:
    """A positive integer session setting (``key``), or ``default``."""
    try:
        return placement.positive_setting(key, spark.conf.get(key, None), default)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass
class _Kernel:
    """Phase 3 under way: the kernel's output as Spark holds it (persisted, not computed
    yet), the schemas of its outputs and its number of tasks."""

    out: DataFrame
    schemas: dict[str, pa.Schema]
    nparts: int


def _launch_kernel(
    spark: SparkSession,
    pipeline: Pipeline,
    events_df: DataFrame,
    norm: DataFrame,
    input_cols: list[str],
    key_state: DataFrame | None,
    commits: _WorkerCommits,
    flush: bool,
) -> _Kernel:
    """Phase 3: the kernel, per partition of (worker, key), as a held DataFrame (lazy)."""
    arrow_types = _arrow_types(spark, events_df)
    spec = K.Spec(pipeline=pipeline, input_types={c: arrow_types[c] for c in input_cols})
    # Events go to the tasks as they came; the tasks compute the internal columns they can
    # (kernel.task_derived) rather than have them shuffled and converted to Arrow.
    # A sliced worker's events are placed by window, from their event time: kept for them.
    sliced = commits.plan is not None and bool(commits.plan.sliced or commits.plan.hot)
    derived = K.task_derived(spec) - ({"__evt"} if sliced else set())
    events = norm.where(F.col(REJECT_REASON).isNull()).drop(REJECT_REASON, *derived)
    timeline_rows = _split_timeline_rows(pipeline, norm, commits.plan) if commits.plan else None
    kernel_in, names, nparts = kernel_input(spark, pipeline, events, key_state, commits.plan, timeline_rows)
    schemas = output_schemas(spec)
    fn = KernelTask(
        spec,
        commits.timelines,
        flush,
        names,
        schemas,
        lateness_share=DRIVER_PERCENTILES_MAX // max(1, nparts),
        carried=commits.carried if commits.plan else None,
        chunk_events=_int_conf(spark, placement.EVENTS_PER_CHUNK_CONF, placement.EVENTS_PER_CHUNK),
    )
    # The tasks hand their outputs back through Spark, which holds them for the writes: no
    # shared folder between driver and executors. Each output comes back as a few rows
    # carrying an Arrow IPC blob each (SIDE_OUTPUT names which): cheap to hold, and turned
    # into Spark rows of the output's own schema once, by the write (measured: converting
    # the emitted windows to rows before holding them cost a third more at 10 M events).
    return _Kernel(_hold(spark, kernel_in.mapInArrow(fn, _spark_schema(fn.schema))), schemas, nparts)


@dataclass
class _SideOutputs:
    """What the kernel job brings back to the driver: the counters summed, in total and
    per worker label, every worker state row (sorted by worker), and the lateness values
    when the driver computes the percentiles (None: a Spark job does, or none are late)."""

    counts: dict[str, int]
    by_worker: dict[str, dict[str, int]]
    worker_rows: list[dict[str, Any]]
    lateness_ms: np.ndarray | None


def _collect_side_outputs(
    kernel: _Kernel, spark: SparkSession, pipeline: Pipeline, inputs: Sequence[str], worker_rows: list[dict[str, Any]]
) -> _SideOutputs:
    """Run the kernel: one job brings back the counters, the worker state rows of tasks
    holding whole workers (added to ``worker_rows``), and the lateness values of the tasks
    that had at most their share of :data:`DRIVER_PERCENTILES_MAX` late events."""
    wcol = pipeline.source.worker
    with _naming_bad_files(inputs), _session_conf(spark, _kernel_job_conf(spark)):
        rows = (
            kernel.out.where(F.col(SIDE_OUTPUT).isin("counters", LATENESS_COLLECTED, "workers"))
            .select(SIDE_OUTPUT, SIDE_DATA)
            .collect()
        )
    counters: list[pa.Table] = []
    values: list[np.ndarray] = []
    for row in rows:
        table = decode_blob(row[SIDE_DATA])
        if row[SIDE_OUTPUT] == "counters":
            counters.append(table)
        elif row[SIDE_OUTPUT] == "workers":  # worker state rows, from tasks holding whole workers
            worker_rows += table.to_pylist()
        else:
            values.append(table["lateness_ms"].to_numpy())
    counts, by_worker = _sum_counters(counters)
    worker_rows.sort(key=lambda r: repr(K.hashable(r.get(wcol) if wcol else 0)))
    lateness_ms = None
    if 0 < counts.get("late", 0) <= DRIVER_PERCENTILES_MAX:  # 8 bytes a late event, from the held rows
        if sum(len(v) for v in values) < counts["late"]:  # a task had more than its share: fetch the rest
            values += [
                decode_blob(r[SIDE_DATA])["lateness_ms"].to_numpy()
                for r in kernel.out.where(F.col(SIDE_OUTPUT) == LATENESS_HELD).select(SIDE_DATA).collect()
            ]
        lateness_ms = np.concatenate(values)
    return _SideOutputs(counts, by_worker, worker_rows, lateness_ms)


def _datasets(spark: SparkSession, kernel: _Kernel, side: _SideOutputs) -> tuple[DataFrame, DataFrame, DataFrame]:
    """``aggregates``, ``late_events`` and ``state`` as DataFrames of their own schemas,
    decoded from the kernel's held output (the worker state rows added to ``state``)."""
    # One write task per ROWS_PER_FILE rows of an output (at most one per kernel task):
    # a write task has a fixed cost (a Python worker, a file), most kernel tasks' outputs
    # are small, and the rows are the same however they are grouped into files.
    schemas = kernel.schemas
    aggregates, late, state_out = (
        kernel.out.where(F.col(SIDE_OUTPUT) == name)
        .select(SIDE_DATA)
        .coalesce(_write_tasks(side.counts.get(f"rows_{name}", 0), kernel.nparts, _task_slots(spark)))
        .mapInArrow(_DecodeTask(schemas[name]), _spark_schema(schemas[name]))
        for name in ("aggregates", "late_events", "state")
    )
    if side.worker_rows:
        workers = pa.Table.from_pylist(side.worker_rows, schema=schemas["state"])
        state_out = state_out.unionByName(spark.createDataFrame(workers.to_pylist(), _spark_schema(schemas["state"])))
    return aggregates, late, state_out


def _rejected(norm: DataFrame, input_cols: list[str], rejected_counts: dict[str, int]) -> DataFrame:
    """The rejected rows (a lazy view of the input): its columns and the reason."""
    rejected = norm.where(F.col(REJECT_REASON).isNotNull()).select(*[_col(c) for c in input_cols], REJECT_REASON)
    if not rejected_counts:  # known from the summary: spare a scan of the input
        rejected = rejected.limit(0)
    return rejected


def kernel_input(
    spark: SparkSession,
    pipeline: Pipeline,
    events: DataFrame,
    state_rows: DataFrame | None = None,
    plan: placement.TaskPlan | None = None,
    timeline_rows: DataFrame | None = None,
) -> tuple[DataFrame, dict[str, str], int]:
    """The kernel's input: ``events`` and the carried ``state_rows`` (or None), each row in
    the task ``plan`` gives its worker and key (with ``timeline_rows``, the spread and
    sliced workers' timelines, see :func:`_split_timeline_rows`); without a plan, hash-partitioned by
    (worker, key) into ``spark.sql.shuffle.partitions`` partitions. Returns ``(input,
    names, partitions)``: PySpark's mapInArrow resolves columns by name, which a dot in a
    name breaks, so such columns go under a safe name and ``names`` maps it back (the task
    puts the real name back)."""
    kernel_in = events if state_rows is None else events.unionByName(state_rows, allowMissingColumns=True)
    if plan is not None:
        nparts = plan.tasks
        kernel_in = _with_task(kernel_in, pipeline, plan)
        if timeline_rows is not None:
            kernel_in = kernel_in.unionByName(timeline_rows, allowMissingColumns=True)
        salt = F.element_at(F.array(*[F.lit(v) for v in placement.salts(nparts)]), F.col(_TASK) + 1)
        kernel_in = kernel_in.repartition(nparts, salt).drop(_TASK)
    else:
        part_cols = [_col(c) for c in (pipeline.source.worker, pipeline.window.key) if c]
        nparts = int(cast(str, spark.conf.get("spark.sql.shuffle.partitions")))  # set in every session
        kernel_in = kernel_in.repartition(nparts, *part_cols) if part_cols else kernel_in.repartition(1)
    names = kernel_in.columns
    safe = [f"__d{i}" if ("." in c or "`" in c) else c for i, c in enumerate(names)]
    if safe != names:
        kernel_in = kernel_in.toDF(*safe)
    return kernel_in, dict(zip(safe, names)), nparts


#: The kernel input's task column while it is placed (dropped after the shuffle).
_TASK = "__task"
#: Workers looked up in a literal map up to this many (Spark scans it); a broadcast join beyond.
MAX_WORKER_MAP = 64


def _placement_columns(df: DataFrame, pipeline: Pipeline, plan: placement.TaskPlan) -> tuple[DataFrame, Column, Column]:
    """``df`` (joined with the plan if need be) and two int columns: each row's worker's
    first task and number of tasks (1 for a whole worker)."""
    wcol = pipeline.source.worker
    entries = {**{w: (t, 1) for w, t in plan.whole.items()}, **plan.split}
    if wcol is None:
        first, n = entries.get(0, (0, 1))
        return df, F.lit(first), F.lit(n)
    dtype = df.schema[wcol].dataType
    placeable = ("string", "integer", "long", "short", "byte", "boolean", "date", "timestamp")
    if len(entries) <= MAX_WORKER_MAP and dtype.typeName() in placeable:
        cols = []
        for i in (0, 1):
            pairs: list[Column] = []
            for w, v in entries.items():
                if w is not None:  # a null worker is a worker of its own, but no map key
                    pairs += [F.lit(w).cast(dtype), F.lit(v[i])]
            looked = F.create_map(*pairs)[_col(wcol)] if pairs else F.lit(None).cast("int")
            if None in entries:
                looked = F.when(_col(wcol).isNull(), F.lit(entries[None][i])).otherwise(looked)
            cols.append(looked)
        return df, cols[0], cols[1]
    schema = StructType(
        [StructField("__pw", dtype), StructField("__pfirst", IntegerType()), StructField("__pn", IntegerType())]
    )
    # Plain values again (``kernel.hashable``'s one NaN is a float subclass Spark refuses).
    table = df.sparkSession.createDataFrame(
        [(float(w) if isinstance(w, float) else w, v[0], v[1]) for w, v in entries.items()], schema
    )
    joined = df.join(F.broadcast(table), _col(wcol).eqNullSafe(F.col("__pw")), "left").drop("__pw")
    return joined, F.col("__pfirst"), F.col("__pn")


def _key_hash(pipeline: Pipeline, df: DataFrame) -> Column:
    """Spark's hash of the key column, every NaN as one (the kernel's one NaN key)."""
    key = pipeline.window.key
    if key is None:
        return F.lit(0)
    col = _col(key)
    if df.schema[key].dataType.typeName() in ("float", "double"):
        col = F.when(F.isnan(col), F.lit(float("nan")).cast(df.schema[key].dataType)).otherwise(col)
    return F.hash(col)


def _with_task(df: DataFrame, pipeline: Pipeline, plan: placement.TaskPlan) -> DataFrame:
    """``df`` with :data:`_TASK`: the task of each row's worker and key under ``plan`` (a
    sliced worker's rows: of their windows, :func:`_slice_offsets`)."""
    df, first, n = _placement_columns(df, pipeline, plan)
    if plan.sliced or plan.hot:
        for c, t in (("__kind", "byte"), (f"{K.STATE_PREFIX}window_start_ms", "bigint")):
            if c not in df.columns:  # no carried state
                df = df.withColumn(c, F.lit(None).cast(t))
    if plan.sliced:  # an unkeyed pipeline: n > 1 only for a sliced worker
        df = df.withColumn("__pfirst", first).withColumn("__slice", F.explode(_slice_offsets(pipeline, n)))
        task = (F.col("__pfirst") + F.col("__slice")).cast("int")
        return df.withColumn(_TASK, task).drop("__pfirst", "__pn", "__slice")
    task = first if not plan.spread else first + F.pmod(_key_hash(pipeline, df), n)
    if plan.hot:  # a hot key's rows go to its slices (by window), the others by key hash
        df = _with_hot(df.withColumn("__ptask", task), pipeline, plan)
        hot = F.col("__hfirst").isNotNull()
        df = df.withColumn(
            "__slice", F.explode(F.when(hot, _slice_offsets(pipeline, F.col("__hn"))).otherwise(F.array(F.lit(0))))
        )
        task = F.when(hot, F.col("__hfirst") + F.col("__slice")).otherwise(F.col("__ptask")).cast("int")
        return df.withColumn(_TASK, task).drop("__pfirst", "__pn", "__ptask", "__hfirst", "__hn", "__slice")
    return df.withColumn(_TASK, task).drop("__pfirst", "__pn")


def _floor_div_expr(x: str, divisor: int) -> str:
    """floor(``x`` / divisor) as a Spark SQL expression, exact in 64-bit integers."""
    return f"(({x}) - pmod(({x}), {divisor})) div {divisor}"


def _slice_offsets(pipeline: Pipeline, n: Column) -> Column:
    """Per row of a worker in ``n`` slices of its windows (:mod:`windowing.kernel.slices`),
    the slices it goes to: an event to that of its latest window start and that of its
    earliest window; a key row to every slice; a carried window or counter to that of its
    start. (``n`` is 1 for a whole worker: slice 0.)"""
    w = pipeline.window
    block, off = slices.block_ms(w), w.offset_ms
    step = cast(int, w.span_ms if w.slide_ms is None else w.slide_ms)
    span = cast(int, w.span_ms)
    latest = f"({_floor_div_expr(f'__evt - {off}', step)}) * {step} + {off}"
    earliest = f"({_floor_div_expr(f'__evt - {span} - {off}', step)}) * {step} + {off + step}"
    by_latest = F.pmod(F.expr(_floor_div_expr(f"__evt - {off}", block)), n)
    by_earliest = F.pmod(F.expr(_floor_div_expr(f"least({earliest}, {latest}) - {off}", block)), n)
    by_window = F.pmod(F.expr(_floor_div_expr(f"`{K.STATE_PREFIX}window_start_ms` - {off}", block)), n)
    kind = F.col("__kind")
    return (
        F.when(kind.isNull() | (kind == K.EVENT), F.array_distinct(F.array(by_latest, by_earliest)))
        .when(kind == K.STATE_KEY, F.sequence(F.lit(0), n - 1))
        .otherwise(F.array(by_window))
    )


def _split_timeline_rows(pipeline: Pipeline, norm: DataFrame, plan: placement.TaskPlan) -> DataFrame | None:
    """The spread and sliced workers' commits, one (worker, batch) summary each with the
    watermark candidate and the greatest and smallest arrival (and greatest event time);
    and the hot keys' key-batch rows (:mod:`windowing.kernel.slices`: the key's candidate,
    greatest event and arrival time per batch). Summed up by Spark in the kernel's job,
    never collected, packed once per block of :data:`PACK_BATCHES` batches
    (:class:`windowing.chunks.PackRows`), and the packs sent to each task that needs them
    (:data:`windowing.chunks.PACKED`): every task of the worker (the first writes the
    worker's state row; a sliced worker's tasks read them as key-batch rows too, with their
    slice) and every slice of its hot keys.

    A pack is copied whole, as bytes: a worker's timeline goes to each of its tasks, so
    copying it row by row would cost a shuffle row per (task, batch), more than the events
    when batches are many (1 s batches over weeks)."""
    if not plan.split:
        return None
    wcol = pipeline.source.worker
    accepted = norm.where(F.col(REJECT_REASON).isNull())
    split_only = placement.TaskPlan(plan.tasks, {}, plan.split)
    accepted, first, n = _placement_columns(accepted, pipeline, split_only)
    accepted = accepted.withColumn("__pfirst", first).withColumn("__pn", n).where(F.col("__pn").isNotNull())
    cand = F.min("__evt") if pipeline.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else F.max("__evt")
    group = [
        *([_col(wcol).alias(_PACK_WORKER)] if wcol else []),
        F.col("__batch").alias(chunks.TL_BATCH),
        F.col("__pfirst"),
        F.col("__pn"),
    ]
    summary = accepted.groupBy(*group).agg(
        cand.alias(chunks.TL_CAND),
        F.max("__arr").alias(chunks.TL_MAX),
        F.min("__arr").alias(chunks.TL_MIN),
        F.max("__evt").alias(K.KB_MAXEV),
    )
    packs = _packed(summary, ["__pfirst", "__pn"], chunks.TL_BATCH, pipeline)
    copies = packs.select("*", F.explode(F.sequence(F.lit(0), F.col("__pn") - 1)).alias("__bucket"))
    sliced = bool(plan.sliced)
    packed = copies.select(
        (F.col("__pfirst") + F.col("__bucket")).alias(_TASK),
        _pack_header(
            chunks.TIMELINE_KIND,
            F.col("__bucket") == 0,
            F.col("__bucket") if sliced else None,
            F.col("__pn") if sliced else None,
        ),
    )
    if plan.hot:
        # The hot keys' slices get their worker's timeline (never as its owner) and their key's batches.
        slices_of = [(plan.split[w][0], first, n) for (w, _), (first, n) in plan.hot.items()]
        hot = norm.sparkSession.createDataFrame(slices_of, "__pfirst int, __hfirst int, __hn int")
        hot_copies = packs.join(F.broadcast(hot), "__pfirst").select(
            "*", F.explode(F.sequence(F.lit(0), F.col("__hn") - 1)).alias("__bucket")
        )
        packed = packed.unionByName(
            hot_copies.select(
                (F.col("__hfirst") + F.col("__bucket")).alias(_TASK),
                _pack_header(chunks.TIMELINE_KIND, F.lit(False), None, None),
            )
        )
        packed = packed.unionByName(_hot_key_batch_packs(pipeline, norm, plan, cand))
    return packed


#: Timeline and key-batch rows go in packs of at most this many batches (a few MB each).
PACK_BATCHES = 1 << 16
#: The worker and key columns while packed (a safe name: Spark's Arrow UDFs resolve by name).
_PACK_WORKER, _PACK_KEY = "__pack_worker", "__pack_key"


def _packed(rows: DataFrame, header: list[str], batch: str, pipeline: Pipeline) -> DataFrame:
    """``rows`` packed: one row per ``header`` value and block of :data:`PACK_BATCHES`
    batches, with the block's rows (but ``header``) as Arrow IPC bytes (``__blob``,
    :class:`windowing.chunks.PackRows`), sorted by ``batch``: the same bytes however the
    rows arrived (a map task run again must write the same rows: Spark 4 checks it)."""
    fields = [c for c in rows.columns if c not in header]
    names = {_PACK_WORKER: pipeline.source.worker, _PACK_KEY: pipeline.window.key}
    real = [names.get(c) or c for c in fields]
    blocked = rows.withColumn("__block", F.expr(_floor_div_expr(batch, PACK_BATCHES)))
    schema = StructType([*[rows.schema[h] for h in header], StructField("__blob", BinaryType())])
    packer = chunks.PackRows(header, fields, real, batch)

    def pack(table: pa.Table) -> pa.Table:  # a function with type hints: how Spark tells the API
        return packer(table)

    return blocked.groupBy(*header, "__block").applyInArrow(pack, schema)


def _pack_header(kind: int, owner: Column, slice_index: Column | None, slices: Column | None) -> Column:
    """A pack as the task reads it (:data:`windowing.chunks.PACKED`)."""

    def int_or_null(c: Column | None) -> Column:
        return (c if c is not None else F.lit(None)).cast("int")

    return F.struct(
        F.lit(kind).cast("byte").alias("kind"),
        owner.alias("owner"),
        int_or_null(slice_index).alias("slice"),
        int_or_null(slices).alias("slices"),
        F.col("__blob").alias("rows"),
    ).alias(chunks.PACKED)


def _hot_key_batch_packs(pipeline: Pipeline, norm: DataFrame, plan: placement.TaskPlan, cand: Column) -> DataFrame:
    """The hot keys' key-batch rows (:mod:`windowing.kernel.slices`), packed, a copy per slice."""
    wcol, key = pipeline.source.worker, cast(str, pipeline.window.key)
    accepted = _with_hot(norm.where(F.col(REJECT_REASON).isNull()), pipeline, plan, how="inner")
    group = [
        *([_col(wcol).alias(_PACK_WORKER)] if wcol else []),
        _col(key).alias(_PACK_KEY),
        F.col("__batch").alias(K.KB_BATCH),
        F.col("__hfirst"),
        F.col("__hn"),
    ]
    summary = accepted.groupBy(*group).agg(
        cand.alias(K.KB_CAND), F.max("__evt").alias(K.KB_MAXEV), F.max("__arr").alias(K.KB_MAXARR)
    )
    packs = _packed(summary, ["__hfirst", "__hn"], K.KB_BATCH, pipeline)
    copies = packs.select("*", F.explode(F.sequence(F.lit(0), F.col("__hn") - 1)).alias("__bucket"))
    return copies.select(
        (F.col("__hfirst") + F.col("__bucket")).alias(_TASK),
        _pack_header(K.KEY_BATCH, F.lit(False), F.col("__bucket"), F.col("__hn")),
    )


# --------------------------------------------------------------------------- phase 1


_TIME_TYPES = ("timestamp", "timestamp_ntz", "date", "string", "bigint", "int", "smallint", "tinyint")
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double")
#: Decimal types (``decimal(p,s)``) sum and average exactly, with Spark's result types.
_DECIMAL = "decimal("


@contextmanager
def _naming_bad_files(inputs: Iterable[str]) -> Iterator[None]:
    """Spark reads data pages at the first action: name the damaged input file then."""
    try:
        yield
    except Exception as exc:
        err = input_error_from(exc, inputs)
        if err is None:
            raise
        raise err from exc


def _check_late_columns(pipeline: Pipeline, df: DataFrame) -> None:
    """Refuse input columns that late_events would overwrite with the columns it adds.

    late_events carries every input column; a same-named added column would replace it
    (or, differing only in case, fail the write after all the work). The one exception is
    an input column ``batch`` that is the source's batch column: the added ``batch`` is
    that same number."""
    added = {c.lower(): c for c in K.LATE_ADDED_COLUMNS}
    for c in df.columns:
        if c.lower() in added and not (c == "batch" and c == pipeline.source.batch_column):
            raise ConfigError(
                f"input column {c!r}: late_events adds a column {added[c.lower()]!r} "
                f"(it adds {', '.join(K.LATE_ADDED_COLUMNS)}; names compare ignoring case) and would "
                f"overwrite it; rename the input column before replaying"
            )


def _check_columns(pipeline: Pipeline, df: DataFrame) -> None:
    """Fail before any work if a configured column is missing or unusable."""
    types = dict(df.dtypes)
    internal = [c for c in types if c.startswith("__")]
    if internal:
        raise ConfigError(
            f"input column {internal[0]!r}: names starting with '__' are reserved for the engine; rename it"
        )
    w = pipeline.window
    named = [
        ("source.arrivalTime", pipeline.source.arrival_time),
        *[(f"source.arrivalOrder[{i}]", c) for i, c in enumerate(pipeline.source.arrival_order)],
        ("source.batch.column", pipeline.source.batch_column),
        ("source.worker", pipeline.source.worker),
        ("keyExtractor", w.key),
        ("timeConfig.eventTimeExtractor", w.event_time),
        *[(f"aggregateDefinition[{i}].column", a.column) for i, a in enumerate(pipeline.aggregates)],
    ]
    check_input_columns(pipeline, types)  # the CLI's pre-flight check, same message
    times = (("source.arrivalTime", pipeline.source.arrival_time), ("timeConfig.eventTimeExtractor", w.event_time))
    for where, col in times:
        if col and types[col] not in _TIME_TYPES:
            raise ConfigError(
                f"{where}: column {col!r} has type {types[col]}; expected a timestamp, date, "
                "integer epoch milliseconds or a timestamp string"
            )
    integral = ("bigint", "int", "smallint", "tinyint")
    if pipeline.source.batch_column and types[pipeline.source.batch_column] not in integral:
        raise ConfigError(
            f"source.batch.column: column {pipeline.source.batch_column!r} has type "
            f"{types[pipeline.source.batch_column]}; expected an integer batch id"
        )
    for where, col in (n for n in named if not n[0].startswith("aggregateDefinition")):  # identity columns
        if col and types[col].startswith(("array", "map", "struct")):
            raise ConfigError(f"{where}: column {col!r} of type {types[col]} cannot identify a key, worker or order")
    for i, a in enumerate(pipeline.aggregates):
        if a.column is None:
            continue
        t = types[a.column]
        if a.type in ("sum", "avg") and t not in _NUMERIC and not t.startswith(_DECIMAL):
            raise ConfigError(f"aggregateDefinition[{i}].column: {a.type} needs a numeric column; {a.column!r} is {t}")
        if t.startswith(("array", "map", "struct", "binary")):
            raise ConfigError(f"aggregateDefinition[{i}].column: {a.column!r} of type {t} cannot be aggregated")


def _floor_div(F: ModuleType, df: DataFrame, name: str, source: str, divisor: int) -> DataFrame:
    """``df`` with ``name`` = floor(``source`` / divisor), exact in 64-bit integers (Spark's
    ``/`` goes through doubles). Tasks compute the same (``kernel.with_event_columns``)."""
    return df.withColumn(name, F.expr(_floor_div_expr(source, divisor)))


def _normalise(pipeline: Pipeline, df: DataFrame) -> DataFrame:
    types = {f.name: f.dataType for f in df.schema.fields}
    src, w = pipeline.source, pipeline.window
    cols = list(df.columns)
    # Times outside [MIN_EPOCH_MS, MAX_EPOCH_MS] are null here (and rejected below), so
    # nothing computed from them (the batch, windows, lateness) can overflow.
    arr_any = epoch_ms_unchecked(src.arrival_time, types[src.arrival_time])
    out = df.withColumn("__arr", in_range(arr_any))
    out = out.withColumn("__evt", epoch_ms(w.event_time, types[w.event_time]) if w.event_time else F.col("__arr"))
    if src.batch_column:
        out = out.withColumn("__batch", _col(src.batch_column).cast("long"))
    else:
        # The configuration sets the interval whenever it sets no batch column.
        out = _floor_div(F, out, "__batch", "__arr", cast(int, src.batch_interval_ms))
    reason = (
        F.when(_col(src.arrival_time).isNull(), F.lit(ARRIVAL_NULL))
        .when(arr_any.isNull(), F.lit(ARRIVAL_UNPARSEABLE))
        .when(F.col("__arr").isNull(), F.lit(ARRIVAL_OUT_OF_RANGE))
    )
    if w.event_time:
        reason = (
            reason.when(_col(w.event_time).isNull(), F.lit(EVENT_TIME_NULL))
            .when(epoch_ms_unchecked(w.event_time, types[w.event_time]).isNull(), F.lit(EVENT_TIME_UNPARSEABLE))
            .when(F.col("__evt").isNull(), F.lit(EVENT_OUT_OF_RANGE))
        )
    if src.batch_column:
        reason = reason.when(_col(src.batch_column).isNull(), F.lit(BATCH_NULL))
    if src.max_future_skew_ms is not None:
        reason = reason.when(F.col("__evt") - F.col("__arr") > F.lit(src.max_future_skew_ms), F.lit(FUTURE_SKEW))
    out = out.withColumn(REJECT_REASON if REJECT_REASON not in cols else "__reason_tmp", reason)
    if REJECT_REASON in cols:
        raise ConfigError(f"input column {REJECT_REASON!r} clashes with the rejected output's reason column")
    return out


def _reject_committed(
    spark: SparkSession, pipeline: Pipeline, norm: DataFrame, worker_state: list[dict[str, Any]]
) -> DataFrame:
    """Rows of a batch their worker already committed in an earlier partition."""
    wcol = pipeline.source.worker
    last = {(K.hashable(r["worker"])): r["batch"] for r in worker_state if r["batch"] is not None}
    if not last:
        return norm
    wexpr = _col(wcol) if wcol else F.lit(0)
    cond: Column | None = None
    for wv, b in last.items():
        match = wexpr.isNull() if wv is None else (wexpr == F.lit(wv))
        c = match & (F.col("__batch") <= F.lit(b))
        cond = c if cond is None else (cond | c)
    assert cond is not None  # ``last`` has an entry
    return norm.withColumn(
        REJECT_REASON,
        F.when(F.col(REJECT_REASON).isNull() & cond, F.lit(BATCH_COMMITTED)).otherwise(F.col(REJECT_REASON)),
    )


# --------------------------------------------------------------------------- state


def _split_state(
    spark: SparkSession, pipeline: Pipeline, state: DataFrame | None, events_df: DataFrame
) -> tuple[list[dict[str, Any]], DataFrame | None]:
    """Worker rows (collected: one per worker) and key/window rows (for the kernel).

    The state is checked first (:func:`_state_problems`): another pipeline's state is a
    :class:`StateMismatchError`, missing columns or columns of other types than this
    pipeline writes for these inputs a :class:`~windowing.io.StateError` naming them.
    """
    if state is None:
        return [], None
    problems = _state_problems(spark, pipeline, state, events_df)  # no Spark job
    fp = pipeline.fingerprint()
    wcol, kcol = pipeline.source.worker, pipeline.window.key
    if problems:
        if "fingerprint" in state.columns:  # another pipeline's state: say that, not what it lacks
            found = [r[0] for r in state.select("fingerprint").distinct().limit(3).collect()]
            if any(f != fp for f in found):
                raise StateMismatchError(_mismatch_message(pipeline, found))
        raise StateError(
            f"{_state_location(state)}: the carried state does not fit pipeline {pipeline.name!r} "
            f"and these events: {'; '.join(problems)}"
        )
    found, worker_rows = _state_summary(state, wcol)
    if any(f != fp for f in found):  # another pipeline's state
        raise StateMismatchError(_mismatch_message(pipeline, found))
    types = dict(events_df.dtypes)
    worker_state = [
        {
            "worker": (r[wcol] if wcol else 0),
            "batch": r["batch"],
            "watermark_ms": r["watermark_ms"],
            "clock_ms": r["clock_ms"],
        }
        for r in worker_rows
    ]
    kind = (
        F.when(F.col("state_kind") == KEY_KIND, F.lit(K.STATE_KEY))
        .when(F.col("state_kind") == WINDOW_KIND, F.lit(K.STATE_WINDOW))
        .otherwise(F.lit(K.STATE_EMITTED))
        .cast("byte")
    )
    keep = [c for c in (wcol, kcol) if c]
    rows = state.where(F.col("state_kind") != WORKER_KIND)
    cols = [_col(c).cast(types[c]).alias(c) for c in keep]
    cols += [_col(c).alias(K.STATE_PREFIX + c) for c in state.columns if c not in keep and c != "fingerprint"]
    return worker_state, rows.select(*cols, kind.alias("__kind"))


#: Settings for the small aggregations the driver collects (a few rows: rejected rows per
#: reason and worker, the carried state's worker rows and fingerprints): one Spark job with
#: its stages, not one job per stage as adaptive execution runs them, and one reduce task.
_SMALL_JOB_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}


def _state_summary(state: DataFrame, wcol: str | None) -> tuple[list[str], list[Row]]:
    """``(fingerprints, worker rows)`` of a carried state that has the state's columns, in
    one job: its distinct fingerprints (at most three; none without the column) and its
    worker rows (``state_kind = 'worker'``)."""
    worker_cols = [c for c in dict.fromkeys((wcol, "batch", "watermark_ms", "clock_ms")) if c]
    rows = state.where(F.col("state_kind") == WORKER_KIND).select(F.lit(0).alias("__part"), *map(_col, worker_cols))
    if "fingerprint" in state.columns:
        fps = state.select(F.lit(1).alias("__part"), F.col("fingerprint").alias("__fp")).distinct()
        rows = rows.unionByName(fps, allowMissingColumns=True)
    with _session_conf(state.sparkSession, _SMALL_JOB_CONF):
        collected = rows.collect()
    return [r["__fp"] for r in collected if r["__part"] == 1][:3], [r for r in collected if r["__part"] == 0]


def _mismatch_message(pipeline: Pipeline, found: list[str]) -> str:
    """Why state with fingerprints ``found`` is refused, and what to do about it."""
    fp = pipeline.fingerprint()
    message = (
        f"the carried state was written by a different pipeline configuration "
        f"(state fingerprint {found}, this pipeline {fp}); replay from the first partition"
    )
    if pipeline.idle_heartbeat_ms and found == [replace(pipeline, heartbeat_ms=0).fingerprint()]:
        message += (
            f", or set replay.heartbeat: 0s to continue it as it was written (without heartbeat "
            f"ticks: before replay.heartbeat existed, or with it off; this pipeline's is "
            f"{pipeline.heartbeat_ms} ms)"
        )
    return message


def _state_problems(spark: SparkSession, pipeline: Pipeline, state: DataFrame, events_df: DataFrame) -> list[str]:
    """What is wrong with the carried state's columns, one phrase each (none: it fits).

    The state must have every column of the kernel's ``Spec(pipeline, input
    types).state_schema()``, with that type: the worker and key columns with the type
    they have in these events, the partial values the type their aggregate keeps. A pandera
    schema checks it, at schema depth, on a zero-row view of the state: no data is read.
    """
    import pandera.pyspark as pdr  # noqa: PLC0415 - pandera takes 1.4 s to import; only this check needs it
    from pandera.config import (  # noqa: PLC0415 - pandera takes 1.4 s to import; only this check needs it
        ValidationDepth,
        config_context,
    )
    from pandera.errors import (  # noqa: PLC0415 - pandera takes 1.4 s to import; only this check needs it
        SchemaError,
        SchemaErrors,
    )

    spec = K.Spec(pipeline=pipeline, input_types=_arrow_types(spark, events_df))
    expected = {f.name: f.dataType for f in _spark_schema(spec.state_schema()).fields}
    found = {f.name: f.dataType for f in state.schema.fields}
    schema = pdr.DataFrameSchema(
        # pandera takes a Spark DataType at runtime; its annotation lists no pyspark types.
        {c: pdr.Column(t, nullable=True, required=True) for c, t in expected.items()},  # type: ignore[arg-type]
        name=f"{pipeline.name}.state",
        strict=False,
    )
    report: Mapping[str, Any] | None
    try:
        with config_context(validation_enabled=True, validation_depth=ValidationDepth.SCHEMA_ONLY):
            # ``.pandera`` is an accessor pandera registers at runtime (statically, a Column).
            report = cast("Mapping[str, Any] | None", schema.validate(state.limit(0), lazy=True).pandera.errors)
    except (SchemaError, SchemaErrors):  # pandera versions that raise after all
        report = None
    if report is None:  # no report: the same comparison, directly
        report = {
            "SCHEMA": {
                "COLUMN_NOT_IN_DATAFRAME": [{"column": c} for c in expected if c not in found],
                "WRONG_DATATYPE": [{"column": c} for c, t in found.items() if c in expected and t != expected[c]],
            }
        }
    input_types = dict(events_df.dtypes)
    roles = {c: r for r, c in (("worker", pipeline.source.worker), ("key", pipeline.window.key)) if c}
    owner = {f.name: a for a in pipeline.aggregates for f in spec.partial_fields(a)}
    out: list[str] = []
    for reason, errors in dict(report.get("SCHEMA", {})).items():
        for e in errors:
            c = e.get("column")
            if reason == "COLUMN_NOT_IN_DATAFRAME":
                what = (
                    f"the {roles[c]} column"
                    if c in roles
                    else f"the partial value of aggregate {owner[c].name!r}"
                    if c in owner
                    else ""
                )
                out.append(f"column {c!r} is missing" + (f" ({what})" if what else ""))
            elif reason == "WRONG_DATATYPE" and c in expected and c in found:
                has, want = found[c].simpleString(), expected[c].simpleString()
                if c in roles:
                    out.append(
                        f"column {c!r} (the {roles[c]} column) is {has} in the state but {input_types[c]} "
                        "in the input: its type changed since the state was written"
                    )
                elif c in owner and owner[c].column:
                    a = owner[c]
                    out.append(
                        f"column {c!r} is {has} in the state, but {a.type} over {a.column!r} "
                        f"({input_types[cast(str, a.column)]} in the input) keeps {want}"
                    )
                else:
                    out.append(f"column {c!r} is {has}; the pipeline's state has {want}")
            else:
                out.append(f"{c!r}: {e.get('error', reason)}")
    for reason, errors in dict(report).items():  # anything else pandera found
        if reason != "SCHEMA":
            out += [f"{e.get('column')!r}: {e.get('error', reason)}" for errs in dict(errors).values() for e in errs]
    return out


def _state_location(state: DataFrame) -> str:
    """The folder the state DataFrame was read from (for messages), if it was read from files."""
    try:
        files = state.inputFiles()
    except Exception:  # noqa: BLE001 - not a file-based DataFrame (Spark Connect, a local frame)
        files = []
    folders = sorted({f.rsplit("/", 1)[0] for f in files})
    return display(folders[0]) if len(folders) == 1 else "carried state"


def _fold(norm: DataFrame, wexpr: Column) -> pa.Table:
    """Rows per (reject reason, worker ``__w``): one small Spark aggregation, one job."""
    with _session_conf(norm.sparkSession, _SMALL_JOB_CONF):
        return norm.groupBy(F.col(REJECT_REASON), wexpr.alias("__w")).agg(F.count(F.lit(1)).alias("n")).toArrow()


def _folded_counts(folded: pa.Table) -> tuple[dict[str, int], dict[Any, int]]:
    """Rejected rows per reason, and accepted events per worker, from :func:`_fold`."""
    rejected: dict[str, int] = {}
    per_worker: dict[Any, int] = {}
    for r in folded.to_pylist():
        if r[REJECT_REASON] is None:
            per_worker[K.hashable(r["__w"])] = per_worker.get(K.hashable(r["__w"]), 0) + int(r["n"])
        else:
            rejected[r[REJECT_REASON]] = rejected.get(r[REJECT_REASON], 0) + int(r["n"])
    return rejected, per_worker


def _summary(norm: DataFrame, cand: Column, wexpr: Column) -> pa.Table:
    """Per (worker ``__w``, batch) of the accepted events: watermark candidate ``cand``,
    greatest and smallest arrival (``maxarr``, ``minarr``).

    Every commit of a worker matters: its clock is the emit time of what it closes, idle
    detection compares against its clock or global watermark, and heartbeat ticks fall
    between one batch's clock and the next one's smallest arrival.
    """
    per_batch = (
        norm.where(F.col(REJECT_REASON).isNull())
        .groupBy(wexpr.alias("__w"), F.col("__batch"))
        .agg(
            cand.alias("cand"),
            F.max("__arr").alias("maxarr"),
            F.min("__arr").alias("minarr"),
        )
    )
    return per_batch.toArrow()  # Arrow: one row per batch, fast to collect


def summary_timelines(
    pipeline: Pipeline, summary: pa.Table, worker_state: list[dict[str, Any]]
) -> tuple[dict[Any, K.Timeline], list[dict[str, Any]]]:
    """Each worker's timeline and state row from a :func:`_summary` table (rows with a
    reject reason, if it has that column, are left out) and the carried worker rows."""
    if REJECT_REASON in summary.column_names:
        summary = summary.filter(pc.is_null(summary[REJECT_REASON]))
    return K.worker_timelines(pipeline, _commits(summary), {K.hashable(s["worker"]): s for s in worker_state})


def _commits(summary: pa.Table) -> dict[Any, tuple[np.ndarray, ...]]:
    """:func:`_summary` per worker: batches in order, candidates, greatest and smallest
    arrivals (the input of :func:`windowing.kernel.worker_timelines`)."""
    out: dict[Any, tuple[np.ndarray, ...]] = {}
    if not summary.num_rows:
        return out
    enc = pc.dictionary_encode(summary["__w"].combine_chunks(), null_encoding="encode")
    ids = enc.indices.to_numpy(zero_copy_only=False)
    cols = [summary[c].to_numpy() for c in ("__batch", "cand", "maxarr", "minarr")]
    for i, wv in enumerate(enc.dictionary.to_pylist()):
        sel = np.flatnonzero(ids == i)
        sel = sel[np.argsort(cols[0][sel], kind="stable")]
        out[K.hashable(wv)] = tuple(c[sel].astype(np.int64) for c in cols)
    return out


#: ``spark.rewindow.commits``: where the workers' commits are summed up: ``auto``
#: (default: :func:`windowing.placement.plan_tasks`), ``tasks`` (every worker whole in a
#: task) or ``driver`` (one Spark aggregation per (worker, batch), collected to the driver
#: and shipped to every task: the earlier design, kept to compare).
COMMITS_CONF = "spark.rewindow.commits"


def _commits_mode(spark: SparkSession) -> str:
    """The :data:`COMMITS_CONF` setting, checked."""
    mode = (spark.conf.get(COMMITS_CONF, "auto") or "auto").strip().lower()
    if mode not in ("auto", "tasks", "driver"):
        raise ConfigError(f"{COMMITS_CONF}: {mode!r} is not one of auto, tasks, driver")
    return mode


# --------------------------------------------------------------------------- phase 3


def _arrow_types(spark: SparkSession, df: DataFrame) -> dict[str, pa.DataType]:
    tz = spark.conf.get("spark.sql.session.timeZone")
    return {f.name: to_arrow_type(f.dataType, timezone=tz) for f in df.schema.fields}


#: Rows per Arrow IPC blob handed back by a kernel task (bounded, far below Spark's 2 GB).
BLOB_ROWS = 262_144
#: Rows of an output per written file (and write task), at most.
ROWS_PER_FILE = 1_000_000


def _write_tasks(rows: int, most: int, slots: int | None) -> int:
    """Write tasks for an output of ``rows`` rows: one per :data:`ROWS_PER_FILE` rows, at
    most ``most``; more tasks than task ``slots`` are rounded up to whole waves (3 tasks on
    2 slots take two full waves; 4 tasks, each three quarters the size, two shorter ones)."""
    n = max(1, -(-rows // ROWS_PER_FILE))
    if slots and n > slots:
        n = -(-n // slots) * slots
    return min(n, max(1, most))


def _task_slots(spark: SparkSession) -> int | None:
    """How many tasks the session runs at once (:func:`windowing.placement.task_slots`)."""
    settings = {k: spark.conf.get(k, None) for k in placement.SLOT_SETTINGS}
    try:
        parallelism: int | None = int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        parallelism = None
    try:
        return placement.task_slots(settings, parallelism)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def output_schemas(spec: K.Spec) -> dict[str, pa.Schema]:
    return {"aggregates": spec.aggregates_schema(), "late_events": spec.late_schema(), "state": spec.state_schema()}


def _spark_schema(schema: pa.Schema) -> StructType:
    return from_arrow_schema(schema)


def _blob(table: pa.Table, compression: str | None = None) -> bytes:
    """``table`` as an Arrow IPC stream (``compression``: ``lz4`` or ``zstd`` buffers; the
    reader needs no option)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression) if compression else None
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return cast(bytes, sink.getvalue().to_pybytes())


def decode_blob(data: object) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data) if not isinstance(data, pa.Buffer) else data).read_all()


#: The kernel task's extra columns: which side output a row carries, and its IPC blob.
SIDE_OUTPUT, SIDE_DATA = "__side_output", "__side_data"
#: Side outputs of a task's lateness values: collected with the counters (the task had at
#: most its share of :data:`DRIVER_PERCENTILES_MAX` late events), or held for a second look.
LATENESS_COLLECTED, LATENESS_HELD = "lateness", "lateness_held"


def task_table(batches: Iterable[pa.RecordBatch], names: Mapping[str, str]) -> pa.Table | None:
    """A task's rows as one table, the columns under their real names again (see
    :func:`kernel_input`); None for a task without rows."""
    batches = list(batches)
    if not batches or not sum(b.num_rows for b in batches):
        return None
    table = pa.Table.from_batches(batches)
    return table.rename_columns([names.get(n, n) for n in table.column_names])


class KernelTask:
    """What each Spark task runs over its partition: the kernel, then its outputs as
    ``(SIDE_OUTPUT, SIDE_DATA)`` rows: an output's name and an Arrow IPC blob of at most
    :data:`BLOB_ROWS` of its rows (the counters and the late events' lateness too).

    A partition of more than ``chunk_events`` rows is replayed a bounded piece at a time
    (:mod:`windowing.chunks`): same rows, memory bounded by the setting."""

    def __init__(
        self,
        spec: K.Spec,
        timelines: Mapping[Any, K.Timeline],
        flush: bool,
        names: Mapping[str, str] | None,
        schemas: Mapping[str, pa.Schema],
        lateness_share: int = 0,
        carried: Mapping[Any, dict[str, Any]] | None = None,
        chunk_events: int | None = None,
    ) -> None:
        self.spec, self.timelines, self.flush = spec, timelines, flush
        #: The carried worker rows, when each task holds whole workers and builds their
        #: timelines itself (None: ``timelines`` has every worker's).
        self.carried = carried
        self.lateness_share = lateness_share
        self.names = names or {}
        self.schemas = schemas
        self.chunk_events = chunk_events or placement.EVENTS_PER_CHUNK
        self.schema = pa.schema([pa.field(SIDE_OUTPUT, pa.string()), pa.field(SIDE_DATA, pa.binary())])

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        source = chunks.TaskInput(batches, self.names, self.spec, self.chunk_events, summarise=self.carried is not None)
        try:
            if source.table is not None:
                yield from self._in_one_go(source)
            elif source.spilled:
                yield from self._in_pieces(source)
            elif source.timeline_rows and self.carried is not None:
                # Only a spread worker's timeline came (none of its keys hashed here): the
                # worker's state row is still this task's to write, if it is the first.
                _, workers = self._task_timelines(source, {})
                if workers is not None:
                    side = _SideBlobs()
                    side.add("workers", workers)
                    yield side.batch(self.schema)
        finally:
            source.close()

    def _task_timelines(
        self, source: chunks.TaskInput, own: Mapping[Any, tuple[np.ndarray, ...]]
    ) -> tuple[dict[Any, K.Timeline], bytes | None]:
        """The timelines of the task's workers, with the given ones: whole workers' from
        their commits in the task's own events (``own``), spread workers' from the timeline
        rows; and the state rows of the workers this task writes, as a blob (None: none)."""
        assert self.carried is not None
        spread, owned = source.timeline_commits(self.spec)
        commits = {**{w: c for w, c in own.items() if w not in spread}, **spread}
        timelines, rows = K.worker_timelines(
            self.spec.pipeline, commits, {w: s for w, s in self.carried.items() if w in commits}
        )
        wcol = self.spec.worker_col
        rows = [r for r in rows if (w := K.hashable(r[wcol] if wcol else 0)) not in spread or w in owned]
        blob = _blob(pa.Table.from_pylist(rows, schema=self.schemas["state"])) if rows else None
        return {**self.timelines, **timelines}, blob

    def _in_one_go(self, source: chunks.TaskInput) -> Iterator[pa.RecordBatch]:
        table = cast(pa.Table, source.table)
        source.table = None
        timelines: Mapping[Any, K.Timeline] = self.timelines
        side = _SideBlobs()
        if self.carried is not None:
            table = K.with_event_columns(table, self.spec)
            timelines, workers = self._task_timelines(source, K.commit_summary(table, self.spec))
            if workers is not None:
                side.add("workers", workers)
        out = K.process(table, self.spec, timelines, self.flush, source.window_slice)
        del table
        self._add_outputs(side, out, with_state=True, window_slice=source.window_slice)
        side.add("counters", _blob(_counters_table(out.counters_by_worker, side.rows)))
        yield side.batch(self.schema)

    def _in_pieces(self, source: chunks.TaskInput) -> Iterator[pa.RecordBatch]:
        """The spilled task: each piece's outputs handed back as soon as it is replayed."""
        timelines: Mapping[Any, K.Timeline] = self.timelines
        side = _SideBlobs()
        if self.carried is not None:
            timelines, workers = self._task_timelines(source, source.commits)
            if workers is not None:
                side.add("workers", workers)
        counters: list[dict[str, dict[str, int]]] = []
        seen: set[Any] = set()
        for out, last, keys in chunks.replay_in_pieces(source, self.spec, timelines, self.flush):
            self._add_outputs(side, out, with_state=last, window_slice=source.window_slice)
            counters.append(out.counters_by_worker)
            seen |= keys
            yield side.batch(self.schema)
            side = _SideBlobs(side.rows)
        side.add("counters", _blob(_counters_table(chunks.merged_counters(counters, seen, self.spec), side.rows)))
        yield side.batch(self.schema)

    def _add_outputs(
        self, side: _SideBlobs, out: K.KernelOutput, with_state: bool, window_slice: K.WindowSlice | None = None
    ) -> None:
        if out.late.num_rows:  # the late events' lateness alone, for percentiles in the driver
            side.add(
                LATENESS_COLLECTED if out.late.num_rows <= self.lateness_share else LATENESS_HELD,
                _blob(out.late.select(["lateness_ms"])),
            )
        outputs = [("aggregates", out.aggregates), ("late_events", out.late)]
        if with_state:
            state = out.state if window_slice is None else slices.shed_shared(out.state, window_slice)
            outputs.append(("state", state))
        for name, table in outputs:
            result = table.cast(self.schemas[name])
            side.rows[name] = side.rows.get(name, 0) + result.num_rows
            for start in range(0, result.num_rows, BLOB_ROWS):
                side.add(name, _blob(result.slice(start, BLOB_ROWS)))


class _SideBlobs:
    """A task's ``(SIDE_OUTPUT, SIDE_DATA)`` rows under way, and its output row counts."""

    def __init__(self, rows: dict[str, int] | None = None) -> None:
        self.names: list[str] = []
        self.blobs: list[bytes] = []
        self.rows: dict[str, int] = rows if rows is not None else {}

    def add(self, name: str, blob: bytes) -> None:
        self.names.append(name)
        self.blobs.append(blob)

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array(self.names, pa.string()), pa.array(self.blobs, pa.binary())], schema=schema
        )


def _counters_table(by_worker: Mapping[str, Mapping[str, int]], rows: Mapping[str, int]) -> pa.Table:
    """A task's counters as rows (worker, name, value): the kernel's per worker label
    (windowing.metrics.COUNTERS, zeros left out) and the task's output row counts
    (``rows_<output>``, worker null)."""
    out: list[tuple[str | None, str, int]] = [
        (worker, name, v) for worker, counters in by_worker.items() for name, v in counters.items() if v
    ]
    out += [(None, f"rows_{name}", rows.get(name, 0)) for name in ("aggregates", "late_events", "state")]
    worker, name, value = zip(*out)
    return pa.table(
        {
            "worker": pa.array(worker, pa.string()),
            "name": pa.array(name, pa.string()),
            "value": pa.array(value, pa.int64()),
        }
    )


def _sum_counters(tables: list[pa.Table]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The tasks' counters summed: in total, and per worker label (every key is in one
    task, so the sums are the replay's)."""
    if not tables:
        return {}, {}
    summed = pa.concat_tables(tables).group_by(["worker", "name"]).aggregate([("value", "sum")]).to_pylist()
    counts: dict[str, int] = {}
    by_worker: dict[str, dict[str, int]] = {}
    for r in summed:
        if r["worker"] is not None:
            by_worker.setdefault(r["worker"], {})[r["name"]] = int(r["value_sum"])
        else:
            counts[r["name"]] = counts.get(r["name"], 0) + int(r["value_sum"])
    # A key replayed in slices counts its keys_held and idle flushes as facts, once each.
    by_worker = slices.resolved(by_worker)
    for counters in by_worker.values():
        for name, v in counters.items():
            counts[name] = counts.get(name, 0) + v
    return counts, by_worker


class _DecodeTask:
    """Turns a kernel output's IPC blobs back into its rows (zero-copy Arrow reads)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for data in batch.column(0):
                yield from decode_blob(data.as_buffer()).cast(self.schema).to_batches()


# --------------------------------------------------------------------------- metrics


#: Up to this many late events, lateness percentiles are computed in the driver from the
#: collected values (8 bytes each, through Arrow); beyond it, by a Spark job.
DRIVER_PERCENTILES_MAX = 20_000_000


def _lateness(n: int, late: DataFrame, F: ModuleType, values: np.ndarray | None = None) -> dict[str, Any] | Row:
    """Exact p50/p90/p99 (linear interpolation, as Spark's ``percentile``) and max: in the
    driver from ``values`` (or the late events) up to :data:`DRIVER_PERCENTILES_MAX`, else
    by a Spark job."""
    if not n:
        return {"p": None, "mx": None}
    if n > DRIVER_PERCENTILES_MAX:
        return late.agg(
            F.percentile("lateness_ms", [0.5, 0.9, 0.99]).alias("p"), F.max("lateness_ms").alias("mx")
        ).collect()[0]
    if values is None:
        values = late.select("lateness_ms").toArrow()["lateness_ms"].to_numpy()
    return {"p": np.percentile(values, [50, 90, 99]).tolist(), "mx": int(values.max())}


def _hold(spark: SparkSession, df: DataFrame) -> DataFrame:
    """``df`` persisted for the writes. Held rows are read back once or twice, so Spark's
    in-memory column compression (encoding every value to save memory) is not worth its
    CPU here: it is off while the cache is built (the setting applies at persist time)."""
    with _session_conf(spark, {"spark.sql.inMemoryColumnarStorage.compressed": "false"}):
        return df.persist()


#: Spark's default cap on the bytes of an Arrow batch handed to Python.
_ARROW_BATCH_BYTES_DEFAULT = ("67108864b", "64m", "67108864")
#: The value that turns the cap off: Spark then stops measuring the batch after every row.
_ARROW_BATCH_BYTES_OFF = "2147483647"


def _kernel_job_conf(spark: SparkSession) -> dict[str, str]:
    """Settings for the job that runs the kernel.

    Spark 4 caps each Arrow batch it hands to Python at
    ``spark.sql.execution.arrow.maxBytesPerBatch`` and, to do so, measures the batch after
    every row it adds: at 10 M events that measuring was ~45 % of the JVM time of the
    kernel stage (5 s of 26 s, bench/replay_bench.py at full size). Event rows are small,
    and batches stay bounded by ``maxRecordsPerBatch`` (10,000 rows), so the kernel's
    input goes without the byte cap. A cap the session set itself is kept. (The writes'
    input, Arrow blobs of up to :data:`BLOB_ROWS` rows each, keeps it: it is what bounds
    their batches.)
    """
    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    try:
        current = spark.conf.get(key)
    except Exception:  # noqa: BLE001 - a Spark without the setting (before 4.0): nothing to do
        return {}
    return {key: _ARROW_BATCH_BYTES_OFF} if str(current).strip().lower() in _ARROW_BATCH_BYTES_DEFAULT else {}


@contextmanager
def _session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL settings for the jobs started inside the block, then put back the
    previous values (Spark reads them when a job or a cache is planned)."""
    before = {k: spark.conf.get(k, None) for k in conf}
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def _metrics(
    counters: dict[str, int],
    lateness: Mapping[str, Any] | Row,
    rejected_counts: Mapping[str, int],
    worker_rows: list[dict[str, Any]],
    pipeline: Pipeline,
    by_worker: dict[str, dict[str, int]] | None = None,
) -> replay_metrics.ReplayMetrics:
    """The replay's metrics (docs/semantics.md, "Metrics"): the figures of
    :func:`windowing.metrics.figures` over all workers, rejected rows, the watermark
    reached and lateness percentiles, and the ``voltsp`` block: VoltSP's window metrics
    in total and per worker (``by_worker``: the summed counters per worker label)."""
    at_window_end = Trigger.AT_WINDOW_END in pipeline.triggers
    wm = [r["watermark_ms"] for r in worker_rows if r.get("watermark_ms") is not None]
    return replay_metrics.ReplayMetrics.of(
        pipeline.name,
        replay_metrics.figures(counters, at_window_end),
        rejected_counts,
        # Exact in integers (ms / 1000 as a float is off by microseconds near year 9999).
        (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=int(max(wm)))).isoformat() if wm else None,
        replay_metrics.LatenessPercentiles(
            _num(lateness["p"], 0), _num(lateness["p"], 1), _num(lateness["p"], 2), lateness["mx"]
        ),
        {w: replay_metrics.figures(c, at_window_end) for w, c in (by_worker or {}).items()},
    )


def _num(p: Sequence[float] | None, i: int) -> float | None:
    return None if p is None else float(p[i])
