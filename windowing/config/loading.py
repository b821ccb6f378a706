"""Loading a pipeline: the YAML of the windowing contract, section 10.

``load_pipeline(path)`` returns a frozen, validated :class:`~windowing.config.model.Pipeline`.
Every mistake raises :class:`~windowing.config.fields.ConfigError` naming the YAML field
and the bad value. Unknown fields are refused too: a typo must not silently become a
default. So are a key given twice in one mapping (plain YAML keeps the last one), a file
that is not UTF-8, a duration longer than ``durations.MAX_DURATION_MS`` (100 years), a file
over :data:`MAX_PIPELINE_FILE_BYTES`, and a document that YAML's aliases expand beyond
:data:`MAX_EXPANDED_NODES` nodes or :data:`MAX_EXPANDED_CHARS` characters (checked on the
composed nodes, before anything is expanded).
A VoltSP window block is read as its users write it (:mod:`windowing.config.voltsp`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from windowing.config.columns import Labels, refuse_clashing_columns
from windowing.config.fields import (
    ConfigError,
    column_field,
    duration_field,
    enum_field,
    expect_mapping,
    parse_share,
    positive_duration_field,
    refuse_unknown,
    window_offset_field,
)
from windowing.config.model import (
    DEFAULT_BATCH_INTERVAL_MS,
    DEFAULT_HEARTBEAT_MS,
    MAX_SLIDE_RATIO,
    Aggregate,
    Clock,
    Lateness,
    PercentileAggregate,
    Pipeline,
    Quality,
    Source,
    Trigger,
    WatermarkStrategy,
    Window,
    WindowType,
)
from windowing.config.outputs import parse_output
from windowing.config.reconcile import parse_reconcile
from windowing.config.voltsp import (
    IGNORE_LIVE_PROCESSORS,
    LIVE_ONLY_ROOT_FIELDS,
    LIVE_ONLY_TRIGGER_FIELDS,
    LIVE_ONLY_WINDOW_FIELDS,
    ColumnMap,
    aggregate_shorthand,
    live_processors,
    live_source_blocks,
    refuse_live_processors,
)

#: The largest pipeline file read, in bytes: a pipeline is a few kilobytes, and PyYAML
#: takes seconds over megabytes.
MAX_PIPELINE_FILE_BYTES = 1_000_000
#: The most YAML nodes (scalars, lists, mappings) a document may hold once its aliases
#: are expanded: an alias (``*a``) repeats its anchor's whole value, so nested aliases
#: grow a small file exponentially (840 bytes became a 226 MB reader option).
MAX_EXPANDED_NODES = 100_000
#: The most characters of scalars a document may hold once its aliases are expanded.
MAX_EXPANDED_CHARS = 1_000_000


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and validate a pipeline YAML file (contract section 10)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(MAX_PIPELINE_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read pipeline file: {exc.strerror or exc}") from exc
    if len(data) > MAX_PIPELINE_FILE_BYTES:
        raise ConfigError(
            f"{p}: larger than {MAX_PIPELINE_FILE_BYTES:,} bytes: not a pipeline file "
            "(a pipeline is a few kilobytes of YAML)"
        )
    try:
        doc = yaml.load(_utf8_text(data), Loader=_StrictLoader)
        return parse_pipeline(doc)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except RecursionError:  # PyYAML composes and constructs recursively
        raise ConfigError(f"{p}: not valid YAML: nested too deeply for a pipeline file") from None
    except ValueError as exc:  # PyYAML's int(): a number of more than 4300 digits
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None


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
        _refuse_alias_expansion(node)  # before anything is constructed (or expanded by str())
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


def _expanded_sizes(root: yaml.Node) -> dict[int, tuple[int, int]]:
    """``id(node) -> (nodes, characters of scalars)`` of every node, its aliases expanded.

    Counted on the composed nodes, where an alias is the anchor's node again: each node is
    sized once, from its children's sizes, so a bomb of nested aliases costs its file's
    size to measure, never its expansion. An alias back to a node that holds it (a
    recursive document) counts as one node.
    """
    sizes: dict[int, tuple[int, int]] = {}
    entered: set[int] = set()
    todo: list[tuple[yaml.Node, bool]] = [(root, False)]
    while todo:
        node, children_sized = todo.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = (1, len(node.value))
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
        if children_sized:
            nodes, chars = 1, 0
            for child in children:
                n, c = sizes.get(id(child), (1, 0))  # not sized yet: an alias back up (a cycle)
                nodes, chars = nodes + n, chars + c
            sizes[id(node)] = (nodes, chars)
        elif id(node) not in entered:
            entered.add(id(node))
            todo.append((node, True))
            todo.extend((child, False) for child in children if id(child) not in sizes)
    return sizes


def _refuse_alias_expansion(root: yaml.Node) -> None:
    """Refuse a document larger than :data:`MAX_EXPANDED_NODES` nodes or
    :data:`MAX_EXPANDED_CHARS` characters once its aliases are expanded, naming the
    deepest field (through mappings) that is too large on its own."""
    sizes = _expanded_sizes(root)

    def too_large(node: yaml.Node) -> bool:
        nodes, chars = sizes.get(id(node), (1, 0))
        return nodes > MAX_EXPANDED_NODES or chars > MAX_EXPANDED_CHARS

    if not too_large(root):
        return
    node, field = root, ""
    while isinstance(node, yaml.MappingNode):
        big = [(k, v) for k, v in node.value if too_large(v)]
        if not big:
            break
        key, node = big[0]
        name = key.value if isinstance(key, yaml.ScalarNode) else "?"
        field = f"{field}.{name}" if field else str(name)
    nodes, chars = sizes[id(node)]
    raise ConfigError(
        f"{field or '<root>'}: expands to {nodes:,} YAML nodes and {chars:,} characters once its aliases (*name) "
        f"are expanded; a pipeline holds at most {MAX_EXPANDED_NODES:,} nodes and {MAX_EXPANDED_CHARS:,} "
        "characters: nested aliases repeat their anchors' values, write the values out instead"
    )


def parse_pipeline(doc: Any) -> Pipeline:
    """Validate a parsed YAML document into a :class:`Pipeline`."""
    m = expect_mapping(doc, "<root>")
    name, ignored = _parse_root(m)
    if m.get("source") is None:  # a VoltSP file whose `source: ...` placeholder was dropped
        raise ConfigError(
            "source: required: rewindow's source fields (arrivalTime, and path or --input); "
            "a VoltSP source block may stay beside them, unread"
        )
    source = _parse_source(expect_mapping(m["source"], "source"), ignored)
    emitter = expect_mapping(m.get("emitter"), "emitter")
    wtype = _window_type(emitter)
    wfield = f"emitter.{wtype.value}"
    wdoc = expect_mapping(emitter[wtype.value], wfield)
    columns = ColumnMap(m.get("columns"))
    window, aggregates, labels = _parse_window(wtype, wdoc, wfield, columns, ignored)
    columns.refuse_unused()
    refuse_clashing_columns(source, window, aggregates, labels)
    _check_future_skew(m, source, window, wfield)
    triggers, trigger_lists = _parse_trigger_lists(m, emitter, wfield, wdoc, ignored)
    flush, heartbeat, ignore_processors = _parse_replay(m)
    processors = refuse_live_processors(live_processors(m, trigger_lists), ignore_processors)
    _check_derived_uses(source)

    pipeline = Pipeline(
        name=name.strip(),
        source=source,
        window=window,
        aggregates=aggregates,
        triggers=triggers,
        flush_at_end=flush,
        version=1,
        quality=_parse_quality(expect_mapping(m.get("quality", {}) or {}, "quality")),
        heartbeat_ms=heartbeat,
        column_bindings=tuple(columns.bindings),
        ignored_fields=tuple(ignored),
        live_processors_ignored=processors,
    )
    try:
        catalog = parse_output(m.get("output"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return replace(pipeline, reconcile=parse_reconcile(m.get("reconcile"), pipeline), catalog=catalog)


def _parse_root(m: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The root's fields checked, its ``version`` and ``name``: ``(name, ignored live-only fields)``."""
    refuse_unknown(
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
            *LIVE_ONLY_ROOT_FIELDS,
        },
    )
    ignored = [k for k in m if k in LIVE_ONLY_ROOT_FIELDS]  # the live pipeline's sink, processors
    version = m.get("version", 1)
    if isinstance(version, bool) or version != 1:  # True == 1 in Python
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
#: The longest folder name most filesystems take (ext4, XFS, APFS, HDFS's default), in bytes.
MAX_NAME_BYTES = 255


