"""The sensor that watches the landing zone for new arrival days, and for days that changed.

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

* when a landed day's files changed since it was last observed (a file added, removed or
  rewritten: the digest of its folder's listing, :func:`windowing.storage.input_record.digest_of`,
  differs from the one in the sensor's cursor, else from the data version of Dagster's
  latest observation of it) it reports an observation of ``historical_events`` for each
  partition of that day, with the new digest as its data version: Dagster then shows
  the day's outputs *Unsynced* at once. For each pipeline with a committed partition on
  that day it also reports ``state_chain_in_sync`` and ``input_unchanged`` for that
  partition and every committed one after it (``assets.pipelines.landing_change_evaluations``):
  failed as warnings naming the files, so the Checks tab and the asset's health show it,
  and ``rerun_out_of_date_partitions`` (when on) reruns them as one backfill. A day with no
  digest to compare with (never observed) is only remembered: the replay run observes it.
  Listings only (``input_record.list_folder`` with no Spark for a local landing zone,
  ``pyarrow.fs`` otherwise); the checks read the commit records with no Spark, so they are
  reported for a local output root only (elsewhere the next replay run reports them).

A partition is complete once its window has ended and the landing zone has had the same
grace as the schedule (an hour for daily partitions, 15 minutes for hourly ones).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime, time, timedelta, timezone
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from assets.events import EVENTS_KEY, observation
from assets.pipelines import asset_prefix, landing_change_evaluations
from assets.resources import StorageResource, resolved
from orchestration.partitions import PartitionSettings, describe, landed_day_folders, landing_filesystem
from windowing.storage import input_record, versions
from windowing.storage.lake import NeedsSpark, absolute

if TYPE_CHECKING:
    from windowing.config import Pipeline

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
    pipelines: Sequence["Pipeline"] = (),
) -> dg.SensorDefinition:
    """The sensor over ``settings``' partitions (as loaded) for ``job``, which materializes
    ``asset_keys``, and reports the chain checks of ``pipelines`` when a day changes."""
    partitions_def = settings.partitions_def()
    asset_keys = list(asset_keys)
    pipelines = list(pipelines)

    @dg.sensor(
        name=SENSOR_NAME,
        job=job,
        minimum_interval_seconds=INTERVAL_S,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=(
            "Watches the landing zone for new arrival days: replays the newest complete landed partition "
            "when it is not materialized, and says when a reload is needed to add partitions for new days. "
            "Observes days whose files changed (a new data version of historical_events: their outputs show "
            "Unsynced) and reports the chain checks of the partitions from there, failed, naming the files."
        ),
    )
    def landing_zone_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason | dg.SensorResult:
        cursor = _Cursor.parse(context.cursor)
        outcome = _new_days(context, cursor)
        try:
            events, digests = _changed_days(context, cursor)
        except Exception as exc:  # noqa: BLE001 - a listing that failed: the new-day logic still answers
            context.log.warning(f"cannot compare the landed days with their last observation: {describe(exc)}")
            events, digests = [], cursor.digests
        if not events and digests == cursor.digests and not isinstance(outcome, dg.SensorResult):
            return outcome  # (a run request's cursor is the run key alone: it must carry the digests too)
        run_key = outcome.cursor if isinstance(outcome, dg.SensorResult) else cursor.run_key
        state = _Cursor(run_key, digests).dumps()
        if isinstance(outcome, dg.SensorResult):
            return dg.SensorResult(run_requests=outcome.run_requests, asset_events=events, cursor=state)
        return dg.SensorResult(skip_reason=outcome, asset_events=events, cursor=state)

    def _changed_days(
        context: dg.SensorEvaluationContext, cursor: "_Cursor"
    ) -> tuple[list[dg.AssetObservation | dg.AssetCheckEvaluation], dict[str, str]]:
        """The observations (and check evaluations) of the landed days whose digest changed
        since they were last observed, and every landed day's digest (the next cursor)."""
        zone, column = landing_location(storage)
        if column is None:
            return [], cursor.digests
        first, last = partitions_def.get_first_partition_window(), partitions_def.get_last_partition_window()
        if first is None or last is None:
            return [], cursor.digests
        digests = dict(cursor.digests)
        events: list[dg.AssetObservation | dg.AssetCheckEvaluation] = []
        changed: list[str] = []  # the partition keys of the changed days
        for day in landed_day_folders(zone, column):
            keys = list(
                partitions_def.get_partition_keys_in_time_window(
                    dg.TimeWindow(max(midnight(day), first.start), min(midnight(day + timedelta(days=1)), last.end))
                )
            )
            if not keys:
                continue
            files = day_files(zone, f"{column}={day.isoformat()}")
            digest = input_record.digest_of(files)
            known = digests.get(str(day))
            if known == digest:
                continue
            digests[str(day)] = digest
            observed = _observed_version(context.instance, keys[0])
            if observed is None or observed == digest:  # nothing to compare with, or observed already
                continue
            context.log.info(f"landing zone day {day} changed since it was observed: {len(files)} file(s) now")
            events += [observation(key, files, {"observed_by": dg.MetadataValue.text(SENSOR_NAME)}) for key in keys]
            changed += keys
        if changed:
            events += _check_evaluations(context, zone, column, changed)
        return events, digests

    def _check_evaluations(
        context: dg.SensorEvaluationContext, zone: str, column: str, changed: Sequence[str]
    ) -> list[dg.AssetCheckEvaluation]:
        """The chain checks of each pipeline from its first committed partition of ``changed``."""
        from windowing.chain import Chain
        from windowing.partitions import Partitions

        first = partitions_def.get_first_partition_window()
        assert first is not None  # there are partitions: ``changed`` holds some
        out: list[dg.AssetCheckEvaluation] = []
        for pipeline in pipelines:
            root = absolute(resolved(storage.output_root))
            try:  # the current version: what readers read (a rebuild's partitions are reported by its runs)
                root = versions.version_root(root, pipeline.name, versions.current_version(None, root, pipeline.name))
            except NeedsSpark:
                pass
            chain = Chain(
                None,
                pipeline,
                zone,
                root,
                Partitions("hour" if settings.grain == "hourly" else "day", first.start),
                partition_column=column,
            )
            try:
                committed = set(chain.committed())
                asked = [k for k in changed if k in committed]
                if asked:
                    out += landing_change_evaluations(context.instance, chain, asset_prefix(pipeline.name), asked)
            except NeedsSpark:
                context.log.info(
                    f"pipeline {pipeline.name}: its output root or landing zone is not on this machine's disk; "
                    "the chain checks are reported by its next replay run"
                )
            except Exception as exc:  # noqa: BLE001 - a damaged record, a listing that failed: observe anyway
                context.log.warning(f"pipeline {pipeline.name}: cannot evaluate the chain checks: {describe(exc)}")
        return out

    def _new_days(context: dg.SensorEvaluationContext, cursor: "_Cursor") -> dg.SkipReason | dg.SensorResult:
        """New arrival days: the replay of the newest complete partition, or why not."""
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
        if cursor.run_key == run_key:
            return dg.SkipReason(_join(f"a run of {run_key} was already requested", notes))
        for note in notes:
            context.log.info(note)
        return dg.SensorResult(run_requests=[request], cursor=run_key)

    return landing_zone_sensor


