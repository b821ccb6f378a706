"""rewindow's example pipeline on Airflow: one daily partition of click events per run.

    scripts/airflow-env                      # .venv-airflow: Airflow 3 and rewindow
    PATH=$PWD/.venv-airflow/bin:$PATH AIRFLOW__CORE__DAGS_FOLDER=$PWD/examples/airflow \
        AIRFLOW__CORE__LOAD_EXAMPLES=False PYSPARK_PYTHON=$PWD/.venv-airflow/bin/python airflow standalone

Where the events are and where the outputs go come from the same variables as the Dagster
deployment (defaults: the quick start's `data/landing` and `data/output`):
REWINDOW_LANDING_ZONE, REWINDOW_OUTPUT_ROOT, REWINDOW_HISTORY_START (the first day of the
history, which starts from no state), REWINDOW_PARTITION_GRAIN (`daily` or `hourly`), and
REWINDOW_SPARK_MASTER and REWINDOW_SPARK_CONF (`k=v,k=v`) for a cluster. Past days: `airflow backfill create --dag-id
rewindow_clicks_hourly --from-date 2024-01-01 --to-date 2024-01-03`.

When a file is added to, removed from or rewritten in a day already committed, that day
and every one after it are out of date: their `data_quality` task fails (and a later
interval's `replay` refuses to build on them), naming the files and the intervals to
clear, from the first out-of-date one to the newest committed, with the `airflow tasks
clear ... -t replay -s ... -e ... -d -y` command (or one `rewindow backfill
--rerun-from`). `rewindow status --output $REWINDOW_OUTPUT_ROOT` is the source of truth.
"""

import os
from datetime import datetime, timezone
from pathlib import Path

from orchestration.airflow import replay_dag
from windowing.runner.session import parse_conf

REPO = Path(__file__).resolve().parents[2]

dag = replay_dag(
    REPO / "examples" / "pipelines" / "clicks-hourly.yaml",
    landing_zone=os.environ.get("REWINDOW_LANDING_ZONE", str(REPO / "data" / "landing")),
    output_root=os.environ.get("REWINDOW_OUTPUT_ROOT", str(REPO / "data" / "output")),
    start_date=datetime.fromisoformat(os.environ.get("REWINDOW_HISTORY_START", "2024-01-01")).replace(
        tzinfo=timezone.utc
    ),
    grain={"daily": "day", "hourly": "hour"}[os.environ.get("REWINDOW_PARTITION_GRAIN", "daily")],
    spark_master=os.environ.get("REWINDOW_SPARK_MASTER"),
    spark_conf=parse_conf(os.environ.get("REWINDOW_SPARK_CONF", "")),
)
