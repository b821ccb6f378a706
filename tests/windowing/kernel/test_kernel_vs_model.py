"""The engine's kernel (without Spark) against the reference model, on generated cases.

Each case is a random pipeline (window type, watermark strategy, delay, lateness mode,
idle timeout and clock, keys, workers, batches, triggers, aggregates) and a random
history with out-of-order, late, future and unprocessable events, whose ``amount``
column is float64 or, in about one case in four, a decimal (tests/support/generators.py).
"""

from __future__ import annotations

import pytest
from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from tests.support.engine_harness import canon
from tests.support.generators import (
    bridging_sessions,
    cases,
    pipelines,
    silent_gap_histories,
    split_points,
    typed_histories,
)
from tests.support.kernel_harness import local_replay
from tests.support.reference_model import reference_replay
from windowing.config import parse_pipeline
from windowing.kernel.slices import sliceable

CASES = cases(400)


def _decimals(amount):
    """The harness's and the model's ``decimals`` argument for a drawn amount type."""
    if amount is None:
        return None
    event(f"amount decimal{amount}")
    return {"amount": amount}


def _compare(pipeline, rows, flush, amount=None, statistics=True):
    decimals = _decimals(amount)
    ref = reference_replay(pipeline, rows, flush_at_end=flush, decimals=decimals)
    aggs, late, rejected, _ = local_replay(pipeline, rows, flush_at_end=flush, decimals=decimals)
    assert canon(late) == canon(ref.late_events)
    assert canon(aggs) == canon(ref.aggregates)
    assert canon(rejected) == canon(ref.rejected)
    if statistics:
        _statistics(pipeline, rows, ref)
    return ref


def _statistics(pipeline, rows, ref):
    """What the generated cases exercise (--hypothesis-show-statistics)."""
    arrivals = {r["arrival"] for r in rows}
    for r in ref.aggregates:
        event(f"emitted {r['emit_reason']}")
        if r["emission"] > 1:
            event("window emitted again after an idle flush")
        if r["emit_reason"] == "IDLE" and r["emit_time"] not in arrivals:  # the clock was no arrival time
            event("idle flush at a heartbeat tick")
    if ref.late_events:
        event("late events")


#: Issue 8, item 11: on one key, gap 5 s, one event per batch, id15@65 s, id26@59 s, id5@60 s,
#: then id35@62 s bridges [59,60] and [65,65]. The merged session's first arrival is id15
#: (its session started later but arrived earlier); with a null bridging value its last
#: non-null arrival is id5. A 10 s delay keeps 59 s from being late after the 65 s commit.
BRIDGE_PIPELINE = parse_pipeline(
    {
        "name": "gen",
        "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
        "emitter": {
            "session-window": {
                "timeConfig": {"eventTimeExtractor": "event_time", "idleTimeout": "5s", "delayWindowClose": "10s"},
                "aggregateDefinition": [
                    {"type": "count"},
                    {"type": "first", "column": "name"},
                    {"type": "last", "column": "name"},
                    {"type": "sum", "column": "amount"},
                ],
            },
            "triggers": ["atWindowEnd"],
        },
    }
)


def bridge_rows(bridge_value="id35"):
    names = ["id15", "id26", "id5", bridge_value]
    return [
        {
            "arrival": b * 1000,
            "batch": b,
            "offset": b,
            "event_time": t * 1000,
            "worker": 0,
            "user": "a",
            "amount": 0.1 * b,
            "qty": b,
            "tag": "x",
            "name": n,
        }
        for b, (n, t) in enumerate(zip(names, [65, 59, 60, 62]), start=1)
    ]


@CASES
@example(pipeline=BRIDGE_PIPELINE, case=(None, bridge_rows()), flush=True)
@example(pipeline=BRIDGE_PIPELINE, case=(None, bridge_rows(None)), flush=False)
@given(pipelines(), typed_histories(), st.booleans())
def test_kernel_matches_model(pipeline, case, flush):
    amount, rows = case
    _compare(pipeline, rows, flush, amount)


