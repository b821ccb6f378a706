"""Reconcile a replay with the live pipeline's own output (``rewindow reconcile``).

The live side is any dataset Spark reads (a path or URI in a format, or a catalog table)
holding the windows the live pipeline emitted; a column mapping (the ``reconcile:`` block
of the pipeline YAML, :func:`parse_reconcile`) says which of its columns hold the key,
the window bounds, the aggregates and, optionally, the worker, the emission number and
the emit time. :func:`reconcile` compares it with a replay's ``aggregates`` output, all
in Spark DataFrame expressions (no Python per row).

**Matching.** A window emission is identified by
``(worker, key, window_start_ms, window_end_ms, emission)``: the worker only when the
mapping has one, the key when the pipeline has one (a null worker or key is a value like
any other, as in the replay). Without a live emission column the live rows of a window
are numbered ``1, 2, ...`` in emit order (emit time, then the aggregate values, so the
numbering never depends on row order); without a live emit time either, both sides are
numbered by their values; without a live worker, the replay's rows of a (key, window) are
numbered over its workers in emit order (from the replay's first emission number of the
window, so a replay of a later partition continues the count). A live identity given more than once is
compared once (with its copies' greatest values: the same values when the copies are
exact, as a sink writing twice makes them); each further copy is ``MISSING_IN_REPLAY``,
explained ``DUPLICATE_IN_LIVE``. Replay snapshots (``emit_reason = AGGREGATE``, the
``atAggregate`` trigger) are not windows and are left out.

**Comparing.** Counts, distinct counts and every other aggregate whose types on both
sides are not floating point are compared exactly (``<=>``: null equals null). When
either side is floating point, two values ``live`` and ``replay`` match when they are
equal (NaN equals NaN, infinities their own sign) or
``|live - replay| <= max(absolute, relative * max(|live|, |replay|))``.

**Categories** of each identity: ``MATCH``, ``VALUE_MISMATCH`` (both sides have it; the
aggregates that differ are listed with both values), ``MISSING_IN_REPLAY`` (only the
live side has it), ``EXTRA_IN_REPLAY`` (only the replay has it). The match rate is
``MATCH / (all four)``, 1.0 when both sides are empty.

**Explanations** come from the replay's own data only (:data:`EXPLANATIONS`).

**Partitions.** Given ``partition_edges`` ``e0 < e1 < ... < en`` (the arrival-time
bounds of the replayed partitions), each identity belongs to the partition ``[ei, ei+1)``
holding its *placing time*: the replay's emit time, else the live emit time, else the
window end (a replay row outside the edges goes to the first or last partition; a live
row that matches nothing and lies outside them is out of scope and only counted,
``live_rows_outside_partitions``). Figures are given per partition and in total.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Mapping, NoReturn, Sequence, cast

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.catalog import read_published

# The reconcile: block is parsed with the rest of the pipeline YAML (windowing.config);
# LiveSource, ReconcileSpec, parse_reconcile, ... are importable from here too, as before.
from windowing.config import DEFAULT_ABSOLUTE_TOLERANCE as DEFAULT_ABSOLUTE_TOLERANCE
from windowing.config import DEFAULT_MIN_MATCH as DEFAULT_MIN_MATCH
from windowing.config import DEFAULT_RELATIVE_TOLERANCE as DEFAULT_RELATIVE_TOLERANCE
from windowing.config import MISMATCH_COLUMNS as MISMATCH_COLUMNS
from windowing.config import (
    Aggregate,
    ConfigError,
    Pipeline,
    _nearest,
    load_pipeline,
    parse_share,
)
from windowing.config import LiveColumns as LiveColumns
from windowing.config import LiveSource as LiveSource
from windowing.config import ReconcileSpec as ReconcileSpec
from windowing.config import Tolerance as Tolerance
from windowing.config import parse_reconcile as parse_reconcile
from windowing.durations import format_duration_ms
from windowing.metastore import names_table, session_conf_for_tables
from windowing.runner.columns import col as _col
from windowing.runner.columns import epoch_ms
from windowing.runner.session import spark_session
from windowing.storage.commits import current_commit, new_run_id
from windowing.storage.errors import InputError, first_line, missing_path
from windowing.storage.lake import Lake, glob_escape, join
from windowing.storage.outputs import Staged, check_output_target, read_outputs, write_datasets

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

    from windowing.storage.commits import Commit

# --------------------------------------------------------------------------- vocabulary

MATCH = "MATCH"
VALUE_MISMATCH = "VALUE_MISMATCH"
MISSING_IN_REPLAY = "MISSING_IN_REPLAY"
EXTRA_IN_REPLAY = "EXTRA_IN_REPLAY"
CATEGORIES = (MATCH, VALUE_MISMATCH, MISSING_IN_REPLAY, EXTRA_IN_REPLAY)

#: The live and replay sides emitted the window a different number of times: one of them
#: flushed it idle where the other closed it once (IDLE against WATERMARK).
EMIT_REASON = "EMIT_REASON"
#: The live side counted more events than the replay, and the replay has events of this
#: window in its late_events output (the recorded batches may not be the live commits).
LATE_IN_REPLAY = "LATE_IN_REPLAY"
#: The replay counted more events than the live side and closed the window by watermark:
#: with shorter live commit batches, the events just before that commit were late there.
LATE_IN_LIVE = "LATE_IN_LIVE"
#: A partition edge lies in ``(window_start, max(window_end, emit times)]``: the
#: window's events and its emission fall in different partitions.
PARTITION_EDGE = "PARTITION_EDGE"
#: Only floating-point aggregates differ, each by at most :data:`ROUNDING_RELATIVE`
#: relative: a different summation order, not different events.
FLOAT_ROUNDING = "FLOAT_ROUNDING"
#: The live side has this (worker, key, window, emission) more than once, the copies alike.
DUPLICATE_IN_LIVE = "DUPLICATE_IN_LIVE"
#: The live side has null aggregates where the replay has values: nothing about events
#: can be read from them (not a late event, not an idle flush).
NULL_IN_LIVE = "NULL_IN_LIVE"
#: The live side has this (worker, key, window, emission) more than once with different
#: values: which copy is right cannot be told, so no other explanation is given.
CONFLICTING_DUPLICATE = "CONFLICTING_DUPLICATE"
EXPLANATIONS = (
    EMIT_REASON,
    LATE_IN_REPLAY,
    LATE_IN_LIVE,
    PARTITION_EDGE,
    FLOAT_ROUNDING,
    DUPLICATE_IN_LIVE,
    NULL_IN_LIVE,
    CONFLICTING_DUPLICATE,
)

#: Largest relative difference a float aggregate can owe to summation order alone in
#: this explanation (double sums of up to millions of values drift by far less).
ROUNDING_RELATIVE = 1e-6

#: Datasets of a reconcile run (``OUT/runs/<run id>/``) and its figures (JSON text).
OUTPUTS = ("mismatches", "summary")
FIGURES = "figures.json"

SUMMARY_COLUMNS = (
    "scope",
    "partition_key",
    "partition_start",
    "partition_end",
    "replay_rows",
    "live_rows",
    "compared",
    "match",
    "value_mismatch",
    "missing_in_replay",
    "extra_in_replay",
    "explained",
    "unexplained",
    "match_rate",
)
_SUMMARY_SCHEMA = (
    "scope string, partition_key string, partition_start timestamp, partition_end timestamp, replay_rows long, "
    "live_rows long, compared long, match long, value_mismatch long, missing_in_replay long, "
    "extra_in_replay long, explained long, unexplained long, match_rate double"
)
_SNAPSHOT_REASON = "AGGREGATE"
#: Reasons a window is emitted for (contract section 10), counted per window for EMIT_REASON.
_CLOSE_REASONS = ("WATERMARK", "IDLE", "MAX_DURATION", "END_OF_INPUT")
_FIELD = "reconcile"


def load_reconcile(path: str | Path) -> tuple[Pipeline, ReconcileSpec]:
    """The pipeline of a YAML file and its ``reconcile:`` block (defaults without one).

    ``load_pipeline(path)`` and its ``reconcile`` field. Raises :class:`ConfigError`
    prefixed with the file's path.
    """
    pipeline = load_pipeline(path)
    return pipeline, pipeline.reconcile


# --------------------------------------------------------------------------- the live side


def read_live(spark: SparkSession, spec: ReconcileSpec, path: str | None = None, fmt: str | None = None) -> DataFrame:
    """The live aggregates: ``path`` (overrides ``spec.live``), else ``spec.live``'s path or table.

    Raises:
        ConfigError: neither ``path`` nor ``spec.live`` names the live side.
        InputError: the path, table or format does not exist, or Spark cannot read it.
    """
    live = spec.live or LiveSource()
    if path is None and live.table:
        try:
            df = spark.read.table(live.table)
            df.schema  # noqa: B018 - resolve now: a missing table fails here, named
            return df
        except Exception as exc:  # Spark raises its own types
            raise InputError(f"{_FIELD}.live.table {live.table!r}: cannot read the table: {first_line(exc)}") from exc
    where = path or live.path
    if not where:
        raise ConfigError(f"--live: no live aggregates given; pass --live or set {_FIELD}.live.path or .table")
    where = str(where)
    try:
        found = Lake(spark).exists(where)
    except Exception as exc:  # no FileSystem for the scheme (a missing jar), ...
        raise InputError(f"{where}: cannot reach the live aggregates: {first_line(exc)}") from exc
    if not found:
        raise InputError(f"{where}: the live aggregates do not exist")
    reader = spark.read.format(fmt or live.format)
    if live.schema:
        reader = reader.schema(live.schema)
    for k, v in live.options:
        reader = reader.option(k, v)
    try:
        df = reader.load(where)
        df.schema  # noqa: B018
    except Exception as exc:
        if missing_path(exc):
            raise InputError(f"{where}: the live aggregates do not exist") from exc
        raise InputError(f"{where}: cannot read the live aggregates ({fmt or live.format}): {first_line(exc)}") from exc
    return df


def _family(dtype: DataType) -> str:
    """A type's comparison family: integral, floating, decimal, string, timestamp, or its own name."""
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return "integral"
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return "floating"
    if isinstance(dtype, T.DecimalType):
        return "decimal"
    if isinstance(dtype, (T.StringType, T.VarcharType, T.CharType)):
        return "string"
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return "timestamp"
    return dtype.simpleString()


