"""Many partitions in one pass: one kernel job replays N consecutive partitions, and each
partition gets what its own replay would have produced, bit for bit.

A chain of small partitions pays a partition's fixed cost (planning in the driver, a
kernel job, its Python workers) N times; a pass pays it once. The partitions' events are
read as one input, each row tagged with its partition's index (:data:`PART_COLUMN`), and
every kernel task replays its rows a partition at a time, in order, each piece from the
state the one before left: the contract's "a replay in pieces equals a replay in one go"
(:mod:`windowing.kernel.pieces`), with a piece boundary at every partition edge. What a
piece emits is its partition's (its aggregates, late events, counters and lateness
values), and the state a piece leaves is its partition's closing state, with its workers'
rows at that edge (:func:`windowing.kernel.clocks.worker_timelines` over the commits before it).

A pass is exact when each partition's rows lie in its own batches, and the batches of
one partition come before the next one's (the contract: "a batch never straddles a
partition boundary"). :func:`replay_pass` takes the batch range of each partition and
returns None, with nothing written, when it cannot vouch for the result: the source
numbers its own batches, the input is more than one task's worth of events (the plan
would not hold every worker whole in one task), or a task finds a row outside its
partition's batches (a row placed in the hour its day clamps it into, or a day folder
holding another day's arrivals). The caller then replays those partitions one after the
other, as before.

:class:`windowing.chain.Chain` replays a range in passes (``Chain.pass_keys`` chooses how
many partitions from the day folders' footers, within one task's events): each pass's
outputs are written once each (:attr:`PassResult.frames`, ``partitionBy`` the partition
index: :mod:`windowing.storage.pass_outputs`), every partition's checks planned once over
the written outputs (:func:`windowing.validation.run_pass_checks`), and each partition
committed on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from windowing import kernel as K
from windowing import prewindow
from windowing.config import Pipeline
from windowing.contract import BATCH_COLUMN, KIND_COLUMN
from windowing.kernel import pieces
from windowing.kernel.clocks import commit_summary, worker_timelines
from windowing.kernel.inputs import hashable, task_derived, with_event_columns
from windowing.metrics import ReplayMetrics
from windowing.runner import chunks, placement
from windowing.runner.columns import arrow_types, spark_schema
from windowing.runner.normalise import (
    REJECT_REASON,
    check_columns,
    check_late_columns,
    normalise,
    reject_committed,
    split_state,
)
from windowing.runner.replay import (
    DRIVER_PERCENTILES_MAX,
    ReplayResult,
    build_metrics,
    lateness_percentiles,
    rejected_rows,
    release_held,
    sum_counters,
    worker_rows_frame,
)
from windowing.runner.session import check_workers, session_conf
from windowing.runner.tasks import (
    LATENESS_COLLECTED,
    LATENESS_HELD,
    REJECTED_COUNTER,
    SIDE_DATA,
    SIDE_OUTPUT,
    DecodeTask,
    KernelTask,
    SideBlobs,
    blob_slices,
    counters_table,
    decode_blob,
    encode_blob,
    hold,
    kernel_job_conf,
    output_schemas,
    settle_worker,
    write_tasks,
)
from windowing.runner.timelines import commits_mode, worker_commits
from windowing.storage.errors import naming_bad_files
from windowing.storage.inputs import note_rows_at_most, rows_at_most

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.storage.manifest import StateSummary

#: The column of a pass's input that holds each row's partition index (0 = the oldest).
PART_COLUMN = "__part"
#: A side output of partition ``i`` is named ``<output>#<i>``.
_SEP = "#"
#: The counter a task adds up when a row lies outside its partition's batches.
STRADDLE = "straddle"


def side_name(name: str, part: int) -> str:
    return f"{name}{_SEP}{part}"


def batch_ranges(pipeline: Pipeline, edges_ms: Sequence[int]) -> list[tuple[int, int]] | None:
    """The batch range ``[lo, hi)`` of each partition between consecutive arrival-time
    edges (epoch ms, N + 1 of them), or None when the source's batches are not intervals
    of arrival time that fit the edges (a batch column of its own, or an interval that
    does not divide a partition)."""
    src = pipeline.source
    if src.batch_column or not src.batch_interval_ms:
        return None
    step = int(src.batch_interval_ms)
    if any(e % step for e in edges_ms):
        return None
    bounds = [e // step for e in edges_ms]
    return list(zip(bounds[:-1], bounds[1:]))


@dataclass(frozen=True, eq=False)
class PassResult:
    """What one pass produced: a :class:`ReplayResult` per partition, oldest first, views of
    one held kernel output that :meth:`unpersist` (or leaving ``with``) releases."""

    #: Each partition's metrics, as its own replay reports them.
    metrics: tuple[ReplayMetrics, ...]
    #: Partition ``i``'s :class:`ReplayResult` (its outputs' DataFrames planned when asked).
    _part: Callable[[int], ReplayResult] = field(repr=False)
    #: Every partition's rows of each output (``aggregates``, ``late_events``, ``rejected``,
    #: ``state``) in one DataFrame, :data:`PART_COLUMN` its partition's index: what one write
    #: of each output (``partitionBy``) stores for all of them.
    frames: Mapping[str, DataFrame] = field(default_factory=dict, repr=False)
    _persisted: DataFrame | None = field(default=None, repr=False)

    @cached_property
    def parts(self) -> tuple[ReplayResult, ...]:
        """A :class:`ReplayResult` per partition, oldest first (288 DataFrames planned for 72
        partitions: the chain, which writes :attr:`frames`, reads only :attr:`metrics`)."""
        return tuple(self._part(i) for i in range(len(self.metrics)))

    def unpersist(self) -> None:
        if self._persisted is not None:
            release_held(self._persisted)
            object.__setattr__(self, "_persisted", None)

    def __enter__(self) -> PassResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpersist()


def replay_pass(
    spark: SparkSession,
    pipeline: Pipeline,
    events_df: DataFrame,
    ranges: Sequence[tuple[int, int]],
    state: DataFrame | None = None,
    flush_at_end: bool = False,
    *,
    state_summary: StateSummary | None = None,
    input_files: Sequence[Sequence[str]] | None = None,
) -> PassResult | None:
    """Replay ``events_df`` (every partition's events, :data:`PART_COLUMN` = its index in
    ``ranges``) as that many replays one after the other would, from ``state``.

    ``ranges``: each partition's batch range (:func:`batch_ranges`). ``flush_at_end``
    applies to the last partition. ``input_files``: each partition's files (for its
    result). Returns None, before the kernel's results are used, when the pass cannot be
    exact (module docstring): the caller replays the partitions one by one.
    """
    if len(ranges) < 2 or commits_mode(spark) not in ("auto", "hash"):
        return None
    rows = rows_at_most(events_df)
    events_per_task = placement.int_setting(spark, placement.EVENTS_PER_TASK_CONF, placement.EVENTS_PER_TASK)
    if rows is None or rows > events_per_task:
        return None
    tagged = note_rows_at_most(prewindow.derive(pipeline.source, events_df), rows)
    input_cols = [c for c in tagged.columns if c != PART_COLUMN]
    plain = tagged.select(*[F.col(f"`{c}`") for c in input_cols])
    check_columns(pipeline, plain)
    check_late_columns(pipeline, plain)
    norm = normalise(pipeline, tagged)
    check_workers(spark)
    worker_state, key_state = split_state(spark, pipeline, state, plain, state_summary)
    if worker_state:
        norm = reject_committed(spark, pipeline, norm, worker_state)
    inputs = tagged.inputFiles()
    commits = worker_commits(spark, pipeline, norm, worker_state, inputs, rows)
    plan = commits.plan
    if commits.rejected_counts is not None or plan is None or plan.split:
        return None  # not a hashed plan of whole workers (the kernel's job counts rejected rows)
    types = arrow_types(spark, plain)
    spec = K.Spec(pipeline=pipeline, input_types={c: types[c] for c in input_cols})
    kernel_in, names, nparts = placement.kernel_input(spark, pipeline, norm.drop(*task_derived(spec)), key_state, plan)
    schemas = output_schemas(spec)
    fn = PassTask(
        spec,
        commits.timelines,
        flush_at_end,
        names,
        schemas,
        lateness_share=DRIVER_PERCENTILES_MAX // max(1, nparts),
        carried=commits.carried,
        rejected_column=REJECT_REASON,
        ranges=ranges,
    )
    out = hold(spark, kernel_in.mapInArrow(fn, spark_schema(fn.schema)))
    try:
        side = _side_outputs(out, spark, pipeline, inputs, commits.worker_rows, len(ranges))
        if side is None:
            out.unpersist()
            return None
        metrics = tuple(_part_metrics(pipeline, out, schemas, nparts, spark, s, i) for i, s in enumerate(side))
        frames = _whole_frames(spark, out, schemas, nparts, norm, input_cols, side)
    except BaseException:
        out.unpersist()
        raise

    def part(i: int) -> ReplayResult:
        return _part_result(spark, out, schemas, nparts, norm, input_cols, i, side[i], metrics[i], input_files)

    return PassResult(metrics, part, frames, out)


@dataclass
class _PartSide:
    counts: dict[str, int]
    by_worker: dict[str, dict[str, int]]
    worker_rows: list[dict[str, Any]]
    lateness: list[np.ndarray]
    rejected_counts: dict[str, int]


def _side_outputs(
    out: DataFrame,
    spark: SparkSession,
    pipeline: Pipeline,
    inputs: Sequence[str],
    driver_rows: list[dict[str, Any]],
    n: int,
) -> list[_PartSide] | None:
    """Run the kernel: each partition's counters, worker rows and lateness values (None:
    a task found a row outside its partition's batches)."""
    wanted = [side_name(s, i) for s in ("counters", LATENESS_COLLECTED, "workers") for i in range(n)]
    with naming_bad_files(inputs), session_conf(spark, kernel_job_conf(spark)):
        rows = out.where(F.col(SIDE_OUTPUT).isin(*wanted, STRADDLE)).select(SIDE_OUTPUT, SIDE_DATA).collect()
    if any(r[SIDE_OUTPUT] == STRADDLE for r in rows):
        return None
    counters: list[list[pa.Table]] = [[] for _ in range(n)]
    values: list[list[np.ndarray]] = [[] for _ in range(n)]
    task_rows: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for row in rows:
        name, _, index = row[SIDE_OUTPUT].rpartition(_SEP)
        i = int(index)
        table = decode_blob(row[SIDE_DATA])
        if name == "counters":
            counters[i].append(table)
        elif name == "workers":
            task_rows[i] += table.to_pylist()
        else:
            values[i].append(table["lateness_ms"].to_numpy())
    wcol = pipeline.source.worker

    def worker(r: dict[str, Any]) -> Any:
        return hashable(r.get(wcol) if wcol else 0)

    sides = []
    for i in range(n):
        counts, by_worker = sum_counters(counters[i])
        counted = [c for c in counts if c.startswith(REJECTED_COUNTER)]
        rejected = {c[len(REJECTED_COUNTER) :]: counts.pop(c) for c in counted}
        written = {worker(r) for r in task_rows[i]}
        worker_rows = [r for r in driver_rows if worker(r) not in written] + task_rows[i]
        worker_rows.sort(key=lambda r: repr(worker(r)))
        sides.append(_PartSide(counts, by_worker, worker_rows, values[i], rejected))
    return sides


