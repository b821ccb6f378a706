"""Run the engine's kernel and driver logic without Spark, on model-style rows.

The Spark runner's own steps (normalisation, the (worker, batch) summary) are redone
here in plain Python for integer-millisecond columns, so hundreds of generated cases
can check the kernel against the reference model in seconds. The Spark path itself is
checked against the model on a smaller sample (tests/windowing/runner/test_engine_vs_model.py).
"""

from __future__ import annotations

import random
import zlib

import pyarrow as pa

from tests.support.engine_harness import to_ms
from tests.support.reference_model import window_out_of_range
from windowing import kernel as K
from windowing.config import WatermarkStrategy
from windowing.kernel import slices as KS
from windowing.kernel.inputs import hashable
from windowing.runner import chunks, tasks
from windowing.runner.timelines import summary_timelines

ARROW_TYPES = {
    "arrival": pa.int64(),
    "event_time": pa.int64(),
    "batch": pa.int64(),
    "offset": pa.int64(),
    "worker": pa.int32(),
    "user": pa.string(),
    "amount": pa.float64(),
    "qty": pa.int64(),
    "tag": pa.string(),
    "name": pa.string(),
}


def column_type(column: str, decimals=None) -> pa.DataType:
    """The Arrow type of a generated column (``decimals``: {column: (precision, scale)})."""
    if decimals and column in decimals:
        return pa.decimal128(*decimals[column])
    return ARROW_TYPES[column]


class LocalState:
    def __init__(self, workers, rows: pa.Table):
        self.workers, self.rows = workers, rows


def local_replay(
    pipeline,
    rows,
    state: LocalState | None = None,
    flush_at_end=False,
    partitions=3,
    decimals=None,
    by_worker: bool | None = None,
    chunk_events: int | None = None,
    slices: int | None = None,
):
    """Replay ``rows`` through the kernel; ``decimals`` ({column: (precision, scale)}) makes
    those columns decimal128 instead of their usual type (values are ``Decimal``).

    ``by_worker``: partition by worker and let each task build its workers' timelines
    (the runner's ``tasks.KernelTask`` with ``carried``), as the Spark runner does when tasks
    hold whole workers; else partition by (worker, key) with the driver's timelines. None
    alternates between the two with the number of rows, so generated cases run both.

    ``chunk_events``: run every partition through the runner's ``tasks.KernelTask`` with that
    bound, so a partition of more rows is spilled and replayed in pieces of whole batches
    (windowing.runner.chunks); the summed counters are then in the returned state's ``counters``.

    ``slices``: replay every key's windows in that many slices, each a task of its own that
    gets the key's key-batch rows (windowing.kernel.slices), as the Spark runner does with
    a hot key; timelines from the driver's summary (``by_worker`` False).
    """
    if slices is not None:
        by_worker = False
        chunk_events = chunk_events or 10**9
    if by_worker is None:
        by_worker = len(rows) % 2 == 1
    types, valid, rejected = normalise_rows(pipeline, rows, state.workers if state else [], decimals)
    spec = K.Spec(pipeline=pipeline, input_types=types)
    src, w = pipeline.source, pipeline.window
    wcol = src.worker
    pick = min if w.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else max
    workers = state.workers if state else []
    if by_worker:
        with_events = {hashable(v[4]) for v in valid}
        carried = {hashable(s["worker"]): s for s in workers}
        timelines, worker_rows = summary_timelines(
            pipeline, summary_table([], pick), [s for s in workers if hashable(s["worker"]) not in with_events]
        )
    else:
        timelines, worker_rows = summary_timelines(pipeline, summary_table(valid, pick), workers)
    table = events_table(valid, types)
    if state is not None and state.rows.num_rows:
        table = pa.concat_tables([table, _state_rows(spec, state.rows, types)], promote_options="default")
    subs = key_partitions(table, [c for c in (wcol, *(() if by_worker else w.keys)) if c], partitions)
    counters: dict = {}
    if slices is not None:
        outs = [
            _task(spec, part, timelines, flush_at_end, None, worker_rows, chunk_events, counters)
            for sub in subs
            for part in _sliced(spec, sub, slices)
        ]
        counters = _resolved(counters)
    elif by_worker or chunk_events is not None:
        outs = [
            _task(
                spec, sub, timelines, flush_at_end, carried if by_worker else None, worker_rows, chunk_events, counters
            )
            for sub in subs
        ]
    else:
        outs = [K.process(sub, spec, timelines, flush_at_end) for sub in subs]
    aggs = pa.concat_tables([o.aggregates for o in outs]) if outs else spec.aggregates_schema().empty_table()
    late = pa.concat_tables([o.late for o in outs]) if outs else spec.late_schema().empty_table()
    st = pa.concat_tables([o.state for o in outs]) if outs else spec.state_schema().empty_table()
    new_state = LocalState(
        [
            {
                "worker": r.get(wcol) if wcol else 0,
                "batch": r["batch"],
                "watermark_ms": r["watermark_ms"],
                "clock_ms": r["clock_ms"],
            }
            for r in worker_rows
        ],
        st,
    )
    new_state.counters = counters
    return _ms_rows(aggs), _ms_rows(late), rejected, new_state


