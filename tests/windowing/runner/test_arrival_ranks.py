"""Replays of subsets of one ranked table (``kernel.with_arrival_ranks``).

The lateness analysis ranks a task's events in arrival order once and ids its keys once;
each of its replays of a subset (some keys, some events left out) then orders its events
by one sort of (key, rank). That must be exactly the order, and so the output, the
subset's own full sort gives.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from tests.support.generators import cases, histories, pipelines
from tests.support.kernel_harness import events_table, normalise_rows, summary_table
from windowing import kernel as K
from windowing.config import WatermarkStrategy
from windowing.kernel.inputs import ARRIVAL_RANK, with_arrival_ranks, with_event_columns
from windowing.runner.timelines import summary_timelines


def _rows(t: pa.Table) -> list[str]:
    return sorted(map(repr, t.to_pylist()))


@cases(60)
@given(pipelines(), histories(max_events=40), st.data())
def test_a_ranked_subset_replays_as_the_same_rows_unranked(pipeline, rows, data):
    types, valid, _ = normalise_rows(pipeline, rows)
    spec = K.Spec(pipeline=pipeline, input_types=types)
    pick = min if pipeline.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else max
    timelines, _ = summary_timelines(pipeline, summary_table(valid, pick), [])
    table = with_event_columns(events_table(valid, types), spec)
    ranked = with_arrival_ranks(table, spec)
    assert sorted(ranked[ARRIVAL_RANK].to_pylist()) == list(range(table.num_rows))
    keep = pa.array(data.draw(st.lists(st.booleans(), min_size=table.num_rows, max_size=table.num_rows)), pa.bool_())
    order = np.array(data.draw(st.permutations(range(pc.sum(keep.cast(pa.int64())).as_py() or 0))), np.int64)
    subset = ranked.filter(keep).take(pa.array(order, pa.int64()))  # any row order, as a task gets it
    got = K.process(subset, spec, timelines, False)
    want = K.process(table.filter(keep).take(pa.array(order, pa.int64())), spec, timelines, False)
    assert _rows(got.aggregates) == _rows(want.aggregates)
    assert _rows(got.late) == _rows(want.late)
    assert _rows(got.state) == _rows(want.state)
    assert got.counters == want.counters