def check_pipeline_name(name: str) -> None:
    """Refuse a pipeline ``name`` that is not one plain folder name (:data:`_PIPELINE_NAME`).

    ``../../x`` would write outside the output root, ``a/b`` a folder ``rewindow status``
    does not list, and ``*`` would read every pipeline's partitions as its own. A name
    over :data:`MAX_NAME_BYTES` bytes failed only when the first output was written
    ("Mkdirs failed"), after the replay's work.
    """
    if not _PIPELINE_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"name: {name!r} is not allowed: a pipeline name is one folder name under the output root; "
            "use letters, digits, '_', '-' and '.' (starting with a letter or digit, no '..'), "
            "for example 'clicks-hourly'"
        )
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ConfigError(
            f"name: {name[:40]!r}... is {len(name.encode('utf-8')):,} bytes in UTF-8: a pipeline name is one folder "
            f"name under the output root, and a folder name is at most {MAX_NAME_BYTES} bytes; use a shorter name"
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
) -> tuple[tuple[Trigger, ...], list[tuple[str, Any]]]:
    """The triggers, from the one place they are given (default ``atWindowEnd``), and
    ``[(field, list as written)]`` of that place (none without one)."""
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
    return _parse_triggers(triggers_doc, triggers_field, ignored), given


def _parse_replay(m: Mapping[str, Any]) -> tuple[bool, int, bool]:
    """The ``replay`` block: ``(flushAtEnd, heartbeat in ms, liveProcessors: ignore)``."""
    replay_doc = expect_mapping(m.get("replay", {}) or {}, "replay")
    refuse_unknown(replay_doc, "replay", {"flushAtEnd", "heartbeat", "liveProcessors"})
    live = replay_doc.get("liveProcessors")
    if live is not None and live != IGNORE_LIVE_PROCESSORS:
        raise ConfigError(
            f"replay.liveProcessors: {live!r} is not supported; the one value is {IGNORE_LIVE_PROCESSORS!r} "
            "(replay without the live pipeline's processors, the outputs standing before them)"
        )
    flush = replay_doc.get("flushAtEnd", False)
    if not isinstance(flush, bool):
        raise ConfigError(f"replay.flushAtEnd: {flush!r} must be true or false")
    heartbeat = (
        duration_field(replay_doc["heartbeat"], "replay.heartbeat")
        if "heartbeat" in replay_doc
        else DEFAULT_HEARTBEAT_MS
    )
    return flush, heartbeat, live is not None


