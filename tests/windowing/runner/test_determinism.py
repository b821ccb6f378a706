"""Determinism is the product: the same events and configuration give the same output,
row for row and bit for bit (contract, opening promise and section 8), whatever

(a) the order of the rows and the number of Parquet files they are in (1 or 7),
(b) ``spark.sql.shuffle.partitions`` (1, 3 or 8; adaptive execution on or off),
(c) how the history is cut: day 1 then day 2 with the state written and read back,
    versus both days in one go (with and without flush at end on the last piece).

Every output is compared: aggregates, late_events, rejected and the state rows, with
floating-point values compared through ``float.hex`` (so a sum added in another order,
off by one ulp, fails).

The history is ``windowing.sample.generate_history`` (2 days, 4 workers, ~60 keys), plus
per day a file of awkward rows: rows to reject (null event or arrival time), exact
duplicates, and rows tying with another on (batch, arrival time, offset), which only the
remaining columns order.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from windowing import load_pipeline, parse_pipeline, replay
from windowing.runner.session import session_conf
from windowing.sample import generate_history
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_state, write_outputs

ROOT = Path(__file__).resolve().parents[3]
START = datetime(2024, 3, 30, tzinfo=timezone.utc)
EVENTS_PER_DAY = 4_000
OUTPUTS = ("aggregates", "late_events", "rejected", "state")
#: Per day, rows added to the generated history (see _awkward_rows).
NULL_EVENT_TIME, NULL_ARRIVAL, DUPLICATES, TIES = 5, 3, 6, 6

SLIDING = parse_pipeline(
    {
        "version": 1,
        "name": "clicks-sliding",
        "source": {
            "arrivalTime": "arrival_time",
            "arrivalOrder": ["offset"],
            "batch": {"interval": "1s"},
            "worker": "partition",
        },
        "emitter": {
            "sliding-time-window": {
                "windowSpan": "1h",
                "windowSlide": "15m",
                "keyExtractor": "user_id",
                "timeConfig": {
                    "eventTimeExtractor": "event_time",
                    "watermarkStrategy": "MAX_EVENT_TIME",  # closes windows early: many late (event, window) pairs
                    "delayWindowClose": "1m",
                    "idleTimeout": "45m",
                    "idleTimeoutClock": "PROCESSING_TIME",
                },
                "aggregateDefinition": [
                    {"type": "count"},
                    {"type": "sum", "column": "amount"},
                    {"type": "avg", "column": "amount"},
                    {"type": "first", "column": "event_id"},
                    {"type": "last", "column": "event_id"},
                ],
            }
        },
    }
)

PIPELINES = {
    "clicks-hourly": load_pipeline(ROOT / "examples/pipelines/clicks-hourly.yaml"),  # tumbling + idle
    "user-sessions": load_pipeline(ROOT / "examples/pipelines/sessions.yaml"),  # sessions
    "clicks-sliding": SLIDING,  # sliding, avg/sum of doubles, first/last
}


# --------------------------------------------------------------------------- data


def _read_folder(folder: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in sorted(folder.glob("*.parquet"))])


def _awkward_rows(day: pa.Table, rng: np.random.Generator) -> pa.Table:
    """Rows that make determinism hard: rejected, duplicated, tied but different."""
    n = day.num_rows
    pick = rng.choice(n, size=NULL_EVENT_TIME + NULL_ARRIVAL + DUPLICATES + TIES, replace=False)
    a, b, c = NULL_EVENT_TIME, NULL_EVENT_TIME + NULL_ARRIVAL, NULL_EVENT_TIME + NULL_ARRIVAL + DUPLICATES

    def replace(t: pa.Table, column: str, values) -> pa.Table:
        return t.set_column(t.schema.get_field_index(column), column, values)

    null_evt = replace(day.take(pick[:a]), "event_time", pa.nulls(a, day.schema.field("event_time").type))
    null_arr = replace(day.take(pick[a:b]), "arrival_time", pa.nulls(b - a, day.schema.field("arrival_time").type))
    dups = day.take(pick[b:c])  # equal in every column to a row already in the history
    ties = day.take(pick[c:])  # same batch, arrival time, offset and key; other values
    ties = replace(ties, "amount", pc.add(ties["amount"], pa.scalar(0.01)))
    ties = replace(ties, "event_id", pc.binary_join_element_wise(ties["event_id"], pa.scalar("-tie"), ""))
    return pa.concat_tables([null_evt, null_arr, dups, ties])


def _write_files(table: pa.Table, folder: Path, files: int, rng: np.random.Generator) -> Path:
    folder.mkdir(parents=True)
    table = table.take(pa.array(rng.permutation(table.num_rows)))
    for i, chunk in enumerate(np.array_split(np.arange(table.num_rows), files)):
        pq.write_table(table.take(pa.array(chunk)), folder / f"part-{i:05d}.parquet", row_group_size=500)
    return folder


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Paths: the generated history (one folder per day) and its rewrites in 1 and 7 files."""
    base = tmp_path_factory.mktemp("determinism")
    days = generate_history(
        base / "history", START, days=2, events_per_day=EVENTS_PER_DAY, keys=60, seed=11, partitions=4, files_per_day=4
    )
    rng = np.random.default_rng(5)
    for folder in days:
        pq.write_table(_awkward_rows(_read_folder(folder), rng), folder / "part-awkward.parquet")
    everything = pa.concat_tables([_read_folder(f) for f in days])
    return {
        "history": base / "history",
        "day1": days[0],
        "day2": days[1],
        "1 file": _write_files(everything, base / "one_file", 1, rng),
        "7 files": _write_files(everything, base / "seven_files", 7, rng),
        "rows": everything.num_rows,
        "base": base,
    }


