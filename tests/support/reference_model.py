"""Reference model of rewindow's windowing semantics: one event at a time.

A deliberately naive simulation of the live system, written to be read next to
``docs/semantics.md`` (cited as "§n" below): each worker processes its batches in
order, each batch's events in arrival order, then commits; windows close after each
commit. No vectorisation, no cleverness: the test suite checks the Spark engine
against this model on generated cases, so every rule is spelled out literally.

    res = reference_replay(pipeline, rows, state=None, flush_at_end=False)

``rows`` are dicts keyed by input column name; time columns are int epoch
milliseconds (``None`` = missing, which rejects the row). ``res.state`` carries
everything to the next call, so replaying history in pieces gives the same output
as one call over all of it (§9). Decimal columns hold ``decimal.Decimal`` values and
are named with their type: ``reference_replay(..., decimals={"amount": (12, 2)})``.
"""

from __future__ import annotations

import copy
import decimal
import math
import struct
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from itertools import groupby
from typing import Any, Hashable

from windowing.config import Clock, Lateness, Pipeline, Trigger, WatermarkStrategy, WindowType

#: Minus infinity: the starting value of every watermark and clock (§3).
MIN_TIMESTAMP = float("-inf")
#: Emission reasons (§6, §7, §8).
WATERMARK, IDLE, MAX_DURATION, END_OF_INPUT, AGGREGATE = (
    "WATERMARK",
    "IDLE",
    "MAX_DURATION",
    "END_OF_INPUT",
    "AGGREGATE",
)


def _value_order(v: Any) -> tuple:
    """Sort key of one column value (§2): nulls first; floats in IEEE total order."""
    if v is None:
        return (0, 0)
    if isinstance(v, float):
        bits = struct.unpack("<q", struct.pack("<d", v))[0]
        return (1, bits ^ 0x7FFF_FFFF_FFFF_FFFF if bits < 0 else bits)
    return (1, v)


#: The one NaN key or worker (§1): every NaN, whatever its sign or payload, is this object,
#: so dict lookups (identity first) find it.
_NAN = float("nan")


class _NegativeZero(float):
    """-0.0 as a key or worker of its own (§1: a float key is its bits, but for NaN); Python's
    ``-0.0 == 0.0`` would make it the key 0.0. Equal to every -0.0, to no 0.0."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, float) and float(other) == 0.0 and math.copysign(1.0, other) < 0

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash("-0.0")


_NEGATIVE_ZERO = _NegativeZero(-0.0)


def _identity(v: Any) -> Any:
    """A key's or worker's value as the model's dicts hold it (§1)."""
    if isinstance(v, float):
        if math.isnan(v):
            return _NAN
        if v == 0.0 and math.copysign(1.0, v) < 0:
            return _NEGATIVE_ZERO
    return v


# --------------------------------------------------------------------------- state


@dataclass
class KeyState:
    """One (worker, key): watermark, activity, open windows (§3, §6, §9)."""

    wm: float | int = MIN_TIMESTAMP  # key watermark, before delayWindowClose
    max_event_ms: float | int = MIN_TIMESTAMP  # greatest event time seen (late ones too)
    max_arrival_ms: float | int = MIN_TIMESTAMP  # greatest arrival time seen (late ones too)
    #: open windows: (start, end) -> {aggregate name: partial value}; for sessions
    #: (earliest, latest event time).
    windows: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)


@dataclass
class WorkerState:
    """One worker: last committed batch, global watermark, processing clock (§3)."""

    last_batch: int | None = None
    global_wm: float | int = MIN_TIMESTAMP
    clock_ms: float | int = MIN_TIMESTAMP  # greatest arrival time committed so far
    keys: dict[Hashable, KeyState] = field(default_factory=dict)


@dataclass
class ModelState:
    """Everything carried between calls. ``emissions`` counts, per (worker, key,
    window_start, window_end), how many times that window was emitted (closed)."""

    fingerprint: str
    workers: dict[Hashable, WorkerState] = field(default_factory=dict)
    emissions: dict[tuple, int] = field(default_factory=dict)


