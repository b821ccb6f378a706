"""Bad inputs, one test each: what the replay does with them, and what the checks say.

| input | behaviour |
|---|---|
| null / unparseable time | row goes to ``rejected`` with its reason; the rest is replayed |
| sum over a string column, event time of type double | ``ConfigError`` naming the field and column, before any Spark job |
| configured column missing from the data | ``ConfigError`` naming the field and column, before any Spark job |
| empty partition (no files, or files of zero rows) | success, zero rows out, state carried unchanged |
| identical duplicate events | each one counts (an event is a row); output is deterministic |
| corrupted / truncated / empty Parquet file | ``InputError`` whose message starts with the file's path |
| missing / incomplete / garbage / foreign state | ``StateError`` (or ``StateMismatchError``) saying which and where |
"""

from __future__ import annotations

import datetime as dt
import shutil

import pyarrow.parquet as pq
import pytest
import yaml

from tests.quality.conftest import rows
from tests.support.outputs import run_dir
from windowing import parse_pipeline, replay
from windowing import validation as V
from windowing.config import ConfigError
from windowing.storage.errors import InputError, StateError
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_state

SMALL = {
    "version": 1,
    "name": "small",
    "source": {"arrivalTime": "arr", "arrivalOrder": ["seq"]},
    "emitter": {
        "tumbling-time-window": {
            "windowSpan": "10s",
            "keyExtractor": "k",
            "timeConfig": {"eventTimeExtractor": "evt"},
            "aggregateDefinition": ["count", {"type": "sum", "column": "v"}, {"type": "distinct", "column": "id"}],
        }
    },
}
SCHEMA = "arr timestamp, evt timestamp, seq long, k string, v double, id string"
T0 = dt.datetime(2024, 1, 1)


def small(**changes):
    doc = yaml.safe_load(yaml.safe_dump(SMALL))
    for path, value in changes.items():
        *parents, last = path.split("/")
        d = doc
        for p in parents:
            d = d[p]
        d[last] = value
    return parse_pipeline(doc)


def at(s: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=s)


def frame(spark, data, schema=SCHEMA):
    return spark.createDataFrame(data, schema)


def jobs_run_by(spark, fn):
    """Call ``fn`` under a fresh Spark job group; return the ids of the jobs it ran."""
    import uuid

    sc = spark.sparkContext
    group = f"probe-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, "does this start any Spark work?")
    try:
        fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return list(sc.statusTracker().getJobIdsForGroup(group))


# --------------------------------------------------------------------------- times


def test_null_and_unparseable_times_are_rejected_with_their_reason(spark):
    p = small()
    data = [
        ("2024-01-01 00:00:01", "2024-01-01 00:00:01", 1, "a", 1.0, "x1"),
        ("2024-01-01T00:00:02Z", "2024-01-01T00:00:02.500Z", 2, "a", 2.0, "x2"),
        ("garbage", "2024-01-01 00:00:03", 3, "a", 3.0, "x3"),
        (None, "2024-01-01 00:00:04", 4, "a", 4.0, "x4"),
        ("2024-01-01 00:00:05", "2024-13-45 99:99:99", 5, "a", 5.0, "x5"),
        ("2024-01-01 00:00:06", None, 6, "a", 6.0, "x6"),
    ]
    events = frame(spark, data, "arr string, evt string, seq long, k string, v double, id string")
    result = replay(spark, p, events, flush_at_end=True)
    rejected = {r["seq"]: r["reason"] for r in result.rejected.collect()}
    assert rejected == {
        3: "arrival time unparseable",
        4: "arrival time is null",
        5: "event time unparseable",
        6: "event time is null",
    }
    [window] = result.aggregates.collect()
    assert (window["count"], window["sum_v"]) == (2, 3.0)
    assert result.metrics["rejected_by_reason"] == {
        "arrival time is null": 1,
        "arrival time unparseable": 1,
        "event time is null": 1,
        "event time unparseable": 1,
    }
    checks = {
        r.name: r
        for r in V.run_checks(
            spark,
            p,
            result,
            input_df=events,
            only={"input_schema", "input_times_parseable", "rejected_reason", "conservation", "metrics_consistent"},
        )
    }
    result.unpersist()
    assert checks["input_times_parseable"].failure_count == 4  # the checks flag the rows ...
    assert checks["input_times_parseable"].blocking  # 4 of 6 rejected: far above quality.maxRejectedShare
    assert (
        "4 of 6 rows rejected (66.6667%), above quality.maxRejectedShare (0.1000%)"
        in checks["input_times_parseable"].description
    )
    assert checks["input_schema"].passed  # types are fine: null times are the rejected rows' business
    for ok in ("rejected_reason", "conservation", "metrics_consistent"):  # ... which were all accounted for
        assert checks[ok].passed, checks[ok]


