"""The ``reconcile:`` block of a pipeline YAML: where the live pipeline's output is, which
of its columns hold what, how close floating-point aggregates must be and how many windows
must match. Parsed with the rest of the YAML (:func:`~windowing.config.loading.parse_pipeline`);
:mod:`windowing.reconcile` compares a replay with the live output using it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, cast

from windowing.config.fields import ConfigError, expect_mapping, nearest_name, parse_share, refuse_unknown
from windowing.config.model import Pipeline
from windowing.contract import MISMATCH_COLUMNS

_RECONCILE_FIELD = "reconcile"
DEFAULT_ABSOLUTE_TOLERANCE = 1e-9
DEFAULT_RELATIVE_TOLERANCE = 1e-9
#: Default of ``reconcile.minMatch`` and ``--min-match``: every window must match.
DEFAULT_MIN_MATCH = 1.0


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

    #: The live column of each of the key's columns, in ``keyExtractor``'s order.
    keys: tuple[str, ...]
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
            *([("key", self.keys[0])] if len(self.keys) == 1 else [(f"key[{i}]", k) for i, k in enumerate(self.keys)]),
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
    b = expect_mapping(block, _RECONCILE_FIELD) if block is not None else {}
    refuse_unknown(b, _RECONCILE_FIELD, _BLOCK_RECONCILE_FIELDS)
    live = _parse_live(b["live"]) if b.get("live") is not None else None
    columns = _parse_columns(expect_mapping(b.get("columns") or {}, f"{_RECONCILE_FIELD}.columns"), pipeline)
    tol = expect_mapping(b.get("tolerance") or {}, f"{_RECONCILE_FIELD}.tolerance")
    refuse_unknown(tol, f"{_RECONCILE_FIELD}.tolerance", {"absolute", "relative"})
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
    live = expect_mapping(doc, f)
    refuse_unknown(live, f, _LIVE_RECONCILE_FIELDS)
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
    refuse_unknown(c, f, _COLUMN_RECONCILE_FIELDS)
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

    if "key" in c and not pipeline.window.keys:
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
        m = expect_mapping(aggs_doc, f"{f}.aggregates")
        if not m:
            raise ConfigError(f"{f}.aggregates: empty; map at least one aggregate, or leave it out to compare all")
        pairs: list[tuple[str, str]] = []
        for name, col in m.items():
            if name not in names:
                near = nearest_name(str(name), names)
                raise ConfigError(
                    f"{f}.aggregates.{name}: the pipeline has no aggregate {name!r} "
                    f"(its aggregates: {', '.join(names)})" + (f"; did you mean {near!r}?" if near else "")
                )
            if not isinstance(col, str) or not col.strip():
                raise ConfigError(f"{f}.aggregates.{name}: {col!r} must be a column name")
            pairs.append((name, col.strip()))
        aggregates = tuple(pairs)
    columns = LiveColumns(
        keys=_live_keys(c, f, pipeline, defaulted),
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


def _live_keys(c: Mapping[str, Any], f: str, pipeline: Pipeline, defaulted: set[str]) -> tuple[str, ...]:
    """``columns.key``: the live column of the key (a name), or of each of its columns (a
    list, in ``keyExtractor``'s order, for a key of several); the replay's names when absent."""
    keys = pipeline.window.keys
    v = c.get("key")
    if v is None:
        if keys:
            defaulted.update([f"{f}.key"] if len(keys) == 1 else [f"{f}.key[{i}]" for i in range(len(keys))])
        return keys
    if len(keys) == 1:
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{f}.key: {v!r} must be a column name")
        return (v.strip(),)
    if not isinstance(v, list) or len(v) != len(keys):
        raise ConfigError(
            f"{f}.key: the key has {len(keys)} columns ({', '.join(keys)}); "
            f"name the live column of each, in that order, as a list of {len(keys)} names"
        )
    out = []
    for i, name in enumerate(v):
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{f}.key[{i}]: {name!r} must be a column name")
        out.append(name.strip())
    return tuple(out)


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
    key_field = f"emitter.{pipeline.window.type.value}.keyExtractor"
    for fld, col in (
        ("source.worker", pipeline.source.worker),
        *[
            (key_field + (f"[{i}]" if len(pipeline.window.keys) > 1 else ""), k)
            for i, k in enumerate(pipeline.window.keys)
        ],
    ):
        if col and col.lower() in taken:
            raise ConfigError(
                f"{fld}: column {col!r} would clash with the column {col!r} rewindow reconcile adds "
                "to its mismatches output; rename it in the input"
            )
