"""rewindow on Airflow 3: the example DAG (examples/airflow/) run by Airflow's own test runner.

Airflow lives in its own environment, ``.venv-airflow`` (``scripts/airflow-env``; CI makes
it). These tests start it as a subprocess on a fresh metadata database (``airflow db
migrate`` once, a copy of it in a temporary AIRFLOW_HOME per test), run the DAG interval by
interval with ``dag.test()`` (tests/orchestration/airflow_driver.py) and compare what it
committed with ``rewindow backfill`` run here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.cli import rewindow
from tests.support.dagster_harness import DAYS, START, rows
from windowing.chain import COMMITTED, FAILED, Chain
from windowing.partitions import Partitions

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "examples" / "airflow" / "rewindow_clicks_hourly.py"
PIPELINE = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
DRIVER = Path(__file__).with_name("airflow_driver.py")
OUTPUTS = ("aggregates", "late_events", "rejected", "state")


#: Seconds to wait for an Airflow environment still being installed (.ci/run installs it
#: while the suite starts, and sets REWINDOW_AIRFLOW_ENV_STATUS to the file its exit status
#: lands in).
AIRFLOW_ENV_WAIT_S = 900


def _wait_for_airflow_env() -> None:
    status = os.environ.get("REWINDOW_AIRFLOW_ENV_STATUS")
    if not status:
        return
    deadline = time.monotonic() + AIRFLOW_ENV_WAIT_S
    while not Path(status).is_file() or not Path(status).read_text().strip():
        if time.monotonic() > deadline:
            pytest.fail(f"the Airflow environment is still installing after {AIRFLOW_ENV_WAIT_S} s ({status})")
        time.sleep(1)
    code = Path(status).read_text().strip()
    if code != "0":
        pytest.fail(f"scripts/airflow-env failed (exit status {code}): see .venv/airflow-env.log")


@pytest.fixture(scope="module")
def airflow_python() -> Path:
    _wait_for_airflow_env()
    python = Path(os.environ.get("REWINDOW_AIRFLOW_PYTHON", ROOT / ".venv-airflow" / "bin" / "python"))
    if not python.exists():
        message = f"no Airflow environment at {python}: run scripts/airflow-env (CI does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def _env(python: Path, home: Path, landing: Path, output_root: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAG_FILE.parent),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "REWINDOW_LANDING_ZONE": str(landing),
        "REWINDOW_OUTPUT_ROOT": str(output_root),
        "REWINDOW_HISTORY_START": DAYS[0],
        "PYSPARK_PYTHON": str(python),
        "PYTHONPATH": str(ROOT),
        # Small jobs: few shuffle partitions, as the suite's own session (tests/conftest.py),
        # and its quick JIT tier and serial GC.
        "REWINDOW_SPARK_MASTER": "local[2]",
        "REWINDOW_SPARK_CONF": "spark.sql.shuffle.partitions=2,spark.default.parallelism=2,"
        "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    env.pop("REWINDOW_PARTITION_GRAIN", None)
    return env


@pytest.fixture(scope="module")
def migrated_db(airflow_python, tmp_path_factory) -> Path:
    """A fresh Airflow metadata database (``airflow db migrate``, tens of seconds), made once:
    each test starts from a copy of it in an AIRFLOW_HOME of its own."""
    home = tmp_path_factory.mktemp("airflow-migrated")
    env = _env(airflow_python, home, home, home)
    subprocess.run(
        [str(airflow_python.parent / "airflow"), "db", "migrate"], env=env, check=True, capture_output=True, timeout=300
    )
    assert (home / "airflow.db").is_file()
    return home / "airflow.db"


def _airflow(python: Path, db: Path, home: Path, landing: Path, output_root: Path, *intervals: str) -> list[dict]:
    """Run the example DAG over ``intervals`` in Airflow, on a copy of the migrated database
    ``db`` in ``home``; one dict per run (state, task states)."""
    env = _env(python, home, landing, output_root)
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(db, home / "airflow.db")
    proc = subprocess.run(
        [str(python), str(DRIVER), str(DAG_FILE), *intervals],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(runs) == len(intervals), proc.stderr[-3000:]
    return runs


def _chain(spark, landing: Path, root: Path) -> Chain:
    from windowing.config import load_pipeline

    return Chain(spark, load_pipeline(PIPELINE), str(landing), str(root), Partitions("day", START))


def test_the_dag_replays_three_intervals_in_order_equal_to_the_cli_backfill(
    spark, history, airflow_python, migrated_db, tmp_path
):
    runs = _airflow(airflow_python, migrated_db, tmp_path / "airflow", history, tmp_path / "airflow-out", *DAYS)
    assert [(r["interval"], r["state"]) for r in runs] == [(d, "success") for d in DAYS]
    assert all(r["tasks"] == {"replay": "success", "data_quality": "success"} for r in runs)
    rc, _, err = rewindow(
        "backfill",
        "--config",
        PIPELINE,
        "--input",
        history,
        "--output",
        tmp_path / "cli",
        "--from",
        DAYS[0],
        "--to",
        DAYS[-1],
    )
    assert rc == 0, err
    ours, theirs = _chain(spark, history, tmp_path / "cli"), _chain(spark, history, tmp_path / "airflow-out")
    a, b = ours.commits(DAYS), theirs.commits(DAYS)
    assert sorted(b) == DAYS
    for day in DAYS:
        for output in OUTPUTS:
            x = spark.read.parquet(f"{a[day].run_path}/{output}")
            y = spark.read.parquet(f"{b[day].run_path}/{output}")
            assert x.schema == y.schema and rows(x) == rows(y), (day, output)
        assert a[day].extra["lineage"]["state_hash"] == b[day].extra["lineage"]["state_hash"]
        assert b[day].extra["lineage"]["run_id"].startswith("airflow-")
    assert len(rows(spark.read.parquet(f"{b[DAYS[-1]].run_path}/aggregates"))) > 100  # not vacuous


def test_a_failing_data_quality_task_stops_the_next_interval(spark, history, airflow_python, migrated_db, tmp_path):
    """Day 2 holds an event stamped 30 days before its arrival: its blocking input check fails,
    the partition is not committed, the data-quality task fails the run, and Airflow does not
    start the next interval (its replay waits for the previous data-quality task)."""
    from tests.assets.test_replay_assets import _landing_with_odd_row

    landing = _landing_with_odd_row(history, tmp_path, DAYS[1], event_time=lambda t: t - timedelta(days=30))
    out = tmp_path / "out"
    runs = _airflow(
        airflow_python, migrated_db, tmp_path / "airflow", landing, out, DAYS[0], DAYS[1], f"{DAYS[2]}:blocked"
    )
    assert runs[0]["state"] == "success"
    assert runs[1]["state"] == "failed"
    assert runs[1]["tasks"] == {"replay": "success", "data_quality": "failed"}
    assert runs[2]["tasks"] == {"replay": None, "data_quality": None}  # never started
    status = {s.key: s for s in _chain(spark, landing, out).status(DAYS)}
    assert status[DAYS[0]].status == COMMITTED
    assert status[DAYS[1]].status == FAILED and "input_event_time_skew" in status[DAYS[1]].detail
    assert not (out / "clicks-hourly" / DAYS[2]).exists()