def _parse_quality(q: Mapping[str, Any]) -> Quality:
    refuse_unknown(q, "quality", {"maxRejectedShare"})
    if "maxRejectedShare" not in q:
        return Quality()
    return Quality(max_rejected_share=parse_share(q["maxRejectedShare"], "quality.maxRejectedShare"))


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
    "derive",
    "filter",
}


def _parse_derive(doc: Any) -> tuple[tuple[str, str], ...]:
    """``source.derive``: an ordered mapping name -> Spark SQL expression (the YAML's order).

    Only the shape is checked here; each expression is analysed against the input's schema
    before any work (:mod:`windowing.prewindow`)."""
    if doc is None:
        return ()
    m = expect_mapping(doc, "source.derive")
    out: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for k, v in m.items():
        name = column_field(k, "source.derive: a key", required=True)
        f = f"source.derive.{name}"
        if name.startswith("__"):
            raise ConfigError(f"{f}: names starting with '__' are reserved for the engine; choose another name")
        if name.lower() in seen:
            raise ConfigError(
                f"{f}: derived as source.derive.{seen[name.lower()]} too (names compare ignoring case, as Spark does)"
            )
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{f}: {v!r} must be a Spark SQL expression (such as amount * 0.92)")
        seen[name.lower()] = name
        out.append((name, v.strip()))
    return tuple(out)


def _parse_filter(v: Any) -> str | None:
    """``source.filter``: a Spark SQL boolean expression (checked against the schema later)."""
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"source.filter: {v!r} must be a Spark SQL condition (such as amount > 0)")
    return v.strip()


