"""The ``rewindow replay`` command line (contract section 10).

Runs are made in-process through ``windowing.cli.main`` so the shared Spark session is
reused; one test runs the installed console script in a subprocess, end to end.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.outputs import commits, run_dir
from tests.support.outputs import metrics as metrics_of
from tests.support.services import QUICK_JVM_OPTS
from windowing.cli import main
from windowing.runner.session import DEFAULT_CONF, LOCAL_DEFAULT_CONF, REQUIRED_CONF

ROOT = Path(__file__).resolve().parents[1]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
SESSIONS = ROOT / "examples" / "pipelines" / "sessions.yaml"
START = datetime(2024, 5, 6, tzinfo=timezone.utc)
DAY2_START_US = int((START + timedelta(days=1)).timestamp()) * 1_000_000
OUTPUTS = ("aggregates", "late_events", "rejected", "state")
#: Runtime settings spark_session() could touch on a shared session
#: (see test_in_process_run_leaves_the_session_settings_alone).
_SESSION_KEYS = (*DEFAULT_CONF, *LOCAL_DEFAULT_CONF, *REQUIRED_CONF)


def _session_conf(spark) -> dict:
    return {k: spark.conf.get(k, None) for k in _SESSION_KEYS}


def _restore_conf(spark, before: dict) -> None:
    for k, v in before.items():
        if spark.conf.get(k, None) != v and spark.conf.isModifiable(k):
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _cli(spark, *argv) -> tuple[int, str, str]:
    """Run ``rewindow`` in-process; (exit code, stdout, stderr). The shared session's
    settings are put back afterwards, whatever the command changed."""
    out, err = io.StringIO(), io.StringIO()
    before = _session_conf(spark)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main([str(a) for a in argv])
    finally:
        _restore_conf(spark, before)
    return rc, out.getvalue(), err.getvalue()


def _rows(spark, folder: Path) -> list[tuple]:
    """A written dataset as sorted rows; timestamps as epoch micros, floats bit-exact."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    df = spark.read.parquet(str(folder))
    cols = [
        F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f.name)
        for f in df.schema.fields
    ]

    def canon(v):
        if isinstance(v, float):
            return v.hex()
        if isinstance(v, list):
            return tuple(canon(x) for x in v)
        return v

    return sorted((tuple((k, canon(v)) for k, v in r.asDict().items()) for r in df.select(*cols).collect()), key=repr)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _no_debris(parent: Path, name: str) -> None:
    """Outputs live inside their own folder: nothing is written beside it."""
    assert [p.name for p in parent.iterdir() if p.name.startswith(f".{name}")] == []


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from windowing.sample import generate_history

    base = tmp_path_factory.mktemp("cli")
    day1, day2 = generate_history(
        base / "history", START, days=2, events_per_day=1_500, keys=20, seed=3, partitions=2, files_per_day=3
    )
    rows1 = sum(pq.ParquetFile(f).metadata.num_rows for f in day1.glob("*.parquet"))
    return {"base": base, "day1": day1, "day2": day2, "rows1": rows1}


@pytest.fixture(scope="module")
def day1_run(spark, history):
    out = history["base"] / "runs" / "day1"
    rc, stdout, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day1"], "--output", out)
    assert rc == 0, stderr
    return out, stdout


@pytest.fixture(scope="module")
def flush_run(spark, history):
    out = history["base"] / "runs" / "day1-flush"
    rc, stdout, stderr = _cli(
        spark, "replay", "--config", CLICKS, "--input", history["day1"], "--output", out, "--flush-at-end"
    )
    assert rc == 0, stderr
    return out


