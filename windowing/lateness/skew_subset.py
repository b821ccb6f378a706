"""The skew-free variant replayed only where it can differ from the configured replay.

:func:`skew_dirty_rows` finds the keys whose skew-free replay may differ (a skewed event,
another carried state, a worker whose skew-free timeline has other commits); the configured
replay of the other keys stands for theirs, with emit times read from the skew-free
timeline (:func:`skew_free_from`). Pure NumPy/pyarrow, called by
:func:`windowing.lateness.whatif.analyse`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import kernel as K
from windowing.config import Pipeline
from windowing.contract import KIND_COLUMN, REASON_NAMES, WATERMARK, WINDOW_KIND
from windowing.lateness.group_ids import group_ids, key_columns
from windowing.lateness.variants import Variant, WhatIf

#: The share of the events above which the skew-free variant is one whole pass (replaying
#: the dirty keys twice, under both variants, costs more). Skewed events tend to fall on
#: the busiest keys, so a small share of dirty keys can hold most of a task's events and
#: the subset still cost less than a whole pass (measured in docs/lateness.md).
SKEW_SUBSET_MAX_SHARE = 0.8


def skew_dirty_rows(
    table: pa.Table,
    wi: WhatIf,
    v: Variant,
    changes: Mapping[Any, np.ndarray | None],
    is_event: np.ndarray,
    skewed: np.ndarray,
    variant_of: np.ndarray,
) -> np.ndarray | None:
    """The rows of the keys whose skew-free replay ``v`` can differ from their configured
    one (the *dirty* keys, by key value under every worker); None where a key's skew-free
    replay is not provably its configured one (then every key is replayed). ``changes``:
    :func:`clock_changes_by_worker`.

    Without an idle timeout a key's replay reads nothing of other keys but its worker's
    clock at its own commits (the emit times; and the worker's last commit and clock, which
    end-of-input flushes read). So a key's skew-free replay is its configured replay (the
    lean outputs of the configured strategy, mode and delay: the same windows, closes, late
    pairs and counters, the count partial of an open window being its ``events``) when it
    has no skewed event here and carried the same state under both variants, with each
    emit time read from its worker's skew-free timeline (:func:`_free_emit_times`; a
    worker whose skew-free timeline has another last commit or clock, or other commits,
    makes all its keys dirty). With an idle timeout (a session's gap is one) a skewed event
    moves its worker's clocks that idleness reads, for every key of the worker: None.
    """
    p = wi.pipeline
    # The rows of every key sharing a value of this column with a dirty key: for a key of
    # several columns, its first (a superset of the dirty keys, as the same key of another
    # worker is).
    kcol = p.window.keys[0] if p.window.keys else p.source.worker
    if not wi.skew_subset or p.window.idle_timeout_ms is not None or kcol is None or not is_event.any():
        return None
    dirty = is_event & skewed
    # The workers whose skew-free timeline has other commits (with the same commits, the
    # emit times are remapped: _free_emit_times).
    for worker, changed in changes.items():
        if changed is not None:
            continue
        if p.source.worker and worker is not None and not isinstance(worker, (str, int, float, bool)):
            return None
        dirty |= _of_worker(table, p, worker)
    # The carried state: keys whose rows differ between the two variants.
    dirty |= _state_changes(table, wi, v, variant_of)
    if dirty.any():
        values = pc.unique(table[kcol].filter(pa.array(dirty)))
        dirty = pc.is_in(table[kcol], value_set=values, skip_nulls=False).to_numpy(zero_copy_only=False).astype(bool)
        if int((dirty & is_event).sum()) > SKEW_SUBSET_MAX_SHARE * int(is_event.sum()):
            return None  # most keys: one whole pass costs less
    return cast(np.ndarray, dirty)


def _of_worker(table: pa.Table, p: Pipeline, worker: Any) -> np.ndarray:
    """The rows of ``table`` of one worker (every row without a worker column)."""
    if not p.source.worker:
        return np.ones(table.num_rows, bool)
    col = table[p.source.worker]
    of_worker = pc.is_null(col) if worker is None else pc.fill_null(pc.equal(col, worker), False)
    return np.asarray(of_worker.to_numpy(zero_copy_only=False), dtype=bool)


def _free_emit_times(
    aggregates: pa.Table, wi: WhatIf, v: Variant, changes: Mapping[Any, np.ndarray | None]
) -> pa.Table:
    """The configured replay's ``aggregates`` of clean keys (:func:`skew_dirty_rows`) with
    the emit times the skew-free replay ``v`` gives them: a WATERMARK close is emitted at
    the same commit, whose worker clock is read from the skew-free timeline instead (the
    workers left clean have the same commits and last clock under both; ``changes``:
    :func:`clock_changes_by_worker`)."""
    free = wi.timelines[(v.strategy.value, True)]
    if not aggregates.num_rows:
        return aggregates
    column = aggregates["emit_time"].combine_chunks()
    micros = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False).copy()
    changed = False
    watermark = pc.fill_null(pc.equal(aggregates["emit_reason"], REASON_NAMES[WATERMARK]), False)
    watermark = np.asarray(watermark.to_numpy(zero_copy_only=False), dtype=bool)
    batch = pc.fill_null(aggregates["emit_batch"], 0).to_numpy()
    for worker, bad in changes.items():
        if bad is None or not len(bad):
            continue
        rows = np.flatnonzero(_of_worker(aggregates, wi.pipeline, worker) & watermark & np.isin(batch, bad))
        if not len(rows):
            continue
        tl = free[worker]
        micros[rows] = np.asarray(tl.clock)[np.searchsorted(np.asarray(tl.batches), batch[rows])] * 1000
        changed = True
    if not changed:
        return aggregates
    i = aggregates.schema.get_field_index("emit_time")
    mask = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return aggregates.set_column(i, aggregates.field(i), pa.array(micros, pa.int64(), mask=mask).cast(column.type))


def replay_in_parts(
    table: pa.Table, wi: WhatIf, v: Variant, parts: Sequence[np.ndarray], rows: np.ndarray
) -> list[K.KernelOutput | None]:
    """``v``'s replay of ``rows`` (a mask), in ``parts`` (masks of whole keys): one
    output per part (None: the part holds no row)."""
    spec, timelines = wi.spec(v), wi.variant_timelines(v)
    outs: list[K.KernelOutput | None] = []
    for part in parts:
        keep = part & rows
        outs.append(K.process(table.filter(pa.array(keep)), spec, timelines, wi.flush_at_end) if keep.any() else None)
    return outs


def concat_outputs(
    parts: Sequence[K.KernelOutput], cut: Sequence[str] | None = None, late_schema: pa.Schema | None = None
) -> K.KernelOutput:
    """The outputs of disjoint sets of keys as one replay's (row order aside)."""
    counters: dict[str, int] = {}
    by_worker: dict[str, dict[str, int]] = {}
    for o in parts:
        counters = _add_counters(counters, o.counters)
        for w, c in o.counters_by_worker.items():
            by_worker[w] = _add_counters(by_worker.get(w, {}), c)
    aggs = [o.aggregates.select(list(cut)) if cut else o.aggregates for o in parts]
    late = [o.late.cast(late_schema) if late_schema else o.late for o in parts]
    return K.KernelOutput(
        pa.concat_tables(aggs), pa.concat_tables(late), pa.concat_tables([o.state for o in parts]), counters, by_worker
    )


def skew_free_from(
    clean: K.KernelOutput | None,
    dirty: K.KernelOutput | None,
    wi: WhatIf,
    v: Variant,
    changes: Mapping[Any, np.ndarray | None],
) -> K.KernelOutput:
    """The skew-free replay ``v``: the configured replay of the clean keys as the lean
    replay writes it (see :func:`skew_dirty_rows`), and its own replay of the dirty ones.
    Its aggregates are cut to what the sums read (``window_end``, ``emit_reason``,
    ``emit_time``), as a lean variant's."""
    spec = wi.spec(v)
    parts = []
    if clean is not None:
        parts.append(
            K.KernelOutput(
                _free_emit_times(clean.aggregates, wi, v, changes),
                clean.late.select(spec.late_schema().names),
                _as_lean_state(clean.state, spec),
                clean.counters,
                clean.counters_by_worker,
            )
        )
    if dirty is not None:
        parts.append(dirty)
    if not parts:  # no event and no carried state in this task
        return K.KernelOutput(
            spec.aggregates_schema().empty_table().select(["window_end", "emit_reason", "emit_time"]),
            spec.late_schema().empty_table(),
            spec.state_schema().empty_table(),
        )
    return concat_outputs(parts, cut=["window_end", "emit_reason", "emit_time"], late_schema=spec.late_schema())


def clock_changes_by_worker(wi: WhatIf, v: Variant) -> dict[Any, np.ndarray | None]:
    """:func:`_clock_changes` of every worker between the configured and the skew-free
    timelines of ``v``'s strategy."""
    configured, free = wi.timelines[(v.strategy.value, False)], wi.timelines[(v.strategy.value, True)]
    return {
        worker: _clock_changes(configured.get(worker), free.get(worker))
        for worker in dict.fromkeys([*configured, *free])
    }


def _clock_changes(configured: K.Timeline | None, free: K.Timeline | None) -> np.ndarray | None:
    """The batches of a worker where its skew-free timeline's clock after the commit (the
    emit time of what the commit closes) is not its configured timeline's; None: the whole
    worker (its last commit, carried clock or batches differ). The clock before a commit is
    read by ``atAggregate`` snapshots only, which neither replay emits (``atWindowEnd``)."""
    if configured is None or free is None:
        return None if (configured is not None or free is not None) else np.zeros(0, np.int64)
    if (configured.last_batch, configured.last_clock, configured.batch0, configured.clock0) != (
        free.last_batch,
        free.last_clock,
        free.batch0,
        free.clock0,
    ):
        return None
    cb, fb = np.asarray(configured.batches), np.asarray(free.batches)
    if not len(fb):
        return np.zeros(0, np.int64)
    at = np.searchsorted(cb, fb)
    if (at >= len(cb)).any() or (cb[np.minimum(at, len(cb) - 1)] != fb).any():
        return None
    changed: np.ndarray = fb[configured.clock[at] != free.clock]
    return changed


#: State columns a lean replay shares with the configured one (the rest are partials).
_SHARED_STATE = (
    "batch",
    "watermark_ms",
    "clock_ms",
    "max_event_ms",
    "window_start_ms",
    "window_end_ms",
    "emissions",
    "events",
)


def _state_changes(table: pa.Table, wi: WhatIf, v: Variant, variant_of: np.ndarray) -> np.ndarray:
    """Rows of the carried state whose key carried other rows under ``v`` than under the
    configured variant (the shared columns, and a lean window's count partial against its
    ``events``)."""
    out = np.zeros(table.num_rows, bool)
    rows = [np.flatnonzero(variant_of == wi.variants.index(u)) for u in (wi.full, v)]
    if not (len(rows[0]) or len(rows[1])):
        return out
    kcols = key_columns(wi.pipeline)
    (count,) = wi.spec(v).pipeline.aggregates
    partial = K.STATE_PREFIX + f"partial_{count.name}"
    parts = []
    for i, r in enumerate(rows):
        t = table.take(pa.array(r))
        kind = t[KIND_COLUMN].combine_chunks()
        cols: list[Any] = [t[c] for c in kcols] + [kind]
        cols += [
            t[K.STATE_PREFIX + c] if K.STATE_PREFIX + c in t.column_names else pa.nulls(len(r), pa.int64())
            for c in _SHARED_STATE
        ]
        if i == 0:  # the count partial a lean replay would carry: a window's events
            events = cols[-1]
            cols.append(pc.if_else(pc.equal(kind, K.STATE_WINDOW), events, pa.scalar(None, pa.int64())))
        else:
            cols.append(t[partial].cast(pa.int64()) if partial in t.column_names else pa.nulls(len(r), pa.int64()))
        parts.append([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols])
    ids = group_ids(parts)
    out[rows[0][~np.isin(ids[0], ids[1])]] = True
    out[rows[1][~np.isin(ids[1], ids[0])]] = True
    return out


def _as_lean_state(state: pa.Table, spec: K.Spec) -> pa.Table:
    """Configured state rows as the lean replay ``spec`` writes them: the shared columns,
    its fingerprint, and its count partial (a window's events)."""
    (count,) = spec.pipeline.aggregates
    schema = spec.state_schema()
    n = state.num_rows
    cols = []
    for f in schema:
        if f.name == "fingerprint":
            cols.append(pa.array([spec.pipeline.fingerprint()] * n, f.type))
        elif f.name == f"partial_{count.name}":
            cols.append(
                pc.if_else(
                    pc.equal(state["state_kind"], WINDOW_KIND), state["events"], pa.scalar(None, pa.int64())
                ).cast(f.type)
            )
        elif f.name in state.column_names:
            cols.append(state[f.name].cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _add_counters(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: int(a.get(k, 0)) + int(b.get(k, 0)) for k in dict.fromkeys([*a, *b])}
