"""Columns: the input columns a pipeline reads (:func:`check_input_columns`) and the
columns its outputs have (:func:`output_columns`), which must not clash
(:func:`refuse_clashing_columns`). The outputs' Arrow types are
:mod:`windowing.config.arrow_schemas`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from windowing.config.fields import ConfigError, nearest_name
from windowing.config.model import Aggregate, ColumnBinding, Pipeline, Source, Window, WindowType
from windowing.contract import EMIT_COLUMNS, STATE_COLUMNS, STATE_HEAD_COLUMNS, WINDOW_COLUMNS

#: The YAML field of each output column the configuration names (``"worker"``, ``"key"``,
#: ``("aggregate", i)``), for clash messages.
Labels = Mapping[str | tuple[str, int], str]


def column_uses(pipeline: Pipeline) -> list[ColumnBinding]:
    """Every input column ``pipeline`` reads, with the YAML field that names it (and, for
    extractors, how it became that column), in the order of the configuration. A name
    ``source.derive`` gives is not read (the columns its expression reads are checked when
    it is analysed: :mod:`windowing.prewindow`)."""
    src, w = pipeline.source, pipeline.window
    wf = f"emitter.{w.type.value}"
    bound = {b.role: b for b in pipeline.column_bindings}
    named = [
        ("arrivalTime", "source.arrivalTime", src.arrival_time),
        *[(f"arrivalOrder[{i}]", f"source.arrivalOrder[{i}]", c) for i, c in enumerate(src.arrival_order)],
        ("batch", "source.batch.column", src.batch_column),
        ("worker", "source.worker", src.worker),
        *(
            [("keyExtractor", f"{wf}.keyExtractor", w.keys[0])]
            if len(w.keys) == 1
            else [(f"keyExtractor[{i}]", f"{wf}.keyExtractor[{i}]", c) for i, c in enumerate(w.keys)]
        ),
        ("eventTimeExtractor", f"{wf}.timeConfig.eventTimeExtractor", w.event_time),
        *[
            (f"aggregate[{i}]", f"{wf}.aggregateDefinition[{i}].column", a.column)
            for i, a in enumerate(pipeline.aggregates)
        ],
    ]
    out = []
    derived = set(src.derived_names)  # computed by the replay (source.derive), not read
    for role, field_, column in named:
        if column and column not in derived:
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
    guess = nearest_name(use.column, have)
    if guess:
        msg += f"; did you mean {guess!r}?"
    if use.via == "bean" or use.field.endswith(".type"):
        # A window block copied from VoltSP keeps its extractors and shorthand; columns: binds them.
        msg += f" Map it with columns: {{{use.column}: {guess or '<column>'}}}"
    return msg


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
    source: Source, window: Window, aggregates: Sequence[Aggregate], labels: Labels | None = None
) -> dict[str, list[_OutputColumn]]:
    """Every column the ``aggregates`` and ``state`` outputs may have, in order."""
    labels = labels or {}
    wf = f"emitter.{window.type.value}"

    def added(names: Iterable[str]) -> list[_OutputColumn]:
        return [_OutputColumn(c, "", f"the column {c!r} rewindow adds") for c in names]

    ids = []
    if source.worker:
        field_ = labels.get("worker", "source.worker")
        ids.append(_OutputColumn(source.worker, field_, f"the worker column {source.worker!r}"))
    for i, column in enumerate(window.keys):
        if len(window.keys) == 1:
            field_ = labels.get("key", f"{wf}.keyExtractor")
        else:
            field_ = labels.get(("key", i), f"{wf}.keyExtractor[{i}]")
        ids.append(_OutputColumn(column, field_, f"the key column {column!r}"))
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


def refuse_clashing_columns(source: Source, window: Window, aggregates: Sequence[Aggregate], labels: Labels) -> None:
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