@dataclass
class RefResult:
    aggregates: list[dict]
    late_events: list[dict]
    rejected: list[dict]
    state: ModelState
    metrics: dict[str, int]


@dataclass
class _Event:
    row: dict
    worker: Hashable
    key: Hashable
    batch: int
    arrival_ms: int
    event_ms: int
    order: tuple  # arrival order inside the worker (§2)


# --------------------------------------------------------------------------- aggregates (§8)


#: Decimal arithmetic without rounding: every sum is exact, whatever its size.
_EXACT = decimal.Context(prec=decimal.MAX_PREC, traps=[decimal.Inexact])


def _fold_sum(acc, v):
    """Left-to-right sum ignoring nulls; starts at 0.0 for floats, 0 for ints; decimals
    add exactly (the default context would round past 28 digits)."""
    if v is None:
        return acc
    if isinstance(v, Decimal):
        return v if acc is None else _EXACT.add(acc, v)
    if acc is None:
        acc = 0.0 if isinstance(v, float) else 0
    return acc + v


def _round_half_up(x: Fraction, scale: int) -> Decimal:
    """``x`` rounded to ``scale`` decimals, halves away from zero."""
    units = abs(x) * 10**scale
    whole = units.numerator // units.denominator
    if units - whole >= Fraction(1, 2):
        whole += 1
    return Decimal((int(x < 0 and whole > 0), tuple(int(d) for d in str(whole)), -scale))


def _fits(d: Decimal, precision: int, scale: int) -> bool:
    """Whether ``d`` (of at most ``scale`` decimals) fits decimal(precision, scale)."""
    return d.copy_abs() < Fraction(10) ** (precision - scale)


def _decimal_final(agg, acc, precision: int, scale: int) -> Decimal | None:
    """§8, decimal columns, as Spark types ``sum`` and ``avg`` of decimal(p, s): the sum is
    decimal(min(38, p + 10), s), null when the exact sum does not fit it; the average is
    the exact ``sum / count`` rounded HALF_UP into decimal(min(38, p + 4), min(38, s + 4)),
    null when the sum does not fit or the average does not fit its type."""
    sum_p = min(38, precision + 10)
    s = acc if agg.type == "sum" else acc[0]
    if s is None or not _fits(s, sum_p, scale):
        return None
    if agg.type == "sum":
        return s.quantize(Decimal(1).scaleb(-scale), context=_EXACT)
    avg_p, avg_s = min(38, precision + 4), min(38, scale + 4)
    avg = _round_half_up(Fraction(s) / acc[1], avg_s)
    return avg if _fits(avg, avg_p, avg_s) else None


#: Aggregates whose partial is the tuple of every non-null value, in arrival order.
_ALL_VALUES = ("stddev_pop", "stddev_samp", "percentile")


def _empty(agg) -> Any:
    if agg.type in _ALL_VALUES:
        return ()
    return {"count": 0, "avg": (None, 0), "distinct": frozenset()}.get(agg.type)


def _apply(agg, acc, row: dict, order: tuple) -> Any:
    """The partial aggregate after one more event (nulls ignored, like SQL).

    ``first`` and ``last`` keep ``(arrival order, value)`` of the event that gave their
    value (``order`` is the event's §2 arrival order), so merged sessions can pick theirs
    by arrival order (§7).
    """
    if agg.column is None:  # only `count` may have no column: counts events
        return acc + 1
    v = row.get(agg.column)
    if v is None:
        return acc
    if agg.type == "count":
        return acc + 1
    if agg.type == "sum":
        return _fold_sum(acc, v)
    if agg.type == "avg":
        return (_fold_sum(acc[0], v), acc[1] + 1)
    if agg.type == "distinct":
        return acc | {v}
    if agg.type in _ALL_VALUES:
        return acc + (v,)
    if agg.type == "min":
        return v if acc is None or v < acc else acc
    if agg.type == "max":
        return v if acc is None or v > acc else acc
    if agg.type == "first":
        return (order, v) if acc is None or order < acc[0] else acc
    if agg.type == "last":
        return (order, v) if acc is None or order > acc[0] else acc
    raise AssertionError(agg.type)


