"""A kernel task's rows, held in memory while they fit, else spilled to a local file and
replayed a bounded piece at a time.

Spark hands a task its partition as a stream of Arrow batches. Up to ``limit`` rows
(``spark.rewindow.eventsPerChunk``) they are kept and replayed in one kernel call, as
before. Past it, every batch is written, with the columns the kernel derives
(:func:`windowing.kernel.inputs.with_event_columns`), to an Arrow IPC file in the executor's
local folder (``SPARK_LOCAL_DIRS``, where Spark spills its own shuffle files), while the
events per batch are counted and, when the task builds its workers' timelines, their
commits summed up batch by batch. The task's batches are then cut into pieces of at most
``limit`` events (a batch is never split), and each piece is replayed from the state the
one before left (:mod:`windowing.kernel.pieces`): a replay in pieces equals a replay in
one go, so the rows are the same, and the task holds one piece's rows, its keys' state and
its workers' timelines (a few numbers per batch) at a time, whatever the size of a key.

Failure: the spill folder is removed when the task ends, however it ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Iterable, Iterator, Mapping, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import kernel as K
from windowing import metrics
from windowing.arrays import group_codes
from windowing.config import WatermarkStrategy
from windowing.contract import BATCH_COLUMN, KIND_COLUMN
from windowing.kernel import pieces
from windowing.kernel.clocks import commit_summary
from windowing.kernel.inputs import KB_BATCH, KB_CAND, KB_MAXARR, KB_MAXEV, KEY_BATCH, hashable, with_event_columns

#: ``__kind`` of a timeline row: one (worker, batch) commit of a worker spread over several
#: tasks, summed up by Spark (:func:`windowing.runner.timelines.split_timeline_rows`), in
#: these columns; ``TL_OWNER`` marks the copy of the task that writes the worker's state row.
TIMELINE_KIND = 9
TL_BATCH, TL_CAND, TL_MAX, TL_MIN, TL_OWNER = "__tl_batch", "__tl_cand", "__tl_max", "__tl_min", "__tl_owner"
TL_COLUMNS = (TL_BATCH, TL_CAND, TL_MAX, TL_MIN, TL_OWNER)
#: On the key-batch rows of a key replayed in slices (:mod:`windowing.kernel.slices`):
#: the task's slice and how many there are.
KB_SLICE, KB_SLICES = "__kb_slice", "__kb_slices"
#: The timeline and key-batch rows of a task, in packs
#: (:func:`windowing.runner.timelines.split_timeline_rows`): rows of their own, with one
#: struct column (the events carry it null, not a dozen columns, each of which costs in
#: the Arrow hand-over of every row): ``kind``
#: (:data:`TIMELINE_KIND` or ``kernel.inputs.KEY_BATCH``), ``owner`` (the task writes the worker's
#: state row), ``slice`` and ``slices`` (the task's slice, or null) and ``rows`` (a block
#: of rows as Arrow IPC bytes, :class:`PackRows`).
PACKED = "__packed"


#: How packs are written (the reader needs no option).
_PACK_IPC = pa.ipc.IpcWriteOptions(compression="zstd")


class PackRows:
    """Spark's grouped Arrow function that packs a group's rows (a worker's or a hot key's
    block of batches): one row of the ``header`` columns' values and ``__blob``, the other
    columns (``fields``, renamed ``names``) sorted by ``order`` as an Arrow IPC stream with
    zstd-compressed buffers (a pack is copied to every task of its worker: a timeline block
    shrinks ~4.5x, its numbers being close to each other). The bytes depend only on the
    rows, not the order they came in."""

    def __init__(self, header: list[str], fields: list[str], names: list[str], order: str) -> None:
        self.header, self.fields, self.names, self.order = header, fields, names, order

    def __call__(self, table: pa.Table) -> pa.Table:
        body = table.select(self.fields).rename_columns(self.names)
        body = body.sort_by([(self.names[self.fields.index(self.order)], "ascending")]).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, body.schema, options=_PACK_IPC) as writer:
            writer.write_table(body)
        head = table.select(self.header).slice(0, 1)
        return head.append_column("__blob", pa.array([sink.getvalue().to_pybytes()], pa.binary()))


def unpacked(blob: bytes | pa.Buffer) -> pa.Table:
    """The rows of a pack (:class:`PackRows`)."""
    return pa.ipc.open_stream(pa.py_buffer(blob) if isinstance(blob, bytes) else blob).read_all()


def spill_folder() -> str:
    """A new folder for a task's spilled rows: under the executor's first local folder
    (``SPARK_LOCAL_DIRS``, which Spark sets for its Python workers), else the system's
    temporary folder."""
    local = (os.environ.get("SPARK_LOCAL_DIRS") or "").split(",")[0].strip()
    return tempfile.mkdtemp(prefix="rewindow-task-", dir=local if local and os.path.isdir(local) else None)


class TaskInput:
    """A task's rows (columns under their real names, see :func:`windowing.runner.placement.kernel_input`).

    ``table`` holds them when there are at most ``limit``; else ``table`` is None and the
    rows are in a local Arrow file, read back a piece at a time (:meth:`piece`), with
    ``batches``/``counts`` (the events per batch, batches sorted) and, with
    ``summarise``, ``commits`` (each worker's commits, as
    :func:`windowing.kernel.clocks.commit_summary` gives them for the whole task).
    """

    def __init__(
        self,
        batches: Iterable[pa.RecordBatch],
        names: Mapping[str, str],
        spec: K.Spec,
        limit: int,
        summarise: bool = False,
    ) -> None:
        self.spec, self.names, self.limit, self.summarise = spec, names, limit, summarise
        self.table: pa.Table | None = None
        self.rows = 0
        self.folder: str | None = None
        self.path = ""
        self.commits: dict[Any, tuple[np.ndarray, ...]] = {}
        self.batches = np.zeros(0, np.int64)
        self.counts = np.zeros(0, np.int64)
        #: Timeline rows (:data:`TIMELINE_KIND`), taken out of the rows as they come.
        self.timeline_rows: list[pa.Table] = []
        #: The slice of its key's windows the task replays (None: whole keys).
        self.window_slice: K.WindowSlice | None = None
        #: Key-batch rows that came packed (:data:`PACKED`): added to every piece (their batches').
        self.key_batch_rows: pa.Table | None = None
        key_batches: list[pa.Table] = []
        self._schema_seen: pa.Schema | None = None
        held: list[pa.RecordBatch] = []
        writer: pa.ipc.RecordBatchFileWriter | None = None
        summaries: list[Mapping[Any, tuple[np.ndarray, ...]]] = []
        counted: list[tuple[np.ndarray, np.ndarray]] = []
        try:
            for batch in self._without_timelines(batches, key_batches):
                self.rows += batch.num_rows
                if writer is None:
                    held.append(batch)
                    if self.rows <= limit:
                        continue
                    self.folder = spill_folder()
                    self.path = os.path.join(self.folder, "rows.arrow")
                    pending, held = held, []
                else:
                    pending = [batch]
                for b in pending:
                    table = with_event_columns(self._named(pa.Table.from_batches([b])), spec)
                    if writer is None:
                        writer = pa.ipc.new_file(self.path, table.schema)
                        self._schema = table.schema
                    writer.write_table(table.cast(self._schema))
                    counted.append(pieces.batch_counts(table))
                    if summarise:
                        summaries.append(commit_summary(table, spec))
        except BaseException:
            if writer is not None:
                writer.close()
            self.close()
            raise
        if key_batches:
            self.key_batch_rows = pa.concat_tables(key_batches, promote_options="permissive")
        if writer is None:
            if held or self.key_batch_rows is not None:
                # A slice with no events of its own still replays its key's batches (its
                # home slice writes the key's state row): the rows' columns, none of them.
                empty = self._schema_seen.empty_table() if self._schema_seen is not None else None
                source = pa.Table.from_batches(held) if held else empty
                table = self._named(source) if source is not None else None
                self.table = self._with_key_batches(table, None, None)
            return
        writer.close()
        values = np.concatenate([v for v, _ in counted]) if counted else np.zeros(0, np.int64)
        counts = np.concatenate([c for _, c in counted]) if counted else np.zeros(0, np.int64)
        self.batches, inverse = np.unique(values, return_inverse=True)
        self.counts = np.bincount(inverse.reshape(-1), weights=counts, minlength=len(self.batches)).astype(np.int64)
        if summarise:
            minimum = spec.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME
            self.commits = pieces.merged_commits(summaries, minimum)

    def _without_timelines(
        self, batches: Iterable[pa.RecordBatch], key_batches: list[pa.Table]
    ) -> Iterator[pa.RecordBatch]:
        """The non-empty batches, the packed rows (:data:`PACKED`, the engine's only way
        of sending timeline rows) taken out and unpacked: their timeline rows to
        :attr:`timeline_rows`, their key-batch rows to ``key_batches``. The task's slice
        is read from the slice columns (of packed rows, or of key-batch rows that came as
        rows, as the kernel harness sends them), which are dropped."""
        for batch in batches:
            if not batch.num_rows:
                continue
            names = batch.schema.names
            if PACKED in names:
                packed = batch.column(names.index(PACKED))
                valid = pc.is_valid(packed)
                if pc.any(valid).as_py():
                    self._unpack(packed.filter(valid), key_batches)
                    batch = batch.filter(pc.invert(valid))
                batch = batch.drop_columns([PACKED])
                names = batch.schema.names
            if KB_SLICE in names and self.window_slice is None:
                self._note_slice(batch)
            batch = self._dropped(batch)
            if self._schema_seen is None:
                self._schema_seen = batch.schema
            if batch.num_rows:
                yield batch

    def _unpack(self, packs: pa.StructArray, key_batches: list[pa.Table]) -> None:
        """Packs (:data:`PACKED`): timeline rows to :attr:`timeline_rows` (a sliced
        worker's also as key-batch rows), key-batch rows to ``key_batches``; the task's
        slice from the first pack that names one."""
        for pack in packs.to_pylist():
            rows = unpacked(pack["rows"])
            if pack["slice"] is not None and self.window_slice is None:
                self.window_slice = K.WindowSlice.of(self.spec.window, int(pack["slice"]), int(pack["slices"]))
            kind = np.full(rows.num_rows, KEY_BATCH, np.int8)
            if pack["kind"] != TIMELINE_KIND:
                key_batches.append(rows.append_column(KIND_COLUMN, pa.array(kind)))
                continue
            timeline = rows.drop_columns([KB_MAXEV]).append_column(
                TL_OWNER, pa.array(np.full(rows.num_rows, bool(pack["owner"])))
            )
            self.timeline_rows.append(timeline)
            if pack["slice"] is not None:  # a sliced worker's timeline rows are its key's batches too
                kb = rows.drop_columns([TL_MIN]).rename_columns(
                    [
                        {TL_BATCH: KB_BATCH, TL_CAND: KB_CAND, TL_MAX: KB_MAXARR}.get(c, c)
                        for c in rows.drop_columns([TL_MIN]).column_names
                    ]
                )
                key_batches.append(kb.append_column(KIND_COLUMN, pa.array(kind)))

    def _with_key_batches(self, table: pa.Table | None, lo: int | None, hi: int | None) -> pa.Table:
        """``table`` with the packed key-batch rows of batches in ``[lo, hi)``."""
        kb = self.key_batch_rows
        if kb is None:
            return cast(pa.Table, table)
        batch = kb[KB_BATCH]
        if lo is not None:
            kb = kb.filter(pc.greater_equal(batch, lo))
            batch = kb[KB_BATCH]
        if hi is not None:
            kb = kb.filter(pc.less(batch, hi))
        if table is None:
            return kb
        return pa.concat_tables([table, kb], promote_options="permissive")

    @staticmethod
    def _dropped(batch: pa.RecordBatch) -> pa.RecordBatch:
        names = batch.schema.names
        return batch.drop_columns([c for c in (*TL_COLUMNS, KB_SLICE, KB_SLICES) if c in names])

    def _note_slice(self, batch: pa.RecordBatch) -> None:
        """The task's slice, from the first row that names it."""
        index = batch.column(batch.schema.names.index(KB_SLICE))
        if index.null_count < len(index):
            i = pc.drop_null(index)[0].as_py()
            count = pc.drop_null(batch.column(batch.schema.names.index(KB_SLICES)))[0].as_py()
            self.window_slice = K.WindowSlice.of(self.spec.window, int(i), int(count))

    def timeline_commits(self, spec: K.Spec) -> tuple[dict[Any, tuple[np.ndarray, ...]], set[Any]]:
        """The spread workers' commits from the timeline rows (as
        :func:`windowing.kernel.clocks.commit_summary` gives them), and the workers whose state
        row this task writes."""
        if not self.timeline_rows:
            return {}, set()
        rows = self._named(pa.concat_tables(self.timeline_rows))
        wcol = spec.worker_col
        codes = group_codes(rows[wcol]) if wcol else np.zeros(rows.num_rows, dtype=np.int64)
        cols = [rows[c].to_numpy().astype(np.int64) for c in (TL_BATCH, TL_CAND, TL_MAX, TL_MIN)]
        order = np.lexsort((cols[0], codes))
        codes, cols = codes[order], [c[order] for c in cols]
        owner = rows[TL_OWNER].to_numpy(zero_copy_only=False)[order]
        starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
        ends = np.append(starts[1:], len(codes))
        values = rows[wcol].take(pa.array(order[starts])).to_pylist() if wcol else [0] * len(starts)
        commits: dict[Any, tuple[np.ndarray, ...]] = {}
        owned: set[Any] = set()
        for v, a, b in zip(values, starts, ends):
            w = hashable(v)
            commits[w] = tuple(c[a:b] for c in cols)
            if owner[a:b].any():
                owned.add(w)
        return commits, owned

    def _named(self, table: pa.Table) -> pa.Table:
        return table.rename_columns([self.names.get(n, n) for n in table.column_names]) if self.names else table

    @property
    def spilled(self) -> bool:
        return self.table is None and self.folder is not None

    def ranges(self) -> list[tuple[int | None, int | None]]:
        """The pieces' batch ranges ``[lo, hi)`` (None: unbounded), in order."""
        starts = pieces.cuts(self.batches, self.counts, self.limit)
        return list(zip([None, *starts], [*starts, None]))

    def piece(self, lo: int | None, hi: int | None, first: bool) -> pa.Table:
        """The spilled events of batches in ``[lo, hi)``, and the carried state rows with the
        ``first`` piece."""
        # Read, not memory-mapped: a mapped file's touched pages count in the worker's
        # resident memory (measured: 3.1 GB for a 20 M-event task at 2 M a piece), read
        # batches are freed once filtered.
        with pa.OSFile(self.path) as source:
            reader = pa.ipc.open_file(source)
            parts = []
            for i in range(reader.num_record_batches):
                rb = reader.get_batch(i)
                kind = rb.column(KIND_COLUMN)
                batched = pc.or_(pc.equal(kind, K.EVENT), pc.equal(kind, KEY_BATCH))
                batch = pc.fill_null(rb.column(BATCH_COLUMN), 0)  # null on state rows
                if KB_BATCH in rb.schema.names:  # a key-batch row's batch
                    batch = pc.if_else(pc.equal(kind, KEY_BATCH), pc.fill_null(rb.column(KB_BATCH), 0), batch)
                keep = batched
                if lo is not None:
                    keep = pc.and_(keep, pc.greater_equal(batch, lo))
                if hi is not None:
                    keep = pc.and_(keep, pc.less(batch, hi))
                if first:
                    keep = pc.or_kleene(keep, pc.invert(batched))
                part = rb.filter(keep)
                if part.num_rows:
                    parts.append(part)
            return self._with_key_batches(pa.Table.from_batches(parts, schema=reader.schema), lo, hi)

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def replay_in_pieces(
    source: TaskInput, spec: K.Spec, timelines: Mapping[Any, K.Timeline], flush_at_end: bool
) -> Iterator[tuple[K.KernelOutput, bool, set[Any]]]:
    """Replay a spilled task's pieces in order; yields each piece's output, whether it is
    the last, and the (worker, key) pairs it saw events of. A piece's ``state`` is carried
    into the next one (only the last piece's is the task's). Its counters are the piece's
    own: :func:`merged_counters` adds them up."""
    carried: pa.Table | None = None
    ranges = source.ranges()
    for i, (lo, hi) in enumerate(ranges):
        last = i == len(ranges) - 1
        table = source.piece(lo, hi, first=i == 0)
        if carried is not None and carried.num_rows:
            table = pa.concat_tables([table, carried], promote_options="permissive")
        piece_timelines = {w: pieces.sliced_timeline(tl, lo, hi) for w, tl in timelines.items()}
        out = K.process(table, spec, piece_timelines, flush_at_end and last, source.window_slice)
        seen = pieces.keys_seen(table, spec, source.window_slice)
        del table
        if not last:
            carried = pieces.state_input_rows(out.state, spec)
        yield out, last, seen


def merged_counters(
    outputs: list[dict[str, dict[str, int]]], seen: Iterable[tuple[Any, ...]], spec: K.Spec
) -> dict[str, dict[str, int]]:
    """The task's counters per worker label, from its pieces' (in order) and the keys they saw."""
    per_label: dict[str, int] = {}
    for key in seen:
        label = metrics.worker_label(key[0] if spec.worker_col else 0)
        per_label[label] = per_label.get(label, 0) + 1
    return pieces.merged_counters(outputs, per_label)
