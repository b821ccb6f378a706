"""Many partitions' checks planned once (``validation.base.KeyedPass``, issue 50): every sum
taken per partition equals what the partition's own ``CountPass`` sums, groupings included;
a partition without rows sums to 0; samples come from the partition's own rows."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from windowing.validation.base import CountPass, KeyedPass, union_all


def _plan(p: CountPass, df):
    """A rule-like count, a sum over the same frame, a uniqueness-like grouping, and its groups."""
    sums = p.add(df, {"big": F.when(F.col("v") > 2, 1), "total": F.col("v")})
    dup, dupes = p.group(
        df,
        [F.col("k")],
        lambda c: {"n": F.count(F.lit(1))},
        lambda g: {"dupes": F.when(g("n") > 1, g("n"))},
        having=lambda g: g("n") > 1,
    )

    def finish():
        groups = sorted(tuple(r) for r in dup().collect()) if int(dupes["dupes"]) else []
        bigs = sorted(tuple(r) for r in p.rows(df).where(F.col("v") > 2).collect())
        return int(sums["big"]), int(sums["total"]), int(dupes["dupes"]), groups, bigs

    return finish


ROWS = [
    [("a", 1), ("b", 3), ("b", 4)],
    [("a", 5), ("c", 1)],
    [],
    [("x", 9), ("x", 9), ("x", 1), ("y", 2)],
]


@pytest.mark.parametrize("small", [True, False], ids=["one-task", "shuffled"])
def test_a_keyed_pass_gives_each_partition_its_own_pass_results(spark, small):
    alone = []
    for rows in ROWS:
        p = CountPass(small=small)
        finish = _plan(p, spark.createDataFrame(rows, "k string, v long"))
        p.run()
        alone.append(finish())
    assert [a[:3] for a in alone] == [(2, 8, 2), (1, 6, 0), (0, 0, 0), (2, 21, 3)]  # by hand
    assert alone[3][3:] == ([("x", 3)], [("x", 9), ("x", 9)])
    tagged = [(i, k, v) for i, rows in enumerate(ROWS) for k, v in rows]
    every = spark.createDataFrame(tagged, "__part int, k string, v long")
    keyed = KeyedPass("__part", len(ROWS), small=small)
    assert keyed.results(_plan(keyed, every)) == alone


def test_a_keyed_pass_reads_no_sum_outside_a_partition(spark):
    keyed = KeyedPass("__part", 1)
    sums = keyed.add(spark.createDataFrame([(0, 1)], "__part int, v long"), {"v": F.col("v")})
    keyed.run()
    with pytest.raises(RuntimeError, match="no partition"):
        sums["v"]
    assert keyed.results(lambda: int(sums["v"])) == [1]


def test_union_all_unions_by_name_filling_missing_columns(spark):
    frames = [spark.createDataFrame([(i,)], f"c{i % 3} long") for i in range(7)]
    rows = union_all(frames).collect()
    assert len(rows) == 7
    assert sorted(sum(v for v in r if v is not None) for r in rows) == list(range(7))
