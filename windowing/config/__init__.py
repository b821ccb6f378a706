"""Pipeline configuration: the YAML of the windowing contract, section 10.

``load_pipeline(path)`` returns a frozen, validated :class:`Pipeline`. Every
mistake raises :class:`ConfigError` naming the YAML field and the bad value.
Unknown fields are refused too: a typo must not silently become a default. So are a
key given twice in one mapping (plain YAML keeps the last one), a file that is not
UTF-8, and a duration longer than ``durations.MAX_DURATION_MS`` (100 years).

A VoltSP window block is accepted as its users write it: Java extractors
(``com.example.Event::getUserId``) name columns by the bean convention (``userId``),
overridable by a ``columns:`` map; aggregates may be written ``sum (amount)``; the live
pipeline's settings that mean nothing in a replay (``exceptionHandler``, ``sink``,
``processors``, a VoltSP source plugin block) are accepted and listed in
``Pipeline.ignored_fields`` (see :func:`ignored_fields_note`), never dropped silently.
:func:`check_input_columns` checks the columns a pipeline reads against an input's.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Collection, Iterable, Literal, Mapping, Sequence, TypeVar, cast, overload

import yaml

from windowing.catalog import parse_output
from windowing.durations import format_duration_ms, parse_duration_ms


class ConfigError(ValueError):
    """A pipeline configuration is invalid. The message names the field."""


class WindowType(str, Enum):
    TUMBLING = "tumbling-time-window"
    SLIDING = "sliding-time-window"
    SESSION = "session-window"


class WatermarkStrategy(str, Enum):
    MIN_EVENT_TIME = "MIN_EVENT_TIME"
    MAX_EVENT_TIME = "MAX_EVENT_TIME"


class Lateness(str, Enum):
    WINDOW_CLOSED = "WINDOW_CLOSED"
    BEFORE_WATERMARK = "BEFORE_WATERMARK"


class Clock(str, Enum):
    EVENT_TIME = "EVENT_TIME"
    PROCESSING_TIME = "PROCESSING_TIME"


class Trigger(str, Enum):
    AT_WINDOW_END = "atWindowEnd"
    AT_AGGREGATE = "atAggregate"


AGGREGATE_TYPES = (
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "distinct",
    "first",
    "last",
    "stddev_pop",
    "stddev_samp",
    "percentile",
)
#: Aggregates that need a numeric column.
NUMERIC_AGGREGATES = ("sum", "avg", "stddev_pop", "stddev_samp", "percentile")
#: The percentage of a ``percentile`` without one: the median.
DEFAULT_PERCENTAGE = 0.5

#: Batch interval used when ``source.batch`` is not configured.
DEFAULT_BATCH_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class Aggregate:
    """One aggregate column of the output: ``type`` over ``column``, named ``name``."""

    type: str
    column: str | None
    name: str


@dataclass(frozen=True)
class PercentileAggregate(Aggregate):
    """A ``percentile`` given its ``percentage`` (in [0, 1]); a plain :class:`Aggregate` of
    type ``percentile`` is the median (:data:`DEFAULT_PERCENTAGE`). A subclass, so that
    every other aggregate (and its state fingerprint) stays what it was."""

    percentage: float = DEFAULT_PERCENTAGE


@dataclass(frozen=True)
class ColumnBinding:
    """How the YAML field ``field`` came to read input column ``column``.

    ``written`` is the field's text (``com.example.Event::getUserId``); ``via`` is
    ``"bean"`` (the bean convention made the column), ``"columns"`` (the ``columns:``
    map did) or None (the text is the column). ``role`` says which use it is
    (``keyExtractor``, ``eventTimeExtractor``, ``aggregate[i]``).
    """

    role: str
    field: str
    written: str
    column: str
    via: str | None = None


@dataclass(frozen=True)
class Source:
    arrival_time: str
    arrival_order: tuple[str, ...] = ()
    batch_column: str | None = None
    batch_interval_ms: int | None = DEFAULT_BATCH_INTERVAL_MS
    worker: str | None = None
    #: Where the events live: ``path`` (a folder or any URI Spark reads: ``file:``,
    #: ``s3a:``, ``gs:``, ``abfss:``, ``hdfs:``, ``viewfs:``) or ``table`` (a catalog
    #: table), one of them at most (neither: the caller names the input).
    path: str | None = None
    table: str | None = None
    #: Spark data source name: parquet (default), orc, json, csv, or one the cluster
    #: provides (delta, iceberg, ...).
    format: str = "parquet"
    #: The events' schema as a Spark DDL string; required for csv and json.
    schema: str | None = None
    #: A column of a Hive-style layout (``date=YYYY-MM-DD/``) holding the arrival day:
    #: partitions filter on it so that Spark reads only the day's files.
    partition_column: str | None = None
    #: Extra reader options (``header: true`` for csv, ...).
    options: tuple[tuple[str, str], ...] = ()
    #: ``maxFutureSkew``: an event whose event time is more than this ahead of its arrival
    #: time is rejected (reason ``FUTURE_SKEW``) before it moves any watermark. None: off
    #: (the live semantics, where such an event moves its key's and worker's watermarks).
    max_future_skew_ms: int | None = None

    #: Fields that say where events are, not what they mean (not in the fingerprint).
    LOCATION_FIELDS = ("path", "table", "format", "schema", "partition_column", "options")


@dataclass(frozen=True)
class Window:
    """Window shape and time configuration, all durations in milliseconds.

    Tumbling, span S, offset O: ``[N*S + O, (N+1)*S + O)``.
    Sliding, span S, slide L:   every ``[N*L + O, N*L + O + S)`` containing t.
    The offset satisfies ``0 <= O < S``.
    Session, gap G:             events closer than G merge; see docs/semantics.md.
    """

    type: WindowType
    span_ms: int | None = None
    slide_ms: int | None = None
    offset_ms: int = 0
    maximum_duration_ms: int | None = None
    key: str | None = None
    event_time: str | None = None
    watermark_strategy: WatermarkStrategy = WatermarkStrategy.MIN_EVENT_TIME
    delay_ms: int = 0
    idle_timeout_ms: int | None = None
    idle_clock: Clock = Clock.PROCESSING_TIME
    lateness: Lateness = Lateness.WINDOW_CLOSED

    @property
    def gap_ms(self) -> int:
        """Session gap (the session window's idleTimeout)."""
        assert self.idle_timeout_ms is not None
        return self.idle_timeout_ms


#: Default of ``replay.heartbeat``: live VoltSP's pipeline heartbeat, 60 seconds.
DEFAULT_HEARTBEAT_MS = 60_000

#: Default of ``quality.maxRejectedShare``: one rejected row in a thousand.
DEFAULT_MAX_REJECTED_SHARE = 0.001


@dataclass(frozen=True)
class Quality:
    """``quality:``: how many rejected rows a partition may have before its checks block.

    Rejected rows are expected data (the replay routes them to ``rejected`` with the
    reason). While a partition's rejected rows are at most ``max_rejected_share`` of its
    input rows, the input checks that flag them warn; above it they block.
    """

    max_rejected_share: float = DEFAULT_MAX_REJECTED_SHARE


@dataclass(frozen=True)
class Pipeline:
    name: str
    source: Source
    window: Window
    aggregates: tuple[Aggregate, ...]
    triggers: tuple[Trigger, ...] = (Trigger.AT_WINDOW_END,)
    flush_at_end: bool = False
    version: int = 1
    quality: Quality = Quality()
    #: ``replay.heartbeat``: the live pipeline's wake-up interval; 0 turns it off.
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    #: Where extractor fields got their columns (for messages; not part of the meaning).
    column_bindings: tuple[ColumnBinding, ...] = field(default=(), compare=False)
    #: YAML fields of the live pipeline that a replay accepts and does not use
    #: (``emitter.session-window.exceptionHandler``, ``source.kafka``, ...).
    ignored_fields: tuple[str, ...] = field(default=(), compare=False)
    #: The ``reconcile:`` block (:class:`ReconcileSpec`): how to compare a
    #: replay with the live pipeline's output. Not part of the meaning of a replay.
    reconcile: Any = field(default=None, compare=False)
    #: The ``output.catalog`` block (:class:`windowing.catalog.CatalogSpec`): the catalog
    #: tables each committed partition is published to; None: not published. Not part of
    #: the meaning of a replay.
    catalog: Any = field(default=None, compare=False)

    @property
    def idle_heartbeat_ms(self) -> int:
        """The heartbeat that flushes idle keys between batches (contract section 5.2):
        ``heartbeat_ms`` with an ``idleTimeout`` on the ``PROCESSING_TIME`` clock, else 0
        (the event-time clock does not move at a heartbeat, so it changes nothing)."""
        w = self.window
        if w.idle_timeout_ms is None or w.idle_clock is not Clock.PROCESSING_TIME:
            return 0
        return self.heartbeat_ms

    @property
    def input_columns(self) -> tuple[str, ...]:
        """Every input column the configuration names, in a stable order."""
        cols: list[str] = [self.source.arrival_time, *self.source.arrival_order]
        for c in (self.source.batch_column, self.source.worker, self.window.key, self.window.event_time):
            if c:
                cols.append(c)
        cols += [a.column for a in self.aggregates if a.column]
        return tuple(dict.fromkeys(cols))

    def fingerprint(self) -> str:
        """Hash of everything that decides the carried state's meaning.

        State written under one fingerprint is refused under another: windows,
        watermarks and partial aggregates would silently mean something else.
        """
        semantic: dict[str, Any] = {
            # maxFutureSkew off (None) leaves the fingerprint what it was before the option existed.
            "source": {
                k: v
                for k, v in asdict(self.source).items()
                if k not in Source.LOCATION_FIELDS and not (k == "max_future_skew_ms" and v is None)
            },
            "window": asdict(self.window),
            "aggregates": [asdict(a) for a in self.aggregates],
        }
        # The heartbeat changes the replay only where it flushes idle keys; elsewhere (and
        # at 0s, the behaviour before it existed) the fingerprint stays what it was, so state
        # carried by those pipelines stays valid.
        if self.idle_heartbeat_ms:
            semantic["heartbeat_ms"] = self.idle_heartbeat_ms
        blob = json.dumps(semantic, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# --------------------------------------------------------------------------- parsing


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and validate a pipeline YAML file (contract section 10)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read pipeline file: {exc.strerror or exc}") from exc
    try:
        doc = yaml.load(_utf8_text(data), Loader=_StrictLoader)
        return parse_pipeline(doc)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None


_UTF8_BOM = b"\xef\xbb\xbf"


def _utf8_text(data: bytes) -> str:
    """The file's text: UTF-8 only (with or without a byte-order mark), never the locale's encoding."""
    start = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = start + exc.start
        line = data.count(b"\n", 0, at) + 1
        raise ConfigError(
            f"not UTF-8: byte 0x{data[at]:02x} at byte offset {at} (line {line}): {exc.reason}; "
            "save the pipeline file as UTF-8"
        ) from None


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # yaml ships no stubs: SafeLoader is Any
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping, at any depth.

    Plain YAML loading keeps the last of two equal keys, so ``windowSpan: 1h`` then
    ``windowSpan: 2d`` would silently mean 2d. A key written beside a ``<<`` merge still
    overrides the merged one: that is YAML's rule, not a duplicate.
    """

    _MERGE_TAG = "tag:yaml.org,2002:merge"

    def construct_document(self, node: yaml.Node) -> Any:
        self._fields = _field_paths(node)  # for messages: mapping node -> its YAML field
        return super().construct_document(node)

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            self._refuse_duplicates(node)
        return super().construct_mapping(node, deep=deep)

    def _refuse_duplicates(self, node: yaml.MappingNode) -> None:
        seen: dict[Any, yaml.Node] = {}
        for key_node, value_node in node.value:
            if key_node.tag == self._MERGE_TAG:  # merge sources: checked as mappings of their own
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if isinstance(source, yaml.MappingNode):
                        self._refuse_duplicates(source)
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeLoader refuses it itself
                continue
            if first is not key_node:
                parent = getattr(self, "_fields", {}).get(id(node), "")
                field = f"{parent}.{key}" if parent else str(key)
                raise ConfigError(
                    f"line {key_node.start_mark.line + 1}: {field}: duplicate key {key!r}, first given on "
                    f"line {first.start_mark.line + 1}; give each key once (YAML would keep the last silently)"
                )


def _field_paths(root: yaml.Node) -> dict[int, str]:
    """``id(node) -> field`` (``emitter.tumbling-time-window``, ``...aggregateDefinition[0]``)."""
    paths: dict[int, str] = {}
    todo = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in paths:  # an alias: keep the first path; also stops recursive documents
            continue
        paths[id(node)] = path
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                name = k.value if isinstance(k, yaml.ScalarNode) else "?"
                todo.append((v, f"{path}.{name}" if path else name))
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((v, f"{path}[{i}]") for i, v in enumerate(node.value))
    return paths


def parse_pipeline(doc: Any) -> Pipeline:
    """Validate a parsed YAML document into a :class:`Pipeline`."""
    m = _mapping(doc, "<root>")
    name, ignored = _parse_root(m)
    if m.get("source") is None:  # a VoltSP file whose `source: ...` placeholder was dropped
        raise ConfigError(
            "source: required: rewindow's source fields (arrivalTime, and path or --input); "
            "a VoltSP source block may stay beside them, unread"
        )
    source = _parse_source(_mapping(m["source"], "source"), ignored)
    emitter = _mapping(m.get("emitter"), "emitter")
    wtype = _window_type(emitter)
    wfield = f"emitter.{wtype.value}"
    wdoc = _mapping(emitter[wtype.value], wfield)
    columns = _ColumnMap(m.get("columns"))
    window, aggregates, labels = _parse_window(wtype, wdoc, wfield, columns, ignored)
    columns.refuse_unused()
    _refuse_clashing_columns(source, window, aggregates, labels)
    _check_future_skew(m, source, window, wfield)
    triggers = _parse_trigger_lists(m, emitter, wfield, wdoc, ignored)
    flush, heartbeat = _parse_replay(m)

    pipeline = Pipeline(
        name=name.strip(),
        source=source,
        window=window,
        aggregates=aggregates,
        triggers=triggers,
        flush_at_end=flush,
        version=1,
        quality=_parse_quality(_mapping(m.get("quality", {}) or {}, "quality")),
        heartbeat_ms=heartbeat,
        column_bindings=tuple(columns.bindings),
        ignored_fields=tuple(ignored),
    )
    try:
        catalog = parse_output(m.get("output"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return replace(pipeline, reconcile=parse_reconcile(m.get("reconcile"), pipeline), catalog=catalog)


def _parse_root(m: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The root's fields checked, its ``version`` and ``name``: ``(name, ignored live-only fields)``."""
    _only(
        m,
        "<root>",
        {
            "version",
            "name",
            "source",
            "emitter",
            "replay",
            "triggers",
            "quality",
            "columns",
            "reconcile",
            "output",
            *_LIVE_ONLY_ROOT_FIELDS,
        },
    )
    ignored = [k for k in m if k in _LIVE_ONLY_ROOT_FIELDS]  # the live pipeline's sink, processors
    version = m.get("version", 1)
    if version != 1:
        raise ConfigError(f"version: {version!r} is not supported; use 1")
    name = m.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"name: {name!r} must be a non-empty string")
    check_pipeline_name(name)
    return name, ignored


#: A pipeline name: letters (any script), digits, ``_``, ``-`` and ``.``, starting with a
#: letter or digit. It becomes a folder (``<output root>/<name>/``) and part of read paths,
#: so no path separator, no ``..``, no Hadoop glob character, no hidden name.
_PIPELINE_NAME = re.compile(r"[^\W_][\w.-]*")


def check_pipeline_name(name: str) -> None:
    """Refuse a pipeline ``name`` that is not one plain folder name (:data:`_PIPELINE_NAME`).

    ``../../x`` would write outside the output root, ``a/b`` a folder ``rewindow status``
    does not list, and ``*`` would read every pipeline's partitions as its own.
    """
    if not _PIPELINE_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"name: {name!r} is not allowed: a pipeline name is one folder name under the output root; "
            "use letters, digits, '_', '-' and '.' (starting with a letter or digit, no '..'), "
            "for example 'clicks-hourly'"
        )


