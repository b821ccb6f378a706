"""Spark column expressions and types shared by the runner and the data-quality checks.

Both read input columns by their literal names and turn input time columns into epoch
milliseconds; one definition keeps the checks judging exactly what the runner computed.
Also the conversions between a DataFrame's Spark types and the kernel's Arrow types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type

from windowing.contract import quoted
from windowing.durations import DAY_MS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

#: The representable times, in epoch milliseconds: 0001-01-01T00:00:00.000Z to
#: 9999-12-31T23:59:59.999Z (both included), the range Spark timestamps and Python
#: datetimes both hold. Input times outside it are rejected ("... out of range"), so every
#: time the engine computes with (windows, watermarks, lateness) stays far from int64
#: overflow; rows whose windows would leave it are rejected too ("window out of range",
#: ``normalise.window_out_of_range``), so every output time converts to a datetime.
MIN_EPOCH_MS = -62_135_596_800_000
MAX_EPOCH_MS = 253_402_300_799_999


def col(name: str) -> Column:
    """A column by its literal name (dots, spaces and backticks are part of the name)."""
    return F.col(quoted(name))


def epoch_ms_unchecked(name: str, dtype: DataType) -> Column:
    """Epoch milliseconds of an input time column of Spark type ``dtype``, null when null
    or unparseable, whatever its range (see :func:`epoch_ms`).

    The types docs/semantics.md section 1 accepts: timestamp (sub-ms floored, also
    before 1970), date (midnight UTC), integer (epoch ms), string (ISO-8601, UTC unless
    it has an offset). Anything else gives null. No value overflows here: integers are
    taken as they are, timestamps divided, dates (32-bit days) multiplied into 64 bits.
    Tasks compute the same from zoned timestamps, dates and integers
    (``kernel.inputs.task_derived``), for the rows :func:`epoch_ms` accepts.
    """
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


def in_range(ms: Column) -> Column:
    """``ms`` (an epoch-ms column) where it lies in [MIN_EPOCH_MS, MAX_EPOCH_MS], else null."""
    return F.when(ms.between(F.lit(MIN_EPOCH_MS), F.lit(MAX_EPOCH_MS)), ms)


def epoch_ms(name: str, dtype: DataType) -> Column:
    """Epoch milliseconds of an input time column, null when null, unparseable or outside
    the representable range (:data:`MIN_EPOCH_MS` .. :data:`MAX_EPOCH_MS`): the time the
    engine replays a row at, null exactly for the rows it rejects for their time."""
    return in_range(epoch_ms_unchecked(name, dtype))


def floor_div_expr(x: str, divisor: int) -> str:
    """floor(``x`` / divisor) as a Spark SQL expression, exact in 64-bit integers."""
    return f"(({x}) - pmod(({x}), {divisor})) div {divisor}"


def arrow_types(spark: SparkSession, df: DataFrame) -> dict[str, pa.DataType]:
    """The Arrow type of each of ``df``'s columns, by name, as Spark hands them to Python
    (timestamps in the session's time zone): the kernel's ``input_types``."""
    tz = spark.conf.get("spark.sql.session.timeZone")
    return {f.name: to_arrow_type(f.dataType, timezone=tz) for f in df.schema.fields}


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema: what a ``mapInArrow`` returning ``schema``
    declares, and the type of a DataFrame made from such rows."""
    return from_arrow_schema(schema)
