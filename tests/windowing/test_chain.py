"""The partition chain (windowing.chain) without Dagster: ranges, reruns, resumes, failures."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.histories import landing_with_odd_row
from tests.support.services import QUICK_JVM_OPTS
from windowing.chain import COMMITTED, FAILED, MISSING, OUT_OF_DATE, Chain, ChainError
from windowing.config import load_pipeline
from windowing.partitions import Partitions
from windowing.storage.store import state_content_hash

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
OUTPUTS = ("aggregates", "late_events", "rejected", "state")


# --------------------------------------------------------------------------- partitions (no Spark)


def test_partition_keys_are_dagsters_and_chain_backwards_to_the_start():
    days = Partitions("day", START)
    assert days.keys(None, "2024-01-03") == DAYS
    assert days.previous("2024-01-01") is None and days.previous("2024-01-03") == "2024-01-02"
    assert days.window("2024-01-02") == (START + timedelta(days=1), START + timedelta(days=2))
    hours = Partitions("hour", START)
    assert hours.span("2024-01-01", "2024-01-01")[0] == "2024-01-01-00:00"
    assert len(hours.span("2024-01-01", "2024-01-02")) == 48
    assert hours.previous("2024-01-01-05:00") == "2024-01-01-04:00"
    assert hours.span("2024-01-01T05", "2024-01-01T07") == ["2024-01-01-05:00", "2024-01-01-06:00", "2024-01-01-07:00"]
    assert hours.key_of(START + timedelta(hours=3, minutes=59)) == "2024-01-01-03:00"


def test_keys_of_year_1_have_four_digit_years():
    """Hostile run (issue 47), finding 6: ``--from 0001-01-01`` was echoed as ``1-01-01``
    (``strftime("%Y")`` on glibc), a key ``start_of`` then refused."""
    year1 = datetime(1, 1, 1, tzinfo=timezone.utc)
    assert Partitions("day", year1).span("0001-01-01", "0001-01-02") == ["0001-01-01", "0001-01-02"]
    assert Partitions("hour", year1).span("0001-01-01T00", "0001-01-01T01") == ["0001-01-01-00:00", "0001-01-01-01:00"]
    assert Partitions("day", START).key_of(datetime(999, 12, 31, 5, tzinfo=timezone.utc)) == "0999-12-31"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: Partitions("week", START), "not one of day, hour"),
        (lambda: Partitions("day", START + timedelta(hours=1)), "not the start of a day"),
        (lambda: Partitions("day", START).previous("2023-12-31"), "before the start of the history"),
        (lambda: Partitions("day", START).start_of("2024-01-01-05:00"), "not a day key"),
        (lambda: Partitions("day", START).span("2024-01-01T05", "2024-01-02"), "use --grain hour"),
    ],
)
def test_partitions_refuse_what_is_not_theirs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("committed", [True, False])
def test_a_staging_error_first_finishes_the_audit_of_the_partition_before(committed, monkeypatch):
    """Day 2 fails to stage while day 1 is audited: day 1 is yielded first, then day 2's
    error is raised if day 1 was committed; if not, the chain stops there (no Spark: the
    stage and the audit are stand-ins)."""
    from types import SimpleNamespace

    chain = Chain(None, load_pipeline(CLICKS), "/landing", "/out", Partitions("day", START))
    monkeypatch.setattr(chain, "starting_state", lambda key: None)
    staged_ok = SimpleNamespace(key=DAYS[0])

    def stage(key, start, **kwargs):
        if key == DAYS[1]:
            raise ChainError(f"cannot stage {key}", key)
        return staged_ok

    monkeypatch.setattr(chain, "_stage", stage)
    monkeypatch.setattr(chain, "_audit", lambda part, *args: SimpleNamespace(key=part.key, committed=committed))
    monkeypatch.setattr(chain, "_audited", lambda i, audit, n: audit.result())
    replay = chain.replay(DAYS)
    assert next(replay).key == DAYS[0]
    if committed:
        with pytest.raises(ChainError, match=f"cannot stage {DAYS[1]}"):
            next(replay)
    else:
        assert list(replay) == []


# --------------------------------------------------------------------------- the chain on Spark


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    from windowing.sample import generate_history

    out = tmp_path_factory.mktemp("chain-landing")
    generate_history(out, START, days=3, events_per_day=400, keys=25, seed=5)
    return out


def _chain(spark, landing, out) -> Chain:
    return Chain(spark, load_pipeline(CLICKS), str(landing), str(out), Partitions("day", START))


def _rows(spark, path) -> list:
    return sorted((tuple(r) for r in spark.read.parquet(str(path)).collect()), key=repr)


def _outputs(spark, chain: Chain, keys=DAYS) -> dict:
    commits = chain.commits(keys)
    assert set(commits) == set(keys), f"not all committed: {sorted(commits)}"
    return {(k, o): _rows(spark, f"{commits[k].run_path}/{o}") for k in keys for o in OUTPUTS}


@pytest.fixture(scope="module")
def whole(spark, history, tmp_path_factory) -> Chain:
    """The three days replayed in one call."""
    chain = _chain(spark, history, tmp_path_factory.mktemp("whole"))
    parts = list(chain.replay(DAYS, checks=False))
    assert [p.key for p in parts] == DAYS and all(p.committed for p in parts)
    return chain


def test_a_range_in_one_go_equals_partition_after_partition(spark, history, whole, tmp_path):
    expected = _outputs(spark, whole)
    assert sum(len(expected[d, "aggregates"]) for d in DAYS) > 300 and any(expected[d, "late_events"] for d in DAYS)
    for day in DAYS:  # a new Chain (a new process, in effect) per partition: state read from the store
        (part,) = _chain(spark, history, tmp_path).replay([day], checks=False)
        before = None if day == DAYS[0] else DAYS[DAYS.index(day) - 1]
        assert part.committed and part.lineage.previous_partition == before
    assert _outputs(spark, _chain(spark, history, tmp_path)) == expected
    # and both equal one replay of the three days' events, without partitions
    from windowing import replay
    from windowing.storage.inputs import read_events

    one = replay(spark, load_pipeline(CLICKS), read_events(spark, [str(history / f"date={d}") for d in DAYS]))
    try:
        assert sorted((tuple(r) for r in one.aggregates.collect()), key=repr) == sorted(
            (r for d in DAYS for r in expected[d, "aggregates"]), key=repr
        )
        assert state_content_hash(one.state) == whole.commits([DAYS[-1]])[DAYS[-1]].extra["lineage"]["state_hash"]
    finally:
        one.unpersist()
    assert [s.status for s in whole.status()] == [COMMITTED] * 3


def test_a_partition_needs_the_state_of_the_one_before(spark, history, tmp_path):
    chain = _chain(spark, history, tmp_path)
    with pytest.raises(ChainError, match="state of partition 2024-01-01 is missing") as info:
        list(chain.replay(["2024-01-02"]))
    assert info.value.partition == "2024-01-02"
    with pytest.raises(ChainError, match="not consecutive"):
        list(chain.replay(["2024-01-01", "2024-01-03"]))
    assert not (tmp_path / "clicks-hourly").exists()  # refused before any work


def test_a_rerun_of_a_middle_partition_marks_later_ones_until_a_backfill_from_there(spark, history, whole, tmp_path):
    """Day 2 gains an event (history fixed upstream): rerunning day 2 changes its state, so
    day 3 is out of date and refuses to be continued; replaying 2..3 makes the history
    equal to a fresh full run over the fixed landing zone."""
    out = tmp_path / "out"
    shutil.copytree(Path(whole.output_root), out)
    fixed = landing_with_odd_row(history, tmp_path, "2024-01-02", user_id=lambda u: "user-new")
    chain = _chain(spark, fixed, out)
    assert [s.status for s in chain.status()] == [COMMITTED] * 3
    (part,) = chain.replay(["2024-01-02"], checks=False)
    assert part.committed
    status = {s.key: s for s in chain.status()}
    assert status["2024-01-02"].status == COMMITTED
    assert status["2024-01-03"].status == OUT_OF_DATE and "rerun since" in status["2024-01-03"].detail
    assert [s.partition for s in chain.out_of_date()] == ["2024-01-03"]
    assert chain.resume_point(DAYS) == "2024-01-03"
    list(chain.replay(["2024-01-03"], checks=False))
    assert [s.status for s in chain.status()] == [COMMITTED] * 3
    fresh = _chain(spark, fixed, tmp_path / "fresh")
    list(fresh.replay(DAYS, checks=False))
    assert _outputs(spark, chain) == _outputs(spark, fresh)
    assert _outputs(spark, chain) != _outputs(spark, whole)  # the extra event did change something


def test_a_failing_partition_is_not_committed_stops_the_chain_and_shows_failed(spark, history, tmp_path):
    """Day 2 holds an event stamped 30 days before its arrival: its blocking input check fails."""
    landing = landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    chain = _chain(spark, landing, tmp_path / "out")
    parts = list(chain.replay(DAYS))
    assert [(p.key, p.committed) for p in parts] == [("2024-01-01", True), ("2024-01-02", False)]
    assert "input_event_time_skew" in parts[1].lineage.failed_checks
    status = {s.key: s for s in chain.status(DAYS)}
    assert status["2024-01-01"].status == COMMITTED
    assert status["2024-01-02"].status == FAILED and "input_event_time_skew" in status["2024-01-02"].detail
    assert status["2024-01-02"].run_path == parts[1].run_path  # the staged run, kept for inspection
    assert status["2024-01-03"].status == MISSING
    # Day 3 replays while day 2 is checked; day 2 failed, so its staged run is gone again.
    assert not list(Path(chain.folder("2024-01-03")).glob("runs/*"))
    assert [s.key for s in chain.status()] == DAYS[:2]  # the history ends at the failed partition
    with pytest.raises(ChainError, match="state of partition 2024-01-02 is missing"):
        list(chain.replay(["2024-01-03"]))
    # Fixed input: a rerun of day 2 commits, and its failure record is history.
    (landing / "date=2024-01-02" / "zz-odd.parquet").unlink()
    (part,) = chain.replay(["2024-01-02"])
    assert part.committed and chain.status(["2024-01-02"])[0].status == COMMITTED


def test_after_a_failing_partition_the_next_ones_errors_are_not_reported(spark, history, tmp_path):
    """Day 3 replays while day 2 is checked. Day 2 fails its checks and day 3's input is not
    Parquet: the run ends at day 2, as it would have without the overlap, not with day 3's error."""
    landing = landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    (landing / "date=2024-01-03" / "zz-broken.parquet").write_bytes(b"not parquet")
    chain = _chain(spark, landing, tmp_path / "out")
    parts = list(chain.replay(DAYS))
    assert [(p.key, p.committed) for p in parts] == [("2024-01-01", True), ("2024-01-02", False)]
    assert not Path(chain.folder("2024-01-03")).exists()
    # Day 2 fixed: the run goes on to day 3, whose error is then the run's.
    (landing / "date=2024-01-02" / "zz-odd.parquet").unlink()
    with pytest.raises(ChainError, match="zz-broken.parquet"):
        list(chain.replay(DAYS[1:]))
    assert chain.status(DAYS[1:2])[0].status == COMMITTED