_NUMERIC = ("integral", "floating", "decimal")


def _comparable(live: str, replay: str) -> bool:
    return live == replay or (live in _NUMERIC and replay in _NUMERIC)


def check_live_columns(
    spec: ReconcileSpec, live_df: DataFrame, pipeline: Pipeline, replay_df: DataFrame | None = None
) -> None:
    """Refuse live aggregates that lack a mapped column or hold one with an unusable type.

    Window bounds and emit time must be timestamps or integers (epoch ms), the emission
    an integer, counts and distinct counts integers, sums and averages numbers. With
    ``replay_df`` (the replay's aggregates) the worker, key and every aggregate must be
    of a type comparable with the replay's (numbers with numbers, strings with strings).

    Raises:
        ConfigError: naming the ``reconcile.columns`` field, the live column and its
            type, the live columns and the nearest of them.
    """
    types = {f.name: f.dataType for f in live_df.schema.fields}
    have = list(types)
    replay_types = {f.name: f.dataType for f in replay_df.schema.fields} if replay_df is not None else {}
    agg_types = {a.name: a.type for a in pipeline.aggregates}
    cf = f"{_FIELD}.columns"
    for fld, col in spec.columns.uses():
        if col not in types:
            listed = ", ".join(sorted(have)[:40]) + (", ..." if len(have) > 40 else "")
            msg = f"{fld}: column {col!r} is not in the live aggregates (its columns: {listed or 'none'})"
            if fld in spec.columns.defaulted or (
                fld.startswith(f"{cf}.aggregates.") and f"{cf}.aggregates" in spec.columns.defaulted
            ):
                msg += f"; {col!r} is the default (the replay's name): map the live column under {fld}"
            near = _nearest(col, have)
            if near:
                msg += f"; did you mean {near!r}?"
            raise ConfigError(msg)
        family = _family(types[col])
        shown = types[col].simpleString()

        def refuse(wanted: str, fld: str = fld, col: str = col, shown: str = shown) -> NoReturn:
            raise ConfigError(f"{fld}: live column {col!r} is {shown}; it must be {wanted}")

        role = fld[len(cf) + 1 :]
        replay_col: str | None
        if role in ("windowStart", "windowEnd", "emitTime") and family not in ("timestamp", "integral"):
            refuse("a timestamp or epoch milliseconds (an integer column)")
        if role == "emission" and family != "integral":
            refuse("an integer (1 for a window's first emission, 2 for the next, ...)")
        if role.startswith("aggregates."):
            name = role[len("aggregates.") :]
            if agg_types[name] in ("count", "distinct") and family != "integral":
                refuse(f"an integer (aggregate {name!r} is a {agg_types[name]})")
            if agg_types[name] in ("sum", "avg") and family not in _NUMERIC:
                refuse(f"a number (aggregate {name!r} is a {agg_types[name]})")
            replay_col = name
        elif role == "key":
            replay_col = pipeline.window.key
        elif role == "worker":
            replay_col = pipeline.source.worker
        else:
            continue
        if replay_col in replay_types:
            rt = replay_types[replay_col]
            if not _comparable(family, _family(rt)):
                refuse(f"comparable with the replay's {replay_col!r}, which is {rt.simpleString()}")


# --------------------------------------------------------------------------- reconcile