def _combine(agg, a, b) -> Any:
    """Merge partial aggregates of two sessions, ``a`` starting first (§7).

    ``first`` / ``last``: the one that arrived first / last, whichever session it is in.
    """
    if agg.type == "count":
        return a + b
    if agg.type == "sum":
        return _fold_sum(a, b)
    if agg.type == "avg":
        return (_fold_sum(a[0], b[0]), a[1] + b[1])
    if agg.type == "distinct":
        return a | b
    if agg.type in _ALL_VALUES:
        return a + b
    if b is None:
        return a
    if a is None:
        return b
    if agg.type in ("first", "last"):  # (arrival order, value); only equal rows tie (§2)
        pick = min if agg.type == "first" else max
        return pick(a, b, key=lambda p: p[0])
    return {"min": min(a, b), "max": max(a, b)}[agg.type]


def _final(agg, acc, decimal_type=None) -> Any:
    """The output value; ``decimal_type`` (precision, scale) when the column is decimal."""
    if decimal_type is not None and agg.type in ("sum", "avg"):
        return _decimal_final(agg, acc, *decimal_type)
    if agg.type == "avg":
        s, n = acc
        return None if n == 0 else s / n
    if agg.type == "distinct":
        return len(acc)
    if agg.type in ("stddev_pop", "stddev_samp"):
        return _stddev(acc, sample=agg.type == "stddev_samp")
    if agg.type == "percentile":
        return _percentile(acc, getattr(agg, "percentage", 0.5))  # a plain Aggregate: the median
    if agg.type in ("first", "last"):
        return None if acc is None else acc[1]
    return acc


def _stddev(values: tuple, sample: bool) -> float | None:
    """The standard deviation, from the exact mean and the exact sum of squared deviations
    (Fractions), rounded to a double once, then the IEEE square root. Null without a value
    (a sample: without two); NaN if a value is NaN or infinite."""
    n = len(values)
    divisor = n - 1 if sample else n
    if divisor <= 0:
        return None
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        return math.nan
    exact = [Fraction(v) for v in values]
    mean = sum(exact, Fraction(0)) / n
    variance = sum(((x - mean) ** 2 for x in exact), Fraction(0)) / divisor
    return math.sqrt(float(variance))


def _percentile(values: tuple, percentage: float) -> float | None:
    """Spark's exact ``percentile``: the values as doubles, sorted (NaN last), linearly
    interpolated at position ``percentage * (n - 1)``."""
    if not values:
        return None
    doubles = sorted((float(v) for v in values), key=lambda x: (math.isnan(x), x))
    position = (len(doubles) - 1) * percentage
    lower, higher = math.floor(position), math.ceil(position)
    if lower == higher or doubles[lower] == doubles[higher]:  # Spark returns an equal pair's value as is
        return doubles[lower]
    return (higher - position) * doubles[lower] + (position - lower) * doubles[higher]


# --------------------------------------------------------------------------- window assignment (§4)


def window_bounds(window, t: int) -> list[tuple[int, int]]:
    """The fixed windows ``[s, s + S)`` holding event time ``t``, by start.

    Tumbling: ``s = floor((t - O) / S) * S + O``. Sliding: every ``s = k * L + O``
    with ``s <= t < s + S``.
    """
    span, off = window.span_ms, window.offset_ms
    step = span if window.type is WindowType.TUMBLING else window.slide_ms
    s = (t - off) // step * step + off  # greatest window start <= t
    out = []
    while s > t - span:
        out.append((s, s + span))
        s -= step
    return sorted(out)


