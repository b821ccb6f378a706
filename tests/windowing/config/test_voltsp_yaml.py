"""VoltSP's window YAML as its users write it (docs/configuration.md, "Copying a VoltSP
window block"): the seed documents' blocks load as written, Java extractors name columns
by the bean convention or a ``columns:`` map, live-pipeline fields are listed as ignored,
and a column the input lacks or two output columns of one name are refused before any
work, naming both sides."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.engine_harness import canon
from tests.support.reference_model import reference_replay
from windowing import ConfigError, load_pipeline, parse_pipeline
from windowing.config import AGGREGATE_TYPES, Aggregate, bean_property, check_input_columns, ignored_fields_note

SEEDS = Path("/work/shared/seeds")

# --------------------------------------------------------------------------- the seeds' blocks
# Copied from the seed documents (see test_blocks_are_the_seeds_verbatim); each keeps the
# docs' `...` placeholder lines, which load_seed drops, and nothing else is changed.

#: 000 (Time and Watermarks), the first YAML: a whole pipeline.
SEED_PIPELINE = """\
version: 1
name: "WindowedPipeline"
source:
  ...
emitter:
  tumbling-time-window:
    windowSpan: 1h
    keyExtractor: org.acme.Event::userId
    timeConfig:
      eventTimeExtractor: "org.acme.Event::timestamp"
      idleTimeout: 5m
    aggregateDefinition:
      from: org.acme.Event
      builder:
      - type: count
        ...
    triggers:
    - trigger: org.voltdb.stream.plugin.window.api.WindowTrigger#atWindowEnd
      processors:
          ...
      sink:
          ...
"""

#: 000, "The Processing Time": the `...` stands for the rest of the window.
SEED_PROCESSING_TIME = """\
version: 1
name: "WindowedPipeline"
source:
  ...
emitter:
  tumbling-time-window:
    windowSpan: 1h
    keyExtractor: "org.acme.Event::userId"
    ...
"""

#: 000, "The Event Time".
SEED_EVENT_TIME = """\
version: 1
name: "WindowedPipeline"
source:
    ...
emitter:
  tumbling-time-window:
    timeConfig:
      eventTimeExtractor: "org.acme.Event::timestamp"
    ...
"""

#: 000, "Sourcing time for Idle timeout": a timeConfig alone.
SEED_TIME_CONFIG = """\
timeConfig:
  eventTimeExtractor: "com.example.Event::timestamp"
  idleTimeout: 5m
  idleTimeoutClock: EVENT_TIME
"""

#: 001 (Session-window): the emitter.
SEED_SESSION = """\
emitter:
  session-window:
    idleTimeout: "5m"
    maximumDuration: "10m"
    keyExtractor: "com.example.Event::getUserId"
    timeConfig:
      eventTimeExtractor: "com.example.Event::getTimestamp"
    aggregateDefinition:
      from: "com.example.Event"
      builder:
        - type: count
        - type: sum (amount)
        - type: min (amount)
        - type: max (amount)
        - type: distinct (id)
    # exceptionHandler: "com.example.MyExceptionHandler"
  triggers:
    - trigger: org.voltdb.stream.plugin.window.api.WindowTrigger#atWindowEnd
      ...
"""

#: What a replay adds: where the events' arrival time is (rewindow's source fields).
REPLAY_SOURCE = "  arrivalTime: arrival_time\n  arrivalOrder: [offset]\n"


def _without_placeholders(block: str) -> str:
    return "".join(line for line in block.splitlines(keepends=True) if line.strip() != "...")


def seed_yaml(block: str, window_extra: str = "") -> str:
    """A pipeline file holding ``block`` as written (placeholders dropped), with rewindow's
    source fields under ``source:`` (a header with one is added to an emitter-only block);
    ``window_extra`` lines go where a fragment's ``...`` stood (the rest of the window)."""
    text = _without_placeholders(block)
    if window_extra:
        text = text.rstrip("\n") + "\n" + textwrap.indent(textwrap.dedent(window_extra), "    ")
    if text.startswith("version:"):
        return text.replace("source:\n", "source:\n" + REPLAY_SOURCE, 1)
    return 'version: 1\nname: "seed"\nsource:\n' + REPLAY_SOURCE + text


def load_seed(tmp_path, block: str, window_extra: str = ""):
    f = tmp_path / "pipeline.yaml"
    f.write_text(seed_yaml(block, window_extra))
    return load_pipeline(f)


COUNT_ONLY = "aggregateDefinition:\n  builder:\n  - type: count\n"


