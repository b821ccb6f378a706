"""The definitions load from workspace.yaml, follow the environment, and refuse bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import StorageResource
from orchestration.definitions import build_definitions, load_pipelines
from orchestration.partitions import PartitionSettings
from orchestration.schedules import LATENESS_JOB, REPLAY_JOB
from tests.support.dagster_harness import PIPELINE_YAML

REPO = Path(__file__).resolve().parents[2]
ASSETS = {"window_state", "windowed_aggregates", "late_events", "rejected_events", "lateness"}


def test_workspace_validates_with_the_dagster_cli(pipelines_dir):
    dagster = Path(sys.executable).parent / "dagster"
    env = {**os.environ, "REWINDOW_PIPELINES_DIR": str(pipelines_dir), "REWINDOW_PARTITION_GRAIN": "hourly"}
    done = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation successful" in done.stdout + done.stderr


def test_definitions_module_builds_from_the_environment(monkeypatch, pipelines_dir, tmp_path):
    from orchestration.definitions import defs

    monkeypatch.setenv("REWINDOW_PIPELINES_DIR", str(pipelines_dir))
    monkeypatch.setenv("REWINDOW_OUTPUT_ROOT", str(tmp_path))
    # Its own landing zone (not the quick start's data/landing): two landed days.
    landing = tmp_path / "landing"
    for day in ("2025-05-01", "2025-05-02"):
        (landing / f"date={day}").mkdir(parents=True)
    monkeypatch.setenv("REWINDOW_LANDING_ZONE", str(landing))
    for var in (
        "REWINDOW_PARTITION_GRAIN",
        "REWINDOW_HISTORY_START",
        "REWINDOW_HISTORY_END",
        "REWINDOW_LANDING_PARTITION_COLUMN",
    ):
        monkeypatch.delenv(var, raising=False)
    d = defs()
    keys = d.resolve_all_asset_keys()
    assert dg.AssetKey(["historical_events"]) in keys
    assert {k.path[1] for k in keys if k.path[0] == "clicks_hourly"} == ASSETS
    job = d.resolve_job_def(REPLAY_JOB)
    assert job.partitions_def.get_partition_keys() == ["2025-05-01", "2025-05-02"]
    # The lateness analysis has its own job, partitioned alike; the replay job leaves it out.
    lateness = dg.AssetKey(["clicks_hourly", "lateness"])
    assert lateness not in job.asset_layer.selected_asset_keys
    assert d.resolve_job_def(LATENESS_JOB).asset_layer.selected_asset_keys == {lateness}
    (schedule,) = d.schedules
    assert d.resolve_schedule_def(schedule.name).cron_schedule == "0 1 * * *"  # daily, 01:00 UTC
    # Storage comes through dg.EnvVar, resolved by Dagster when a run starts.
    storage = d.resources["storage"]
    assert isinstance(storage.output_root, dg.EnvVar) and storage.output_root.get_value() == str(tmp_path)
    assert d.resolve_implicit_global_asset_job_def().executor_def.name == "in_process"


def test_hourly_grain_and_groups(pipelines_dir):
    # An end of its own: the definitions do not look at the checkout's landing zone (data/landing).
    d = build_definitions(
        storage=StorageResource(pipelines_dir=str(pipelines_dir)),
        partitions=PartitionSettings(grain="hourly", start="2024-01-01", end="2024-01-03"),
    )
    spec = d.resolve_assets_def(dg.AssetKey(["clicks_hourly", "window_state"]))
    assert spec.partitions_def.get_first_partition_key() == "2024-01-01-00:00"
    assert spec.group_names_by_key[dg.AssetKey(["clicks_hourly", "window_state"])] == "clicks_hourly"
    assert d.resolve_schedule_def("replay_history_schedule").cron_schedule == "15 * * * *"
    # The state depends on its own previous partition.
    deps = d.resolve_asset_graph().get(dg.AssetKey(["clicks_hourly", "window_state"])).parent_keys
    assert dg.AssetKey(["clicks_hourly", "window_state"]) in deps


def test_a_bad_pipeline_file_stops_the_load_with_its_name(tmp_path):
    (tmp_path / "good.yaml").write_text(PIPELINE_YAML)
    (tmp_path / "bad.yaml").write_text(PIPELINE_YAML.replace("windowSpan: 1h", "windowSpan: soon"))
    with pytest.raises(ValueError, match=r"bad\.yaml.*windowSpan"):
        load_pipelines(tmp_path)


def test_two_pipelines_with_one_asset_prefix_are_refused(tmp_path):
    (tmp_path / "a.yaml").write_text(PIPELINE_YAML)
    (tmp_path / "b.yaml").write_text(PIPELINE_YAML.replace("name: clicks-hourly", "name: clicks_hourly"))
    with pytest.raises(ValueError, match="clashes"):
        load_pipelines(tmp_path)


def test_catalog_fields_automation_and_freshness_are_defined(pipelines_dir, tmp_path):
    """Owners, code version and code references on every pipeline asset; the automation
    condition on window_state with its sensor stopped by default; the landing zone's
    freshness check; resource descriptions without Sphinx roles (the UI shows them raw)."""
    from assets.automation import LABEL
    from orchestration.freshness import FRESHNESS_CHECK
    from orchestration.sensors import RERUN_SENSOR_NAME

    defs = build_definitions(
        storage=StorageResource(
            landing_zone=str(tmp_path), pipelines_dir=str(pipelines_dir), output_root=str(tmp_path / "out")
        ),
        partitions=PartitionSettings(grain="daily", start="2024-01-01", end="2024-01-10"),
    )
    graph = defs.resolve_asset_graph()
    for name in ("window_state", "windowed_aggregates", "late_events", "rejected_events"):
        node = graph.get(dg.AssetKey(["clicks_hourly", name]))
        assert node.owners == ["team:rewindow"] and node.code_version and len(node.code_version) >= 8, name
        refs = node.metadata["dagster/code_references"].code_references
        assert [Path(r.file_path).name for r in refs] == ["clicks-hourly.yaml", "pipelines.py"], name
        assert (node.automation_condition is not None) is (name == "window_state"), name
    assert graph.get(dg.AssetKey(["clicks_hourly", "window_state"])).automation_condition.get_label() == LABEL
    sensor = defs.resolve_sensor_def(RERUN_SENSOR_NAME)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    assert dg.AssetCheckKey(dg.AssetKey(["historical_events"]), FRESHNESS_CHECK) in graph.asset_check_keys
    for key, resource in defs.resources.items():
        description = resource.get_resource_definition().description or ""
        assert not any(role in description for role in (":func:", ":class:", ":meth:")), (key, description)


@pytest.mark.parametrize(
    "now, grain, due",
    [
        ("2026-11-27T00:30:00", "daily", "2026-11-25"),  # before 01:00 UTC: the day before yesterday
        ("2026-11-27T01:00:00", "daily", "2026-11-26"),  # from 01:00 UTC (an hour's grace): yesterday
        ("2026-11-27T00:14:00", "hourly", "2026-11-26"),  # 23:00-00:00 is due at 00:15
        ("2026-11-27T01:15:00", "hourly", "2026-11-27"),  # 00:00-01:00 is due at 01:15
    ],
)
def test_the_freshness_check_knows_which_day_is_due(now, grain, due):
    from datetime import date, datetime, timezone

    from orchestration.freshness import due_day

    assert due_day(datetime.fromisoformat(now).replace(tzinfo=timezone.utc), grain) == date.fromisoformat(due)
