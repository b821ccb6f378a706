"""Phase 1 of a replay: the input checked and normalised, and the carried state split.

The input's columns are checked against the pipeline before any work
(:func:`check_columns`, :func:`check_late_columns`); :func:`normalise` adds, as Spark
expressions, each row's arrival time ``__arr``, event time ``__evt``, batch ``__batch`` and
the reason it is rejected (``reason``, null for a row the kernel replays);
:func:`reject_committed` rejects rows of batches their worker committed in an earlier
partition. The carried state is checked against the pipeline and these inputs and split
into its worker rows (collected) and key/window rows (for the kernel) by
:func:`split_state`.
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, cast

from pyspark.sql import functions as F

from windowing import kernel as K
from windowing import prewindow
from windowing.config import ConfigError, Pipeline, Window, WindowType, check_input_columns
from windowing.contract import (
    ARRIVAL_MS_COLUMN,
    ARRIVAL_NULL,
    ARRIVAL_OUT_OF_RANGE,
    ARRIVAL_UNPARSEABLE,
    BATCH_COLUMN,
    BATCH_COMMITTED,
    BATCH_NULL,
    EVENT_MS_COLUMN,
    EVENT_OUT_OF_RANGE,
    EVENT_TIME_NULL,
    EVENT_TIME_UNPARSEABLE,
    FUTURE_SKEW,
    KEY_KIND,
    KIND_COLUMN,
    WINDOW_KIND,
    WINDOW_OUT_OF_RANGE,
    WORKER_KIND,
)
from windowing.kernel.inputs import hashable
from windowing.runner.columns import (
    MAX_EPOCH_MS,
    MIN_EPOCH_MS,
    arrow_types,
    col,
    epoch_ms,
    epoch_ms_unchecked,
    floor_div_expr,
    in_range,
    spark_schema,
)
from windowing.runner.session import SMALL_JOB_CONF, session_conf
from windowing.storage.errors import StateError
from windowing.storage.lake import display
from windowing.storage.manifest import StateSummary

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession

#: The column that says why a row is rejected (null for a row the kernel replays): the
#: rejected output's ``reason``.
REJECT_REASON = "reason"


class StateMismatchError(ValueError):
    """The carried state was written by a different pipeline configuration."""


# --------------------------------------------------------------------------- input


_TIME_TYPES = ("timestamp", "timestamp_ntz", "date", "string", "bigint", "int", "smallint", "tinyint")
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double")
#: Decimal types (``decimal(p,s)``) sum and average exactly, with Spark's result types.
_DECIMAL = "decimal("


def check_late_columns(pipeline: Pipeline, df: DataFrame) -> None:
    """Refuse input columns that late_events would overwrite with the columns it adds.

    late_events carries every input column; a same-named added column would replace it
    (or, differing only in case, fail the write after all the work). The one exception is
    an input column ``batch`` that is the source's batch column: the added ``batch`` is
    that same number."""
    added = {c.lower(): c for c in K.LATE_ADDED_COLUMNS}
    for c in df.columns:
        if c.lower() in added and not (c == "batch" and c == pipeline.source.batch_column):
            raise ConfigError(
                f"input column {c!r}: late_events adds a column {added[c.lower()]!r} "
                f"(it adds {', '.join(K.LATE_ADDED_COLUMNS)}; names compare ignoring case) and would "
                f"overwrite it; rename the input column before replaying"
            )


def check_columns(pipeline: Pipeline, df: DataFrame) -> None:
    """Fail before any work if a configured column is missing or unusable."""
    types = dict(df.dtypes)
    internal = [c for c in types if c.startswith("__")]
    if internal:
        raise ConfigError(
            f"input column {internal[0]!r}: names starting with '__' are reserved for the engine; rename it"
        )
    w = pipeline.window
    named = [
        ("source.arrivalTime", pipeline.source.arrival_time),
        *[(f"source.arrivalOrder[{i}]", c) for i, c in enumerate(pipeline.source.arrival_order)],
        ("source.batch.column", pipeline.source.batch_column),
        ("source.worker", pipeline.source.worker),
        *[("keyExtractor" + (f"[{i}]" if len(w.keys) > 1 else ""), c) for i, c in enumerate(w.keys)],
        ("timeConfig.eventTimeExtractor", w.event_time),
        *[(f"aggregateDefinition[{i}].column", a.column) for i, a in enumerate(pipeline.aggregates)],
    ]
    check_input_columns(pipeline, types)  # the CLI's pre-flight check, same message
    times = (("source.arrivalTime", pipeline.source.arrival_time), ("timeConfig.eventTimeExtractor", w.event_time))
    for where, name in times:
        if name and types[name] not in _TIME_TYPES:
            raise ConfigError(
                f"{where}: column {name!r} has type {types[name]}; expected a timestamp, date, "
                "integer epoch milliseconds or a timestamp string"
            )
    integral = ("bigint", "int", "smallint", "tinyint")
    if pipeline.source.batch_column and types[pipeline.source.batch_column] not in integral:
        raise ConfigError(
            f"source.batch.column: column {pipeline.source.batch_column!r} has type "
            f"{types[pipeline.source.batch_column]}; expected an integer batch id"
        )
    for where, name in (n for n in named if not n[0].startswith("aggregateDefinition")):  # identity columns
        if name and types[name].startswith(("array", "map", "struct")):
            raise ConfigError(f"{where}: column {name!r} of type {types[name]} cannot identify a key, worker or order")
    for i, a in enumerate(pipeline.aggregates):
        if a.column is None:
            continue
        t = types[a.column]
        if a.type in ("sum", "avg") and t not in _NUMERIC and not t.startswith(_DECIMAL):
            raise ConfigError(f"aggregateDefinition[{i}].column: {a.type} needs a numeric column; {a.column!r} is {t}")
        if t.startswith(("array", "map", "struct", "binary")):
            raise ConfigError(f"aggregateDefinition[{i}].column: {a.column!r} of type {t} cannot be aggregated")


def _floor_div(F: ModuleType, df: DataFrame, name: str, source: str, divisor: int) -> DataFrame:
    """``df`` with ``name`` = floor(``source`` / divisor), exact in 64-bit integers (Spark's
    ``/`` goes through doubles). Tasks compute the same (``kernel.inputs.with_event_columns``)."""
    return df.withColumn(name, F.expr(floor_div_expr(source, divisor)))


def window_out_of_range(window: Window, t: Column) -> Column | None:
    """Whether a window of an event at ``t`` (epoch ms, in range) would reach outside
    [MIN_EPOCH_MS, MAX_EPOCH_MS] (docs/semantics.md section 1; None: never): the earliest
    start or the latest end of its tumbling or sliding windows. A session's bounds are its
    events' times. Exact in 64-bit integers (``t`` and every duration are far from
    overflow). An effective watermark before the range is written as null, as minus
    infinity (``kernel.outputs.watermark_array``): it rejects nothing."""
    lo, hi = F.lit(MIN_EPOCH_MS), F.lit(MAX_EPOCH_MS)
    offset = F.lit(window.offset_ms)
    outside: list[Column] = []
    if window.type is WindowType.TUMBLING:
        span = F.lit(cast(int, window.span_ms))
        start = t - F.pmod(t - offset, span)
        outside += [start < lo, start + span > hi]
    elif window.type is WindowType.SLIDING:
        span, slide = F.lit(cast(int, window.span_ms)), F.lit(cast(int, window.slide_ms))
        latest = t - F.pmod(t - offset, slide)  # the latest start at or before t
        earliest = (t - span) - F.pmod(t - span - offset, slide) + slide  # the first start after t - span
        outside += [earliest < lo, latest + span > hi]
    if not outside:
        return None
    return outside[0] | outside[1]


def normalise(pipeline: Pipeline, df: DataFrame) -> DataFrame:
    """``df`` with the columns a replay computes from the input, as Spark expressions:
    ``__arr`` and ``__evt`` (arrival and event time, epoch ms), ``__batch`` and
    :data:`REJECT_REASON` (null for a row the kernel replays, else why it is rejected, or
    :data:`windowing.prewindow.FILTERED` for a row ``source.filter`` drops). ``df``: the
    events with ``source.derive``'s columns (:func:`windowing.prewindow.derive`)."""
    types = {f.name: f.dataType for f in df.schema.fields}
    src, w = pipeline.source, pipeline.window
    cols = list(df.columns)
    # Times outside [MIN_EPOCH_MS, MAX_EPOCH_MS] are null here (and rejected below), so
    # nothing computed from them (the batch, windows, lateness) can overflow.
    arr_any = epoch_ms_unchecked(src.arrival_time, types[src.arrival_time])
    out = df.withColumn(ARRIVAL_MS_COLUMN, in_range(arr_any))
    out = out.withColumn(
        EVENT_MS_COLUMN, epoch_ms(w.event_time, types[w.event_time]) if w.event_time else F.col(ARRIVAL_MS_COLUMN)
    )
    if src.batch_column:
        out = out.withColumn(BATCH_COLUMN, col(src.batch_column).cast("long"))
    else:
        # The configuration sets the interval whenever it sets no batch column.
        out = _floor_div(F, out, BATCH_COLUMN, ARRIVAL_MS_COLUMN, cast(int, src.batch_interval_ms))
    # source.filter first (windowing.prewindow): a filtered row is never rejected.
    drop = prewindow.filtered(src)
    start = F.when(drop, F.lit(prewindow.FILTERED)) if drop is not None else F
    reason = (
        start.when(col(src.arrival_time).isNull(), F.lit(ARRIVAL_NULL))
        .when(arr_any.isNull(), F.lit(ARRIVAL_UNPARSEABLE))
        .when(F.col(ARRIVAL_MS_COLUMN).isNull(), F.lit(ARRIVAL_OUT_OF_RANGE))
    )
    if w.event_time:
        reason = (
            reason.when(col(w.event_time).isNull(), F.lit(EVENT_TIME_NULL))
            .when(epoch_ms_unchecked(w.event_time, types[w.event_time]).isNull(), F.lit(EVENT_TIME_UNPARSEABLE))
            .when(F.col(EVENT_MS_COLUMN).isNull(), F.lit(EVENT_OUT_OF_RANGE))
        )
    # Then the windows the engine computes from the event time.
    outside = window_out_of_range(w, F.col(EVENT_MS_COLUMN))
    if outside is not None:
        reason = reason.when(outside, F.lit(WINDOW_OUT_OF_RANGE))
    if src.batch_column:
        reason = reason.when(col(src.batch_column).isNull(), F.lit(BATCH_NULL))
    if src.max_future_skew_ms is not None:
        reason = reason.when(
            F.col(EVENT_MS_COLUMN) - F.col(ARRIVAL_MS_COLUMN) > F.lit(src.max_future_skew_ms), F.lit(FUTURE_SKEW)
        )
    out = out.withColumn(REJECT_REASON if REJECT_REASON not in cols else "__reason_tmp", reason)
    if REJECT_REASON in cols:
        raise ConfigError(f"input column {REJECT_REASON!r} clashes with the rejected output's reason column")
    return out