class _Cursor:
    """The sensor's cursor: the run key it requested last, and each landed day's digest
    (``{"run": ..., "digests": {"2024-01-01": "..."}}``; a cursor of an older release, the
    run key alone, is read as such)."""

    def __init__(self, run_key: str | None, digests: Mapping[str, str]):
        self.run_key = run_key
        self.digests = dict(digests)

    @classmethod
    def parse(cls, text: str | None) -> "_Cursor":
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return cls(text or None, {})
        digests = doc.get("digests")
        return cls(doc.get("run"), {str(k): str(v) for k, v in digests.items()} if isinstance(digests, dict) else {})

    def dumps(self) -> str:
        return json.dumps({"run": self.run_key, "digests": self.digests}, sort_keys=True)


def day_files(zone: str, folder: str) -> list[input_record.InputFile]:
    """The data files of ``folder`` under the landing zone ``zone``, as a listing gives them
    (no footer read): with Python's calls for a local zone (no JVM), else ``pyarrow.fs``
    (names starting with ``_`` or ``.`` skipped, as Spark's readers do)."""
    try:
        return input_record.list_folder(None, zone, folder)
    except NeedsSpark:
        pass
    import pyarrow.fs as pafs

    filesystem, root = landing_filesystem(zone)
    base = f"{root.rstrip('/')}/{folder}"
    out = []
    for info in filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
        rel = info.path[len(base) + 1 :]
        if info.type != pafs.FileType.File or any(part.startswith(("_", ".")) for part in rel.split("/")):
            continue
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0
        out.append(input_record.InputFile(f"{folder}/{rel}", int(info.size or 0), mtime))
    return sorted(out, key=lambda f: f.path)


def _observed_version(instance: dg.DagsterInstance, key: str) -> str | None:
    """The data version of Dagster's latest observation of ``historical_events`` partition ``key``."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=EVENTS_KEY, asset_partitions=[key]), limit=1
    ).records
    if not records:
        return None
    event = records[0].event_log_entry.asset_observation
    return event.tags.get(DATA_VERSION_TAG) if event is not None else None


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
