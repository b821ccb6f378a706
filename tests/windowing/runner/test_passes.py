"""Many partitions in one pass (issue 50) against the same partitions replayed one after
the other through Parquet state: every partition's aggregates, late events, rejected rows,
closing state and metrics alike, on generated pipelines and histories."""

from __future__ import annotations

import itertools

from hypothesis import assume, given
from hypothesis import strategies as st
from pyspark.sql import functions as F

from tests.support.engine_harness import GENERATED_COLUMNS, canon, rows_of, to_df
from tests.support.generators import cases, histories, pipelines, silent_gap_histories
from windowing.runner.passes import PART_COLUMN, batch_ranges, replay_pass
from windowing.runner.replay import replay
from windowing.storage.inputs import note_rows_at_most
from windowing.storage.outputs import read_state

_tmp = itertools.count()
COLUMNS = [c for c in GENERATED_COLUMNS if c != "batch"]


def _partitions(pipeline, rows, cuts):
    """Arrival-time edges (ms, multiples of the batch interval) cutting ``rows`` into
    ``len(cuts) + 1`` partitions, and the rows of each (a row without an arrival time
    goes with the first, as the landing zone places it)."""
    iv = pipeline.source.batch_interval_ms
    batches = sorted({r["arrival"] // iv for r in rows if r["arrival"] is not None}) or [0]
    lo, hi = batches[0] - 1, batches[-1] + 2
    inner = sorted({batches[int(c * len(batches)) % len(batches)] for c in cuts} - {batches[0]})
    edges = [b * iv for b in (lo, *inner, hi)]
    parts = []
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        parts.append(
            [
                r
                for r in rows
                if (r["arrival"] is None and i == 0) or (r["arrival"] is not None and a <= r["arrival"] < b)
            ]
        )
    return edges, parts


def _one_after_another(spark, base, pipeline, parts, flush, state):
    """Each partition replayed from the state the one before wrote to Parquet, read back."""
    out = []
    for i, rows in enumerate(parts):
        res = replay(
            spark,
            pipeline,
            to_df(spark, rows, columns=COLUMNS),
            state=state,
            flush_at_end=flush and i == len(parts) - 1,
        )
        with res:
            res.state.write.parquet(str(base / f"state{i}"))
            state = read_state(spark, base / f"state{i}")
            out.append(_rows(res, state))
    return out


def _rows(res, state=None):
    state_rows = rows_of(state if state is not None else res.state)
    return {
        "aggregates": canon(rows_of(res.aggregates)),
        "late": canon(rows_of(res.late_events)),
        "rejected": canon(rows_of(res.rejected)),
        "state": canon(state_rows),
        "metrics": res.metrics.to_dict(),
    }


def _tagged(spark, parts, seed):
    frames = [
        to_df(spark, rows, columns=COLUMNS, seed=seed).withColumn(PART_COLUMN, F.lit(i)) for i, rows in enumerate(parts)
    ]
    df = frames[0]
    for f in frames[1:]:
        df = df.unionByName(f)
    return note_rows_at_most(df, sum(len(p) for p in parts))


@cases(8)
@given(
    pipelines(),
    histories(),
    st.lists(st.floats(0, 1), min_size=1, max_size=4),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
)
def test_a_pass_equals_its_partitions_one_after_another(
    spark, tmp_path_factory, pipeline, rows, cuts, flush, carried, seed
):
    assume(not pipeline.source.batch_column)
    rows = [{k: v for k, v in r.items() if k != "batch"} for r in rows]
    edges, parts = _partitions(pipeline, rows, cuts)
    assume(len(parts) >= 2)
    base = tmp_path_factory.mktemp(f"pass{next(_tmp)}")
    start = None
    if carried:  # the pass starts from the state of a partition before it
        first = parts.pop(0)
        edges = edges[1:]
        (head,) = _one_after_another(spark, base / "head", pipeline, [first], False, None)
        start = read_state(spark, base / "head" / "state0")
        assume(len(parts) >= 2)
    expected = _one_after_another(spark, base / "chain", pipeline, parts, flush, start)
    result = replay_pass(spark, pipeline, _tagged(spark, parts, seed), batch_ranges(pipeline, edges), start, flush)
    assert result is not None
    with result:
        got = [_rows(part) for part in result.parts]
    for i, (g, e) in enumerate(zip(got, expected)):
        for what in e:
            assert g[what] == e[what], (i, what)


@cases(4)
@given(pipelines(processing_idle=True), silent_gap_histories(), st.booleans())
def test_heartbeat_ticks_between_partitions_of_a_pass(spark, tmp_path_factory, pipeline, case, flush):
    """The ticks in the silent gap between two partitions are the second's, as in a chain."""
    assume(not pipeline.source.batch_column)
    parts = [[{k: v for k, v in r.items() if k != "batch"} for r in rows] for rows in case]
    iv = pipeline.source.batch_interval_ms
    first_of_second = min(r["arrival"] for r in parts[1] if r["arrival"] is not None)
    cut = first_of_second // iv
    assume(all(r["arrival"] is None or r["arrival"] // iv < cut for r in parts[0]))
    edges = [(-(10**9) // iv) * iv, cut * iv, (10**13 // iv) * iv]
    base = tmp_path_factory.mktemp(f"gap{next(_tmp)}")
    expected = _one_after_another(spark, base, pipeline, parts, flush, None)
    result = replay_pass(spark, pipeline, _tagged(spark, parts, 1), batch_ranges(pipeline, edges), None, flush)
    assert result is not None
    with result:
        assert [_rows(p) for p in result.parts] == expected


def test_a_pass_refuses_what_it_cannot_vouch_for(spark):
    """A source that numbers its own batches, and a row outside its partition's batches
    (a day folder holding the next day's arrivals), give None: replay one by one."""
    from windowing.config import parse_pipeline

    doc = {
        "name": "p",
        "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"interval": "1s"}},
        "emitter": {
            "tumbling-time-window": {
                "windowSpan": "2s",
                "keyExtractor": "user",
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    }
    pipeline = parse_pipeline(doc)
    row = {
        "arrival": 1500,
        "event_time": None,
        "offset": 0,
        "worker": 0,
        "user": "a",
        "amount": 1.0,
        "qty": 1,
        "tag": "x",
    }
    late_row = {**row, "arrival": 4500, "offset": 1}
    ranges = batch_ranges(pipeline, [0, 3000, 6000])
    assert ranges == [(0, 3), (3, 6)]
    # the second row tagged as the first partition's: outside its batches
    assert replay_pass(spark, pipeline, _tagged(spark, [[row, late_row], []], 0), ranges) is None
    assert replay_pass(spark, pipeline, _tagged(spark, [[row], [late_row]], 0), ranges) is not None
    batched = parse_pipeline({**doc, "source": {**doc["source"], "batch": {"column": "batch"}}})
    assert batch_ranges(batched, [0, 3000, 6000]) is None
    assert batch_ranges(pipeline, [0, 2500, 6000]) is None  # an edge inside a batch
