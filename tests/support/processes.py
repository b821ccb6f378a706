"""Real ``rewindow replay`` processes for the fault tests, started in the background.

Each process starts its own Spark (tens of seconds), so the fault scenarios are launched
once, as early as possible (``cli_runs`` in conftest.py), and the tests that check them
(marked ``cli_runs``) are run last: meanwhile the rest of the suite runs.

* **killed**: a replay into a folder holding a previous output, SIGKILLed (with its whole
  process group, JVM included) as soon as its run folder appears (while Spark writes);
* **killed-committing**: the same, SIGKILLed as soon as its commit record starts to be
  written (the last step);
* **concurrent**: two replays of the same partition into the same, fresh folder, one of
  day 1's events and one of day 2's, so that a mix of the two would show.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

REWINDOW = str(Path(sys.executable).parent / "rewindow")
# Small and short-lived: the C1 JIT only and the serial GC halve a run's CPU time.
SPARK_ARGS = [
    "--master",
    "local[2]",
    "--conf",
    "spark.sql.shuffle.partitions=2",
    "--conf",
    "spark.driver.memory=1g",
    "--conf",
    "spark.sql.adaptive.enabled=false",
    "--conf",
    "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
]
TIMEOUT_S = 600


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) -> sha256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run_folders(out: Path) -> set[str]:
    return {p.name for p in (out / "runs").iterdir()} if (out / "runs").is_dir() else set()


def commit_folders(out: Path) -> set[str]:
    return {p.name for p in (out / "_commits").iterdir()} if (out / "_commits").is_dir() else set()


def start_replay(
    config: Path, events: Path | str, out: Path | str, log: Path, extra_args: Sequence[str] = ()
) -> subprocess.Popen:
    """``rewindow replay`` in its own process group (so a kill takes its JVM down too);
    ``extra_args`` go after :data:`SPARK_ARGS` (more ``--conf``)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [
                REWINDOW,
                "replay",
                "--config",
                str(config),
                "--input",
                str(events),
                "--output",
                str(out),
                *SPARK_ARGS,
                *extra_args,
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group we started, and wait until none of it is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def kill_when(proc: subprocess.Popen, out: Path, moment: str, timeout_s: float = TIMEOUT_S) -> str:
    """SIGKILL the run the moment a new run folder (``moment="write"``) or a new commit
    record folder (``moment="commit"``) appears under ``out``."""
    listing = run_folders if moment == "write" else commit_folders
    before = listing(out)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if listing(out) - before:
            kill_group(proc)
            return f"killed mid-{moment}"
        if proc.poll() is not None:
            return f"exited with {proc.returncode} before writing"
        time.sleep(0.005)
    kill_group(proc)
    return "timed out"


@dataclass
class Killed:
    moment: str  # "write" or "commit"
    out: Path
    before: dict[str, str]  # tree_digest of the previous output
    proc: subprocess.Popen
    log: Path
    outcome: Future


@dataclass
class CliRuns:
    killed: dict[str, Killed]
    concurrent_out: Path
    concurrent_inputs: list[Path]
    concurrent_procs: list[subprocess.Popen]
    concurrent_logs: list[Path]
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(2))

    @classmethod
    def start(cls, config: Path, events: Path, other_events: Path, previous_output: Path, base: Path) -> "CliRuns":
        import shutil

        conc = base / "concurrent"
        conc.mkdir()
        logs = [conc / f"run{i}.log" for i in range(2)]
        inputs = [events, other_events]
        procs = [start_replay(config, e, conc / "out", log) for e, log in zip(inputs, logs)]
        runs = cls({}, conc / "out", inputs, procs, logs)
        for moment in ("write", "commit"):
            out = shutil.copytree(previous_output, base / f"killed-{moment}" / "out")
            log = base / f"killed-{moment}" / "run.log"
            proc = start_replay(config, events, out, log)
            runs.killed[moment] = Killed(
                moment, out, tree_digest(out), proc, log, runs._pool.submit(kill_when, proc, out, moment)
            )
        return runs

    def stop(self) -> None:
        for p in [*(k.proc for k in self.killed.values()), *self.concurrent_procs]:
            if p.poll() is None:
                kill_group(p)
        self._pool.shutdown(wait=True)