@dataclass(frozen=True)
class ReconcileResult:
    """What :func:`reconcile` found.

    ``mismatches``: one row per identity that is not a ``MATCH``, and one per further
    copy of a repeated live identity (columns :data:`MISMATCH_COLUMNS`, the worker and
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


@dataclass(frozen=True)
class _Compared:
    """One compared aggregate: its pipeline definition, its live column, its index (its
    values are ``__a<i>`` in the union of both sides, ``__r_a<i>`` / ``__l_a<i>`` once
    paired) and whether it is compared with the tolerance (either side floating point)."""

    agg: Aggregate
    live_column: str
    index: int
    floating: bool

    @property
    def value(self) -> str:
        return f"__a{self.index}"

    @property
    def replay(self) -> str:
        return f"__r_a{self.index}"

    @property
    def live(self) -> str:
        return f"__l_a{self.index}"


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


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


#: Sides of the union the comparison runs over.
_REPLAY, _LIVE, _LATE = 0, 1, 2


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
    """Compare a replay's ``aggregates`` with the live pipeline's (module docstring).

    Args:
        spark: the SparkSession.
        pipeline: the pipeline both sides ran.
        spec: the ``reconcile:`` block (:func:`parse_reconcile`).
        replay_aggregates_df: the replay's ``aggregates`` output (one partition, several
            unioned, or one replay over everything).
        live_df: the live aggregates (:func:`read_live`), any row order.
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
    compared = _compared_aggregates(pipeline, spec, live_types, replay_types)
    ids = _Ids(pipeline, spec.columns, replay_types)
    ident = _paired(
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
            *[F.when(~equal, F.lit(a.agg.name)) for a, equal in zip(compared, _equal_values(compared, spec.tolerance))]
        )
    )
    ident = ident.withColumn("__category", _category(differing))
    held = _held(ident, ids, compared, count_agg, differing, _partition_column(edges))
    counts = _count(held)

    figures_by_window = _window_figures(held, count_agg, ids)
    mism = _mismatch_rows(held, figures_by_window, ids)
    explanations, details = _explanations(pipeline, compared, count_agg, edges)
    mism = mism.withColumn("__explanations", F.array_compact(F.array(*explanations))).withColumn(
        "__detail", F.concat_ws("; ", *details)
    )
    explained = _count_explained(mism)
    figures, summary_rows = _figures(pipeline, spec, counts, explained, edges, keys)
    out_cols = _mismatch_columns(pipeline, compared, keys, ids)
    mismatches = mism.where(F.col("__part") >= 0).select(*[c.alias(n) for n, c in out_cols])
    summary = spark.createDataFrame(summary_rows, _SUMMARY_SCHEMA)
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
    keys = list(partition_keys) if partition_keys is not None else ([_iso(e) for e in edges[:-1]] if edges else [])
    return edges, keys


def _compared_aggregates(
    pipeline: Pipeline, spec: ReconcileSpec, live_types: dict[str, Any], replay_types: dict[str, Any]
) -> list[_Compared]:
    """The aggregates compared (``spec.columns.aggregates``), floating point when either
    side's column is."""
    by_name = {a.name: a for a in pipeline.aggregates}
    return [
        _Compared(by_name[name], col, i, "floating" in (_family(live_types[col]), _family(replay_types[name])))
        for i, (name, col) in enumerate(spec.columns.aggregates)
    ]


def _paired(
    spark: SparkSession,
    pipeline: Pipeline,
    spec: ReconcileSpec,
    compared: list[_Compared],
    ids: _Ids,
    replay: tuple[DataFrame, dict[str, Any]],
    live: tuple[DataFrame, dict[str, Any]],
    late_events_df: DataFrame | None,
) -> DataFrame:
    """One row per identity (window, emission), both sides' values side by side: the
    union of the replay's rows (``replay``: the DataFrame and its column types), the live
    rows (``live``, likewise) and the replay's late-event counts per window,
    hash-partitioned by window, emissions numbered where the live side has no emission
    column, then aggregated by identity (:func:`_identities`)."""
    (replay_df, replay_types), (live_df, live_types) = replay, live
    cols = spec.columns
    rows = _replay_rows(pipeline, replay_df, replay_types, compared, ids).unionByName(
        _live_rows(pipeline, cols, live_df, live_types, replay_types, compared, ids), allowMissingColumns=True
    )
    late = _late_rows(pipeline, late_events_df, ids)
    if late is not None:
        rows = rows.unionByName(late, allowMissingColumns=True)
    rows = rows.repartition(_partitions(spark), *ids.window)
    rows = _number_emissions(rows, cols, pipeline, compared, ids)
    return _identities(rows, compared, ids)


def _equal_values(compared: list[_Compared], tol: Tolerance) -> list[Column]:
    """Per compared aggregate, a Column: both sides equal (exactly, or within the
    tolerance when floating), False where either side is missing."""
    equal = []
    for a in compared:
        r, lv = F.col(a.replay), F.col(a.live)
        same = r.eqNullSafe(lv)
        if a.floating:
            diff, scale = F.abs(r - lv), F.greatest(F.abs(r), F.abs(lv))
            same = same | (diff <= F.greatest(F.lit(tol.absolute), F.lit(tol.relative) * scale))
        equal.append(F.coalesce(same, F.lit(False)))
    return equal


def _category(differing: Column) -> Column:
    """An identity's category: on both sides (matching unless an aggregate differs, the
    names in ``differing``), in the replay only, or live only."""
    r_here, l_here = F.col("__r_n") > 0, F.col("__l_n") > 0
    return (
        F.when(r_here & l_here, F.when(F.size(differing) == 0, F.lit(MATCH)).otherwise(F.lit(VALUE_MISMATCH)))
        .when(r_here, F.lit(EXTRA_IN_REPLAY))
        .when(l_here, F.lit(MISSING_IN_REPLAY))
    )


def _partition_column(edges: list[int] | None) -> Column:
    """The partition of each identity (index into the partitions), by its placing time:
    the replay's emission, else the live one, else the window end. -1: outside every
    partition (live rows only; a replay row outside goes to the nearest edge's). 0 when
    no partitions are given."""
    if not edges:
        return F.lit(0)
    place = F.coalesce(F.col("__r_emit_ms"), F.col("__l_emit_ms"), F.col("__we"))
    part = F.lit(-1)
    for i in reversed(range(len(edges) - 1)):
        part = F.when((place >= F.lit(edges[i])) & (place < F.lit(edges[i + 1])), F.lit(i)).otherwise(part)
    clamped = F.when(place < F.lit(edges[0]), F.lit(0)).otherwise(F.lit(len(edges) - 2))
    return F.when((part == -1) & (F.col("__r_n") > 0), clamped).otherwise(part)


def _held(
    ident: DataFrame, ids: _Ids, compared: list[_Compared], count_agg: _Compared | None, differing: Column, part: Column
) -> DataFrame:
    """Every identity, narrow, persisted: the figures and the mismatches read it. Values
    only where they are needed later: for mismatches and duplicates, and the count every
    window's totals add up."""
    keep = (F.col("__category") != F.lit(MATCH)) | (F.col("__l_n") > 1)
    return ident.select(
        *ids.window,
        "__em",
        "__r_n",
        "__l_n",
        "__category",
        part.alias("__part"),
        "__r_reason",
        "__r_emit_ms",
        "__l_emit_ms",
        "__late_n",
        "__late_first_ms",
        "__late_last_ms",
        ((F.col("__l_n") > 1) & (F.col("__l_hash_lo") != F.col("__l_hash_hi"))).alias("__l_conflict"),
        F.when(keep, differing).alias("__differing"),
        *[
            (
                F.col(c)
                if count_agg is not None and c in (count_agg.replay, count_agg.live)
                else F.when(keep, F.col(c))
            ).alias(c)
            for a in compared
            for c in (a.replay, a.live)
        ],
    ).persist(StorageLevel.MEMORY_AND_DISK)


def _partitions(spark: SparkSession) -> int:
    """How many partitions the union is hashed into: ``spark.sql.shuffle.partitions``, but
    at least 4 per core. Each task pairs its windows in one hash table; smaller tables
    were measured a little faster (a session of 2 partitions, as the tests use: 5-6 s
    against 6-7 s at the bench's quick size), and the tasks balance better."""
    shuffle = int(cast(str, spark.conf.get("spark.sql.shuffle.partitions")))  # set in every session
    try:
        cores = spark.sparkContext.defaultParallelism
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: the setting alone
        return shuffle
    return max(shuffle, 4 * cores)


