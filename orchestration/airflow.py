"""rewindow on Airflow 3: a partition of the history per data interval, the same chain as
Dagster and ``rewindow backfill`` (:mod:`windowing.chain`), into the same store.

* :class:`ReplayPartitionOperator` replays the data interval ``[data_interval_start,
  data_interval_end)`` from the committed state of the interval before it. A partition whose
  blocking data-quality checks fail is *not* committed (write-audit-publish) and the task
  still succeeds: it pushes what happened to XCom, and the data-quality task decides.
* :class:`PartitionChecksOperator` fails the run unless the interval's partition is
  committed and current (``Chain.status``): failed checks, a missing or an out-of-date
  partition all fail it, naming the partition and why. An interval whose landed files
  changed since its commit (a file added, removed or rewritten: issue 46) is out of date,
  and so is every interval after it: the message names the intervals to clear, from the
  first out-of-date one to the newest committed (:func:`orchestration.intervals.not_current`;
  ``rewindow status`` is the source of truth).
* :func:`replay_dag` builds the DAG from a pipeline YAML: ``replay >> data_quality``, one
  run at a time (``max_active_runs=1``), each interval's replay waiting for the previous
  interval's replay *and its data-quality task* (``depends_on_past`` with
  ``wait_for_downstream``), so a failing data-quality task stops the next interval.

Airflow is an optional dependency (``pip install -e ".[airflow]"``, or
``scripts/airflow-env``, which makes ``.venv-airflow``); this module imports it at the top,
so importing it without Airflow fails at once, saying what to install.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Sequence, TypedDict

try:
    from airflow.exceptions import AirflowException
    from airflow.sdk import DAG, BaseOperator, CronDataIntervalTimetable
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "orchestration.airflow needs Apache Airflow 3: install the extra (pip install -e '.[airflow]') "
        "or run scripts/airflow-env, which makes .venv-airflow"
    ) from exc

from orchestration.intervals import not_current
from windowing import rebuild
from windowing.chain import COMMITTED, Chain, ChainError
from windowing.partitions import Partitions
from windowing.storage import versions

SCHEDULES = {"day": "@daily", "hour": "@hourly"}
#: Fields templated by Airflow (``{{ var.value.rewindow_output_root }}``, ...).
CHAIN_FIELDS = ("pipeline_file", "landing_zone", "output_root")


# Airflow lives in its own environment (.venv-airflow), not in the one mypy runs in: there,
# BaseOperator is Any (ignore_missing_imports).
class _ChainOperator(BaseOperator):  # type: ignore[misc]
    """What both operators need: the pipeline's chain over the landing zone and output root."""

    template_fields: Sequence[str] = CHAIN_FIELDS

    def __init__(
        self,
        *,
        pipeline_file: str,
        landing_zone: str,
        output_root: str,
        history_start: datetime | str,
        grain: str = "day",
        partition_column: str | None = "date",
        spark_master: str | None = None,
        spark_remote: str | None = None,
        spark_conf: dict[str, str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pipeline_file = str(pipeline_file)
        self.landing_zone = str(landing_zone)
        self.output_root = str(output_root)
        self.history_start = history_start
        self.grain = grain
        self.partition_column = partition_column
        self.spark_master = spark_master
        self.spark_remote = spark_remote
        self.spark_conf = dict(spark_conf or {})

    def chain(self) -> Chain:
        from windowing.config import load_pipeline
        from windowing.runner.session import spark_session
        from windowing.storage.lake import absolute

        pipeline = load_pipeline(self.pipeline_file)
        start = self.history_start
        if isinstance(start, str):
            start = datetime.fromisoformat(start)
        spark = spark_session(self.spark_master, self.spark_conf, remote=self.spark_remote)
        # the history's current version, or the version a changed pipeline is rebuilt as
        self.plan: rebuild.VersionPlan = rebuild.plan(spark, pipeline, absolute(self.output_root))
        return Chain(
            spark,
            pipeline,
            absolute(self.landing_zone),
            self.plan.build_root,
            Partitions(self.grain, start),
            partition_column=self.partition_column,
            log=self.log,
        )

    def partition_key(self, chain: Chain, context: Any) -> str:
        """The partition of this run's data interval (it must be exactly one partition)."""
        start, end = context["data_interval_start"], context["data_interval_end"]
        key = chain.partitions.key_of(start)
        if chain.partitions.window(key) != (start, end):
            raise AirflowException(
                f"data interval [{start}, {end}) is not one {chain.partitions.grain} partition: schedule the DAG "
                f"{SCHEDULES[chain.partitions.grain]} with CronDataIntervalTimetable (rewindow's replay_dag does)"
            )
        return key


class ReplayPartitionOperator(_ChainOperator):
    """Replay the run's data interval with the state of the previous one (:meth:`Chain.replay`).

    Returns (XCom) ``{"partition", "committed", "failed_checks", "run_path", "input_rows",
    "windows_emitted", "late_events", "rejected_rows", "seconds"}``. Fails the task only when
    the chain refuses to go on (the previous partition is missing, out of date, failed or
    flushed) or the replay itself fails; failing checks are the data-quality task's to report.
    """

    ui_color = "#c6e2ff"

    def __init__(self, *, flush_at_end: bool = False, checks: bool = True, **kwargs: Any):
        super().__init__(**kwargs)
        self.flush_at_end = flush_at_end
        self.checks = checks

    def execute(self, context: Any) -> dict[str, Any]:
        chain = self.chain()
        key = self.partition_key(chain, context)
        try:
            (part,) = chain.replay(
                [key], flush_at_end=self.flush_at_end, checks=self.checks, run_id=f"airflow-{context['run_id']}"
            )
        except ChainError as exc:
            raise AirflowException(str(exc)) from exc
        if self.plan.rebuild and part.committed:  # the interval that completes a rebuild switches it in
            whole = self.plan.whole(chain.partitions, key)
            rebuild.switch_if_whole(chain, self.plan, whole, versions.KEEP_VERSIONS, say=self.log.info)
        m = part.metrics
        return {
            "partition": key,
            "committed": part.committed,
            "failed_checks": list(part.lineage.failed_checks),
            "run_path": part.run_path,
            "input_rows": m.input_rows,
            "windows_emitted": m.windows_emitted,
            "late_events": m.late_events,
            "rejected_rows": m.rejected_rows,
            "seconds": round(part.seconds, 3),
        }


class PartitionChecksOperator(_ChainOperator):
    """Fail unless the data interval's partition is committed and current (:meth:`Chain.status`)."""

    ui_color = "#d5f5d5"

    def execute(self, context: Any) -> dict[str, Any]:
        chain = self.chain()
        key = self.partition_key(chain, context)
        (status,) = chain.status([key])
        if status.status != COMMITTED:  # out of date: it names the intervals to clear
            raise AirflowException(not_current(chain, status, self.dag_id, self.pipeline_file))
        self.log.info(
            "partition %s of pipeline %s: committed and current (%s)", key, chain.pipeline.name, status.detail
        )
        return {"partition": key, "status": status.status, "run_path": status.run_path}


class _ChainArgs(TypedDict):
    """The arguments both operators of :func:`replay_dag` take (:class:`_ChainOperator`'s)."""

    pipeline_file: str
    landing_zone: str
    output_root: str
    history_start: datetime | str
    grain: str
    partition_column: str | None
    spark_master: str | None
    spark_remote: str | None
    spark_conf: dict[str, str] | None


def replay_dag(
    pipeline_file: str | Path,
    *,
    landing_zone: str,
    output_root: str,
    start_date: datetime,
    grain: str = "day",
    dag_id: str | None = None,
    partition_column: str | None = "date",
    end_date: datetime | None = None,
    spark_master: str | None = None,
    spark_remote: str | None = None,
    spark_conf: dict[str, str] | None = None,
    checks: bool = True,
    tags: Sequence[str] = ("rewindow",),
    **dag_kwargs: Any,
) -> DAG:
    """The DAG replaying ``pipeline_file`` one data interval at a time.

    ``start_date`` is the first partition of the history (it starts from no state); the
    schedule is the grain's (``@daily`` or ``@hourly``, UTC data intervals). Past intervals
    are replayed with ``airflow backfill create`` (or ``catchup=True``): runs go one at a time
    and in order, each replay waiting for the previous interval's replay and data-quality task.
    """
    from windowing.config import load_pipeline

    pipeline = load_pipeline(pipeline_file)  # a bad YAML fails the DAG file's import, named
    if grain not in SCHEDULES:
        raise ValueError(f"grain: {grain!r} is not one of {', '.join(SCHEDULES)}")
    common = _ChainArgs(
        pipeline_file=str(pipeline_file),
        landing_zone=landing_zone,
        output_root=output_root,
        history_start=start_date,
        grain=grain,
        partition_column=partition_column,
        spark_master=spark_master,
        spark_remote=spark_remote,
        spark_conf=spark_conf,
    )
    dag_kwargs.setdefault("catchup", False)
    dag_kwargs.setdefault("default_args", {})
    dag_kwargs["default_args"] = {"depends_on_past": True, "retries": 0, **dag_kwargs["default_args"]}
    with DAG(
        dag_id=dag_id or f"rewindow_{pipeline.name.replace('-', '_')}",
        schedule=CronDataIntervalTimetable(SCHEDULES[grain], timezone="UTC"),
        start_date=start_date,
        end_date=end_date,
        max_active_runs=1,
        tags=list(tags),
        doc_md=f"Replays pipeline `{pipeline.name}` ({str(pipeline_file).rsplit('/', 1)[-1]}) "
        f"one {grain} at a time from "
        f"{landing_zone} into {output_root}, each partition from the state of the one before "
        "(rewindow's windowing.chain). When the landed files of a committed interval change, it and "
        "every interval after it are out of date: `data_quality` fails naming the files and the intervals "
        f"to clear (`rewindow status --output {output_root}` is the source of truth).",
        **dag_kwargs,
    ) as dag:
        replay = ReplayPartitionOperator(
            task_id="replay", wait_for_downstream=True, checks=checks, execution_timeout=timedelta(hours=6), **common
        )
        quality = PartitionChecksOperator(task_id="data_quality", **common)
        replay >> quality
    return dag