# --------------------------------------------------------------------------- outputs, canonically


def _canon(v):
    """A value in a form whose equality is bit equality (floats by their hex form)."""
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v.hex())
    if isinstance(v, (list, tuple)):
        return tuple(_canon(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _canon(x)) for k, x in v.items())
    assert not isinstance(v, (datetime, date)), "timestamps are compared as epoch microseconds"
    return v


def _rows(df) -> list[tuple]:
    """Sorted canonical rows; timestamps as exact epoch microseconds (never local time)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    cols = [
        F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, T.TimestampType) else F.col(f.name)
        for f in df.schema.fields
    ]
    return sorted(
        (tuple((k, _canon(v)) for k, v in r.asDict(recursive=True).items()) for r in df.select(*cols).collect()),
        key=repr,
    )


def _collect(result) -> dict:
    out = {name: _rows(getattr(result, name)) for name in OUTPUTS}
    out["schemas"] = {name: getattr(result, name).schema.simpleString() for name in OUTPUTS}
    out["metrics"] = result.metrics
    return out


def _replay(spark, pipeline, paths, state=None, flush=False) -> dict:
    result = replay(spark, pipeline, read_events(spark, paths), state=state, flush_at_end=flush)
    try:
        return _collect(result)
    finally:
        result.unpersist()


def _assert_same(what: str, got: list, want: list) -> None:
    """Multiset equality of canonical rows, reporting a few differences (not thousands)."""
    if got == want:
        return
    g, w = Counter(got), Counter(want)
    only_got, only_want = list((g - w).elements()), list((w - g).elements())
    pytest.fail(
        f"{what}: {len(got)} rows vs {len(want)} expected; {len(only_got)} unexpected, {len(only_want)} missing\n"
        f"unexpected: {only_got[:3]}\nmissing: {only_want[:3]}"
    )


def _assert_outputs_equal(name: str, got: dict, want: dict) -> None:
    assert got["schemas"] == want["schemas"]
    for out in ("aggregates", "late_events", "rejected"):
        _assert_same(out, got[out], want[out])
    _assert_same("state", got["state"], want["state"])
    assert got["metrics"] == want["metrics"]


#: (a) x (b) on one replay each: every file layout and every shuffle-partition count
#: is tried, each against the baseline (the generated files, the session's 2 partitions,
#: adaptive execution off). Pairing them keeps the file within its time budget.
VARIANTS = {
    "1 file, 1 partition": ("1 file", {"spark.sql.shuffle.partitions": "1"}),
    "7 files, 3 partitions": ("7 files", {"spark.sql.shuffle.partitions": "3"}),
    "generated files, 8 partitions, adaptive": (
        "history",
        {"spark.sql.shuffle.partitions": "8", "spark.sql.adaptive.enabled": "true"},
    ),
    # The baseline's 4 workers on 2 slots: a small input (by its files' footers), so kernel
    # tasks hold whole workers placed by their hash, build their timelines and count the
    # rejected rows; here the rows per worker are counted first and the plan made from them;
    # and the driver builds the timelines from one Spark aggregation per (worker, batch).
    "workers counted first": ("history", {"spark.rewindow.commits": "count"}),
    "commits summed by the driver": ("history", {"spark.rewindow.commits": "driver"}),
    # Scale-out (windowing.runner.placement, windowing.runner.chunks): 300 events a task spreads each
    # worker's keys over many tasks, its timeline sent to them as rows; 200 events a chunk
    # makes every task spill its rows and replay them in pieces of whole batches.
    # (As if on 8 slots: on the suite's 2, 4 workers of this size stay whole; more slots than the
    # ~27 tasks of 300 events would make more tasks, and the test slower, for nothing.)
    "keys spread over many tasks": (
        "7 files",
        {"spark.rewindow.eventsPerTask": "300", "spark.rewindow.taskSlots": "8"},
    ),
    "tasks in bounded pieces": ("history", {"spark.rewindow.eventsPerChunk": "200"}),
    "spread and in pieces": (
        "1 file",
        {
            "spark.rewindow.eventsPerTask": "300",
            "spark.rewindow.taskSlots": "8",
            "spark.rewindow.eventsPerChunk": "100",
        },
    ),
}


@pytest.fixture(scope="module")
def run(spark, history):
    """``run(pipeline, variant)``: the canonical outputs of one replay, computed once."""
    cache: dict = {}

    def _run(name: str, variant: str) -> dict:
        if (name, variant) in cache:
            return cache[name, variant]
        pipeline = PIPELINES[name]
        if variant in ("baseline", "baseline flush"):
            out = _replay(spark, pipeline, history["history"], flush=variant == "baseline flush")
        else:
            layout, conf = VARIANTS[variant]
            with session_conf(spark, conf):
                out = _replay(spark, pipeline, history[layout])
        cache[name, variant] = out
        return out

    return _run


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", PIPELINES)
def test_baseline_exercises_every_output(run, history, name):
    """Guards the comparisons below against comparing empty outputs."""
    out = run(name, "baseline")
    reasons = {dict(r)["emit_reason"] for r in out["aggregates"]}
    assert {"WATERMARK", "IDLE"} <= reasons, reasons
    assert len(out["late_events"]) > 50
    assert len(out["rejected"]) == 2 * (NULL_EVENT_TIME + NULL_ARRIVAL)
    kinds = {dict(r)["state_kind"] for r in out["state"]}
    assert {"worker", "key", "window"} <= kinds, kinds
    assert out["metrics"]["input_rows"] == history["rows"]
    if name == "clicks-sliding":  # some events late for only some of their 4 windows
        late_pairs = Counter((dict(r)["partition"], dict(r)["offset"], dict(r)["event_id"]) for r in out["late_events"])
        assert {1, 2, 3} & set(late_pairs.values())


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", PIPELINES)
def test_row_order_files_and_partitions_do_not_matter(spark, run, name, variant):
    """(a) rows shuffled into 1 or 7 files, (b) 1, 3 or 8 shuffle partitions, and the
    workers' commits summed up in the kernel tasks or in the driver."""
    settings = (
        "spark.sql.shuffle.partitions",
        "spark.sql.adaptive.enabled",
        "spark.rewindow.commits",
        "spark.rewindow.eventsPerTask",
        "spark.rewindow.eventsPerChunk",
        "spark.rewindow.taskSlots",
    )
    before = [spark.conf.get(k, None) for k in settings]
    _assert_outputs_equal(name, run(name, variant), run(name, "baseline"))
    assert [spark.conf.get(k, None) for k in settings] == before  # restored for the tests that follow