@pytest.mark.parametrize("bridge_value, first, last", [("id35", "id15", "id35"), (None, "id15", "id5")])
@pytest.mark.parametrize("cuts", [[], [1], [2], [3], [1, 2, 3]], ids=repr)
def test_session_first_last_by_arrival_after_a_bridging_merge(bridge_value, first, last, cuts):
    """The pinned case of issue 8, item 11, in one go and cut after any batch (the bridging
    event then merges sessions carried in the state, whose first/last arrived in earlier
    pieces): first and last are by arrival order, as the contract (section 7) says."""
    rows = bridge_rows(bridge_value)
    ref = reference_replay(BRIDGE_PIPELINE, rows, flush_at_end=True)
    assert [
        (r["window_start"], r["window_end"], r["count"], r["first_name"], r["last_name"]) for r in ref.aggregates
    ] == [(59000, 65000, 4, first, last)]
    state, aggs = None, []
    for lo, hi in zip([0, *cuts], [*cuts, len(rows)]):
        a, _, _, state = local_replay(BRIDGE_PIPELINE, rows[lo:hi], state, flush_at_end=hi == len(rows))
        aggs += a
    assert canon(aggs) == canon(ref.aggregates)


def _row(arrival, event_time, user):
    return {
        "arrival": arrival,
        "batch": arrival // 1000 + 1,
        "offset": arrival // 1000,
        "event_time": event_time,
        "worker": 0,
        "user": user,
        "amount": 0.1,
        "qty": 1,
        "tag": "x",
    }


#: Found by CI: a piece with no open windows left but emitted-window counters carried in its state.
IDLE_ONLY_STATE = example(
    pipeline=parse_pipeline(
        {
            "name": "gen",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"interval": "1s"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "1s",
                    "keyExtractor": "user",
                    "timeConfig": {"idleTimeout": "1s"},
                    "aggregateDefinition": [{"type": "count"}],
                },
                "triggers": ["atWindowEnd"],
            },
        }
    ),
    case=(None, [_row(0, -5000, "b"), _row(1000, -4000, "a"), _row(2000, -3000, "a")]),
    cuts=[0.75],
    flush=False,
)


@CASES
@IDLE_ONLY_STATE
@example(pipeline=BRIDGE_PIPELINE, case=(None, bridge_rows(None)), cuts=[0.75], flush=True)  # carried + carried
@example(pipeline=BRIDGE_PIPELINE, case=(None, bridge_rows()), cuts=[0.25, 0.5, 0.75], flush=True)
@given(pipelines(), typed_histories(nulls=False), st.lists(st.floats(0, 1), min_size=1, max_size=3), st.booleans())
def test_pieces_match_one_go(pipeline, case, cuts, flush):
    """History replayed in pieces with state carried == one replay == the model (decimal
    partial sums round-trip the state exactly, past 38 digits too)."""
    amount, rows = case
    _pieces_match_one_go(pipeline, rows, cuts, flush, amount)


@cases(200)
@given(pipelines(processing_idle=True), silent_gap_histories(), st.booleans())
def test_heartbeat_ticks_across_a_partition_cut_at_a_silent_gap(pipeline, case, flush):
    """Two partitions cut at a silent gap, on the PROCESSING_TIME idle clock with a
    heartbeat: the ticks inside the gap are applied when the second partition starts,
    from the carried clock, so the pieces give exactly the rows of one replay (contract
    section 5.2), for the kernel and for the model itself."""
    before, after = case
    ref = reference_replay(pipeline, before + after, flush_at_end=flush)
    first = reference_replay(pipeline, before)
    second = reference_replay(pipeline, after, state=first.state, flush_at_end=flush)
    assert canon(first.aggregates + second.aggregates) == canon(ref.aggregates)
    a1, l1, _, state = local_replay(pipeline, before)
    a2, l2, _, _ = local_replay(pipeline, after, state, flush_at_end=flush)
    assert canon(l1 + l2) == canon(ref.late_events)
    assert canon(a1 + a2) == canon(ref.aggregates)
    _statistics(pipeline, before + after, ref)
    gap = (max(r["arrival"] for r in before), min(r["arrival"] for r in after))
    if any(r["emit_reason"] == "IDLE" and gap[0] < r["emit_time"] < gap[1] for r in ref.aggregates):
        event("idle flush at a tick between the partitions")