def _window_type(emitter: Mapping[str, Any]) -> WindowType:
    """The one window type ``emitter`` names (other keys but ``triggers`` refused)."""
    window_keys = [k for k in emitter if k in {t.value for t in WindowType}]
    other = [k for k in emitter if k not in {t.value for t in WindowType} and k != "triggers"]
    if other:
        raise ConfigError(
            f"emitter.{other[0]}: unknown window type; use one of " + ", ".join(t.value for t in WindowType)
        )
    if len(window_keys) != 1:
        raise ConfigError("emitter: exactly one window is required, one of " + ", ".join(t.value for t in WindowType))
    return WindowType(window_keys[0])


def _check_future_skew(m: Mapping[str, Any], source: Source, window: Window, wfield: str) -> None:
    """``source.maxFutureSkew`` needs an event time."""
    if source.max_future_skew_ms is not None and window.event_time is None:
        raise ConfigError(
            f"source.maxFutureSkew: {m['source']['maxFutureSkew']!r} needs an event time "
            f"({wfield}.timeConfig.eventTimeExtractor): without one, event time is arrival time and never ahead of it"
        )


def _parse_trigger_lists(
    m: Mapping[str, Any], emitter: Mapping[str, Any], wfield: str, wdoc: Mapping[str, Any], ignored: list[str]
) -> tuple[Trigger, ...]:
    """The triggers, from the one place they are given (default ``atWindowEnd``)."""
    # VoltSP writes triggers beside the window (under emitter) or inside the window block.
    given = [
        (f, d["triggers"])
        for f, d in (("triggers", m), ("emitter.triggers", emitter), (f"{wfield}.triggers", wdoc))
        if "triggers" in d
    ]
    if len(given) > 1:
        raise ConfigError(
            f"{given[0][0]} and {given[1][0]}: triggers are given in both places; give them once "
            "(which list would win is a guess)"
        )
    triggers_field, triggers_doc = given[0] if given else ("emitter.triggers", ["atWindowEnd"])
    return _parse_triggers(triggers_doc, triggers_field, ignored)


