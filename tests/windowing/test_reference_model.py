"""Tests of the reference model itself, every expected value worked out by hand from
docs/semantics.md (and the contract's section 9 worked examples).

Times in the timelines are seconds; rows carry milliseconds.
"""

from __future__ import annotations

import itertools
import random
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.reference_model import reference_replay, window_bounds
from windowing.config import parse_pipeline

S = 1000  # one second in ms


def make_pipeline(
    window="tumbling-time-window", *, time=None, aggs=("count",), triggers=None, source=None, **window_fields
):
    """A pipeline over columns arrival / batch / event_time (unless told otherwise)."""
    doc = {
        "name": "t",
        "source": source or {"arrivalTime": "arrival", "batch": {"column": "batch"}},
        "emitter": {
            window: {
                **window_fields,
                "timeConfig": {"eventTimeExtractor": "event_time"} if time is None else time,
                "aggregateDefinition": list(aggs),
            }
        },
    }
    if triggers:
        doc["emitter"]["triggers"] = triggers
    return parse_pipeline(doc)


def ev(name, event_s, batch, arrival=None, **cols):
    """One row; arrival defaults to a value ordering rows as written inside a batch."""
    if arrival is None:
        arrival = batch * 100 * S + next(_ARRIVALS)
    return {
        "name": name,
        "event_time": None if event_s is None else int(event_s * S),
        "batch": batch,
        "arrival": arrival,
        **cols,
    }


_ARRIVALS = itertools.count()


def canon(rows):
    """Order-free comparison form of an output (values may mix None and str)."""
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


