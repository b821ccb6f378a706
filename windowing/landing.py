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

import logging
import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing import prewindow
from windowing.contract import quoted
from windowing.partitions import day_key
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
from windowing.storage.lake import Entry, Lake, display, glob_escape, inside, join, qualify
from windowing.storage.local_files import LinkError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, DataFrameReader, SparkSession

    from windowing.config import Pipeline, Source

DAY = timedelta(days=1)
DEFAULT_PARTITION_COLUMN = "date"


class LandingZoneError(InputError):
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
    #: Local landing zones found without symbolic links (:func:`zone_paths`): not walked
    #: again in this run. A zone with links is walked for every partition.
    linkless: set[str] = field(default_factory=set)
    #: The link warnings given in this run (each once, not once a partition).
    warned: set[str] = field(default_factory=set)
    #: The (landing zone, partition column) whose day folders' names were checked in this
    #: run (:func:`check_day_folders`: one listing of the zone's top level, not one a partition).
    folders_checked: set[tuple[str, str]] = field(default_factory=set)


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
    roots = zone_paths(spark, landing_zone, known)
    try:
        # Exactly this folder, whatever its name holds; with links below it, the folders and
        # files that hold each file once.
        target: str | list[str] = glob_escape(landing_zone) if roots is None else [glob_escape(r) for r in roots]
        try:
            df = reader.load(target)
            df.schema  # noqa: B018 - resolve now: a missing landing zone fails here, named
        except Exception as exc:
            if not refuses_nanos(exc):
                raise
            df = _load_nanos_as_long(spark, reader, landing_zone, target, partition_column, exc)
    except Exception as exc:  # Spark's AnalysisException and friends
        text = str(exc)
        if isinstance(exc, InputError):
            raise
        if partition_column is not None and (
            "CONFLICTING_PARTITION_COLUMN_NAMES" in text or "CONFLICTING_DIRECTORY" in text
        ):
            raise InputError(_layout_error(landing_zone, partition_column, text)) from exc
        if "PATH_NOT_FOUND" in text or "UNABLE_TO_INFER_SCHEMA" in text or "does not exist" in text:
            raise LandingZoneError(
                f"landing zone {landing_zone} holds no events"
                + (f" in {partition_column}=YYYY-MM-DD folders" if partition_column else "")
                + ": point --input, the pipeline's source.path or (Dagster) REWINDOW_LANDING_ZONE at your "
                "events, or write sample ones with `rewindow generate`"
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

    With a partition column: its values (Spark answers from the folder names and the
    files' footers, reading no data page), each folder's name checked first (:func:`check_day_folders`). Without one:
    every day from the earliest to the latest arrival time (one aggregate over the arrival
    column). A file Spark cannot read to infer the schema is named (:func:`name_unreadable_file`).
    """
    if partition_column is not None:
        check_day_folders(spark, str(landing_zone), partition_column)
    try:
        df = read_landing(spark, str(landing_zone), source, partition_column)
    except InputError as exc:  # Spark's own "cannot read it" names no file: a footer read of each does
        parquet = source is None or source.format == "parquet"
        if not parquet or isinstance(exc, LandingZoneError) or ": cannot read it: " not in str(exc):
            raise
        raise (name_unreadable_file(spark, str(landing_zone)) or exc) from exc
    if partition_column is not None:
        try:  # a scan of the files (their footers' row counts), not of their pages
            values = df.select(F.col(quoted(partition_column)).cast("date").alias("d")).distinct().collect()
        except Exception as exc:
            named = name_unreadable_file(spark, str(landing_zone))
            if named is None:
                raise
            raise named from exc
        return sorted(r["d"] for r in values if r["d"] is not None)
    df, arrival = _placing_arrival(df, arrival_column, source)
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
) -> tuple[DataFrame, list[Entry] | None]:
    """The events of the arrival window ``[start, end)`` as a Spark DataFrame.

    Returns ``(events, files)``: ``files`` are the data files the partition reads
    (:class:`windowing.storage.lake.Entry`, with their modification times) when the
    partition column tells them, else ``None``; Parquet files are checked first (each
    footer readable, the pipeline's columns present with one type) and carry their
    footers' row counts. See the module docstring for which rows belong to the window.
    ``known``: the schemas inferred by the partitions before in
    the same run (:class:`KnownSchemas`).
    """
    landing_zone = str(landing_zone)
    df = read_landing(spark, landing_zone, source, partition_column, known)
    if partition_column is None:
        derived, arrival = _placing_arrival(df, arrival_column, source)
        inside = (arrival >= F.lit(start)) & (arrival < F.lit(end))
        kept = derived.where(inside | arrival.isNull()) if unplaced else derived.where(inside)
        return kept.select(*[F.col(quoted(c)) for c in df.columns]), None
    day = day_of(start, end)
    events, files, rows = _day_events(spark, df, landing_zone, day, source, pipeline, partition_column, known)
    if start == day and end == day + DAY:
        return note_rows_at_most(events, rows), files
    # Hourly (or finer) partitions: the row's arrival time clamped into its day.
    derived, placed = _placed(events, day, arrival_column, source)
    hour = derived.where((placed >= F.lit(start)) & (placed < F.lit(end)))
    return note_rows_at_most(hour.select(*[F.col(quoted(c)) for c in events.columns]), rows), files


def _day_events(
    spark: SparkSession,
    df: DataFrame,
    landing_zone: str,
    day: datetime,
    source: Source | None,
    pipeline: Pipeline | None,
    partition_column: str,
    known: KnownSchemas | None,
) -> tuple[DataFrame, list[Entry], int | None]:
    """``(events, files, rows at most)`` of one day folder of the landing zone ``df``: its
    files checked first (Parquet: footers readable, one type per column), ``rows`` from
    their footers (None for other formats)."""
    day_rows = df.where(F.col(quoted(partition_column)).cast("date") == F.lit(day.date()))
    rows: int | None = None  # at most: the day's files' (their footers, read to check them), what plans a small replay
    lake = Lake(spark)
    folder = join(landing_zone, day_folder(partition_column, day))
    files: list[Entry] = lake.files(folder, within=landing_zone)
    if (source.format if source else "parquet") == "parquet":
        footers = check_parquet_files(lake, [e.path for e in files], pipeline, InputError, only=set(df.columns))
        check_day_types(spark, folder, [e.path for e in files], df, pipeline, known)
        rows = lake.rows_in([e.path for e in files])
        files = [replace(e, rows=lake.footer_rows.get(e.path)) for e in files]
        day_rows = times_from_nanos(day_rows, nanos_columns(footers))  # nanosecond timestamps as times
    return day_rows.drop(partition_column), files, rows


def _placed(events: DataFrame, day: datetime, arrival_column: str, source: Source | None) -> tuple[DataFrame, Column]:
    """``(frame, placed arrival)``: each row's arrival time clamped into its ``day`` (the
    day's first instant when null or unreadable), the time that places it in an hour."""
    derived, arrival = _placing_arrival(events, arrival_column, source)
    first, last = F.lit(day), F.lit(day + DAY - timedelta(microseconds=1))
    return derived, F.coalesce(F.least(F.greatest(arrival, first), last), first)


def read_pass_events(
    spark: SparkSession,
    landing_zone: str,
    windows: list[tuple[datetime, datetime]],
    arrival_column: str,
    part_column: str,
    *,
    source: Source | None = None,
    pipeline: Pipeline | None = None,
    partition_column: str = DEFAULT_PARTITION_COLUMN,
    known: KnownSchemas | None = None,
) -> tuple[DataFrame, list[list[Entry]], int | None]:
    """The events of consecutive partitions ``windows`` (each ``[start, end)`` inside one
    day, of one length, the next starting where one ends), as one DataFrame: each row as
    :func:`read_partition_events` places it, and ``part_column`` its window's index.

    Each day folder is read once (checked once, one scan), however many of its hours the
    windows hold. Returns ``(events, each window's files, rows at most)``."""
    landing_zone = str(landing_zone)
    df = read_landing(spark, landing_zone, source, partition_column, known)
    step = windows[0][1] - windows[0][0]
    days: dict[datetime, list[int]] = {}
    for i, (start, end) in enumerate(windows):
        if end - start != step or (i and start != windows[i - 1][1]):
            raise ValueError("a pass reads consecutive partitions of one length")
        days.setdefault(day_of(start, end), []).append(i)
    frames: list[DataFrame] = []
    files: list[list[Entry]] = [[] for _ in windows]
    rows: int | None = 0
    for day, parts in days.items():
        events, found, day_rows = _day_events(spark, df, landing_zone, day, source, pipeline, partition_column, known)
        rows = None if rows is None or day_rows is None else rows + day_rows
        for i in parts:
            files[i] = found
        if step >= DAY:
            frames.append(events.withColumn(part_column, F.lit(parts[0])))
            continue
        derived, placed = _placed(events, day, arrival_column, source)
        first = windows[parts[0]][0]
        # The index of the window holding the placed time: whole steps since the first's start.
        micros = F.unix_micros(placed) - F.lit(int(first.timestamp() * 1_000_000))
        offset = F.floor(micros / F.lit(step // timedelta(microseconds=1)))
        index = (offset + F.lit(parts[0])).cast("int")
        kept = derived.withColumn(part_column, index).where(F.col(part_column).between(parts[0], parts[-1]))
        frames.append(kept.select(*[F.col(quoted(c)) for c in events.columns], part_column))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return note_rows_at_most(out, rows), files, rows


def _placing_arrival(df: DataFrame, arrival_column: str, source: Source | None) -> tuple[DataFrame, Column]:
    """``(frame, arrival time)`` that places ``df``'s rows in partitions: the arrival column
    as a timestamp (:func:`_as_timestamp`); when ``source.derive`` gives it, computed first
    (:func:`windowing.prewindow.derive`, its expressions analysed before any job), so that a
    row lands in the partition of the arrival time its replay reads. The expressions are
    deterministic (refused otherwise), so the replay derives the same value again. The
    caller selects ``df``'s own columns back."""
    if source is None or arrival_column not in source.derived_names:
        return df, _as_timestamp(df, arrival_column)
    derived = prewindow.derive(replace(source, filter=None), df)
    return derived, _as_timestamp(derived, arrival_column)


def day_folder(partition_column: str, day: datetime) -> str:
    """The folder of ``day`` under the landing zone: ``<partition column>=YYYY-MM-DD``."""
    return f"{partition_column}={day.date().isoformat()}"


def _load_nanos_as_long(
    spark: SparkSession,
    reader: DataFrameReader,
    landing_zone: str,
    target: str | list[str],
    partition_column: str | None,
    exc: Exception,
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
        df = reader.load(target)
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
    state they carried forward) hold the other type. A column the pipeline reads that is
    named like the partition column (``date``, in the files too) is refused as that, and the
    landing zone's day folders are checked first (:func:`check_day_folders`)."""
    zone, _, name = folder.rstrip("/").rpartition("/")
    partition_column = name.partition("=")[0]
    if zone and partition_column and (known is None or (zone, partition_column) not in known.folders_checked):
        check_day_folders(spark, zone, partition_column)
        if known is not None:
            known.folders_checked.add((zone, partition_column))
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
    if partition_column in day_types and partition_column in pipeline.input_columns:
        raise InputError(
            f"{folder}: the data files hold a column {partition_column!r} "
            f"({day_types[partition_column].simpleString()}), named like the partition column of the "
            f"landing zone's {partition_column}=YYYY-MM-DD folders, and the pipeline reads it: Spark gives that "
            "column the folder's value and type, and a partition's events leave it out. Rename the column in the "
            f"files (and in the pipeline), or read the landing zone with another partition column "
            "(--partition-column)"
        )
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


# --------------------------------------------------------------------------- each file once (issue 46)

log = logging.getLogger("rewindow.landing")


def zone_paths(spark: SparkSession, landing_zone: str, known: KnownSchemas | None = None) -> list[str] | None:
    """What Spark's reader is given for the landing zone so that it reads each file once:
    None for the zone itself (no symbolic link below it, or not on the driver's disk: only
    there are there links Spark follows), else the link-free folders and files that hold
    each of its files once (:meth:`Lake.tree`; partition discovery is unchanged: ``basePath``
    is the zone). Each link is logged (once a run), naming it and the path its files are
    read as. A link loop, or a link whose real path leaves the zone, is an
    :class:`InputError` naming the link and where it points. ``known``: a zone found
    without links earlier in the run is not walked again (one ``scandir`` a folder, no
    file opened or stat'ed, when it is)."""
    if known is not None and landing_zone in known.linkless:
        return None
    try:
        tree = Lake(spark).tree(landing_zone)
    except LinkError as exc:
        raise InputError(f"landing zone {landing_zone}: {exc}") from exc
    if tree is None or not tree.linked:
        if known is not None and tree is not None:
            known.linkless.add(landing_zone)
        return None
    for link, real in tree.aliases:
        message = f"landing zone {landing_zone}: {link} is a symbolic link to {real}: read once, as {real}"
        if known is None or message not in known.warned:
            log.warning(message + " (not again through the link)")
            if known is not None:
                known.warned.add(message)
    return tree.roots


def _layout_error(landing_zone: str, partition_column: str, spark_error: str) -> str:
    """The landing zone's layout, said as rewindow expects it, naming the folders Spark's
    partition discovery found out of place (its message lists the folders it compared, one
    a line: those other than the zone and its day folders)."""
    listed = []
    for line in spark_error.splitlines():
        path = line.strip().split(" SQLSTATE", 1)[0]
        if path.startswith(("file:", "/")) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
            listed.append(path)
    zone = qualify(landing_zone)

    def out_of_place(path: str) -> bool:
        rel = qualify(path)[len(zone) :].strip("/") if inside(path, landing_zone) else path
        return bool(rel) and ("/" in rel or not rel.startswith(f"{partition_column}="))

    folders = [display(qualify(f)) for f in listed if out_of_place(f)] or [display(qualify(f)) for f in listed]
    first = spark_error.strip().splitlines()[0].rstrip(":").strip() if spark_error.strip() else ""
    return (
        f"landing zone {landing_zone}: "
        + (f"{', '.join(dict.fromkeys(folders))}: " if folders else "")
        + f"not a layout rewindow reads: it expects day folders {partition_column}=YYYY-MM-DD directly in "
        "the landing zone, each holding that day's files, and no deeper partition folders (hour=...) "
        f"nor other folders; move the files into their day folder (Spark: {first[:200]})"
    )


# --------------------------------------------------------------------------- day folders, unreadable files

#: A day folder's value, as ``landed_days`` and ``read_partition_events`` read and write it.
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
#: Any spelling of a day Spark's cast to a date accepts (``2026-1-2``): a twin of a folder.
_LOOSE_DAY = re.compile(r"(\d{1,4})-(\d{1,2})-(\d{1,2})")


def check_day_folders(spark: SparkSession, landing_zone: str, partition_column: str) -> None:
    """Refuse a landing zone whose ``<partition_column>=`` folders are not each one day, as
    ``<partition_column>=YYYY-MM-DD``: a name such as ``date=20260103`` (Spark's cast of its
    value failed deep in a job, ``CAST_INVALID_INPUT``), and twins such as ``date=2026-01-02``
    and ``date=2026-1-2``, which Spark reads as one day although only the first one's files
    are checked. One listing of the landing zone's top level; other names are left alone."""
    prefix = f"{partition_column}="
    days: dict[date, str] = {}
    bad: list[str] = []
    for entry in Lake(spark).children(landing_zone):
        name = entry.path.rstrip("/").rsplit("/", 1)[-1]
        if not entry.is_dir or not name.startswith(prefix):
            continue
        value = unquote(name[len(prefix) :])  # Hadoop escapes a partition value in a folder name
        loose = _LOOSE_DAY.fullmatch(value)
        try:
            day = date(*(int(g) for g in loose.groups())) if loose else None
        except ValueError:  # 2026-02-30
            day = None
        if day is not None and day in days:
            first, twin = sorted((days[day], entry.path), key=lambda f: (not f.endswith(f"{prefix}{day_key(day)}"), f))
            raise InputError(
                f"{display(first)} and {display(twin)}: two folders of the day {day_key(day)}, which Spark reads as "
                f"one day while only the files of {prefix}{day_key(day)} are checked: move the files of "
                f"{display(twin)} into {display(first)} and delete it"
            )
        if day is not None:
            days[day] = entry.path
        if day is None or not _DAY.fullmatch(value):
            bad.append(entry.path)
    if bad:  # after every twin: a twin is named with its first folder
        raise InputError(
            f"{display(bad[0])}: not a day folder of the landing zone: a day folder is named "
            f"{prefix}YYYY-MM-DD (such as {prefix}2024-01-31), which Spark reads as the {partition_column!r} "
            "column; rename it, or move it out of the landing zone"
        )


def name_unreadable_file(spark: SparkSession, landing_zone: str) -> InputError | None:
    """For a landing zone Spark could not read ("cannot read it: An error occurred while
    calling o55.load"), the error naming the file: every data file's footer is read, as
    ``rewindow replay`` reads its input's (:func:`~windowing.storage.inputs.read_footers`),
    and the first that fails is named, with what to do about a stale checksum file. None
    when every footer reads (or the files cannot be listed): the caller's error stands."""
    lake = Lake(spark)
    try:
        read_footers(lake, [e.path for e in lake.files(landing_zone)], InputError)
    except InputError as named:
        return named
    except Exception:  # noqa: BLE001 - the listing failed too: the caller's error stands
        return None
    return None
