"""The live side of a reconciliation: the ``reconcile:`` block of a pipeline YAML
(:func:`load_reconcile`), the live pipeline's aggregates read as Spark reads them
(:func:`read_live`: a path or URI in a format, or a catalog table), and the check that its
mapped columns exist and have usable types (:func:`check_live_columns`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pyspark.sql import types as T

from windowing.config import ConfigError, Pipeline, load_pipeline
from windowing.config.fields import nearest_name
from windowing.config.reconcile import LiveSource, ReconcileSpec
from windowing.reconcile.vocabulary import FIELD
from windowing.storage.errors import InputError, first_line, missing_path
from windowing.storage.lake import Lake

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType


def load_reconcile(path: str | Path) -> tuple[Pipeline, ReconcileSpec]:
    """The pipeline of a YAML file and its ``reconcile:`` block (defaults without one).

    ``load_pipeline(path)`` and its ``reconcile`` field. Raises :class:`ConfigError`
    prefixed with the file's path.
    """
    pipeline = load_pipeline(path)
    return pipeline, pipeline.reconcile


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
            raise InputError(f"{FIELD}.live.table {live.table!r}: cannot read the table: {first_line(exc)}") from exc
    where = path or live.path
    if not where:
        raise ConfigError(f"--live: no live aggregates given; pass --live or set {FIELD}.live.path or .table")
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


def type_family(dtype: DataType) -> str:
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


NUMERIC = ("integral", "floating", "decimal")


def _comparable(live: str, replay: str) -> bool:
    return live == replay or (live in NUMERIC and replay in NUMERIC)


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
    cf = f"{FIELD}.columns"
    for fld, col in spec.columns.uses():
        if col not in types:
            listed = ", ".join(sorted(have)[:40]) + (", ..." if len(have) > 40 else "")
            msg = f"{fld}: column {col!r} is not in the live aggregates (its columns: {listed or 'none'})"
            if fld in spec.columns.defaulted or (
                fld.startswith(f"{cf}.aggregates.") and f"{cf}.aggregates" in spec.columns.defaulted
            ):
                msg += f"; {col!r} is the default (the replay's name): map the live column under {fld}"
            near = nearest_name(col, have)
            if near:
                msg += f"; did you mean {near!r}?"
            raise ConfigError(msg)
        family = type_family(types[col])
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
            if agg_types[name] in ("sum", "avg") and family not in NUMERIC:
                refuse(f"a number (aggregate {name!r} is a {agg_types[name]})")
            replay_col = name
        elif role == "key" or role.startswith("key["):
            replay_col = pipeline.window.keys[int(role[4:-1]) if role != "key" else 0]
        elif role == "worker":
            replay_col = pipeline.source.worker
        else:
            continue
        if replay_col in replay_types:
            rt = replay_types[replay_col]
            if not _comparable(family, type_family(rt)):
                refuse(f"comparable with the replay's {replay_col!r}, which is {rt.simpleString()}")
