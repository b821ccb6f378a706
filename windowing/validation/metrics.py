"""``metrics_consistent``: metrics.json agrees with the datasets it summarises."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from windowing import prewindow
from windowing.config import Pipeline, Trigger
from windowing.contract import AGGREGATE_REASON, CLOSE_REASONS, WINDOW_COLUMNS, WINDOW_KIND
from windowing.metrics import VOLTSP_METRICS
from windowing.runner.columns import col as _col
from windowing.validation.base import (
    CheckResult,
    CountPass,
    Finish,
    Resolve,
    as_key,
    rule_holds,
    run_alone,
    skip_result,
)
from windowing.validation.recompute import canonical_rows
from windowing.validation.rules import group_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def metrics_check(pipeline: Pipeline, outputs: Any, input_df: DataFrame | None = None) -> CheckResult:
    """``metrics.json`` agrees with the datasets it summarises.

    Row counts: windows emitted (in total and per reason), snapshots, late (event,
    window) pairs, rejected and input rows, open windows. Late events: identical input
    rows are late for the same windows (same key, batch and watermark), so a group of
    identical late rows holds copies x windows rows and ``count / distinct windows``
    events. Keys held: distinct keys of the open windows. With ``atWindowEnd``, every
    closed window is emitted (``windows_closed == windows_emitted``). The ``voltsp``
    block: each total is its figure (docs/semantics.md, "Metrics") and the sum of its
    workers.
    """
    return run_alone(lambda p: plan_metrics_check(p, pipeline, outputs, input_df))[0]


def plan_metrics_check(p: CountPass, pipeline: Pipeline, outputs: Any, input_df: DataFrame | None) -> Finish:
    """:func:`metrics_check`, planned on ``p``: every count it compares is a sum of the pass."""
    name, desc = "metrics_consistent", "metrics.json counts equal the written datasets' row counts"
    m = getattr(outputs, "metrics", None)
    if not m:
        path = getattr(outputs, "path", None)
        where = f"{str(path).rstrip('/')}/metrics.json is missing" if path else "the outputs carry none"
        carried = " and no commit record carries them" if path else ""
        return lambda: [skip_result(name, desc, f"no metrics: {where}{carried}")]
    reason = _col("emit_reason")
    a = p.add(
        outputs.aggregates,
        {
            "emitted": F.when(rule_holds(reason == AGGREGATE_REASON), 0).otherwise(1),
            "snapshots": F.when(rule_holds(reason == AGGREGATE_REASON), 1).otherwise(0),
            **{r: F.when(rule_holds(reason == r), 1).otherwise(0) for r in CLOSE_REASONS},
        },
    )
    late = outputs.late_events
    window_cols = WINDOW_COLUMNS
    exact = canonical_rows(late)

    def windows(c: Resolve) -> dict[str, Column]:  # count / countDistinct(window_start, window_end), in one groupBy
        ws, we = (c(x) for x in window_cols)
        return {
            "rows": F.count(F.lit(1)),
            "windows": F.size(F.collect_set(F.when(ws.isNotNull() & we.isNotNull(), F.struct(ws, we)))),
        }

    _, late_sums = p.group(
        exact,
        [_col(c) for c in exact.columns if c not in window_cols],
        windows,
        values=lambda g: {"events": g("rows") / g("windows")},
    )
    late_rows = p.add(late, {"rows": F.lit(1)})
    rejected_rows = p.add(outputs.rejected, {"rows": F.lit(1)})
    state = p.add(outputs.state, {"open": F.when(_col("state_kind") == WINDOW_KIND, 1)})
    keys = group_columns(pipeline)
    held_sums = None
    if keys:
        open_windows = outputs.state.where(_col("state_kind") == WINDOW_KIND)
        types = {f.name: f.dataType for f in open_windows.schema.fields}
        _, held_sums = p.group(
            open_windows,
            [as_key(_col(c), types[c]).alias(c) for c in keys],
            aggs=lambda c: {"rows": F.count(F.lit(1))},
            values=lambda g: {"keys": F.lit(1)},
        )
    input_rows = p.add(input_df, {"rows": F.lit(1)}) if input_df is not None else None
    drop = prewindow.filtered(pipeline.source)
    filtered_rows = (
        p.add(input_df.where(drop), {"rows": F.lit(1)}) if input_df is not None and drop is not None else None
    )

    def finish() -> list[CheckResult]:
        late_events = late_sums["events"]
        open_windows = int(state["open"])
        held = int(held_sums["keys"]) if held_sums is not None else min(open_windows, 1)
        emitted = int(a["emitted"])
        found = {
            "windows_emitted": emitted,
            "emitted_by_reason": {r: int(a[r]) for r in CLOSE_REASONS if a[r]},
            "snapshots_emitted": int(a["snapshots"]),
            "late_event_windows": int(late_rows["rows"]),
            "late_events": int(late_events) if float(late_events).is_integer() else late_events,
            "rejected_rows": int(rejected_rows["rows"]),
            "open_windows": open_windows,
            "keys_held": held,
        }
        if Trigger.AT_WINDOW_END in pipeline.triggers:
            found["windows_closed"] = emitted
            found["closed_by_reason"] = found["emitted_by_reason"]
        if input_rows is not None:
            found["input_rows"] = int(input_rows["rows"])
        if filtered_rows is not None:
            found["filtered_rows"] = int(filtered_rows["rows"])
        return [_compare(name, desc, outputs.metrics, found)]  # a KeyedPass's partition's

    return finish


def _compare(name: str, desc: str, m: dict[str, Any], found: dict[str, Any]) -> CheckResult:
    """The metrics ``m`` against the counts ``found`` and the ``voltsp`` block against its figures."""
    wrong = [{"metric": k, "metrics.json": m.get(k), "dataset": v} for k, v in found.items() if m.get(k) != v]
    block = m.get("voltsp") or {}
    for metric in VOLTSP_METRICS:
        entry = block.get(metric.name) or {}
        try:
            figure = metric.value(m)
        except (KeyError, TypeError):  # a figure missing from metrics.json
            figure = None
        workers = sum((entry.get("by_worker") or {}).values())
        if entry.get("total") is None or entry.get("total") != figure or workers != entry.get("total"):
            wrong.append(
                {
                    "metric": f"voltsp.{metric.name}",
                    "metrics.json": entry.get("total"),
                    "figures": figure,
                    "sum of workers": workers,
                }
            )
    return CheckResult(name, not wrong, len(wrong), wrong, desc)
