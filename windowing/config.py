"""Pipeline configuration: the YAML of the windowing contract, section 10.

``load_pipeline(path)`` returns a frozen, validated :class:`Pipeline`. Every
mistake raises :class:`ConfigError` naming the YAML field and the bad value.
Unknown fields are refused too: a typo must not silently become a default. So are a
key given twice in one mapping (plain YAML keeps the last one), a file that is not
UTF-8, and a duration longer than ``durations.MAX_DURATION_MS`` (100 years).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Mapping

import yaml

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


AGGREGATE_TYPES = ("count", "sum", "min", "max", "avg", "distinct", "first", "last")
#: Aggregates that need a numeric column.
NUMERIC_AGGREGATES = ("sum", "avg")

#: Batch interval used when ``source.batch`` is not configured.
DEFAULT_BATCH_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class Aggregate:
    """One aggregate column of the output: ``type`` over ``column``, named ``name``."""

    type: str
    column: str | None
    name: str


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
        semantic = {
            "source": {k: v for k, v in asdict(self.source).items() if k not in Source.LOCATION_FIELDS},
            "window": asdict(self.window),
            "aggregates": [asdict(a) for a in self.aggregates],
        }
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


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping, at any depth.

    Plain YAML loading keeps the last of two equal keys, so ``windowSpan: 1h`` then
    ``windowSpan: 2d`` would silently mean 2d. A key written beside a ``<<`` merge still
    overrides the merged one: that is YAML's rule, not a duplicate.
    """

    _MERGE_TAG = "tag:yaml.org,2002:merge"

    def construct_document(self, node):
        self._fields = _field_paths(node)  # for messages: mapping node -> its YAML field
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
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
    _only(m, "<root>", {"version", "name", "source", "emitter", "replay", "triggers", "quality"})
    version = m.get("version", 1)
    if version != 1:
        raise ConfigError(f"version: {version!r} is not supported; use 1")
    name = m.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"name: {name!r} must be a non-empty string")

    source = _parse_source(_mapping(m.get("source"), "source"))
    emitter = _mapping(m.get("emitter"), "emitter")
    window_keys = [k for k in emitter if k in {t.value for t in WindowType}]
    other = [k for k in emitter if k not in {t.value for t in WindowType} and k != "triggers"]
    if other:
        raise ConfigError(
            f"emitter.{other[0]}: unknown window type; use one of "
            + ", ".join(t.value for t in WindowType)
        )
    if len(window_keys) != 1:
        raise ConfigError(
            "emitter: exactly one window is required, one of " + ", ".join(t.value for t in WindowType)
        )
    wtype = WindowType(window_keys[0])
    wfield = f"emitter.{wtype.value}"
    wdoc = _mapping(emitter[wtype.value], wfield)
    window, aggregates, wtriggers = _parse_window(wtype, wdoc, wfield)

    triggers_doc = emitter.get("triggers", m.get("triggers", wtriggers))
    triggers = _parse_triggers(triggers_doc, "emitter.triggers")

    replay_doc = _mapping(m.get("replay", {}) or {}, "replay")
    _only(replay_doc, "replay", {"flushAtEnd"})
    flush = replay_doc.get("flushAtEnd", False)
    if not isinstance(flush, bool):
        raise ConfigError(f"replay.flushAtEnd: {flush!r} must be true or false")

    return Pipeline(
        name=name.strip(),
        source=source,
        window=window,
        aggregates=aggregates,
        triggers=triggers,
        flush_at_end=flush,
        version=1,
        quality=_parse_quality(_mapping(m.get("quality", {}) or {}, "quality")),
    )


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
        raise ConfigError(f"{f}: {v!r} is not a share; use a number from 0 to 1 (0.001) or a percentage (0.1%)") \
            from None
    if not 0 <= share <= 1 or share != share:
        raise ConfigError(f"{f}: {v!r} is not between 0 and 1 (0% and 100%)")
    return share


def _parse_source(s: Mapping[str, Any]) -> Source:
    _only(s, "source", {"path", "table", "format", "schema", "partitionColumn", "options", "arrivalTime",
                        "arrivalOrder", "batch", "worker"})
    arrival = _column(s.get("arrivalTime"), "source.arrivalTime", required=True)
    order = s.get("arrivalOrder", []) or []
    if isinstance(order, str):
        order = [order]
    if not isinstance(order, list):
        raise ConfigError(f"source.arrivalOrder: {order!r} must be a list of column names")
    order_cols = tuple(_column(c, f"source.arrivalOrder[{i}]", required=True) for i, c in enumerate(order))
    batch_column, batch_interval = None, DEFAULT_BATCH_INTERVAL_MS
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
    for field, value in (("source.path", path), ("source.table", table)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{field}: {value!r} must be a non-empty string")
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
    )


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


