"""Soak: thousands of small replays in one Spark session, with their memory sampled.

A backfill of a year of hourly partitions, a notebook and a long-lived service all run
thousands of replays in one session (issue 50). This runs ``--replays`` small replays of
the quick start's hourly pipeline (``examples/pipelines/clicks-hourly.yaml``) in one
session, each from nothing or (a quarter of them) from a carried state read from Parquet, each released one of
the three ways a caller can: a ``with`` block, ``unpersist()``, or dropped (a result
Python collects releases itself). Every ``--every`` replays it samples, after a full GC:

* the driver JVM's heap and non-heap (metaspace, code cache) in use, and its resident size;
* the driver's Python process and the largest Spark Python worker, resident;
* what Spark still holds: cached RDDs, the SQL status store's executions, the listener
  bus's listeners, and the py4j proxies alive in Python.

and prints a table, then ``growth_per_1000_replays_*`` (a least-squares slope over the
samples after the first quarter, in MB, or entries, per 1,000 replays).

    python bench/soak.py --replays 10000     # docs/architecture.md, "A Spark session that lasts"

``--chain`` backfills ``--replays`` hourly partitions through one partition chain instead
(:func:`chain_soak`: ``--every`` partitions a run, many of them a pass, each checked and
committed on its own; 240 events a day), and samples after every run:

    python bench/soak.py --chain --replays 2000 --every 100

``tests/windowing/test_soak.py`` runs this script twice (``--chain --replays 2000``,
``--replays 150``, Spark's status store bounded at 50) and asserts the figures are flat.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent
PIPELINE = REPO / "examples" / "pipelines" / "clicks-hourly.yaml"
MB = 2**20


@dataclass(frozen=True)
class Sample:
    """What one session holds after ``replays`` replays (memory in MB, after a full GC)."""

    replays: int
    seconds: float
    jvm_heap: float
    jvm_nonheap: float
    jvm_rss: float
    driver_rss: float
    worker_rss: float
    cached_rdds: int
    sql_executions: int
    listeners: int
    py4j_proxies: int


#: The figures whose growth :func:`slopes` reports, and the test bounds.
FIGURES = (
    "jvm_heap",
    "jvm_nonheap",
    "jvm_rss",
    "driver_rss",
    "worker_rss",
    "cached_rdds",
    "sql_executions",
    "listeners",
    "py4j_proxies",
)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB
    except OSError:
        return 0.0


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (Spark's Python daemon and its workers, for the JVM)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    below, frontier = [], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        below += frontier
    return below


def sample(spark: Any, replays: int, began: float) -> Sample:
    """The session's figures now (a full GC in the JVM and in Python first)."""
    from py4j.java_gateway import JavaObject

    gc.collect()
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.gc()
    memory = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
    workers = [_rss_mb(pid) for pid in _descendants(jvm_pid)]
    jsc = spark.sparkContext._jsc
    return Sample(
        replays=replays,
        seconds=round(time.monotonic() - began, 1),
        jvm_heap=memory.getHeapMemoryUsage().getUsed() / MB,
        jvm_nonheap=memory.getNonHeapMemoryUsage().getUsed() / MB,
        jvm_rss=_rss_mb(jvm_pid),
        driver_rss=_rss_mb(os.getpid()),
        worker_rss=max(workers, default=0.0),
        cached_rdds=int(jsc.getPersistentRDDs().size()),
        sql_executions=int(spark._jsparkSession.sharedState().statusStore().executionsCount()),
        listeners=int(jsc.sc().listenerBus().listeners().size()),
        py4j_proxies=sum(1 for o in gc.get_objects() if isinstance(o, JavaObject)),
    )


def soak(
    spark: Any,
    replays: int,
    every: int,
    workdir: Path,
    report: Callable[[Sample], None] = lambda s: None,
) -> list[Sample]:
    """Run ``replays`` small replays in ``spark``'s session; return a sample every ``every``.

    Raises AssertionError if a replay's aggregates (read every 50th replay, and the one
    after) differ from the first ones' with the same input and state: a session that
    degrades shows here first."""
    from pyspark.sql import functions as F

    from windowing import load_pipeline, replay
    from windowing.sample import generate_history
    from windowing.storage.outputs import read_state

    pipeline = load_pipeline(PIPELINE)
    days = generate_history(
        workdir / "landing", datetime(2026, 1, 1, tzinfo=timezone.utc), 2, 400, 20, partitions=2, files_per_day=2
    )
    inputs = [spark.read.parquet(str(day)) for day in days]
    with replay(spark, pipeline, inputs[0]) as first:
        first.state.write.parquet(str(workdir / "state"))
    carried = read_state(spark, str(workdir / "state"))
    expected: dict[int, int] = {}
    began = time.monotonic()
    samples = [sample(spark, 0, began)]
    report(samples[-1])
    for i in range(1, replays + 1):
        carry = i % 4 == 1  # a quarter continue from the carried state (one Spark job more each)
        # The same rows under a plan of its own: Spark caches equal plans once, so replays of
        # one unchanged DataFrame would share one cache entry and hide a result left cached.
        events = inputs[1].where(F.col("offset") >= -i)
        result = replay(spark, pipeline, events, carried if carry else None)
        if i % 50 in (0, 1):
            rows = result.aggregates.count()
            assert expected.setdefault(carry, rows) == rows, f"replay {i}: {rows} windows, not {expected[carry]}"
        if i % 3 == 0:
            with result:
                pass
        elif i % 3 == 1:
            result.unpersist()
        del result  # the third way: dropped, released when Python collects it
        if i % every == 0:
            samples.append(sample(spark, i, began))
            report(samples[-1])
    return samples


