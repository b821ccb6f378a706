"""What the live pipeline does before its window: ``source.derive`` and ``source.filter``.

Order, for every row: **derive** (each ``name: expression`` in the YAML's order, each
reading the input's columns and the names derived before it), then **filter** (a row
whose condition is false or null is *filtered*, as SQL's ``WHERE`` drops it), then
everything a replay did before these existed (rejection of rows it cannot process,
batches, watermarks, windows). A filtered row is never rejected, a rejected row never
filtered: the filter is the first reason of :func:`windowing.runner.normalise.normalise`,
which keeps the first reason that holds.

**Deterministic by construction.** Each expression is analysed against the input's schema
before any Spark job (:func:`analyse`), on an empty relation of that schema, so that
nothing of the input is read: a syntax error, an unknown column, a name derived later, a
filter that is not boolean, an aggregate, window or generator function, and a
non-deterministic expression (Spark's own ``deterministic`` flag of the analysed
expression, plus the functions that read the clock or the session: ``current_timestamp``
and its kin, which Spark calls deterministic within one query) are each a
:class:`~windowing.config.ConfigError` naming the field (``source.derive.amount_eur``) and
quoting the first line of Spark's message. Over Spark Connect there is no analysed plan
to read: the schema still catches the first four, and functions are checked by name
(:data:`_CONNECT_REFUSED`), a weaker check that says so in its message.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.config import ConfigError
from windowing.storage.errors import first_line
from windowing.storage.lake import is_connect

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from windowing.config import Source

#: The reason :func:`windowing.runner.normalise.normalise` gives a filtered row: counted as
#: ``filtered_rows`` and left out of ``rejected``, never a rejection reason.
FILTERED = "__filtered"

#: Catalyst expressions Spark calls deterministic that still differ from one run to the
#: next: they read the clock, the session or the file a row came from.
_RUN_DEPENDENT = {
    "CurrentTimestamp": "current_timestamp()",
    "Now": "now()",
    "CurrentDate": "current_date()",
    "LocalTimestamp": "localtimestamp()",
    "CurrentTimeZone": "current_timezone()",
    "CurrentUser": "current_user()",
    "CurrentDatabase": "current_database()",
    "CurrentCatalog": "current_catalog()",
    "CurrentBatchTimestamp": "current_batch_timestamp",
    "InputFileName": "input_file_name()",
    "InputFileBlockStart": "input_file_block_start()",
    "InputFileBlockLength": "input_file_block_length()",
    "ScalarSubquery": "a subquery",
    "Exists": "a subquery",
    "ListQuery": "a subquery",
}

#: Over Spark Connect: functions refused by name (no analysed plan to read their flags).
_CONNECT_REFUSED = (
    "rand|randn|random|uuid|shuffle|monotonically_increasing_id|spark_partition_id|input_file_name|"
    "current_timestamp|current_date|now|localtimestamp|current_timezone|current_user|unix_timestamp|"
    "count|sum|avg|mean|min|max|first|last|collect_list|collect_set|approx_count_distinct|stddev|variance|"
    "row_number|rank|dense_rank|lag|lead|ntile|explode|posexplode|inline|stack"
)


def has_prewindow(source: Source) -> bool:
    """Whether ``source`` derives or filters anything."""
    return bool(source.derive) or source.filter is not None


def derive(source: Source, df: DataFrame) -> DataFrame:
    """``df`` with ``source.derive``'s columns added, in order, every expression (and the
    filter) analysed first (:func:`analyse`); ``df`` itself without any."""
    if not has_prewindow(source):
        return df
    analyse(source, df)
    if not source.derive:
        return df
    return df.withColumns({name: F.expr(text) for name, text in source.derive})


def filtered(source: Source) -> Column | None:
    """Whether a row of the derived events is filtered (its condition false or null), or
    None without a filter."""
    if source.filter is None:
        return None
    return ~F.coalesce(F.expr(source.filter), F.lit(False))


def window_input(source: Source, derived: DataFrame) -> DataFrame:
    """The rows of the derived events (:func:`derive`) the filter keeps: what the window sees."""
    drop = filtered(source)
    return derived if drop is None else derived.where(~drop)


def analyse(source: Source, df: DataFrame) -> None:
    """Refuse, before any work, an expression of ``source.derive`` or ``source.filter`` that
    cannot be replayed deterministically over ``df``'s schema (the module docstring)."""
    spark = df.sparkSession
    have = {c.lower(): c for c in df.columns}
    names = [name for name, _ in source.derive]
    schema = T.StructType(list(df.schema.fields))
    for i, (name, text) in enumerate(source.derive):
        f = f"source.derive.{name}"
        if name.lower() in have:
            raise ConfigError(
                f"{f}: {have[name.lower()]!r} is already a column of the input (names compare ignoring case, as "
                "Spark does); give the derived column another name"
            )
        dtype = _analysed(spark, schema, text, f, later=names[i + 1 :])
        schema = T.StructType([*schema.fields, T.StructField(name, dtype, True)])
    if source.filter is not None:
        dtype = _analysed(spark, schema, source.filter, "source.filter", later=[])
        if not isinstance(dtype, T.BooleanType):
            raise ConfigError(
                f"source.filter: {source.filter!r} is {dtype.simpleString()}, not a boolean condition "
                "(a row is kept where it is true)"
            )


