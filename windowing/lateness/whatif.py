"""What-if replays: one history under other delays, watermark strategies and lateness modes.

Pure NumPy/pyarrow, no Spark (:mod:`windowing.lateness.job` runs it on Spark partitions).
:func:`analyse` takes the events of a set of complete keys (with the carried state rows of
every variant) and replays them once per :class:`Variant` through the kernel itself
(:func:`windowing.kernel.process`), so every figure of a variant is what a real replay with
that configuration reports. What each variant costs is kept small: a *lean* variant counts
events only (one ``count`` aggregate, ``atWindowEnd``), and for tumbling and sliding windows
it drops the arrival-order columns (their windows, closes and lateness do not depend on the
order of events inside a batch; sessions keep every column, their merges do).

**Slack.** The raw watermarks (key and worker, before ``delayWindowClose``) do not depend
on the delay D: candidates include late events, and only accepted or rejected rows change
them. So an (event, window) pair is late under delay D exactly when ``D <= slack``, with

* ``WINDOW_CLOSED``, tumbling and sliding: ``slack = watermark - window_end``;
* ``WINDOW_CLOSED``, sessions: ``slack = watermark - t - gap``;
* ``BEFORE_WATERMARK``: ``slack = watermark - t - 1``;

where ``watermark`` is the key's raw watermark as of its previous commit and ``t`` the event
time. An event is late when one of its pairs is: its slack is the greatest of its pairs'.
The pairs late under D = 0 are exactly those with ``slack >= 0``, and they carry the
watermark they were checked against, so the late output of the D = 0 variant of a strategy
and mode gives the late count under *every* delay (:func:`late_counts`). That is the
curve; the variants at the asked delays give the rest (emission latency, IDLE closes), and
the tests check both against the reference model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import kernel as K
from windowing.contract import KEY_KIND, KIND_COLUMN
from windowing.kernel.phases import with_arrival_ranks, with_event_columns
from windowing.lateness import tables
from windowing.lateness.skew_subset import (
    clock_changes_by_worker,
    concat_outputs,
    replay_in_parts,
    skew_dirty_rows,
    skew_free_from,
)
from windowing.lateness.sweep import Lean, sweep, sweepable
from windowing.lateness.tables import (
    COST_MISSED,
    COST_WINDOWS,
    SKEW_ATTRIBUTED_PAIRS,
    SKEW_CAUSED_EVENTS,
    SKEW_CAUSED_PAIRS,
    SKEWED_EVENTS,
    worst_windows,
)
from windowing.lateness.variants import ROW_ID, SKEWED, VARIANT, Variant, WhatIf


@dataclass
class Analysis:
    """One task's results, as Arrow tables (schemas: :func:`output_schemas`)."""

    counters: pa.Table
    latency: pa.Table
    slack: pa.Table
    cost: pa.Table
    by_key: pa.Table
    by_hour: pa.Table
    lateness_bins: pa.Table
    skew_late: pa.Table
    skewed: pa.Table
    cost_top: pa.Table
    latency_coarse: pa.Table
    state: pa.Table


