"""The archive of Spark's classes a cold driver maps (windowing.runner.jvm_classes): found,
started once, left alone when the caller chose, and mapped for real by a cold ``rewindow``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support import spark_classes
from windowing.runner import jvm_classes

REPO = Path(__file__).resolve().parents[3]
CLICKS = REPO / "examples" / "pipelines" / "clicks-hourly.yaml"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty archive folder of its own, and no archive chosen by the environment."""
    monkeypatch.setenv(jvm_classes.DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(jvm_classes.SWITCH_ENV, raising=False)
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    return tmp_path / "cache"


def test_a_driver_maps_the_archive_once_there_is_one(cache, monkeypatch):
    archive = jvm_classes.archive_path()
    assert archive is not None and archive.parent == cache
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"an archive")
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Duser.opt=1")
    assert jvm_classes.use_archive() == archive
    assert os.environ["SPARK_SUBMIT_OPTS"] == f"-Duser.opt=1 -XX:SharedArchiveFile={archive} -Xlog:cds*=off"


def test_an_archive_the_caller_chose_is_left_alone(cache, monkeypatch):
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-XX:SharedArchiveFile=/elsewhere.jsa")
    assert jvm_classes.use_archive() is None
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-XX:SharedArchiveFile=/elsewhere.jsa"
    assert not cache.exists()  # and none is being made


def test_off_runs_without_one_and_makes_none(cache, monkeypatch):
    monkeypatch.setenv(jvm_classes.SWITCH_ENV, "off")
    assert jvm_classes.archive_path() is None
    assert jvm_classes.use_archive() is None
    assert "SPARK_SUBMIT_OPTS" not in os.environ
    assert not cache.exists()


def test_one_maker_at_a_time(cache):
    archive = jvm_classes.archive_path()
    assert archive is not None
    cache.mkdir()
    lock = cache / f".{archive.stem}.making"
    lock.touch()  # another process is making it
    assert jvm_classes.start_making(archive) is False
    assert sorted(p.name for p in cache.iterdir()) == [lock.name]  # no second maker, no log


def test_the_archive_tells_another_pyspark_or_java_apart(cache, monkeypatch):
    archive = jvm_classes.archive_path()
    monkeypatch.setattr(jvm_classes, "DUMP_VERSION", jvm_classes.DUMP_VERSION + 1)
    assert jvm_classes.archive_path() not in (None, archive)


@pytest.mark.spark
def test_a_cold_rewindow_maps_the_archive_and_replays_the_same_rows(tmp_path):
    """The suite's archive is made by the product's own maker (tests/conftest.py); a cold
    ``rewindow replay`` given only its folder maps it: with ``-Xshare:on`` a JVM that
    cannot map it does not start, and the class-load log shows Spark's classes read from
    it. The rows are those of a run without it."""
    archive = spark_classes.archive_path()
    if archive is None:
        pytest.skip("REWINDOW_SPARK_CLASSES=off, or no java")
    deadline = time.monotonic() + 600
    while not archive.is_file() and time.monotonic() < deadline:  # made while the first tests run
        time.sleep(2)
    assert archive.is_file(), f"{archive} not made: the product's maker failed"
    from windowing.sample import generate_history

    [day] = generate_history(
        tmp_path / "in", datetime(2024, 1, 1, tzinfo=timezone.utc), days=1, events_per_day=300, keys=20
    )
    base = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    base |= {"PYSPARK_PYTHON": sys.executable, jvm_classes.DIR_ENV: str(archive.parent)}
    loaded = tmp_path / "classes.log"
    runs = {
        "with": {"SPARK_SUBMIT_OPTS": f"-Xshare:on -Xlog:class+load=info:file={loaded}"},
        "without": {jvm_classes.SWITCH_ENV: "off"},
    }
    for name, env in runs.items():
        proc = subprocess.run(
            [sys.executable, "-m", "windowing.cli", "replay", "--config", str(CLICKS), "--input", str(day)]
            + ["--output", str(tmp_path / name), "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=1"],
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "writing an archive" not in proc.stderr
    shared = sum("source: shared objects file (top)" in line for line in loaded.read_text().splitlines())
    assert shared > 2000, f"{shared} classes mapped from {archive}"

    def rows(name: str) -> list[dict]:
        [run] = (tmp_path / name / "runs").iterdir()
        table = pq.read_table(run / "aggregates")
        return sorted(table.to_pylist(), key=repr)

    assert rows("with") == rows("without")
