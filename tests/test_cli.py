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
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from windowing.cli import main
from windowing.spark import LOCAL_DEFAULT_CONF, REQUIRED_CONF

ROOT = Path(__file__).resolve().parents[1]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
SESSIONS = ROOT / "examples" / "pipelines" / "sessions.yaml"
START = datetime(2024, 5, 6, tzinfo=timezone.utc)
DAY2_START_US = int((START + timedelta(days=1)).timestamp()) * 1_000_000
OUTPUTS = ("aggregates", "late_events", "rejected", "state")
#: Runtime settings spark_session() could touch on a shared session (see test_in_process_run_leaves_the_session_settings_alone).
_SESSION_KEYS = (*LOCAL_DEFAULT_CONF, *REQUIRED_CONF)


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
    cols = [F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, T.TimestampType)
            else F.col(f.name) for f in df.schema.fields]

    def canon(v):
        if isinstance(v, float):
            return v.hex()
        if isinstance(v, list):
            return tuple(canon(x) for x in v)
        return v

    return sorted((tuple((k, canon(v)) for k, v in r.asDict().items()) for r in df.select(*cols).collect()),
                  key=repr)


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _no_debris(parent: Path, name: str) -> None:
    """write_outputs stages next to the output folder; only its lock file may remain."""
    assert [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")] in ([], [f".{name}.lock"])


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    from windowing.sample import generate_history

    base = tmp_path_factory.mktemp("cli")
    day1, day2 = generate_history(base / "history", START, days=2, events_per_day=1_500, keys=20, seed=3,
                                  partitions=2, files_per_day=3)
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
    rc, stdout, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day1"], "--output", out,
                              "--flush-at-end")
    assert rc == 0, stderr
    return out


def test_replay_writes_every_output_and_a_summary(spark, history, day1_run):
    out, stdout = day1_run
    assert _files(out) >= {"metrics.json"} | {f"{name}/_SUCCESS" for name in OUTPUTS}
    for name in OUTPUTS:
        assert list((out / name).glob("*.parquet")), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["pipeline"] == "clicks-hourly"
    assert metrics["input_rows"] == history["rows1"]
    aggregates = _rows(spark, out / "aggregates")
    assert len(aggregates) == metrics["windows_emitted"] > 0
    assert len(_rows(spark, out / "late_events")) == metrics["late_events"] > 0
    assert len(_rows(spark, out / "rejected")) == metrics["rejected_rows"] == 0
    assert sum(dict(r)["state_kind"] == "window" for r in _rows(spark, out / "state")) == metrics["open_windows"] > 0
    columns = [k for k, _ in aggregates[0]]
    assert columns == ["partition", "user_id", "window_start", "window_end", "count", "sum_amount", "min_amount",
                       "max_amount", "unique_events", "emit_reason", "emit_batch", "emit_watermark", "emission"]
    # Lateness percentiles: Spark's exact percentile of the written late events.
    from pyspark.sql import functions as F

    p = spark.read.parquet(str(out / "late_events")).agg(
        F.percentile("lateness_ms", [0.5, 0.9, 0.99]).alias("p"), F.max("lateness_ms").alias("mx")).first()
    assert metrics["lateness_ms_percentiles"] == {"p50": p["p"][0], "p90": p["p"][1], "p99": p["p"][2], "max": p["mx"]}
    # ... which is also what the Spark job for very many late events gives.
    from windowing import engine

    late = str(out / "late_events")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "DRIVER_PERCENTILES_MAX", 0)
        assert engine._lateness(metrics["late_events"], late, spark.read.parquet(late), F).asDict() == p.asDict()
    # The summary on stdout.
    assert f"replayed {history['rows1']:,} events of pipeline 'clicks-hourly'" in stdout
    assert f"{metrics['windows_emitted']:,} windows emitted" in stdout
    assert f"{metrics['late_events']:,} late" in stdout
    assert str(out) in stdout
    _no_debris(out.parent, out.name)


