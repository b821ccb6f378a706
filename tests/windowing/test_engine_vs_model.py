"""The Spark engine against the reference model: generated pipelines and histories,
replayed in one go and in pieces with the state written to Parquet and read back."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from tests.engine_harness import canon, run_engine
from tests.generators import cases, histories, pipelines, split_points
from tests.reference_model import reference_replay
from windowing.io import read_state

SPARK_CASES = cases(30)
_tmp = itertools.count()


@SPARK_CASES
@given(pipelines(), histories(), st.booleans(), st.integers(0, 3))
def test_engine_matches_model(spark, pipeline, rows, flush, seed):
    ref = reference_replay(pipeline, rows, flush_at_end=flush)
    aggs, late, rejected, _, metrics = run_engine(spark, pipeline, rows, flush_at_end=flush, seed=seed,
                                                  partitions=seed + 1)
    assert canon(late) == canon(ref.late_events)
    assert canon(aggs) == canon(ref.aggregates)
    assert canon(rejected) == canon(ref.rejected)
    assert metrics["input_rows"] == len(rows)
    assert metrics["late_events"] == len(ref.late_events)
    assert metrics["rejected_rows"] == len(ref.rejected)


@cases(10)
@given(pipelines(), histories(nulls=False), st.lists(st.floats(0, 1), min_size=1, max_size=2), st.booleans())
def test_pieces_through_parquet_state_match_model(spark, tmp_path_factory, pipeline, rows, cuts, flush):
    ref = reference_replay(pipeline, rows, flush_at_end=flush)
    pieces = split_points(pipeline, rows, cuts)
    base = tmp_path_factory.mktemp(f"pieces{next(_tmp)}")
    state, aggs, late = None, [], []
    for i, piece in enumerate(pieces):
        a, l, _, state_df, _ = run_engine(spark, pipeline, piece, state=state,
                                          flush_at_end=flush and i == len(pieces) - 1)
        state_df.write.parquet(str(base / f"state{i}"))
        state = read_state(spark, base / f"state{i}")
        aggs += a
        late += l
    assert canon(late) == canon(ref.late_events)
    assert canon(aggs) == canon(ref.aggregates)
