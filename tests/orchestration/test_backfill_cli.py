"""``rewindow backfill`` and ``rewindow status`` against the Dagster backfill: one chain, one store."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from datetime import timedelta

import pytest

from tests.orchestration.conftest import DAYS, Replayer, failure_message, lineage, rows
from windowing.cli import main

OUTPUTS = ("aggregates", "late_events", "rejected", "state")


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def test_the_cli_backfill_equals_the_dagster_backfill(spark, history, pipelines_dir, tmp_path):
    dagster = Replayer(history, pipelines_dir, tmp_path / "dagster")
    result = dagster.run(DAYS[0], DAYS[-1], checks=True)
    assert result.success, failure_message(result)
    cli_root = tmp_path / "cli"
    rc, out, err = _cli("backfill", "--config", pipelines_dir / "clicks-hourly.yaml", "--input", history,
                        "--output", cli_root, "--from", DAYS[0], "--to", DAYS[-1])
    assert rc == 0, err
    cli = Replayer(history, pipelines_dir, cli_root)  # only to find its folders
    for day in DAYS:
        for output in OUTPUTS:
            a = spark.read.parquet(str(dagster.current(day) / output))
            b = spark.read.parquet(str(cli.current(day) / output))
            assert a.schema == b.schema, (day, output)
            assert rows(a) == rows(b), (day, output)
        ours, theirs = lineage(cli.folder(day)), lineage(dagster.folder(day))
        assert (ours.state_hash, ours.start_state_hash, ours.previous_partition, ours.fingerprint) == \
            (theirs.state_hash, theirs.start_state_hash, theirs.previous_partition, theirs.fingerprint)
    # the demo's table, one line per partition, and the progress on stderr
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["partition", "events"])
    assert [line.split()[0] for line in lines[header + 1:header + 4]] == DAYS
    assert "3/3" in err and "events/s" in err
    # Dagster and the CLI write one store: the CLI continues the history Dagster wrote.
    rc, out, err = _cli("status", "--output", tmp_path / "dagster")
    assert rc == 0 and out.count(" committed ") == 3, out


def test_a_failing_partition_exits_1_naming_it_and_status_lists_it(spark, history, pipelines_dir, tmp_path):
    from tests.orchestration.test_replay_assets import _landing_with_odd_row

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
    # the chain refuses to skip the failed partition ...
    rc, _, err = _cli("backfill", "--config", config, "--input", landing, "--output", root, "--from", DAYS[2])
    assert rc == 1 and "state of partition 2024-01-02 is missing" in err
    # ... and --resume goes on from it, once its input is fixed
    next((landing / "date=2024-01-02").glob("zz-odd*")).unlink()
    rc, out, err = _cli("backfill", "--config", config, "--input", landing, "--output", root,
                        "--from", DAYS[0], "--to", DAYS[-1], "--resume")
    assert rc == 0, err
    assert "resuming at 2024-01-02" in err
    rc, out, _ = _cli("status", "--config", config, "--output", root)
    assert out.count(" committed ") == 3, out


@pytest.mark.parametrize("argv, message", [
    (["--from", "2024-01-03", "--to", "2024-01-01"], "is before --from"),
    (["--from", "2024-01-01T05"], "use --grain hour"),
    (["--from", "2024-01-01", "--to", "2024-01-02", "--rerun-from", "2024-01-05"], "outside --from"),
    ([], "--from: which partition"),
])
def test_usage_errors_name_the_option(spark, history, pipelines_dir, tmp_path, argv, message):
    rc, _, err = _cli("backfill", "--config", pipelines_dir / "clicks-hourly.yaml", "--input", history,
                      "--output", tmp_path / "out", *argv)
    assert rc == 2 and message in err, err
    assert not (tmp_path / "out").exists()