def test_seed_pipeline_loads_as_written(tmp_path):
    p = load_seed(tmp_path, SEED_PIPELINE)
    w = p.window
    assert (w.span_ms, w.keys, w.event_time, w.idle_timeout_ms) == (3_600_000, ("userId",), "timestamp", 300_000)
    assert p.aggregates == (Aggregate("count", None, "count"),)
    assert [t.value for t in p.triggers] == ["atWindowEnd"]  # the trigger inside the window block
    assert p.ignored_fields == (
        "emitter.tumbling-time-window.triggers[0].processors",
        "emitter.tumbling-time-window.triggers[0].sink",
    )


def test_seed_session_block_loads_as_written(tmp_path):
    p = load_seed(tmp_path, SEED_SESSION)
    w = p.window
    assert (w.gap_ms, w.maximum_duration_ms, w.keys, w.event_time) == (300_000, 600_000, ("userId",), "timestamp")
    assert [(a.type, a.column, a.name) for a in p.aggregates] == [
        ("count", None, "count"),
        ("sum", "amount", "sum_amount"),
        ("min", "amount", "min_amount"),
        ("max", "amount", "max_amount"),
        ("distinct", "id", "distinct_id"),
    ]
    assert p.ignored_fields == ()  # the seed's exceptionHandler is a comment


@pytest.mark.parametrize(
    ("block", "rest", "key", "event_time"),
    [
        (SEED_PROCESSING_TIME, COUNT_ONLY, "userId", None),
        (SEED_EVENT_TIME, "windowSpan: 1h\n" + COUNT_ONLY, None, "timestamp"),
    ],
    ids=["processing-time", "event-time"],
)
def test_seed_fragments_load_once_their_window_is_complete(tmp_path, block, rest, key, event_time):
    """These blocks elide the rest of the window (`...`), aggregates included, which
    VoltSP requires too; completed where the `...` stood, they load as written."""
    p = load_seed(tmp_path, block, rest)
    assert (p.window.keys, p.window.event_time) == ((key,) if key else (), event_time)


def test_seed_time_config_loads_as_written(tmp_path):
    block = "emitter:\n  tumbling-time-window:\n    windowSpan: 10s\n" + textwrap.indent(SEED_TIME_CONFIG, "    ")
    p = load_seed(tmp_path, block, COUNT_ONLY)
    assert (p.window.event_time, p.window.idle_timeout_ms, p.window.idle_clock.value) == (
        "timestamp",
        300_000,
        "EVENT_TIME",
    )


@pytest.mark.parametrize(
    ("seed", "block"),
    [
        ("000", SEED_PIPELINE),
        ("000", SEED_PROCESSING_TIME),
        ("000", SEED_EVENT_TIME),
        ("000", SEED_TIME_CONFIG),
        ("001", SEED_SESSION),
    ],
    ids=["pipeline", "processing-time", "event-time", "time-config", "session"],
)
def test_blocks_are_the_seeds_verbatim(seed, block):
    files = sorted(SEEDS.glob(f"{seed}_*.txt"))
    if not files:
        pytest.skip(f"the seed documents are not on this machine ({SEEDS})")
    assert block in files[0].read_text()


# --------------------------------------------------------------------------- 1. the aggregate shorthand

BASE = {
    "version": 1,
    "name": "t",
    "source": {"arrivalTime": "arrival_time"},
    "emitter": {"tumbling-time-window": {"windowSpan": "1h", "aggregateDefinition": ["count"]}},
}
W = "emitter.tumbling-time-window"


def doc(aggregates=None, **window):
    d = yaml.safe_load(yaml.safe_dump(BASE))
    w = d["emitter"]["tumbling-time-window"]
    w.update(window)
    if aggregates is not None:
        w["aggregateDefinition"] = aggregates
    return d


def with_top(d, **top):
    d.update(top)
    return d


@pytest.mark.parametrize("typ", AGGREGATE_TYPES)
def test_shorthand_for_every_aggregate_type(typ):
    for item in ({"type": f"{typ} (amount)"}, f"{typ}(amount)", {"type": f" {typ} ( amount ) "}):
        p = parse_pipeline(doc({"from": "com.example.Event", "builder": [item]}))
        assert p.aggregates == (Aggregate(typ, "amount", f"{typ}_amount"),), item
    named = parse_pipeline(doc([{"type": f"{typ} (amount)", "name": "x"}]))
    assert named.aggregates == (Aggregate(typ, "amount", "x"),)