#: The representable times (§1), epoch ms: 0001-01-01T00:00:00.000Z .. 9999-12-31T23:59:59.999Z.
FIRST_MS, LAST_MS = -62_135_596_800_000, 253_402_300_799_999


def window_out_of_range(window, t: int) -> bool:
    """§1, issue 47: a bound of one of the fixed windows of the event at ``t`` (its end
    included) lies outside the representable range (a session's bounds are its times)."""
    if window.type is WindowType.SESSION:
        return False
    return any(not FIRST_MS <= b <= LAST_MS for bounds in window_bounds(window, t) for b in bounds)


def _watermark_ms(wm) -> int | None:
    """An output watermark: before the range (it decides as minus infinity does) or minus
    infinity, None (§1)."""
    return None if wm == MIN_TIMESTAMP or wm < FIRST_MS else int(wm)


def _ms(t) -> int | None:
    """An output timestamp: minus infinity becomes None."""
    return None if t == MIN_TIMESTAMP else int(t)


# --------------------------------------------------------------------------- the replay


class _Replay:
    def __init__(self, pipeline: Pipeline, state: ModelState, decimals=None, derive=None, keep=None):
        self.p, self.w, self.st = pipeline, pipeline.window, state
        self.decimals = dict(decimals or {})
        #: source.derive and source.filter as Python functions of a row (given by the test).
        self.derive, self.keep = dict(derive or {}), keep
        self.aggregates: list[dict] = []
        self.late: list[dict] = []
        self.rejected: list[dict] = []
        #: per worker: the greatest arrival time processed so far, committed or not (§8 atAggregate)
        self.seen_ms: dict[Hashable, int] = {}
        self.m = dict.fromkeys(
            [
                "input_rows",
                "filtered_rows",
                "rejected_rows",
                "late_events",
                "windows_created",
                "windows_emitted",
                "idle_keys_removed",
                "unique_keys",
            ],
            0,
        )

    def effective(self, wm):
        """``wm - delayWindowClose``; minus infinity stays minus infinity (§3)."""
        return wm - self.w.delay_ms

    # ---- §1 normalisation, §2 arrival order

    def normalise(self, row: dict) -> _Event | None:
        """The row as an event, or None after writing it to ``rejected`` (§1)."""
        src, w = self.p.source, self.w
        arrival = row.get(src.arrival_time)
        event = row.get(w.event_time) if w.event_time else arrival  # processing-time strategy
        batch = row.get(src.batch_column) if src.batch_column else None
        worker = _identity(row.get(src.worker)) if src.worker else None
        if arrival is None:
            reason = "arrival time is null"
        elif event is None:
            reason = "event time is null"
        elif window_out_of_range(w, event):
            reason = "window out of range"
        elif src.batch_column and batch is None:
            reason = "batch is null"
        elif src.max_future_skew_ms is not None and event - arrival > src.max_future_skew_ms:
            reason = "FUTURE_SKEW"  # §1: rejected before it moves any watermark
        else:
            reason = None
            if not src.batch_column:
                batch = arrival // src.batch_interval_ms
            ws = self.st.workers.get(worker)
            if ws is not None and ws.last_batch is not None and batch <= ws.last_batch:
                reason = "batch already committed"
        if reason is not None:
            self.rejected.append({**row, "reason": reason})
            return None
        tiebreak = tuple((row.get(c) is not None, row.get(c)) for c in src.arrival_order)  # nulls first
        rest = tuple(_value_order(row.get(c)) for c in sorted(row))  # §2: then the remaining columns
        order = (batch, arrival, tiebreak, rest)
        # A key of several columns is the tuple of their values (a null in any part is part
        # of the key, as a null key is).
        parts = tuple(_identity(row.get(c)) for c in w.keys)
        key = (parts[0] if len(parts) == 1 else parts) if parts else None
        return _Event(row, worker, key, batch, arrival, event, order)

    def run(self, rows: list[dict], flush_at_end: bool) -> None:
        self.m["input_rows"] = len(rows)
        by_worker: dict[Hashable, list[_Event]] = {}
        for row in rows:
            # Before the window (docs/configuration.md): derive in order, then filter (null drops).
            row = dict(row)
            for name, _ in self.p.source.derive:
                row[name] = self.derive[name](row)
            if self.p.source.filter is not None and self.keep(row) is not True:
                self.m["filtered_rows"] += 1
                continue
            ev = self.normalise(row)
            if ev is not None:
                by_worker.setdefault(ev.worker, []).append(ev)
        self.m["rejected_rows"] = len(self.rejected)
        self.m["unique_keys"] = len({(e.worker, e.key) for evs in by_worker.values() for e in evs})
        for worker in sorted(by_worker, key=repr):
            ws = self.st.workers.setdefault(worker, WorkerState())
            events = sorted(by_worker[worker], key=lambda e: e.order)
            for batch, group in groupby(events, key=lambda e: e.batch):
                batch_events = list(group)
                self.heartbeat(worker, ws, min(ev.arrival_ms for ev in batch_events))
                for ev in batch_events:
                    self.process(ws, ev)
                self.commit(worker, ws, batch, batch_events)
        if flush_at_end:
            self.flush_end()
        self.m["late_events"] = len(self.late)

    # ---- §5 lateness, §4/§7 window assignment, §8 atAggregate

    def process(self, ws: WorkerState, ev: _Event) -> None:
        """Apply one event to its key, against the key's effective watermark as of
        the key's previous commit (the watermark only moves at commits)."""
        ks = ws.keys.setdefault(ev.key, KeyState())
        ks.max_event_ms = max(ks.max_event_ms, ev.event_ms)
        ks.max_arrival_ms = max(ks.max_arrival_ms, ev.arrival_ms)
        now = self.seen_ms[ev.worker] = max(self.seen_ms.get(ev.worker, ws.clock_ms), ev.arrival_ms)
        eff = self.effective(ks.wm)
        t = ev.event_ms
        if self.w.type is WindowType.SESSION:
            self.process_session(ks, ev, eff, now)
            return
        for start, end in window_bounds(self.w, t):
            if self.w.lateness is Lateness.BEFORE_WATERMARK:
                late = t < eff
            else:  # WINDOW_CLOSED: the window has already closed
                late = end <= eff
            if late:
                self.write_late(ev, start, end, eff)
                continue
            if (start, end) not in ks.windows:
                ks.windows[(start, end)] = {a.name: _empty(a) for a in self.p.aggregates}
                self.m["windows_created"] += 1
            self.enter(ks, ev, (start, end), ks.windows[(start, end)], eff, now)

    def process_session(self, ks: KeyState, ev: _Event, eff, now) -> None:
        """§7: join (and merge) the open sessions with ``start - G < t < end + G``, in
        start order, skipping any that would make the span reach ``maximumDuration``."""
        t, gap, max_dur = ev.event_ms, self.w.gap_ms, self.w.maximum_duration_ms
        late = t < eff if self.w.lateness is Lateness.BEFORE_WATERMARK else t + gap <= eff
        if late:
            self.write_late(ev, t, t, eff)
            return
        start = end = t
        merged = []
        for s, e in sorted(b for b in ks.windows if b[0] - gap < t < b[1] + gap):
            if max_dur is not None and max(end, e) - min(start, s) >= max_dur:
                continue  # stays apart
            start, end = min(start, s), max(end, e)
            merged.append((s, e))
        acc = {a.name: _empty(a) for a in self.p.aggregates}
        for bounds in merged:  # in start order
            part = ks.windows.pop(bounds)
            acc = {a.name: _combine(a, acc[a.name], part[a.name]) for a in self.p.aggregates}
        if not merged:
            self.m["windows_created"] += 1
        assert (start, end) not in ks.windows
        self.enter(ks, ev, (start, end), acc, eff, now)

    def enter(self, ks: KeyState, ev: _Event, bounds, acc: dict, eff, now) -> None:
        """The event enters a window; with ``atAggregate``, snapshot it (§8), emitted at
        ``now``: the greatest arrival time the worker has processed, this event's included."""
        acc = {a.name: _apply(a, acc[a.name], ev.row, ev.order) for a in self.p.aggregates}
        ks.windows[bounds] = acc
        if Trigger.AT_AGGREGATE in self.p.triggers:
            n = self.st.emissions.get((ev.worker, ev.key, *bounds), 0) + 1
            self.aggregates.append(self.out_row(ev.worker, ev.key, bounds, acc, AGGREGATE, ev.batch, eff, n, now))

    def write_late(self, ev: _Event, start: int, end: int, eff) -> None:
        self.late.append(
            {
                **ev.row,
                "batch": ev.batch,
                "window_start": start,
                "window_end": end,
                "watermark": eff,
                "lateness_ms": eff - ev.event_ms,
            }
        )

    # ---- §3 commit, §6 closing

    def commit(self, worker, ws: WorkerState, batch: int, events: list[_Event]) -> None:
        """Move the watermarks, then close: WATERMARK (/MAX_DURATION), then IDLE."""
        pick = min if self.w.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else max
        keys_in_batch: dict[Hashable, list[int]] = {}
        for ev in events:
            keys_in_batch.setdefault(ev.key, []).append(ev.event_ms)
        for key, times in keys_in_batch.items():
            ks = ws.keys[key]
            ks.wm = max(ks.wm, pick(times))
        ws.global_wm = max(ws.global_wm, pick(ev.event_ms for ev in events))
        ws.clock_ms = max(ws.clock_ms, max(ev.arrival_ms for ev in events))
        ws.last_batch = batch

        # 1. WATERMARK: only keys whose batch just committed (others' watermarks did not move).
        gap, max_dur = self.w.idle_timeout_ms, self.w.maximum_duration_ms
        for key in keys_in_batch:
            ks = ws.keys[key]
            eff = self.effective(ks.wm)
            for start, end in sorted(ks.windows):
                if self.w.type is not WindowType.SESSION:
                    reason = WATERMARK if end <= eff else None
                elif end + gap <= eff:
                    reason = WATERMARK
                elif max_dur is not None and start + max_dur <= eff:
                    reason = MAX_DURATION
                else:
                    reason = None
                if reason:
                    self.close(worker, key, ks, (start, end), reason, batch, ws.clock_ms)

        # 2. IDLE: every key of the worker with open windows, at every commit.
        if self.w.idle_timeout_ms is not None:
            self.idle_step(worker, ws, batch, ws.clock_ms)

    def idle_step(self, worker, ws: WorkerState, batch: int, now) -> None:
        """§6.2: flush every key of the worker that is idle with the worker's clock at
        ``now``; its rows carry ``batch`` (the last committed one) and emit time ``now``."""
        for key, ks in sorted(ws.keys.items(), key=lambda kv: repr(kv[0])):
            if not ks.windows:
                continue
            if self.w.idle_clock is Clock.EVENT_TIME:
                silent = self.effective(ws.global_wm) - ks.max_event_ms
            else:
                silent = now - ks.max_arrival_ms
            if silent >= self.w.idle_timeout_ms:
                for bounds in sorted(ks.windows):
                    self.close(worker, key, ks, bounds, IDLE, batch, now)
                self.m["idle_keys_removed"] += 1

    def heartbeat(self, worker, ws: WorkerState, next_arrival_ms: int) -> None:
        """§6.2 heartbeat, before a batch whose smallest arrival time is ``next_arrival_ms``:
        with the PROCESSING_TIME clock the worker wakes at every multiple of
        ``replay.heartbeat`` strictly after its clock (the last commit's, maybe carried
        from an earlier call) and strictly before that arrival, sets its clock to the tick
        and runs the idle step alone. A worker that never committed has no clock to tick from.
        """
        step, idle_ms = self.p.heartbeat_ms, self.w.idle_timeout_ms
        if (
            idle_ms is None
            or self.w.idle_clock is not Clock.PROCESSING_TIME
            or step == 0
            or ws.clock_ms == MIN_TIMESTAMP
        ):
            return
        tick = (ws.clock_ms // step + 1) * step
        while tick < next_arrival_ms:
            waiting = [ks.max_arrival_ms + idle_ms for ks in ws.keys.values() if ks.windows]
            if not waiting:
                return
            if min(waiting) > tick:  # no key can be idle before then: those ticks do nothing
                tick = -(-min(waiting) // step) * step
                continue
            ws.clock_ms = tick
            self.idle_step(worker, ws, ws.last_batch, tick)
            tick += step

    def flush_end(self) -> None:
        """§6.3: every open window, emitted at the worker's last committed batch and clock."""
        for worker, ws in sorted(self.st.workers.items(), key=lambda kv: repr(kv[0])):
            for key, ks in sorted(ws.keys.items(), key=lambda kv: repr(kv[0])):
                for bounds in sorted(ks.windows):
                    self.close(worker, key, ks, bounds, END_OF_INPUT, ws.last_batch, ws.clock_ms)

    def close(self, worker, key, ks: KeyState, bounds, reason: str, batch: int, now) -> None:
        """Remove an open window and emit it with the next emission number (§6), at the
        worker's clock ``now``."""
        acc = ks.windows.pop(bounds)
        n = self.st.emissions.get((worker, key, *bounds), 0) + 1
        self.st.emissions[(worker, key, *bounds)] = n
        if Trigger.AT_WINDOW_END in self.p.triggers:
            eff = self.effective(ks.wm)
            self.aggregates.append(self.out_row(worker, key, bounds, acc, reason, batch, eff, n, now))
            self.m["windows_emitted"] += 1

    def out_row(self, worker, key, bounds, acc, reason, batch, eff, emission, now) -> dict:
        row: dict[str, Any] = {}
        if self.p.source.worker:
            row[self.p.source.worker] = worker
        if len(self.w.keys) == 1:
            row[self.w.keys[0]] = key
        else:
            row.update(zip(self.w.keys, key or ()))
        row["window_start"], row["window_end"] = bounds
        for a in self.p.aggregates:
            row[a.name] = _final(a, acc[a.name], self.decimals.get(a.column))
        row.update(
            emit_reason=reason,
            emit_batch=batch,
            emit_time=_ms(now),
            emit_watermark=_watermark_ms(eff),
            emission=emission,
        )
        return row


def reference_replay(
    pipeline: Pipeline,
    rows: list[dict],
    state: ModelState | None = None,
    flush_at_end: bool | None = False,
    decimals=None,
    derive=None,
    keep=None,
) -> RefResult:
    """Replay ``rows`` through ``pipeline`` event by event (docs/semantics.md).

    ``derive`` ({name: function of the row}) and ``keep`` (function of the derived row:
    True keeps it, False or None filters it) are ``source.derive`` and ``source.filter``
    written in Python by the test, not computed by Spark.

    ``state`` is a previous result's ``state`` (never mutated); ``flush_at_end=None``
    means ``pipeline.flush_at_end``; ``decimals``: {column: (precision, scale)} of the
    decimal columns (their values are ``Decimal``s).
    """
    if state is None:
        st = ModelState(fingerprint=pipeline.fingerprint())
    else:
        assert state.fingerprint == pipeline.fingerprint(), "state written by another pipeline"
        st = copy.deepcopy(state)
    if flush_at_end is None:
        flush_at_end = pipeline.flush_at_end
    assert set(derive or {}) == set(pipeline.source.derived_names), "a function per derived name"
    assert (keep is not None) == (pipeline.source.filter is not None), "a function for the filter"
    rp = _Replay(pipeline, st, decimals, derive, keep)
    rp.run(rows, flush_at_end)
    return RefResult(rp.aggregates, rp.late, rp.rejected, copy.deepcopy(st), rp.m)