def reject_committed(
    spark: SparkSession, pipeline: Pipeline, norm: DataFrame, worker_state: list[dict[str, Any]]
) -> DataFrame:
    """Rows of a batch their worker already committed in an earlier partition."""
    wcol = pipeline.source.worker
    last = {(hashable(r["worker"])): r["batch"] for r in worker_state if r["batch"] is not None}
    if not last:
        return norm
    wexpr = col(wcol) if wcol else F.lit(0)
    cond: Column | None = None
    for wv, b in last.items():
        match = wexpr.isNull() if wv is None else (wexpr == F.lit(wv))
        c = match & (F.col(BATCH_COLUMN) <= F.lit(b))
        cond = c if cond is None else (cond | c)
    assert cond is not None  # ``last`` has an entry
    return norm.withColumn(
        REJECT_REASON,
        F.when(F.col(REJECT_REASON).isNull() & cond, F.lit(BATCH_COMMITTED)).otherwise(F.col(REJECT_REASON)),
    )


# --------------------------------------------------------------------------- state


def split_state(
    spark: SparkSession,
    pipeline: Pipeline,
    state: DataFrame | None,
    events_df: DataFrame,
    summary: StateSummary | None = None,
) -> tuple[list[dict[str, Any]], DataFrame | None]:
    """Worker rows (collected: one per worker) and key/window rows (for the kernel).

    The state is checked first (:func:`state_problems`): another pipeline's state is a
    :class:`StateMismatchError`, missing columns or columns of other types than this
    pipeline writes for these inputs a :class:`~windowing.storage.errors.StateError` naming them.
    ``summary``: the state's fingerprints and worker rows when known (computed as the state
    was written: ``Staged.state_summary``); else one small Spark job reads them.
    """
    if state is None:
        return [], None
    problems = state_problems(spark, pipeline, state, events_df)  # no Spark job
    fp = pipeline.fingerprint()
    wcol = pipeline.source.worker
    if problems:
        if "fingerprint" in state.columns:  # another pipeline's state: say that, not what it lacks
            found = [r[0] for r in state.select("fingerprint").distinct().limit(3).collect()]
            if any(f != fp for f in found):
                raise StateMismatchError(mismatch_message(pipeline, found))
        raise StateError(
            f"{_state_location(state)}: the carried state does not fit pipeline {pipeline.name!r} "
            f"and these events: {'; '.join(problems)}"
        )
    found, worker_rows = (
        (list(summary.fingerprints), list(summary.worker_rows)) if summary is not None else _state_summary(state, wcol)
    )
    if any(f != fp for f in found):  # another pipeline's state
        raise StateMismatchError(mismatch_message(pipeline, found))
    types = dict(events_df.dtypes)
    worker_state = sorted(  # in worker order, however the rows were read
        (
            {
                "worker": (r[wcol] if wcol else 0),
                "batch": r["batch"],
                "watermark_ms": r["watermark_ms"],
                "clock_ms": r["clock_ms"],
            }
            for r in worker_rows
        ),
        key=lambda w: repr(hashable(w["worker"])),
    )
    kind = (
        F.when(F.col("state_kind") == KEY_KIND, F.lit(K.STATE_KEY))
        .when(F.col("state_kind") == WINDOW_KIND, F.lit(K.STATE_WINDOW))
        .otherwise(F.lit(K.STATE_EMITTED))
        .cast("byte")
    )
    keep = list(pipeline.id_columns)
    rows = state.where(F.col("state_kind") != WORKER_KIND)
    cols = [col(c).cast(types[c]).alias(c) for c in keep]
    cols += [col(c).alias(K.STATE_PREFIX + c) for c in state.columns if c not in keep and c != "fingerprint"]
    return worker_state, rows.select(*cols, kind.alias(KIND_COLUMN))