@pytest.mark.parametrize(
    ("item", "aggregate"),
    [
        ("count", Aggregate("count", None, "count")),  # the seeds' only output name
        ("count (id)", Aggregate("count", "id", "count_id")),  # non-null ids, <type>_<column>
        ("distinct (id)", Aggregate("distinct", "id", "distinct_id")),
        ("sum (com.example.Event::getAmount)", Aggregate("sum", "amount", "sum_amount")),  # an extractor inside
        ({"type": "sum", "column": "amount"}, Aggregate("sum", "amount", "sum_amount")),  # the contract's long form
    ],
)
def test_shorthand_output_names(item, aggregate):
    assert parse_pipeline(doc([item])).aggregates == (aggregate,)


SHORTHAND_MISTAKES = [
    # item,                                            substrings the message must hold
    ({"type": "sum ()"}, [f"{W}.aggregateDefinition[0].type", "'sum ()'", "empty parentheses"]),
    ({"type": "sum (amount)", "column": "amount"}, [f"{W}.aggregateDefinition[0]", "'sum (amount)'", "column once"]),
    ({"type": "median (amount)"}, [f"{W}.aggregateDefinition[0].type", "'median (amount)'", "sum (amount)"]),
    ({"type": "sum amount"}, [f"{W}.aggregateDefinition[0].type", "'sum amount'"]),
    ({"type": "sum"}, [f"{W}.aggregateDefinition[0].column", "'sum'", "sum (amount)"]),
    ({"type": "sum (a) (b)"}, [f"{W}.aggregateDefinition[0].type", "'sum (a) (b)'"]),
]


@pytest.mark.parametrize(("item", "needles"), SHORTHAND_MISTAKES, ids=[str(i) for i, _ in SHORTHAND_MISTAKES])
def test_shorthand_mistakes_name_the_field(item, needles):
    with pytest.raises(ConfigError) as info:
        parse_pipeline(doc([item]))
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {info.value}"


# --------------------------------------------------------------------------- 2. extractors -> columns


@pytest.mark.parametrize(
    ("extractor", "column"),
    [
        ("com.example.Event::getUserId", "userId"),  # getter
        ("Event::timestamp", "timestamp"),  # record accessor: its own name
        ("Event::isActive", "active"),  # boolean getter
        ("org.acme.Event::getURL", "URL"),  # two capitals stay (Introspector.decapitalize)
        ("Event::getX", "x"),  # one letter
        ("Event::getter", "getter"),  # not get + capital
        ("Event::get", "get"),
        ("Event::island", "island"),  # not is + capital
        ("com.example.Event :: getId", "id"),  # spaces around ::
    ],
)
def test_bean_convention(extractor, column):
    p = parse_pipeline(doc(keyExtractor=extractor))
    assert p.window.keys == (column,)
    assert bean_property(extractor.split("::")[1].strip()) == column


def test_extractors_in_every_column_field():
    p = parse_pipeline(
        doc(
            [{"type": "max", "column": "com.example.Event::getAmount"}, "last (Event::isActive)"],
            keyExtractor="com.example.Event::getUserId",
            timeConfig={"eventTimeExtractor": "com.example.Event::getTimestamp"},
        )
    )
    assert (p.window.keys, p.window.event_time) == (("userId",), "timestamp")
    assert [(a.column, a.name) for a in p.aggregates] == [("amount", "max_amount"), ("active", "last_active")]
    assert [(b.field, b.column, b.via) for b in p.column_bindings] == [
        (f"{W}.keyExtractor", "userId", "bean"),
        (f"{W}.timeConfig.eventTimeExtractor", "timestamp", "bean"),
        (f"{W}.aggregateDefinition[0].column", "amount", "bean"),
        (f"{W}.aggregateDefinition[1].type", "active", "bean"),
    ]


def test_columns_map_overrides_the_bean_convention_and_keeps_output_names():
    """Keys are extractors or properties (the same thing); the output's names come from
    the YAML, so the block replays into the same columns whatever the dataset calls them."""
    mapped = parse_pipeline(
        with_top(
            doc(
                [{"type": "sum (amount)"}, {"type": "max", "column": "com.example.Event::getAmount"}],
                keyExtractor="com.example.Event::getUserId",
                timeConfig={"eventTimeExtractor": "Event::timestamp"},
            ),
            columns={"com.example.Event::getUserId": "user_id", "amount": "amount_cents", "timestamp": "event_time"},
        )
    )
    plain = parse_pipeline(
        doc(
            [
                {"type": "sum", "column": "amount_cents", "name": "sum_amount"},
                {"type": "max", "column": "amount_cents", "name": "max_amount"},
            ],
            keyExtractor="user_id",
            timeConfig={"eventTimeExtractor": "event_time"},
        )
    )
    assert mapped == plain and mapped.fingerprint() == plain.fingerprint()
    assert {b.via for b in mapped.column_bindings} == {"columns"}


