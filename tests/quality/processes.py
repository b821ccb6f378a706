"""Real ``rewindow replay`` processes for the fault tests, started in the background.

Each process starts its own Spark (tens of seconds), so the fault scenarios are launched
once, as early as possible (``cli_runs`` in conftest.py), and the tests that check them
(marked ``cli_runs``) are run last: meanwhile the rest of the suite runs.

* **killed**: a replay into a folder holding a previous output, SIGKILLed (with its whole
  process group, JVM included) as soon as its staging folder appears;
* **concurrent**: two replays of the same partition into the same, fresh folder.
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

REWINDOW = str(Path(sys.executable).parent / "rewindow")
# Small and short-lived: the C1 JIT only and the serial GC halve a run's CPU time.
SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2",
              "--conf", "spark.driver.memory=1g", "--conf", "spark.sql.adaptive.enabled=false",
              "--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"]
TIMEOUT_S = 600


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones too) -> sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def staging_folders(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.staging-*"))


def leftovers(out: Path) -> list[Path]:
    return staging_folders(out) + sorted(out.parent.glob(f".{out.name}.old-*"))


def start_replay(config: Path, events: Path, out: Path, log: Path) -> subprocess.Popen:
    """``rewindow replay`` in its own process group (so a kill takes its JVM down too)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as fh:
        return subprocess.Popen(
            [REWINDOW, "replay", "--config", str(config), "--input", str(events), "--output", str(out), *SPARK_ARGS],
            stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
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


def kill_when_writing(proc: subprocess.Popen, out: Path, timeout_s: float = TIMEOUT_S) -> str:
    """Poll for ``out``'s staging folder; SIGKILL the run the moment it appears."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if staging_folders(out):
            kill_group(proc)
            return "killed mid-write"
        if proc.poll() is not None:
            return f"exited with {proc.returncode} before writing"
        time.sleep(0.005)
    kill_group(proc)
    return "timed out"


@dataclass
class CliRuns:
    killed_out: Path
    killed_before: dict[str, str]  # tree_digest of the previous output
    killed_proc: subprocess.Popen
    killed_log: Path
    killed: Future
    concurrent_out: Path
    concurrent_procs: list[subprocess.Popen]
    concurrent_logs: list[Path]
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))

    @classmethod
    def start(cls, config: Path, events: Path, previous_output: Path, base: Path) -> "CliRuns":
        import shutil

        killed_out = shutil.copytree(previous_output, base / "killed" / "out")
        before = tree_digest(killed_out)
        conc = base / "concurrent"
        conc.mkdir()
        logs = [conc / f"run{i}.log" for i in range(2)]
        procs = [start_replay(config, events, conc / "out", log) for log in logs]
        killed_proc = start_replay(config, events, killed_out, base / "killed" / "run.log")
        runs = cls(killed_out, before, killed_proc, base / "killed" / "run.log", None, conc / "out", procs, logs)
        runs.killed = runs._pool.submit(kill_when_writing, killed_proc, killed_out)
        return runs

    def stop(self) -> None:
        for p in [self.killed_proc, *self.concurrent_procs]:
            if p.poll() is None:
                kill_group(p)
        self._pool.shutdown(wait=True)
