"""Outputs: the emitted windows, the late (event, window) pairs, the new state rows and
the counters, as Arrow tables of the :class:`~windowing.kernel.spec.Spec`'s schemas.

Invariant: one row per (key, generation, window) in :class:`Groups`; the rows still
open become ``window`` state rows, the emitted ones that may reopen ``emitted`` counter
rows, and every key a ``key`` row with its watermark and clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa

from windowing import metrics
from windowing.arrays import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    group_codes,
)
from windowing.contract import (
    EMITTED_KIND,
    END_OF_INPUT,
    IDLE,
    KEY_KIND,
    MAX_DURATION,
    OPEN,
    REASON_NAMES,
    WATERMARK,
    WINDOW_KIND,
)
from windowing.kernel import slices
from windowing.kernel.inputs import KeyBatches, KeyIds, SortedEvents
from windowing.kernel.slices import WindowSlice
from windowing.kernel.spec import TS, Spec

if TYPE_CHECKING:
    from windowing.kernel.aggregates import Domains


class Groups:
    """Windows of one kind of output, one row per (key, generation, window).

    ``partials`` holds per aggregate its partial values (the partial dataclass of its
    :class:`~windowing.kernel.aggregates.Aggregator`), codes into ``domains``.
    """

    def __init__(self, spec: Spec, domains: Domains):
        self.spec = spec
        self.domains = domains
        # Per key (index: key id): windows created, idle flushes (windowing.metrics).
        self.created = np.zeros(0, dtype=np.int64)
        self.idle_flushes = np.zeros(0, dtype=np.int64)

    def set(
        self,
        key: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        reason: np.ndarray,
        emit_batch: np.ndarray,
        emit_watermark: np.ndarray,
        emission: np.ndarray,
        events: np.ndarray,
        partials: list[Any],
        reopenable: tuple[np.ndarray, ...] | None = None,
        *,
        emit_time: np.ndarray,
    ) -> None:
        """Set the rows, all arrays of one length (one entry per row).

        ``key``: the key id; ``start``/``end``: the window ``[start, end)`` in epoch ms; ``reason``:
        OPEN (carried to the next replay as state) or the emit reason; ``emit_batch``,
        ``emit_watermark``, ``emit_time``: the batch, effective watermark and worker clock of the
        emission (unused while OPEN); ``emission``: 1 for a window's first emission, n for
        its n-th (an open row: the number its emission will get); ``events``: accepted
        events so far; ``partials``: per aggregate, its partial values per row.
        ``reopenable``: (key, start, end, emissions) of emitted windows whose counters
        must be carried because a later event may reopen them.
        """
        self.key, self.start, self.end = key, start, end
        self.reason, self.emit_batch, self.emit_watermark = reason, emit_batch, emit_watermark
        self.emission = emission
        self.emit_time = emit_time  # the worker's clock at the emission (contract section 5)
        self.events, self.partials = events, partials
        self.reopenable = reopenable  # (g, ws, we, emissions) of emitted windows that may reopen

    def _agg_columns(self, sel: np.ndarray) -> dict[str, pa.Array]:
        return {
            agg.agg.name: agg.final(partial, sel, self.domains)
            for agg, partial in zip(self.spec.aggregators, self.partials)
        }

    def emitted_table(self, keyset: KeyIds, spec: Spec) -> pa.Table:
        sel = np.flatnonzero(self.reason != OPEN)
        cols = keyset.take_key_columns(self.key[sel], spec)
        cols["window_start"] = ts_array(self.start[sel])
        cols["window_end"] = ts_array(self.end[sel])
        cols.update(self._agg_columns(sel))
        names = np.array([None, *[REASON_NAMES[i] for i in range(1, 6)]], dtype=object)
        cols["emit_reason"] = pa.array(names[self.reason[sel]], pa.string())
        cols["emit_batch"] = pa.array(self.emit_batch[sel], pa.int64())
        cols["emit_time"] = ts_array(self.emit_time[sel])
        cols["emit_watermark"] = watermark_array(self.emit_watermark[sel])
        cols["emission"] = pa.array(self.emission[sel], pa.int64())
        return pa.table(cols, schema=spec.aggregates_schema())

    def state_table(self, keyset: KeyIds, spec: Spec) -> pa.Table:
        sel = np.flatnonzero(self.reason == OPEN)
        m = len(sel)
        cols = state_base(spec, keyset, self.key[sel], WINDOW_KIND)
        cols["window_start_ms"] = pa.array(self.start[sel], pa.int64())
        cols["window_end_ms"] = pa.array(self.end[sel], pa.int64())
        cols["emissions"] = pa.array(self.emission[sel] - 1, pa.int64())
        cols["events"] = pa.array(self.events[sel], pa.int64())
        for agg, partial in zip(spec.aggregators, self.partials):
            cols.update(agg.state_columns(partial, sel, self.domains))
        return fill_state(cols, m, spec)

    def emitted_counter_table(self, keyset: KeyIds, spec: Spec) -> pa.Table:
        assert self.reopenable is not None  # set by every replay's groups (not by snapshots)
        g, ws, we, em = self.reopenable
        cols = state_base(spec, keyset, g, EMITTED_KIND)
        cols["window_start_ms"] = pa.array(ws, pa.int64())
        cols["window_end_ms"] = pa.array(we, pa.int64())
        cols["emissions"] = pa.array(em, pa.int64())
        return fill_state(cols, len(g), spec)


#: 0001-01-01T00:00:00.000Z in epoch ms: the first representable time
#: (``windowing.runner.columns.MIN_EPOCH_MS``; the kernel imports nothing of Spark's).
FIRST_EPOCH_MS = -62_135_596_800_000


def watermark_array(ms: np.ndarray) -> pa.Array:
    """Effective watermarks as timestamps: null for minus infinity, and for one before
    0001-01-01 (``watermark - delayWindowClose`` of an event in the range's first
    ``delayWindowClose``), which decides everything as minus infinity does: it is before
    every window end and event time (docs/semantics.md section 1)."""
    ms = np.asarray(ms, dtype=np.int64)
    return ts_array(np.where(ms < FIRST_EPOCH_MS, MIN_TIMESTAMP, ms))


def ts_array(ms: np.ndarray) -> pa.Array:
    ms = np.asarray(ms, dtype=np.int64)
    mask = (ms == MIN_TIMESTAMP) | (ms == MAX_TIMESTAMP)
    return pa.array(np.where(mask, 0, ms) * 1000, type=pa.int64(), mask=mask).cast(TS)


def _i64(v: np.ndarray) -> pa.Array:
    v = np.asarray(v, dtype=np.int64)
    return pa.array(v, pa.int64(), mask=v == MIN_TIMESTAMP)


def state_base(spec: Spec, keyset: KeyIds, g: np.ndarray, kind: str) -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {
        "state_kind": pa.array([kind] * len(g), pa.string()),
        "fingerprint": pa.array([spec.pipeline.fingerprint()] * len(g), pa.string()),
    }
    cols.update(keyset.take_key_columns(g, spec))
    return cols


def fill_state(cols: dict[str, pa.Array], m: int, spec: Spec) -> pa.Table:
    schema = spec.state_schema()
    arrays = [cols[f.name] if f.name in cols else pa.nulls(m, f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def state_rows(spec: Spec, keyset: KeyIds, g: np.ndarray, kind: str, columns: Mapping[str, pa.Array]) -> pa.Table:
    """State rows of ``kind`` for the keys ``g`` (ids of ``keyset``), as the kernel writes
    them: the kind, the fingerprint and the key columns, then ``columns`` (by name), the
    other columns of :meth:`Spec.state_schema` null."""
    cols = state_base(spec, keyset, g, kind)
    cols.update(columns)
    return fill_state(cols, len(g), spec)


def key_state_rows(keyset: KeyIds, key_batches: KeyBatches, spec: Spec) -> pa.Table:
    g = np.arange(keyset.n)
    cols = state_base(spec, keyset, g, KEY_KIND)
    cols["watermark_ms"] = _i64(key_batches.wm_final)
    cols["max_event_ms"] = _i64(key_batches.maxev_final)
    cols["clock_ms"] = _i64(key_batches.maxarr_final)
    return fill_state(cols, keyset.n, spec)


# =========================================================================== aggregates


@dataclass(frozen=True)
class LatePairs:
    """The late (event, window) pairs: ``event`` (index in arrival order) was late for the
    window ``[start, end)`` (sessions: ``[t, t]``) against effective watermark ``watermark``."""

    event: np.ndarray
    start: np.ndarray
    end: np.ndarray
    watermark: np.ndarray

    def table(self, sorted_events: SortedEvents, spec: Spec) -> pa.Table:
        take = pa.array(sorted_events.rows[self.event]) if len(self.event) else pa.array([], pa.int64())
        cols = {c: sorted_events.table[c].take(take) for c in spec.late_input_columns()}
        cols["batch"] = pa.array(sorted_events.batch[self.event], pa.int64())
        cols["window_start"] = ts_array(self.start)
        cols["window_end"] = ts_array(self.end)
        cols["watermark"] = watermark_array(self.watermark)  # never before the range: nothing is late then
        cols["lateness_ms"] = pa.array(self.watermark - sorted_events.t[self.event], pa.int64())
        return pa.table(cols, schema=spec.late_schema())


def counters_table(
    keyset: KeyIds,
    sorted_events: SortedEvents,
    key_batches: KeyBatches,
    groups: Groups,
    snaps: Groups | None,
    late: LatePairs,
    spec: Spec,
    window_slice: WindowSlice | None = None,
) -> dict[str, dict[str, int]]:
    """This task's counters (:data:`windowing.metrics.COUNTERS`) per worker label.

    Every key is in exactly one task, so the driver sums them per worker and in total.
    Cost: a ``bincount`` per counter over keys, windows or late rows the replay already
    holds; one label per distinct worker, not per key. A slice of a key's windows
    (``window_slice``) counts its share, and facts for the counters about the whole key
    (:mod:`.slices`).
    """
    if not keyset.n:
        return {}
    if spec.worker_col:
        codes = group_codes(keyset.table[spec.worker_col].take(pa.array(keyset.rep_row)))
    else:
        codes = np.zeros(keyset.n, dtype=np.int64)
    _, first_key, worker_of = np.unique(codes, return_index=True, return_inverse=True)
    worker_of = worker_of.reshape(-1)
    nw = len(first_key)

    def of_keys(g: np.ndarray) -> np.ndarray:  # one per element: the element's key
        return np.bincount(worker_of[np.asarray(g, dtype=np.int64)], minlength=nw)

    def summed(per_key: np.ndarray) -> np.ndarray:  # per-key counts summed per worker
        return np.bincount(worker_of, weights=np.asarray(per_key, dtype=np.float64), minlength=nw).astype(np.int64)

    is_open = groups.reason == OPEN
    counted_events, late_events = sorted_events.g, sorted_events.g[np.unique(late.event)]
    if window_slice is not None:
        counted_events = sorted_events.g[window_slice.owns(slices.latest_start(sorted_events.t, spec.window))]
        # An event is late at all when its earliest window is (late windows are a prefix).
        earliest = slices.earliest_start(sorted_events.t[late.event], spec.window)
        late_events = sorted_events.g[late.event[late.start == earliest]]
    counts = {
        metrics.EVENTS: of_keys(counted_events),
        metrics.LATE_PAIRS: of_keys(sorted_events.g[late.event]),
        metrics.LATE_EVENTS: of_keys(late_events),
        metrics.WINDOWS_CREATED: summed(groups.created),
        **{
            metrics.CLOSED_PREFIX + REASON_NAMES[r]: of_keys(groups.key[groups.reason == r])
            for r in (WATERMARK, IDLE, MAX_DURATION, END_OF_INPUT)
        },
        metrics.SNAPSHOTS: of_keys(snaps.key) if snaps is not None else np.zeros(nw, np.int64),
        metrics.IDLE_KEYS_REMOVED: summed(groups.idle_flushes),
        metrics.KEYS_SEEN: of_keys(np.flatnonzero(key_batches.key_first >= 0)),
        metrics.KEYS_HELD: of_keys(np.unique(groups.key[is_open])),
        metrics.OPEN_WINDOWS: of_keys(groups.key[is_open]),
    }
    labels = [metrics.worker_label(keyset.worker_values[int(g)]) for g in first_key]
    out = {label: {name: int(v[i]) for name, v in counts.items()} for i, label in enumerate(labels)}
    if window_slice is not None:
        _slice_facts(out, labels, worker_of, keyset, groups, spec, window_slice)
    return out


def _slice_facts(
    out: dict[str, dict[str, int]],
    labels: list[str],
    worker_of: np.ndarray,
    keyset: KeyIds,
    groups: Groups,
    spec: Spec,
    window_slice: WindowSlice,
) -> None:
    """A slice's counters about whole keys, as facts (:mod:`.slices`): the keys it holds a
    window of, and the idle flushes (by emit batch and time) that closed one of its
    windows; ``unique_keys`` only in the home slice."""
    for counters in out.values():
        for name in slices.FACT_COUNTERS:
            counters[name] = 0
        if not window_slice.home:
            counters[metrics.KEYS_SEEN] = 0
    key_values = keyset.take_key_columns(np.arange(keyset.n), spec)
    worker = key_values[spec.worker_col].to_pylist() if spec.worker_col else [0] * keyset.n
    parts = [key_values[c].to_pylist() for c in spec.key_cols]
    key: list[Any] = parts[0] if len(parts) == 1 else list(zip(*parts)) if parts else [0] * keyset.n

    def add(counter: str, g: int, *about: Any) -> None:
        out[labels[worker_of[g]]][slices.fact(counter, *slices.key_token(worker[g], key[g]), *about)] = 1

    for g in np.unique(groups.key[groups.reason == OPEN]).tolist():
        add(metrics.KEYS_HELD, g)
    idle = np.flatnonzero(groups.reason == IDLE)
    for g, batch, time in {
        (int(a), int(b), int(c)) for a, b, c in zip(groups.key[idle], groups.emit_batch[idle], groups.emit_time[idle])
    }:
        add(metrics.IDLE_KEYS_REMOVED, g, batch, time)
