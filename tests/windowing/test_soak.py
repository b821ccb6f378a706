"""A Spark session that lasts (issue 50): 1,000 small replays in the suite's one session,
released the three ways a caller can (a ``with`` block, ``unpersist()``, dropped), hold
flat memory and fail none.

A caller once ran about 300 replays in one session without releasing their results, and the
driver ran out of heap (``java.lang.OutOfMemoryError``): every result kept its output cached.
Here every figure :mod:`bench.soak` samples must stop growing once the session is warm (the
first half: class loading, the JIT, Spark's status store filling to its bound of 1,000
executions, about 400 replays), and nothing may stay cached. ``python bench/soak.py
--replays 10000`` runs the long form (figures in docs/architecture.md, "A Spark session
that lasts").

The issue asks for 2,000 here. That took 1,059 s in CI (2026-12-02) and the suite 43
minutes; a replay costs its own two or three Spark jobs until the many-partition pass
shares them, so CI runs 1,000 for now.
"""

from __future__ import annotations

import pytest

from bench.soak import slopes, soak

REPLAYS = 1000

#: The most each figure may grow per 1,000 replays once warm (MB, or entries). A result left
#: cached grows the cached RDDs by one each replay, and the heap by its output (the heap
#: moves about 10 MB either way between samples once warm, so its bound is wider). (The JVM's
#: resident size is sampled but not bounded: it follows the heap the collector keeps
#: committed, within ``spark.driver.memory``, 200 MB up or down from one sample to the next.)
BOUNDS = {
    "jvm_heap": 32.0,
    "jvm_nonheap": 16.0,
    "driver_rss": 16.0,
    "worker_rss": 16.0,
    "cached_rdds": 0.5,
    "sql_executions": 50.0,
    "listeners": 0.5,
    "py4j_proxies": 5.0,
}


@pytest.mark.slow
def test_a_thousand_replays_in_one_session_hold_flat_memory(spark, tmp_path):
    samples = soak(spark, REPLAYS, REPLAYS // 20, tmp_path)
    assert samples[-1].replays == REPLAYS
    assert samples[-1].cached_rdds == 0, samples[-1]
    growth = slopes(samples, warm_up=0.5)
    grew = {name: round(growth[name], 2) for name, bound in BOUNDS.items() if growth[name] > bound}
    table = "\n".join(str(s) for s in samples)
    assert not grew, f"growth per 1,000 replays over its bound {BOUNDS}: {grew}\n{table}"