@pytest.fixture(scope="module")
def day1(spark, history):
    """Day 1 of each pipeline, replayed alone and written with write_outputs."""
    cache: dict = {}

    def _day1(name: str):
        if name not in cache:
            result = replay(spark, PIPELINES[name], read_events(spark, history["day1"]))
            try:
                outputs = _collect(result)
                out_dir = history["base"] / f"day1-{name}"
                write_outputs(result, out_dir)
            finally:
                result.unpersist()
            cache[name] = (outputs, out_dir / "state")
        return cache[name]

    return _day1


@pytest.mark.parametrize("flush", [False, True], ids=["open-windows-carried", "flush-at-end"])
@pytest.mark.parametrize("name", PIPELINES)
def test_day_by_day_equals_one_go(spark, run, history, day1, name, flush):
    first, state_dir = day1(name)
    second = _replay(spark, PIPELINES[name], history["day2"], state=read_state(spark, state_dir), flush=flush)
    whole = run(name, "baseline flush" if flush else "baseline")
    assert first["schemas"] == second["schemas"] == whole["schemas"]
    for out in ("aggregates", "late_events", "rejected"):
        _assert_same(out, sorted(first[out] + second[out], key=repr), whole[out])
    _assert_same("state", second["state"], whole["state"])
    # The cut is real: day 2 emits windows that day 1 opened and carried in its state.
    day2_start_us = int((START + timedelta(days=1)).timestamp()) * 1_000_000
    assert any(dict(r)["window_start"] < day2_start_us for r in second["aggregates"])
    assert any(dict(r)["state_kind"] == "window" for r in first["state"])
    assert first["metrics"]["input_rows"] + second["metrics"]["input_rows"] == whole["metrics"]["input_rows"]
    if flush:
        reasons = {dict(r)["emit_reason"] for r in second["aggregates"]}
        assert "END_OF_INPUT" in reasons
        assert not any(dict(r)["state_kind"] == "window" for r in second["state"])