def output_schemas(wi: WhatIf) -> dict[str, pa.Schema]:
    """The schema of each table :func:`analyse` returns (the Spark side's output schemas)."""
    p = wi.pipeline
    key_fields = [pa.field(c, wi.input_types[c]) for c in p.id_columns]
    worker_fields = [pa.field(p.source.worker, wi.input_types[p.source.worker])] if p.source.worker else []
    full_spec = wi.spec(wi.full)
    aggs = [
        pa.field(f"{side}_{a.name}", full_spec.output_type(a)) for side in ("emitted", "perfect") for a in p.aggregates
    ]
    i64, ts, s = pa.int64(), K.TS, pa.string()
    cost = pa.schema(
        key_fields
        + [
            ("window_start", ts),
            ("window_end", ts),
            ("missed_events", i64),
            ("max_lateness_ms", i64),
            ("first_missed_arrival", ts),
            ("last_missed_arrival", ts),
            ("emissions", i64),
            ("last_emit_reason", s),
            ("last_emit_time", ts),
        ]
        + aggs
    )
    return {
        "counters": pa.schema([("variant", s), ("name", s), ("value", i64)]),
        # One row per distinct latency, about one per window: the label is a dictionary code.
        "latency": pa.schema([("variant", pa.dictionary(pa.int32(), s)), ("latency_ms", i64), ("windows", i64)]),
        "slack": pa.schema([("strategy", s), ("lateness", s), ("slack_ms", i64), ("events", i64), ("pairs", i64)]),
        "cost": cost,
        "cost_top": cost,
        "by_key": pa.schema(key_fields + [("events", i64), ("late_events", i64), ("late_event_windows", i64)]),
        "by_hour": pa.schema(
            worker_fields + [("hour", ts), ("events", i64), ("late_events", i64), ("late_event_windows", i64)]
        ),
        "lateness_bins": pa.schema([("upper_ms", i64), ("pairs", i64), ("events", i64)]),
        "skew_late": pa.schema(
            key_fields
            + [
                ("arrival_ms", i64),
                ("event_ms", i64),
                ("batch", i64),
                ("window_start", ts),
                ("window_end", ts),
                ("watermark", ts),
                ("raw_watermark_ms", i64),
                ("lateness_ms", i64),
                ("first_of_event", pa.bool_()),
                ("cause_batch", i64),
                ("cause_arrival_ms", i64),
                ("cause_event_ms", i64),
                ("cause_skew_ms", i64),
            ]
        ),
        "skewed": pa.schema(
            [pa.field(c, t) for c, t in wi.input_types.items()]
            + [
                ("arrival_ms", i64),
                ("event_ms", i64),
                ("skew_ms", i64),
                ("batch", i64),
                ("late_caused", i64),
                ("late_event_windows_caused", i64),
            ]
        ),
        "latency_coarse": pa.schema([("variant", s), ("bucket", i64), ("windows", i64), ("max_ms", i64)]),
        "state": variants_state_schema(wi),
    }


def variants_state_schema(wi: WhatIf) -> pa.Schema:
    """Every variant's kernel state columns (the union, by name) plus ``variant``."""
    fields: dict[str, pa.Field] = {}
    for v in wi.variants:
        for f in wi.spec(v).state_schema():
            fields.setdefault(f.name, f)
    return pa.schema([pa.field("variant", pa.string()), *fields.values()])


def analyse(table: pa.Table, wi: WhatIf) -> Analysis:
    """Replay the complete keys of ``table`` once per variant of ``wi``.

    ``table`` holds the keys' events (input columns; :data:`SKEWED` when future skew is
    listed) and the carried state rows of every variant (kernel state columns under
    ``kernel.STATE_PREFIX``, ``__kind``, :data:`VARIANT` naming the variant), in any order.
    """
    full_spec = wi.spec(wi.full)
    table = _with_row_ids(_shared_key_rows(with_event_columns(table, full_spec), wi))
    # Every replay below orders its events by one sort of (key, rank), not the whole order.
    table = with_arrival_ranks(table, full_spec)
    is_event = (table[KIND_COLUMN].to_numpy() == K.EVENT) if table.num_rows else np.zeros(0, bool)
    variant_of = _variant_codes(table, wi)  # -1: an event; else the row's variant's index in wi.variants
    skewed = (
        pc.fill_null(table[SKEWED], False).to_numpy(zero_copy_only=False).astype(bool)
        if SKEWED in table.column_names
        else np.zeros(table.num_rows, bool)
    )
    outs = _swept_outputs(table, wi, is_event, variant_of)
    _replay_others(table, wi, outs, is_event, skewed, variant_of)
    outs = {v: outs[v] for v in wi.variants}  # the variants' order, whichever way each ran
    owners = _key_row_owners(wi)
    state_parts = [
        _tag(out.state if owners[v.label] == v.label else _without_key_rows(out.state), v) for v, out in outs.items()
    ]
    outs = {
        v: replace(out, state=out.state.slice(0, 0)) if not (v.full or v.skew_free) else out for v, out in outs.items()
    }
    schemas = output_schemas(wi)
    full = outs[wi.full]
    events = table.filter(pa.array(is_event)) if not is_event.all() else table
    skewed = skewed[is_event]
    latency, latency_coarse = tables.latency(outs, schemas)
    cost = tables.cost(table, full, wi, variant_of, is_event, schemas["cost"])
    skew_late, listing = tables.skew(events, skewed, outs, wi, schemas)
    return Analysis(
        counters=tables.counters(
            outs,
            schemas["counters"],
            {
                SKEWED_EVENTS: int(skewed.sum()) if wi.skew_threshold_ms is not None else 0,
                COST_WINDOWS: cost.num_rows,
                COST_MISSED: int(pc.sum(cost["missed_events"]).as_py() or 0),
                SKEW_CAUSED_PAIRS: skew_late.num_rows,
                SKEW_CAUSED_EVENTS: int(pc.sum(skew_late["first_of_event"].cast(pa.int64())).as_py() or 0),
                SKEW_ATTRIBUTED_PAIRS: skew_late.num_rows - skew_late["cause_batch"].null_count,
            },
        ),
        latency=latency,
        slack=tables.slack(outs, wi, schemas["slack"]),
        cost=cost,
        cost_top=worst_windows(cost, wi.worst),
        by_key=tables.by_key(events, full, wi, schemas["by_key"]),
        by_hour=tables.by_hour(events, full, wi, schemas["by_hour"]),
        lateness_bins=tables.lateness_bins(full, schemas["lateness_bins"]),
        skew_late=skew_late,
        skewed=listing,
        latency_coarse=latency_coarse,
        state=_concat_state(state_parts, schemas["state"]),
    )


