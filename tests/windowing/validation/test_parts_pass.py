"""Many partitions' check passes in one Spark job (``validation.base.PartsPass``, issue 50):
each view's sums equal those of its own ``CountPass``, groupings included, and views whose
plans differ fall back to a pass each."""

from __future__ import annotations

from pyspark.sql import functions as F

from windowing.validation.base import CountPass, PartsPass, union_all


def _plan(p: CountPass, df):
    """A rule-like count, a sum over the same frame, and a uniqueness-like grouping."""
    sums = p.add(df, {"big": F.when(F.col("v") > 2, 1), "total": F.col("v")})
    _, dupes = p.group(
        df,
        [F.col("k")],
        lambda c: {"n": F.count(F.lit(1))},
        lambda g: {"dupes": F.when(g("n") > 1, g("n"))},
        having=lambda g: g("n") > 1,
    )
    return lambda: (int(sums["big"]), int(sums["total"]), int(dupes["dupes"]))


def _frames(spark):
    rows = [
        [("a", 1), ("b", 3), ("b", 4)],
        [("a", 5), ("c", 1)],
        [],
        [("x", 9), ("x", 9), ("x", 1), ("y", 2)],
    ]
    return [spark.createDataFrame(r, "k string, v long") for r in rows]


def test_a_parts_pass_gives_each_view_its_own_pass_sums(spark):
    frames = _frames(spark)
    alone = []
    for df in frames:
        p = CountPass(small=True)
        finish = _plan(p, df)
        p.run()
        alone.append(finish())
    assert alone == [(2, 8, 2), (1, 6, 0), (0, 0, 0), (2, 21, 3)]  # by hand
    together = PartsPass(len(frames), small=True)
    finishes = [_plan(v, df) for v, df in zip(together.views, frames)]
    together.run()
    assert [f() for f in finishes] == alone


def test_views_whose_plans_differ_run_a_pass_each(spark):
    frames = _frames(spark)
    together = PartsPass(2)
    first = _plan(together.views[0], frames[0])
    other = together.views[1].add(frames[3], {"rows": F.lit(1)})  # another plan
    together.run()
    assert first() == (2, 8, 2) and int(other["rows"]) == 4


def test_union_all_unions_by_name_filling_missing_columns(spark):
    frames = [spark.createDataFrame([(i,)], f"c{i % 3} long") for i in range(7)]
    rows = union_all(frames).collect()
    assert len(rows) == 7
    assert sorted(sum(v for v in r if v is not None) for r in rows) == list(range(7))
