"""Phase 3 of a replay: what each kernel task runs, and how its outputs come back.

:class:`KernelTask` runs :func:`windowing.kernel.process` over a Spark partition (through
``mapInArrow``; past ``eventsPerChunk`` rows in pieces, :mod:`windowing.runner.chunks`) and
hands its outputs back as ``(SIDE_OUTPUT, SIDE_DATA)`` rows, each an Arrow IPC blob
(:func:`encode_blob`); :class:`DecodeTask` turns an output's blobs back into its rows for
Spark's writer. Also the settings of these jobs: the kernel's job without Spark's Arrow
byte cap (:func:`kernel_job_conf`), its output held without column compression
(:func:`hold`), and the write tasks per output (:func:`write_tasks`).
"""

from __future__ import annotations

import ctypes
import gc
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from windowing import kernel as K
from windowing.kernel import slices
from windowing.kernel.clocks import commit_summary, worker_timelines
from windowing.kernel.inputs import hashable, with_event_columns
from windowing.runner import chunks, placement
from windowing.runner.session import session_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


#: The kernel task's extra columns: which side output a row carries, and its IPC blob.
SIDE_OUTPUT, SIDE_DATA = "__side_output", "__side_data"
#: Side outputs of a task's lateness values: collected with the counters (the task had at
#: most its share of :data:`windowing.runner.replay.DRIVER_PERCENTILES_MAX` late events),
#: or held for a second look.
LATENESS_COLLECTED, LATENESS_HELD = "lateness", "lateness_held"
#: Rows per Arrow IPC blob handed back by a kernel task, at most (far below Spark's 2 GB).
BLOB_ROWS = 262_144
#: Bytes of Arrow data per blob, about (:func:`blob_slices`): a blob is copied whole several
#: times in the JVM (into Spark's row, its cache, the Arrow batch for the write's Python
#: task), and a copy of more than half a G1 heap region (1 MB regions under 2 GB of heap,
#: 2 MB under 4 GB) is a "humongous" allocation, made and freed outside the young
#: generation. Blobs of about 1 MB replayed faster than one blob a task, and 250 KB ones
#: no faster than 1 MB: this size lies between the two (measured: docs/architecture.md,
#: "The kernel's outputs in blobs of ~512 KB").
BLOB_BYTES = 512 << 10


