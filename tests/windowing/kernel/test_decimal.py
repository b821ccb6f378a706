"""Sums and averages over decimal columns (issue 8, item 10; docs/semantics.md section 8).

Decimal is the type money comes in. ``sum`` and ``avg`` over a decimal(p, s) column are
exact and typed as Spark types ``F.sum`` / ``F.avg``: decimal(min(38, p + 10), s), and
decimal(min(38, p + 4), min(38, s + 4)) rounded HALF_UP. A sum that does not fit its type
is null (so is the average then, and an average that does not fit its own type). The
carried partial sums are exact whatever their size, so a replay in pieces equals one
replay in one go. min, max, first, last and distinct keep the column's decimal type.
"""

from __future__ import annotations

import random
from decimal import Decimal as D
from types import SimpleNamespace

import pyarrow as pa
import pytest

from tests.support.engine_harness import canon, rows_of, run_engine, to_df
from tests.support.generators import dec, decimal_values
from tests.support.kernel_harness import local_replay
from tests.support.reference_model import reference_replay
from windowing import kernel as K
from windowing.config import parse_pipeline

S = 1000
AMOUNT_AGGREGATES = [
    {"type": "count"},
    {"type": "sum", "column": "amount"},
    {"type": "avg", "column": "amount"},
    {"type": "min", "column": "amount"},
    {"type": "max", "column": "amount"},
    {"type": "first", "column": "amount"},
    {"type": "last", "column": "amount"},
    {"type": "distinct", "column": "amount"},
]
#: Spark's optimiser computes avg of decimal(p <= 11) through doubles (rule DecimalAggregates),
#: which can miss an exact HALF_UP tie in the last digit; without it Spark's avg is exact.
SPARK_EXACT = ("spark.sql.optimizer.excludedRules", "org.apache.spark.sql.catalyst.optimizer.DecimalAggregates")


def pipeline(window="tumbling", triggers=("atWindowEnd",), aggregates=AMOUNT_AGGREGATES):
    """Processing-time tumbling windows of 10 s (nothing is late), or sessions with a 5 s gap
    on event time, per user, over batches of the batch column."""
    if window == "tumbling":
        emitter = {
            "tumbling-time-window": {
                "windowSpan": "10s",
                "keyExtractor": "user",
                "timeConfig": {},
                "aggregateDefinition": aggregates,
            }
        }
    else:
        emitter = {
            "session-window": {
                "keyExtractor": "user",
                "aggregateDefinition": aggregates,
                "timeConfig": {"eventTimeExtractor": "event_time", "idleTimeout": "5s", "delayWindowClose": "10s"},
            }
        }
    return parse_pipeline(
        {
            "name": "money",
            "emitter": {**emitter, "triggers": list(triggers)},
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
        }
    )


def rows(amounts, user="a", step_ms=1000, event_time=None):
    """One event per batch, ``step_ms`` apart, in one tumbling window while under 10 s."""
    return [
        {
            "arrival": i * step_ms,
            "batch": i + 1,
            "offset": i,
            "user": user,
            "amount": v,
            "event_time": i * step_ms if event_time is None else event_time[i],
        }
        for i, v in enumerate(amounts)
    ]


def one_window(amounts, p, s, **kw):
    aggs, _, _, _ = local_replay(pipeline(**kw), rows(amounts), flush_at_end=True, decimals={"amount": (p, s)})
    assert len(aggs) == 1
    return aggs[0]


def top(p, s):
    """The largest decimal(p, s)."""
    return dec(10**p - 1, s)


# --------------------------------------------------------------------------- types


