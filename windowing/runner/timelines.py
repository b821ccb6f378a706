"""Phase 2 of a replay: the workers' commits, and the kernel stage's task plan from them.

Every commit of a worker matters to the kernel: its clock is the emit time of what it
closes, idle detection compares against it, heartbeat ticks fall between commits. The
driver counts the rows per worker (one small aggregation, :func:`worker_commits`) and plans
the kernel stage from them (:mod:`windowing.runner.placement`): tasks holding whole workers
build their timelines from their own events; a worker spread or sliced over several tasks
gets its (worker, batch) summary, summed up by Spark and packed, with its rows
(:func:`split_timeline_rows`), never through the driver. ``spark.rewindow.commits=driver``
(:data:`COMMITS_CONF`) collects the summary to the driver instead (the earlier design, kept
to compare: :func:`summary_timelines`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from windowing import kernel as K
from windowing.config import ConfigError, Pipeline, WatermarkStrategy
from windowing.contract import ARRIVAL_MS_COLUMN, BATCH_COLUMN, EVENT_MS_COLUMN
from windowing.kernel import slices
from windowing.kernel.clocks import worker_timelines
from windowing.kernel.inputs import KB_BATCH, KB_CAND, KB_MAXARR, KB_MAXEV, KEY_BATCH, hashable
from windowing.runner import chunks, placement
from windowing.runner.columns import col, floor_div_expr
from windowing.runner.normalise import REJECT_REASON
from windowing.runner.session import SMALL_JOB_CONF, session_conf
from windowing.storage.errors import naming_bad_files

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass
class WorkerCommits:
    """Phase 2's results: rejected rows per reason (None: the kernel's job counts them, the
    plan being made without a count, :func:`windowing.runner.placement.hashed_plan`), the
    carried worker state by worker, the kernel stage's task plan (None: the (worker, batch)
    summary was collected to the driver, ``spark.rewindow.commits=driver``), the workers'
    timelines built in the driver and their state rows so far (with a hashed plan, every
    carried worker's as if it had no events: a task that has its events builds them
    again, and its rows replace these)."""

    rejected_counts: dict[str, int] | None
    carried: dict[Any, Any]
    plan: placement.TaskPlan | None
    timelines: dict[Any, Any]
    worker_rows: list[dict[str, Any]]


def worker_commits(
    spark: SparkSession,
    pipeline: Pipeline,
    norm: DataFrame,
    worker_state: list[dict[str, Any]],
    inputs: Sequence[str],
    rows_at_most: int | None = None,
) -> WorkerCommits:
    """Phase 2: the workers' commits. Rows per worker (and rejected rows per reason) first;
    from them the kernel stage's plan (:func:`windowing.runner.placement.plan_tasks`): tasks
    holding whole workers build their timelines from their own events, tasks of a worker
    spread over several get its (worker, batch) summary from Spark with their rows. Only
    carried workers without events in this replay get their timelines here. With
    ``spark.rewindow.commits=driver`` the summary is collected and every task gets every
    timeline (kept to compare: the output is the same).

    An input of at most one task's worth of events (``rows_at_most``, from its files'
    footers, up to ``spark.rewindow.eventsPerTask``) is not counted: its workers are
    placed whole by the hash of their value (:func:`windowing.runner.placement.hashed_plan`),
    and the kernel's job counts its rejected rows (``spark.rewindow.commits=hash`` plans
    every input so, ``count`` none)."""
    wcol = pipeline.source.worker
    carried = {hashable(s["worker"]): s for s in worker_state}
    mode = commits_mode(spark)
    events_per_task = placement.int_setting(spark, placement.EVENTS_PER_TASK_CONF, placement.EVENTS_PER_TASK)
    small = rows_at_most is not None and rows_at_most <= events_per_task
    if mode == "hash" or (mode == "auto" and small):
        worker_type = norm.schema[wcol].dataType.typeName() if wcol else None
        most = int(cast(str, spark.conf.get("spark.sql.shuffle.partitions")))  # rows not known: as Spark would
        hashed = placement.hashed_plan(worker_type, placement.session_slots(spark), rows_at_most, most)
        if hashed is not None:
            timelines, worker_rows = worker_timelines(pipeline, {}, carried)
            return WorkerCommits(None, carried, hashed, timelines, worker_rows)
    wexpr = col(wcol) if wcol else F.lit(0)
    with naming_bad_files(inputs):
        folded = _fold(norm, wexpr)
    rejected_counts, worker_events = _folded_counts(folded)
    if mode != "driver":
        sliceable = slices.sliceable(pipeline.window) and placement.slices_on(spark)
        plan = placement.plan_tasks(
            worker_events,
            bool(pipeline.window.keys),
            events_per_task,
            placement.session_slots(spark),
            force_whole=mode == "tasks",
            sliceable=sliceable,
        )
        if plan.spread and sliceable:
            with naming_bad_files(inputs):
                plan = placement.with_hot_keys(plan, placement.hot_keys(pipeline, norm, plan))
        timelines, worker_rows = worker_timelines(
            pipeline, {}, {w: s for w, s in carried.items() if w not in worker_events}
        )
        return WorkerCommits(rejected_counts, carried, plan, timelines, worker_rows)
    cand = (
        F.min(EVENT_MS_COLUMN)
        if pipeline.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME
        else F.max(EVENT_MS_COLUMN)
    )
    with naming_bad_files(inputs):
        summary = _summary(norm, cand, wexpr)
    timelines, worker_rows = summary_timelines(pipeline, summary, worker_state)
    return WorkerCommits(rejected_counts, carried, None, timelines, worker_rows)


def _fold(norm: DataFrame, wexpr: Column) -> pa.Table:
    """Rows per (reject reason, worker ``__w``): one small Spark aggregation, one job."""
    with session_conf(norm.sparkSession, SMALL_JOB_CONF):
        return norm.groupBy(F.col(REJECT_REASON), wexpr.alias("__w")).agg(F.count(F.lit(1)).alias("n")).toArrow()


def _folded_counts(folded: pa.Table) -> tuple[dict[str, int], dict[Any, int]]:
    """Rejected rows per reason, and accepted events per worker, from :func:`_fold`."""
    rejected: dict[str, int] = {}
    per_worker: dict[Any, int] = {}
    for r in folded.to_pylist():
        if r[REJECT_REASON] is None:
            per_worker[hashable(r["__w"])] = per_worker.get(hashable(r["__w"]), 0) + int(r["n"])
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
        .groupBy(wexpr.alias("__w"), F.col(BATCH_COLUMN))
        .agg(
            cand.alias("cand"),
            F.max(ARRIVAL_MS_COLUMN).alias("maxarr"),
            F.min(ARRIVAL_MS_COLUMN).alias("minarr"),
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
    return worker_timelines(pipeline, _commits(summary), {hashable(s["worker"]): s for s in worker_state})


def _commits(summary: pa.Table) -> dict[Any, tuple[np.ndarray, ...]]:
    """:func:`_summary` per worker: batches in order, candidates, greatest and smallest
    arrivals (the input of :func:`windowing.kernel.clocks.worker_timelines`)."""
    out: dict[Any, tuple[np.ndarray, ...]] = {}
    if not summary.num_rows:
        return out
    enc = pc.dictionary_encode(summary["__w"].combine_chunks(), null_encoding="encode")
    ids = enc.indices.to_numpy(zero_copy_only=False)
    cols = [summary[c].to_numpy() for c in (BATCH_COLUMN, "cand", "maxarr", "minarr")]
    for i, wv in enumerate(enc.dictionary.to_pylist()):
        sel = np.flatnonzero(ids == i)
        sel = sel[np.argsort(cols[0][sel], kind="stable")]
        out[hashable(wv)] = tuple(c[sel].astype(np.int64) for c in cols)
    return out


#: ``spark.rewindow.commits``: how the kernel stage is planned and where the workers'
#: commits are summed up: ``auto`` (default: ``hash`` for an input of at most one task's
#: worth of events, by its files' footers; else ``count``), ``count`` (the rows per worker
#: counted first: :func:`windowing.runner.placement.plan_tasks`), ``hash`` (every worker
#: whole, placed by the hash of its value: :func:`windowing.runner.placement.hashed_plan`),
#: ``tasks`` (counted, every worker whole in a task) or ``driver`` (one Spark aggregation
#: per (worker, batch), collected to the driver and shipped to every task: the earlier
#: design, kept to compare).
COMMITS_CONF = "spark.rewindow.commits"
COMMITS_MODES = ("auto", "count", "hash", "tasks", "driver")


def commits_mode(spark: SparkSession) -> str:
    """The :data:`COMMITS_CONF` setting, checked."""
    mode = (spark.conf.get(COMMITS_CONF, "auto") or "auto").strip().lower()
    if mode not in COMMITS_MODES:
        raise ConfigError(f"{COMMITS_CONF}: {mode!r} is not one of {', '.join(COMMITS_MODES)}")
    return mode


def split_timeline_rows(pipeline: Pipeline, norm: DataFrame, plan: placement.TaskPlan) -> DataFrame | None:
    """The spread and sliced workers' commits, one (worker, batch) summary each with the
    watermark candidate and the greatest and smallest arrival (and greatest event time);
    and the hot keys' key-batch rows (:mod:`windowing.kernel.slices`: the key's candidate,
    greatest event and arrival time per batch). Summed up by Spark in the kernel's job,
    never collected, packed once per block of :data:`PACK_BATCHES` batches
    (:class:`windowing.runner.chunks.PackRows`), and the packs sent to each task that needs them
    (:data:`windowing.runner.chunks.PACKED`): every task of the worker (the first writes the
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
    accepted, first, n = placement.placement_columns(accepted, pipeline, split_only)
    accepted = accepted.withColumn("__pfirst", first).withColumn("__pn", n).where(F.col("__pn").isNotNull())
    cand = (
        F.min(EVENT_MS_COLUMN)
        if pipeline.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME
        else F.max(EVENT_MS_COLUMN)
    )
    group = [
        *([col(wcol).alias(_PACK_WORKER)] if wcol else []),
        F.col(BATCH_COLUMN).alias(chunks.TL_BATCH),
        F.col("__pfirst"),
        F.col("__pn"),
    ]
    summary = accepted.groupBy(*group).agg(
        cand.alias(chunks.TL_CAND),
        F.max(ARRIVAL_MS_COLUMN).alias(chunks.TL_MAX),
        F.min(ARRIVAL_MS_COLUMN).alias(chunks.TL_MIN),
        F.max(EVENT_MS_COLUMN).alias(KB_MAXEV),
    )
    packs = _packed(summary, ["__pfirst", "__pn"], chunks.TL_BATCH, pipeline)
    copies = packs.select("*", F.explode(F.sequence(F.lit(0), F.col("__pn") - 1)).alias("__bucket"))
    sliced = bool(plan.sliced)
    packed = copies.select(
        (F.col("__pfirst") + F.col("__bucket")).alias(placement.TASK_COLUMN),
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
                (F.col("__hfirst") + F.col("__bucket")).alias(placement.TASK_COLUMN),
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
    :class:`windowing.runner.chunks.PackRows`), sorted by ``batch``: the same bytes however the
    rows arrived (a map task run again must write the same rows: Spark 4 checks it)."""
    fields = [c for c in rows.columns if c not in header]
    names = {_PACK_WORKER: pipeline.source.worker, **{f"{_PACK_KEY}{i}": k for i, k in enumerate(pipeline.window.keys)}}
    real = [names.get(c) or c for c in fields]
    blocked = rows.withColumn("__block", F.expr(floor_div_expr(batch, PACK_BATCHES)))
    schema = StructType([*[rows.schema[h] for h in header], StructField("__blob", BinaryType())])
    packer = chunks.PackRows(header, fields, real, batch)

    def pack(table: pa.Table) -> pa.Table:  # a function with type hints: how Spark tells the API
        return packer(table)

    return blocked.groupBy(*header, "__block").applyInArrow(pack, schema)


def _pack_header(kind: int, owner: Column, slice_index: Column | None, slices: Column | None) -> Column:
    """A pack as the task reads it (:data:`windowing.runner.chunks.PACKED`)."""

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
    wcol, keys = pipeline.source.worker, pipeline.window.keys
    accepted = placement.with_hot(norm.where(F.col(REJECT_REASON).isNull()), pipeline, plan, how="inner")
    group = [
        *([col(wcol).alias(_PACK_WORKER)] if wcol else []),
        *[col(k).alias(f"{_PACK_KEY}{i}") for i, k in enumerate(keys)],
        F.col(BATCH_COLUMN).alias(KB_BATCH),
        F.col("__hfirst"),
        F.col("__hn"),
    ]
    summary = accepted.groupBy(*group).agg(
        cand.alias(KB_CAND), F.max(EVENT_MS_COLUMN).alias(KB_MAXEV), F.max(ARRIVAL_MS_COLUMN).alias(KB_MAXARR)
    )
    packs = _packed(summary, ["__hfirst", "__hn"], KB_BATCH, pipeline)
    copies = packs.select("*", F.explode(F.sequence(F.lit(0), F.col("__hn") - 1)).alias("__bucket"))
    return copies.select(
        (F.col("__hfirst") + F.col("__bucket")).alias(placement.TASK_COLUMN),
        _pack_header(KEY_BATCH, F.lit(False), F.col("__bucket"), F.col("__hn")),
    )
