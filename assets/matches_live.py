"""The asset check ``matches_live``: each replayed partition laid beside what the live pipeline emitted.

A pipeline whose ``reconcile:`` block names a live source (``reconcile.live``) gets the
check on its ``windowed_aggregates``. For every partition a run commits (or, executed on
its own, every partition asked for), :func:`windowing.reconcile.compare.reconcile` compares the
partition's committed aggregates (and its late events, for the explanations) with the
live output, the partition's start and end as edges, so that live windows of other
partitions are out of scope. The check passes when the match rate is at least
``reconcile.minMatch`` (default 100 %). Failing, it is an ERROR when the block says
``blocking: true`` (the step fails after the partitions are committed, so Dagster runs
nothing downstream of the aggregates) and a WARN otherwise.

Its metadata are the figures ``rewindow reconcile`` prints: the match rate, the counts
per category, how many mismatches are explained and by what, the first mismatches as a
table with their explanation, and the command that writes all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import dagster as dg

from windowing.storage.store import partition_folder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.config import Pipeline
    from windowing.config.reconcile import LiveSource
    from windowing.reconcile.compare import ReconcileResult

LIVE_CHECK = "matches_live"
#: Mismatches shown in the check's table (all of them: the ``reproduce`` command).
MISMATCH_ROWS = 10


@dataclass(frozen=True)
class LivePartition:
    """A partition to reconcile: its key and arrival-time bounds, and its committed run
    (``run_path``) in its output folder (``output``); both None when nothing is committed."""

    key: str
    start: datetime
    end: datetime
    run_path: str | None
    output: str | None


def live_check_spec(pipeline: Pipeline, asset_key: dg.AssetKey) -> dg.AssetCheckSpec | None:
    """The ``matches_live`` check of ``pipeline``'s aggregates; None without ``reconcile.live``."""
    spec = getattr(pipeline, "reconcile", None)
    if spec is None or spec.live is None:
        return None
    where = spec.live.path or f"table {spec.live.table}"
    return dg.AssetCheckSpec(
        LIVE_CHECK,
        asset=asset_key,
        blocking=spec.blocking,
        description=(
            f"Each partition's windows against what the live pipeline emitted ({where}): matched on worker, key, "
            f"window and emission, values within the tolerance; passes at a match rate of at least "
            f"{100 * spec.min_match:g} % (reconcile.minMatch). Metadata: the counts per category, the explanations, "
            "the first mismatches. "
            + ("Blocking: a failure stops what is downstream." if spec.blocking else "Not blocking: a failure warns.")
        ),
    )


def live_check_results(
    spark: SparkSession,
    pipeline: Pipeline,
    pipeline_file: Path,
    asset_key: dg.AssetKey,
    partitions: Sequence[LivePartition],
) -> Iterator[tuple[str, dg.AssetCheckResult]]:
    """``(partition key, result)`` of ``matches_live`` for each of ``partitions``, in order.

    The live side is read once. A live side that cannot be read or does not fit the
    mapping (:class:`windowing.config.ConfigError`, :class:`windowing.storage.errors.InputError`,
    named), and a partition with nothing committed, fail the check with that message.
    """
    spec = pipeline.reconcile
    severity = dg.AssetCheckSeverity.ERROR if spec.blocking else dg.AssetCheckSeverity.WARN
    live, error = _live_side(spark, pipeline)
    for part in partitions:
        if error is not None:
            yield part.key, _failed(asset_key, severity, error)
            continue
        if part.run_path is None:
            yield (
                part.key,
                _failed(asset_key, severity, f"nothing committed for partition {part.key}: materialize it first"),
            )
            continue
        assert live is not None  # read when there is no error
        yield part.key, _compared(spark, pipeline, pipeline_file, asset_key, severity, live, part, part.run_path)


def _live_side(spark: SparkSession, pipeline: Pipeline) -> tuple[DataFrame | None, str | None]:
    """The live output, read once and checked against the mapping; or None and why it
    cannot be compared (:class:`windowing.config.ConfigError`,
    :class:`windowing.storage.errors.InputError`)."""
    from windowing.config import ConfigError
    from windowing.reconcile.live import check_live_columns, read_live
    from windowing.storage.errors import InputError

    spec = pipeline.reconcile
    try:
        live = read_live(spark, spec)
        check_live_columns(spec, live, pipeline)
    except (ConfigError, InputError) as exc:
        return None, f"the live output cannot be compared: {exc}"
    return live, None