def _parse_replay(m: Mapping[str, Any]) -> tuple[bool, int]:
    """The ``replay`` block: ``(flushAtEnd, heartbeat in ms)``."""
    replay_doc = _mapping(m.get("replay", {}) or {}, "replay")
    _only(replay_doc, "replay", {"flushAtEnd", "heartbeat"})
    flush = replay_doc.get("flushAtEnd", False)
    if not isinstance(flush, bool):
        raise ConfigError(f"replay.flushAtEnd: {flush!r} must be true or false")
    heartbeat = (
        _duration(replay_doc["heartbeat"], "replay.heartbeat") if "heartbeat" in replay_doc else DEFAULT_HEARTBEAT_MS
    )
    return flush, heartbeat


def _parse_quality(q: Mapping[str, Any]) -> Quality:
    _only(q, "quality", {"maxRejectedShare"})
    if "maxRejectedShare" not in q:
        return Quality()
    return Quality(max_rejected_share=parse_share(q["maxRejectedShare"], "quality.maxRejectedShare"))


def parse_share(v: Any, f: str) -> float:
    """A share of rows: a number from 0 to 1 (``0.001``) or a percentage (``"0.1%"``)."""
    text = v.strip() if isinstance(v, str) else v
    try:
        if isinstance(text, str) and text.endswith("%"):
            share = float(text[:-1].strip()) / 100
        elif isinstance(text, bool) or not isinstance(text, (int, float)):
            raise ValueError
        else:
            share = float(text)
    except ValueError:
        raise ConfigError(
            f"{f}: {v!r} is not a share; use a number from 0 to 1 (0.001) or a percentage (0.1%)"
        ) from None
    if not 0 <= share <= 1 or share != share:
        raise ConfigError(f"{f}: {v!r} is not between 0 and 1 (0% and 100%)")
    return share


_SOURCE_FIELDS = {
    "path",
    "table",
    "format",
    "schema",
    "partitionColumn",
    "options",
    "arrivalTime",
    "arrivalOrder",
    "batch",
    "worker",
    "maxFutureSkew",
}