class _Ids:
    """The columns that identify a window in the union: ``window`` (the partitioning and
    grouping columns) and how the output gets the worker and key back.

    A null worker or key is an ordinary value (docs/semantics.md section 1), so each is
    carried as ``(coalesce(value, a default of its type), value is null)``: plain
    equalities then compare it null-safely, and Spark can join by it inside the
    partitions it already has (a ``<=>`` join would make it shuffle again).
    """

    def __init__(self, pipeline: Pipeline, cols: LiveColumns, replay_types: Mapping[str, Any]) -> None:
        self.worker = pipeline.source.worker if cols.worker is not None else None
        self.key = pipeline.window.key
        self.types: dict[str, Any] = {
            "__w": replay_types.get(self.worker) if self.worker is not None else None,
            "__k": replay_types.get(self.key) if self.key is not None else None,
        }
        named = [c for c, name in (("__w", self.worker), ("__k", self.key)) if name]
        self.window = [n for c in named for n in (c, f"{c}_null")] + ["__ws", "__we"]

    def encode(self, name: str, value: Column) -> list[Column]:
        """``value`` (in the replay's type) as the columns ``name`` and ``name_null``."""
        dtype = self.types[name]
        family = _family(dtype)
        if family in ("string", "binary"):
            default = F.lit("").cast(dtype)
        elif family in (*_NUMERIC, "boolean"):
            default = F.lit(0).cast(dtype)
        elif family == "timestamp":
            default = F.timestamp_millis(F.lit(0)).cast(dtype)
        elif family == "date":
            default = F.lit("1970-01-01").cast(dtype)
        else:  # a complex key: grouped as it is (null-safe there); joined by equality
            return [value.alias(name), value.isNull().alias(f"{name}_null")]
        return [F.coalesce(value, default).alias(name), value.isNull().alias(f"{name}_null")]

    def decode(self, name: str) -> Column:
        return F.when(~F.col(f"{name}_null"), F.col(name))


def _check_replay_columns(pipeline: Pipeline, spec: ReconcileSpec, df: DataFrame) -> None:
    """Refuse replay aggregates lacking a column reconcile reads (not a rewindow output?)."""
    wanted = ["window_start", "window_end", "emission", "emit_reason", *[n for n, _ in spec.columns.aggregates]]
    wanted += [c for c in (pipeline.window.key, pipeline.source.worker) if c]
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise InputError(
            f"the replay's aggregates lack column {missing[0]!r} (its columns: {', '.join(df.columns)}); "
            f"is it the aggregates output of pipeline {pipeline.name!r}?"
        )


def _ms(col: Column, dtype: Any) -> Column:
    """Epoch milliseconds of a timestamp or integer (epoch ms) column."""
    if _family(dtype) == "timestamp":
        return F.unix_millis(col.cast("timestamp"))
    return col.cast("long")


def _value_type(a: _Compared, replay_types: Mapping[str, Any]) -> Any:
    """The type both sides' values of ``a`` take in the union: double when compared with
    the tolerance, else the replay's."""
    return T.DoubleType() if a.floating else replay_types[a.agg.name]


def _reason_code(reason: Column) -> Column:
    """An emit reason as its index in :data:`_CLOSE_REASONS` (a number aggregates cheaply)."""
    code = F.lit(len(_CLOSE_REASONS))
    for i, r in reversed(list(enumerate(_CLOSE_REASONS))):
        code = F.when(reason == F.lit(r), F.lit(i)).otherwise(code)
    return F.when(reason.isNotNull(), code)


def _reason_name(code: Column) -> Column:
    return F.element_at(F.array(*[F.lit(r) for r in (*_CLOSE_REASONS, "OTHER")]), code + 1)


def _replay_rows(
    pipeline: Pipeline, df: DataFrame, replay_types: Mapping[str, Any], compared: list[_Compared], ids: _Ids
) -> DataFrame:
    """The replay's windows (snapshots left out): side 0, window columns, ``__em``,
    ``__emit_ms``, ``__reason`` (a code), the values; ``__worker_order`` when the live
    side has no worker (the replay's emissions are then renumbered over the workers)."""
    kept = df.where(F.col("emit_reason").isNull() | (F.col("emit_reason") != F.lit(_SNAPSHOT_REASON)))
    emit_ms = (
        _ms(F.col("emit_time"), replay_types["emit_time"]) if "emit_time" in replay_types else F.lit(None).cast("long")
    )
    select = [F.lit(_REPLAY).alias("__side")]
    if ids.worker:
        select += ids.encode("__w", _col(ids.worker))
    if ids.key:
        select += ids.encode("__k", _col(ids.key))
    select += [
        _ms(F.col("window_start"), replay_types["window_start"]).alias("__ws"),
        _ms(F.col("window_end"), replay_types["window_end"]).alias("__we"),
        F.col("emission").cast("long").alias("__em"),
        emit_ms.alias("__emit_ms"),
        _reason_code(F.col("emit_reason")).alias("__reason"),
    ]
    select += [_col(a.agg.name).cast(_value_type(a, replay_types)).alias(a.value) for a in compared]
    if pipeline.source.worker is not None and not ids.worker:
        select.append(_col(pipeline.source.worker).cast("string").alias("__worker_order"))
    return kept.select(*select)


def _live_rows(
    pipeline: Pipeline,
    cols: LiveColumns,
    df: DataFrame,
    live_types: Mapping[str, Any],
    replay_types: Mapping[str, Any],
    compared: list[_Compared],
    ids: _Ids,
) -> DataFrame:
    """The live windows: side 1, times in epoch ms, the worker, key and values in the
    replay's types (``try_cast``: a value the replay's type cannot hold is null, so it
    mismatches rather than fails), ``__em`` the mapped emission or null."""
    select = [F.lit(_LIVE).alias("__side")]
    if ids.worker:
        select += ids.encode("__w", _col(cast(str, cols.worker)).try_cast(ids.types["__w"]))  # mapped: ids.worker
    if ids.key:
        select += ids.encode("__k", _col(cast(str, cols.key)).try_cast(ids.types["__k"]))  # mapped: ids.key
    select += [
        _ms(_col(cols.window_start), live_types[cols.window_start]).alias("__ws"),
        _ms(_col(cols.window_end), live_types[cols.window_end]).alias("__we"),
        (_col(cols.emission).cast("long") if cols.emission else F.lit(None).cast("long")).alias("__em"),
        (_ms(_col(cols.emit_time), live_types[cols.emit_time]) if cols.emit_time else F.lit(None).cast("long")).alias(
            "__emit_ms"
        ),
    ]
    select += [_col(a.live_column).try_cast(_value_type(a, replay_types)).alias(a.value) for a in compared]
    return df.select(*select)


def _late_rows(pipeline: Pipeline, late: DataFrame | None, ids: _Ids) -> DataFrame | None:
    """Side 2: one row per window of the replay's ``late_events``: ``__late_n`` (late
    rows) and the first and last arrival (epoch ms) among them; None without late events."""
    if late is None:
        return None
    types = {f.name: f.dataType for f in late.schema.fields}
    arrival = pipeline.source.arrival_time
    arrival_ms = epoch_ms(arrival, types[arrival]) if arrival in types else F.lit(None).cast("long")
    keyed = []
    if ids.worker:
        keyed += ids.encode("__w", _col(ids.worker))
    if ids.key:
        keyed += ids.encode("__k", _col(ids.key))
    keyed += [
        _ms(F.col("window_start"), types["window_start"]).alias("__ws"),
        _ms(F.col("window_end"), types["window_end"]).alias("__we"),
        arrival_ms.alias("__arrival_ms"),
    ]
    return (
        late.select(*keyed)
        .groupBy(*ids.window)
        .agg(
            F.count(F.lit(1)).alias("__late_n"),
            F.min("__arrival_ms").alias("__late_first_ms"),
            F.max("__arrival_ms").alias("__late_last_ms"),
        )
        .withColumn("__side", F.lit(_LATE))
    )


