"""Faults while writing: a replay killed mid-write, two runs writing the same partition,
and the pieces of ``windowing.io`` that make both safe (the output lock, the atomic swap,
the clean-up of what a killed writer leaves).

The command-line runs are real ``rewindow replay`` processes, each with its own Spark,
started in the background at the beginning of the session (``cli_runs``, processes.py);
the tests checking them are marked ``cli_runs`` and run last.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from tests.quality.conftest import rows
from tests.quality.processes import TIMEOUT_S, leftovers, staging_folders, tree_digest
from windowing import io


def assert_same_output(spark, a: Path, b: Path) -> None:
    for name in io.OUTPUTS:
        assert (a / name / "_SUCCESS").exists(), f"{a / name} incomplete"
        assert rows(spark.read.parquet(str(a / name))) == rows(spark.read.parquet(str(b / name))), name
    assert json.loads((a / "metrics.json").read_text()) == json.loads((b / "metrics.json").read_text())


@pytest.mark.cli_runs
def test_a_replay_killed_mid_write_leaves_the_previous_output_intact(spark, replayed, cli_runs, monkeypatch):
    from windowing import cli

    r, run = replayed("clicks"), cli_runs
    outcome = run.killed.result(timeout=TIMEOUT_S)
    assert outcome == "killed mid-write", outcome + "\n" + run.killed_log.read_text()[-3000:]
    assert run.killed_proc.returncode == -signal.SIGKILL
    out = run.killed_out
    assert staging_folders(out), "the kill did not land mid-write"
    assert tree_digest(out) == run.killed_before  # the previous output, byte for byte

    # Rerun (the same command line, in this process's Spark): complete, as if never interrupted.
    monkeypatch.setattr(cli, "_spark", lambda args: spark)
    assert cli.main(["replay", "--config", str(r.config), "--input", str(r.day1), "--output", str(out)]) == 0
    assert leftovers(out) == []
    assert_same_output(spark, out, r.out1)


@pytest.mark.cli_runs
def test_two_concurrent_runs_of_a_partition_leave_one_complete_correct_output(spark, replayed, cli_runs):
    for proc, log in zip(cli_runs.concurrent_procs, cli_runs.concurrent_logs):
        assert proc.wait(timeout=TIMEOUT_S) == 0, log.read_text()[-3000:]
    out = cli_runs.concurrent_out
    assert leftovers(out) == []
    assert io.lock_path(out).exists()
    assert_same_output(spark, out, replayed("clicks").out1)


# --------------------------------------------------------------------------- io without Spark


class _FakeWrite:
    """Stands in for ``DataFrame.write``: slow, and logs when it runs (under the lock)."""

    def __init__(self, tag: str, log: Path, delay: float):
        self.tag, self.log, self.delay = tag, log, delay

    def mode(self, mode):
        assert mode == "error"
        return self

    def parquet(self, path):
        p = Path(path)
        p.mkdir(parents=True)
        with open(self.log, "a") as fh:
            fh.write(f"{self.tag} start {time.time()}\n")
        for i in range(3):
            (p / f"part-{i}").write_text(self.tag)
            time.sleep(self.delay)
        (p / "_SUCCESS").write_text("")
        with open(self.log, "a") as fh:
            fh.write(f"{self.tag} end {time.time()}\n")


class _FakeFrame:
    def __init__(self, *args):
        self.write = _FakeWrite(*args)


class FakeResult:
    def __init__(self, tag: str, log: Path, delay: float = 0.0):
        for name in io.OUTPUTS:
            setattr(self, name, _FakeFrame(tag, log, delay))
        self.metrics = {"writer": tag}


def _write_as(out: str, tag: str, log: str, delay: float) -> None:
    io.write_outputs(FakeResult(tag, Path(log), delay), out)


def _only_writer(out: Path) -> set[str]:
    return {p.read_text() for p in out.rglob("part-*")} | {json.loads((out / "metrics.json").read_text())["writer"]}


def test_the_output_lock_makes_two_writer_processes_take_turns(tmp_path):
    out, log = tmp_path / "out", tmp_path / "log"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_as, args=(str(out), tag, str(log), 0.05)) for tag in ("A", "B")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    spans: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        tag, _, t = line.split()
        spans.setdefault(tag, []).append(float(t))
    (a0, a1), (b0, b1) = ((min(v), max(v)) for v in (spans["A"], spans["B"]))
    assert a1 <= b0 or b1 <= a0, f"writes overlapped: A {a0}-{a1}, B {b0}-{b1}"
    assert len(_only_writer(out)) == 1  # one writer's complete output, not a mix
    assert leftovers(out) == []


def test_without_renameat2_the_swap_still_replaces_the_output(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    out, log = tmp_path / "out", tmp_path / "log"
    io.write_outputs(FakeResult("A", log), out)
    io.write_outputs(FakeResult("B", log), out)
    assert _only_writer(out) == {"B"}
    assert leftovers(out) == []


def test_the_next_write_repairs_what_a_killed_writer_left(tmp_path):
    """Killed between the fallback swap's two renames: no output, the previous one set aside."""
    out, log = tmp_path / "out", tmp_path / "log"
    io.write_outputs(FakeResult("A", log), out)
    os.rename(out, tmp_path / ".out.old-1234abcd")
    (tmp_path / ".out.staging-5678abcd" / "aggregates").mkdir(parents=True)  # a half-written staging
    with io.output_lock(out):
        io._recover(out)
    assert _only_writer(out) == {"A"} and leftovers(out) == []


def test_a_failing_write_keeps_the_previous_output(tmp_path):
    out, log = tmp_path / "out", tmp_path / "log"
    io.write_outputs(FakeResult("A", log), out)
    before = tree_digest(out)
    broken = FakeResult("B", log)
    broken.state.write.parquet = lambda path: (_ for _ in ()).throw(RuntimeError("disk full"))
    with pytest.raises(RuntimeError, match="disk full"):
        io.write_outputs(broken, out)
    assert tree_digest(out) == before
    assert leftovers(out) == []