def _part_frame(
    spark: SparkSession,
    out: DataFrame,
    schemas: Mapping[str, pa.Schema],
    nparts: int,
    name: str,
    side: _PartSide,
    i: int,
) -> DataFrame:
    """Partition ``i``'s rows of the kernel output ``name``, decoded."""
    slots = placement.session_slots(spark)
    return (
        out.where(F.col(SIDE_OUTPUT) == side_name(name, i))
        .select(SIDE_DATA)
        .coalesce(write_tasks(side.counts.get(f"rows_{name}", 0), nparts, slots))
        .mapInArrow(DecodeTask(schemas[name]), spark_schema(schemas[name]))
    )


def _part_metrics(
    pipeline: Pipeline,
    out: DataFrame,
    schemas: Mapping[str, pa.Schema],
    nparts: int,
    spark: SparkSession,
    side: _PartSide,
    i: int,
) -> ReplayMetrics:
    """Partition ``i``'s metrics, as its own replay reports them."""
    rejected_counts = dict(side.rejected_counts)
    filtered = rejected_counts.pop(prewindow.FILTERED, 0)
    n_late = side.counts.get("late", 0)
    lateness_ms = None
    if 0 < n_late <= DRIVER_PERCENTILES_MAX:
        found = list(side.lateness)
        if sum(len(v) for v in found) < n_late:
            held = out.where(F.col(SIDE_OUTPUT) == side_name(LATENESS_HELD, i)).select(SIDE_DATA).collect()
            found += [decode_blob(r[SIDE_DATA])["lateness_ms"].to_numpy() for r in held]
        lateness_ms = np.concatenate(found)
    late = _part_frame(spark, out, schemas, nparts, "late_events", side, i) if lateness_ms is None and n_late else None
    return build_metrics(
        side.counts,
        lateness_percentiles(n_late, late, F, lateness_ms),  # type: ignore[arg-type]  # None: not read (n_late = 0)
        rejected_counts,
        side.worker_rows,
        pipeline,
        side.by_worker,
        filtered,
    )