@pytest.mark.parametrize("passes", [False, True], ids=["one-by-one", "in-a-pass"])
def test_resume_after_a_killed_backfill_goes_on_where_it_stopped(spark, history, whole, tmp_path, passes):
    """``rewindow backfill`` killed (SIGKILL) while day 2 is being written: ``--resume``
    keeps day 1 as it is and replays 2..3; the history equals the one-go replay. In a pass
    (the three days replayed together), killed while the pass writes: nothing of it is
    committed, and ``--resume`` replays the three days."""
    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-m",
        "windowing.cli",
        "backfill",
        "--config",
        str(CLICKS),
        "--input",
        str(history),
        "--output",
        str(out),
        "--from",
        DAYS[0],
        "--to",
        DAYS[-1],
        "--no-checks",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--master",
        "local[1]",
        "--conf",
        f"spark.driver.extraJavaOptions={QUICK_JVM_OPTS}",
        *([] if passes else ["--conf", "spark.rewindow.partitionsPerPass=1"]),
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, start_new_session=True
    )
    day1_commits = out / "clicks-hourly" / "2024-01-01" / "_commits"
    day2_runs = out / "clicks-hourly" / "2024-01-02" / "runs"
    pass_writes = out / "clicks-hourly" / "_passes"

    def ready() -> bool:
        if passes:  # the pass's outputs being written, before any of its runs exist
            try:
                return pass_writes.is_dir() and any(pass_writes.rglob("*.parquet"))
            except FileNotFoundError:  # a folder Spark removed while it was walked
                return False
        # Day 2 replays while day 1 is committed (its audit overlaps the next replay): wait
        # for both, so that the kill lands with day 1 committed and day 2 being written.
        return any(day1_commits.glob("*/_SUCCESS")) and day2_runs.is_dir() and any(day2_runs.iterdir())

    deadline = time.monotonic() + 180
    try:
        while not ready():
            assert proc.poll() is None, "the backfill ended before it could be killed"
            assert time.monotonic() < deadline, "day 2 never started"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            import os

            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Spark JVM
        proc.wait(30)
    chain = _chain(spark, history, out)
    before = chain.commits(DAYS)
    if passes:
        assert list(before) == [] and chain.resume_point(DAYS) == "2024-01-01"
    else:
        assert list(before) == ["2024-01-01"]  # day 2 was staged at most, never committed
        assert chain.resume_point(DAYS) == "2024-01-02"
    from windowing.cli import main

    assert (
        main(
            [
                "backfill",
                "--config",
                str(CLICKS),
                "--input",
                str(history),
                "--output",
                str(out),
                "--from",
                DAYS[0],
                "--to",
                DAYS[-1],
                "--resume",
                "--no-checks",
            ]
        )
        == 0
    )
    after = chain.commits(DAYS)
    if not passes:
        assert after["2024-01-01"].run_id == before["2024-01-01"].run_id  # not replayed again
    assert _outputs(spark, chain) == _outputs(spark, whole)
