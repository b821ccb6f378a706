"""``metrics_consistent``: metrics.json agrees with the datasets it summarises."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from windowing.columns import col as _col
from windowing.config import Pipeline, Trigger
from windowing.contract import AGGREGATE_REASON, CLOSE_REASONS
from windowing.metrics import VOLTSP_METRICS
from windowing.validation.base import CheckResult, _holds, _skip, as_key
from windowing.validation.recompute import canonical_rows
from windowing.validation.rules import _group_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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
    name, desc = "metrics_consistent", "metrics.json counts equal the written datasets' row counts"
    m = getattr(outputs, "metrics", None)
    if not m:
        path = getattr(outputs, "path", None)
        where = f"{str(path).rstrip('/')}/metrics.json is missing" if path else "the outputs carry none"
        carried = " and no commit record carries them" if path else ""
        return _skip(name, desc, f"no metrics: {where}{carried}")
    reason = _col("emit_reason")
    a = outputs.aggregates.agg(
        F.sum(F.when(_holds(reason == AGGREGATE_REASON), 0).otherwise(1)).alias("emitted"),
        F.sum(F.when(_holds(reason == AGGREGATE_REASON), 1).otherwise(0)).alias("snapshots"),
        *[F.sum(F.when(_holds(reason == r), 1).otherwise(0)).alias(r) for r in CLOSE_REASONS]).first()
    late = outputs.late_events
    window_cols = ("window_start", "window_end")
    exact = canonical_rows(late)
    per_row = exact.groupBy(*[_col(c) for c in exact.columns if c not in window_cols]).agg(
        (F.count(F.lit(1)) / F.countDistinct(*[_col(c) for c in window_cols])).alias("events"))
    total = per_row.agg(F.sum("events")).first()
    late_events = (total[0] if total is not None else 0) or 0
    open_windows = outputs.state.where(_col("state_kind") == "window")
    keys = _group_columns(pipeline)
    if keys:
        types = {f.name: f.dataType for f in open_windows.schema.fields}
        held = open_windows.select(*[as_key(_col(c), types[c]).alias(c) for c in keys]).distinct().count()
    else:
        held = min(open_windows.count(), 1)
    emitted = int(a["emitted"] or 0)
    found = {
        "windows_emitted": emitted,
        "emitted_by_reason": {r: int(a[r]) for r in CLOSE_REASONS if a[r]},
        "snapshots_emitted": int(a["snapshots"] or 0),
        "late_event_windows": late.count(),
        "late_events": int(late_events) if float(late_events).is_integer() else late_events,
        "rejected_rows": outputs.rejected.count(),
        "open_windows": open_windows.count(),
        "keys_held": held,
    }
    if Trigger.AT_WINDOW_END in pipeline.triggers:
        found["windows_closed"] = emitted
        found["closed_by_reason"] = found["emitted_by_reason"]
    if input_df is not None:
        found["input_rows"] = input_df.count()
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
            wrong.append({"metric": f"voltsp.{metric.name}", "metrics.json": entry.get("total"),
                          "figures": figure, "sum of workers": workers})
    return CheckResult(name, not wrong, len(wrong), wrong, desc)
