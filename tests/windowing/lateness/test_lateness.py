"""``rewindow lateness`` on Spark: the same figures as the analysis without Spark (which
tests/windowing/lateness/test_lateness_model.py checks against the reference model), chains of
partitions, the report, and ``source.maxFutureSkew`` in the Spark engine.

Few Spark jobs: one analysis of a rich history, one chain of two partitions against one
run over both, one engine replay with future skew.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support.engine_harness import run_engine, to_df
from tests.support.lateness_harness import local_lateness, model_figures
from tests.support.reference_model import reference_replay
from windowing.config import Lateness, parse_pipeline
from windowing.lateness.curves import smallest_delay, weighted_percentiles
from windowing.lateness.job import lateness
from windowing.lateness.options import LatenessOptions
from windowing.lateness.outputs import read_lateness
from windowing.storage.lake import Lake

S = 1000


def _history(seed=5, n=400):
    """Two workers, three users, 1 s batches; jitter, some events minutes late, some seconds
    ahead, and a few clocks a minute ahead (future skew)."""
    rng = random.Random(seed)
    rows, arrival = [], 0
    for i in range(n):
        arrival += rng.choice([0, 200, 700, 1500, 4000])
        lag = rng.choice([0, 300, 1000, 2500] * 6 + [40_000, 90_000, -2_000, -65_000])
        rows.append(
            {
                "arrival": arrival,
                "event_time": arrival - lag,
                "offset": i,
                "worker": rng.randint(0, 1),
                "user": rng.choice("abc"),
                "amount": float(rng.randint(1, 9)),
                "tag": rng.choice("xyz"),
                "name": f"e{i}",
            }
        )
    return rows


PIPELINE = parse_pipeline(
    {
        "name": "lateness-test",
        "source": {
            "arrivalTime": "arrival",
            "arrivalOrder": ["offset"],
            "batch": {"interval": "1s"},
            "worker": "worker",
        },
        "emitter": {
            "sliding-time-window": {
                "windowSpan": "10s",
                "windowSlide": "5s",
                "keyExtractor": "user",
                "timeConfig": {
                    "eventTimeExtractor": "event_time",
                    "watermarkStrategy": "MAX_EVENT_TIME",
                    "delayWindowClose": "2s",
                    "idleTimeout": "20s",
                },
                "aggregateDefinition": [
                    {"type": "count"},
                    {"type": "sum", "column": "amount"},
                    {"type": "distinct", "column": "tag"},
                ],
            }
        },
    }
)
OPTIONS = LatenessOptions(
    delays_ms=(0, 1_000, 2_000, 5_000, 30_000), target_late=0.02, lateness_modes=tuple(Lateness), future_skew_ms=30_000
)


def test_spark_analysis_equals_the_local_one_and_the_model(spark):
    rows = _history()
    result = lateness(spark, PIPELINE, to_df(spark, rows, partitions=3, seed=1), options=OPTIONS)
    try:
        local = local_lateness(PIPELINE, rows, OPTIONS)
        f = result.figures
        for c in f["curves"]:
            v = next(
                x
                for x in local.variants
                if (x.strategy.value, x.lateness.value, x.delay_ms) == (c["strategy"], c["lateness"], c["delay_ms"])
                and not x.skew_free
            )
            lc = local.counters.get(v.label, {})
            assert (
                c["late_events"],
                c["late_event_windows"],
                c["closed_watermark"],
                c["closed_idle"],
                c["open_windows"],
            ) == (
                lc.get("late_events", 0),
                lc.get("late", 0),
                lc.get("closed_WATERMARK", 0),
                lc.get("closed_IDLE", 0),
                lc.get("open_windows", 0),
            ), v.label
            values, weights = local.latency.get(v.label, ([], []))
            p = weighted_percentiles(values, weights)
            assert [c["latency_p50_ms"], c["latency_p90_ms"], c["latency_p99_ms"]] == pytest.approx(p, rel=1e-12)
            # ... and the model's replay of the pipeline under that configuration.
            model = model_figures(reference_replay(_as(PIPELINE, v), rows), PIPELINE)
            assert c["late_events"] == model["late_events"] and c["late_event_windows"] == model["late_pairs"]
        # The exact curve (the slack histogram: late under D = slack >= D) is the local one.
        hist = result.tables["slack_histogram"].orderBy("strategy", "lateness", "slack_ms").collect()
        for (s, m), (hv, he, hp) in local.slack.items():
            mine = [(r["slack_ms"], r["events"], r["pairs"]) for r in hist if (r["strategy"], r["lateness"]) == (s, m)]
            assert mine == list(zip(hv.tolist(), he.tolist(), hp.tolist()))
        assert f["configured_replay"]["late_events"] > 0 and any(c["closed_idle"] for c in f["curves"])
        # What lateness cost: the local rows; the missed events sum to the configured replay's pairs.
        cost = result.tables["cost"].collect()
        assert len(cost) == local.tables["cost"].num_rows
        assert sum(r["missed_events"] for r in cost) == f["configured_replay"]["late_event_windows"]
        # Future skew: the caused pairs are the local ones, attributed to a skewed event.
        skew = f["future_skew"]
        assert skew["skewed_events"] == sum(1 for r in rows if r["event_time"] - r["arrival"] > 30_000)
        assert skew["late_event_windows_caused"] == local.tables["skew_late"].num_rows > 0
        attributed = result.tables["skew_late"].where("cause_batch is not null").collect()
        assert len(attributed) == skew["late_event_windows_attributed"] > 0
        for r in attributed:  # the cause is a skewed event whose time is the watermark checked against
            assert r["cause_event_ms"] == r["raw_watermark_ms"] and r["cause_skew_ms"] > 30_000
        listing = result.tables["future_skew"].collect()
        assert sum(r["late_event_windows_caused"] for r in listing) == len(attributed)
        rec = {(r["strategy"], r["lateness"]): r for r in f["recommendations"]}
        for (s, m), (hv, he, _) in local.slack.items():
            assert rec[(s, m)]["smallest_delay_ms"] == smallest_delay(hv, he, f["allowed_late_events"])
    finally:
        result.unpersist()


def _as(pipeline, v):
    from dataclasses import replace

    from windowing.config import Trigger

    w = replace(pipeline.window, watermark_strategy=v.strategy, lateness=v.lateness, delay_ms=v.delay_ms)
    return replace(pipeline, window=w, triggers=(Trigger.AT_WINDOW_END,))


def _cli(spark, *argv):
    from tests.test_cli import _cli as run

    return run(spark, *argv)


def test_cli_chain_of_partitions_equals_one_run(spark, tmp_path):
    """Day 1, then day 2 from day 1's output (every variant's state), add up to one run over
    both days; the report is one HTML file; another --delays cannot continue the chain."""
    from windowing.sample import generate_history

    data = tmp_path / "events"
    days = generate_history(data, datetime(2024, 3, 1, tzinfo=timezone.utc), 2, 600, 40, seed=3)
    config = tmp_path.parent / "clicks.yaml"
    config.write_text(
        (
            __import__("pathlib").Path(__file__).resolve().parents[3] / "examples" / "pipelines" / "clicks-hourly.yaml"
        ).read_text()
    )
    common = ["--config", config, "--delays", "0s,5s,10m", "--target-late", "1%", "--master", "local[2]"]
    rc, out, err = _cli(spark, "lateness", *common, "--input", days[0], "--output", tmp_path / "d1")
    assert rc == 0, err
    assert "recommendation MIN_EVENT_TIME WINDOW_CLOSED: delay >=" in out
    rc, _, err = _cli(
        spark, "lateness", *common, "--input", days[1], "--output", tmp_path / "d2", "--state-in", tmp_path / "d1"
    )
    assert rc == 0, err
    rc, _, err = _cli(spark, "lateness", *common, "--input", data, "--output", tmp_path / "all")
    assert rc == 0, err
    figs = [read_lateness(spark, tmp_path / name).figures for name in ("d1", "d2", "all")]
    for c1, c2, c in zip(*(f["curves"] for f in figs)):
        assert (c1["strategy"], c1["delay_ms"]) == (c["strategy"], c["delay_ms"])
        for k in ("late_events", "late_event_windows", "closed_watermark", "closed_idle"):
            assert c1[k] + c2[k] == c[k], (c["strategy"], c["delay_ms"], k)
        assert c2["open_windows"] == c["open_windows"]
    assert figs[0]["accepted_events"] + figs[1]["accepted_events"] == figs[2]["accepted_events"]
    report = Lake(spark).get_text(read_lateness(spark, tmp_path / "d2").report)
    assert report.startswith("<!DOCTYPE html>") and report.count("<svg") == 4 and "clicks-hourly" in report
    rc, _, err = _cli(
        spark,
        "lateness",
        "--config",
        config,
        "--delays",
        "0s,1s",
        "--input",
        days[1],
        "--output",
        tmp_path / "d2b",
        "--state-in",
        tmp_path / "d1",
        "--master",
        "local[2]",
    )
    assert rc == 2 and "--delays" in err
    # A state part of day 1's output lost (issue 26): refused naming it, not fewer open windows.
    part = sorted(
        (Path(read_lateness(spark, tmp_path / "d1").commit.run_path.removeprefix("file:")) / "state").glob(
            "part-*.parquet"
        )
    )[0]
    part.unlink()
    rc, _, err = _cli(
        spark, "lateness", *common, "--input", days[1], "--output", tmp_path / "d2c", "--state-in", tmp_path / "d1"
    )
    assert rc == 2 and f"state part {part.name} (" in err and "is missing" in err, err


def test_engine_rejects_future_skew_and_conserves_events(spark):
    """``source.maxFutureSkew`` in the Spark engine: the model's rows, reason FUTURE_SKEW,
    and the data-quality conservation check holds."""
    from windowing.runner.replay import replay
    from windowing.validation import run_checks

    rows = _history(seed=9, n=200)
    pipeline = parse_pipeline(
        {
            "name": "skew",
            "source": {
                "arrivalTime": "arrival",
                "arrivalOrder": ["offset"],
                "batch": {"interval": "1s"},
                "maxFutureSkew": "1m",
            },
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "keyExtractor": "user",
                    "timeConfig": {"eventTimeExtractor": "event_time"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    aggs, late, rejected, _, _ = run_engine(spark, pipeline, rows)
    ref = reference_replay(pipeline, rows)
    assert sorted(r["name"] for r in rejected) == sorted(r["name"] for r in ref.rejected)
    assert {r["reason"] for r in rejected} == {"FUTURE_SKEW"}
    assert len(rejected) == sum(1 for r in rows if r["event_time"] - r["arrival"] > 60_000) > 0
    assert sorted(r["name"] for r in late) == sorted(r["name"] for r in ref.late_events)
    df = to_df(spark, rows)
    result = replay(spark, pipeline, df)
    try:
        checks = {
            r.name: r
            for r in run_checks(spark, pipeline, result, input_df=df, only={"conservation", "rejected_reason"})
        }
        assert checks["conservation"].passed and checks["rejected_reason"].passed
    finally:
        result.unpersist()


def test_a_partition_without_events(spark, tmp_path):
    """An empty day (a Dagster partition with no landed events): zero everywhere, a report."""
    from windowing.lateness.outputs import write_lateness

    columns = ["arrival", "event_time", "offset", "worker", "user", "amount", "tag"]
    result = lateness(spark, PIPELINE, to_df(spark, [], columns=columns), options=OPTIONS)
    try:
        commit = write_lateness(result, str(tmp_path / "out"), PIPELINE)
    finally:
        result.unpersist()
    figures = read_lateness(spark, str(tmp_path / "out")).figures
    assert figures["accepted_events"] == 0 and all(c["late_events"] == 0 for c in figures["curves"])
    assert all(r["smallest_delay_ms"] == 0 for r in figures["recommendations"])
    assert Lake(spark).get_text(f"{commit.run_path}/report.html").count("<svg") == 4
