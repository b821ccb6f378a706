"""A file that lands late in a committed day is seen (issue 46): the commit records what a
partition read, ``rewindow status`` compares it with the landing zone as it is now (with
no Spark session for a local history), and ``rewindow backfill --resume`` brings the
history back to exactly what a fresh backfill of the changed landing zone gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support.cli import rewindow

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
DAYS = ["2024-01-01", "2024-01-02"]
OUTPUTS = ("aggregates", "late_events", "rejected", "state")


def _history(tmp_path: Path) -> tuple[Path, Path]:
    """Two generated days (four files each), backfilled into ``tmp_path/out``."""
    from windowing.sample import generate_history

    landing = tmp_path / "landing"
    generate_history(landing, START, days=2, events_per_day=400, keys=20, seed=11)
    out = tmp_path / "out"
    rc, _, err = rewindow("backfill", "--config", CLICKS, "--input", landing, "--output", out)
    assert rc == 0, err
    return landing, out


def _status(out: Path, monkeypatch) -> dict[str, str]:
    """``rewindow status`` lines by partition, with no Spark session allowed."""
    from windowing import command_line

    def no_spark(args):
        raise AssertionError("rewindow status started Spark for a local history")

    with monkeypatch.context() as m:
        m.setattr(command_line, "spark_for", no_spark)
        rc, text, err = rewindow("status", "--output", out)
    assert rc == 0 and "Traceback" not in err, err
    return {line.split()[0]: line for line in text.splitlines() if line.strip().startswith("2024-")} | {"": text}


def _outputs(spark, out: Path) -> dict:
    from tests.support.outputs import run_dir

    found = {}
    for day in DAYS:
        run = run_dir(out / "clicks-hourly" / day)
        for o in OUTPUTS:
            found[day, o] = sorted((tuple(r) for r in spark.read.parquet(str(run / o)).collect()), key=repr)
    return found


def _state_hashes(out: Path) -> list[str]:
    from tests.support.outputs import current

    return [current(out / "clicks-hourly" / d)["extra"]["lineage"]["state_hash"] for d in DAYS]


def _add(folder: Path) -> tuple[str, int]:
    import pyarrow.parquet as pq

    t = pq.read_table(sorted(folder.glob("*.parquet"))[0])
    pq.write_table(t.slice(0, 40), folder / "late-arrival.parquet")
    return "1 file added: date=2024-01-01/late-arrival.parquet (40 rows)", +40


def _remove(folder: Path) -> tuple[str, int]:
    import pyarrow.parquet as pq

    gone = sorted(folder.glob("*.parquet"))[-1]
    rows = pq.read_metadata(gone).num_rows
    gone.unlink()
    crc = gone.with_name(f".{gone.name}.crc")
    if crc.exists():
        crc.unlink()
    return f"1 file removed: date=2024-01-01/{gone.name} ({rows:,} rows)", -rows


def _rewrite(folder: Path) -> tuple[str, int]:
    import pyarrow.parquet as pq

    f = sorted(folder.glob("*.parquet"))[1]
    t = pq.read_table(f)
    kept = t.num_rows // 2
    stat = f.stat()
    pq.write_table(t.slice(0, kept), f)
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))  # a later time, whatever the clock's grain
    crc = f.with_name(f".{f.name}.crc")
    if crc.exists():
        crc.unlink()
    return f"1 file rewritten: date=2024-01-01/{f.name} ({t.num_rows:,} -> {kept:,} rows)", kept - t.num_rows


@pytest.mark.parametrize("change", [_add, _remove, _rewrite], ids=["added", "removed", "rewritten"])
def test_a_changed_committed_day_is_named_and_resume_equals_a_fresh_backfill(spark, tmp_path, monkeypatch, change):
    landing, out = _history(tmp_path)
    before = _status(out, monkeypatch)
    assert "committed" in before[DAYS[0]] and "committed" in before[DAYS[1]], before[""]

    said, events = change(landing / f"date={DAYS[0]}")
    status = _status(out, monkeypatch)
    assert "out of date" in status[DAYS[0]] and f"landing zone changed since its commit: {said}" in status[DAYS[0]]
    assert "out of date" in status[DAYS[1]] and "after a changed partition" in status[DAYS[1]], status[""]
    hint = status[""].split("bring them in line with ", 1)[1].splitlines()[0]
    assert hint == f"rewindow backfill --config PIPELINE.yaml --input {landing} --output {out} --resume", hint

    # The chain refuses to go on from a changed day, before any work.
    rc, _, err = rewindow(
        "backfill", "--config", CLICKS, "--input", landing, "--output", out, "--from", DAYS[0], "--to", DAYS[1],
        "--rerun-from", DAYS[1],
    )  # fmt: skip
    assert rc == 1 and f"partition {DAYS[0]} landing zone changed since its commit" in err, err
    assert f"Rerun {DAYS[0]}..{DAYS[1]}" in err

    # The command status gave, as it is (the pipeline's source.path is another folder).
    rc, _, err = rewindow(*hint.replace("PIPELINE.yaml", str(CLICKS)).split()[1:])
    assert rc == 0 and f"resuming at {DAYS[0]}" not in err, err  # the first day is the first out of date
    assert f"2 partition(s) replayed again, {events:+,} events" in err, err
    assert all("committed" in line for k, line in _status(out, monkeypatch).items() if k), status[""]

    fresh = tmp_path / "fresh"
    rc, _, err = rewindow("backfill", "--config", CLICKS, "--input", landing, "--output", fresh)
    assert rc == 0, err
    assert _outputs(spark, out) == _outputs(spark, fresh)
    assert _state_hashes(out) == _state_hashes(fresh)


def test_a_record_without_its_input_files_is_input_unknown_said_once(spark, tmp_path, monkeypatch):
    """Records written before rewindow kept the files: still committed, the input unknown."""
    landing, out = _history(tmp_path)
    for day in DAYS:
        [record] = (out / "clicks-hourly" / day / "_commits").glob("*/part-*.json")
        doc = json.loads(record.read_text())
        extra = json.loads(doc["extra"])
        assert extra["inputs"]["folder"] == f"date={day}" and len(extra["inputs"]["files"]) == 4
        del extra["inputs"]
        record.write_text(json.dumps({**doc, "extra": json.dumps(extra)}) + "\n")
        record.with_name(f".{record.name}.crc").unlink()
    sorted((landing / f"date={DAYS[0]}").glob("*.parquet"))[0].unlink()  # unseen: nothing recorded to compare with
    status = _status(out, monkeypatch)
    assert "committed" in status[DAYS[0]] and "committed" in status[DAYS[1]], status[""]
    assert status[""].count("without a record of their input files") == 1, status[""]
    assert f"({DAYS[0]}, {DAYS[1]})" in status[""]


def test_status_of_a_local_history_starts_no_jvm(spark, tmp_path):
    """``rewindow status`` in a process of its own with no Java at all: it answers, naming the change."""
    landing, out = _history(tmp_path)
    _add(landing / f"date={DAYS[0]}")
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "PATH": os.path.dirname(sys.executable)}
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "rewindow"), "status", "--output", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "late-arrival.parquet (40 rows)" in proc.stdout and "2 out of date" in proc.stdout, proc.stdout


def test_an_hourly_history_marks_only_the_hours_a_late_file_reaches(spark, tmp_path):
    """Hours share their day's folder: a file landing later in the day (the normal case of a
    day still landing) changes the hours its arrival times reach, by its footer's statistics,
    not the hours before them; a file with a null arrival time reaches the day's first hour."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from windowing.chain import Chain
    from windowing.config import load_pipeline
    from windowing.partitions import Partitions
    from windowing.sample import generate_history
    from windowing.storage.input_record import InputRecord
    from windowing.storage.local_files import parquet_footer

    landing = tmp_path / "landing"
    generate_history(landing, START, days=1, events_per_day=300, keys=10, seed=3)
    pipeline = load_pipeline(CLICKS)
    hours = Partitions("hour", START)
    keys = hours.span(DAYS[0], DAYS[0])[:8]

    def chain(session):
        return Chain(session, pipeline, str(landing), str(tmp_path / "out"), hours)

    assert all(p.committed for p in chain(spark).replay(keys, checks=False))
    # The ranges recorded from the footers (parquet-java) are those pyarrow reads: status agrees with no JVM.
    record = InputRecord.of(chain(spark).commits([keys[3]])[keys[3]])
    assert record is not None and record.window is not None and len(record.files) == 4
    for f in record.files:
        assert f.arrival is not None and f.arrival == parquet_footer(str(landing / f.path), "arrival_time")[1]

    folder = landing / f"date={DAYS[0]}"
    t = pq.read_table(sorted(folder.glob("*.parquet"))[0])
    six = [r for r in t.to_pylist() if r["arrival_time"].hour == 6][:5]
    assert len(six) > 1
    pq.write_table(pa.Table.from_pylist(six, schema=t.schema), folder / "late-06.parquet")
    status = {s.key: s for s in chain(None).status(keys)}
    assert [status[k].status for k in keys] == ["committed"] * 6 + ["out of date"] * 2
    assert (
        f"late-06.parquet ({len(six)} rows)" in status[keys[6]].detail and "after a changed" in status[keys[7]].detail
    )

    nulls = dict(six[0], arrival_time=None)
    pq.write_table(pa.Table.from_pylist([nulls], schema=t.schema), folder / "late-null.parquet")
    status = {s.key: s for s in chain(None).status(keys)}
    assert status[keys[0]].status == "out of date" and "late-null.parquet (1 row)" in status[keys[0]].detail
    assert "late-06" not in status[keys[0]].detail


