"""The figures of a reconcile run (``figures.json``) and its ``summary`` rows: identities
per category and explanation, per partition and in total, the match rate against the
minimum (:func:`summary_figures`, from :func:`count_identities` and :func:`count_explained`)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from pyspark.sql import functions as F

from windowing.config import Pipeline
from windowing.config.reconcile import ReconcileSpec
from windowing.reconcile.vocabulary import CATEGORIES, EXPLANATIONS, MISSING_IN_REPLAY

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _n(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)).cast("long")


def count_identities(held: DataFrame) -> dict[int, dict[str, int]]:
    """Counts per partition index (-1: live rows outside the edges), from every identity:
    rows per side, identities per category, further live copies (each a
    ``MISSING_IN_REPLAY``). One Spark job."""
    cat = F.col("__category")
    extra_copies = F.sum(F.when(cat.isNotNull(), F.greatest(F.col("__l_n") - 1, F.lit(0))).otherwise(0))
    aggs = [
        F.sum("__r_n").cast("long").alias("replay_rows"),
        F.sum("__l_n").cast("long").alias("live_rows"),
        *[_n(cat == F.lit(c)).alias(c.lower()) for c in CATEGORIES if c != MISSING_IN_REPLAY],
        (_n(cat == F.lit(MISSING_IN_REPLAY)) + extra_copies).cast("long").alias("missing_in_replay"),
    ]
    return {r["__part"]: r.asDict() for r in held.groupBy("__part").agg(*aggs).collect()}


def count_explained(mism: DataFrame) -> dict[int, dict[str, int]]:
    """Mismatch rows with an explanation, and per explanation, per partition index."""
    aggs = [
        _n(F.size("__explanations") > 0).alias("explained"),
        *[_n(F.array_contains("__explanations", F.lit(e))).alias(f"x_{e}") for e in EXPLANATIONS],
    ]
    return {r["__part"]: r.asDict() for r in mism.groupBy("__part").agg(*aggs).collect()}


def _rate(match: float, compared: float) -> float:
    return match / compared if compared else 1.0


def summary_figures(
    pipeline: Pipeline,
    spec: ReconcileSpec,
    counts: Mapping[int, Mapping[str, int]],
    explained: Mapping[int, Mapping[str, int]],
    edges: list[int] | None,
    keys: Sequence[str],
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """(figures dict, summary rows) from :func:`count_identities` and :func:`count_explained`."""
    names = ("replay_rows", "live_rows", "match", "value_mismatch", "missing_in_replay", "extra_in_replay")
    xnames = ("explained", *[f"x_{e}" for e in EXPLANATIONS])

    def merged(i: int) -> dict[str, int]:
        c, x = counts.get(i) or {}, explained.get(i) or {}
        return {**{k: int(c.get(k) or 0) for k in names}, **{k: int(x.get(k) or 0) for k in xnames}}

    def block(d: Mapping[str, int]) -> dict[str, float]:
        out: dict[str, float] = {k: d[k] for k in (*names, "explained")}
        out["compared"] = d["match"] + d["value_mismatch"] + d["missing_in_replay"] + d["extra_in_replay"]
        out["unexplained"] = out["compared"] - d["match"] - d["explained"]
        out["match_rate"] = _rate(d["match"], out["compared"])
        return out

    bounds = edges or []  # no edges: no partitions
    parts: list[dict[str, Any]] = []
    for i in range(len(bounds) - 1 if bounds else 0):
        parts.append({"partition_key": keys[i], "start": iso(bounds[i]), "end": iso(bounds[i + 1]), **block(merged(i))})
    inside = [merged(i) for i in set(counts) | set(explained) if i >= 0]
    total_raw = {k: sum(d[k] for d in inside) for k in (*names, *xnames)}
    total = block(total_raw)
    figures = {
        "pipeline": pipeline.name,
        **total,
        "min_match": spec.min_match,
        "passed": total["match_rate"] >= spec.min_match,
        "explained_by": {e: total_raw[f"x_{e}"] for e in EXPLANATIONS},
        "live_rows_outside_partitions": int((counts.get(-1) or {}).get("live_rows") or 0),
        "partitions": parts,
    }

    def row(
        scope: str, key: str | None, start: datetime | None, end: datetime | None, d: Mapping[str, Any]
    ) -> tuple[Any, ...]:
        return (
            scope,
            key,
            start,
            end,
            d["replay_rows"],
            d["live_rows"],
            d["compared"],
            d["match"],
            d["value_mismatch"],
            d["missing_in_replay"],
            d["extra_in_replay"],
            d["explained"],
            d["unexplained"],
            d["match_rate"],
        )

    def ts(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)

    rows = [row("partition", p["partition_key"], ts(bounds[i]), ts(bounds[i + 1]), p) for i, p in enumerate(parts)]
    rows.append(row("total", None, ts(edges[0]) if edges else None, ts(edges[-1]) if edges else None, total))
    return figures, rows
