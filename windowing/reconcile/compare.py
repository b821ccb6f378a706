"""Compare a replay's ``aggregates`` with the live pipeline's (:func:`reconcile`): the
comparison the package docstring describes, planned with one shuffle, and its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Sequence

from pyspark.sql import functions as F

from windowing.config import Pipeline
from windowing.config.reconcile import ReconcileSpec
from windowing.reconcile.explanations import explanation_columns
from windowing.reconcile.figures import count_explained, count_identities, iso, summary_figures
from windowing.reconcile.live import check_live_columns
from windowing.reconcile.matching import (
    Ids,
    category,
    compared_aggregates,
    equal_values,
    hold_identities,
    mismatch_columns,
    mismatch_rows,
    paired,
    partition_column,
    window_figures,
)
from windowing.reconcile.vocabulary import SUMMARY_SCHEMA
from windowing.storage.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class ReconcileResult:
    """What :func:`reconcile` found.

    ``mismatches``: one row per identity that is not a ``MATCH``, and one per further
    copy of a repeated live identity (columns :data:`windowing.config.MISMATCH_COLUMNS`, the worker and
    key under their own names, and ``live_<aggregate>`` / ``replay_<aggregate>`` for
    each compared aggregate), inside the partitions only.
    ``summary``: one row per partition (``scope = 'partition'``, with edges) and one for
    the total (``scope = 'total'``), columns :data:`SUMMARY_COLUMNS`. ``figures``: the
    total's counts (``replay_rows``, ``live_rows``, ``compared``, one per category,
    ``explained``, ``unexplained``), ``match_rate``, ``min_match``, ``passed``,
    ``explained_by`` (mismatch rows per explanation), ``partitions`` (the same figures
    per partition) and ``live_rows_outside_partitions``. :meth:`unpersist` releases the
    comparison Spark holds for ``mismatches``.
    """

    mismatches: Any
    summary: Any
    figures: dict[str, Any]
    pipeline: str = ""
    _persisted: Any = field(default=None, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return bool(self.figures["passed"])

    def unpersist(self) -> None:
        if self._persisted is not None:
            self._persisted.unpersist()


def _edges_ms(edges: Sequence[Any]) -> list[int]:
    out = []
    for e in edges:
        if isinstance(e, datetime):
            if e.tzinfo is None:
                raise ValueError(f"partition edge {e!r} is a naive datetime; give an aware UTC datetime or epoch ms")
            out.append(int(e.timestamp() * 1000))
        elif isinstance(e, int) and not isinstance(e, bool):
            out.append(e)
        else:
            raise ValueError(f"partition edge {e!r} must be an aware datetime or epoch milliseconds")
    if len(out) < 2 or any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"partition edges {list(edges)!r} must be at least two times, strictly increasing")
    return out


def reconcile(
    spark: SparkSession,
    pipeline: Pipeline,
    spec: ReconcileSpec,
    replay_aggregates_df: DataFrame,
    live_df: DataFrame,
    late_events_df: DataFrame | None = None,
    partition_edges: Sequence[Any] | None = None,
    partition_keys: Sequence[str] | None = None,
) -> ReconcileResult:
    """Compare a replay's ``aggregates`` with the live pipeline's (:mod:`windowing.reconcile`).

    Args:
        spark: the SparkSession.
        pipeline: the pipeline both sides ran.
        spec: the ``reconcile:`` block (:func:`windowing.config.reconcile.parse_reconcile`).
        replay_aggregates_df: the replay's ``aggregates`` output (one partition, several
            unioned, or one replay over everything).
        live_df: the live aggregates (:func:`windowing.reconcile.live.read_live`), any row order.
        late_events_df: the replay's ``late_events``; enables :data:`LATE_IN_REPLAY`.
        partition_edges: the arrival-time bounds of the replayed partitions, increasing
            (aware datetimes or epoch ms): ``[start, end]`` for one partition. Enables
            per-partition figures and :data:`PARTITION_EDGE`; live rows placed outside
            them are out of scope.
        partition_keys: a name for each partition (default: its start, ISO-8601 UTC).

    Returns:
        :class:`ReconcileResult`. Its figures are computed here (two Spark jobs);
        ``mismatches`` is lazy, over a comparison Spark holds until
        :meth:`ReconcileResult.unpersist`.

    Raises:
        ConfigError: a mapped live column is missing or of an unusable type (named).
        InputError: the replay's aggregates lack a column reconcile reads.
        ValueError: bad partition edges or keys.

    How (the plan has one shuffle): replay rows, live rows and the replay's late-event
    counts per window form one union, hash-partitioned by window ``(worker, key,
    window_start, window_end)``. A hash aggregation by ``(window, emission)`` inside those
    partitions pairs the sides: one row per identity, with the replay's and the live
    values side by side and how many rows each side has. Spark holds that (narrow) table;
    the figures count it, and the mismatches join, inside the same partitions, the
    figures of their window (a second aggregation of the held table by window). Only
    without a live emission column (or worker) are rows numbered first, which sorts.
    """
    _check_replay_columns(pipeline, spec, replay_aggregates_df)
    check_live_columns(spec, live_df, pipeline, replay_aggregates_df)
    edges, keys = _partitions_of(partition_edges, partition_keys)
    live_types = {f.name: f.dataType for f in live_df.schema.fields}
    replay_types = {f.name: f.dataType for f in replay_aggregates_df.schema.fields}
    compared = compared_aggregates(pipeline, spec, live_types, replay_types)
    ids = Ids(pipeline, spec.columns, replay_types)
    ident = paired(
        spark,
        pipeline,
        spec,
        compared,
        ids,
        (replay_aggregates_df, replay_types),
        (live_df, live_types),
        late_events_df,
    )
    count_agg = next(
        (a for a in compared if a.agg.type == "count" and a.agg.column is None),
        next((a for a in compared if a.agg.type == "count"), None),
    )
    differing = F.array_compact(
        F.array(
            *[F.when(~equal, F.lit(a.agg.name)) for a, equal in zip(compared, equal_values(compared, spec.tolerance))]
        )
    )
    ident = ident.withColumn("__category", category(differing))
    held = hold_identities(ident, ids, compared, count_agg, differing, partition_column(edges))
    counts = count_identities(held)

    figures_by_window = window_figures(held, count_agg, ids)
    mism = mismatch_rows(held, figures_by_window, ids)
    explanations, details = explanation_columns(pipeline, compared, count_agg, edges)
    mism = mism.withColumn("__explanations", F.array_compact(F.array(*explanations))).withColumn(
        "__detail", F.concat_ws("; ", *details)
    )
    explained = count_explained(mism)
    figures, summary_rows = summary_figures(pipeline, spec, counts, explained, edges, keys)
    out_cols = mismatch_columns(pipeline, compared, keys, ids)
    mismatches = mism.where(F.col("__part") >= 0).select(*[c.alias(n) for n, c in out_cols])
    summary = spark.createDataFrame(summary_rows, SUMMARY_SCHEMA)
    return ReconcileResult(
        mismatches=mismatches, summary=summary, figures=figures, pipeline=pipeline.name, _persisted=held
    )


def _partitions_of(
    partition_edges: Sequence[Any] | None, partition_keys: Sequence[str] | None
) -> tuple[list[int] | None, list[str]]:
    """The partitions' edges in epoch ms (None: not given) and their keys (by default
    their starts, ISO-8601 UTC). Raises ValueError for bad edges or a key per partition
    missing."""
    edges = _edges_ms(partition_edges) if partition_edges is not None else None
    if partition_keys is not None and (edges is None or len(partition_keys) != len(edges) - 1):
        raise ValueError("partition_keys: give one key per partition (len(partition_edges) - 1)")
    keys = list(partition_keys) if partition_keys is not None else ([iso(e) for e in edges[:-1]] if edges else [])
    return edges, keys


def _check_replay_columns(pipeline: Pipeline, spec: ReconcileSpec, df: DataFrame) -> None:
    """Refuse replay aggregates lacking a column reconcile reads (not a rewindow output?)."""
    wanted = ["window_start", "window_end", "emission", "emit_reason", *[n for n, _ in spec.columns.aggregates]]
    wanted += [*pipeline.window.keys, *([pipeline.source.worker] if pipeline.source.worker else [])]
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise InputError(
            f"the replay's aggregates lack column {missing[0]!r} (its columns: {', '.join(df.columns)}); "
            f"is it the aggregates output of pipeline {pipeline.name!r}?"
        )
