"""What lateness cost, and which delay and watermark strategy to run with (``rewindow lateness``).

One Spark job replays a history under every configuration asked for (each watermark
strategy, each lateness mode asked for, each delay of ``--delays``) next to the configured
pipeline itself, with one shuffle: the events go to their key's task once, and each task
replays its keys once per variant through the kernel (:mod:`windowing.whatif`). Spark then
sums what the tasks found. Every figure is computed as follows (docs/lateness.md):

* **late events under a delay D** (the curves, the recommendation): from the *slack* of
  each event, found by the replay with D = 0: an event is late under D exactly when
  ``D <= slack`` (:mod:`windowing.whatif`), so one pass gives the count under every D;
  the replays at the asked delays count them again, and the two must agree;
* **emission latency** (emit time of the commit that closes a window minus the window's
  end; WATERMARK, IDLE and MAX_DURATION closes) and **closes by reason**: from the replay
  at that delay; exact percentiles in two passes: the tasks' latency histograms (0.27 %
  wide buckets) added up find the bucket of each percentile's rank, then only the
  latencies in those buckets are fetched (:func:`latency_figures`);
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

import json
import sys
import time
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from windowing import kernel as K
from windowing import metrics as M
from windowing import whatif as W
from windowing.config import ConfigError, Lateness, Pipeline, WatermarkStrategy, load_pipeline, parse_share
from windowing.contract import CLOSE_REASONS
from windowing.durations import format_duration_ms, human_duration, parse_duration_ms

# The command's defaults live apart so that `rewindow --help` need not import this module.
from windowing.lateness_defaults import DEFAULT_DELAYS as DEFAULT_DELAYS
from windowing.lateness_defaults import DEFAULT_FUTURE_SKEW as DEFAULT_FUTURE_SKEW
from windowing.lateness_defaults import DEFAULT_TARGET_LATE as DEFAULT_TARGET_LATE
from windowing.lateness_defaults import DEFAULT_WORST as DEFAULT_WORST
from windowing.lateness_report import render_report
from windowing.runner import columns, normalise, placement, session, tasks
from windowing.runner.columns import col as _col
from windowing.runner.normalise import FUTURE_SKEW
from windowing.runner.session import check_workers, spark_session
from windowing.runner.timelines import summary_timelines
from windowing.storage.commits import current_commit, new_run_id
from windowing.storage.errors import InputError
from windowing.storage.inputs import check_input_schema, read_events
from windowing.storage.lake import Lake, glob_escape, join
from windowing.storage.manifest import write_manifest
from windowing.storage.outputs import Staged, check_manifest, check_output_target, write_datasets
from windowing.validation import _jsonable

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from pyspark.sql import Column, DataFrame, SparkSession

    from windowing.storage.commits import Commit

#: Each variant's counters (name -> value), by variant label.
Counters = dict[str, dict[str, int]]
#: A (strategy, mode)'s summed slack histogram: slack (ms), events, pairs (numpy arrays).
Histogram = tuple[np.ndarray, np.ndarray, np.ndarray]

#: Parquet datasets of a lateness run (``OUT/runs/<run id>/``), its figures (JSON text)
#: and its report (one HTML file).
TABLES = (
    "curves",
    "slack_histogram",
    "cost",
    "late_by_key",
    "late_by_hour",
    "latency_exact",
    "future_skew",
    "skew_late",
    "state",
)
#: Side outputs of the tasks collected with the first job (small: a few rows per task).
SMALL = ("counters", "slack", "lateness_bins", "latency_coarse", "by_hour", "cost_top")
#: Side outputs decoded into Spark rows (their row counts travel with the counters, under _ROWS).
_LARGE = ("cost", "by_key", "skew_late", "skewed", "state")
_ROWS = ""
FIGURES = "figures.json"
REPORT = "report.html"
KIND = "lateness"


class LatenessStateError(ValueError):
    """``--state-in`` is not a lateness output of this pipeline with these variants."""


@dataclass(frozen=True)
class LatenessOptions:
    """What to compute: delays (ms), the late share to stay under, the lateness modes (None:
    the configured one), the future-skew listing threshold (None: off), flush at end."""

    delays_ms: tuple[int, ...] = (0, 1_000, 5_000, 30_000, 120_000)
    target_late: float = 0.001
    lateness_modes: tuple[Lateness, ...] | None = None
    future_skew_ms: int | None = 10_000
    worst: int = DEFAULT_WORST
    flush_at_end: bool | None = None

    def __post_init__(self) -> None:
        if not self.delays_ms:
            raise ConfigError("--delays: give at least one delay")
        if any(d < 0 for d in self.delays_ms):
            raise ConfigError(f"--delays: {[format_duration_ms(d) for d in self.delays_ms if d < 0]} are negative")
        if not 0 <= self.target_late <= 1:
            raise ConfigError(f"--target-late: {self.target_late!r} is not between 0 and 1")

    def modes(self, pipeline: Pipeline) -> tuple[Lateness, ...]:
        return self.lateness_modes or (pipeline.window.lateness,)

    def variants(self, pipeline: Pipeline) -> tuple[W.Variant, ...]:
        """The configured pipeline (full), then every (strategy, mode, delay) of the grid
        (delay 0 always: it gives the slack), then the skew-free configured pipeline."""
        w = pipeline.window
        configured = (w.watermark_strategy, w.lateness, w.delay_ms)
        out = [W.Variant(*configured, full=True)]
        for mode in self.modes(pipeline):
            for strategy in WatermarkStrategy:
                for d in sorted(set(self.delays_ms) | {0}):
                    if (strategy, mode, d) != configured:
                        out.append(W.Variant(strategy, mode, d))
        if self.future_skew_ms is not None and w.event_time:
            out.append(W.Variant(*configured, skew_free=True))
        return tuple(out)


def parse_delays(text: str) -> tuple[int, ...]:
    """``"0s,1s,5s,30s,2m"`` -> milliseconds, sorted and distinct; errors name ``--delays``."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--delays: {text!r} holds no delay; write them like 0s,1s,5s,30s,2m")
    out = []
    for item in items:
        try:
            out.append(parse_duration_ms(item, "--delays"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return tuple(sorted(set(out)))


def parse_modes(text: str | None) -> tuple[Lateness, ...] | None:
    """``--lateness-modes``: None or ``configured`` (the pipeline's), ``both``, or a list."""
    if text is None or text.strip().lower() == "configured":
        return None
    if text.strip().lower() == "both":
        return tuple(Lateness)
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        try:
            out.append(Lateness(item.upper()))
        except ValueError:
            raise ConfigError(
                f"--lateness-modes: {item!r} is not one of configured, both, {', '.join(m.value for m in Lateness)}"
            ) from None
    return tuple(dict.fromkeys(out)) or None


@dataclass
class LatenessResult:
    """The tables (Spark DataFrames, :data:`TABLES`) and the figures (plain values)."""

    tables: dict[str, DataFrame]
    figures: dict[str, Any]
    _held: list[DataFrame] = field(default_factory=list, repr=False)

    def unpersist(self) -> None:
        for df in self._held:
            df.unpersist()
        self._held = []


# --------------------------------------------------------------------------- the job


def lateness(
    spark: SparkSession,
    pipeline: Pipeline,
    events_df: DataFrame,
    state: DataFrame | None = None,
    options: LatenessOptions = LatenessOptions(),
    state_figures: Mapping[str, Any] | None = None,
) -> LatenessResult:
    """Replay ``events_df`` under every variant of ``options`` and sum up (module docstring).

    ``state``: the ``state`` DataFrame of the previous partition's lateness output (None:
    the start of the history); ``state_figures``: that output's figures (checked: same
    pipeline configuration and variants, else :class:`LatenessStateError`).
    """
    started = time.monotonic()
    flush = pipeline.flush_at_end if options.flush_at_end is None else bool(options.flush_at_end)
    variants = options.variants(pipeline)
    _check_state(pipeline, variants, state, state_figures)
    normalise.check_columns(pipeline, events_df)
    normalise.check_late_columns(pipeline, events_df)
    input_cols = list(events_df.columns)
    norm = normalise.normalise(pipeline, events_df)
    check_workers(spark)
    arrow_types = columns.arrow_types(spark, events_df)
    input_types = {c: arrow_types[c] for c in input_cols}
    full = variants[0]
    worker_rows = _worker_state(spark, pipeline, state)
    if worker_rows.get(full.label):
        norm = normalise.reject_committed(spark, pipeline, norm, worker_rows[full.label])
    threshold = options.future_skew_ms if any(v.skew_free for v in variants) else None
    skewed = (F.col("__evt") - F.col("__arr") > F.lit(threshold)) if threshold is not None else F.lit(False)
    norm = norm.withColumn(W.SKEWED, skewed)

    wexpr = _col(pipeline.source.worker) if pipeline.source.worker else F.lit(0)
    stats = [
        F.min("__evt").alias("cand_min"),
        F.max("__evt").alias("cand_max"),
        F.max("__arr").alias("maxarr"),
        F.min("__arr").alias("minarr"),
        F.count(F.lit(1)).alias("n"),
    ]
    # Skewed and other events apart (for the skew-free timelines): one more grouping column
    # costs less than conditional aggregates (5.8 -> 4.6 s at 10 M events).
    summary = (
        norm.groupBy(F.col(normalise.REJECT_REASON), wexpr.alias("__w"), F.col("__batch"), F.col(W.SKEWED))
        .agg(*stats)
        .toArrow()
    )
    rejected = _rejected_counts(summary)
    timelines, new_workers = strategy_timelines(pipeline, variants, summary, worker_rows)
    wi = W.WhatIf(pipeline, variants, input_types, timelines, flush, threshold, options.worst)

    full_spec = wi.spec(full)
    events = norm.where(F.col(normalise.REJECT_REASON).isNull()).drop(
        normalise.REJECT_REASON, *K.task_derived(full_spec)
    )
    state_rows = _state_rows(pipeline, wi, state, events_df) if state is not None else None
    kernel_in, names, nparts = placement.kernel_input(spark, pipeline, events, state_rows)
    schemas = W.output_schemas(wi)
    task = _Task(wi, names, schemas)
    held = tasks.hold(spark, kernel_in.mapInArrow(task, columns.spark_schema(task.schema)))
    try:
        small = _collect_small(spark, held, schemas)
        counters = _sum_counters(small["counters"])
        rows = counters.pop(_ROWS, {})
        slots = placement.session_slots(spark)
        # One decoding task per 1 M rows of an output (as a replay writes its outputs).
        frames = {
            name: held.where(F.col(tasks.SIDE_OUTPUT) == name)
            .select(tasks.SIDE_DATA)
            .coalesce(tasks.write_tasks(rows.get(name, 0), nparts, slots))
            .mapInArrow(tasks.DecodeTask(schemas[name]), columns.spark_schema(schemas[name]))
            for name in ("cost", "by_key", "skew_late", "skewed", "state")
        }
        latency = latency_figures(
            spark,
            held.where(F.col(tasks.SIDE_OUTPUT) == "latency").select(F.col(tasks.SIDE_DATA).alias("data")),
            small["latency_coarse"],
        )
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
    """What each Spark task runs: :func:`windowing.whatif.analyse` over its keys, its
    tables handed back as ``(SIDE_OUTPUT, SIDE_DATA)`` rows (Arrow IPC blobs)."""

    def __init__(self, wi: W.WhatIf, names: dict[str, str], schemas: dict[str, pa.Schema]):
        self.wi, self.names, self.schemas = wi, names, schemas
        self.schema = pa.schema([pa.field(tasks.SIDE_OUTPUT, pa.string()), pa.field(tasks.SIDE_DATA, pa.binary())])

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = tasks.task_table(batches, self.names)
        if table is None:
            return
        result = W.analyse(table, self.wi)
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
        names: list[str] = []
        blobs: list[bytes] = []
        for name in (*SMALL, "latency", *_LARGE):
            t = getattr(result, name).cast(self.schemas[name])
            for start in range(0, max(t.num_rows, 1 if name == "counters" else 0), tasks.BLOB_ROWS):
                names.append(name)
                blobs.append(tasks.encode_blob(t.slice(start, tasks.BLOB_ROWS), compression="lz4"))
        yield pa.RecordBatch.from_arrays(
            [pa.array(names, pa.string()), pa.array(blobs, pa.binary())], schema=self.schema
        )


def _collect_small(spark: SparkSession, held: DataFrame, schemas: Mapping[str, pa.Schema]) -> dict[str, pa.Table]:
    """The tasks' small side outputs (:data:`SMALL`), collected to the driver, one table each.
    This action runs the tasks (under the kernel job's settings); the large outputs are
    decoded from the cached blobs afterwards."""
    with session.session_conf(spark, tasks.kernel_job_conf(spark)):
        blobs = held.where(F.col(tasks.SIDE_OUTPUT).isin(*SMALL)).select(tasks.SIDE_OUTPUT, tasks.SIDE_DATA).collect()
    pieces: dict[str, list[pa.Table]] = {}
    for row in blobs:
        pieces.setdefault(row[tasks.SIDE_OUTPUT], []).append(tasks.decode_blob(row[tasks.SIDE_DATA]))
    return {name: _concat(pieces.get(name, []), schemas[name]) for name in SMALL}


def _rejected_counts(summary: pa.Table) -> dict[str, int]:
    rej = (
        summary.filter(summary[normalise.REJECT_REASON].is_valid())
        .group_by(normalise.REJECT_REASON)
        .aggregate([("n", "sum")])
    )
    return {r[normalise.REJECT_REASON]: int(r["n_sum"]) for r in rej.to_pylist()}


#: The (worker, batch) summary's statistics and how two rows of one batch combine.
SUMMARY_STATS = (("cand_min", "min"), ("cand_max", "max"), ("maxarr", "max"), ("minarr", "min"), ("n", "sum"))


def batch_summaries(summary: pa.Table) -> dict[bool, pa.Table]:
    """The accepted rows of the (worker, batch) summary, over all events (False) and
    without the events flagged as skewed (True): ``summary`` has one row per (reason,
    worker ``__w``, batch, :data:`windowing.whatif.SKEWED`) with both candidates
    (``cand_min``, ``cand_max``), the arrival bounds and the count (:data:`SUMMARY_STATS`);
    a batch of skewed events only is no commit of the skew-free replay."""
    ok = summary.filter(pc.is_null(summary[normalise.REJECT_REASON]))
    skewed = pc.fill_null(ok[W.SKEWED], False)
    every = ok
    if pc.any(skewed).as_py():  # a batch with skewed and other events: its two rows as one
        both = ok.group_by(["__w", "__batch"], use_threads=False).aggregate(list(SUMMARY_STATS))
        every = pa.table(
            {c: both[f"{c}_{how}"] if how else both[c] for c, how in (("__w", ""), ("__batch", ""), *SUMMARY_STATS)}
        )
    return {False: every, True: ok.filter(pc.invert(skewed))}


def timeline_summary(rows: pa.Table, strategy: WatermarkStrategy) -> pa.Table:
    """The (worker, batch) summary :func:`windowing.runner.timelines.summary_timelines` reads, for
    one strategy, from one of :func:`batch_summaries`."""
    cand = "cand_min" if strategy is WatermarkStrategy.MIN_EVENT_TIME else "cand_max"
    return pa.table(
        {
            normalise.REJECT_REASON: pa.nulls(rows.num_rows, pa.string()),
            "__w": rows["__w"],
            "__batch": rows["__batch"],
            "cand": rows[cand],
            "maxarr": rows["maxarr"],
            "minarr": rows["minarr"],
            "n": rows["n"],
        }
    )


def strategy_timelines(
    pipeline: Pipeline,
    variants: Sequence[W.Variant],
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
        p = W.Variant(v.strategy, v.lateness, 0, full=True, skew_free=v.skew_free).pipeline(pipeline)
        timelines, rows = summary_timelines(
            p, timeline_summary(batches[v.skew_free], v.strategy), worker_rows.get(v.label, [])
        )
        out[key] = timelines
        rows_by[key] = rows
    new_workers = {v.label: rows_by[(v.strategy.value, v.skew_free)] for v in variants}
    return out, new_workers


# --------------------------------------------------------------------------- state


def _check_state(
    pipeline: Pipeline, variants: Sequence[W.Variant], state: DataFrame | None, state_figures: Mapping[str, Any] | None
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
    """Worker rows of the carried state, per variant (as ``windowing.runner.normalise.split_state`` reads them)."""
    if state is None:
        return {}
    wcol = pipeline.source.worker
    out: dict[str, list[dict[str, Any]]] = {}
    for r in state.where(F.col("state_kind") == "worker").collect():
        out.setdefault(r["variant"], []).append(
            {
                "worker": (r[wcol] if wcol else 0),
                "batch": r["batch"],
                "watermark_ms": r["watermark_ms"],
                "clock_ms": r["clock_ms"],
            }
        )
    return out


def _state_rows(pipeline: Pipeline, wi: W.WhatIf, state: DataFrame, events_df: DataFrame) -> DataFrame:
    """Key, window and emitted rows of the carried state, shaped as kernel input rows."""
    wcol, kcol = pipeline.source.worker, pipeline.window.key
    types = dict(events_df.dtypes)
    keep = [c for c in (wcol, kcol) if c]
    kind = (
        F.when(F.col("state_kind") == "key", F.lit(K.STATE_KEY))
        .when(F.col("state_kind") == "window", F.lit(K.STATE_WINDOW))
        .otherwise(F.lit(K.STATE_EMITTED))
        .cast("byte")
    )
    cols = [_col(c).cast(types[c]).alias(c) for c in keep]
    cols += [
        _col(c).alias(K.STATE_PREFIX + c)
        for c in state.columns
        if c not in keep and c not in ("fingerprint", "variant")
    ]
    return state.where(F.col("state_kind") != "worker").select(
        *cols, kind.alias("__kind"), F.col("variant").alias(W.VARIANT)
    )


# --------------------------------------------------------------------------- figures


def summarise(
    spark: SparkSession,
    pipeline: Pipeline,
    options: LatenessOptions,
    variants: Sequence[W.Variant],
    counters: Counters,
    slack: pa.Table,
    latency: tuple[dict[str, dict[str, Any]], dict[str, DataFrame]],
    cost_df: DataFrame,
    cost_top: pa.Table,
    by_key_df: DataFrame,
    by_hour: pa.Table,
    bins: list[dict[str, int]],
    rejected: Mapping[str, int],
    skew_tables: Mapping[str, DataFrame],
    skew_figures: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, DataFrame]]:
    """The figures and the output tables, from what the tasks found (summed): each
    variant's counters, the slack histograms, the latency figures (:func:`latency_figures`),
    the cost rows and the tasks' worst of them, events and late events per key and per
    (worker, hour), the lateness bins, the rejected rows per reason, future skew. One
    partition's, or a range's."""

    full = variants[0]
    accepted = counters.get(full.label, {}).get(M.EVENTS, 0)
    allowed = int(np.floor(options.target_late * accepted + 1e-9))
    by_label, latency_tables = latency
    slack, curves, exact, points = _curves(pipeline, options, variants, counters, slack, by_label, accepted)
    recommendations = [
        _recommend(s, m, exact[(s, m)], curves, accepted, allowed, options)
        for m in options.modes(pipeline)
        for s in WatermarkStrategy
    ]
    fc = counters.get(full.label, {})

    # Where lateness fell: per key (a table), per worker and hour (small: in the driver).
    kcols = W._key_columns(pipeline)
    raw = ["events", "late_events", "late_event_windows"]
    by_key = by_key_df.withColumn("late_share", _share_col("late_events", "events"))
    by_hour, hours, workers = _by_hour_and_worker(pipeline, by_hour, raw)
    worst = W.worst_windows(cost_top, options.worst).to_pylist()
    worst.sort(
        key=lambda r: (-r["missed_events"], -r["max_lateness_ms"], r["window_start"], *[repr(r[c]) for c in kcols])
    )
    figures = {
        "kind": KIND,
        "pipeline": pipeline.name,
        "fingerprint": pipeline.fingerprint(),
        "variants": [v.label for v in variants],
        "options": {
            "delays_ms": list(options.delays_ms),
            "target_late": options.target_late,
            "lateness_modes": [m.value for m in options.modes(pipeline)],
            "future_skew_ms": options.future_skew_ms,
            "worst": options.worst,
        },
        "configured": {"strategy": full.strategy.value, "lateness": full.lateness.value, "delay_ms": full.delay_ms},
        "input_rows": accepted + sum(rejected.values()),
        "rejected_rows": sum(rejected.values()),
        "rejected_by_reason": dict(sorted(rejected.items())),
        "accepted_events": accepted,
        "target_late": options.target_late,
        "allowed_late_events": allowed,
        "delays_ms": sorted(set(options.delays_ms) | {0}),
        "configured_replay": {
            "late_events": fc.get(M.LATE_EVENTS, 0),
            "late_event_windows": fc.get(M.LATE_PAIRS, 0),
            "late_share": _share(fc.get(M.LATE_EVENTS, 0), accepted),
            "closed_by_reason": {r: fc.get(M.CLOSED_PREFIX + r, 0) for r in CLOSE_REASONS},
            "latency": by_label.get(full.label, {}),
        },
        "curves": curves,
        "late_curve_points": points,
        "recommendations": recommendations,
        "cost": {
            "windows": fc.get(W.COST_WINDOWS, 0),
            "missed_events": fc.get(W.COST_MISSED, 0),
            "worst_windows": [{k: _jsonable(v) for k, v in r.items()} for r in worst[: options.worst]],
        },
        "lateness_histogram": bins,
        "late_by_hour": [
            {"hour": h.isoformat(), "events": int(e), "late_events": int(n)}
            for h, e, n in zip(
                hours["hour"].to_pylist(), hours["events_sum"].to_pylist(), hours["late_events_sum"].to_pylist()
            )
        ],
        "late_by_worker": [{k: _jsonable(v) for k, v in w.items()} for w in workers[:50]],
        "future_skew": skew_figures,
        "counters": counters,
    }
    hour_table = by_hour.append_column(
        "late_share",
        pa.array(
            [_share(n, e) for n, e in zip(by_hour["late_events"].to_pylist(), by_hour["events"].to_pylist())],
            pa.float64(),
        ),
    )
    tables = {
        "curves": spark.createDataFrame(curves, _CURVE_DDL),
        "slack_histogram": _frame(
            spark, slack.select(["strategy", "lateness", "slack_ms", "events", "pairs"]), _SLACK_DDL
        ),
        "cost": cost_df,
        "late_by_key": by_key,
        "late_by_hour": spark.createDataFrame(
            hour_table.to_pylist() if not hour_table.num_rows else hour_table, columns.spark_schema(hour_table.schema)
        ),
        **latency_tables,
        **skew_tables,
    }
    return figures, tables


def _curves(
    pipeline: Pipeline,
    options: LatenessOptions,
    variants: Sequence[W.Variant],
    counters: Counters,
    slack: pa.Table,
    latency: Mapping[str, Mapping[str, Any]],
    accepted: int,
) -> tuple[
    pa.Table, list[dict[str, Any]], dict[tuple[WatermarkStrategy, Lateness], Histogram], dict[str, list[list[float]]]
]:
    """The tasks' slack histograms summed, and from them each (strategy, mode)'s curve rows
    at the listed delays (checked against the replays' own counts), exact histograms and
    plot points."""
    slack = (
        slack.group_by(["strategy", "lateness", "slack_ms"], use_threads=False)
        .aggregate([("events", "sum"), ("pairs", "sum")])
        .rename_columns(["strategy", "lateness", "slack_ms", "events", "pairs"])
        .sort_by([("strategy", "ascending"), ("lateness", "ascending"), ("slack_ms", "ascending")])
    )
    curves: list[dict[str, Any]] = []
    exact: dict[tuple[WatermarkStrategy, Lateness], Histogram] = {}
    points: dict[str, list[list[float]]] = {}
    for mode in options.modes(pipeline):
        for strategy in WatermarkStrategy:
            h = slack.filter(
                pc.and_(pc.equal(slack["strategy"], strategy.value), pc.equal(slack["lateness"], mode.value))
            )
            hv, he, hp = (h[c].to_numpy() for c in ("slack_ms", "events", "pairs"))
            exact[(strategy, mode)] = (hv, he, hp)
            points[f"{strategy.value}/{mode.value}"] = _plot_points(hv, he, hp, options.delays_ms, accepted)
            for delay in sorted(set(options.delays_ms) | {0}):
                v = _variant_for(variants, strategy, mode, delay)
                c = counters.get(v.label, {})
                ((late_ev, late_pairs),) = W.late_counts(hv, he, hp, [delay])
                if (late_ev, late_pairs) != (c.get(M.LATE_EVENTS, 0), c.get(M.LATE_PAIRS, 0)):
                    raise AssertionError(
                        f"lateness: the slack curve and the replay at {v.label} disagree: "
                        f"{late_ev}/{late_pairs} against {c.get(M.LATE_EVENTS, 0)}/{c.get(M.LATE_PAIRS, 0)}"
                    )
                curves.append(
                    _curve_row(strategy, mode, delay, c, latency.get(v.label, {}), accepted, configured=v.full)
                )
    return slack, curves, exact, points


def _by_hour_and_worker(
    pipeline: Pipeline, by_hour: pa.Table, raw: list[str]
) -> tuple[pa.Table, pa.Table, list[dict[str, Any]]]:
    """The tasks' (worker, hour) rows summed, their sums per hour, and per worker (most late
    events first, with the late share)."""
    wcol = pipeline.source.worker
    by_hour = (
        by_hour.group_by(([wcol] if wcol else []) + ["hour"], use_threads=False)
        .aggregate([(c, "sum") for c in raw])
        .rename_columns(([wcol] if wcol else []) + ["hour"] + raw)
    )
    hours = by_hour.group_by(["hour"], use_threads=False).aggregate([(c, "sum") for c in raw[:2]]).sort_by("hour")
    workers = (
        by_hour.group_by([wcol], use_threads=False).aggregate([(c, "sum") for c in raw]).rename_columns([wcol] + raw)
        if wcol
        else by_hour.group_by([], use_threads=False).aggregate([(c, "sum") for c in raw]).rename_columns(raw)
    ).to_pylist()
    for w in workers:
        w["late_share"] = _share(w["late_events"], w["events"])
    workers.sort(key=lambda w: (-w["late_events"], repr(w.get(wcol))))
    return by_hour, hours, workers


_CURVE_DDL = (
    "strategy string, lateness string, delay_ms long, configured boolean, late_events long, "
    "late_share double, late_event_windows long, windows_closed long, closed_watermark long, "
    "closed_idle long, closed_max_duration long, closed_end_of_input long, open_windows long, "
    "latency_windows long, latency_p50_ms double, latency_p90_ms double, latency_p99_ms double, "
    "latency_max_ms long"
)
_SLACK_DDL = "strategy string, lateness string, slack_ms long, events long, pairs long"


QUANTILES = (0.5, 0.9, 0.99)


def latency_figures(
    spark: SparkSession, exact: DataFrame, coarse: pa.Table | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, DataFrame]]:
    """Exact emission-latency percentiles (linear interpolation, as ``numpy.percentile``),
    greatest latency and window count per variant, in two passes over the tasks' outputs.

    ``exact``: a DataFrame of one binary column ``data``, Arrow IPC blobs of (variant,
    latency_ms, windows); ``coarse``: the same in buckets, (variant, bucket, windows,
    max_ms) rows (``whatif.latency_bucket``; the tasks' own, summed here), else counted
    from ``exact`` by a first pass. The summed buckets locate the two ranks each percentile
    interpolates between; a second pass fetches only the latencies of those buckets.
    Returns the figures by variant label, and the table ``latency_exact`` (the blobs, so a
    range of partitions can do the same).
    """
    if coarse is None:
        coarse = exact.mapInArrow(_BucketTask(), columns.spark_schema(_COARSE_SCHEMA)).toArrow()
    merged: dict[tuple[str, int], list[int]] = {}
    for label, b, n, mx in zip(*(coarse[c].to_pylist() for c in ("variant", "bucket", "windows", "max_ms"))):
        acc = merged.setdefault((label, b), [0, mx])
        acc[0] += n
        acc[1] = max(acc[1], mx)
    by_variant: dict[str, list[tuple[int, int, int]]] = {}
    for (label, b), (n, mx) in sorted(merged.items()):
        by_variant.setdefault(label, []).append((b, n, mx))
    wanted: dict[str, dict[int, int]] = {}  # label -> rank -> bucket
    starts: dict[tuple[str, int], int] = {}  # (label, bucket) -> rank of its first value
    for label, rows in by_variant.items():
        cum = np.cumsum([n for _, n, _ in rows])
        total = int(cum[-1])
        for b, c0 in zip((b for b, _, _ in rows), np.concatenate([[0], cum[:-1]])):
            starts[(label, b)] = int(c0)
        for q in QUANTILES:
            pos = (total - 1) * q
            for r in {int(np.floor(pos)), int(np.ceil(pos))}:
                wanted.setdefault(label, {})[r] = rows[int(np.searchsorted(cum, r + 1))][0]
    need = {label: sorted(set(ranks.values())) for label, ranks in wanted.items()}
    picked = (
        exact.mapInArrow(_PickTask(need), columns.spark_schema(_LATENCY_SCHEMA)).toArrow()
        if need
        else _LATENCY_SCHEMA.empty_table()
    )
    values: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    buckets = W.latency_bucket(picked["latency_ms"].to_numpy()) if picked.num_rows else np.zeros(0, np.int64)
    labels = picked["variant"].to_pylist()
    for key in {(label, int(b)) for label, b in zip(labels, buckets.tolist())}:
        sel = np.flatnonzero((np.array(labels, dtype=object) == key[0]) & (buckets == key[1]))
        v, n = picked["latency_ms"].to_numpy()[sel], picked["windows"].to_numpy()[sel]
        order = np.argsort(v, kind="stable")
        values[key] = (v[order], np.cumsum(n[order]))

    def at(label: str, rank: int) -> int:
        b = wanted[label][rank]
        v, cum = values[(label, b)]
        return int(v[np.searchsorted(cum, rank - starts[(label, b)] + 1)])

    out: dict[str, dict[str, Any]] = {}
    for label, rows in by_variant.items():
        total = sum(n for _, n, _ in rows)
        ps = []
        for q in QUANTILES:
            pos = (total - 1) * q
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            a, b = at(label, lo), at(label, hi)
            ps.append(a + (b - a) * (pos - lo))
        out[label] = {
            "p50_ms": ps[0],
            "p90_ms": ps[1],
            "p99_ms": ps[2],
            "max_ms": max(mx for _, _, mx in rows),
            "windows": int(total),
        }
    return out, {"latency_exact": exact.select(F.col("data").cast("binary").alias("data"))}


_LATENCY_SCHEMA = pa.schema([("variant", pa.string()), ("latency_ms", pa.int64()), ("windows", pa.int64())])
_COARSE_SCHEMA = pa.schema(
    [("variant", pa.string()), ("bucket", pa.int64()), ("windows", pa.int64()), ("max_ms", pa.int64())]
)


class _BucketTask:
    """Latency blobs in buckets (the first pass of :func:`latency_figures` over stored blobs)."""

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for data in batch.column(0):
                t = tasks.decode_blob(data.as_buffer())
                codes, names = _label_codes(t["variant"])
                for code, label in enumerate(names):
                    mine = codes == code
                    if not mine.any():
                        continue
                    v, n = t["latency_ms"].to_numpy()[mine], t["windows"].to_numpy()[mine]
                    b = W.latency_bucket(v)
                    uniq, inv = np.unique(b, return_inverse=True)
                    mx = np.full(len(uniq), np.iinfo(np.int64).min, np.int64)
                    np.maximum.at(mx, inv.reshape(-1), v)
                    yield pa.RecordBatch.from_arrays(
                        [
                            pa.array([label] * len(uniq), pa.string()),
                            pa.array(uniq),
                            pa.array(np.bincount(inv.reshape(-1), weights=n).astype(np.int64)),
                            pa.array(mx),
                        ],
                        schema=_COARSE_SCHEMA,
                    )


class _PickTask:
    """The (variant, latency, windows) rows of the wanted buckets, from IPC blobs."""

    def __init__(self, need: Mapping[str, Sequence[int]]):
        self.need = {k: np.asarray(v, np.int64) for k, v in need.items()}

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for data in batch.column(0):
                t = tasks.decode_blob(data.as_buffer())
                if not t.num_rows:
                    continue
                codes, names = _label_codes(t["variant"])
                b = W.latency_bucket(t["latency_ms"].to_numpy())
                keep = np.zeros(t.num_rows, bool)
                for code, label in enumerate(names):
                    wanted = self.need.get(label)
                    if wanted is not None:
                        keep |= (codes == code) & np.isin(b, wanted)
                if keep.any():
                    yield from t.filter(pa.array(keep)).cast(_LATENCY_SCHEMA).to_batches()


def _label_codes(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Each row's variant as a code into the returned labels (a dictionary-coded column's
    own codes: integer masks instead of string comparisons per row)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(column.type):
        return column.indices.to_numpy(zero_copy_only=False), column.dictionary.to_pylist()
    return _label_codes(pc.dictionary_encode(column))  # plain strings (outputs of earlier versions)


def _curve_row(
    strategy: WatermarkStrategy,
    mode: Lateness,
    delay: int,
    c: Mapping[str, int],
    lat: Mapping[str, Any],
    accepted: int,
    configured: bool,
) -> dict[str, Any]:
    closed = {r: c.get(M.CLOSED_PREFIX + r, 0) for r in CLOSE_REASONS}
    return {
        "strategy": strategy.value,
        "lateness": mode.value,
        "delay_ms": int(delay),
        "configured": bool(configured),
        "late_events": c.get(M.LATE_EVENTS, 0),
        "late_share": _share(c.get(M.LATE_EVENTS, 0), accepted),
        "late_event_windows": c.get(M.LATE_PAIRS, 0),
        "windows_closed": sum(closed.values()),
        **{f"closed_{r.lower()}": n for r, n in closed.items()},
        "open_windows": c.get(M.OPEN_WINDOWS, 0),
        "latency_windows": lat.get("windows", 0),
        "latency_p50_ms": lat.get("p50_ms"),
        "latency_p90_ms": lat.get("p90_ms"),
        "latency_p99_ms": lat.get("p99_ms"),
        "latency_max_ms": lat.get("max_ms"),
    }


#: Points of each exact late-share curve kept in the figures (for the report's plot).
PLOT_POINTS = 240


def _plot_points(
    hv: np.ndarray, he: np.ndarray, hp: np.ndarray, delays_ms: Sequence[int], accepted: int
) -> list[list[float]]:
    """``[delay_ms, late share]`` of the exact curve: at every step when there are few,
    else on a logarithmic grid of delays (and the listed ones), each value exact."""
    breakpoints = W.step_curve(hv, he, hp)[0]
    top = int(max(breakpoints)) if len(breakpoints) else 0
    if len(breakpoints) <= PLOT_POINTS:
        grid = np.asarray(breakpoints, np.int64)
    else:
        grid = np.unique(
            np.concatenate(
                [
                    [0],
                    np.unique(np.round(np.logspace(0, np.log10(max(top, 1)), PLOT_POINTS))),
                    np.asarray(delays_ms, np.float64),
                ]
            ).astype(np.int64)
        )
    counts = W.late_counts(hv, he, hp, grid)
    return [[int(d), _share(c[0], accepted)] for d, c in zip(grid, counts)]


def _variant_for(variants: Sequence[W.Variant], strategy: WatermarkStrategy, mode: Lateness, delay: int) -> W.Variant:
    for v in variants:
        if (v.strategy, v.lateness, v.delay_ms) == (strategy, mode, delay) and not v.skew_free:
            return v
    raise KeyError((strategy, mode, delay))


def _recommend(
    strategy: WatermarkStrategy,
    mode: Lateness,
    hist: Histogram,
    curves: Sequence[Mapping[str, Any]],
    accepted: int,
    allowed: int,
    options: LatenessOptions,
) -> dict[str, Any]:
    """The smallest delay keeping late events at most ``target_late`` of the accepted events
    (exact, from the slack), and the smallest listed delay that does (with its latency)."""
    hv, he, hp = hist
    d_min = W.smallest_delay(hv, he, allowed)
    ((late_ev, _),) = W.late_counts(hv, he, hp, [d_min])
    rows = [r for r in curves if r["strategy"] == strategy.value and r["lateness"] == mode.value]
    ok = [r for r in sorted(rows, key=lambda r: r["delay_ms"]) if r["late_events"] <= allowed]
    listed = ok[0] if ok else None
    return {
        "strategy": strategy.value,
        "lateness": mode.value,
        "target_late": options.target_late,
        "smallest_delay_ms": d_min,
        "late_events_at_smallest": late_ev,
        "late_share_at_smallest": _share(late_ev, accepted),
        "listed_delay_ms": listed["delay_ms"] if listed else None,
        "listed_late_share": listed["late_share"] if listed else None,
        "listed_latency_p50_ms": listed["latency_p50_ms"] if listed else None,
        "listed_latency_p99_ms": listed["latency_p99_ms"] if listed else None,
    }


def _skew_figures(pipeline: Pipeline, wi: W.WhatIf, counters: Counters, rejected: Mapping[str, int]) -> dict[str, Any]:
    """Future skew in numbers: the events listed, the late events and pairs they caused
    (late in the configured replay, not in the skew-free one; :func:`windowing.whatif._skew`),
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
        "skewed_events": fc.get(W.SKEWED_EVENTS, 0),
        "late_events_caused": fc.get(W.SKEW_CAUSED_EVENTS, 0),
        "late_event_windows_caused": fc.get(W.SKEW_CAUSED_PAIRS, 0),
        "late_event_windows_attributed": fc.get(W.SKEW_ATTRIBUTED_PAIRS, 0),
        "late_events_without_skewed": sc.get(M.LATE_EVENTS, 0),
        "idle_closes": fc.get(M.CLOSED_PREFIX + "IDLE", 0),
        "idle_closes_without_skewed": sc.get(M.CLOSED_PREFIX + "IDLE", 0),
    }


def _state_frame(
    spark: SparkSession,
    pipeline: Pipeline,
    wi: W.WhatIf,
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
    return state_rows.unionByName(spark.createDataFrame(workers.to_pylist(), columns.spark_schema(schema)))


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


def _frame(spark: SparkSession, table: pa.Table | None, ddl: str) -> DataFrame:
    """A DataFrame of ``table`` (through Arrow: histograms may hold many rows) with the
    column types of ``ddl``."""
    if table is None or not table.num_rows:
        return spark.createDataFrame([], ddl)
    df = spark.createDataFrame(table)
    fields = [f.strip().split(" ", 1) for f in ddl.split(",")]
    return df.select(*[F.col(n).cast(t).alias(n) for n, t in fields])


def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
    return pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()


def _share(n: int, total: int) -> float:
    return round(n / total, 9) if total else 0.0


def _share_col(num: str, den: str) -> Column:
    return F.when(F.col(den) > 0, F.col(num) / F.col(den)).otherwise(F.lit(0.0))


# --------------------------------------------------------------------------- outputs


def write_lateness(
    result: LatenessResult, out_dir: str | Path, pipeline: Pipeline, inputs: Sequence[str] = ()
) -> Commit:
    """Write the tables (Parquet), ``figures.json`` and ``report.html`` into a new run
    folder of ``out_dir`` and commit it (as :mod:`windowing.storage.outputs` commits a replay: a crash
    leaves the previous run current). Returns the :class:`windowing.storage.commits.Commit`."""
    out = str(out_dir)
    spark = result.tables["curves"].sparkSession
    check_output_target(spark, out, inputs)
    staged = Staged(spark, out, new_run_id(), result.figures, pipeline.name, pipeline.fingerprint())
    frames = dict(result.tables)
    frames[FIGURES] = spark.createDataFrame(
        [(json.dumps(result.figures, sort_keys=True, default=str),)], "value string"
    ).coalesce(1)

    write_datasets(staged, frames, text=(FIGURES,), workers=6)
    if "state" in frames:  # the next partition's --state-in: whole or refused (windowing.storage.manifest)
        staged.state_manifest = write_manifest(spark, join(staged.path, "state")).to_dict()
    Lake(spark).put_text(join(staged.path, REPORT), render_report(result.figures))
    return staged.commit({"kind": KIND, "tables": sorted(result.tables)})


@dataclass(frozen=True)
class LatenessOutput:
    """A committed lateness output: its tables (DataFrames), figures, commit and report path."""

    tables: dict[str, DataFrame]
    figures: dict[str, Any]
    commit: Commit
    report: str


def read_lateness(spark: SparkSession, out_dir: str | Path) -> LatenessOutput:
    """The current run of a lateness output: its tables (DataFrames), figures and commit."""
    commit = current_commit(spark, str(out_dir))
    if commit is None or commit.extra.get("kind") != KIND:
        raise InputError(f"{out_dir}: no lateness output here (nothing committed by rewindow lateness)")
    names = commit.extra.get("tables") or TABLES
    if "state" in names:
        check_manifest(spark, join(commit.run_path, "state"), commit, str(out_dir))
    tables = {name: spark.read.parquet(glob_escape(join(commit.run_path, name))) for name in names}
    return LatenessOutput(tables, commit.metrics, commit, join(commit.run_path, REPORT))


def format_figures(figures: Mapping[str, Any]) -> str:
    """The recommendation and a short curve table, for a terminal."""
    cfg = figures["configured"]
    cr = figures["configured_replay"]
    out = [
        f"lateness of pipeline {figures['pipeline']!r}: {figures['accepted_events']:,} events, configured "
        f"{cfg['strategy']} {cfg['lateness']} delay {format_duration_ms(cfg['delay_ms'])}: "
        f"{cr['late_events']:,} late ({100 * cr['late_share']:.4f} %), "
        f"{figures['cost']['windows']:,} windows missed events"
    ]
    for r in figures["recommendations"]:
        listed = (
            f"; of --delays, {format_duration_ms(r['listed_delay_ms'])} "
            f"(late {100 * r['listed_late_share']:.4f} %, "
            f"latency p50 {_ms_text(r['listed_latency_p50_ms'])}, p99 {_ms_text(r['listed_latency_p99_ms'])})"
            if r["listed_delay_ms"] is not None
            else "; no listed delay is enough"
        )
        out.append(
            f"recommendation {r['strategy']} {r['lateness']}: delay >= {human_duration(r['smallest_delay_ms'])} "
            f"keeps late events <= {100 * r['target_late']:.4f} % ({100 * r['late_share_at_smallest']:.4f} %)" + listed
        )
    out.append(
        f"{'strategy':<15} {'lateness':<16} {'delay':>7} {'late':>10} {'late %':>9} {'p50 latency':>12} "
        f"{'p99 latency':>12} {'IDLE':>8}"
    )
    for r in figures["curves"]:
        out.append(
            f"{r['strategy']:<15} {r['lateness']:<16} {format_duration_ms(r['delay_ms']):>7} "
            f"{r['late_events']:>10,} {100 * r['late_share']:>8.4f}% {_ms_text(r['latency_p50_ms']):>12} "
            f"{_ms_text(r['latency_p99_ms']):>12} {r['closed_idle']:>8,}"
            + ("  (configured)" if r["configured"] else "")
        )
    fs = figures["future_skew"]
    if fs.get("threshold_ms") is not None:
        out.append(
            f"future skew > {format_duration_ms(fs['threshold_ms'])}: {fs['skewed_events']:,} events, "
            f"causing {fs['late_events_caused']:,} late events ({fs['late_event_windows_caused']:,} pairs)"
        )
    return "\n".join(out)


def curve_markdown(figures: Mapping[str, Any]) -> str:
    """The curves at the listed delays and the recommendations, as a markdown table."""
    lines = [
        "| strategy | lateness | delay | late events | late share | latency p50 | latency p99 | IDLE closes |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in figures["curves"]:
        lines.append(
            f"| {r['strategy']} | {r['lateness']} | {format_duration_ms(r['delay_ms'])}"
            f"{' (configured)' if r['configured'] else ''} | {r['late_events']:,} | "
            f"{100 * r['late_share']:.4f} % | {_ms_text(r['latency_p50_ms'])} | "
            f"{_ms_text(r['latency_p99_ms'])} | {r['closed_idle']:,} |"
        )
    lines.append("")
    for r in figures["recommendations"]:
        lines.append(
            f"- **{r['strategy']} {r['lateness']}**: late events <= {100 * r['target_late']:.4g} % needs "
            f"delay >= **{human_duration(r['smallest_delay_ms'])}**"
        )
    return "\n".join(lines)


def _ms_text(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.1f}s" if abs(v) >= 1000 else f"{v:.0f}ms"


def main_lateness(args: argparse.Namespace) -> int:
    """``rewindow lateness``: analyse, write, print the recommendation; exit code 0."""
    pipeline = load_pipeline(args.config)
    future = (
        None
        if str(args.future_skew).strip().lower() in ("off", "none")
        else _duration(args.future_skew, "--future-skew")
    )
    options = LatenessOptions(
        delays_ms=parse_delays(args.delays),
        target_late=parse_share(args.target_late, "--target-late"),
        lateness_modes=parse_modes(args.lateness_modes),
        future_skew_ms=future,
        worst=args.worst,
        flush_at_end=args.flush_at_end,
    )
    inputs = args.input or ([pipeline.source.path] if pipeline.source.path else [])
    check_input_schema(pipeline, inputs)
    print(f"rewindow: [1/3] starting Spark ({args.remote or args.master or 'local[*]'})", file=sys.stderr, flush=True)
    spark = spark_session(args.master, dict(args.conf), remote=args.remote)
    check_output_target(spark, args.output, inputs + ([args.state_in] if args.state_in else []))
    state, state_figures = None, None
    if args.state_in:
        prev = read_lateness(spark, args.state_in)
        state, state_figures = prev.tables["state"], prev.figures
    events = read_events(spark, args.input, pipeline=pipeline)
    print(
        f"rewindow: [2/3] replaying {len(options.variants(pipeline))} variants of pipeline {pipeline.name!r}",
        file=sys.stderr,
        flush=True,
    )
    result = lateness(spark, pipeline, events, state=state, options=options, state_figures=state_figures)
    try:
        print(f"rewindow: [3/3] writing {args.output}", file=sys.stderr, flush=True)
        commit = write_lateness(result, args.output, pipeline, inputs=inputs)
    finally:
        result.unpersist()
    print(format_figures(result.figures))
    print(
        f"tables and report in {commit.run_path}/ ({', '.join(TABLES)}, {FIGURES}, {REPORT}), "
        f"committed as run {commit.seq} of {args.output}"
    )
    return 0


def _duration(text: str, field: str) -> int:
    try:
        return parse_duration_ms(text, field)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# --------------------------------------------------------------------------- ranges

#: Counters that are a value at the end of a partition, not a count over it.
_GAUGES = (M.OPEN_WINDOWS, M.KEYS_HELD, M.KEYS_SEEN)


def combine_lateness(spark: SparkSession, pipeline: Pipeline, outputs: Sequence[str]) -> LatenessResult:
    """One report over a range of partitions from their lateness outputs (oldest first):
    counts added up, latency percentiles and the slack curve from the added histograms,
    the tables put together, the gauges (windows open at the end) of the last one. The
    outputs must come from one chain (same pipeline configuration and variants)."""
    if not outputs:
        raise ValueError("combine_lateness: no partition to combine")
    parts = [read_lateness(spark, o) for o in outputs]
    first = parts[0].figures
    for o, part in zip(outputs, parts):
        if (part.figures.get("fingerprint"), part.figures.get("variants")) != (
            pipeline.fingerprint(),
            first.get("variants"),
        ):
            raise LatenessStateError(f"{o}: analysed under another configuration or other variants than {outputs[0]}")
    opts = first["options"]
    options = LatenessOptions(
        delays_ms=tuple(opts["delays_ms"]),
        target_late=opts["target_late"],
        lateness_modes=tuple(Lateness(m) for m in opts["lateness_modes"]),
        future_skew_ms=opts["future_skew_ms"],
        worst=opts["worst"],
    )
    variants = options.variants(pipeline)
    counters: dict[str, dict[str, int]] = {}
    for part in parts:
        for label, cs in part.figures["counters"].items():
            mine = counters.setdefault(label, {})
            for name, v in cs.items():
                if name not in _GAUGES:
                    mine[name] = mine.get(name, 0) + v
    for label, cs in parts[-1].figures["counters"].items():  # a gauge: its value at the end of the range
        for name in _GAUGES:
            counters.setdefault(label, {})[name] = cs.get(name, 0)

    def union(name: str) -> DataFrame:
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), [p.tables[name] for p in parts])

    slack = (
        union("slack_histogram")
        .groupBy("strategy", "lateness", "slack_ms")
        .agg(F.sum("events").alias("events"), F.sum("pairs").alias("pairs"))
        .toArrow()
    )
    slack = slack.cast(
        pa.schema(
            [
                ("strategy", pa.string()),
                ("lateness", pa.string()),
                ("slack_ms", pa.int64()),
                ("events", pa.int64()),
                ("pairs", pa.int64()),
            ]
        )
    )
    bins: dict[int, dict[str, int]] = {}
    rejected: dict[str, int] = {}
    for part in parts:
        for b in part.figures["lateness_histogram"]:
            acc = bins.setdefault(b["upper_ms"], {"upper_ms": b["upper_ms"], "pairs": 0, "events": 0})
            acc["pairs"] += b["pairs"]
            acc["events"] += b["events"]
        for reason, n in part.figures["rejected_by_reason"].items():
            rejected[reason] = rejected.get(reason, 0) + n
    skew = dict(first["future_skew"])
    for part in parts[1:]:
        for k, v in part.figures["future_skew"].items():
            if isinstance(v, int) and not isinstance(v, bool) and k not in ("threshold_ms", "max_future_skew_ms"):
                skew[k] = skew.get(k, 0) + v
    raw = ["events", "late_events", "late_event_windows"]
    kcols = W._key_columns(pipeline)
    wcol = pipeline.source.worker
    cost = union("cost")
    top = (
        cost.orderBy(F.desc("missed_events"), F.desc("max_lateness_ms"), "window_start").limit(options.worst).toArrow()
    )
    figures, tables = summarise(
        spark,
        pipeline,
        options,
        variants,
        counters,
        slack,
        latency_figures(spark, union("latency_exact")),
        cost,
        top,
        (union("late_by_key").groupBy(*[_col(c) for c in kcols]) if kcols else union("late_by_key").groupBy()).agg(
            *[F.sum(c).alias(c) for c in raw]
        ),
        union("late_by_hour").select(*[_col(c) for c in ([wcol] if wcol else [])], "hour", *raw).toArrow(),
        sorted(bins.values(), key=lambda b: (b["upper_ms"] < 0, b["upper_ms"])),
        rejected,
        {"future_skew": union("future_skew"), "skew_late": union("skew_late")},
        skew,
    )
    figures["partitions"] = [str(o) for o in outputs]
    figures["seconds"] = round(sum(p.figures.get("seconds", 0) for p in parts), 3)
    return LatenessResult(tables, figures)
