"""Faults while writing: replays killed while writing and while committing, two runs
committing the same partition, a write that fails, and what a killed run leaves behind.

The command-line runs are real ``rewindow replay`` processes, each with its own Spark,
started in the background at the beginning of the session (``cli_runs``, processes.py);
the tests checking them are marked ``cli_runs`` and run last.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.quality.conftest import rows
from tests.support.outputs import commits, current, metrics, run_dir
from tests.support.processes import TIMEOUT_S, run_folders, tree_digest
from tests.support.services import QUICK_JVM_OPTS
from windowing.contract import OUTPUTS
from windowing.storage.commits import new_run_id, prune
from windowing.storage.errors import OutputError
from windowing.storage.outputs import read_outputs, write_outputs


def assert_same_output(spark, a: Path, b: Path) -> None:
    """Two outputs' current runs hold the same rows and metrics."""
    ra, rb = run_dir(a), run_dir(b)
    for name in OUTPUTS:
        assert (ra / name / "_SUCCESS").exists(), f"{ra / name} incomplete"
        assert rows(spark.read.parquet(str(ra / name))) == rows(spark.read.parquet(str(rb / name))), name
    assert metrics(a) == metrics(b)


@pytest.mark.cli_runs
@pytest.mark.parametrize("moment", ["write", "commit"])
def test_a_killed_replay_leaves_the_previous_output_current_and_a_rerun_completes_it(
    spark, replayed, cli_runs, monkeypatch, moment
):
    from windowing import cli, command_line
    from windowing.storage import commits as commit_records

    r, k = replayed("clicks"), cli_runs.killed[moment]
    outcome = k.outcome.result(timeout=TIMEOUT_S)
    assert outcome == f"killed mid-{moment}", outcome + "\n" + k.log.read_text()[-3000:]
    assert k.proc.returncode == -signal.SIGKILL
    out = k.out
    after = tree_digest(out)
    # Everything the previous output had is there, byte for byte ...
    assert {f: after.get(f) for f in k.before} == k.before
    # ... and the killed run left only uncommitted files: the previous run is still current.
    previous = current(r.out2)
    if moment == "write":
        assert current(out) == previous
    else:
        # Killed while the record was being written: Spark's committer moves the one record
        # file into place in a single rename, so the new run is either current and complete
        # or not current at all.
        assert current(out) == previous or all((run_dir(out) / n / "_SUCCESS").exists() for n in OUTPUTS)
    assert_same_output(spark, out, r.out2 if current(out) == previous else r.out1)

    # Rerun (the same command line, in this process's Spark): complete, as if never interrupted,
    # and the abandoned run folder is swept (its age limit set to zero for the test).
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    monkeypatch.setattr(commit_records, "ABANDONED_AFTER_S", 0)
    assert cli.main(["replay", "--config", str(r.config), "--input", str(r.day1), "--output", str(out)]) == 0
    assert_same_output(spark, out, r.out1)
    assert run_folders(out) == {c["run_id"] for c in commits(out)}


@pytest.mark.cli_runs
def test_two_concurrent_runs_of_a_partition_the_last_commit_wins_as_a_whole(spark, replayed, cli_runs):
    """Both runs complete and commit; the record that sorts last (sequence, then run id)
    names the current run, and that run's outputs are its own, whole."""
    from windowing import load_pipeline, replay
    from windowing.storage.inputs import read_events

    r = replayed("clicks")
    run_ids = []
    for proc, log in zip(cli_runs.concurrent_procs, cli_runs.concurrent_logs):
        assert proc.wait(timeout=TIMEOUT_S) == 0, log.read_text()[-3000:]
        run_ids.append(re.search(r"runs/([0-9TZ]+-[0-9a-f]{8})/", log.read_text()).group(1))
    out = cli_runs.concurrent_out
    recs = commits(out)
    assert sorted(c["run_id"] for c in recs) == sorted(run_ids)
    winner = recs[-1]
    assert winner == max(recs, key=lambda c: (c["seq"], c["run_id"]))
    events = cli_runs.concurrent_inputs[run_ids.index(winner["run_id"])]
    # The current output is exactly the winner's input replayed, dataset by dataset.
    expected = replay(spark, load_pipeline(r.config), read_events(spark, [str(events)]))
    try:
        for name in OUTPUTS:
            got = rows(spark.read.parquet(str(out / winner["run"] / name)))
            assert got == rows(getattr(expected, name)), name
        assert metrics(out) == expected.metrics
    finally:
        expected.unpersist()
    assert run_folders(out) == set(run_ids)


def test_a_failing_write_keeps_the_previous_output_current(spark, replayed, tmp_path):
    """A write that fails part-way (here: the state) commits nothing and names the path."""
    import shutil
    from dataclasses import replace

    from pyspark.sql import functions as F

    r = replayed("clicks")
    out = shutil.copytree(r.out1, tmp_path / "out")
    before = current(out)
    broken = read_outputs(spark, r.out1)
    broken = replace(broken, state=spark.range(1).select(F.raise_error(F.lit("No space left on device")).alias("x")))
    with pytest.raises(OutputError, match=r"state: cannot write: .*No space left on device"):
        write_outputs(broken, str(out))
    assert current(out) == before
    assert read_outputs(spark, str(out)).commit.run_id == before["run_id"]


