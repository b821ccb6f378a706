"""Hostile inputs of issue 8: what each gets, with conservation checked on every replay.

| input | behaviour |
|---|---|
| integer epoch-ms time outside 0001-01-01 .. 9999-12-31T23:59:59.999 (``-2^63``, ``2^63-1``, ``1e16``) | row goes to ``rejected`` (``arrival time out of range`` / ``event time out of range``); the range's edges are replayed; ``verify`` runs |
| a state part lacking a column, or holding it with another type than the other parts | ``StateError`` naming the part and the column |
| a state lacking a column the pipeline needs (``watermark_ms``, ``partial_sum_amount``, the key) | ``StateError`` naming the column, before the replay's work |
| a key column whose type changed since the state was written | ``StateError`` naming the column and both types |
| a watermark near year 9999 | ``watermark_reached`` exact to the millisecond |
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.support.outputs import run_dir
from windowing import contract, replay
from windowing import validation as V
from windowing.runner.columns import MAX_EPOCH_MS, MIN_EPOCH_MS
from windowing.storage.errors import StateError
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_state, write_outputs

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
OUT_OF_RANGE = ("arrival time out of range", "event time out of range")


def _as_epoch_ms(table: pa.Table) -> pa.Table:
    """The generated events with integer epoch-millisecond times (as some sources deliver them)."""
    for name in ("arrival_time", "event_time"):
        ms = pc.cast(table[name], pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        table = table.set_column(table.column_names.index(name), name, ms)
    return table


def _day_with(history, tmp_path: Path, changes: dict[int, dict]) -> tuple[Path, pa.Table]:
    """Day 1 of ``history`` with integer times, rows ``changes`` (row -> column -> value) edited."""
    table = pa.concat_tables([pq.read_table(f) for f in sorted(Path(history[0]).glob("*.parquet"))])
    table = _as_epoch_ms(table.sort_by([("offset", "ascending"), ("partition", "ascending")]))
    cols = {c: table[c].to_pylist() for c in ("arrival_time", "event_time")}
    for row, values in changes.items():
        for c, v in values.items():
            cols[c][row] = v
    for c, values in cols.items():
        table = table.set_column(table.column_names.index(c), c, pa.array(values, pa.int64()))
    folder = tmp_path / "day"
    folder.mkdir()
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), folder / "part-00000.parquet")
    pq.write_table(table.slice(half), folder / "part-00001.parquet")
    return folder, table


def _verify(spark, monkeypatch, capsys, config, out, day):
    from windowing import cli, command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main(["verify", str(out), "--config", str(config), "--input", str(day), "--json"])
    return code, capsys.readouterr()


def _expected_failures() -> set[str]:
    """Checks that flag out-of-range rows: the input check (its rows are rejected) and,
    until validation knows the new reasons, the rejected-reason check."""
    pending = set() if set(OUT_OF_RANGE) <= set(contract.REJECT_REASONS) else {"rejected_reason"}
    return {"input_times_parseable"} | pending


# --------------------------------------------------------------------------- item 3: times out of range


BAD_TIMES = {  # row -> the edit, and the reason its row gets
    3: ({"arrival_time": INT64_MIN}, "arrival time out of range"),  # used to crash: ARITHMETIC_OVERFLOW
    10: ({"event_time": INT64_MIN}, "event time out of range"),  # used to give lateness_ms -9.2e18
    20: ({"event_time": INT64_MAX}, "event time out of range"),  # used to fail after the replay
    30: ({"arrival_time": INT64_MAX}, "arrival time out of range"),
    40: ({"arrival_time": 10**16}, "arrival time out of range"),
    50: ({"event_time": 10**16}, "event time out of range"),
    60: ({"event_time": MAX_EPOCH_MS + 1}, "event time out of range"),
    70: ({"arrival_time": MIN_EPOCH_MS - 1}, "arrival time out of range"),
    80: ({"arrival_time": INT64_MIN, "event_time": INT64_MAX}, "arrival time out of range"),
}


def test_integer_times_out_of_range_are_rejected_and_verify_runs(
    spark, history, configs, tmp_path, monkeypatch, capsys
):
    from windowing import load_pipeline

    pipeline = load_pipeline(configs["clicks"])
    day, table = _day_with(history, tmp_path, {row: edit for row, (edit, _) in BAD_TIMES.items()})
    events = read_events(spark, [str(day)])
    result = replay(spark, pipeline, events)
    try:
        offsets = table["offset"].to_pylist()
        parts = table["partition"].to_pylist()
        want = {(offsets[row], parts[row]): reason for row, (_, reason) in BAD_TIMES.items()}
        got = {
            (r["offset"], r["partition"]): r["reason"]
            for r in result.rejected.select("offset", "partition", "reason").collect()
        }
        assert got == want
        assert result.metrics["rejected_by_reason"] == {"arrival time out of range": 5, "event time out of range": 4}
        assert result.metrics["input_rows"] == table.num_rows
        lateness = [r[0] for r in result.late_events.select("lateness_ms").collect()]
        assert all(0 <= v < 86_400_000 for v in lateness), max(lateness)
        [cons] = V.run_checks(spark, pipeline, result, input_df=events, only={"conservation"})
        assert cons.passed, cons
        out = tmp_path / "out"
        write_outputs(result, out, pipeline=pipeline)
    finally:
        result.unpersist()
    assert result.metrics["watermark_reached"].startswith("2024-01-0")
    # verify runs every check on it (no crash); only the checks that flag such rows fail.
    code, io = _verify(spark, monkeypatch, capsys, configs["clicks"], out, day)
    assert "Traceback" not in io.err and "rewindow: error" not in io.err, io.err
    results = {r["name"]: r for r in json.loads(io.out)}
    failed = {n for n, r in results.items() if r["status"] == "FAIL"}
    assert results["conservation"]["status"] == "PASS"
    assert failed <= _expected_failures(), {n: results[n] for n in failed}
    assert results["input_times_parseable"]["failure_count"] == len(BAD_TIMES)
    assert code == (1 if failed else 0)


def test_times_at_the_edges_of_the_range_are_replayed(spark, history, configs, tmp_path):
    """0001-01-01T00:00:00.000Z is a time like any other, and so is 9999-12-31T22:59:59.999Z
    with 1-hour windows; at 9999-12-31T23:59:59.999Z the window would end at
    10000-01-01T00:00:00.000Z, no datetime: that row is rejected (issue 47)."""
    from windowing import load_pipeline

    pipeline = load_pipeline(configs["clicks"])
    span = 3_600_000
    edges = {5: {"event_time": MIN_EPOCH_MS}, 15: {"event_time": MAX_EPOCH_MS - span}, 25: {"event_time": MAX_EPOCH_MS}}
    day, table = _day_with(history, tmp_path, edges)
    events = read_events(spark, [str(day)])
    result = replay(spark, pipeline, events, flush_at_end=True)
    try:
        assert result.metrics["rejected_by_reason"] == {contract.WINDOW_OUT_OF_RANGE: 1}
        assert result.metrics["input_rows"] == table.num_rows
        ends = result.aggregates.selectExpr("unix_millis(window_start) s", "unix_millis(window_end) e")
        assert ends.where(f"e = {MAX_EPOCH_MS + 1 - span}").count() == 1  # the last hour of 9999 that ends in it
        first = MIN_EPOCH_MS  # an hour boundary
        found = (
            ends.where(f"s = {first}").count()
            + result.late_events.where(f"unix_millis(window_start) = {first}").count()
        )
        assert found == 1
        # One worker's batch held only the 9999 event (MIN_EVENT_TIME): its watermark, exactly.
        assert result.metrics["watermark_reached"] == "9999-12-31T22:59:59.999000+00:00"
        checks = V.run_checks(spark, pipeline, result, input_df=events)
        # Every check runs; only the skew check flags the three edge events (by design).
        assert {c.name: c.failure_count for c in V.failures(checks)} == {"input_event_time_skew": 3}, V.format_table(
            checks
        )
    finally:
        result.unpersist()


# --------------------------------------------------------------------------- issue 47: windows beyond the range

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The first time whose value minus 100 years is a time: 0001-01-01 plus 36 525 days.
FIRST_AFTER_A_CENTURY = EPOCH + timedelta(milliseconds=MIN_EPOCH_MS + 36_525 * 86_400_000)
#: seq -> (key, event time): near both edges of the range, in keys of their own. (Times of
#: 0001-01-01 itself stay out: PySpark turns no timestamp of that day into a datetime.)
EDGE_EVENTS = {
    1: ("top", datetime(9800, 6, 1, tzinfo=UTC)),
    2: ("top", datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)),
    3: ("top", datetime(9999, 6, 1, tzinfo=UTC)),
    4: ("bottom", datetime(500, 6, 1, tzinfo=UTC)),
    5: ("bottom", datetime(200, 6, 1, tzinfo=UTC)),  # late for the windows year 500 closed
    6: ("bottom", datetime(50, 1, 1, tzinfo=UTC)),
    7: ("bottom", datetime(100, 6, 1, tzinfo=UTC)),
    8: ("mid", datetime(2024, 1, 1, tzinfo=UTC)),
    9: ("bottom", FIRST_AFTER_A_CENTURY),
    10: ("first", datetime(50, 6, 1, tzinfo=UTC)),  # alone: its watermark minus 100 years is no time
}
#: The longest span, slide, gap and delay the configuration allows (windowing/durations.py:
#: 100 years).
CENTURY_WINDOWS = {
    "tumbling": {"tumbling-time-window": {"windowSpan": "36525d"}},
    "sliding": {
        "sliding-time-window": {
            "windowSpan": "36525d",
            "windowSlide": "3650d",
            "windowOffset": "1d",
            "timeConfig": {"delayWindowClose": "1d"},
        }
    },
    "session": {
        "session-window": {
            "maximumDuration": "36525d",
            "timeConfig": {"idleTimeout": "36525d", "delayWindowClose": "36525d"},
        }
    },
}


def _century_pipeline(kind: str, tmp_path: Path) -> Path:
    import yaml

    [(name, window)] = CENTURY_WINDOWS[kind].items()
    window = dict(window)
    time_config = {"eventTimeExtractor": "evt", **window.pop("timeConfig", {})}
    doc = {
        "version": 1,
        "name": f"century-{kind}",
        "source": {"arrivalTime": "arr", "arrivalOrder": ["seq"]},
        "emitter": {
            name: {
                **window,
                "keyExtractor": "k",
                "timeConfig": time_config,
                "aggregateDefinition": ["count", {"type": "sum", "column": "v"}, {"type": "min", "column": "evt"}],
            }
        },
        "replay": {"flushAtEnd": True},
    }
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _a_datetime(ms: int) -> bool:
    """Whether epoch ms ``ms`` is a Python datetime (what pyarrow's and Spark's readers make)."""
    try:
        EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return False
    return True


def _beyond(pipeline, t: int) -> bool:
    """Whether a bound of a window of the event at ``t`` is no datetime: the bounds from
    the reference model (tumbling and sliding; a session's are its events' times)."""
    from tests.support.reference_model import window_bounds
    from windowing.config import WindowType

    w = pipeline.window
    bounds = [] if w.type is WindowType.SESSION else [b for pair in window_bounds(w, t) for b in pair]
    return not all(_a_datetime(b) for b in bounds)


def _read_back(spark, folder: Path) -> dict[str, list]:
    """Every dataset of a written run, read with pyarrow and with Spark, down to Python values
    (rows in a stable order)."""
    rows = {}
    for name in ("aggregates", "late_events", "rejected", "state"):
        rows[name] = sorted(pq.read_table(folder / name).to_pylist(), key=repr)  # OverflowError beyond 9999
        assert len(spark.read.parquet(str(folder / name)).collect()) == len(rows[name]), name
    return rows


@pytest.mark.parametrize("kind", list(CENTURY_WINDOWS))
def test_windows_beyond_year_9999_or_before_year_1_are_rejected_and_outputs_read_back(
    spark, tmp_path, monkeypatch, capsys, kind
):
    """Issue 47: a 100-year window of a year-9999 event used to end in year 10070 (and a
    year-50 session's watermark minus a 100-year delay was in year -50), which neither
    pyarrow nor Spark could read back. A row whose windows reach beyond the range is
    rejected (``window out of range``); the others replay exactly (a session ending at
    9999-12-31T23:59:59.999 included), an effective watermark before the range written as
    null, planned from the count of rows per worker and without it
    (``spark.rewindow.commits=hash``)."""
    from windowing import load_pipeline
    from windowing.runner.session import session_conf

    config = _century_pipeline(kind, tmp_path)
    pipeline = load_pipeline(config)
    day = tmp_path / "day"
    day.mkdir()
    arrivals = [datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=seq) for seq in EDGE_EVENTS]
    pq.write_table(
        pa.table(
            {
                "arr": pa.array(arrivals, pa.timestamp("us", tz="UTC")),
                "evt": pa.array([t for _, t in EDGE_EVENTS.values()], pa.timestamp("us", tz="UTC")),
                "seq": pa.array(list(EDGE_EVENTS), pa.int64()),
                "k": [k for k, _ in EDGE_EVENTS.values()],
                "v": [float(seq) for seq in EDGE_EVENTS],
            }
        ),
        day / "part-0.parquet",
    )
    want = {
        seq: contract.WINDOW_OUT_OF_RANGE
        for seq, (_, t) in EDGE_EVENTS.items()
        if _beyond(pipeline, (t - EPOCH) // timedelta(milliseconds=1))
    }
    assert ({2, 6, 10} <= set(want)) if kind != "session" else not want
    events = read_events(spark, [str(day)])
    got = {}
    for commits in ("count", "hash"):
        with session_conf(spark, {"spark.rewindow.commits": commits}):
            result = replay(spark, pipeline, events)
            try:
                assert {r["seq"]: r["reason"] for r in result.rejected.collect()} == want, commits
                assert result.metrics["rejected_by_reason"] == (
                    {contract.WINDOW_OUT_OF_RANGE: len(want)} if want else {}
                )
                [cons] = V.run_checks(spark, pipeline, result, input_df=events, only={"conservation"})
                assert cons.passed, cons
                write_outputs(result, tmp_path / commits, pipeline=pipeline)
            finally:
                result.unpersist()
        got[commits] = _read_back(spark, run_dir(tmp_path / commits))
    assert got["hash"] == got["count"]
    rows = got["count"]
    replayed = sum(r["count"] for r in rows["aggregates"])
    late = {r["seq"] for r in rows["late_events"]}
    assert (replayed if kind == "session" else len(rows["aggregates"])) > 0
    if kind == "session":
        assert replayed == len(EDGE_EVENTS) - len(want) - len(late)
        ends = {r["window_end"] for r in rows["aggregates"]}
        assert EDGE_EVENTS[2][1] in ends  # the range's last millisecond, exactly
        # Year 50 minus a 100-year delay is before every time: no watermark, as minus infinity.
        assert [r["emit_watermark"] for r in rows["aggregates"] if r["k"] == "first"] == [None]
    else:
        assert 5 in late  # a late row's window and watermark read back too
    # rewindow verify --input: every check runs on it, conservation and the reasons pass.
    code, io = _verify(spark, monkeypatch, capsys, config, tmp_path / "count", day)
    assert "Traceback" not in io.err and "rewindow: error" not in io.err, io.err
    results = {r["name"]: r for r in json.loads(io.out)}
    for name in ("conservation", "rejected_reason", "replay_reproduces"):
        assert results[name]["status"] == "PASS", results[name]
    failed = {n for n, r in results.items() if r["status"] == "FAIL"}
    assert failed <= {"input_event_time_skew"}, {n: results[n] for n in failed}  # events centuries from arrival


# --------------------------------------------------------------------------- item 4: damaged or drifting state


def _state_copy(replayed, tmp_path: Path, name: str, edit, parts="all", keep_spark_schema=False) -> Path:
    """A copy of clicks' day-1 state with ``edit`` applied to its parts (all, or the first)."""
    r = replayed("clicks")
    folder = tmp_path / name
    shutil.copytree(run_dir(r.out1) / "state", folder)
    for crc in folder.glob(".*.crc"):
        crc.unlink()
    files = sorted(folder.glob("part-*.parquet"))
    assert len(files) >= 2
    for f in files if parts == "all" else files[:1]:
        t = edit(pq.read_table(f))
        # Spark stores its schema in each file: a writer that keeps it hides the change from
        # Spark's reader (it fills the column with nulls); most writers drop it.
        pq.write_table(t if keep_spark_schema else t.replace_schema_metadata(None), f)
    return folder


def _drop(column):
    return lambda t: t.drop_columns([column])


def _key_as_int(t: pa.Table) -> pa.Table:
    """The key column as integers (in a state file)."""
    i = t.column_names.index("user_id")
    return t.set_column(i, "user_id", pc.cast(pc.fill_null(pc.utf8_length(t["user_id"]), 0), pa.int64()))


def _length_of(name: str):
    """A column as integers (in a DataFrame)."""
    from pyspark.sql import functions as F

    return F.length(name).cast("long")


@pytest.mark.parametrize("keep_spark_schema", [False, True], ids=["plain", "spark-schema-kept"])
@pytest.mark.parametrize("column", ["watermark_ms", "partial_sum_amount", "user_id"])
def test_a_state_part_lacking_a_column_is_named(spark, replayed, tmp_path, column, keep_spark_schema):
    folder = _state_copy(replayed, tmp_path, "state", _drop(column), parts="first", keep_spark_schema=keep_spark_schema)
    bad = sorted(folder.glob("part-*.parquet"))[0]
    with pytest.raises(StateError) as err:
        read_state(spark, folder)
    assert str(err.value).startswith(f"{bad}: state column {column!r} is missing from this part"), err.value


def test_a_state_part_with_another_column_type_is_named(spark, replayed, tmp_path):
    folder = _state_copy(replayed, tmp_path, "state", _key_as_int, parts="first")
    with pytest.raises(StateError) as err:
        read_state(spark, folder)
    msg = str(err.value)
    first, second = sorted(folder.glob("part-*.parquet"))[:2]
    assert msg.startswith(f"{second}: state column 'user_id' is string here but bigint in {first}"), msg


STATE_LACKS = {  # column every part lacks -> what the message says
    "watermark_ms": "column 'watermark_ms' is missing",
    "partial_sum_amount": "column 'partial_sum_amount' is missing (the partial value of aggregate 'sum_amount')",
    "user_id": "column 'user_id' is missing (the key column)",
    "partition": "column 'partition' is missing (the worker column)",
}


@pytest.mark.parametrize("column", list(STATE_LACKS))
def test_a_state_lacking_a_column_is_refused_naming_it(spark, replayed, tmp_path, column):
    r = replayed("clicks")
    folder = _state_copy(replayed, tmp_path, "state", _drop(column))
    state = read_state(spark, folder)  # consistent parts: a readable dataset, but not this pipeline's state
    with pytest.raises(StateError) as err:
        replay(spark, r.pipeline, r.events(spark, 2), state=state)
    msg = str(err.value)
    assert msg.startswith(f"{folder}: the carried state does not fit pipeline 'clicks-hourly'"), msg
    assert STATE_LACKS[column] in msg, msg


def test_a_key_column_whose_type_changed_is_refused_naming_both_types(spark, replayed, tmp_path):
    r = replayed("clicks")
    folder = _state_copy(replayed, tmp_path, "state", _key_as_int)
    with pytest.raises(
        StateError,
        match=r"column 'user_id' \(the key column\) is bigint in the state but string "
        r"in the input: its type changed",
    ):
        replay(spark, r.pipeline, r.events(spark, 2), state=read_state(spark, folder))
    # The other way round: the events' key column changed type since day 1's state.
    events = r.events(spark, 2).withColumn("user_id", _length_of("user_id"))
    with pytest.raises(StateError, match=r"column 'user_id' \(the key column\) is string in the state but bigint"):
        replay(spark, r.pipeline, events, state=r.state1(spark))


def test_a_partial_whose_type_changed_is_refused(spark, replayed, tmp_path):
    r = replayed("clicks")
    folder = _state_copy(
        replayed,
        tmp_path,
        "state",
        lambda t: t.set_column(
            t.column_names.index("partial_min_amount"),
            "partial_min_amount",
            pc.cast(t["partial_min_amount"], pa.float32()),
        ),
    )
    with pytest.raises(
        StateError,
        match=r"column 'partial_min_amount' is float in the state, but min over 'amount' "
        r"\(double in the input\) keeps double",
    ):
        replay(spark, r.pipeline, r.events(spark, 2), state=read_state(spark, folder))


def test_the_cli_names_the_damaged_state_and_writes_nothing(spark, replayed, tmp_path, monkeypatch, capsys):
    from windowing import cli, command_line

    r = replayed("clicks")
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    for name, edit, parts in (
        ("one-part", _drop("watermark_ms"), "first"),
        ("all-parts", _drop("watermark_ms"), "all"),
        ("key-type", _key_as_int, "all"),
    ):
        folder = _state_copy(replayed, tmp_path, name, edit, parts=parts)
        out = tmp_path / f"out-{name}"
        code = cli.main(
            [
                "replay",
                "--config",
                str(r.config),
                "--input",
                str(r.day2),
                "--output",
                str(out),
                "--state-in",
                str(folder),
            ]
        )
        err = capsys.readouterr().err
        assert code == 2, err
        [line] = [ln for ln in err.splitlines() if ln.startswith("rewindow: error: ")]
        assert str(folder) in line and ("watermark_ms" in line or "user_id" in line), line
        assert "Traceback" not in err
        assert not out.exists()


def test_the_state_of_the_pipeline_itself_passes(spark, replayed):
    """The check refuses nothing a replay wrote (day 2 from day 1, conservation holding),
    and reads no data (schema only: no Spark job)."""
    from tests.quality.test_bad_inputs import jobs_run_by
    from windowing.runner.normalise import state_problems

    r = replayed("clicks")
    prev = r.state1(spark)
    events = r.events(spark, 2)
    found = []
    assert jobs_run_by(spark, lambda: found.append(state_problems(spark, r.pipeline, prev, events))) == []
    assert found == [[]]
    broken = prev.drop("watermark_ms").withColumn("user_id", _length_of("user_id"))
    assert jobs_run_by(spark, lambda: found.append(state_problems(spark, r.pipeline, broken, events))) == []
    assert found[1] == [
        "column 'watermark_ms' is missing",
        "column 'user_id' (the key column) is bigint in the state but string in the input: "
        "its type changed since the state was written",
    ]
    result = replay(spark, r.pipeline, events, state=prev)
    try:
        [cons] = V.run_checks(spark, r.pipeline, result, input_df=events, prev_state=prev, only={"conservation"})
        assert cons.passed, cons
    finally:
        result.unpersist()


# --------------------------------------------------------------------------- item 12a: exact watermark


@pytest.mark.parametrize(
    "ms",
    [MAX_EPOCH_MS, MAX_EPOCH_MS - 1, MIN_EPOCH_MS, 1_704_067_200_001, -1, 0, 253_402_300_799_001, 4_102_444_800_123],
)
def test_watermark_reached_is_exact_to_the_millisecond(ms):
    from windowing import parse_pipeline
    from windowing.runner.replay import build_metrics

    pipeline = parse_pipeline(
        {
            "name": "n",
            "source": {"arrivalTime": "t"},
            "emitter": {"tumbling-time-window": {"windowSpan": "1s", "aggregateDefinition": ["count"]}},
        }
    )
    metrics = build_metrics({}, {"p": None, "mx": None}, {}, [{"watermark_ms": ms}, {"watermark_ms": None}], pipeline)
    reached = datetime.fromisoformat(metrics["watermark_reached"])
    assert reached == datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
    assert reached.microsecond % 1000 == 0


# --------------------------------------------------------------------------- issue 47: nanosecond timestamps


def _nanos_tables(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """``table`` (ms-aligned times) with sub-millisecond noise, as pandas writes it (Parquet
    2.6: ``TIMESTAMP(NANOS)``; the arrival time adjusted to UTC, the event time and a plain
    column ``seen_at`` local date-times), and the same times floored to microseconds."""
    n = table.num_rows
    noise = [(i * 7919 + 104729) % 1_000_000 for i in range(n)]
    nanos, micros = table, table
    for name, tz in (("arrival_time", "UTC"), ("event_time", None)):
        ms = pc.cast(table[name], pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
        ns = [m * 1_000_000 + d for m, d in zip(ms, noise)]
        i = table.column_names.index(name)
        nanos = nanos.set_column(i, name, pa.array(ns, pa.timestamp("ns", tz=tz)))
        micros = micros.set_column(i, name, pa.array([v // 1000 for v in ns], pa.timestamp("us", tz=tz)))
        if tz is None:
            seen = [v - 123_456_789_001 for v in ns]  # before 1970 for none of them; floors all the same
            nanos = nanos.append_column("seen_at", pa.array(seen, pa.timestamp("ns")))
            micros = micros.append_column("seen_at", pa.array([v // 1000 for v in seen], pa.timestamp("us")))
    return nanos, micros


def test_nanosecond_parquet_timestamps_replay_as_the_same_times(spark, replayed, tmp_path):
    """pandas' ``datetime64[ns]`` in Parquet 2.6 (``TIMESTAMP(NANOS)``): Spark refuses the
    type (``PARQUET_TYPE_ILLEGAL``). rewindow reads it as the times it holds, floored to the
    millisecond as every time: as the arrival time (adjusted to UTC), the event time (a local
    date-time) and a column carried along, in a replay and in a backfill. The outputs equal
    those of the same events written with microsecond timestamps, bit for bit, and the
    windows and state those of the millisecond history (issue 47)."""
    from tests.quality.conftest import START, rows
    from windowing.chain import Chain
    from windowing.partitions import Partitions
    from windowing.storage.outputs import read_outputs

    r = replayed("clicks")
    nanos, micros = _nanos_tables(pq.read_table(r.day1))
    landing = tmp_path / "landing"
    for folder, table in ((landing / "date=2024-01-01", nanos), (tmp_path / "micros", micros)):
        folder.mkdir(parents=True)
        pq.write_table(table, folder / "part-0.parquet", version="2.6")
    assert "timeUnit=nanoseconds" in str(pq.read_metadata(landing / "date=2024-01-01" / "part-0.parquet").schema)
    got_events = read_events(spark, [str(landing / "date=2024-01-01")], pipeline=r.pipeline)
    want_events = read_events(spark, [str(tmp_path / "micros")], pipeline=r.pipeline)
    assert dict(got_events.dtypes) == dict(want_events.dtypes)
    assert dict(got_events.dtypes)["event_time"] == "timestamp_ntz"
    seen = [v for v in got_events.selectExpr("unix_micros(cast(seen_at as timestamp)) as v").toArrow()["v"].to_pylist()]
    assert sorted(seen) == sorted(micros["seen_at"].cast(pa.int64()).to_pylist())  # exact, to the microsecond
    got, want = replay(spark, r.pipeline, got_events), replay(spark, r.pipeline, want_events)
    try:
        for name in ("aggregates", "late_events", "rejected", "state"):
            assert rows(getattr(got, name)) == rows(getattr(want, name)), name
        assert got.late_events.count() > 0
        history = read_outputs(spark, r.out1)  # the same events at millisecond times
        for name in ("aggregates", "state"):
            assert rows(getattr(got, name)) == rows(getattr(history, name)), name
    finally:
        got.unpersist()
        want.unpersist()

    chain = Chain(spark, r.pipeline, str(landing), str(tmp_path / "out"), Partitions("day", START))
    [part] = chain.replay(["2024-01-01"])
    assert part.committed, [c for c in part.checks if not c.passed]
    backfilled = read_outputs(spark, part.folder)
    assert rows(backfilled.aggregates) == rows(history.aggregates)


@pytest.mark.parametrize("merge", [False, True], ids=["schema-from-the-footer", "mergeSchema"])
def test_nanosecond_times_are_floored_to_the_millisecond(spark, tmp_path, merge):
    """Before 1970 too, and at the ends of int64 nanoseconds (1677 and 2262); also when
    Spark infers the schema itself (``mergeSchema``)."""
    from windowing import parse_pipeline
    from windowing.runner.columns import epoch_ms

    ns = [-1, -999_999, -1_000_000, -1_000_001, 1_999_999, INT64_MIN, INT64_MAX]
    table = pa.table({"utc": pa.array(ns, pa.timestamp("ns", tz="UTC")), "local": pa.array(ns, pa.timestamp("ns"))})
    pq.write_table(table, tmp_path / "t.parquet", version="2.6")
    source = {"arrivalTime": "utc", **({"options": {"mergeSchema": True}} if merge else {})}
    window = {"windowSpan": "1h", "aggregateDefinition": [{"type": "count"}]}
    pipeline = parse_pipeline({"name": "nanos", "source": source, "emitter": {"tumbling-time-window": window}})
    df = read_events(spark, [str(tmp_path / "t.parquet")], pipeline=pipeline)
    types = {f.name: f.dataType for f in df.schema.fields}
    got = df.select(*[epoch_ms(c, types[c]).alias(c) for c in ("utc", "local")]).toArrow().to_pylist()
    want = [v // 1_000_000 for v in ns]
    assert [g["utc"] for g in got] == want and [g["local"] for g in got] == want


def test_nanosecond_times_in_a_flat_landing_zone_are_named_with_file_and_column(spark, tmp_path):
    """Without day folders no footer is read before Spark infers the schema: the nanosecond
    column cannot be turned into times, so the error names the file and the column."""
    from windowing.landing import read_partition_events
    from windowing.storage.errors import InputError

    pq.write_table(pa.table({"arrival_time": pa.array([0], pa.timestamp("ns"))}), tmp_path / "a.parquet", version="2.6")
    start = datetime(1970, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(InputError, match=r"a\.parquet: column 'arrival_time' is a Parquet INT64 \(TIMESTAMP\(NANOS"):
        read_partition_events(
            spark, str(tmp_path), start, start + timedelta(days=1), "arrival_time", partition_column=None
        )
