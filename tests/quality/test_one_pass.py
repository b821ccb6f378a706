"""The checks' one pass (issue 29): every check of a partition takes its counts in one Spark
action (``windowing.validation.base.CountPass``), and reports exactly what the queries of its
own (pandera's per-column jobs, a count per rule, a count per grouping) found before."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from tests.quality.test_bad_inputs import jobs_run_by
from windowing import validation as V
from windowing.runner.session import session_conf
from windowing.validation.base import DEFAULT_SAMPLE_SIZE, CountPass
from windowing.validation.schemas import _validate


def _with(o, **changes):
    return SimpleNamespace(**{**vars(o), **changes})


def _add(df, **changes):
    """``df`` plus a copy of its first row with ``changes`` (SQL) applied."""
    row = df.limit(1)
    for col, expr in changes.items():
        row = row.withColumn(col, F.expr(expr).cast(df.schema[col].dataType))
    return df.unionByName(row)


@pytest.mark.parametrize("small", [False, True], ids=["spread", "small"])
def test_a_pass_sums_what_separate_queries_count(spark, small):
    """Sums over rows (two asks on one frame share its scan), and over the groups of several
    groupings done in one groupBy: float keys apart as the engine tells them (-0.0, 0.0),
    null keys grouped, a grouping of no rows with no group; all in one Spark job. A small
    pass (a small partition's) finds the same in one task, with adaptive execution on."""
    nan = float("nan")
    a = spark.createDataFrame(
        [
            (1.0, "x", 1),
            (-0.0, "x", 2),
            (0.0, "x", 3),
            (0.0, "x", 4),
            (nan, None, 5),
            (nan, None, None),
            (None, "y", 6),
            (None, "y", 7),
        ],
        "f double, s string, n long",
    )
    b = spark.createDataFrame([("x", 1), ("x", 1), (None, None), (None, 2), ("z", 3)], "s string, n long")
    empty = spark.createDataFrame([], "s string, n long")
    p = CountPass(small=small)
    rows_a = p.add(a, {"rows": F.lit(1), "big": F.when(F.col("n") > 2, 1), "n": F.col("n"), "half": F.col("n") / 2})
    nulls_a = p.add(a, {"nulls": F.when(F.col("s").isNull(), 1)})
    rows_empty = p.add(empty, {"rows": F.lit(1), "n": F.col("n")})
    dup_a, sums_a = p.group(
        a,
        [V.as_key(F.col("f"), T.DoubleType()).alias("f"), F.col("s")],
        aggs=lambda c: {"copies": F.count(F.lit(1)), "n": F.sum(c("n"))},
        having=lambda g: g("copies") > 1,
        values=lambda g: {"groups": F.lit(1), "n": g("n")},
    )
    groups_b, sums_b = p.group(
        b,
        [F.col("s")],
        aggs=lambda c: {"copies": F.count(F.lit(1)), "n": F.sum(c("n"))},
        values=lambda g: {"groups": F.lit(1), "copies": g("copies"), "per": g("n") / g("copies")},
    )
    none, sums_none = p.group(
        empty,
        [],
        aggs=lambda c: {"n": F.sum(c("n"))},
        having=lambda g: g("n") != 0,
        values=lambda g: {"groups": F.lit(1)},
    )
    if small:
        with session_conf(spark, {"spark.sql.adaptive.enabled": "true"}):
            jobs = jobs_run_by(spark, p.run)
        tracker = spark.sparkContext.statusTracker()
        stages = [s for j in jobs for s in tracker.getJobInfo(j).stageIds]
        assert len(jobs) == 1 and [tracker.getStageInfo(s).numTasks for s in stages] == [1], stages
    else:
        assert len(jobs_run_by(spark, p.run)) == 1  # the suite runs without adaptive execution

    assert (rows_a["rows"], rows_a["big"], rows_a["n"], rows_a["half"], nulls_a["nulls"]) == (8, 5, 28, 14.0, 2)
    assert isinstance(rows_a["half"], float) and isinstance(rows_a["n"], int)
    assert (rows_empty["rows"], rows_empty["n"]) == (0, 0)
    assert sorted(map(tuple, dup_a().collect()), key=repr) == [
        ("0.0", "x", 2, 7),
        ("NaN", None, 2, 5),
        (None, "y", 2, 13),
    ]
    assert (sums_a["groups"], sums_a["n"]) == (dup_a().count(), 25)
    assert (sums_b["groups"], sums_b["copies"], sums_b["per"]) == (groups_b().count(), 5, 1.0 + 1.0 + 3.0)
    assert sums_none["groups"] == none().count() == 0
    with pytest.raises(RuntimeError, match="has run"):
        p.add(a, {"rows": F.lit(1)})


def test_the_checks_of_a_partition_take_one_spark_job(spark, replayed):
    """pandera's per-column jobs, each rule's and each grouping's: 72 Spark jobs a partition
    of the quick start before issue 29, one here (the suite runs without adaptive execution,
    so the pass's groupBy is a stage of that job; with it, two: tests/test_partition_jobs.py).
    Only a failing check adds queries: its sample's."""
    for name in ("clicks", "sliding"):
        r = replayed(name)
        outputs, events, prev = r.outputs(spark), r.events(spark), r.state1(spark)
        found: list = []

        def check(r=r, outputs=outputs, events=events, prev=prev, found=found):
            found += V.run_checks(spark, r.pipeline, outputs, input_df=events, prev_state=prev)

        jobs = jobs_run_by(spark, check)
        assert not V.failures(found), V.format_table(found)
        assert len(jobs) == 1, (name, jobs)


def _schema_cases():
    """(check, corruption of the outputs): findings in the columns the pass counts for pandera
    (non-null columns, ``Check.ge``), with others clean, and the types and columns it leaves to pandera."""
    aggs = lambda **c: lambda o, ev: _with(o, aggregates=_add(o.aggregates, **c))  # noqa: E731
    late = lambda **c: lambda o, ev: _with(o, late_events=_add(o.late_events, **c))  # noqa: E731
    state = lambda **c: lambda o, ev: _with(o, state=_add(o.state, **c))  # noqa: E731
    return {
        "clean aggregates": ("aggregates_schema", lambda o, ev: o),
        "emission 0": ("aggregates_schema", aggs(emission="0")),
        "emission null": ("aggregates_schema", aggs(emission="NULL")),
        "emission 0 and a null count": ("aggregates_schema", aggs(emission="0", count="NULL")),
        "null window bounds": ("aggregates_schema", aggs(window_start="NULL", window_end="NULL")),
        "emission an int": (
            "aggregates_schema",
            lambda o, ev: _with(
                o, aggregates=_add(o.aggregates.withColumn("emission", F.col("emission").cast("int")), emission="0")
            ),
        ),
        "emission a string": (
            "aggregates_schema",
            lambda o, ev: _with(o, aggregates=o.aggregates.withColumn("emission", F.col("emission").cast("string"))),
        ),
        "no emission column": ("aggregates_schema", lambda o, ev: _with(o, aggregates=o.aggregates.drop("emission"))),
        "clean late events": ("late_events_schema", lambda o, ev: o),
        "negative lateness": ("late_events_schema", late(lateness_ms="-1")),
        "null lateness and watermark": ("late_events_schema", late(lateness_ms="NULL", watermark="NULL")),
        "null state kind and fingerprint": ("state_schema", state(state_kind="NULL", fingerprint="NULL")),
        "null fingerprint": ("state_schema", state(fingerprint="NULL")),
        "clean rejected": (
            "rejected_schema",
            lambda o, ev: _with(
                o, rejected=o.rejected.unionByName(ev.limit(2).withColumn("reason", F.lit("UNPARSEABLE_TIME")))
            ),
        ),
        "null reason": (
            "rejected_schema",
            lambda o, ev: _with(
                o, rejected=o.rejected.unionByName(ev.limit(2).withColumn("reason", F.lit(None).cast("string")))
            ),
        ),
    }


SCHEMAS = {
    "aggregates_schema": ("aggregates", V.aggregates_schema),
    "late_events_schema": ("late_events", V.late_schema),
    "state_schema": ("state", V.state_schema),
    "rejected_schema": ("rejected", V.rejected_schema),
}


@pytest.mark.parametrize("case", list(_schema_cases()))
def test_a_schema_check_reports_what_pandera_reports_validating_everything(spark, replayed, case):
    """The pass counts the nulls and ``Check.ge`` failures pandera would spend a job a column
    on, and pandera validates only the columns with a finding: the result is the one pandera
    gives validating the whole schema itself, error for error."""
    check, corrupt = _schema_cases()[case]
    r = replayed("clicks")
    o = corrupt(r.outputs(spark), r.events(spark))
    [res] = V.run_checks(spark, r.pipeline, o, only={check})
    dataset, schema_of = SCHEMAS[check]
    whole = _validate(
        check, res.description, schema_of(r.pipeline, V.input_types_of(o)), getattr(o, dataset), DEFAULT_SAMPLE_SIZE
    )
    assert res == whole
    assert res.passed == case.startswith("clean"), res