def test_replay_writes_every_output_and_a_summary(spark, history, day1_run):
    out0, stdout = day1_run
    out = run_dir(out0)
    assert {p.name for p in out0.iterdir()} == {"runs", "_commits"}
    assert _files(out) >= {f"{name}/_SUCCESS" for name in OUTPUTS}
    for name in OUTPUTS:
        assert list((out / name).glob("*.parquet")), name
    metrics = metrics_of(out0)
    assert metrics["pipeline"] == "clicks-hourly"
    assert metrics["input_rows"] == history["rows1"]
    aggregates = _rows(spark, out / "aggregates")
    assert len(aggregates) == metrics["windows_emitted"] > 0
    assert len(_rows(spark, out / "late_events")) == metrics["late_event_windows"] >= metrics["late_events"] > 0
    assert len(_rows(spark, out / "rejected")) == metrics["rejected_rows"] == 0
    assert sum(dict(r)["state_kind"] == "window" for r in _rows(spark, out / "state")) == metrics["open_windows"] > 0
    columns = [k for k, _ in aggregates[0]]
    assert columns == [
        "partition",
        "user_id",
        "window_start",
        "window_end",
        "count",
        "sum_amount",
        "min_amount",
        "max_amount",
        "unique_events",
        "emit_reason",
        "emit_batch",
        "emit_time",
        "emit_watermark",
        "emission",
    ]
    # Lateness percentiles: Spark's exact percentile of the written late events.
    from pyspark.sql import functions as F

    p = (
        spark.read.parquet(str(out / "late_events"))
        .agg(F.percentile("lateness_ms", [0.5, 0.9, 0.99]).alias("p"), F.max("lateness_ms").alias("mx"))
        .first()
    )
    assert metrics["lateness_ms_percentiles"] == {"p50": p["p"][0], "p90": p["p"][1], "p99": p["p"][2], "max": p["mx"]}
    # ... which is also what the Spark job for very many late events gives.
    from windowing.runner import replay as job

    late = str(out / "late_events")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(job, "DRIVER_PERCENTILES_MAX", 0)
        assert (
            job.lateness_percentiles(metrics["late_event_windows"], spark.read.parquet(late), F).asDict() == p.asDict()
        )
    # The summary on stdout.
    assert f"replayed {history['rows1']:,} events of pipeline 'clicks-hourly'" in stdout
    assert f"{metrics['windows_emitted']:,} windows emitted" in stdout
    assert f"{metrics['late_events']:,} late" in stdout
    assert str(out) in stdout
    _no_debris(out0.parent, out0.name)


def test_second_day_continues_from_the_state(spark, history, day1_run):
    out1, _ = day1_run
    runs = history["base"] / "runs"
    rc, stdout, stderr = _cli(
        spark,
        "replay",
        "--config",
        CLICKS,
        "--input",
        history["day2"],
        "--output",
        runs / "day2",
        "--state-in",
        out1 / "state",
    )
    assert rc == 0, stderr
    rc, _, stderr = _cli(
        spark, "replay", "--config", CLICKS, "--input", history["day1"], history["day2"], "--output", runs / "both-days"
    )
    assert rc == 0, stderr
    day2, both, one = run_dir(runs / "day2"), run_dir(runs / "both-days"), run_dir(out1)
    day2_aggs = _rows(spark, day2 / "aggregates")
    # Windows opened on day 1 and carried in the state close on day 2 ...
    assert any(dict(r)["window_start"] < DAY2_START_US for r in day2_aggs)
    # ... and day 1 then day 2 is exactly both days in one go.
    for name in ("aggregates", "late_events", "rejected"):
        pieces = sorted(_rows(spark, one / name) + _rows(spark, day2 / name), key=repr)
        assert pieces == _rows(spark, both / name), name
    assert _rows(spark, day2 / "state") == _rows(spark, both / "state")
    # --state-in also takes the previous output itself.
    rc, _, stderr = _cli(
        spark, "replay", "--config", CLICKS, "--input", history["day2"], "--output", runs / "day2-b", "--state-in", out1
    )
    assert rc == 0, stderr
    for name in OUTPUTS:
        assert _rows(spark, run_dir(runs / "day2-b") / name) == _rows(spark, day2 / name), name


