"""Hostile values and files (issue 8's list of what was not covered yet), each replayed
with conservation checked: every input row is emitted, open, late or rejected.

| input | behaviour |
|---|---|
| a non-Parquet file among the Parquet files of a day | ``InputError`` naming that file, before any work |
| NaN and ±inf amounts | replayed; sums/min/max follow IEEE and Spark's NaN ordering; conservation holds |
| null keys and null workers | a key / worker of its own (null), as in the live pipeline's grouping |
| unicode, NUL and 1 MB keys | keys are compared by value, byte for byte; emitted unchanged |
"""

from __future__ import annotations

import datetime as dt
import math

import pyarrow.parquet as pq
import pytest
import yaml

from tests.quality.conftest import rows
from tests.quality.test_bad_inputs import at, frame, small
from windowing import replay
from windowing import validation as V
from windowing.storage.errors import InputError
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_state


def _conserved(spark, pipeline, result, events):
    [res] = V.run_checks(spark, pipeline, result, input_df=events, only={"conservation"})
    assert res.passed, res


def test_a_non_parquet_file_among_the_days_files_is_named(spark, replayed, tmp_path):
    import shutil

    r = replayed("clicks")
    day = shutil.copytree(r.day1, tmp_path / "day")
    stray = day / "notes.csv"
    stray.write_text("user_id,amount\nu1,3\n")
    with pytest.raises(InputError) as err:
        read_events(spark, [str(day)], pipeline=r.pipeline)
    assert str(err.value).startswith(f"{stray}: not a readable Parquet file")


def test_nan_and_infinite_amounts(spark):
    p = small()
    data = [
        (at(1), at(1), 1, "a", float("nan"), "x1"),
        (at(2), at(2), 2, "a", 1.0, "x2"),
        (at(3), at(3), 3, "b", float("inf"), "x3"),
        (at(4), at(4), 4, "b", float("-inf"), "x4"),
        (at(5), at(5), 5, "c", float("inf"), "x5"),
        (at(6), at(6), 6, "c", 2.5, "x6"),
    ]
    events = frame(spark, data)
    result = replay(spark, p, events, flush_at_end=True)
    try:
        sums = {r["k"]: r["sum_v"] for r in result.aggregates.collect()}
        assert math.isnan(sums["a"]) and math.isnan(sums["b"]) and sums["c"] == float("inf")
        _conserved(spark, p, result, events)
    finally:
        result.unpersist()


def test_null_keys_and_null_workers_are_keys_of_their_own(spark):
    p = small(**{"source/worker": "w"})
    schema = "arr timestamp, evt timestamp, seq long, k string, v double, id string, w string"
    data = [
        (at(1), at(1), 1, None, 1.0, "x1", None),
        (at(2), at(2), 2, None, 2.0, "x2", None),
        (at(3), at(3), 3, "a", 4.0, "x3", None),
        (at(4), at(4), 4, None, 8.0, "x4", "w1"),
    ]
    events = frame(spark, data, schema)
    result = replay(spark, p, events, flush_at_end=True)
    try:
        got = sorted(((r["w"], r["k"], r["count"], r["sum_v"]) for r in result.aggregates.collect()), key=repr)
        assert got == sorted([(None, None, 2, 3.0), (None, "a", 1, 4.0), ("w1", None, 1, 8.0)], key=repr)
        _conserved(spark, p, result, events)
    finally:
        result.unpersist()


def test_unicode_nul_and_one_megabyte_keys_are_kept_byte_for_byte(spark):
    p = small()
    big = "k" * (1 << 20)
    keys = ["Zürich 東京 🚀", "a\x00b", "a\x00c", "a", big]
    data = [(at(i), at(i), i, k, float(i), f"x{i}") for i, k in enumerate(keys, 1)]
    data.append((at(9), at(9), 9, "a\x00b", 10.0, "x9"))
    events = frame(spark, data)
    result = replay(spark, p, events, flush_at_end=True)
    try:
        got = {r["k"]: (r["count"], r["sum_v"]) for r in result.aggregates.collect()}
        assert got == {
            "Zürich 東京 🚀": (1, 1.0),
            "a\x00b": (2, 12.0),
            "a\x00c": (1, 3.0),
            "a": (1, 4.0),
            big: (1, 5.0),
        }
        _conserved(spark, p, result, events)
    finally:
        result.unpersist()


