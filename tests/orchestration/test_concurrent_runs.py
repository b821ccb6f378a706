"""Two Dagster runs of the replay job at once (issue 26): two ``dagster job execute``
processes, each with its own Spark, over the same partition range, output root and
Dagster instance (``DAGSTER_HOME``). Nothing is lost: both runs succeed, each commits and
records every partition, and the current outputs equal those of one run alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg

from tests.support.dagster_harness import DAYS, Replayer, failure_message
from tests.support.outputs import commits, snapshot
from tests.support.services import base_env

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = str(Path(sys.executable).parent / "dagster")
RANGE = {"dagster/asset_partition_range_start": DAYS[0], "dagster/asset_partition_range_end": DAYS[1]}
RUN_CONFIG = {"ops": {"clicks_hourly_replay": {"config": {"flush_at_end": False, "checks": False}}}}
OUTPUT_ASSETS = ("window_state", "windowed_aggregates", "late_events", "rejected_events")
TIMEOUT_S = 600


def test_two_concurrent_dagster_runs_of_one_range_lose_nothing(spark, history, pipelines_dir, tmp_path):
    home, root = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # The instance exists before the runs, as where a webserver or daemon serves it: two
    # processes creating a fresh SQLite instance at once race on its tables ("table runs
    # already exists", in Dagster's storage set-up).
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert not instance.get_runs()
    (tmp_path / "run.yaml").write_text(json.dumps(RUN_CONFIG))  # JSON is YAML
    env = base_env(
        {
            "DAGSTER_HOME": str(home),
            "REWINDOW_LANDING_ZONE": str(history),
            "REWINDOW_PIPELINES_DIR": str(pipelines_dir),
            "REWINDOW_OUTPUT_ROOT": str(root),
            "REWINDOW_PARTITION_GRAIN": "daily",
            "REWINDOW_HISTORY_START": DAYS[0],
            "REWINDOW_HISTORY_END": "2024-01-10",
            "REWINDOW_SPARK_MASTER": "local[1]",
            "REWINDOW_SPARK_CONF": "spark.sql.shuffle.partitions=2,spark.ui.enabled=false,"
            "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        }
    )
    cmd = [
        DAGSTER,
        "job",
        "execute",
        "-m",
        "orchestration.definitions",
        "-a",
        "defs",
        "-j",
        "replay_history",
        "--tags",
        json.dumps(RANGE),
        "-c",
        str(tmp_path / "run.yaml"),
    ]
    logs = [tmp_path / f"run{i}.log" for i in range(2)]
    procs = []
    for log in logs:
        with open(log, "wb") as fh:
            procs.append(subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
    try:
        for proc, log in zip(procs, logs):
            assert proc.wait(timeout=TIMEOUT_S) == 0, log.read_text()[-5000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    # Both runs succeeded in the shared instance, and each recorded every partition of
    # every output: two materializations per (output, partition).
    instance = dg.DagsterInstance.from_config(str(home))
    records = instance.get_run_records()
    runs = [r.dagster_run for r in records]
    assert len(runs) == 2 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), runs
    assert max(r.start_time for r in records) < min(r.end_time for r in records), "the runs did not overlap"
    for name in OUTPUT_ASSETS:
        for day in DAYS[:2]:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(["clicks_hourly", name]), asset_partitions=[day]), limit=10
            ).records
            assert sorted(r.run_id for r in records) == sorted(r.run_id for r in runs), (name, day)

    # Each run committed each partition; the current outputs equal one run alone.
    alone = Replayer(history, pipelines_dir, tmp_path / "alone")
    result = alone.run(DAYS[0], DAYS[1])
    assert result.success, failure_message(result)
    for day in DAYS[:2]:
        folder = root / "clicks-hourly" / day
        assert len(commits(folder)) == 2, day
        assert snapshot(spark, folder) == snapshot(spark, alone.folder(day)), day