def _check_derived_uses(source: Source) -> None:
    """A derived name is read by the fields that name columns, never by ``partitionColumn``
    (a folder of the landing zone, read before anything is derived)."""
    if source.partition_column and source.partition_column in source.derived_names:
        raise ConfigError(
            f"source.partitionColumn: {source.partition_column!r} is a name source.derive gives; the partition "
            "column is a folder of the landing zone (date=YYYY-MM-DD), read before anything is derived"
        )


def _parse_source(s: Mapping[str, Any], ignored: list[str]) -> Source:
    """rewindow's source; a VoltSP source block beside it (``kafka: {...}``) goes to ``ignored``."""
    live = live_source_blocks(s, _SOURCE_FIELDS)
    if live and "arrivalTime" not in s:
        raise ConfigError(
            f"source.arrivalTime: required; source.{live[0]} is the live pipeline's VoltSP source, which a replay "
            "does not read: add rewindow's source fields beside it (arrivalTime, and path or --input)"
        )
    ignored += [f"source.{k}" for k in live]
    refuse_unknown({k: v for k, v in s.items() if k not in live}, "source", _SOURCE_FIELDS)
    arrival = column_field(s.get("arrivalTime"), "source.arrivalTime", required=True)
    order = s.get("arrivalOrder", []) or []
    if isinstance(order, str):
        order = [order]
    if not isinstance(order, list):
        raise ConfigError(f"source.arrivalOrder: {order!r} must be a list of column names")
    order_cols = tuple(column_field(c, f"source.arrivalOrder[{i}]", required=True) for i, c in enumerate(order))
    batch_column: str | None = None
    batch_interval: int | None = DEFAULT_BATCH_INTERVAL_MS
    if "batch" in s:
        b = expect_mapping(s["batch"], "source.batch")
        refuse_unknown(b, "source.batch", {"interval", "column"})
        if ("interval" in b) == ("column" in b):
            raise ConfigError("source.batch: give exactly one of interval or column")
        if "column" in b:
            batch_column, batch_interval = column_field(b["column"], "source.batch.column", required=True), None
        else:
            batch_interval = positive_duration_field(b["interval"], "source.batch.interval")
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
        partition_column=column_field(s.get("partitionColumn"), "source.partitionColumn"),
        options=tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items())),
        arrival_time=arrival,
        arrival_order=order_cols,
        batch_column=batch_column,
        batch_interval_ms=batch_interval,
        worker=column_field(s.get("worker"), "source.worker"),
        path=path,
        max_future_skew_ms=(
            duration_field(s["maxFutureSkew"], "source.maxFutureSkew") if s.get("maxFutureSkew") is not None else None
        ),
        derive=_parse_derive(s.get("derive")),
        filter=_parse_filter(s.get("filter")),
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


def _parse_window(
    wtype: WindowType, w: Mapping[str, Any], f: str, columns: ColumnMap, ignored: list[str]
) -> tuple[Window, tuple[Aggregate, ...], Labels]:
    """(Window, aggregates, labels): ``labels`` names the YAML field of each output column
    the configuration decides (``"key"``, ``("aggregate", i)``), for clash messages."""
    common = {"keyExtractor", "timeConfig", "aggregateDefinition", "triggers", *LIVE_ONLY_WINDOW_FIELDS}
    refuse_unknown(w, f, common | _WINDOW_FIELDS[wtype])
    ignored += [f"{f}.{k}" for k in w if k in LIVE_ONLY_WINDOW_FIELDS]
    tc = expect_mapping(w.get("timeConfig", {}) or {}, f"{f}.timeConfig")
    refuse_unknown(tc, f"{f}.timeConfig", _TIME_FIELDS)

    span, slide, offset, max_dur = _window_extent(wtype, w, f)
    idle = _idle_timeout(wtype, w, tc, f)
    keys = _key_columns(w.get("keyExtractor"), f"{f}.keyExtractor", columns)
    event_time, _ = columns.resolve(
        tc.get("eventTimeExtractor"), f"{f}.timeConfig.eventTimeExtractor", "eventTimeExtractor"
    )
    strategy = enum_field(
        WatermarkStrategy, tc.get("watermarkStrategy", "MIN_EVENT_TIME"), f"{f}.timeConfig.watermarkStrategy"
    )
    delay = (
        duration_field(tc["delayWindowClose"], f"{f}.timeConfig.delayWindowClose") if "delayWindowClose" in tc else 0
    )
    lateness = enum_field(Lateness, tc.get("lateness", "WINDOW_CLOSED"), f"{f}.timeConfig.lateness")
    default_clock = "EVENT_TIME" if event_time else "PROCESSING_TIME"
    clock = enum_field(Clock, tc.get("idleTimeoutClock", default_clock), f"{f}.timeConfig.idleTimeoutClock")
    if clock is Clock.EVENT_TIME and not event_time:
        raise ConfigError(f"{f}.timeConfig.idleTimeoutClock: EVENT_TIME needs timeConfig.eventTimeExtractor")

    window = Window(
        type=wtype,
        span_ms=span,
        slide_ms=slide,
        offset_ms=offset,
        maximum_duration_ms=max_dur,
        keys=keys,
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
        **(
            {"key": f"{f}.keyExtractor"}
            if len(keys) == 1
            else {("key", i): f"{f}.keyExtractor[{i}]" for i in range(len(keys))}
        ),
        **{("aggregate", i): fi for i, fi in enumerate(agg_fields)},
    }
    return window, aggregates, labels


