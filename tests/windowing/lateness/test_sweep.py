"""The delay sweep (windowing.lateness.sweep) against one kernel replay per variant.

The lateness analysis replays the lean variants of a tumbling or sliding pipeline without
an idle timeout in one sweep per strategy and lateness mode. Every figure, table and
carried state row it gives must be the one the kernel gives when it replays each variant
on its own: checked on generated cases, in one go and in pieces (each piece continuing
from the other way's state too, so a chain may switch between them).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from tests.support.generators import cases, histories, pipelines, split_points
from tests.support.lateness_harness import local_lateness
from windowing.config import Lateness, parse_pipeline
from windowing.lateness.options import LatenessOptions
from windowing.lateness.sweep import sweepable
from windowing.lateness.variants import ROW_ID

OPTIONS = LatenessOptions(delays_ms=(0, 1_000, 2_500, 6_000), lateness_modes=tuple(Lateness), future_skew_ms=4_000)


def _named(rows):
    return [{**r, "name": f"e{i}"} for i, r in enumerate(rows)]


def _rows(table: pa.Table) -> list[tuple]:
    """A table's rows as sortable tuples (row order is not part of the result)."""
    cols = [c.to_pylist() for c in table.columns]
    return sorted((tuple(repr(v) for v in row) for row in zip(*cols)), key=repr)


def _assert_same(swept, replayed):
    assert swept.counters == replayed.counters
    assert {k: sorted(zip(*v)) for k, v in swept.latency.items()} == {
        k: sorted(zip(*v)) for k, v in replayed.latency.items()
    }
    assert {k: [a.tolist() for a in v] for k, v in swept.slack.items()} == {
        k: [a.tolist() for a in v] for k, v in replayed.slack.items()
    }
    for name, table in replayed.tables.items():
        table = table.drop_columns([ROW_ID]) if ROW_ID in table.column_names else table
        other = swept.tables[name]
        other = other.drop_columns([ROW_ID]) if ROW_ID in other.column_names else other
        assert _rows(other) == _rows(table), name
    assert swept.state.workers == replayed.state.workers


@cases(25)
@given(
    pipelines(windows=("tumbling-time-window", "sliding-time-window"), event_time=True),
    histories(max_events=30),
    st.booleans(),
)
def test_the_sweep_gives_what_a_replay_per_variant_gives(pipeline, rows, flush):
    assume(sweepable(pipeline))
    event(pipeline.window.type.value)
    rows = _named(rows)
    swept = local_lateness(pipeline, rows, OPTIONS, flush_at_end=flush)
    replayed = local_lateness(pipeline, rows, OPTIONS, flush_at_end=flush, sweep=False)
    _assert_same(swept, replayed)
    if any(c.get("late") for c in replayed.counters.values()):
        event("late pairs")


@cases(15)
@given(
    pipelines(windows=("tumbling-time-window", "sliding-time-window"), event_time=True),
    histories(max_events=40),
    st.lists(st.floats(0.1, 0.9), min_size=1, max_size=3),
)
def test_the_sweep_in_pieces_carries_what_the_replays_carry(pipeline, rows, cuts):
    """Open windows differ per delay: each variant's state goes on to the next piece, and
    a piece read from the sweep's state gives what it gives read from the kernel's."""
    assume(sweepable(pipeline))
    rows = _named(rows)
    swept_state = replayed_state = None
    for piece in split_points(pipeline, rows, cuts):
        swept = local_lateness(pipeline, piece, OPTIONS, state=swept_state)
        replayed = local_lateness(pipeline, piece, OPTIONS, state=replayed_state, sweep=False)
        _assert_same(swept, replayed)
        crossed = local_lateness(pipeline, piece, OPTIONS, state=replayed_state)
        _assert_same(crossed, replayed)
        swept_state, replayed_state = swept.state, replayed.state
        if any(c.get("open_windows") for c in replayed.counters.values()):
            event("windows carried open")


def test_sessions_and_idle_timeouts_are_replayed_per_variant():
    base = {"name": "p", "source": {"arrivalTime": "arrival", "batch": {"interval": "1s"}}}
    tumbling = {
        "windowSpan": "10s",
        "keyExtractor": "user",
        "timeConfig": {"eventTimeExtractor": "event_time"},
        "aggregateDefinition": [{"type": "count"}],
    }
    assert sweepable(parse_pipeline({**base, "emitter": {"tumbling-time-window": tumbling}}))
    idle = {**tumbling, "timeConfig": {**tumbling["timeConfig"], "idleTimeout": "5s"}}
    assert not sweepable(parse_pipeline({**base, "emitter": {"tumbling-time-window": idle}}))
    session = {
        "keyExtractor": "user",
        "timeConfig": {"eventTimeExtractor": "event_time", "idleTimeout": "5s"},
        "aggregateDefinition": [{"type": "count"}],
    }
    assert not sweepable(parse_pipeline({**base, "emitter": {"session-window": session}}))


@pytest.mark.parametrize("lateness", list(Lateness))
def test_a_late_event_under_a_small_delay_is_kept_under_a_larger_one(lateness):
    """The contract's input B (section 9) under MAX_EVENT_TIME: e3 (8 s, batch 3) misses
    [0, 10) while 10 <= 12 - D, so its window closes with it only from D = 2.001 s."""
    p = parse_pipeline(
        {
            "name": "b",
            "source": {"arrivalTime": "arrival", "batch": {"interval": "1s"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "keyExtractor": "user",
                    "timeConfig": {
                        "eventTimeExtractor": "event_time",
                        "watermarkStrategy": "MAX_EVENT_TIME",
                        "lateness": lateness.value,
                    },
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    rows = [
        {"user": "u", "event_time": t * 1000, "arrival": b * 1000, "name": n}
        for n, t, b in [("e1", 2, 1), ("e2", 5, 1), ("e4", 12, 2), ("e3", 8, 3), ("e5", 25, 4)]
    ]
    options = LatenessOptions(delays_ms=(0, 2_000, 2_001, 5_000), lateness_modes=(lateness,), future_skew_ms=None)
    swept = local_lateness(p, rows, options)
    _assert_same(swept, local_lateness(p, rows, options, sweep=False))
    late = {
        v.delay_ms: swept.counters.get(v.label, {}).get("late_events", 0)
        for v in swept.variants
        if v.strategy.value == "MAX_EVENT_TIME" and v.lateness is lateness and not v.skew_free
    }
    expected = {
        Lateness.WINDOW_CLOSED: {0: 1, 2_000: 1, 2_001: 0, 5_000: 0},
        Lateness.BEFORE_WATERMARK: {0: 1, 2_000: 1, 2_001: 1, 5_000: 0},
    }[lateness]
    assert late == expected
