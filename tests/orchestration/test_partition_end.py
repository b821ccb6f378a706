"""Partitions end where the landed data ends; the landing-zone sensor replays new days or asks for a reload.

The end is computed from the landing zone's folder names (pyarrow.fs, no Spark), and the
sensor is evaluated against an ephemeral instance, materializations reported to it; the
last test runs the sensor's request on the real engine.
"""

from __future__ import annotations

import json
import warnings
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import dagster as dg
import pytest

from assets.events import EVENTS_KEY
from assets.resources import StorageResource
from orchestration.definitions import build_definitions
from orchestration.partitions import PartitionSettings, landed_day_folders
from orchestration.schedules import REPLAY_JOB
from orchestration.sensors import SENSOR_NAME

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]


def land(root: Path, *days: str, column: str = "date") -> Path:
    """``<root>/<column>=<day>/part-0.parquet`` per day (only the folder names matter here)."""
    for day in days:
        (root / f"{column}={day}").mkdir(parents=True, exist_ok=True)
        (root / f"{column}={day}" / "part-0.parquet").write_bytes(b"")
    return root


def defs_for(landing, pipelines_dir, grain="daily", start="2024-01-01", end=None, column="date"):
    storage = StorageResource(
        landing_zone=str(landing), pipelines_dir=str(pipelines_dir), landing_partition_column=column
    )
    return build_definitions(storage=storage, partitions=PartitionSettings(grain=grain, start=start, end=end))


def only_these_folders(monkeypatch, landing, pipelines_dir) -> None:
    """The environment ``defs()`` reads: these folders, no configured grain, start or end."""
    monkeypatch.setenv("REWINDOW_LANDING_ZONE", str(landing))
    monkeypatch.setenv("REWINDOW_PIPELINES_DIR", str(pipelines_dir))
    for var in (
        "REWINDOW_PARTITION_GRAIN",
        "REWINDOW_HISTORY_START",
        "REWINDOW_HISTORY_END",
        "REWINDOW_LANDING_PARTITION_COLUMN",
    ):
        monkeypatch.delenv(var, raising=False)


def partition_keys(defs) -> list[str]:
    return defs.resolve_job_def(REPLAY_JOB).partitions_def.get_partition_keys()


