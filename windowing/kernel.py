"""The per-key windowing kernel: pure NumPy/pyarrow over many keys at once.

It takes one Arrow table holding the events of a set of complete keys (in any row
order) together with those keys' carried state rows, and returns the emitted windows,
the late (event, window) pairs, and the new state — following docs/semantics.md.
Nothing here imports Spark; :mod:`windowing.engine` runs this on Spark partitions.

How tumbling and sliding windows are computed without a per-event loop:

* events are sorted in arrival order per key; a key's watermark after each of its
  batches is a segmented running maximum of per-batch candidates;
* lateness is an array comparison against the watermark of the key's previous batch;
* a window closes at the first of its key's batches whose effective watermark reaches
  its end (a segmented ``searchsorted``);
* an idle flush of a key between two of its own batches is a ``searchsorted`` in its
  worker's global timeline; each flush starts a new *generation* of the key's windows;
  with the processing-time clock a heartbeat tick can only flush it in the gap just
  before that commit, which one more comparison decides (``_heartbeat_flush``), so the
  ticks themselves are never listed;
* every emitted row's ``emit_time`` is its worker's clock then, read from the same
  timeline (or the tick);
* aggregates per (key, generation, window) are unbuffered ``ufunc.at`` reductions in
  arrival order, so float sums are a left fold that a carried partial sum continues;
  decimal sums are exact: unscaled Python integers in object arrays (see ``_decimal_ints``).

Session windows merge sequentially and run a tight per-key loop (``_sessions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import metrics
from windowing.arrays import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    codes_in,
    group_codes,
    order_codes,
    sat_add,
    sat_sub,
    seg_cummax,
    seg_rank,
    seg_searchsorted,
    starts_of,
    value_order_keys,
)
from windowing.config import Aggregate, Clock, Lateness, Pipeline, Trigger, WatermarkStrategy, WindowType
from windowing.durations import DAY_MS

# Row kinds of the kernel's input table (column ``__kind``).
STATE_KEY, STATE_WINDOW, STATE_EMITTED, EVENT = 0, 1, 2, 3

# Emission reasons.
OPEN, WATERMARK, IDLE, MAX_DURATION, END_OF_INPUT, AGGREGATE = 0, 1, 2, 3, 4, 5
REASON_NAMES = {WATERMARK: "WATERMARK", IDLE: "IDLE", MAX_DURATION: "MAX_DURATION",
                END_OF_INPUT: "END_OF_INPUT", AGGREGATE: "AGGREGATE"}

TS = pa.timestamp("us", tz="UTC")
STATE_PREFIX = "__s_"
#: Columns late_events adds to the input columns.
LATE_ADDED_COLUMNS = ("batch", "window_start", "window_end", "watermark", "lateness_ms")


@dataclass(frozen=True)
class Timeline:
    """A worker's commits in this replay: batches in order and the clocks after each.

    ``geff[i]`` is the effective global watermark and ``clock[i]`` the processing clock
    (the greatest arrival time committed so far) after committing ``batches[i]``;
    ``min_arrival[i]`` is the smallest arrival time in ``batches[i]`` (heartbeat ticks
    before it stop there). ``last_batch`` is the last committed batch, including earlier
    partitions (None if the worker never committed one). ``batch0`` and ``clock0`` are
    the last batch and the clock carried from earlier partitions (None and
    ``MIN_TIMESTAMP`` for a worker without state).

    Every task receives every worker's timeline, so the runner ships only what the kernel
    reads: ``geff`` is empty unless an idle timeout runs on the event-time clock, and
    ``min_arrival`` unless heartbeat ticks apply (``Pipeline.idle_heartbeat_ms``).
    """

    batches: np.ndarray
    geff: np.ndarray
    clock: np.ndarray
    last_batch: int | None
    min_arrival: np.ndarray
    batch0: int | None = None
    clock0: int = MIN_TIMESTAMP

    @property
    def last_clock(self) -> int:
        """The clock after the last commit (this replay's, else the carried one)."""
        return int(self.clock[-1]) if len(self.clock) else self.clock0


def worker_timelines(pipeline: Pipeline, commits: Mapping[Any, tuple[np.ndarray, ...]],
                     carried: Mapping[Any, dict]) -> tuple[dict[Any, Timeline], list[dict]]:
    """Each worker's timeline, and its state row, from its commits in this replay.

    ``commits[worker]`` holds the worker's batches in order with, per batch, the watermark
    candidate over all its events, the greatest and the smallest arrival time (see
    :func:`commit_summary`); ``carried[worker]`` the worker row of the carried state
    (``batch``, ``watermark_ms``, ``clock_ms``). A worker in either gets a timeline: the
    global watermark and the clock are running maxima that start from the carried ones.
    Only what the kernel reads is kept (see :class:`Timeline`).
    """
    w = pipeline.window
    timelines: dict[Any, Timeline] = {}
    rows = []
    empty = np.zeros(0, dtype=np.int64)
    keep_geff = w.idle_timeout_ms is not None and w.idle_clock is Clock.EVENT_TIME
    keep_min_arrival = pipeline.idle_heartbeat_ms > 0
    for wv in sorted(dict.fromkeys([*commits, *carried]), key=repr):
        batches, cand, arr, min_arr = commits.get(wv, (empty,) * 4)
        s0 = carried.get(wv, {})
        wm0 = s0.get("watermark_ms")
        clock0 = s0.get("clock_ms")
        gwm = np.maximum.accumulate(np.concatenate([[MIN_TIMESTAMP if wm0 is None else wm0], cand]))[1:]
        clock = np.maximum.accumulate(np.concatenate([[MIN_TIMESTAMP if clock0 is None else clock0], arr]))[1:]
        last_batch = int(batches[-1]) if len(batches) else s0.get("batch")
        timelines[wv] = Timeline(batches, sat_sub(gwm, w.delay_ms) if keep_geff else empty, clock, last_batch,
                                 min_arr if keep_min_arrival else empty, batch0=s0.get("batch"),
                                 clock0=MIN_TIMESTAMP if clock0 is None else clock0)
        rows.append({
            "state_kind": "worker",
            "fingerprint": pipeline.fingerprint(),
            **({pipeline.source.worker: wv} if pipeline.source.worker else {}),
            "batch": last_batch,
            "watermark_ms": int(gwm[-1]) if len(gwm) and gwm[-1] != MIN_TIMESTAMP else wm0,
            "clock_ms": int(clock[-1]) if len(clock) and clock[-1] != MIN_TIMESTAMP else clock0,
        })
    return timelines, rows


def commit_summary(table: pa.Table, spec: "Spec") -> dict[Any, tuple[np.ndarray, ...]]:
    """Per worker of the events in ``table`` (with :func:`with_event_columns`): its
    batches in order and, per batch, the watermark candidate, the greatest and the
    smallest arrival time. This is the engine's per-(worker, batch) Spark summary, for a
    task that holds every event of its workers."""
    rows = np.flatnonzero(table["__kind"].to_numpy() == EVENT)
    if not len(rows):
        return {}
    take = pa.array(rows)
    batch, evt, arr = (_int64(table[c].take(take)) for c in ("__batch", "__evt", "__arr"))
    wcol = spec.worker_col
    codes = group_codes(table[wcol].take(take)) if wcol else np.zeros(len(rows), dtype=np.int64)
    order = np.lexsort((batch, codes))
    codes, batch, evt, arr = codes[order], batch[order], evt[order], arr[order]
    starts = np.flatnonzero(np.concatenate([[True], (codes[1:] != codes[:-1]) | (batch[1:] != batch[:-1])]))
    pick = np.minimum if spec.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else np.maximum
    per_batch = (batch[starts], pick.reduceat(evt, starts), np.maximum.reduceat(arr, starts),
                 np.minimum.reduceat(arr, starts))
    bcodes = codes[starts]
    worker_starts = np.flatnonzero(np.concatenate([[True], bcodes[1:] != bcodes[:-1]]))
    values = (table[wcol].take(pa.array(rows[order][starts[worker_starts]])).to_pylist() if wcol
              else [0] * len(worker_starts))
    ends = np.append(worker_starts[1:], len(starts))
    return {_hashable(v): tuple(c[a:b] for c in per_batch) for v, a, b in zip(values, worker_starts, ends)}


@dataclass(frozen=True)
class Spec:
    """What the kernel needs from a pipeline, as plain values."""

    pipeline: Pipeline
    input_types: Mapping[str, pa.DataType]

    @property
    def window(self):
        return self.pipeline.window

    @property
    def worker_col(self) -> str | None:
        return self.pipeline.source.worker

    @property
    def key_col(self) -> str | None:
        return self.pipeline.window.key

    @property
    def snapshots(self) -> bool:
        return Trigger.AT_AGGREGATE in self.pipeline.triggers

    def value_type(self, agg: Aggregate) -> pa.DataType:
        return self.input_types[agg.column]

    def output_type(self, agg: Aggregate) -> pa.DataType:
        """The output column's type; ``sum`` and ``avg`` of decimal(p, s) take Spark's
        types: decimal(min(38, p + 10), s) and decimal(min(38, p + 4), min(38, s + 4))."""
        if agg.type in ("count", "distinct"):
            return pa.int64()
        vt = self.value_type(agg)
        if agg.type == "avg":
            if _is_decimal(vt):
                return pa.decimal128(min(MAX_DECIMAL_DIGITS, vt.precision + 4), min(MAX_DECIMAL_DIGITS, vt.scale + 4))
            return pa.float64()
        if agg.type == "sum":
            if _is_decimal(vt):
                return pa.decimal128(min(MAX_DECIMAL_DIGITS, vt.precision + 10), vt.scale)
            return pa.int64() if pa.types.is_integer(vt) else pa.float64()
        return vt

    def sum_type(self, agg: Aggregate) -> pa.DataType:
        """The type of the partial sum of a ``sum`` or ``avg``."""
        return self.output_type(_as_sum(agg))

    def keeps_arrival(self, agg: Aggregate) -> bool:
        """Whether the carried partial of ``agg`` records where its value arrived: ``first``
        and ``last`` of session windows, whose merges pick them by arrival order."""
        return self.window.type is WindowType.SESSION and agg.type in ("first", "last")

    def partial_fields(self, agg: Aggregate) -> list[pa.Field]:
        """State columns of one aggregate's partial value.

        ``first`` / ``last`` of sessions add ``partial_<name>_batch`` and
        ``partial_<name>_seq`` (int64, null while the value is null): the arrival position
        of the event that gave the value, as (its batch, its rank among its key's events
        of that batch in arrival order, from 0). Batches of a worker only grow from one
        partition to the next and a batch is never split between partitions, so these
        pairs order a key's events by arrival across partitions, and they do not depend
        on which other keys or rows a replay holds (see :func:`_sessions`).

        Decimal sums add ``partial_<name>_overflow`` (int64): the exact partial sum is
        ``partial_<name> + partial_<name>_overflow * 10^(P - s)`` for a partial of type
        decimal(P, s), so a running sum past P digits (which a later event may bring back)
        is carried exactly; the overflow is 0 otherwise.
        """
        name = f"partial_{agg.name}"
        if agg.type in ("sum", "avg"):
            out = [pa.field(name, self.sum_type(agg)), pa.field(name + "_n", pa.int64())]
            if _is_decimal(self.sum_type(agg)):
                out.append(pa.field(name + "_overflow", pa.int64()))
            return out
        if agg.type == "distinct":
            return [pa.field(name, pa.list_(self.value_type(agg)))]
        if self.keeps_arrival(agg):
            return [pa.field(name, self.output_type(agg)), pa.field(name + "_batch", pa.int64()),
                    pa.field(name + "_seq", pa.int64())]
        return [pa.field(name, self.output_type(agg))]

    def key_fields(self) -> list[pa.Field]:
        return [pa.field(c, self.input_types[c]) for c in (self.worker_col, self.key_col) if c]

    def aggregates_schema(self) -> pa.Schema:
        return pa.schema(
            self.key_fields()
            + [pa.field("window_start", TS), pa.field("window_end", TS)]
            + [pa.field(a.name, self.output_type(a)) for a in self.pipeline.aggregates]
            + [pa.field("emit_reason", pa.string()), pa.field("emit_batch", pa.int64()),
               pa.field("emit_time", TS), pa.field("emit_watermark", TS), pa.field("emission", pa.int64())]
        )

    def late_input_columns(self) -> list[str]:
        """Input columns carried into late_events (a same-named added column wins)."""
        return [c for c in self.input_types if c not in LATE_ADDED_COLUMNS]

    def late_schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(c, self.input_types[c]) for c in self.late_input_columns()]
            + [pa.field("batch", pa.int64()), pa.field("window_start", TS), pa.field("window_end", TS),
               pa.field("watermark", TS), pa.field("lateness_ms", pa.int64())]
        )

    def state_schema(self) -> pa.Schema:
        fields = [pa.field("state_kind", pa.string()), pa.field("fingerprint", pa.string())]
        fields += self.key_fields()
        fields += [pa.field(n, pa.int64()) for n in (
            "batch", "watermark_ms", "clock_ms", "max_event_ms", "window_start_ms", "window_end_ms",
            "emissions", "events")]
        for a in self.pipeline.aggregates:
            fields += self.partial_fields(a)
        return pa.schema(fields)