def test_second_day_continues_from_the_state(spark, history, day1_run):
    out1, _ = day1_run
    runs = history["base"] / "runs"
    rc, stdout, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day2"], "--output",
                              runs / "day2", "--state-in", out1 / "state")
    assert rc == 0, stderr
    rc, _, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day1"], history["day2"],
                         "--output", runs / "both-days")
    assert rc == 0, stderr
    day2_aggs = _rows(spark, runs / "day2" / "aggregates")
    # Windows opened on day 1 and carried in the state close on day 2 ...
    assert any(dict(r)["window_start"] < DAY2_START_US for r in day2_aggs)
    # ... and day 1 then day 2 is exactly both days in one go.
    for name in ("aggregates", "late_events", "rejected"):
        pieces = sorted(_rows(spark, out1 / name) + _rows(spark, runs / "day2" / name), key=repr)
        assert pieces == _rows(spark, runs / "both-days" / name), name
    assert _rows(spark, runs / "day2" / "state") == _rows(spark, runs / "both-days" / "state")


def test_state_of_another_pipeline_is_refused(spark, history, day1_run):
    out1, _ = day1_run
    target = history["base"] / "runs" / "wrong-state"
    rc, _, stderr = _cli(spark, "replay", "--config", SESSIONS, "--input", history["day2"], "--output", target,
                         "--state-in", out1 / "state")
    assert rc != 0
    assert "different pipeline configuration" in stderr
    assert not target.exists()


def test_flush_at_end_emits_open_windows(spark, day1_run, flush_run):
    out1, _ = day1_run
    flushed = _rows(spark, flush_run / "aggregates")
    end = [r for r in flushed if dict(r)["emit_reason"] == "END_OF_INPUT"]
    metrics1 = json.loads((out1 / "metrics.json").read_text())
    assert len(end) == metrics1["open_windows"] > 0  # every window day 1 left open
    assert json.loads((flush_run / "metrics.json").read_text())["emitted_by_reason"]["END_OF_INPUT"] == len(end)
    # Everything else is what the run without flush emitted.
    assert [r for r in flushed if dict(r)["emit_reason"] != "END_OF_INPUT"] == _rows(spark, out1 / "aggregates")
    assert not [r for r in _rows(spark, flush_run / "state") if dict(r)["state_kind"] == "window"]


def test_rerun_into_the_same_folder_replaces_it_exactly(spark, history, day1_run, flush_run):
    out1, _ = day1_run
    target = history["base"] / "runs" / "rerun"
    shutil.copytree(flush_run, target)  # a previous, different output in the folder
    (target / "stray.txt").write_text("left by hand")
    stray_part = next((target / "aggregates").glob("*.parquet"))
    shutil.copy(stray_part, target / "aggregates" / "part-99999-stale.snappy.parquet")
    before = _files(target)
    rc, _, stderr = _cli(spark, "replay", "--config", CLICKS, "--input", history["day1"], "--output", target)
    assert rc == 0, stderr
    after = _files(target)
    # Part names are deterministic (part-<partition>.parquet), so a name may come back:
    # what must not survive is a file of the previous output that this run did not write.
    assert before - after, "nothing of the previous output was replaced"
    assert not {f for f in after if "stale" in f or f == "stray.txt"}
    assert after - {f for f in after if f.endswith((".crc", ".parquet"))} == (
        {"metrics.json"} | {f"{name}/_SUCCESS" for name in OUTPUTS})
    for name in OUTPUTS:
        assert _rows(spark, target / name) == _rows(spark, out1 / name), name
    assert json.loads((target / "metrics.json").read_text()) == json.loads((out1 / "metrics.json").read_text())
    _no_debris(target.parent, target.name)


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
            rc = main(["replay", "--config", str(CLICKS), "--input", str(tmp_path / "missing"),
                       "--output", str(tmp_path / "out")])
        assert rc != 0  # stops at the missing input, after the session was obtained
        assert _session_conf(spark) == mine
    finally:
        _restore_conf(spark, before)


def test_console_script_end_to_end(spark, history, day1_run):
    """The installed ``rewindow`` script in its own process (own Spark session, one core)
    gives the same outputs as the in-process run on two cores."""
    out1, _ = day1_run
    script = Path(sys.executable).parent / "rewindow"
    assert script.exists(), script
    target = history["base"] / "runs" / "subprocess"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [str(script), "replay", "--config", str(CLICKS), "--input", str(history["day1"]), "--output", str(target),
         "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=1", "--conf", "spark.driver.memory=1g"],
        capture_output=True, text=True, timeout=300, env=env, cwd=history["base"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"replayed {history['rows1']:,} events of pipeline 'clicks-hourly'" in proc.stdout
    for name in OUTPUTS:
        assert _rows(spark, target / name) == _rows(spark, out1 / name), name
