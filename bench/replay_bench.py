"""Benchmark: `rewindow replay` against a plain Spark aggregation of the same data.

Generates realistic history (default 10 million events, 100,000 keys, two days,
arrivals out of order with a few percent late), then, in one process and one Spark
session, times:

* plain Spark: ``groupBy(key, window(event_time, 1 hour))`` with count, sum, min, max
  and exact distinct, written to Parquet — what a user would write without rewindow
  (and which ignores watermarks, lateness and batches entirely);
* ``rewindow replay`` of a 1 h tumbling window with the same aggregates, per-key
  watermarks and late-event output, written to Parquet.

The last line is ``ratio_vs_plain_spark=X.XX`` (replay time / plain time). With
``--lateness`` it also times ``rewindow lateness`` (default options: both strategies,
delays 0s,1s,5s,30s,2m, future skew listed) on the same data, alternating with the replay,
and prints ``lateness_ratio_vs_replay=X.XX`` (lateness time / replay time) before it.

    python bench/replay_bench.py            # full size
    python bench/replay_bench.py --quick    # 1 million events, a couple of minutes
    python bench/replay_bench.py --backfill --grain hour   # a partition's fixed cost

``--backfill`` times what a scheduled backfill pays per partition instead: the quick
start's history (``--days`` days, default 3, of 20,000 events a day, 500 keys: what
``python -m orchestration.demo`` writes) backfilled through the partition chain
(``windowing.chain.Chain``, what ``rewindow backfill`` runs: replay, stage, checks,
commit; ``--no-checks`` leaves the checks out) with
``examples/pipelines/clicks-hourly.yaml`` at ``--grain`` (``hour``: 72 partitions).
Spark's event log counts the jobs. Its last lines are
``seconds_per_partition=X.XX`` and ``jobs_per_partition=N``.

Scale (docs/architecture.md, "Scale"): ``--events N`` (with ``--days``), ``--workers N``
(the source's partitions, default 8) and ``--unkeyed`` (no keyExtractor: one key per
worker; the plain side then groups by window alone). Each run also prints the peak
memory of the driver's JVM and of the largest Spark Python worker, sampled from /proc
(``peak_python_worker_mb``, ``peak_driver_jvm_mb``), and the time per event.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from windowing.config import parse_pipeline
from windowing.metrics import ReplayMetrics
from windowing.sample import generate_history

PIPELINE = {
    "name": "bench-hourly",
    "source": {
        "arrivalTime": "arrival_time",
        "arrivalOrder": ["offset"],
        "batch": {"interval": "1s"},
        "worker": "partition",
    },
    "emitter": {
        "tumbling-time-window": {
            "windowSpan": "1h",
            "keyExtractor": "user_id",
            "timeConfig": {"eventTimeExtractor": "event_time", "delayWindowClose": "5s"},
            "aggregateDefinition": [
                {"type": "count"},
                {"type": "sum", "column": "amount"},
                {"type": "min", "column": "amount"},
                {"type": "max", "column": "amount"},
                {"type": "distinct", "column": "event_id"},
            ],
        }
    },
}


#: ``--variant``: the bench's pipeline with what a live pipeline does before its window
#: (docs/configuration.md), each replaying the same windows as the plain pipeline:
#: ``filtered``: a derived column and a filter every event passes (what the filter costs,
#: not what it saves); ``composite``: a key of two columns, ``user_id`` and a column derived
#: from it (as many keys as ``user_id`` alone).
VARIANTS = {
    "filtered": {
        "source": {"derive": {"amount_eur": "amount * 0.92"}, "filter": "amount_eur >= 0 AND event_id IS NOT NULL"}
    },
    "composite": {
        "source": {"derive": {"region": "substr(user_id, -1, 1)"}},
        "window": {"keyExtractor": ["user_id", "region"]},
    },
}


def pipeline(unkeyed: bool = False, variant: str | None = None) -> dict:
    """The bench's pipeline; ``unkeyed``: without a keyExtractor (each worker one key);
    ``variant``: one of :data:`VARIANTS`."""
    window = dict(PIPELINE["emitter"]["tumbling-time-window"])
    source = dict(PIPELINE["source"])
    name = PIPELINE["name"]
    if unkeyed:
        del window["keyExtractor"]
        name += "-unkeyed"
    if variant:
        source.update(VARIANTS[variant].get("source", {}))
        window.update(VARIANTS[variant].get("window", {}))
        name += f"-{variant}"
    return {**PIPELINE, "name": name, "source": source, "emitter": {"tumbling-time-window": window}}


class PeakMemory:
    """The peak resident memory of this process's descendants, sampled from /proc every
    0.2 s: the driver's JVM and the largest Python process (Spark's Python workers)."""

    def __init__(self) -> None:
        import threading

        self.jvm = self.python = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import os

        me = os.getpid()
        while not self._stop.wait(0.2):
            parents: dict[int, int] = {}
            info: dict[int, tuple[str, int]] = {}
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    with open(f"/proc/{pid}/comm") as f:
                        comm = f.read().strip()
                    with open(f"/proc/{pid}/statm") as f:
                        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
                except OSError:
                    continue
                parents[pid] = int(fields[1])
                info[pid] = (comm, rss)
            for pid, (comm, rss) in info.items():
                p, depth = parents.get(pid), 0
                while p not in (None, 0, 1, me) and depth < 10:
                    p, depth = parents.get(p), depth + 1
                if p != me:
                    continue
                if comm == "java":
                    self.jvm = max(self.jvm, rss)
                elif comm.startswith("python"):
                    self.python = max(self.python, rss)


def plain_spark(spark, inp: str, out: str, unkeyed: bool = False) -> None:
    from pyspark.sql import functions as F

    df = spark.read.option("recursiveFileLookup", "true").parquet(inp)
    (
        df.groupBy("partition" if unkeyed else "user_id", F.window("event_time", "1 hour"))
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.sum("amount"),
            F.min("amount"),
            F.max("amount"),
            F.countDistinct("event_id"),
        )
        .write.mode("overwrite")
        .parquet(out)
    )


def rewindow_replay(spark, inp: str, out: str, unkeyed: bool = False, variant: str | None = None) -> ReplayMetrics:
    from windowing.runner.replay import replay
    from windowing.storage.inputs import read_events
    from windowing.storage.outputs import write_outputs

    result = replay(spark, parse_pipeline(pipeline(unkeyed, variant)), read_events(spark, inp))
    write_outputs(result, out)
    result.unpersist()
    return result.metrics


def rewindow_lateness(spark, inp: str, out: str) -> dict:
    from windowing.lateness.job import lateness
    from windowing.lateness.options import LatenessOptions
    from windowing.lateness.outputs import write_lateness
    from windowing.storage.inputs import read_events

    pipeline = parse_pipeline(PIPELINE)
    result = lateness(spark, pipeline, read_events(spark, inp), options=LatenessOptions())
    try:
        write_lateness(result, out, pipeline)
    finally:
        result.unpersist()
    return result.figures


def _hot_key(folder: Path, n: int, days: int) -> None:
    """N events of key ``user-hot`` spread over the history, a few percent late."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    start = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    arrival = np.sort(rng.integers(start, start + days * 86_400_000, size=n))
    lag = rng.exponential(2_000.0, size=n).astype(np.int64)
    late = rng.random(n) < 0.03
    lag[late] += rng.integers(60_000, 3_600_000, size=int(late.sum()))
    ts = pa.timestamp("us", tz="UTC")
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "arrival_time": pa.array(arrival * 1000, pa.int64()).cast(ts),
                "event_time": pa.array((arrival - lag) * 1000, pa.int64()).cast(ts),
                "offset": pa.array(np.arange(n) + 10**12, pa.int64()),
                "partition": pa.array(np.full(n, 8), pa.int32()),
                "user_id": pa.array(["user-hot"] * n),
                "amount": pa.array(np.round(rng.lognormal(2.0, 1.0, size=n), 2)),
                "event_id": pa.array([f"hot-{i}" for i in range(n)]),
            }
        ),
        folder / "part-00000.parquet",
    )