def _parse_source(s: Mapping[str, Any], ignored: list[str]) -> Source:
    """rewindow's source; a VoltSP source block beside it (``kafka: {...}``) goes to ``ignored``."""
    live = _live_source_blocks(s)
    if live and "arrivalTime" not in s:
        raise ConfigError(
            f"source.arrivalTime: required; source.{live[0]} is the live pipeline's VoltSP source, which a replay "
            "does not read: add rewindow's source fields beside it (arrivalTime, and path or --input)"
        )
    ignored += [f"source.{k}" for k in live]
    _only({k: v for k, v in s.items() if k not in live}, "source", _SOURCE_FIELDS)
    arrival = _column(s.get("arrivalTime"), "source.arrivalTime", required=True)
    order = s.get("arrivalOrder", []) or []
    if isinstance(order, str):
        order = [order]
    if not isinstance(order, list):
        raise ConfigError(f"source.arrivalOrder: {order!r} must be a list of column names")
    order_cols = tuple(_column(c, f"source.arrivalOrder[{i}]", required=True) for i, c in enumerate(order))
    batch_column: str | None = None
    batch_interval: int | None = DEFAULT_BATCH_INTERVAL_MS
    if "batch" in s:
        b = _mapping(s["batch"], "source.batch")
        _only(b, "source.batch", {"interval", "column"})
        if ("interval" in b) == ("column" in b):
            raise ConfigError("source.batch: give exactly one of interval or column")
        if "column" in b:
            batch_column, batch_interval = _column(b["column"], "source.batch.column", required=True), None
        else:
            batch_interval = _positive_duration(b["interval"], "source.batch.interval")
    path, table = s.get("path"), s.get("table")
    for name, value in (("source.path", path), ("source.table", table)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{name}: {value!r} must be a non-empty string")
    if path is not None and table is not None:
        raise ConfigError("source: give source.path or source.table, not both")
    fmt = s.get("format", "parquet")
    if not isinstance(fmt, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", fmt):
        raise ConfigError(f"source.format: {fmt!r} is not a data source name (parquet, orc, json, csv, delta, ...)")
    fmt = fmt.lower()
    schema = s.get("schema")
    if schema is not None and (not isinstance(schema, str) or not schema.strip()):
        raise ConfigError(f"source.schema: {schema!r} must be a Spark DDL string such as 'a string, b long'")
    if fmt in ("csv", "json") and schema is None:
        raise ConfigError(f"source.schema: source.format {fmt} needs an explicit schema (a Spark DDL string)")
    options = s.get("options", {}) or {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ConfigError(f"source.options: {options!r} must be a mapping of reader options")
    return Source(
        table=table.strip() if table else None,
        format=fmt,
        schema=schema,
        partition_column=_column(s.get("partitionColumn"), "source.partitionColumn"),
        options=tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items())),
        arrival_time=arrival,
        arrival_order=order_cols,
        batch_column=batch_column,
        batch_interval_ms=batch_interval,
        worker=_column(s.get("worker"), "source.worker"),
        path=path,
        max_future_skew_ms=(
            _duration(s["maxFutureSkew"], "source.maxFutureSkew") if s.get("maxFutureSkew") is not None else None
        ),
    )


def _live_source_blocks(s: Mapping[str, Any]) -> list[str]:
    """Keys of ``source`` that are a VoltSP source plugin block, not rewindow fields.

    A VoltSP pipeline's source is one plugin name holding a mapping (``kafka:
    {bootstrapServers: ...}``), or nothing once the docs' ``...`` is removed. A key that
    is a rewindow field, holds a plain value, or is a near miss of a rewindow field
    (``bach: {interval: 1s}``) is not one: ``_only`` refuses the last two as unknown.
    """
    live = [
        k
        for k, v in s.items()
        if isinstance(k, str)
        and k not in _SOURCE_FIELDS
        and (v is None or isinstance(v, Mapping))
        and not _close_matches(k, _SOURCE_FIELDS)
    ]
    if len(live) > 1:
        raise ConfigError(
            f"source.{live[1]}: unknown field; a VoltSP source is one plugin block and source.{live[0]} is taken "
            f"as that; rewindow's source fields are {', '.join(sorted(_SOURCE_FIELDS))}"
        )
    return live


_WINDOW_FIELDS = {
    WindowType.TUMBLING: {"windowSpan", "windowOffset"},
    WindowType.SLIDING: {"windowSpan", "windowSlide", "windowOffset"},
    WindowType.SESSION: {"maximumDuration", "idleTimeout"},
}
_TIME_FIELDS = {
    "eventTimeExtractor",
    "watermarkStrategy",
    "delayWindowClose",
    "idleTimeout",
    "idleTimeoutClock",
    "lateness",
}


def _parse_window(
    wtype: WindowType, w: Mapping[str, Any], f: str, columns: _ColumnMap, ignored: list[str]
) -> tuple[Window, tuple[Aggregate, ...], _Labels]:
    """(Window, aggregates, labels): ``labels`` names the YAML field of each output column
    the configuration decides (``"key"``, ``("aggregate", i)``), for clash messages."""
    common = {"keyExtractor", "timeConfig", "aggregateDefinition", "triggers", *_LIVE_ONLY_WINDOW_FIELDS}
    _only(w, f, common | _WINDOW_FIELDS[wtype])
    ignored += [f"{f}.{k}" for k in w if k in _LIVE_ONLY_WINDOW_FIELDS]
    tc = _mapping(w.get("timeConfig", {}) or {}, f"{f}.timeConfig")
    _only(tc, f"{f}.timeConfig", _TIME_FIELDS)

    span, slide, offset, max_dur = _window_extent(wtype, w, f)
    idle = _idle_timeout(wtype, w, tc, f)
    key, _ = columns.resolve(w.get("keyExtractor"), f"{f}.keyExtractor", "keyExtractor")
    event_time, _ = columns.resolve(
        tc.get("eventTimeExtractor"), f"{f}.timeConfig.eventTimeExtractor", "eventTimeExtractor"
    )
    strategy = _enum(
        WatermarkStrategy, tc.get("watermarkStrategy", "MIN_EVENT_TIME"), f"{f}.timeConfig.watermarkStrategy"
    )
    delay = _duration(tc["delayWindowClose"], f"{f}.timeConfig.delayWindowClose") if "delayWindowClose" in tc else 0
    lateness = _enum(Lateness, tc.get("lateness", "WINDOW_CLOSED"), f"{f}.timeConfig.lateness")
    default_clock = "EVENT_TIME" if event_time else "PROCESSING_TIME"
    clock = _enum(Clock, tc.get("idleTimeoutClock", default_clock), f"{f}.timeConfig.idleTimeoutClock")
    if clock is Clock.EVENT_TIME and not event_time:
        raise ConfigError(f"{f}.timeConfig.idleTimeoutClock: EVENT_TIME needs timeConfig.eventTimeExtractor")

    window = Window(
        type=wtype,
        span_ms=span,
        slide_ms=slide,
        offset_ms=offset,
        maximum_duration_ms=max_dur,
        key=key,
        event_time=event_time,
        watermark_strategy=strategy,
        delay_ms=delay,
        idle_timeout_ms=idle,
        idle_clock=clock,
        lateness=lateness,
    )
    aggregates, agg_fields = _parse_aggregates(w.get("aggregateDefinition"), f"{f}.aggregateDefinition", columns)
    labels: dict[str | tuple[str, int], str] = {
        "worker": "source.worker",
        "key": f"{f}.keyExtractor",
        **{("aggregate", i): fi for i, fi in enumerate(agg_fields)},
    }
    return window, aggregates, labels


def _window_extent(wtype: WindowType, w: Mapping[str, Any], f: str) -> tuple[int | None, int | None, int, int | None]:
    """``(span, slide, offset, maximum duration)`` in ms (None where the type has none)."""
    span: int | None = None
    slide: int | None = None
    max_dur: int | None = None
    offset = 0
    if wtype in (WindowType.TUMBLING, WindowType.SLIDING):
        if "windowSpan" not in w:
            raise ConfigError(f"{f}.windowSpan: required for {wtype.value}")
        span = _positive_duration(w["windowSpan"], f"{f}.windowSpan")
    if wtype is WindowType.SLIDING:
        if "windowSlide" not in w:
            raise ConfigError(f"{f}.windowSlide: required for sliding-time-window")
        slide = _positive_duration(w["windowSlide"], f"{f}.windowSlide")
        assert span is not None  # sliding windows have a span (above)
        if slide > span:
            raise ConfigError(f"{f}.windowSlide: {w['windowSlide']!r} is larger than windowSpan {w['windowSpan']!r}")
    if wtype in (WindowType.TUMBLING, WindowType.SLIDING) and "windowOffset" in w:
        assert span is not None  # tumbling and sliding windows have a span (above)
        offset = _window_offset(w["windowOffset"], span, slide or span, w["windowSpan"], f"{f}.windowOffset")
    if wtype is WindowType.SESSION and "maximumDuration" in w:
        max_dur = _positive_duration(w["maximumDuration"], f"{f}.maximumDuration")
    return span, slide, offset, max_dur


def _idle_timeout(wtype: WindowType, w: Mapping[str, Any], tc: Mapping[str, Any], f: str) -> int | None:
    """``idleTimeout`` in ms, from ``timeConfig`` or beside the window (required for sessions)."""
    # The seed puts a session's idleTimeout beside the window; the contract in timeConfig.
    idle: int | None = None
    for where, doc in ((f"{f}.timeConfig.idleTimeout", tc), (f"{f}.idleTimeout", w)):
        if "idleTimeout" in doc:
            value = _positive_duration(doc["idleTimeout"], where)
            if idle is not None and value != idle:
                raise ConfigError(f"{where}: {doc['idleTimeout']!r} disagrees with timeConfig.idleTimeout")
            idle = value
    if wtype is WindowType.SESSION and idle is None:
        raise ConfigError(f"{f}.timeConfig.idleTimeout: required for session-window (it is the session gap)")
    return idle


def _parse_aggregates(doc: Any, f: str, columns: _ColumnMap) -> tuple[tuple[Aggregate, ...], list[str]]:
    """The aggregates and, for each, the YAML field its output name comes from.

    An item is ``{type, column, name}``, or VoltSP's shorthand ``type (column)``
    (``sum (amount)``), as a string or as ``type:`` beside an optional ``name:``. The
    column may be a plain column name or an extractor (see :class:`_ColumnMap`).
    """
    # VoltSP writes {from: Class, builder: [...]}; accept that shape as well as a plain list.
    # The class only says whose properties the shorthand names; here they are columns.
    if isinstance(doc, Mapping):
        _only(doc, f, {"from", "builder"})
        doc, f = doc.get("builder"), f"{f}.builder"
    if not isinstance(doc, list) or not doc:
        raise ConfigError(f"{f}: {doc!r} must be a non-empty list of aggregates")
    out: list[Aggregate] = []
    for i, item in enumerate(doc):
        fi = f"{f}[{i}]"
        if isinstance(item, str):
            item = {"type": item}
        item = _mapping(item, fi)
        _only(item, fi, {"type", "column", "name", "percentage"})
        typ, written = _aggregate_type(item.get("type"), f"{fi}.type")
        if written is not None and "column" in item:
            raise ConfigError(
                f"{fi}: type {item['type']!r} names its column and column: {item['column']!r} names one too; "
                "give the column once"
            )
        where = f"{fi}.type" if written is not None else f"{fi}.column"
        column, prop = columns.resolve(written if written is not None else item.get("column"), where, f"aggregate[{i}]")
        if typ != "count" and column is None:
            raise ConfigError(
                f"{fi}.column: aggregate {typ!r} needs a column (column: amount, or type: {typ} (amount))"
            )
        name = item.get("name")
        if name is None:
            # Named after the column as the YAML names it (an extractor's property), so a
            # columns: entry changes what is read, never the output's column names.
            name = typ if prop is None else f"{typ}_{prop}"
        elif not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{fi}.name: {name!r} must be a non-empty string")
        percentage = _percentage(item.get("percentage"), typ, f"{fi}.percentage")
        if percentage is None:
            out.append(Aggregate(type=typ, column=column, name=name))
        else:
            out.append(PercentileAggregate(type=typ, column=column, name=name, percentage=percentage))
    return tuple(out), [f"{f}[{i}].name" for i in range(len(out))]


def _percentage(v: Any, typ: str, f: str) -> float | None:
    """A ``percentile``'s percentage: a number in [0, 1] (None: the median)."""
    if v is None:
        return None
    if typ != "percentile":
        raise ConfigError(f"{f}: only a percentile takes a percentage; {typ!r} does not")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise ConfigError(f"{f}: {v!r} must be a number from 0 to 1 (0.95 for the 95th percentile)")
    return float(v)


_SHORTHAND = re.compile(r"(?P<type>[A-Za-z_]+)\s*(?:\((?P<column>[^()]*)\))?")


def _aggregate_type(v: Any, f: str) -> tuple[str, str | None]:
    """(type, column written in parentheses or None) of ``count`` or ``sum (amount)``."""
    m = _SHORTHAND.fullmatch(v.strip()) if isinstance(v, str) else None
    if m is None or m["type"] not in AGGREGATE_TYPES:
        raise ConfigError(
            f"{f}: unknown aggregate type {v!r}; use one of {', '.join(AGGREGATE_TYPES)}, "
            "optionally with its column in parentheses (sum (amount))"
        )
    if m["column"] is not None and not m["column"].strip():
        raise ConfigError(f"{f}: {v!r} has empty parentheses; name the column ({m['type']} (amount))")
    return m["type"], m["column"].strip() if m["column"] is not None else None


def _parse_triggers(doc: Any, f: str, ignored: list[str]) -> tuple[Trigger, ...]:
    """The window's triggers. VoltSP's items ``{trigger: ...WindowTrigger#atWindowEnd,
    processors: ..., sink: ...}`` are accepted; their ``processors`` and ``sink``, and an
    ``ExceptionTrigger#onError`` item (errors are the ``rejected`` output here), go to
    ``ignored``."""
    if isinstance(doc, str):
        doc = [doc]
    if not isinstance(doc, list) or not doc:
        raise ConfigError(f"{f}: {doc!r} must be a list of triggers (atWindowEnd, atAggregate)")
    out: list[Trigger] = []
    for i, item in enumerate(doc):
        fi = f"{f}[{i}]"
        t, live = item, []
        if isinstance(item, Mapping):
            _only(item, fi, {"trigger", *_LIVE_ONLY_TRIGGER_FIELDS})
            t, live = item.get("trigger"), [f"{fi}.{k}" for k in item if k in _LIVE_ONLY_TRIGGER_FIELDS]
        name = str(t).rsplit("#", 1)[-1].rsplit(".", 1)[-1] if t is not None else ""
        if name == "onError":  # the live pipeline's stream of failed events, sink and all
            ignored.append(fi)
            continue
        ignored += live
        try:
            trig = Trigger(name)
        except ValueError:
            raise ConfigError(f"{fi}: unknown trigger {t!r}; use atWindowEnd or atAggregate") from None
        if trig not in out:
            out.append(trig)
    if not out:
        raise ConfigError(f"{f}: {doc!r} has no window trigger; add atWindowEnd or atAggregate")
    return tuple(out)


#: Columns rewindow adds to the ``aggregates`` output, before and after the aggregates
#: (``kernel.Spec.aggregates_schema``).
WINDOW_COLUMNS = ("window_start", "window_end")
EMIT_COLUMNS = ("emit_reason", "emit_batch", "emit_time", "emit_watermark", "emission")
#: Output columns of ``aggregates`` that aggregate names may not take.
RESERVED_OUTPUT_COLUMNS = frozenset(WINDOW_COLUMNS + EMIT_COLUMNS)
#: Columns of the ``state`` output around the worker and key columns; the aggregates'
#: partial values follow (``kernel.Spec.state_schema``).
STATE_HEAD_COLUMNS = ("state_kind", "fingerprint")
STATE_COLUMNS = (
    "batch",
    "watermark_ms",
    "clock_ms",
    "max_event_ms",
    "window_start_ms",
    "window_end_ms",
    "emissions",
    "events",
)

#: Fields of a VoltSP pipeline with no meaning in a replay: accepted, listed in
#: ``Pipeline.ignored_fields``. Late events and errors are outputs of their own here
#: (``late_events``, ``rejected``), and the replay writes its outputs itself.
_LIVE_ONLY_ROOT_FIELDS = ("sink", "processors")
_LIVE_ONLY_WINDOW_FIELDS = ("exceptionHandler",)
_LIVE_ONLY_TRIGGER_FIELDS = ("processors", "sink")


def ignored_fields_note(pipeline: Pipeline) -> str | None:
    """One line listing the live-pipeline fields the replay ignores, or None if there are none.

    ``rewindow replay`` prints it once; the Dagster assets log it with every run.
    """
    if not pipeline.ignored_fields:
        return None
    return (
        f"pipeline {pipeline.name!r}: ignored in a replay (settings of the live VoltSP pipeline): "
        f"{', '.join(pipeline.ignored_fields)}; the replay writes late events to late_events/, rows it "
        "cannot process to rejected/ and windows to its own output"
    )


# --------------------------------------------------------------------------- columns

#: A Java method reference: ``com.example.Event::getUserId``, ``Event::timestamp``.
_EXTRACTOR = re.compile(r"(?P<cls>[A-Za-z_$][\w$]*(?:\s*\.\s*[A-Za-z_$][\w$]*)*)\s*::\s*(?P<member>[A-Za-z_$][\w$]*)")


def bean_property(member: str) -> str:
    """The property a Java accessor reads, by the JavaBeans convention.

    ``getUserId`` -> ``userId``, ``isActive`` -> ``active``, ``getURL`` -> ``URL`` (two
    capitals stay, as ``java.beans.Introspector.decapitalize`` has it); anything else
    (a record accessor ``timestamp``, ``getter``, ``get``) is its own name.
    """
    for prefix in ("get", "is"):
        rest = member[len(prefix) :]
        if member.startswith(prefix) and rest[:1].isupper():
            return rest if rest[1:2].isupper() else rest[0].lower() + rest[1:]
    return member


def _property(text: str) -> str | None:
    """The property (column) ``text`` names: an extractor's bean property, a plain name
    itself; None for other Java code (a lambda, a malformed reference)."""
    m = _EXTRACTOR.fullmatch(text)
    if m:
        return bean_property(m["member"])
    if "::" in text or "->" in text:
        return None
    return text


#: The YAML field of each output column the configuration names (``"worker"``, ``"key"``,
#: ``("aggregate", i)``), for clash messages.
_Labels = Mapping[str | tuple[str, int], str]


class _ColumnMap:
    """``columns:``: which input column a property, or an extractor of it, reads.

    ``columns: {userId: user_id}`` and ``columns: {"com.example.Event::getUserId":
    user_id}`` say the same: every field naming property ``userId`` (an extractor of it,
    the shorthand ``distinct (userId)``, the plain name) reads column ``user_id``. A key
    that is other Java code (a lambda) matches the field holding exactly that text.
    Every entry must be used: an unused one is a typo. Records a :class:`ColumnBinding`
    per resolved field.
    """

    def __init__(self, doc: Any):
        self.by_property: dict[str, tuple[str, str]] = {}  # property -> (key as written, column)
        self.used: set[str] = set()
        self.bindings: list[ColumnBinding] = []
        for k, v in (_mapping(doc, "columns") if doc is not None else {}).items():
            if not isinstance(k, str) or not k.strip():
                raise ConfigError(f"columns: key {k!r} must be an extractor (Class::getX) or a property name")
            key = k.strip()
            column = _column(v, f"columns.{key}", required=True)
            prop = _property(key) or key
            if prop in self.by_property:
                raise ConfigError(
                    f"columns.{key}: maps property {prop!r}, as columns.{self.by_property[prop][0]} does; give it once"
                )
            self.by_property[prop] = (key, column)

    def resolve(self, v: Any, f: str, role: str) -> tuple[str | None, str | None]:
        """(input column, property as the YAML names it) of field ``f`` holding ``v``."""
        text = _column(v, f)
        if text is None:
            return None, None
        prop = _property(text)
        if prop is None and text not in self.by_property:
            raise ConfigError(
                f"{f}: {text!r} is neither a column name nor a Java extractor (Class::getX); "
                f"map it to a column with columns: {{{text!r}: <column>}}"
            )
        prop = prop or text
        if prop in self.by_property:
            self.used.add(prop)
            via: str | None
            column, via = self.by_property[prop][1], "columns"
        else:
            column, via = prop, ("bean" if prop != text else None)
        self.bindings.append(ColumnBinding(role, f, text, column, via))
        return column, prop

    def refuse_unused(self) -> None:
        for prop, (key, _) in self.by_property.items():
            if prop not in self.used:
                raise ConfigError(
                    f"columns.{key}: no extractor or column of the window names {prop!r}; fix its spelling or remove it"
                )


def column_uses(pipeline: Pipeline) -> list[ColumnBinding]:
    """Every input column ``pipeline`` reads, with the YAML field that names it (and, for
    extractors, how it became that column), in the order of the configuration."""
    src, w = pipeline.source, pipeline.window
    wf = f"emitter.{w.type.value}"
    bound = {b.role: b for b in pipeline.column_bindings}
    named = [
        ("arrivalTime", "source.arrivalTime", src.arrival_time),
        *[(f"arrivalOrder[{i}]", f"source.arrivalOrder[{i}]", c) for i, c in enumerate(src.arrival_order)],
        ("batch", "source.batch.column", src.batch_column),
        ("worker", "source.worker", src.worker),
        ("keyExtractor", f"{wf}.keyExtractor", w.key),
        ("eventTimeExtractor", f"{wf}.timeConfig.eventTimeExtractor", w.event_time),
        *[
            (f"aggregate[{i}]", f"{wf}.aggregateDefinition[{i}].column", a.column)
            for i, a in enumerate(pipeline.aggregates)
        ],
    ]
    out = []
    for role, field_, column in named:
        if column:
            b = bound.get(role)
            out.append(b if b is not None and b.column == column else ColumnBinding(role, field_, column, column))
    return out


#: Input columns listed in a missing-column message, at most.
_LISTED_COLUMNS = 40


def check_input_columns(pipeline: Pipeline, column_names: Iterable[object]) -> None:
    """Refuse an input that lacks a column ``pipeline`` reads, before any work.

    ``column_names``: the input's columns (from its schema: a Parquet footer, a Spark
    DataFrame). The :class:`ConfigError` names the YAML field, the extractor as written
    and the column it maps to, the input's columns, and the nearest of them.
    """
    have = [str(c) for c in column_names]
    present = set(have)
    for use in column_uses(pipeline):
        if use.column not in present:
            raise ConfigError(_missing_column_message(use, have))


def _missing_column_message(use: ColumnBinding, have: list[str]) -> str:
    listed = sorted(have)
    shown = ", ".join(listed[:_LISTED_COLUMNS]) + (
        f", ... ({len(listed) - _LISTED_COLUMNS} more)" if len(listed) > _LISTED_COLUMNS else ""
    )
    msg = f"{use.field}: column {use.column!r} is not in the input (its columns: {shown or 'none'})"
    if use.via == "bean":
        msg += f"; {use.written!r} reads column {use.column!r} by the bean convention"
    elif use.via == "columns":
        msg += f"; columns: maps {use.written!r} to {use.column!r}"
    guess = _nearest(use.column, have)
    if guess:
        msg += f"; did you mean {guess!r}?"
    if use.via == "bean" or use.field.endswith(".type"):
        # A window block copied from VoltSP keeps its extractors and shorthand; columns: binds them.
        msg += f" Map it with columns: {{{use.column}: {guess or '<column>'}}}"
    return msg


def _nearest(name: str, candidates: list[str]) -> str | None:
    """The candidate ``name`` most likely means: equal ignoring case and separators
    (``userId`` / ``user_id``), else a close spelling."""

    def bare(s: str) -> str:
        return re.sub(r"[^0-9a-z]", "", s.lower())

    same = [c for c in candidates if bare(c) == bare(name)]
    if same:
        return same[0]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.8)
    return close[0] if close else None


