"""A few rows of a Spark DataFrame as a typed Dagster table, for materialization metadata."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType

PREVIEW_ROWS = 5
#: Significant digits of a float in a preview (the data keeps every bit).
FLOAT_DIGITS = 12


def column_schema(df: DataFrame, descriptions: Mapping[str, str] | None = None) -> dg.TableSchema:
    """The columns of ``df`` with their Spark types (``dagster/column_schema``, the catalog's
    Columns section), each with its description from ``descriptions`` if any."""
    descriptions = descriptions or {}
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name=f.name, type=f.dataType.simpleString(), description=descriptions.get(f.name))
            for f in df.schema.fields
        ]
    )


def table_preview(
    df: DataFrame, rows: int = PREVIEW_ROWS, descriptions: Mapping[str, str] | None = None
) -> dg.MetadataValue:
    """The first ``rows`` rows of ``df`` (in its order) as a ``MetadataValue.table`` with a
    ``TableSchema`` of the columns' Spark types. Numbers keep their own type; a float is
    shown to :data:`FLOAT_DIGITS` significant digits (a sum of decimal amounts such as
    ``39.599999999999994`` reads ``39.6``); times are ISO-8601 UTC text."""
    from pyspark.sql import types as T

    fields = df.schema.fields
    schema = column_schema(df, descriptions)
    records = []
    for row in df.limit(rows).collect():
        records.append(dg.TableRecord({f.name: _cell(row[i], f.dataType, T) for i, f in enumerate(fields)}))
    return dg.MetadataValue.table(records=records, schema=schema)


def _cell(value: object, dtype: DataType, T: ModuleType) -> str | int | float | None:
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}") if math.isfinite(value) else repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None and isinstance(dtype, T.TimestampType):
            # PySpark hands a timestamp back as this process's local time, naive: shown in UTC, saying so.
            value = value.astimezone(dt.timezone.utc)
        return value.isoformat().replace("+00:00", "Z")  # a timestamp_ntz stays a time with no zone
    text = str(value)
    return text.replace("\n", " ")[:200]
