"""The Spark rule checks of the input and of each output (aggregates, late_events,
state, rejected)."""

from __future__ import annotations

import sys
from types import EllipsisType
from typing import TYPE_CHECKING, Collection

from pyspark.sql import functions as F

from windowing.config import Aggregate, Lateness, Pipeline, Trigger, WindowType
from windowing.contract import (
    AGGREGATE_REASON,
    BATCH_COMMITTED,
    EMITTED_KIND,
    END_OF_INPUT_REASON,
    IDLE_REASON,
    MAX_DURATION_REASON,
    REJECT_REASONS,
    STATE_KINDS,
    WATERMARK_REASON,
    WINDOW_COLUMNS,
    WINDOW_KIND,
)
from windowing.runner.columns import col as _col
from windowing.runner.columns import epoch_ms
from windowing.validation.base import (
    DEFAULT_MAX_SKEW_MS,
    DEFAULT_SAMPLE_SIZE,
    CheckResult,
    CountPass,
    Finish,
    Rule,
    all_of,
    any_of,
    col_ms,
    duplicates_check,
    rule_checks,
    rule_holds,
    run_alone,
    skip_result,
    then,
    wanted,
)
from windowing.validation.schemas import (
    aggregates_schema,
    input_schema,
    late_schema,
    pandera_check,
    rejected_schema,
    schema_check,
    state_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


def _aggregate_names(pipeline: Pipeline, typ: str, column: str | None | EllipsisType = ...) -> list[Aggregate]:
    """The aggregates of type ``typ`` (over ``column``, if given: None for a plain count)."""
    anyc = isinstance(column, EllipsisType)
    return [a for a in pipeline.aggregates if a.type == typ and (anyc or a.column == column)]


def plain_count(pipeline: Pipeline) -> Aggregate | None:
    found = _aggregate_names(pipeline, "count", None)
    return found[0] if found else None


def group_columns(pipeline: Pipeline) -> list[str]:
    return list(pipeline.id_columns)


def allowed_reasons(pipeline: Pipeline) -> list[str]:
    """The ``emit_reason`` values this pipeline's output may hold."""
    w = pipeline.window
    out = []
    if Trigger.AT_WINDOW_END in pipeline.triggers:
        out += [WATERMARK_REASON, END_OF_INPUT_REASON]
        if w.idle_timeout_ms is not None:
            out.append(IDLE_REASON)
        if w.type is WindowType.SESSION and w.maximum_duration_ms:
            out.append(MAX_DURATION_REASON)
    if Trigger.AT_AGGREGATE in pipeline.triggers:
        out.append(AGGREGATE_REASON)
    return out


def input_checks(
    pipeline: Pipeline,
    events_df: DataFrame,
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    only: Collection[str] | None = None,
) -> list[CheckResult]:
    """Checks of a pipeline's input events.

    * ``input_schema`` (pandera): configured columns present with usable types, arrival
      time non-null;
    * ``input_times_parseable``: arrival and event times present and parseable (rows
      failing this go to ``rejected``);
    * ``input_event_time_skew``: ``|event time - arrival time| <= max_skew_ms``.
    """
    return run_alone(lambda p: plan_input_checks(p, pipeline, events_df, max_skew_ms, sample_size, only))


def plan_input_checks(
    p: CountPass,
    pipeline: Pipeline,
    events_df: DataFrame,
    max_skew_ms: int,
    sample_size: int,
    only: Collection[str] | None,
) -> Finish:
    """:func:`input_checks`, planned on ``p``."""
    types = {f.name: f.dataType for f in events_df.schema.fields}
    out: list[Finish] = []
    if wanted(only, "input_schema"):
        out.append(
            pandera_check(
                p,
                "input_schema",
                "configured columns present, with usable types",
                input_schema(pipeline, types),
                events_df,
                sample_size,
            )
        )
    src, w = pipeline.source, pipeline.window
    names = [src.arrival_time] + ([w.event_time] if w.event_time else [])
    if any(c not in types for c in names):
        missing = ", ".join(c for c in names if c not in types)
        skipped = [
            skip_result(n, "arrival/event times present, parseable and close", f"missing {missing}")
            for n in ("input_times_parseable", "input_event_time_skew")
            if wanted(only, n)
        ]
        return then(*out, lambda: skipped)
    arr = epoch_ms(src.arrival_time, types[src.arrival_time])
    evt = epoch_ms(w.event_time, types[w.event_time]) if w.event_time else arr
    rules = [
        Rule(
            "input_times_parseable",
            "arrival and event times present and parseable (failing rows are rejected by the replay)",
            arr.isNotNull() & evt.isNotNull(),
        ),
        Rule(
            "input_event_time_skew",
            f"|event time - arrival time| <= {max_skew_ms} ms (max_skew)",
            F.abs(evt - arr) <= F.lit(int(max_skew_ms)) if w.event_time else None,
            applies=arr.isNotNull() & evt.isNotNull(),
            why_skipped="processing time: event time is the arrival time",
        ),
    ]
    return then(*out, rule_checks(p, events_df, rules, sample_size, only))


def aggregates_checks(
    pipeline: Pipeline,
    aggregates: DataFrame,
    input_types: dict[str, DataType] | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    only: Collection[str] | None = None,
) -> list[CheckResult]:
    """Checks of the ``aggregates`` output (emitted windows and ``AGGREGATE`` snapshots)."""
    return run_alone(lambda p: plan_aggregates_checks(p, pipeline, aggregates, input_types, sample_size, only))


def plan_aggregates_checks(
    p: CountPass,
    pipeline: Pipeline,
    aggregates: DataFrame,
    input_types: dict[str, DataType] | None,
    sample_size: int,
    only: Collection[str] | None,
) -> Finish:
    """:func:`aggregates_checks`, planned on ``p``."""
    w = pipeline.window
    session = w.type is WindowType.SESSION
    schema = schema_check(
        p,
        "aggregates_schema",
        "columns and types of the kernel's aggregates schema; "
        "bounds, reason, batch, emit time, emission non-null; emission >= 1",
        "columns and types of aggregates",
        aggregates_schema,
        pipeline,
        aggregates,
        input_types,
        sample_size,
        only,
    )
    ws, we, wm = col_ms("window_start"), col_ms("window_end"), col_ms("emit_watermark")
    reason = _col("emit_reason")
    rules = [
        Rule(
            "aggregates_window_bounds",
            "window_end >= window_start (sessions)" if session else "window_end > window_start",
            (we >= ws) if session else (we > ws),
        ),
    ]
    if w.type is WindowType.SESSION:
        rules.append(
            Rule(
                "aggregates_window_span",
                "session span window_end - window_start < maximumDuration",
                (we - ws) < F.lit(w.maximum_duration_ms) if w.maximum_duration_ms else None,
                why_skipped="sessions without maximumDuration have no span bound",
            )
        )
    else:
        step = w.span_ms if w.type is WindowType.TUMBLING else w.slide_ms
        rules.append(
            Rule(
                "aggregates_window_span",
                f"window_end - window_start == {w.span_ms} ms and window_start aligned to "
                f"{step} ms (+ offset {w.offset_ms} ms)",
                ((we - ws) == F.lit(w.span_ms)) & (F.pmod(ws - F.lit(w.offset_ms), F.lit(step)) == 0),
            )
        )
    counts = _aggregate_names(pipeline, "count", None)
    rules.append(
        Rule(
            "aggregates_count_positive",
            "count >= 1 (every window holds an event)",
            all_of([_col(a.name) >= 1 for a in counts]),
            why_skipped="no plain count aggregate",
        )
    )
    rules.append(_min_avg_max_rule(pipeline))
    rules.append(_distinct_rule(pipeline))
    gap = w.idle_timeout_ms if session else 0
    wm_ok = F.when(reason == WATERMARK_REASON, wm >= we + F.lit(gap))
    if session and w.maximum_duration_ms:
        wm_ok = wm_ok.when(reason == MAX_DURATION_REASON, wm >= ws + F.lit(w.maximum_duration_ms))
    rules.append(
        Rule(
            "aggregates_emit_watermark",
            "WATERMARK emissions: emit_watermark >= window_end"
            + (" + gap" if session else "")
            + (
                "; MAX_DURATION: emit_watermark >= window_start + maximumDuration"
                if session and w.maximum_duration_ms
                else ""
            ),
            wm_ok.otherwise(F.lit(True)),
        )
    )
    allowed = allowed_reasons(pipeline)
    rules.append(Rule("aggregates_emit_reason", f"emit_reason in {allowed}", reason.isin(allowed)))
    out = [schema, rule_checks(p, aggregates, rules, sample_size, only)]
    key = group_columns(pipeline) + [*WINDOW_COLUMNS, "emission"]
    if wanted(only, "aggregates_unique_emission"):
        out.append(
            duplicates_check(
                p,
                "aggregates_unique_emission",
                f"({', '.join(key)}) unique among emitted (non-AGGREGATE) rows",
                aggregates.where(~rule_holds(reason == AGGREGATE_REASON)),
                key,
                sample_size,
            )
        )
    return then(*out)


def _min_avg_max_rule(pipeline: Pipeline) -> Rule:
    """min <= avg <= max over one column, with values ordered as Spark orders them.

    * NaN equals NaN and is greater than every other value, +inf included; ``-0.0``
      equals ``0.0``. So a NaN amount makes ``max`` (and the sum) NaN, and ``min``
      ignores it unless every amount is NaN; ``min <= max`` always holds.
    * A finite avg lies within a relative 1e-9 of finite bounds (a float average of
      equal values may round past them).
    * avg is the sum (an IEEE left fold, like Spark's) over the count, so it is NaN or
      infinite exactly when the sum is, which needs a cause the bounds show: NaN needs
      a NaN amount (max NaN) or a +inf and a -inf (each an amount or an overflowing
      sum); +inf needs max +inf or an overflow (count x max >= the largest double) and
      no -inf; -inf the mirror image. Without a plain count any overflow is possible.
    """
    inf, top = float("inf"), sys.float_info.max
    plain = plain_count(pipeline)
    n = _col(plain.name).cast("double") if plain is not None else None

    def num(a: Aggregate) -> Column:
        return _col(a.name).cast("double")

    def nan(x: Column) -> Column:
        return F.isnan(x)

    def finite(x: Column) -> Column:
        return ~nan(x) & (F.abs(x) != F.lit(inf))

    def reaches_up(hi: Column) -> Column:  # the sum can be +inf: an amount is, or it can overflow
        grow = (hi * n >= F.lit(top)) if n is not None else (hi > 0)
        return ~nan(hi) & ((hi == F.lit(inf)) | grow)

    def reaches_down(lo: Column) -> Column:
        grow = (lo * n <= F.lit(-top)) if n is not None else (lo < 0)
        return ~nan(lo) & ((lo == F.lit(-inf)) | grow)

    def every(conds: list[Column]) -> Column:
        out = all_of(conds) if conds else F.lit(True)
        assert out is not None
        return out

    conds = []
    for col in dict.fromkeys(a.column for a in pipeline.aggregates if a.column):
        mins, maxs, avgs = (_aggregate_names(pipeline, t, col) for t in ("min", "max", "avg"))
        for lo in mins:
            for hi in maxs:
                conds.append(
                    F.when(_col(lo.name).isNull() | _col(hi.name).isNull(), True).otherwise(
                        _col(lo.name) <= _col(hi.name)
                    )
                )
        for av in avgs:
            if not (mins or maxs):
                continue
            a = num(av)
            los, his = [num(x) for x in mins], [num(x) for x in maxs]

            def tol(b: Column) -> Column:
                return F.lit(1e-9) * F.greatest(F.abs(b), F.lit(1.0))

            within = every(
                [finite(lo) & (lo <= a + tol(lo)) for lo in los] + [finite(hi) & (a - tol(hi) <= hi) for hi in his]
            )
            nan_ok = every([nan(hi) | (reaches_up(hi) & every([reaches_down(lo) for lo in los])) for hi in his])
            up_ok = every([reaches_up(hi) for hi in his] + [~nan(lo) & (lo != F.lit(-inf)) for lo in los])
            down_ok = every([reaches_down(lo) for lo in los] + [~nan(hi) & (hi != F.lit(inf)) for hi in his])
            null = any_of([_col(x.name).isNull() for x in (av, *mins, *maxs)])
            conds.append(
                F.when(null, True)
                .when(nan(a), nan_ok)
                .when(a == F.lit(inf), up_ok)
                .when(a == F.lit(-inf), down_ok)
                .otherwise(within)
            )
    return Rule(
        "aggregates_min_avg_max",
        "min <= avg <= max over the same column (Spark's order: NaN above +inf, -0.0 == 0.0; "
        "a NaN or infinite avg only with the amounts or overflow that explain it)",
        all_of(conds),
        why_skipped="no two of min/avg/max over one column",
    )


def _distinct_rule(pipeline: Pipeline) -> Rule:
    conds = []
    plain = plain_count(pipeline)
    for d in _aggregate_names(pipeline, "distinct"):
        same = _aggregate_names(pipeline, "count", d.column)
        for cnt in same or ([plain] if plain else []):
            conds.append(F.when(_col(cnt.name).isNull(), True).otherwise(_col(d.name) <= _col(cnt.name)))
    return Rule(
        "aggregates_distinct_le_count",
        "distinct <= count",
        all_of(conds),
        why_skipped="no distinct aggregate with a count to compare",
    )


def _event_ms_in(pipeline: Pipeline, df: DataFrame) -> Column | None:
    """The event time (ms) of rows carrying the input columns, or None if absent."""
    col = pipeline.window.event_time or pipeline.source.arrival_time
    types = {f.name: f.dataType for f in df.schema.fields}
    return epoch_ms(col, types[col]) if col in types else None


def late_checks(
    pipeline: Pipeline,
    late: DataFrame,
    input_types: dict[str, DataType] | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    only: Collection[str] | None = None,
) -> list[CheckResult]:
    """Checks of ``late_events``: the lateness rule of the pipeline's mode, ``lateness_ms``,
    and that each row names a window its event belongs to."""
    return run_alone(lambda p: plan_late_checks(p, pipeline, late, input_types, sample_size, only))


def plan_late_checks(
    p: CountPass,
    pipeline: Pipeline,
    late: DataFrame,
    input_types: dict[str, DataType] | None,
    sample_size: int,
    only: Collection[str] | None,
) -> Finish:
    """:func:`late_checks`, planned on ``p``."""
    w = pipeline.window
    session = w.type is WindowType.SESSION
    schema = schema_check(
        p,
        "late_events_schema",
        "columns and types of the kernel's late_events schema",
        "columns and types of late_events",
        late_schema,
        pipeline,
        late,
        input_types,
        sample_size,
        only,
    )
    t = _event_ms_in(pipeline, late)
    ws, we, wm = col_ms("window_start"), col_ms("window_end"), col_ms("watermark")
    no_t = "the event time column is not in late_events"
    if w.lateness is Lateness.WINDOW_CLOSED:
        if session:
            rule = Rule(
                "late_rule",
                "WINDOW_CLOSED sessions: event time + gap <= watermark",
                (t + F.lit(w.idle_timeout_ms) <= wm) if t is not None else None,
                why_skipped=no_t,
            )
        else:
            rule = Rule("late_rule", "WINDOW_CLOSED: window_end <= watermark", we <= wm)
    else:
        rule = Rule(
            "late_rule",
            "BEFORE_WATERMARK: event time < watermark",
            (t < wm) if t is not None else None,
            why_skipped=no_t,
        )
    if session:
        member = (ws == t) & (we == t) if t is not None else None
        member_desc = "session late rows: window_start == window_end == event time"
    else:
        step = w.span_ms if w.type is WindowType.TUMBLING else w.slide_ms
        member = (
            None
            if t is None
            else (
                (ws <= t)
                & (t < we)
                & ((we - ws) == F.lit(w.span_ms))
                & (F.pmod(ws - F.lit(w.offset_ms), F.lit(step)) == 0)
            )
        )
        member_desc = "the event belongs to the (aligned) window it is late for"
    rules = [
        rule,
        Rule(
            "late_lateness_ms",
            "lateness_ms == watermark - event time",
            (_col("lateness_ms") == wm - t) if t is not None else None,
            why_skipped=no_t,
        ),
        Rule("late_window_membership", member_desc, member, why_skipped=no_t),
    ]
    return then(schema, rule_checks(p, late, rules, sample_size, only))


def state_checks(
    pipeline: Pipeline,
    state: DataFrame,
    input_types: dict[str, DataType] | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    only: Collection[str] | None = None,
) -> list[CheckResult]:
    """Checks of ``state``: kinds, one (this pipeline's) fingerprint, window bounds, and
    no duplicate worker, key or window rows."""
    return run_alone(lambda p: plan_state_checks(p, pipeline, state, input_types, sample_size, only))


def plan_state_checks(
    p: CountPass,
    pipeline: Pipeline,
    state: DataFrame,
    input_types: dict[str, DataType] | None,
    sample_size: int,
    only: Collection[str] | None,
) -> Finish:
    """:func:`state_checks`, planned on ``p``."""
    session = pipeline.window.type is WindowType.SESSION
    schema = schema_check(
        p,
        "state_schema",
        "columns and types of the kernel's state schema; state_kind and fingerprint non-null",
        "columns and types of state",
        state_schema,
        pipeline,
        state,
        input_types,
        sample_size,
        only,
    )
    kind = _col("state_kind")
    ws, we = _col("window_start_ms"), _col("window_end_ms")
    fp = pipeline.fingerprint()
    bounds = (we >= ws) if session else (we > ws)
    rules = [
        Rule("state_kind", f"state_kind in {list(STATE_KINDS)}", kind.isin(list(STATE_KINDS))),
        Rule("state_fingerprint", f"one fingerprint, this pipeline's ({fp})", _col("fingerprint") == F.lit(fp)),
        Rule(
            "state_window_bounds",
            "window/emitted rows: window_end_ms " + (">=" if session else ">") + " window_start_ms; "
            "open windows hold events >= 1; emitted counters >= 1",
            bounds & F.when(kind == WINDOW_KIND, _col("events") >= 1).otherwise(_col("emissions") >= 1),
            applies=kind.isin(WINDOW_KIND, EMITTED_KIND),
        ),
    ]
    out = [schema, rule_checks(p, state, rules, sample_size, only)]
    if not wanted(only, "state_unique"):
        return then(*out)
    # A window is either open or a re-openable emitted counter, never both, never twice.
    cls = F.when(kind.isin(WINDOW_KIND, EMITTED_KIND), F.lit(WINDOW_KIND)).otherwise(kind)
    key = group_columns(pipeline)
    keyed = state.select(
        *p.carry, cls.alias("state_class"), *[_col(c) for c in key], "window_start_ms", "window_end_ms"
    )
    out.append(
        duplicates_check(
            p,
            "state_unique",
            "no duplicate worker, key or (worker, key, window) rows",
            keyed,
            ["state_class", *key, "window_start_ms", "window_end_ms"],
            sample_size,
        )
    )
    return then(*out)


def rejected_checks(
    pipeline: Pipeline,
    rejected: DataFrame,
    input_types: dict[str, DataType] | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    only: Collection[str] | None = None,
) -> list[CheckResult]:
    """Checks of ``rejected``: the schema, known reasons, and no rows of batches already
    committed (``rejected_batch_committed``: one of :data:`~windowing.validation.registry.REJECTING_CHECKS`)."""
    return run_alone(lambda p: plan_rejected_checks(p, pipeline, rejected, input_types, sample_size, only))


def plan_rejected_checks(
    p: CountPass,
    pipeline: Pipeline,
    rejected: DataFrame,
    input_types: dict[str, DataType] | None,
    sample_size: int,
    only: Collection[str] | None,
) -> Finish:
    """:func:`rejected_checks`, planned on ``p``."""
    schema = schema_check(
        p,
        "rejected_schema",
        "the input columns and a non-null reason",
        "the input columns and a reason",
        rejected_schema,
        pipeline,
        rejected,
        input_types,
        sample_size,
        only,
    )
    rules = [
        Rule("rejected_reason", f"reason in {list(REJECT_REASONS)}", _col("reason").isin(list(REJECT_REASONS))),
        Rule(
            "rejected_batch_committed",
            f"no row rejected as {BATCH_COMMITTED!r}: arrivals of a batch their worker committed in an "
            "earlier partition (events filed in a later day's folder, or a partition replayed again "
            "from its own state)",
            _col("reason").isNull() | (_col("reason") != F.lit(BATCH_COMMITTED)),
        ),
    ]
    return then(schema, rule_checks(p, rejected, rules, sample_size, only))