@cases(100)
@given(bridging_sessions(), st.booleans())
def test_bridging_session_merges_match_model(case, flush):
    """Session histories where merges often join a session that started later but
    arrived earlier: first/last by arrival order (issue 8, item 11)."""
    _compare(*case, flush)


@cases(60)
@given(bridging_sessions(), st.lists(st.floats(0, 1), min_size=1, max_size=3), st.booleans())
def test_bridging_session_merges_in_pieces(case, cuts, flush):
    """The same, cut into pieces: merges of sessions carried in the state keep their
    first/last arrival order."""
    _pieces_match_one_go(*case, cuts, flush)


def _pieces_match_one_go(pipeline, rows, cuts, flush, amount=None, chunk_events=None, slices=None):
    decimals = _decimals(amount)
    ref = reference_replay(pipeline, rows, flush_at_end=flush, decimals=decimals)
    pieces = split_points(pipeline, rows, cuts)
    state, aggs, late = None, [], []
    for i, piece in enumerate(pieces):
        a, lt, _, state = local_replay(
            pipeline,
            piece,
            state,
            flush_at_end=flush and i == len(pieces) - 1,
            decimals=decimals,
            chunk_events=chunk_events,
            slices=slices,
        )
        aggs += a
        late += lt
    assert canon(late) == canon(ref.late_events)
    assert canon(aggs) == canon(ref.aggregates)


def test_session_state_keeps_where_first_and_last_arrived():
    """The state after batches 1..3 of the pinned case: each open session's first/last
    with (batch, rank in the key's batch) of its arrival. State written before these
    columns existed still replays; its carried sessions rank by start, as merges
    combined them then."""
    rows = bridge_rows(None)
    _, _, _, state = local_replay(BRIDGE_PIPELINE, rows[:3])
    cols = [
        "window_start_ms",
        "partial_first_name",
        "partial_first_name_batch",
        "partial_first_name_seq",
        "partial_last_name",
        "partial_last_name_batch",
        "partial_last_name_seq",
    ]
    windows = sorted(tuple(r[c] for c in cols) for r in state.rows.to_pylist() if r["state_kind"] == "window")
    assert windows == [(59000, "id26", 2, 0, "id5", 3, 0), (65000, "id15", 1, 0, "id15", 1, 0)]
    aggs, *_ = local_replay(BRIDGE_PIPELINE, rows[3:], state, flush_at_end=True)
    assert [(r["first_name"], r["last_name"], r["count"]) for r in aggs] == [("id15", "id5", 4)]
    state.rows = state.rows.drop_columns([c for c in cols if c.endswith(("_batch", "_seq"))])
    aggs, *_ = local_replay(BRIDGE_PIPELINE, rows[3:], state, flush_at_end=True)
    assert [(r["first_name"], r["last_name"], r["count"]) for r in aggs] == [("id26", "id15", 4)]


@cases(150)
@example(pipeline=BRIDGE_PIPELINE, case=(None, bridge_rows()), chunk=1, by_worker=True, flush=True)
@given(pipelines(), typed_histories(), st.sampled_from([1, 2, 3, 7]), st.booleans(), st.booleans())
def test_tasks_replayed_in_bounded_pieces_match_model(pipeline, case, chunk, by_worker, flush):
    """A kernel task of more rows than its bound (``spark.rewindow.eventsPerChunk``; here 1
    to 7 events) spills them and replays pieces of whole batches, carrying the state from
    piece to piece (windowing.runner.chunks): the same rows as the model, and the same counters as
    the task replayed in one go (keys seen once, keys held and open windows at the end)."""
    amount, rows = case
    _matches_model_and_one_task(pipeline, rows, flush, amount, by_worker, chunk_events=chunk)


