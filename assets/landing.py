"""The landing zone: historical events as Parquet, one folder per arrival day.

Layout: ``<landing zone>/date=YYYY-MM-DD/*.parquet`` (what ``windowing.sample`` writes
and what most ingestion jobs produce). A partition of the event history is an arrival
time window ``[start, end)`` inside one UTC day (a day, or an hour of it).

Nothing is dropped on the way to the engine: the day folder is authoritative for the
day, so with hourly partitions a row is placed in the hour of its arrival time
*clamped into its folder's day*; a row whose arrival time is null or unreadable goes
with the day's first hour, where the engine rejects it with a reason.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

DAY = timedelta(days=1)


class LandingZoneError(RuntimeError):
    """The landing zone is missing or holds no event folders."""


def day_folder(landing_zone: str | Path, day: datetime) -> Path:
    return Path(landing_zone) / f"date={day:%Y-%m-%d}"


def day_of(start: datetime, end: datetime) -> datetime:
    """The UTC day ``[start, end)`` lies in; refuses windows that straddle days."""
    day = start.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    if end > day + DAY:
        raise ValueError(f"partition window [{start}, {end}) spans more than one arrival day")
    return day


def list_day_folders(landing_zone: str | Path) -> list[Path]:
    root = Path(landing_zone)
    return sorted(p for p in root.glob("date=*") if p.is_dir()) if root.is_dir() else []


def read_partition_events(spark, landing_zone: str | Path, start: datetime, end: datetime, arrival_column: str):
    """The events of the arrival window ``[start, end)`` as a Spark DataFrame.

    Returns ``(events, source folder or None)``. A day with no folder is a day without
    events: an empty frame with the landing zone's schema, so the replay still runs and
    carries the state forward. Raises :class:`LandingZoneError` when the landing zone
    holds no day folder at all (no schema to go by).
    """
    from pyspark.sql import functions as F

    from windowing.io import read_events

    day = day_of(start, end)
    folder = day_folder(landing_zone, day)
    if not folder.is_dir():
        others = list_day_folders(landing_zone)
        if not others:
            raise LandingZoneError(
                f"landing zone {Path(landing_zone).resolve()} holds no date=YYYY-MM-DD folders of Parquet "
                "events; generate sample history with `python -m orchestration.demo` or point "
                "REWINDOW_LANDING_ZONE at your events"
            )
        return read_events(spark, [str(others[0])]).limit(0), None
    events = read_events(spark, [str(folder)])
    if start == day and end == day + DAY:
        return events, folder
    # Hourly (or finer) partitions: the row's arrival time clamped into its folder's day.
    arrival = _as_timestamp(events, arrival_column)
    first, last = F.lit(day), F.lit(day + DAY - timedelta(microseconds=1))
    placed = F.coalesce(F.least(F.greatest(arrival, first), last), first)
    return events.where((placed >= F.lit(start)) & (placed < F.lit(end))), folder


def _as_timestamp(df, column: str):
    """The column as a timestamp, null when unreadable (types as in docs/semantics.md §1)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if column not in df.columns:
        return F.lit(None).cast("timestamp")
    dtype = df.schema[column].dataType
    c = F.col(f"`{column}`")
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return c.cast("timestamp")
    if isinstance(dtype, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return F.timestamp_millis(c.cast("long"))
    if isinstance(dtype, T.StringType):
        return F.try_to_timestamp(c)
    return F.lit(None).cast("timestamp")
