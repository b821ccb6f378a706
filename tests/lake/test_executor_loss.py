"""An executor lost mid kernel stage (issue 26): on the standalone cluster of conftest.py,
``kill -9`` of the executor JVM running a kernel task while the kernel stage is under
way. The worker launches a new executor, Spark runs the lost tasks again (and the
shuffle and cached blocks that went with the JVM), and the replay commits rows identical
to an undisturbed replay's.

The kill is timed with the driver's REST API (its UI on a free port): the kernel's held
output (``KernelTask``, persisted) is listed as soon as its first partition is built,
and an active stage computing it has running tasks: one of their executors is killed.
The executor's PID is a child of a worker JVM the fixture started
(:meth:`SparkStandalone.executors`). Spark's event log then proves the kill landed
mid-stage: a task of the kernel stage ended with ``ExecutorLostFailure`` on that
executor, and a new executor ran tasks after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.lake import conftest as lake_conftest
from tests.lake.services import HOST, base_env, free_port, pid_alive, tail
from tests.outputs import OUTPUTS, snapshot

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
DAY = "2024-02-01"
#: One day of 200,000 events over 4 workers: with 20,000 events a kernel task, a dozen
#: tasks on the cluster's two slots, so the stage lasts seconds and has tasks to lose.
EVENTS = 120_000
REPLAY_CONF = {"spark.rewindow.eventsPerTask": "10000"}
REWINDOW = str(Path(sys.executable).parent / "rewindow")
TIMEOUT_S = 300
#: The kernel's output as the driver persists it (windowing/engine.py: _launch_kernel).
KERNEL = "KernelTask"


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    from windowing.sample import generate_history

    base = tmp_path_factory.mktemp("executor-loss-landing")
    generate_history(base, datetime.fromisoformat(DAY).replace(tzinfo=timezone.utc), days=1,
                     events_per_day=EVENTS, keys=2_000, seed=26, partitions=4, files_per_day=2)
    return base / f"date={DAY}"


def _rest(port: int, path: str):
    with urllib.request.urlopen(f"http://{HOST}:{port}/api/v1{path}", timeout=2) as resp:
        return json.load(resp)


def _kill_mid_kernel(proc: subprocess.Popen, cluster, ui_port: int) -> dict:
    """Once the kernel stage is under way, SIGKILL the executor JVM running one of its
    tasks; return what was killed (app, executor id, pid, stage)."""
    deadline = time.monotonic() + TIMEOUT_S
    app = None
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            app = app or _rest(ui_port, "/applications")[0]["id"]
            held = {r["id"] for r in _rest(ui_port, f"/applications/{app}/storage/rdd") if KERNEL in r["name"]}
            for stage in _rest(ui_port, f"/applications/{app}/stages?status=active") if held else []:
                if not held & set(stage["rddIds"]):
                    continue
                tasks = _rest(ui_port, f"/applications/{app}/stages/{stage['stageId']}/{stage['attemptId']}"
                                       "/taskList?length=10000")
                executors = cluster.executors(app)
                for executor in sorted({t["executorId"] for t in tasks if t["status"] == "RUNNING"}):
                    if executor in executors:
                        os.kill(executors[executor], signal.SIGKILL)
                        return {"app": app, "executor": executor, "pid": executors[executor],
                                "stage": stage["stageId"], "executors": sorted(executors)}
        except (OSError, ValueError, LookupError):
            pass  # the UI is not up yet, or the app is between jobs
        time.sleep(0.1)
    raise AssertionError(f"the kernel stage was never seen running (replay exited with {proc.poll()}): nothing killed")


def _events(log_dir: Path, app: str) -> list[dict]:
    """The application's Spark event log (uncompressed, one file)."""
    return [json.loads(line) for line in (log_dir / app).read_text().splitlines() if line.strip()]


def test_an_executor_killed_mid_kernel_stage_gives_identical_rows(spark, spark_standalone, history, tmp_path,
                                                                  monkeypatch):
    from windowing import cli
    from windowing.engine import _session_conf

    # The undisturbed replay: the suite's local session, the same settings.
    monkeypatch.setattr(cli, "_spark", lambda args: spark)
    began = time.monotonic()
    with _session_conf(spark, REPLAY_CONF):
        assert cli.main(["replay", "--config", str(CLICKS), "--input", str(history),
                         "--output", str(tmp_path / "undisturbed")]) == 0
    lake_conftest.TIMINGS["the same replay undisturbed, local"] = time.monotonic() - began

    # The same replay on the cluster, an executor killed mid kernel stage.
    ui_port, log_dir = free_port(), tmp_path / "eventlog"
    log_dir.mkdir()
    conf = spark_standalone.driver_conf({
        **REPLAY_CONF,
        "spark.ui.enabled": "true", "spark.ui.port": str(ui_port), "spark.port.maxRetries": "0",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir.as_uri(),
        "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
    })
    cmd = [REWINDOW, "replay", "--config", str(CLICKS), "--input", str(history), "--output", str(tmp_path / "killed"),
           "--master", spark_standalone.master_url]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    began = time.monotonic()
    with open(tmp_path / "replay.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=base_env(), cwd=ROOT)
        try:
            killed = _kill_mid_kernel(proc, spark_standalone, ui_port)
            proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lake_conftest.TIMINGS["standalone replay, an executor killed mid kernel stage"] = time.monotonic() - began
    assert proc.returncode == 0, tail(tmp_path / "replay.log", 60)
    assert not pid_alive(killed["pid"])

    # Identical rows, datasets and metrics.
    began = time.monotonic()
    expected, got = snapshot(spark, tmp_path / "undisturbed"), snapshot(spark, tmp_path / "killed")
    for name in (*OUTPUTS, "metrics"):
        assert got[name] == expected[name], name
    assert expected["aggregates"][1] and expected["late_events"][1] and expected["state"][1]
    lake_conftest.TIMINGS["reading both back"] = time.monotonic() - began

    # The kill landed mid kernel stage: a task computing the kernel's output was lost with
    # the executor, which Spark removed; a new executor then ran tasks of the replay.
    events = _events(log_dir, killed["app"])
    kernel_stages = {e["Stage Info"]["Stage ID"] for e in events if e["Event"] == "SparkListenerStageSubmitted"
                     and any(KERNEL in rdd["Name"] for rdd in e["Stage Info"]["RDD Info"])}
    lost = [e for e in events if e["Event"] == "SparkListenerTaskEnd"
            and e["Task End Reason"]["Reason"] == "ExecutorLostFailure"]
    assert {e["Task Info"]["Executor ID"] for e in lost} == {killed["executor"]}, lost
    assert killed["stage"] in kernel_stages and {e["Stage ID"] for e in lost} & kernel_stages, (killed, lost)
    removed = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorRemoved"]
    assert removed == [killed["executor"]]
    added = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"]
    relaunched = set(added) - set(killed["executors"])
    assert relaunched, f"no executor replaced {killed['executor']}: {added}"
    assert any(e["Event"] == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] == "Success"
               and e["Task Info"]["Executor ID"] in relaunched for e in events)
