"""pandera schemas of a pipeline's input and of its outputs; the output types are
:mod:`windowing.config.arrow_schemas`' (the replay writes the same)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Collection, Hashable, cast

from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type

from windowing.config import Pipeline, arrow_schemas
from windowing.config.model import NUMERIC_AGGREGATES
from windowing.contract import LATE_ADDED_COLUMNS, STATE_HEAD_COLUMNS
from windowing.runner.columns import col as _col
from windowing.validation.base import CheckResult, CountPass, Finish, PassSums, jsonable, skip_result, wanted

if TYPE_CHECKING:
    import pyarrow as pa
    from pandera.pyspark import DataFrameSchema
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructField


def _screened(check: Any, column: str, dtype: DataType) -> Column | None:
    """The rows failing a pandera column check, as pandera's pyspark backend finds them
    (``df.filter(~cond).limit(1).count() == 0`` passes), for the checks screened in the pass:
    ``Check.ge`` on a numeric column of the type the schema declares; None for any other."""
    if (
        getattr(check, "name", None) != "greater_than_or_equal_to"
        or set(check.statistics) != {"min_value"}
        or check.groupby is not None
        or check.raise_warning
        or not isinstance(dtype, T.NumericType)
    ):
        return None
    return F.when(~(_col(column) >= check.statistics["min_value"]), 1)


def _screen(p: CountPass, schema: DataFrameSchema, df: DataFrame) -> tuple[dict[str, list[Hashable]], PassSums | None]:
    """Count, on ``p``, what pandera's pyspark backend would spend a Spark job on per column
    (a null in a non-nullable column; each failing row of a data check), for the columns it
    can be counted for: present, with the declared type, and only checks :func:`_screened`
    knows. Returns the columns screened (name -> its counters) and the counts."""
    types = {f.name: f for f in df.schema.fields}
    counters: dict[Hashable, Column] = {}
    screened: dict[str, list[Hashable]] = {}
    for name, column in schema.columns.items():
        field = types.get(name)
        if field is None or column.regex or (column.checks and column.dtype is None):
            continue
        mine: dict[Hashable, Column] = {}
        if not column.nullable and field.nullable:
            mine[(name, "null")] = F.when(_col(name).isNull(), 1)
        if column.checks:
            if column.dtype.type != field.dataType:
                continue
            found = [_screened(c, name, field.dataType) for c in column.checks]
            if any(f is None for f in found):
                continue
            mine.update({(name, i): f for i, f in enumerate(found) if f is not None})
        if mine:
            screened[name] = list(mine)
            counters.update(mine)
    return screened, (p.add(df, counters) if counters else None)


def pandera_check(
    p: CountPass, name: str, description: str, schema: DataFrameSchema, df: DataFrame, sample_size: int
) -> Finish:
    """Validate ``df`` with a pandera pyspark schema, planned on ``p``; any recorded error fails the check.

    pandera's pyspark backend spends a Spark job on each non-nullable column and on each data
    check. Those of the columns :func:`_screen` can count are counted on ``p`` instead; a
    column found clean is given to pandera as nullable and without its checks (pandera has
    nothing left to find there), so pandera runs no Spark job for it. A column with a finding
    is validated by pandera as declared, so every error pandera reports is its own, worded as
    ever, and the result is the same as validating the whole schema.
    """
    screened, sums = _screen(p, schema, df)

    def finish() -> list[CheckResult]:
        clean = [c for c, counters in screened.items() if sums is not None and all(int(sums[k]) == 0 for k in counters)]
        relaxed = schema.update_columns({c: {"nullable": True, "checks": []} for c in clean}) if clean else schema
        if _types_only(relaxed):  # pandera reads no row: the same result for every partition of a pass
            return [
                p.shared((name, tuple(clean)), lambda: _validate(name, description, relaxed, p.rows(df), sample_size))
            ]
        return [_validate(name, description, relaxed, p.rows(df), sample_size)]

    return finish


def _types_only(schema: DataFrameSchema) -> bool:
    """pandera validates ``schema`` from a DataFrame's column types alone: no column is
    non-nullable or has data checks (pandera's pyspark backend runs no Spark job)."""
    return not schema.checks and all(c.nullable and not c.checks for c in schema.columns.values())


def _validate(name: str, description: str, schema: DataFrameSchema, df: DataFrame, sample_size: int) -> CheckResult:
    """Validate ``df`` with a pandera pyspark schema; any recorded error fails the check."""
    from pandera.config import (  # noqa: PLC0415 - pandera is slow to import; only the checks need it
        ValidationDepth,
        config_context,
    )
    from pandera.errors import (  # noqa: PLC0415 - pandera is slow to import; only the checks need it
        SchemaError,
        SchemaErrors,
    )

    try:
        with config_context(validation_enabled=True, validation_depth=ValidationDepth.SCHEMA_AND_DATA):
            validated = schema.validate(df, lazy=True)
        report = validated.pandera.errors
    except (SchemaError, SchemaErrors) as exc:  # pandera versions that raise after all
        return CheckResult(name, False, 1, [{"error": str(exc)[:2000]}], description)
    if report is None:  # validation did not run: never a pass
        return CheckResult(
            name, False, 1, [{"error": "pandera recorded no report (validation disabled?)"}], description
        )
    errors = [
        {"scope": scope, "reason": reason, **{k: jsonable(v) for k, v in e.items()}}
        for scope, by_reason in dict(cast(Any, report)).items()
        for reason, items in dict(by_reason).items()
        for e in items
    ]
    return CheckResult(name, not errors, len(errors), errors[:sample_size], description)


def schema_check(
    p: CountPass,
    name: str,
    description: str,
    skip_description: str,
    schema_of: Callable[[Pipeline, dict[str, DataType]], DataFrameSchema],
    pipeline: Pipeline,
    df: DataFrame,
    input_types: dict[str, DataType] | None,
    sample_size: int,
    only: Collection[str] | None,
) -> Finish:
    """An output's pandera schema check, planned on ``p``; skipped when the input column types are unknown."""
    if not wanted(only, name):
        return lambda: []
    if input_types is None:
        return lambda: [skip_result(name, skip_description, "input types unknown")]
    return pandera_check(p, name, description, schema_of(pipeline, input_types), df, sample_size)


def _schema(columns: dict[str, Any], name: str) -> DataFrameSchema:
    import pandera.pyspark as pa  # noqa: PLC0415 - pandera is slow to import; only the checks need it

    return pa.DataFrameSchema(columns, name=name, strict=False)


def _column(dtype: DataType | None, nullable: bool = True, checks: list[Any] | None = None) -> Any:
    import pandera.pyspark as pa  # noqa: PLC0415 - pandera is slow to import; only the checks need it

    return pa.Column(cast(Any, dtype), nullable=nullable, checks=checks or None, required=True)


def input_schema(pipeline: Pipeline, input_types: dict[str, DataType] | None = None) -> DataFrameSchema:
    """pandera schema of a pipeline's input events.

    Every configured column is required; time columns must be a timestamp, date, integer
    (epoch ms) or string, a batch column an integer, a sum/avg column a number, other
    aggregated columns anything but a nested or binary type. Null times are not the
    schema's business: those rows are rejected by the replay and flagged by
    ``input_times_parseable``. ``input_types`` (the frame's own types) lets an acceptable type stand;
    an unacceptable one is checked against the canonical type, so pandera reports it.
    """
    types = input_types or {}
    src, w = pipeline.source, pipeline.window
    integral = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    numeric = integral + (T.FloatType, T.DoubleType, T.DecimalType)
    times = integral + (T.TimestampType, T.TimestampNTZType, T.DateType, T.StringType)
    nested = (T.ArrayType, T.MapType, T.StructType, T.BinaryType)

    def want(col: str, accepted: tuple[type, ...], canonical: DataType) -> DataType:
        t = types.get(col)
        return t if t is not None and isinstance(t, accepted) else canonical

    cols: dict[str, Any] = {}
    cols[src.arrival_time] = _column(want(src.arrival_time, times, T.TimestampType()))
    if w.event_time:
        cols.setdefault(w.event_time, _column(want(w.event_time, times, T.TimestampType())))
    if src.batch_column:
        cols.setdefault(src.batch_column, _column(want(src.batch_column, integral, T.LongType())))
    for c in (*src.arrival_order, src.worker, *w.keys):
        if c:
            cols.setdefault(c, _column(None))
    for a in pipeline.aggregates:
        if a.column is None:
            continue
        if a.type in NUMERIC_AGGREGATES:
            cols[a.column] = _column(want(a.column, numeric, T.DoubleType()))
        elif a.column not in cols:
            t = types.get(a.column)
            cols[a.column] = _column(T.StringType() if isinstance(t, nested) else None)
    return _schema(cols, f"{pipeline.name}.input")


def _arrow_types(input_types: dict[str, DataType]) -> dict[str, pa.DataType]:
    """The input columns' Arrow types, from their Spark types."""
    return {c: to_arrow_type(t, timezone="UTC") for c, t in input_types.items()}


def _spark_fields(arrow_schema: pa.Schema) -> list[StructField]:
    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=False).fields


