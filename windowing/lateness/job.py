"""The lateness analysis on Spark (:func:`lateness`): what lateness cost, and which delay and
watermark strategy to run with.

One Spark job replays a history under every configuration asked for (each watermark
strategy, each lateness mode asked for, each delay of ``--delays``) next to the configured
pipeline itself, with one shuffle: the events go to their key's task once, and each task
replays its keys once per variant through the kernel (:mod:`windowing.lateness.whatif`). Spark then
sums what the tasks found. Every figure is computed as follows (docs/lateness.md):

* **late events under a delay D** (the curves, the recommendation): from the *slack* of
  each event, found by the replay with D = 0: an event is late under D exactly when
  ``D <= slack`` (:mod:`windowing.lateness.curves`), so one pass gives the count under every D;
  the replays at the asked delays count them again, and the two must agree;
* **emission latency** (emit time of the commit that closes a window minus the window's
  end; WATERMARK, IDLE and MAX_DURATION closes) and **closes by reason**: from the replay
  at that delay; exact percentiles in two passes: the tasks' latency histograms (0.27 %
  wide buckets) added up find the bucket of each percentile's rank, then only the
  latencies in those buckets are fetched (:func:`windowing.lateness.latency.latency_figures`);
* **the cost**: the configured replay's late (event, window) pairs per window, with the
  window's last emission and the value a watermark that never makes an event late gives;
* **future skew**: events more than a threshold ahead of their arrival, and the late pairs
  that a replay without them (``source.maxFutureSkew`` at that threshold) does not have,
  each attributed to the skewed event that set the watermark it was checked against.

A partition after the first continues from the previous partition's lateness output
(``--state-in``): its ``state/`` holds every variant's carried state, so each variant is
exactly a replay of the whole history in partitions under that configuration.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from windowing import kernel as K
from windowing import metrics as M
from windowing.config import Pipeline, WatermarkStrategy
from windowing.contract import (
    ARRIVAL_MS_COLUMN,
    BATCH_COLUMN,
    EVENT_MS_COLUMN,
    FUTURE_SKEW,
    IDLE_REASON,
    KEY_KIND,
    KIND_COLUMN,
    WINDOW_KIND,
    WORKER_KIND,
)
from windowing.kernel.phases import task_derived
from windowing.lateness.figures import summarise
from windowing.lateness.latency import latency_figures
from windowing.lateness.options import Counters, LatenessOptions, LatenessResult, LatenessStateError, check_analysable
from windowing.lateness.tables import (
    SKEW_ATTRIBUTED_PAIRS,
    SKEW_CAUSED_EVENTS,
    SKEW_CAUSED_PAIRS,
    SKEWED_EVENTS,
)
from windowing.lateness.variants import SKEWED, VARIANT, Variant, WhatIf
from windowing.lateness.whatif import analyse, output_schemas
from windowing.runner.api import (
    REJECT_REASON,
    SIDE_SCHEMA,
    arrow_types,
    check_input,
    check_workers,
    col,
    collect_side_outputs,
    hold,
    kernel_input,
    normalise,
    reject_committed,
    side_output_batch,
    side_output_blobs,
    side_output_frames,
    spark_schema,
    summary_timelines,
    task_input,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Side outputs of the tasks collected with the first job (small: a few rows per task).
SMALL = ("counters", "slack", "lateness_bins", "latency_coarse", "by_hour", "cost_top")
#: Side outputs decoded into Spark rows (their row counts travel with the counters, under _ROWS).
_LARGE = ("cost", "by_key", "skew_late", "skewed", "state")
_ROWS = ""


# --------------------------------------------------------------------------- the job


def lateness(
    spark: SparkSession,
    pipeline: Pipeline,
    events_df: DataFrame,
    state: DataFrame | None = None,
    options: LatenessOptions = LatenessOptions(),  # noqa: B008 - a frozen dataclass: immutable
    state_figures: Mapping[str, Any] | None = None,
) -> LatenessResult:
    """Replay ``events_df`` under every variant of ``options`` and sum up (module docstring).

    ``state``: the ``state`` DataFrame of the previous partition's lateness output (None:
    the start of the history); ``state_figures``: that output's figures (checked: same
    pipeline configuration and variants, else :class:`LatenessStateError`).
    """
    started = time.monotonic()
    check_analysable(pipeline)
    flush = pipeline.flush_at_end if options.flush_at_end is None else bool(options.flush_at_end)
    variants = options.variants(pipeline)
    _check_state(pipeline, variants, state, state_figures)
    check_input(pipeline, events_df)
    input_cols = list(events_df.columns)
    norm = normalise(pipeline, events_df)
    check_workers(spark)
    all_types = arrow_types(spark, events_df)
    input_types = {c: all_types[c] for c in input_cols}
    full = variants[0]
    worker_rows = _worker_state(spark, pipeline, state)
    if worker_rows.get(full.label):
        norm = reject_committed(spark, pipeline, norm, worker_rows[full.label])
    threshold = options.future_skew_ms if any(v.skew_free for v in variants) else None
    skewed = (
        (F.col(EVENT_MS_COLUMN) - F.col(ARRIVAL_MS_COLUMN) > F.lit(threshold))
        if threshold is not None
        else F.lit(False)
    )
    norm = norm.withColumn(SKEWED, skewed)

    wexpr = col(pipeline.source.worker) if pipeline.source.worker else F.lit(0)
    stats = [
        F.min(EVENT_MS_COLUMN).alias("cand_min"),
        F.max(EVENT_MS_COLUMN).alias("cand_max"),
        F.max(ARRIVAL_MS_COLUMN).alias("maxarr"),
        F.min(ARRIVAL_MS_COLUMN).alias("minarr"),
        F.count(F.lit(1)).alias("n"),
    ]
    # Skewed and other events apart (for the skew-free timelines): one more grouping column
    # costs less than conditional aggregates (docs/lateness.md).
    summary = (
        norm.groupBy(F.col(REJECT_REASON), wexpr.alias("__w"), F.col(BATCH_COLUMN), F.col(SKEWED)).agg(*stats).toArrow()
    )
    rejected = _rejected_counts(summary)
    timelines, new_workers = strategy_timelines(pipeline, variants, summary, worker_rows)
    wi = WhatIf(pipeline, variants, input_types, timelines, flush, threshold, options.worst)

    full_spec = wi.spec(full)
    events = norm.where(F.col(REJECT_REASON).isNull()).drop(REJECT_REASON, *task_derived(full_spec))
    state_rows = _state_rows(pipeline, wi, state, events_df) if state is not None else None
    kernel_in, names, nparts = kernel_input(spark, pipeline, events, state_rows)
    schemas = output_schemas(wi)
    task = _Task(wi, names, schemas)
    held = hold(spark, kernel_in.mapInArrow(task, spark_schema(task.schema)))
    try:
        small = _collect_small(spark, held, schemas)
        counters = _sum_counters(small["counters"])
        rows = counters.pop(_ROWS, {})
        # One decoding task per 1 M rows of an output (as a replay writes its outputs).
        frames = side_output_frames(spark, held, {name: schemas[name] for name in _LARGE}, rows, nparts)
        latency = latency_figures(spark, side_output_blobs(held, "latency"), small["latency_coarse"])
        figures, tables = summarise(
            spark,
            pipeline,
            options,
            variants,
            counters,
            small["slack"],
            latency,
            frames["cost"],
            small["cost_top"],
            frames["by_key"],
            small["by_hour"],
            _sum_bins(small["lateness_bins"]),
            rejected,
            {"future_skew": frames["skewed"], "skew_late": frames["skew_late"]},
            _skew_figures(pipeline, wi, counters, rejected),
        )
        tables["state"] = _state_frame(spark, pipeline, wi, frames["state"], new_workers, schemas["state"])
    except BaseException:
        held.unpersist()
        raise
    figures["seconds"] = round(time.monotonic() - started, 3)
    return LatenessResult(tables, figures, [held])


class _Task:
    """What each Spark task runs: :func:`windowing.lateness.whatif.analyse` over its keys, its
    tables handed back as ``(SIDE_OUTPUT, SIDE_DATA)`` rows (Arrow IPC blobs)."""

    def __init__(self, wi: WhatIf, names: dict[str, str], schemas: dict[str, pa.Schema]):
        self.wi, self.names, self.schemas = wi, names, schemas
        self.schema = SIDE_SCHEMA

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = task_input(batches, self.names)
        if table is None:
            return
        result = analyse(table, self.wi)
        sizes = [(_ROWS, name, getattr(result, name).num_rows) for name in _LARGE]
        result.counters = pa.concat_tables(
            [
                result.counters,
                pa.table(
                    [pa.array(c, t) for c, t in zip(zip(*sizes), (pa.string(), pa.string(), pa.int64()))],
                    schema=self.schemas["counters"],
                ),
            ]
        )
        outputs = ((name, getattr(result, name).cast(self.schemas[name])) for name in (*SMALL, "latency", *_LARGE))
        yield side_output_batch(outputs, keep_empty=("counters",))


def _collect_small(spark: SparkSession, held: DataFrame, schemas: Mapping[str, pa.Schema]) -> dict[str, pa.Table]:
    """The tasks' small side outputs (:data:`SMALL`), collected to the driver, one table each.
    This action runs the tasks (under the kernel job's settings); the large outputs are
    decoded from the cached blobs afterwards."""
    pieces = collect_side_outputs(spark, held, SMALL)
    return {name: _concat(pieces.get(name, []), schemas[name]) for name in SMALL}


def _rejected_counts(summary: pa.Table) -> dict[str, int]:
    rej = summary.filter(summary[REJECT_REASON].is_valid()).group_by(REJECT_REASON).aggregate([("n", "sum")])
    return {r[REJECT_REASON]: int(r["n_sum"]) for r in rej.to_pylist()}


#: The (worker, batch) summary's statistics and how two rows of one batch combine.
SUMMARY_STATS = (("cand_min", "min"), ("cand_max", "max"), ("maxarr", "max"), ("minarr", "min"), ("n", "sum"))


def batch_summaries(summary: pa.Table) -> dict[bool, pa.Table]:
    """The accepted rows of the (worker, batch) summary, over all events (False) and
    without the events flagged as skewed (True): ``summary`` has one row per (reason,
    worker ``__w``, batch, :data:`windowing.lateness.variants.SKEWED`) with both candidates
    (``cand_min``, ``cand_max``), the arrival bounds and the count (:data:`SUMMARY_STATS`);
    a batch of skewed events only is no commit of the skew-free replay."""
    ok = summary.filter(pc.is_null(summary[REJECT_REASON]))
    skewed = pc.fill_null(ok[SKEWED], False)
    every = ok
    if pc.any(skewed).as_py():  # a batch with skewed and other events: its two rows as one
        both = ok.group_by(["__w", BATCH_COLUMN], use_threads=False).aggregate(list(SUMMARY_STATS))
        every = pa.table(
            {c: both[f"{c}_{how}"] if how else both[c] for c, how in (("__w", ""), (BATCH_COLUMN, ""), *SUMMARY_STATS)}
        )
    return {False: every, True: ok.filter(pc.invert(skewed))}


def timeline_summary(rows: pa.Table, strategy: WatermarkStrategy) -> pa.Table:
    """The (worker, batch) summary :func:`windowing.runner.timelines.summary_timelines` reads, for
    one strategy, from one of :func:`batch_summaries`."""
    cand = "cand_min" if strategy is WatermarkStrategy.MIN_EVENT_TIME else "cand_max"
    return pa.table(
        {
            REJECT_REASON: pa.nulls(rows.num_rows, pa.string()),
            "__w": rows["__w"],
            BATCH_COLUMN: rows[BATCH_COLUMN],
            "cand": rows[cand],
            "maxarr": rows["maxarr"],
            "minarr": rows["minarr"],
            "n": rows["n"],
        }
    )


def strategy_timelines(
    pipeline: Pipeline,
    variants: Sequence[Variant],
    summary: pa.Table,
    worker_rows: Mapping[str, list[dict[str, Any]]],
) -> tuple[dict[tuple[str, bool], dict[Any, K.Timeline]], dict[str, list[dict[str, Any]]]]:
    """Each worker's timeline per (strategy, skew_free), at delay 0, and each variant's new
    worker state rows."""
    out: dict[tuple[str, bool], dict[Any, K.Timeline]] = {}
    rows_by: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    batches = batch_summaries(summary)
    for v in variants:
        key = (v.strategy.value, v.skew_free)
        if key in out:
            continue
        p = Variant(v.strategy, v.lateness, 0, full=True, skew_free=v.skew_free).pipeline(pipeline)
        timelines, rows = summary_timelines(
            p, timeline_summary(batches[v.skew_free], v.strategy), worker_rows.get(v.label, [])
        )
        out[key] = timelines
        rows_by[key] = rows
    new_workers = {v.label: rows_by[(v.strategy.value, v.skew_free)] for v in variants}
    return out, new_workers


# --------------------------------------------------------------------------- state


def _check_state(
    pipeline: Pipeline, variants: Sequence[Variant], state: DataFrame | None, state_figures: Mapping[str, Any] | None
) -> None:
    if state is None:
        return
    if state_figures is None:
        raise LatenessStateError("--state-in: not a lateness output (no figures in its commit record)")
    if state_figures.get("fingerprint") != pipeline.fingerprint():
        raise LatenessStateError(
            f"--state-in: written for another configuration of pipeline {state_figures.get('pipeline')!r} "
            f"(fingerprint {state_figures.get('fingerprint')}, this one {pipeline.fingerprint()}); "
            "start from the first partition"
        )
    have, want = list(state_figures.get("variants", [])), [v.label for v in variants]
    if have != want:
        raise LatenessStateError(
            "--state-in: the previous partition was analysed with other --delays, --lateness-modes or "
            f"--future-skew (variants {have}, now {want}); use the same ones along a chain of partitions, "
            "or start from the first partition"
        )


def _worker_state(spark: SparkSession, pipeline: Pipeline, state: DataFrame | None) -> dict[str, list[dict[str, Any]]]:
    """Worker rows of the carried state, per variant (as ``engine._split_state`` reads them)."""
    if state is None:
        return {}
    wcol = pipeline.source.worker
    out: dict[str, list[dict[str, Any]]] = {}
    for r in state.where(F.col("state_kind") == WORKER_KIND).collect():
        out.setdefault(r["variant"], []).append(
            {
                "worker": (r[wcol] if wcol else 0),
                "batch": r["batch"],
                "watermark_ms": r["watermark_ms"],
                "clock_ms": r["clock_ms"],
            }
        )
    return out


def _state_rows(pipeline: Pipeline, wi: WhatIf, state: DataFrame, events_df: DataFrame) -> DataFrame:
    """Key, window and emitted rows of the carried state, shaped as kernel input rows."""
    types = dict(events_df.dtypes)
    keep = list(pipeline.id_columns)
    kind = (
        F.when(F.col("state_kind") == KEY_KIND, F.lit(K.STATE_KEY))
        .when(F.col("state_kind") == WINDOW_KIND, F.lit(K.STATE_WINDOW))
        .otherwise(F.lit(K.STATE_EMITTED))
        .cast("byte")
    )
    cols = [col(c).cast(types[c]).alias(c) for c in keep]
    cols += [
        col(c).alias(K.STATE_PREFIX + c) for c in state.columns if c not in keep and c not in ("fingerprint", "variant")
    ]
    return state.where(F.col("state_kind") != WORKER_KIND).select(
        *cols, kind.alias(KIND_COLUMN), F.col("variant").alias(VARIANT)
    )


# --------------------------------------------------------------------------- sums


def _skew_figures(pipeline: Pipeline, wi: WhatIf, counters: Counters, rejected: Mapping[str, int]) -> dict[str, Any]:
    """Future skew in numbers: the events listed, the late events and pairs they caused
    (late in the configured replay, not in the skew-free one; :func:`windowing.lateness.tables.skew`),
    and the configured replay's figures without them (late events, IDLE closes)."""
    base = {
        "threshold_ms": wi.skew_threshold_ms,
        "rejected_by_max_future_skew": rejected.get(FUTURE_SKEW, 0),
        "max_future_skew_ms": pipeline.source.max_future_skew_ms,
    }
    fc = counters.get(wi.full.label, {})
    free = next((v for v in wi.variants if v.skew_free), None)
    if wi.skew_threshold_ms is None or free is None:
        return {**base, "skewed_events": 0, "late_events_caused": 0, "late_event_windows_caused": 0}
    sc = counters.get(free.label, {})
    return {
        **base,
        "skewed_events": fc.get(SKEWED_EVENTS, 0),
        "late_events_caused": fc.get(SKEW_CAUSED_EVENTS, 0),
        "late_event_windows_caused": fc.get(SKEW_CAUSED_PAIRS, 0),
        "late_event_windows_attributed": fc.get(SKEW_ATTRIBUTED_PAIRS, 0),
        "late_events_without_skewed": sc.get(M.LATE_EVENTS, 0),
        "idle_closes": fc.get(M.CLOSED_PREFIX + IDLE_REASON, 0),
        "idle_closes_without_skewed": sc.get(M.CLOSED_PREFIX + IDLE_REASON, 0),
    }


def _state_frame(
    spark: SparkSession,
    pipeline: Pipeline,
    wi: WhatIf,
    state_rows: DataFrame,
    new_workers: Mapping[str, list[dict[str, Any]]],
    schema: pa.Schema,
) -> DataFrame:
    """The carried state of every variant: the tasks' key and window rows, the worker rows."""
    rows = []
    for label, workers in new_workers.items():
        v = next(x for x in wi.variants if x.label == label)
        fp = v.pipeline(pipeline).fingerprint()
        for r in workers:
            rows.append({**r, "variant": label, "fingerprint": fp})
    if not rows:
        return state_rows
    workers = pa.Table.from_pylist(rows, schema=schema)
    return state_rows.unionByName(spark.createDataFrame(workers.to_pylist(), spark_schema(schema)))


def _sum_counters(table: pa.Table) -> dict[str, dict[str, int]]:
    """(variant, name, value) rows summed: each variant's counters."""
    out: dict[str, dict[str, int]] = {}
    for label, name, value in zip(*(table[c].to_pylist() for c in ("variant", "name", "value"))):
        mine = out.setdefault(label, {})
        mine[name] = mine.get(name, 0) + int(value)
    return out


def _sum_bins(bins: pa.Table) -> list[dict[str, int]]:
    acc: dict[int, list[int]] = {}
    for upper, pairs, events in zip(*(bins[c].to_pylist() for c in ("upper_ms", "pairs", "events"))):
        a = acc.setdefault(int(upper), [0, 0])
        a[0] += int(pairs)
        a[1] += int(events)
    order = sorted(acc, key=lambda u: (u < 0, u))  # the open bin (-1) last
    return [{"upper_ms": u, "pairs": acc[u][0], "events": acc[u][1]} for u in order]


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