def windows(res, *cols, reasons=None):
    """(start s, end s, *cols, reason, emit_batch) of the emitted rows, sorted."""
    return sorted(
        (r["window_start"] // S, r["window_end"] // S, *(r[c] for c in cols), r["emit_reason"], r["emit_batch"])
        for r in res.aggregates
        if reasons is None or r["emit_reason"] in reasons
    )


# --------------------------------------------------------------------------- contract §9

NAMES = ["e1", "e2", "e3", "e4", "e5", "e6"]
INPUT_A = [("e1", 2, 1), ("e2", 5, 1), ("e4", 12, 2), ("e3", 8, 3), ("e5", 25, 4)]
INPUT_B = [("e1", 2, 1), ("e2", 5, 1), ("e4", 12, 2), ("e6", 9, 2), ("e3", 8, 3), ("e5", 25, 4)]


def section9_rows(spec):
    # each event carries one bit, so sum(bit) names the window's events
    return [ev(n, t, b, bit=1 << NAMES.index(n)) for n, t, b in spec]


def members(mask):
    return " ".join(n for i, n in enumerate(NAMES) if mask >> i & 1)


@pytest.mark.parametrize(
    "case, spec, strategy, delay, expected, late",
    [
        (1, INPUT_A, "MIN_EVENT_TIME", "0s", [(0, 10, "e1 e2", 2), (10, 20, "e4", 4)], ["e3"]),
        (2, INPUT_A, "MIN_EVENT_TIME", "5s", [(0, 10, "e1 e2 e3", 4), (10, 20, "e4", 4)], []),
        (3, INPUT_B, "MAX_EVENT_TIME", "0s", [(0, 10, "e1 e2 e6", 2), (10, 20, "e4", 4)], ["e3"]),
        (4, INPUT_B, "MIN_EVENT_TIME", "0s", [(0, 10, "e1 e2 e3 e6", 4), (10, 20, "e4", 4)], []),
        (5, INPUT_B, "MAX_EVENT_TIME", "3s", [(0, 10, "e1 e2 e3 e6", 4), (10, 20, "e4", 4)], []),
    ],
)
def test_contract_worked_examples(case, spec, strategy, delay, expected, late):
    p = make_pipeline(
        windowSpan="10s",
        aggs=[{"type": "sum", "column": "bit", "name": "bits"}],
        time={"eventTimeExtractor": "event_time", "watermarkStrategy": strategy, "delayWindowClose": delay},
    )
    rows = section9_rows(spec)
    random.Random(case).shuffle(rows)  # input order must not matter
    res = reference_replay(p, rows)
    got = [(s, e, members(bits), b) for s, e, bits, reason, b in windows(res, "bits")]
    assert got == expected
    assert all(r["emit_reason"] == "WATERMARK" and r["emission"] == 1 for r in res.aggregates)
    assert sorted(r["name"] for r in res.late_events) == late
    for r in res.late_events:  # e3 (8 s) missed [0, 10) once the watermark reached 12 s
        assert (r["window_start"], r["window_end"], r["watermark"], r["lateness_ms"], r["batch"]) == (
            0,
            10 * S,
            12 * S,
            4 * S,
            3,
        )

    # [20, 30) holding e5 stays open in the carried state ...
    assert list(res.state.workers[None].keys[None].windows) == [(20 * S, 30 * S)]
    # ... and is emitted by a flush at end, at the last committed batch.
    flushed = reference_replay(p, [], state=res.state, flush_at_end=True)
    assert windows(flushed, "bits") == [(20, 30, 16, "END_OF_INPUT", 4)]
    # flushing in the same call gives the same rows
    once = reference_replay(p, rows, flush_at_end=True)
    assert canon(once.aggregates) == canon(res.aggregates + flushed.aggregates)


def test_contract_processing_time_example():
    """No event-time column: event time := arrival time (7,7,8,9,10 s, batches 1..4)."""
    p = make_pipeline(windowSpan="10s", time={}, aggs=[{"type": "sum", "column": "bit", "name": "bits"}])
    rows = [
        ev(n, None, b, arrival=a * S, bit=1 << NAMES.index(n))
        for n, a, b in [("e1", 7, 1), ("e2", 7, 1), ("e4", 8, 2), ("e3", 9, 3), ("e5", 10, 4)]
    ]
    res = reference_replay(p, rows)
    assert [(s, e, members(bits), b) for s, e, bits, _, b in windows(res, "bits")] == [(0, 10, "e1 e2 e3 e4", 4)]
    assert res.late_events == [] and res.rejected == []


def test_contract_before_watermark_max_example():
    """batch 1 = 2,4,9 s; batch 2 = 5,8,15 s: 5 s and 8 s are late (watermark 9 s)."""
    p = make_pipeline(
        windowSpan="10s",
        time={
            "eventTimeExtractor": "event_time",
            "watermarkStrategy": "MAX_EVENT_TIME",
            "lateness": "BEFORE_WATERMARK",
        },
    )
    rows = [ev(f"x{t}", t, b) for t, b in [(2, 1), (4, 1), (9, 1), (5, 2), (8, 2), (15, 2)]]
    res = reference_replay(p, rows)
    assert sorted((r["event_time"], r["window_start"], r["watermark"], r["lateness_ms"]) for r in res.late_events) == [
        (5 * S, 0, 9 * S, 4 * S),
        (8 * S, 0, 9 * S, 1 * S),
    ]
    # watermark 15 s after batch 2 closes [0, 10) with the three events of batch 1
    assert windows(res, "count") == [(0, 10, 3, "WATERMARK", 2)]


# --------------------------------------------------------------------------- windows


@pytest.mark.parametrize(
    "t, expected",
    [
        (0, [(-5, 5), (0, 10)]),  # on a slide boundary
        (4999, [(-5, 5), (0, 10)]),  # just before the next one
        (-1, [(-10, 0), (-5, 5)]),  # negative times floor
        (12000, [(5, 15), (10, 20)]),
    ],
)
def test_sliding_window_bounds(t, expected):
    p = make_pipeline("sliding-time-window", windowSpan="10s", windowSlide="5s")
    assert window_bounds(p.window, t) == [(s * S, e * S) for s, e in expected]


def test_sliding_event_late_for_one_window_accepted_by_the_other():
    """
    span 10 s, slide 5 s, MAX_EVENT_TIME
      b1: a@3, b@11   -> wm 11: [-5,5) {a}, [0,10) {a} close
      b2: c@7         -> [0,10) already closed: late; [5,15) still open: accepted
      b3: d@30        -> wm 30: [5,15) {b,c}, [10,20) {b} close
    """
    p = make_pipeline(
        "sliding-time-window",
        windowSpan="10s",
        windowSlide="5s",
        time={"eventTimeExtractor": "event_time", "watermarkStrategy": "MAX_EVENT_TIME"},
    )
    res = reference_replay(p, [ev("a", 3, 1), ev("b", 11, 1), ev("c", 7, 2), ev("d", 30, 3)])
    assert windows(res, "count") == [
        (-5, 5, 1, "WATERMARK", 1),
        (0, 10, 1, "WATERMARK", 1),
        (5, 15, 2, "WATERMARK", 3),
        (10, 20, 1, "WATERMARK", 3),
    ]
    assert [
        (r["name"], r["window_start"], r["window_end"], r["watermark"], r["lateness_ms"]) for r in res.late_events
    ] == [("c", 0, 10 * S, 11 * S, 4 * S)]
    assert res.metrics["late_events"] == 1
    assert res.metrics["windows_created"] == 6  # + [25,35), [30,40) still open


def test_session_merge_bridges_two_sessions():
    """
    gap 10 s, MIN_EVENT_TIME, atAggregate snapshots too
      b1: x@0 (v=1.5)  y@18 (v=2.25)      -> sessions [0,0] and [18,18] (18 is not < 0+10)
      b2: z@9 (v=4.0)                     -> -10<9<10 and 8<9<28: bridges both into [0,18]
      b3: w@40                            -> wm 40 >= 18+10: [0,18] closes
    """
    p = make_pipeline(
        "session-window",
        aggs=[
            "count",
            {"type": "sum", "column": "v"},
            {"type": "first", "column": "v"},
            {"type": "last", "column": "v"},
        ],
        time={"eventTimeExtractor": "event_time", "idleTimeout": "10s"},
        triggers=["atWindowEnd", "atAggregate"],
    )
    rows = [ev("x", 0, 1, v=1.5), ev("y", 18, 1, v=2.25), ev("z", 9, 2, v=4.0), ev("w", 40, 3, v=None)]
    res = reference_replay(p, rows)
    assert windows(res, "count", "sum_v", "first_v", "last_v", reasons={"WATERMARK"}) == [
        # sessions combined in start order (x then y), then z applied: last is z by arrival
        (0, 18, 3, 7.75, 1.5, 4.0, "WATERMARK", 3)
    ]
    snapshots = sorted(
        (r["window_start"] // S, r["window_end"] // S, r["count"], r["emit_batch"], r["emit_watermark"], r["emission"])
        for r in res.aggregates
        if r["emit_reason"] == "AGGREGATE"
    )
    assert snapshots == [(0, 0, 1, 1, None, 1), (0, 18, 3, 2, 0, 1), (18, 18, 1, 1, None, 1), (40, 40, 1, 3, 9 * S, 1)]
    assert res.metrics["windows_created"] == 3  # [0,0], [18,18], [40,40]; the merge creates none


@pytest.mark.parametrize("bridge_value, first, last", [("id35", "id15", "id35"), (None, "id15", "id5")])
def test_session_first_last_by_arrival_across_a_bridging_merge(bridge_value, first, last):
    """
    gap 5 s, delay 10 s, MIN_EVENT_TIME, one key, one event per batch (issue 8, item 11)
      b1: id15@65              -> [65,65]                      (wm 65, effective 55)
      b2: id26@59              -> 59 is not < 65-5: [59,59]    (59+5 > 55: not late)
      b3: id5@60               -> [59,60]
      b4: id35@62 (or null)    -> 54<62<65 and 60<62<70: bridges both into [59,65]
    The merged session started with [59,60], but its first arrival is id15 (batch 1):
    first/last are by arrival order, not by the merged sessions' start order. With a null
    bridging value, last is the latest non-null by arrival: id5 (batch 3), not id15.
    Cut into pieces after any batch, the carried sessions remember where their first and
    last arrived, so the result is the same.
    """
    p = make_pipeline(
        "session-window",
        aggs=["count", {"type": "first", "column": "name"}, {"type": "last", "column": "name"}],
        time={"eventTimeExtractor": "event_time", "idleTimeout": "5s", "delayWindowClose": "10s"},
    )
    names = ["id15", "id26", "id5", bridge_value]
    rows = [
        {"name": n, "event_time": t * S, "batch": b, "arrival": b * S}
        for b, (n, t) in enumerate(zip(names, [65, 59, 60, 62]), start=1)
    ]
    expected = [(59, 65, 4, first, last, "END_OF_INPUT", 4)]
    once = reference_replay(p, rows, flush_at_end=True)
    assert windows(once, "count", "first_name", "last_name") == expected
    for cuts in ([1], [2], [3], [1, 2, 3]):
        state, out = None, []
        for lo, hi in zip([0, *cuts], [*cuts, len(rows)]):
            res = reference_replay(p, rows[lo:hi], state=state, flush_at_end=hi == len(rows))
            state, out = res.state, out + res.aggregates
        assert canon(out) == canon(once.aggregates), cuts


def test_session_maximum_duration_skips_and_closes():
    """
    gap 10 s, maximumDuration 15 s, MIN_EVENT_TIME
      b1: a@0, b@16     -> [0,0], [16,16]
      b2: c@7           -> candidates [0,0] then [16,16]: [0,7] ok, [0,16] spans 16 >= 15: skipped
      b3: d@20          -> joins [16,16] -> [16,20]; wm 20 >= 7+10: [0,7] closes (WATERMARK)
      b4: e@29          -> [16,29] (span 13)
      b5: f@32          -> [16,32] would span 16: skipped, new [32,32];
                           wm 32 >= 16+15 (but < 29+10): [16,29] closes (MAX_DURATION)
    """
    p = make_pipeline(
        "session-window",
        maximumDuration="15s",
        aggs=["count"],
        time={"eventTimeExtractor": "event_time", "idleTimeout": "10s"},
    )
    rows = [ev("a", 0, 1), ev("b", 16, 1), ev("c", 7, 2), ev("d", 20, 3), ev("e", 29, 4), ev("f", 32, 5)]
    res = reference_replay(p, rows)
    assert windows(res, "count") == [(0, 7, 2, "WATERMARK", 3), (16, 29, 3, "MAX_DURATION", 5)]
    assert list(res.state.workers[None].keys[None].windows) == [(32 * S, 32 * S)]


def test_session_rebuilt_after_max_duration_is_emission_2():
    """
    gap 10 s, maximumDuration 5 s, MIN_EVENT_TIME
      b1: a@0, b@3     -> [0,3]
      b2: c@5          -> [0,3] would span 5 >= 5: skipped, new [5,5]; wm 5 >= 0+5: [0,3] MAX_DURATION
      b3: d@0, e@3     -> 0+10 > 5: not late; [0,3] again (5-0 >= 5: [5,5] skipped);
                          wm stays 5: MAX_DURATION again, emission 2 (its end 3 is <= the watermark,
                          yet the window could be opened again: the counter is kept)
    """
    p = make_pipeline(
        "session-window", maximumDuration="5s", time={"eventTimeExtractor": "event_time", "idleTimeout": "10s"}
    )
    rows = [ev("a", 0, 1), ev("b", 3, 1), ev("c", 5, 2), ev("d", 0, 3), ev("e", 3, 3)]
    res = reference_replay(p, rows)
    assert sorted(
        (r["window_start"] // S, r["window_end"] // S, r["count"], r["emit_reason"], r["emit_batch"], r["emission"])
        for r in res.aggregates
    ) == [(0, 3, 2, "MAX_DURATION", 2, 1), (0, 3, 2, "MAX_DURATION", 3, 2)]


# --------------------------------------------------------------------------- idle


def test_idle_event_time_clock_then_reopen():
    """
    tumbling 10 s, idleTimeout 20 s, EVENT_TIME clock (the default), keys k1 k2, MIN
      b1: k1@1 k2@2   global wm 1
      b2: k2@15       global wm 15; k2's [0,10) closes (WATERMARK); k1: 15-1 < 20
      b3: k2@30       global wm 30; k2's [10,20) closes; k1: 30-1 >= 20 -> IDLE [0,10) (emission 1)
      b4: k1@5        k1 wm is 1 (kept): not late, [0,10) opens again;
                      global wm 30: 30-5 >= 20 -> IDLE again (emission 2)
    """
    p = make_pipeline(
        windowSpan="10s", keyExtractor="k", time={"eventTimeExtractor": "event_time", "idleTimeout": "20s"}
    )
    rows = [
        ev("a", 1, 1, k="k1"),
        ev("b", 2, 1, k="k2"),
        ev("c", 15, 2, k="k2"),
        ev("d", 30, 3, k="k2"),
        ev("e", 5, 4, k="k1"),
    ]
    res = reference_replay(p, rows)
    got = sorted(
        (
            r["k"],
            r["window_start"] // S,
            r["count"],
            r["emit_reason"],
            r["emit_batch"],
            r["emit_watermark"],
            r["emission"],
        )
        for r in res.aggregates
    )
    assert got == [
        ("k1", 0, 1, "IDLE", 3, 1 * S, 1),
        ("k1", 0, 1, "IDLE", 4, 5 * S, 2),
        ("k2", 0, 1, "WATERMARK", 2, 15 * S, 1),
        ("k2", 10, 1, "WATERMARK", 3, 30 * S, 1),
    ]
    assert res.metrics["idle_keys_removed"] == 2
    assert res.metrics["windows_created"] == 5  # k1 [0,10) twice, k2 [0,10) [10,20) [30,40)
    assert res.metrics["unique_keys"] == 2


def test_idle_processing_time_clock_then_reopen():
    """
    tumbling 10 s, idleTimeout 5 s, idleTimeoutClock PROCESSING_TIME, keys k1 k2, MIN.
    (event time, arrival time) per row; the event-time clock would never fire here.
      b1: k1 (1, 1)                   clock 1
      b7: k2 (2, 7)                   clock 7; k1: 7-1 >= 5 -> IDLE [0,10) (emission 1), emit wm 1
      b8: k1 (3, 8)                   k1 wm 1: not late, [0,10) opens again
      b14: k2 (4, 14)                 clock 14; k1: 14-8 >= 5 -> IDLE (emission 2), emit wm 3;
                                      k2: 14-14 < 5; k2 wm 4 < 10: its [0,10) stays open
    """
    p = make_pipeline(
        windowSpan="10s",
        keyExtractor="k",
        source={"arrivalTime": "arrival"},
        time={"eventTimeExtractor": "event_time", "idleTimeout": "5s", "idleTimeoutClock": "PROCESSING_TIME"},
    )
    rows = [
        {"k": k, "event_time": e * S, "arrival": a * S}
        for k, e, a in [("k1", 1, 1), ("k2", 2, 7), ("k1", 3, 8), ("k2", 4, 14)]
    ]
    res = reference_replay(p, rows)
    assert sorted(
        (r["k"], r["count"], r["emit_reason"], r["emit_batch"], r["emit_watermark"], r["emission"])
        for r in res.aggregates
    ) == [("k1", 1, "IDLE", 7, 1 * S, 1), ("k1", 1, "IDLE", 14, 3 * S, 2)]
    k2 = res.state.workers[None].keys["k2"]
    assert (k2.wm, list(k2.windows)) == (4 * S, [(0, 10 * S)])


def test_processing_time_strategy_idle_and_batch_interval():
    """No event time: event := arrival; batch = floor(arrival / 2 s); idle 5 s (PROCESSING_TIME).
    arrival 1 (b0), 4 (b2): window [0,10) of key a; key b at 11 (b5):
    clock 11 - 4 >= 5 -> a IDLE at batch 5, emit wm = a's wm 4.
    """
    p = make_pipeline(
        windowSpan="10s",
        keyExtractor="k",
        time={"idleTimeout": "5s"},
        source={"arrivalTime": "arrival", "batch": {"interval": "2s"}},
    )
    res = reference_replay(
        p, [{"k": "a", "arrival": 1 * S}, {"k": "a", "arrival": 4 * S}, {"k": "b", "arrival": 11 * S}]
    )
    assert [(r["k"], r["count"], r["emit_reason"], r["emit_batch"], r["emit_watermark"]) for r in res.aggregates] == [
        ("a", 2, "IDLE", 5, 4 * S)
    ]


# --------------------------------------------------------------------------- triggers and aggregates


def test_at_aggregate_snapshots():
    """
    tumbling 10 s, MIN, atWindowEnd + atAggregate
      b1: a@1 (v=1), b@2 (v=2)   snapshots of [0,10): count 1 sum 1, count 2 sum 3 (watermark -inf)
      b2: c@12 (v=4)             snapshot of [10,20): checked against wm 1; then wm 12 closes [0,10)
    """
    p = make_pipeline(
        windowSpan="10s", aggs=["count", {"type": "sum", "column": "v"}], triggers=["atWindowEnd", "atAggregate"]
    )
    res = reference_replay(p, [ev("a", 1, 1, v=1), ev("b", 2, 1, v=2), ev("c", 12, 2, v=4)])
    got = sorted(
        (
            r["window_start"] // S,
            r["count"],
            r["sum_v"],
            r["emit_reason"],
            r["emit_batch"],
            r["emit_watermark"],
            r["emission"],
        )
        for r in res.aggregates
    )
    assert got == [
        (0, 1, 1, "AGGREGATE", 1, None, 1),
        (0, 2, 3, "AGGREGATE", 1, None, 1),
        (0, 2, 3, "WATERMARK", 2, 12 * S, 1),
        (10, 1, 4, "AGGREGATE", 2, 1 * S, 1),
    ]
    assert res.metrics["windows_emitted"] == 1


def test_at_aggregate_alone_and_snapshot_emission_after_reopen():
    """Only atAggregate: no closing rows, but windows still close, so the snapshot of a
    window reopened after an idle flush says emission 2 (same timeline as the EVENT_TIME idle test)."""
    p = make_pipeline(
        windowSpan="10s",
        keyExtractor="k",
        triggers=["atAggregate"],
        time={"eventTimeExtractor": "event_time", "idleTimeout": "20s"},
    )
    rows = [ev("a", 1, 1, k="k1"), ev("c", 30, 2, k="k2"), ev("e", 5, 3, k="k1")]
    res = reference_replay(p, rows)
    assert sorted((r["k"], r["emit_reason"], r["emit_batch"], r["emission"]) for r in res.aggregates) == [
        ("k1", "AGGREGATE", 1, 1),
        ("k1", "AGGREGATE", 3, 2),
        ("k2", "AGGREGATE", 2, 1),
    ]
    assert res.metrics["windows_emitted"] == 0 and res.metrics["idle_keys_removed"] == 2


def test_aggregates_ignore_nulls_and_keep_types():
    aggs = ["count"] + [
        {"type": t, "column": c}
        for c in ("v", "s", "w")
        for t in ("count", "sum", "avg", "min", "max", "distinct", "first", "last")
        if not (c == "s" and t in ("sum", "avg"))
    ]
    p = make_pipeline(windowSpan="10s", aggs=aggs)
    values = [(None, "b", None), (3, None, None), (None, "a", None), (5, "b", None), (3, None, None)]
    rows = [ev(f"r{i}", i, 1, v=v, s=s, w=w) for i, (v, s, w) in enumerate(values)]
    (row,) = reference_replay(p, rows, flush_at_end=True).aggregates
    assert row["count"] == 5
    assert {k[:-2]: row[k] for k in row if k.endswith("_v")} == {
        "count": 3,
        "sum": 11,
        "avg": 11 / 3,
        "min": 3,
        "max": 5,
        "distinct": 2,
        "first": 3,
        "last": 3,
    }
    assert type(row["sum_v"]) is int and type(row["avg_v"]) is float
    assert {k[:-2]: row[k] for k in row if k.endswith("_s")} == {
        "count": 3,
        "min": "a",
        "max": "b",
        "distinct": 2,
        "first": "b",
        "last": "b",
    }
    assert {k[:-2]: row[k] for k in row if k.endswith("_w")} == {  # only nulls
        "count": 0,
        "sum": None,
        "avg": None,
        "min": None,
        "max": None,
        "distinct": 0,
        "first": None,
        "last": None,
    }


def test_float_sum_is_a_left_to_right_fold_in_arrival_order():
    p = make_pipeline(windowSpan="10s", aggs=[{"type": "sum", "column": "v"}])
    vals = [1e16, 1.0, -1e16, 1.0]  # ((0.0 + 1e16) + 1.0) - 1e16 + 1.0 = 1.0 in doubles, not 2.0
    rows = [ev(f"r{i}", 1, 1, v=v) for i, v in enumerate(vals)]
    random.Random(0).shuffle(rows)
    (row,) = reference_replay(p, rows, flush_at_end=True).aggregates
    assert row["sum_v"] == ((0.0 + 1e16) + 1.0 - 1e16) + 1.0 == 1.0


BIG = Decimal(10**38 - 1)  # the largest decimal(38, 0)
THIRTY = Decimal(10**30 - 1)  # 30 digits: Python's default context would round their sum
NEG = BIG.copy_negate()  # (-BIG would round to 28 digits in the default context)


@pytest.mark.parametrize(
    "ptype, vals, total, avg",
    [
        ((12, 2), ["0.10", "0.20", "0.02"], "0.32", "0.106667"),  # avg 0.10666.. at scale 2 + 4, HALF_UP
        ((12, 2), ["-0.01", "-0.02", "-0.02"], "-0.05", "-0.016667"),  # halves away from zero
        ((12, 2), [None, None], None, None),  # no value
        ((30, 0), [THIRTY] * 3, str(3 * (10**30 - 1)), str(10**30 - 1) + ".0000"),  # exact past 28 digits
        ((38, 0), [BIG, BIG], None, None),  # the sum leaves decimal(38, 0): null
        ((38, 0), [BIG, BIG, NEG, NEG, Decimal(1)], "1", "0.2000"),  # judged on the exact total
        ((38, 0), [BIG], str(BIG), None),  # the average leaves decimal(38, 4): null
    ],
)
def test_decimal_sum_and_avg(ptype, vals, total, avg):
    """§8 decimals: exact sums of type decimal(min(38, p + 10), s), null on overflow;
    averages of type decimal(min(38, p + 4), min(38, s + 4)) rounded HALF_UP."""
    p = make_pipeline(windowSpan="10s", aggs=[{"type": "sum", "column": "v"}, {"type": "avg", "column": "v"}])
    rows = [ev(f"r{i}", 1, 1, v=None if v is None else Decimal(v)) for i, v in enumerate(vals)]
    (row,) = reference_replay(p, rows, flush_at_end=True, decimals={"v": ptype}).aggregates
    assert (row["sum_v"], row["avg_v"]) == (total and Decimal(total), avg and Decimal(avg))
    assert (str(row["sum_v"]), str(row["avg_v"])) == (str(total), str(avg))  # and the type's scale


# --------------------------------------------------------------------------- rejected rows


def test_rejected_rows():
    p = make_pipeline(windowSpan="10s")
    rows = [
        {"name": "ok", "arrival": 1, "event_time": 1 * S, "batch": 1},
        {"name": "no arrival", "arrival": None, "event_time": None, "batch": 1},  # first reason wins
        {"name": "no event", "arrival": 2, "event_time": None, "batch": 1},
        {"name": "no batch", "arrival": 3, "event_time": 2 * S, "batch": None},
    ]
    res = reference_replay(p, rows)
    assert sorted((r["name"], r["reason"]) for r in res.rejected) == [
        ("no arrival", "arrival time is null"),
        ("no batch", "batch is null"),
        ("no event", "event time is null"),
    ]
    assert res.rejected[0].keys() >= {"name", "arrival", "event_time", "batch", "reason"}
    assert res.metrics["input_rows"] == 4 and res.metrics["rejected_rows"] == 3
    assert res.state.workers[None].keys[None].wm == 1 * S  # rejected rows took part in nothing

    later = reference_replay(
        p,
        [
            {"name": "old", "arrival": 4, "event_time": 3 * S, "batch": 1},
            {"name": "new", "arrival": 5, "event_time": 4 * S, "batch": 2},
        ],
        state=res.state,
    )
    assert [(r["name"], r["reason"]) for r in later.rejected] == [("old", "batch already committed")]
    assert later.state.workers[None].keys[None].windows[(0, 10 * S)] == {"count": 2}


# --------------------------------------------------------------------------- replay in pieces


def scenario_pipeline(kind):
    common = dict(
        keyExtractor="k",
        aggs=[
            "count",
            {"type": "sum", "column": "v"},
            {"type": "first", "column": "v"},
            {"type": "distinct", "column": "v"},
        ],
        triggers=["atWindowEnd", "atAggregate"],
        source={"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"interval": "1s"}, "worker": "part"},
    )
    time = {"eventTimeExtractor": "event_time", "idleTimeout": "7s", "delayWindowClose": "1s"}
    if kind == "session":
        return make_pipeline("session-window", maximumDuration="12s", time=time, **common)
    return make_pipeline("sliding-time-window", windowSpan="6s", windowSlide="2s", time=time, **common)


events_strategy = st.lists(
    st.tuples(
        st.integers(0, 30),
        st.integers(-3, 8),
        st.sampled_from(["a", "b", None]),
        st.sampled_from([0, 1]),
        st.one_of(st.none(), st.integers(-5, 5)),
    ),
    max_size=25,
)


def to_rows(events):
    return [
        {"arrival": a * S + j, "event_time": (a + d) * S, "k": k, "part": w, "v": v, "offset": j}
        for j, (a, d, k, w, v) in enumerate(events)
    ]


@pytest.mark.parametrize("kind", ["sliding", "session"])
@settings(max_examples=60, deadline=None)
@given(events=events_strategy, cut1=st.integers(0, 30), cut2=st.integers(0, 30), seed=st.integers(0, 99))
def test_pieces_equal_one_go(kind, events, cut1, cut2, seed):
    """Cutting the history at batch boundaries and carrying the state changes nothing;
    neither does shuffling the rows."""
    p = scenario_pipeline(kind)
    rows = to_rows(events)
    once = reference_replay(p, rows, flush_at_end=True)
    lo, hi = sorted((cut1, cut2))
    pieces = [
        [r for r in rows if r["arrival"] // S < lo],
        [r for r in rows if lo <= r["arrival"] // S < hi],
        [r for r in rows if r["arrival"] // S >= hi],
    ]
    random.Random(seed).shuffle(pieces[0])
    state, outs = None, []
    for i, piece in enumerate(pieces):
        res = reference_replay(p, piece, state=state, flush_at_end=(i == 2))
        outs.append(res)
        state = res.state
    for out in ("aggregates", "late_events", "rejected"):
        assert canon(getattr(once, out)) == canon(sum((getattr(r, out) for r in outs), []))
    assert state == once.state
    one_go_no_flush = reference_replay(p, rows)
    mid = reference_replay(p, pieces[2], state=reference_replay(p, pieces[0] + pieces[1]).state)
    assert mid.state == one_go_no_flush.state


@settings(max_examples=60, deadline=None)
@given(events=events_strategy)
def test_nothing_dropped_tumbling(events):
    """Each accepted event is in exactly one emitted window or one late row (flush at end)."""
    p = make_pipeline(
        windowSpan="5s",
        keyExtractor="k",
        aggs=["count"],
        source={"arrivalTime": "arrival", "batch": {"interval": "1s"}, "worker": "part"},
        time={"eventTimeExtractor": "event_time", "idleTimeout": "4s"},
    )
    res = reference_replay(p, to_rows(events), flush_at_end=True)
    assert sum(r["count"] for r in res.aggregates) + len(res.late_events) == len(events)
    assert all(not ks.windows for ws in res.state.workers.values() for ks in ws.keys.values())


def test_nan_keys_of_any_bit_pattern_are_one_key():
    """§1: every NaN key (either sign, any payload) is one key; -0.0 and 0.0 are two."""
    import struct

    def f(hex_bits):
        return struct.unpack(">d", bytes.fromhex(hex_bits))[0]

    p = make_pipeline(windowSpan="10s", keyExtractor="k")
    rows = [
        ev("a", 1, 1, k=float("nan")),
        ev("b", 2, 2, k=f("fff8000000000000")),
        ev("c", 3, 3, k=f("7ff0000000000001")),
        ev("d", 4, 4, k=0.0),
        ev("e", 5, 5, k=-0.0),
        ev("f", 30, 6, k=float("nan")),
    ]
    res = reference_replay(p, rows, flush_at_end=True)
    counts = sorted((r["window_start"] // S, r["count"], repr(r["k"])) for r in res.aggregates)
    assert counts == [(0, 1, "-0.0"), (0, 1, "0.0"), (0, 3, "nan"), (30, 1, "nan")]


def test_rows_whose_windows_leave_the_range_are_rejected():
    """§1, issue 47: a 1-hour window of 9999-12-31T23:00 would end at 10000-01-01, no
    datetime; the hour before fits, and so does a session's last millisecond."""
    last = 253_402_300_799_999
    rows = [ev("fits", None, 1, event_time=last - 3_600_000), ev("beyond", None, 2, event_time=last - 3_599_999)]
    res = reference_replay(make_pipeline(windowSpan="1h"), rows, flush_at_end=True)
    assert [(r["name"], r["reason"]) for r in res.rejected] == [("beyond", "window out of range")]
    assert [r["count"] for r in res.aggregates] == [1]
    session = make_pipeline("session-window", time={"eventTimeExtractor": "event_time", "idleTimeout": "36525d"})
    assert reference_replay(session, [ev("last", None, 1, event_time=last)], flush_at_end=True).rejected == []


def test_an_effective_watermark_before_the_range_is_written_as_none():
    """§1: the watermark of an event 1 s after 0001-01-01 minus a 5 s delay is before every
    time, deciding as minus infinity does: written as minus infinity is (the kernel's
    ``FIRST_EPOCH_MS`` is the runner's first representable time)."""
    from windowing.kernel.outputs import FIRST_EPOCH_MS
    from windowing.runner.columns import MIN_EPOCH_MS

    assert FIRST_EPOCH_MS == MIN_EPOCH_MS
    first = MIN_EPOCH_MS
    time = {"eventTimeExtractor": "event_time", "delayWindowClose": "5s"}
    res = reference_replay(
        make_pipeline(time=time, windowSpan="1h"), [ev("a", None, 1, event_time=first + 1000)], flush_at_end=True
    )
    assert [(r["window_start"], r["emit_watermark"]) for r in res.aggregates] == [(first, None)]