def _matches_model_and_one_task(pipeline, rows, flush, amount, by_worker, **variant):
    """``local_replay`` with ``variant`` gives the model's rows, and the counters and state
    of the same tasks replayed in one go."""
    decimals = _decimals(amount)
    ref = reference_replay(pipeline, rows, flush_at_end=flush, decimals=decimals)
    aggs, late, _, replayed = local_replay(
        pipeline, rows, flush_at_end=flush, decimals=decimals, by_worker=by_worker, **variant
    )
    assert canon(late) == canon(ref.late_events)
    assert canon(aggs) == canon(ref.aggregates)
    *_, whole = local_replay(
        pipeline, rows, flush_at_end=flush, decimals=decimals, by_worker=by_worker, chunk_events=10**9
    )
    assert replayed.counters == whole.counters
    assert canon(replayed.rows.to_pylist()) == canon(whole.rows.to_pylist())


@cases(80)
@given(
    pipelines(),
    typed_histories(nulls=False),
    st.lists(st.floats(0, 1), min_size=1, max_size=2),
    st.booleans(),
    st.sampled_from([1, 2, 5]),
)
def test_bounded_pieces_inside_partitions_carried_across_partitions(pipeline, case, cuts, flush, chunk):
    """Partitions replayed one after another from the state each leaves, each of their
    tasks in bounded pieces: still the model's rows (the state a task's last piece leaves is
    the partition's)."""
    amount, rows = case
    _pieces_match_one_go(pipeline, rows, cuts, flush, amount, chunk_events=chunk)


#: Found by the bounded-pieces test: session 26.3 s emitted at a heartbeat tick (24 s),
#: reopened by a late-arriving event of batch 24, then flushed at the next tick (26 s):
#: its second emission. Cut after batch 24, the reopened session is carried open with
#: ``emissions`` 1, and its flush in the next replay must be emission 2 (it was 1).
REOPENED_SESSION = parse_pipeline(
    {
        "name": "gen",
        "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"interval": "1s"}},
        "emitter": {
            "session-window": {
                "timeConfig": {
                    "eventTimeExtractor": "event_time",
                    "idleTimeout": "1s",
                    "idleTimeoutClock": "PROCESSING_TIME",
                    "watermarkStrategy": "MIN_EVENT_TIME",
                },
                "aggregateDefinition": [{"type": "count"}],
            },
            "triggers": ["atWindowEnd"],
        },
        "replay": {"heartbeat": "2s"},
    }
)


@pytest.mark.parametrize("chunk", [None, 1], ids=["partitions cut at every batch", "one task in pieces"])
def test_a_reopened_session_carried_open_keeps_its_emission_count(chunk):
    times = [
        (11000, 6000),
        (21300, 26300),
        (21300, 20300),
        (22300, 23300),
        (24300, 26300),
        (34300, 29300),
        (44300, 39300),
        (54300, 49300),
        (64300, 68300),
        (64300, 64300),
        (64300, 66300),
        (74300, 78300),
        (74300, 74300),
        (74300, 76300),
        (84300, 79300),
    ]
    rows = [
        {"arrival": a, "event_time": t, "offset": i, "worker": 0, "user": "a", "amount": 0.1, "qty": 1, "tag": "x"}
        for i, (a, t) in enumerate(times)
    ]
    ref = reference_replay(REOPENED_SESSION, rows)
    assert sorted((r["window_start"], r["emission"]) for r in ref.aggregates if r["window_start"] == 26300) == [
        (26300, 1),
        (26300, 2),
    ]
    if chunk:
        aggs, *_ = local_replay(REOPENED_SESSION, rows, by_worker=True, chunk_events=chunk)
    else:
        state, aggs = None, []
        for arrival in sorted({r["arrival"] for r in rows}):
            a, _, _, state = local_replay(REOPENED_SESSION, [r for r in rows if r["arrival"] == arrival], state)
            aggs += a
    assert canon(aggs) == canon(ref.aggregates)


