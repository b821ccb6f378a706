"""The command-line demo: sample history, one single-run backfill through Dagster, a summary."""

from __future__ import annotations

from orchestration import demo
from tests.outputs import metrics as metrics_of


def test_demo_generates_replays_and_summarises(spark, pipelines_dir, tmp_path, capsys, monkeypatch):
    for var in ("REWINDOW_LANDING_ZONE", "REWINDOW_OUTPUT_ROOT", "REWINDOW_HISTORY_START", "REWINDOW_PARTITION_GRAIN"):
        monkeypatch.delenv(var, raising=False)
    code = demo.main(
        [
            "--days", "2", "--events-per-day", "200", "--keys", "10",
            "--landing-zone", str(tmp_path / "events"),
            "--pipelines-dir", str(pipelines_dir),
            "--output-root", str(tmp_path / "out"),
            "--dagster-home", str(tmp_path / "home"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "partitions 2024-01-01..2024-01-02 of 1 pipeline(s) in one Dagster run" in out
    assert "state chain check: passed" in out
    assert f"DAGSTER_HOME={tmp_path / 'home'}" in out
    for day in ("2024-01-01", "2024-01-02"):
        metrics = metrics_of(tmp_path / "out" / "clicks-hourly" / day)
        assert metrics["input_rows"] == 200
        assert f"  {day}  " in out
    assert (tmp_path / "home" / "history").is_dir()  # the runs are in a persistent instance
    assert "telemetry" in (tmp_path / "home" / "dagster.yaml").read_text()  # the demo instance has its settings
