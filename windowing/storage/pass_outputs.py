"""Many partitions' outputs staged at once: one Spark write of each output for all of them.

A pass (:mod:`windowing.runner.passes`) replays N partitions in one kernel job; staging
its N results one after the other (:func:`windowing.storage.outputs.stage_outputs`) would
still start four writes and their jobs per partition. :func:`stage_pass` writes each
output of every partition once, ``partitionBy`` the partition's index, into a hidden
folder of the pipeline (``<pipeline>/_passes/<id>/``), computes every partition's state
hashes and summary in one aggregation of the written state, then moves each partition's
folder into its own new run (``<partition>/runs/<run id>/<output>``) and completes the run
as :func:`stage_outputs` does: ``_SUCCESS`` markers, ``metrics.json``, ``metrics.prom`` and
the state manifest. Between the write and the runs, :func:`written_pass` lets the caller
read every partition's outputs in one scan each (:meth:`WrittenPass.read`: the chain checks
a pass's partitions there, all at once, before any run exists). What each run holds is
what its own staging would have written, row for row (a partition without rows of an
output gets the empty file Spark writes for one), and each run is committed on its own
(:meth:`Staged.commit`), so every partition stays a partition: checked, committed,
published, rerun alone.

A crash part-way leaves runs that no commit record names (never read, pruned later) and
its folder of ``_passes/``, hidden from Spark's readers and the chain, which a pass of the
pipeline removes once it is :data:`STALE_AFTER` old (never a concurrent pass's).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from pyspark import StorageLevel
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.util import inheritable_thread_target

from windowing.contract import OUTPUTS
from windowing.metrics import ReplayMetrics
from windowing.storage import manifest
from windowing.storage.commits import new_run_id
from windowing.storage.errors import OutputError, input_error_from, root_cause
from windowing.storage.lake import Lake, glob_escape, join
from windowing.storage.outputs import Staged, check_output_target, nullable, write_texts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.config import Pipeline

#: The hidden folder of a pipeline's output root where a pass writes before its runs exist.
PASSES = "_passes"


def stage_pass(
    spark: SparkSession,
    frames: Mapping[str, DataFrame],
    part_column: str,
    metrics: Sequence[ReplayMetrics | Mapping[str, Any]],
    outputs: Sequence[str],
    pipeline: Pipeline,
    pipeline_dir: str,
    inputs: Sequence[str] = (),
    files: Sequence[str] = (),
) -> list[Staged]:
    """Stage partition ``i``'s outputs (``metrics[i]``, the rows of ``frames`` where
    ``part_column = i``) as a new run of the output folder ``outputs[i]``; returns the
    staged runs, oldest first (module docstring): :func:`written_pass`, then
    :meth:`WrittenPass.complete`."""
    with written_pass(spark, frames, part_column, outputs, pipeline_dir, inputs, files) as written:
        return written.complete(metrics, outputs, pipeline)


@contextmanager
def written_pass(
    spark: SparkSession,
    frames: Mapping[str, DataFrame],
    part_column: str,
    outputs: Sequence[str],
    pipeline_dir: str,
    inputs: Sequence[str] = (),
    files: Sequence[str] = (),
) -> Iterator[WrittenPass]:
    """Write every partition's outputs (the rows of ``frames`` where ``part_column = i``,
    for the output folder ``outputs[i]``) into a pass folder, which is removed on leaving
    the block: what the block does not :meth:`~WrittenPass.complete` is not staged. Raises
    :class:`OutputError` naming the path when a target is refused or a write fails,
    :class:`InputError` naming the input file of ``files`` Spark failed to read while
    computing the outputs."""
    for out in outputs:
        check_output_target(spark, out, inputs)
    lake = Lake(spark)
    _remove_stale(lake, join(pipeline_dir, PASSES))
    work = join(pipeline_dir, PASSES, new_run_id())
    written: WrittenPass | None = None
    try:
        _write(spark, frames, part_column, work, files)
        written = WrittenPass(spark, lake, work, frames, part_column, len(outputs))
        yield written
    finally:
        if written is not None:
            written.release()
        lake.delete(work)
        lake.delete_if_empty(join(pipeline_dir, PASSES))


class WrittenPass:
    """A pass's outputs written in its folder, before its runs exist (:func:`written_pass`)."""

    def __init__(
        self, spark: SparkSession, lake: Lake, work: str, frames: Mapping[str, DataFrame], part_column: str, n: int
    ) -> None:
        self.spark, self.lake, self.work, self.part_column, self.n = spark, lake, work, part_column, n
        self.frames = frames
        self._completed = False
        self._read: dict[str, DataFrame] | None = None

    def schema(self, name: str) -> T.StructType:
        """Output ``name``'s schema as its runs hold it (nullable), without the partition column."""
        own = [f for f in self.frames[name].schema.fields if f.name != self.part_column]
        return nullable(T.StructType(own))

    def read(self) -> dict[str, DataFrame]:
        """Every output of every partition as written: the rows the runs will hold
        (:meth:`complete` moves these files in), with the partition's index in the partition
        column (a partition without rows of an output has none here). Held in Spark's cache
        from their first scan until the block ends: a pass's checks read each output many
        times, and each is a file per partition (opening them costs more than their rows)."""
        if self._read is None:
            out = {}
            for name in OUTPUTS:
                folder = join(self.work, name)
                schema = T.StructType([*self.schema(name).fields, T.StructField(self.part_column, T.IntegerType())])
                read = self.spark.read.schema(schema).option("basePath", folder).parquet(glob_escape(folder))
                out[name] = read.persist(StorageLevel.MEMORY_AND_DISK)
            # Filled in one job (each cache read later by adaptive execution is a job of its own).
            union = out[OUTPUTS[0]].select(F.lit(0).alias("_"))
            for name in OUTPUTS[1:]:
                union = union.unionByName(out[name].select(F.lit(0).alias("_")))
            union.write.format("noop").mode("overwrite").save()
            self._read = out
        return self._read

    def release(self) -> None:
        """Drop :meth:`read`'s outputs from Spark's cache."""
        for df in (self._read or {}).values():
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001 - the session or its JVM is gone: nothing is held any more
                pass
        self._read = None

    def complete(
        self, metrics: Sequence[ReplayMetrics | Mapping[str, Any]], outputs: Sequence[str], pipeline: Pipeline
    ) -> list[Staged]:
        """Each partition's run, staged: its folders moved in, completed as
        :func:`windowing.storage.outputs.stage_outputs` completes a run (once)."""
        if self._completed:
            raise RuntimeError("this pass's runs are staged already")
        self._completed = True
        spark, lake, work, part_column = self.spark, self.lake, self.work, self.part_column
        hashes = _state_hashes(self.read()["state"], part_column)
        schemas = {name: self.schema(name) for name in OUTPUTS}
        empty = _empty_files(spark, lake, self.frames, part_column, work, self.n)
        return [
            _complete(spark, lake, work, i, out, metrics[i], schemas, part_column, hashes.get(i), empty, pipeline)
            for i, out in enumerate(outputs)
        ]


