"""The conservation check: every valid input event is accounted for exactly once
(see :mod:`windowing.validation`)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pyspark.sql import functions as F

from windowing import prewindow
from windowing.config import Aggregate, Pipeline, Trigger, WindowType
from windowing.contract import AGGREGATE_REASON, WINDOW_KIND
from windowing.runner.columns import col as _col
from windowing.runner.columns import epoch_ms
from windowing.validation.base import (
    DEFAULT_SAMPLE_SIZE,
    CheckResult,
    CountPass,
    Finish,
    PassSums,
    Resolve,
    any_of,
    as_key,
    col_ms,
    jsonable,
    rule_holds,
    run_alone,
    skip_result,
)
from windowing.validation.rules import group_columns, plain_count

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType


def _memberships(
    pipeline: Pipeline, df: DataFrame, key_types: dict[str, DataType], sign: int, source: str, carry: list[str]
) -> DataFrame:
    """One row per (event, window) pair of the rows of ``df`` that can be processed (with
    the columns ``carry`` of the pass, :attr:`CountPass.carry`)."""
    w, src = pipeline.window, pipeline.source
    types = {f.name: f.dataType for f in df.schema.fields}
    arr = epoch_ms(src.arrival_time, types[src.arrival_time])
    t = epoch_ms(w.event_time, types[w.event_time]) if w.event_time else arr
    valid = arr.isNotNull() & t.isNotNull()
    if src.batch_column:
        valid = valid & _col(src.batch_column).isNotNull()
    keys = [_col(c).cast(key_types[c]).alias(c) for c in key_types]
    base = df.where(valid).select(*carry, *keys, t.alias("__t"))
    mine = [*carry, *key_types]
    tcol = F.col("__t")
    if w.type is WindowType.SESSION:
        ws = we = F.lit(None).cast("long")
        return base.select(
            *map(_col, mine),
            ws.alias("ws"),
            we.alias("we"),
            F.lit(source).alias("source"),
            F.lit(sign).cast("long").alias("n"),
        )
    S, off = w.span_ms, w.offset_ms
    L = w.span_ms if w.type is WindowType.TUMBLING else w.slide_ms
    assert S is not None and L is not None  # tumbling and sliding windows have both
    last = tcol - F.pmod(tcol - F.lit(off), F.lit(L))  # the latest window start <= t
    k = -(-S // L)  # windows an event can belong to, at most
    starts = F.sequence(last - F.lit((k - 1) * L), last, F.lit(L))
    ex = base.select(*map(_col, mine), tcol, F.explode(starts).alias("ws")).where(F.col("ws") + F.lit(S) > tcol)
    return ex.select(
        *map(_col, mine),
        "ws",
        (F.col("ws") + F.lit(S)).alias("we"),
        F.lit(source).alias("source"),
        F.lit(sign).cast("long").alias("n"),
    )


@dataclass(frozen=True)
class _Plan:
    """How conservation is counted for one pipeline: by the emitted windows' plain count
    (``counts``, with the open windows of the state), by the ``atAggregate`` snapshots, or
    both; per (worker, key) for sessions, per (worker, key, window) otherwise."""

    pipeline: Pipeline
    key_types: dict[str, DataType]
    plain: Aggregate | None
    by_counts: bool
    by_snapshots: bool
    #: The pass's columns every side keeps (:attr:`CountPass.carry`).
    carry: tuple[str, ...] = ()

    @property
    def session(self) -> bool:
        return self.pipeline.window.type is WindowType.SESSION

    def rows(self, df: DataFrame, ws: Column, we: Column, n: Column, source: str) -> DataFrame:
        """``df`` as signed counts per (keys, window) labelled ``source``."""
        if self.session:
            ws = we = F.lit(None).cast("long")
        kcols = [_col(c).cast(t).alias(c) for c, t in self.key_types.items()]
        return df.select(
            *self.carry,
            *kcols,
            ws.alias("ws"),
            we.alias("we"),
            F.lit(source).alias("source"),
            n.cast("long").alias("n"),
        )


def _description(session: bool, by_counts: bool) -> str:
    per = "(worker, key)" if session else "(worker, key, window)"
    if by_counts:
        return (
            "input memberships - filtered - rejected + open events(previous state) == emitted counts "
            "+ open events(state) + late rows, per " + per
        )
    return "input memberships - filtered - rejected == AGGREGATE snapshots + late rows, per " + per


def _parts(plan: _Plan, outputs: Any, input_df: DataFrame, prev_state: DataFrame | None) -> list[DataFrame]:
    """The signed rows of every side of the balance: input and rejected memberships, late
    rows, and (by counts) emitted counts and open events, (by snapshots) the snapshots."""
    pipeline = plan.pipeline
    parts = [
        _memberships(pipeline, input_df, plan.key_types, 1, "input", list(plan.carry)),
        *(
            [_memberships(pipeline, input_df.where(drop), plan.key_types, -1, "filtered", list(plan.carry))]
            if (drop := prewindow.filtered(pipeline.source)) is not None
            else []
        ),
        _memberships(pipeline, outputs.rejected, plan.key_types, -1, "rejected", list(plan.carry)),
        plan.rows(outputs.late_events, col_ms("window_start"), col_ms("window_end"), F.lit(-1), "late"),
    ]
    reason = _col("emit_reason")
    aggs = outputs.aggregates
    if plan.by_counts:
        assert plan.plain is not None
        emitted = aggs.where(~rule_holds(reason == AGGREGATE_REASON))
        parts.append(
            plan.rows(emitted, col_ms("window_start"), col_ms("window_end"), -_col(plan.plain.name), "emitted")
        )
        st = outputs.state.where(_col("state_kind") == WINDOW_KIND)
        parts.append(plan.rows(st, _col("window_start_ms"), _col("window_end_ms"), -_col("events"), "open"))
        if prev_state is not None:
            pst = prev_state.where(_col("state_kind") == WINDOW_KIND)
            parts.append(plan.rows(pst, _col("window_start_ms"), _col("window_end_ms"), _col("events"), "prev_open"))
    if plan.by_snapshots:
        snaps = aggs.where(rule_holds(reason == AGGREGATE_REASON))
        parts.append(plan.rows(snaps, col_ms("window_start"), col_ms("window_end"), F.lit(-1), "snapshots"))
    return parts


def _unbalanced(p: CountPass, plan: _Plan, parts: list[DataFrame]) -> tuple[Callable[[], DataFrame], PassSums]:
    """The groups whose balance (by counts, by snapshots) is not zero, with each side (a
    function giving them), and (on ``p``) how many there are."""
    allrows = parts[0]
    for part in parts[1:]:
        allrows = allrows.unionByName(part)
    balances = (["balance"] if plan.by_counts else []) + (["balance_snapshots"] if plan.by_snapshots else [])

    def sides(c: Resolve) -> dict[str, Column]:
        src = c("source")

        def side(*names: str) -> Column:
            return F.sum(F.when(src.isin(*names), c("n")).otherwise(0))

        out = {
            "input": side("input"),
            "filtered": -side("filtered"),
            "rejected": -side("rejected"),
            "prev_open": side("prev_open"),
            "emitted": -side("emitted"),
            "open": -side("open"),
            "late": -side("late"),
            "snapshots": -side("snapshots"),
        }
        if plan.by_counts:
            out["balance"] = side("input", "filtered", "rejected", "prev_open", "emitted", "open", "late")
        if plan.by_snapshots:
            out["balance_snapshots"] = side("input", "filtered", "rejected", "late", "snapshots")
        return out

    group = [as_key(_col(c), t).alias(c) for c, t in plan.key_types.items()]
    group += [] if plan.session else [_col("ws"), _col("we")]
    return p.group(
        allrows,
        group,
        sides,
        having=lambda g: any_of([g(n) != 0 for n in balances]),
        values=lambda g: {"groups": F.lit(1)},
    )


def _sample(bad: DataFrame, sample_size: int) -> list[dict[str, Any]]:
    """Failing groups as plain dicts, window bounds as timestamps."""
    sample = []
    for r in bad.limit(sample_size).collect():
        d = r.asDict(recursive=True)
        for short, full in (("ws", "window_start"), ("we", "window_end")):
            v = d.pop(short, None)
            if v is not None:
                d[full] = _dt.datetime.fromtimestamp(v / 1000, tz=_dt.timezone.utc)
        sample.append(jsonable(d))
    return sample


def conservation_check(
    pipeline: Pipeline,
    outputs: Any,
    input_df: DataFrame | None,
    prev_state: DataFrame | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> CheckResult:
    """Every valid input event is accounted for exactly once (see the package docstring):
    filtered (``source.filter``), rejected, or in a window (emitted, open, late).
    ``input_df``: the events with ``source.derive``'s columns (:func:`windowing.prewindow.derive`).

    Balances are per (worker, key, window) for tumbling/sliding windows and per
    (worker, key) for sessions; a failing group's sample shows each side.
    """
    return run_alone(lambda p: plan_conservation_check(p, pipeline, outputs, input_df, prev_state, sample_size))[0]


def plan_conservation_check(
    p: CountPass,
    pipeline: Pipeline,
    outputs: Any,
    input_df: DataFrame | None,
    prev_state: DataFrame | None,
    sample_size: int,
) -> Finish:
    """:func:`conservation_check`, planned on ``p``."""
    name = "conservation"
    session = pipeline.window.type is WindowType.SESSION
    desc = _description(session, by_counts=True)
    if input_df is None:
        return lambda: [skip_result(name, desc, "no input given")]
    plain = plain_count(pipeline)
    by_counts = Trigger.AT_WINDOW_END in pipeline.triggers and plain is not None
    by_snapshots = Trigger.AT_AGGREGATE in pipeline.triggers
    if not (by_counts or by_snapshots):
        return lambda: [
            skip_result(name, desc, "no plain count aggregate and no atAggregate snapshots to count events")
        ]
    in_types = {f.name: f.dataType for f in input_df.schema.fields}
    missing = [c for c in pipeline.input_columns if c not in in_types]
    if missing:
        return lambda: [skip_result(name, desc, f"input lacks configured column(s) {', '.join(missing)}")]
    plan = _Plan(
        pipeline, {c: in_types[c] for c in group_columns(pipeline)}, plain, by_counts, by_snapshots, tuple(p.carry)
    )
    bad, sums = _unbalanced(p, plan, _parts(plan, outputs, input_df, prev_state))
    by = " and ".join(k for k, on in (("counts", by_counts), ("snapshots", by_snapshots)) if on)

    def finish() -> list[CheckResult]:
        n = int(sums["groups"])
        sample = _sample(bad(), sample_size) if n else []
        return [CheckResult(name, n == 0, n, sample, _description(session, by_counts) + f" (by {by})")]

    return finish
