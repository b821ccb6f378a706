"""The chain's passes (issue 50): a range replayed many partitions at a time
(``windowing.runner.passes``, staged by ``windowing.storage.pass_outputs``, checked together
by ``windowing.validation.run_pass_checks``) commits, partition by partition, what the
same range replayed one partition after the other commits: every output's rows, the
state, the metrics, the lineage's state hashes and the check results."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.histories import landing_with_odd_row
from windowing.chain import COMMITTED, FAILED, MISSING, PASS_CONF, Chain
from windowing.config import load_pipeline
from windowing.partitions import Partitions

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
SESSIONS = ROOT / "examples" / "pipelines" / "sessions.yaml"
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
OUTPUTS = ("aggregates", "late_events", "rejected", "state")


@contextmanager
def one_by_one(spark):
    spark.conf.set(PASS_CONF, "1")
    try:
        yield
    finally:
        spark.conf.unset(PASS_CONF)


#: The history's partitions: its last four hours of a day and first four of the next (a pass across a day's edge).
FIRST = START + timedelta(hours=20)


def _chain(spark, landing, out, grain="hour", pipeline=CLICKS, rejected_share=None) -> Chain:
    partitions = Partitions(grain, FIRST if grain == "hour" else START)
    config = load_pipeline(pipeline)
    if rejected_share is not None:  # a rejected row is then a warning of its partition's checks
        config = replace(config, quality=replace(config.quality, max_rejected_share=rejected_share))
    return Chain(spark, config, str(landing), str(out), partitions)


def _rows(spark, path) -> list:
    return sorted((tuple(r) for r in spark.read.parquet(str(path)).collect()), key=repr)


def _checks(part) -> list:
    return [(r.name, r.passed, r.blocking, r.failure_count, r.description, r.sample) for r in part.checks]


def _committed(spark, chain: Chain, keys) -> dict:
    commits = chain.commits(keys)
    out = {}
    for k, c in commits.items():
        lineage = c.extra["lineage"]
        out[k] = {
            **{o: _rows(spark, f"{c.run_path}/{o}") for o in OUTPUTS},
            "metrics": c.metrics,
            "state_hash": lineage["state_hash"],
            "start_state_hash": lineage["start_state_hash"],
            "manifest_rows": c.extra["state_manifest"]["total_rows"],
            "window_rows_hash": c.extra["state_manifest"]["window_rows_hash"],
            "checks": [{k2: v for k2, v in r.items() if k2 != "sample"} for r in c.extra["checks"]],
        }
    return out


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    from windowing.sample import generate_history

    out = tmp_path_factory.mktemp("passes-landing")
    generate_history(out, START, days=3, events_per_day=600, keys=25, seed=11)
    return out


def _sliding(tmp_path: Path) -> Path:
    """The quick start's pipeline with 1 h windows sliding by 20 minutes, each event in three,
    emitted at their end and as ``atAggregate`` snapshots too."""
    text = CLICKS.read_text().replace(
        "tumbling-time-window:\n    windowSpan: 1h", "sliding-time-window:\n    windowSpan: 1h\n    windowSlide: 20m"
    )
    text = text.replace("triggers: [atWindowEnd]", "triggers: [atWindowEnd, atAggregate]")
    assert "windowSlide" in text and "atAggregate" in text
    out = tmp_path / "sliding.yaml"
    out.write_text(text)
    return out


@pytest.mark.parametrize("pipeline", [CLICKS, SESSIONS, None], ids=["tumbling", "sessions", "sliding-snapshots"])
def test_a_pass_commits_what_partition_after_partition_commits(spark, history, tmp_path, pipeline):
    """Eight hours across a day's edge, in one pass and one by one: tumbling windows with
    idle timeouts, sessions that span the partitions' edges, or sliding windows (an event in
    three) with snapshots; one row without an event time (rejected, with its reason) in the
    sixth hour."""
    pipeline = pipeline or _sliding(tmp_path)
    landing = landing_with_odd_row(
        history,
        tmp_path,
        "2024-01-02",
        event_time=lambda t: None,
        arrival_time=lambda t: datetime(2024, 1, 2, 1, 30, tzinfo=timezone.utc),
    )
    chain = _chain(spark, landing, tmp_path / "pass", pipeline=pipeline, rejected_share=0.1)
    keys = chain.partitions.keys(None, "2024-01-02-03:00")
    parts = list(chain.replay(keys))
    with one_by_one(spark):
        single = _chain(spark, landing, tmp_path / "single", pipeline=pipeline, rejected_share=0.1)
        singles = list(single.replay(keys))
    assert [p.key for p in parts] == keys and all(p.committed for p in parts)
    warned = [r.name for p in parts for r in p.checks if not r.passed]
    assert warned and "input_times_parseable" in warned  # the rejected row, a warning
    assert [_checks(p) for p in parts] == [_checks(p) for p in singles]
    assert [p.metrics for p in parts] == [p.metrics for p in singles]
    got, expected = _committed(spark, chain, keys), _committed(spark, single, keys)
    assert sum(len(expected[k]["aggregates"]) for k in keys) > 80
    assert [len(expected[k]["rejected"]) for k in keys] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert got == expected


def test_a_failing_partition_in_a_pass_stops_it_there_and_reruns_alone(spark, history, tmp_path):
    """Day 2 holds an event stamped 30 days before its arrival: its blocking input check
    fails in the pass as it does one by one; day 1 is committed, day 2 failed, day 3 never
    committed; once fixed, day 2 rerun alone commits what the pass would have."""
    bad = landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    days = ["2024-01-01", "2024-01-02", "2024-01-03"]
    chain = _chain(spark, bad, tmp_path / "pass", "day")
    parts = list(chain.replay(days))
    with one_by_one(spark):
        single = _chain(spark, bad, tmp_path / "single", "day")
        singles = list(single.replay(days))
    assert [(p.key, p.committed) for p in parts] == [("2024-01-01", True), ("2024-01-02", False)]
    assert [_checks(p) for p in parts] == [_checks(p) for p in singles]
    assert "input_event_time_skew" in parts[1].lineage.failed_checks
    status = {s.key: s.status for s in chain.status(days)}
    assert status == {"2024-01-01": COMMITTED, "2024-01-02": FAILED, "2024-01-03": MISSING}
    assert not (tmp_path / "pass" / "clicks-hourly" / "2024-01-03").exists()  # staged by the pass, then discarded
    # Fixed upstream: the failed day rerun alone commits what the clean history's pass commits.
    (rerun,) = _chain(spark, history, tmp_path / "pass", "day").replay(["2024-01-02"])
    assert rerun.committed
    clean = _chain(spark, history, tmp_path / "clean", "day")
    assert all(p.committed for p in clean.replay(days))
    fixed = _chain(spark, history, tmp_path / "pass", "day")
    assert [p.committed for p in fixed.replay(["2024-01-03"])] == [True]
    assert _committed(spark, fixed, days) == _committed(spark, clean, days)
