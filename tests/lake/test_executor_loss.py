"""Processes lost mid kernel stage (issue 26): on the standalone cluster of conftest.py,
``kill -9`` while the kernel stage is under way of

* the executor JVM running a kernel task: the worker launches a new executor, Spark runs
  the lost tasks again (and the shuffle and cached blocks that went with the JVM);
* the Python workers of such an executor (the kernel runs in them): the task fails and
  Spark runs it again, on the same executor;

and the replay commits rows identical to an undisturbed replay's.

The kill is timed with the driver's REST API (its UI on a free port): the kernel's held
output (``KernelTask``, persisted) is listed as soon as its first partition is built,
and an active stage computing it has running tasks: one of their executors is the
victim. Its PID is a child of a worker JVM the fixture started
(:meth:`SparkStandalone.executors`), its Python workers the children of its
``pyspark.daemon``. Spark's event log then proves the kill landed mid-stage: a task of
the kernel stage failed on that executor (``ExecutorLostFailure``, or the Python
worker's crash), and, for the JVM, a new executor ran tasks after it. A kill that failed
no task (the one listed RUNNING ended first: seen under load) proves nothing: its rows
are still compared, and the scenario is run again.
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
from tests.support.outputs import OUTPUTS, snapshot
from tests.support.services import HOST, base_env, free_port, pid_alive, process_table, tail

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
DAY = "2024-02-01"
#: One day of 120,000 events over 4 workers: with 10,000 events a kernel task, a dozen
#: tasks on the cluster's two slots (planned as if for 16, so that the workers are spread),
#: so the stage lasts seconds and has tasks to lose.
EVENTS = 120_000
REPLAY_CONF = {"spark.rewindow.eventsPerTask": "10000", "spark.rewindow.taskSlots": "16"}
REWINDOW = str(Path(sys.executable).parent / "rewindow")
TIMEOUT_S = 300
#: The kernel's output as the driver persists it (windowing/runner/replay.py: _launch_kernel).
KERNEL = "KernelTask"


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    from windowing.sample import generate_history

    base = tmp_path_factory.mktemp("executor-loss-landing")
    generate_history(
        base,
        datetime.fromisoformat(DAY).replace(tzinfo=timezone.utc),
        days=1,
        events_per_day=EVENTS,
        keys=2_000,
        seed=26,
        partitions=4,
        files_per_day=2,
    )
    return base / f"date={DAY}"


def _rest(port: int, path: str):
    with urllib.request.urlopen(f"http://{HOST}:{port}/api/v1{path}", timeout=2) as resp:
        return json.load(resp)


def _victims(victim: str, executor_pid: int) -> list[int]:
    """The processes to kill: the executor JVM, or the Python workers it runs now (the
    children of its ``pyspark.daemon``, which forks one per task)."""
    if victim == "executor":
        return [executor_pid]
    table = process_table()
    daemons = {pid for pid, (parent, args) in table.items() if parent == executor_pid and "pyspark.daemon" in args}
    return sorted(pid for pid, (parent, _) in table.items() if parent in daemons)


def _kill_mid_kernel(proc: subprocess.Popen, cluster, ui_port: int, victim: str) -> dict:
    """Once the kernel stage is under way, SIGKILL the ``victim`` of an executor running
    one of its tasks; return what was killed (app, executor id, pids, stage).

    A Python worker is forked per task and then kept for the next one, so the workers
    killed may all have been idle (the task still reading its shuffle blocks in the JVM):
    nothing fails. The kill is then repeated on the same executor until a task of the
    stage has failed there (at most once a task, well under ``spark.task.maxFailures``)."""
    deadline = time.monotonic() + TIMEOUT_S
    app, killed = None, None
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            app = app or _rest(ui_port, "/applications")[0]["id"]
            if killed is not None:
                stage_tasks = _rest(
                    ui_port,
                    f"/applications/{app}/stages/{killed['stage']}/{killed['attempt']}/taskList?length=10000",
                )
                if any(t["status"] == "FAILED" and t["executorId"] == killed["executor"] for t in stage_tasks):
                    return killed
                if time.monotonic() < killed["retry_at"]:
                    time.sleep(0.1)
                    continue
                if not any(t["status"] == "RUNNING" and t["executorId"] == killed["executor"] for t in stage_tasks):
                    killed = None  # nothing of that stage runs there any more: choose again
                    continue
                pids = _victims(victim, cluster.executors(app).get(killed["executor"], -1))
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed["pids"] = sorted({*killed["pids"], *pids})
                killed["retry_at"] = time.monotonic() + 1.0
                continue
            held = {r["id"] for r in _rest(ui_port, f"/applications/{app}/storage/rdd") if KERNEL in r["name"]}
            for stage in _rest(ui_port, f"/applications/{app}/stages?status=active") if held else []:
                if not held & set(stage["rddIds"]):
                    continue
                tasks = _rest(
                    ui_port, f"/applications/{app}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=10000"
                )
                executors = cluster.executors(app)
                for executor in sorted({t["executorId"] for t in tasks if t["status"] == "RUNNING"}):
                    pids = _victims(victim, executors[executor]) if executor in executors else []
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    if not pids:
                        continue
                    killed = {
                        "app": app,
                        "executor": executor,
                        "pids": pids,
                        "stage": stage["stageId"],
                        "attempt": stage["attemptId"],
                        "executors": sorted(executors),
                        "retry_at": time.monotonic() + 1.0,
                    }
                    if victim == "executor":
                        return killed  # a lost executor fails every task it runs
                    break
                if killed is not None:
                    break
        except (OSError, ValueError, LookupError):
            pass  # the UI is not up yet, the app is between jobs, or a process just ended
        time.sleep(0.1)
    if killed is not None:
        return killed  # the replay ended meanwhile: the event log tells what the kills did
    raise AssertionError(f"the kernel stage was never seen running (replay exited with {proc.poll()}): nothing killed")


def _events(log_dir: Path, app: str) -> list[dict]:
    """The application's Spark event log (uncompressed, one file): complete once
    ``rewindow`` has returned, which stops its session before it exits."""
    return [json.loads(line) for line in (log_dir / app).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def undisturbed(spark, history, tmp_path_factory) -> dict:
    """The same replay, undisturbed: the suite's local session, the same settings."""
    from windowing import cli, command_line
    from windowing.runner.session import session_conf

    out = tmp_path_factory.mktemp("undisturbed") / "out"
    began = time.monotonic()
    with pytest.MonkeyPatch.context() as mp, session_conf(spark, REPLAY_CONF):
        mp.setattr(command_line, "spark_for", lambda args: spark)
        assert cli.main(["replay", "--config", str(CLICKS), "--input", str(history), "--output", str(out)]) == 0
    lake_conftest.TIMINGS["the replay undisturbed, local"] = time.monotonic() - began
    expected = snapshot(spark, out)
    assert expected["aggregates"][1] and expected["late_events"][1] and expected["state"][1]
    return expected