def _part_result(
    spark: SparkSession,
    out: DataFrame,
    schemas: Mapping[str, pa.Schema],
    nparts: int,
    norm: DataFrame,
    input_cols: list[str],
    i: int,
    side: _PartSide,
    metrics: ReplayMetrics,
    input_files: Sequence[Sequence[str]] | None,
) -> ReplayResult:
    """Partition ``i``'s outputs and metrics, as its own replay returns them."""
    aggregates, late, state = (
        _part_frame(spark, out, schemas, nparts, name, side, i) for name in ("aggregates", "late_events", "state")
    )
    if side.worker_rows:
        state = state.unionByName(worker_rows_frame(spark, side.worker_rows, schemas["state"]))
    rejected_counts = dict(side.rejected_counts)
    rejected_counts.pop(prewindow.FILTERED, 0)
    rejected = rejected_rows(norm.where(F.col(PART_COLUMN) == i), input_cols, rejected_counts)
    files = tuple(input_files[i]) if input_files is not None else ()
    return ReplayResult(aggregates, late, rejected, state, metrics, input_files=files)


def _with_part(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field(PART_COLUMN, pa.int32(), nullable=False))


def _whole_frames(
    spark: SparkSession,
    out: DataFrame,
    schemas: Mapping[str, pa.Schema],
    nparts: int,
    norm: DataFrame,
    input_cols: list[str],
    sides: list[_PartSide],
) -> dict[str, DataFrame]:
    """Each output of every partition as one DataFrame (:attr:`PassResult.frames`): the
    rows :func:`_part_result` gives each partition, tagged with its index."""
    slots = placement.session_slots(spark)
    frames: dict[str, DataFrame] = {}
    for name in ("aggregates", "late_events", "state"):
        rows = sum(s.counts.get(f"rows_{name}", 0) for s in sides)
        schema = _with_part(schemas[name])
        frames[name] = (
            out.where(F.col(SIDE_OUTPUT).startswith(name + _SEP))
            .select(SIDE_OUTPUT, SIDE_DATA)
            .coalesce(write_tasks(rows, nparts, slots))
            .mapInArrow(PartDecodeTask(schemas[name]), spark_schema(schema))
        )
    workers = [{**r, PART_COLUMN: i} for i, s in enumerate(sides) for r in s.worker_rows]
    if workers:
        frames["state"] = frames["state"].unionByName(worker_rows_frame(spark, workers, _with_part(schemas["state"])))
    counted = {r for s in sides for r, n in s.rejected_counts.items() if n and r != prewindow.FILTERED}
    rejected = rejected_rows(norm, [*input_cols, PART_COLUMN], {r: 1 for r in counted})
    frames["rejected"] = rejected.select(*[c for c in rejected.columns if c != PART_COLUMN], PART_COLUMN)
    return frames


