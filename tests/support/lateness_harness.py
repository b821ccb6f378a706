"""Run the lateness analysis (windowing.lateness.whatif) without Spark, on model-style rows.

The Spark runner's steps (normalise, the (worker, batch) summary with both watermark
candidates, the shuffle by key) are redone in plain Python as tests/support/kernel_harness.py does
for a replay, so many generated cases can check the curves against reference-model replays
in seconds. The Spark path itself is checked on a few cases (tests/windowing/lateness/test_lateness.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tests.support.kernel_harness import events_table, key_partitions, normalise_rows
from windowing import kernel as K
from windowing import metrics as M
from windowing.lateness.curves import late_counts
from windowing.lateness.job import strategy_timelines
from windowing.lateness.options import LatenessOptions
from windowing.lateness.tables import LATENCY_REASONS
from windowing.lateness.variants import SKEWED, VARIANT, WhatIf
from windowing.lateness.whatif import analyse, output_schemas

SUMMARY_SCHEMA = pa.schema(
    [
        ("reason", pa.string()),
        ("__w", pa.int64()),
        ("__batch", pa.int64()),
        (SKEWED, pa.bool_()),
        *[(c, pa.int64()) for c in ("cand_min", "cand_max", "maxarr", "minarr", "n")],
    ]
)


@dataclass
class LocalLateness:
    """What the tasks found, summed as the Spark runner sums it."""

    variants: tuple
    counters: dict  # variant label -> {counter: value}
    latency: dict  # variant label -> (latency values, windows)
    slack: dict  # (strategy value, lateness value) -> (slack_ms, events, pairs)
    tables: dict  # name -> concatenated Arrow table (cost, skew_late, ...)
    state: "LocalLatenessState"

    def late_counts(self, strategy, lateness, delays_ms):
        """(late events, late pairs) under each delay, from the slack (the exact curve)."""
        hv, he, hp = self.slack.get((strategy.value, lateness.value), (np.zeros(0, np.int64),) * 3)
        return late_counts(hv, he, hp, delays_ms)


@dataclass
class LocalLatenessState:
    workers: dict  # variant label -> worker rows
    rows: pa.Table  # key and window rows of every variant (``variant`` column)


def local_lateness(
    pipeline,
    rows,
    options: LatenessOptions,
    state: LocalLatenessState | None = None,
    flush_at_end=False,
    partitions=3,
    sweep=True,
    skew_subset=True,
) -> LocalLateness:
    """The lateness analysis of ``rows`` (continuing ``state``), as the Spark runner does it
    (``sweep``: the lean variants in delay sweeps where the pipeline allows, as it does;
    ``skew_subset``: the skew-free variant replayed for the keys where it can differ only)."""
    variants = options.variants(pipeline)
    full = variants[0]
    workers_in = state.workers if state else {}
    types, valid, _ = normalise_rows(pipeline, rows, workers_in.get(full.label, []))
    threshold = options.future_skew_ms if any(v.skew_free for v in variants) else None
    skewed = [threshold is not None and evt - arr > threshold for _, arr, evt, _, _ in valid]
    groups: dict = {}  # (worker, batch, skewed) -> stats of those events, as Spark groups them
    for (_r, arr, evt, batch, wv), sk in zip(valid, skewed):
        g = groups.setdefault((wv, batch, sk), [None] * 4 + [0])
        g[0] = evt if g[0] is None else min(g[0], evt)
        g[1] = evt if g[1] is None else max(g[1], evt)
        g[2] = arr if g[2] is None else max(g[2], arr)
        g[3] = arr if g[3] is None else min(g[3], arr)
        g[4] += 1
    names = ("cand_min", "cand_max", "maxarr", "minarr", "n")
    summary = pa.Table.from_pylist(
        [
            {"reason": None, "__w": wv, "__batch": b, SKEWED: sk, **dict(zip(names, stats))}
            for (wv, b, sk), stats in groups.items()
        ],
        schema=SUMMARY_SCHEMA,
    )
    timelines, new_workers = strategy_timelines(pipeline, variants, summary, workers_in)
    wi = WhatIf(pipeline, variants, types, timelines, flush_at_end, threshold, sweep=sweep, skew_subset=skew_subset)
    table = events_table(valid, types)
    table = table.append_column(SKEWED, pa.array(skewed, pa.bool_()))
    if state is not None and state.rows.num_rows:
        table = pa.concat_tables([table, _state_rows(pipeline, state.rows)], promote_options="default")
    results = [analyse(sub, wi) for sub in key_partitions(table, list(pipeline.id_columns), partitions)]
    schemas = output_schemas(wi)
    tables = {
        name: pa.concat_tables([getattr(r, name).cast(schemas[name]) for r in results])
        if results
        else schemas[name].empty_table()
        for name in schemas
    }
    counters: dict = {}
    for label, name, value in zip(*(tables["counters"][c].to_pylist() for c in ("variant", "name", "value"))):
        counters.setdefault(label, {})
        counters[label][name] = counters[label].get(name, 0) + value
    latency: dict = {}
    for label, v, n in zip(*(tables["latency"][c].to_pylist() for c in ("variant", "latency_ms", "windows"))):
        latency.setdefault(label, ([], []))
        latency[label][0].append(v)
        latency[label][1].append(n)
    slack: dict = {}
    sl = tables["slack"]
    for s, m in {(a, b) for a, b in zip(sl["strategy"].to_pylist(), sl["lateness"].to_pylist())}:
        sel = [
            i
            for i, (a, b) in enumerate(zip(sl["strategy"].to_pylist(), sl["lateness"].to_pylist()))
            if (a, b) == (s, m)
        ]
        sub = sl.take(pa.array(sel, pa.int64()))
        v, e, p = (sub[c].to_numpy() for c in ("slack_ms", "events", "pairs"))
        order = np.argsort(v, kind="stable")
        uniq, inv = np.unique(v[order], return_inverse=True)  # merge the partitions' histograms
        slack[(s, m)] = (
            uniq,
            np.bincount(inv, weights=e[order]).astype(np.int64),
            np.bincount(inv, weights=p[order]).astype(np.int64),
        )
    wcol = pipeline.source.worker
    workers_out = {
        label: [
            {
                "worker": r.get(wcol) if wcol else 0,
                "batch": r["batch"],
                "watermark_ms": r["watermark_ms"],
                "clock_ms": r["clock_ms"],
            }
            for r in rows_
        ]
        for label, rows_ in new_workers.items()
    }
    return LocalLateness(variants, counters, latency, slack, tables, LocalLatenessState(workers_out, tables["state"]))


def _state_rows(pipeline, st: pa.Table) -> pa.Table:
    """The carried state of every variant as kernel input rows (``engine`` does it in Spark)."""
    keep = list(pipeline.id_columns)
    kind = {"key": K.STATE_KEY, "window": K.STATE_WINDOW, "emitted": K.STATE_EMITTED}
    cols = {c: st[c] for c in keep}
    for c in st.column_names:
        if c not in keep and c not in ("fingerprint", "variant"):
            cols[K.STATE_PREFIX + c] = st[c]
    cols["__kind"] = pa.array([kind[k] for k in st["state_kind"].to_pylist()], pa.int8())
    cols[VARIANT] = st["variant"]
    return pa.table(cols)


def model_figures(ref, pipeline) -> dict:
    """The figures a reference-model replay gives: late events (distinct, by the ``name``
    each generated row carries) and pairs, closes per reason, emission latencies."""
    closes = {r: 0 for r in M.CLOSE_REASONS}
    latencies = []
    for row in ref.aggregates:
        if row["emit_reason"] in closes:
            closes[row["emit_reason"]] += 1
            if row["emit_reason"] in LATENCY_REASONS:
                latencies.append(row["emit_time"] - row["window_end"])
    return {
        "late_events": len({r["name"] for r in ref.late_events}),
        "late_pairs": len(ref.late_events),
        "closes": closes,
        "latencies": sorted(latencies),
    }
