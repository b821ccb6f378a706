"""Run a replay on Spark: normalise, build worker timelines, run the kernel per key.

Phases (see docs/architecture.md):

1. **Normalise** in Spark expressions (:mod:`windowing.runner.normalise`): ``arrival_ms``,
   ``event_ms``, the batch and a rejection reason for rows that cannot be processed.
2. **Worker timelines** (:mod:`windowing.runner.timelines`): each worker's global watermark
   and clock after every commit, from its watermark candidates and arrival maxima per
   batch. The kernel stage is planned from the rows per worker
   (:mod:`windowing.runner.placement`): tasks holding whole workers build them from their
   own events; a worker spread over several tasks gets its (worker, batch) summary from
   Spark with its rows.
3. **Per-key kernel** (:mod:`windowing.runner.tasks`): events and carried state rows go to
   their planned tasks, and each task runs :func:`windowing.kernel.process` through
   ``mapInArrow``: many keys per call, vectorised with NumPy.
4. **Outputs**: emitted windows, late events, rejected rows, the new state, and the
   metrics, built here from the tasks' counters.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from windowing import kernel as K
from windowing import metrics as replay_metrics
from windowing import prewindow
from windowing.config import Pipeline, Trigger
from windowing.contract import EVENT_MS_COLUMN
from windowing.kernel import slices
from windowing.kernel.inputs import hashable, task_derived
from windowing.runner import placement
from windowing.runner.columns import arrow_types, col, spark_schema
from windowing.runner.normalise import (
    REJECT_REASON,
    check_columns,
    check_late_columns,
    normalise,
    reject_committed,
    split_state,
)
from windowing.runner.session import check_workers, session_conf
from windowing.runner.tasks import (
    LATENESS_COLLECTED,
    LATENESS_HELD,
    REJECTED_COUNTER,
    SIDE_DATA,
    SIDE_OUTPUT,
    DecodeTask,
    KernelTask,
    decode_blob,
    hold,
    kernel_job_conf,
    output_schemas,
    write_tasks,
)
from windowing.runner.timelines import WorkerCommits, commits_mode, split_timeline_rows, worker_commits
from windowing.storage.errors import naming_bad_files
from windowing.storage.inputs import note_rows_at_most, rows_at_most
from windowing.storage.lake import is_connect
from windowing.storage.outputs import ReplayOutputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

    from windowing.storage.manifest import StateSummary


@dataclass(frozen=True, eq=False)
class ReplayResult(ReplayOutputs):
    """What one replay produced: its :class:`~windowing.storage.outputs.ReplayOutputs`.

    ``aggregates``, ``late_events`` and ``state`` are views of the kernel's output, which
    Spark holds (persisted) from the one kernel pass; ``rejected`` is a lazy view of the
    input. Write them with :func:`windowing.storage.outputs.write_outputs`;
    :meth:`unpersist` releases the kernel's output. A result is also a context manager
    that releases it on leaving (``with replay(...) as result: ...``, as Spark's own
    ``DataFrame.persist``/``unpersist`` pair is used), and a result dropped without either
    is released when Python collects it: a long session (a notebook, a service, a year of
    partitions) does not pile up cached outputs until the driver runs out of memory.
    """

    metrics: replay_metrics.ReplayMetrics
    _persisted: DataFrame | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._persisted is not None:
            # Holds the DataFrame, not the result: collected with the result, it releases the output.
            release = weakref.finalize(self, release_held, self._persisted)
            release.atexit = False  # the JVM may be gone at exit; Spark frees everything then anyway
            object.__setattr__(self, "_release", release)

    def unpersist(self) -> None:
        """Release the kernel's output Spark holds (the first call; later ones do nothing)."""
        release = self.__dict__.get("_release")
        if release is not None:
            release()  # a finalizer runs once: later calls, and collection, do nothing
        object.__setattr__(self, "_persisted", None)  # frozen: the one field that changes, once

    def __enter__(self) -> "ReplayResult":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpersist()


