"""Spark column expressions shared by the engine and the data-quality checks.

Both read input columns by their literal names and turn input time columns into epoch
milliseconds; one definition keeps the checks judging exactly what the engine computed.
"""

from __future__ import annotations

from windowing.durations import DAY_MS


def col(name: str):
    """A column by its literal name (dots, spaces and backticks are part of the name)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def epoch_ms(name: str, dtype):
    """Epoch milliseconds of an input time column of Spark type ``dtype``, null when null
    or unparseable.

    The types docs/semantics.md section 1 accepts: timestamp (sub-ms floored, also
    before 1970), date (midnight UTC), integer (epoch ms), string (ISO-8601, UTC unless
    it has an offset). Anything else gives null. Tasks compute the same from zoned
    timestamps, dates and integers (``kernel.task_derived``).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    c = col(name)
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return F.unix_millis(c.cast(T.TimestampType()))
    if isinstance(dtype, T.StringType):
        return F.unix_millis(F.try_to_timestamp(c))
    if isinstance(dtype, T.DateType):
        return F.unix_date(c).cast("long") * F.lit(DAY_MS)
    if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return c.cast("long")
    return F.lit(None).cast("long")
