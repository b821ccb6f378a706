"""Errors a user gets before any work starts (issue 10, "Errors"): one line that says what
is wrong and what to do, a non-zero exit, nothing written.

* input columns late_events would overwrite (``watermark``, ``batch``, ...) are refused;
* ``--conf`` without ``=`` is a usage error (argparse, exit 2);
* a ``spark://`` master (or Connect server) nobody listens on fails in seconds;
* Spark's console progress bars are off on every master; the CLI prints its own phases;
* Spark's Python workers on an interpreter without rewindow's packages (or of another
  Python version, or none at all) are named, with what to set.

Runs in-process where the suite's session serves; the few subprocesses are the cases that
need a process of their own (a master that is not there, another workers' interpreter).
"""

from __future__ import annotations

import glob
import io
import json
import os
import socket
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.services import QUICK_JVM_OPTS
from windowing.cli import main
from windowing.command_line import key_value as _key_value
from windowing.config import ConfigError, load_pipeline
from windowing.runner.session import SparkUnreachableError, check_reachable, session_settings

ROOT = Path(__file__).resolve().parents[1]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
REWINDOW = Path(sys.executable).parent / "rewindow"
T0 = datetime(2024, 5, 6, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")


def _events(extra: str | None = None) -> pa.Table:
    """Four clicks of one user (the clicks-hourly columns), the last one late; ``extra``
    adds a column of that name."""
    us = lambda s: int(T0.timestamp() + s) * 1_000_000  # noqa: E731
    cols = {
        "arrival_time": pa.array([us(0), us(1), us(7300), us(7301)], TS),
        "event_time": pa.array([us(0), us(1), us(7300), us(5)], TS),
        "offset": pa.array([0, 1, 2, 3], pa.int64()),
        "partition": pa.array([0, 0, 0, 0], pa.int32()),
        "user_id": pa.array(["u"] * 4),
        "amount": pa.array([1.0, 2.0, 3.0, 4.0]),
        "event_id": pa.array(["a", "b", "c", "d"]),
    }
    if extra:
        cols[extra] = pa.array([10, 11, 12, 13], pa.int64())
    return pa.table(cols)


def _run(*argv) -> tuple[int, str, str]:
    """``rewindow`` in-process (the suite's session is reused): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def _rewindow(*argv, timeout: float = 300) -> tuple[int, str, str, float]:
    """The installed ``rewindow`` script in its own process: (exit code, stdout, stderr, seconds)."""
    began = time.monotonic()
    proc = subprocess.run([str(REWINDOW), *map(str, argv)], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - began


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("rewindow: error:")]


def _free_port() -> int:
    """A port nobody listens on (the OS picks it, then it is closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python of the driver's version without numpy, pyarrow or rewindow (a fresh venv)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import numpy"], capture_output=True, text=True)
    assert probe.returncode != 0, "the fresh venv should not see numpy"
    return python


# --------------------------------------------------------------------------- 1. late_events


@pytest.mark.parametrize(
    "name",
    [
        "watermark",
        "window_start",
        "window_end",
        "lateness_ms",
        "batch",  # not the batch column (clicks-hourly batches by interval): a number of the user's own
        "Watermark",  # differs in case only: the Parquet write of late_events would fail on it, after the work
    ],
)
def test_an_input_column_late_events_adds_is_refused_before_any_job(spark, name):
    from windowing.runner.replay import replay

    pipeline = load_pipeline(CLICKS)
    events = spark.createDataFrame(_events(name))  # the Arrow table's schema
    group = f"late-clash-{name}"
    spark.sparkContext.setJobGroup(group, "must run no job")
    try:
        with pytest.raises(ConfigError) as err:
            replay(spark, pipeline, events)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    msg = str(err.value)
    assert f"input column {name!r}: late_events adds a column {name.lower()!r}" in msg
    assert "rename the input column" in msg
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []


def test_the_cli_names_the_clashing_column_and_writes_nothing(spark, tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    pq.write_table(_events("watermark"), events / "part-0.parquet")
    out = tmp_path / "out" / "run"
    rc, stdout, stderr = _run("replay", "--config", CLICKS, "--input", events, "--output", out)
    assert rc == 2 and stdout == ""
    assert _error_lines(stderr) == [
        "rewindow: error: input column 'watermark': late_events adds a column 'watermark' (it adds batch, "
        "window_start, window_end, watermark, lateness_ms; names compare ignoring case) and would overwrite it; "
        "rename the input column before replaying"
    ]
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- 2. --conf


def test_conf_values_may_hold_equals_signs():
    assert _key_value(" spark.driver.extraJavaOptions =-Da=b") == ("spark.driver.extraJavaOptions", "-Da=b")
    assert _key_value("spark.x=") == ("spark.x", "")


# --------------------------------------------------------------------------- 3. unreachable


def test_check_reachable_names_every_host_it_tried():
    dead1, dead2 = _free_port(), _free_port()
    began = time.monotonic()
    with pytest.raises(SparkUnreachableError) as err:
        check_reachable(f"spark://127.0.0.1:{dead1},127.0.0.1:{dead2}")
    assert time.monotonic() - began < 3
    msg = str(err.value)
    assert msg.startswith(f"Spark master spark://127.0.0.1:{dead1},127.0.0.1:{dead2} is unreachable (")
    assert f"127.0.0.1:{dead1}: Connection refused" in msg and f"127.0.0.1:{dead2}: Connection refused" in msg
    assert msg.endswith("is it running? check --master")
    with pytest.raises(SparkUnreachableError, match=r"Spark Connect server .* check --remote$"):
        check_reachable(f"sc://127.0.0.1:{dead1}/;token=abc")


def test_check_reachable_passes_a_listening_host_and_masters_it_cannot_probe():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        live = server.getsockname()[1]
        check_reachable(f"spark://127.0.0.1:{_free_port()},127.0.0.1:{live}")  # high availability: one is up
        check_reachable(f"sc://127.0.0.1:{live}/;use_ssl=false")
    for master in ("local[*]", "local-cluster[2,1,1024]", "yarn", "k8s://https://127.0.0.1:1"):
        check_reachable(master)  # no connection attempted: Spark itself reports these


def test_an_unreachable_master_fails_in_seconds_in_one_line(tmp_path):
    master = f"spark://127.0.0.1:{_free_port()}"
    events = tmp_path / "events"
    events.mkdir()
    pq.write_table(_events(), events / "part-0.parquet")
    out = tmp_path / "out"
    rc, stdout, stderr, seconds = _rewindow(
        "replay", "--config", CLICKS, "--input", events, "--output", out, "--master", master, timeout=120
    )
    assert rc == 2 and stdout == ""
    assert seconds < 30  # Python start-up and imports; Spark alone used to retry for ~65 s
    (line,) = _error_lines(stderr)
    assert line.startswith(f"rewindow: error: Spark master {master} is unreachable (127.0.0.1:")
    assert "Traceback" not in stderr and "Py4J" not in stderr
    assert "log4j" not in stderr  # no JVM was started
    assert not out.exists()


# --------------------------------------------------------------------------- 4. progress


@pytest.mark.parametrize("master", ["spark://head:7077", "yarn", "k8s://https://api:6443", "local[2]"])
def test_spark_console_progress_bars_are_off_on_every_master(master):
    assert session_settings(master)["spark.ui.showConsoleProgress"] == "false"
    # ... unless asked for.
    assert session_settings(master, {"spark.ui.showConsoleProgress": "true"})["spark.ui.showConsoleProgress"] == "true"


# --------------------------------------------------------------------------- 5. workers


def test_the_worker_check_runs_one_job_once_per_session(spark, monkeypatch):
    from windowing.runner import session as wspark

    monkeypatch.setattr(wspark, "_WORKERS_OK", set())
    sc = spark.sparkContext
    sc.setJobGroup("worker-check", "the worker check")
    try:
        began = time.monotonic()
        wspark.check_workers(spark)
        first = time.monotonic() - began
        wspark.check_workers(spark)
        # Another session object of the same application (a Dagster run's, a notebook's):
        # the same workers, not probed again.
        other = spark.newSession()
        other.sparkContext.setJobGroup("worker-check", "the worker check")
        wspark.check_workers(other)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert len(sc.statusTracker().getJobIdsForGroup("worker-check")) == 1
    assert first < 30, first  # one one-row job (a second or so once the workers are up)


def _other_minor_python() -> str | None:
    """An installed Python one minor version away from this one (PySpark runs on it), if any."""
    minor = sys.version_info[1]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for m in (minor + 1, minor - 1):
        for c in [f"python3.{m}", *sorted(glob.glob(os.path.join(root, "versions", f"3.{m}.*", "bin", "python3")))]:
            try:
                v = subprocess.run(
                    [c, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True, timeout=30
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            if v.returncode == 0 and v.stdout.strip() == str(m):
                return c
    return None


_WORKERS = """
import json, sys
from pyspark.sql import SparkSession
from windowing import load_pipeline, replay
from windowing.cli import main

# The command line, its workers pointed at a bare venv with --conf spark.pyspark.python.
rc = main(["replay", "--config", {config!r}, "--input", {events!r}, "--output", {out!r}, "--master", "local[1]",
           "--conf", "spark.pyspark.python=" + {bare!r}, "--conf", "spark.sql.shuffle.partitions=1",
           "--conf", "spark.driver.extraJavaOptions=" + {jvm!r}])
# The Python API on that session, as a notebook's own session whose workers start another
# interpreter (what PYSPARK_PYTHON=python gives a session started afterwards).
spark = SparkSession.getActiveSession()
pipeline = load_pipeline({config!r})
got = {{"rc": rc}}
for name, python in {pythons!r}:
    spark.sparkContext.pythonExec = python
    session = spark.newSession()  # the check is cached per session
    try:
        replay(session, pipeline, session.read.parquet({events!r}))
        got[name] = "replayed"
    except Exception as exc:
        got[name] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(got))
"""


@pytest.mark.spark  # starts Spark in a subprocess (no spark fixture to mark it)
def test_workers_without_rewindows_python_are_named_with_what_to_set(tmp_path, bare_python):
    """Workers whose interpreter lacks numpy/pyarrow/rewindow, has another minor version,
    or does not exist: one error naming it and what to set, before any work. One process
    (one Spark start-up): the command line first, then the Python API on its session."""
    events = tmp_path / "events"
    events.mkdir()
    pq.write_table(_events(), events / "part-0.parquet")
    out = tmp_path / "out"
    other = _other_minor_python()
    missing = str(tmp_path / "no-such-python")
    pythons = [("missing", missing)] + ([("other", other)] if other else [])
    code = _WORKERS.format(
        config=str(CLICKS), events=str(events), out=str(out), bare=bare_python, pythons=pythons, jvm=QUICK_JVM_OPTS
    )
    # PYSPARK_PYTHON is a good interpreter: only rewindow applying --conf spark.pyspark.python makes it bare.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    advice = (
        f"Set PYSPARK_PYTHON (or spark.pyspark.python with spark-submit or `rewindow --conf`) to a Python "
        f"{sys.version_info[0]}.{sys.version_info[1]} with rewindow and its dependencies (numpy, pyarrow, "
        f"pyyaml) installed, such as this driver's {sys.executable!r}, before the Spark session starts"
    )
    head = "Spark's Python workers cannot run rewindow: interpreter "
    # The command line: exit 2, one line, nothing written.
    assert got["rc"] == 2
    assert _error_lines(proc.stderr) == [
        f"rewindow: error: {head}{bare_python!r} cannot import numpy (ModuleNotFoundError: No module named "
        f"'numpy'); pyarrow (ModuleNotFoundError: No module named 'pyarrow'); windowing.kernel "
        f"(ModuleNotFoundError: No module named 'windowing'). {advice}"
    ]
    assert not out.exists()
    # Failed checks do not log their tasks' worker tracebacks: the error says it all.
    assert "Traceback" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr[-3000:]
    # The Python API.
    assert got["missing"] == (
        f"WorkerEnvironmentError: {head}{missing!r} cannot be started (error=2, No such file or directory). {advice}"
    ), got["missing"]
    if other:
        assert got["other"].startswith(f"WorkerEnvironmentError: {head}{other!r} is Python 3."), got["other"]
        assert got["other"].endswith(
            f" while the driver runs Python {sys.version_info[0]}.{sys.version_info[1]} "
            f"(PySpark needs the same minor version). {advice}"
        ), got["other"]