def built_quietly(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        defs = defs_for(*args, **kwargs)
    # The end comes from the landing zone (or the configuration): no fallback warning.
    assert not [str(w.message) for w in caught if "landing zone" in str(w.message)]
    return defs


def test_three_landed_days_make_three_daily_partitions(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    (landing / "_SUCCESS").write_bytes(b"")  # files and other folders at the top are not days
    (landing / "date=not-a-day").mkdir()
    (landing / "other=2024-02-01").mkdir()
    defs = built_quietly(landing, pipelines_dir)
    assert partition_keys(defs) == DAYS
    # Every asset of the graph shares them.
    state = defs.resolve_assets_def(dg.AssetKey(["clicks_hourly", "window_state"]))
    assert state.partitions_def.get_last_partition_key() == "2024-01-03"


def test_hourly_partitions_cover_every_hour_of_the_newest_landed_day(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    keys = partition_keys(built_quietly(landing, pipelines_dir, grain="hourly"))
    assert len(keys) == 72
    assert (keys[0], keys[-1]) == ("2024-01-01-00:00", "2024-01-03-23:00")


def test_a_gap_in_the_landed_days_is_still_a_partition(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", "2024-01-01", "2024-01-04")
    assert partition_keys(built_quietly(landing, pipelines_dir)) == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
        "2024-01-04",
    ]


def test_the_partition_column_names_the_folders(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS, column="dt")
    assert partition_keys(built_quietly(landing, pipelines_dir, column="dt")) == DAYS


def test_a_file_uri_landing_zone(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    assert partition_keys(built_quietly(landing.as_uri(), pipelines_dir)) == DAYS


def test_a_configured_end_wins(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    keys = partition_keys(built_quietly(landing, pipelines_dir, end="2024-01-06"))
    assert keys == DAYS + ["2024-01-04", "2024-01-05"]
    assert partition_keys(built_quietly(landing, pipelines_dir, end="2024-01-02")) == ["2024-01-01"]


def test_the_end_comes_from_the_environment_when_the_definitions_load(tmp_path, pipelines_dir, monkeypatch):
    from orchestration.definitions import defs

    landing = land(tmp_path / "landing", *DAYS)
    only_these_folders(monkeypatch, landing, pipelines_dir)
    assert partition_keys(defs()) == DAYS
    land(landing, "2024-01-04")  # lands later: the next load (a reload) sees it
    assert partition_keys(defs())[-1] == "2024-01-04"
    monkeypatch.setenv("REWINDOW_HISTORY_END", "2024-01-03")
    assert partition_keys(defs()) == DAYS[:2]
    # `rolling`: the old end, up to the last complete day, whatever has landed (for
    # deployments that land data daily and never reload the code location).
    monkeypatch.setenv("REWINDOW_HISTORY_END", "rolling")
    keys = partition_keys(defs())
    assert keys[0] == DAYS[0] and len(keys) > 300


def test_without_a_configured_start_the_partitions_start_at_the_oldest_landed_day(tmp_path, pipelines_dir, monkeypatch):
    from orchestration.definitions import defs

    days = ["2026-03-02", "2026-03-03", "2026-03-04"]
    landing = land(tmp_path / "landing", *days)
    only_these_folders(monkeypatch, landing, pipelines_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert partition_keys(defs()) == days  # 3 of 3, not every day since 2024-01-01
    assert not [str(w.message) for w in caught if "landing zone" in str(w.message)]
    # With a configured end, the start still comes from the landing zone ...
    monkeypatch.setenv("REWINDOW_HISTORY_END", "2026-03-04")
    assert partition_keys(defs()) == days[:2]
    # ... and a configured start always wins.
    monkeypatch.delenv("REWINDOW_HISTORY_END")
    monkeypatch.setenv("REWINDOW_HISTORY_START", "2026-03-01")
    assert partition_keys(defs()) == ["2026-03-01", *days]


def test_an_unlistable_landing_zone_starts_at_the_default_start_with_a_warning(tmp_path, pipelines_dir):
    settings = PartitionSettings(end="2024-01-03", start_from_landing=True)
    with pytest.warns(UserWarning, match="partitions start at 2024-01-01 .set REWINDOW_HISTORY_START"):
        found = settings.with_landed_end(str(tmp_path / "missing"), "date")
    assert (found.start, found.end) == ("2024-01-01", "2024-01-03")


def test_days_landed_before_the_start_end_one_day_after_the_start(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", "2023-12-30", "2023-12-31")
    assert partition_keys(built_quietly(landing, pipelines_dir)) == ["2024-01-01"]


def fallback_keys(defs) -> tuple[str, str | None]:
    partitions_def = defs.resolve_job_def(REPLAY_JOB).partitions_def
    assert partitions_def.end is None  # up to the last complete partition, as before
    return partitions_def.get_first_partition_key(), partitions_def.get_last_partition_key()


@pytest.mark.parametrize(
    "case, why",
    [
        ("missing", "cannot list it (FileNotFoundError"),
        ("empty", "it holds no date=YYYY-MM-DD folder"),
        ("no column", "it has no partition column"),
        ("unknown scheme", "cannot list it (ArrowInvalid"),
    ],
)
def test_without_landed_days_partitions_fall_back_to_the_last_complete_one_with_a_warning(
    tmp_path, pipelines_dir, case, why
):
    landing, column = tmp_path / "landing", "date"
    if case == "empty":
        landing.mkdir()
    elif case == "no column":
        land(landing, *DAYS)
        column = ""
    elif case == "unknown scheme":
        landing = "nosuchfs://bucket/landing"
    with pytest.warns(UserWarning) as caught:
        defs = defs_for(landing, pipelines_dir, column=column)
    (message,) = [str(w.message) for w in caught if "landing zone" in str(w.message)]
    assert message.startswith(f"landing zone {landing}: {why}"), message
    assert "up to the last complete one" in message
    first, last = fallback_keys(defs)
    assert first == "2024-01-01" and last > "2025-01-01"


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Dagster 1.13: TimeWindowPartitionsDefinition.get_paginated_partition_keys(ascending=False) starts "
        "at the current time and ignores end_date, so the Plots -> Partitions tab (the newest 120 keys) of a "
        "history that ended more than 120 partitions ago finds none of its partitions (docs/orchestration.md)"
    ),
)
def test_the_plots_tab_keys_of_a_history_that_ended_long_ago():
    assert plots_tab_keys(DAYS) == list(reversed(DAYS))


def test_the_plots_tab_keys_of_a_history_that_ends_yesterday():
    """The demo's days (up to yesterday) are the ones the tab plots."""
    today = datetime.now(timezone.utc).date()
    days = [(today - timedelta(days=n)).isoformat() for n in (3, 2, 1)]
    assert plots_tab_keys(days) == list(reversed(days))


def plots_tab_keys(days: list[str]) -> list[str]:
    """The keys the Plots -> Partitions tab asks for (``partitionKeyConnection(limit: 120, ascending: false)``)."""
    from dagster._core.definitions.partitions.context import PartitionLoadingContext
    from dagster._core.definitions.temporal_context import TemporalContext
    from dagster._time import get_current_datetime

    end = (date.fromisoformat(days[-1]) + timedelta(days=1)).isoformat()
    partitions_def = PartitionSettings(start=days[0], end=end).partitions_def()
    context = PartitionLoadingContext(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        dynamic_partitions_store=None,
    )
    return partitions_def.get_paginated_partition_keys(context, limit=120, ascending=False).results


def test_landed_days_are_listed_without_spark(tmp_path):
    from pyspark import SparkContext

    before = SparkContext._active_spark_context  # the suite's shared session may run already
    land(tmp_path, "2024-03-02", "2024-03-01")
    for location in (str(tmp_path), f"file:{tmp_path}", tmp_path.as_uri()):
        assert [str(d) for d in landed_day_folders(location, "date")] == ["2024-03-01", "2024-03-02"]
    assert SparkContext._active_spark_context is before


# --- the sensor -------------------------------------------------------------------------------


def evaluate(defs, instance, cursor=None):
    """The sensor's result, and the cursor of the next tick."""
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs) as context:
        result = sensor(context)
    cursor = result.cursor if isinstance(result, dg.SensorResult) else cursor
    if isinstance(result, dg.SensorResult) and result.skip_reason and not result.run_requests:
        result = result.skip_reason  # a skip that also saved the days' digests in the cursor
    return result, cursor


def report(instance, defs, *partitions):
    """Every asset of the job materialized for ``partitions`` (as a run would)."""
    for key in defs.resolve_all_asset_keys():
        for partition in partitions:
            instance.report_runless_asset_event(dg.AssetMaterialization(key, partition=partition))


def test_sensor_is_registered_stopped_every_five_minutes(tmp_path, pipelines_dir):
    defs = built_quietly(land(tmp_path / "landing", *DAYS), pipelines_dir)
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert sensor.minimum_interval_seconds == 300
    assert sensor.job_name == REPLAY_JOB


def test_sensor_requests_the_unmaterialized_newest_landed_partition_once(tmp_path, pipelines_dir):
    defs = built_quietly(land(tmp_path / "landing", *DAYS), pipelines_dir)
    with dg.DagsterInstance.ephemeral() as instance:
        report(instance, defs, "2024-01-01", "2024-01-02")
        result, cursor = evaluate(defs, instance)
        assert isinstance(result, dg.SensorResult), result
        (request,) = result.run_requests
        assert (request.partition_key, request.run_key) == ("2024-01-03", "2024-01-03")
        # The next tick does not request it again ...
        again, _ = evaluate(defs, instance, cursor=cursor)
        assert isinstance(again, dg.SkipReason) and "already requested" in again.skip_message
        # ... and once it is materialized there is nothing to do.
        report(instance, defs, "2024-01-03")
        done, _ = evaluate(defs, instance, cursor=cursor)
        assert isinstance(done, dg.SkipReason) and "2024-01-03" in done.skip_message
        assert "materialized" in done.skip_message


def test_sensor_replays_missing_earlier_partitions_in_one_range_run(tmp_path, pipelines_dir):
    defs = built_quietly(land(tmp_path / "landing", *DAYS), pipelines_dir)
    with dg.DagsterInstance.ephemeral() as instance:
        result, _ = evaluate(defs, instance)
        (request,) = result.run_requests
        assert request.partition_key is None and request.run_key == "2024-01-01...2024-01-03"
        assert request.partition_key_range == dg.PartitionKeyRange("2024-01-01", "2024-01-03")


def test_a_second_run_request_keeps_the_days_digests_in_the_cursor(tmp_path, pipelines_dir):
    """Review finding: a tick that requested a run while no day's files changed returned the
    run key alone as its cursor, so the next tick saw every landed day as never observed."""
    defs = built_quietly(land(tmp_path / "landing", *DAYS), pipelines_dir)
    with dg.DagsterInstance.ephemeral() as instance:
        first, cursor = evaluate(defs, instance)
        digests = json.loads(cursor)["digests"]
        assert sorted(digests) == DAYS, cursor
        report(instance, defs, "2024-01-01", "2024-01-02")  # the range run stopped before its last day
        again, cursor = evaluate(defs, instance, cursor=cursor)
        (request,) = again.run_requests
        assert request.run_key == "2024-01-03"
        assert json.loads(cursor) == {"run": "2024-01-03", "digests": digests}


def test_sensor_says_a_day_landed_after_the_end_needs_a_reload(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    defs = built_quietly(landing, pipelines_dir)
    land(landing, "2024-01-04", "2024-01-05")  # lands after the definitions loaded
    with dg.DagsterInstance.ephemeral() as instance:
        report(instance, defs, *DAYS)
        result, _ = evaluate(defs, instance)
    assert isinstance(result, dg.SkipReason), result
    assert "2024-01-04, 2024-01-05" in result.skip_message
    assert "reload" in result.skip_message and "Deployment → Reload" in result.skip_message


def test_sensor_with_a_configured_end_reports_later_days_and_still_replays(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    defs = built_quietly(landing, pipelines_dir, end="2024-01-03")
    with dg.DagsterInstance.ephemeral() as instance:
        report(instance, defs, "2024-01-01")
        result, cursor = evaluate(defs, instance)
        (request,) = result.run_requests
        assert request.partition_key == "2024-01-02"
        report(instance, defs, "2024-01-02")
        result, _ = evaluate(defs, instance, cursor=cursor)
    assert isinstance(result, dg.SkipReason)
    assert "2024-01-03 landed after REWINDOW_HISTORY_END=2024-01-03" in result.skip_message


def test_sensor_hourly_requests_the_landed_day_from_its_first_missing_hour(tmp_path, pipelines_dir):
    defs = built_quietly(land(tmp_path / "landing", *DAYS), pipelines_dir, grain="hourly")
    keys = partition_keys(defs)
    with dg.DagsterInstance.ephemeral() as instance:
        report(instance, defs, *keys[:48])
        result, _ = evaluate(defs, instance)
    (request,) = result.run_requests
    assert request.partition_key_range == dg.PartitionKeyRange("2024-01-03-00:00", "2024-01-03-23:00")


def test_sensor_skips_when_the_landing_zone_cannot_be_listed(tmp_path, pipelines_dir):
    landing = land(tmp_path / "landing", *DAYS)
    defs = built_quietly(landing, pipelines_dir)
    for day in DAYS:
        (landing / f"date={day}" / "part-0.parquet").unlink()
        (landing / f"date={day}").rmdir()
    landing.rmdir()
    with dg.DagsterInstance.ephemeral() as instance:
        result, _ = evaluate(defs, instance)
    assert isinstance(result, dg.SkipReason) and f"cannot list landing zone {landing}" in result.skip_message


def test_the_sensors_range_request_runs_and_replays_every_landed_day(spark, history, pipelines_dir, tmp_path):
    """End to end on the real engine: the request the sensor makes for a history never
    replayed is run as the daemon would (its tags, its job) and materializes every landed
    day; the next tick has nothing to do."""
    storage = StorageResource(
        landing_zone=str(history), pipelines_dir=str(pipelines_dir), output_root=str(tmp_path / "out")
    )
    defs = build_definitions(storage=storage, partitions=PartitionSettings().with_landed_end(str(history), "date"))
    assert partition_keys(defs) == DAYS
    with dg.DagsterInstance.ephemeral() as instance:
        result, cursor = evaluate(defs, instance)
        (request,) = result.run_requests
        run = defs.resolve_job_def(REPLAY_JOB).execute_in_process(
            instance=instance,
            partition_key=request.partition_key,
            tags=request.tags,
            run_config={"ops": {"clicks_hourly_replay": {"config": {"checks": True}}}},
            raise_on_error=False,
        )
        assert run.success
        for key in defs.resolve_job_def(REPLAY_JOB).asset_layer.selected_asset_keys:  # analyses: their own job
            if key == EVENTS_KEY:  # observed, not materialized: one observation per landed day
                observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=10).records
                assert sorted(r.partition_key for r in observed) == DAYS
            else:
                assert instance.get_materialized_partitions(key) == set(DAYS), key
        after, _ = evaluate(defs, instance, cursor=cursor)
        assert isinstance(after, dg.SkipReason), after


def test_sensor_observes_a_changed_day_as_every_hour_of_it_with_one_data_version(tmp_path, pipelines_dir):
    """Issue 46, listings only: a day the sensor has a digest for is observed again when a
    file lands in it, each of its hourly partitions with the day folder's new digest as its
    data version; a day never observed is only remembered; an unchanged day is left alone."""
    from assets.events import observation
    from orchestration.sensors import day_files
    from windowing.storage.input_record import digest_of

    landing = land(tmp_path / "landing", *DAYS)
    storage = StorageResource(
        landing_zone=str(landing), pipelines_dir=str(pipelines_dir), output_root=str(tmp_path / "out")
    )
    defs = build_definitions(storage=storage, partitions=PartitionSettings(grain="hourly", start="2024-01-01"))
    hours = {day: [k for k in partition_keys(defs) if k.startswith(day)] for day in DAYS}
    assert len(hours[DAYS[1]]) == 24
    with dg.DagsterInstance.ephemeral() as instance:
        report(instance, defs, *partition_keys(defs))  # replayed: the sensor requests nothing
        for key in hours[DAYS[1]]:  # day 2 observed as a replay run observes it (day 1 and 3: never)
            instance.report_runless_asset_event(observation(key, day_files(str(landing), f"date={DAYS[1]}")))
        result, cursor = evaluate(defs, instance)
        assert isinstance(result, dg.SkipReason), result  # nothing changed; the days' digests are remembered
        assert cursor is not None and DAYS[0] in cursor and DAYS[2] in cursor

        (landing / f"date={DAYS[1]}" / "late.parquet").write_bytes(b"late file")
        with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs) as context:
            result = defs.resolve_sensor_def(SENSOR_NAME)(context)
        assert isinstance(result, dg.SensorResult), result
        new = digest_of(day_files(str(landing), f"date={DAYS[1]}"))
        observed = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
        assert [e.partition for e in observed] == hours[DAYS[1]]
        assert {e.tags["dagster/data_version"] for e in observed} == {new}
        assert {e.metadata["files"].value for e in observed} == {2}
        assert not [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]  # nothing committed
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
        again, _ = evaluate(defs, instance, cursor=result.cursor)
        assert isinstance(again, dg.SkipReason), again  # observed once