def _close_matches(name: str, allowed: Iterable[str]) -> list[str]:
    """Allowed field names ``name`` is a near miss of (case ignored)."""
    lower = {a.lower(): a for a in allowed}
    return [lower[m] for m in difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.75)]


# --------------------------------------------------------------------------- output columns


def _partial_columns(agg: Aggregate, wtype: WindowType) -> list[str]:
    """State columns that may carry ``agg``'s partial value (``kernel.Spec.partial_fields``;
    ``_overflow`` exists for decimal sums only, which the configuration cannot tell)."""
    base = f"partial_{agg.name}"
    if agg.type in ("sum", "avg"):
        return [base, f"{base}_n", f"{base}_overflow"]
    if agg.type in ("stddev_pop", "stddev_samp"):
        return [base, f"{base}_squares", f"{base}_n", f"{base}_nonfinite"]
    if wtype is WindowType.SESSION and agg.type in ("first", "last"):
        return [base, f"{base}_batch", f"{base}_seq"]
    return [base]


@dataclass(frozen=True)
class _OutputColumn:
    """A column an output may have: who decides its name (``field`` of the YAML, "" for
    rewindow's own columns) and how a message calls it."""

    name: str
    field: str
    what: str
    is_aggregate: bool = False


def _output_owners(
    source: Source, window: Window, aggregates: Sequence[Aggregate], labels: _Labels | None = None
) -> dict[str, list[_OutputColumn]]:
    """Every column the ``aggregates`` and ``state`` outputs may have, in order."""
    labels = labels or {}
    wf = f"emitter.{window.type.value}"

    def added(names: Iterable[str]) -> list[_OutputColumn]:
        return [_OutputColumn(c, "", f"the column {c!r} rewindow adds") for c in names]

    ids = []
    for role, column in (("worker", source.worker), ("key", window.key)):
        if column:
            field_ = labels.get(role, "source.worker" if role == "worker" else f"{wf}.keyExtractor")
            ids.append(_OutputColumn(column, field_, f"the {role} column {column!r}"))
    aggs, partials = [], []
    for i, a in enumerate(aggregates):
        field_ = labels.get(("aggregate", i), f"{wf}.aggregateDefinition[{i}].name")
        aggs.append(_OutputColumn(a.name, field_, f"the aggregate {a.name!r}", is_aggregate=True))
        partials += [
            _OutputColumn(c, field_, f"the state column {c!r} of aggregate {a.name!r}", is_aggregate=True)
            for c in _partial_columns(a, window.type)
        ]
    return {
        "aggregates": ids + added(WINDOW_COLUMNS) + aggs + added(EMIT_COLUMNS),
        "state": added(STATE_HEAD_COLUMNS) + ids + added(STATE_COLUMNS) + partials,
    }