def test_state_of_another_pipeline_is_refused(spark, history, day1_run):
    out1, _ = day1_run
    target = history["base"] / "runs" / "wrong-state"
    rc, _, stderr = _cli(
        spark,
        "replay",
        "--config",
        SESSIONS,
        "--input",
        history["day2"],
        "--output",
        target,
        "--state-in",
        out1 / "state",
    )
    assert rc != 0
    assert "different pipeline configuration" in stderr
    assert not target.exists()


def test_flush_at_end_emits_open_windows(spark, day1_run, flush_run):
    out1, _ = day1_run
    flushed = _rows(spark, run_dir(flush_run) / "aggregates")
    end = [r for r in flushed if dict(r)["emit_reason"] == "END_OF_INPUT"]
    metrics1 = metrics_of(out1)
    assert len(end) == metrics1["open_windows"] > 0  # every window day 1 left open
    assert metrics_of(flush_run)["emitted_by_reason"]["END_OF_INPUT"] == len(end)
    # Everything else is what the run without flush emitted.
    expected = _rows(spark, run_dir(out1) / "aggregates")
    assert [r for r in flushed if dict(r)["emit_reason"] != "END_OF_INPUT"] == expected
    assert not [r for r in _rows(spark, run_dir(flush_run) / "state") if dict(r)["state_kind"] == "window"]


def test_rerun_into_the_same_output_commits_a_new_run_that_replaces_it(spark, history, day1_run, flush_run):
    out1, _ = day1_run
    target = history["base"] / "runs" / "rerun"
    shutil.copytree(flush_run, target)  # a previous, different output (flushed at end)
    previous = commits(target)[-1]
    rc, _, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day1"], "--output", target)
    assert rc == 0, stderr
    # The new run is current, as a whole; the previous one is kept beside it for rollback.
    recs = commits(target)
    assert [r["seq"] for r in recs] == [1, 2] and recs[0]["run_id"] == previous["run_id"]
    assert (target / previous["run"] / "aggregates" / "_SUCCESS").exists()
    for name in OUTPUTS:
        assert _rows(spark, run_dir(target) / name) == _rows(spark, run_dir(out1) / name), name
    assert metrics_of(target) == metrics_of(out1)
    _no_debris(target.parent, target.name)


def test_only_the_last_runs_are_kept(spark, history, day1_run, tmp_path):
    from windowing.storage.commits import KEEP_RUNS

    out1, _ = day1_run
    target = tmp_path / "many"
    shutil.copytree(out1, target)
    for _ in range(KEEP_RUNS):
        rc, _, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day1"], "--output", target)
        assert rc == 0, stderr
    recs = commits(target)
    assert [r["seq"] for r in recs] == list(range(2, KEEP_RUNS + 2))  # the first run was dropped
    assert sorted(p.name for p in (target / "runs").iterdir()) == sorted(r["run_id"] for r in recs)


@pytest.mark.parametrize("what", ["the input itself", "inside the input", "a folder of other files"])
def test_an_output_that_is_not_rewindows_is_refused_and_left_alone(spark, history, tmp_path, what):
    """Issue 8, data loss 1: --output once deleted whatever folder it named, the events included."""
    events = tmp_path / "events"
    shutil.copytree(history["day1"], events)
    target = {
        "the input itself": events,
        "inside the input": events / "out",
        "a folder of other files": tmp_path / "thesis",
    }[what]
    if what == "a folder of other files":
        (target / "src").mkdir(parents=True)
        (target / "thesis.tex").write_text("\\section{Results}")
    before = _files(tmp_path)
    rc, stdout, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", events, "--output", target)
    assert rc == 2 and stdout == ""
    assert str(target) in stderr
    assert ("is not a rewindow output" in stderr) if what == "a folder of other files" else ("the input" in stderr)
    assert _files(tmp_path) == before  # nothing written, nothing deleted


