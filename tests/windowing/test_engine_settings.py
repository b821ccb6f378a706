"""The Spark settings a replay changes for its own jobs, and how it sizes its writes.

A replay runs its kernel job without Spark's per-batch byte cap on Arrow input (Spark
measures the batch after every row to enforce it) and builds its held cache without
compression. Both are its own business: the session a user passes in must come back with
every setting as it was, and a cap the user chose is theirs to keep.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from windowing import parse_pipeline, replay
from windowing.config import ConfigError
from windowing.engine import (
    COMMITS_CONF,
    ROWS_PER_FILE,
    TASK_WORKER_EVENTS,
    _kernel_job_conf,
    _spark_hash_int,
    _task_of_worker,
    _worker_tasks,
    _write_tasks,
)
from windowing.io import read_events
from windowing.sample import generate_history

ARROW_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"

PIPELINE = parse_pipeline({
    "name": "settings",
    "source": {"arrivalTime": "arrival_time", "arrivalOrder": ["offset"], "batch": {"interval": "1s"},
               "worker": "partition"},
    "emitter": {"tumbling-time-window": {
        "windowSpan": "10m", "keyExtractor": "user_id",
        "timeConfig": {"eventTimeExtractor": "event_time"},
        "aggregateDefinition": [{"type": "count"}],
    }},
})


@pytest.mark.parametrize("rows, most, slots, expected", [
    (0, 8, 2, 1),                        # an empty output is still one (empty) file
    (ROWS_PER_FILE // 2, 8, 2, 1),
    (int(2.8 * ROWS_PER_FILE), 40, 2, 4),  # 3 files' worth on 2 slots: two even waves of 2
    (int(2.8 * ROWS_PER_FILE), 40, 200, 3),  # a big cluster runs the 3 at once
    (int(2.8 * ROWS_PER_FILE), 40, None, 3),  # Spark Connect: slots unknown
    (int(9.5 * ROWS_PER_FILE), 8, 2, 8),  # never more than the kernel's tasks
    (int(5.5 * ROWS_PER_FILE), 40, 4, 8),
])
def test_write_tasks(rows, most, slots, expected):
    assert _write_tasks(rows, most, slots) == expected


@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("settings-events")
    generate_history(folder, datetime(2024, 1, 1, tzinfo=timezone.utc), 1, 2_000, 50, seed=3, partitions=2,
                     files_per_day=2)
    return read_events(spark, str(folder))


def _replay(spark, events):
    result = replay(spark, PIPELINE, events)
    try:
        return result.aggregates.count()
    finally:
        result.unpersist()


def test_a_replay_leaves_the_session_settings_as_it_found_them(spark, events):
    before = {k: spark.conf.get(k) for k in (ARROW_BYTES, CACHE_COMPRESSED)}
    assert _kernel_job_conf(spark) == {ARROW_BYTES: "2147483647"}  # Spark's default cap: lifted for the kernel
    assert _replay(spark, events) > 0
    assert {k: spark.conf.get(k) for k in before} == before


def test_a_cap_the_user_set_is_kept(spark, events):
    spark.conf.set(ARROW_BYTES, "8m")
    try:
        assert _kernel_job_conf(spark) == {}
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

    from windowing import engine

    def percentiles():
        result = replay(spark, PIPELINE, events)
        try:
            exact = result.late_events.agg(F.percentile("lateness_ms", [0.5, 0.9, 0.99]).alias("p"),
                                           F.max("lateness_ms").alias("mx")).first()
            return result.metrics, {"p50": exact["p"][0], "p90": exact["p"][1], "p99": exact["p"][2],
                                    "max": exact["mx"]}
        finally:
            result.unpersist()

    metrics, exact = percentiles()
    late = metrics["late_events"]
    assert late > 10 and metrics["lateness_ms_percentiles"] == exact
    for most in (late, late // 2, 0):  # some tasks over their share; over the maximum; all through Spark
        monkeypatch.setattr(engine, "DRIVER_PERCENTILES_MAX", most)
        again, _ = percentiles()
        assert again["lateness_ms_percentiles"] == exact, most


# ----------------------------------------------------------------- kernel tasks by worker


def test_the_salted_hash_is_sparks(spark):
    """Placing each worker in its own kernel task relies on computing Spark's hash()."""
    from pyspark.sql import functions as F

    values = [0, 1, 7, 42, 1000, 2**31 - 1, -1, -(2**31), 123456789]
    got = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r["v"]: r["h"] for r in got} == {v: _spark_hash_int(v) for v in values}


def test_each_worker_lands_in_the_task_it_was_given(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(f"w{i % 6}" if i % 7 else None, i) for i in range(600)], "partition string, n int")
    tasks = {**{f"w{i}": i % 3 for i in range(6)}, None: 1}  # a null worker is a worker too
    placed = (df.repartition(3, _task_of_worker(df, "partition", tasks))
              .select("partition", F.spark_partition_id().alias("p")).distinct().collect())
    assert {r["partition"]: r["p"] for r in placed} == tasks


def test_when_tasks_hold_whole_workers(spark):
    before = spark.conf.get(COMMITS_CONF, None)
    try:
        spark.conf.unset(COMMITS_CONF)  # auto: the test session has 2 slots
        assert _worker_tasks(spark, {"a": 10}) == {}  # one worker: one task would do all the work
        assert _worker_tasks(spark, {"a": 10, "b": 30, "c": 25}) == {"a": 0, "b": 1, "c": 2}  # a task each
        assert _worker_tasks(spark, {i: 1 for i in range(65)}) == {}  # too many for a literal map
        assert _worker_tasks(spark, {"a": 10, "b": TASK_WORKER_EVENTS + 1}) == {}  # too big for a task
        spark.conf.set(COMMITS_CONF, "driver")
        assert _worker_tasks(spark, {"a": 10, "b": 30, "c": 25}) == {}
        spark.conf.set(COMMITS_CONF, "tasks")
        assert len(set(_worker_tasks(spark, {"a": 10}).values())) == 1
        spark.conf.set(COMMITS_CONF, "sometimes")
        with pytest.raises(ConfigError, match="spark.rewindow.commits"):
            _worker_tasks(spark, {"a": 10})
    finally:
        if before is None:
            spark.conf.unset(COMMITS_CONF)
        else:
            spark.conf.set(COMMITS_CONF, before)
