"""One task's tables from its variants' kernel outputs: counters, emission latency, slack
histograms, the cost of lateness (windows that missed events, with their perfect values),
where lateness fell (per key, per worker and hour, by how late), and future skew.
Pure NumPy/pyarrow: :func:`windowing.lateness.whatif.analyse` calls them per task, the
Spark job (:mod:`windowing.lateness.job`) sums them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import kernel as K
from windowing.arrays import order_codes, value_order_keys
from windowing.config import WindowType
from windowing.contract import (
    ARRIVAL_MS_COLUMN,
    BATCH_COLUMN,
    CLOSE_REASONS,
    EVENT_MS_COLUMN,
    IDLE_REASON,
    KIND_COLUMN,
    MAX_DURATION_REASON,
    WATERMARK_REASON,
)
from windowing.lateness.curves import pair_slack
from windowing.lateness.group_ids import group_ids, groups_of, key_columns, keys_of
from windowing.lateness.variants import ROW_ID, Variant, WhatIf, perfect_pipeline

#: Reasons whose emit time measures emission latency (END_OF_INPUT is the end of a bounded
#: replay, not of the window's wait).
LATENCY_REASONS = (WATERMARK_REASON, IDLE_REASON, MAX_DURATION_REASON)
HOUR_MS = 3_600_000
#: Upper bounds (ms, inclusive) of the lateness histogram's bins; the last bin is open.
LATENESS_BINS_MS = (
    0,
    10,
    100,
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
    10_800_000,
    21_600_000,
    86_400_000,
)


def _ts_ms(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Epoch ms of a UTC timestamp column (the kernel's outputs: microseconds)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    ms: np.ndarray = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy() // 1000
    return ms


#: Counters of the analysis itself (under the configured variant): events flagged as
#: skewed, windows that missed events and the (event, window) pairs they missed, late
#: events and pairs the skewed events caused, and the pairs attributed to one of them.
SKEWED_EVENTS, COST_WINDOWS, COST_MISSED = "skewed_events", "cost_windows", "cost_missed_events"
SKEW_CAUSED_EVENTS, SKEW_CAUSED_PAIRS, SKEW_ATTRIBUTED_PAIRS = (
    "skew_caused_events",
    "skew_caused_pairs",
    "skew_attributed_pairs",
)


def counters(outs: Mapping[Variant, K.KernelOutput], schema: pa.Schema, extra: Mapping[str, int]) -> pa.Table:
    rows = [
        (v.label, name, int(value)) for v, out in outs.items() for name, value in sorted(out.counters.items()) if value
    ]
    full = next(v for v in outs if v.full).label
    rows += [(full, name, int(value)) for name, value in extra.items() if value]
    if not rows:
        return schema.empty_table()
    label, name, value = zip(*rows)
    return pa.table(
        [pa.array(label, pa.string()), pa.array(name, pa.string()), pa.array(value, pa.int64())], schema=schema
    )


def latency(outs: Mapping[Variant, K.KernelOutput], schemas: Mapping[str, pa.Schema]) -> tuple[pa.Table, pa.Table]:
    """Emission latency (emit time - window end) of every window a variant closed by
    WATERMARK, IDLE or MAX_DURATION: (variant, latency, windows) counts, and the same in
    buckets (:func:`latency_bucket`: variant, bucket, windows, greatest latency)."""
    parts, coarse = [], []
    for v, out in outs.items():
        aggs = out.aggregates
        if not aggs.num_rows:
            continue
        aggs = aggs.filter(pc.is_in(aggs["emit_reason"], pa.array(LATENCY_REASONS)))
        if not aggs.num_rows:
            continue
        values, counts = np.unique(_ts_ms(aggs["emit_time"]) - _ts_ms(aggs["window_end"]), return_counts=True)
        counts = counts.astype(np.int64)
        label = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(values), np.int32)), pa.array([v.label]))
        parts.append(
            pa.table([label, pa.array(values, pa.int64()), pa.array(counts, pa.int64())], schema=schemas["latency"])
        )
        buckets, first, inv = np.unique(latency_bucket(values), return_index=True, return_inverse=True)
        last = np.append(first[1:], len(values)) - 1  # values are sorted: a bucket's greatest is its last
        coarse.append(
            pa.table(
                [
                    pa.array([v.label] * len(buckets), pa.string()),
                    pa.array(buckets, pa.int64()),
                    pa.array(np.bincount(inv.reshape(-1), weights=counts).astype(np.int64)),
                    pa.array(values[last], pa.int64()),
                ],
                schema=schemas["latency_coarse"],
            )
        )
    exact = pa.concat_tables(parts).unify_dictionaries().combine_chunks() if parts else schemas["latency"].empty_table()
    return (exact, pa.concat_tables(coarse) if coarse else schemas["latency_coarse"].empty_table())


#: Buckets of the latency histogram per doubling of the latency: a bucket is at most
#: 2^(1/256) - 1 = 0.27 % wide, so the exact percentiles need only the values of a few.
BUCKETS_PER_DOUBLING = 256


def latency_bucket(latency_ms: np.ndarray) -> np.ndarray:
    """The bucket of each latency: ``floor(256 * log2(1 + ms))`` (negative latencies, which
    a batch stamped before the window's end can give, go to ``-bucket(-ms) - 1``)."""
    v = np.asarray(latency_ms, dtype=np.int64)
    b = np.floor(BUCKETS_PER_DOUBLING * np.log2(1.0 + np.abs(v).astype(np.float64))).astype(np.int64)
    bucket: np.ndarray = np.where(v >= 0, b, -b - 1)
    return bucket


def slack(outs: Mapping[Variant, K.KernelOutput], wi: WhatIf, schema: pa.Schema) -> pa.Table:
    """Slack histograms per (strategy, lateness) from the late output of its D = 0 variant."""
    parts, done = [], set()
    for v, out in outs.items():
        if v.delay_ms or v.skew_free or (v.strategy, v.lateness) in done:
            continue
        done.add((v.strategy, v.lateness))
        late = out.late
        if not late.num_rows:
            continue
        wm = _ts_ms(late["watermark"])
        s = pair_slack(
            wi.pipeline.window, v.lateness, wm, wm - late["lateness_ms"].to_numpy(), _ts_ms(late["window_end"])
        )
        rows = late[ROW_ID].to_numpy()
        # An event's slack: the greatest of its pairs' (late as soon as one pair is).
        ev_rows, inv = np.unique(rows, return_inverse=True)
        ev_slack = np.full(len(ev_rows), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(ev_slack, inv.reshape(-1), s)
        values = np.unique(np.concatenate([s, ev_slack]))
        pairs = np.bincount(np.searchsorted(values, s), minlength=len(values))
        events = np.bincount(np.searchsorted(values, ev_slack), minlength=len(values))
        n = len(values)
        parts.append(
            pa.table(
                [
                    pa.array([v.strategy.value] * n, pa.string()),
                    pa.array([v.lateness.value] * n, pa.string()),
                    pa.array(values, pa.int64()),
                    pa.array(events.astype(np.int64)),
                    pa.array(pairs.astype(np.int64)),
                ],
                schema=schema,
            )
        )
    return pa.concat_tables(parts) if parts else schema.empty_table()


# --------------------------------------------------------------------------- cost


def cost(
    table: pa.Table, full: K.KernelOutput, wi: WhatIf, variant_of: np.ndarray, is_event: np.ndarray, schema: pa.Schema
) -> pa.Table:
    """One row per (worker, key, window) that missed events in the configured replay.

    ``emitted_<aggregate>``: the window's last emission in this replay (null if it was not
    emitted in it); ``perfect_<aggregate>``: the value over all its events, late ones
    included (tumbling and sliding windows emitted in this replay; the events of earlier
    partitions enter through the carried partial aggregate), computed by the kernel with a
    watermark that never makes an event late and no idle flush (:func:`perfect_pipeline`).
    """
    late = full.late
    if not late.num_rows:
        return schema.empty_table()
    p = wi.pipeline
    kcols = key_columns(p)
    win = ["window_start", "window_end"]
    aggs = full.aggregates.filter(pc.is_in(full.aggregates["emit_reason"], pa.array(CLOSE_REASONS)))
    ids = group_ids(
        [keys_of(late, kcols) + [_ts_ms(late[c]) for c in win], keys_of(aggs, kcols) + [_ts_ms(aggs[c]) for c in win]]
    )
    late_id, agg_id = ids
    uniq, first, inv = np.unique(late_id, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    n = len(uniq)
    missed = np.bincount(inv, minlength=n).astype(np.int64)
    lateness = late["lateness_ms"].to_numpy()
    max_late = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(max_late, inv, lateness)
    arr = table[ARRIVAL_MS_COLUMN].to_numpy()[late[ROW_ID].to_numpy()]
    first_arr = np.full(n, np.iinfo(np.int64).max, np.int64)
    last_arr = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first_arr, inv, arr)
    np.maximum.at(last_arr, inv, arr)
    head = late.take(pa.array(first))
    cols: dict[str, Any] = {c: head[c] for c in kcols}
    cols["window_start"], cols["window_end"] = head["window_start"], head["window_end"]
    cols.update(
        missed_events=pa.array(missed),
        max_lateness_ms=pa.array(max_late),
        first_missed_arrival=K.ts_array(first_arr),
        last_missed_arrival=K.ts_array(last_arr),
    )
    # The last emission of each window in this replay.
    pos = np.searchsorted(uniq, agg_id)
    hit = (pos < n) & (uniq[np.minimum(pos, n - 1)] == agg_id) if n else np.zeros(len(agg_id), bool)
    emissions = np.bincount(pos[hit], minlength=n).astype(np.int64)
    last = np.full(n, -1, np.int64)
    rows = np.flatnonzero(hit)
    if len(rows):
        order = np.lexsort((aggs["emission"].to_numpy()[rows], pos[rows]))
        rows = rows[order]
        last[pos[rows]] = rows  # the greatest emission wins (written last)
    cols["emissions"] = pa.array(emissions)
    cols["last_emit_reason"] = _take_or_null(aggs["emit_reason"], last)
    cols["last_emit_time"] = _take_or_null(aggs["emit_time"], last)
    for a in p.aggregates:
        cols[f"emitted_{a.name}"] = _take_or_null(aggs[a.name], last)
    perfect = _perfect(table, full, wi, variant_of, is_event, head, kcols)
    for a in p.aggregates:
        col = perfect[a.name] if perfect is not None else None
        if col is None:
            cols[f"perfect_{a.name}"] = pa.nulls(n, schema.field(f"perfect_{a.name}").type)
        else:  # only for windows emitted in this replay (the others' earlier events are not here)
            cols[f"perfect_{a.name}"] = _take_or_null(col, np.where(emissions > 0, np.arange(n), -1))
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def _take_or_null(col: pa.Array | pa.ChunkedArray, idx: np.ndarray) -> pa.Array:
    """``col[idx]``, null where ``idx`` is -1."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not len(col):
        return pa.nulls(len(idx), col.type)
    taken = col.take(pa.array(np.maximum(idx, 0), pa.int64()))
    return pc.if_else(pa.array(idx >= 0), taken, pa.scalar(None, col.type))


def _perfect(
    table: pa.Table,
    full: K.KernelOutput,
    wi: WhatIf,
    variant_of: np.ndarray,
    is_event: np.ndarray,
    head: pa.Table,
    kcols: Sequence[str],
) -> pa.Table | None:
    """The perfect value of each missed window (rows aligned with ``head``), or None for
    session windows (a late session event would have merged sessions whose values are
    not defined by one window)."""
    p = wi.pipeline
    if p.window.type is WindowType.SESSION or not head.num_rows:
        return None
    # The events and carried open windows of the windows that missed events, nothing else
    # (an event enters the perfect run when one of its windows missed events; its other
    # windows come out incomplete, and are not looked at).
    kind = table[KIND_COLUMN].to_numpy()
    carried = np.flatnonzero((kind == K.STATE_WINDOW) & (variant_of == wi.variants.index(wi.full)))
    events = np.flatnonzero(is_event)
    pe, ws, _ = K.assign_windows(table[EVENT_MS_COLUMN].to_numpy()[events], p.window)
    keyed = table.select(kcols or [KIND_COLUMN])  # the key columns only (all the pairs)
    ev_t, st_t = keyed.take(pa.array(events[pe])), table.take(pa.array(carried))
    ids = group_ids(
        [
            keys_of(head, kcols) + [_ts_ms(head["window_start"])],
            keys_of(ev_t, kcols) + [ws],
            keys_of(st_t, kcols)
            + [
                pc.fill_null(st_t[K.STATE_PREFIX + "window_start_ms"], 0).to_numpy()
                if len(carried)
                else np.zeros(0, np.int64)
            ],
        ]
    )
    missed = np.zeros(int(max((x.max(initial=-1) for x in ids), default=-1)) + 1, bool)
    missed[ids[0]] = True  # the ids are dense: marks, not sorts
    take = np.zeros(table.num_rows, bool)
    take[events[pe[missed[ids[1]]]]] = True
    take[carried[missed[ids[2]]]] = True
    sub = table.filter(pa.array(take))
    pipeline = perfect_pipeline(p)
    spec = K.Spec(pipeline=pipeline, input_types=wi.spec(wi.full).input_types)
    timelines = wi.variant_timelines(replace(wi.full, delay_ms=0))
    out = K.process(sub, spec, timelines, True)
    aggs = out.aggregates
    ids = group_ids(
        [
            keys_of(head, kcols) + [_ts_ms(head["window_start"]), _ts_ms(head["window_end"])],
            keys_of(aggs, kcols) + [_ts_ms(aggs["window_start"]), _ts_ms(aggs["window_end"])],
        ]
    )
    order = np.argsort(ids[1], kind="stable")
    pos = np.searchsorted(ids[1][order], ids[0])
    ok = (
        (pos < len(order)) & (ids[1][order][np.minimum(pos, max(len(order) - 1, 0))] == ids[0])
        if len(order)
        else np.zeros(len(ids[0]), bool)
    )
    idx = np.where(ok, order[np.minimum(pos, max(len(order) - 1, 0))] if len(order) else 0, -1)
    return pa.table({a.name: _take_or_null(aggs[a.name], idx) for a in p.aggregates})


# --------------------------------------------------------------------------- where lateness fell


def _late_event_rows(full: K.KernelOutput) -> tuple[np.ndarray, np.ndarray]:
    """(row ids of the late events, late pairs per late event) of the configured replay."""
    if not full.late.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, counts = np.unique(full.late[ROW_ID].to_numpy(), return_counts=True)
    return rows, counts.astype(np.int64)


def by_key(events: pa.Table, full: K.KernelOutput, wi: WhatIf, schema: pa.Schema) -> pa.Table:
    """Events, late events and late pairs per (worker, key) of the configured replay."""
    kcols = key_columns(wi.pipeline)
    n = events.num_rows
    if not n:
        return schema.empty_table()
    inv, first = groups_of(keys_of(events, kcols))
    late_rows, pairs = _late_event_rows(full)
    at = _position_of(events[ROW_ID].to_numpy(), late_rows)
    late_ev = np.bincount(inv[at], minlength=len(first)).astype(np.int64)
    late_pairs = np.bincount(inv[at], weights=pairs, minlength=len(first)).astype(np.int64)
    head = events.take(pa.array(first))
    cols = {c: head[c] for c in kcols}
    cols.update(
        events=pa.array(np.bincount(inv, minlength=len(first)).astype(np.int64)),
        late_events=pa.array(late_ev),
        late_event_windows=pa.array(late_pairs),
    )
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def _first_of_each(ids: np.ndarray) -> np.ndarray:
    """True at the first occurrence of each value (counts events among their pairs)."""
    out = np.zeros(len(ids), bool)
    out[np.unique(ids, return_index=True)[1]] = True
    return out


def _position_of(row_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions in ``row_ids`` of each of ``wanted`` (all present)."""
    if len(row_ids) < 2 or bool((row_ids[1:] > row_ids[:-1]).all()):  # ascending (the events' own order)
        found: np.ndarray = np.searchsorted(row_ids, wanted)
        return found
    order = np.argsort(row_ids, kind="stable")
    return order[np.searchsorted(row_ids[order], wanted)]


def by_hour(events: pa.Table, full: K.KernelOutput, wi: WhatIf, schema: pa.Schema) -> pa.Table:
    """Events, late events and late pairs per worker and hour of arrival."""
    p = wi.pipeline
    n = events.num_rows
    if not n:
        return schema.empty_table()
    hour = np.floor_divide(events[ARRIVAL_MS_COLUMN].to_numpy(), HOUR_MS)
    inv, first = groups_of([events[p.source.worker] if p.source.worker else np.zeros(n, np.int64), hour])
    late_rows, pairs = _late_event_rows(full)
    at = _position_of(events[ROW_ID].to_numpy(), late_rows)
    cols: dict[str, Any] = {}
    if p.source.worker:
        cols[p.source.worker] = events[p.source.worker].take(pa.array(first))
    cols.update(
        hour=K.ts_array(hour[first] * HOUR_MS),
        events=pa.array(np.bincount(inv, minlength=len(first)).astype(np.int64)),
        late_events=pa.array(np.bincount(inv[at], minlength=len(first)).astype(np.int64)),
        late_event_windows=pa.array(np.bincount(inv[at], weights=pairs, minlength=len(first)).astype(np.int64)),
    )
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def lateness_bin(lateness_ms: np.ndarray) -> np.ndarray:
    """The upper bound of each value's bin in :data:`LATENESS_BINS_MS` (-1: above the last)."""
    bounds = np.array(LATENESS_BINS_MS, np.int64)
    i = np.searchsorted(bounds, np.asarray(lateness_ms, np.int64), side="left")
    return np.where(i < len(bounds), bounds[np.minimum(i, len(bounds) - 1)], -1)


def lateness_bins(full: K.KernelOutput, schema: pa.Schema) -> pa.Table:
    """How late the configured replay's late pairs and events were (``lateness_ms``: the
    watermark they were checked against minus their event time; an event by its latest pair)."""
    late = full.late
    if not late.num_rows:
        return schema.empty_table()
    lat = late["lateness_ms"].to_numpy()
    rows = late[ROW_ID].to_numpy()
    ev, inv = np.unique(rows, return_inverse=True)
    ev_lat = np.full(len(ev), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ev_lat, inv.reshape(-1), lat)
    pb, eb = lateness_bin(lat), lateness_bin(ev_lat)
    bins = np.unique(np.concatenate([pb, eb]))
    pairs = np.bincount(np.searchsorted(bins, pb), minlength=len(bins)).astype(np.int64)
    events = np.bincount(np.searchsorted(bins, eb), minlength=len(bins)).astype(np.int64)
    return pa.table([pa.array(bins, pa.int64()), pa.array(pairs), pa.array(events)], schema=schema)


# --------------------------------------------------------------------------- future skew


def skew(
    events: pa.Table,
    skewed: np.ndarray,
    outs: Mapping[Variant, K.KernelOutput],
    wi: WhatIf,
    schemas: Mapping[str, pa.Schema],
) -> tuple[pa.Table, pa.Table]:
    """(late pairs the skewed events caused, the skewed events) of the task's keys.

    Caused: late in the configured replay, not in the skew-free one (skewed events
    themselves left out). Each is attributed to the skewed event that set the watermark it
    was checked against: the first (in arrival order) skewed event of its key, in an
    earlier batch, whose event time is that raw watermark; none when the watermark came
    from elsewhere (an earlier partition, or a batch whose other events set it too).
    """
    if wi.skew_threshold_ms is None:
        return schemas["skew_late"].empty_table(), schemas["skewed"].empty_table()
    p = wi.pipeline
    kcols = key_columns(p)
    sk = np.flatnonzero(skewed)  # positions in ``events``
    arr, evt, batch = (events[c].to_numpy() for c in (ARRIVAL_MS_COLUMN, EVENT_MS_COLUMN, BATCH_COLUMN))
    free = next((v for v in outs if v.skew_free), None)
    late = outs[wi.full].late
    if free is not None and late.num_rows:
        other = outs[free].late
        ids = group_ids(
            [
                [late[ROW_ID].to_numpy(), _ts_ms(late["window_start"])],
                [other[ROW_ID].to_numpy(), _ts_ms(other["window_start"])],
            ]
        )
        keep = ~np.isin(ids[0], ids[1]) & ~np.isin(late[ROW_ID].to_numpy(), events[ROW_ID].to_numpy()[sk])
        late = late.filter(pa.array(keep))
    else:
        late = late.slice(0, 0)
    at = _position_of(events[ROW_ID].to_numpy(), late[ROW_ID].to_numpy())
    raw_wm = _ts_ms(late["watermark"]) + wi.full.delay_ms
    # Candidate causes, in arrival order (ties by every input column: the kernel's order).
    order_keys = [arr[sk], batch[sk]]
    if len(sk) > 1:
        rest = events.take(pa.array(sk))
        order_keys = (
            [k for c in sorted(wi.input_types, reverse=True) for k in value_order_keys(rest[c])]
            + [order_codes(rest[c]) for c in reversed(p.source.arrival_order)]
            + order_keys
        )
    ids = group_ids(
        [keys_of(events.take(pa.array(at)), kcols) + [raw_wm], keys_of(events.take(pa.array(sk)), kcols) + [evt[sk]]]
    )
    order = np.lexsort([*order_keys, ids[1]]) if len(sk) else np.zeros(0, np.int64)
    first_ids, first_at = np.unique(ids[1][order], return_index=True)
    cause = np.full(len(at), -1, np.int64)  # position in ``sk`` of each late pair's cause
    if len(first_ids) and len(at):
        pos = np.minimum(np.searchsorted(first_ids, ids[0]), len(first_ids) - 1)
        cand = order[first_at[pos]]
        ok = (first_ids[pos] == ids[0]) & (batch[sk][cand] < late["batch"].to_numpy())
        cause = np.where(ok, cand, -1)
    first = _first_of_each(late[ROW_ID].to_numpy())
    has = cause >= 0
    cols: dict[str, Any] = {c: late[c] for c in kcols}
    cols.update(
        arrival_ms=pa.array(arr[at]),
        event_ms=pa.array(evt[at]),
        batch=late["batch"],
        window_start=late["window_start"],
        window_end=late["window_end"],
        watermark=late["watermark"],
        raw_watermark_ms=pa.array(raw_wm),
        lateness_ms=late["lateness_ms"],
        first_of_event=pa.array(first),
    )
    for name, values in (("cause_batch", batch), ("cause_arrival_ms", arr), ("cause_event_ms", evt)):
        cols[name] = pa.array(values[sk][np.maximum(cause, 0)] if len(sk) else np.zeros(len(at), np.int64), mask=~has)
    cols["cause_skew_ms"] = pa.array(
        (evt - arr)[sk][np.maximum(cause, 0)] if len(sk) else np.zeros(len(at), np.int64), mask=~has
    )
    skew_late = pa.table({f.name: cols[f.name] for f in schemas["skew_late"]}, schema=schemas["skew_late"])
    caused_events = np.bincount(cause[has & first], minlength=len(sk)).astype(np.int64)
    caused_pairs = np.bincount(cause[has], minlength=len(sk)).astype(np.int64)
    t = events.take(pa.array(sk))
    listing = {c: t[c] for c in wi.input_types}
    listing.update(
        arrival_ms=pa.array(arr[sk]),
        event_ms=pa.array(evt[sk]),
        skew_ms=pa.array(evt[sk] - arr[sk]),
        batch=pa.array(batch[sk]),
        late_caused=pa.array(caused_events),
        late_event_windows_caused=pa.array(caused_pairs),
    )
    return skew_late, pa.table({f.name: listing[f.name] for f in schemas["skewed"]}, schema=schemas["skewed"])


def worst_windows(cost: pa.Table, n: int) -> pa.Table:
    """The ``n`` windows that missed the most events (then the latest missed, then the
    earliest window): each task's top ``n`` hold the whole history's top ``n``."""
    if cost.num_rows <= n:
        return cost
    order = np.lexsort(
        [_ts_ms(cost["window_start"]), -cost["max_lateness_ms"].to_numpy(), -cost["missed_events"].to_numpy()]
    )
    return cost.take(pa.array(order[:n]))
