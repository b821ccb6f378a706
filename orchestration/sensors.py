"""The sensor that watches the landing zone for new arrival days.

``landing_zone_sensor`` (stopped by default: turn it on in the UI, Automation, or with
``dagster sensor start``) lists the landing zone's top-level ``<partition column>=YYYY-MM-DD``
folder names every 5 minutes, the way ``build_definitions()`` does (``pyarrow.fs``, no
Spark), and:

* when a day landed after the end of the partitions it skips, naming the days: Dagster
  fixes time-window partitions when the code location loads, so they are extended by a
  reload (Deployment → Reload, or restart ``dagster dev``), not by the sensor. A sensor
  has no supported way to reload its own code location (that is the webserver's
  ``reloadRepositoryLocation``; the sensor runs in the code server). With a configured
  ``REWINDOW_HISTORY_END`` the days after it are only reported: raise the end to include them.
* when the newest complete landed partition is not materialized it requests a run of
  ``replay_history`` for it (run key: the partition, so it is requested once). When the
  partitions before it are missing too (the history was never replayed, or a whole day
  of hourly partitions landed), the run covers them as one single-run range from the
  oldest missing one, since each partition starts from the state of the one before.

A partition is complete once its window has ended and the landing zone has had the same
grace as the schedule (an hour for daily partitions, 15 minutes for hourly ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta, timezone

import dagster as dg

from assets.resources import StorageResource, resolved
from orchestration.partitions import PartitionSettings, describe, landed_day_folders
from windowing.storage.lake import absolute

SENSOR_NAME = "landing_zone_sensor"
INTERVAL_S = 300
#: How long after a partition's end the landing zone may still receive its files (as the schedule).
GRACE = {"daily": timedelta(hours=1), "hourly": timedelta(minutes=15)}
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def landing_location(storage: StorageResource) -> tuple[str, str | None]:
    """The landing zone (absolute, fields that are ``dg.EnvVar`` resolved) and its partition column."""
    column = resolved(storage.landing_partition_column).strip() or None
    return absolute(resolved(storage.landing_zone)), column


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=timezone.utc)


def build_landing_zone_sensor(
    job: dg.UnresolvedAssetJobDefinition,
    settings: PartitionSettings,
    storage: StorageResource,
    asset_keys: Sequence[dg.AssetKey],
) -> dg.SensorDefinition:
    """The sensor over ``settings``' partitions (as loaded) for ``job``, which materializes ``asset_keys``."""
    partitions_def = settings.partitions_def()
    asset_keys = list(asset_keys)

    @dg.sensor(
        name=SENSOR_NAME,
        job=job,
        minimum_interval_seconds=INTERVAL_S,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Watches the landing zone for new arrival days: replays the newest complete landed partition "
            "when it is not materialized, and says when a reload is needed to add partitions for new days."
        ),
    )
    def landing_zone_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason | dg.SensorResult:
        zone, column = landing_location(storage)
        if column is None:
            return dg.SkipReason(
                f"landing zone {zone} has no partition column (REWINDOW_LANDING_PARTITION_COLUMN is empty): "
                "no day folders to watch"
            )
        try:
            days = landed_day_folders(zone, column)
        except Exception as exc:  # noqa: BLE001 - unknown scheme, credentials, missing folder, ...
            return dg.SkipReason(f"cannot list landing zone {zone}: {describe(exc)}")
        if not days:
            return dg.SkipReason(f"landing zone {zone} holds no {column}=YYYY-MM-DD folder yet")

        notes: list[str] = []
        end = partitions_def.end
        beyond = [d for d in days if end is not None and midnight(d) >= end]
        if beyond:
            listed = _days(beyond)
            if settings.end_from_landing:
                return dg.SkipReason(
                    f"new day(s) landed in {zone} after the partitions' end ({end:%Y-%m-%d}, computed when the "
                    f"code location loaded): {listed}. Time-window partitions are fixed when the code location "
                    "loads: reload it (Deployment → Reload, or restart `dagster dev`) to extend the partitions "
                    f"to {beyond[-1]}; this sensor then replays them."
                )
            notes.append(
                f"day(s) {listed} landed after REWINDOW_HISTORY_END={end:%Y-%m-%d} and are not partitions "
                "(raise REWINDOW_HISTORY_END and reload the code location to include them)"
            )

        target = _newest_complete_partition(
            partitions_def, midnight(days[-1] + timedelta(days=1)), datetime.now(timezone.utc) - GRACE[settings.grain]
        )
        if target is None:
            return dg.SkipReason(_join(f"no complete landed partition yet (newest landed day {days[-1]})", notes))
        missing = _missing_tail(context.instance, partitions_def, asset_keys, target)
        if not missing:
            return dg.SkipReason(_join(f"partition {target}, the newest complete landed one, is materialized", notes))
        if len(missing) == 1:
            run_key = target
            request = dg.RunRequest(run_key=run_key, partition_key=target)
        else:
            run_key = f"{missing[0]}...{target}"
            request = dg.RunRequest(run_key=run_key, tags={RANGE_START_TAG: missing[0], RANGE_END_TAG: target})
        if context.cursor == run_key:
            return dg.SkipReason(_join(f"a run of {run_key} was already requested", notes))
        for note in notes:
            context.log.info(note)
        return dg.SensorResult(run_requests=[request], cursor=run_key)

    return landing_zone_sensor