def _state_summary(state: DataFrame, wcol: str | None) -> tuple[list[str], list[Row]]:
    """``(fingerprints, worker rows)`` of a carried state that has the state's columns, in
    one job: its distinct fingerprints (at most three; none without the column) and its
    worker rows (``state_kind = 'worker'``)."""
    worker_cols = [c for c in dict.fromkeys((wcol, "batch", "watermark_ms", "clock_ms")) if c]
    rows = state.where(F.col("state_kind") == WORKER_KIND).select(F.lit(0).alias("__part"), *map(col, worker_cols))
    if "fingerprint" in state.columns:
        fps = state.select(F.lit(1).alias("__part"), F.col("fingerprint").alias("__fp")).distinct()
        rows = rows.unionByName(fps, allowMissingColumns=True)
    with session_conf(state.sparkSession, SMALL_JOB_CONF):
        collected = rows.collect()
    return [r["__fp"] for r in collected if r["__part"] == 1][:3], [r for r in collected if r["__part"] == 0]


def mismatch_message(pipeline: Pipeline, found: list[str]) -> str:
    """Why state with fingerprints ``found`` is refused, and what to do about it."""
    fp = pipeline.fingerprint()
    message = (
        f"the carried state was written by a different pipeline configuration "
        f"(state fingerprint {found}, this pipeline {fp}); replay from the first partition"
    )
    if pipeline.idle_heartbeat_ms and found == [replace(pipeline, heartbeat_ms=0).fingerprint()]:
        message += (
            f", or set replay.heartbeat: 0s to continue it as it was written (without heartbeat "
            f"ticks: before replay.heartbeat existed, or with it off; this pipeline's is "
            f"{pipeline.heartbeat_ms} ms)"
        )
    return message