def _key_columns(v: Any, f: str, columns: ColumnMap) -> tuple[str, ...]:
    """``keyExtractor``'s columns: one name (or extractor), or a list of them for a key of
    several columns (each part resolved as one would be)."""
    if not isinstance(v, list):
        key, _ = columns.resolve(v, f, "keyExtractor")
        return (key,) if key else ()
    if not v:
        raise ConfigError(f"{f}: an empty list; name the key's columns, or leave keyExtractor out for no key")
    keys: list[str] = []
    for i, part in enumerate(v):
        key, _ = columns.resolve(part, f"{f}[{i}]", f"keyExtractor[{i}]")
        if key is None:
            raise ConfigError(f"{f}[{i}]: {part!r} must be a column name")
        if key in keys:
            raise ConfigError(f"{f}[{i}]: column {key!r} is already part of the key ({f}[{keys.index(key)}])")
        keys.append(key)
    return tuple(keys)


def _window_extent(wtype: WindowType, w: Mapping[str, Any], f: str) -> tuple[int | None, int | None, int, int | None]:
    """``(span, slide, offset, maximum duration)`` in ms (None where the type has none)."""
    span: int | None = None
    slide: int | None = None
    max_dur: int | None = None
    offset = 0
    if wtype in (WindowType.TUMBLING, WindowType.SLIDING):
        if "windowSpan" not in w:
            raise ConfigError(f"{f}.windowSpan: required for {wtype.value}")
        span = positive_duration_field(w["windowSpan"], f"{f}.windowSpan")
    if wtype is WindowType.SLIDING:
        if "windowSlide" not in w:
            raise ConfigError(f"{f}.windowSlide: required for sliding-time-window")
        slide = positive_duration_field(w["windowSlide"], f"{f}.windowSlide")
        assert span is not None  # sliding windows have a span (above)
        if slide > span:
            raise ConfigError(f"{f}.windowSlide: {w['windowSlide']!r} is larger than windowSpan {w['windowSpan']!r}")
        if span > MAX_SLIDE_RATIO * slide:
            raise ConfigError(
                f"{f}.windowSlide: windowSpan {w['windowSpan']!r} / windowSlide {w['windowSlide']!r} is a ratio of "
                f"{_ratio(span, slide)}: each event would belong to {-(-span // slide):,} windows; the ratio is at "
                f"most {MAX_SLIDE_RATIO:,} (a typo, such as 1ms for 1m?)"
            )
    if wtype in (WindowType.TUMBLING, WindowType.SLIDING) and "windowOffset" in w:
        assert span is not None  # tumbling and sliding windows have a span (above)
        offset = window_offset_field(w["windowOffset"], span, slide or span, w["windowSpan"], f"{f}.windowOffset")
    if wtype is WindowType.SESSION and "maximumDuration" in w:
        max_dur = positive_duration_field(w["maximumDuration"], f"{f}.maximumDuration")
    return span, slide, offset, max_dur


def _ratio(span: int, slide: int) -> str:
    """``span / slide`` for a message: ``3,600,000``, ``10,000.5``."""
    whole, rest = divmod(span, slide)
    return f"{whole:,}" if not rest else f"{span / slide:,.2f}".rstrip("0")