def output_columns(pipeline: Pipeline) -> dict[str, tuple[str, ...]]:
    """The columns ``pipeline``'s ``aggregates`` and ``state`` outputs may have, in order."""
    owners = _output_owners(pipeline.source, pipeline.window, pipeline.aggregates)
    return {table: tuple(c.name for c in cols) for table, cols in owners.items()}


def _refuse_clashing_columns(source: Source, window: Window, aggregates: Sequence[Aggregate], labels: _Labels) -> None:
    """Refuse two columns of one output with the same name (ignoring case, as Spark does):
    the key or worker column and a column rewindow adds or an aggregate, two aggregates.
    The message leads with the field to change: an aggregate's name (the later one)
    before an input column's."""
    for table, cols in _output_owners(source, window, aggregates, labels).items():
        seen: dict[str, _OutputColumn] = {}
        for col in cols:
            first = seen.setdefault(col.name.lower(), col)
            if first is col:
                continue
            users = [c for c in (col, first) if c.field]
            lead = next((c for c in users if c.is_aggregate), users[0])
            if lead.is_aggregate:
                fix = "give the aggregate another name (name: ...)"
            elif first.field and col.field:
                fix = "the worker and the key must be different columns: drop one of them"
            else:
                fix = "rename the column in the input (outputs keep the input's column names)"
            both = " and ".join(c.what + (f" ({c.field})" if c.field and c is not lead else "") for c in (first, col))
            raise ConfigError(
                f"{lead.field}: {both} would both be column {col.name!r} of the {table} output "
                f"(names compare ignoring case); {fix}"
            )