#: The quick start's pipeline (the backfill mode replays it).
QUICKSTART_PIPELINE = Path(__file__).resolve().parent.parent / "examples" / "pipelines" / "clicks-hourly.yaml"


def event_log_conf(folder: Path) -> dict[str, str]:
    """Spark settings for an uncompressed, unrolled event log in ``folder`` (one file a session)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": folder.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def job_starts(folder: Path) -> list[tuple[int, str, str | None]]:
    """Every job the event logs in ``folder`` record: ``(submission time in ms, call site,
    partition)``: the Python call site (else, for a job started by Spark itself, as adaptive
    execution and the writers do, the JVM method that started it), and the partition whose
    job it is, from the chain's job tag (``windowing.chain.PARTITION_TAG``; None: untagged).
    A partition's checks run beside the next partition's replay, so jobs are counted by tag,
    not by when they ran."""
    import json
    import re

    from windowing.chain import PARTITION_TAG

    tagged = re.compile(re.escape(PARTITION_TAG) + r"([^,]+)")
    jobs = []
    for log in sorted(folder.rglob("*")):
        if not log.is_file() or log.name.startswith("appstatus"):
            continue
        with open(log, encoding="utf-8") as f:
            for line in f:
                if '"SparkListenerJobStart"' not in line:
                    continue
                event = json.loads(line)
                props = event.get("Properties") or {}
                details = (event.get("Stage Infos") or [{}])[-1].get("Details") or "?"
                site = props.get("callSite.short") or details.splitlines()[0]
                tag = tagged.search(props.get("spark.job.tags") or "")
                jobs.append((int(event["Submission Time"]), str(site), tag.group(1) if tag else None))
    return jobs


def backfill(args: argparse.Namespace) -> None:
    """``--backfill``: the per-partition cost of a backfill of many small partitions."""
    from collections import Counter

    from windowing.chain import Chain
    from windowing.config import load_pipeline
    from windowing.partitions import Partitions
    from windowing.runner.session import spark_session

    work = Path(args.workdir or tempfile.mkdtemp(prefix="rewindow-backfill-bench-"))
    landing, logs = work / "landing", work / "eventlog"
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    if not landing.exists():
        generate_history(landing, start, args.days, 20_000, 500, seed=7)
    shutil.rmtree(logs, ignore_errors=True)
    shutil.rmtree(work / "output", ignore_errors=True)
    pipeline = load_pipeline(str(QUICKSTART_PIPELINE))
    partitions = Partitions(args.grain, start)
    keys = partitions.keys(None, partitions.key_of(start + timedelta(days=args.days) - partitions.step))
    keys = keys[: args.partitions] if args.partitions else keys
    print(
        f"data: {args.days} days x 20,000 events in {landing}; {len(keys)} {args.grain} partitions "
        f"of pipeline {pipeline.name!r}",
        flush=True,
    )
    conf = {**event_log_conf(logs), **dict(kv.split("=", 1) for kv in args.conf)}
    spark = spark_session(args.master, conf)
    chain = Chain(spark, pipeline, str(landing), str(work / "output"), partitions)
    done: list[str] = []
    began = time.monotonic()
    for part in chain.replay(keys, checks=not args.no_checks):
        done.append(part.key)
        if not part.committed:
            raise SystemExit(f"{part.key}: not committed ({', '.join(part.lineage.failed_checks)})")
    elapsed = time.monotonic() - began
    spark.stop()  # the event log is complete once the session stops
    jobs = job_starts(logs)
    # A pass's jobs carry its range's tag (first..last): they are shared by its partitions.
    tagged = [part for _, _, part in jobs if part is not None]
    passes = Counter(part for part in tagged if ".." in part)
    per_partition = [sum(1 for part in tagged if part == key) for key in done]
    sites = Counter(site for _, site, part in jobs if part is not None)
    if passes:
        print(f"passes: {len(passes)}, jobs each: {' '.join(map(str, passes.values()))}")
    print(
        f"jobs per partition of its own: min {min(per_partition)}, max {max(per_partition)}, "
        f"first {per_partition[0]}, last {per_partition[-1]}"
    )
    print(f"jobs by partition: {' '.join(map(str, per_partition))}")
    print("jobs by call site (all partitions):")
    for site, n in sites.most_common():
        print(f"  {n / len(done):6.2f}  {site}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    print(f"backfilled {len(done)} partitions in {elapsed:.1f}s")
    print(f"seconds_per_partition={elapsed / len(done):.2f}")
    print(f"jobs_per_partition={len(tagged) / len(done):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--days", type=int, default=None, help="days of history (default 2; 3 with --backfill)")
    ap.add_argument("--quick", action="store_true", help="1M events, 20k keys")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each (median is reported)")
    ap.add_argument("--workdir", default=None, help="keep data here (default: a temp dir, removed)")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument(
        "--hot-key",
        type=int,
        default=0,
        metavar="N",
        help="add N events of one single key (memory check for skewed keys)",
    )
    ap.add_argument("--lateness", action="store_true", help="also time rewindow lateness against the replay")
    ap.add_argument("--workers", type=int, default=8, help="the source's workers (Kafka partitions)")
    ap.add_argument("--unkeyed", action="store_true", help="a pipeline without keyExtractor (one key per worker)")
    ap.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        help="also time the pipeline with a filter (filtered) or a key of two columns (composite), "
        "alternating with the replay: prints variant_ratio_vs_replay",
    )
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    ap.add_argument(
        "--backfill",
        action="store_true",
        help="time a backfill of the quick start's history in small partitions instead (see above)",
    )
    ap.add_argument("--grain", choices=("day", "hour"), default="hour", help="--backfill's partitions (default hour)")
    ap.add_argument("--partitions", type=int, default=0, metavar="N", help="--backfill only the first N partitions")
    ap.add_argument(
        "--no-checks",
        action="store_true",
        help="--backfill without the data-quality checks (rewindow backfill --no-checks): the replay, "
        "its writes and the commit alone",
    )
    args = ap.parse_args()
    if args.backfill:
        args.days = args.days or 3
        backfill(args)
        return
    args.days = args.days or 2
    if args.quick:
        args.events, args.keys = 1_000_000, 20_000

    work = Path(args.workdir or tempfile.mkdtemp(prefix="rewindow-bench-"))
    data = work / "events"
    t0 = time.monotonic()
    if not data.exists():
        generate_history(
            data,
            datetime(2024, 1, 1, tzinfo=timezone.utc),
            args.days,
            args.events // args.days,
            args.keys,
            seed=11,
            partitions=args.workers,
            files_per_day=8,
        )
    warm = work / "warmup"  # a small history of the same shape, to warm both sides up
    if not warm.exists():
        generate_history(
            warm,
            datetime(2024, 1, 1, tzinfo=timezone.utc),
            1,
            200_000,
            min(args.keys, 20_000),
            seed=12,
            partitions=8,
            files_per_day=8,
        )
    if args.hot_key and not (data / "hot").exists():
        _hot_key(data / "hot", args.hot_key, args.days)
    print(
        f"data: {args.events:,} events, {args.keys:,} keys, {args.workers:,} workers, {args.days} days in {data} "
        f"(generated in {time.monotonic() - t0:.1f}s)",
        flush=True,
    )

    from windowing.runner.session import spark_session

    partitions = max(8, args.events // 250_000)
    conf = {"spark.sql.shuffle.partitions": str(partitions), "spark.driver.memory": "12g"}
    conf.update(kv.split("=", 1) for kv in args.conf)
    spark = spark_session(args.master, conf)
    unkeyed = args.unkeyed
    # Warm-up of both on a small history: JVM code generation and JIT, Python workers.
    plain_spark(spark, str(warm), str(work / "warm-plain"), unkeyed)
    rewindow_replay(spark, str(warm), str(work / "warm-replay"), unkeyed)
    if args.lateness:
        rewindow_lateness(spark, str(warm), str(work / "warm-lateness"))
    if args.variant:
        rewindow_replay(spark, str(warm), str(work / "warm-variant"), unkeyed, args.variant)

    plain_t, replay_t, lateness_t, variant_t, metrics = [], [], [], [], ReplayMetrics()
    peak_python = peak_jvm = 0
    for i in range(args.repeat):
        t = time.monotonic()
        plain_spark(spark, str(data), str(work / "plain"), unkeyed)
        plain_t.append(time.monotonic() - t)
        t = time.monotonic()
        with PeakMemory() as peak:
            metrics = rewindow_replay(spark, str(data), str(work / "replay"), unkeyed)
        replay_t.append(time.monotonic() - t)
        peak_python, peak_jvm = max(peak_python, peak.python), max(peak_jvm, peak.jvm)
        print(f"run {i + 1}: plain spark {plain_t[-1]:.1f}s, rewindow replay {replay_t[-1]:.1f}s", flush=True)
        if args.variant:
            t = time.monotonic()
            varied = rewindow_replay(spark, str(data), str(work / "variant"), unkeyed, args.variant)
            variant_t.append(time.monotonic() - t)
            same = (varied.windows_emitted, varied.late_events) == (metrics.windows_emitted, metrics.late_events)
            print(
                f"run {i + 1}: rewindow replay ({args.variant}) {variant_t[-1]:.1f}s, "
                f"{varied.windows_emitted:,} windows, {varied.late_events:,} late"
                + ("" if same else " (NOT the plain replay's counts)"),
                flush=True,
            )
        if args.lateness:
            t = time.monotonic()
            figures = rewindow_lateness(spark, str(data), str(work / "lateness"))
            lateness_t.append(time.monotonic() - t)
            print(
                f"run {i + 1}: rewindow lateness {lateness_t[-1]:.1f}s ({len(figures['variants'])} variants, "
                f"{figures['configured_replay']['late_events']:,} late as configured)",
                flush=True,
            )

    plain, rep = statistics.median(plain_t), statistics.median(replay_t)
    print(
        f"replay: {metrics.input_rows:,} events, {metrics.windows_emitted:,} windows emitted, "
        f"{metrics.late_events:,} late, {metrics.open_windows:,} open at end"
    )
    n = metrics.input_rows
    print(
        f"throughput: plain {n / plain:,.0f} events/s, replay {n / rep:,.0f} events/s "
        f"({rep / max(n, 1) * 1e6:.2f} us per event)"
    )
    print(f"peak_python_worker_mb={peak_python / 2**20:.0f}")
    print(f"peak_driver_jvm_mb={peak_jvm / 2**20:.0f}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    if lateness_t:
        late = statistics.median(lateness_t)
        print(f"lateness: {late:.1f}s against the replay's {rep:.1f}s")
        print(f"lateness_ratio_vs_replay={late / rep:.2f}")
    if variant_t:
        var = statistics.median(variant_t)
        print(f"variant {args.variant}: {var:.1f}s against the replay's {rep:.1f}s")
        print(f"variant_ratio_vs_replay={var / rep:.2f}")
    print(f"ratio_vs_plain_spark={rep / plain:.2f}")


if __name__ == "__main__":
    main()