def _number_emissions(
    rows: DataFrame, cols: LiveColumns, pipeline: Pipeline, compared: list[_Compared], ids: _Ids
) -> DataFrame:
    """Emission numbers where a side has none to match by (the one step that sorts).

    Without a live emission column, the live rows of a window are numbered 1, 2, ... in
    emit order (emit time, then the values: the same numbering whatever the row order).
    Without a live emit time either, both sides are numbered by their values, so equal
    sets of emissions match. With a worker in the pipeline but none in the mapping, the
    replay's rows of a (key, window) are numbered over its workers, in emit order, from
    the smallest emission number the replay has for it (1, unless a partition before
    emitted the window too: a replay of one partition then matches live numbers that
    count from the start of the history), unless both sides are numbered by values."""
    side, em = F.col("__side"), F.col("__em")
    by_values = cols.emission is None and cols.emit_time is None
    number_live = cols.emission is None
    number_replay = by_values or (pipeline.source.worker is not None and not ids.worker)
    if not (number_live or number_replay):
        return rows
    order = [] if by_values else [F.col("__emit_ms").asc_nulls_first()]
    order += [F.col(a.value).asc_nulls_first() for a in compared]
    if number_replay:
        order.append(em.asc_nulls_first())
        if "__worker_order" in rows.columns:
            order.append(F.col("__worker_order").asc_nulls_first())
    by_side = Window.partitionBy(*ids.window, "__side")
    rank = F.row_number().over(by_side.orderBy(*order)).cast("long")
    replay_rank = rank
    if number_replay and not by_values:
        # A replay of a later partition continues the emission numbers of the partitions
        # before it (they are kept in the state), as the live side's numbers do: the
        # renumbering over workers starts at the replay's first number of the window.
        replay_rank = rank + F.min(em).over(by_side) - 1
    live_renumbered = (side == F.lit(_LIVE)) if number_live else F.lit(False)
    replay_renumbered = (side == F.lit(_REPLAY)) if number_replay else F.lit(False)
    return rows.withColumn("__em", F.when(live_renumbered, rank).when(replay_renumbered, replay_rank).otherwise(em))


def _identities(rows: DataFrame, compared: list[_Compared], ids: _Ids) -> DataFrame:
    """One row per ``(window, emission)`` of the union ``rows`` (hash-partitioned by window).

    ``__r_n`` / ``__l_n``: how many replay / live rows it has (a replay identity is
    unique; live ones may repeat); ``__r_a<i>`` / ``__l_a<i>``: each side's value (of
    repeated live rows, the greatest); ``__r_reason``, ``__r_emit_ms``, ``__l_emit_ms``
    (the earliest live one). Late-event rows have no emission: their window's row
    (``__em`` null, no replay or live row) carries ``__late_n``, ``__late_first_ms``,
    ``__late_last_ms``. Only fixed-width values are aggregated (reasons are codes), so
    Spark aggregates by hash, without sorting, unless an aggregate holds strings.
    """
    side = F.col("__side")
    is_replay, is_live = side == F.lit(_REPLAY), side == F.lit(_LIVE)
    aggs = [
        F.count(F.when(is_replay, 1)).alias("__r_n"),
        F.count(F.when(is_live, 1)).alias("__l_n"),
        F.max(F.when(is_replay, F.col("__reason"))).alias("__r_reason"),
        F.max(F.when(is_replay, F.col("__emit_ms"))).alias("__r_emit_ms"),
        F.min(F.when(is_live, F.col("__emit_ms"))).alias("__l_emit_ms"),
    ]
    if compared:  # copies of one live identity conflict when their values' hashes differ
        live_hash = F.when(is_live, F.xxhash64(*[F.col(a.value) for a in compared]))
        aggs += [F.min(live_hash).alias("__l_hash_lo"), F.max(live_hash).alias("__l_hash_hi")]
    else:
        aggs += [F.lit(0).cast("long").alias("__l_hash_lo"), F.lit(0).cast("long").alias("__l_hash_hi")]
    for a in compared:
        aggs += [
            F.max(F.when(is_replay, F.col(a.value))).alias(a.replay),
            F.max(F.when(is_live, F.col(a.value))).alias(a.live),
        ]
    if "__late_n" in rows.columns:
        aggs += [
            F.max("__late_n").alias("__late_n"),
            F.min("__late_first_ms").alias("__late_first_ms"),
            F.max("__late_last_ms").alias("__late_last_ms"),
        ]
    else:
        aggs += [F.lit(None).cast("long").alias(c) for c in ("__late_n", "__late_first_ms", "__late_last_ms")]
    return rows.groupBy(*ids.window, "__em").agg(*aggs)


def _window_figures(held: DataFrame, count_agg: _Compared | None, ids: _Ids) -> DataFrame:
    """One row per window: emissions per side (``__n_replay``, ``__n_live``), the replay's
    emissions by reason (``__n_<reason>``), the count aggregate's totals over all
    emissions (``__r_total``, ``__l_total``) and the replay's late events of the window
    (``__late_n``, first and last arrival)."""
    # Live emissions, not rows: copies of one emission are not an extra (idle) emission.
    aggs = [
        F.sum("__r_n").alias("__n_replay"),
        F.count(F.when(F.col("__l_n") > 0, 1)).alias("__n_live"),
        *[
            F.count(F.when(F.col("__r_reason") == F.lit(i), 1)).alias(f"__n_{r.lower()}")
            for i, r in enumerate(_CLOSE_REASONS)
        ],
        F.max("__late_n").alias("__late_n"),
        F.min("__late_first_ms").alias("__late_first_ms"),
        F.max("__late_last_ms").alias("__late_last_ms"),
    ]
    if count_agg is not None:
        aggs += [F.sum(count_agg.replay).alias("__r_total"), F.sum(count_agg.live).alias("__l_total")]
    return held.groupBy(*ids.window).agg(*aggs)


def _mismatch_rows(held: DataFrame, figures_by_window: DataFrame, ids: _Ids) -> DataFrame:
    """Every identity that is not a match, and one ``MISSING_IN_REPLAY`` row per further
    copy of a repeated live identity (``__copy`` >= 1), with its window's figures."""
    cat, copies = F.col("__category"), F.col("__l_n")
    rows = held.where(cat.isNotNull() & ((cat != F.lit(MATCH)) | (copies > 1)))
    first = F.when(cat != F.lit(MATCH), F.lit(0)).otherwise(F.lit(1))
    rows = rows.withColumn("__copy", F.explode(F.sequence(first, F.greatest(copies - 1, F.lit(0)))))
    rows = rows.withColumn("__category", F.when(F.col("__copy") > 0, F.lit(MISSING_IN_REPLAY)).otherwise(cat))
    # A left join: a row whose window columns hold a null (a live row without a window
    # start) finds no figures by equality, but stays in the table the summary counts.
    return rows.drop("__late_n", "__late_first_ms", "__late_last_ms").join(figures_by_window, ids.window, "left")


