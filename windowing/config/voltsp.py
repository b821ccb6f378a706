"""VoltSP compatibility: a VoltSP window block is accepted as its users write it.

Java extractors (``com.example.Event::getUserId``) name columns by the bean convention
(``userId``), overridable by a ``columns:`` map (:class:`ColumnMap`); aggregates may be
written ``sum (amount)`` (:func:`aggregate_shorthand`); the live pipeline's settings that
mean nothing in a replay (``exceptionHandler``, ``sink``, ``processors``, a VoltSP source
plugin block) are accepted and listed in ``Pipeline.ignored_fields`` (see
:func:`ignored_fields_note`), never dropped silently.
"""

from __future__ import annotations

import re
from typing import Any, Collection, Mapping

from windowing.config.fields import ConfigError, close_matches, column_field, expect_mapping
from windowing.config.model import AGGREGATE_TYPES, ColumnBinding, Pipeline

#: Fields of a VoltSP pipeline with no meaning in a replay: accepted, listed in
#: ``Pipeline.ignored_fields``. Late events and errors are outputs of their own here
#: (``late_events``, ``rejected``), and the replay writes its outputs itself.
LIVE_ONLY_ROOT_FIELDS = ("sink", "processors")
LIVE_ONLY_WINDOW_FIELDS = ("exceptionHandler",)
LIVE_ONLY_TRIGGER_FIELDS = ("processors", "sink")


#: ``replay.liveProcessors``'s one value: the replay runs without the live pipeline's processors.
IGNORE_LIVE_PROCESSORS = "ignore"


def _processor_name(item: Any) -> str:
    """What a processor item is called: its plugin key (``javascript: {...}``), or its text."""
    if isinstance(item, Mapping) and item:
        return ", ".join(str(k) for k in item)
    return str(item)


def live_processors(m: Mapping[str, Any], trigger_lists: list[tuple[str, Any]]) -> list[str]:
    """Each processor of the live pipeline, as ``<field>[i] (<name>)``: the root ``processors``
    (which run on events before the window) and those of the trigger items in
    ``trigger_lists`` (``(field, list)``: they run on what the window emits). An empty block
    (or the docs' ``...`` placeholder removed) holds none."""
    blocks: list[tuple[str, Any]] = [("processors", m.get("processors"))]
    for f, doc in trigger_lists:
        for i, item in enumerate(doc if isinstance(doc, list) else [doc]):
            if isinstance(item, Mapping) and "processors" in item:
                blocks.append((f"{f}[{i}].processors", item["processors"]))
    out: list[str] = []
    for f, block in blocks:
        if block is None or block == [] or block == {}:
            continue
        items = list(block.items()) if isinstance(block, Mapping) else block if isinstance(block, list) else [block]
        for i, item in enumerate(items):
            name = str(item[0]) if isinstance(block, Mapping) else _processor_name(item)
            out.append(f"{f}[{i}] ({name})")
    return out


def refuse_live_processors(processors: list[str], acknowledged: bool) -> tuple[str, ...]:
    """The live pipeline's ``processors`` (:func:`live_processors`) a replay leaves out: refused
    unless ``replay.liveProcessors: ignore`` acknowledges them (then returned, for the metrics).

    A replay runs none of them: a processor that drops or changes events before the window
    would change every window, so loading them unread would drop their work silently."""
    if not processors or acknowledged:
        return tuple(processors)
    after = any(".triggers" in p for p in processors)
    raise ConfigError(
        f"{processors[0].split('[')[0]}: the live pipeline runs {len(processors)} processor(s) a replay does not run: "
        f"{', '.join(processors)}"
        + (" (a trigger's processors run on what the window emits)" if after else "")
        + ". Write what a processor before the window does as source.filter "
        "(a Spark SQL condition: the rows it keeps) and source.derive (name: Spark SQL expression), "
        'see docs/configuration.md, "What your live pipeline does before the window"; then, or to replay '
        f"without them (the outputs then stand before those processors), set replay.liveProcessors: "
        f"{IGNORE_LIVE_PROCESSORS}"
    )


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


def live_source_blocks(s: Mapping[str, Any], source_fields: Collection[str]) -> list[str]:
    """Keys of ``source`` that are a VoltSP source plugin block, not rewindow's ``source_fields``.

    A VoltSP pipeline's source is one plugin name holding a mapping (``kafka:
    {bootstrapServers: ...}``), or nothing once the docs' ``...`` is removed. A key that
    is a rewindow field, holds a plain value, or is a near miss of a rewindow field
    (``bach: {interval: 1s}``) is not one: ``refuse_unknown`` refuses the last two as unknown.
    """
    live = [
        k
        for k, v in s.items()
        if isinstance(k, str)
        and k not in source_fields
        and (v is None or isinstance(v, Mapping))
        and not close_matches(k, source_fields)
    ]
    if len(live) > 1:
        raise ConfigError(
            f"source.{live[1]}: unknown field; a VoltSP source is one plugin block and source.{live[0]} is taken "
            f"as that; rewindow's source fields are {', '.join(sorted(source_fields))}"
        )
    return live


_SHORTHAND = re.compile(r"(?P<type>[A-Za-z_]+)\s*(?:\((?P<column>[^()]*)\))?")


def aggregate_shorthand(v: Any, f: str) -> tuple[str, str | None]:
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


class ColumnMap:
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
        for k, v in (expect_mapping(doc, "columns") if doc is not None else {}).items():
            if not isinstance(k, str) or not k.strip():
                raise ConfigError(f"columns: key {k!r} must be an extractor (Class::getX) or a property name")
            key = k.strip()
            column = column_field(v, f"columns.{key}", required=True)
            prop = _property(key) or key
            if prop in self.by_property:
                raise ConfigError(
                    f"columns.{key}: maps property {prop!r}, as columns.{self.by_property[prop][0]} does; give it once"
                )
            self.by_property[prop] = (key, column)

    def resolve(self, v: Any, f: str, role: str) -> tuple[str | None, str | None]:
        """(input column, property as the YAML names it) of field ``f`` holding ``v``."""
        text = column_field(v, f)
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
