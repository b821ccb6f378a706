"""The figures of a lateness run (``figures.json``) and its summed tables, from what the
tasks found: the late-share curves, the recommendations, the cost, where lateness fell.
:func:`summarise` serves one partition (:mod:`windowing.lateness.job`) and a range of them
(:mod:`windowing.lateness.ranges`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from windowing import metrics as M
from windowing.config import Lateness, Pipeline, WatermarkStrategy
from windowing.contract import CLOSE_REASONS
from windowing.lateness.curves import late_counts, smallest_delay, step_curve
from windowing.lateness.group_ids import key_columns
from windowing.lateness.options import KIND, Counters, Histogram, LatenessOptions
from windowing.lateness.tables import COST_MISSED, COST_WINDOWS, worst_windows
from windowing.lateness.variants import Variant
from windowing.runner.api import spark_schema
from windowing.validation import jsonable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def summarise(
    spark: SparkSession,
    pipeline: Pipeline,
    options: LatenessOptions,
    variants: Sequence[Variant],
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
    variant's counters, the slack histograms, the latency figures (:func:`windowing.lateness.latency.latency_figures`),
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
    kcols = key_columns(pipeline)
    raw = ["events", "late_events", "late_event_windows"]
    by_key = by_key_df.withColumn("late_share", _share_col("late_events", "events"))
    by_hour, hours, workers = _by_hour_and_worker(pipeline, by_hour, raw)
    worst = worst_windows(cost_top, options.worst).to_pylist()
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
            "windows": fc.get(COST_WINDOWS, 0),
            "missed_events": fc.get(COST_MISSED, 0),
            "worst_windows": [{k: jsonable(v) for k, v in r.items()} for r in worst[: options.worst]],
        },
        "lateness_histogram": bins,
        "late_by_hour": [
            {"hour": h.isoformat(), "events": int(e), "late_events": int(n)}
            for h, e, n in zip(
                hours["hour"].to_pylist(), hours["events_sum"].to_pylist(), hours["late_events_sum"].to_pylist()
            )
        ],
        "late_by_worker": [{k: jsonable(v) for k, v in w.items()} for w in workers[:50]],
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
            hour_table.to_pylist() if not hour_table.num_rows else hour_table, spark_schema(hour_table.schema)
        ),
        **latency_tables,
        **skew_tables,
    }
    return figures, tables


def _curves(
    pipeline: Pipeline,
    options: LatenessOptions,
    variants: Sequence[Variant],
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
                ((late_ev, late_pairs),) = late_counts(hv, he, hp, [delay])
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
    breakpoints = step_curve(hv, he, hp)[0]
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
    counts = late_counts(hv, he, hp, grid)
    return [[int(d), _share(c[0], accepted)] for d, c in zip(grid, counts)]


def _variant_for(variants: Sequence[Variant], strategy: WatermarkStrategy, mode: Lateness, delay: int) -> Variant:
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
    d_min = smallest_delay(hv, he, allowed)
    ((late_ev, _),) = late_counts(hv, he, hp, [d_min])
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


def _frame(spark: SparkSession, table: pa.Table | None, ddl: str) -> DataFrame:
    """A DataFrame of ``table`` (through Arrow: histograms may hold many rows) with the
    column types of ``ddl``."""
    if table is None or not table.num_rows:
        return spark.createDataFrame([], ddl)
    df = spark.createDataFrame(table)
    fields = [f.strip().split(" ", 1) for f in ddl.split(",")]
    return df.select(*[F.col(n).cast(t).alias(n) for n, t in fields])


def _share(n: int, total: int) -> float:
    return round(n / total, 9) if total else 0.0


def _share_col(num: str, den: str) -> Column:
    return F.when(F.col(den) > 0, F.col(num) / F.col(den)).otherwise(F.lit(0.0))
