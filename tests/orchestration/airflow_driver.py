"""Run rewindow's example DAG with Airflow's own test runner (``dag.test()``), interval by
interval, in Airflow's environment (``.venv-airflow``): tests/orchestration/test_airflow.py
starts it as a subprocess. One JSON line per run on stdout.

    python airflow_driver.py DAG_FILE 2024-01-01 2024-01-02 2024-01-03:blocked

Each argument is the start of a data interval (one day); ``:blocked`` means the run is
expected not to start its tasks (a failed past interval holds it): the driver waits until
Airflow has created the run and found nothing runnable for a few seconds, reports the
task states and exits, leaving the run as Airflow left it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from datetime import datetime, timedelta, timezone


def load_dag(path: str):
    spec = importlib.util.spec_from_file_location("rewindow_example_dag", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def task_states(dag_id: str, logical_date: datetime) -> tuple[str | None, dict[str, str | None]]:
    from airflow.models import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = [r for r in DagRun.find(dag_id=dag_id, session=session) if r.logical_date == logical_date]
        if not runs:
            return None, {}
        run = runs[0]
        return str(run.state), {
            ti.task_id: (str(ti.state) if ti.state else None) for ti in run.get_task_instances(session=session)
        }


def main(argv: list[str]) -> int:
    dag = load_dag(argv[0])
    for arg in argv[1:]:
        day, _, expect = arg.partition(":")
        start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
        # A manual run's data interval is the one that ends at its logical date.
        logical = start + timedelta(days=1)
        if expect == "blocked":
            threading.Thread(target=dag.test, kwargs={"logical_date": logical}, daemon=True).start()
            deadline, seen = time.monotonic() + 120, None
            while time.monotonic() < deadline:
                state, tasks = task_states(dag.dag_id, logical)
                if tasks and all(s is None for s in tasks.values()):
                    seen = seen or time.monotonic()
                    if time.monotonic() - seen > 5:  # dag.test loops on "No tasks to run"
                        break
                elif tasks and any(s is not None for s in tasks.values()):
                    break
                time.sleep(0.5)
            print(json.dumps({"interval": day, "state": state, "tasks": tasks}), flush=True)
            os._exit(0)  # the test runner's loop would wait forever for the held run
        run = dag.test(logical_date=logical)
        print(
            json.dumps(
                {
                    "interval": day,
                    "state": str(run.state),
                    "tasks": {ti.task_id: str(ti.state) for ti in run.get_task_instances()},
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
