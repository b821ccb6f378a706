"""The runner's public API: what a job that runs the kernel on Spark the way a replay does
may use. The lateness analyses (:mod:`windowing.lateness`) are such a job, and use this
module only (tests/windowing/lateness/test_public_api.py); the rest of
:mod:`windowing.runner` is the replay's own and changes with it.

A kernel job, step by step:

* the input: :func:`check_input`, :func:`normalise` (its rejected rows carry a
  :data:`REJECT_REASON`), :func:`reject_committed` (the batches a previous partition
  committed), :func:`check_workers`, :func:`arrow_types` (the kernel's input types);
* each worker's timeline from a (worker, batch) summary: :func:`summary_timelines`;
* the kernel's input placed in its tasks: :func:`kernel_input`; a task reads its rows
  with :func:`task_input` and hands its tables back as one :data:`SIDE_SCHEMA` batch
  (:func:`side_output_batch`);
* the tasks' output kept for several reads (:func:`hold`), its small side outputs
  collected (:func:`collect_side_outputs`), the large ones decoded on the executors
  (:func:`side_output_frames`) or handed on as their blobs (:func:`side_output_blobs`,
  read back with :func:`decode_blob`);
* columns and types: :func:`col` (a column by its literal name), :func:`spark_schema`
  (of an Arrow schema), the representable times :data:`MIN_EPOCH_MS` ..
  :data:`MAX_EPOCH_MS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Collection, Iterable, Mapping, Sequence

import pyarrow as pa
from pyspark.sql import functions as F

from windowing.runner import placement, tasks
from windowing.runner.columns import MAX_EPOCH_MS, MIN_EPOCH_MS, arrow_types, col, spark_schema
from windowing.runner.normalise import REJECT_REASON, check_columns, check_late_columns, normalise, reject_committed
from windowing.runner.placement import kernel_input
from windowing.runner.session import check_workers, session_conf
from windowing.runner.tasks import decode_blob, hold
from windowing.runner.timelines import summary_timelines

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.config import Pipeline

__all__ = [
    "MAX_EPOCH_MS",
    "MIN_EPOCH_MS",
    "REJECT_REASON",
    "SIDE_SCHEMA",
    "arrow_types",
    "check_input",
    "check_workers",
    "col",
    "collect_side_outputs",
    "decode_blob",
    "hold",
    "kernel_input",
    "normalise",
    "reject_committed",
    "side_output_batch",
    "side_output_blobs",
    "side_output_frames",
    "spark_schema",
    "summary_timelines",
    "task_input",
]

#: The rows a kernel task hands back: which side output a row carries, and its Arrow IPC blob.
SIDE_SCHEMA = pa.schema([pa.field(tasks.SIDE_OUTPUT, pa.string()), pa.field(tasks.SIDE_DATA, pa.binary())])


def check_input(pipeline: Pipeline, df: DataFrame) -> None:
    """Fail before any work (``ConfigError``) if a column ``pipeline`` reads is missing from
    ``df`` or unusable, or if late_events would overwrite one of ``df``'s columns."""
    check_columns(pipeline, df)
    check_late_columns(pipeline, df)


def task_input(batches: Iterable[pa.RecordBatch], names: Mapping[str, str]) -> pa.Table | None:
    """A kernel task's rows (of :func:`kernel_input`) as one table, the columns under their
    real names (``names``, as :func:`kernel_input` returned them); None for a task without
    rows. Settles the Python worker first, as the replay's tasks do."""
    tasks.settle_worker()
    return tasks.task_table(batches, names)


def side_output_batch(tables: Iterable[tuple[str, pa.Table]], keep_empty: Collection[str] = ()) -> pa.RecordBatch:
    """A task's ``(name, table)`` side outputs as one batch of :data:`SIDE_SCHEMA` rows: each
    table in lz4-compressed IPC blobs of at most ``tasks.BLOB_ROWS`` rows, in order; an
    empty table gives no row, unless its name is in ``keep_empty`` (then one empty blob)."""
    names: list[str] = []
    blobs: list[bytes] = []
    for name, t in tables:
        for start in range(0, max(t.num_rows, 1 if name in keep_empty else 0), tasks.BLOB_ROWS):
            names.append(name)
            blobs.append(tasks.encode_blob(t.slice(start, tasks.BLOB_ROWS), compression="lz4"))
    return pa.RecordBatch.from_arrays([pa.array(names, pa.string()), pa.array(blobs, pa.binary())], schema=SIDE_SCHEMA)


def collect_side_outputs(spark: SparkSession, held: DataFrame, names: Sequence[str]) -> dict[str, list[pa.Table]]:
    """The side outputs ``names`` of the tasks' output ``held`` (:data:`SIDE_SCHEMA` rows),
    collected to the driver: each one's tables, in the order collected (a name without
    rows is left out). This action runs the tasks, under the kernel job's settings."""
    with session_conf(spark, tasks.kernel_job_conf(spark)):
        blobs = held.where(F.col(tasks.SIDE_OUTPUT).isin(*names)).select(tasks.SIDE_OUTPUT, tasks.SIDE_DATA).collect()
    pieces: dict[str, list[pa.Table]] = {}
    for row in blobs:
        pieces.setdefault(row[tasks.SIDE_OUTPUT], []).append(decode_blob(row[tasks.SIDE_DATA]))
    return pieces


def side_output_frames(
    spark: SparkSession, held: DataFrame, schemas: Mapping[str, pa.Schema], rows: Mapping[str, int], most: int
) -> dict[str, DataFrame]:
    """Each side output of ``schemas`` (its name: its Arrow schema) of the tasks' output
    ``held``, decoded back into rows on the executors, as the replay decodes its outputs
    for the writes: one decoding task per million of its ``rows`` (0 when missing), at
    most ``most`` (the kernel's task count), spread over the session's idle slots."""
    slots = placement.session_slots(spark)
    return {
        name: held.where(F.col(tasks.SIDE_OUTPUT) == name)
        .select(tasks.SIDE_DATA)
        .coalesce(tasks.write_tasks(rows.get(name, 0), most, slots))
        .mapInArrow(tasks.DecodeTask(schema), spark_schema(schema))
        for name, schema in schemas.items()
    }


def side_output_blobs(held: DataFrame, name: str) -> DataFrame:
    """The IPC blobs of side output ``name`` of the tasks' output ``held``: one binary column
    ``data``, each value a table :func:`decode_blob` reads."""
    return held.where(F.col(tasks.SIDE_OUTPUT) == name).select(F.col(tasks.SIDE_DATA).alias("data"))
