"""The Airflow data-quality task's message for an interval whose landed files changed since
its commit (issue 46): it names the intervals to clear, from the first out-of-date one to the
newest committed, as ``rewindow status`` lists them. The operator's logic
(:func:`orchestration.intervals.not_current`) tested in the main environment, without Airflow
(``tests/orchestration/test_airflow.py`` runs the DAG itself in ``.venv-airflow``)."""

from __future__ import annotations

import shutil

from tests.support.cli import rewindow
from tests.support.dagster_harness import DAYS, START
from windowing.chain import COMMITTED, OUT_OF_DATE, Chain
from windowing.partitions import Partitions


def test_an_interval_whose_input_changed_names_the_intervals_to_clear(spark, history, pipelines_dir, tmp_path):
    from orchestration.intervals import not_current
    from windowing.config import load_pipeline

    landing, out = tmp_path / "landing", tmp_path / "out"
    shutil.copytree(history, landing)
    config = pipelines_dir / "clicks-hourly.yaml"
    rc, _, err = rewindow("backfill", "--config", config, "--input", landing, "--output", out)
    assert rc == 0, err
    withdrawn = sorted((landing / f"date={DAYS[1]}").glob("*.parquet"))[0]
    withdrawn.unlink()  # a file of day 2 is withdrawn after its commit

    chain = Chain(None, load_pipeline(config), str(landing), str(out), Partitions("day", START))  # no Spark
    status = {s.key: s for s in chain.status(DAYS)}
    assert status[DAYS[0]].status == COMMITTED
    assert [status[d].status for d in DAYS[1:]] == [OUT_OF_DATE, OUT_OF_DATE]

    for day in DAYS[1:]:  # the changed interval and the one after it say the same range
        message = not_current(chain, status[day], "rewindow_clicks_hourly", str(config))
        assert message.startswith(f"partition {day} of pipeline clicks-hourly is out of date: "), message
        assert "Clear the intervals 2024-01-02..2024-01-03 (2 partition(s)" in message, message
        assert (
            "airflow tasks clear rewindow_clicks_hourly -t replay -s 2024-01-02T00:00:00+00:00 "
            "-e 2024-01-03T00:00:00+00:00 -d -y"
        ) in message
        assert f"--rerun-from {DAYS[1]} --to {DAYS[2]}" in message
        assert f"rewindow status --output {out}" in message
    changed = not_current(chain, status[DAYS[1]], "rewindow_clicks_hourly", str(config))
    assert f"1 file removed: date={DAYS[1]}/{withdrawn.name}" in changed, changed  # it names the file
    # `rewindow status` agrees: the source of truth the message points to
    rc, text, _ = rewindow("status", "--output", out)
    assert rc == 0 and text.count("out of date") >= 2, text