def _seconds(ms_col: Column) -> Column:
    return F.format_string("%.3f s", ms_col / F.lit(1000.0))


def _explanations(
    pipeline: Pipeline, compared: list[_Compared], count_agg: _Compared | None, edges: list[int] | None
) -> tuple[list[Column], list[Column]]:
    """(explanation codes, detail texts) of a mismatch row: Spark expressions, null where
    one does not apply.

    Every condition reads the row (its category, both sides' values, ``__copy`` > 0 for a
    further copy of a repeated live identity) and its window's figures: ``__n_replay`` /
    ``__n_live`` (rows of the window on each side), ``__n_<reason>`` (the replay's
    emissions by reason), ``__r_total`` / ``__l_total`` (the count aggregate over all
    emissions), ``__late_n`` and the first and last arrival of the replay's late events
    of the window. In order: what differs (texts only), then each explanation that may
    apply, each a (code, text) pair."""
    codes: list[Column] = []
    texts: list[Column] = _what_differs(compared)
    pairs = [_emitted_differently(count_agg)]
    if count_agg is not None:
        pairs += _late_on_one_side(pipeline, count_agg)
    if edges:
        pairs.append(_on_partition_edge(edges))
    if any(a.floating for a in compared):
        pairs.append(_float_rounding(compared))
    pairs.append(_duplicate_in_live())
    # The others are proven from values that are there and agree: not from a null live
    # aggregate, nor from copies of one live emission that differ.
    null_code, null_text = _null_in_live(compared)
    conflict = F.coalesce(F.col("__l_conflict"), F.lit(False))
    trusted = ~conflict & null_code.isNull()
    for code, text in pairs:
        codes.append(F.when(trusted, code))
        texts.append(F.when(trusted, text))
    conflict_code, conflict_text = _conflicting_duplicate()
    codes += [F.when(~conflict, null_code), conflict_code]
    texts += [F.when(~conflict, null_text), conflict_text]
    return codes, texts


def _null_in_live(compared: list[_Compared]) -> tuple[Column, Column]:
    """:data:`NULL_IN_LIVE`: a value mismatch where live aggregates are null and the
    replay's are not (named)."""
    cat, _, own = _row_columns()
    nulls = [
        F.when(
            F.array_contains("__differing", F.lit(a.agg.name)) & F.col(a.live).isNull() & F.col(a.replay).isNotNull(),
            F.lit(a.agg.name),
        )
        for a in compared
    ]
    named = F.array_compact(F.array(*nulls)) if nulls else F.array().cast("array<string>")
    here = own & (cat == F.lit(VALUE_MISMATCH)) & (F.size(named) > 0)
    return F.when(here, F.lit(NULL_IN_LIVE)), F.when(
        here,
        F.concat(
            F.lit("the live side has no value (null) for "),
            F.array_join(named, ", "),
            F.lit(": its sink lost or never wrote them; nothing about the window's events follows from that"),
        ),
    )


def _conflicting_duplicate() -> tuple[Column, Column]:
    """:data:`CONFLICTING_DUPLICATE`: the live side has this emission several times with
    different values (on the compared row and on each further copy)."""
    here = F.coalesce(F.col("__l_conflict"), F.lit(False))
    return F.when(here, F.lit(CONFLICTING_DUPLICATE)), F.when(
        here,
        F.concat(
            F.lit("the live side has this window emission "),
            F.col("__l_n").cast("string"),
            F.lit(" times with different values: which copy is right cannot be told from the live side"),
        ),
    )


def _row_columns() -> tuple[Column, Column, Column]:
    """(category, a further live copy, the identity's own row) of a mismatch row."""
    copy = F.col("__copy") > 0
    return F.col("__category"), copy, ~copy


def _what_differs(compared: list[_Compared]) -> list[Column]:
    """Detail texts of what differs: the values of a value mismatch, the emission only
    one side has."""
    cat, _, own = _row_columns()
    diffs = [
        F.when(
            F.array_contains("__differing", F.lit(a.agg.name)),
            F.concat(
                F.lit(f"{a.agg.name}: live "),
                F.coalesce(F.col(a.live).cast("string"), F.lit("null")),
                F.lit(" against replay "),
                F.coalesce(F.col(a.replay).cast("string"), F.lit("null")),
            ),
        )
        for a in compared
    ]
    return [
        F.when(cat == F.lit(VALUE_MISMATCH), F.concat_ws("; ", *diffs)),
        F.when(
            own & (cat == F.lit(MISSING_IN_REPLAY)),
            F.concat(
                F.lit("the live side has emission "),
                F.col("__em").cast("string"),
                F.lit(" of this window; the replay has not"),
            ),
        ),
        F.when(
            cat == F.lit(EXTRA_IN_REPLAY),
            F.concat(
                F.lit("the replay has emission "),
                F.col("__em").cast("string"),
                F.lit(" of this window ("),
                _reason_name(F.col("__r_reason")),
                F.lit("); the live side has not"),
            ),
        ),
    ]


def _emitted_differently(count_agg: _Compared | None) -> tuple[Column, Column]:
    """:data:`EMIT_REASON`: the sides emitted the window a different number of times (one
    side flushed it idle)."""
    _, _, own = _row_columns()
    n_r, n_l = F.col("__n_replay"), F.col("__n_live")
    emit = own & (n_r > 0) & (n_l > 0) & (n_r != n_l)
    reasons = F.concat_ws(
        ", ",
        *[
            F.when(F.col(f"__n_{r.lower()}") > 0, F.concat(F.col(f"__n_{r.lower()}").cast("string"), F.lit(f" {r}")))
            for r in _CLOSE_REASONS
        ],
    )
    how = (
        F.when(
            (n_r > n_l) & (F.col("__n_idle") > 0),
            F.lit("the replay flushed it idle where the live side did not (IDLE against WATERMARK)"),
        )
        .when(
            n_r < n_l,
            F.lit(
                "the live side flushed it idle where the replay did not (IDLE against "
                "WATERMARK): the idle clock or heartbeat differs"
            ),
        )
        .otherwise(F.lit("the sides closed it by different reasons"))
    )
    same_total = F.lit("")
    if count_agg is not None:
        same_total = F.coalesce(
            F.when(
                F.col("__r_total") == F.col("__l_total"),
                F.concat(
                    F.lit(f"; over all emissions both count {count_agg.agg.name} = "), F.col("__r_total").cast("string")
                ),
            ),
            F.lit(""),
        )
    return F.when(emit, F.lit(EMIT_REASON)), F.when(
        emit,
        F.concat(
            F.lit("the replay emitted this window "),
            n_r.cast("string"),
            F.lit(" time(s) ("),
            reasons,
            F.lit("), the live side "),
            n_l.cast("string"),
            F.lit(": "),
            how,
            same_total,
        ),
    )


