"""A replay's held output is released however its caller ends (issue 50): a user ran
``windowing.replay`` ~300 times in one session without ``unpersist()`` and the driver ran
out of heap; a result now also releases on leaving a ``with`` block, and when dropped."""

from __future__ import annotations

import gc
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"


def _held(spark) -> int:
    return int(spark.sparkContext._jsc.getPersistentRDDs().size())


def test_results_dropped_in_a_loop_or_left_by_with_hold_nothing(spark, tmp_path):
    from windowing import load_pipeline, replay
    from windowing.sample import generate_history
    from windowing.storage.inputs import read_events

    generate_history(tmp_path / "landing", datetime(2024, 1, 1, tzinfo=timezone.utc), 1, 200, 5, seed=2)
    pipeline = load_pipeline(CLICKS)
    events = read_events(spark, [str(tmp_path / "landing")], pipeline=pipeline)
    gc.collect()
    before = _held(spark)
    counts = set()
    for _ in range(6):  # the forgetful caller: never unpersists, keeps only a count
        counts.add(replay(spark, pipeline, events).aggregates.count())
    gc.collect()
    assert len(counts) == 1 and _held(spark) == before  # same answer every time, nothing left held

    kept = replay(spark, pipeline, events)
    assert _held(spark) == before + 1  # held while the result is in use
    with kept as result:
        assert result.aggregates.count() in counts
    assert _held(spark) == before
    kept.unpersist()  # a second release does nothing
    assert _held(spark) == before
