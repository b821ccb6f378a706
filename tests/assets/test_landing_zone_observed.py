"""Issue 46 in Dagster: a file added to a committed day is seen before any rerun.

On the real engine and a real (ephemeral) instance: the replay run observes
``historical_events`` per partition (data version: the day folder's digest); a file
added to a committed day gives the sensor's observation a new data version, the day's
outputs are Unsynced (Dagster's own stale status), the warning checks fail naming the
file for that day and the days after it, the automation sensor's condition requests that
range as one backfill, and its catch-up run makes everything green with the added rows
counted. The sensor's events are reported to the instance as the sensor daemon does
(``instance.report_runless_asset_event``, ``dagster/_daemon/sensor.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.data_version import DATA_VERSION_TAG, StaleStatus
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._utils.test.data_versions import get_stale_status_resolver

from assets.events import EVENTS_KEY
from assets.pipelines import CHECK_NAME, INPUT_CHECK, INPUT_CHECKED, OUTPUTS
from orchestration.sensors import SENSOR_NAME
from tests.support.dagster_harness import DAYS, Replayer, failure_message
from tests.support.outputs import current

PREFIX = "clicks_hourly"
STATE = dg.AssetKey([PREFIX, "window_state"])
AGG = dg.AssetKey([PREFIX, "windowed_aggregates"])
ADDED = "date=2024-01-02/zz-added.parquet"
ADDED_ROWS = 40


@pytest.fixture(scope="module")
def replayed(spark, history, pipelines_dir, tmp_path_factory) -> Replayer:
    """The three days replayed as one run, on a landing zone of the module's own."""
    landing = tmp_path_factory.mktemp("observed") / "landing"
    shutil.copytree(history, landing)
    r = Replayer(landing, pipelines_dir, landing.parent / "out")
    result = r.run(DAYS[0], DAYS[-1])
    assert result.success, failure_message(result)
    return r


def _observations(instance, key: str):
    return [
        rec.event_log_entry.asset_observation
        for rec in instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=EVENTS_KEY, asset_partitions=[key]), limit=10
        ).records
    ]


def _tick(r: Replayer, cursor=None):
    """One tick of the landing-zone sensor; its events reported as the sensor daemon does."""
    sensor = r.defs.resolve_sensor_def(SENSOR_NAME)
    with dg.build_sensor_context(instance=r.instance, cursor=cursor, definitions=r.defs) as context:
        result = sensor(context)
    for event in result.asset_events if isinstance(result, dg.SensorResult) else []:
        r.instance.report_runless_asset_event(event)
    return result


def _stale(r: Replayer, key: dg.AssetKey, partition: str) -> StaleStatus:
    return get_stale_status_resolver(r.instance, list(r.defs.resolve_asset_graph().assets_defs)).get_status(
        key, partition
    )


def _latest_check(r: Replayer, asset_key: dg.AssetKey, name: str, partition: str):
    """The newest evaluation of check ``name`` of ``asset_key`` for ``partition``."""
    records = r.instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(asset_key, name), limit=50
    )
    for record in records:  # newest first
        evaluation = record.evaluation
        if evaluation is not None and evaluation.partition == partition:
            return evaluation
    raise AssertionError(f"no evaluation of {name} on {asset_key.to_user_string()} for {partition}")