def blob_slices(table: pa.Table) -> Iterator[pa.Table]:
    """``table`` in consecutive slices of about :data:`BLOB_BYTES` each (by its average
    row's size), at most :data:`BLOB_ROWS` rows; none for an empty table."""
    n = table.num_rows
    rows = max(1, min(BLOB_ROWS, BLOB_BYTES * n // max(1, table.nbytes)))
    for start in range(0, n, rows):
        yield table.slice(start, rows)


def task_table(batches: Iterable[pa.RecordBatch], names: Mapping[str, str]) -> pa.Table | None:
    """A task's rows as one table, the columns under their real names again (see
    :func:`windowing.runner.placement.kernel_input`); None for a task without rows."""
    batches = list(batches)
    if not batches or not sum(b.num_rows for b in batches):
        return None
    table = pa.Table.from_batches(batches)
    return table.rename_columns([names.get(n, n) for n in table.column_names])


class KernelTask:
    """What each Spark task runs over its partition: the kernel, then its outputs as
    ``(SIDE_OUTPUT, SIDE_DATA)`` rows: an output's name and an Arrow IPC blob of about
    :data:`BLOB_BYTES` of its rows (the counters and the late events' lateness too).

    A partition of more than ``chunk_events`` rows is replayed a bounded piece at a time
    (:mod:`windowing.runner.chunks`): same rows, memory bounded by the setting."""

    def __init__(
        self,
        spec: K.Spec,
        timelines: Mapping[Any, K.Timeline],
        flush: bool,
        names: Mapping[str, str] | None,
        schemas: Mapping[str, pa.Schema],
        lateness_share: int = 0,
        carried: Mapping[Any, dict[str, Any]] | None = None,
        chunk_events: int | None = None,
        rejected_column: str | None = None,
    ) -> None:
        self.spec, self.timelines, self.flush = spec, timelines, flush
        #: The column naming why a row is rejected, when rejected rows come with the events
        #: (a plan made without counting them, :func:`windowing.runner.placement.hashed_plan`):
        #: the task counts them by reason (counters ``rejected:<reason>``) and leaves them out.
        self.rejected_column = rejected_column
        self.rejected: dict[str, int] = {}
        #: The carried worker rows, when each task holds whole workers and builds their
        #: timelines itself (None: ``timelines`` has every worker's).
        self.carried = carried
        self.lateness_share = lateness_share
        self.names = names or {}
        self.schemas = schemas
        self.chunk_events = chunk_events or placement.EVENTS_PER_CHUNK
        self.schema = pa.schema([pa.field(SIDE_OUTPUT, pa.string()), pa.field(SIDE_DATA, pa.binary())])

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        self.rejected = {}
        if self.rejected_column is not None:
            batches = self._accepted(batches, self.rejected_column)
        source = chunks.TaskInput(batches, self.names, self.spec, self.chunk_events, summarise=self.carried is not None)
        try:
            if source.table is not None:
                yield from self._in_one_go(source)
            elif source.spilled:
                yield from self._in_pieces(source)
            elif source.timeline_rows and self.carried is not None:
                # Only a spread worker's timeline came (none of its keys hashed here): the
                # worker's state row is still this task's to write, if it is the first.
                _, workers = self._task_timelines(source, {})
                if workers is not None:
                    side = SideBlobs()
                    side.add("workers", workers)
                    yield side.batch(self.schema)
            elif self.rejected:  # rejected rows only: their counts
                side = SideBlobs()
                side.add("counters", encode_blob(counters_table({}, side.rows, self.rejected)))
                yield side.batch(self.schema)
        finally:
            source.close()

    def _accepted(self, batches: Iterable[pa.RecordBatch], column: str) -> Iterator[pa.RecordBatch]:
        """``batches`` without ``column`` and without their rejected rows (those with a
        reason in it), each batch's rejected rows counted by :meth:`_count_rejected`."""
        for batch in batches:
            i = batch.schema.get_field_index(column)
            reasons = batch.column(i)
            rest = [j for j in range(batch.num_columns) if j != i]
            if reasons.null_count == batch.num_rows:
                yield batch.select(rest)
                continue
            self._count_rejected(batch, column)
            accepted = batch.filter(pc.is_null(reasons)).select(rest)
            if accepted.num_rows:
                yield accepted

    def _count_rejected(self, batch: pa.RecordBatch, column: str) -> None:
        """Count ``batch``'s rejected rows (a reason in ``column``) by reason into ``self.rejected``."""
        for r in pc.value_counts(batch.column(column).drop_null()).to_pylist():
            self.rejected[r["values"]] = self.rejected.get(r["values"], 0) + int(r["counts"])

    def _task_timelines(
        self, source: chunks.TaskInput, own: Mapping[Any, tuple[np.ndarray, ...]]
    ) -> tuple[dict[Any, K.Timeline], bytes | None]:
        """The timelines of the task's workers, with the given ones: whole workers' from
        their commits in the task's own events (``own``), spread workers' from the timeline
        rows; and the state rows of the workers this task writes, as a blob (None: none)."""
        assert self.carried is not None
        spread, owned = source.timeline_commits(self.spec)
        commits = {**{w: c for w, c in own.items() if w not in spread}, **spread}
        timelines, rows = worker_timelines(
            self.spec.pipeline, commits, {w: s for w, s in self.carried.items() if w in commits}
        )
        wcol = self.spec.worker_col
        rows = [r for r in rows if (w := hashable(r[wcol] if wcol else 0)) not in spread or w in owned]
        blob = encode_blob(pa.Table.from_pylist(rows, schema=self.schemas["state"])) if rows else None
        return {**self.timelines, **timelines}, blob

    def _in_one_go(self, source: chunks.TaskInput) -> Iterator[pa.RecordBatch]:
        table = cast(pa.Table, source.table)
        source.table = None
        timelines: Mapping[Any, K.Timeline] = self.timelines
        side = SideBlobs()
        if self.carried is not None:
            table = with_event_columns(table, self.spec)
            timelines, workers = self._task_timelines(source, commit_summary(table, self.spec))
            if workers is not None:
                side.add("workers", workers)
        out = K.process(table, self.spec, timelines, self.flush, source.window_slice)
        del table
        self._add_outputs(side, out, with_state=True, window_slice=source.window_slice)
        side.add("counters", encode_blob(counters_table(out.counters_by_worker, side.rows, self.rejected)))
        yield side.batch(self.schema)

    def _in_pieces(self, source: chunks.TaskInput) -> Iterator[pa.RecordBatch]:
        """The spilled task: each piece's outputs handed back as soon as it is replayed."""
        timelines: Mapping[Any, K.Timeline] = self.timelines
        side = SideBlobs()
        if self.carried is not None:
            timelines, workers = self._task_timelines(source, source.commits)
            if workers is not None:
                side.add("workers", workers)
        counters: list[dict[str, dict[str, int]]] = []
        seen: set[Any] = set()
        for out, last, keys in chunks.replay_in_pieces(source, self.spec, timelines, self.flush):
            self._add_outputs(side, out, with_state=last, window_slice=source.window_slice)
            counters.append(out.counters_by_worker)
            seen |= keys
            yield side.batch(self.schema)
            side = SideBlobs(side.rows)
        merged = chunks.merged_counters(counters, seen, self.spec)
        side.add("counters", encode_blob(counters_table(merged, side.rows, self.rejected)))
        yield side.batch(self.schema)

    def _add_outputs(
        self, side: SideBlobs, out: K.KernelOutput, with_state: bool, window_slice: K.WindowSlice | None = None
    ) -> None:
        if out.late.num_rows:  # the late events' lateness alone, for percentiles in the driver
            side.add(
                LATENESS_COLLECTED if out.late.num_rows <= self.lateness_share else LATENESS_HELD,
                encode_blob(out.late.select(["lateness_ms"])),
            )
        outputs = [("aggregates", out.aggregates), ("late_events", out.late)]
        if with_state:
            state = out.state if window_slice is None else slices.shed_shared(out.state, window_slice)
            outputs.append(("state", state))
        for name, table in outputs:
            result = table.cast(self.schemas[name])
            side.rows[name] = side.rows.get(name, 0) + result.num_rows
            for part in blob_slices(result):
                side.add(name, encode_blob(part))


class SideBlobs:
    """A task's ``(SIDE_OUTPUT, SIDE_DATA)`` rows under way, and its output row counts."""

    def __init__(self, rows: dict[str, int] | None = None) -> None:
        self.names: list[str] = []
        self.blobs: list[bytes] = []
        self.rows: dict[str, int] = rows if rows is not None else {}

    def add(self, name: str, blob: bytes) -> None:
        self.names.append(name)
        self.blobs.append(blob)

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [pa.array(self.names, pa.string()), pa.array(self.blobs, pa.binary())], schema=schema
        )


#: A task's count of rejected rows with a reason, when it counts them: counter
#: ``rejected:<reason>`` (worker null).
REJECTED_COUNTER = "rejected:"


def counters_table(
    by_worker: Mapping[str, Mapping[str, int]], rows: Mapping[str, int], rejected: Mapping[str, int] | None = None
) -> pa.Table:
    """A task's counters as rows (worker, name, value): the kernel's per worker label
    (windowing.metrics.COUNTERS, zeros left out), the task's output row counts
    (``rows_<output>``, worker null) and the rejected rows it counted by reason
    (:data:`REJECTED_COUNTER`)."""
    out: list[tuple[str | None, str, int]] = [
        (worker, name, v) for worker, counters in by_worker.items() for name, v in counters.items() if v
    ]
    out += [(None, f"rows_{name}", rows.get(name, 0)) for name in ("aggregates", "late_events", "state")]
    out += [(None, REJECTED_COUNTER + reason, n) for reason, n in (rejected or {}).items()]
    worker, name, value = zip(*out)
    return pa.table(
        {
            "worker": pa.array(worker, pa.string()),
            "name": pa.array(name, pa.string()),
            "value": pa.array(value, pa.int64()),
        }
    )


# --------------------------------------------------------------------------- worker heap


def settle_worker() -> None:
    """In a Spark Python worker, once, at its first task: freeze the heap and keep freed
    memory for the next allocations (:func:`_freeze_heap`, :func:`keep_freed_memory`).
    Outside a Spark task (the driver, the tests' in-process harness) nothing happens.

    "Once" is this module's flag, not ``gc.get_freeze_count()``, which walks the list of
    frozen objects: 1-2 ms in a fresh process, ~13 ms in a worker some tasks on (a tenth
    of a 1 M-event replay's kernel CPU in Python, ``spark.sql.pyspark.udf.profiler``)."""
    global _settled
    if _settled or TaskContext.get() is None:
        return
    _settled = True
    _freeze_heap()
    keep_freed_memory()


#: Whether this process has settled (:func:`settle_worker`). A worker forked by PySpark's
#: daemon imports this module after the fork (the daemon runs no task), so starts unsettled.
_settled = False


def _freeze_heap() -> None:
    """Collect, then freeze the heap (``gc.freeze``).

    A reused worker runs a full ``gc.collect()`` after every task (PySpark's daemon), and
    each walks every object the imports made (pyarrow, NumPy, pandas, PySpark, rewindow:
    ~80,000 objects, 50 to 100 ms a collection). Frozen, they are no longer walked: the
    collections after each task see only what later tasks made. Measured at 1 M events
    (``bench/replay_bench.py --quick``): ~0.4 s of the Python workers' CPU a replay went
    to those collections. Objects are still freed by reference counting; only cycles among
    the frozen ones (made before the first task's start) are never collected.
    """
    gc.collect()
    gc.freeze()


#: glibc's ``mallopt`` parameters (malloc.h) and the values :func:`keep_freed_memory` sets.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: Allocations up to this size come from the heap, freed memory is given back to the
#: system past this much at its top, and the heap grows by this much more than asked.
KEEP_MMAP_BELOW, KEEP_TRIM_ABOVE, KEEP_TOP_PAD = 256 << 20, 512 << 20, 64 << 20


def keep_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep the memory NumPy frees for its next arrays (Linux with
    glibc; elsewhere nothing changes and this returns False).

    By default glibc serves a large allocation (from 128 KiB, a threshold it moves up to
    at most 32 MiB as such blocks are freed) with a fresh ``mmap`` and hands it back to
    the system when it is freed, and trims its heap's free top past 128 KiB: the kernel's
    column arrays (4 MB for 500,000 int64s) kept coming back as new memory, zeroed by the
    operating system page by page. At 1 M events (``bench/replay_bench.py --quick``) that
    was ~1 s of the workers' system CPU a replay, 40 % of their CPU; kept, 0.1 s. A worker
    then holds at most its peak memory between tasks (it gives back what lies free past
    :data:`KEEP_TRIM_ABOVE` at the top of its heap): the peak is the same.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its own allocator's defaults
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # An older glibc refuses a threshold over 32 MiB (its largest): then that one.
    mmap_set = mallopt(_M_MMAP_THRESHOLD, KEEP_MMAP_BELOW) == 1 or mallopt(_M_MMAP_THRESHOLD, 32 << 20) == 1
    trim_set = mallopt(_M_TRIM_THRESHOLD, KEEP_TRIM_ABOVE) == 1
    return bool(mmap_set and trim_set and mallopt(_M_TOP_PAD, KEEP_TOP_PAD) == 1)


# --------------------------------------------------------------------------- blobs


def encode_blob(table: pa.Table, compression: str | None = None) -> bytes:
    """``table`` as an Arrow IPC stream (``compression``: ``lz4`` or ``zstd`` buffers; the
    reader needs no option)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression) if compression else None
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return cast(bytes, sink.getvalue().to_pybytes())


def decode_blob(data: object) -> pa.Table:
    """The table of an Arrow IPC stream (:func:`encode_blob`): bytes or an Arrow buffer."""
    return pa.ipc.open_stream(pa.py_buffer(data) if not isinstance(data, pa.Buffer) else data).read_all()


class DecodeTask:
    """Turns a kernel output's IPC blobs back into its rows (zero-copy Arrow reads)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        settle_worker()
        for batch in batches:
            for data in batch.column(0):
                yield from decode_blob(data.as_buffer()).cast(self.schema).to_batches()


def output_schemas(spec: K.Spec) -> dict[str, pa.Schema]:
    """The Arrow schemas of the kernel's three outputs, by name."""
    return {"aggregates": spec.aggregates_schema(), "late_events": spec.late_schema(), "state": spec.state_schema()}


# --------------------------------------------------------------------------- job settings


#: Rows of an output per written file (and write task), at most.
ROWS_PER_FILE = 1_000_000
#: Rows a write task has at least, when an output is spread over idle slots (:func:`write_tasks`).
ROWS_PER_TASK = 150_000


def write_tasks(rows: int, most: int, slots: int | None) -> int:
    """Write tasks for an output of ``rows`` rows: one per :data:`ROWS_PER_FILE` rows, at
    most ``most``; more tasks than task ``slots`` are rounded up to whole waves (3 tasks on
    2 slots take two full waves; 4 tasks, each three quarters the size, two shorter ones).
    An output of fewer files than slots is spread over up to ``slots`` tasks of at least
    :data:`ROWS_PER_TASK` rows each, so that idle slots share its write (the 380,000
    windows of the 1 M-event bench: one task of 0.7 s, or two of 0.35 s)."""
    n = max(1, -(-rows // ROWS_PER_FILE))
    if slots and n < slots:
        n = max(n, min(slots, rows // ROWS_PER_TASK))
    if slots and n > slots:
        n = -(-n // slots) * slots
    return min(n, max(1, most))


def hold(spark: SparkSession, df: DataFrame) -> DataFrame:
    """``df`` persisted for the writes, planned with :data:`HOLD_CONF` (Spark reads the
    settings when the cache is planned: at persist time)."""
    with session_conf(spark, HOLD_CONF):
        return df.persist()


#: How the kernel's held output is planned:
#:
#: - without in-memory column compression: held rows are read back once or twice, so
#:   encoding every value to save memory is not worth its CPU here;
#: - without adaptive execution: the kernel's shuffle has the plan's own task count, which
#:   adaptive execution must keep anyway, so all it would add is a job per stage and a
#:   re-planning (one job instead of three for the kernel: docs/architecture.md, "One job
#:   for the kernel").
HOLD_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false", "spark.sql.adaptive.enabled": "false"}


#: Spark's default cap on the bytes of an Arrow batch handed to Python.
_ARROW_BATCH_BYTES_DEFAULT = ("67108864b", "64m", "67108864")
#: The value that turns the cap off: Spark then stops measuring the batch after every row.
_ARROW_BATCH_BYTES_OFF = "2147483647"
#: Rows per Arrow batch of the kernel's input (Spark's default: 10,000).
KERNEL_BATCH_ROWS = 100_000


def kernel_job_conf(spark: SparkSession) -> dict[str, str]:
    """Settings for the job that runs the kernel.

    Spark 4 caps each Arrow batch it hands to Python at
    ``spark.sql.execution.arrow.maxBytesPerBatch`` and, to do so, measures the batch after
    every row it adds: at 10 M events that measuring was ~45 % of the JVM time of the
    kernel stage (5 s of 26 s, bench/replay_bench.py at full size). Event rows are small,
    and batches stay bounded by ``maxRecordsPerBatch``, so the kernel's input goes without
    the byte cap. Its batches are :data:`KERNEL_BATCH_ROWS` rows instead of Spark's 10,000
    (the kernel reads every batch of its task before it starts: a tenth of the batches,
    each with its own round of Arrow messages, for ~7 MB of event rows a batch; the 1 M
    bench's kernel job took 1.92 s instead of 2.06, a median of six alternating replays).
    A value the session set itself is kept, for either. (The writes' input, Arrow blobs of
    about :data:`BLOB_BYTES` each, keeps both: the byte cap is what bounds their
    batches.)
    """
    conf: dict[str, str] = {}
    for key, defaults, ours in (
        ("spark.sql.execution.arrow.maxBytesPerBatch", _ARROW_BATCH_BYTES_DEFAULT, _ARROW_BATCH_BYTES_OFF),
        ("spark.sql.execution.arrow.maxRecordsPerBatch", ("10000",), str(KERNEL_BATCH_ROWS)),
    ):
        try:
            current = spark.conf.get(key)
        except Exception:  # noqa: BLE001 - a Spark without the setting: nothing to do
            continue
        if str(current).strip().lower() in defaults:
            conf[key] = ours
    return conf