def _newest_complete_partition(
    partitions_def: dg.TimeWindowPartitionsDefinition, landed_end: datetime, complete_before: datetime
) -> str | None:
    """The newest partition that ends by ``landed_end`` and by ``complete_before`` (None if none)."""
    last = partitions_def.get_last_partition_window()
    if last is None:
        return None
    cutoff = min(landed_end, complete_before, last.end)
    key = partitions_def.get_partition_key_for_timestamp(cutoff.timestamp(), end_closed=True)
    window = partitions_def.time_window_for_partition_key(key)
    if window.end > cutoff:
        prev = partitions_def.get_prev_partition_window(window.start)
        if prev is None:
            return None
        window = prev
        key = partitions_def.get_partition_key_for_timestamp(window.start.timestamp())
    first = partitions_def.get_first_partition_window()
    return key if first is not None and window.start >= first.start else None


def _missing_tail(
    instance: dg.DagsterInstance,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    asset_keys: Sequence[dg.AssetKey],
    target: str,
) -> list[str]:
    """The partitions up to ``target`` that some asset lacks, back to the newest one every asset has."""
    materialized = [instance.get_materialized_partitions(key) for key in asset_keys]
    first = partitions_def.get_first_partition_key()
    assert first is not None  # there is one: target
    keys = partitions_def.get_partition_keys_in_range(dg.PartitionKeyRange(first, target))
    tail: list[str] = []
    for key in reversed(keys):
        if all(key in done for done in materialized):
            break
        tail.append(key)
    return tail[::-1]


def _days(days: Sequence[date]) -> str:
    shown = ", ".join(str(d) for d in days[:5])
    return shown + (f" ... {days[-1]} ({len(days)} days)" if len(days) > 5 else "")


def _join(reason: str, notes: Sequence[str]) -> str:
    return "; ".join([reason, *notes])


RERUN_SENSOR_NAME = "rerun_out_of_date_partitions"


def rerun_out_of_date_sensor(state_keys: Sequence[dg.AssetKey]) -> dg.AutomationConditionSensorDefinition:
    """Declarative automation of the pipelines' ``window_state`` (``assets.automation``):
    reruns the partitions the chain check found out of date, as one backfill (one run over
    the range, oldest first). Stopped by default: turn it on under Automation, or with
    ``dagster sensor start rerun_out_of_date_partitions``. Evaluated in the code server,
    since the condition is rewindow's own Python."""
    return dg.AutomationConditionSensorDefinition(
        RERUN_SENSOR_NAME,
        target=dg.AssetSelection.assets(*state_keys),
        default_status=dg.DefaultSensorStatus.STOPPED,
        use_user_code_server=True,
        emit_backfills=True,
        description=(
            "Reruns the partitions whose state_chain_in_sync evaluation says they are out of date (a rerun "
            "changed the state before them), as one backfill over the range, replayed oldest first."
        ),
    )