def _swept_outputs(
    table: pa.Table, wi: WhatIf, is_event: np.ndarray, variant_of: np.ndarray
) -> dict[Variant, K.KernelOutput]:
    """The outputs of the lean variants one delay sweep replays (:func:`_swept`), per variant."""
    outs: dict[Variant, K.KernelOutput] = {}
    kind = table[KIND_COLUMN].to_numpy()
    counters_carried = {wi.variants[i].label for i in np.unique(variant_of[kind == K.STATE_EMITTED]) if i >= 0}
    # Emitted-window counters (after a flush at end) need the kernel: those groups go to it.
    groups = [g for g in _swept(wi) if not counters_carried & {v.label for v in g}]
    if groups:
        keep = is_event | np.isin(variant_of, [wi.variants.index(v) for g in groups for v in g])
        sub = table.filter(pa.array(keep)) if not keep.all() else table
        timelines = {g[0].strategy: wi.variant_timelines(replace(g[0], delay_ms=0)) for g in groups}
        swept = sweep(
            sub,
            [[Lean(v.delay_ms, wi.spec(v), v.label, keep_late=not v.delay_ms) for v in g] for g in groups],
            VARIANT,
            timelines,
        )
        outs.update((v, swept[v.label]) for g in groups for v in g)
    return outs


def _replay_others(
    table: pa.Table,
    wi: WhatIf,
    outs: dict[Variant, K.KernelOutput],
    is_event: np.ndarray,
    skewed: np.ndarray,
    variant_of: np.ndarray,
) -> None:
    """Replay every variant ``outs`` lacks (kernel passes), adding its output to ``outs``."""
    # The skew-free variant of the keys without skewed events (where provably the same):
    # the configured replay, done in two parts (the keys it takes, the others).
    free = next((v for v in wi.variants if v.skew_free), None)
    changes = clock_changes_by_worker(wi, free) if free is not None else {}
    dirty = skew_dirty_rows(table, wi, free, changes, is_event, skewed, variant_of) if free is not None else None
    clean_full: K.KernelOutput | None = None
    for code, v in enumerate(wi.variants):
        if v in outs:
            continue
        carried = variant_of == code
        if dirty is not None and v.full:
            clean_full, dirty_full = replay_in_parts(table, wi, v, [~dirty, dirty], is_event | carried)
            outs[v] = concat_outputs([o for o in (clean_full, dirty_full) if o is not None])  # events: one
            continue
        if dirty is not None and v.skew_free:
            (dirty_free,) = replay_in_parts(table, wi, v, [dirty], (is_event & ~skewed) | carried)
            outs[v] = skew_free_from(clean_full, dirty_free, wi, v, changes)
            continue
        keep = (is_event & ~(skewed & v.skew_free)) | carried
        spec = wi.spec(v)
        sub = table.filter(pa.array(keep)) if not keep.all() else table
        out = K.process(sub, spec, wi.variant_timelines(v), wi.flush_at_end)
        outs[v] = out if v.full or v.skew_free else _slim(out, keep_late=not v.delay_ms)


