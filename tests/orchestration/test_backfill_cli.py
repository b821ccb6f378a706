"""``rewindow backfill`` and ``rewindow status``: failures, resume, usage errors. (The CLI backfill
against the Dagster backfill: tests/assets/test_replay_assets.py, which has the Dagster run.)"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from datetime import timedelta

import pytest

from tests.dagster_harness import DAYS
from windowing.cli import main

OUTPUTS = ("aggregates", "late_events", "rejected", "state")


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def test_a_failing_partition_exits_1_naming_it_and_status_lists_it(spark, history, pipelines_dir, tmp_path):
    from tests.assets.test_replay_assets import _landing_with_odd_row

    landing = _landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    root = tmp_path / "out"
    config = pipelines_dir / "clicks-hourly.yaml"
    rc, out, err = _cli("backfill", "--config", config, "--input", landing, "--output", root,
                        "--from", DAYS[0], "--to", DAYS[-1])
    assert rc == 1
    assert "partition 2024-01-02 failed its data-quality checks (input_event_time_skew" in err
    assert "2024-01-03..2024-01-03 not replayed" in err and "--rerun-from 2024-01-02" in err
    rc, out, _ = _cli("status", "--config", config, "--output", root, "--to", DAYS[-1])
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("2024-")}
    assert "committed" in lines["2024-01-01"]
    assert "failed" in lines["2024-01-02"] and "input_event_time_skew" in lines["2024-01-02"]
    assert "missing" in lines["2024-01-03"]
    # the chain refuses to skip the failed partition
    rc, _, err = _cli("backfill", "--config", config, "--input", landing, "--output", root, "--from", DAYS[2])
    assert rc == 1 and "state of partition 2024-01-02 is missing" in err
    # (--resume after a killed backfill: tests/windowing/test_chain.py)


@pytest.mark.parametrize("argv, message", [
    (["--from", "2024-01-03", "--to", "2024-01-01"], "is before --from"),
    (["--from", "2024-01-01T05"], "use --grain hour"),
    (["--from", "2024-01-01", "--to", "2024-01-02", "--rerun-from", "2024-01-05"], "outside --from"),
])
def test_usage_errors_name_the_option(spark, history, pipelines_dir, tmp_path, argv, message):
    rc, _, err = _cli("backfill", "--config", pipelines_dir / "clicks-hourly.yaml", "--input", history,
                      "--output", tmp_path / "out", *argv)
    assert rc == 2 and message in err, err
    assert not (tmp_path / "out").exists()


def test_without_from_it_replays_the_landed_days_and_says_when_a_range_holds_none(spark, history, pipelines_dir,
                                                                                 tmp_path):
    config = pipelines_dir / "clicks-hourly.yaml"
    rc, out, err = _cli("backfill", "--config", config, "--input", history, "--output", tmp_path / "all")
    assert rc == 0, err
    assert f"replaying the landed days {DAYS[0]}..{DAYS[-1]}" in err
    assert [line.split()[0] for line in out.splitlines() if line.strip().startswith("2024-")] == list(DAYS)
    rc, out, err = _cli("backfill", "--config", config, "--input", history, "--output", tmp_path / "none",
                        "--from", "2023-06-01")
    assert rc == 0, err
    assert (f"holds no events for 2023-06-01..2023-06-01 (it holds {DAYS[0]}..{DAYS[-1]}): "
            "these partitions will be empty") in err