class PartDecodeTask:
    """:class:`DecodeTask` over a pass's blobs of one output: each blob's rows, with the
    index of the partition its name gives (:func:`side_name`) as :data:`PART_COLUMN`."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        for batch in batches:
            for name, data in zip(batch.column(0).to_pylist(), batch.column(1)):
                table = decode_blob(data.as_buffer()).cast(self.schema)
                part = pa.array(np.full(table.num_rows, int(name.rpartition(_SEP)[2]), np.int32))
                yield from table.append_column(pa.field(PART_COLUMN, pa.int32(), nullable=False), part).to_batches()


# --------------------------------------------------------------------------- the task


class PassTask(KernelTask):
    """:class:`KernelTask` over a pass's rows: each task holds whole workers and replays
    its rows a partition at a time (one kernel call each, in order, each from the state
    the one before left), every output named by its partition (:func:`side_name`)."""

    def __init__(self, *args: Any, ranges: Sequence[tuple[int, int]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ranges = [(int(lo), int(hi)) for lo, hi in ranges]
        self.rejected_by_part: dict[int, dict[str, int]] = {}

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        self.rejected_by_part = {}
        assert self.rejected_column is not None
        source = chunks.TaskInput(
            self._accepted(batches, self.rejected_column), self.names, self.spec, limit=1 << 62, summarise=False
        )
        try:
            table = source.table
            source.table = None
            if source.timeline_rows or source.spilled:  # a hashed plan has neither
                raise RuntimeError("a pass's task got a spread worker's rows")
            yield from self._replay(table)
        finally:
            source.close()

    def _count_rejected(self, batch: pa.RecordBatch, column: str) -> None:
        """Count ``batch``'s rejected rows by (partition, reason) into ``self.rejected_by_part``."""
        rejected = batch.filter(pc.is_valid(batch.column(column)))
        for (part, reason), n in rejected.select([PART_COLUMN, column]).to_pandas().value_counts().items():
            by_reason = self.rejected_by_part.setdefault(int(part), {})
            by_reason[reason] = by_reason.get(reason, 0) + int(n)

    def _replay(self, table: pa.Table | None) -> Iterator[pa.RecordBatch]:
        n = len(self.ranges)
        if table is None:
            for i in range(n):
                if i in self.rejected_by_part:
                    side = SideBlobs()
                    side.add(side_name("counters", i), encode_blob(counters_table({}, {}, self.rejected_by_part[i])))
                    yield side.batch(self.schema)
            return
        table = with_event_columns(table, self.spec)
        kind = table[KIND_COLUMN].to_numpy()
        is_event = kind == K.EVENT
        part = np.asarray(pc.fill_null(table[PART_COLUMN], -1).to_numpy(zero_copy_only=False), np.int64)
        batch = np.asarray(pc.fill_null(table[BATCH_COLUMN], 0).to_numpy(zero_copy_only=False), np.int64)
        lo = np.array([r[0] for r in self.ranges], np.int64)
        hi = np.array([r[1] for r in self.ranges], np.int64)
        ev_part = part[is_event]
        ev_batch = batch[is_event]
        if len(ev_part) and ((ev_part < 0).any() or (ev_batch < lo[ev_part]).any() or (ev_batch >= hi[ev_part]).any()):
            side = SideBlobs()
            side.add(STRADDLE, b"")
            yield side.batch(self.schema)
            return
        table = table.drop_columns([PART_COLUMN])
        own = commit_summary(table, self.spec)
        assert self.carried is not None
        timelines, _ = worker_timelines(self.spec.pipeline, own, {w: s for w, s in self.carried.items() if w in own})
        timelines = {**self.timelines, **timelines}
        carried_rows: pa.Table | None = None
        state_rows = table.filter(pa.array(~is_event))
        for i, (p_lo, p_hi) in enumerate(self.ranges):
            last = i == n - 1
            piece = table.filter(pa.array(is_event & (part == i)))
            if i == 0 and state_rows.num_rows:
                piece = pa.concat_tables([piece, state_rows])
            if carried_rows is not None and carried_rows.num_rows:
                piece = pa.concat_tables([piece, carried_rows], promote_options="permissive")
            side = SideBlobs()
            workers = self._workers_at(own, p_hi)
            if workers is not None:
                side.add(side_name("workers", i), workers)
            replayed = piece.num_rows > 0
            counters: Mapping[str, Mapping[str, int]] = {}
            if replayed:
                piece_timelines = {w: pieces.sliced_timeline(tl, p_lo, p_hi) for w, tl in timelines.items()}
                out = K.process(piece, self.spec, piece_timelines, self.flush and last, None)
                del piece
                carried_rows = pieces.state_input_rows(out.state, self.spec) if not last else None
                self._add_part_outputs(side, out, i)
                counters = out.counters_by_worker
            if replayed or i in self.rejected_by_part:
                side.add(
                    side_name("counters", i),
                    encode_blob(counters_table(counters, side.rows, self.rejected_by_part.get(i))),
                )
            if side.names:
                yield side.batch(self.schema)

    def _workers_at(self, own: Mapping[Any, tuple[np.ndarray, ...]], hi: int) -> bytes | None:
        """The state rows of this task's workers at the end of the partition ending before
        batch ``hi``: from their commits before it (and their carried rows); a worker with
        neither has no row yet."""
        assert self.carried is not None
        before: dict[Any, tuple[np.ndarray, ...]] = {}
        for w, arrays in own.items():
            k = int(np.searchsorted(arrays[0], hi, side="left"))
            if k or w in self.carried:
                before[w] = tuple(a[:k] for a in arrays)
        if not before:
            return None
        _, rows = worker_timelines(self.spec.pipeline, before, {w: s for w, s in self.carried.items() if w in before})
        return encode_blob(pa.Table.from_pylist(rows, schema=self.schemas["state"]))

    def _add_part_outputs(self, side: SideBlobs, out: K.KernelOutput, i: int) -> None:
        if out.late.num_rows:
            name = LATENESS_COLLECTED if out.late.num_rows <= self.lateness_share else LATENESS_HELD
            side.add(side_name(name, i), encode_blob(out.late.select(["lateness_ms"])))
        for name, table in (("aggregates", out.aggregates), ("late_events", out.late), ("state", out.state)):
            result = table.cast(self.schemas[name])
            side.rows[name] = side.rows.get(name, 0) + result.num_rows
            for blob in _blobs(result):
                side.add(side_name(name, i), blob)


def _blobs(table: pa.Table) -> Iterator[bytes]:
    for part in blob_slices(table):
        yield encode_blob(part)
