"""How the event history is cut into partitions: by arrival time, daily or hourly, in UTC.

* ``REWINDOW_PARTITION_GRAIN``: ``daily`` (the default) or ``hourly``.
* ``REWINDOW_HISTORY_START``: the first partition (``YYYY-MM-DD``); the replay starts there,
  from no state. Default: computed, the oldest landed day (``2024-01-01`` when the landing
  zone cannot be listed).
* ``REWINDOW_HISTORY_END``: an optional end, exclusive (``YYYY-MM-DD``), which always wins
  over the landing zone; or ``rolling``: up to the last complete partition, growing with the
  clock (for deployments where data lands every day and the code location is not
  reloaded). Default: computed, the day after the newest landed day.

These decide the shape of the asset graph, so they are read when the definitions are
built (``build_definitions()``), never at import time.

**The start.** Without ``REWINDOW_HISTORY_START``, the partitions start at the oldest
landed day, so a landing zone holding three days shows three partitions. Set it in
production: the first partition replays from no state, so a start that moved (old day
folders deleted by a retention policy) would make a rerun of the new first partition
forget the state carried into it.

**The end.** Without ``REWINDOW_HISTORY_END``, ``build_definitions()`` lists the landing
zone's top-level ``<partition column>=YYYY-MM-DD`` folder names (with ``pyarrow.fs``, no
Spark) and ends the partitions the day after the newest landed day, so that day is the
last daily partition (with hourly partitions, its 23:00 hour is the last one), and never
before the start's day + 1. When the landing zone cannot be listed (unknown scheme, no
credentials, missing folder, no partition column) or holds no day folder, it warns and
falls back to partitions up to the last complete one. Dagster fixes time-window
partitions when the code location loads: a day that lands later becomes a partition
after a reload (``orchestration.sensors.landing_zone_sensor`` says when).
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    import pyarrow.fs as pafs

GRAINS = ("daily", "hourly")
DEFAULT_GRAIN = "daily"
DEFAULT_HISTORY_START = "2024-01-01"
#: URI schemes pyarrow names differently from Hadoop.
PYARROW_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


@dataclass(frozen=True)
class PartitionSettings:
    """The grain, start and (exclusive) end of the partitions.

    ``end=None`` means "where the landing zone ends": :meth:`with_landed_end` (called
    by ``build_definitions()``) computes it. ``end_from_landing`` tells a computed end
    from a configured one (a reload extends the former, not the latter).
    ``start_from_landing=True`` (``REWINDOW_HISTORY_START`` unset) lets it move ``start``
    to the oldest landed day too.
    """

    grain: str = DEFAULT_GRAIN
    start: str = DEFAULT_HISTORY_START
    end: str | None = None
    end_from_landing: bool = field(default=False, compare=False)
    #: ``REWINDOW_HISTORY_END=rolling``: no end, partitions grow with the clock.
    rolling: bool = field(default=False, compare=False)
    #: ``start`` is only the fallback: :meth:`with_landed_end` starts at the oldest landed day.
    start_from_landing: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.grain not in GRAINS:
            raise ValueError(f"REWINDOW_PARTITION_GRAIN: {self.grain!r} is not one of {', '.join(GRAINS)}")
        for name, value in (("REWINDOW_HISTORY_START", self.start), ("REWINDOW_HISTORY_END", self.end)):
            if value is not None:
                try:
                    date.fromisoformat(value)
                except ValueError:
                    raise ValueError(f"{name}: {value!r} is not a date (YYYY-MM-DD)") from None

    @classmethod
    def from_env(cls) -> "PartitionSettings":
        end = (os.environ.get("REWINDOW_HISTORY_END") or "").strip()
        start = (os.environ.get("REWINDOW_HISTORY_START") or "").strip()
        return cls(
            grain=os.environ.get("REWINDOW_PARTITION_GRAIN", DEFAULT_GRAIN).strip().lower(),
            start=start or DEFAULT_HISTORY_START,
            end=None if end.lower() == "rolling" else (end or None),
            rolling=end.lower() == "rolling",
            start_from_landing=not start,
        )

    def with_landed_end(self, landing_zone: str, partition_column: str | None) -> "PartitionSettings":
        """These settings, ending the day after the newest landed day when no end is set, and
        starting at the oldest landed day when no start is set (``start_from_landing``).

        A configured end or start is kept. When the landing zone cannot be listed or holds
        no day, warns (naming the landing zone and why) and keeps ``end=None`` (partitions
        up to the last complete one) and the fallback start.
        """
        wants_end = self.end is None and not self.rolling
        if not wants_end and not self.start_from_landing:
            return self
        if partition_column is None:
            why = "it has no partition column (REWINDOW_LANDING_PARTITION_COLUMN is empty), so no day folders"
            days = []
        else:
            try:
                days = landed_day_folders(landing_zone, partition_column)
                why = f"it holds no {partition_column}=YYYY-MM-DD folder"
            except Exception as exc:  # noqa: BLE001 - unknown scheme, credentials, missing folder, ...
                why = f"cannot list it ({describe(exc)})"
                days = []
        if not days:
            if wants_end:
                warnings.warn(
                    f"landing zone {landing_zone}: {why}; partitions run up to the last complete one "
                    "(set REWINDOW_HISTORY_END to choose the end)",
                    stacklevel=2,
                )
            if self.start_from_landing:
                warnings.warn(
                    f"landing zone {landing_zone}: {why}; partitions start at {self.start} "
                    "(set REWINDOW_HISTORY_START to choose the start)",
                    stacklevel=2,
                )
            return self
        start = days[0].isoformat() if self.start_from_landing else self.start
        if not wants_end:
            return replace(self, start=start)
        end = max(days[-1], date.fromisoformat(start)) + timedelta(days=1)
        return replace(self, start=start, end=end.isoformat(), end_from_landing=True)

    def partitions_def(self) -> dg.TimeWindowPartitionsDefinition:
        """Daily partitions keyed ``YYYY-MM-DD`` or hourly ones keyed ``YYYY-MM-DD-HH:MM``, UTC."""
        if self.grain == "hourly":
            return dg.HourlyPartitionsDefinition(
                start_date=f"{self.start}-00:00",
                end_date=f"{self.end}-00:00" if self.end else None,
                timezone="UTC",
            )
        return dg.DailyPartitionsDefinition(start_date=self.start, end_date=self.end, timezone="UTC")


def landed_day_folders(landing_zone: str, partition_column: str) -> list[date]:
    """The days of the landing zone's top-level ``<partition column>=YYYY-MM-DD`` folders, sorted.

    Lists folder names only, with ``pyarrow.fs`` (no Spark, nothing read); raises when the
    landing zone cannot be listed. Folders whose value is not a date are ignored.
    """
    import pyarrow.fs as pafs

    filesystem, root = landing_filesystem(landing_zone)
    prefix = f"{partition_column}="
    days = set()
    for info in filesystem.get_file_info(pafs.FileSelector(root, recursive=False)):
        name = info.base_name
        if info.type == pafs.FileType.Directory and name.startswith(prefix):
            try:
                days.add(date.fromisoformat(name[len(prefix) :]))
            except ValueError:
                continue
    return sorted(days)


def describe(exc: BaseException) -> str:
    """An exception's type and first line, for a warning or a skip reason."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def landing_filesystem(landing_zone: str) -> tuple[pafs.FileSystem, str]:
    """``(pyarrow filesystem, path)`` of a local path or a URI (``file:``, ``s3a://``, ``gs://``,
    ``abfss://``, ``hdfs://``...). Cloud credentials are pyarrow's (the environment, the
    default profile), not Spark's Hadoop settings."""
    import pyarrow.fs as pafs

    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", landing_zone)
    if match is None:
        if landing_zone.startswith("file:"):
            return pafs.LocalFileSystem(), "/" + landing_zone[len("file:") :].lstrip("/")
        return pafs.LocalFileSystem(), os.path.abspath(landing_zone)
    scheme, rest = match.group(1).lower(), match.group(2)
    filesystem, path = pafs.FileSystem.from_uri(f"{PYARROW_SCHEMES.get(scheme, scheme)}://{rest}")
    return filesystem, path