def _parse_window(wtype: WindowType, w: Mapping[str, Any], f: str):
    common = {"keyExtractor", "timeConfig", "aggregateDefinition", "triggers"}
    _only(w, f, common | _WINDOW_FIELDS[wtype])
    tc = _mapping(w.get("timeConfig", {}) or {}, f"{f}.timeConfig")
    _only(tc, f"{f}.timeConfig", _TIME_FIELDS)

    span = slide = max_dur = None
    offset = 0
    if wtype in (WindowType.TUMBLING, WindowType.SLIDING):
        if "windowSpan" not in w:
            raise ConfigError(f"{f}.windowSpan: required for {wtype.value}")
        span = _positive_duration(w["windowSpan"], f"{f}.windowSpan")
    if wtype is WindowType.SLIDING:
        if "windowSlide" not in w:
            raise ConfigError(f"{f}.windowSlide: required for sliding-time-window")
        slide = _positive_duration(w["windowSlide"], f"{f}.windowSlide")
        if slide > span:
            raise ConfigError(
                f"{f}.windowSlide: {w['windowSlide']!r} is larger than windowSpan {w['windowSpan']!r}"
            )
    if wtype in (WindowType.TUMBLING, WindowType.SLIDING) and "windowOffset" in w:
        offset = _window_offset(w["windowOffset"], span, slide or span, w["windowSpan"], f"{f}.windowOffset")
    if wtype is WindowType.SESSION and "maximumDuration" in w:
        max_dur = _positive_duration(w["maximumDuration"], f"{f}.maximumDuration")

    # The seed puts a session's idleTimeout beside the window; the contract in timeConfig.
    idle = None
    for where, doc in ((f"{f}.timeConfig.idleTimeout", tc), (f"{f}.idleTimeout", w)):
        if "idleTimeout" in doc:
            value = _positive_duration(doc["idleTimeout"], where)
            if idle is not None and value != idle:
                raise ConfigError(f"{where}: {doc['idleTimeout']!r} disagrees with timeConfig.idleTimeout")
            idle = value
    if wtype is WindowType.SESSION and idle is None:
        raise ConfigError(f"{f}.timeConfig.idleTimeout: required for session-window (it is the session gap)")

    event_time = _column(tc.get("eventTimeExtractor"), f"{f}.timeConfig.eventTimeExtractor")
    strategy = _enum(WatermarkStrategy, tc.get("watermarkStrategy", "MIN_EVENT_TIME"), f"{f}.timeConfig.watermarkStrategy")
    delay = _duration(tc["delayWindowClose"], f"{f}.timeConfig.delayWindowClose") if "delayWindowClose" in tc else 0
    lateness = _enum(Lateness, tc.get("lateness", "WINDOW_CLOSED"), f"{f}.timeConfig.lateness")
    default_clock = "EVENT_TIME" if event_time else "PROCESSING_TIME"
    clock = _enum(Clock, tc.get("idleTimeoutClock", default_clock), f"{f}.timeConfig.idleTimeoutClock")
    if clock is Clock.EVENT_TIME and not event_time:
        raise ConfigError(
            f"{f}.timeConfig.idleTimeoutClock: EVENT_TIME needs timeConfig.eventTimeExtractor"
        )

    window = Window(
        type=wtype,
        span_ms=span,
        slide_ms=slide,
        offset_ms=offset,
        maximum_duration_ms=max_dur,
        key=_column(w.get("keyExtractor"), f"{f}.keyExtractor"),
        event_time=event_time,
        watermark_strategy=strategy,
        delay_ms=delay,
        idle_timeout_ms=idle,
        idle_clock=clock,
        lateness=lateness,
    )
    aggregates = _parse_aggregates(w.get("aggregateDefinition"), f"{f}.aggregateDefinition")
    return window, aggregates, w.get("triggers", ["atWindowEnd"])


def _parse_aggregates(doc: Any, f: str) -> tuple[Aggregate, ...]:
    # VoltSP writes {from: Class, builder: [...]}; accept that shape as well as a plain list.
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
        _only(item, fi, {"type", "column", "name"})
        typ = item.get("type")
        if typ not in AGGREGATE_TYPES:
            raise ConfigError(f"{fi}.type: unknown aggregate type {typ!r}; use one of {', '.join(AGGREGATE_TYPES)}")
        column = _column(item.get("column"), f"{fi}.column")
        if typ != "count" and column is None:
            raise ConfigError(f"{fi}.column: aggregate {typ!r} needs a column")
        name = item.get("name")
        if name is None:
            name = typ if column is None else f"{typ}_{column}"
        elif not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{fi}.name: {name!r} must be a non-empty string")
        if name in {a.name for a in out} or name in RESERVED_OUTPUT_COLUMNS:
            raise ConfigError(f"{fi}.name: output column {name!r} is already used")
        out.append(Aggregate(type=typ, column=column, name=name))
    return tuple(out)


def _parse_triggers(doc: Any, f: str) -> tuple[Trigger, ...]:
    if isinstance(doc, str):
        doc = [doc]
    if not isinstance(doc, list) or not doc:
        raise ConfigError(f"{f}: {doc!r} must be a list of triggers (atWindowEnd, atAggregate)")
    out: list[Trigger] = []
    for i, t in enumerate(doc):
        if isinstance(t, Mapping):  # VoltSP: {trigger: org...WindowTrigger#atWindowEnd, sink: ...}
            t = t.get("trigger")
        name = str(t).rsplit("#", 1)[-1].rsplit(".", 1)[-1] if t is not None else ""
        try:
            trig = Trigger(name)
        except ValueError:
            raise ConfigError(f"{f}[{i}]: unknown trigger {t!r}; use atWindowEnd or atAggregate") from None
        if trig not in out:
            out.append(trig)
    return tuple(out)


#: Output columns of ``aggregates`` that aggregate names may not take.
RESERVED_OUTPUT_COLUMNS = frozenset(
    {"window_start", "window_end", "emit_reason", "emit_batch", "emit_watermark", "emission"}
)


# --------------------------------------------------------------------------- helpers


def _mapping(v: Any, f: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ConfigError(f"{f}: expected a mapping, got {v!r}")
    return v


def _only(m: Mapping[str, Any], f: str, allowed: set[str]) -> None:
    for k in m:
        if k not in allowed:
            where = k if f == "<root>" else f"{f}.{k}"
            raise ConfigError(f"{where}: unknown field; expected one of {', '.join(sorted(allowed))}")


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


def _enum(enum: type[Enum], v: Any, f: str):
    if isinstance(v, str):
        for member in enum:
            if member.value.upper() == v.strip().upper():
                return member
    raise ConfigError(f"{f}: {v!r} is not one of {', '.join(m.value for m in enum)}")
