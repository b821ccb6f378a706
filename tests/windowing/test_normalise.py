"""The internal time columns are computed in two places: in Spark (for the summary and
the rejected rows) and, for zoned timestamps, dates and integers, in the kernel tasks
(so they are not shuffled). Both must agree exactly, on awkward values too."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from windowing import kernel as K
from windowing import parse_pipeline
from windowing.engine import _arrow_types, _normalise

UTC = timezone.utc
TIMES = [
    datetime(2024, 1, 1, tzinfo=UTC),
    datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC),  # sub-millisecond: floored
    datetime(1969, 12, 31, 23, 59, 59, 999_001, tzinfo=UTC),  # before the epoch: floored down
    datetime(1, 1, 1, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),  # beyond 2^53 microseconds
]
INTS = [0, 1_999, -1_999, -1, 2**62 + 7, -(2**62) - 7]


def _pipeline(arrival: str, event: str, batch: dict) -> object:
    return parse_pipeline({
        "name": "n",
        "source": {"arrivalTime": arrival, "batch": batch},
        "emitter": {"tumbling-time-window": {
            "windowSpan": "1s", "timeConfig": {"eventTimeExtractor": event},
            "aggregateDefinition": [{"type": "count"}]}},
    })


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
    spec = K.Spec(pipeline=pipeline, input_types=_arrow_types(spark, df))
    derived = K.task_derived(spec)
    assert derived == {"__arr", "__evt", "__batch"}
    expected = _normalise(pipeline, df).select("__arr", "__evt", "__batch").toArrow()
    table = K.with_event_columns(df.toArrow(), spec)
    for c in ("__arr", "__evt", "__batch"):
        assert table[c].to_pylist() == expected[c].to_pylist(), c
    assert set(table["__kind"].to_pylist()) == {K.EVENT}


def test_strings_and_local_timestamps_stay_with_spark(spark):
    df = spark.createDataFrame([("2024-01-01 00:00:00", datetime(2024, 1, 1))], "s string, l timestamp_ntz")
    for arrival in ("s", "l"):
        spec = K.Spec(pipeline=_pipeline(arrival, arrival, {"interval": "1s"}), input_types=_arrow_types(spark, df))
        assert K.task_derived(spec) == frozenset()
