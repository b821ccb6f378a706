"""Every file once (issue 46): symbolic links in a local landing zone or input folder.

Spark's readers follow links when they list a folder, so a file reached by two paths was
read twice (``latest -> date=...``: 1,500 events from 1,000) and a loop (``loop -> ..``)
read the day's files ~40 times, with exit 0. Now a file reached by two paths is read once,
by its real path, with a warning naming both; a loop, or a link out of the zone, is refused
before any work, naming the link and where it points. With them (issue 47), an upload in
progress (``._COPYING_``) is skipped as Spark skips it, and ``hour=`` folders inside a day
folder get an error that says what rewindow expects.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.outputs import metrics as metrics_of
from windowing.cli import main
from windowing.config import load_pipeline
from windowing.landing import KnownSchemas, read_partition_events
from windowing.storage.errors import InputError
from windowing.storage.inputs import read_events
from windowing.storage.lake import Lake

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAYS = ["2026-01-01", "2026-01-02"]
PER_DAY = 500


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """Two days of 500 events, two files a day: copied (``shutil.copytree``) by each test."""
    from windowing.sample import generate_history

    out = tmp_path_factory.mktemp("links") / "zone"
    generate_history(out, START, days=2, events_per_day=PER_DAY, keys=10, seed=4, partitions=2, files_per_day=2)
    return out


@pytest.fixture
def zone(history, tmp_path) -> Path:
    return Path(shutil.copytree(history, tmp_path / "zone"))


def _rows(folder: Path) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in folder.glob("*.parquet"))


def _day(spark, zone: Path, day: str, known: KnownSchemas | None = None):
    start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
    return read_partition_events(
        spark, str(zone), start, start + timedelta(days=1), "arrival_time", pipeline=load_pipeline(CLICKS), known=known
    )


def _warnings(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


def test_a_linked_day_at_the_top_is_replayed_once_and_both_paths_are_logged(spark, zone, tmp_path, caplog):
    os.symlink("date=2026-01-02", zone / "latest")
    out, err = io.StringIO(), io.StringIO()
    with caplog.at_level(logging.WARNING), redirect_stdout(out), redirect_stderr(err):
        rc = main(["replay", "--config", str(CLICKS), "--input", str(zone), "--output", str(tmp_path / "out")])
    assert rc == 0, err.getvalue()
    assert metrics_of(tmp_path / "out")["input_rows"] == 2 * PER_DAY  # was 1,500: day 2 twice
    assert f"{zone}/latest is a symbolic link to {zone}/date=2026-01-02" in _warnings(caplog)


def test_a_backfill_reads_each_day_once_beside_a_linked_day(spark, zone, tmp_path, caplog):
    from windowing.chain import Chain
    from windowing.partitions import Partitions

    os.symlink("date=2026-01-02", zone / "latest")  # Spark's partition discovery refused the zone
    chain = Chain(spark, load_pipeline(CLICKS), str(zone), str(tmp_path / "out"), Partitions("day", START))
    with caplog.at_level(logging.WARNING):
        parts = list(chain.replay(DAYS, checks=False))
    assert [p.metrics.input_rows for p in parts] == [PER_DAY, PER_DAY]
    assert all(p.committed for p in parts)
    warned = [m for m in _warnings(caplog).splitlines() if "latest is a symbolic link" in m]
    assert len(warned) == 1, warned  # once a run, not once a partition


def test_a_linked_file_inside_a_day_is_read_once(spark, zone):
    day = zone / "date=2026-01-02"
    first = sorted(day.glob("*.parquet"))[0]
    os.symlink(first.name, day / "copy.parquet")
    assert read_events(spark, str(zone)).count() == 2 * PER_DAY
    events, files = _day(spark, zone, DAYS[1])
    assert events.count() == PER_DAY
    assert [e.path for e in files] == sorted(f"file:{p}" for p in day.glob("part*.parquet"))
    # the contract Lake.files keeps: each file once, by its real path, sorted, with its mtime
    listed = Lake(spark).files(str(zone))
    assert [e.path for e in listed] == sorted(f"file:{p}" for p in zone.glob("date=*/part*.parquet"))
    assert all(e.mtime == os.stat(e.path[5:]).st_mtime_ns // 1_000_000 > 0 for e in listed)


def test_a_day_folder_linked_to_another_day_reads_the_files_as_the_other_days(spark, zone):
    shutil.rmtree(zone / "date=2026-01-02")
    os.symlink("date=2026-01-01", zone / "date=2026-01-02")
    assert read_events(spark, str(zone)).count() == PER_DAY
    events, files = _day(spark, zone, DAYS[1])
    assert events.count() == 0 and files == []
    events, files = _day(spark, zone, DAYS[0])
    assert events.count() == PER_DAY and len(files) == 2


def test_a_link_loop_is_refused_naming_the_link(spark, zone):
    os.symlink("..", zone / "date=2026-01-02" / "loop")  # read the day ~40 times, exit 0
    link = f"{zone}/date=2026-01-02/loop is a symbolic link to .."
    with pytest.raises(InputError, match="loop") as raised:
        read_events(spark, str(zone))
    assert link in str(raised.value)
    with pytest.raises(InputError, match="loop") as raised:
        _day(spark, zone, DAYS[0])
    assert link in str(raised.value)


def test_links_pointing_at_each_other_are_refused(spark, zone):
    os.symlink("b", zone / "date=2026-01-01" / "a")
    os.symlink("a", zone / "date=2026-01-01" / "b")
    with pytest.raises(InputError, match=f"{zone}/date=2026-01-01/a is a symbolic link to b: a loop"):
        read_events(spark, str(zone))


def test_a_link_out_of_the_zone_is_refused_naming_where_it_points(spark, zone, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(sorted((zone / "date=2026-01-01").glob("*.parquet"))[0], elsewhere / "x.parquet")
    os.symlink(elsewhere / "x.parquet", zone / "date=2026-01-01" / "x.parquet")
    expected = f"{zone}/date=2026-01-01/x.parquet is a symbolic link to {elsewhere}/x.parquet"
    with pytest.raises(InputError, match="outside") as raised:
        read_events(spark, str(zone))
    assert expected in str(raised.value)
    with pytest.raises(InputError, match="outside") as raised:
        _day(spark, zone, DAYS[1])  # the zone is checked whichever day is read
    assert expected in str(raised.value)


def test_an_upload_in_progress_is_skipped_and_logged(spark, zone, caplog):
    day = zone / "date=2026-01-02"
    (day / "part-9.parquet._COPYING_").write_bytes(b"PAR1 half an upload")
    with caplog.at_level(logging.WARNING):
        assert read_events(spark, str(zone)).count() == 2 * PER_DAY  # was: "not a readable Parquet file"
    assert f"{day}/part-9.parquet._COPYING_: an upload in progress" in _warnings(caplog)
    events, files = _day(spark, zone, DAYS[1])
    assert events.count() == _rows(day) == PER_DAY
    assert not any("_COPYING_" in e.path for e in files)


def test_hour_folders_inside_a_day_are_refused_saying_what_is_expected(spark, zone):
    day = zone / "date=2026-01-02"
    (day / "hour=05").mkdir()
    sorted(day.glob("*.parquet"))[0].rename(day / "hour=05" / "part-0.parquet")
    with pytest.raises(InputError) as raised:
        _day(spark, zone, DAYS[0])
    message = str(raised.value)
    assert f"{day}/hour=05: not a layout rewindow reads" in message, message  # not only Spark's first line
    assert "day folders date=YYYY-MM-DD directly in the landing zone" in message
    assert "no deeper partition folders" in message
