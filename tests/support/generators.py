"""Hypothesis strategies: random pipelines (every option mixed) and event histories."""

from __future__ import annotations

import decimal
import os
from decimal import Decimal

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from windowing.config import parse_pipeline

S = 1000


def cases(n: int) -> settings:
    """Settings for a generated-case test: n cases (times REWINDOW_CASES_SCALE), no deadline."""
    scale = float(os.environ.get("REWINDOW_CASES_SCALE", "1"))
    # REWINDOW_NO_SHRINK=1: report the first failing case as found (shrinking a Spark case
    # can take many minutes).
    phases = [p for p in Phase if not (p is Phase.shrink and os.environ.get("REWINDOW_NO_SHRINK"))]
    return settings(
        max_examples=max(1, round(n * scale)), deadline=None, suppress_health_check=list(HealthCheck), phases=phases
    )


AGGREGATES = [
    {"type": "count"},
    {"type": "count", "column": "qty"},
    {"type": "sum", "column": "amount"},
    {"type": "sum", "column": "qty"},
    {"type": "avg", "column": "amount"},
    {"type": "min", "column": "tag"},
    {"type": "max", "column": "amount"},
    {"type": "distinct", "column": "tag"},
    {"type": "first", "column": "tag"},
    {"type": "last", "column": "qty"},
    {"type": "stddev_pop", "column": "amount"},
    {"type": "stddev_samp", "column": "qty"},
    {"type": "percentile", "column": "amount", "percentage": 0.9},
    {"type": "percentile", "column": "qty"},
]


#: The types a generated ``amount`` column may have besides float64: decimal(precision, scale).
DECIMAL_AMOUNTS = [(12, 2), (10, 2), (5, 5), (30, 10), (38, 18), (38, 0), (38, 36)]

#: Wide enough for any decimal(38) arithmetic without rounding.
_EXACT = decimal.Context(prec=200)


def dec(unscaled: int, scale: int) -> Decimal:
    """The Decimal ``unscaled * 10^-scale``, exactly, written with ``scale`` decimals (the
    default context would round values of more than 28 digits)."""
    return Decimal(unscaled).scaleb(-scale, _EXACT)


def decimal_values(precision: int, scale: int) -> list[Decimal]:
    """Amounts of a decimal(precision, scale) column: one unit of the last place, thirds
    (averages that round), half the range (two of them fill it) and the largest values
    either way, whose sums leave 38 digits when the sum's type has no room left."""
    top = 10**precision - 1
    units = [1, 2, -1, 0, top // 3, -(top // 3), 5 * 10 ** (precision - 1), top, -top]
    return [dec(u, scale) for u in units]


FIRST_LAST = [{"type": "first", "column": "tag"}, {"type": "last", "column": "qty"}]


#: ``keyExtractor`` of generated pipelines with a key: one column (twice as often), or
#: several, of strings and integers with nulls, in either order.
KEYS = ["user", "user", ["user", "qty"], ["tag", "user", "qty"], ["qty", "tag"]]

#: ``replay.heartbeat`` of generated pipelines (None: not given, the default 60 s):
#: shorter than the silent gaps and idle timeouts of :func:`histories`, and off.
HEARTBEATS = [None, "1s", "2s", "5s", "1500ms", "0s"]


@st.composite
def pipelines(
    draw,
    windows=("tumbling-time-window", "sliding-time-window", "session-window"),
    first_last=False,
    event_time=None,
    processing_idle=False,
    future_skew=False,
):
    """Random pipelines; ``first_last``: always with the ``first`` and ``last`` aggregates;
    ``event_time``: with (True) or without (False) an event-time column, else drawn;
    ``processing_idle``: always with an idle timeout on the PROCESSING_TIME clock and a
    heartbeat on (contract section 5.2); ``future_skew``: with ``source.maxFutureSkew``
    (0 to 6 s, under the 1 to 8 s that :func:`histories` puts some events ahead) whenever
    there is an event-time column (no draw otherwise, so the other cases stay the same)."""
    wtype = draw(st.sampled_from(windows))
    if event_time is None:
        event_time = draw(st.booleans()) or wtype == "session-window" and draw(st.booleans())
    tc: dict = {}
    if event_time:
        tc["eventTimeExtractor"] = "event_time"
        tc["watermarkStrategy"] = draw(st.sampled_from(["MIN_EVENT_TIME", "MAX_EVENT_TIME"]))
        tc["lateness"] = draw(st.sampled_from(["WINDOW_CLOSED", "BEFORE_WATERMARK"]))
    if draw(st.booleans()):
        tc["delayWindowClose"] = f"{draw(st.integers(0, 6))}s"
    window: dict = {}
    if wtype == "session-window":
        tc["idleTimeout"] = f"{draw(st.integers(1, 12))}s"
        if draw(st.booleans()):
            window["maximumDuration"] = f"{draw(st.integers(2, 25))}s"
    else:
        span = draw(st.integers(1, 12))
        window["windowSpan"] = f"{span}s"
        if wtype == "sliding-time-window":
            window["windowSlide"] = f"{draw(st.integers(1, span))}s"
        if draw(st.booleans()):
            window["windowOffset"] = f"{draw(st.integers(0, span - 1))}s"
        if processing_idle or draw(st.booleans()):
            tc["idleTimeout"] = f"{draw(st.integers(1, 15))}s"
    if "idleTimeout" in tc and event_time and (processing_idle or draw(st.booleans())):
        tc["idleTimeoutClock"] = "PROCESSING_TIME"
    if draw(st.booleans()):
        # A key of one column, or of several (issue 49): a null in any part is part of the key.
        window["keyExtractor"] = draw(st.sampled_from(KEYS))
    window["timeConfig"] = tc
    aggs = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=5, unique_by=lambda a: repr(a)))
    if first_last:
        aggs += [a for a in FIRST_LAST if a not in aggs]
    window["aggregateDefinition"] = aggs
    source: dict = {"arrivalTime": "arrival", "arrivalOrder": ["offset"]}
    if draw(st.booleans()):
        source["batch"] = {"column": "batch"}
    else:
        source["batch"] = {"interval": f"{draw(st.integers(1, 3))}s"}
    if draw(st.booleans()):
        source["worker"] = "worker"
    if future_skew and event_time:
        source["maxFutureSkew"] = f"{draw(st.integers(0, 6))}s"
    triggers = draw(
        st.sampled_from([["atWindowEnd"], ["atWindowEnd"], ["atWindowEnd", "atAggregate"], ["atAggregate"]])
    )
    doc = {"name": "gen", "source": source, "emitter": {wtype: window, "triggers": triggers}}
    heartbeat = draw(st.sampled_from(HEARTBEATS[:-1] if processing_idle else HEARTBEATS))
    if heartbeat is not None:
        doc["replay"] = {"heartbeat": heartbeat}
    return parse_pipeline(doc)