#: A pass folder older than this is a crashed pass's (no pass of a pipeline runs this long
#: between its first write and its last move): the next pass removes it.
STALE_AFTER = timedelta(hours=12)


def _remove_stale(lake: Lake, folder: str) -> None:
    """Remove the pass folders a crashed pass left in ``folder`` (by the time their name,
    a run id, gives), never one a concurrent pass of the pipeline is writing."""
    now = datetime.now(timezone.utc)
    for e in lake.children(folder):
        name = e.path.rstrip("/").rsplit("/", 1)[-1]
        try:
            began = datetime.strptime(name.split("-", 1)[0], "%Y%m%dT%H%M%S%fZ").replace(tzinfo=timezone.utc)
        except ValueError:
            continue
        if now - began > STALE_AFTER:
            lake.delete(e.path)


def _write(
    spark: SparkSession, frames: Mapping[str, DataFrame], part_column: str, work: str, files: Sequence[str]
) -> None:
    """Each output of every partition in one write, side by side (one thread each, carrying
    this thread's job tags, as :func:`windowing.storage.outputs.write_datasets`)."""

    def write(name: str) -> None:
        target = join(work, name)
        try:
            frames[name].write.mode("error").partitionBy(part_column).parquet(target)
        except Exception as exc:  # Spark/Hadoop raise many types
            err = input_error_from(exc, files) if files else None
            if err is not None:
                raise err from exc
            raise OutputError(f"{target}: cannot write: {root_cause(exc)}") from exc

    tagged = inheritable_thread_target(spark)(write)
    with ThreadPoolExecutor(max_workers=len(OUTPUTS)) as pool:
        futures = [pool.submit(tagged, name) for name in OUTPUTS]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]


