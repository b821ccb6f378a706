"""The freshness check of the landing zone: has the newest partition landed on time?

``newest_partition_on_time`` on ``historical_events`` lists the landing zone's day folders
(``pyarrow.fs``, no Spark, as ``build_definitions()`` and the sensor do) and warns when the
newest day that is due has not landed. A day is due once it is over and the landing zone
has had the schedule's grace (``orchestration.sensors.GRACE``: an hour for daily
partitions, 15 minutes for hourly ones): at 00:59 UTC the day before yesterday, from
01:00 UTC yesterday.

Dagster's own freshness checks (``build_time_partition_freshness_checks``) cannot say
this here: the partitions end where the landing zone ends (``REWINDOW_HISTORY_END``
unset), so a day that never landed is not a partition, and the newest partition Dagster
knows of is always materialized. The check runs with every replay run, and on its own
(Checks tab → Execute, no partition needed).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import dagster as dg

from assets.events import EVENTS_KEY
from assets.resources import StorageResource
from orchestration.partitions import describe, landed_day_folders
from orchestration.sensors import GRACE, landing_location, midnight

FRESHNESS_CHECK = "newest_partition_on_time"
#: How long a partition lasts, by grain.
LENGTH = {"daily": timedelta(days=1), "hourly": timedelta(hours=1)}


def due_day(now: datetime, grain: str) -> date:
    """The newest arrival day that must have landed by ``now``: the day of the newest
    partition whose end plus the grace is at or before ``now``."""
    return (now - GRACE[grain] - LENGTH[grain]).date()


def _deadline(day: date, grain: str) -> datetime:
    """When ``day`` (its first partition) must have landed: its first partition's end plus the grace."""
    return midnight(day) + LENGTH[grain] + GRACE[grain]


def build_freshness_check(grain: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=EVENTS_KEY,
        name=FRESHNESS_CHECK,
        description=(
            "Warns when the newest arrival day that is due has not landed: a day is due once it is over and "
            f"the landing zone has had {GRACE[grain]} of grace (the schedule's). Lists the landing zone's day "
            "folders, reads nothing."
        ),
    )
    def newest_partition_on_time(storage: StorageResource) -> dg.AssetCheckResult:
        now = datetime.now(timezone.utc)
        due = due_day(now, grain)
        zone, column = landing_location(storage)
        if column is None:
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"landing zone {zone} has no partition column: no day folders to check",
            )
        try:
            days = landed_day_folders(zone, column)
        except Exception as exc:  # noqa: BLE001 - unknown scheme, credentials, missing folder, ...
            return dg.AssetCheckResult(
                passed=False,
                severity=dg.AssetCheckSeverity.WARN,
                description=f"cannot list landing zone {zone}: {describe(exc)}",
            )
        newest = days[-1] if days else None
        deadline = _deadline(due, grain)
        passed = newest is not None and newest >= due
        meta: dict[str, dg.MetadataValue[Any]] = {
            "newest_landed_day": dg.MetadataValue.text(str(newest) if newest else "none"),
            "due_day": dg.MetadataValue.text(str(due)),
            "deadline": dg.MetadataValue.timestamp(deadline),
            "landed_days": dg.MetadataValue.int(len(days)),
        }
        if passed:
            description = f"the newest day due, {due}, has landed (newest landed day {newest})"
        else:
            missing = newest + timedelta(days=1) if newest else due  # the first day that did not land
            overdue = now - _deadline(missing, grain)
            meta["overdue_hours"] = dg.MetadataValue.float(round(max(overdue.total_seconds(), 0) / 3600, 2))
            description = (
                f"late: day {due} was due by {deadline:%Y-%m-%d %H:%M} UTC, the newest landed day is "
                f"{newest or 'none'} ({zone})"
            )
        return dg.AssetCheckResult(
            passed=passed, severity=dg.AssetCheckSeverity.WARN, description=description, metadata=meta
        )

    return newest_partition_on_time
