"""The landing zone: historical events, cut into partitions of arrival time by Spark filters.

The landing zone is a local folder or any URI Spark reads, in any format Spark reads
(the pipeline's ``source.format``, ``source.schema`` and ``source.options``). A
partition of the event history is an arrival-time window ``[start, end)`` inside one
UTC day (a day, or an hour of it). Its rows are chosen by Spark filters, never by
listing folders in Python:

* **With a partition column** (default ``date``, the Hive-style layout
  ``<landing zone>/date=YYYY-MM-DD/``, what ``windowing.sample`` writes and most
  ingestion jobs produce): the day is ``date = <day>``, so Spark reads only that day's
  files. The day is authoritative: with hourly partitions a row is placed in the hour
  of its arrival time *clamped into its day*, and a row whose arrival time is null or
  unreadable goes with the day's first hour, where the engine rejects it with a reason.
  The partition column itself is dropped (the events are the files' columns).
* **Without one** (``partition_column=None``): rows whose arrival time lies in
  ``[start, end)``; rows whose arrival time is null or unreadable belong to no window,
  so they go with the first partition of the history (``unplaced=True``), where the
  engine rejects them with a reason. Nothing is lost either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.contract import quoted
from windowing.storage.errors import InputError
from windowing.storage.inputs import (
    check_parquet_files,
    nanos_as_long,
    nanos_columns,
    nanos_error,
    note_rows_at_most,
    read_footers,
    refuses_nanos,
    times_from_nanos,
)
from windowing.storage.lake import Entry, Lake, glob_escape, join

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession

    from windowing.config import Pipeline, Source

DAY = timedelta(days=1)
DEFAULT_PARTITION_COLUMN = "date"


class LandingZoneError(RuntimeError):
    """The landing zone is missing or holds no events to read a schema from."""


@dataclass
class KnownSchemas:
    """The schemas Spark inferred from a landing zone's files, kept for the partitions of
    one run (a backfill): the zone's, inferred once rather than by a Spark job a partition
    (Spark takes it from one file either way), and each day's column types
    (:func:`check_day_types`: the hourly partitions of a day share them). A file that lands
    meanwhile is still read: the files are listed again for every partition."""

    zone: dict[tuple[Any, ...], T.StructType] = field(default_factory=dict)
    days: dict[tuple[str, ...], dict[str, T.DataType]] = field(default_factory=dict)


def day_of(start: datetime, end: datetime) -> datetime:
    """The UTC day ``[start, end)`` lies in; refuses windows that straddle days."""
    day = start.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if end > day + DAY:
        raise ValueError(f"partition window [{start}, {end}) spans more than one arrival day")
    return day


def read_landing(
    spark: SparkSession,
    landing_zone: str,
    source: Source | None = None,
    partition_column: str | None = DEFAULT_PARTITION_COLUMN,
    known: KnownSchemas | None = None,
) -> DataFrame:
    """The whole landing zone as one DataFrame (lazy: filters decide what is read).
    ``known``: schemas inferred earlier in the same run (the zone's is reused, else kept)."""
    reader = spark.read.format(source.format if source else "parquet")
    key = (landing_zone, source.format if source else "parquet", source.options if source else (), partition_column)
    if source is not None and source.schema:
        reader = reader.schema(source.schema)
    elif known is not None and key in known.zone:
        reader = reader.schema(known.zone[key])
    for k, v in source.options if source else ():
        reader = reader.option(k, v)
    if partition_column is None:
        reader = reader.option("recursiveFileLookup", "true")
    else:
        reader = reader.option("basePath", landing_zone)
    try:
        try:
            df = reader.load(glob_escape(landing_zone))  # exactly this folder, whatever its name holds
            df.schema  # noqa: B018 - resolve now: a missing landing zone fails here, named
        except Exception as exc:
            if not refuses_nanos(exc):
                raise
            df = _load_nanos_as_long(spark, reader, landing_zone, partition_column, exc)
    except Exception as exc:  # Spark's AnalysisException and friends
        text = str(exc)
        if isinstance(exc, InputError):
            raise
        if "PATH_NOT_FOUND" in text or "UNABLE_TO_INFER_SCHEMA" in text or "does not exist" in text:
            raise LandingZoneError(
                f"landing zone {landing_zone} holds no events"
                + (f" in {partition_column}=YYYY-MM-DD folders" if partition_column else "")
                + "; generate sample history with `python -m orchestration.demo` or point "
                "REWINDOW_LANDING_ZONE at your events"
            ) from exc
        raise InputError(f"landing zone {landing_zone}: cannot read it: {text.splitlines()[0][:300]}") from exc
    if partition_column is not None and partition_column not in df.columns:
        raise LandingZoneError(
            f"landing zone {landing_zone}: no {partition_column}=... folders (partition column {partition_column!r} "
            f"not found; columns: {', '.join(df.columns)}); set the partition column or none"
        )
    if known is not None and not (source is not None and source.schema):
        known.zone.setdefault(key, df.schema)
    return df


def landed_days(
    spark: SparkSession,
    landing_zone: str,
    arrival_column: str,
    *,
    source: Source | None = None,
    partition_column: str | None = DEFAULT_PARTITION_COLUMN,
) -> list[date]:
    """The UTC days the landing zone holds events for, oldest first.

    With a partition column: its values (Spark answers from the folder names, reading no
    data file). Without one: every day from the earliest to the latest arrival time (one
    aggregate over the arrival column).
    """
    df = read_landing(spark, str(landing_zone), source, partition_column)
    if partition_column is not None:
        values = df.select(F.col(quoted(partition_column)).cast("date").alias("d")).distinct().collect()
        return sorted(r["d"] for r in values if r["d"] is not None)
    arrival = _as_timestamp(df, arrival_column)
    row = df.select(F.min(arrival).alias("lo"), F.max(arrival).alias("hi")).collect()[0]
    if row["lo"] is None:
        return []
    lo, hi = (
        row[c].replace(tzinfo=row[c].tzinfo or timezone.utc).astimezone(timezone.utc).date() for c in ("lo", "hi")
    )
    return [lo + timedelta(days=i) for i in range((hi - lo).days + 1)]


def read_partition_events(
    spark: SparkSession,
    landing_zone: str,
    start: datetime,
    end: datetime,
    arrival_column: str,
    *,
    source: Source | None = None,
    pipeline: Pipeline | None = None,
    partition_column: str | None = DEFAULT_PARTITION_COLUMN,
    unplaced: bool = False,
    known: KnownSchemas | None = None,
) -> tuple[DataFrame, list[Any] | None]:
    """The events of the arrival window ``[start, end)`` as a Spark DataFrame.

    (``files`` holds :class:`Entry` items; typed ``list[Any]`` because
    ``windowing.chain.Chain.read_events`` still declares ``list[str]``.)

    Returns ``(events, files)``: ``files`` are the data files the partition reads
    (:class:`windowing.storage.lake.Entry`, checked first: each footer readable, the pipeline's
    columns present with one type) when the partition column tells them, else ``None``. See the module
    docstring for which
    rows belong to the window. ``known``: the schemas inferred by the partitions before in
    the same run (:class:`KnownSchemas`).
    """
    landing_zone = str(landing_zone)
    df = read_landing(spark, landing_zone, source, partition_column, known)
    arrival = _as_timestamp(df, arrival_column)
    if partition_column is None:
        inside = (arrival >= F.lit(start)) & (arrival < F.lit(end))
        events = df.where(inside | arrival.isNull()) if unplaced else df.where(inside)
        return events, None
    day = day_of(start, end)
    day_rows = df.where(F.col(quoted(partition_column)).cast("date") == F.lit(day.date()))
    files: list[Entry] | None = None
    rows: int | None = None  # at most: the day's files' (their footers, read to check them), what plans a small replay
    if (source.format if source else "parquet") == "parquet":
        lake = Lake(spark)
        folder = join(landing_zone, f"{partition_column}={day:%Y-%m-%d}")
        files = lake.files(folder)
        footers = check_parquet_files(lake, [e.path for e in files], pipeline, InputError, only=set(df.columns))
        check_day_types(spark, folder, [e.path for e in files], df, pipeline, known)
        rows = lake.rows_in([e.path for e in files])
        day_rows = times_from_nanos(day_rows, nanos_columns(footers))  # nanosecond timestamps as times
    events = day_rows.drop(partition_column)
    if start == day and end == day + DAY:
        return note_rows_at_most(events, rows), files
    # Hourly (or finer) partitions: the row's arrival time clamped into its day.
    arrival = _as_timestamp(events, arrival_column)
    first, last = F.lit(day), F.lit(day + DAY - timedelta(microseconds=1))
    placed = F.coalesce(F.least(F.greatest(arrival, first), last), first)
    return note_rows_at_most(events.where((placed >= F.lit(start)) & (placed < F.lit(end))), rows), files


def _load_nanos_as_long(
    spark: SparkSession, reader: DataFrameReader, landing_zone: str, partition_column: str | None, exc: Exception
) -> DataFrame:
    """The landing zone with its Parquet ``TIMESTAMP(NANOS)`` columns as their bigint
    nanoseconds (:func:`windowing.storage.inputs.nanos_as_long`), which each day's read turns
    into times from its files' footers (:func:`read_partition_events`). Without a partition
    column no footers are read: the first file holding such a column is named instead."""
    if partition_column is None:
        lake = Lake(spark)
        footers = read_footers(lake, [e.path for e in lake.files(landing_zone)])
        raise nanos_error(footers, nanos_columns(footers)) from exc
    with nanos_as_long(spark):
        df = reader.load(glob_escape(landing_zone))
        df.schema  # noqa: B018 - inferred under the setting
    return df


def check_day_types(
    spark: SparkSession,
    folder: str,
    files: list[str],
    landing: DataFrame,
    pipeline: Pipeline | None,
    known: KnownSchemas | None = None,
) -> None:
    """Refuse a day whose files hold a column the pipeline reads with another type than the
    landing zone's schema (which Spark takes from one file, of another day): read as it is,
    Spark would fail deep in the replay with ``SchemaColumnConvertNotSupportedException``.
    The error names the day, the column, both types, and that the earlier days (and the
    state they carried forward) hold the other type."""
    if not files or pipeline is None:
        return
    if known is not None and tuple(files) in known.days:
        day_types = known.days[tuple(files)]
    else:  # Spark's schema of the day's files (a Spark job); nanosecond timestamps as bigint, as the zone's
        try:
            day_schema = spark.read.parquet(*[glob_escape(f) for f in files]).schema
        except Exception as exc:
            if not refuses_nanos(exc):
                raise
            with nanos_as_long(spark):
                day_schema = spark.read.parquet(*[glob_escape(f) for f in files]).schema
        day_types = {f.name: f.dataType for f in day_schema.fields}
        if known is not None:
            known.days[tuple(files)] = day_types
    zone_types = {f.name: f.dataType for f in landing.schema.fields}
    for column in pipeline.input_columns:
        here, there = day_types.get(column), zone_types.get(column)
        if here is not None and there is not None and here != there:
            raise InputError(
                f"{folder}: column {column!r} is {here.simpleString()} in this day's files but "
                f"{there.simpleString()} in the landing zone's schema (from another day's files; the state carried "
                f"from the days before holds {there.simpleString()} too): a column's type must not change between "
                f"days. Rewrite this day's files with {there.simpleString()}, or replay the history again from its "
                "first day with one type"
            )


def _as_timestamp(df: DataFrame, column: str) -> Column:
    """The column as a timestamp, null when unreadable (types as in docs/semantics.md §1)."""
    if column not in df.columns:
        return F.lit(None).cast("timestamp")
    dtype = df.schema[column].dataType
    c = F.col(quoted(column))
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return c.cast("timestamp")
    if isinstance(dtype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return F.timestamp_millis(c.cast("long"))
    if isinstance(dtype, T.StringType):
        return F.try_to_timestamp(c)
    return F.lit(None).cast("timestamp")