def _state_hashes(written: DataFrame, part_column: str) -> dict[int, dict[str, Any]]:
    """Each partition's state hashes and summary (what :class:`manifest.ObservedState`
    observes of one state as it is written), from one aggregation of the written states."""
    aggs = manifest.state_aggregates(written.drop(part_column))
    return {r[part_column]: r.asDict() for r in written.groupBy(part_column).agg(*aggs).collect()}


def _empty_files(
    spark: SparkSession, lake: Lake, frames: Mapping[str, DataFrame], part_column: str, work: str, n: int
) -> dict[str, str]:
    """For each output some partition has no rows of: the file Spark writes for an empty
    DataFrame of its schema (written once, copied into each such partition's run)."""
    out: dict[str, str] = {}
    for name in OUTPUTS:
        present = {e.path.rstrip("/").rsplit("=", 1)[-1] for e in lake.children(join(work, name))}
        if all(str(i) in present for i in range(n)):
            continue
        own = T.StructType([f for f in frames[name].schema.fields if f.name != part_column])
        target = join(work, f"_empty_{name}")
        spark.createDataFrame([], own).coalesce(1).write.parquet(target)
        out[name] = next(e.path for e in lake.files(target) if e.path.endswith(".parquet"))
    return out


def _complete(
    spark: SparkSession,
    lake: Lake,
    work: str,
    i: int,
    out: str,
    m: ReplayMetrics | Mapping[str, Any],
    schemas: Mapping[str, T.StructType],
    part_column: str,
    observed: dict[str, Any] | None,
    empty: Mapping[str, str],
    pipeline: Pipeline,
) -> Staged:
    """Partition ``i``'s run: its written folders moved in, completed as
    :func:`windowing.storage.outputs.stage_outputs` completes a run."""
    metrics = m.to_dict() if isinstance(m, ReplayMetrics) else dict(m)
    staged = Staged(spark, out, new_run_id(), metrics, pipeline.name, pipeline.fingerprint())
    for name in OUTPUTS:
        target = join(staged.path, name)
        try:
            if name in empty and not lake.exists(join(work, name, f"{part_column}={i}")):
                lake.copy_file(empty[name], join(target, empty[name].rstrip("/").rsplit("/", 1)[-1]))
            else:
                lake.move(join(work, name, f"{part_column}={i}"), target)
            lake.touch(join(target, "_SUCCESS"))
        except Exception as exc:  # Hadoop raises many types
            raise OutputError(f"{target}: cannot write: {root_cause(exc)}") from exc
    write_texts(lake, staged.path, metrics)
    staged.schemas = dict(schemas)
    kinds = "state_kind" in staged.schemas["state"].fieldNames()
    hashes = manifest.observed_hashes(observed or {"n": 0, "s": 0, "n_where": 0, "s_where": 0}, kinds)
    try:
        written, staged.state_hash = manifest.write_state_manifest(
            spark, join(staged.path, "state"), staged.schemas["state"], hashes
        )
    except Exception as exc:  # Spark/Hadoop raise many types
        raise OutputError(
            f"{join(staged.path, 'state', manifest.MANIFEST)}: cannot write the state manifest: {root_cause(exc)}"
        ) from exc
    staged.state_manifest = written.to_dict()
    staged.state_summary = manifest.summary_of(observed or {}) if kinds else None
    return staged