def test_plain_column_names_keep_working():
    p = parse_pipeline(doc([{"type": "sum", "column": "amount"}], keyExtractor="user_id"))
    assert (p.window.keys, p.aggregates[0].column, p.aggregates[0].name) == (("user_id",), "amount", "sum_amount")
    assert {b.via for b in p.column_bindings} == {None}


def test_columns_map_for_java_code_that_is_no_extractor():
    lam = "e -> e.getUserId()"
    assert parse_pipeline(with_top(doc(keyExtractor=lam), columns={lam: "user_id"})).window.keys == ("user_id",)
    with pytest.raises(ConfigError, match=r"keyExtractor: 'e -> e.getUserId\(\)' is neither a column name nor"):
        parse_pipeline(doc(keyExtractor=lam))


COLUMNS_MISTAKES = [
    # columns map,                                                  substrings the message must hold
    ({"userID": "user_id"}, ["columns.userID", "'userID'", "spelling"]),  # unused: a typo
    (
        {"userId": "a", "com.example.Event::getUserId": "b"},
        ["columns.com.example.Event::getUserId", "columns.userId", "'userId'"],
    ),  # twice
    ({"userId": 5}, ["columns.userId", "5", "column name"]),  # not a name
    ({"userId": "user_id", "": "x"}, ["columns", "''"]),  # empty key
]


@pytest.mark.parametrize(("columns", "needles"), COLUMNS_MISTAKES, ids=[n[0] for _, n in COLUMNS_MISTAKES])
def test_columns_map_mistakes(columns, needles):
    with pytest.raises(ConfigError) as info:
        parse_pipeline(with_top(doc(keyExtractor="com.example.Event::getUserId"), columns=columns))
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {info.value}"


# --------------------------------------------------------------------------- 3. columns the input lacks

SESSION_COLUMNS = ["arrival_time", "offset", "user_id", "timestamp", "amount", "id"]


def test_missing_column_names_field_extractor_column_and_the_input_columns(tmp_path):
    p = load_seed(tmp_path, SEED_SESSION)
    with pytest.raises(ConfigError) as info:
        check_input_columns(p, SESSION_COLUMNS)
    assert str(info.value) == (
        "emitter.session-window.keyExtractor: column 'userId' is not in the input (its columns: amount, "
        "arrival_time, id, offset, timestamp, user_id); 'com.example.Event::getUserId' reads column 'userId' by "
        "the bean convention; did you mean 'user_id'? Map it with columns: {userId: user_id}"
    )
    check_input_columns(p, SESSION_COLUMNS + ["userId"])  # all there: no error


def test_missing_column_through_the_columns_map_and_plain():
    p = parse_pipeline(with_top(doc(keyExtractor="Event::getUserId"), columns={"userId": "uid"}))
    with pytest.raises(
        ConfigError,
        match=r"^emitter.tumbling-time-window.keyExtractor: column 'uid' is not in the "
        r"input \(its columns: arrival_time, user_id\); columns: maps "
        r"'Event::getUserId' to 'uid'$",
    ):
        check_input_columns(p, ["arrival_time", "user_id"])
    with pytest.raises(
        ConfigError,
        match=r"^source.arrivalTime: column 'arrival_time' is not in the input "
        r"\(its columns: arrivalTime\); did you mean 'arrivalTime'\?$",
    ):
        check_input_columns(parse_pipeline(doc()), ["arrivalTime"])


def _write_events(folder: Path, columns: dict[str, pa.Array]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), folder / "part-0.parquet")
    return folder


def _no_spark(args):
    raise AssertionError("Spark started before the configuration and input columns were checked")


