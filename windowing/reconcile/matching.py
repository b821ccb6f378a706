"""Both sides of a reconciliation paired by identity, in Spark expressions: the replay's
rows, the live rows and the replay's late-event counts in one union hash-partitioned by
window, emissions numbered where a side has none to match by, one row per identity with
both sides' values, its category, its window's figures, and the ``mismatches`` columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence, cast

from pyspark import StorageLevel
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.config import Aggregate, Pipeline
from windowing.config.reconcile import LiveColumns, ReconcileSpec, Tolerance
from windowing.contract import AGGREGATE_REASON, CLOSE_REASONS
from windowing.reconcile.live import NUMERIC, type_family
from windowing.reconcile.vocabulary import (
    EXTRA_IN_REPLAY,
    MATCH,
    MISSING_IN_REPLAY,
    VALUE_MISMATCH,
)
from windowing.runner.columns import col as _col
from windowing.runner.columns import epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class Compared:
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


#: Sides of the union the comparison runs over.
_REPLAY, _LIVE, _LATE = 0, 1, 2


def compared_aggregates(
    pipeline: Pipeline, spec: ReconcileSpec, live_types: dict[str, Any], replay_types: dict[str, Any]
) -> list[Compared]:
    """The aggregates compared (``spec.columns.aggregates``), floating point when either
    side's column is."""
    by_name = {a.name: a for a in pipeline.aggregates}
    return [
        Compared(by_name[name], col, i, "floating" in (type_family(live_types[col]), type_family(replay_types[name])))
        for i, (name, col) in enumerate(spec.columns.aggregates)
    ]


def paired(
    spark: SparkSession,
    pipeline: Pipeline,
    spec: ReconcileSpec,
    compared: list[Compared],
    ids: Ids,
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


def equal_values(compared: list[Compared], tol: Tolerance) -> list[Column]:
    """Per compared aggregate, a Column: both sides equal (exactly, or within the
    tolerance when floating), False where either side is missing."""
    equal = []
    for a in compared:
        r, lv = _col(a.replay), _col(a.live)
        same = r.eqNullSafe(lv)
        if a.floating:
            diff, scale = F.abs(r - lv), F.greatest(F.abs(r), F.abs(lv))
            same = same | (diff <= F.greatest(F.lit(tol.absolute), F.lit(tol.relative) * scale))
        equal.append(F.coalesce(same, F.lit(False)))
    return equal


def category(differing: Column) -> Column:
    """An identity's category: on both sides (matching unless an aggregate differs, the
    names in ``differing``), in the replay only, or live only."""
    r_here, l_here = F.col("__r_n") > 0, F.col("__l_n") > 0
    return (
        F.when(r_here & l_here, F.when(F.size(differing) == 0, F.lit(MATCH)).otherwise(F.lit(VALUE_MISMATCH)))
        .when(r_here, F.lit(EXTRA_IN_REPLAY))
        .when(l_here, F.lit(MISSING_IN_REPLAY))
    )


def partition_column(edges: list[int] | None) -> Column:
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


def hold_identities(
    ident: DataFrame, ids: Ids, compared: list[Compared], count_agg: Compared | None, differing: Column, part: Column
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
                _col(c) if count_agg is not None and c in (count_agg.replay, count_agg.live) else F.when(keep, _col(c))
            ).alias(c)
            for a in compared
            for c in (a.replay, a.live)
        ],
    ).persist(StorageLevel.MEMORY_AND_DISK)


def _partitions(spark: SparkSession) -> int:
    """How many partitions the union is hashed into: ``spark.sql.shuffle.partitions``, but
    at least 4 per core. Each task pairs its windows in one hash table; smaller tables
    were measured a little faster (docs/reconcile.md), and the tasks balance better."""
    shuffle = int(cast(str, spark.conf.get("spark.sql.shuffle.partitions")))  # set in every session
    try:
        cores = spark.sparkContext.defaultParallelism
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: the setting alone
        return shuffle
    return max(shuffle, 4 * cores)