def _as_sum(agg: Aggregate) -> Aggregate:
    return Aggregate(type="sum", column=agg.column, name=agg.name)


#: The most digits a decimal holds (Spark's, and Arrow's decimal128).
MAX_DECIMAL_DIGITS = 38


def _is_decimal(t: pa.DataType) -> bool:
    return pa.types.is_decimal(t)


def _sum_dtype(t: pa.DataType):
    """NumPy dtype of the sums of a column of type ``t``: exact int64 for integers, exact
    Python ints (unscaled) for decimals, float64 otherwise."""
    if pa.types.is_integer(t):
        return np.int64
    return object if _is_decimal(t) else np.float64


def _decimal_ints(arr: pa.Array | pa.ChunkedArray, scale: int | None = None) -> np.ndarray:
    """The unscaled values of a decimal array as Python ints (object array; 0 for nulls),
    at ``scale`` if given (exactly: a value that does not fit is an error).

    Read straight from the 16-byte two's complement values (through int64 when every
    value fits 64 bits), never through ``Decimal`` objects.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if not pa.types.is_decimal128(t):
        arr = arr.cast(pa.decimal128(t.precision, t.scale))
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=object)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + n))[2 * arr.offset:]
    lo, hi = raw[0::2], raw[1::2]
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        lo, hi = np.where(valid, lo, 0), np.where(valid, hi, 0)
    if (hi == (lo >> 63)).all():
        out = lo.astype(object)
    else:
        out = hi.astype(object) * (1 << 64) + lo.view(np.uint64).astype(object)
    if scale is not None and scale != t.scale:
        if scale > t.scale:
            out = out * 10 ** (scale - t.scale)
        else:
            f = 10 ** (t.scale - scale)
            if any(v % f for v in out.tolist()):
                raise ValueError(f"decimal values of scale {t.scale} do not fit scale {scale}")
            out = np.array([v // f for v in out.tolist()], dtype=object)
    return out


_M64 = (1 << 64) - 1


def _decimal_array(x: np.ndarray, null: np.ndarray, t: pa.DataType) -> pa.Array:
    """A decimal128 array of type ``t`` from unscaled Python ints; null where ``null`` or
    where the value does not fit ``t``'s precision (an overflow)."""
    n = len(x)
    limit = 10 ** t.precision
    null = np.asarray(null, dtype=bool)
    if n:
        null = null | ~((x < limit) & (x > -limit)).astype(bool)
    v = np.where(null, 0, x)
    if n == 0 or ((v < 2 ** 63) & (v >= -2 ** 63)).all():
        lo = v.astype(np.int64)
        hi = lo >> 63
    else:
        lo = (v & _M64).astype(np.uint64).view(np.int64)
        hi = (v >> 64).astype(np.int64)
    data = np.empty(2 * n, dtype=np.int64)
    data[0::2], data[1::2] = lo, hi
    validity = pa.array(~null, pa.bool_()).buffers()[1] if null.any() else None
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)], null_count=int(null.sum()))


def _div_half_up(a: int, b: int) -> int:
    """``a / b`` (b > 0) rounded to an integer, halves away from zero."""
    q, r = divmod(abs(a), b)
    q += 2 * r >= b
    return q if a >= 0 else -q


def _decimal_avg(sums: np.ndarray, n: np.ndarray, sum_type: pa.DataType, t: pa.DataType) -> pa.Array:
    """Spark's avg of decimals: the exact ``sum / n`` rounded HALF_UP to ``t``'s scale; null
    when there is no value, when the sum overflows ``sum_type``, or the average ``t``.

    (Spark divides at 39 decimals rounding down, then rounds HALF_UP to the scale, which
    is the same: a half-way point of at most 38 decimals survives the truncation.)
    """
    shift = 10 ** (t.scale - sum_type.scale)
    limit = 10 ** sum_type.precision
    out = np.zeros(len(sums), dtype=object)
    null = np.asarray(n, dtype=np.int64) <= 0
    for i, (x, k) in enumerate(zip(sums.tolist(), np.asarray(n).tolist())):
        if k <= 0 or not -limit < x < limit:
            null[i] = True
        else:
            out[i] = _div_half_up(x * shift, k)
    return _decimal_array(out, null, t)