def _analysed(spark: Any, schema: T.StructType, text: str, f: str, later: list[str]) -> T.DataType:
    """The type of ``text`` over an empty relation of ``schema``, refusing what
    :func:`analyse` refuses."""
    try:
        probe = spark.createDataFrame([], schema).select(F.expr(text).alias("__probe"))
        dtype = probe.schema["__probe"].dataType
    except Exception as exc:  # noqa: BLE001 - Spark's ParseException, AnalysisException, ...
        message = first_line(exc)
        unresolved = re.search(r"name `([^`]+)` cannot be resolved", message)
        if unresolved and unresolved.group(1) in later:
            raise ConfigError(
                f"{f}: {text!r} reads {unresolved.group(1)!r}, which source.derive gives after it; a derived "
                f"expression reads the input's columns and the names derived before it: move it up ({message})"
            ) from None
        raise ConfigError(f"{f}: {text!r} cannot be computed over the input's columns: {message}") from None
    if is_connect(spark):
        _refuse_by_name(text, f)
        return cast(T.DataType, dtype)
    plan = probe._jdf.queryExecution().analyzed()
    nodes, node = [], plan
    while node.children().size():  # the probe's own operators, down to the empty relation
        nodes.append(node.getClass().getSimpleName())
        node = node.children().apply(0)
    what = {"Aggregate": "an aggregate function", "Window": "a window function", "Generate": "a generator function"}
    found = next((what[n] for n in nodes if n in what), None)
    if found is not None or nodes[:1] != ["Project"]:
        raise ConfigError(
            f"{f}: {text!r} holds {found or 'an operation over many rows'}: source.derive and source.filter "
            "compute from one row at a time, before the window (aggregates belong in aggregateDefinition)"
        )
    expr = plan.projectList().apply(0)
    if not expr.deterministic():
        shown = expr.sql().replace(" AS __probe", "")
        raise ConfigError(
            f"{f}: {text!r} is not deterministic (Spark's deterministic flag is false: {shown}); a replay "
            "must give the same rows every time (rand(), uuid(), shuffle(), ...)"
        )
    found = _run_dependent(expr)
    if found:
        raise ConfigError(
            f"{f}: {text!r} reads {found}, which differs from one run to the next; a replay must give the "
            "same rows every time (use a column of the events instead)"
        )
    return cast(T.DataType, dtype)


def _run_dependent(expr: Any) -> str | None:
    """The first function of :data:`_RUN_DEPENDENT` in the Catalyst expression tree ``expr``."""
    todo = [expr]
    while todo:
        e = todo.pop()
        name = e.getClass().getSimpleName()
        if name in _RUN_DEPENDENT:
            return _RUN_DEPENDENT[name]
        children = e.children()
        todo.extend(children.apply(i) for i in range(children.size()))
    return None


def _refuse_by_name(text: str, f: str) -> None:
    """Spark Connect's fallback: refuse the functions of :data:`_CONNECT_REFUSED` and ``OVER``."""
    hit = re.search(rf"\b({_CONNECT_REFUSED})\s*\(", text, re.IGNORECASE) or re.search(r"\bover\s*\(", text, re.I)
    if hit:
        raise ConfigError(
            f"{f}: {text!r} calls {hit.group(0).rstrip('(').strip()}(), which is an aggregate, window, generator or "
            "non-deterministic function (Spark Connect shows no analysed plan: functions are checked by name); "
            "a replay computes each row alone and must give the same rows every time"
        )
