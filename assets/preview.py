"""A few rows of a Spark DataFrame as a typed Dagster table, for materialization metadata."""

from __future__ import annotations

import datetime as dt
import math

import dagster as dg

PREVIEW_ROWS = 5


def table_preview(df, rows: int = PREVIEW_ROWS) -> dg.MetadataValue:
    """The first ``rows`` rows of ``df`` (in its order) as a ``MetadataValue.table`` with a
    ``TableSchema`` of the columns' Spark types. Numbers keep their own type (a float is
    shown at its shortest exact representation); times are ISO-8601 UTC text."""
    from pyspark.sql import types as T

    fields = df.schema.fields
    schema = dg.TableSchema(columns=[dg.TableColumn(name=f.name, type=f.dataType.simpleString()) for f in fields])
    records = []
    for row in df.limit(rows).collect():
        records.append(dg.TableRecord({f.name: _cell(row[i], f.dataType, T) for i, f in enumerate(fields)}))
    return dg.MetadataValue.table(records=records, schema=schema)


def _cell(value, dtype, T):
    if value is None:
        return None
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    text = str(value)
    return text.replace("\n", " ")[:200]