@pytest.mark.parametrize("days", [3, 12], ids=["folder-by-folder", "one-zone-listing"])
def test_changes_over_many_days_are_found_by_one_listing_of_the_zone_as_by_each_folder(tmp_path, days):
    """Many committed days are compared from one listing of the zone (an object store's
    recursive listing is a page per 1,000 files), with the answers folder listings give."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from windowing.storage import input_record as ir
    from windowing.storage.commits import Commit
    from windowing.storage.lake import Lake

    zone = tmp_path / "zone"
    table = pa.table({"arrival_time": pa.array([1, 2, 3], pa.int64())})
    commits = {}
    for d in range(days):
        folder = zone / f"date=2024-01-{d + 1:02d}"
        folder.mkdir(parents=True)
        for n in range(2):
            pq.write_table(table, folder / f"part-{n}.parquet")
        record = ir.InputRecord.of_listing(str(zone), folder.name, Lake(None).files(str(folder), within=str(zone)))
        commits[folder.name[5:]] = Commit(1, "r", "runs/r", "", "p", "f", {}, record.to_extra(), str(tmp_path))
    assert ir.input_changes(None, commits) == ({}, [])
    last = zone / f"date=2024-01-{days:02d}"
    pq.write_table(table, last / "late.parquet")
    (zone / "date=2024-01-01" / "part-1.parquet").unlink()
    changed, unknown = ir.input_changes(None, commits)
    assert unknown == [] and sorted(changed) == ["2024-01-01", f"2024-01-{days:02d}"]
    assert (
        changed[f"2024-01-{days:02d}"]
        .describe()
        .endswith(f"1 file added: date=2024-01-{days:02d}/late.parquet (3 rows)")
    )
    assert "1 file removed: date=2024-01-01/part-1.parquet" in changed["2024-01-01"].describe()