class Ids:
    """The columns that identify a window in the union: ``window`` (the partitioning and
    grouping columns) and how the output gets the worker and key back.

    A null worker or key is an ordinary value (docs/semantics.md section 1), so each is
    carried as ``(coalesce(value, a default of its type), value is null)``: plain
    equalities then compare it null-safely, and Spark can join by it inside the
    partitions it already has (a ``<=>`` join would make it shuffle again).
    """

    def __init__(self, pipeline: Pipeline, cols: LiveColumns, replay_types: Mapping[str, Any]) -> None:
        self.worker = pipeline.source.worker if cols.worker is not None else None
        #: (union column, replay column) of each of the key's columns.
        self.keys = [(f"__k{i}", k) for i, k in enumerate(pipeline.window.keys)]
        self.types: dict[str, Any] = {
            "__w": replay_types.get(self.worker) if self.worker is not None else None,
            **{name: replay_types.get(k) for name, k in self.keys},
        }
        named = [*(["__w"] if self.worker else []), *[name for name, _ in self.keys]]
        self.window = [n for c in named for n in (c, f"{c}_null")] + ["__ws", "__we"]

    def encode_keys(self, columns: Sequence[str], cast_to_replay: bool = False) -> list[Column]:
        """The key's columns (``columns``: where each is on this side) encoded (:meth:`encode`)."""
        out: list[Column] = []
        for (name, _), c in zip(self.keys, columns):
            value = _col(c).try_cast(self.types[name]) if cast_to_replay else _col(c)
            out += self.encode(name, value)
        return out

    def encode(self, name: str, value: Column) -> list[Column]:
        """``value`` (in the replay's type) as the columns ``name`` and ``name_null``."""
        dtype = self.types[name]
        family = type_family(dtype)
        if family in ("string", "binary"):
            default = F.lit("").cast(dtype)
        elif family in (*NUMERIC, "boolean"):
            default = F.lit(0).cast(dtype)
        elif family == "timestamp":
            default = F.timestamp_millis(F.lit(0)).cast(dtype)
        elif family == "date":
            default = F.lit("1970-01-01").cast(dtype)
        else:  # a complex key: grouped as it is (null-safe there); joined by equality
            return [value.alias(name), value.isNull().alias(f"{name}_null")]
        return [F.coalesce(value, default).alias(name), value.isNull().alias(f"{name}_null")]

    def decode(self, name: str) -> Column:
        return F.when(~_col(f"{name}_null"), _col(name))


def _as_ms(col: Column, dtype: Any) -> Column:
    """Epoch milliseconds of a timestamp or integer (epoch ms) column."""
    if type_family(dtype) == "timestamp":
        return F.unix_millis(col.cast("timestamp"))
    return col.cast("long")


def _value_type(a: Compared, replay_types: Mapping[str, Any]) -> Any:
    """The type both sides' values of ``a`` take in the union: double when compared with
    the tolerance, else the replay's."""
    return T.DoubleType() if a.floating else replay_types[a.agg.name]


def _reason_code(reason: Column) -> Column:
    """An emit reason as its index in :data:`CLOSE_REASONS` (a number aggregates cheaply)."""
    code = F.lit(len(CLOSE_REASONS))
    for i, r in reversed(list(enumerate(CLOSE_REASONS))):
        code = F.when(reason == F.lit(r), F.lit(i)).otherwise(code)
    return F.when(reason.isNotNull(), code)


def reason_name(code: Column) -> Column:
    return F.element_at(F.array(*[F.lit(r) for r in (*CLOSE_REASONS, "OTHER")]), code + 1)


def _replay_rows(
    pipeline: Pipeline, df: DataFrame, replay_types: Mapping[str, Any], compared: list[Compared], ids: Ids
) -> DataFrame:
    """The replay's windows (snapshots left out): side 0, window columns, ``__em``,
    ``__emit_ms``, ``__reason`` (a code), the values; ``__worker_order`` when the live
    side has no worker (the replay's emissions are then renumbered over the workers)."""
    kept = df.where(F.col("emit_reason").isNull() | (F.col("emit_reason") != F.lit(AGGREGATE_REASON)))
    emit_ms = (
        _as_ms(F.col("emit_time"), replay_types["emit_time"])
        if "emit_time" in replay_types
        else F.lit(None).cast("long")
    )
    select = [F.lit(_REPLAY).alias("__side")]
    if ids.worker:
        select += ids.encode("__w", _col(ids.worker))
    select += ids.encode_keys([k for _, k in ids.keys])
    select += [
        _as_ms(F.col("window_start"), replay_types["window_start"]).alias("__ws"),
        _as_ms(F.col("window_end"), replay_types["window_end"]).alias("__we"),
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
    compared: list[Compared],
    ids: Ids,
) -> DataFrame:
    """The live windows: side 1, times in epoch ms, the worker, key and values in the
    replay's types (``try_cast``: a value the replay's type cannot hold is null, so it
    mismatches rather than fails), ``__em`` the mapped emission or null."""
    select = [F.lit(_LIVE).alias("__side")]
    if ids.worker:
        select += ids.encode("__w", _col(cast(str, cols.worker)).try_cast(ids.types["__w"]))  # mapped: ids.worker
    select += ids.encode_keys(cols.keys, cast_to_replay=True)  # mapped: one per replay key column
    select += [
        _as_ms(_col(cols.window_start), live_types[cols.window_start]).alias("__ws"),
        _as_ms(_col(cols.window_end), live_types[cols.window_end]).alias("__we"),
        (_col(cols.emission).cast("long") if cols.emission else F.lit(None).cast("long")).alias("__em"),
        (
            _as_ms(_col(cols.emit_time), live_types[cols.emit_time]) if cols.emit_time else F.lit(None).cast("long")
        ).alias("__emit_ms"),
    ]
    select += [_col(a.live_column).try_cast(_value_type(a, replay_types)).alias(a.value) for a in compared]
    return df.select(*select)