@pytest.mark.parametrize(
    "p, s, sum_type, avg_type",
    [
        (12, 2, (22, 2), (16, 6)),  # money
        (1, 0, (11, 0), (5, 4)),
        (5, 5, (15, 5), (9, 9)),
        (20, 18, (30, 18), (24, 22)),
        (30, 5, (38, 5), (34, 9)),  # the sum's precision stops at 38
        (38, 0, (38, 0), (38, 4)),
        (36, 36, (38, 36), (38, 38)),  # so does the average's scale
        (38, 38, (38, 38), (38, 38)),
    ],
)
def test_output_types_are_sparks(p, s, sum_type, avg_type):
    """The types Spark 4 gives F.sum / F.avg of decimal(p, s) (checked against Spark below)."""
    spec = K.Spec(pipeline=pipeline(), input_types={"user": pa.string(), "amount": pa.decimal128(p, s)})
    types = {a.type: spec.output_type(a) for a in spec.pipeline.aggregates}
    assert types["sum"] == pa.decimal128(*sum_type)
    assert types["avg"] == pa.decimal128(*avg_type)
    assert types["min"] == types["max"] == types["first"] == types["last"] == pa.decimal128(p, s)
    assert types["count"] == types["distinct"] == pa.int64()
    partial = {f.name: f.type for f in spec.state_schema()}
    assert partial["partial_sum_amount"] == partial["partial_avg_amount"] == pa.decimal128(*sum_type)
    assert partial["partial_sum_amount_overflow"] == partial["partial_avg_amount_overflow"] == pa.int64()


# --------------------------------------------------------------------------- values


def test_sum_and_avg_are_exact():
    """0.1 + 0.2 + 0.3 is 0.6 here (it is 0.6000000000000001 in doubles); nulls are ignored."""
    r = one_window([D("0.10"), D("0.20"), None, D("0.30"), D("-1.50"), D("0.20")], 12, 2)
    assert (r["count"], r["sum_amount"], r["avg_amount"]) == (6, D("-0.70"), D("-0.140000"))
    assert str(r["sum_amount"]) == "-0.70" and str(r["avg_amount"]) == "-0.140000"  # the type's scale
    assert (r["min_amount"], r["max_amount"], r["first_amount"], r["last_amount"], r["distinct_amount"]) == (
        D("-1.50"),
        D("0.30"),
        D("0.10"),
        D("0.20"),
        4,
    )
    r = one_window([D("0.10"), D("0.20"), D("0.30")], 12, 2)
    assert str(r["sum_amount"]) == "0.60" and str(r["avg_amount"]) == "0.200000"
    assert one_window([None, None], 12, 2)["sum_amount"] is None  # no value: null, like SQL
    assert one_window([None, None], 12, 2)["avg_amount"] is None


#: 160 values: 159 x 66804832.55 and one 66804832.54; the average 66804832.5499375 is a tie.
TIE = [D("66804832.55")] * 159 + [D("66804832.54")]


@pytest.mark.parametrize(
    "amounts, p, s, avg",
    [
        ([D("0.01"), D("0.02"), D("0.02")], 12, 2, "0.016667"),  # 0.01666.. rounds up
        ([D("-0.01"), D("-0.02"), D("-0.02")], 12, 2, "-0.016667"),  # HALF_UP: away from zero
        (
            [D("0.01"), D("0.00"), D("0.00"), D("0.00"), D("0.00"), D("0.00"), D("0.00"), D("0.00")],
            2,
            2,
            "0.001250",
        ),  # exact: no rounding, padded to the scale
        ([D("0.02"), D("0.00"), D("0.00")], 2, 2, "0.006667"),
        (TIE, 10, 2, "66804832.549938"),  # an exact tie rounds up (Spark's double shortcut gives ...937)
        ([D(5).scaleb(-36)] + [D(0).scaleb(-36)] * 10, 38, 36, "4.5E-37"),  # 45.45e-38 -> 45e-38, scale 38
    ],
)
def test_avg_rounds_half_up(amounts, p, s, avg):
    step = 1 if len(amounts) > 10 else 1000  # all in one 10 s window
    aggs, _, _, _ = local_replay(
        pipeline(), rows(amounts, step_ms=step), flush_at_end=True, decimals={"amount": (p, s)}
    )
    assert [str(r["avg_amount"]) for r in aggs] == [avg]


