"""The data-quality checks themselves: they pass on real engine output, and every one of
them fails on an output corrupted the way it is meant to catch."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyspark.sql import functions as F

from windowing import validation as V
from windowing.contract import BATCH_COMMITTED

# --------------------------------------------------------------------------- passing


@pytest.mark.parametrize("name", ["sessions", "sliding"])
def test_checks_pass_on_engine_output(spark, replayed, name):
    """Day 2 of a two-day history, replayed from day 1's state: sessions as the
    ``ReplayResult`` in memory, sliding windows read back from disk. (clicks: through
    ``rewindow verify``, in test_verify_cli.py.)"""
    r = replayed(name)
    outputs = r.result2 if name == "sessions" else r.out2
    results = V.run_checks(
        spark, r.pipeline, outputs, input_df=r.events(spark, 2), prev_state=r.state1(spark), recompute=name == "sliding"
    )
    assert [x.name for x in results] == list(V.CHECK_NAMES)
    assert not V.failures(results), V.format_table(results)
    ran = {x.name for x in results if not x.skipped}
    assert {"input_schema", "aggregates_schema", "conservation", "metrics_consistent", "state_unique"} <= ran
    if name == "sliding":  # every check applies to this pipeline (the recompute when asked for)
        assert ran == set(V.CHECK_NAMES)
    else:  # a replay's cost: not without recompute=True
        assert "replay_reproduces" not in ran


def test_without_input_the_input_and_conservation_checks_are_skipped(spark, replayed):
    r = replayed("sessions")
    only = {*V.INPUT_CHECKS, "conservation", "late_rule"}
    results = {x.name: x for x in V.run_checks(spark, r.pipeline, r.out2, only=only)}
    assert set(results) == only
    assert all(results[n].skipped and results[n].passed for n in (*V.INPUT_CHECKS, "conservation"))
    assert not results["late_rule"].skipped and results["late_rule"].passed


# --------------------------------------------------------------------------- failing


def _add(df, where=None, **changes):
    """``df`` plus one copy of a row (matching SQL ``where``) with ``changes`` (SQL) applied."""
    row = (df.where(where) if where is not None else df).limit(1)
    for col, expr in changes.items():
        row = row.withColumn(col, F.expr(expr).cast(df.schema[col].dataType))
    return df.unionByName(row)


def _with(o, **changes):
    return SimpleNamespace(**{**vars(o), **changes})


def _late(o, **changes):
    return _with(o, late_events=_add(o.late_events, **changes))


def _aggs(where=None, **changes):
    return lambda o, ev, st: (_with(o, aggregates=_add(o.aggregates, where, **changes)), ev, st)


def _state(where=None, **changes):
    return lambda o, ev, st: (_with(o, state=_add(o.state, where, **changes)), ev, st)


def _drop_first_window(o, ev, st):
    first = o.aggregates.orderBy("user_id", "window_start").first()
    keep = ~((F.col("user_id") == first["user_id"]) & (F.col("window_start") == first["window_start"]))
    return _with(o, aggregates=o.aggregates.where(keep)), ev, st


WM = "emit_reason = 'WATERMARK'"
EMITTED = "emit_reason != 'AGGREGATE'"
WINDOW = "state_kind = 'window'"

#: (check, pipeline) -> (what is wrong, corruption of (outputs, input, previous state)).
CORRUPTIONS = {
    ("input_schema", "clicks"): (
        "an arrival time of type double (a null one is a rejected row: input_times_parseable's)",
        lambda o, ev, st: (o, ev.withColumn("arrival_time", ev["arrival_time"].cast("double")), st),
    ),
    ("input_times_parseable", "clicks"): (
        "an event without event time",
        lambda o, ev, st: (o, _add(ev, event_time="NULL"), st),
    ),
    ("input_event_time_skew", "clicks"): (
        "an event 30 days before its arrival",
        lambda o, ev, st: (o, _add(ev, event_time="arrival_time - INTERVAL 30 DAYS"), st),
    ),
    ("aggregates_schema", "clicks"): ("an emission numbered 0 (pandera data check)", _aggs(emission="0")),
    ("aggregates_window_bounds", "clicks"): (
        "window_end < window_start",
        _aggs(window_end="window_start - INTERVAL 1 HOUR"),
    ),
    ("aggregates_window_bounds", "sessions"): (
        "session ending before it starts",
        _aggs(window_end="window_start - INTERVAL 1 SECOND"),
    ),
    ("aggregates_window_span", "clicks"): (
        "a window one minute too long",
        _aggs(window_end="window_end + INTERVAL 1 MINUTE"),
    ),
    ("aggregates_window_span", "sliding"): (
        "a window not aligned to the slide",
        _aggs(window_start="window_start + INTERVAL 1 MINUTE", window_end="window_end + INTERVAL 1 MINUTE"),
    ),
    ("aggregates_window_span", "sessions"): (
        "a session as long as maximumDuration",
        _aggs(window_end="window_start + INTERVAL 2 HOURS"),
    ),
    ("aggregates_count_positive", "clicks"): ("a window counting 0 events", _aggs(count="0")),
    ("aggregates_min_avg_max", "sliding"): ("min above max", _aggs(min_amount="max_amount + 1")),
    ("aggregates_distinct_le_count", "clicks"): ("more distinct ids than events", _aggs(unique_events="`count` + 1")),
    ("aggregates_emit_watermark", "clicks"): (
        "a WATERMARK emission before the watermark reached window_end",
        _aggs(WM, emit_watermark="window_end - INTERVAL 1 SECOND"),
    ),
    ("aggregates_emit_watermark", "sessions"): (
        "a WATERMARK session emission before window_end + gap",
        _aggs(WM, emit_watermark="window_end + INTERVAL 4 MINUTES"),
    ),
    ("aggregates_emit_reason", "clicks"): (
        "an AGGREGATE snapshot without the atAggregate trigger",
        _aggs(emit_reason="'AGGREGATE'"),
    ),
    ("aggregates_unique_emission", "clicks"): ("a duplicated emission", _aggs(EMITTED)),
    ("late_events_schema", "clicks"): (
        "a negative lateness (pandera data check)",
        lambda o, ev, st: (_late(o, lateness_ms="-1"), ev, st),
    ),
    ("late_rule", "clicks"): (
        "a late row whose window ends after the watermark",
        lambda o, ev, st: (_late(o, watermark="window_start"), ev, st),
    ),
    ("late_rule", "sessions"): (
        "a late session event less than a gap behind the watermark",
        lambda o, ev, st: (_late(o, watermark="event_time"), ev, st),
    ),
    ("late_rule", "sliding"): (
        "BEFORE_WATERMARK: a late event not before the watermark",
        lambda o, ev, st: (_late(o, watermark="event_time"), ev, st),
    ),
    ("late_lateness_ms", "clicks"): (
        "lateness off by 1 ms",
        lambda o, ev, st: (_late(o, lateness_ms="lateness_ms + 1"), ev, st),
    ),
    ("late_window_membership", "clicks"): (
        "a late row naming a window its event is not in",
        lambda o, ev, st: (
            _late(o, window_start="window_start + INTERVAL 1 HOUR", window_end="window_end + INTERVAL 1 HOUR"),
            ev,
            st,
        ),
    ),
    ("state_schema", "clicks"): ("a state row without kind (pandera null check)", _state(state_kind="NULL")),
    ("state_kind", "clicks"): ("an unknown state kind", _state(state_kind="'bogus'")),
    ("state_fingerprint", "clicks"): ("a row of another pipeline's state", _state(fingerprint="'0123456789abcdef'")),
    ("state_window_bounds", "clicks"): (
        "an open window with window_end == window_start",
        _state(WINDOW, window_end_ms="window_start_ms"),
    ),
    ("state_window_bounds", "sessions"): (
        "an open session ending before it starts",
        _state(WINDOW, window_end_ms="window_start_ms - 1"),
    ),
    ("state_unique", "clicks"): ("a duplicated open window", _state(WINDOW)),
    ("rejected_schema", "clicks"): (
        "a rejected row without reason",
        lambda o, ev, st: (
            _with(o, rejected=o.rejected.unionByName(ev.limit(1).withColumn("reason", F.lit(None).cast("string")))),
            ev,
            st,
        ),
    ),
    ("rejected_reason", "clicks"): (
        "a rejected row with an unknown reason",
        lambda o, ev, st: (
            _with(o, rejected=o.rejected.unionByName(ev.limit(1).withColumn("reason", F.lit("looked odd")))),
            ev,
            st,
        ),
    ),
    ("rejected_batch_committed", "clicks"): (
        "a row rejected as its batch was already committed (found in a later day's folder)",
        lambda o, ev, st: (
            _with(o, rejected=o.rejected.unionByName(ev.limit(1).withColumn("reason", F.lit(BATCH_COMMITTED)))),
            ev,
            st,
        ),
    ),
    ("conservation", "clicks"): ("an emitted window dropped", _drop_first_window),
    ("conservation", "sliding"): (
        "an input event the outputs do not account for (sliding: every window it belongs to)",
        lambda o, ev, st: (o, _add(ev), st),
    ),
    ("conservation", "sessions"): ("day 2 checked without the state it started from", lambda o, ev, st: (o, ev, None)),
    ("conservation", "sliding-snapshots"): (
        "an AGGREGATE snapshot dropped (the snapshot balance)",
        lambda o, ev, st: (
            _with(
                o,
                aggregates=o.aggregates.where(
                    F.expr(EMITTED)
                    | (F.col("user_id") != o.aggregates.where(f"NOT ({EMITTED})").orderBy("user_id").first()["user_id"])
                ),
            ),
            ev,
            st,
        ),
    ),
    ("replay_reproduces", "clicks"): (
        "a sum 1000 too high (every rule still holds)",
        lambda o, ev, st: (
            _with(
                o,
                aggregates=o.aggregates.withColumn(
                    "sum_amount",
                    F.when(
                        F.col("user_id") == o.aggregates.orderBy("user_id").first()["user_id"],
                        F.col("sum_amount") + 1000,
                    ).otherwise(F.col("sum_amount")),
                ),
            ),
            ev,
            st,
        ),
    ),
    ("replay_reproduces", "sessions"): (
        "day 2 recomputed without the state it started from",
        lambda o, ev, st: (o, ev, None),
    ),
    ("metrics_consistent", "clicks"): (
        "metrics.json miscounting late events",
        lambda o, ev, st: (_with(o, metrics={**o.metrics, "late_events": o.metrics["late_events"] + 1}), ev, st),
    ),
}


@pytest.mark.parametrize(("check", "pipeline"), list(CORRUPTIONS), ids=[f"{c}[{p}]" for c, p in CORRUPTIONS])
def test_every_check_can_fail(spark, replayed, check, pipeline):
    what, corrupt = CORRUPTIONS[(check, pipeline)]
    r = replayed(pipeline.split("-")[0])
    outputs, events, prev = corrupt(r.outputs(spark), r.events(spark), r.state1(spark))
    [result] = V.run_checks(spark, r.pipeline, outputs, input_df=events, prev_state=prev, only={check})
    assert result.name == check
    assert not result.passed and not result.skipped, f"{check} did not catch: {what}"
    assert result.failure_count >= 1 and result.sample, result


def test_every_check_has_a_corruption_it_catches():
    assert {c for c, _ in CORRUPTIONS} == set(V.CHECK_NAMES)


def test_conservation_sample_shows_each_side(spark, replayed):
    r = replayed("clicks")
    outputs, events, prev = _drop_first_window(r.outputs(spark), r.events(spark), r.state1(spark))
    [res] = V.run_checks(spark, r.pipeline, outputs, input_df=events, prev_state=prev, only={"conservation"})
    assert res.failure_count == 1  # exactly the dropped (worker, key, window)
    s = res.sample[0]
    assert s["balance"] == s["input"] + s["prev_open"] - s["emitted"] - s["open"] - s["late"] - s["rejected"] > 0
    assert {"partition", "user_id", "window_start", "window_end"} <= set(s)


# --------------------------------------------------------------------------- pandera reports


def test_a_wrong_output_type_fails_the_pandera_schema_check(spark, replayed):
    r = replayed("clicks")
    o = r.outputs(spark)
    bad = _with(o, aggregates=o.aggregates.withColumn("emission", F.col("emission").cast("int")))
    [res] = V.run_checks(spark, r.pipeline, bad, only={"aggregates_schema"})
    assert not res.passed
    assert any(e["reason"] == "WRONG_DATATYPE" and e["column"] == "emission" for e in res.sample), res.sample


def test_pandera_switched_off_cannot_turn_a_failure_into_a_pass(spark, replayed):
    """pandera records errors instead of raising, and skips everything when disabled:
    the checks force it on, so a bad frame still fails."""
    from pandera.config import ValidationDepth, config_context

    r = replayed("clicks")
    o = r.outputs(spark)
    bad = _with(o, aggregates=_add(o.aggregates, emission="0"))
    for ctx in (dict(validation_enabled=False), dict(validation_depth=ValidationDepth.SCHEMA_ONLY)):
        with config_context(**ctx):
            [res] = V.run_checks(spark, r.pipeline, bad, only={"aggregates_schema"})
        assert not res.passed, ctx


def test_results_carry_asset_check_metadata(spark, replayed):
    r = replayed("clicks")
    [res] = V.run_checks(spark, r.pipeline, r.out2, only={"state_unique"})
    meta = res.metadata()
    assert meta == {
        "failure_count": 0,
        "sample": [],
        "description": res.description,
        "skipped": False,
        "blocking": True,
    }
    with pytest.raises(ValueError, match="unknown check"):
        V.run_checks(spark, r.pipeline, r.out2, only={"no_such_check"})
