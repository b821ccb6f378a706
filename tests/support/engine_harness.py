"""Run the Spark engine on model-style rows (times as int epoch ms) and read results back
in the reference model's shape, so tests can compare engine and model row for row."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from pyspark.sql import types as T

from windowing.runner.replay import replay

#: The columns generated test rows may carry, with explicit Spark types.
COLUMN_TYPES = {
    "arrival": T.LongType(),
    "event_time": T.LongType(),
    "batch": T.LongType(),
    "offset": T.LongType(),
    "worker": T.IntegerType(),
    "user": T.StringType(),
    "amount": T.DoubleType(),
    "qty": T.LongType(),
    "tag": T.StringType(),
    "name": T.StringType(),
}


#: The columns of tests/support/generators.py histories (used when a history is empty).
GENERATED_COLUMNS = ["arrival", "event_time", "batch", "offset", "worker", "user", "amount", "qty", "tag"]


def to_df(spark, rows, columns=None, partitions=None, seed=None, decimals=None):
    """A DataFrame of ``rows`` with an explicit schema; optionally shuffled and split.
    ``decimals`` ({column: (precision, scale)}) makes those columns decimals."""
    columns = columns or sorted({c for r in rows for c in r}, key=list(COLUMN_TYPES).index) or GENERATED_COLUMNS
    decimals = decimals or {}
    schema = T.StructType(
        [T.StructField(c, T.DecimalType(*decimals[c]) if c in decimals else COLUMN_TYPES[c], True) for c in columns]
    )
    rows = list(rows)
    if seed is not None:
        random.Random(seed).shuffle(rows)
    df = spark.createDataFrame([tuple(r.get(c) for c in columns) for r in rows], schema)
    if partitions:
        df = df.repartition(partitions)
    return df


def _ms(v):
    if isinstance(v, datetime):
        return to_ms(v)
    return v


def rows_of(df, ts_cols=("window_start", "window_end", "emit_time", "emit_watermark", "watermark")):
    out = []
    for r in df.collect():
        d = r.asDict()
        for c in ts_cols:
            if c in d:
                d[c] = _ms(d[c])
        out.append(d)
    return out


def canon(rows, drop=()):
    return sorted((tuple(sorted((k, v) for k, v in r.items() if k not in drop)) for r in rows), key=repr)


def run_engine(
    spark, pipeline, rows, state=None, flush_at_end=False, columns=None, partitions=None, seed=None, decimals=None
):
    """Replay ``rows``; returns (aggregates, late, rejected, state_df, metrics) as plain rows."""
    df = to_df(spark, rows, columns=columns, partitions=partitions, seed=seed, decimals=decimals)
    res = replay(spark, pipeline, df, state=state, flush_at_end=flush_at_end)
    out = (rows_of(res.aggregates), rows_of(res.late_events), rows_of(res.rejected), res.state, res.metrics)
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def to_ms(v: datetime) -> int:
    """Exact epoch milliseconds of a datetime (naive ones are UTC)."""
    if v.tzinfo is None:
        v = v.replace(tzinfo=timezone.utc)
    return (v - _EPOCH) // timedelta(milliseconds=1)