def _output_schema(
    name: str, arrow_schema: pa.Schema, not_null: set[str], extra_checks: dict[str, list[Any]] | None = None
) -> DataFrameSchema:
    cols = {}
    for f in _spark_fields(arrow_schema):
        cols[f.name] = _column(f.dataType, nullable=f.name not in not_null, checks=(extra_checks or {}).get(f.name))
    return _schema(cols, name)


def aggregates_schema(pipeline: Pipeline, input_types: dict[str, DataType]) -> DataFrameSchema:
    """pandera schema of ``aggregates`` (``windowing.config.arrow_schemas.aggregates_schema``)."""
    import pandera.pyspark as pa  # noqa: PLC0415 - pandera is slow to import; only the checks need it

    not_null = {"window_start", "window_end", "emit_reason", "emit_batch", "emit_time", "emission"}
    not_null |= {a.name for a in pipeline.aggregates if a.type in ("count", "distinct")}
    arrow = arrow_schemas.aggregates_schema(pipeline, _arrow_types(input_types))
    return _output_schema(f"{pipeline.name}.aggregates", arrow, not_null, {"emission": [pa.Check.ge(1)]})


def late_schema(pipeline: Pipeline, input_types: dict[str, DataType]) -> DataFrameSchema:
    """pandera schema of ``late_events`` (``windowing.config.arrow_schemas.late_schema``)."""
    import pandera.pyspark as pa  # noqa: PLC0415 - pandera is slow to import; only the checks need it

    return _output_schema(
        f"{pipeline.name}.late_events",
        arrow_schemas.late_schema(_arrow_types(input_types)),
        set(LATE_ADDED_COLUMNS),
        {"lateness_ms": [pa.Check.ge(0)]},
    )


def state_schema(pipeline: Pipeline, input_types: dict[str, DataType]) -> DataFrameSchema:
    """pandera schema of ``state`` (``windowing.config.arrow_schemas.state_schema``); the kinds are the
    ``state_kind`` rule's, which can show the offending rows."""
    arrow = arrow_schemas.state_schema(pipeline, _arrow_types(input_types))
    return _output_schema(f"{pipeline.name}.state", arrow, set(STATE_HEAD_COLUMNS))


def rejected_schema(pipeline: Pipeline, input_types: dict[str, DataType]) -> DataFrameSchema:
    """pandera schema of ``rejected``: the input columns and a non-null ``reason``."""
    cols = {c: _column(t) for c, t in input_types.items()}
    cols["reason"] = _column(T.StringType(), nullable=False)
    return _schema(cols, f"{pipeline.name}.rejected")
