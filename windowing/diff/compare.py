"""Two sides' rows paired by identity, in one shuffle, and counted (:func:`compare_dataset`).

For each dataset both sides' rows form one union (a ``side`` column, the row's values in
one struct), grouped by the row's **identity**: the plan's one shuffle, a hash
aggregation collecting each side's rows of an identity (almost always one each). Inside
a group the rows of each side are sorted by their values and paired in that order, so an
identity held more than once on a side (snapshots of one batch, identical late events)
is compared as a multiset: equal copies pair with each other. The paired table is held
(memory and disk); one job counts it per partition, one counts each side's rows per
partition, and the differing rows are what the ``--output`` tables hold.

Identities (docs/diff.md):

* ``aggregates``: the columns before ``window_start`` (the worker and the key), the
  window bounds and ``emission`` (docs/semantics.md section 6: 1 + the earlier emissions
  of the same worker, key and window); a snapshot (``emit_reason = AGGREGATE``) also by
  its ``emit_batch`` and ``emit_time``, as a window has one snapshot per event. Every
  other column is a value: the aggregates and ``emit_reason``, ``emit_batch``,
  ``emit_time``, ``emit_watermark``.
* ``late_events``: every column but ``watermark`` and ``lateness_ms`` (the event and the
  window it missed), those two the values.
* ``rejected``: every column but ``reason``, the reason the value.

Values are compared exactly (``<=>``: null equals null, NaN equals NaN): a replay is
deterministic, so any difference is a difference. A column on one side only is added or
removed, not compared; a column whose type differs is compared as doubles when both
types are numbers, else as strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.contract import AGGREGATE_REASON, WINDOW_COLUMNS
from windowing.diff.sides import PART
from windowing.storage.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Categories of a paired row.
EQUAL, CHANGED = "equal", "changed"
ONLY_IN_BEFORE, ONLY_IN_AFTER = "only_in_before", "only_in_after"
#: A row of a partition only one side has: counted with that partition, not a difference.
IN_PARTITION_ONLY_IN_BEFORE, IN_PARTITION_ONLY_IN_AFTER = "in_partition_only_in_before", "in_partition_only_in_after"
CATEGORIES = (EQUAL, CHANGED, ONLY_IN_BEFORE, ONLY_IN_AFTER, IN_PARTITION_ONLY_IN_BEFORE, IN_PARTITION_ONLY_IN_AFTER)
#: The categories of the rows the ``--output`` tables hold.
DIFFERING = (CHANGED, ONLY_IN_BEFORE, ONLY_IN_AFTER)
#: The pseudo-column of a row emitted in another partition by each side.
PARTITION_COLUMN = "partition_key"
#: The columns of a differences table besides the identity and the ``before_``/``after_`` values.
META_COLUMNS = ("partition_key", "category", "changed", "before_partition", "after_partition")

_B, _A = "__b", "__a"


@dataclass(frozen=True)
class Layout:
    """How one dataset's rows are identified and compared, from both sides' schemas."""

    dataset: str
    identity: list[str]
    values: list[str]
    added: list[str]
    removed: list[str]
    #: Common columns whose types differ: name -> (BEFORE's type, AFTER's type).
    retyped: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Each compared column's type after the common cast.
    types: dict[str, T.DataType] = field(default_factory=dict)
    #: Whether snapshots are told apart by their emit batch and time (aggregates).
    snapshots: bool = False

    def columns(self) -> dict[str, Any]:
        return {"added": self.added, "removed": self.removed, "retyped": {c: list(t) for c, t in self.retyped.items()}}


def layout(dataset: str, before: DataFrame, after: DataFrame) -> Layout:
    """The :class:`Layout` of ``dataset`` (module docstring)."""
    b_cols = [c for c in before.columns if c != PART]
    a_cols = [c for c in after.columns if c != PART]
    b_types = dict(before.dtypes)
    a_types = dict(after.dtypes)
    common = [c for c in a_cols if c in b_cols]
    added = [c for c in a_cols if c not in b_cols]
    removed = [c for c in b_cols if c not in a_cols]
    if dataset == "aggregates":
        head = WINDOW_COLUMNS[0]
        lead = a_cols[: a_cols.index(head)] if head in a_cols else []
        identity = [c for c in [*lead, *WINDOW_COLUMNS, "emission"] if c in common]
    elif dataset == "late_events":
        identity = [c for c in common if c not in ("watermark", "lateness_ms")]
    else:
        identity = [c for c in common if c != "reason"]
    values = [c for c in common if c not in identity]
    schema = {f.name: f.dataType for f in after.schema.fields}
    b_schema = {f.name: f.dataType for f in before.schema.fields}
    retyped = {c: (b_types[c], a_types[c]) for c in common if b_types[c] != a_types[c]}
    types: dict[str, T.DataType] = {}
    for c in common:
        if c in retyped:
            numeric = isinstance(b_schema[c], T.NumericType) and isinstance(schema[c], T.NumericType)
            types[c] = T.DoubleType() if numeric else T.StringType()
        else:
            types[c] = schema[c]
    snapshots = dataset == "aggregates" and all(c in common for c in ("emit_reason", "emit_batch", "emit_time"))
    return Layout(dataset, identity, values, added, removed, retyped, types, snapshots)


def _cast(c: str, lay: Layout) -> Column:
    return F.col(c).cast(lay.types[c]) if c in lay.retyped else F.col(c)


def _rows(df: DataFrame, side: int, lay: Layout) -> DataFrame:
    """One side's rows: the identity (``__i<n>``), the values and the partition in one
    struct (``__row``: values ``v<n>``, ``p``, the one-sided columns ``x<n>``), the side."""
    extras = [*lay.added, *lay.removed]
    here = set(df.columns)
    ids = [_cast(c, lay).alias(f"__i{i}") for i, c in enumerate(lay.identity)]
    if lay.snapshots:
        snap = F.col("emit_reason") == F.lit(AGGREGATE_REASON)
        ids += [
            F.when(snap, _cast("emit_batch", lay)).alias("__snap_batch"),
            F.when(snap, _cast("emit_time", lay)).alias("__snap_time"),
        ]
    row = F.struct(
        *[_cast(c, lay).alias(f"v{j}") for j, c in enumerate(lay.values)],
        F.col(PART).alias("p"),
        *[(F.col(c) if c in here else F.lit(None)).alias(f"x{k}") for k, c in enumerate(extras)],
    )
    return df.select(*ids, row.alias("__row"), F.lit(side).alias("__side"))


def _extra_types(lay: Layout, before: DataFrame, after: DataFrame) -> dict[str, T.DataType]:
    a = {f.name: f.dataType for f in after.schema.fields}
    b = {f.name: f.dataType for f in before.schema.fields}
    return {c: a.get(c) or b[c] for c in [*lay.added, *lay.removed]}


def paired(
    lay: Layout, before: DataFrame, after: DataFrame, only_before: list[str], only_after: list[str]
) -> DataFrame:
    """One row per paired emission (or row), held: ``__b`` and ``__a`` (each side's row
    struct, null where it has none), the identity, ``__cat`` (a category), ``__label``
    (the partition it is reported in: AFTER's, else BEFORE's), ``__changed`` (the names of
    the differing columns) and ``__d<n>`` (the absolute difference of each numeric or
    time value; times in milliseconds). ``only_before``/``only_after``: the partitions
    one side has, whose rows are not differences."""
    xtypes = _extra_types(lay, before, after)
    b_rows, a_rows = _rows(before, 0, lay), _rows(after, 1, lay)
    # Both sides' structs must be one type: the one-sided columns' nulls take the other's type.
    fix = [f"x{k}" for k in range(len(xtypes))]
    if fix:
        struct_type = T.StructType(
            [
                *[T.StructField(f"v{j}", lay.types[c]) for j, c in enumerate(lay.values)],
                T.StructField("p", T.StringType()),
                *[T.StructField(f"x{k}", t) for k, t in enumerate(xtypes.values())],
            ]
        )
        b_rows = b_rows.withColumn("__row", F.col("__row").cast(struct_type))
        a_rows = a_rows.withColumn("__row", F.col("__row").cast(struct_type))
    union = b_rows.unionByName(a_rows)
    ids = [c for c in union.columns if c.startswith(("__i", "__snap_"))]
    side = F.col("__side")
    grouped = union.groupBy(*ids).agg(
        F.sort_array(F.collect_list(F.when(side == 0, F.col("__row")))).alias(_B),
        F.sort_array(F.collect_list(F.when(side == 1, F.col("__row")))).alias(_A),
    )
    z = grouped.select(*ids, F.explode(F.arrays_zip(F.col(_B), F.col(_A))).alias("__z"))
    b, a = F.col(f"__z.{_B}"), F.col(f"__z.{_A}")
    both = b.isNotNull() & a.isNotNull()
    differs = [both & ~b[f"v{j}"].eqNullSafe(a[f"v{j}"]) for j in range(len(lay.values))]
    moved = both & ~b["p"].eqNullSafe(a["p"])
    changed = F.array_compact(
        F.array(
            *[F.when(d, F.lit(c)) for d, c in zip(differs, lay.values)],
            F.when(moved, F.lit(PARTITION_COLUMN)),
        )
    )
    cat = (
        F.when(both, F.when(F.size(changed) > 0, F.lit(CHANGED)).otherwise(F.lit(EQUAL)))
        .when(
            a.isNull(),
            F.when(b["p"].isin(only_before), F.lit(IN_PARTITION_ONLY_IN_BEFORE)).otherwise(F.lit(ONLY_IN_BEFORE))
            if only_before
            else F.lit(ONLY_IN_BEFORE),
        )
        .otherwise(
            F.when(a["p"].isin(only_after), F.lit(IN_PARTITION_ONLY_IN_AFTER)).otherwise(F.lit(ONLY_IN_AFTER))
            if only_after
            else F.lit(ONLY_IN_AFTER)
        )
    )
    dists = []
    for j, c in enumerate(lay.values):
        t = lay.types[c]
        bv, av = b[f"v{j}"], a[f"v{j}"]
        if isinstance(t, T.NumericType):
            dists.append(F.when(differs[j], F.abs(bv.cast("double") - av.cast("double"))).alias(f"__d{j}"))
        elif isinstance(t, (T.TimestampType, T.TimestampNTZType)):
            ms = (F.unix_micros(bv.cast("timestamp")) - F.unix_micros(av.cast("timestamp"))) / 1000
            dists.append(F.when(differs[j], F.abs(ms)).alias(f"__d{j}"))
        else:
            dists.append(F.lit(None).cast("double").alias(f"__d{j}"))
    return z.select(
        *ids,
        b.alias(_B),
        a.alias(_A),
        cat.alias("__cat"),
        F.coalesce(a["p"], b["p"]).alias("__label"),
        changed.alias("__changed"),
        *dists,
    ).persist(StorageLevel.MEMORY_AND_DISK)


def count(lay: Layout, pairs: DataFrame) -> dict[str | None, dict[str, Any]]:
    """Per partition label: each side's rows in its own partition, rows per category,
    and per changed column the rows where it differs and its largest absolute difference.
    One Spark job, grouped by (label, BEFORE's partition, AFTER's partition): a few groups
    per partition, summed here."""
    cat = F.col("__cat")
    changed = F.col("__changed")
    aggs = [F.sum(F.when(cat == F.lit(c), 1).otherwise(0)).cast("long").alias(c) for c in CATEGORIES]
    named = [*lay.values, PARTITION_COLUMN]
    for j, c in enumerate(named):
        aggs.append(F.sum(F.when(F.array_contains(changed, F.lit(c)), 1).otherwise(0)).cast("long").alias(f"n{j}"))
        if j < len(lay.values):
            aggs.append(F.max(f"__d{j}").alias(f"m{j}"))
    aggs += [
        F.sum(F.when(F.col(_B).isNotNull(), 1).otherwise(0)).cast("long").alias("__bn"),
        F.sum(F.when(F.col(_A).isNotNull(), 1).otherwise(0)).cast("long").alias("__an"),
    ]
    out: dict[str | None, dict[str, Any]] = {}

    def block(key: str | None) -> dict[str, Any]:
        empty: dict[str, Any] = {"before_rows": 0, "after_rows": 0, **{c: 0 for c in CATEGORIES}}
        return out.setdefault(key, {**empty, "changed_columns": {}})

    groups = pairs.groupBy("__label", F.col(f"{_B}.p").alias("__bp"), F.col(f"{_A}.p").alias("__ap"))
    for r in groups.agg(*aggs).collect():
        d = r.asDict()
        mine = block(d["__label"])
        for c in CATEGORIES:
            mine[c] += int(d[c] or 0)
        if d["__bn"]:
            block(d["__bp"])["before_rows"] += int(d["__bn"])
        if d["__an"]:
            block(d["__ap"])["after_rows"] += int(d["__an"])
        for j, c in enumerate(named):
            n = int(d[f"n{j}"] or 0)
            if not n:
                continue
            fig = mine["changed_columns"].setdefault(c, {"rows": 0, "largest_difference": None})
            fig["rows"] += n
            big = [float(x) for x in (fig["largest_difference"], d.get(f"m{j}")) if x is not None]
            fig["largest_difference"] = max(big) if big else None
    return out


def differences(lay: Layout, pairs: DataFrame) -> DataFrame:
    """The differing rows (``changed``, ``only_in_before``, ``only_in_after``) as the
    ``--output`` table: :data:`META_COLUMNS`, the identity under its own names, then
    ``before_<c>`` and ``after_<c>`` of every compared column, ``after_<c>`` of each added
    and ``before_<c>`` of each removed one."""
    taken = set(META_COLUMNS)
    for c in lay.identity:
        if c in taken or c.startswith(("before_", "after_")):
            raise InputError(f"{lay.dataset}: column {c!r} clashes with a column of the diff's table")
    b, a = F.col(_B), F.col(_A)
    extras = [*lay.added, *lay.removed]
    cols = [
        F.col("__label").alias("partition_key"),
        F.col("__cat").alias("category"),
        F.col("__changed").alias("changed"),
        b["p"].alias("before_partition"),
        a["p"].alias("after_partition"),
        *[F.col(f"__i{i}").alias(c) for i, c in enumerate(lay.identity)],
    ]
    for j, c in enumerate(lay.values):
        cols += [b[f"v{j}"].alias(f"before_{c}"), a[f"v{j}"].alias(f"after_{c}")]
    for k, c in enumerate(extras):
        cols.append((a if c in lay.added else b)[f"x{k}"].alias(("after_" if c in lay.added else "before_") + c))
    return pairs.where(F.col("__cat").isin(*DIFFERING)).select(*cols)
