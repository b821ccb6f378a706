"""The Spark settings a replay changes for its own jobs, and how it sizes its writes.

A replay runs its kernel job without Spark's per-batch byte cap on Arrow input (Spark
measures the batch after every row to enforce it) and builds its held cache without
compression. Both are its own business: the session a user passes in must come back with
every setting as it was, and a cap the user chose is theirs to keep.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from windowing import parse_pipeline, replay
from windowing.config import ConfigError
from windowing.runner import chunks, placement, tasks
from windowing.runner.placement import int_setting, session_slots, slices_on, with_task
from windowing.runner.session import check_workers, session_conf
from windowing.runner.tasks import KERNEL_BATCH_ROWS, ROWS_PER_FILE, ROWS_PER_TASK, kernel_job_conf, write_tasks
from windowing.runner.timelines import COMMITS_CONF, commits_mode
from windowing.sample import generate_history
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_state, write_outputs

ARROW_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"
ARROW_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"

PIPELINE = parse_pipeline(
    {
        "name": "settings",
        "source": {
            "arrivalTime": "arrival_time",
            "arrivalOrder": ["offset"],
            "batch": {"interval": "1s"},
            "worker": "partition",
        },
        "emitter": {
            "tumbling-time-window": {
                "windowSpan": "10m",
                "keyExtractor": "user_id",
                "timeConfig": {"eventTimeExtractor": "event_time"},
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    }
)


@pytest.mark.parametrize(
    "rows, most, slots, expected",
    [
        (0, 8, 2, 1),  # an empty output is still one (empty) file
        (ROWS_PER_TASK - 1, 8, 2, 1),  # a small output: one file
        (ROWS_PER_FILE // 2, 8, 2, 2),  # half a file's worth: shared by the 2 idle slots
        (ROWS_PER_FILE // 2, 8, 16, 3),  # ... in tasks of at least ROWS_PER_TASK rows
        (ROWS_PER_FILE // 2, 1, 16, 1),  # never more than the kernel's tasks
        (ROWS_PER_FILE // 2, 8, None, 1),  # Spark Connect: slots unknown
        (int(2.8 * ROWS_PER_FILE), 40, 2, 4),  # 3 files' worth on 2 slots: two even waves of 2
        (int(2.8 * ROWS_PER_FILE), 40, 200, 18),  # a big cluster shares it out: 18 tasks of ROWS_PER_TASK+ rows
        (int(2.8 * ROWS_PER_FILE), 40, None, 3),  # Spark Connect: slots unknown
        (int(9.5 * ROWS_PER_FILE), 8, 2, 8),  # never more than the kernel's tasks
        (int(5.5 * ROWS_PER_FILE), 40, 4, 8),
    ],
)
def test_write_tasks(rows, most, slots, expected):
    assert write_tasks(rows, most, slots) == expected


def test_outputs_go_back_in_blobs_of_about_blob_bytes(monkeypatch):
    n = 60_000  # ~24 bytes a row: ~1.4 MB
    table = pa.table({"k": pa.array([f"user-{i % 977:05d}" for i in range(n)]), "v": pa.array(range(n), pa.int64())})
    parts = list(tasks.blob_slices(table))
    assert len(parts) == -(-table.nbytes // tasks.BLOB_BYTES)  # three, not one blob of 1.4 MB
    assert all(p.nbytes <= tasks.BLOB_BYTES + 64 for p in parts)
    assert pa.concat_tables(parts).equals(table)  # in order, every row once
    assert [p.num_rows for p in tasks.blob_slices(table.slice(0, 10))] == [10]
    assert list(tasks.blob_slices(table.slice(0, 0))) == []
    wide = pa.table({"blob": pa.array([b"x" * (tasks.BLOB_BYTES * 2)] * 3)})
    assert [p.num_rows for p in tasks.blob_slices(wide)] == [1, 1, 1]  # a row larger than a blob: alone
    monkeypatch.setattr(tasks, "BLOB_ROWS", 7_000)
    assert max(p.num_rows for p in tasks.blob_slices(table)) == 7_000


@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("settings-events")
    generate_history(
        folder, datetime(2024, 1, 1, tzinfo=timezone.utc), 1, 2_000, 50, seed=3, partitions=2, files_per_day=2
    )
    return read_events(spark, str(folder))


def _replay(spark, events):
    result = replay(spark, PIPELINE, events)
    try:
        return result.aggregates.count()
    finally:
        result.unpersist()


def test_a_replay_leaves_the_session_settings_as_it_found_them(spark, events):
    before = {k: spark.conf.get(k) for k in (ARROW_BYTES, ARROW_ROWS, CACHE_COMPRESSED)}
    # Spark's defaults: the byte cap lifted for the kernel, its batches 100,000 rows.
    assert kernel_job_conf(spark) == {ARROW_BYTES: "2147483647", ARROW_ROWS: str(KERNEL_BATCH_ROWS)}
    assert _replay(spark, events) > 0
    assert {k: spark.conf.get(k) for k in before} == before


def _rows(spark, events):
    result = replay(spark, PIPELINE, events)
    try:
        return sorted(tuple(r) for r in result.aggregates.collect()), sorted(tuple(r) for r in result.state.collect())
    finally:
        result.unpersist()


def test_batch_rows_the_user_set_are_kept_and_give_the_same_windows(spark, events):
    baseline = _rows(spark, events)
    spark.conf.set(ARROW_ROWS, "7")  # the kernel's input in batches of 7 rows
    try:
        assert kernel_job_conf(spark) == {ARROW_BYTES: "2147483647"}
        assert _rows(spark, events) == baseline
        assert spark.conf.get(ARROW_ROWS) == "7"
    finally:
        spark.conf.unset(ARROW_ROWS)


def test_a_cap_the_user_set_is_kept(spark, events):
    spark.conf.set(ARROW_BYTES, "8m")
    try:
        assert kernel_job_conf(spark) == {ARROW_ROWS: str(KERNEL_BATCH_ROWS)}
        baseline = _replay(spark, events)
        assert spark.conf.get(ARROW_BYTES) == "8m"
    finally:
        spark.conf.unset(ARROW_BYTES)
    assert _replay(spark, events) == baseline  # the same windows with or without the cap


def test_lateness_percentiles_are_exact_whichever_way_the_values_come_back(spark, events, monkeypatch):
    """Lateness values come back with the counters when a task has at most its share of
    DRIVER_PERCENTILES_MAX late events, by a second look at the held output when it has
    more, and through a Spark job above the maximum: the percentiles are the same."""
    from pyspark.sql import functions as F

    from windowing.runner import replay as job

    def percentiles():
        result = replay(spark, PIPELINE, events)
        try:
            exact = result.late_events.agg(
                F.percentile("lateness_ms", [0.5, 0.9, 0.99]).alias("p"), F.max("lateness_ms").alias("mx")
            ).first()
            return result.metrics, {
                "p50": exact["p"][0],
                "p90": exact["p"][1],
                "p99": exact["p"][2],
                "max": exact["mx"],
            }
        finally:
            result.unpersist()

    metrics, exact = percentiles()
    late = metrics["late_events"]
    assert late > 10 and metrics["lateness_ms_percentiles"] == exact
    for most in (late, late // 2, 0):  # some tasks over their share; over the maximum; all through Spark
        monkeypatch.setattr(job, "DRIVER_PERCENTILES_MAX", most)
        again, _ = percentiles()
        assert again["lateness_ms_percentiles"] == exact, most


# ----------------------------------------------------------------- kernel tasks by worker


def test_the_salted_hash_is_sparks(spark):
    """Placing rows in the kernel task planned for them relies on computing Spark's hash()."""
    import numpy as np
    from pyspark.sql import functions as F

    values = [0, 1, 7, 42, 1000, 2**31 - 1, -1, -(2**31), 123456789]
    got = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r["v"]: r["h"] for r in got} == dict(zip(values, placement.spark_hash_ints(np.array(values)).tolist()))
    n = 37
    salts = placement.salts(n)
    landed = (
        spark.createDataFrame([(s,) for s in salts], "s int")
        .repartition(n, "s")
        .select("s", F.spark_partition_id().alias("p"))
        .collect()
    )
    assert {r["s"]: r["p"] for r in landed} == {s: p for p, s in enumerate(salts)}