def _swept(wi: WhatIf) -> list[list[Variant]]:
    """The lean variants :func:`windowing.lateness.sweep.sweep` replays, per (strategy, lateness
    mode), when the pipeline allows it and the replay does not flush at its end (a flush
    leaves emitted-window counters in the state, which the sweep does not keep)."""
    if not (wi.sweep and sweepable(wi.pipeline)) or wi.flush_at_end:
        return []
    groups: dict[tuple[Any, ...], list[Variant]] = {}
    for v in wi.variants:
        if not (v.full or v.skew_free):
            groups.setdefault((v.strategy, v.lateness), []).append(v)
    return [sorted(g, key=lambda v: v.delay_ms) for g in groups.values()]


def _slim(out: K.KernelOutput, keep_late: bool) -> K.KernelOutput:
    """What the sums need of a lean variant's replay (its emit times and window ends, its
    late pairs at delay 0 for the slack, its counters), so that a task holds little more
    than one replay's outputs at a time."""
    return K.KernelOutput(
        out.aggregates.select(["window_end", "emit_reason", "emit_time"]),
        out.late if keep_late else out.late.slice(0, 0),
        out.state,
        out.counters,
        out.counters_by_worker,
    )


def _with_row_ids(table: pa.Table) -> pa.Table:
    if ROW_ID in table.column_names:
        table = table.drop_columns([ROW_ID])
    return table.append_column(ROW_ID, pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _variant_codes(table: pa.Table, wi: WhatIf) -> np.ndarray:
    """Each row's :data:`VARIANT` as its index in ``wi.variants``; -1 for events (no
    variant) and for labels not analysed. Integer masks, not string comparisons per row."""
    if VARIANT not in table.column_names:
        return np.full(table.num_rows, -1, np.int64)
    labels = table[VARIANT]
    if pa.types.is_dictionary(labels.type):
        labels = labels.cast(pa.string())
    found = pc.index_in(labels, value_set=pa.array([v.label for v in wi.variants], labels.type))
    codes: np.ndarray = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes


def _key_row_owners(wi: WhatIf) -> dict[str, str]:
    """Each variant's label -> the variant whose carried key rows it shares: the first of its
    (strategy, lateness mode, skew-free) group. A key's watermark, greatest event time and
    clock do not depend on the delay, so the state holds them once per group."""
    first: dict[tuple[Any, ...], str] = {}
    return {v.label: first.setdefault((v.strategy, v.lateness, v.skew_free), v.label) for v in wi.variants}


def _without_key_rows(state: pa.Table) -> pa.Table:
    return state.filter(pc.not_equal(state["state_kind"], KEY_KIND))


def _shared_key_rows(table: pa.Table, wi: WhatIf) -> pa.Table:
    """The carried key rows of each variant, copied from its group's (:func:`_key_row_owners`).
    Key rows under other variants (a state written before the rows were shared) are left
    out: they hold the same values."""
    if VARIANT not in table.column_names or not table.num_rows:
        return table
    is_key = table[KIND_COLUMN].to_numpy() == K.STATE_KEY
    if not is_key.any():
        return table
    keys = table.filter(pa.array(is_key))
    label_of = np.array(keys[VARIANT].to_pylist(), dtype=object)
    members: dict[str, list[str]] = {}
    for label, owner in _key_row_owners(wi).items():
        members.setdefault(owner, []).append(label)
    at, vtype = table.column_names.index(VARIANT), table.schema.field(VARIANT).type
    parts = [table.filter(pa.array(~is_key))]
    for owner, labels in members.items():
        mine = keys.filter(pa.array(label_of == owner))
        parts += [
            mine.set_column(at, VARIANT, pa.array([label] * mine.num_rows, pa.string()).cast(vtype)) for label in labels
        ]
    return pa.concat_tables(parts)


def _tag(state: pa.Table, v: Variant) -> pa.Table:
    return state.add_column(0, "variant", pa.array([v.label] * state.num_rows, pa.string()))


def _concat_state(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    out = []
    for t in parts:
        cols = [t[f.name] if f.name in t.column_names else pa.nulls(t.num_rows, f.type) for f in schema]
        out.append(pa.Table.from_arrays(cols, schema=schema))
    return pa.concat_tables(out) if out else schema.empty_table()