def test_bad_config_exits_non_zero_naming_the_field(spark, history, tmp_path):
    doc = yaml.safe_load(CLICKS.read_text())
    doc["emitter"]["tumbling-time-window"]["aggregateDefinition"][0] = {"type": "median", "column": "amount"}
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out" / "run"
    rc, stdout, stderr = _cli(spark, "replay", "--config", config, "--input", history["day1"], "--output", out)
    assert rc != 0
    assert "aggregateDefinition[0].type" in stderr and "'median'" in stderr and str(config) in stderr
    assert stdout == ""
    assert not (tmp_path / "out").exists()  # not even the parent folder


def test_missing_input_exits_non_zero_naming_the_path(spark, tmp_path):
    missing = tmp_path / "no-such-events"
    out = tmp_path / "out" / "run"
    rc, _, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", missing, "--output", out)
    assert rc != 0
    assert str(missing) in stderr
    assert not (tmp_path / "out").exists()


def test_in_process_run_leaves_the_session_settings_alone(spark, tmp_path):
    before = _session_conf(spark)
    try:
        spark.conf.set("spark.sql.shuffle.partitions", "5")
        mine = _session_conf(spark)
        with redirect_stderr(io.StringIO()):
            rc = main(
                [
                    "replay",
                    "--config",
                    str(CLICKS),
                    "--input",
                    str(tmp_path / "missing"),
                    "--output",
                    str(tmp_path / "out"),
                ]
            )
        assert rc != 0  # stops at the missing input, after the session was obtained
        assert _session_conf(spark) == mine
    finally:
        _restore_conf(spark, before)


def test_console_script_end_to_end(spark, history, day1_run, tmp_path):
    """``rewindow``'s entry point (``windowing.cli:script``, what the installed script runs)
    in its own process (own Spark session, one core) gives the same outputs as the
    in-process run on two cores, and ends the Spark application it started before it
    returns: no context left active, the event log closed, rather than left to the JVM's
    shutdown hook after the process exited. (Output to files, not pipes: a pipe would
    also wait for the JVM, which inherits it.)"""
    out1, _ = day1_run
    entry = (
        "import sys; from pyspark import SparkContext; from windowing.cli import script; "
        "sys.argv = ['rewindow', *sys.argv[1:]]; rc = script(); "
        "print('spark context active after the script:', SparkContext._active_spark_context is not None); sys.exit(rc)"
    )
    target = history["base"] / "runs" / "subprocess"
    events = tmp_path / "eventlog"
    events.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                entry,
                "replay",
                "--config",
                str(CLICKS),
                "--input",
                str(history["day1"]),
                "--output",
                str(target),
                "--master",
                "local[1]",
                "--conf",
                "spark.sql.shuffle.partitions=1",
                "--conf",
                "spark.driver.memory=1g",
                "--conf",
                f"spark.driver.extraJavaOptions={QUICK_JVM_OPTS}",
                "--conf",
                "spark.eventLog.enabled=true",
                "--conf",
                f"spark.eventLog.dir={events.as_uri()}",
                "--conf",
                "spark.eventLog.compress=false",
                "--conf",
                "spark.eventLog.rolling.enabled=false",
            ],
            stdout=stdout,
            stderr=stderr,
            text=True,
            timeout=300,
            env=env,
            cwd=history["base"],
        )
    returned_ms = time.time() * 1000
    logs = sorted(p.name for p in events.iterdir())
    out, err = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert proc.returncode == 0, err[-3000:]
    assert len(logs) == 1 and not logs[0].endswith(".inprogress"), logs
    assert "spark context active after the script: False" in out
    ends = [e for e in map(json.loads, (events / logs[0]).read_text().splitlines()) if e["Event"].endswith("End")]
    assert [e["Event"] for e in ends][-1] == "SparkListenerApplicationEnd"
    assert ends[-1]["Timestamp"] <= returned_ms, "the application ended after rewindow had returned"
    assert f"replayed {history['rows1']:,} events of pipeline 'clicks-hourly'" in out
    # Its own progress, one line per phase on stderr, and none of Spark's progress bars (issue 10).
    assert [line for line in err.splitlines() if line.startswith("rewindow: [")] == [
        "rewindow: [1/3] starting Spark (local[1])",
        f"rewindow: [2/3] replaying {history['day1']} through pipeline 'clicks-hourly'",
        f"rewindow: [3/3] writing outputs to {target}",
    ]
    assert "[Stage" not in err + out
    for name in OUTPUTS:
        assert _rows(spark, run_dir(target) / name) == _rows(spark, run_dir(out1) / name), name