def test_overflow_is_null_and_judged_on_the_exact_total():
    """decimal(38, 0): the sum is decimal(38, 0), the average decimal(38, 4) (34 integer digits)."""
    big = top(38, 0)
    r = one_window([big, big], 38, 0)
    assert (r["sum_amount"], r["avg_amount"], r["max_amount"]) == (None, None, big)  # 2 * big has 39 digits
    neg = big.copy_negate()
    r = one_window([big, big, neg, neg, D(1)], 38, 0)  # a running sum of 39 digits, a total of 1
    assert (r["sum_amount"], str(r["avg_amount"])) == (D(1), "0.2000")
    r = one_window([big], 38, 0)
    assert (r["sum_amount"], r["avg_amount"]) == (big, None)  # the average needs 38 integer digits: null


def test_partial_sums_past_38_digits_are_carried_exactly():
    """Cut after two events whose sum has 39 digits: the state holds it exactly as
    ``partial_<name> + partial_<name>_overflow * 10^(P - s)``, and the next piece ends where
    one go does."""
    big = top(38, 0)
    neg = big.copy_negate()
    history = rows([big, big, neg, neg, D(1)])
    p = pipeline(triggers=("atWindowEnd", "atAggregate"))
    dec = {"amount": (38, 0)}
    one_go, _, _, _ = local_replay(p, history, flush_at_end=True, decimals=dec)
    first, _, _, state = local_replay(p, history[:2], decimals=dec)
    window = [r for r in state.rows.to_pylist() if r["state_kind"] == "window"]
    assert [(r["partial_sum_amount"], r["partial_sum_amount_overflow"], r["partial_sum_amount_n"]) for r in window] == [
        (D(10**38 - 2), 1, 2)
    ]  # 2 * big = 10^38 - 2 + 1 * 10^38
    rest, _, _, _ = local_replay(p, history[2:], state, flush_at_end=True, decimals=dec)
    assert canon(first + rest) == canon(one_go)
    one_go.sort(key=lambda r: (r["emit_reason"] != "AGGREGATE", r["count"]))
    assert [(r["emit_reason"], r["sum_amount"], r["avg_amount"]) for r in one_go] == [
        ("AGGREGATE", big, None),  # the average of big needs 38 integer digits: null
        ("AGGREGATE", None, None),
        ("AGGREGATE", big, None),
        ("AGGREGATE", D(0), D("0.0000")),
        ("AGGREGATE", D(1), D("0.2000")),
        ("END_OF_INPUT", D(1), D("0.2000")),
    ]
    ref = reference_replay(p, history, flush_at_end=True, decimals=dec)
    assert canon(ref.aggregates) == canon(one_go)


def test_session_merges_and_snapshots_sum_exactly():
    """A bridging event merges two sessions: their exact partial sums add up; each snapshot
    is the exact running sum (and the pieces, cut anywhere, agree)."""
    p = pipeline("session", triggers=("atWindowEnd", "atAggregate"))
    amounts = [D("0.10"), D("0.20"), D("0.30"), D("10.00")]
    history = rows(amounts, event_time=[0, 8 * S, 4 * S, 20 * S])  # 4 s bridges 0 s and 8 s
    dec = {"amount": (12, 2)}
    aggs, _, _, _ = local_replay(p, history, flush_at_end=True, decimals=dec)
    windows = sorted(
        (r["window_start"], r["window_end"], r["emit_reason"], str(r["sum_amount"]), str(r["avg_amount"]))
        for r in aggs
        if r["emit_reason"] != "AGGREGATE"
    )
    assert windows == [
        (0, 8 * S, "END_OF_INPUT", "0.60", "0.200000"),
        (20 * S, 20 * S, "END_OF_INPUT", "10.00", "10.000000"),
    ]
    snaps = [str(r["sum_amount"]) for r in aggs if r["emit_reason"] == "AGGREGATE"]
    assert snaps == ["0.10", "0.20", "0.60", "10.00"]
    assert canon(reference_replay(p, history, flush_at_end=True, decimals=dec).aggregates) == canon(aggs)
    for cut in range(1, len(history)):
        a, _, _, state = local_replay(p, history[:cut], decimals=dec)
        b, _, _, _ = local_replay(p, history[cut:], state, flush_at_end=True, decimals=dec)
        assert canon(a + b) == canon(aggs)