@pytest.mark.parametrize("many", [False, True], ids=["literal map", "broadcast join"])
def test_each_worker_lands_in_the_task_it_was_given(spark, many, monkeypatch):
    """Whole workers in the task the plan gives them (a null worker is a worker too), a
    spread worker's keys over its own tasks, each key in one: by a literal map of a few
    workers, by a broadcast join of many."""
    from pyspark.sql import functions as F

    from windowing.runner.placement import kernel_input

    if many:
        monkeypatch.setattr(placement, "MAX_WORKER_MAP", 2)
    df = spark.createDataFrame(
        [(f"w{i % 6}" if i % 7 else None, f"k{i % 50}", i) for i in range(600)],
        "partition string, user_id string, n int",
    )
    plan = placement.TaskPlan(6, {**{f"w{i}": i % 3 for i in range(5)}, None: 1}, {"w5": (3, 3)})
    placed, _, nparts = kernel_input(spark, PIPELINE, df, plan=plan)
    assert nparts == 6
    rows = placed.select("partition", "user_id", F.spark_partition_id().alias("p")).distinct().collect()
    whole = {r["partition"]: r["p"] for r in rows if r["partition"] != "w5"}
    assert whole == plan.whole
    spread = {}
    for r in rows:
        if r["partition"] == "w5":
            spread.setdefault(r["user_id"], set()).add(r["p"])
    assert all(len(p) == 1 for p in spread.values())  # a key in one task
    assert set().union(*spread.values()) == {3, 4, 5}  # the worker's keys over its three tasks
    assert "__task" not in placed.columns and with_task(df, PIPELINE, plan).count() == 600