def test_cli_refuses_a_missing_column_before_spark_starts_and_notes_ignored_fields_once(tmp_path, monkeypatch, capsys):
    from windowing import cli, command_line

    (tmp_path / "p.yaml").write_text(seed_yaml(SEED_PIPELINE))
    events = _write_events(
        tmp_path / "events",
        {
            "arrival_time": pa.array([1_000], pa.int64()),
            "offset": pa.array([0], pa.int64()),
            "user_id": pa.array(["a"]),
            "timestamp": pa.array([1_000], pa.int64()),
        },
    )
    monkeypatch.setattr(command_line, "spark_for", _no_spark)
    code = cli.main(
        ["replay", "--config", str(tmp_path / "p.yaml"), "--input", str(events), "--output", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert (
        "rewindow: error: " in err
        and "emitter.tumbling-time-window.keyExtractor: column 'userId' is not in "
        "the input (its columns: arrival_time, offset, timestamp, user_id); 'org.acme.Event::userId' reads "
        "column 'userId' by the bean convention; did you mean 'user_id'?"
        in err
    )
    assert err.count("ignored in a replay") == 1
    assert "emitter.tumbling-time-window.triggers[0].processors, emitter.tumbling-time-window.triggers[0].sink" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["s3a://bucket/events", "hdfs://nn/events", "viewfs://cluster/events"])
def test_the_early_check_leaves_uris_to_spark(tmp_path, where):
    from windowing.storage.inputs import check_input_schema

    check_input_schema(load_seed(tmp_path, SEED_SESSION), [where])  # no error: Spark's reader decides


def test_the_early_check_leaves_unreadable_files_to_spark(tmp_path):
    from windowing.storage.inputs import check_input_schema

    p = load_seed(tmp_path, SEED_SESSION)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "part-0.parquet").write_text("not parquet")
    check_input_schema(p, [str(tmp_path / "junk")])  # Spark's footer check names the file
    check_input_schema(p, [str(tmp_path / "nowhere")])  # Spark's reader says it does not exist
    check_input_schema(p, [])  # the pipeline's table or no input


def test_the_early_check_reads_every_file_and_skips_hidden_ones(tmp_path):
    from windowing.storage.inputs import check_input_schema

    p = load_seed(tmp_path, SEED_SESSION)
    base = {"arrival_time": pa.array([1], pa.int64()), "offset": pa.array([1], pa.int64())}
    _write_events(
        tmp_path / "ev" / "date=2024-01-01", {**base, "userId": pa.array(["a"]), "timestamp": pa.array([1], pa.int64())}
    )
    pq.write_table(pa.table({"amount": pa.array([1.0]), "id": pa.array(["x"])}), tmp_path / "ev" / "part-1.parquet")
    check_input_schema(p, [str(tmp_path / "ev")])  # the union has every column
    (tmp_path / "ev" / "part-1.parquet").rename(tmp_path / "ev" / "_part-1.parquet")
    with pytest.raises(ConfigError, match="builder\\[1\\].type: column 'amount' is not in the input"):
        check_input_schema(p, [str(tmp_path / "ev")])


@pytest.mark.spark
def test_the_spark_side_check_gives_the_same_message(spark, tmp_path):
    from windowing import replay

    p = load_seed(tmp_path, SEED_SESSION)
    events = spark.createDataFrame(
        [(1, 0, "a", 1, 1.0, "x")],
        "arrival_time long, offset long, user_id string, timestamp long, amount double, id string",
    )
    with pytest.raises(ConfigError) as spark_side:
        replay(spark, p, events)
    with pytest.raises(ConfigError) as early:
        check_input_columns(p, SESSION_COLUMNS)
    assert str(spark_side.value) == str(early.value)


# --------------------------------------------------------------------------- 4. live-only fields


def test_live_only_fields_are_listed_never_dropped(tmp_path):
    text = seed_yaml(SEED_SESSION).replace("    # exceptionHandler:", "    exceptionHandler:")
    text = text.replace("source:\n", "source:\n  kafka:\n    bootstrapServers: broker:9092\n    topicNames: events\n")
    text += (
        "    - trigger: org.voltdb.stream.api.pipeline.emitter.ExceptionTrigger#onError\n"
        "      sink: {stdout: {}}\n"
        "processors: [{javascript: {script: x}}]\nsink:\n  kafka: {topicName: out}\n"
        "replay: {liveProcessors: ignore}\n"  # processors a replay does not run: acknowledged
    )
    f = tmp_path / "p.yaml"
    f.write_text(text)
    p = load_pipeline(f)
    assert p.ignored_fields == (
        "processors",
        "sink",
        "source.kafka",
        "emitter.session-window.exceptionHandler",
        "emitter.triggers[1]",
    )
    assert [t.value for t in p.triggers] == ["atWindowEnd"]
    assert ignored_fields_note(p) == (
        "pipeline 'seed': ignored in a replay (settings of the live VoltSP pipeline): processors, sink, "
        "source.kafka, emitter.session-window.exceptionHandler, emitter.triggers[1]; the replay writes late events "
        "to late_events/, rows it cannot process to rejected/ and windows to its own output"
    )
    assert p == load_seed(tmp_path, SEED_SESSION)  # the same replay
    assert ignored_fields_note(parse_pipeline(doc())) is None