# --------------------------------------------------------------------------- state and row order


def test_state_distinct_partials_do_not_depend_on_row_order(spark):
    """Same five events, one input partition, read in opposite orders: the carried state
    (an open window with a distinct partial) must be the same, bit for bit."""
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("arrival_time", T.TimestampType()),
            T.StructField("event_time", T.TimestampType()),
            T.StructField("offset", T.LongType()),
            T.StructField("partition", T.IntegerType()),
            T.StructField("user_id", T.StringType()),
            T.StructField("amount", T.DoubleType()),
            T.StructField("event_id", T.StringType()),
        ]
    )
    t0 = datetime(2024, 1, 1, 12, tzinfo=timezone.utc)
    rows = [(t0 + timedelta(seconds=i), t0 + timedelta(seconds=i), i, 0, "u", 1.0 + i, f"e{i}") for i in range(5)]
    pipeline = PIPELINES["clicks-hourly"]  # distinct over event_id; the 12:00 window stays open
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    try:
        states = []
        for ordered in (rows, rows[::-1]):
            result = replay(spark, pipeline, spark.createDataFrame(ordered, schema).coalesce(1))
            try:
                states.append(_rows(result.state))
            finally:
                result.unpersist()
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    windows = [dict(r) for r in states[0] if dict(r)["state_kind"] == "window"]
    assert len(windows) == 1 and sorted(windows[0]["partial_unique_events"]) == [f"e{i}" for i in range(5)]
    assert states[0] == states[1]
