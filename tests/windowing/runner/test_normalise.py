"""The internal time columns are computed in two places: in Spark (for the summary and
the rejected rows) and, for zoned timestamps, dates and integers, in the kernel tasks
(so they are not shuffled). Both must agree exactly, on awkward values too: the edges
of the representable range included. Times outside that range are rejected in Spark, so
the tasks never see them, and nothing computed from them overflows."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from windowing import kernel as K
from windowing import parse_pipeline
from windowing.kernel.inputs import task_derived, with_event_columns
from windowing.runner.columns import MAX_EPOCH_MS, MIN_EPOCH_MS, arrow_types
from windowing.runner.normalise import normalise

UTC = timezone.utc
TIMES = [
    datetime(2024, 1, 1, tzinfo=UTC),
    datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC),  # sub-millisecond: floored
    datetime(1969, 12, 31, 23, 59, 59, 999_001, tzinfo=UTC),  # before the epoch: floored down
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),  # beyond 2^53 microseconds
]
INTS = [0, 1_999, -1_999, -1, MAX_EPOCH_MS, MIN_EPOCH_MS]  # the range's edges (floored by 7 ms, 1 s, 1 day)


def _pipeline(arrival: str, event: str, batch: dict) -> object:
    # Sessions without a delay: every in-range time replays (a fixed window of the range's
    # last millisecond would end beyond it and reject the row: "window out of range").
    return parse_pipeline(
        {
            "name": "n",
            "source": {"arrivalTime": arrival, "batch": batch},
            "emitter": {
                "session-window": {
                    "timeConfig": {"eventTimeExtractor": event, "idleTimeout": "1s"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )


CASES = {
    "timestamps, 1 s batches": ("ts", "ts2", {"interval": "1s"}),
    "timestamps, 1 day batches": ("ts", "ts2", {"interval": "1d"}),
    "integers, 7 ms batches": ("n", "n2", {"interval": "7ms"}),
    "dates, batch column": ("d", "d", {"column": "b"}),
    "int batch column": ("n", "ts", {"column": "b32"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tasks_derive_the_engines_time_columns(spark, case):
    arrival, event, batch = CASES[case]
    rows = []
    for i, (t, n) in enumerate(zip(TIMES, INTS)):
        rows.append((t, TIMES[-1 - i], n, INTS[-1 - i], date(1960, 1, 1) + timedelta(days=40_000 * i), i * 10**12, i))
    df = spark.createDataFrame(rows, "ts timestamp, ts2 timestamp, n long, n2 long, d date, b long, b32 int")
    pipeline = _pipeline(arrival, event, batch)
    spec = K.Spec(pipeline=pipeline, input_types=arrow_types(spark, df))
    derived = task_derived(spec)
    assert derived == {"__arr", "__evt", "__batch"}
    expected = normalise(pipeline, df).select("__arr", "__evt", "__batch", "reason").toArrow()
    assert expected["reason"].null_count == len(rows)  # every row is replayed
    table = with_event_columns(df.toArrow(), spec)
    for c in ("__arr", "__evt", "__batch"):
        assert table[c].to_pylist() == expected[c].to_pylist(), c
    assert set(table["__kind"].to_pylist()) == {K.EVENT}


def test_strings_and_local_timestamps_stay_with_spark(spark):
    df = spark.createDataFrame([("2024-01-01 00:00:00", datetime(2024, 1, 1))], "s string, l timestamp_ntz")
    for arrival in ("s", "l"):
        spec = K.Spec(pipeline=_pipeline(arrival, arrival, {"interval": "1s"}), input_types=arrow_types(spark, df))
        assert task_derived(spec) == frozenset()


# --------------------------------------------------------------------------- the representable range


def test_the_range_is_year_1_to_year_9999_in_whole_milliseconds():
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert MIN_EPOCH_MS == (datetime(1, 1, 1, tzinfo=UTC) - epoch) // timedelta(milliseconds=1)
    last = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    assert MAX_EPOCH_MS == (last - epoch) // timedelta(milliseconds=1)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Integer epoch ms: (value, accepted?).
EDGES = [
    (INT64_MIN, False),
    (INT64_MIN + 1, False),
    (-(10**16), False),
    (MIN_EPOCH_MS - 1, False),
    (MIN_EPOCH_MS, True),
    (0, True),
    (MAX_EPOCH_MS, True),
    (MAX_EPOCH_MS + 1, False),
    (10**16, False),
    (INT64_MAX, False),
]


@pytest.mark.parametrize("batch", [{"interval": "7ms"}, {"interval": "1d"}, {"column": "b"}])
def test_integer_times_outside_the_range_are_rejected_without_overflow(spark, batch):
    """int64 min used to overflow the batch computation (ARITHMETIC_OVERFLOW); 2^63-1 and
    1e16 used to pass, and fail after the whole replay, naming no column."""
    rows = [(v, 1_000, i, i) for i, (v, _) in enumerate(EDGES)]  # bad arrival times
    rows += [(1_000, v, 100 + i, 100 + i) for i, (v, _) in enumerate(EDGES)]  # bad event times
    df = spark.createDataFrame(rows, "n long, n2 long, b long, id long")
    pipeline = _pipeline("n", "n2", batch)
    out = {r["id"]: r for r in normalise(pipeline, df).collect()}  # evaluates __batch too
    for i, (v, ok) in enumerate(EDGES):
        arr, evt = out[i], out[100 + i]
        assert arr["reason"] == (None if ok else "arrival time out of range"), v
        assert evt["reason"] == (None if ok else "event time out of range"), v
        assert (arr["__arr"], evt["__evt"]) == ((v, v) if ok else (None, None)), v
        assert arr["__batch"] is not None or not ok
    # What the tasks compute for the accepted rows (the only ones they get) agrees.
    spec = K.Spec(pipeline=pipeline, input_types=arrow_types(spark, df))
    accepted = normalise(pipeline, df).where("reason is null")
    expected = accepted.select("__arr", "__evt", "__batch").toArrow()
    table = with_event_columns(accepted.select(*df.columns).toArrow(), spec)
    for c in ("__arr", "__evt", "__batch"):
        assert table[c].to_pylist() == expected[c].to_pylist(), c


def test_timestamps_and_dates_beyond_the_range_are_rejected(spark):
    """Spark timestamps and dates can hold years beyond 9999 and before 1 (Parquet files do)."""
    from pyspark.sql import functions as F

    df = spark.sql(f"""
        select *, timestamp'2024-01-01 00:00:00' as ok_ts, date'2024-01-01' as ok_d from values
          (1, timestamp_millis({MAX_EPOCH_MS}), date'9999-12-31'),
          (2, timestamp_millis({MAX_EPOCH_MS + 1}), date_from_unix_date(2932897)),
          (3, timestamp_millis({MIN_EPOCH_MS}), date'0001-01-01'),
          (4, timestamp_millis({MIN_EPOCH_MS - 1}), date_from_unix_date(-719163)),
          (5, timestamp_micros({MAX_EPOCH_MS * 1000 + 999}), date'2024-01-01')
        as t(id, ts, d)""")
    assert [r[0] for r in df.orderBy("id").select(F.year("ts")).collect()] == [9999, 10000, 1, 0, 9999]
    assert [r[0] for r in df.orderBy("id").select(F.year("d")).collect()] == [9999, 10000, 1, 0, 2024]
    for arrival, event, which in (
        ("ts", "ok_ts", "arrival"),
        ("ok_ts", "ts", "event"),
        ("d", "ok_d", "arrival"),
        ("ok_d", "d", "event"),
    ):
        norm = normalise(_pipeline(arrival, event, {"interval": "1s"}), df)
        got = {r["id"]: r["reason"] for r in norm.select("id", "reason").collect()}
        bad = f"{which} time out of range"
        assert got == {1: None, 2: bad, 3: None, 4: bad, 5: None}, (arrival, event)


# --------------------------------------------------------------------------- windows beyond the range (issue 47)

HOUR = 3_600_000
#: Event times (epoch ms) on both sides of every bound of the windows below.
NEAR_EDGES = sorted(
    {
        t + d
        for t in (MIN_EPOCH_MS, MIN_EPOCH_MS + 36_525 * 86_400_000, MAX_EPOCH_MS - 36_525 * 86_400_000, MAX_EPOCH_MS)
        for d in (0, 1, -1, HOUR, -HOUR, HOUR + 1, -HOUR - 1, 2 * HOUR, -2 * HOUR, 86_400_000, -86_400_000)
        if MIN_EPOCH_MS <= t + d <= MAX_EPOCH_MS
    }
)
WINDOWS = {
    "tumbling 1h": {"tumbling-time-window": {"windowSpan": "1h"}},
    "tumbling 1h offset 1ms": {"tumbling-time-window": {"windowSpan": "1h", "windowOffset": "1ms"}},
    "tumbling 100y": {"tumbling-time-window": {"windowSpan": "36525d"}},
    "sliding 2h/1h offset 1ms, delay 1d": {
        "sliding-time-window": {"windowSpan": "2h", "windowSlide": "1h", "windowOffset": "1ms"},
        "delay": "1d",
    },
    "sliding 100y/7d": {"sliding-time-window": {"windowSpan": "36525d", "windowSlide": "7d"}},
}


@pytest.mark.parametrize("window", list(WINDOWS))
def test_rows_whose_windows_leave_the_range_are_rejected_as_the_model_says(spark, window):
    """The Spark rule (normalise.window_out_of_range) agrees with the reference model's,
    which takes each window's bounds from its own window_bounds, millisecond by millisecond
    on both sides of each bound; a delay rejects nothing (an effective watermark before
    the range is written as null). Sessions reject nothing: test_hostile_inputs.py."""
    from tests.support.reference_model import window_out_of_range

    spec = dict(WINDOWS[window])
    delay = spec.pop("delay", None)
    [(kind, fields)] = spec.items()
    time_config = {"eventTimeExtractor": "t", **({"delayWindowClose": delay} if delay else {})}
    pipeline = parse_pipeline(
        {
            "name": "n",
            "source": {"arrivalTime": "a"},
            "emitter": {kind: {**fields, "timeConfig": time_config, "aggregateDefinition": ["count"]}},
        }
    )
    df = spark.createDataFrame([(0, t) for t in NEAR_EDGES], "a long, t long")
    got = {r["t"]: r["reason"] for r in normalise(pipeline, df).select("t", "reason").collect()}
    want = {t: "window out of range" if window_out_of_range(pipeline.window, t) else None for t in NEAR_EDGES}
    assert got == want
    assert None in got.values() and "window out of range" in got.values()