def _late_on_one_side(pipeline: Pipeline, count_agg: _Compared) -> list[tuple[Column, Column]]:
    """:data:`LATE_IN_REPLAY` (the live side counted events the replay marks late) and
    :data:`LATE_IN_LIVE` (the replay counted more, closing by WATERMARK: events late in
    the live run), as (code, text) pairs; both read the count aggregate."""
    cat, _, own = _row_columns()
    batches = (
        f"the recorded batches ({format_duration_ms(pipeline.source.batch_interval_ms)})"
        if pipeline.source.batch_interval_ms
        else f"the recorded batches (column {pipeline.source.batch_column!r})"
    )
    r_count = F.coalesce(F.col(count_agg.replay).cast("long"), F.lit(0))
    l_count = F.coalesce(F.col(count_agg.live).cast("long"), F.lit(0))
    more = l_count - r_count
    late_n = F.coalesce(F.col("__late_n"), F.lit(0))
    late_here = own & (
        ((cat == F.lit(VALUE_MISMATCH)) & (more > 0) & (late_n > 0))
        | ((cat == F.lit(MISSING_IN_REPLAY)) & (F.col("__n_replay") == 0) & (more > 0) & (late_n >= more))
    )
    close = F.col("__r_emit_ms")
    gaps = F.when(
        close.isNotNull() & F.col("__late_first_ms").isNotNull(),
        F.concat(
            F.lit(", arriving "),
            _seconds(F.col("__late_first_ms") - close),
            F.lit(" to "),
            _seconds(F.col("__late_last_ms") - close),
            F.lit(" after the replay's commit that emitted it"),
        ),
    )
    in_replay = (
        F.when(late_here, F.lit(LATE_IN_REPLAY)),
        F.when(
            late_here,
            F.concat(
                F.lit("the live side counted "),
                more.cast("string"),
                F.lit(" more event(s); the replay marks "),
                late_n.cast("string"),
                F.lit(" event(s) of this window late"),
                F.coalesce(gaps, F.lit("")),
                F.lit(
                    f": {batches} may not be the live commit batches; live batches longer than that gap commit "
                    "the watermark later, so these events were not late there"
                ),
            ),
        ),
    )
    watermark = F.col("__r_reason") == F.lit(_CLOSE_REASONS.index("WATERMARK"))
    late_live = (cat == F.lit(VALUE_MISMATCH)) & (more < 0) & watermark
    in_live = (
        F.when(late_live, F.lit(LATE_IN_LIVE)),
        F.when(
            late_live,
            F.concat(
                F.lit("the replay counted "),
                (-more).cast("string"),
                F.lit(" more event(s) and closed the window by WATERMARK at its commit of "),
                F.timestamp_millis(F.col("__r_emit_ms")).cast("string"),
                F.lit(
                    f": with live commit batches shorter than {batches}, the live watermark passes the window's end "
                    "sooner and events arriving just before that commit are late there"
                ),
            ),
        ),
    )
    return [in_replay, in_live]


def _on_partition_edge(edges: Sequence[int]) -> tuple[Column, Column]:
    """:data:`PARTITION_EDGE`: a partition edge falls inside the window (or before its
    emission): its events and its emission lie in different partitions."""
    _, _, own = _row_columns()
    hi = F.greatest(F.col("__we"), F.col("__r_emit_ms"), F.col("__l_emit_ms"))
    on_edge = F.filter(F.array(*[F.lit(e) for e in edges]), lambda e: (e > F.col("__ws")) & (e <= hi))
    edge_here = own & (F.size(on_edge) > 0)
    return F.when(edge_here, F.lit(PARTITION_EDGE)), F.when(
        edge_here,
        F.concat(
            F.lit("the window falls on the partition edge "),
            F.timestamp_millis(F.get(on_edge, 0)).cast("string"),
            F.lit(": its events and its emission lie in different partitions"),
        ),
    )


def _float_rounding(compared: list[_Compared]) -> tuple[Column, Column]:
    """:data:`FLOAT_ROUNDING`: a value mismatch whose every difference is within
    :data:`ROUNDING_RELATIVE` of floating-point values."""
    cat, _, _ = _row_columns()
    only_rounding = cat == F.lit(VALUE_MISMATCH)
    for a in compared:
        differs = F.array_contains("__differing", F.lit(a.agg.name))
        if a.floating:
            r, lv = F.col(a.replay), F.col(a.live)
            within = F.abs(r - lv) <= F.lit(ROUNDING_RELATIVE) * F.greatest(F.abs(r), F.abs(lv))
            only_rounding = only_rounding & (~differs | F.coalesce(within, F.lit(False)))
        else:
            only_rounding = only_rounding & ~differs
    return F.when(only_rounding, F.lit(FLOAT_ROUNDING)), F.when(
        only_rounding,
        F.lit(
            f"only floating-point rounding (each difference at most {ROUNDING_RELATIVE:g} relative): "
            "a different summation order, not different events"
        ),
    )


def _duplicate_in_live() -> tuple[Column, Column]:
    """:data:`DUPLICATE_IN_LIVE`: a further copy of a window emission the live side has
    several times."""
    _, copy, _ = _row_columns()
    return F.when(copy, F.lit(DUPLICATE_IN_LIVE)), F.when(
        copy,
        F.concat(
            F.lit("the live side has this window emission "),
            F.col("__l_n").cast("string"),
            F.lit(" times; this is copy "),
            (F.col("__copy") + 1).cast("string"),
            F.lit(" (one is compared, with the copies' greatest values)"),
        ),
    )


def _mismatch_columns(
    pipeline: Pipeline, compared: list[_Compared], keys: Sequence[str], ids: _Ids
) -> list[tuple[str, Column]]:
    """(name, expression) of every ``mismatches`` column, in order."""
    part_key = F.lit(None).cast("string")
    for i, k in enumerate(keys):
        part_key = F.when(F.col("__part") == F.lit(i), F.lit(k)).otherwise(part_key)
    cols = [("partition_key", part_key), ("category", F.col("__category"))]
    if ids.worker:
        cols.append((ids.worker, ids.decode("__w")))
    if ids.key:
        cols.append((ids.key, ids.decode("__k")))
    live_only = F.col("__copy") > 0  # a further live copy has no replay values
    cols += [
        ("window_start", F.timestamp_millis(F.col("__ws"))),
        ("window_end", F.timestamp_millis(F.col("__we"))),
        ("emission", F.col("__em")),
        (
            "differing",
            F.when(F.col("__category") == F.lit(VALUE_MISMATCH), F.col("__differing")).otherwise(
                F.array().cast("array<string>")
            ),
        ),
        ("replay_emit_reason", F.when(~live_only, _reason_name(F.col("__r_reason")))),
        ("replay_emit_time", F.when(~live_only, F.timestamp_millis(F.col("__r_emit_ms")))),
        ("live_emit_time", F.timestamp_millis(F.col("__l_emit_ms"))),
    ]
    for a in compared:
        cols += [(f"live_{a.agg.name}", F.col(a.live)), (f"replay_{a.agg.name}", F.when(~live_only, F.col(a.replay)))]
    cols += [("explanations", F.col("__explanations")), ("detail", F.col("__detail"))]
    return cols


def _n(cond: Column) -> Column:
    return F.sum(F.when(cond, 1).otherwise(0)).cast("long")


def _count(held: DataFrame) -> dict[int, dict[str, int]]:
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


def _count_explained(mism: DataFrame) -> dict[int, dict[str, int]]:
    """Mismatch rows with an explanation, and per explanation, per partition index."""
    aggs = [
        _n(F.size("__explanations") > 0).alias("explained"),
        *[_n(F.array_contains("__explanations", F.lit(e))).alias(f"x_{e}") for e in EXPLANATIONS],
    ]
    return {r["__part"]: r.asDict() for r in mism.groupBy("__part").agg(*aggs).collect()}