def normalise_rows(pipeline, rows, state_workers=(), decimals=None):
    """(input types, valid events, rejected rows) as the Spark runner's normalisation gives
    them: each valid event is ``(row, arrival ms, event ms, batch, worker)``."""
    columns = [c for c in ARROW_TYPES if any(c in r for r in rows)] or list(ARROW_TYPES)
    types = {c: column_type(c, decimals) for c in columns}
    src, w = pipeline.source, pipeline.window
    wcol = src.worker
    last = {ws["worker"]: ws["batch"] for ws in state_workers}
    valid, rejected = [], []
    for r in rows:
        arr = r.get(src.arrival_time)
        evt = r.get(w.event_time) if w.event_time else arr
        batch = r.get(src.batch_column) if src.batch_column else (None if arr is None else arr // src.batch_interval_ms)
        wv = r.get(wcol) if wcol else 0
        reason = None
        if arr is None:
            reason = "arrival time is null"
        elif w.event_time and evt is None:
            reason = "event time is null"
        elif evt is not None and window_out_of_range(w, evt):
            reason = "window out of range"
        elif src.batch_column and batch is None:
            reason = "batch is null"
        elif src.max_future_skew_ms is not None and evt - arr > src.max_future_skew_ms:
            reason = "FUTURE_SKEW"
        elif wv in last and last[wv] is not None and batch <= last[wv]:
            reason = "batch already committed"
        if reason:
            rejected.append({**{c: r.get(c) for c in columns}, "reason": reason})
        else:
            valid.append((r, arr, evt, batch, wv))
    return types, valid, rejected


SUMMARY_SCHEMA = pa.schema(
    [
        ("reason", pa.string()),
        ("__w", pa.int64()),
        ("__batch", pa.int64()),
        ("cand", pa.int64()),
        ("maxarr", pa.int64()),
        ("minarr", pa.int64()),
        ("n", pa.int64()),
    ]
)


def summary_table(valid, pick) -> pa.Table:
    """The (worker, batch) summary the Spark runner collects (``pick``: min or max)."""
    summary: dict = {}
    for _r, arr, evt, batch, wv in valid:
        key = (wv, batch)
        c, a, lo, n = summary.get(key, (evt, arr, arr, 0))
        summary[key] = (pick(c, evt), max(a, arr), min(lo, arr), n + 1)
    srows = [
        {"reason": None, "__w": wv, "__batch": b, "cand": c, "maxarr": a, "minarr": lo, "n": n}
        for (wv, b), (c, a, lo, n) in summary.items()
    ]
    return pa.Table.from_pylist(srows, schema=SUMMARY_SCHEMA)


def events_table(valid, types) -> pa.Table:
    """The kernel's input rows for the valid events (input columns and the internal ones)."""
    ev_cols = {c: [r.get(c) for r, *_ in valid] for c in types}
    ev_cols["__kind"] = [K.EVENT] * len(valid)
    ev_cols["__batch"] = [v[3] for v in valid]
    ev_cols["__arr"] = [v[1] for v in valid]
    ev_cols["__evt"] = [v[2] for v in valid]
    schema = pa.schema(
        [pa.field(c, t) for c, t in types.items()]
        + [
            pa.field("__kind", pa.int8()),
            pa.field("__batch", pa.int64()),
            pa.field("__arr", pa.int64()),
            pa.field("__evt", pa.int64()),
        ]
    )
    return pa.table(ev_cols, schema=schema)


def key_partitions(table: pa.Table, keycols, partitions: int) -> list[pa.Table]:
    """``table`` split by key into ``partitions`` tables (empty ones left out), each in a
    shuffled row order, as Spark hands a partition over."""
    part = [
        zlib.crc32(repr(tuple(table[c][i].as_py() for c in keycols)).encode()) % partitions
        for i in range(table.num_rows)
    ]
    out = []
    for p in range(partitions):
        sub = table.filter(pa.array([x == p for x in part], pa.bool_()))
        sub = sub.take(pa.array(random.Random(p + sub.num_rows).sample(range(sub.num_rows), sub.num_rows), pa.int64()))
        if sub.num_rows:
            out.append(sub)
    return out


def _task(
    spec, table, timelines, flush_at_end, carried, worker_rows, chunk_events=None, counters=None
) -> K.KernelOutput:
    """The engine's kernel task (holding whole workers with ``carried``); its worker rows go
    to ``worker_rows``, its counters are added to ``counters`` ({name: {worker label: n}})."""
    schemas = tasks.output_schemas(spec)
    task = tasks.KernelTask(spec, timelines, flush_at_end, {}, schemas, carried=carried, chunk_events=chunk_events)
    parts: dict[str, list[pa.Table]] = {}
    # Spark hands a task its rows in batches: small ones here, so a chunk bound can cut between them.
    for batch in task(table.to_batches(max_chunksize=2)):
        for name, blob in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            parts.setdefault(name, []).append(tasks.decode_blob(blob))
    worker_rows += [r for t in parts.get("workers", []) for r in t.to_pylist()]
    for t in parts.get("counters", []):
        for r in t.to_pylist():
            if r["worker"] is not None and counters is not None:
                per = counters.setdefault(r["name"], {})
                per[r["worker"]] = per.get(r["worker"], 0) + r["value"]

    def out(name):
        return pa.concat_tables(parts[name]) if name in parts else schemas[name].empty_table()

    return K.KernelOutput(out("aggregates"), out("late_events"), out("state"), {}, {})


def _sliced(spec, table: pa.Table, count: int) -> list[pa.Table]:
    """The tasks of ``table``'s keys replayed in ``count`` slices of their windows, each
    with the keys' key-batch rows marked with the slice (as the engine sends them)."""
    kb = KS.key_batch_rows(table, spec)
    out = []
    for i in range(count):
        marked = kb.append_column(chunks.KB_SLICE, pa.array([i] * kb.num_rows, pa.int32())).append_column(
            chunks.KB_SLICES, pa.array([count] * kb.num_rows, pa.int32())
        )
        part = KS.slice_table(table, marked, spec, K.WindowSlice.of(spec.window, i, count))
        out.append(
            part.take(
                pa.array(random.Random(i + part.num_rows).sample(range(part.num_rows), part.num_rows), pa.int64())
            )
        )
    return out


def _resolved(counters: dict) -> dict:
    """``{name: {worker: n}}`` with each slice fact counted once into its counter."""
    by_worker: dict = {}
    for name, per in counters.items():
        for worker, v in per.items():
            by_worker.setdefault(worker, {})[name] = v
    out: dict = {}
    for worker, named in KS.resolved(by_worker).items():
        for name, v in named.items():
            if v:
                out.setdefault(name, {})[worker] = v
    return out


def _state_rows(spec, st: pa.Table, types) -> pa.Table:
    keep = list(spec.id_cols)
    kind = {"key": K.STATE_KEY, "window": K.STATE_WINDOW, "emitted": K.STATE_EMITTED}
    cols = {c: st[c] for c in keep}
    for c in st.column_names:
        if c not in keep and c != "fingerprint":
            cols[K.STATE_PREFIX + c] = st[c]
    cols["__kind"] = pa.array([kind[k] for k in st["state_kind"].to_pylist()], pa.int8())
    return pa.table(cols)


def _ms_rows(t: pa.Table) -> list[dict]:
    out = []
    for r in t.to_pylist():
        for c in ("window_start", "window_end", "emit_time", "emit_watermark", "watermark"):
            if c in r and r[c] is not None:
                r[c] = to_ms(r[c])
        out.append(r)
    return out
