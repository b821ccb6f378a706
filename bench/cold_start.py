"""Benchmark: a cold ``rewindow replay``, phase by phase, with and without the archive of Spark's classes.

Every CLI command and every Dagster run is a fresh process with a fresh JVM
(:mod:`windowing.runner.jvm_classes`). This generates a history (``--events`` over one
day), then runs ``rewindow replay`` of the quick start's hourly pipeline on it, each run a
new process, alternating a run that maps the archive with one that does not
(``REWINDOW_SPARK_CLASSES=off``), ``--repeat`` times each. It times each run's phases from
its own progress lines (stderr) and summary (stdout):

* ``python``: from the process start to ``[1/3] starting Spark`` (the interpreter, the
  CLI's imports, the YAML checked);
* ``jvm``: to ``[2/3] replaying`` (the driver JVM started, the session built);
* ``plan``: to ``[3/3] writing outputs`` (the input checked, its rows counted per worker,
  the replay planned);
* ``run``: to the ``replayed ...`` summary (the kernel's job and the writes, which Spark
  runs together, then the commit);
* ``exit``: to the process's end (the session stopped, the JVM gone);

and prints the median of each, then ``cold_seconds_with_archive=X.X`` and
``cold_seconds_without_archive=X.X``. The archive is made first if it is missing.

    python bench/cold_start.py                       # 50,000 events, 3 runs a side
    python bench/cold_start.py --events 10000000     # the full-size cold replay
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from windowing.runner import jvm_classes  # noqa: E402
from windowing.sample import generate_history  # noqa: E402

CONFIG = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
#: The progress line that ends each phase (the last phase ends with the process).
MARKS = (("python", "[1/3] starting Spark"), ("jvm", "[2/3] replaying"), ("plan", "[3/3] writing"))
PHASES = (*(name for name, _ in MARKS), "run", "exit")


def cold_run(day: Path, out: Path, env: dict[str, str], master: str) -> dict[str, float]:
    """One ``rewindow replay`` in a new process: each phase's seconds."""
    argv = [sys.executable, "-m", "windowing.cli", "replay", "--config", str(CONFIG), "--input", str(day)]
    argv += ["--output", str(out), "--master", master]
    began = time.monotonic()
    seen: dict[str, float] = {}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    assert proc.stdout is not None
    for line in proc.stdout:  # ends when the JVM, which shares the pipe, is gone too
        now = time.monotonic() - began
        for name, mark in MARKS:
            if mark in line and name not in seen:
                seen[name] = now
        if line.startswith("replayed ") and "run" not in seen:
            seen["run"] = now
    if proc.wait() != 0 or len(seen) < len(PHASES) - 1:
        raise SystemExit(f"rewindow replay failed (exit {proc.returncode}): phases seen {sorted(seen)}")
    seen["exit"] = time.monotonic() - began
    ends = [seen[p] for p in PHASES]
    return {p: end - start for p, start, end in zip(PHASES, [0.0, *ends], ends)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--keys", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3, help="cold runs of each side (medians reported)")
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    archive = jvm_classes.archive_path()
    if archive is None:
        raise SystemExit(f"no archive possible: no java, or {jvm_classes.SWITCH_ENV}=off")
    if not archive.is_file():
        print(f"making {archive} ...", file=sys.stderr)
        if not jvm_classes.make(archive):
            raise SystemExit(f"could not make {archive}")
    sides = {"with_archive": env, "without_archive": {**env, jvm_classes.SWITCH_ENV: "off"}}
    times: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="rewindow-cold-") as tmp:
        start = datetime(2024, 1, 1, tzinfo=timezone.utc)
        [day] = generate_history(Path(tmp) / "in", start, days=1, events_per_day=args.events, keys=args.keys)
        for i in range(args.repeat):
            for side, side_env in sides.items():
                times[side].append(cold_run(day, Path(tmp) / f"out-{side}-{i}", side_env, args.master))
                print(f"{side} run {i + 1}: {sum(times[side][-1].values()):.1f} s", file=sys.stderr)
    print(f"{'phase':<8}" + "".join(f"{side:>18}" for side in sides))
    for phase in PHASES:
        print(f"{phase:<8}" + "".join(f"{statistics.median(t[phase] for t in times[s]):>18.2f}" for s in sides))
    for side in sides:
        print(f"cold_seconds_{side}={statistics.median(sum(t.values()) for t in times[side]):.1f}")


if __name__ == "__main__":
    main()
