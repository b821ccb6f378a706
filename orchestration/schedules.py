"""The job that replays the history, and the schedule that keeps it up to date."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from dagster._core.definitions.partitions.partitioned_schedule import (
        UnresolvedPartitionedAssetScheduleDefinition,
    )

REPLAY_JOB = "replay_history"


#: Tag of the analysis assets (each pipeline's lateness): not part of the replay job.
ANALYSIS_TAG = ("rewindow/role", "analysis")
LATENESS_JOB = "lateness_report"


def replay_job() -> dg.UnresolvedAssetJobDefinition:
    """The events' observation and each pipeline's replay, partitioned alike (not the
    analyses): a run observes ``historical_events`` first (its data versions), then replays,
    so each replayed partition records the digest of the files it read."""
    with warnings.catch_warnings():  # Dagster marks `include_sources` beta; rewindow relies on it knowingly
        warnings.filterwarnings("ignore", message="Parameter `include_sources`", category=dg.BetaWarning)
        everything = dg.AssetSelection.all(include_sources=True)
    return dg.define_asset_job(
        REPLAY_JOB,
        selection=everything - dg.AssetSelection.tag(*ANALYSIS_TAG),
        description="Observe the landing zone's events and replay every pipeline over them.",
    )


def lateness_job() -> dg.UnresolvedAssetJobDefinition:
    """Each pipeline's lateness analysis (assets.lateness), partitioned like its replay."""
    return dg.define_asset_job(
        LATENESS_JOB,
        selection=dg.AssetSelection.tag(*ANALYSIS_TAG),
        description="What lateness cost each pipeline, and which delay and watermark strategy to run with.",
    )


def newest_partition_schedule(
    job: dg.UnresolvedAssetJobDefinition, grain: str
) -> UnresolvedPartitionedAssetScheduleDefinition | dg.ScheduleDefinition:
    """Runs once per partition, just after it is complete, on the newest complete partition.

    Daily partitions run at 01:00 UTC (the landing zone gets an hour to receive the
    day's last files); hourly ones at a quarter past the hour. Stopped by default:
    turn it on in the UI (Automation) or with ``dagster schedule start``.
    """
    daily = grain == "daily"
    return dg.build_schedule_from_partitioned_job(
        job,
        name=f"{REPLAY_JOB}_schedule",
        description="Replay the newest complete partition of the event history.",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        hour_of_day=1 if daily else None,
        minute_of_hour=None if daily else 15,
    )