def test_runs_that_never_committed_are_swept_once_abandoned(spark, replayed, tmp_path, monkeypatch):
    import shutil

    r = replayed("clicks")
    out = shutil.copytree(r.out1, tmp_path / "out")
    (out / "runs" / "20200101T000000000000Z-deadbeef" / "aggregates").mkdir(parents=True)  # a killed run's
    recent = out / "runs" / f"{new_run_id()}" / "aggregates"  # a run still writing: too young
    recent.mkdir(parents=True)
    deleted = prune(spark, str(out))
    assert [Path(p.removeprefix("file:")).name for p in deleted] == ["20200101T000000000000Z-deadbeef"]
    assert recent.exists() and run_folders(out) == {current(out)["run_id"], recent.parent.name}


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size, read_only=False)``: a real small filesystem mounted under tmp_path
    (needs root, as in CI; skipped otherwise), unmounted afterwards."""
    import os

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []

    def mount(size: str, read_only: bool = False) -> Path:
        target = tmp_path / f"mnt{len(mounted)}"
        target.mkdir()
        opts = f"size={size}" + (",ro" if read_only else "")
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], capture_output=True)
        if proc.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _without_progress(err: str) -> str:
    """stderr without the CLI's own progress lines (``rewindow: [1/3] ...``)."""
    return "".join(line for line in err.splitlines(keepends=True) if not re.match(r"rewindow: \[\d+/\d+\]", line))


def test_a_read_only_target_fails_before_the_replay_naming_it(spark, replayed, tmpfs, monkeypatch, capsys):
    """Issue 8 item 8: a read-only output used to fail only after the whole replay."""
    from windowing import cli, command_line
    from windowing.runner import replay as job

    r = replayed("clicks")
    target = tmpfs("1m", read_only=True) / "out"
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    monkeypatch.setattr(job, "replay", lambda *a, **k: pytest.fail("the replay ran"))
    code = cli.main(["replay", "--config", str(r.config), "--input", str(r.day1), "--output", str(target)])
    err = _without_progress(capsys.readouterr().err)
    assert code == 2 and err.startswith(f"rewindow: error: {target}: cannot write here")
    assert len(err.strip().splitlines()) == 1


def test_a_full_disk_is_one_line_naming_the_dataset_and_commits_nothing(spark, replayed, tmpfs, monkeypatch, capsys):
    """Issue 8 item 8: a full disk gave a raw shutil.Error or a 600-line Java trace."""
    from windowing import cli, command_line

    r = replayed("clicks")
    target = tmpfs("24k") / "out"
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main(["replay", "--config", str(r.config), "--input", str(r.day1), "--output", str(target)])
    err = _without_progress(capsys.readouterr().err)
    assert code == 2, err
    assert re.match(rf"rewindow: error: {re.escape(str(target))}/runs/[^/]+/\w+: cannot write: ", err), err
    assert len(err.strip().splitlines()) == 1
    assert not (target / "_commits").exists()  # nothing committed: readers see no output


def test_the_write_probe_of_a_relative_output_leaves_nothing_behind(tmp_path):
    """The probe creates ``<out>/runs`` to learn the target is writable; a run refused
    after it (here: the probe alone) must not leave the empty folders it made, relative
    paths included (``--output out3`` used to leave ``out3/runs``). Hadoop resolves a
    relative path against the JVM's working folder, so the probe runs in a process
    started in ``tmp_path``."""
    import os
    import sys

    code = (
        "from windowing.runner.session import spark_session; "
        "from windowing.storage.outputs import check_output_target; "
        f"s = spark_session(conf={{'spark.driver.extraJavaOptions': {QUICK_JVM_OPTS!r}}}); "
        "[check_output_target(s, o) for o in ('out3', 'new/out3')]"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_write_probe_never_removes_folders_a_concurrent_run_is_writing_into(spark, tmp_path, monkeypatch):
    """Two backfills of one range start together on a missing output. The first one's probe
    used to create ``out/runs``, and then remove it as its own empty leftovers, while the
    other run had started writing into it (Spark's write then failed: "Mkdirs failed").
    The probe now removes only its own uniquely named folder."""
    from windowing.storage import outputs
    from windowing.storage.lake import Lake

    out = tmp_path / "root" / "clicks"
    concurrent = out / "runs" / new_run_id()
    real_mkdirs = Lake.mkdirs

    def mkdirs_while_another_run_starts(self, path):
        made = real_mkdirs(self, path)
        # The other run's mkdirs, halfway: it made (or found) out/runs, and has yet to make its own folder in it.
        concurrent.parent.mkdir(parents=True, exist_ok=True)
        return made

    monkeypatch.setattr(Lake, "mkdirs", mkdirs_while_another_run_starts)
    outputs.check_output_target(spark, str(out))
    concurrent.mkdir()  # the other run's last step: its run folder in out/runs (which must still be there)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["root"]  # the probe itself is gone
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["clicks"]


def test_a_probe_in_progress_is_not_taken_for_a_foreign_file(spark, tmp_path):
    """A concurrent run's probe folder, seen for a moment in an existing output, is rewindow's own."""
    from windowing.storage import outputs

    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / f"{outputs.PROBE_PREFIX}0123").mkdir()
    outputs.check_output_target(spark, str(out))
    (out / "thesis.tex").write_text("x")
    with pytest.raises(OutputError, match="thesis.tex"):
        outputs.check_output_target(spark, str(out))