def _late_rows(pipeline: Pipeline, late: DataFrame | None, ids: Ids) -> DataFrame | None:
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
    keyed += ids.encode_keys([k for _, k in ids.keys])
    keyed += [
        _as_ms(F.col("window_start"), types["window_start"]).alias("__ws"),
        _as_ms(F.col("window_end"), types["window_end"]).alias("__we"),
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
    rows: DataFrame, cols: LiveColumns, pipeline: Pipeline, compared: list[Compared], ids: Ids
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
    order += [_col(a.value).asc_nulls_first() for a in compared]
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


def _identities(rows: DataFrame, compared: list[Compared], ids: Ids) -> DataFrame:
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
        live_hash = F.when(is_live, F.xxhash64(*[_col(a.value) for a in compared]))
        aggs += [F.min(live_hash).alias("__l_hash_lo"), F.max(live_hash).alias("__l_hash_hi")]
    else:
        aggs += [F.lit(0).cast("long").alias("__l_hash_lo"), F.lit(0).cast("long").alias("__l_hash_hi")]
    for a in compared:
        aggs += [
            F.max(F.when(is_replay, _col(a.value))).alias(a.replay),
            F.max(F.when(is_live, _col(a.value))).alias(a.live),
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


def window_figures(held: DataFrame, count_agg: Compared | None, ids: Ids) -> DataFrame:
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
            for i, r in enumerate(CLOSE_REASONS)
        ],
        F.max("__late_n").alias("__late_n"),
        F.min("__late_first_ms").alias("__late_first_ms"),
        F.max("__late_last_ms").alias("__late_last_ms"),
    ]
    if count_agg is not None:
        aggs += [F.sum(count_agg.replay).alias("__r_total"), F.sum(count_agg.live).alias("__l_total")]
    return held.groupBy(*ids.window).agg(*aggs)


def mismatch_rows(held: DataFrame, figures_by_window: DataFrame, ids: Ids) -> DataFrame:
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


def mismatch_columns(
    pipeline: Pipeline, compared: list[Compared], keys: Sequence[str], ids: Ids
) -> list[tuple[str, Column]]:
    """(name, expression) of every ``mismatches`` column, in order."""
    part_key = F.lit(None).cast("string")
    for i, k in enumerate(keys):
        part_key = F.when(F.col("__part") == F.lit(i), F.lit(k)).otherwise(part_key)
    cols = [("partition_key", part_key), ("category", F.col("__category"))]
    if ids.worker:
        cols.append((ids.worker, ids.decode("__w")))
    cols += [(k, ids.decode(name)) for name, k in ids.keys]
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
        ("replay_emit_reason", F.when(~live_only, reason_name(F.col("__r_reason")))),
        ("replay_emit_time", F.when(~live_only, F.timestamp_millis(F.col("__r_emit_ms")))),
        ("live_emit_time", F.timestamp_millis(F.col("__l_emit_ms"))),
    ]
    for a in compared:
        cols += [(f"live_{a.agg.name}", _col(a.live)), (f"replay_{a.agg.name}", F.when(~live_only, _col(a.replay)))]
    cols += [("explanations", F.col("__explanations")), ("detail", F.col("__detail"))]
    return cols