def _split_overflow(x: np.ndarray, t: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
    """Exact unscaled partial sums ``x`` as ``(low, high)`` with ``x = low + high *
    10^precision``, ``low`` fitting ``t`` and both of the sign of ``x`` (``high`` is 0 unless
    the sum outgrew ``t``; it stays far within int64: every event adds less than one)."""
    limit = 10 ** t.precision
    high = [(abs(v) // limit) * (1 if v >= 0 else -1) for v in x.tolist()]
    low = np.array([v - h * limit for v, h in zip(x.tolist(), high)], dtype=object)
    return low, np.array(high, dtype=np.int64)


@dataclass
class KernelOutput:
    aggregates: pa.Table
    late: pa.Table
    state: pa.Table
    #: This task's counters (windowing.metrics.COUNTERS), summed over its workers.
    counters: dict[str, int] = field(default_factory=dict)
    #: The same per worker label (windowing.metrics.worker_label).
    counters_by_worker: dict[str, dict[str, int]] = field(default_factory=dict)


# =========================================================================== derived columns


def _ms_derivable(t: pa.DataType) -> bool:
    """Time types whose epoch milliseconds a task computes exactly like the engine's Spark
    expression (zoned timestamps, integers, dates; not strings or local timestamps, which
    need Spark's parser and session time zone)."""
    return (pa.types.is_timestamp(t) and t.tz is not None) or pa.types.is_date32(t) or (
        pa.types.is_integer(t) and t != pa.uint64())


def task_derived(spec: Spec) -> frozenset[str]:
    """Internal columns the kernel can compute from the input columns itself, so the engine
    need not compute and ship them (fewer columns through the shuffle and into Python)."""
    src, w, types = spec.pipeline.source, spec.window, spec.input_types
    out = set()
    if _ms_derivable(types[src.arrival_time]):
        out.add("__arr")
        if src.batch_column is None:
            out.add("__batch")
        if w.event_time is None:
            out.add("__evt")
    if w.event_time is not None and _ms_derivable(types[w.event_time]):
        out.add("__evt")
    if src.batch_column is not None and pa.types.is_integer(types[src.batch_column]) \
            and types[src.batch_column] != pa.uint64():
        out.add("__batch")
    return frozenset(out)


def _epoch_ms(col: pa.ChunkedArray) -> np.ndarray:
    """Epoch milliseconds (floored) of a time column; nulls (state rows) give 0."""
    arr = col.combine_chunks()
    t = arr.type
    if pa.types.is_timestamp(t):
        v = pc.fill_null(arr.view(pa.int64()), 0).to_numpy()
        per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[t.unit]
        return v * 1000 if per_ms is None else np.floor_divide(v, per_ms)
    if pa.types.is_date32(t):
        return pc.fill_null(arr.view(pa.int32()), 0).to_numpy().astype(np.int64) * DAY_MS
    return pc.fill_null(arr.cast(pa.int64()), 0).to_numpy()


def with_event_columns(table: pa.Table, spec: Spec) -> pa.Table:
    """The table with ``__kind``, ``__arr``, ``__evt`` and ``__batch`` (computing those the
    engine left out, see :func:`task_derived`)."""
    src, w = spec.pipeline.source, spec.window
    names = table.column_names
    if "__kind" not in names:
        table = table.append_column("__kind", pa.array(np.full(table.num_rows, EVENT, np.int8)))
    elif table["__kind"].null_count:
        table = table.set_column(names.index("__kind"), "__kind", pc.fill_null(table["__kind"], np.int8(EVENT)))
    if "__arr" not in names:
        arr = _epoch_ms(table[src.arrival_time])
        table = table.append_column("__arr", pa.array(arr))
    if "__evt" not in names:
        evt = _epoch_ms(table[w.event_time]) if w.event_time else table["__arr"].to_numpy()
        table = table.append_column("__evt", pa.array(evt))
    if "__batch" not in names:
        if src.batch_column:
            batch = pc.fill_null(table[src.batch_column].cast(pa.int64()), 0).to_numpy()
        else:
            batch = np.floor_divide(table["__arr"].to_numpy(), src.batch_interval_ms)
        table = table.append_column("__batch", pa.array(batch))
    return table


# =========================================================================== entry point


def process(table: pa.Table, spec: Spec, timelines: Mapping[Any, Timeline], flush_at_end: bool) -> KernelOutput:
    """Replay the events of complete keys in ``table`` (events and state rows, any order)."""
    table = with_event_columns(table, spec)
    k = _Keys(table, spec)
    ev = _Events(table, spec, k)
    kb = _KeyBatches(ev, k, spec)
    idle = _Idle(kb, k, spec, timelines)
    if spec.window.type is WindowType.SESSION:
        groups, late, snaps = _sessions(ev, kb, k, idle, spec, flush_at_end, timelines)
    else:
        groups, late, snaps = _windows(ev, kb, k, idle, spec, flush_at_end, timelines)
    # Windows close (and count for `emission`) either way; atWindowEnd decides if that is output.
    out_aggs = [groups.emitted_table(k, spec)] if Trigger.AT_WINDOW_END in spec.pipeline.triggers else []
    if snaps is not None:
        out_aggs.append(snaps.emitted_table(k, spec))
    aggs = pa.concat_tables(out_aggs) if out_aggs else spec.aggregates_schema().empty_table()
    state = pa.concat_tables([_key_state_rows(k, kb, spec), groups.state_table(k, spec),
                              groups.emitted_counter_table(k, kb, spec)])
    by_worker = _counters(k, ev, kb, groups, snaps, late, spec)
    totals: dict[str, int] = {}
    for figures in by_worker.values():
        for name, v in figures.items():
            totals[name] = totals.get(name, 0) + v
    return KernelOutput(aggs, late.table(ev, spec), state, totals, by_worker)


def _counters(k: _Keys, ev: _Events, kb: _KeyBatches, groups: _Groups, snaps: _Groups | None, late: _Late,
              spec: Spec) -> dict[str, dict[str, int]]:
    """This task's counters (:data:`windowing.metrics.COUNTERS`) per worker label.

    Every key is in exactly one task, so the driver sums them per worker and in total.
    Cost: a ``bincount`` per counter over keys, windows or late rows the replay already
    holds; one label per distinct worker, not per key.
    """
    if not k.n:
        return {}
    if spec.worker_col:
        codes = group_codes(k.table[spec.worker_col].take(pa.array(k.rep_row)))
    else:
        codes = np.zeros(k.n, dtype=np.int64)
    _, first_key, worker_of = np.unique(codes, return_index=True, return_inverse=True)
    worker_of = worker_of.reshape(-1)
    nw = len(first_key)

    def of_keys(g: np.ndarray) -> np.ndarray:  # one per element: the element's key
        return np.bincount(worker_of[np.asarray(g, dtype=np.int64)], minlength=nw)

    def summed(per_key: np.ndarray) -> np.ndarray:  # per-key counts summed per worker
        return np.bincount(worker_of, weights=np.asarray(per_key, dtype=np.float64), minlength=nw).astype(np.int64)

    is_open = groups.reason == OPEN
    counts = {
        metrics.EVENTS: of_keys(ev.g),
        metrics.LATE_PAIRS: of_keys(ev.g[late.ev_idx]),
        metrics.LATE_EVENTS: of_keys(ev.g[np.unique(late.ev_idx)]),
        metrics.WINDOWS_CREATED: summed(groups.created),
        **{metrics.CLOSED_PREFIX + REASON_NAMES[r]: of_keys(groups.g[groups.reason == r])
           for r in (WATERMARK, IDLE, MAX_DURATION, END_OF_INPUT)},
        metrics.SNAPSHOTS: of_keys(snaps.g) if snaps is not None else np.zeros(nw, np.int64),
        metrics.IDLE_KEYS_REMOVED: summed(groups.idle_flushes),
        metrics.KEYS_SEEN: of_keys(np.flatnonzero(kb.key_first >= 0)),
        metrics.KEYS_HELD: of_keys(np.unique(groups.g[is_open])),
        metrics.OPEN_WINDOWS: of_keys(groups.g[is_open]),
    }
    labels = [metrics.worker_label(k.worker_values[int(g)]) for g in first_key]
    return {label: {name: int(v[i]) for name, v in counts.items()} for i, label in enumerate(labels)}


# =========================================================================== inputs


class _Keys:
    """Dense ids for the (worker, key) pairs in the table, and their carried state."""

    def __init__(self, table: pa.Table, spec: Spec):
        self.table = table
        n = table.num_rows
        self.kind = table["__kind"].to_numpy().astype(np.int8)
        codes = []
        for c in (spec.worker_col, spec.key_col):
            if c:
                codes.append(group_codes(table[c]))
        if codes:
            enc = codes[0] + 1
            if len(codes) == 2:
                enc = enc * (codes[1].max(initial=0) + 2) + codes[1] + 1
            # Dense ids by hashing (no sort): the ids' order carries no meaning.
            self.gid = pc.dictionary_encode(pa.array(enc, pa.int64())).indices.to_numpy().astype(np.int64)
        else:
            self.gid = np.zeros(n, dtype=np.int64)
        self.n = int(self.gid.max()) + 1 if n else 0
        first = np.full(self.n, n, dtype=np.int64)
        np.minimum.at(first, self.gid, np.arange(n, dtype=np.int64))
        self.rep_row = first  # a row of each key, to copy its worker/key values from
        if spec.worker_col:
            wvals = table[spec.worker_col].take(pa.array(first)).to_pylist()
        else:
            wvals = [0] * self.n
        self.worker_values = wvals
        self.wm0 = np.full(self.n, MIN_TIMESTAMP, dtype=np.int64)
        self.maxev0 = self.wm0.copy()
        self.maxarr0 = self.wm0.copy()
        rows = np.flatnonzero(self.kind == STATE_KEY)
        if len(rows):
            g = self.gid[rows]
            for arr, col in ((self.wm0, "watermark_ms"), (self.maxev0, "max_event_ms"), (self.maxarr0, "clock_ms")):
                v = _scol(table, col, rows)
                arr[g] = pc.fill_null(v, MIN_TIMESTAMP).to_numpy().astype(np.int64)

    def take_key_columns(self, gids: np.ndarray, spec: Spec) -> dict[str, pa.Array]:
        rows = pa.array(self.rep_row[gids])
        return {c: self.table[c].take(rows) for c in (spec.worker_col, spec.key_col) if c}


class _Events:
    """The events, sorted in arrival order per key."""

    def __init__(self, table: pa.Table, spec: Spec, k: _Keys):
        rows = np.flatnonzero(k.kind == EVENT)
        src = spec.pipeline.source
        # Only the sort columns, and only the event rows (state rows have nulls there).
        sub = table.select([*src.arrival_order, "__arr", "__batch", "__evt"])
        if len(rows) != table.num_rows:
            sub = sub.take(pa.array(rows))
        arr, batch = _int64(sub["__arr"]), _int64(sub["__batch"])
        keys = [order_codes(sub[c]) for c in reversed(src.arrival_order)]
        keys += [arr, batch, k.gid[rows]]
        order = np.lexsort(keys) if len(rows) else np.zeros(0, dtype=np.int64)
        order = _break_ties(order, keys, table, rows, spec)
        self.rows = rows[order]  # table row of each sorted event
        self.n = len(self.rows)
        self.g = k.gid[self.rows]
        self.batch = batch[order]
        self.arr = arr[order]
        self.t = _int64(sub["__evt"])[order]
        self.table = table


def _break_ties(order: np.ndarray, keys: list[np.ndarray], table: pa.Table, rows: np.ndarray,
                spec: Spec) -> np.ndarray:
    """Order events equal in (key, batch, arrival, arrivalOrder) by their other columns.

    The contract's arrival order ends with "the row's remaining columns": runs of tied
    events are sorted by every input column's value, columns taken by name, so the
    order is total on distinct rows and does not depend on how the input came.
    """
    if len(order) < 2:
        return order
    same = np.ones(len(order) - 1, dtype=bool)
    for key in keys:
        ks = key[order]
        same &= ks[1:] == ks[:-1]
    if not same.any():
        return order
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    pos = np.flatnonzero(tied)
    run = np.cumsum(np.concatenate(([True], ~same)))[pos]
    take = pa.array(rows[order[pos]])
    sort_keys = []
    for c in sorted(spec.input_types, reverse=True):
        sort_keys += value_order_keys(table[c].take(take))
    sub = np.lexsort([*sort_keys, run])
    out = order.copy()
    out[pos] = order[pos][sub]
    return out


def _int64(col: pa.ChunkedArray) -> np.ndarray:
    return col.to_numpy().astype(np.int64, copy=False)


class _KeyBatches:
    """One entry per (key, batch) with events: watermarks before and after its commit."""

    def __init__(self, ev: _Events, k: _Keys, spec: Spec):
        w = spec.window
        if ev.n:
            change = np.concatenate(([True], (ev.g[1:] != ev.g[:-1]) | (ev.batch[1:] != ev.batch[:-1])))
        else:
            change = np.zeros(0, dtype=bool)
        self.start = np.flatnonzero(change)
        self.n = len(self.start)
        self.of_event = np.cumsum(change) - 1
        self.g = ev.g[self.start]
        self.batch = ev.batch[self.start]
        if self.n:
            reduce = np.minimum if w.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else np.maximum
            cand = reduce.reduceat(ev.t, self.start)
            maxev = np.maximum.reduceat(ev.t, self.start)
            maxarr = np.maximum.reduceat(ev.arr, self.start)
        else:
            cand = maxev = maxarr = np.zeros(0, dtype=np.int64)
        self.first_of_key = starts_of(self.g)
        self.key_first = np.full(k.n, -1, dtype=np.int64)
        self.key_last = np.full(k.n, -1, dtype=np.int64)
        self.key_first[self.g[self.first_of_key]] = self.first_of_key
        self.key_last[self.g[self.first_of_key]] = np.append(self.first_of_key[1:], self.n) - 1
        self.wm_after = self._running(cand, k.wm0)
        self.maxev_after = self._running(maxev, k.maxev0)
        self.maxarr_after = self._running(maxarr, k.maxarr0)
        wm_before = np.empty_like(self.wm_after)
        if self.n:
            wm_before[1:] = self.wm_after[:-1]
            wm_before[self.first_of_key] = k.wm0[self.g[self.first_of_key]]
        self.eff_before = sat_sub(wm_before, w.delay_ms)
        self.eff_after = sat_sub(self.wm_after, w.delay_ms)
        # The key's values at the end of this replay.
        has = self.key_last >= 0
        self.wm_final = k.wm0.copy()
        self.maxev_final = k.maxev0.copy()
        self.maxarr_final = k.maxarr0.copy()
        self.wm_final[has] = self.wm_after[self.key_last[has]]
        self.maxev_final[has] = self.maxev_after[self.key_last[has]]
        self.maxarr_final[has] = self.maxarr_after[self.key_last[has]]
        self.eff_final = sat_sub(self.wm_final, w.delay_ms)

    def _running(self, per_batch: np.ndarray, initial: np.ndarray) -> np.ndarray:
        v = per_batch.astype(np.int64, copy=True)
        if self.n:
            f = self.first_of_key
            v[f] = np.maximum(v[f], initial[self.g[f]])
        return seg_cummax(v, self.g)


class _Idle:
    """Where each key goes idle, and the worker's clock at the key's commits.

    ``kb_fire[j]``: the key goes idle after its batch j and before its next one; it is
    flushed with emit batch ``kb_batch[j]`` and emit time ``kb_time[j]``: at a worker
    commit (that batch, the clock after it) or at a heartbeat tick (the last committed
    batch, the tick). ``pre_fire[g]``: key g (with carried windows) goes idle before its
    first batch of this replay (``pre_batch[g]``, ``pre_time[g]``). ``gen[j]``: the
    generation of batch j's windows.

    ``kb_clock[j]``: the worker's clock after committing key batch j (the emit time of
    what that commit closes); ``kb_clock_before[j]``: its clock before that batch.
    ``last_batch[g]``, ``last_clock[g]``: the worker's last commit (for END_OF_INPUT).
    """

    def __init__(self, kb: _KeyBatches, k: _Keys, spec: Spec, timelines: Mapping[Any, Timeline]):
        w = spec.window
        heartbeat_ms = spec.pipeline.idle_heartbeat_ms
        self.kb_fire = np.zeros(kb.n, dtype=bool)
        self.kb_batch = np.zeros(kb.n, dtype=np.int64)
        self.kb_time = np.zeros(kb.n, dtype=np.int64)
        self.kb_clock = np.full(kb.n, MIN_TIMESTAMP, dtype=np.int64)
        self.kb_clock_before = np.full(kb.n, MIN_TIMESTAMP, dtype=np.int64)
        self.pre_fire = np.zeros(k.n, dtype=bool)
        self.pre_batch = np.zeros(k.n, dtype=np.int64)
        self.pre_time = np.zeros(k.n, dtype=np.int64)
        self.last_batch = np.full(k.n, MIN_TIMESTAMP, dtype=np.int64)
        self.last_clock = np.full(k.n, MIN_TIMESTAMP, dtype=np.int64)
        wkeys = np.array([_hashable(v) for v in k.worker_values], dtype=object)
        for wv in dict.fromkeys(wkeys.tolist()):
            tl = timelines.get(wv)
            gmask = wkeys == wv
            if tl is None:
                continue
            if tl.last_batch is not None:
                self.last_batch[gmask] = tl.last_batch
            self.last_clock[gmask] = tl.last_clock
            L = len(tl.batches)
            if L == 0:
                continue
            sel = np.flatnonzero(gmask[kb.g])
            p0 = np.searchsorted(tl.batches, kb.batch[sel])  # each key batch's commit
            if len(sel):
                self.kb_clock[sel] = tl.clock[p0]
                self.kb_clock_before[sel] = np.where(p0 > 0, tl.clock[np.maximum(p0 - 1, 0)], tl.clock0)
            if w.idle_timeout_ms is None:
                continue
            series = tl.geff if w.idle_clock is Clock.EVENT_TIME else tl.clock
            # After each of the key's batches: idle from the first commit c (at or after
            # its own) whose clock reaches activity + timeout, if c comes before its next batch
            # p1; a heartbeat tick just before c flushes it earlier (or, for c == p1, at all).
            if len(sel):
                nxt = np.append(p0[1:], L)
                last_of_key = np.append(kb.g[sel][1:] != kb.g[sel][:-1], True)
                p1 = np.where(last_of_key, L, nxt)
                activity = kb.maxev_after[sel] if w.idle_clock is Clock.EVENT_TIME else kb.maxarr_after[sel]
                due = sat_add(activity, w.idle_timeout_ms)
                c = np.maximum(p0, np.searchsorted(series, due, side="left"))
                at_tick, tick = _heartbeat_flush(tl, heartbeat_ms, due, c, p0 + 1, p1)
                at_commit = ~at_tick & (c < p1)
                cc = np.minimum(c, L - 1)
                self.kb_fire[sel] = at_tick | at_commit
                self.kb_batch[sel] = np.where(at_tick, tl.batches[np.maximum(cc - 1, 0)], tl.batches[cc])
                self.kb_time[sel] = np.where(at_tick, tick, tl.clock[cc])
            # Before the key's first batch, for keys with carried state (a tick may come
            # before this replay's first commit: c == 0 is after the carried clock).
            gs = np.flatnonzero(gmask)
            activity = k.maxev0[gs] if w.idle_clock is Clock.EVENT_TIME else k.maxarr0[gs]
            gs, activity = gs[activity != MIN_TIMESTAMP], activity[activity != MIN_TIMESTAMP]
            if len(gs):
                first = kb.key_first[gs]
                p1 = np.full(len(gs), L, dtype=np.int64)
                has = first >= 0
                p1[has] = np.searchsorted(tl.batches, kb.batch[first[has]])
                due = sat_add(activity, w.idle_timeout_ms)
                c = np.searchsorted(series, due, side="left")
                at_tick, tick = _heartbeat_flush(tl, heartbeat_ms, due, c, np.zeros(len(gs), np.int64), p1)
                at_commit = ~at_tick & (c < p1)
                cc = np.minimum(c, L - 1)
                self.pre_fire[gs] = at_tick | at_commit
                before = tl.batches[np.maximum(cc - 1, 0)] if tl.batch0 is None else \
                    np.where(cc > 0, tl.batches[np.maximum(cc - 1, 0)], tl.batch0)
                self.pre_batch[gs] = np.where(at_tick, before, tl.batches[cc])
                self.pre_time[gs] = np.where(at_tick, tick, tl.clock[cc])
        # Generation of each key batch: flushes before it, including the one before its first batch.
        f = self.kb_fire.astype(np.int64)
        incl = np.cumsum(f)
        excl = incl - f
        base = np.zeros(kb.n, dtype=np.int64)
        if kb.n:
            counts = np.diff(np.append(kb.first_of_key, kb.n))
            base = np.repeat(excl[kb.first_of_key], counts)
        self.gen = excl - base + self.pre_fire[kb.g].astype(np.int64) if kb.n else np.zeros(0, dtype=np.int64)


def _heartbeat_flush(tl: Timeline, heartbeat_ms: int, due: np.ndarray, c: np.ndarray, earliest: np.ndarray,
                     p1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which idle flushes a heartbeat tick makes, and the tick (contract section 5.2).

    A key falls due at ``due`` (activity + idleTimeout); ``c`` is the first commit at or
    after the key's own whose clock reaches ``due`` (L: none). Ticks are the multiples of
    ``heartbeat_ms`` strictly between a commit's clock (``clock0`` before commit 0) and
    the smallest arrival of the next batch. Every tick before commit ``c - 1`` lies below
    ``clock[c - 1] < due``, so only the gap just before commit ``c`` can flush the key:
    at its first tick ``>= due`` if that is before ``min_arrival[c]``. The gap must lie
    after the key's own commit (``c >= earliest``) and before its next batch
    (``c <= p1``); after the worker's last batch there is no gap (no next batch, no tick).

    Returns (flushed at a tick, that tick) per key.
    """
    L = len(tl.batches)
    if not heartbeat_ms or not len(c):
        return np.zeros(len(c), dtype=bool), np.zeros(len(c), dtype=np.int64)
    cc = np.minimum(c, L - 1)
    prev = np.where(c > 0, tl.clock[np.maximum(cc - 1, 0)], tl.clock0)
    ok = (c < L) & (c >= earliest) & (c <= p1) & (prev != MIN_TIMESTAMP)
    start = np.where(ok, np.maximum(due, prev + ok), 0)  # strictly after the commit's clock
    tick = start + np.mod(-start, heartbeat_ms)  # the first multiple of the heartbeat >= start
    ok &= tick < tl.min_arrival[cc]
    return ok, tick


def _hashable(v):
    return v if not isinstance(v, (list, dict)) else repr(v)


def _scol(table: pa.Table, name: str, rows: np.ndarray) -> pa.Array:
    """State column ``name`` at ``rows`` (no state rows: the column may not exist)."""
    if len(rows) == 0:
        return pa.array([], pa.int64())
    return table[STATE_PREFIX + name].take(pa.array(rows)).combine_chunks()


# =========================================================================== groups


class _Groups:
    """Windows of one kind of output, one row per (key, generation, window).

    ``partials`` holds per aggregate: ``n`` (non-null count), ``s`` (sum), ``code`` (min/
    max/first/last as codes into ``domains``), ``dcount`` and ``dmembers`` (distinct).
    """

    def __init__(self, spec: Spec, domains: dict[str, pa.Array]):
        self.spec = spec
        self.domains = domains
        # Per key (index: key id): windows created, idle flushes (windowing.metrics).
        self.created = np.zeros(0, dtype=np.int64)
        self.idle_flushes = np.zeros(0, dtype=np.int64)

    def set(self, g, ws, we, reason, emit_batch, emit_wm, emission, events, partials, reopenable=None, *,
            emit_time):
        self.g, self.ws, self.we = g, ws, we
        self.reason, self.emit_batch, self.emit_wm, self.emission = reason, emit_batch, emit_wm, emission
        self.emit_time = emit_time  # the worker's clock at the emission (contract section 5)
        self.events, self.partials = events, partials
        self.reopenable = reopenable  # (g, ws, we, emissions) of emitted windows that may reopen

    def _agg_columns(self, sel: np.ndarray) -> dict[str, pa.Array]:
        cols = {}
        for a, p in zip(self.spec.pipeline.aggregates, self.partials):
            cols[a.name] = _final_value(a, p, sel, self.spec, self.domains)
        return cols

    def emitted_table(self, k: _Keys, spec: Spec) -> pa.Table:
        sel = np.flatnonzero(self.reason != OPEN)
        cols = k.take_key_columns(self.g[sel], spec)
        cols["window_start"] = _ts(self.ws[sel])
        cols["window_end"] = _ts(self.we[sel])
        cols.update(self._agg_columns(sel))
        names = np.array([None, *[REASON_NAMES[i] for i in range(1, 6)]], dtype=object)
        cols["emit_reason"] = pa.array(names[self.reason[sel]], pa.string())
        cols["emit_batch"] = pa.array(self.emit_batch[sel], pa.int64())
        cols["emit_time"] = _ts(self.emit_time[sel])
        cols["emit_watermark"] = _ts(self.emit_wm[sel])
        cols["emission"] = pa.array(self.emission[sel], pa.int64())
        return pa.table(cols, schema=spec.aggregates_schema())

    def state_table(self, k: _Keys, spec: Spec) -> pa.Table:
        sel = np.flatnonzero(self.reason == OPEN)
        m = len(sel)
        cols = _state_base(spec, k, self.g[sel], "window")
        cols["window_start_ms"] = pa.array(self.ws[sel], pa.int64())
        cols["window_end_ms"] = pa.array(self.we[sel], pa.int64())
        cols["emissions"] = pa.array(self.emission[sel] - 1, pa.int64())
        cols["events"] = pa.array(self.events[sel], pa.int64())
        for a, p in zip(spec.pipeline.aggregates, self.partials):
            cols.update(_partial_columns(a, p, sel, spec, self.domains))
        return _fill_state(cols, m, spec)

    def emitted_counter_table(self, k: _Keys, kb: _KeyBatches, spec: Spec) -> pa.Table:
        g, ws, we, em = self.reopenable
        cols = _state_base(spec, k, g, "emitted")
        cols["window_start_ms"] = pa.array(ws, pa.int64())
        cols["window_end_ms"] = pa.array(we, pa.int64())
        cols["emissions"] = pa.array(em, pa.int64())
        return _fill_state(cols, len(g), spec)


def _ts(ms: np.ndarray) -> pa.Array:
    ms = np.asarray(ms, dtype=np.int64)
    mask = (ms == MIN_TIMESTAMP) | (ms == MAX_TIMESTAMP)
    return pa.array(np.where(mask, 0, ms) * 1000, type=pa.int64(), mask=mask).cast(TS)


def _i64(v: np.ndarray) -> pa.Array:
    v = np.asarray(v, dtype=np.int64)
    return pa.array(v, pa.int64(), mask=v == MIN_TIMESTAMP)


def _state_base(spec: Spec, k: _Keys, g: np.ndarray, kind: str) -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {
        "state_kind": pa.array([kind] * len(g), pa.string()),
        "fingerprint": pa.array([spec.pipeline.fingerprint()] * len(g), pa.string()),
    }
    cols.update(k.take_key_columns(g, spec))
    return cols


def _fill_state(cols: dict[str, pa.Array], m: int, spec: Spec) -> pa.Table:
    schema = spec.state_schema()
    arrays = [cols[f.name] if f.name in cols else pa.nulls(m, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _key_state_rows(k: _Keys, kb: _KeyBatches, spec: Spec) -> pa.Table:
    g = np.arange(k.n)
    cols = _state_base(spec, k, g, "key")
    cols["watermark_ms"] = _i64(kb.wm_final)
    cols["max_event_ms"] = _i64(kb.maxev_final)
    cols["clock_ms"] = _i64(kb.maxarr_final)
    return _fill_state(cols, k.n, spec)


# =========================================================================== aggregates


def _dkey(a: Aggregate) -> tuple[str, bool]:
    """Which value domain an aggregate codes its column in: sorted for min/max only."""
    return (a.column, a.type in ("min", "max"))


class _Domain(NamedTuple):
    """The distinct values of a column (sorted where order matters) and the table
    column's codes into them (-1 for null)."""

    values: pa.Array
    codes: np.ndarray


def _domains(spec: Spec, k: _Keys, ev: _Events) -> dict[tuple[str, bool], _Domain]:
    """Distinct values per column (events and carried partials), sorted where order matters.

    Aggregates over arbitrary types (strings, timestamps, ...) work on integer codes into
    these domains; only min/max need the codes to follow the values' order. One hash
    pass (``dictionary_encode``) gives both the values and the codes.
    """
    table = k.table
    out: dict[tuple[str, bool], _Domain] = {}
    state_rows = np.flatnonzero(k.kind == STATE_WINDOW)
    for a in spec.pipeline.aggregates:
        if a.type not in ("min", "max", "first", "last", "distinct") or _dkey(a) in out:
            continue
        column = table[a.column].combine_chunks()
        parts = [column]
        for b in spec.pipeline.aggregates:
            if b.column == a.column and len(state_rows) and b.type in ("min", "max", "first", "last", "distinct"):
                p = _scol(table, f"partial_{b.name}", state_rows)
                parts.append(pc.list_flatten(p) if b.type == "distinct" else p)
        allv = pa.concat_arrays(parts) if len(parts) > 1 else column
        enc = pc.dictionary_encode(allv)
        values = enc.dictionary
        codes = pc.fill_null(enc.indices.slice(0, len(column)), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        if _dkey(a)[1] and len(values):
            order = pc.sort_indices(values).to_numpy()
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            values = values.take(pa.array(order))
            codes = np.where(codes >= 0, rank[np.maximum(codes, 0)], -1)
        out[_dkey(a)] = _Domain(values, codes)
    return out


def _value_arrays(spec: Spec, ev: _Events, domains) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """Per aggregate input: (numeric values or codes, non-null mask), in event order.

    Codes are computed on the table's column as it came and then permuted into event
    order: integers are cheap to move, strings are not.
    """
    out = {}
    table = ev.table
    for a in spec.pipeline.aggregates:
        if a.column is None:
            continue
        col = table[a.column].combine_chunks()
        valid = ~col.is_null().to_numpy(zero_copy_only=False)[ev.rows]
        if a.type in ("sum", "avg"):
            if _is_decimal(col.type):
                vals = _decimal_ints(col)[ev.rows]
            else:
                dtype = _sum_dtype(col.type)
                vals = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(dtype)[ev.rows]
            out[("num", a.column)] = (vals, valid)
        elif a.type == "count":
            out[("valid", a.column)] = (valid, valid)
        elif ("code", *_dkey(a)) not in out:
            out[("code", *_dkey(a))] = (domains[_dkey(a)].codes[ev.rows], valid)
    return out


def _state_partials(spec: Spec, k: _Keys, rows: np.ndarray, domains) -> list[dict]:
    """Partial aggregates of carried windows (table rows ``rows``), one dict per aggregate."""
    t = k.table
    take = pa.array(rows)
    out = []
    for a in spec.pipeline.aggregates:
        col = t[STATE_PREFIX + f"partial_{a.name}"].take(take).combine_chunks()
        p: dict[str, Any] = {}
        if a.type in ("sum", "avg"):
            st = spec.sum_type(a)
            if _is_decimal(st):
                p["s"] = _decimal_ints(col, st.scale)
                over = STATE_PREFIX + f"partial_{a.name}_overflow"
                if over in t.column_names:
                    high = pc.fill_null(t[over].take(take), 0).to_numpy().astype(np.int64)
                    if high.any():
                        p["s"] = p["s"] + high.astype(object) * 10 ** st.precision
            else:
                dtype = np.int64 if pa.types.is_integer(col.type) else np.float64
                p["s"] = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(dtype)
            n = t[STATE_PREFIX + f"partial_{a.name}_n"].take(take)
            p["n"] = pc.fill_null(n, 0).to_numpy().astype(np.int64)
        elif a.type == "count":
            p["n"] = pc.fill_null(col, 0).to_numpy().astype(np.int64)
        elif a.type == "distinct":
            lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy().astype(np.int64)
            p["members"] = (np.repeat(np.arange(len(rows)), lengths),
                            codes_in(pc.list_flatten(col), domains[_dkey(a)].values))
        else:
            p["code"] = codes_in(col, domains[_dkey(a)].values)
            if spec.keeps_arrival(a):
                p["at"] = _carried_arrival(t, a, rows, take)
        out.append(p)
    return out


def _carried_arrival(t: pa.Table, a: Aggregate, rows: np.ndarray, take: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(batch, seq) where carried sessions' ``first`` / ``last`` values arrived
    (:meth:`Spec.partial_fields`). State written before these columns existed has none:
    its sessions then rank by start, which is how merges combined them then."""
    names = [STATE_PREFIX + f"partial_{a.name}_{c}" for c in ("batch", "seq")]
    if not all(n in t.column_names for n in names):
        start = pc.fill_null(_scol(t, "window_start_ms", rows), 0).to_numpy().astype(np.int64)
        return np.full(len(rows), MIN_TIMESTAMP, dtype=np.int64), start
    b, q = (pc.fill_null(t[n].take(take), 0).to_numpy().astype(np.int64) for n in names)
    return b, q


def _final_value(a: Aggregate, p: dict, sel: np.ndarray, spec: Spec, domains) -> pa.Array:
    if a.type == "count":
        return pa.array(p["n"][sel], pa.int64())
    if a.type == "distinct":
        return pa.array(p["dcount"][sel], pa.int64())
    if a.type in ("sum", "avg"):
        n, s = p["n"][sel], p["s"][sel]
        if _is_decimal(spec.sum_type(a)):
            if a.type == "avg":
                return _decimal_avg(s, n, spec.sum_type(a), spec.output_type(a))
            return _decimal_array(s, n == 0, spec.output_type(a))
        if a.type == "avg":
            with np.errstate(invalid="ignore", divide="ignore"):
                return pa.array(s.astype(np.float64) / np.where(n > 0, n, 1), pa.float64(), mask=n == 0)
        return pa.array(s, spec.output_type(a), mask=n == 0)
    return _decode(p["code"][sel], domains[_dkey(a)].values)


def _decode(codes: np.ndarray, domain: pa.Array) -> pa.Array:
    mask = codes < 0
    return domain.take(pa.array(np.where(mask, 0, codes), pa.int64(), mask=mask)) if len(domain) else \
        pa.nulls(len(codes), domain.type)


def _partial_columns(a: Aggregate, p: dict, sel: np.ndarray, spec: Spec, domains) -> dict[str, pa.Array]:
    name = f"partial_{a.name}"
    if a.type in ("sum", "avg"):
        vt = spec.sum_type(a)
        if _is_decimal(vt):
            low, high = _split_overflow(p["s"][sel], vt)
            return {name: _decimal_array(low, np.zeros(len(sel), bool), vt),
                    name + "_n": pa.array(p["n"][sel], pa.int64()), name + "_overflow": pa.array(high, pa.int64())}
        return {name: pa.array(p["s"][sel], vt), name + "_n": pa.array(p["n"][sel], pa.int64())}
    if a.type == "count":
        return {name: pa.array(p["n"][sel], pa.int64())}
    if a.type == "distinct":
        grp, codes = p["members"]
        # Members of the selected groups, as one sorted list per group.
        pos = np.full(len(p["dcount"]), -1, dtype=np.int64)
        pos[sel] = np.arange(len(sel))
        keep = pos[grp] >= 0
        gi, ci = pos[grp[keep]], codes[keep]
        # Each list in value order: the carried state must not depend on input row order.
        values = _decode(ci, domains[_dkey(a)].values)
        order = pc.sort_indices(pa.table({"g": gi, "v": values}), [("g", "ascending"), ("v", "ascending")])
        gi = gi[order.to_numpy()]
        values = values.take(order)
        offsets = np.concatenate(([0], np.cumsum(np.bincount(gi, minlength=len(sel)))))
        return {name: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)}
    out = {name: _decode(p["code"][sel], domains[_dkey(a)].values)}
    if spec.keeps_arrival(a):
        null = p["code"][sel] < 0
        out[name + "_batch"] = pa.array(p["at"][0][sel], pa.int64(), mask=null)
        out[name + "_seq"] = pa.array(p["at"][1][sel], pa.int64(), mask=null)
    return out


def _reduce(spec: Spec, grp: np.ndarray, ngroups: int, ev_idx: np.ndarray, values, domains,
            init: list[dict] | None, init_grp: np.ndarray) -> list[dict]:
    """Aggregate events ``ev_idx`` (in arrival order) into groups ``grp``.

    ``init`` are carried partials of groups ``init_grp``; they come first in every fold.
    """
    out = []
    for i, a in enumerate(spec.pipeline.aggregates):
        ini = init[i] if init is not None else None
        p: dict[str, Any] = {}
        if a.type == "count":
            if a.column is None:
                gv = grp
            else:
                gv = grp[values[("valid", a.column)][0][ev_idx]]
            p["n"] = np.bincount(gv, minlength=ngroups).astype(np.int64)
            if ini is not None:
                np.add.at(p["n"], init_grp, ini["n"])
        elif a.type in ("sum", "avg"):
            vals, valid = values[("num", a.column)]
            vals, valid = vals[ev_idx], valid[ev_idx]
            s = np.zeros(ngroups, dtype=vals.dtype)
            n = np.zeros(ngroups, dtype=np.int64)
            if ini is not None:
                s[init_grp] = ini["s"]
                n[init_grp] = ini["n"]
            np.add.at(s, grp[valid], vals[valid])  # unbuffered: a left fold in arrival order
            n += np.bincount(grp[valid], minlength=ngroups)
            p["s"], p["n"] = s, n
        else:
            codes, valid = values[("code", *_dkey(a))]
            ok = valid[ev_idx]
            gv, cv = grp[ok], codes[ev_idx][ok]
            if a.type == "distinct":
                C = np.int64(len(domains[_dkey(a)].values) + 1)
                mg, mc = gv, cv
                if ini is not None:
                    sg, sc = ini["members"]
                    mg, mc = np.concatenate([init_grp[sg], gv]), np.concatenate([sc, cv])
                # Distinct (group, value) pairs by hashing; their order does not matter.
                enc = pc.unique(pa.array(mg.astype(np.int64) * C + mc, pa.int64())).to_numpy()
                ug, uc = enc // C, enc % C
                p["dcount"] = np.bincount(ug, minlength=ngroups).astype(np.int64)
                p["members"] = (ug, uc)
            else:
                code = np.full(ngroups, -1, dtype=np.int64)
                if ini is not None:
                    code[init_grp] = ini["code"]
                if a.type == "min":
                    code[code < 0] = MAX_TIMESTAMP
                    np.minimum.at(code, gv, cv)
                    code[code == MAX_TIMESTAMP] = -1
                elif a.type == "max":
                    np.maximum.at(code, gv, cv)
                elif a.type == "first":  # carried first wins; else the first non-null event
                    u, idx = np.unique(gv, return_index=True)
                    keep = code[u] < 0
                    code[u[keep]] = cv[idx[keep]]
                else:  # last: the last non-null event; else the carried last
                    u, idx = np.unique(gv[::-1], return_index=True)
                    code[u] = cv[len(cv) - 1 - idx]
                p["code"] = code
        out.append(p)
    return out


# =========================================================================== tumbling / sliding


def _assign(t: np.ndarray, w) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(event index, window start, window end) for every window an event belongs to."""
    idx = np.arange(len(t), dtype=np.int64)
    if w.type is WindowType.TUMBLING:
        ws = np.floor_divide(t - w.offset_ms, w.span_ms) * w.span_ms + w.offset_ms
        return idx, ws, ws + w.span_ms
    L, S = w.slide_ms, w.span_ms
    base = np.floor_divide(t - w.offset_ms, L) * L + w.offset_ms
    k = -(-S // L)
    pe, starts = [], []
    for j in range(k):
        s = base - j * L
        ok = s + S > t
        pe.append(idx[ok])
        starts.append(s[ok])
    pe_a, ws = np.concatenate(pe), np.concatenate(starts)
    order = np.lexsort((ws, pe_a))
    return pe_a[order], ws[order], ws[order] + S


class _Late:
    def __init__(self, ev_idx, ws, we, wm):
        self.ev_idx, self.ws, self.we, self.wm = ev_idx, ws, we, wm

    def table(self, ev: _Events, spec: Spec) -> pa.Table:
        take = pa.array(ev.rows[self.ev_idx]) if len(self.ev_idx) else pa.array([], pa.int64())
        cols = {c: ev.table[c].take(take) for c in spec.late_input_columns()}
        cols["batch"] = pa.array(ev.batch[self.ev_idx], pa.int64())
        cols["window_start"] = _ts(self.ws)
        cols["window_end"] = _ts(self.we)
        cols["watermark"] = _ts(self.wm)
        cols["lateness_ms"] = pa.array(self.wm - ev.t[self.ev_idx], pa.int64())
        return pa.table(cols, schema=spec.late_schema())


def _windows(ev, kb, k, idle, spec, flush_at_end, timelines):
    w = spec.window
    domains = _domains(spec, k, ev)
    values = _value_arrays(spec, ev, domains)
    pe, ws, we = _assign(ev.t, w)
    eff_prev = kb.eff_before[kb.of_event[pe]]
    late = (we <= eff_prev) if w.lateness is Lateness.WINDOW_CLOSED else (ev.t[pe] < eff_prev)
    late_out = _Late(pe[late], ws[late], we[late], eff_prev[late])
    acc = ~late
    pe, ws, we = pe[acc], ws[acc], we[acc]
    pgen = idle.gen[kb.of_event[pe]]

    # Carried windows (generation 0) and accepted pairs, grouped by (key, gen, start, end).
    srows = np.flatnonzero(k.kind == STATE_WINDOW)
    t = k.table
    s_ws = _scol(t, "window_start_ms", srows).to_numpy().astype(np.int64)
    s_we = _scol(t, "window_end_ms", srows).to_numpy().astype(np.int64)
    s_em = pc.fill_null(_scol(t, "emissions", srows), 0).to_numpy().astype(np.int64)
    s_events = pc.fill_null(_scol(t, "events", srows), 0).to_numpy().astype(np.int64)
    ns = len(srows)
    all_g = np.concatenate([k.gid[srows], ev.g[pe]])
    all_gen = np.concatenate([np.zeros(ns, np.int64), pgen])
    all_ws = np.concatenate([s_ws, ws])
    all_we = np.concatenate([s_we, we])
    all_pos = np.concatenate([np.full(ns, -1, np.int64), pe])  # arrival order; carried first
    order = np.lexsort((all_pos, all_we, all_ws, all_gen, all_g))
    all_g, all_gen, all_ws, all_we, all_pos = (x[order] for x in (all_g, all_gen, all_ws, all_we, all_pos))
    n_all = len(order)
    if n_all:
        newgrp = np.concatenate(([True], (all_g[1:] != all_g[:-1]) | (all_gen[1:] != all_gen[:-1])
                                 | (all_ws[1:] != all_ws[:-1]) | (all_we[1:] != all_we[:-1])))
    else:
        newgrp = np.zeros(0, dtype=bool)
    grp = np.cumsum(newgrp) - 1
    M = int(grp[-1]) + 1 if n_all else 0
    gs = np.flatnonzero(newgrp)
    G_g, G_gen, G_ws, G_we = all_g[gs], all_gen[gs], all_ws[gs], all_we[gs]
    is_state = order < ns
    G_state = np.full(M, -1, dtype=np.int64)  # index into srows
    G_state[grp[is_state]] = order[is_state]
    state_grp = np.zeros(ns, dtype=np.int64)  # the group of each carried window, in srows order
    state_grp[order[is_state]] = grp[is_state]
    ev_el = ~is_state
    partials = _reduce(spec, grp[ev_el], M, all_pos[ev_el], values, domains,
                       _state_partials(spec, k, srows, domains) if ns else None,
                       state_grp)
    events = np.bincount(grp[ev_el], minlength=M).astype(np.int64)
    if ns:
        np.add.at(events, grp[is_state], s_events[order[is_state]])

    # Closing: first key batch whose effective watermark reaches the end ...
    pos = seg_searchsorted(kb.eff_after, kb.g, G_we, G_g)
    has_wm = (pos < kb.n) & (pos <= np.where(kb.key_last[G_g] >= 0, kb.key_last[G_g], -1))
    has_wm &= np.take(kb.g, np.minimum(pos, max(kb.n - 1, 0)), mode="clip") == G_g if kb.n else False
    # ... unless the generation ended with an idle flush first.
    end_kb, end_fired = _generation_ends(kb, idle, k, G_g, G_gen)
    reason = np.full(M, OPEN, dtype=np.int8)
    emit_batch = np.zeros(M, dtype=np.int64)
    emit_wm = np.full(M, MIN_TIMESTAMP, dtype=np.int64)
    emit_time = np.full(M, MIN_TIMESTAMP, dtype=np.int64)
    by_wm = has_wm & (~end_fired | (pos <= end_kb))
    reason[by_wm] = WATERMARK
    safe = np.minimum(pos, max(kb.n - 1, 0))
    if kb.n:
        emit_batch[by_wm] = kb.batch[safe[by_wm]]
        emit_wm[by_wm] = kb.eff_after[safe[by_wm]]
        emit_time[by_wm] = idle.kb_clock[safe[by_wm]]
    by_idle = end_fired & ~by_wm
    reason[by_idle] = IDLE
    _set_idle_emit(by_idle, end_kb, G_g, idle, kb, k, spec, emit_batch, emit_wm, emit_time)
    _flush_open(reason, emit_batch, emit_wm, emit_time, G_g, idle, kb, flush_at_end)

    groups = _Groups(spec, domains)
    created = np.ones(M, dtype=bool)
    created[G_state >= 0] = False
    groups.created = np.bincount(G_g[created], minlength=k.n)
    emission, reopen = _emissions(k, kb, G_g, G_ws, G_we, G_gen, reason,
                                  np.where(G_state >= 0, s_em[np.maximum(G_state, 0)] if ns else 0, 0),
                                  spec, lambda g: kb.eff_final[g], 0)
    groups.idle_flushes = _count_idle_flushes(reason, G_g, G_gen, k.n)
    groups.set(G_g, G_ws, G_we, reason, emit_batch, emit_wm, emission, events, partials, reopen,
               emit_time=emit_time)

    snaps = None
    if spec.snapshots:
        snaps = _snapshots(spec, domains, values, grp, ev_el, all_pos, M, G_g, G_ws, G_we, emission,
                           partials_init=(_state_partials(spec, k, srows, domains) if ns else None),
                           state_grp=state_grp, s_events=s_events, ev=ev, kb=kb,
                           snapshot_time=_snapshot_times(ev, kb, idle))
    return groups, late_out, snaps


def _generation_ends(kb, idle, k, G_g, G_gen):
    """For each group's (key, generation): the key batch after which it was flushed idle
    (-1: before the key's first batch) and whether it was flushed at all."""
    fired = np.flatnonzero(idle.kb_fire)
    width = np.int64(max(int(G_gen.max(initial=0)), int(idle.gen.max(initial=0))) + 2)
    # generation x of key g ends at the fired batch j with gen[j] == x
    enc_f = kb.g[fired].astype(np.int64) * width + idle.gen[fired]
    enc_q = G_g.astype(np.int64) * width + G_gen
    i = np.searchsorted(enc_f, enc_q)
    ok = i < len(enc_f)
    ok[ok] = enc_f[i[ok]] == enc_q[ok]
    end_kb = np.full(len(G_g), MAX_TIMESTAMP, dtype=np.int64)
    end_kb[ok] = fired[i[ok]]
    pre = (G_gen == 0) & idle.pre_fire[G_g]
    end_kb[pre] = -1
    return end_kb, ok | pre


def _set_idle_emit(mask, end_kb, G_g, idle, kb, k, spec, emit_batch, emit_wm, emit_time):
    j = end_kb[mask]
    pre = j < 0
    jj = np.maximum(j, 0)
    g = G_g[mask]
    eb = np.where(pre, idle.pre_batch[g], idle.kb_batch[jj] if kb.n else 0)
    ew = np.where(pre, sat_sub(k.wm0[g], spec.window.delay_ms), kb.eff_after[jj] if kb.n else MIN_TIMESTAMP)
    emit_batch[mask] = eb
    emit_wm[mask] = ew
    emit_time[mask] = np.where(pre, idle.pre_time[g], idle.kb_time[jj] if kb.n else 0)


def _flush_open(reason, emit_batch, emit_wm, emit_time, G_g, idle, kb, flush_at_end):
    if not flush_at_end:
        return
    m = reason == OPEN
    reason[m] = END_OF_INPUT
    emit_batch[m] = idle.last_batch[G_g[m]]
    emit_wm[m] = kb.eff_final[G_g[m]]
    emit_time[m] = idle.last_clock[G_g[m]]


def _snapshot_times(ev: _Events, kb: _KeyBatches, idle: _Idle) -> np.ndarray:
    """Emit time of each event's ``atAggregate`` snapshots: the worker's clock as the event
    is processed, before its batch commits: the greatest arrival time the worker has
    seen, this event's included (its batch's earlier events arrived no later than it)."""
    return np.maximum(idle.kb_clock_before[kb.of_event], ev.arr) if ev.n else np.zeros(0, np.int64)


def _count_idle_flushes(reason, G_g, G_gen, n_keys: int) -> np.ndarray:
    """Idle flushes per key: its distinct generations that ended IDLE."""
    m = reason == IDLE
    if not m.any():
        return np.zeros(n_keys, dtype=np.int64)
    flushes = np.unique(np.stack([G_g[m], G_gen[m]], axis=1), axis=0)
    return np.bincount(flushes[:, 0], minlength=n_keys)


def _emissions(k, kb, G_g, G_ws, G_we, G_gen, reason, carried_prior, spec, final_eff, reopen_margin):
    """Emission number of every group and the counters of re-openable emitted windows.

    A (key, window) emitted before, in this replay or an earlier one, gets the next number.
    """
    t = k.table
    erows = np.flatnonzero(k.kind == STATE_EMITTED)
    e_g = k.gid[erows]
    e_ws = _scol(t, "window_start_ms", erows).to_numpy().astype(np.int64)
    e_we = _scol(t, "window_end_ms", erows).to_numpy().astype(np.int64)
    e_n = _scol(t, "emissions", erows).to_numpy().astype(np.int64)
    M, ne = len(G_g), len(erows)
    cg = np.concatenate([e_g, G_g])
    cws = np.concatenate([e_ws, G_ws])
    cwe = np.concatenate([e_we, G_we])
    src = np.concatenate([np.zeros(ne, np.int64), np.ones(M, np.int64)])
    cgen = np.concatenate([np.full(ne, -1, np.int64), G_gen])
    order = np.lexsort((cgen, src, cwe, cws, cg))
    og, ows, owe = cg[order], cws[order], cwe[order]
    run_start = np.concatenate(([True], (og[1:] != og[:-1]) | (ows[1:] != ows[:-1]) | (owe[1:] != owe[:-1]))) \
        if len(order) else np.zeros(0, bool)
    run = np.cumsum(run_start) - 1
    nrun = int(run[-1]) + 1 if len(order) else 0
    base = np.zeros(nrun, dtype=np.int64)
    is_e = order < ne
    base[run[is_e]] = e_n[order[is_e]]
    prior = np.zeros(len(order), dtype=np.int64)
    prior[~is_e] = carried_prior[order[~is_e] - ne]
    # rank of each group within its run (carried counter rows excluded)
    grp_rank = np.zeros(len(order), dtype=np.int64)
    gi = np.flatnonzero(~is_e)
    if len(gi):
        grp_rank[gi] = seg_rank(run[gi])
    first_prior = np.zeros(nrun, dtype=np.int64)
    if len(gi):
        firsts = gi[seg_rank(run[gi]) == 0]
        first_prior[run[firsts]] = prior[firsts]
    emission = np.zeros(M, dtype=np.int64)
    emission[order[gi] - ne] = base[run[gi]] + first_prior[run[gi]] + grp_rank[gi] + 1
    # Re-openable counters: runs whose last group is emitted (or only a carried counter).
    last_of_run = np.append(run_start[1:], True) if len(order) else np.zeros(0, bool)
    lo = np.flatnonzero(last_of_run)
    lo_is_e = is_e[lo]
    lo_group = np.where(lo_is_e, -1, order[lo] - ne)
    total = np.where(lo_is_e, base[run[lo]], 0)
    ok_g = ~lo_is_e
    total[ok_g] = emission[lo_group[ok_g]]
    open_last = np.zeros(len(lo), dtype=bool)
    open_last[ok_g] = reason[lo_group[ok_g]] == OPEN
    keep = ~open_last & (total > 0) & (owe[lo] + reopen_margin > final_eff(og[lo]))
    closed_by_wm = np.zeros(len(lo), dtype=bool)
    closed_by_wm[ok_g] = reason[lo_group[ok_g]] == WATERMARK
    keep &= ~closed_by_wm
    return emission, (og[lo][keep], ows[lo][keep], owe[lo][keep], total[keep])


def _snapshots(spec, domains, values, grp, ev_el, all_pos, M, G_g, G_ws, G_we, emission, partials_init,
               state_grp, s_events, ev, kb, snapshot_time):
    """atAggregate: one row per accepted (event, window) with the window's running aggregate
    (emitted at ``snapshot_time`` of its event, see :func:`_snapshot_times`)."""
    e_grp = grp[ev_el]
    e_pos = all_pos[ev_el]
    n = len(e_grp)
    st_grp = state_grp
    has_state = np.zeros(M, dtype=bool)
    has_state[st_grp] = True
    # Each snapshot is "the group so far": reduce prefixes by treating every element as its own group.
    # prefix i of group x = carried partial + events of x up to i (inclusive).
    idx = np.arange(n, dtype=np.int64)
    rank = seg_rank(e_grp)
    start = idx - rank
    # expand prefixes: element j contributes to snapshots j..end of its group; done per aggregate
    out_partials = []
    sp = partials_init
    st_index = np.full(M, -1, dtype=np.int64)
    st_index[st_grp] = np.arange(len(st_grp))
    for i, a in enumerate(spec.pipeline.aggregates):
        ini = sp[i] if sp is not None else None
        p: dict[str, Any] = {}
        si = st_index[e_grp]
        has = si >= 0
        if a.type == "count":
            if a.column is None:
                c = rank + 1
            else:
                valid = values[("valid", a.column)][0][e_pos].astype(np.int64)
                c = _seg_cumsum_int(valid, e_grp)
            if ini is not None:
                c = c + np.where(has, ini["n"][np.maximum(si, 0)], 0)
            p["n"] = c
        elif a.type in ("sum", "avg"):
            vals, valid = values[("num", a.column)]
            v, ok = vals[e_pos], valid[e_pos]
            s = np.zeros(n, dtype=v.dtype)
            init_s = np.zeros(M, dtype=v.dtype)
            nn = _seg_cumsum_int(ok.astype(np.int64), e_grp)
            if ini is not None:
                init_s[st_grp] = ini["s"]
                nn = nn + np.where(has, ini["n"][np.maximum(si, 0)], 0)
            # sequential running sum per group (a left fold, same as the final sum)
            gstarts = starts_of(e_grp)
            ends = np.append(gstarts[1:], n)
            vv = np.where(ok, v, 0)
            for a0, b0 in zip(gstarts.tolist(), ends.tolist()):
                s[a0:b0] = np.cumsum(np.concatenate(([init_s[e_grp[a0]]], vv[a0:b0])))[1:]
            p["s"], p["n"] = s, nn
        else:
            codes, valid = values[("code", *_dkey(a))]
            c, ok = codes[e_pos], valid[e_pos]
            if a.type == "distinct":
                C = np.int64(len(domains[_dkey(a)].values) + 1)
                enc = e_grp.astype(np.int64) * C + np.where(ok, c, 0)
                seen_state = np.zeros(n, dtype=bool)
                if ini is not None:
                    sg, sc = ini["members"]
                    st_enc = st_grp[sg].astype(np.int64) * C + sc
                    seen_state = np.isin(enc, st_enc)
                okix = np.flatnonzero(ok)
                _, first_idx = np.unique(enc[okix], return_index=True)
                new = np.zeros(n, dtype=bool)
                new[okix[first_idx]] = True
                new &= ~seen_state
                dc = _seg_cumsum_int(new.astype(np.int64), e_grp)
                if ini is not None:
                    counts = np.bincount(sg, minlength=len(st_grp))
                    dc = dc + np.where(has, counts[np.maximum(si, 0)], 0)
                p["dcount"] = dc
            elif a.type in ("min", "max"):
                big = np.int64(len(domains[_dkey(a)].values) + 2)
                val = np.where(ok, c if a.type == "max" else big - 2 - c, -1)
                init = np.full(M, -1, dtype=np.int64)
                if ini is not None:
                    ic = ini["code"]
                    init[st_grp] = np.where(ic >= 0, ic if a.type == "max" else big - 2 - ic, -1)
                val = np.maximum(val, init[e_grp])
                enc = e_grp.astype(np.int64) * big + (val + 1)
                run = np.maximum.accumulate(enc) - e_grp.astype(np.int64) * big - 1
                p["code"] = np.where(run < 0, -1, run if a.type == "max" else big - 2 - run)
            elif a.type == "first":
                cand = np.where(ok, idx, n)
                firstpos = np.full(M, n, dtype=np.int64)
                np.minimum.at(firstpos, e_grp, cand)
                fp = firstpos[e_grp]
                code = np.where(fp <= idx, c[np.minimum(fp, n - 1)] if n else -1, -1)
                if ini is not None:
                    carried = np.where(has, ini["code"][np.maximum(si, 0)], -1)
                    code = np.where(carried >= 0, carried, code)
                p["code"] = code
            else:  # last
                lastpos = np.where(ok, idx, -1)
                lastpos = np.maximum.accumulate(lastpos) if n else lastpos
                code = np.where(lastpos >= start, c[np.maximum(lastpos, 0)] if n else -1, -1)
                if ini is not None:
                    carried = np.where(has, ini["code"][np.maximum(si, 0)], -1)
                    code = np.where(code >= 0, code, carried)
                p["code"] = code
        out_partials.append(p)
    snaps = _Groups(spec, domains)
    ev_kb = kb.of_event[e_pos]
    events = rank + 1 + np.where(st_index[e_grp] >= 0, s_events[np.maximum(st_index[e_grp], 0)]
                                 if len(st_grp) else 0, 0)
    snaps.set(G_g[e_grp], G_ws[e_grp], G_we[e_grp], np.full(n, AGGREGATE, np.int8), ev.batch[e_pos],
              kb.eff_before[ev_kb], emission[e_grp], events, out_partials,
              (np.zeros(0, np.int64),) * 4, emit_time=snapshot_time[e_pos])
    return snaps


def _seg_cumsum_int(v: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running integer sum restarting at each segment (exact, so a global cumsum works)."""
    if len(v) == 0:
        return v.astype(np.int64)
    c = np.cumsum(v)
    st = starts_of(seg)
    before = (c - v)[st]
    return c - np.repeat(before, np.diff(np.append(st, len(v))))


# =========================================================================== sessions


def _sessions(ev, kb, k, idle, spec, flush_at_end, timelines):
    """Session windows: a tight sequential merge per key (docs/semantics.md section 7).

    Merges are order-dependent (an event can bridge two sessions; maximumDuration makes a
    merge skip), so each key's events are walked in arrival order; aggregates of merged
    sessions combine in start order, then the event is applied.

    ``first`` and ``last`` are by arrival order (contract section 7), and a merge can join
    a session that started later but arrived earlier, so each such partial keeps the
    arrival position of its value and a merge takes the earliest / latest one. Here a
    position is one int per key: an event's index in arrival order (``ev``), and for
    values carried from earlier partitions a negative rank of their (batch, seq) pairs
    (:meth:`Spec.partial_fields`). Every carried value arrived before every event here,
    since a worker's batches only grow across partitions (older ones are rejected), so
    carried positions rank below events, and among themselves by (batch, seq).
    """
    w = spec.window
    G, M = w.gap_ms, w.maximum_duration_ms
    closed_mode = w.lateness is Lateness.WINDOW_CLOSED
    aggs = spec.pipeline.aggregates
    domains = _domains(spec, k, ev)
    values = _value_arrays(spec, ev, domains)
    # Per-event, per-aggregate inputs as Python lists: (kind, value, valid).
    ev_inputs = []
    for a in aggs:
        if a.type == "count":
            v = values[("valid", a.column)][0].tolist() if a.column else [True] * ev.n
            ev_inputs.append((v, v))
        elif a.type in ("sum", "avg"):
            vals, valid = values[("num", a.column)]
            ev_inputs.append((vals.tolist(), valid.tolist()))
        else:
            codes, valid = values[("code", *_dkey(a))]
            ev_inputs.append((codes.tolist(), valid.tolist()))
    kinds = [a.type for a in aggs]

    def empty():
        return [[0, 0, -1, set(), 0] for _ in aggs]  # n, s, code, members, arrival position of code

    def apply(parts, i):
        for p, kind, (v, ok) in zip(parts, kinds, ev_inputs):
            if not ok[i]:
                continue
            if kind == "count":
                p[0] += 1
            elif kind in ("sum", "avg"):
                p[1] = p[1] + v[i]
                p[0] += 1
            elif kind == "distinct":
                p[3].add(v[i])
            elif kind == "min":
                p[2] = v[i] if p[2] < 0 else min(p[2], v[i])
            elif kind == "max":
                p[2] = max(p[2], v[i])
            elif kind == "first":
                if p[2] < 0:
                    p[2], p[4] = v[i], i
            else:
                p[2], p[4] = v[i], i

    def combine(acc, other):
        for p, q, kind in zip(acc, other, kinds):
            p[0] += q[0]
            if kind in ("sum", "avg"):
                p[1] = p[1] + q[1]
            elif kind == "distinct":
                p[3] |= q[3]
            elif kind == "min":
                p[2] = q[2] if p[2] < 0 else (min(p[2], q[2]) if q[2] >= 0 else p[2])
            elif kind == "max":
                p[2] = max(p[2], q[2])
            elif kind == "first":  # the value that arrived first, whichever session holds it
                if q[2] >= 0 and (p[2] < 0 or q[4] < p[4]):
                    p[2], p[4] = q[2], q[4]
            elif kind == "last":
                if q[2] >= 0 and (p[2] < 0 or q[4] > p[4]):
                    p[2], p[4] = q[2], q[4]

    # Carried sessions and emission counters, per key.
    t = k.table
    srows = np.flatnonzero(k.kind == STATE_WINDOW)
    carried: dict[int, list] = {}
    at_pos, at_batch, at_seq = None, np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(srows):
        sp = _state_partials(spec, k, srows, domains)
        at_pos, at_batch, at_seq = _carried_positions(spec, sp)
        s_ws = _scol(t, "window_start_ms", srows).to_numpy().tolist()
        s_we = _scol(t, "window_end_ms", srows).to_numpy().tolist()
        s_events = pc.fill_null(_scol(t, "events", srows), 0).to_numpy().tolist()
        members = [[set() for _ in srows] for _ in aggs]
        for ai, a in enumerate(aggs):
            if a.type == "distinct":
                for r, c in zip(*(x.tolist() for x in sp[ai]["members"])):
                    members[ai][r].add(c)
        for r, g in enumerate(k.gid[srows].tolist()):
            parts = []
            for ai in range(len(aggs)):
                p = sp[ai]
                parts.append([int(p["n"][r]) if "n" in p else 0,
                              _py(p["s"][r]) if "s" in p else 0,
                              int(p["code"][r]) if "code" in p else -1,
                              members[ai][r],
                              int(at_pos[ai][r]) if at_pos is not None and at_pos[ai] is not None else 0])
            carried.setdefault(g, []).append([s_ws[r], s_we[r], s_events[r], parts])
    erows = np.flatnonzero(k.kind == STATE_EMITTED)
    counters: dict[tuple, int] = {}
    if len(erows):
        for g, a0, b0, n0 in zip(k.gid[erows].tolist(),
                                 _scol(t, "window_start_ms", erows).to_pylist(),
                                 _scol(t, "window_end_ms", erows).to_pylist(),
                                 _scol(t, "emissions", erows).to_pylist()):
            counters[(g, a0, b0)] = n0

    out: list[_Row] = []
    snaps: list[_Row] = []
    late = ([], [], [])
    created, idle_flushes = [0] * k.n, [0] * k.n  # per key
    ts = ev.t.tolist()
    kb_start = kb.start.tolist() + [ev.n]
    eff_before, eff_after = kb.eff_before.tolist(), kb.eff_after.tolist()
    kb_batch, kb_fire, fire_batch = kb.batch.tolist(), idle.kb_fire.tolist(), idle.kb_batch.tolist()
    kb_clock, fire_time = idle.kb_clock.tolist(), idle.kb_time.tolist()
    ev_batch = ev.batch.tolist()
    snap_time = _snapshot_times(ev, kb, idle).tolist()

    def emit(g, s, reason, batch, wm, time):
        key = (g, s[0], s[1])
        counters[key] = counters.get(key, 0) + 1
        out.append(_Row(g, s[0], s[1], reason, batch, wm, counters[key], s[2], s[3], time))

    keys = sorted(set(kb.g.tolist()) | set(carried))
    for g in keys:
        open_ = carried.get(g, [])
        if open_ and idle.pre_fire[g]:
            for s in sorted(open_, key=lambda s: s[0]):
                emit(g, s, IDLE, int(idle.pre_batch[g]), int(sat_sub(k.wm0[g:g + 1], w.delay_ms)[0]),
                     int(idle.pre_time[g]))
            open_ = []
            idle_flushes[g] += 1
        j0 = int(kb.key_first[g])
        for j in (range(j0, int(kb.key_last[g]) + 1) if j0 >= 0 else ()):
            eff = eff_before[j]
            for i in range(kb_start[j], kb_start[j + 1]):
                te = ts[i]
                if eff != MIN_TIMESTAMP and ((te + G <= eff) if closed_mode else (te < eff)):
                    late[0].append(i), late[1].append(te), late[2].append(eff)
                    continue
                lo, hi, merged, rest = te, te, [], []
                for s in sorted(open_, key=lambda s: s[0]):
                    if s[0] - G < te < s[1] + G and not (M and max(hi, s[1]) - min(lo, s[0]) >= M):
                        merged.append(s)
                        lo, hi = min(lo, s[0]), max(hi, s[1])
                    else:
                        rest.append(s)
                parts, events = empty(), 0
                for s in merged:
                    combine(parts, s[3])
                    events += s[2]
                if not merged:
                    created[g] += 1
                apply(parts, i)
                session = [lo, hi, events + 1, parts]
                open_ = rest + [session]
                if snaps is not None and spec.snapshots:
                    snaps.append(_Row(g, lo, hi, AGGREGATE, ev_batch[i], eff,
                                      counters.get((g, lo, hi), 0) + 1, events + 1, _copy_parts(parts),
                                      snap_time[i]))
            eff = eff_after[j]
            keep = []
            for s in sorted(open_, key=lambda s: s[0]):
                if eff != MIN_TIMESTAMP and s[1] + G <= eff:
                    emit(g, s, WATERMARK, kb_batch[j], eff, kb_clock[j])
                elif eff != MIN_TIMESTAMP and M and s[0] + M <= eff:
                    emit(g, s, MAX_DURATION, kb_batch[j], eff, kb_clock[j])
                else:
                    keep.append(s)
            open_ = keep
            if kb_fire[j] and open_:
                for s in open_:
                    emit(g, s, IDLE, fire_batch[j], eff, fire_time[j])
                open_ = []
                idle_flushes[g] += 1
        final_eff = int(kb.eff_final[g])
        for s in sorted(open_, key=lambda s: s[0]):
            if flush_at_end:
                emit(g, s, END_OF_INPUT, int(idle.last_batch[g]), final_eff, int(idle.last_clock[g]))
            else:
                out.append(_Row(g, s[0], s[1], OPEN, 0, MIN_TIMESTAMP, counters.get((g, s[0], s[1]), 0) + 1,
                                s[2], s[3], MIN_TIMESTAMP))

    groups = _rows_to_groups(spec, domains, out)
    groups.created, groups.idle_flushes = np.array(created, np.int64), np.array(idle_flushes, np.int64)
    # Positions back to (batch, seq) for the state: carried ones first, then the events'.
    ev_seq = np.arange(ev.n, dtype=np.int64) - kb.start[kb.of_event] if ev.n else np.zeros(0, np.int64)
    all_batch, all_seq = np.concatenate([at_batch, ev.batch]), np.concatenate([at_seq, ev_seq])
    for a, p in zip(aggs, groups.partials):
        if spec.keeps_arrival(a):
            idx = np.where(p["code"] >= 0, p["pos"] + len(at_batch), 0)
            p["at"] = (all_batch[idx], all_seq[idx]) if len(all_batch) else (idx, idx)
    open_keys = {(r.g, r.start, r.end) for r in out if r.reason == OPEN}
    keep = [(g, a0, b0, n0) for (g, a0, b0), n0 in sorted(counters.items())
            if (g, a0, b0) not in open_keys and b0 + G > int(kb.eff_final[g])]
    groups.reopenable = tuple(np.array([r[i] for r in keep], dtype=np.int64) for i in range(4))
    snap_groups = None
    if spec.snapshots:
        snap_groups = _rows_to_groups(spec, domains, snaps)
        snap_groups.reopenable = (np.zeros(0, np.int64),) * 4
    late_out = _Late(np.array(late[0], np.int64), np.array(late[1], np.int64), np.array(late[1], np.int64),
                     np.array(late[2], np.int64))
    return groups, late_out, snap_groups


def _carried_positions(spec: Spec, sp: list[dict]):
    """Arrival positions (see :func:`_sessions`) of carried ``first`` / ``last`` values.

    Returns, per aggregate, the positions of its carried values (None for aggregates
    that keep none), and the (batch, seq) of positions ``-K .. -1`` in order.
    """
    fl = [i for i, a in enumerate(spec.pipeline.aggregates) if spec.keeps_arrival(a)]
    out: list = [None] * len(sp)
    if not fl:
        return out, np.zeros(0, np.int64), np.zeros(0, np.int64)
    b = np.concatenate([sp[i]["at"][0] for i in fl])
    q = np.concatenate([sp[i]["at"][1] for i in fl])
    order = np.lexsort((q, b))
    pos = np.empty(len(b), dtype=np.int64)
    pos[order] = np.arange(len(b), dtype=np.int64) - len(b)
    n = len(b) // len(fl)
    for j, i in enumerate(fl):
        out[i] = pos[j * n:(j + 1) * n]
    return out, b[order], q[order]


def _py(v):
    """A NumPy scalar as a Python number (decimal sums already are Python ints)."""
    return v.item() if isinstance(v, np.generic) else v


def _copy_parts(parts):
    return [[p[0], p[1], p[2], set(p[3]), p[4]] for p in parts]


class _Row(NamedTuple):
    """One session window as :func:`_sessions` emits it (or keeps it open)."""

    g: int
    start: int
    end: int
    reason: int
    batch: int
    wm: int
    emission: int
    events: int
    parts: list
    time: int


def _rows_to_groups(spec, domains, rows: list[_Row]) -> _Groups:
    groups = _Groups(spec, domains)
    partials = []
    for ai, a in enumerate(spec.pipeline.aggregates):
        ps = [r.parts[ai] for r in rows]
        p: dict[str, Any] = {"n": np.array([q[0] for q in ps], dtype=np.int64)}
        if a.type in ("sum", "avg"):
            p["s"] = np.array([q[1] for q in ps], dtype=_sum_dtype(spec.value_type(a)))
        elif a.type == "distinct":
            p["dcount"] = np.array([len(q[3]) for q in ps], dtype=np.int64)
            gi = [r for r, q in enumerate(ps) for _ in q[3]]
            ci = [c for q in ps for c in sorted(q[3])]
            p["members"] = (np.array(gi, dtype=np.int64), np.array(ci, dtype=np.int64))
        elif a.type != "count":
            p["code"] = np.array([q[2] for q in ps], dtype=np.int64)
            if spec.keeps_arrival(a):
                p["pos"] = np.array([q[4] for q in ps], dtype=np.int64)
        partials.append(p)
    def column(name: str) -> np.ndarray:
        return np.array([getattr(r, name) for r in rows], dtype=np.int64)

    groups.set(column("g"), column("start"), column("end"), column("reason").astype(np.int8), column("batch"),
               column("wm"), column("emission"), column("events"), partials, emit_time=column("time"))
    return groups