def test_dagster_runs_log_the_ignored_fields():
    from assets.pipelines import _warn_about_ignored_settings

    class Log:
        def __init__(self):
            self.warnings = []

        def warning(self, msg):
            self.warnings.append(msg)

    log = Log()
    p = parse_pipeline(doc(exceptionHandler="com.example.Handler"))
    _warn_about_ignored_settings(log, p, Path("clicks.yaml"), storage=None)
    assert log.warnings == [f"clicks.yaml: {ignored_fields_note(p)}"]


LIVE_MISTAKES = [
    # edit of the document,                                                         substrings the message must hold
    (
        lambda d: d["emitter"]["tumbling-time-window"].update(exceptionHandlr="X"),
        [f"{W}.exceptionHandlr", "unknown field", "did you mean exceptionHandler"],
    ),
    (
        lambda d: d["source"].update(bach={"interval": "1s"}),
        ["source.bach", "unknown field", "did you mean batch"],
    ),  # a typo, not a VoltSP source
    (lambda d: d["source"].update(arivalTime="x"), ["source.arivalTime", "unknown field"]),
    (
        lambda d: d["source"].update(kafka={"topicNames": "t"}, stdin={}),
        ["source.stdin", "source.kafka", "one plugin block"],
    ),
    (
        lambda d: d.update(source={"kafka": {"topicNames": "t"}}),
        ["source.arrivalTime", "source.kafka", "live pipeline"],
    ),
    (lambda d: d.update(source=None), ["source: required", "arrivalTime"]),  # the seed's `source: ...`
    (
        lambda d: d["emitter"].update(triggers=[{"trigger": "atWindowEnd", "sinks": {}}]),
        ["emitter.triggers[0].sinks", "unknown field"],
    ),
    (lambda d: d.update(sinks={}), ["sinks", "unknown field", "did you mean sink"]),
    (lambda d: d["emitter"].update(triggers=["ExceptionTrigger#onError"]), ["emitter.triggers", "no window trigger"]),
]


@pytest.mark.parametrize(("edit", "needles"), LIVE_MISTAKES, ids=[n[0] for _, n in LIVE_MISTAKES])
def test_unknown_fields_stay_errors(edit, needles):
    d = doc()
    edit(d)
    with pytest.raises(ConfigError) as info:
        parse_pipeline(d)
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {info.value}"


@pytest.mark.parametrize(
    ("places", "named"),
    [
        (("emitter", "window"), "emitter.triggers and emitter.tumbling-time-window.triggers"),
        (("root", "emitter"), "triggers and emitter.triggers"),
        (("root", "window"), "triggers and emitter.tumbling-time-window.triggers"),
    ],
)
def test_triggers_in_two_places_are_refused(places, named):
    d = doc()
    where = {"root": d, "emitter": d["emitter"], "window": d["emitter"]["tumbling-time-window"]}
    where[places[0]]["triggers"] = ["atWindowEnd"]
    where[places[1]]["triggers"] = ["atAggregate"]
    with pytest.raises(ConfigError, match=f"^{named}: triggers are given in both places"):
        parse_pipeline(d)


# --------------------------------------------------------------------------- 5. output columns that clash

CLASHES = [
    # window fields / top-level edits,                     both sides the message names
    (
        dict(keyExtractor="window_start"),
        [f"{W}.keyExtractor", "the column 'window_start' rewindow adds", "aggregates output"],
    ),
    (dict(keyExtractor="emit_time"), [f"{W}.keyExtractor", "'emit_time' rewindow adds"]),
    (dict(keyExtractor="emission"), [f"{W}.keyExtractor", "'emission' rewindow adds"]),
    (
        dict(keyExtractor="count"),
        [f"{W}.aggregateDefinition[0].name", f"the key column 'count' ({W}.keyExtractor)", "the aggregate 'count'"],
    ),
    (dict(keyExtractor="Count"), [f"{W}.aggregateDefinition[0].name", "'Count'", "ignoring case"]),
    (
        dict(keyExtractor="com.example.Event::getCount"),
        [f"{W}.aggregateDefinition[0].name", "the key column 'count'"],
    ),  # via the bean convention
    (dict(keyExtractor="batch"), [f"{W}.keyExtractor", "'batch' rewindow adds", "state output"]),
    (dict(source_worker="emit_reason"), ["source.worker", "'emit_reason' rewindow adds"]),
    (
        dict(source_worker="user_id", keyExtractor="user_id"),
        ["source.worker", f"{W}.keyExtractor", "different columns"],
    ),
    (
        dict(
            aggregateDefinition=["count", {"type": "max", "column": "amount", "name": "user_id"}],
            keyExtractor="user_id",
        ),
        [f"{W}.aggregateDefinition[1].name", f"the key column 'user_id' ({W}.keyExtractor)"],
    ),
    (
        dict(aggregateDefinition=["sum (amount)", "sum (amount)"]),
        [
            f"{W}.aggregateDefinition[1].name: the aggregate 'sum_amount' ({W}.aggregateDefinition[0].name) and the aggregate 'sum_amount' would",
            "another name",
        ],
    ),
    (
        dict(aggregateDefinition=["count (a)", {"type": "max", "column": "b", "name": "count_a"}]),
        [f"{W}.aggregateDefinition[1].name", f"({W}.aggregateDefinition[0].name)", "'count_a'"],
    ),
    (
        dict(aggregateDefinition=[{"type": "sum", "column": "a", "name": "x"}, {"type": "count", "name": "x_n"}]),
        [f"{W}.aggregateDefinition[1].name", f"({W}.aggregateDefinition[0].name)", "'partial_x_n'", "state output"],
    ),
]