# --------------------------------------------------------------------------- types and columns


def test_a_sum_over_a_string_column_is_a_config_error_naming_it(spark):
    events = frame(
        spark,
        [(at(1), at(1), 1, "a", "1.5", "x")],
        "arr timestamp, evt timestamp, seq long, k string, v string, id string",
    )
    message = r"aggregateDefinition\[1\]\.column: sum needs a numeric column; 'v' is string"
    with pytest.raises(ConfigError, match=message):
        replay(spark, small(), events)


def test_an_event_time_of_type_double_is_a_config_error(spark):
    events = frame(
        spark, [(at(1), 1.7e12, 1, "a", 1.0, "x")], "arr timestamp, evt double, seq long, k string, v double, id string"
    )
    with pytest.raises(ConfigError, match=r"timeConfig\.eventTimeExtractor: column 'evt' has type double"):
        replay(spark, small(), events)
    [schema_check] = V.input_checks(small(), events, only={"input_schema"})
    assert not schema_check.passed
    assert {(e["reason"], e["column"]) for e in schema_check.sample} == {("WRONG_DATATYPE", "evt")}


MISSING = {  # configured column the data lacks: YAML path -> (value, column named, field named)
    "arrivalTime": ("source/arrivalTime", "arrival", "arrival", "source.arrivalTime"),
    "arrivalOrder": ("source/arrivalOrder", ["offset"], "offset", "source.arrivalOrder[0]"),
    "worker": ("source/worker", "partition", "partition", "source.worker"),
    "batch": ("source/batch", {"column": "batch_id"}, "batch_id", "source.batch.column"),
    "key": ("emitter/tumbling-time-window/keyExtractor", "user", "user", "emitter.tumbling-time-window.keyExtractor"),
    "eventTime": (
        "emitter/tumbling-time-window/timeConfig/eventTimeExtractor",
        "event_ts",
        "event_ts",
        "emitter.tumbling-time-window.timeConfig.eventTimeExtractor",
    ),
    "aggregate": (
        "emitter/tumbling-time-window/aggregateDefinition",
        ["count", {"type": "max", "column": "amount"}],
        "amount",
        "emitter.tumbling-time-window.aggregateDefinition[1].column",
    ),
}


@pytest.mark.parametrize("case", list(MISSING))
def test_a_configured_column_the_data_lacks_is_a_config_error_before_any_work(spark, case):
    path, value, column, field = MISSING[case]
    pipeline = small(**{path: value})
    events = frame(spark, [(at(1), at(1), 1, "a", 1.0, "x")])
    errors = []

    def run():
        try:
            replay(spark, pipeline, events)
        except ConfigError as exc:
            errors.append(str(exc))

    assert jobs_run_by(spark, run) == []  # refused before Spark did anything
    assert errors and errors[0].startswith(f"{field}: column {column!r} is not in the input"), errors


def test_a_missing_column_through_the_cli_writes_nothing(spark, replayed, tmp_path, monkeypatch, capsys):
    from windowing import cli, command_line

    r = replayed("clicks")
    (tmp_path / "p.yaml").write_text(r.config.read_text().replace("keyExtractor: user_id", "keyExtractor: user"))
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main(
        ["replay", "--config", str(tmp_path / "p.yaml"), "--input", str(r.day1), "--output", str(tmp_path / "out")]
    )
    assert code == 2
    assert "keyExtractor: column 'user' is not in the input" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


# --------------------------------------------------------------------------- empty partitions