def _add_file(r: Replayer) -> None:
    """``ADDED``: ``ADDED_ROWS`` more events of day 2, copies of its first ones under new offsets and ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = Path(r.storage.landing_path())
    table = pq.read_table(sorted((landing / "date=2024-01-02").glob("*.parquet"))[0])
    extra = table.slice(0, ADDED_ROWS).to_pylist()
    for i, row in enumerate(extra):
        row["offset"] = 10**9 + i
        row["event_id"] = f"added-{i}"
    pq.write_table(pa.Table.from_pylist(extra, schema=table.schema), landing / ADDED)


def test_the_replay_run_observes_each_day_with_its_folder_digest(replayed):
    for day in DAYS:
        (obs,) = _observations(replayed.instance, day)
        digest = current(replayed.folder(day))["extra"]["inputs"]["digest"]  # what the commit recorded
        assert obs.tags[DATA_VERSION_TAG] == digest == obs.metadata["digest"].value
        # what materializing it showed, kept on the observation
        assert obs.metadata["rows"].value == obs.metadata["dagster/row_count"].value == 300
        assert obs.metadata["files"].value >= 1 and obs.metadata["bytes"].value > 0
        assert obs.metadata["preview"].value.records and obs.metadata["dagster/column_schema"].value.columns
        # the replay recorded which observation it read (Dagster's provenance)
        (mat,) = replayed.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=AGG, asset_partitions=[day]), limit=1
        ).records
        assert mat.asset_materialization.tags["dagster/input_event_pointer/historical_events"] != "NULL"
        assert _stale(replayed, AGG, day) == StaleStatus.FRESH
    assert not replayed.instance.get_materialized_partitions(EVENTS_KEY)  # observed, never materialized
    # Nothing changed: the sensor reports no observation (the run's are its baseline).
    result = _tick(replayed)
    assert not isinstance(result, dg.SensorResult) or not result.asset_events


def test_a_file_added_to_a_committed_day_shows_before_any_rerun_and_one_run_catches_up(replayed):
    r = replayed
    first = _tick(r)
    cursor = first.cursor if isinstance(first, dg.SensorResult) else None
    before = _observations(r.instance, DAYS[1])[0].tags[DATA_VERSION_TAG]
    _add_file(r)

    # 1. The sensor observes the changed day: a new data version, listings only.
    result = _tick(r, cursor)
    assert isinstance(result, dg.SensorResult), result
    observed = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
    assert [e.partition for e in observed] == [DAYS[1]]
    assert observed[0].tags[DATA_VERSION_TAG] not in (None, before)

    # 2. Dagster shows the day's outputs Unsynced, with no rerun; the other days are not.
    for name in OUTPUTS:
        key = dg.AssetKey([PREFIX, name])
        assert _stale(r, key, DAYS[1]) == StaleStatus.STALE, name
        assert _stale(r, key, DAYS[0]) == StaleStatus.FRESH, name
    assert len(r.instance.get_runs()) == 1  # only the first replay

    # 3. The warning checks fail for that day and the one after it, naming the file and its rows.
    for name in INPUT_CHECKED:
        for day in DAYS[1:]:
            evaluation = _latest_check(r, dg.AssetKey([PREFIX, name]), INPUT_CHECK, day)
            assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
            assert f"1 file added: {ADDED} ({ADDED_ROWS} rows)" in evaluation.description, evaluation.description
            assert evaluation.metadata["rerun_range"].value == "2024-01-02..2024-01-03"
            assert evaluation.metadata["changed_files"].value == {
                DAYS[1]: {"added": [f"{ADDED} ({ADDED_ROWS} rows)"], "removed": [], "rewritten": []}
            }
            assert evaluation.target_materialization_data is not None  # the partition's own materialization
    for day in DAYS[1:]:
        chain = _latest_check(r, STATE, CHECK_NAME, day)
        assert not chain.passed and chain.description.startswith(f"partition {day} is out of date")
        assert ADDED in str(chain.metadata["changed_files"].value)
    assert _latest_check(r, STATE, CHECK_NAME, DAYS[0]).passed  # the day before is untouched

    # 4. The automation sensor's condition asks for the out-of-date range, as one backfill.
    from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests

    evaluated = dg.evaluate_automation_conditions(defs=r.defs, instance=r.instance)
    assert evaluated.get_requested_partitions(STATE) == set(DAYS[1:])
    requests = build_run_requests(
        evaluated._requested_subsets, r.defs.resolve_asset_graph(), run_tags=None, emit_backfills=True
    )
    (backfill,) = requests
    assert backfill.requires_backfill_daemon()
    assert set(backfill.asset_graph_subset.iterate_asset_partitions()) == {
        AssetKeyPartitionKey(STATE, day) for day in DAYS[1:]
    }

    # 5. The catch-up: the backfill's one run (single-run backfill policy) over the range.
    caught_up = r.run(DAYS[1], DAYS[2])
    assert caught_up.success, failure_message(caught_up)
    resolver = get_stale_status_resolver(r.instance, list(r.defs.resolve_asset_graph().assets_defs))
    for name in OUTPUTS:
        for day in DAYS:
            key = dg.AssetKey([PREFIX, name])
            if (name, day) == ("window_state", DAYS[2]):
                # Dagster 1.13 gives every partition of a single-run range the provenance of the
                # run's start, so the self-dependency on 2024-01-02, rematerialized in the same run,
                # looks newer (docs/orchestration.md): that is its only cause; the checks pass.
                (cause,) = resolver.get_stale_causes(key, day)
                assert cause.dependency == AssetKeyPartitionKey(STATE, DAYS[1]), cause
            else:
                assert resolver.get_status(key, day) == StaleStatus.FRESH, (name, day)
    for name in INPUT_CHECKED:
        for day in DAYS[1:]:
            assert _latest_check(r, dg.AssetKey([PREFIX, name]), INPUT_CHECK, day).passed
    for day in DAYS[1:]:
        assert _latest_check(r, STATE, CHECK_NAME, day).passed
    (mat,) = r.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=AGG, asset_partitions=[DAYS[1]]), limit=1
    ).records
    assert mat.asset_materialization.metadata["input_rows"].value == 300 + ADDED_ROWS  # the added rows counted
    assert dg.evaluate_automation_conditions(defs=r.defs, instance=r.instance).total_requested == 0
    again = _tick(r, result.cursor)
    assert not isinstance(again, dg.SensorResult) or not again.asset_events  # nothing changed since