def _compared(
    spark: SparkSession,
    pipeline: Pipeline,
    pipeline_file: Path,
    asset_key: dg.AssetKey,
    severity: dg.AssetCheckSeverity,
    live: DataFrame,
    part: LivePartition,
    run_path: str,
) -> dg.AssetCheckResult:
    """``matches_live`` of one committed partition (its run at ``run_path``) against ``live``."""
    from windowing.config import ConfigError
    from windowing.reconcile.compare import reconcile
    from windowing.storage.errors import InputError
    from windowing.storage.outputs import read_run

    spec = pipeline.reconcile
    try:
        outputs = read_run(spark, run_path)
        result = reconcile(
            spark,
            pipeline,
            spec,
            outputs.aggregates,
            live,
            outputs.late_events,
            partition_edges=[part.start, part.end],
            partition_keys=[part.key],
        )
    except (ConfigError, InputError) as exc:
        return _failed(asset_key, severity, f"partition {part.key} cannot be compared: {exc}")
    try:
        table = _mismatch_table(pipeline, result)
    finally:
        result.unpersist()
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=LIVE_CHECK,
        passed=result.passed,
        severity=severity,
        description=f"partition {part.key}: {_description(result.figures)}",
        metadata=_metadata(result.figures, table, _reproduce(pipeline, pipeline_file, part), spec.live),
    )


def _failed(asset_key: dg.AssetKey, severity: dg.AssetCheckSeverity, description: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=LIVE_CHECK,
        passed=False,
        severity=severity,
        description=description,
        metadata={"error": dg.MetadataValue.text(description)},
    )


def _description(f: Mapping[str, Any]) -> str:
    mismatches = f["compared"] - f["match"]
    return (
        f"{100 * f['match_rate']:.2f} % of {f['compared']:,} window emissions match the live output (minimum "
        f"{100 * f['min_match']:.2f} %): {f['value_mismatch']:,} value mismatch, {f['missing_in_replay']:,} "
        f"missing in replay, {f['extra_in_replay']:,} extra in replay"
        + (f"; {f['explained']:,} of {mismatches:,} explained" if mismatches else "")
    )


def _metadata(f: Mapping[str, Any], table: str, reproduce: str, live: LiveSource) -> dict[str, Any]:
    """The figures of ``rewindow reconcile`` (numbers Dagster plots across partitions)."""
    from windowing.reconcile.text import format_summary

    counts = (
        "compared",
        "match",
        "value_mismatch",
        "missing_in_replay",
        "extra_in_replay",
        "explained",
        "unexplained",
        "replay_rows",
        "live_rows",
    )
    return {
        # Percentages, as the description says them (the rates' 16 digits read as noise).
        "match_percent": dg.MetadataValue.float(round(100 * float(f["match_rate"]), 4)),
        "min_match_percent": dg.MetadataValue.float(round(100 * float(f["min_match"]), 4)),
        **{name: dg.MetadataValue.int(int(f[name])) for name in counts},
        "explained_by": dg.MetadataValue.json({k: v for k, v in f["explained_by"].items() if v}),
        "live_rows_outside_partition": dg.MetadataValue.int(int(f["live_rows_outside_partitions"])),
        "mismatches": dg.MetadataValue.md(table),
        "summary": dg.MetadataValue.text(format_summary(f)),
        "live": dg.MetadataValue.text(live.path or f"table {live.table}"),
        "reproduce": dg.MetadataValue.text(reproduce),
    }


def _mismatch_table(pipeline: Pipeline, result: ReconcileResult) -> str:
    """The first :data:`MISMATCH_ROWS` mismatches (by window start, worker, key, emission)
    as a markdown table; times formatted by Spark (UTC)."""
    from pyspark.sql import functions as F

    total = result.figures["compared"] - result.figures["match"]
    if not total:
        return "No mismatches: every window emission matches the live output."
    mismatches = result.mismatches
    named = [c for c in pipeline.id_columns if c in mismatches.columns]
    rows = (
        mismatches.orderBy("window_start", *named, "emission", "category")
        .limit(MISMATCH_ROWS)
        .select(
            "category",
            *[F.col(c).cast("string").alias(c) for c in named],
            F.date_format("window_start", "yyyy-MM-dd HH:mm:ss").alias("window_start"),
            F.date_format("window_end", "HH:mm:ss").alias("window_end"),
            "emission",
            F.array_join("explanations", ", ").alias("explanations"),
            "detail",
        )
        .collect()
    )

    def cell(v: object) -> str:
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")

    header = ["category", *named, "window", "emission", "explained by", "detail"]
    lines = [
        f"First {len(rows)} of {total:,} mismatches (all of them: the `reproduce` command).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for r in rows:
        cells = [
            r["category"],
            *[r[c] for c in named],
            f"{r['window_start']} - {r['window_end']}",
            r["emission"],
            r["explanations"] or "unexplained",
            r["detail"],
        ]
        lines.append("| " + " | ".join(cell(v) for v in cells) + " |")
    return "\n".join(lines)


def _reproduce(pipeline: Pipeline, pipeline_file: Path, part: LivePartition) -> str:
    """The ``rewindow reconcile`` command that writes this partition's full report."""

    def utc(t: datetime) -> str:
        return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    return (
        f"rewindow reconcile --config {pipeline_file} --replay {part.output} --partition-edge {utc(part.start)} "
        f"--partition-edge {utc(part.end)} --output reconcile/{pipeline.name}/{partition_folder(part.key)}"
    )