def test_an_empty_partition_folder_replays_as_zero_events_carrying_the_state(spark, replayed, tmp_path, monkeypatch):
    """Through the CLI: no files in the day's folder; the schema comes from the pipeline and state."""
    from windowing import cli, command_line

    r = replayed("clicks")
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main(
        [
            "replay",
            "--config",
            str(r.config),
            "--input",
            str(tmp_path / "empty"),
            "--output",
            str(tmp_path / "out"),
            "--state-in",
            str(r.out1 / "state"),
        ]
    )
    assert code == 0
    out = V.load_outputs(spark, tmp_path / "out")
    assert out.metrics["input_rows"] == 0
    assert [out.aggregates.count(), out.late_events.count(), out.rejected.count()] == [0, 0, 0]
    prev = r.state1(spark)
    assert rows(out.state) == rows(prev)  # every watermark, open window and counter carried as it was
    events = read_events(spark, [str(tmp_path / "empty")], pipeline=r.pipeline, state=prev)
    results = V.run_checks(
        spark,
        r.pipeline,
        out,
        input_df=events,
        prev_state=prev,
        only={"conservation", "state_fingerprint", "state_unique", "metrics_consistent"},
    )
    assert not V.failures(results), V.format_table(results)


def test_files_with_zero_rows_are_an_empty_partition(spark, replayed, tmp_path):
    r = replayed("sessions")
    schema = pq.read_schema(next(r.day1.glob("*.parquet")))
    (tmp_path / "day").mkdir()
    pq.write_table(schema.empty_table(), tmp_path / "day" / "part-00000.parquet")
    events = read_events(spark, [str(tmp_path / "day")])  # the files carry their schema
    assert events.count() == 0
    result = replay(spark, r.pipeline, events, state=r.state1(spark))
    try:
        assert result.aggregates.count() == 0
        assert rows(result.state) == rows(r.state1(spark))
    finally:
        result.unpersist()


def test_an_empty_folder_without_schema_or_pipeline_is_an_input_error(spark, tmp_path):
    with pytest.raises(InputError, match="no data files .* pass the events' schema or the pipeline"):
        read_events(spark, [str(tmp_path)])
    df = read_events(spark, [str(tmp_path)], schema=SCHEMA)
    assert df.count() == 0 and df.columns == ["arr", "evt", "seq", "k", "v", "id"]


# --------------------------------------------------------------------------- duplicates


def test_identical_duplicate_events_are_all_counted_and_deterministic(spark):
    """An event is a row: three identical rows are three events (the source delivered them
    three times). They are interchangeable in arrival order, so the output does not depend
    on which copy comes first. ``distinct`` counts their id once."""
    p = small()
    dup = (at(1), at(1), 7, "a", 2.5, "same")
    data = [dup, dup, dup, (at(2), at(2), 8, "a", 1.0, "other"), (at(3), at(3), 9, "b", 4.0, "b1")]
    outs = []
    for seed, parts in ((1, 1), (2, 3)):
        df = frame(spark, data[::-1] if seed == 2 else data).repartition(parts)
        result = replay(spark, p, df, flush_at_end=True)
        outs.append((rows(result.aggregates), rows(result.late_events), result.metrics["input_rows"]))
        if seed == 1:
            [cons] = V.run_checks(spark, p, result, input_df=df, only={"conservation"})
            assert cons.passed, cons
        result.unpersist()
    assert outs[0] == outs[1]
    by_key = {r[0]: r for r in outs[0][0]}
    assert by_key["a"][3:6] == (4, 8.5, 2)  # count, sum_v, distinct_id
    assert outs[0][2] == 5


# --------------------------------------------------------------------------- broken files


def _garbage(f):
    f.write_bytes(b"this is not parquet at all " * 40)


def _truncated(f):
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def _empty(f):
    f.write_bytes(b"")