def release_held(persisted: DataFrame) -> None:
    """Unpersist a dropped result's kernel output; a session already stopped has nothing to free."""
    try:
        persisted.unpersist()
    except Exception:  # noqa: BLE001 - the session or its JVM is gone: nothing is held any more
        pass


def replay(
    spark: SparkSession,
    pipeline: Pipeline,
    events_df: DataFrame,
    state: DataFrame | None = None,
    flush_at_end: bool | None = None,
    *,
    state_summary: StateSummary | None = None,
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
        state_summary: ``state``'s fingerprints and worker rows, when the caller has them
            (``Staged.state_summary`` of the run that wrote it: the partition chain); else
            a small Spark job reads them from ``state``.

    Returns:
        :class:`ReplayResult` with ``aggregates``, ``late_events``, ``rejected`` and
        ``state`` DataFrames and its ``metrics``
        (:class:`windowing.metrics.ReplayMetrics`).

    Raises:
        ConfigError: a configured column is missing or has an unusable type, or an input
            column has the name of a column late_events adds.
        StateMismatchError: ``state`` was written under another configuration.
        WorkerEnvironmentError: Spark's Python workers cannot run the kernel (see
            :func:`windowing.runner.session.check_workers`).
    """
    flush = pipeline.flush_at_end if flush_at_end is None else bool(flush_at_end)
    # source.derive's columns, every expression analysed against the schema before any job;
    # as many rows as read (the filter marks its rows in normalise, counted with the rejected).
    events_df = note_rows_at_most(prewindow.derive(pipeline.source, events_df), rows_at_most(events_df))
    input_cols = list(events_df.columns)
    norm = _checked_input(spark, pipeline, events_df)
    worker_state, key_state = split_state(spark, pipeline, state, events_df, state_summary)
    if worker_state:
        norm = reject_committed(spark, pipeline, norm, worker_state)
    inputs = events_df.inputFiles()
    commits = worker_commits(spark, pipeline, norm, worker_state, inputs, rows_at_most(events_df))
    kernel = _launch_kernel(spark, pipeline, events_df, norm, input_cols, key_state, commits, flush)
    try:
        side = _collect_side_outputs(kernel, spark, pipeline, inputs, commits.worker_rows)
    except BaseException:
        kernel.out.unpersist()
        raise
    rejected_counts = dict(commits.rejected_counts if commits.rejected_counts is not None else side.rejected_counts)
    filtered_rows = rejected_counts.pop(prewindow.FILTERED, 0)
    aggregates, late, state_out = _datasets(spark, kernel, side)
    rejected = rejected_rows(norm, input_cols, rejected_counts)
    metrics = build_metrics(
        side.counts,
        lateness_percentiles(side.counts.get("late", 0), late, F, side.lateness_ms),
        rejected_counts,
        side.worker_rows,
        pipeline,
        side.by_worker,
        filtered_rows,
    )
    return ReplayResult(
        aggregates, late, rejected, state_out, metrics, input_files=tuple(inputs), _persisted=kernel.out
    )


def _checked_input(spark: SparkSession, pipeline: Pipeline, events_df: DataFrame) -> DataFrame:
    """Phase 1: ``events_df`` checked against the pipeline's columns and normalised
    (:func:`normalise`), once the session is set for the replay and its Python workers
    are known to run rewindow."""
    check_columns(pipeline, events_df)
    check_late_columns(pipeline, events_df)
    norm = normalise(pipeline, events_df)
    commits_mode(spark)
    # After every check that runs no job; before the first: one tiny job, once per session,
    # so that workers without rewindow's packages give a clear error, not a worker traceback.
    check_workers(spark)
    return norm


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
    commits: WorkerCommits,
    flush: bool,
) -> _Kernel:
    """Phase 3: the kernel, per partition of (worker, key), as a held DataFrame (lazy)."""
    types = arrow_types(spark, events_df)
    spec = K.Spec(pipeline=pipeline, input_types={c: types[c] for c in input_cols})
    # Events go to the tasks as they came; the tasks compute the internal columns they can
    # (kernel.inputs.task_derived) rather than have them shuffled and converted to Arrow.
    # A sliced worker's events are placed by window, from their event time: kept for them.
    sliced = commits.plan is not None and bool(commits.plan.sliced or commits.plan.hot)
    derived = task_derived(spec) - ({EVENT_MS_COLUMN} if sliced else set())
    # Rejected rows not counted yet (a plan made without a count) go to the tasks, which
    # count them by reason and leave them out: no job of their own for those counts.
    count_rejected = commits.rejected_counts is None
    if count_rejected:
        events = norm.drop(*derived)
    else:
        events = norm.where(F.col(REJECT_REASON).isNull()).drop(REJECT_REASON, *derived)
    timeline_rows = split_timeline_rows(pipeline, norm, commits.plan) if commits.plan else None
    kernel_in, names, nparts = placement.kernel_input(spark, pipeline, events, key_state, commits.plan, timeline_rows)
    schemas = output_schemas(spec)
    fn = KernelTask(
        spec,
        commits.timelines,
        flush,
        names,
        schemas,
        lateness_share=DRIVER_PERCENTILES_MAX // max(1, nparts),
        carried=commits.carried if commits.plan else None,
        chunk_events=placement.int_setting(spark, placement.EVENTS_PER_CHUNK_CONF, placement.EVENTS_PER_CHUNK),
        rejected_column=REJECT_REASON if count_rejected else None,
    )
    # The tasks hand their outputs back through Spark, which holds them for the writes: no
    # shared folder between driver and executors. Each output comes back as a few rows
    # carrying an Arrow IPC blob each (SIDE_OUTPUT names which): cheap to hold, and turned
    # into Spark rows of the output's own schema once, by the write (measured: converting
    # the emitted windows to rows before holding them cost a third more at 10 M events).
    return _Kernel(hold(spark, kernel_in.mapInArrow(fn, spark_schema(fn.schema))), schemas, nparts)


@dataclass
class _SideOutputs:
    """What the kernel job brings back to the driver: the counters summed, in total and
    per worker label, every worker state row (sorted by worker), the lateness values
    when the driver computes the percentiles (None: a Spark job does, or none are late),
    and the rejected rows by reason the tasks counted (when they count them)."""

    counts: dict[str, int]
    by_worker: dict[str, dict[str, int]]
    worker_rows: list[dict[str, Any]]
    lateness_ms: np.ndarray | None
    rejected_counts: dict[str, int]


def _collect_side_outputs(
    kernel: _Kernel, spark: SparkSession, pipeline: Pipeline, inputs: Sequence[str], driver_rows: list[dict[str, Any]]
) -> _SideOutputs:
    """Run the kernel: one job brings back the counters, the worker state rows of tasks
    holding whole workers (with ``driver_rows``, those the driver built, but for the
    workers a task wrote), and the lateness values of the tasks that had at most their
    share of :data:`DRIVER_PERCENTILES_MAX` late events."""
    wcol = pipeline.source.worker
    with naming_bad_files(inputs), session_conf(spark, kernel_job_conf(spark)):
        rows = (
            kernel.out.where(F.col(SIDE_OUTPUT).isin("counters", LATENESS_COLLECTED, "workers"))
            .select(SIDE_OUTPUT, SIDE_DATA)
            .collect()
        )
    counters: list[pa.Table] = []
    values: list[np.ndarray] = []
    task_rows: list[dict[str, Any]] = []
    for row in rows:
        table = decode_blob(row[SIDE_DATA])
        if row[SIDE_OUTPUT] == "counters":
            counters.append(table)
        elif row[SIDE_OUTPUT] == "workers":  # worker state rows, from tasks holding whole workers
            task_rows += table.to_pylist()
        else:
            values.append(table["lateness_ms"].to_numpy())
    counts, by_worker = sum_counters(counters)
    counted = [n for n in counts if n.startswith(REJECTED_COUNTER)]  # by the tasks, when they count them
    rejected_counts = {n[len(REJECTED_COUNTER) :]: counts.pop(n) for n in counted}

    def worker(r: dict[str, Any]) -> Any:
        return hashable(r.get(wcol) if wcol else 0)

    written = {worker(r) for r in task_rows}  # a task that had a worker's events wrote its row
    worker_rows = [r for r in driver_rows if worker(r) not in written] + task_rows
    worker_rows.sort(key=lambda r: repr(worker(r)))
    lateness_ms = None
    if 0 < counts.get("late", 0) <= DRIVER_PERCENTILES_MAX:  # 8 bytes a late event, from the held rows
        if sum(len(v) for v in values) < counts["late"]:  # a task had more than its share: fetch the rest
            values += [
                decode_blob(r[SIDE_DATA])["lateness_ms"].to_numpy()
                for r in kernel.out.where(F.col(SIDE_OUTPUT) == LATENESS_HELD).select(SIDE_DATA).collect()
            ]
        lateness_ms = np.concatenate(values)
    return _SideOutputs(counts, by_worker, worker_rows, lateness_ms, rejected_counts)


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
        .coalesce(write_tasks(side.counts.get(f"rows_{name}", 0), kernel.nparts, placement.session_slots(spark)))
        .mapInArrow(DecodeTask(schemas[name]), spark_schema(schemas[name]))
        for name in ("aggregates", "late_events", "state")
    )
    if side.worker_rows:
        state_out = state_out.unionByName(worker_rows_frame(spark, side.worker_rows, schemas["state"]))
    return aggregates, late, state_out


def worker_rows_frame(spark: SparkSession, rows: list[dict[str, Any]], schema: pa.Schema) -> DataFrame:
    """The workers' state rows as a DataFrame of the state's schema: one part of their own
    (a few rows a worker), not one per task slot, which Spark spreads a local table over
    (hundreds of tiny files on a cluster). One partition of an RDD rather than
    ``coalesce(1)``: Spark would merge two single-partition sides of the state's union into
    one part, and the window rows must keep parts of their own (a deleted one is named by
    the manifest check). Over Spark Connect (no RDDs), a local table."""
    data = pa.Table.from_pylist(rows, schema=schema).to_pylist()
    if is_connect(spark):
        return spark.createDataFrame(data, spark_schema(schema))
    return spark.createDataFrame(spark.sparkContext.parallelize(data, 1), spark_schema(schema))


def rejected_rows(norm: DataFrame, input_cols: list[str], rejected_counts: dict[str, int]) -> DataFrame:
    """The rejected rows (a lazy view of the input): its columns and the reason."""
    reason = F.col(REJECT_REASON)
    rejected = norm.where(reason.isNotNull() & (reason != F.lit(prewindow.FILTERED))).select(
        *[col(c) for c in input_cols], REJECT_REASON
    )
    if not rejected_counts:  # known from the summary: spare a scan of the input
        rejected = rejected.limit(0)
    return rejected


# --------------------------------------------------------------------------- metrics


def sum_counters(tables: list[pa.Table]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
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


#: Up to this many late events, lateness percentiles are computed in the driver from the
#: collected values (8 bytes each, through Arrow); beyond it, by a Spark job.
DRIVER_PERCENTILES_MAX = 20_000_000


def lateness_percentiles(
    n: int, late: DataFrame, F: ModuleType, values: np.ndarray | None = None
) -> dict[str, Any] | Row:
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


def build_metrics(
    counters: dict[str, int],
    lateness: Mapping[str, Any] | Row,
    rejected_counts: Mapping[str, int],
    worker_rows: list[dict[str, Any]],
    pipeline: Pipeline,
    by_worker: dict[str, dict[str, int]] | None = None,
    filtered_rows: int = 0,
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
        filtered_rows=filtered_rows,
        live_processors_ignored=getattr(pipeline, "live_processors_ignored", ()),
    )


def _num(p: Sequence[float] | None, i: int) -> float | None:
    return None if p is None else float(p[i])
