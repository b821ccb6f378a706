"""The skew-free variant replayed for the keys where it can differ only (skew_subset.skew_dirty_rows).

Where the pipeline has no idle timeout, the analysis replays the skew-free variant only for
the keys with a skewed event or a carried state that differs from the configured variant's
(or every key of a worker whose skew-free commits differ), and takes every other key's
figures from the configured replay, its emit times read from the skew-free worker clocks.
Every figure, table and carried state row
must be the one a skew-free replay of every key gives: checked on generated cases
(tumbling and sliding windows, workers, keys, batch columns, batches stamped earlier,
events from the future; the generated idle timeouts taken out, so that the shortcut runs),
in one go and in pieces; and with idle timeouts and session windows (whose gap is one),
where it must not run.
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.support.generators import cases, histories, pipelines, split_points
from tests.support.lateness_harness import local_lateness
from tests.windowing.lateness.test_sweep import _assert_same, _named
from windowing.config import Lateness, parse_pipeline
from windowing.lateness import skew_subset, whatif
from windowing.lateness.options import LatenessOptions

OPTIONS = LatenessOptions(delays_ms=(0, 2_000), lateness_modes=(Lateness.WINDOW_CLOSED,), future_skew_ms=3_000)


def _more_keys(rows, spread):
    """The generated rows with their key spread over ``spread`` values (most keys then
    have no skewed event), keeping every bridge on one key."""
    return [{**r, "user": f"{r['user']}{(r['arrival'] or 0) // 7_000 % spread}"} for r in rows]


@pytest.fixture(autouse=True)
def taken(monkeypatch):
    """Take the shortcut however many keys are dirty (the tests' histories are small), and
    record which way each task went: None (a whole pass), else the names of the events
    of the keys replayed under both variants."""
    monkeypatch.setattr(skew_subset, "SKEW_SUBSET_MAX_SHARE", 1.0)
    seen: list = []
    real = skew_subset.skew_dirty_rows

    def recorded(table, *args):
        dirty = real(table, *args)
        seen.append(
            None
            if dirty is None
            else sorted(n for n in table["name"].filter(pa.array(dirty)).to_pylist() if n is not None)
        )
        return dirty

    monkeypatch.setattr(whatif, "skew_dirty_rows", recorded)  # where analyse calls it
    return seen


def _without_idle_timeout(pipeline):
    return replace(pipeline, window=replace(pipeline.window, idle_timeout_ms=None))


def _report(taken) -> None:
    if any(t is None for t in taken):
        event("a whole pass")
    if any(t == [] for t in taken):
        event("subset: no key replayed twice")
    if any(t for t in taken):
        event("subset: dirty keys replayed twice")


@cases(60)
@given(
    pipelines(windows=("tumbling-time-window", "sliding-time-window"), event_time=True),
    histories(max_events=40),
    st.integers(1, 4),
    st.booleans(),
)
def test_the_skew_free_subset_gives_what_a_whole_replay_gives(taken, pipeline, rows, spread, flush):
    pipeline = _without_idle_timeout(pipeline)
    rows = _named(_more_keys(rows, spread))
    taken.clear()
    subset = local_lateness(pipeline, rows, OPTIONS, flush_at_end=flush)
    _report(taken)
    whole = local_lateness(pipeline, rows, OPTIONS, flush_at_end=flush, skew_subset=False)
    _assert_same(subset, whole)


@cases(30)
@given(
    pipelines(windows=("tumbling-time-window", "sliding-time-window"), event_time=True),
    histories(max_events=40),
    st.integers(1, 4),
    st.lists(st.floats(0.1, 0.9), min_size=1, max_size=3),
)
def test_the_skew_free_subset_in_pieces_carries_what_a_whole_replay_carries(taken, pipeline, rows, spread, cuts):
    """A key skewed in one piece carries another state under the skew-free variant: it is
    replayed in the next pieces too (and each way reads the other's state)."""
    pipeline = _without_idle_timeout(pipeline)
    rows = _named(_more_keys(rows, spread))
    subset_state = whole_state = None
    taken.clear()
    for piece in split_points(pipeline, rows, cuts):
        subset = local_lateness(pipeline, piece, OPTIONS, state=subset_state)
        whole = local_lateness(pipeline, piece, OPTIONS, state=whole_state, skew_subset=False)
        _assert_same(subset, whole)
        _assert_same(local_lateness(pipeline, piece, OPTIONS, state=whole_state), whole)
        subset_state, whole_state = subset.state, whole.state
    _report(taken)


@cases(25)
@given(pipelines(event_time=True), histories(max_events=30), st.integers(1, 3))
def test_idle_timeouts_and_sessions_replay_every_key(taken, pipeline, rows, spread):
    """A skewed event moves its worker's clocks, which idleness (and a session's gap)
    reads: with an idle timeout the skew-free variant is one whole pass."""
    rows = _named(_more_keys(rows, spread))
    taken.clear()
    subset = local_lateness(pipeline, rows, OPTIONS)
    _assert_same(subset, local_lateness(pipeline, rows, OPTIONS, skew_subset=False))
    if pipeline.window.idle_timeout_ms is not None:
        event(pipeline.window.type.value)
        assert all(t is None for t in taken)


def test_a_key_without_skewed_events_takes_its_emit_time_from_the_skew_free_worker_clock(taken):
    """Batch 2 is stamped before batch 1 (a batch column allows it): the worker's clock at
    batches 2 and 3 is batch 1's greatest arrival, a skewed event's, under the configured
    variant only. Key ``c`` has no skewed event, yet its window's emit time differs: it is
    not replayed again, its emit time is read from the skew-free clock; key ``d`` commits
    after the clocks meet again."""
    p = parse_pipeline(
        {
            "name": "c",
            "source": {"arrivalTime": "arrival", "batch": {"column": "batch"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "keyExtractor": "user",
                    "timeConfig": {"eventTimeExtractor": "event_time"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    rows = _named(
        [
            {"user": u, "batch": b, "arrival": a * 1000, "event_time": t * 1000}
            for u, b, a, t in [("s", 1, 10, 20), ("c", 2, 5, 5), ("c", 3, 8, 10), ("d", 4, 12, 11)]
        ]
    )
    subset = local_lateness(p, rows, OPTIONS, partitions=1)
    assert taken == [["e0"]]  # key s replayed under both variants; c (its emit time moved) and d taken as they are
    whole = local_lateness(p, rows, OPTIONS, partitions=1, skew_subset=False)
    _assert_same(subset, whole)
    free = next(v.label for v in subset.variants if v.skew_free)
    full = next(v.label for v in subset.variants if v.full)
    assert sorted(subset.latency[free][0]) != sorted(subset.latency[full][0])
