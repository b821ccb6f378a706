"""Pipeline configuration: the example files load; every mistake is a ConfigError that
names the YAML field and the bad value; the Pipeline is frozen; durations parse to ms."""

from __future__ import annotations

import copy
import dataclasses
import json
import uuid
from pathlib import Path

import pytest
import yaml
from pyspark.sql import types as T

from windowing import ConfigError, load_pipeline, parse_pipeline, replay
from windowing.config import Clock, Lateness, WatermarkStrategy, WindowType

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples" / "pipelines").glob("*.yaml"))

S, M, H = 1_000, 60_000, 3_600_000


def test_examples_exist():
    assert {p.name for p in EXAMPLES} >= {"clicks-hourly.yaml", "sessions.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_configs_load(path):
    p = load_pipeline(path)
    doc = yaml.safe_load(path.read_text())
    assert p.name == doc["name"]
    assert p.source.arrival_time == doc["source"]["arrivalTime"]
    assert p.window.type.value in doc["emitter"]
    assert p.aggregates


def test_clicks_hourly_values():
    p = load_pipeline(ROOT / "examples/pipelines/clicks-hourly.yaml")
    w = p.window
    assert (w.type, w.span_ms, w.slide_ms, w.offset_ms) == (WindowType.TUMBLING, H, None, 0)
    assert (w.watermark_strategy, w.delay_ms, w.lateness) == (
        WatermarkStrategy.MIN_EVENT_TIME,
        5 * S,
        Lateness.WINDOW_CLOSED,
    )
    assert (w.idle_timeout_ms, w.idle_clock) == (30 * M, Clock.EVENT_TIME)
    assert p.source.arrival_order == ("offset",)
    assert (p.source.batch_column, p.source.batch_interval_ms) == (None, S)
    assert [(a.type, a.column, a.name) for a in p.aggregates] == [
        ("count", None, "count"),
        ("sum", "amount", "sum_amount"),
        ("min", "amount", "min_amount"),
        ("max", "amount", "max_amount"),
        ("distinct", "event_id", "unique_events"),
    ]
    assert p.flush_at_end is False


def test_sessions_values():
    p = load_pipeline(ROOT / "examples/pipelines/sessions.yaml")
    w = p.window
    assert p.name == "user-sessions"
    assert (w.type, w.gap_ms, w.maximum_duration_ms) == (WindowType.SESSION, 5 * M, 2 * H)
    assert w.idle_clock is Clock.EVENT_TIME  # the default when an event-time column is set
    assert [a.name for a in p.aggregates] == ["count", "sum_amount", "first_event_id", "last_event_id"]


# --------------------------------------------------------------------------- mistakes

BASE = {
    "version": 1,
    "name": "t",
    "source": {"arrivalTime": "arrival_time", "arrivalOrder": ["offset"], "batch": {"interval": "1s"}},
    "emitter": {
        "tumbling-time-window": {
            "windowSpan": "1h",
            "keyExtractor": "user_id",
            "timeConfig": {"eventTimeExtractor": "event_time", "idleTimeout": "30m"},
            "aggregateDefinition": [{"type": "count"}, {"type": "sum", "column": "amount"}],
        }
    },
}
TW = ("emitter", "tumbling-time-window")


def _doc(*edits):
    """BASE with edits: (path tuple, value) sets, (path tuple, DELETE) removes."""
    doc = copy.deepcopy(BASE)
    for path, value in edits:
        node = doc
        for k in path[:-1]:
            node = node[k]
        if value is DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return doc


DELETE = object()


def _sliding(**fields):
    return (
        ("emitter",),
        {
            "sliding-time-window": {
                "windowSpan": "1h",
                "windowSlide": "15m",
                **fields,
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    )


def _session(**fields):
    return (
        ("emitter",),
        {
            "session-window": {
                **fields,
                "timeConfig": {"eventTimeExtractor": "event_time"},
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    )


F = "emitter.tumbling-time-window"
MISTAKES = [
    # edits,                                                              substrings the message must hold
    (
        [(("emitter",), {"hopping-time-window": {"windowSpan": "1h"}})],
        ["emitter.hopping-time-window", "unknown window type"],
    ),  # unknown window type
    ([(TW + ("windowSpan",), "0s")], [f"{F}.windowSpan", "'0s'"]),  # zero span
    ([(TW + ("windowSpan",), "-5s")], [f"{F}.windowSpan", "'-5s'"]),  # negative span
    ([(TW + ("windowSpan",), DELETE)], [f"{F}.windowSpan", "required"]),  # missing span
    ([_sliding(windowSlide="0m")], ["emitter.sliding-time-window.windowSlide", "'0m'"]),  # slide not positive
    (
        [_sliding(windowSlide="2h")],
        ["emitter.sliding-time-window.windowSlide", "'2h'", "'1h'"],
    ),  # slide larger than span
    ([_session()], ["emitter.session-window", "idleTimeout", "required"]),  # session without its gap
    ([_session(idleTimeout="0s")], ["emitter.session-window.idleTimeout", "'0s'"]),  # zero session gap
    ([(TW + ("windowSpan",), "5x")], [f"{F}.windowSpan", "'5x'"]),  # malformed: unknown unit
    ([(TW + ("windowSpan",), "PT")], [f"{F}.windowSpan", "'PT'"]),  # malformed: ISO without a component
    ([(TW + ("windowSpan",), "P")], [f"{F}.windowSpan", "'P'"]),  # malformed: bare P
    ([(TW + ("windowSpan",), "1.5h")], [f"{F}.windowSpan", "'1.5h'"]),  # malformed: fractional short form
    ([(TW + ("windowSpan",), 5)], [f"{F}.windowSpan", "5"]),  # bare number: unit unknown
    (
        [(TW + ("timeConfig", "delayWindowClose"), "-5s")],
        [f"{F}.timeConfig.delayWindowClose", "'-5s'"],
    ),  # negative delay
    (
        [(TW + ("timeConfig", "idleTimeout"), "soon")],
        [f"{F}.timeConfig.idleTimeout", "'soon'"],
    ),  # malformed idle timeout
    ([(("source", "batch"), {"interval": "0ms"})], ["source.batch.interval", "'0ms'"]),  # batch interval not positive
    (
        [(TW + ("aggregateDefinition",), [{"type": "median", "column": "amount"}])],
        [f"{F}.aggregateDefinition[0].type", "'median'"],
    ),  # unknown aggregate type
    (
        [(TW + ("aggregateDefinition", 1), {"type": "sum"})],
        [f"{F}.aggregateDefinition[1].column", "'sum'"],
    ),  # aggregate without its column
    (
        [(TW + ("aggregateDefinition", 1), {"type": "count"})],
        [f"{F}.aggregateDefinition[1].name", "'count'"],
    ),  # duplicate output name (default names)
    (
        [(TW + ("aggregateDefinition", 1), {"type": "sum", "column": "amount", "name": "count"})],
        [f"{F}.aggregateDefinition[1].name", "'count'"],
    ),  # duplicate output name (explicit name)
    (
        [(TW + ("aggregateDefinition", 1), {"type": "max", "column": "amount", "name": "window_end"})],
        [f"{F}.aggregateDefinition[1].name", "'window_end'"],
    ),  # name taken by an output column
    ([(TW + ("aggregateDefinition",), [])], [f"{F}.aggregateDefinition", "[]"]),  # no aggregates
    (
        [(TW + ("timeConfig", "watermarkStrategy"), "LATEST_EVENT_TIME")],
        [f"{F}.timeConfig.watermarkStrategy", "'LATEST_EVENT_TIME'"],
    ),  # unknown strategy
    (
        [(TW + ("timeConfig", "lateness"), "ALLOWED_LATENESS")],
        [f"{F}.timeConfig.lateness", "'ALLOWED_LATENESS'"],
    ),  # unknown lateness
    (
        [(TW + ("timeConfig", "idleTimeoutClock"), "WALL_CLOCK")],
        [f"{F}.timeConfig.idleTimeoutClock", "'WALL_CLOCK'"],
    ),  # unknown clock
    (
        [(TW + ("timeConfig", "eventTimeExtractor"), DELETE), (TW + ("timeConfig", "idleTimeoutClock"), "EVENT_TIME")],
        [f"{F}.timeConfig.idleTimeoutClock", "EVENT_TIME", "eventTimeExtractor"],
    ),  # event-time clock without event time
    ([(TW + ("windowSpn",), "1h")], [f"{F}.windowSpn", "unknown field"]),  # typo in the window
    (
        [(TW + ("timeConfig", "watermarkStrategey"), "MIN_EVENT_TIME")],
        [f"{F}.timeConfig.watermarkStrategey", "unknown field"],
    ),  # typo in timeConfig
    ([(("source", "arivalTime"), "x")], ["source.arivalTime", "unknown field"]),  # typo in source
    (
        [(("replay",), {"flushAtEnd": True, "flushAtEnd2": True})],
        ["replay.flushAtEnd2", "unknown field"],
    ),  # typo in replay
    ([(("sorce",), {})], ["sorce", "unknown field"]),  # typo at the root
    ([(TW + ("windowSlide",), "15m")], [f"{F}.windowSlide", "unknown field"]),  # slide on a tumbling window
    (
        [(TW + ("aggregateDefinition", 0), {"type": "count", "colum": "x"})],
        [f"{F}.aggregateDefinition[0].colum", "unknown field"],
    ),  # typo in an aggregate
    ([(("source", "arrivalTime"), DELETE)], ["source.arrivalTime", "None"]),  # required column missing
    ([(("replay",), {"flushAtEnd": "yes"})], ["replay.flushAtEnd", "'yes'"]),  # not a boolean
    ([(("version",), 2)], ["version", "2"]),  # unsupported version
    ([(("emitter", "triggers"), ["atEnd"])], ["emitter.triggers[0]", "'atEnd'"]),  # unknown trigger
    ([(("quality",), {"maxRejectedShare": "lots"})], ["quality.maxRejectedShare", "'lots'"]),  # not a share
    (
        [(("quality",), {"maxRejectedShare": 5})],
        ["quality.maxRejectedShare", "5", "between 0 and 1"],
    ),  # a count, not a share
    ([(("quality",), {"maxRejectedShare": "150%"})], ["quality.maxRejectedShare", "'150%'"]),  # over 100 %
    ([(("quality",), {"maxRejectShare": "1%"})], ["quality.maxRejectShare", "unknown field"]),  # typo in quality
]


@pytest.mark.parametrize(
    ("edits", "needles"), MISTAKES, ids=[n[0] + ("" if len(n) < 2 else " " + n[1]) for _, n in MISTAKES]
)
def test_mistakes_name_field_and_value(edits, needles):
    with pytest.raises(ConfigError) as info:
        parse_pipeline(_doc(*edits))
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


@pytest.mark.parametrize(
    "given, share", [(None, 0.001), ("0.1%", 0.001), ("2.5 %", 0.025), (0, 0.0), (0.05, 0.05), (1, 1.0)]
)
def test_quality_max_rejected_share(given, share):
    """quality.maxRejectedShare: a number from 0 to 1 or a percentage (default 0.1 %); it
    decides only when checks block, so the state's fingerprint ignores it."""
    p = parse_pipeline(_doc() if given is None else _doc((("quality",), {"maxRejectedShare": given})))
    assert p.quality.max_rejected_share == pytest.approx(share, abs=1e-15)
    assert p.fingerprint() == parse_pipeline(_doc()).fingerprint()


@pytest.mark.parametrize(
    "example, fingerprint", [("clicks-hourly.yaml", "0bc5ca02fc804cba"), ("sessions.yaml", "e00cfdc0b0aa8c05")]
)
def test_the_examples_fingerprints_stay_what_their_carried_state_was_written_under(example, fingerprint):
    """A changed fingerprint refuses every carried state and rebuilds every history: the
    examples' fingerprints are pinned as they were before keys of several columns (issue 49)."""
    assert load_pipeline(ROOT / "examples" / "pipelines" / example).fingerprint() == fingerprint


def test_a_key_of_several_columns_is_part_of_the_fingerprint():
    """Issue 49: the key's columns, their order included, decide the windows."""
    base = parse_pipeline(_doc((TW + ("keyExtractor",), ["user_id", "country"])))
    assert base.window.keys == ("user_id", "country")
    assert base.fingerprint() != parse_pipeline(_doc()).fingerprint()
    assert base.fingerprint() != parse_pipeline(_doc((TW + ("keyExtractor",), ["country", "user_id"]))).fingerprint()


def test_the_fingerprint_counts_what_changes_outputs_and_nothing_else():
    """Issue 48: a version of a history is one fingerprint, so it must change with every
    setting that changes the outputs (the triggers decide the snapshot rows) and with
    nothing that only checks or compares them."""
    base = parse_pipeline(_doc()).fingerprint()
    assert parse_pipeline(_doc((("emitter", "triggers"), ["atWindowEnd"]))).fingerprint() == base
    assert parse_pipeline(_doc((("emitter", "triggers"), ["atAggregate"]))).fingerprint() != base
    assert parse_pipeline(_doc((("quality",), {"maxRejectedShare": 0.2}))).fingerprint() == base
    assert parse_pipeline(_doc((TW + ("timeConfig", "delayWindowClose"), "9s"))).fingerprint() != base


def test_base_doc_is_valid():
    """The mistakes above fail because of their edit, not because BASE is broken."""
    p = parse_pipeline(_doc())
    assert p.window.span_ms == H and [a.name for a in p.aggregates] == ["count", "sum_amount"]
    parse_pipeline(_doc(_sliding(windowSlide="1h")))  # slide == span is allowed
    parse_pipeline(_doc(_session(idleTimeout="5m")))


def test_load_pipeline_prefixes_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_doc((TW + ("aggregateDefinition",), [{"type": "median", "column": "amount"}]))))
    with pytest.raises(ConfigError) as info:
        load_pipeline(bad)
    assert (
        str(bad) in str(info.value)
        and "aggregateDefinition[0].type" in str(info.value)
        and "'median'" in str(info.value)
    )


def test_load_pipeline_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_pipeline(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_pipeline(broken)


# --------------------------------------------------------------------------- frozen


def test_pipeline_is_frozen():
    p = parse_pipeline(_doc())
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.window.span_ms = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.source.arrival_time = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.aggregates[0].column = "amount"  # type: ignore[misc]
    assert isinstance(p.aggregates, tuple) and isinstance(p.source.arrival_order, tuple)
    assert isinstance(p.triggers, tuple)
    assert hash(p) == hash(parse_pipeline(_doc()))  # frozen and hashable: usable as a key


def test_pipeline_does_not_alias_the_document():
    doc = _doc()
    p = parse_pipeline(doc)
    doc["emitter"]["tumbling-time-window"]["aggregateDefinition"].append({"type": "max", "column": "amount"})
    doc["source"]["arrivalOrder"].append("other")
    assert [a.name for a in p.aggregates] == ["count", "sum_amount"]
    assert p.source.arrival_order == ("offset",)


# --------------------------------------------------------------------------- durations

DURATIONS = [
    ("500ms", 500),  # milliseconds
    ("5s", 5 * S),  # seconds
    ("5m", 5 * M),  # minutes (m is minutes, not months)
    ("1h", H),  # hours
    ("1d", 24 * H),  # days
    ("PT5M", 5 * M),  # ISO-8601 minutes
    ("PT1H30M", 90 * M),  # ISO-8601 combined
    ("P1D", 24 * H),  # ISO-8601 days
    ("PT0.5S", 500),  # ISO-8601 fractional seconds
    ("P1DT1S", 24 * H + S),  # ISO-8601 days and time
    ("PT0.001S", 1),  # one millisecond
    (" 90s ", 90 * S),  # surrounding blanks
]


@pytest.mark.parametrize(("text", "ms"), DURATIONS, ids=[d[0] for d in DURATIONS])
def test_durations(text, ms):
    p = parse_pipeline(_doc((TW + ("windowSpan",), text), (TW + ("timeConfig", "delayWindowClose"), text)))
    assert p.window.span_ms == ms
    assert p.window.delay_ms == ms


def test_delay_may_be_zero():
    assert parse_pipeline(_doc((TW + ("timeConfig", "delayWindowClose"), "0s"))).window.delay_ms == 0


# --------------------------------------------------------------------------- columns checked at replay

SCHEMA = T.StructType(
    [
        T.StructField("arrival_time", T.TimestampType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("offset", T.LongType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)


@pytest.fixture(scope="module")
def events_df(spark):
    from datetime import datetime, timezone

    t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return spark.createDataFrame([(t, t, 1, "u1", 1.5)], SCHEMA)


def _replay_without_jobs(spark, pipeline, df):
    """replay() must raise before Spark runs any job: check the job group stays empty."""
    sc = spark.sparkContext
    group = f"config-check-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "configuration check")
    try:
        with pytest.raises(ConfigError) as info:
            replay(spark, pipeline, df)
        jobs = list(sc.statusTracker().getJobIdsForGroup(group))
        df.count()  # control: a job in this group is seen by the tracker
        control = list(sc.statusTracker().getJobIdsForGroup(group))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    assert control, "the job-group check cannot see jobs; the assertion below would be vacuous"
    assert jobs == [], f"replay ran Spark jobs {jobs} before refusing the configuration"
    return str(info.value)


@pytest.mark.parametrize(
    ("edits", "needles"),
    [
        ([(TW + ("keyExtractor",), "customer")], ["keyExtractor", "'customer'"]),  # key column missing
        (
            [(TW + ("aggregateDefinition", 1), {"type": "sum", "column": "price"})],
            ["aggregateDefinition[1].column", "'price'"],
        ),  # aggregate column missing
        (
            [(("source", "arrivalOrder"), ["offset", "kafka_offset"])],
            ["source.arrivalOrder[1]", "'kafka_offset'"],
        ),  # tie-breaker missing
        ([(TW + ("timeConfig", "eventTimeExtractor"), "ts")], ["eventTimeExtractor", "'ts'"]),  # event time missing
        ([(("source", "worker"), "partition")], ["source.worker", "'partition'"]),  # worker missing
    ],
    ids=["key", "aggregate", "arrivalOrder", "eventTime", "worker"],
)
def test_replay_refuses_missing_column_before_any_job(spark, events_df, edits, needles):
    msg = _replay_without_jobs(spark, parse_pipeline(_doc(*edits)), events_df)
    for needle in needles:
        assert needle in msg, msg


@pytest.mark.parametrize("agg", ["sum", "avg"])
def test_replay_refuses_numeric_aggregate_over_string(spark, events_df, agg):
    pipeline = parse_pipeline(_doc((TW + ("aggregateDefinition", 1), {"type": agg, "column": "user_id"})))
    msg = _replay_without_jobs(spark, pipeline, events_df)
    assert "aggregateDefinition[1].column" in msg and "'user_id'" in msg and "string" in msg and agg in msg


def test_replay_refuses_string_batch_column(spark, events_df):
    pipeline = parse_pipeline(_doc((("source", "batch"), {"column": "user_id"})))
    msg = _replay_without_jobs(spark, pipeline, events_df)
    assert "source.batch.column" in msg and "'user_id'" in msg


# --------------------------------------------------------------------------- file-level refusals (issue 8, item 7)

PIPELINE_YAML = """\
version: 1
name: t
source:
  arrivalTime: arrival_time
emitter:
  tumbling-time-window:
    windowSpan: 1h
    timeConfig:
      eventTimeExtractor: event_time
    aggregateDefinition:
      - type: count
"""


def _write(tmp_path, text: str | bytes, name: str = "pipeline.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


def test_pipeline_yaml_fixture_is_valid(tmp_path):
    """The refusals below fail because of their edit, not because PIPELINE_YAML is broken."""
    assert load_pipeline(_write(tmp_path, PIPELINE_YAML)).window.span_ms == H


@pytest.mark.parametrize(
    ("text", "key", "line", "first_line", "field"),
    [
        # YAML itself keeps the last of two equal keys: `windowSpan: 2d` would silently win.
        (
            PIPELINE_YAML.replace("    windowSpan: 1h\n", "    windowSpan: 1h\n    windowSpan: 2d\n"),
            "windowSpan",
            8,
            7,
            "emitter.tumbling-time-window.windowSpan",
        ),  # in the window block
        (PIPELINE_YAML + "name: u\n", "name", 12, 2, "name"),  # at the root, far apart
        (
            PIPELINE_YAML.replace(
                "      eventTimeExtractor: event_time\n",
                "      eventTimeExtractor: event_time\n      eventTimeExtractor: ts\n",
            ),
            "eventTimeExtractor",
            10,
            9,
            "emitter.tumbling-time-window.timeConfig.eventTimeExtractor",
        ),  # nested deeper
        (
            PIPELINE_YAML.replace("      - type: count\n", "      - {type: count, type: sum}\n"),
            "type",
            11,
            11,
            "emitter.tumbling-time-window.aggregateDefinition[0].type",
        ),  # flow mapping inside a list
    ],
    ids=["window", "root", "timeConfig", "aggregate"],
)
def test_duplicate_keys_are_refused(tmp_path, text, key, line, first_line, field):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    msg = str(info.value)
    for needle in (str(path), f"line {line}", f"{key!r}", field, f"line {first_line}"):
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    """A key given explicitly beside a `<<` merge overrides the merged one: YAML's own rule, not a typo."""
    text = PIPELINE_YAML.replace("version: 1\n", "version: 1\nx-defaults: &tc {eventTimeExtractor: ts}\n")
    text = text.replace("    timeConfig:\n", "    timeConfig:\n      <<: *tc\n")
    with pytest.raises(ConfigError, match="x-defaults: unknown field"):  # loads, then the extra root key is refused
        load_pipeline(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("data", "offset", "line"),
    [
        (PIPELINE_YAML.replace("name: t", "name: caf\xe9").encode("latin-1"), 20, 2),  # Latin-1 é
        (PIPELINE_YAML.encode() + b"# \xff\xfe\n", len(PIPELINE_YAML) + 2, 12),  # stray bytes in a trailing comment
        (
            "\ufeff".encode() + PIPELINE_YAML.replace("name: t", "name: caf\xe9").encode("latin-1"),
            23,
            2,
        ),  # BOM, then Latin-1
    ],
    ids=["latin-1", "comment", "bom"],
)
def test_non_utf8_file_names_the_file_and_byte(tmp_path, data, offset, line):
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    msg = str(info.value)
    for needle in (str(path), "UTF-8", f"byte offset {offset}", f"line {line}"):
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_utf8_with_bom_loads(tmp_path):
    path = _write(tmp_path, "\ufeff".encode() + PIPELINE_YAML.replace("name: t", "name: caf\xe9").encode())
    assert load_pipeline(path).name == "caf\xe9"


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        (PIPELINE_YAML.replace("name: t", "name: caf\xe9").encode("latin-1"), ["UTF-8", "byte offset 20"]),  # not UTF-8
        (
            PIPELINE_YAML.replace("    windowSpan: 1h\n", "    windowSpan: 1h\n    windowSpan: 2d\n").encode(),
            ["line 8", "'windowSpan'"],
        ),  # duplicate key
        (
            PIPELINE_YAML.replace("windowSpan: 1h", "windowSpan: 999999999999999d").encode(),
            ["emitter.tumbling-time-window.windowSpan", "'999999999999999d'"],
        ),  # out-of-range duration
    ],
    ids=["non-utf8", "duplicate-key", "out-of-range"],
)
def test_cli_reports_config_file_errors_before_spark(tmp_path, capsys, data, needles):
    """`rewindow replay` loads the configuration before Spark starts: exit 2, the file named, nothing written."""
    from windowing.cli import main

    path = _write(tmp_path, data)
    out = tmp_path / "out"
    rc = main(["replay", "--config", str(path), "--input", str(tmp_path / "events"), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("rewindow: error: ") and str(path) in err, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert not out.exists()


# --------------------------------------------------------------------------- duration range

DAYS_100_YEARS = 36_525  # 100 Julian years: durations.MAX_DURATION_MS


@pytest.mark.parametrize(
    ("edits", "field", "value"),
    [
        ([(TW + ("windowSpan",), "999999999999999d")], f"{F}.windowSpan", "999999999999999d"),  # the reported crash
        ([(TW + ("windowSpan",), "P999999999999999D")], f"{F}.windowSpan", "P999999999999999D"),  # ISO-8601 form
        (
            [(TW + ("windowSpan",), f"P{DAYS_100_YEARS}DT0.001S")],
            f"{F}.windowSpan",
            f"P{DAYS_100_YEARS}DT0.001S",
        ),  # 1 ms past the bound
        (
            [(TW + ("windowSpan",), f"{DAYS_100_YEARS * 24 + 1}h")],
            f"{F}.windowSpan",
            f"{DAYS_100_YEARS * 24 + 1}h",
        ),  # 1 h past it
        ([(TW + ("windowSpan",), "9" * 5000 + "ms")], f"{F}.windowSpan", "9" * 20),  # more digits than int() takes
        (
            [(TW + ("timeConfig", "delayWindowClose"), "9999999999999s")],
            f"{F}.timeConfig.delayWindowClose",
            "9999999999999s",
        ),  # every duration field
        ([(TW + ("timeConfig", "idleTimeout"), "P99999999DT1H")], f"{F}.timeConfig.idleTimeout", "P99999999DT1H"),
        ([(("source", "batch"), {"interval": "99999999999999m"})], "source.batch.interval", "99999999999999m"),
        ([_sliding(windowSlide="999999999999999d")], "emitter.sliding-time-window.windowSlide", "999999999999999d"),
        ([_session(idleTimeout="999999999999999d")], "emitter.session-window.idleTimeout", "999999999999999d"),
        (
            [_session(idleTimeout="5m", maximumDuration="999999999999999d")],
            "emitter.session-window.maximumDuration",
            "999999999999999d",
        ),
        (
            [(TW + ("windowOffset",), "999999999999999d")],
            f"{F}.windowOffset",
            "999999999999999d",
        ),  # range before offset < span
    ],
    ids=[
        "span",
        "span-iso",
        "bound+1ms",
        "bound+1h",
        "5000-digits",
        "delay",
        "idle",
        "batch",
        "slide",
        "gap",
        "max-duration",
        "offset",
    ],
)
def test_out_of_range_durations_are_refused(edits, field, value):
    with pytest.raises(ConfigError) as info:
        parse_pipeline(_doc(*edits))
    msg = str(info.value)
    for needle in (field + ":", value, "100 years"):
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_duration_bound_is_inclusive_and_fits_int64_and_datetime():
    from datetime import datetime, timedelta, timezone

    from windowing.durations import MAX_DURATION_MS, parse_duration_ms

    assert MAX_DURATION_MS == DAYS_100_YEARS * 24 * H == 3_155_760_000_000
    for text in (f"{DAYS_100_YEARS}d", f"P{DAYS_100_YEARS}D", f"{MAX_DURATION_MS}ms"):
        assert parse_duration_ms(text, "f") == MAX_DURATION_MS  # the bound itself is accepted
    p = parse_pipeline(
        _doc(
            (TW + ("windowSpan",), f"{DAYS_100_YEARS}d"),
            (TW + ("timeConfig", "delayWindowClose"), f"{DAYS_100_YEARS}d"),
        )
    )
    assert p.window.span_ms == p.window.delay_ms == MAX_DURATION_MS
    # Why it is safe: a few durations added to any datetime-representable time stay far inside
    # int64 milliseconds (and Spark's int64 microseconds), and a datetime in the middle of the
    # range moves by the bound without leaving it.
    latest_ms = int(datetime(9999, 12, 31, tzinfo=timezone.utc).timestamp() * 1000)
    assert (latest_ms + 4 * MAX_DURATION_MS) * 1000 < 2**63 - 1
    t = datetime(2024, 1, 1, tzinfo=timezone.utc)
    assert t + timedelta(milliseconds=MAX_DURATION_MS) - timedelta(milliseconds=2 * MAX_DURATION_MS) < t


# --------------------------------------------------------------------------- windowOffset range

SW = "emitter.sliding-time-window"
OFFSET_MISTAKES = [
    # edits,                                                  substrings the message must hold
    (
        [(TW + ("windowOffset",), "-3s")],
        [f"{F}.windowOffset", "'-3s'", "negative", "0 <= windowOffset < windowSpan", "'1h'", "3597s"],
    ),  # negative: suggest the equivalent
    (
        [(TW + ("windowOffset",), "- PT1M")],
        [f"{F}.windowOffset", "'- PT1M'", "negative", "'1h'", "59m"],
    ),  # negative ISO-8601
    ([(TW + ("windowOffset",), "-soon")], [f"{F}.windowOffset", "'-soon'", "negative"]),  # negative and malformed
    (
        [(TW + ("windowOffset",), "1h")],
        [f"{F}.windowOffset", "'1h'", "0 <= windowOffset < windowSpan", "same windows as 0ms"],
    ),  # equal to the span
    (
        [(TW + ("windowOffset",), "90m")],
        [f"{F}.windowOffset", "'90m'", "'1h'", "same windows as 30m"],
    ),  # larger than the span
    (
        [_sliding(windowOffset="61m")],
        [f"{SW}.windowOffset", "'61m'", "'1h'", "same windows as 1m"],
    ),  # sliding: equivalent modulo the slide (15m)
    (
        [_sliding(windowOffset="-1m")],
        [f"{SW}.windowOffset", "'-1m'", "negative", "14m"],
    ),  # sliding negative: modulo the slide
    ([(TW + ("windowOffset",), "soon")], [f"{F}.windowOffset", "'soon'", "not a duration"]),  # malformed
]


@pytest.mark.parametrize(("edits", "needles"), OFFSET_MISTAKES, ids=[n[1] for _, n in OFFSET_MISTAKES])
def test_window_offset_must_be_within_the_span(edits, needles):
    with pytest.raises(ConfigError) as info:
        parse_pipeline(_doc(*edits))
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


@pytest.mark.parametrize(
    ("edits", "offset_ms"),
    [
        ([(TW + ("windowOffset",), "0s")], 0),  # the lower bound
        ([(TW + ("windowOffset",), "3599999ms")], H - 1),  # one millisecond below the span
        ([(TW + ("windowOffset",), "PT15M")], 15 * M),  # ISO-8601
        ([_sliding(windowOffset="59m")], 59 * M),  # sliding: below the span, even past the slide
    ],
    ids=["zero", "span-1ms", "iso", "sliding-past-slide"],
)
def test_window_offset_in_range_is_accepted(edits, offset_ms):
    assert parse_pipeline(_doc(*edits)).window.offset_ms == offset_ms


@pytest.mark.parametrize(
    ("edits", "given_ms", "suggested", "suggested_ms"),
    [
        ([(TW + ("windowOffset",), "-3s")], -3 * S, "3597s", H - 3 * S),  # negative: one span up
        ([(TW + ("windowOffset",), "90m")], 90 * M, "30m", 30 * M),  # past the span: one span down
        ([_sliding(windowOffset="61m")], 61 * M, "1m", M),  # sliding: modulo the slide (15m)
        ([_sliding(windowOffset="-1m")], -M, "14m", 14 * M),
    ],
    ids=["tumbling-negative", "tumbling-past-span", "sliding-past-span", "sliding-negative"],
)
def test_a_refused_offset_names_one_with_the_same_windows(edits, given_ms, suggested, suggested_ms):
    """The windowOffset rule (docs/configuration.md): an offset outside [0, windowSpan) is
    refused, naming the offset in range that gives the same windows. Refusing loses
    nothing: the kernel and the reference model give O and O + k * period (span for
    tumbling, slide for sliding) the same windows, so the suggestion is exact; and a
    negative offset is called negative, not "not a duration"."""
    import numpy as np

    from tests.support.reference_model import window_bounds
    from windowing.kernel import assign_windows

    with pytest.raises(ConfigError) as info:
        parse_pipeline(_doc(*edits))
    assert suggested in str(info.value) and "not a duration" not in str(info.value)
    edited = copy.deepcopy(_doc(*edits))
    wdoc = next(iter(edited["emitter"].values()))
    wdoc["windowOffset"] = f"{suggested_ms}ms"
    accepted = parse_pipeline(edited).window
    assert accepted.offset_ms == suggested_ms
    as_given = dataclasses.replace(accepted, offset_ms=given_ms)  # what accepting it unreduced would replay
    times = [t + d for t in (-H, 0, 7 * H + 13 * M, 10**12) for d in (-M - 1, -1, 0, 1, 3 * S, 14 * M + 59 * S)]
    for t in times:
        assert window_bounds(as_given, t) == window_bounds(accepted, t), t
    t_arr = np.array(times, dtype=np.int64)
    for a, b in zip(assign_windows(t_arr, as_given), assign_windows(t_arr, accepted)):
        assert a.tolist() == b.tolist()


def _with_aggregates(*items):
    return _doc((TW + ("aggregateDefinition",), list(items)))


def test_stddev_and_percentile_aggregates():
    p = parse_pipeline(
        _with_aggregates(
            "stddev_pop (amount)",
            {"type": "stddev_samp", "column": "amount"},
            {"type": "percentile", "column": "amount", "percentage": 0.95, "name": "p95"},
            "percentile (amount)",
        )
    )
    assert [(a.type, a.name) for a in p.aggregates] == [
        ("stddev_pop", "stddev_pop_amount"),
        ("stddev_samp", "stddev_samp_amount"),
        ("percentile", "p95"),
        ("percentile", "percentile_amount"),
    ]
    assert p.aggregates[2].percentage == 0.95
    assert not hasattr(p.aggregates[3], "percentage")  # without one: the median, a plain Aggregate


@pytest.mark.parametrize(
    ("item", "needle"),
    [
        ({"type": "percentile", "column": "amount", "percentage": 1.5}, "percentage: 1.5 must be a number from 0 to 1"),
        ({"type": "percentile", "column": "amount", "percentage": "p95"}, "must be a number from 0 to 1"),
        ({"type": "sum", "column": "amount", "percentage": 0.5}, "only a percentile takes a percentage"),
    ],
)
def test_percentage_mistakes(item, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_pipeline(_with_aggregates(item))


# --------------------------------------------------------------------------- pipeline names (issue 26)


@pytest.mark.parametrize(
    "name",
    [
        "../../escaped",  # would write beside the output root
        "a/b",  # a nested folder `rewindow status` does not list
        "*",  # a glob: another pipeline's partitions read as this one's
        "clicks[1]",  # a Hadoop glob character
        "{a,b}",  # a Hadoop glob alternation
        ".hidden",  # a name Spark's file index skips
        "_internal",  # likewise
        "a..b",  # `..` anywhere
        "a b",  # a space
        "C:\\x",  # a Windows separator
    ],
)
def test_a_pipeline_name_that_is_not_one_plain_folder_name_is_refused(tmp_path, name):
    path = _write(tmp_path, PIPELINE_YAML.replace("name: t", f"name: {yaml.safe_dump(name).splitlines()[0]}"))
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    msg = str(err.value)
    assert f"name: {name!r} is not allowed" in msg and "letters, digits" in msg, msg


@pytest.mark.parametrize("name", ["t", "clicks-hourly", "clicks_hourly", "v1.2", "caf\xe9", "2024-q1"])
def test_plain_pipeline_names_are_accepted(tmp_path, name):
    assert load_pipeline(_write(tmp_path, PIPELINE_YAML.replace("name: t", f"name: {name}"))).name == name


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['true']", "!custom x"])
def test_yaml_tags_are_refused(tmp_path, tag):
    """Held in the second hostile run (issue 26): a pipeline file cannot construct objects."""
    path = _write(tmp_path, PIPELINE_YAML.replace("name: t", f"name: {tag}"))
    with pytest.raises(ConfigError, match=r"not valid YAML: could not determine a constructor for the tag"):
        load_pipeline(path)


# --------------------------------------------------------------------------- hostile run (issue 47)


def _alias_bomb(levels: int, where: str = "source") -> str:
    """A pipeline whose ``source.options`` (or an aggregate's name) nests ``levels`` lists of
    aliases, each nine copies of the one before: 9**levels copies of "lol" once expanded."""
    lines = ['    l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"    l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    if where == "source":
        return PIPELINE_YAML.replace(
            "  arrivalTime: arrival_time\n", "  arrivalTime: arrival_time\n  options:\n" + "\n".join(lines) + "\n"
        )
    anchors = "columns:\n" + "\n".join(line[2:] for line in lines) + "\n"
    return anchors + PIPELINE_YAML.replace("      - type: count\n", f"      - {{type: count, name: *l{levels - 1}}}\n")


@pytest.mark.parametrize(
    ("where", "field"),
    [("source", "source.options.l5"), ("columns", "columns.l5")],
    ids=["source.options", "columns"],
)
def test_nested_aliases_are_refused_before_they_are_expanded(tmp_path, where, field):
    """Finding 1: 840 bytes of nested aliases in source.options became a 226 MB reader option
    (9.7 s; a level more, 198 s). The size is counted on the composed YAML nodes, each once."""
    path = _write(tmp_path, _alias_bomb(7, where))
    assert path.stat().st_size < 1000
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {field}: expands to ") and "at most 100,000 nodes and 1,000,000 characters" in msg
    # Forty levels (9**40 copies) cost no more to refuse: nothing is expanded.
    with pytest.raises(ConfigError, match=f"{field}: expands to "):
        load_pipeline(_write(tmp_path, _alias_bomb(40, where), "deep.yaml"))


def test_aliases_within_the_bound_load_and_recursive_aliases_do_not_hang(tmp_path):
    """The bound counts expanded values: a small alias is fine, and an alias back to its own
    anchor (a recursive document) is sized once, not followed round its loop."""
    text = PIPELINE_YAML.replace("version: 1\n", "version: 1\ncolumns: &c {}\n").replace(
        "  arrivalTime: arrival_time\n", "  arrivalTime: arrival_time\n  options: &o {a: b}\nreplay: {}\n"
    )
    assert load_pipeline(_write(tmp_path, text)).source.options == (("a", "b"),)
    loop = PIPELINE_YAML.replace(
        "  arrivalTime: arrival_time\n", "  arrivalTime: arrival_time\n  options: &o {a: *o}\n"
    )
    assert load_pipeline(_write(tmp_path, loop, "loop.yaml")).source.options[0][0] == "a"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (PIPELINE_YAML + "# " + "x" * 10_000_000 + "\n", "larger than 1,000,000 bytes: not a pipeline file"),
        (PIPELINE_YAML + "x: " + "[" * 100_000 + "]" * 100_000 + "\n", "not valid YAML: nested too deeply"),
        (PIPELINE_YAML.replace("version: 1", "version: " + "1" * 5000), "not valid YAML: Exceeds the limit"),
    ],
    ids=["10MB", "deeply-nested", "5000-digits"],
)
def test_a_huge_or_deeply_nested_file_is_refused_naming_it(tmp_path, text, needle):
    """Held in the hostile run (issue 47): a 10 MB pipeline took 2.5 s to parse, 100,000
    nested lists raised RecursionError and a 5000-digit number a ValueError naming no file."""
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    assert str(err.value).startswith(f"{path}: {needle}"), str(err.value)[:300]


@pytest.mark.parametrize(
    ("span", "slide", "ratio", "windows"),
    [("1h", "1ms", "3,600,000", "3,600,000"), ("1d", "8s", "10,800", "10,800"), ("10001s", "1s", "10,001", "10,001")],
)
def test_a_span_to_slide_ratio_over_10000_is_refused(span, slide, ratio, windows):
    """Finding 2: windowSlide 1ms on 1h (a typo for 1m) is 3.6 M windows per event; the
    kernel raised MemoryError at 100 events."""
    with pytest.raises(ConfigError) as err:
        parse_pipeline(_doc(_sliding(windowSpan=span, windowSlide=slide)))
    msg = str(err.value)
    assert msg.startswith(
        f"emitter.sliding-time-window.windowSlide: windowSpan {span!r} / windowSlide {slide!r} is a ratio of {ratio}: "
        f"each event would belong to {windows} windows; the ratio is at most 10,000"
    ), msg


@pytest.mark.parametrize(("span", "slide"), [("10000s", "1s"), ("1d", "9s"), ("1h", "1s")])
def test_a_span_to_slide_ratio_up_to_10000_is_accepted(span, slide):
    p = parse_pipeline(_doc(_sliding(windowSpan=span, windowSlide=slide)))
    assert p.window.span_ms <= 10_000 * p.window.slide_ms


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("a" * 300, "is 300 bytes in UTF-8"),  # finding 3: "Mkdirs failed" after the replay's work
        ("\xe9" * 128, "is 256 bytes in UTF-8"),  # 128 characters, 256 bytes
        ("a/b", "is not allowed"),
        ("a\0b", "is not allowed"),
        (".", "is not allowed"),
        ("..", "is not allowed"),
    ],
    ids=["300-chars", "256-bytes", "slash", "nul", "dot", "dotdot"],
)
def test_a_name_that_cannot_be_a_folder_name_is_refused_when_the_yaml_loads(tmp_path, name, needle):
    path = _write(tmp_path, PIPELINE_YAML.replace("name: t", f"name: {json.dumps(name)}"))
    with pytest.raises(ConfigError) as err:
        load_pipeline(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: name: ") and needle in msg and "folder name" in msg, msg


def test_a_name_of_255_bytes_is_accepted(tmp_path):
    name = "\xe9" * 127 + "a"
    assert load_pipeline(_write(tmp_path, PIPELINE_YAML.replace("name: t", f"name: {name}"))).name == name


@pytest.mark.parametrize(
    ("edits", "needle"),
    [
        ([(("version",), True)], "version: True is not supported; use 1"),  # finding 4: True == 1 in Python
        ([(("version",), 1.5)], "version: 1.5 is not supported"),
        (
            [(TW + ("aggregateDefinition", 0), {"type": "percentile", "column": "amount", "percentage": True})],
            "percentage: True must be a number from 0 to 1",
        ),
        ([(("quality",), {"maxRejectedShare": True})], "quality.maxRejectedShare: True is not a share"),
        ([(TW + ("windowSpan",), True)], f"{F}.windowSpan: True"),
    ],
    ids=["version", "version-float", "percentage", "maxRejectedShare", "duration"],
)
def test_a_boolean_where_a_number_is_expected_is_refused(edits, needle):
    with pytest.raises(ConfigError) as err:
        parse_pipeline(_doc(*edits))
    assert needle in str(err.value), err.value


@pytest.mark.parametrize(
    ("item", "field", "shown"),
    [
        ({"type": "sum", "column": "amount", "name": "a/b"}, "[1].name", "'a/b'"),
        ({"type": "sum", "column": "amount", "name": "sum.amount"}, "[1].name", "'sum.amount'"),
        ({"type": "sum", "column": "amount", "name": "x`y"}, "[1].name", "'x`y'"),
        ({"type": "sum", "column": "pay.amount"}, "[1]", "'sum_pay.amount'"),  # a default name, from the column
    ],
    ids=["slash", "dot", "backtick", "default-name"],
)
def test_an_aggregate_name_that_is_not_a_safe_column_name_is_refused(item, field, shown):
    """Finding 5: such names cannot be a Parquet/Spark column name safely."""
    with pytest.raises(ConfigError) as err:
        parse_pipeline(_doc((TW + ("aggregateDefinition", 1), item)))
    msg = str(err.value)
    assert msg.startswith(f"{F}.aggregateDefinition{field}: aggregate {shown} holds "), msg