@pytest.mark.parametrize("damage", [_garbage, _truncated, _empty], ids=["corrupted", "truncated", "zero-bytes"])
def test_a_broken_parquet_file_is_an_error_naming_the_file(spark, replayed, tmp_path, monkeypatch, capsys, damage):
    from windowing import cli, command_line

    r = replayed("clicks")
    day = shutil.copytree(r.day1, tmp_path / "date=2024-01-01")
    files = sorted(day.glob("*.parquet"))
    bad = files[1]
    damage(bad)
    damage(files[-1])  # a second bad file, later in the list: the first is named
    with pytest.raises(InputError) as err:
        read_events(spark, [str(day)])
    assert str(err.value).startswith(f"{bad}: not a readable Parquet file")
    # The command line says the same and writes nothing.
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    assert cli.main(["replay", "--config", str(r.config), "--input", str(day), "--output", str(tmp_path / "o")]) == 2
    assert str(bad) in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_damaged_data_pages_are_an_error_naming_the_file(spark, replayed, tmp_path, monkeypatch, capsys):
    """The footer is intact, so only Spark's first action finds out: the CLI still names the file."""
    from windowing import cli, command_line

    r = replayed("clicks")
    day = shutil.copytree(r.day1, tmp_path / "date=2024-01-01")
    bad = sorted(day.glob("*.parquet"))[1]
    data = bytearray(bad.read_bytes())
    for i in range(len(data) // 4, len(data) // 2, 7):
        data[i] ^= 0x5A
    bad.write_bytes(bytes(data))
    read_events(spark, [str(day)])  # every footer still reads
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    assert cli.main(["replay", "--config", str(r.config), "--input", str(day), "--output", str(tmp_path / "o")]) == 2
    assert f"rewindow: error: {bad}: cannot read Parquet input" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- state


def test_missing_or_broken_state_is_refused_with_a_clear_message(spark, replayed, tmp_path):
    r = replayed("clicks")
    with pytest.raises(StateError, match=r"no state here \(the folder does not exist\)"):
        read_state(spark, tmp_path / "nowhere")

    incomplete = shutil.copytree(run_dir(r.out1) / "state", tmp_path / "incomplete")
    (incomplete / "_SUCCESS").unlink()
    with pytest.raises(StateError, match="no complete state here"):
        read_state(spark, incomplete)

    garbage = shutil.copytree(run_dir(r.out1) / "state", tmp_path / "garbage")
    bad = sorted(garbage.glob("part-*"))[0]
    _garbage(bad)
    with pytest.raises(StateError) as err:
        read_state(spark, garbage)
    assert str(err.value).startswith(f"{bad}: not a readable Parquet file")

    not_state = tmp_path / "events-as-state"
    r.events(spark, 1).limit(3).write.parquet(str(not_state))
    with pytest.raises(StateError, match="not a rewindow state"):
        read_state(spark, not_state)


def test_state_of_another_pipeline_is_refused(spark, replayed):
    from windowing.runner.normalise import StateMismatchError

    clicks, sessions = replayed("clicks"), replayed("sessions")
    with pytest.raises(StateMismatchError, match="different pipeline configuration"):
        replay(spark, clicks.pipeline, clicks.events(spark), state=sessions.state1(spark))


def test_the_cli_refuses_a_missing_state(spark, replayed, tmp_path, monkeypatch, capsys):
    from windowing import cli, command_line

    r = replayed("clicks")
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main(
        [
            "replay",
            "--config",
            str(r.config),
            "--input",
            str(r.day2),
            "--output",
            str(tmp_path / "o"),
            "--state-in",
            str(tmp_path / "day1" / "state"),
        ]
    )
    assert code == 2
    assert "no state here" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- unusual column names and types


def test_a_key_column_of_nested_type_is_a_config_error(spark):
    events = frame(
        spark,
        [(at(1), at(1), 1, (1,), 1.0, "x")],
        "arr timestamp, evt timestamp, seq long, k struct<x:int>, v double, id string",
    )
    with pytest.raises(ConfigError, match="keyExtractor"):
        replay(spark, small(), events, flush_at_end=True).aggregates.collect()


def test_column_names_with_dots_are_taken_literally(spark):
    p = small(**{"source/arrivalTime": "arr.t", "emitter/tumbling-time-window/keyExtractor": "user.id"})
    events = frame(
        spark,
        [(at(1), at(1), 1, "a", 1.0, "x")],
        "`arr.t` timestamp, evt timestamp, seq long, `user.id` string, v double, id string",
    )
    [window] = replay(spark, p, events, flush_at_end=True).aggregates.collect()
    assert window["count"] == 1


def test_input_columns_named_like_engine_internals_are_not_overwritten(spark):
    p = small(**{"emitter/tumbling-time-window/aggregateDefinition": ["count", {"type": "sum", "column": "__batch"}]})
    events = frame(
        spark,
        [(at(1), at(1), 1, "a", 7, "x"), (at(2), at(2), 2, "a", 9, "y")],
        "arr timestamp, evt timestamp, seq long, k string, __batch long, id string",
    )
    try:
        [window] = replay(spark, p, events, flush_at_end=True).aggregates.collect()
    except ConfigError:
        return  # refusing the name would be fine too
    assert window["sum___batch"] == 16