@pytest.mark.parametrize("command", ["replay", "verify"])
def test_a_malformed_conf_is_a_usage_error_before_anything_runs(tmp_path, capsys, command):
    """Issue 10: ``--conf spark.sql.shuffle.partitions`` once printed "dictionary update
    sequence element #0 has length 1". argparse refuses it, naming the value, before the
    pipeline is even read (here it does not exist)."""
    where = ["--output", tmp_path / "o"] if command == "replay" else [tmp_path / "o"]
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                command,
                *map(str, where),
                "--config",
                str(tmp_path / "missing.yaml"),
                "--conf",
                "spark.sql.shuffle.partitions=4",
                "--conf",
                "spark.sql.shuffle.partitions",
            ]
        )
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"usage: rewindow {command} ")
    assert err.splitlines()[-1] == (
        f"rewindow {command}: error: argument --conf: expected KEY=VALUE, got 'spark.sql.shuffle.partitions'"
    )
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "bad, message",
    [
        (["--days", "-3"], "argument --days: expected at least 1, got -3"),
        (["--days", "0"], "argument --days: expected at least 1, got 0"),
        (["--keys", "0"], "argument --keys: expected at least 1, got 0"),
        (["--events-per-day", "ten"], "argument --events-per-day: expected a whole number, got 'ten'"),
        (["--start", "2024-13-01"], "argument --start: expected a day as YYYY-MM-DD, got '2024-13-01'"),
    ],
)
def test_generate_refuses_a_bad_count_or_day_before_writing(tmp_path, capsys, bad, message):
    """``rewindow generate --days -3`` used to exit 0 having written nothing."""
    with pytest.raises(SystemExit) as exit_:
        main(["generate", "--output", str(tmp_path / "h"), *bad])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == f"rewindow generate: error: {message}"
    assert not (tmp_path / "h").exists()


@pytest.mark.spark
def test_ctrl_c_during_a_backfill_is_one_line_and_exit_130(history, tmp_path):
    """Hostile run (issue 47), finding 11: SIGINT during a backfill printed six py4j and
    ``KeyboardInterrupt`` tracebacks. The installed script, sent Ctrl-C (SIGINT to its
    process group, as a terminal sends it) once the backfill is under way, prints
    ``rewindow: interrupted`` and exits 130; its Spark JVM ends with it."""
    import signal

    argv = [
        str(Path(sys.executable).with_name("rewindow")),
        "backfill",
        "--config",
        str(CLICKS),
        "--input",
        str(history["base"] / "history"),
        "--output",
        str(tmp_path / "out"),
        "--no-checks",
        "--master",
        "local[1]",
        "--conf",
        "spark.sql.shuffle.partitions=1",
        "--conf",
        f"spark.driver.extraJavaOptions={QUICK_JVM_OPTS}",
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=tmp_path, start_new_session=True
        )
    err = tmp_path / "stderr"
    try:
        deadline = time.monotonic() + 180
        while "rewindow: backfilling" not in err.read_text():
            assert proc.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the backfill never started"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(60)
        text = err.read_text()
        assert rc == 130, text[-3000:]
        assert "Traceback" not in text and "KeyboardInterrupt" not in text and "Py4J" not in text, text[-3000:]
        line = text.rstrip().splitlines()[-1]
        assert line == (
            "rewindow: interrupted: no partition committed by this run yet; go on with: rewindow backfill "
            f"--config {CLICKS} --input {history['base'] / 'history'} --output {tmp_path / 'out'} --resume"
        ), text[-3000:]
        for _ in range(200):  # the JVM, in the same process group, exits once its stdin closes
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail("Spark's JVM outlived the interrupted rewindow")
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own process group only
        except ProcessLookupError:
            pass
