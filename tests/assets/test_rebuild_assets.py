"""The Dagster path of a rebuild (issue 48): a changed pipeline (a new code version, so every
partition shows Unsynced) is replayed into a version beside the current one, which stays
current until the rebuild holds every partition; then one switch."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

from tests.support.dagster_harness import DAYS, PIPELINE_YAML, Replayer, failure_message
from tests.support.outputs import current

AGG = dg.AssetKey(["clicks_hourly", "windowed_aggregates"])
STATE = dg.AssetKey(["clicks_hourly", "window_state"])


def _with_max(folder: Path) -> Path:
    folder.mkdir()
    (folder / "clicks-hourly.yaml").write_text(
        PIPELINE_YAML.replace(
            "      - {type: sum, column: amount}\n",
            "      - {type: sum, column: amount}\n      - {type: max, column: amount}\n",
        )
    )
    return folder


def _stale(r: Replayer, day: str) -> StaleStatus:
    return get_stale_status_resolver(r.instance, list(r.defs.resolve_asset_graph().assets_defs)).get_status(AGG, day)


def test_a_changed_pipeline_is_rebuilt_beside_and_switched_in_when_whole(spark, history, pipelines_dir, tmp_path):
    from windowing.storage import versions

    out = tmp_path / "out"
    first = Replayer(history, pipelines_dir, out)
    result = first.run(DAYS[0], DAYS[-1])
    assert result.success, failure_message(result)
    v1_runs = {d: current(first.folder(d))["run_id"] for d in DAYS}

    before = dg.evaluate_automation_conditions(defs=first.defs, instance=first.instance)
    assert before.total_requested == 0

    # The new code: another code version, so Dagster shows every partition Unsynced, and the
    # automation sensor's condition asks for a rebuild of the partitions materialized before.
    changed = Replayer(history, _with_max(tmp_path / "v2-pipelines"), out)
    changed.instance = first.instance
    assert all(_stale(changed, d) == StaleStatus.STALE for d in DAYS)
    asked = dg.evaluate_automation_conditions(defs=changed.defs, instance=changed.instance, cursor=before.cursor)
    assert asked.get_requested_partitions(STATE) == set(DAYS)

    # One partition of the new code: built in v2; v1 stays current, untouched.
    result = changed.run(DAYS[0])
    assert result.success, failure_message(result)
    assert versions.current_version(spark, str(out), "clicks-hourly") == "v1"
    assert {d: current(first.folder(d))["run_id"] for d in DAYS} == v1_runs
    v2 = Path(versions.version_root(str(out), "clicks-hourly", "v2")) / "clicks-hourly"
    assert (v2 / DAYS[0] / "_commits").is_dir() and not (v2 / DAYS[1]).exists()

    # The rebuild as one backfill: when v2 holds every partition v1 holds, it is switched in.
    result = changed.run(DAYS[0], DAYS[-1])
    assert result.success, failure_message(result)
    assert versions.current_version(spark, str(out), "clicks-hourly") == "v2"
    (switch,) = versions.switches(spark, str(out), "clicks-hourly")
    assert (switch.previous, switch.first, switch.last) == ("v1", DAYS[0], DAYS[-1])
    assert "columns added in aggregates: max_amount" in switch.summary
    mat = changed.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=AGG, asset_partitions=[DAYS[-1]]), limit=1
    ).records[0]
    assert "/_versions/v2/" in mat.asset_materialization.metadata["dagster/uri"].value
    assert mat.asset_materialization.metadata["history_version"].value == "v2"
    assert all(_stale(changed, d) == StaleStatus.FRESH for d in DAYS)