@st.composite
def amount_types(draw):
    """The type of the ``amount`` column of a generated case: None (float64) three times in
    four, else a decimal (precision, scale) of :data:`DECIMAL_AMOUNTS`."""
    if draw(st.integers(0, 3)):
        return None
    return draw(st.sampled_from(DECIMAL_AMOUNTS))


@st.composite
def typed_histories(draw, **kwargs):
    """(amount type, rows): :func:`histories` whose ``amount`` column is float64 (None) or
    decimal (precision, scale) as :func:`amount_types` draws."""
    amount = draw(amount_types())
    return amount, draw(histories(amount=amount, **kwargs))


@st.composite
def histories(draw, max_events=30, nulls=True, bridges=2, bridge_gap_ms=None, min_events=0, amount=None):
    """Rows in arrival order per worker: arrival ms, batch, event time ms, key, values.

    Besides single events (on time, late, from the future), a history may hold
    *bridges*: on one worker and key, an event at ``T + 2h`` arrives just before one at
    ``T`` (same batch, so neither is late for the other), then one at ``T + h`` arrives
    (same batch or a later one). With a session gap ``G`` in ``(h, 2h]`` the first two
    open separate sessions and the third merges them: the merged session's first arrival
    is in the session that starts later (docs/semantics.md section 7, issue 8 item 11).
    Each step draws a bridge with odds ``bridges`` to 10 (0: none, the histories drawn
    before bridges existed); ``bridge_gap_ms``: draw ``h`` so that this gap merges.
    ``amount``: None for float amounts, or (precision, scale) for Decimal amounts of
    :func:`decimal_values`. One step in eight is preceded by a *silent gap* of 10 to 70 s
    in which nothing arrives (longer than every generated idle timeout and heartbeat,
    across a 60 s heartbeat tick for some); one in sixteen of the others starts a batch
    whose arrival times go back 1 to 3 s (the worker's clock does not).
    """
    n = draw(st.integers(min_events, max_events))
    if amount is None:
        amounts = [0.1, 0.2, 0.3, 1e16, -1.5, 2.25, None] if nulls else [0.1, 0.2, 0.3, 1e16, -1.5]
    else:
        amounts = decimal_values(*amount) + ([None] if nulls else [])
    rows = []
    arrival = 0
    batch = 0

    def values(i):
        return {
            "offset": draw(st.sampled_from([i, i, i, max(i - 1, 0)])),  # sometimes a tie (§2)
            "worker": draw(st.integers(0, 1)),
            "user": draw(st.sampled_from(["a", "b", "c"])),
            "amount": draw(st.sampled_from(amounts)),
            "qty": draw(st.sampled_from([1, 2, -3, 10, None] if nulls else [1, 2, -3, 10])),
            "tag": draw(st.sampled_from(["x", "y", "z", None] if nulls else ["x", "y", "z"])),
        }

    while len(rows) < n:
        i = len(rows)
        arrival += draw(st.sampled_from([0, 0, 300, 1000, 2000, 5000]))
        if draw(st.integers(0, 7)) == 0:  # a silent gap (between batches)
            arrival += draw(st.integers(10, 70)) * S
            batch += 1
        elif draw(st.integers(0, 15)) == 0:  # a later batch stamped earlier (a batch column allows it)
            arrival -= draw(st.integers(1, 3)) * S
            batch += 1
        if draw(st.integers(0, 3)) == 0:
            batch += 1
        shape = draw(st.integers(0, 9 + bridges))
        if shape >= 10:  # a bridge (see above)
            if bridge_gap_ms:  # h < G <= 2h
                h = draw(st.integers((bridge_gap_ms + 1) // 2, bridge_gap_ms - 1))
            else:  # 2..6 s merges for a third of the generated gaps (1..12 s), and the span
                h = draw(st.integers(2, 6)) * S  # 2h stays under more maximumDurations (2..25 s)
            t = arrival - draw(st.integers(0, 4)) * S
            later = {**values(i), "arrival": arrival, "batch": batch, "event_time": t + 2 * h}
            earlier = {**values(i + 1), "arrival": arrival, "batch": batch, "event_time": t}
            step = draw(st.sampled_from([0, 0, 1000, 3000]))
            arrival += step
            batch += int(step > 0)
            bridge = {**values(i + 2), "arrival": arrival, "batch": batch, "event_time": t + h}
            for r in (earlier, bridge):
                r["worker"], r["user"] = later["worker"], later["user"]
            # Values that tell arrival order from start order apart: first(tag) differs, and
            # last(qty) does when the bridge's own value is null.
            others = [v for v in ("x", "y", "z", None) if v != later["tag"] and (nulls or v)]
            earlier["tag"] = draw(st.sampled_from(others))
            if nulls and draw(st.booleans()):
                bridge["qty"] = None
            rows += [later, earlier, bridge]
            continue
        if shape == 0:  # far late
            lag = draw(st.integers(5, 40)) * S
        elif shape == 1:  # from the future
            lag = -draw(st.integers(1, 8)) * S
        else:
            lag = draw(st.integers(0, 4)) * S
        row = {"arrival": arrival, "batch": batch, "event_time": arrival - lag, **values(i)}
        if nulls and draw(st.integers(0, 40)) == 0:
            row[draw(st.sampled_from(["arrival", "event_time"]))] = None
        rows.append(row)
    return rows


@st.composite
def silent_gap_histories(draw, nulls=False):
    """(before, after): two :func:`histories` with a silent gap of 10 s to 4 min between
    them (the second shifted after the first's last arrival and batch), to be replayed as
    two partitions cut at the gap, or in one go (contract sections 5.2 and 8)."""
    before = draw(histories(nulls=nulls, min_events=1, max_events=15))
    after = draw(histories(nulls=nulls, min_events=1, max_events=15))
    last_arrival = max((r["arrival"] for r in before if r["arrival"] is not None), default=0)
    shift = last_arrival + draw(st.integers(10, 240)) * S
    first_batch = max(r["batch"] for r in before) + 1
    for r in after:
        r["batch"] += first_batch
        if r["arrival"] is not None:
            r["arrival"] += shift
            if r["event_time"] is not None:
                r["event_time"] += shift
    return before, after


@st.composite
def bridging_sessions(draw, nulls=True):
    """(pipeline, rows): a session pipeline with an event-time column and ``first`` and
    ``last``, and a history rich in bridges that its gap merges (see :func:`histories`)."""
    pipeline = draw(pipelines(windows=("session-window",), first_last=True, event_time=True))
    rows = draw(histories(nulls=nulls, bridges=6, bridge_gap_ms=pipeline.window.gap_ms, min_events=5))
    return pipeline, rows


def split_points(pipeline, rows, cuts):
    """Cut history into pieces the way arrival-time partitions do, never inside a batch.

    With a batch column the cuts fall between batch ids; with a batch interval they fall
    on arrival times that are multiples of the interval (contract section 8). Rows with
    no arrival time go with the first piece.
    """
    if pipeline.source.batch_column:
        pos = lambda r: r["batch"]  # noqa: E731
        bounds = sorted({r["batch"] for r in rows})
    else:
        iv = pipeline.source.batch_interval_ms
        pos = lambda r: -1 if r["arrival"] is None else r["arrival"] // iv  # noqa: E731
        bounds = sorted({pos(r) for r in rows if r["arrival"] is not None})
    if not bounds:
        return [rows]
    cut_at = sorted({bounds[int(c * len(bounds)) % len(bounds)] for c in cuts} - {bounds[0]})
    pieces, lo = [], None
    for hi in cut_at + [None]:
        pieces.append([r for r in rows if (lo is None or pos(r) >= lo) and (hi is None or pos(r) < hi)])
        lo = hi
    return pieces


def _none_or(f):
    """``f`` of the row, None when a value it reads is None (SQL's null in, null out)."""

    def g(row):
        try:
            return f(row)
        except TypeError:
            return None

    return g


#: source.derive of generated cases: (name, Spark SQL, the same in Python for the model).
DERIVATIONS = (
    ("user_x", "concat(user, '-x')", _none_or(lambda r: r["user"] + "-x")),
    ("qty10", "qty * 10", _none_or(lambda r: r["qty"] * 10)),
    ("amount2", "amount * 2", _none_or(lambda r: r["amount"] * 2)),
)
#: source.filter of generated cases, with its Python (None where SQL gives null).
FILTERS = (
    ("qty > 1", _none_or(lambda r: r["qty"] > 1)),
    ("amount >= 0.2", _none_or(lambda r: r["amount"] >= 0.2)),
    ("qty10 < 20", _none_or(lambda r: r["qty10"] < 20)),
    ("user_x = 'a-x'", _none_or(lambda r: r["user_x"] == "a-x")),
)


@st.composite
def prewindow_pipelines(draw):
    """(pipeline, derive functions, filter function) of :func:`pipelines` with every
    :data:`DERIVATIONS` and one of :data:`FILTERS` (or none), the derived key ``user_x``
    as the key or not, and aggregates over the derived ``qty10`` and ``amount2``."""
    base = draw(pipelines())
    doc = {
        "name": "gen",
        "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "derive": {n: e for n, e, _ in DERIVATIONS}},
    }
    src = base.source
    doc["source"]["batch"] = {"column": "batch"} if src.batch_column else {"interval": f"{src.batch_interval_ms}ms"}
    if src.worker:
        doc["source"]["worker"] = "worker"
    flt = draw(st.sampled_from((None, *FILTERS)))
    if flt is not None:
        doc["source"]["filter"] = flt[0]
    w = base.window
    window: dict = {}
    tc: dict = {"watermarkStrategy": w.watermark_strategy.value, "lateness": w.lateness.value}
    if w.event_time:
        tc["eventTimeExtractor"] = "event_time"
    if w.idle_timeout_ms:
        tc["idleTimeout"] = f"{w.idle_timeout_ms}ms"
        tc["idleTimeoutClock"] = w.idle_clock.value
    tc["delayWindowClose"] = f"{w.delay_ms}ms"
    if w.type.value == "session-window":
        if w.maximum_duration_ms:
            window["maximumDuration"] = f"{w.maximum_duration_ms}ms"
    else:
        window["windowSpan"] = f"{w.span_ms}ms"
        if w.slide_ms:
            window["windowSlide"] = f"{w.slide_ms}ms"
    window["keyExtractor"] = draw(st.sampled_from([None, "user_x", ["user_x", "qty10"], ["tag", "user_x"]]))
    if window["keyExtractor"] is None:
        del window["keyExtractor"]
    window["timeConfig"] = tc
    window["aggregateDefinition"] = [
        {"type": "count"},
        {"type": "sum", "column": "qty10"},
        {"type": "max", "column": "amount2"},
        {"type": "last", "column": "user_x"},
    ]
    doc["emitter"] = {w.type.value: window, "triggers": [t.value for t in base.triggers]}
    doc["replay"] = {"heartbeat": f"{base.heartbeat_ms}ms"}
    derive = {n: f for n, _, f in DERIVATIONS}
    return parse_pipeline(doc), derive, (flt[1] if flt is not None else None)