def test_times_far_from_now_but_in_range_replay(spark):
    """Years 1 and 9999 are valid times: replayed, not rejected (the 10 s window of the
    later ends at 9999-12-31T23:59:50, in the range: issue 47)."""
    p = small()
    early, late = dt.datetime(1, 1, 1, 0, 0, 5), dt.datetime(9999, 12, 31, 23, 59, 49, 999_000)
    events = frame(spark, [(early, early, 1, "a", 1.0, "x1"), (late, late, 2, "a", 2.0, "x2")])
    result = replay(spark, p, events, flush_at_end=True)
    try:
        assert result.metrics["rejected_rows"] == 0
        # (PySpark cannot turn timestamps before year 1 into datetimes: look at counts only)
        assert sorted(r["count"] for r in result.aggregates.select("count").collect()) == [1, 1]
        _conserved(spark, p, result, events)
    finally:
        result.unpersist()


# --------------------------------------------------------------------------- issue 47: names with dots and backticks

#: The clicks pipeline's columns, renamed as flattened JSON names them (and one backtick).
DOTTED = {
    "arrival_time": "arrival.time",
    "event_time": "event.time",
    "offset": "kafka.offset",
    "partition": "kafka`partition",
    "user_id": "user.id",
    "amount": "amount.usd",
    "event_id": "event.id",
}


def _dotted_pipeline(configs):
    from windowing import parse_pipeline

    return parse_pipeline(_dotted_doc(configs))


def _dotted_doc(configs) -> dict:
    doc = yaml.safe_load(configs["clicks"].read_text())
    doc.pop("reconcile")
    src, w = doc["source"], doc["emitter"]["tumbling-time-window"]
    src["arrivalTime"], src["arrivalOrder"], src["worker"] = (
        DOTTED[c] for c in ("arrival_time", "offset", "partition")
    )
    w["keyExtractor"], w["timeConfig"]["eventTimeExtractor"] = DOTTED["user_id"], DOTTED["event_time"]
    aggs = w["aggregateDefinition"]
    for a in aggs[1:]:
        a["column"] = DOTTED[a["column"]]
        a.setdefault("name", f"{a['type']}_{a['column'].split('.')[0]}")  # the plain run's output names
    return doc


def _dotted_day(table, folder):
    folder.mkdir()
    pq.write_table(table.rename_columns([DOTTED.get(c, c) for c in table.column_names]), folder / "part-0.parquet")
    return folder


def test_columns_named_with_dots_and_backticks_replay_as_the_plain_names_do(spark, replayed, configs, tmp_path, verify):
    """Key ``user.id``, worker ``kafka`partition``, aggregates over ``amount.usd``, times
    ``arrival.time`` and ``event.time``: day 2 replayed from day 1's written state gives the
    same windows, late and rejected rows and state as the plain names, and every check
    passes, ``rewindow verify`` included (issue 47)."""
    from windowing.storage.outputs import write_outputs

    plain = replayed("clicks")  # day 1, then day 2 from day 1's state, with the plain names
    pipeline = _dotted_pipeline(configs)
    days = [_dotted_day(pq.read_table(d), tmp_path / f"day{i}") for i, d in ((1, plain.day1), (2, plain.day2))]
    first = replay(spark, pipeline, read_events(spark, [str(days[0])], pipeline=pipeline))
    try:
        write_outputs(first, tmp_path / "out1", pipeline=pipeline)
    finally:
        first.unpersist()
    events = read_events(spark, [str(days[1])], pipeline=pipeline)
    state = read_state(spark, tmp_path / "out1")
    got = replay(spark, pipeline, events, state=state)
    try:
        back = {v: k for k, v in DOTTED.items()}
        for name in ("aggregates", "late_events", "rejected", "state"):
            g = getattr(got, name)
            g = g.toDF(*[back.get(c, c) for c in g.columns])
            w = getattr(plain.result2, name).drop("fingerprint")  # the fingerprint covers the names
            assert rows(g.select(*w.columns)) == rows(w), name
        assert plain.result2.aggregates.count() > 0 and plain.result2.late_events.count() > 0
        results = V.run_checks(spark, pipeline, got, input_df=events, prev_state=state)
        assert [r for r in results if not r.passed] == []
        write_outputs(got, tmp_path / "out2", pipeline=pipeline)
    finally:
        got.unpersist()
    config = tmp_path / "dotted.yaml"
    config.write_text(yaml.safe_dump(_dotted_doc(configs)))
    code, out, err = verify(tmp_path / "out2", "--config", config, "--state-in", tmp_path / "out1")
    assert code == 0, out + err