def chain_soak(
    spark: Any,
    partitions: int,
    every: int,
    workdir: Path,
    report: Callable[[Sample], None] = lambda s: None,
) -> list[Sample]:
    """Backfill ``partitions`` hourly partitions of the quick start's pipeline through one
    :class:`windowing.chain.Chain` in ``spark``'s session, ``every`` partitions a run (what a
    service that backfills range after range, or a year's backfill, runs: many partitions a
    pass, each checked and committed on its own); return a sample after every run.

    Raises AssertionError if a run stops short or a partition is not committed (a failed
    check, a replay that failed): a session that degrades shows here first."""
    from windowing import load_pipeline
    from windowing.chain import Chain
    from windowing.partitions import Partitions
    from windowing.sample import generate_history

    first = datetime(2026, 1, 1, tzinfo=timezone.utc)
    days = -(-partitions // 24)
    landing = workdir / "landing"
    generate_history(landing, first, days, 240, 20, partitions=2, files_per_day=1)
    chain = Chain(spark, load_pipeline(PIPELINE), str(landing), str(workdir / "out"), Partitions("hour", first))
    keys = chain.partitions.keys(
        chain.partitions.key_of(first), chain.partitions.key_of(first + timedelta(hours=partitions - 1))
    )
    began = time.monotonic()
    samples = [sample(spark, 0, began)]
    report(samples[-1])
    for done in range(0, partitions, every):
        results = list(chain.replay(keys[done : done + every]))
        assert [r.key for r in results] == keys[done : done + every], f"runs from {keys[done]}: {len(results)} done"
        refused = [r.key for r in results if not r.committed]
        assert not refused, f"not committed: {refused}"
        samples.append(sample(spark, done + len(results), began))
        report(samples[-1])
    return samples


def slopes(samples: list[Sample], warm_up: float = 0.25) -> dict[str, float]:
    """Each figure's least-squares growth per 1,000 replays, over the samples after the
    first ``warm_up`` of the run (class loading, the JIT, the status store filling)."""
    tail = [s for s in samples if s.replays >= samples[-1].replays * warm_up]
    xs = [s.replays / 1000 for s in tail]
    mean_x = sum(xs) / len(xs)
    var = sum((x - mean_x) ** 2 for x in xs) or 1.0
    out = {}
    for name in FIGURES:
        ys = [float(getattr(s, name)) for s in tail]
        mean_y = sum(ys) / len(ys)
        out[name] = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / var
    return out


def _row(s: Sample) -> str:
    return "  ".join(f"{v:>9.1f}" if isinstance(v, float) else f"{v:>9}" for v in asdict(s).values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replays", type=int, default=2000)
    ap.add_argument(
        "--chain", action="store_true", help="--replays hourly partitions backfilled through the chain, --every a run"
    )
    ap.add_argument("--every", type=int, default=0, help="sample every N replays (default: 20 samples)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="1g", help="Spark's default: the session that ran out of heap")
    ap.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting of the session (repeatable)"
    )
    ap.add_argument("--json", type=Path, help="also write the samples and the slopes to this file")
    args = ap.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.conf)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from windowing.runner.session import spark_session

    spark = spark_session(
        args.master,
        {"spark.driver.memory": args.driver_memory, "spark.sql.shuffle.partitions": "2", **conf},
        app_name="rewindow-soak",
    )
    print("  ".join(f"{name:>9}" for name in ("replays", "seconds", *FIGURES)))
    with tempfile.TemporaryDirectory(prefix="rewindow-soak-") as tmp:
        samples = (chain_soak if args.chain else soak)(
            spark,
            args.replays,
            args.every or max(1, args.replays // 20),
            Path(tmp),
            lambda s: print(_row(s), flush=True),
        )
    spark.stop()
    took = samples[-1].seconds
    print(f"seconds_per_replay={took / max(1, args.replays):.3f}")
    growth = slopes(samples)
    for name, slope in growth.items():
        print(f"growth_per_1000_replays_{name}={slope:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"samples": [asdict(s) for s in samples], "growth_per_1000": growth}))


if __name__ == "__main__":
    main()