# --------------------------------------------------------------------------- helpers


_E = TypeVar("_E", bound=Enum)


def _mapping(v: Any, f: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ConfigError(f"{f}: expected a mapping, got {v!r}")
    return v


def _only(m: Mapping[str, Any], f: str, allowed: Collection[str]) -> None:
    for k in m:
        if k not in allowed:
            where = k if f == "<root>" else f"{f}.{k}"
            near = _close_matches(str(k), allowed)
            raise ConfigError(
                f"{where}: unknown field"
                + (f" (did you mean {near[0]}?)" if near else "")
                + f"; expected one of {', '.join(sorted(allowed))}"
            )


@overload
def _column(v: Any, f: str, required: Literal[True]) -> str: ...
@overload
def _column(v: Any, f: str, required: bool = False) -> str | None: ...
def _column(v: Any, f: str, required: bool = False) -> str | None:
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{f}: {v!r} must be a column name")
    return v.strip()


def _duration(v: Any, f: str) -> int:
    try:
        return parse_duration_ms(v, f)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _positive_duration(v: Any, f: str) -> int:
    ms = _duration(v, f)
    if ms <= 0:
        raise ConfigError(f"{f}: {v!r} must be longer than zero")
    return ms


def _window_offset(v: Any, span_ms: int, period_ms: int, span_text: Any, f: str) -> int:
    """``windowOffset`` in ``[0, windowSpan)``.

    Offsets O and O + period (the span for tumbling windows, the slide for sliding ones)
    give the same windows, so a negative offset or one of a whole span or more is
    refused rather than silently reduced; the message names the equivalent offset.
    """
    rule = f"an offset must satisfy 0 <= windowOffset < windowSpan ({span_text!r})"
    text = v.strip() if isinstance(v, str) else None
    if text and text.startswith("-"):
        try:
            ms = -parse_duration_ms(text[1:], f)
        except ValueError:
            raise ConfigError(f"{f}: {v!r} is negative; {rule}") from None
        raise ConfigError(
            f"{f}: {v!r} is negative; {rule}; {format_duration_ms(ms % period_ms)} gives the same windows"
        )
    ms = _duration(v, f)
    if ms >= span_ms:
        raise ConfigError(
            f"{f}: {v!r} is not shorter than windowSpan {span_text!r}; {rule} "
            f"(it gives the same windows as {format_duration_ms(ms % period_ms)})"
        )
    return ms


def _enum(enum: type[_E], v: Any, f: str) -> _E:
    if isinstance(v, str):
        for member in enum:
            if member.value.upper() == v.strip().upper():
                return member
    raise ConfigError(f"{f}: {v!r} is not one of {', '.join(m.value for m in enum)}")


# --------------------------------------------------------------------------- the reconcile: block
# Parsed here with the rest of the YAML; windowing.reconcile, which compares a replay with
# the live output, imports these names (and keeps them importable from there).

_RECONCILE_FIELD = "reconcile"
DEFAULT_ABSOLUTE_TOLERANCE = 1e-9
DEFAULT_RELATIVE_TOLERANCE = 1e-9
#: Default of ``reconcile.minMatch`` and ``--min-match``: every window must match.
DEFAULT_MIN_MATCH = 1.0

#: Columns of the ``mismatches`` output besides the worker and key columns and the
#: ``live_<aggregate>`` / ``replay_<aggregate>`` pairs; the worker and key may not take these names.
MISMATCH_COLUMNS = (
    "partition_key",
    "category",
    "window_start",
    "window_end",
    "emission",
    "differing",
    "replay_emit_reason",
    "replay_emit_time",
    "live_emit_time",
    "explanations",
    "detail",
)


@dataclass(frozen=True)
class LiveSource:
    """``reconcile.live``: where the live aggregates are. ``path`` (a folder or any URI
    Spark reads) or ``table`` (a catalog table), in Spark data source ``format`` with
    reader ``options`` and, for csv and json, a DDL ``schema``."""

    path: str | None = None
    table: str | None = None
    format: str = "parquet"
    schema: str | None = None
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class LiveColumns:
    """``reconcile.columns``: which live column holds what.

    ``window_start`` and ``window_end`` are timestamps or epoch milliseconds (integers);
    ``emit_time`` too. ``aggregates`` pairs each compared aggregate's name in the
    pipeline with its live column. ``defaulted`` lists the fields not written in the
    YAML (their columns are the replay's own names), for messages.
    """

    key: str | None
    window_start: str = "window_start"
    window_end: str = "window_end"
    aggregates: tuple[tuple[str, str], ...] = ()
    worker: str | None = None
    emission: str | None = None
    emit_time: str | None = None
    defaulted: frozenset[str] = field(default=frozenset(), compare=False)

    def uses(self) -> list[tuple[str, str]]:
        """(YAML field, live column) of every mapped column, in mapping order."""
        f = f"{_RECONCILE_FIELD}.columns"
        named = [
            ("worker", self.worker),
            ("key", self.key),
            ("windowStart", self.window_start),
            ("windowEnd", self.window_end),
            ("emission", self.emission),
            ("emitTime", self.emit_time),
        ]
        out = [(f"{f}.{name}", col) for name, col in named if col]
        return out + [(f"{f}.aggregates.{name}", col) for name, col in self.aggregates]


@dataclass(frozen=True)
class Tolerance:
    """Floating-point aggregates match when ``|live - replay| <= max(absolute,
    relative * max(|live|, |replay|))``; both are finite and not negative."""

    absolute: float = DEFAULT_ABSOLUTE_TOLERANCE
    relative: float = DEFAULT_RELATIVE_TOLERANCE

    def __post_init__(self) -> None:
        for name in ("absolute", "relative"):
            v = getattr(self, name)
            if not isinstance(v, float) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"{_RECONCILE_FIELD}.tolerance.{name}: {v!r} must be a finite number >= 0")


@dataclass(frozen=True)
class ReconcileSpec:
    """The ``reconcile:`` block, validated against its pipeline (:func:`parse_reconcile`).

    ``live`` is None when the YAML names no live source (``--live`` must then);
    ``min_match`` is the share of matching windows under which a reconcile fails;
    ``blocking``: the Dagster check ``matches_live`` blocks downstream assets when it fails.
    """

    columns: LiveColumns
    live: LiveSource | None = None
    tolerance: Tolerance = Tolerance()
    min_match: float = DEFAULT_MIN_MATCH
    blocking: bool = False


_BLOCK_RECONCILE_FIELDS = {"live", "columns", "tolerance", "minMatch", "blocking"}
_LIVE_RECONCILE_FIELDS = {"path", "table", "format", "schema", "options"}
_COLUMN_RECONCILE_FIELDS = {"key", "worker", "windowStart", "windowEnd", "emission", "emitTime", "aggregates"}


