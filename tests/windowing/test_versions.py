"""A changed pipeline is rebuilt beside the current history (issue 48): the current version
stays what readers read until the rebuild is whole, an interrupted rebuild goes on with
``--resume``, then one switch, with what changed; a ``reconcile:`` edit starts no version;
old versions are pruned (``--keep-versions``)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.cli import rewindow
from tests.support.services import QUICK_JVM_OPTS

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
START = datetime(2024, 3, 1, tzinfo=timezone.utc)
DAYS = ["2024-03-01", "2024-03-02", "2024-03-03"]
NAME = "clicks-hourly"


def _config(folder: Path, name: str, edit=lambda s: s) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(edit(CLICKS.read_text()))
    return path


def _with_avg(text: str) -> str:
    return text.replace(
        "      - {type: max, column: amount}\n",
        "      - {type: max, column: amount}\n      - {type: avg, column: amount}\n",
    )


def _rows(spark, out: Path, day: str, dataset: str = "aggregates") -> list[tuple]:
    from tests.support.outputs import run_dir

    return sorted((tuple(r) for r in spark.read.parquet(str(run_dir(out / NAME / day) / dataset)).collect()), key=repr)


def _current_runs(out: Path) -> dict[str, str]:
    from tests.support.outputs import current

    return {d: current(out / NAME / d)["run_id"] for d in DAYS}


def _interrupt_after_first_commit(config: Path, landing: Path, out: Path, tmp_path: Path) -> str:
    """``rewindow backfill`` (the installed script) sent SIGINT once its first partition is
    committed; its stderr."""
    argv = [
        str(Path(sys.executable).with_name("rewindow")),
        "backfill", "--config", str(config), "--input", str(landing), "--output", str(out),
        "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=1",
        "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM_OPTS}",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "COLUMNS": "400"}
    err = tmp_path / "interrupted.stderr"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not re.search(rf"{DAYS[0]}: .*: committed", err.read_text()):
            assert proc.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the first partition was never committed"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 130, err.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return err.read_text()


def test_a_rebuild_is_built_beside_switched_in_whole_and_pruned(spark, tmp_path):
    from windowing.sample import generate_history
    from windowing.storage import versions

    landing, out, fresh = tmp_path / "landing", tmp_path / "out", tmp_path / "fresh"
    generate_history(landing, START, days=3, events_per_day=300, keys=15, seed=5)
    v1_config = _config(tmp_path, "v1")
    rc, _, err = rewindow("backfill", "--config", v1_config, "--input", landing, "--output", out)
    assert rc == 0, err
    v1_runs, v1_rows = _current_runs(out), _rows(spark, out, DAYS[1])
    assert versions.current_version(spark, str(out), NAME) == "v1"

    # The changed pipeline: status says so, and how to rebuild.
    v2_config = _config(tmp_path, "v2", _with_avg)
    rc, text, _ = rewindow("status", "--config", v2_config, "--output", out)
    assert rc == 0 and text.count("another window/time/aggregate configuration") == 3, text
    assert "rebuilds the history as a new version beside v1" in text, text

    # Interrupted after its first partition: v1 stays current, whole and untouched.
    said = _interrupt_after_first_commit(v2_config, landing, out, tmp_path)
    assert "building v2 beside it, 3 partition(s) 2024-03-01..2024-03-03" in said, said[-3000:]
    last = said.rstrip().splitlines()[-1]
    assert last.startswith("rewindow: interrupted: partitions through 2024-03-0") and last.endswith(
        f"go on with: rewindow backfill --config {v2_config} --input {landing} --output {out} --resume"
    ), last
    assert "Traceback" not in said
    assert versions.current_version(spark, str(out), NAME) == "v1"
    assert _current_runs(out) == v1_runs and _rows(spark, out, DAYS[1]) == v1_rows
    rc, text, _ = rewindow("status", "--output", out)
    assert "version v1," in text and "version v2: being built: " in text and " of 3 partition(s) committed" in text
    assert "avg_amount" not in spark.read.parquet(str(out / NAME / DAYS[0] / "runs" / "*" / "aggregates")).columns

    # --resume goes on and switches, saying what changed.
    rc, _, err = rewindow("backfill", "--config", v2_config, "--input", landing, "--output", out, "--resume")
    assert rc == 0, err
    assert "switched 'clicks-hourly' from v1 to v2 (3 partition(s) 2024-03-01..2024-03-03)" in err, err
    assert "avg_amount" in err  # the diff's summary: the column added
    assert versions.current_version(spark, str(out), NAME) == "v2"
    v2_root = Path(versions.version_root(str(out), NAME, "v2"))
    assert _current_runs(out) == v1_runs  # the old version is kept, as it was

    # The rebuilt version is exactly a fresh backfill of the new pipeline.
    rc, _, err = rewindow("backfill", "--config", v2_config, "--input", landing, "--output", fresh)
    assert rc == 0, err
    for day in DAYS:
        for dataset in ("aggregates", "late_events", "rejected", "state"):
            assert _rows(spark, v2_root, day, dataset) == _rows(spark, fresh, day, dataset), (day, dataset)
    rc, text, _ = rewindow("status", "--output", out)
    assert "version v2," in text and "version v1: kept" in text and "3 committed" in text, text
    # Versions by name: the current one is the history itself.
    rc, text, err = rewindow("diff", f"{out / NAME}@v1", f"{out / NAME}@v2")
    assert rc == 1 and "columns added in aggregates: avg_amount" in text, (text, err)
    assert rewindow("diff", out / NAME, f"{out / NAME}@v2")[0] == 0
    rc, _, err = rewindow("diff", f"{out / NAME}@v7", out / NAME)
    assert rc == 2 and "'clicks-hourly' has no version v7 (it has v1, v2)" in err, err

    # A reconcile: edit is not a new version.
    v2_reconcile = _config(tmp_path, "v2-reconcile", lambda s: _with_avg(s).replace("minMatch: 100%", "minMatch: 50%"))
    rc, _, err = rewindow("backfill", "--config", v2_reconcile, "--input", landing, "--output", out, "--resume")
    assert rc == 0 and "nothing to do" in err and "building" not in err, err
    assert versions.versions(spark, str(out), NAME) == ["v1", "v2"]

    # A third configuration: v3, and with --keep-versions 2 the first is removed.
    v3_config = _config(tmp_path, "v3", lambda s: _with_avg(s).replace("delayWindowClose: 5s", "delayWindowClose: 9s"))
    rc, _, err = rewindow("backfill", "--config", v3_config, "--input", landing, "--output", out)
    assert rc == 0 and "switched 'clicks-hourly' from v2 to v3" in err and "removed version(s) v1" in err, err
    assert versions.versions(spark, str(out), NAME) == ["v2", "v3"]
    assert not any((out / NAME / d).exists() for d in DAYS), "v1's partition folders are gone"
    assert versions.current_version(spark, str(out), NAME) == "v3"


def test_rerun_from_on_a_changed_pipeline_is_refused_naming_the_rebuild(spark, tmp_path):
    from windowing.sample import generate_history

    landing, out = tmp_path / "landing", tmp_path / "out"
    generate_history(landing, START, days=1, events_per_day=100, keys=5, seed=3)
    rc, _, err = rewindow("backfill", "--config", _config(tmp_path, "v1"), "--input", landing, "--output", out)
    assert rc == 0, err
    rc, _, err = rewindow(
        "backfill", "--config", _config(tmp_path, "v2", _with_avg), "--input", landing, "--output", out,
        "--rerun-from", DAYS[0],
    )  # fmt: skip
    assert rc == 2 and "a rebuild replays the whole history into a new version beside v1" in err, err
    assert not (out / NAME / "_versions").exists()


def test_keep_versions_must_be_at_least_1(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        rewindow("backfill", "--config", CLICKS, "--output", tmp_path, "--keep-versions", "0")
    assert stop.value.code == 2


def test_a_rebuild_whose_checks_fail_never_switches(spark, tmp_path):
    """A partition of the rebuild that fails a blocking check stops it there: the new
    version is not switched in, the current one stays whole."""
    from tests.support.histories import landing_with_odd_row
    from windowing.sample import generate_history
    from windowing.storage import versions

    clean, out = tmp_path / "clean", tmp_path / "out"
    generate_history(clean, START, days=3, events_per_day=200, keys=10, seed=7)
    v1 = _config(tmp_path, "v1")
    rc, _, err = rewindow("backfill", "--config", v1, "--input", clean, "--output", out)
    assert rc == 0, err
    runs = _current_runs(out)
    # a file landing late in the last day, its event 30 days before its arrival: input_event_time_skew blocks
    landing = landing_with_odd_row(clean, tmp_path, DAYS[2], event_time=lambda t: t - timedelta(days=30))
    rc, _, err = rewindow(
        "backfill", "--config", _config(tmp_path, "v2", _with_avg), "--input", landing, "--output", out
    )
    assert rc == 1, err
    assert f"partition {DAYS[2]} failed its data-quality checks (input_event_time_skew" in err, err
    assert "v2 of 'clicks-hourly' is not switched in: v1 stays current" in err, err
    assert versions.current_version(spark, str(out), NAME) == "v1" and _current_runs(out) == runs


def test_sigint_at_random_points_then_resume_equals_an_uninterrupted_rebuild(spark, tmp_path):
    """Five Ctrl-Cs at seeded random moments of one rebuild, each followed by ``--resume``:
    the version switched in at the end is the uninterrupted rebuild's, bit for bit."""
    import random

    from windowing.sample import generate_history
    from windowing.storage import versions

    landing, out, fresh = tmp_path / "landing", tmp_path / "out", tmp_path / "fresh"
    generate_history(landing, START, days=3, events_per_day=200, keys=10, seed=9)
    rc, _, err = rewindow("backfill", "--config", _config(tmp_path, "v1"), "--input", landing, "--output", out)
    assert rc == 0, err
    v2 = _config(tmp_path, "v2", _with_avg)
    draw = random.Random(48)
    argv = [
        str(Path(sys.executable).with_name("rewindow")),
        "backfill", "--config", str(v2), "--input", str(landing), "--output", str(out), "--resume",
        "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=1",
        "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM_OPTS}",
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "COLUMNS": "400"}
    ended = []
    for attempt in range(5):
        err = tmp_path / f"attempt-{attempt}.stderr"
        with open(err, "w") as stderr:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while "rewindow: backfilling" not in err.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, err.read_text()[-3000:]
                time.sleep(0.05)
            time.sleep(draw.uniform(0.0, 6.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
            ended.append(proc.wait(60))
        finally:
            if proc.poll() is None:
                proc.kill()
        assert "Traceback" not in err.read_text(), err.read_text()[-3000:]
    assert set(ended) <= {0, 130} and 130 in ended, ended
    rc, _, err = rewindow("backfill", "--config", v2, "--input", landing, "--output", out, "--resume")
    assert rc == 0, err
    assert versions.current_version(spark, str(out), NAME) == "v2"
    rc, _, err = rewindow("backfill", "--config", v2, "--input", landing, "--output", fresh)
    assert rc == 0, err
    v2_root = Path(versions.version_root(str(out), NAME, "v2"))
    for day in DAYS:
        for dataset in ("aggregates", "late_events", "rejected", "state"):
            assert _rows(spark, v2_root, day, dataset) == _rows(spark, fresh, day, dataset), (day, dataset)