@pytest.mark.parametrize(("fields", "needles"), CLASHES, ids=[n[0] + " " + n[1] for _, n in CLASHES])
def test_output_columns_of_one_name_are_refused_naming_both(fields, needles):
    fields = dict(fields)
    d = doc(**{k: v for k, v in fields.items() if k != "source_worker"})
    if "source_worker" in fields:
        d["source"]["worker"] = fields["source_worker"]
    with pytest.raises(ConfigError) as info:
        parse_pipeline(d)
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in {info.value}"


def test_output_columns_match_the_kernel_schemas():
    """config's list of output columns (the clash check's) is the kernel's, so the two cannot
    drift apart: the same names, plus ``_overflow`` of non-decimal sums (decimal only)."""
    from windowing.config import output_columns
    from windowing.kernel import Spec

    p = parse_pipeline(
        yaml.safe_load("""
        version: 1
        name: all
        source: {arrivalTime: arrival_time, worker: part}
        emitter:
          session-window:
            keyExtractor: user_id
            timeConfig: {eventTimeExtractor: t, idleTimeout: 5m}
            aggregateDefinition: [count, count (tag), sum (qty), avg (amount), min (tag), max (tag), distinct (tag),
                                  first (tag), last (tag), sum (price)]
    """)
    )
    types = {
        "arrival_time": pa.int64(),
        "part": pa.int32(),
        "user_id": pa.string(),
        "t": pa.int64(),
        "tag": pa.string(),
        "qty": pa.int64(),
        "amount": pa.float64(),
        "price": pa.decimal128(12, 2),
    }
    spec = Spec(p, types)
    ours = output_columns(p)
    assert ours["aggregates"] == tuple(spec.aggregates_schema().names)
    kernel_state = spec.state_schema().names
    assert [c for c in ours["state"] if c in kernel_state] == kernel_state
    assert set(ours["state"]) - set(kernel_state) == {"partial_sum_qty_overflow", "partial_avg_amount_overflow"}


# --------------------------------------------------------------------------- end to end


def _session_history(seed: int = 11, n: int = 300) -> list[dict]:
    """Events of a few users in bursts, slightly out of order, over about two hours:
    sessions close by gap, by the 10-minute maximum, and some events are late."""
    rng = random.Random(seed)
    rows, t = [], 1_700_000_000_000
    for offset in range(n):
        t += rng.choice([200, 1_000, 5_000, 30_000, 400_000])
        rows.append(
            {
                "arrival_time": t,
                "offset": offset,
                "userId": rng.choice(["ann", "bob", "cyd"]),
                "timestamp": t - rng.choice([0, 0, 500, 3_000, 200_000]),
                "amount": rng.choice([None, 1.5, 2.25, 10.0, -4.0]),
                "id": rng.choice(["e1", "e2", "e3", "e4", None]),
            }
        )
    return rows


