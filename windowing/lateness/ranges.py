"""One lateness report over a range of partitions, from their committed lateness outputs
(:func:`combine_lateness`): counts added up, percentiles and curves from the added
histograms. The Dagster asset's range report.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Sequence

import pyarrow as pa
from pyspark.sql import functions as F

from windowing import metrics as M
from windowing.config import Lateness, Pipeline
from windowing.lateness.figures import summarise
from windowing.lateness.group_ids import key_columns
from windowing.lateness.latency import latency_figures
from windowing.lateness.options import LatenessOptions, LatenessResult, LatenessStateError
from windowing.lateness.outputs import read_lateness
from windowing.runner.api import col

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    kcols = key_columns(pipeline)
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
        (union("late_by_key").groupBy(*[col(c) for c in kcols]) if kcols else union("late_by_key").groupBy()).agg(
            *[F.sum(c).alias(c) for c in raw]
        ),
        union("late_by_hour").select(*[col(c) for c in ([wcol] if wcol else [])], "hour", *raw).toArrow(),
        sorted(bins.values(), key=lambda b: (b["upper_ms"] < 0, b["upper_ms"])),
        rejected,
        {"future_skew": union("future_skew"), "skew_late": union("skew_late")},
        skew,
    )
    figures["partitions"] = [str(o) for o in outputs]
    figures["seconds"] = round(sum(p.figures.get("seconds", 0) for p in parts), 3)
    return LatenessResult(tables, figures)