def _idle_timeout(wtype: WindowType, w: Mapping[str, Any], tc: Mapping[str, Any], f: str) -> int | None:
    """``idleTimeout`` in ms, from ``timeConfig`` or beside the window (required for sessions)."""
    # The seed puts a session's idleTimeout beside the window; the contract in timeConfig.
    idle: int | None = None
    for where, doc in ((f"{f}.timeConfig.idleTimeout", tc), (f"{f}.idleTimeout", w)):
        if "idleTimeout" in doc:
            value = positive_duration_field(doc["idleTimeout"], where)
            if idle is not None and value != idle:
                raise ConfigError(f"{where}: {doc['idleTimeout']!r} disagrees with timeConfig.idleTimeout")
            idle = value
    if wtype is WindowType.SESSION and idle is None:
        raise ConfigError(f"{f}.timeConfig.idleTimeout: required for session-window (it is the session gap)")
    return idle


def _parse_aggregates(doc: Any, f: str, columns: ColumnMap) -> tuple[tuple[Aggregate, ...], list[str]]:
    """The aggregates and, for each, the YAML field its output name comes from.

    An item is ``{type, column, name}``, or VoltSP's shorthand ``type (column)``
    (``sum (amount)``), as a string or as ``type:`` beside an optional ``name:``. The
    column may be a plain column name or an extractor (see :class:`ColumnMap`).
    """
    # VoltSP writes {from: Class, builder: [...]}; accept that shape as well as a plain list.
    # The class only says whose properties the shorthand names; here they are columns.
    if isinstance(doc, Mapping):
        refuse_unknown(doc, f, {"from", "builder"})
        doc, f = doc.get("builder"), f"{f}.builder"
    if not isinstance(doc, list) or not doc:
        raise ConfigError(f"{f}: {doc!r} must be a non-empty list of aggregates")
    out: list[Aggregate] = []
    for i, item in enumerate(doc):
        fi = f"{f}[{i}]"
        if isinstance(item, str):
            item = {"type": item}
        item = expect_mapping(item, fi)
        refuse_unknown(item, fi, {"type", "column", "name", "percentage"})
        typ, written = aggregate_shorthand(item.get("type"), f"{fi}.type")
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
        _check_aggregate_name(name, typ, fi, explicit="name" in item)
        percentage = _percentage(item.get("percentage"), typ, f"{fi}.percentage")
        if percentage is None:
            out.append(Aggregate(type=typ, column=column, name=name))
        else:
            out.append(PercentileAggregate(type=typ, column=column, name=name, percentage=percentage))
    return tuple(out), [f"{f}[{i}].name" for i in range(len(out))]


#: Characters an aggregate's output name may not hold: it is a column of the outputs (and
#: ``partial_<name>`` one of the state), which Spark reads as a nested field (``.``), a
#: quoted name (a backtick) and Hive-style layouts as a folder (``/``).
_UNSAFE_NAME_CHARACTERS = ("/", ".", "`")


def _check_aggregate_name(name: str, typ: str, fi: str, explicit: bool) -> None:
    """Refuse an output name holding a character of :data:`_UNSAFE_NAME_CHARACTERS`,
    naming the aggregate (its explicit ``name``, or the column its default name comes from)."""
    bad = [c for c in _UNSAFE_NAME_CHARACTERS if c in name]
    if not bad:
        return
    where = f"{fi}.name" if explicit else fi
    fix = "give it another name" if explicit else f"give it a name of its own (name: {typ}_...)"
    raise ConfigError(
        f"{where}: aggregate {name!r} holds {', '.join(repr(c) for c in bad)}: an aggregate's name is a column "
        f"of the outputs, and a column name with '/', '.' or '`' cannot be written and read back safely; {fix}"
    )


def _percentage(v: Any, typ: str, f: str) -> float | None:
    """A ``percentile``'s percentage: a number in [0, 1] (None: the median)."""
    if v is None:
        return None
    if typ != "percentile":
        raise ConfigError(f"{f}: only a percentile takes a percentage; {typ!r} does not")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise ConfigError(f"{f}: {v!r} must be a number from 0 to 1 (0.95 for the 95th percentile)")
    return float(v)


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
            refuse_unknown(item, fi, {"trigger", *LIVE_ONLY_TRIGGER_FIELDS})
            t, live = item.get("trigger"), [f"{fi}.{k}" for k in item if k in LIVE_ONLY_TRIGGER_FIELDS]
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