@pytest.mark.spark
def test_seed_session_block_replays_end_to_end(spark, tmp_path, monkeypatch, capsys):
    """The seed's session window, as written, through ``rewindow replay`` on Parquet whose
    columns are named by the bean convention; the output is the reference model's."""
    from windowing import cli, command_line

    rows = _session_history()
    config = tmp_path / "p.yaml"
    config.write_text(seed_yaml(SEED_SESSION))
    events = _write_events(
        tmp_path / "events",
        {
            "arrival_time": pa.array([r["arrival_time"] for r in rows], pa.int64()),
            "offset": pa.array([r["offset"] for r in rows], pa.int64()),
            "userId": pa.array([r["userId"] for r in rows]),
            "timestamp": pa.array([r["timestamp"] for r in rows], pa.int64()),
            "amount": pa.array([r["amount"] for r in rows], pa.float64()),
            "id": pa.array([r["id"] for r in rows]),
        },
    )
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main(
        ["replay", "--config", str(config), "--input", str(events), "--output", str(tmp_path / "out"), "--flush-at-end"]
    )
    assert code == 0, capsys.readouterr().err
    from tests.support.outputs import run_dir

    written = pq.read_table(run_dir(tmp_path / "out") / "aggregates").to_pylist()
    for r in written:
        for c in ("window_start", "window_end", "emit_time", "emit_watermark"):
            r[c] = None if r[c] is None else int(r[c].timestamp() * 1000)
    ref = reference_replay(load_pipeline(config), rows, flush_at_end=True)
    assert written and canon(written) == canon(ref.aggregates)
    assert set(written[0]) == {
        "userId",
        "window_start",
        "window_end",
        "count",
        "sum_amount",
        "min_amount",
        "max_amount",
        "distinct_id",
        "emit_reason",
        "emit_batch",
        "emit_time",
        "emit_watermark",
        "emission",
    }
    assert {r["emit_reason"] for r in written} >= {"WATERMARK", "MAX_DURATION"}


def test_the_documented_example_loads():
    """docs/configuration.md's VoltSP example is a file that loads, with what it says."""
    text = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    section = text[text.index("## Copying a VoltSP window block") :]
    example = section[section.index("```yaml\n") + len("```yaml\n") : section.index("\n```", section.index("```yaml"))]
    p = parse_pipeline(yaml.safe_load(example))
    assert (p.window.keys, p.window.event_time, p.source.path) == (("user_id",), "timestamp", "data/events")
    assert [a.name for a in p.aggregates] == ["count", "sum_amount", "distinct_id"]
    assert p.ignored_fields == ("source.kafka", "emitter.session-window.exceptionHandler", "emitter.triggers[0].sink")


# --------------------------------------------------------------------------- keys of several columns


def test_a_key_of_several_columns_is_written_the_same_way_in_the_voltsp_form():
    """Issue 49: ``keyExtractor: [a, b]`` of Java extractors, columns or ``columns:`` entries;
    each part resolves as a key of one would, and messages name the part."""
    p = parse_pipeline(doc(keyExtractor=["org.acme.Event::getAccount", "region"]))
    assert p.window.keys == ("account", "region")
    assert p.id_columns == ("account", "region")
    lam = "e -> e.region()"
    mapped = parse_pipeline(with_top(doc(keyExtractor=["user_id", lam]), columns={lam: "region"}))
    assert mapped.window.keys == ("user_id", "region")
    roles = {b.role: (b.field, b.written, b.column) for b in mapped.column_bindings}
    assert roles["keyExtractor[1]"] == ("emitter.tumbling-time-window.keyExtractor[1]", lam, "region")


@pytest.mark.parametrize(
    "key, message",
    [
        ([], r"keyExtractor: an empty list; name the key's columns, or leave keyExtractor out"),
        (["user_id", " user_id "], r"keyExtractor\[1\]: column 'user_id' is already part of the key"),
        (["user_id", 3], r"keyExtractor\[1\]: 3 must be a column name"),
        (["user_id", None], r"keyExtractor\[1\]: None must be a column name"),
        (["user_id", "e -> e.x()"], r"keyExtractor\[1\]: 'e -> e.x\(\)' is neither a column name nor a Java extractor"),
    ],
)
def test_a_bad_key_of_several_columns_is_refused_naming_its_part(key, message):
    with pytest.raises(ConfigError, match=message):
        parse_pipeline(doc(keyExtractor=key))


def test_a_missing_part_of_the_key_is_named_with_its_index():
    p = parse_pipeline(doc(keyExtractor=["user_id", "region"]))
    with pytest.raises(
        ConfigError, match=r"^emitter.tumbling-time-window.keyExtractor\[1\]: column 'region' is not in"
    ):
        check_input_columns(p, ["arrival_time", "offset", "user_id", "amount", "timestamp"])


def test_a_part_of_the_key_that_clashes_with_an_output_column_is_refused():
    with pytest.raises(ConfigError, match=r"keyExtractor\[1\]"):
        parse_pipeline(doc(keyExtractor=["user_id", "window_start"]))