def test_empty_partition_schema_keeps_the_decimal_type():
    """A partition without events takes the amount column's type from the carried state's
    partial sum: decimal(P - 10, s) (decimal(38, s) when P is 38, which gives the same sum
    type)."""
    from pyspark.sql import types as T

    from windowing.storage.inputs import empty_events_schema

    def amount_type(partial, kept=None):
        fields = [T.StructField("partial_sum_amount", partial), T.StructField("partial_avg_amount", partial)]
        if kept:
            fields.append(T.StructField("partial_max_amount", kept))
        return empty_events_schema(pipeline(), SimpleNamespace(schema=T.StructType(fields)))["amount"].dataType

    assert amount_type(T.DecimalType(22, 2)) == T.DecimalType(12, 2)
    assert amount_type(T.DecimalType(38, 18)) == T.DecimalType(38, 18)
    assert amount_type(T.DecimalType(38, 2), kept=T.DecimalType(30, 2)) == T.DecimalType(30, 2)  # max keeps it
    assert amount_type(T.LongType()) == T.LongType()
    assert amount_type(T.DoubleType()) == T.DoubleType()


# --------------------------------------------------------------------------- against Spark itself


def money_rows(p, s, n=150, seed=0):
    """Events of users a (positive amounts), b (negative) and c (small, both signs), some
    null; a's and b's include the type's extremes, so wide types overflow. Every running
    sum of a and b grows in magnitude: Spark's own (running) overflow check then agrees
    with the exact total's."""
    rng = random.Random(seed)
    values = [v for v in decimal_values(p, s) if v is not None]
    out = []
    for i in range(n):
        user = rng.choice("abc")
        if rng.random() < 0.1:
            v = None
        elif user == "c":
            v = dec(rng.randint(-(10 ** min(p - 1, 8)), 10 ** min(p - 1, 8)), s)
        else:
            v = rng.choice(values).copy_abs()
            v = v if user == "a" else v.copy_negate()
        out.append({"arrival": i * 700, "batch": i // 3, "offset": i, "user": user, "amount": v, "event_time": i * 700})
    return out


@pytest.fixture
def spark_exact(spark):
    """Spark with its exact decimal avg (the double shortcut for p <= 11 off)."""
    spark.conf.set(*SPARK_EXACT)
    yield spark
    spark.conf.unset(SPARK_EXACT[0])


@pytest.mark.parametrize("p, s", [(12, 2), (10, 2), (38, 18), (38, 36), (38, 0)])
def test_engine_sums_and_averages_like_spark(spark_exact, p, s):
    """Windows and atAggregate snapshots against Spark's own try_sum / try_avg (null on
    overflow) over the same events grouped by the emitted windows, value for value and
    type for type."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = spark_exact
    history = money_rows(p, s, seed=p * 100 + s)
    dec = {"amount": (p, s)}
    pl = pipeline(triggers=("atWindowEnd", "atAggregate"))
    from windowing.runner.replay import replay

    res = replay(spark, pl, to_df(spark, history, decimals=dec), flush_at_end=True)
    got = rows_of(res.aggregates)
    df = to_df(spark, history, decimals=dec).withColumn("window_start", F.col("arrival") - F.col("arrival") % 10000)
    exp = df.groupBy("user", "window_start").agg(
        F.try_sum("amount").alias("sum_amount"), F.try_avg("amount").alias("avg_amount")
    )
    types = {f.name: f.dataType for f in res.aggregates.schema.fields}
    assert types["sum_amount"] == exp.schema["sum_amount"].dataType
    assert types["avg_amount"] == exp.schema["avg_amount"].dataType
    expected = {(r["user"], r["window_start"]): (r["sum_amount"], r["avg_amount"]) for r in exp.collect()}
    windows = {
        (r["user"], r["window_start"]): (r["sum_amount"], r["avg_amount"])
        for r in got
        if r["emit_reason"] != "AGGREGATE"
    }
    assert _strs(windows) == _strs(expected)
    w = Window.partitionBy("user", "window_start").orderBy("arrival").rowsBetween(Window.unboundedPreceding, 0)
    running = df.select(
        "user",
        "window_start",
        F.count(F.lit(1)).over(w).alias("count"),
        F.try_sum("amount").over(w).alias("sum_amount"),
        F.try_avg("amount").over(w).alias("avg_amount"),
    ).collect()
    snaps = {
        (r["user"], r["window_start"], r["count"]): (r["sum_amount"], r["avg_amount"])
        for r in got
        if r["emit_reason"] == "AGGREGATE"
    }
    assert _strs(snaps) == _strs(
        {(r["user"], r["window_start"], r["count"]): (r["sum_amount"], r["avg_amount"]) for r in running}
    )
    assert any(v[0] is None for v in windows.values()) == (p >= 28)  # sums of decimal(38, s) overflow
    res.unpersist()


def _strs(d):
    """Values as text: equal decimals of another scale must not pass."""
    return {k: tuple(None if x is None else str(x) for x in v) for k, v in d.items()}


def test_engine_avg_tie_is_exact(spark_exact):
    """decimal(10, 2): the tie 66804832.5499375 rounds up, as Spark's decimal avg does."""
    from pyspark.sql import functions as F

    history = rows(TIE, step_ms=1)
    dec = {"amount": (10, 2)}
    got, _, _, _, _ = run_engine(spark_exact, pipeline(), history, flush_at_end=True, decimals=dec)
    spark_avg = to_df(spark_exact, history, decimals=dec).agg(F.avg("amount")).collect()[0][0]
    assert [str(r["avg_amount"]) for r in got] == [str(spark_avg)] == ["66804832.549938"]


@pytest.mark.parametrize("window", ["tumbling", "session"])
def test_engine_pieces_equal_one_go(spark, tmp_path, window):
    """Replayed in three pieces, the state written to Parquet and read back between them,
    the outputs equal one replay's and the reference model's; one piece ends with a
    partial sum past 38 digits."""
    big = top(38, 0)
    neg = big.copy_negate()
    history = money_rows(38, 0, n=60, seed=7)
    overflow = [
        {"arrival": 60 * 700 + i, "batch": 20 + i, "offset": 100 + i, "user": "z", "amount": v, "event_time": 60 * 700}
        for i, v in enumerate([big, big, neg, neg, D(1)])
    ]
    history = sorted(history + overflow, key=lambda r: r["batch"])
    dec = {"amount": (38, 0)}
    pl = pipeline(window, triggers=("atWindowEnd", "atAggregate"))
    one_go, *_ = run_engine(spark, pl, history, flush_at_end=True, decimals=dec)
    state, pieces = None, []
    for i, (lo, hi) in enumerate([(0, 10), (10, 22), (22, None)]):
        piece = [r for r in history if r["batch"] >= lo and (hi is None or r["batch"] < hi)]
        aggs, _, _, state_df, _ = run_engine(spark, pl, piece, state=state, flush_at_end=hi is None, decimals=dec)
        pieces += aggs
        if hi is not None:
            state_df.write.parquet(str(tmp_path / f"state{i}"))
            state = spark.read.parquet(str(tmp_path / f"state{i}"))
            if hi == 22:
                z = [r for r in state.collect() if r["user"] == "z" and r["state_kind"] == "window"]
                assert [(r["partial_sum_amount"], r["partial_sum_amount_overflow"]) for r in z] == [(D(10**38 - 2), 1)]
    assert canon(pieces) == canon(one_go)
    ref = reference_replay(pl, history, flush_at_end=True, decimals=dec)
    assert canon(one_go) == canon(ref.aggregates)
    final = [r for r in one_go if r["user"] == "z" and r["emit_reason"] != "AGGREGATE"]
    assert [(r["sum_amount"], r["avg_amount"]) for r in final] == [(D(1), D("0.2000"))]