@cases(150)
@given(pipelines(), typed_histories(), st.sampled_from([2, 3, 5]), st.sampled_from([None, 1, 3]), st.booleans())
def test_keys_replayed_in_slices_of_their_windows_match_one_task(pipeline, case, slices, chunk, flush):
    """A hot key's tumbling or sliding windows replayed in slices, each a task with the
    key's key-batch rows (windowing.kernel.slices), in bounded pieces or not: the model's
    rows, and the rows, state and counters of the key replayed in one task."""
    assume(sliceable(pipeline.window))
    event(f"{slices} slices")
    amount, rows = case
    _matches_model_and_one_task(pipeline, rows, flush, amount, False, chunk_events=chunk, slices=slices)


@cases(60)
@given(
    pipelines(),
    typed_histories(nulls=False),
    st.lists(st.floats(0, 1), min_size=1, max_size=2),
    st.booleans(),
    st.sampled_from([2, 3]),
)
def test_slices_carried_across_partitions_match_model(pipeline, case, cuts, flush, slices):
    """Partitions replayed one after another, every key in slices: the state each slice
    leaves (its windows, the home slice's key row) is the next partition's."""
    assume(sliceable(pipeline.window))
    amount, rows = case
    _pieces_match_one_go(pipeline, rows, cuts, flush, amount, chunk_events=2, slices=slices)


def _keyed(key, worker="worker"):
    source = {"arrivalTime": "arrival", "batch": {"interval": "1s"}, **({"worker": worker} if worker else {})}
    window = {"windowSpan": "10s", "keyExtractor": key, "aggregateDefinition": [{"type": "count"}]}
    return parse_pipeline({"name": "keys", "source": source, "emitter": {"tumbling-time-window": window}})


@pytest.mark.parametrize("keys", [(3, -2), (2**62, -(2**62)), (-1, 0)])
def test_integer_workers_and_keys_of_any_sign_and_size_stay_apart(keys):
    """(worker 0, key a) and (worker 1, key b) are two keys whatever the integers: the
    kernel once mixed their codes into one value that two pairs could share (worker 0 and
    key 3 against worker 1 and key -2 were one key, with one window of both events)."""
    rows = [
        {"arrival": 1000, "worker": 0, "qty": keys[0], "offset": 0},
        {"arrival": 1000, "worker": 1, "qty": keys[1], "offset": 1},
    ]
    pipeline = _keyed("qty")
    aggs, *_ = local_replay(pipeline, rows, flush_at_end=True, partitions=1, by_worker=False)  # one task holds both
    assert canon(aggs) == canon(reference_replay(pipeline, rows, flush_at_end=True).aggregates)
    assert sorted((r["worker"], r["qty"], r["count"]) for r in aggs) == [(0, keys[0], 1), (1, keys[1], 1)]


def test_a_key_of_several_columns_is_the_tuple_of_their_values_nulls_included():
    """Issue 49: ``keyExtractor: [user, qty]`` windows each (user, qty) on its own; a null in
    either part is part of the key, and the outputs carry each column."""
    pipeline = _keyed(["user", "qty"], worker=None)
    rows = [
        {"arrival": 1000 + i * 100, "user": a, "qty": r, "offset": i}
        for i, (a, r) in enumerate([("a", 1), ("a", 2), ("b", 1), ("a", 1), (None, 1), ("a", None), (None, None)])
    ]
    ref = _compare(pipeline, rows, flush=True, statistics=False)
    got = sorted(((r["user"], r["qty"], r["count"]) for r in ref.aggregates), key=repr)
    assert got == sorted(
        [("a", 1, 2), ("a", 2, 1), ("b", 1, 1), (None, 1, 1), ("a", None, 1), (None, None, 1)], key=repr
    )
