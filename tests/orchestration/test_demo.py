"""The command-line demo: sample history, one single-run backfill through Dagster, a summary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from orchestration import demo
from tests.support.outputs import metrics as metrics_of


def test_demo_generates_replays_and_summarises(spark, pipelines_dir, tmp_path, capsys, monkeypatch):
    for var in ("REWINDOW_LANDING_ZONE", "REWINDOW_OUTPUT_ROOT", "REWINDOW_HISTORY_START", "REWINDOW_PARTITION_GRAIN"):
        monkeypatch.delenv(var, raising=False)
    code = demo.main(
        [
            "--days",
            "2",
            "--events-per-day",
            "200",
            "--keys",
            "10",
            "--landing-zone",
            str(tmp_path / "events"),
            "--pipelines-dir",
            str(pipelines_dir),
            "--output-root",
            str(tmp_path / "out"),
            "--dagster-home",
            str(tmp_path / "home"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    # Without --start: the two days up to yesterday, so Dagster's Plots tab (the 120 days before today) shows them.
    today = datetime.now(timezone.utc).date()
    days = [(today - timedelta(days=n)).isoformat() for n in (2, 1)]
    assert f"partitions {days[0]}..{days[1]} of 1 pipeline(s) in one Dagster run" in out
    assert "state chain check: passed" in out
    assert f"DAGSTER_HOME={tmp_path / 'home'}" in out
    # `dagster dev` starts the partitions at the oldest landed day by itself: no REWINDOW_HISTORY_START to set.
    assert "REWINDOW_HISTORY_START" not in out
    # The printed UI command runs from the repository without the environment activated (issue 47).
    [ui] = [line.split() for line in out.splitlines() if " dev -w workspace.yaml" in line]
    dagster = ui[ui.index("dev") - 1]
    assert dagster.endswith("/dagster") and (demo.REPO / dagster).is_file(), ui
    for day in days:
        metrics = metrics_of(tmp_path / "out" / "clicks-hourly" / day)
        assert metrics["input_rows"] == 200
        assert f"  {day}  " in out
    assert (tmp_path / "home" / "history").is_dir()  # the runs are in a persistent instance
    assert "telemetry" in (tmp_path / "home" / "dagster.yaml").read_text()  # the demo instance has its settings


def test_demo_run_again_replays_the_days_it_generated_before(tmp_path, monkeypatch):
    """A second quick start (another day) keeps the landing zone's days, not a new set."""
    from windowing.sample import generate_history

    monkeypatch.delenv("REWINDOW_HISTORY_START", raising=False)
    first = datetime(2025, 3, 4, tzinfo=timezone.utc)
    generate_history(str(tmp_path / "events"), first, 2, 50, 5, seed=1)
    assert demo.default_start(str(tmp_path / "events"), "date", 3) == first
    today = datetime.now(timezone.utc).date()
    assert demo.default_start(str(tmp_path / "empty"), "date", 3).date() == today - timedelta(days=3)