#: A kill may land between two tasks (the one listed RUNNING finished meanwhile) and
#: then fails none: the scenario proves nothing and is run again, on a fresh output.
ATTEMPTS = 3


def _replay_killing(cmd: list[str], cluster, ui_port: int, victim: str, tmp_path: Path) -> tuple[dict, list[dict]]:
    """Run the replay ``cmd`` and kill ``victim`` mid kernel stage; return what was
    killed and the application's event log."""
    with open(tmp_path / "replay.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=base_env(), cwd=ROOT)
        try:
            killed = _kill_mid_kernel(proc, cluster, ui_port, victim)
            proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, tail(tmp_path / "replay.log", 60)
    assert not any(pid_alive(pid) for pid in killed["pids"])
    return killed, _events(tmp_path / "eventlog", killed["app"])


@pytest.mark.parametrize("victim", ["executor", "python-workers"])
def test_a_kill_9_mid_kernel_stage_gives_identical_rows(
    spark, spark_standalone, history, undisturbed, tmp_path, victim
):
    began = time.monotonic()
    for attempt in range(1, ATTEMPTS + 1):
        run = tmp_path / f"attempt-{attempt}"
        ui_port, log_dir = free_port(), run / "eventlog"
        log_dir.mkdir(parents=True)
        conf = spark_standalone.driver_conf(
            {
                **REPLAY_CONF,
                "spark.ui.enabled": "true",
                "spark.ui.port": str(ui_port),
                "spark.port.maxRetries": "0",
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": log_dir.as_uri(),
                "spark.eventLog.compress": "false",
                "spark.eventLog.rolling.enabled": "false",
            }
        )
        cmd = [
            REWINDOW,
            "replay",
            "--config",
            str(CLICKS),
            "--input",
            str(history),
            "--output",
            str(run / "out"),
            "--master",
            spark_standalone.master_url,
        ]
        for k, v in conf.items():
            cmd += ["--conf", f"{k}={v}"]
        killed, events = _replay_killing(cmd, spark_standalone, ui_port, victim, run)

        # Identical rows, datasets and metrics, whatever the kill hit.
        got = snapshot(spark, run / "out")
        for name in (*OUTPUTS, "metrics"):
            assert got[name] == undisturbed[name], name

        failed = [
            e for e in events if e["Event"] == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] != "Success"
        ]
        lost = [e for e in failed if _lost_by(e["Task End Reason"], victim)]
        if lost:
            break
    lake_conftest.TIMINGS[f"standalone replay, {victim} killed mid kernel stage"] = time.monotonic() - began

    # The kill landed mid kernel stage: a task computing the kernel's output failed on
    # that executor, and Spark ran it again.
    kernel_stages = {
        e["Stage Info"]["Stage ID"]
        for e in events
        if e["Event"] == "SparkListenerStageSubmitted"
        and any(KERNEL in rdd["Name"] for rdd in e["Stage Info"]["RDD Info"])
    }
    assert lost and {e["Task Info"]["Executor ID"] for e in lost} == {killed["executor"]}, failed
    assert killed["stage"] in kernel_stages and {e["Stage ID"] for e in lost} & kernel_stages, (killed, lost)
    removed = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorRemoved"]
    added = [e["Executor ID"] for e in events if e["Event"] == "SparkListenerExecutorAdded"]
    if victim == "executor":
        # ... lost with the executor, which Spark removed (the others failed fetching the
        # shuffle blocks it held, and were run again); a new executor then ran tasks.
        assert all(e in lost or e["Task End Reason"]["Reason"] == "FetchFailed" for e in failed), failed
        assert removed == [killed["executor"]]
        relaunched = set(added) - set(killed["executors"])
        assert relaunched, f"no executor replaced {killed['executor']}: {added}"
        assert any(
            e["Event"] == "SparkListenerTaskEnd"
            and e["Task End Reason"]["Reason"] == "Success"
            and e["Task Info"]["Executor ID"] in relaunched
            for e in events
        )
    else:
        # ... with its Python worker; the executor stayed, and nothing else failed.
        assert failed == lost
        assert not removed and sorted(added) == killed["executors"], (removed, added)


def _lost_by(reason: dict, victim: str) -> bool:
    """Whether a task failed the way losing ``victim`` fails it."""
    if victim == "executor":
        return reason["Reason"] == "ExecutorLostFailure"
    return reason["Reason"] == "ExceptionFailure" and "Python worker exited unexpectedly" in json.dumps(reason)