def state_problems(spark: SparkSession, pipeline: Pipeline, state: DataFrame, events_df: DataFrame) -> list[str]:
    """What is wrong with the carried state's columns, one phrase each (none: it fits).

    The state must have every column of the kernel's ``Spec(pipeline, input
    types).state_schema()``, with that type: the worker and key columns with the type
    they have in these events, the partial values the type their aggregate keeps. A pandera
    schema checks it, at schema depth, on a zero-row view of the state: no data is read.
    """
    import pandera.pyspark as pdr  # noqa: PLC0415 - pandera is slow to import; only this check needs it
    from pandera.config import (  # noqa: PLC0415 - pandera is slow to import; only this check needs it
        ValidationDepth,
        config_context,
    )
    from pandera.errors import (  # noqa: PLC0415 - pandera is slow to import; only this check needs it
        SchemaError,
        SchemaErrors,
    )

    spec = K.Spec(pipeline=pipeline, input_types=arrow_types(spark, events_df))
    expected = {f.name: f.dataType for f in spark_schema(spec.state_schema()).fields}
    found = {f.name: f.dataType for f in state.schema.fields}
    schema = pdr.DataFrameSchema(
        # pandera takes a Spark DataType at runtime; its annotation lists no pyspark types.
        {c: pdr.Column(t, nullable=True, required=True) for c, t in expected.items()},  # type: ignore[arg-type]
        name=f"{pipeline.name}.state",
        strict=False,
    )
    report: Mapping[str, Any] | None
    try:
        with config_context(validation_enabled=True, validation_depth=ValidationDepth.SCHEMA_ONLY):
            # ``.pandera`` is an accessor pandera registers at runtime (statically, a Column).
            report = cast("Mapping[str, Any] | None", schema.validate(state.limit(0), lazy=True).pandera.errors)
    except (SchemaError, SchemaErrors):  # pandera versions that raise after all
        report = None
    if report is None:  # no report: the same comparison, directly
        report = {
            "SCHEMA": {
                "COLUMN_NOT_IN_DATAFRAME": [{"column": c} for c in expected if c not in found],
                "WRONG_DATATYPE": [{"column": c} for c, t in found.items() if c in expected and t != expected[c]],
            }
        }
    input_types = dict(events_df.dtypes)
    roles = {c: "key" for c in pipeline.window.keys}
    if pipeline.source.worker:
        roles[pipeline.source.worker] = "worker"
    owner = {f.name: a for a in pipeline.aggregates for f in spec.partial_fields(a)}
    out: list[str] = []
    for reason, errors in dict(report.get("SCHEMA", {})).items():
        for e in errors:
            c = e.get("column")
            if reason == "COLUMN_NOT_IN_DATAFRAME":
                what = (
                    f"the {roles[c]} column"
                    if c in roles
                    else f"the partial value of aggregate {owner[c].name!r}"
                    if c in owner
                    else ""
                )
                out.append(f"column {c!r} is missing" + (f" ({what})" if what else ""))
            elif reason == "WRONG_DATATYPE" and c in expected and c in found:
                has, want = found[c].simpleString(), expected[c].simpleString()
                if c in roles:
                    out.append(
                        f"column {c!r} (the {roles[c]} column) is {has} in the state but {input_types[c]} "
                        "in the input: its type changed since the state was written"
                    )
                elif c in owner and owner[c].column:
                    a = owner[c]
                    out.append(
                        f"column {c!r} is {has} in the state, but {a.type} over {a.column!r} "
                        f"({input_types[cast(str, a.column)]} in the input) keeps {want}"
                    )
                else:
                    out.append(f"column {c!r} is {has}; the pipeline's state has {want}")
            else:
                out.append(f"{c!r}: {e.get('error', reason)}")
    for reason, errors in dict(report).items():  # anything else pandera found
        if reason != "SCHEMA":
            out += [f"{e.get('column')!r}: {e.get('error', reason)}" for errs in dict(errors).values() for e in errs]
    return out


def _state_location(state: DataFrame) -> str:
    """The folder the state DataFrame was read from (for messages), if it was read from files."""
    try:
        files = state.inputFiles()
    except Exception:  # noqa: BLE001 - not a file-based DataFrame (Spark Connect, a local frame)
        files = []
    folders = sorted({f.rsplit("/", 1)[0] for f in files})
    return display(folders[0]) if len(folders) == 1 else "carried state"