def test_a_hot_key_is_found_and_its_windows_land_in_its_slices(spark):
    """A spread worker's key of over 1.5 tasks' share is hot: found by one aggregation, its
    rows go to tasks of its own by their window's block (10-minute windows, round the 3
    slices), the worker's other keys by hash over the worker's tasks."""
    from datetime import timedelta

    from pyspark.sql import functions as F

    from windowing.runner.normalise import normalise
    from windowing.runner.placement import hot_keys, kernel_input

    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [
        ("w", "hot" if i % 4 else f"k{i % 13}", start + timedelta(seconds=i), start + timedelta(seconds=i), i)
        for i in range(3600)
    ]
    df = spark.createDataFrame(
        rows, "partition string, user_id string, arrival_time timestamp, event_time timestamp, offset int"
    )
    plan = placement.plan_tasks({"w": 3600}, True, 1000, 2)
    assert plan.spread == {"w": (0, 4)} and plan.share == 900
    hot = hot_keys(PIPELINE, normalise(PIPELINE, df), plan)
    assert hot == {("w", "hot"): 2700}
    plan = placement.with_hot_keys(plan, hot)
    assert plan.hot == {("w", "hot"): (4, 3)} and plan.tasks == 7
    placed, _, nparts = kernel_input(spark, PIPELINE, normalise(PIPELINE, df).drop("reason"), plan=plan)
    assert nparts == 7
    got = placed.select("user_id", "offset", F.spark_partition_id().alias("p")).collect()
    hot_tasks = {r["offset"] // 600: r["p"] for r in got if r["user_id"] == "hot"}  # offset: seconds in
    assert hot_tasks == {block: 4 + block % 3 for block in range(6)}
    others = {r["p"] for r in got if r["user_id"] != "hot"}
    assert others <= {0, 1, 2, 3} and len(got) == 3600


def test_hot_keys_of_a_large_threshold_are_found_in_a_sample(spark, monkeypatch):
    """Over a threshold of more than ``HOT_KEY_SAMPLE`` events the rows are sampled: the hot
    key is still found, its events estimated to a few %, and a key just under the threshold
    is not (with the sample's size set low so that a small history has a large threshold)."""
    from datetime import timedelta

    from windowing.runner.normalise import normalise
    from windowing.runner.placement import hot_keys

    monkeypatch.setattr(placement, "HOT_KEY_SAMPLE", 1_000)
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    # 40,000 events of one worker: "hot" 24,000, "warm" 12,000, 4,000 spread over 40 keys.
    keys = ["hot"] * 6 + ["warm"] * 3 + ["cold"]
    rows = [
        (
            "w",
            keys[i % 10] if keys[i % 10] != "cold" else f"k{i % 40}",
            start + timedelta(seconds=i),
            start + timedelta(seconds=i),
            i,
        )
        for i in range(40_000)
    ]
    df = spark.createDataFrame(
        rows, "partition string, user_id string, arrival_time timestamp, event_time timestamp, offset int"
    )
    plan = placement.plan_tasks({"w": 40_000}, True, 10_000, 2)
    assert placement.hot_key_threshold(plan) > 12_000  # "warm" is under it, so the sample decides
    hot = hot_keys(PIPELINE, normalise(PIPELINE, df), plan)
    assert list(hot) == [("w", "hot")]
    assert abs(hot[("w", "hot")] - 24_000) < 0.1 * 24_000
    assert hot_keys(PIPELINE, normalise(PIPELINE, df), plan) == hot  # a fixed seed: the same plan again


def test_task_plans_from_the_data():
    plan = placement.plan_tasks
    # The bench's shape: 8 workers of 1.25 M events, 1 M a task: each worker whole in a task.
    assert plan({i: 1_250_000 for i in range(8)}, True, 1_000_000, 2) == placement.TaskPlan(
        8, {i: i for i in range(8)}, {}
    )
    # One keyed worker of 10 M: spread over 10 tasks by key; unkeyed, its one key is sliced
    # by window over 10 tasks (tumbling and sliding windows), else it stays whole.
    assert plan({"a": 10_000_000}, True, 1_000_000, 2) == placement.TaskPlan(10, {}, {"a": (0, 10)})
    assert plan({"a": 10_000_000}, False, 1_000_000, 2, sliceable=True) == placement.TaskPlan(
        10, {}, {}, {"a": (0, 10)}
    )
    assert plan({"a": 10_000_000}, False, 1_000_000, 2) == placement.TaskPlan(1, {"a": 0}, {})
    # Beside small workers, which are packed whole into tasks before it.
    assert plan({"a": 10_000_000, "b": 5, "c": 7}, False, 1_000_000, 2, sliceable=True) == placement.TaskPlan(
        12, {"b": 0, "c": 0}, {}, {"a": (1, 11)}
    )
    # A small keyed worker still fills the slots.
    assert plan({"a": 1000}, True, 1_000_000, 2) == placement.TaskPlan(2, {}, {"a": (0, 2)})
    # 1,000 small workers: packed whole into as many tasks as their events need, evenly.
    many = plan({i: 4000 - i % 3 for i in range(1000)}, True, 1_000_000, 2)
    assert many.tasks == 4 and not many.spread and len(many.whole) == 1000
    loads = [sum(4000 - w % 3 for w, t in many.whole.items() if t == task) for task in range(4)]
    assert max(loads) - min(loads) <= 4000
    # The 100 M bench's shape: on 2 slots its 8 workers stay whole (each under 1.5 slots'
    # share: spreading would cost a pass for the timelines and buy no parallelism); on 64
    # slots each is spread over 13 tasks.
    assert plan({i: 12_500_000 for i in range(8)}, True, 1_000_000, 2) == placement.TaskPlan(
        8, {i: i for i in range(8)}, {}
    )
    assert plan({i: 12_500_000 for i in range(8)}, True, 1_000_000, 64).tasks == 104
    # Ten times the history on a cluster, ten times the tasks.
    assert plan({i: 125_000_000 for i in range(8)}, True, 1_000_000, 200).tasks == 1000
    # On 2 slots, a worker twice the others' size stays whole; one of 30 M in 37 M (over 1.5
    # slots' share: whole, its task would be the stage) is spread, the others stay whole.
    assert plan({0: 2_000_000, **{i: 1_000_000 for i in range(1, 8)}}, True, 100_000, 2).spread == {}
    skewed = plan({0: 30_000_000, **{i: 1_000_000 for i in range(1, 8)}}, True, 100_000, 2)
    assert set(skewed.spread) == {0} and set(skewed.whole) == set(range(1, 8))
    # spark.rewindow.commits=tasks: every worker whole.
    assert plan({"a": 10_000_000}, True, 1_000_000, 2, force_whole=True) == placement.TaskPlan(1, {"a": 0}, {})


def test_the_task_slots_the_plan_assumes():
    slots = placement.task_slots
    assert slots({}, 2) == 2  # the session's parallelism
    assert slots({}, None) is None  # Spark Connect: not known
    assert slots({"spark.rewindow.taskSlots": "1_000"}, 2) == 1000
    dynamic = {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.maxExecutors": "50",
        "spark.executor.cores": "4",
    }
    assert slots(dynamic, 2) == 200  # the executors it may get, not the 2 cores it started with
    assert slots({**dynamic, "spark.dynamicAllocation.maxExecutors": None}, 2) is None  # unbounded
    assert slots({**dynamic, "spark.rewindow.taskSlots": "16"}, 2) == 16
    with pytest.raises(ValueError, match="spark.rewindow.taskSlots: 'many'"):
        slots({"spark.rewindow.taskSlots": "many"}, 2)


def test_the_scale_settings_are_checked(spark):
    with session_conf(spark, {COMMITS_CONF: "sometimes"}):
        with pytest.raises(ConfigError, match="spark.rewindow.commits"):
            commits_mode(spark)
    with session_conf(spark, {placement.EVENTS_PER_TASK_CONF: "lots"}):
        with pytest.raises(ConfigError, match="spark.rewindow.eventsPerTask: 'lots'"):
            int_setting(spark, placement.EVENTS_PER_TASK_CONF, 1)
    with session_conf(spark, {placement.EVENTS_PER_TASK_CONF: "2_000_000"}):
        assert int_setting(spark, placement.EVENTS_PER_TASK_CONF, 1) == 2_000_000
    with session_conf(spark, {placement.SLICES_CONF: "sometimes"}):
        with pytest.raises(ConfigError, match="spark.rewindow.slices: 'sometimes'"):
            slices_on(spark)
    with session_conf(spark, {placement.SLICES_CONF: "OFF"}):
        assert not slices_on(spark)
    assert slices_on(spark)  # auto by default
    with session_conf(spark, {placement.TASK_SLOTS_CONF: "0"}):
        with pytest.raises(ConfigError, match="spark.rewindow.taskSlots: '0'"):
            session_slots(spark)
    with session_conf(spark, {placement.TASK_SLOTS_CONF: "12"}):
        assert session_slots(spark) == 12
    assert session_slots(spark) == spark.sparkContext.defaultParallelism


@pytest.mark.parametrize("hot", [False, True], ids=["spread worker", "spread worker with a hot key"])
def test_the_packed_timeline_rows_do_not_depend_on_the_input_order(spark, hot):
    """A shuffle's rows must be the same each time its map task runs: Spark (4.x) checks a
    checksum of them when it reruns a lost map task, and aborts the replay if they differ
    and a task of the stage reading them already finished (a lost executor, mid kernel
    stage, on a cluster). The packed timeline rows are lists gathered from a shuffle, so
    their order is the engine's to fix, not the shuffle's."""
    from datetime import timedelta

    from pyspark.sql import functions as F

    from windowing.runner.normalise import normalise
    from windowing.runner.placement import hot_keys
    from windowing.runner.timelines import split_timeline_rows

    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [
        (
            "w",
            "hot" if hot and i % 4 else f"k{i % 13}",
            start + timedelta(seconds=i // 3),
            start + timedelta(seconds=i // 3),
            i,
        )
        for i in range(3600)
    ]
    df = spark.createDataFrame(
        rows, "partition string, user_id string, arrival_time timestamp, event_time timestamp, offset int"
    )
    plan = placement.plan_tasks({"w": 3600}, True, 1000, 2)
    if hot:
        plan = placement.with_hot_keys(plan, hot_keys(PIPELINE, normalise(PIPELINE, df), plan))
        assert plan.hot
    packed = []
    for order in (df.repartition(1), df.orderBy(F.rand(7)).repartition(5), df.orderBy(F.desc("offset"))):
        timeline = split_timeline_rows(PIPELINE, normalise(PIPELINE, order), plan)
        packed.append(sorted(timeline.collect(), key=repr))
    assert {r["__task"] for r in packed[0]} == set(range(plan.tasks))  # each task gets its worker's timeline
    batches = {
        chunks.unpacked(r["__packed"]["rows"]).num_rows
        for r in packed[0]
        if r["__packed"]["kind"] == chunks.TIMELINE_KIND
    }
    assert batches == {1200}  # 3,600 events, 3 a batch: the worker's 1,200 batches in one pack
    assert packed[0] == packed[1] == packed[2]


def test_the_workers_state_rows_are_one_part_of_their_own_whatever_the_slots(spark, tmp_path):
    """Spark spreads a local table over every task slot: the workers' state rows (a few a
    worker) were one tiny file per slot. They are one part now, beside the window rows'."""
    folder = tmp_path / "events"
    generate_history(
        folder, datetime(2024, 1, 1, tzinfo=timezone.utc), 1, 3_000, 40, seed=5, partitions=6, files_per_day=3
    )
    out = tmp_path / "out"
    write_outputs(replay(spark, PIPELINE, read_events(spark, str(folder))), out)
    (state,) = (out / "runs").glob("*/state")
    kinds = [pq.read_table(p, columns=["state_kind"])["state_kind"].to_pylist() for p in sorted(state.glob("part-*"))]
    assert spark.sparkContext.defaultParallelism > 1  # a local table would have been spread
    worker_parts = [k for k in kinds if "worker" in k]
    assert len(worker_parts) == 1 and set(worker_parts[0]) == {"worker"}
    assert worker_parts[0].count("worker") == 6  # every worker, once
    assert any("window" in k for k in kinds)  # the window rows in parts of their own


# --------------------------------------------------------------------------- a plan without the count


@pytest.fixture(scope="module")
def two_days(tmp_path_factory):
    """Two days of 3 workers read from Parquet; day 2 has no events of worker 2 (its state
    is carried through a day without events) and 3 rows without an event time (rejected)."""
    base = tmp_path_factory.mktemp("plan-days")
    days = generate_history(
        base, datetime(2024, 1, 1, tzinfo=timezone.utc), 2, 3_000, 30, seed=9, partitions=3, files_per_day=2
    )
    day2 = sorted(days)[1]
    files = sorted(day2.glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    for f in files:
        f.unlink()
    kept = table.filter(pc.not_equal(table["partition"], 2))
    pq.write_table(kept, day2 / "part-0.parquet")
    rejected = kept.slice(0, 3).set_column(
        kept.schema.get_field_index("event_time"), "event_time", pa.nulls(3, kept.schema.field("event_time").type)
    )
    pq.write_table(rejected, day2 / "part-1.parquet")
    return sorted(days)


_GROUPS = itertools.count()


def _day(spark, folder, state, conf, state_dir):
    """One day replayed under ``conf``, its state written to ``state_dir``: its outputs and
    metrics, and the Spark jobs of the replay itself (up to the kernel's job: the writes
    are the same whatever the plan)."""
    sc, group = spark.sparkContext, f"plan-{next(_GROUPS)}"
    with session_conf(spark, conf):
        events = read_events(spark, str(folder))
        sc.setJobGroup(group, "a replay")
        try:
            result = replay(spark, PIPELINE, events, state=state)
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        jobs = len(sc.statusTracker().getJobIdsForGroup(group))
        try:
            out = {
                name: sorted(map(repr, getattr(result, name).collect()))
                for name in ("aggregates", "late_events", "rejected", "state")
            }
            out["metrics"] = result.metrics.to_dict()
            result.state.write.parquet(str(state_dir))
        finally:
            result.unpersist()
    return out, jobs


def test_a_small_input_is_planned_without_counting_its_workers(spark, two_days, tmp_path, monkeypatch):
    """An input of at most one task's worth of events (by its files' footers) is placed
    by the hash of its workers, with no Spark job counting its rows per worker; its
    rejected rows are counted by the kernel's job. The rows, state and metrics are those
    of the plan made from the counts, across a day without one worker's events."""
    check_workers(spark)  # the session's one probe of its Python workers, before the jobs are counted
    monkeypatch.setattr(placement, "HASHED_TASK_ROWS", 500)  # ~3,000 rows a day: 6 tasks, not 1
    results, jobs = {}, {}
    modes = {
        "auto": {},
        "count": {COMMITS_CONF: "count"},
        "hash": {COMMITS_CONF: "hash"},
        # Over one task's worth of events (4,000 rows > 1,000): auto counts.
        "auto, a large input": {placement.EVENTS_PER_TASK_CONF: "1000"},
        "count, a large input": {placement.EVENTS_PER_TASK_CONF: "1000", COMMITS_CONF: "count"},
    }
    for mode, conf in modes.items():
        state = None
        for i, day in enumerate(two_days):
            state_dir = tmp_path / f"{mode}-{i}"
            results[mode, i], jobs[mode, i] = _day(spark, day, state, conf, state_dir)
            state = read_state(spark, state_dir)
    for i in (0, 1):
        assert results["auto", i] == results["count", i] == results["hash", i] == results["auto, a large input", i]
        # One job fewer: the count of rows per worker; the same as counting over the threshold.
        assert jobs["auto", i] == jobs["hash", i] == jobs["count", i] - 1
        assert jobs["auto, a large input", i] == jobs["count, a large input", i] == jobs["count", i]
    day2 = results["auto", 1]
    assert day2["metrics"]["rejected_by_reason"] == {"event time is null": 3}
    assert len(day2["rejected"]) == 3
    workers = [r for r in day2["state"] if "state_kind='worker'" in r]
    assert len(workers) == 3 and any("partition=2" in r for r in workers)  # carried through its day without events
    assert results["auto", 0]["metrics"]["rejected_rows"] == 0 and not results["auto", 0]["rejected"]


def test_the_hashed_plan(spark):
    hashed, per_slot, rows = placement.hashed_plan, placement.HASHED_TASKS_PER_SLOT, placement.HASHED_TASK_ROWS
    plan = hashed("integer", 2, 1_000_000, 200)
    assert plan is not None and plan.hashed and plan.tasks == 2 * per_slot  # the 1 M bench on 2 slots: 8 tasks
    assert hashed("integer", 1000, 1_000_000, 200).tasks == 1_000_000 // rows  # not 4,000 nearly empty tasks
    assert hashed("string", 2, 800, 200).tasks == 1  # an hour of the quick start: one task
    assert hashed("integer", 1000, None, 200).tasks == 200  # rows not known: the shuffle's partitions
    assert hashed(None, 8, 1_000_000, 200) == placement.TaskPlan(1, hashed=True)  # one worker: one task
    assert hashed("double", 2, 10, 2) is None  # Spark hashes -0.0 and 0.0 apart: counted
    # Each worker's rows in one task. Integer workers (Kafka partitions 0-7) by their value:
    # one a task (by their hash, 3 of the 8 tasks were empty and one held 3 workers).
    df = spark.createDataFrame([(w, k) for w in [*range(8), None] for k in range(3)], "partition int, user_id int")
    tasks = (
        with_task(df, PIPELINE, plan)
        .groupBy("partition")
        .agg(F.countDistinct("__task").alias("n"), F.first("__task").alias("task"))
        .collect()
    )
    assert {r["n"] for r in tasks} == {1} and len(tasks) == 9
    assert sorted(r["task"] for r in tasks if r["partition"] is not None) == list(range(8))
    # Other worker types by their Spark hash: still whole.
    named = df.withColumn("partition", F.concat(F.lit("p"), F.col("partition").cast("string")))
    tasks = with_task(named, PIPELINE, plan).groupBy("partition").agg(F.countDistinct("__task").alias("n")).collect()
    assert {r["n"] for r in tasks} == {1} and len(tasks) == 9