def parse_reconcile(block: Mapping[str, Any] | None, pipeline: Pipeline) -> ReconcileSpec:
    """Validate the ``reconcile:`` block of ``pipeline``'s YAML (None or {}: all defaults).

    ```yaml
    reconcile:
      live: {path: s3a://lake/live/clicks, format: parquet}   # or {table: db.live_clicks}
      columns:                       # every field optional; defaults are the replay's names
        key: user                    # the pipeline's key column by default
        worker: partition            # only when given
        windowStart: ws              # timestamp or epoch ms; default window_start
        windowEnd: we                # default window_end
        emission: emission_no        # only when given: else emissions match in emit order
        emitTime: emitted_at         # only when given
        aggregates: {count: n, sum_amount: total}   # default: every aggregate, own names
      tolerance: {absolute: 1.0e-9, relative: 1.0e-9}  # floating-point aggregates only
      minMatch: 100%                 # or a share, 0.999
      blocking: false                # the Dagster check blocks downstream when it fails
    ```

    Raises:
        ConfigError: naming the field (``reconcile.columns.aggregates.sum_amount``) and
            the bad value: an unknown field, an aggregate the pipeline has not, a key or
            worker mapped for a pipeline without one, one live column mapped twice,
            a tolerance that is not a finite number >= 0, a share outside 0..100 %.
    """
    b = _mapping(block, _RECONCILE_FIELD) if block is not None else {}
    _only(b, _RECONCILE_FIELD, _BLOCK_RECONCILE_FIELDS)
    live = _parse_live(b["live"]) if b.get("live") is not None else None
    columns = _parse_columns(_mapping(b.get("columns") or {}, f"{_RECONCILE_FIELD}.columns"), pipeline)
    tol = _mapping(b.get("tolerance") or {}, f"{_RECONCILE_FIELD}.tolerance")
    _only(tol, f"{_RECONCILE_FIELD}.tolerance", {"absolute", "relative"})
    tolerance = Tolerance(
        absolute=_number(tol.get("absolute", DEFAULT_ABSOLUTE_TOLERANCE), f"{_RECONCILE_FIELD}.tolerance.absolute"),
        relative=_number(tol.get("relative", DEFAULT_RELATIVE_TOLERANCE), f"{_RECONCILE_FIELD}.tolerance.relative"),
    )
    min_match = parse_share(b["minMatch"], f"{_RECONCILE_FIELD}.minMatch") if "minMatch" in b else DEFAULT_MIN_MATCH
    blocking = b.get("blocking", False)
    if not isinstance(blocking, bool):
        raise ConfigError(f"{_RECONCILE_FIELD}.blocking: {blocking!r} must be true or false")
    _refuse_clashes(pipeline, columns)
    return ReconcileSpec(columns=columns, live=live, tolerance=tolerance, min_match=min_match, blocking=blocking)


def _parse_live(doc: Any) -> LiveSource:
    f = f"{_RECONCILE_FIELD}.live"
    live = _mapping(doc, f)
    _only(live, f, _LIVE_RECONCILE_FIELDS)
    path, table = live.get("path"), live.get("table")
    for name, value in (("path", path), ("table", table)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{f}.{name}: {value!r} must be a non-empty string")
    if (path is None) == (table is None):
        raise ConfigError(f"{f}: give exactly one of {f}.path or {f}.table")
    fmt = live.get("format", "parquet")
    if not isinstance(fmt, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", fmt):
        raise ConfigError(f"{f}.format: {fmt!r} is not a data source name (parquet, orc, json, csv, delta, ...)")
    schema = live.get("schema")
    if schema is not None and (not isinstance(schema, str) or not schema.strip()):
        raise ConfigError(f"{f}.schema: {schema!r} must be a Spark DDL string such as 'user string, n long'")
    if fmt.lower() in ("csv", "json") and schema is None and table is None:
        raise ConfigError(f"{f}.schema: format {fmt.lower()} needs an explicit schema (a Spark DDL string)")
    options = live.get("options") or {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ConfigError(f"{f}.options: {options!r} must be a mapping of reader options")
    return LiveSource(
        path=path.strip() if path else None,
        table=table.strip() if table else None,
        format=fmt.lower(),
        schema=schema,
        options=tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items())),
    )


def _parse_columns(c: Mapping[str, Any], pipeline: Pipeline) -> LiveColumns:
    f = f"{_RECONCILE_FIELD}.columns"
    _only(c, f, _COLUMN_RECONCILE_FIELDS)
    defaulted = set()

    def column(name: str, default: str | None) -> str | None:
        if name not in c or c[name] is None:
            if default is not None:
                defaulted.add(f"{f}.{name}")
            return default
        v = c[name]
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{f}.{name}: {v!r} must be a column name")
        return v.strip()

    if "key" in c and pipeline.window.key is None:
        raise ConfigError(f"{f}.key: the pipeline has no keyExtractor, so its windows have no key to match")
    if "worker" in c and pipeline.source.worker is None:
        raise ConfigError(f"{f}.worker: the pipeline has no source.worker, so its windows have no worker to match")
    names = [a.name for a in pipeline.aggregates]
    aggs_doc = c.get("aggregates")
    if aggs_doc is None:
        aggregates = tuple((n, n) for n in names)
        defaulted.add(f"{f}.aggregates")
    else:
        if isinstance(aggs_doc, list) and all(isinstance(n, str) for n in aggs_doc):
            aggs_doc = {n: n for n in aggs_doc}  # a list of names: live columns of the same names
        m = _mapping(aggs_doc, f"{f}.aggregates")
        if not m:
            raise ConfigError(f"{f}.aggregates: empty; map at least one aggregate, or leave it out to compare all")
        pairs: list[tuple[str, str]] = []
        for name, col in m.items():
            if name not in names:
                near = _nearest(str(name), names)
                raise ConfigError(
                    f"{f}.aggregates.{name}: the pipeline has no aggregate {name!r} "
                    f"(its aggregates: {', '.join(names)})" + (f"; did you mean {near!r}?" if near else "")
                )
            if not isinstance(col, str) or not col.strip():
                raise ConfigError(f"{f}.aggregates.{name}: {col!r} must be a column name")
            pairs.append((name, col.strip()))
        aggregates = tuple(pairs)
    columns = LiveColumns(
        key=column("key", pipeline.window.key),
        worker=column("worker", None),
        # a non-None default: never None
        window_start=cast(str, column("windowStart", "window_start")),
        window_end=cast(str, column("windowEnd", "window_end")),
        emission=column("emission", None),
        emit_time=column("emitTime", None),
        aggregates=aggregates,
        defaulted=frozenset(defaulted),
    )
    seen: dict[str, str] = {}
    for fld, col in columns.uses():
        first = seen.setdefault(col, fld)
        if first != fld:
            raise ConfigError(f"{fld}: live column {col!r} is already mapped by {first}; each field needs its own")
    return columns


def _number(v: Any, f: str) -> float:
    """A tolerance: a number, or a string holding one (YAML reads ``1e-9`` as a string)."""
    try:
        if isinstance(v, bool):
            raise ValueError
        number = float(v.strip()) if isinstance(v, str) else float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{f}: {v!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ConfigError(f"{f}: {v!r} must be a finite number >= 0")
    return number


def _refuse_clashes(pipeline: Pipeline, columns: LiveColumns) -> None:
    """The worker and key keep their names in ``mismatches``: refuse one that is a
    column reconcile adds (compared ignoring case, as Spark does)."""
    taken = {c.lower() for c in MISMATCH_COLUMNS}
    for name, _ in columns.aggregates:
        taken |= {f"live_{name}".lower(), f"replay_{name}".lower()}
    for fld, col in (
        ("source.worker", pipeline.source.worker),
        (f"emitter.{pipeline.window.type.value}.keyExtractor", pipeline.window.key),
    ):
        if col and col.lower() in taken:
            raise ConfigError(
                f"{fld}: column {col!r} would clash with the column {col!r} rewindow reconcile adds "
                "to its mismatches output; rename it in the input"
            )