def _rate(match: float, compared: float) -> float:
    return match / compared if compared else 1.0


def _figures(
    pipeline: Pipeline,
    spec: ReconcileSpec,
    counts: Mapping[int, Mapping[str, int]],
    explained: Mapping[int, Mapping[str, int]],
    edges: list[int] | None,
    keys: Sequence[str],
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    """(figures dict, summary rows) from :func:`_count` and :func:`_count_explained`."""
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
        parts.append(
            {"partition_key": keys[i], "start": _iso(bounds[i]), "end": _iso(bounds[i + 1]), **block(merged(i))}
        )
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


# --------------------------------------------------------------------------- outputs


def write_reconcile(
    result: ReconcileResult, out_dir: str | Path, pipeline: Pipeline | None = None, inputs: Sequence[Any] = ()
) -> Commit:
    """Write ``mismatches/``, ``summary/`` (Parquet) and ``figures.json/`` into a new run
    folder of ``out_dir`` and make it current with a commit record written last, as
    :mod:`windowing.storage.outputs` does for a replay (a crash leaves the previous run current; the
    last :data:`windowing.storage.commits.KEEP_RUNS` are kept). ``inputs`` (the replay output and the
    live path) may not be or hold the output.

    Returns the :class:`windowing.storage.commits.Commit`. Raises :class:`windowing.storage.errors.OutputError`
    naming the path when the target is refused or a write fails.
    """
    out = str(out_dir)
    spark = result.summary.sparkSession
    check_output_target(spark, out, inputs)
    staged = Staged(
        spark,
        out,
        new_run_id(),
        result.figures,
        pipeline.name if pipeline else result.pipeline,
        pipeline.fingerprint() if pipeline else "",
    )
    frames = {
        "mismatches": result.mismatches,
        "summary": result.summary.coalesce(1),
        FIGURES: spark.createDataFrame([(json.dumps(result.figures, sort_keys=True),)], "value string").coalesce(1),
    }

    write_datasets(staged, frames, text=(FIGURES,))
    return staged.commit({"kind": "reconcile"})


def read_reconcile(spark: SparkSession, out_dir: str | Path) -> SimpleNamespace:
    """The current run of a :func:`write_reconcile` output: ``mismatches``, ``summary``
    (DataFrames), ``figures`` (dict) and ``commit``."""
    commit = current_commit(spark, str(out_dir))
    if commit is None:
        raise InputError(f"{out_dir}: no reconcile output here (nothing committed)")
    frames = {name: spark.read.parquet(glob_escape(join(commit.run_path, name))) for name in OUTPUTS}
    return SimpleNamespace(**frames, figures=commit.metrics, commit=commit)


def format_summary(figures: Mapping[str, Any]) -> str:
    """A few lines for a terminal: the total, then one line per partition."""

    def line(d: Mapping[str, Any]) -> str:
        return (
            f"{d['compared']:,} compared, {d['match']:,} match ({100 * d['match_rate']:.2f} %), "
            f"{d['value_mismatch']:,} value mismatch, {d['missing_in_replay']:,} missing in replay, "
            f"{d['extra_in_replay']:,} extra in replay"
        )

    verdict = "passed" if figures["passed"] else "FAILED"
    out = [f"reconcile {figures['pipeline']!r}: {line(figures)}; minimum {100 * figures['min_match']:.2f} %: {verdict}"]
    mismatched = figures["compared"] - figures["match"]
    if mismatched:
        by = ", ".join(f"{k} {v:,}" for k, v in figures["explained_by"].items() if v)
        out.append(f"  explained: {figures['explained']:,} of {mismatched:,} mismatches" + (f" ({by})" if by else ""))
    for p in figures["partitions"]:
        out.append(f"  {p['partition_key']}: {line(p)}")
    if figures.get("live_rows_outside_partitions"):
        out.append(f"  {figures['live_rows_outside_partitions']:,} live rows lie outside the partitions (not compared)")
    return "\n".join(out)


def _parse_edge(text: str) -> int:
    """An edge from the command line: ``2024-01-02`` or ``2024-01-02T06:00:00Z`` (UTC
    unless it has an offset), as epoch ms."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--partition-edge: {text!r} is not an ISO-8601 date or time") from None
    return int((t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def main_reconcile(args: Any, spark: SparkSession | None = None) -> int:
    """``rewindow reconcile``: compare, write, print a summary; the exit code.

    ``args`` has ``config``, ``replay`` (a replay output), ``live`` (path/URI or None: the
    YAML's ``reconcile.live``), ``output``, and optionally ``live_format``, ``min_match``
    (a share ``0.99`` or ``99%``; default the YAML's ``minMatch``), ``partition_edge``
    (ISO dates/times, increasing), ``master``, ``remote``, ``conf`` (KEY=VALUE pairs).

    Returns 0 when the match rate is at least the minimum, 1 when under it. Bad
    configuration, input or output raise (``ConfigError``, ``InputError``,
    ``OutputError``: all ``ValueError``), which the CLI turns into exit code 2.
    """
    pipeline, spec = load_reconcile(args.config)
    min_match = getattr(args, "min_match", None)
    if min_match is not None:
        spec = dataclasses.replace(spec, min_match=parse_share(min_match, "--min-match"))
    edges = [_parse_edge(e) for e in (getattr(args, "partition_edge", None) or [])]
    if edges and len(edges) < 2:
        raise ConfigError("--partition-edge: give at least two (the start and end of the partitions)")
    live_where = getattr(args, "live", None) or (spec.live.path if spec.live else None)
    if live_where is None and not (spec.live and spec.live.table):
        raise ConfigError(f"--live: no live aggregates given; pass --live or set {_FIELD}.live in {args.config}")
    # --replay (and --live) may name a catalog table (windowing.catalog) instead of a folder.
    replay_table = names_table(args.replay)
    live_table = names_table(getattr(args, "live", None))
    if live_table:
        spec = dataclasses.replace(spec, live=dataclasses.replace(spec.live or LiveSource(), table=args.live))
        args.live, live_where = None, None
    conf = dict(getattr(args, "conf", None) or [])
    if (replay_table or live_table) and not getattr(args, "remote", None):
        conf.update(session_conf_for_tables(getattr(args, "metastore_dir", None), conf))
    if spark is None:
        spark = spark_session(getattr(args, "master", None), conf, remote=getattr(args, "remote", None))
    inputs = ([] if replay_table else [args.replay]) + ([live_where] if live_where else [])
    check_output_target(spark, args.output, inputs)
    outputs = read_published(spark, args.replay) if replay_table else read_outputs(spark, args.replay)
    live = read_live(spark, spec, path=getattr(args, "live", None), fmt=getattr(args, "live_format", None))
    result = reconcile(
        spark, pipeline, spec, outputs.aggregates, live, outputs.late_events, partition_edges=edges or None
    )
    try:
        commit = write_reconcile(result, args.output, pipeline=pipeline, inputs=inputs)
    finally:
        result.unpersist()
    print(format_summary(result.figures))
    print(
        f"mismatches and summary in {commit.run_path}/ (mismatches, summary, {FIGURES}), "
        f"committed as run {commit.seq} of {args.output}"
    )
    if not result.passed:
        print(
            f"rewindow: reconcile: match rate {100 * result.figures['match_rate']:.4f} % is under the minimum "
            f"{100 * spec.min_match:.4f} %",
            file=sys.stderr,
        )
        return 1
    return 0
