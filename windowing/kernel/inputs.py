"""Inputs: decode the kernel's Arrow table, order its events, give keys dense ids.

Algorithm: the internal columns (``__kind``, ``__arr``, ``__evt``, ``__batch``) are
computed where the engine left them out (:func:`with_event_columns`); keys get dense ids
by hashing (:class:`KeyIds`); events are sorted by (key, batch, arrival time, the
configured arrival order, then every other column: :func:`_break_ties`); per (key,
batch) the watermark after its commit is a segmented running maximum
(:class:`KeyBatches`).

Invariants: the event order is total on distinct rows and independent of the input's row
order; a key id's value carries no meaning (only equality); watermarks never go back.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing.arrays import (
    MIN_TIMESTAMP,
    group_codes,
    order_codes,
    packed_keys,
    sat_sub,
    seg_cummax,
    sort_order,
    starts_of,
    value_order_keys,
)
from windowing.config import WatermarkStrategy
from windowing.contract import ARRIVAL_MS_COLUMN, BATCH_COLUMN, EVENT_MS_COLUMN, KIND_COLUMN, STATE_PREFIX
from windowing.durations import DAY_MS

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from windowing.kernel.spec import Spec

# Row kinds of the kernel's input table (column ``__kind``). Defined here, below spec, so
# that spec can import the aggregates, which read the input table.
STATE_KEY, STATE_WINDOW, STATE_EMITTED, EVENT = 0, 1, 2, 3
#: A key-batch row: one (worker, key, batch) of a key whose windows are replayed in slices
#: (:mod:`windowing.kernel.slices`), with what every slice needs of the key's batches, its
#: events in other slices included: the watermark candidate, the greatest event time and
#: the greatest arrival time (columns :data:`KB_COLUMNS`).
KEY_BATCH = 4
KB_BATCH, KB_CAND, KB_MAXEV, KB_MAXARR = "__kb_batch", "__kb_cand", "__kb_maxev", "__kb_maxarr"
KB_COLUMNS = (KB_BATCH, KB_CAND, KB_MAXEV, KB_MAXARR)


def _ms_derivable(t: pa.DataType) -> bool:
    """Time types whose epoch milliseconds a task computes exactly like the engine's Spark
    expression (zoned timestamps, integers, dates; not strings or local timestamps, which
    need Spark's parser and session time zone)."""
    return (
        (pa.types.is_timestamp(t) and t.tz is not None)
        or pa.types.is_date32(t)
        or (pa.types.is_integer(t) and t != pa.uint64())
    )


def task_derived(spec: Spec) -> frozenset[str]:
    """Internal columns the kernel can compute from the input columns itself, so the engine
    need not compute and ship them (fewer columns through the shuffle and into Python)."""
    src, w, types = spec.pipeline.source, spec.window, spec.input_types
    out = set()
    if _ms_derivable(types[src.arrival_time]):
        out.add(ARRIVAL_MS_COLUMN)
        if src.batch_column is None:
            out.add(BATCH_COLUMN)
        if w.event_time is None:
            out.add(EVENT_MS_COLUMN)
    if w.event_time is not None and _ms_derivable(types[w.event_time]):
        out.add(EVENT_MS_COLUMN)
    if (
        src.batch_column is not None
        and pa.types.is_integer(types[src.batch_column])
        and types[src.batch_column] != pa.uint64()
    ):
        out.add(BATCH_COLUMN)
    return frozenset(out)


def _epoch_ms(col: pa.ChunkedArray) -> np.ndarray:
    """Epoch milliseconds (floored) of a time column; nulls (state rows) give 0."""
    arr = col.combine_chunks()
    t = arr.type
    ms: np.ndarray
    if pa.types.is_timestamp(t):
        v = pc.fill_null(arr.view(pa.int64()), 0).to_numpy()
        per_ms = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}[t.unit]
        ms = v * 1000 if per_ms is None else np.floor_divide(v, per_ms)
        return ms
    if pa.types.is_date32(t):
        ms = pc.fill_null(arr.view(pa.int32()), 0).to_numpy().astype(np.int64) * DAY_MS
        return ms
    ms = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy()
    return ms


def with_event_columns(table: pa.Table, spec: Spec) -> pa.Table:
    """The table with ``__kind``, ``__arr``, ``__evt`` and ``__batch`` (computing those the
    engine left out, see :func:`task_derived`), and every NaN of its key and worker columns
    the one NaN (:func:`one_nan`)."""
    src, w = spec.pipeline.source, spec.window
    names = table.column_names
    if KIND_COLUMN not in names:
        table = table.append_column(KIND_COLUMN, pa.array(np.full(table.num_rows, EVENT, np.int8)))
    elif table[KIND_COLUMN].null_count:
        table = table.set_column(
            names.index(KIND_COLUMN), KIND_COLUMN, pc.fill_null(table[KIND_COLUMN], np.int8(EVENT))
        )
    if ARRIVAL_MS_COLUMN not in names:
        arr = _epoch_ms(table[src.arrival_time])
        table = table.append_column(ARRIVAL_MS_COLUMN, pa.array(arr))
    if EVENT_MS_COLUMN not in names:
        evt = _epoch_ms(table[w.event_time]) if w.event_time else table[ARRIVAL_MS_COLUMN].to_numpy()
        table = table.append_column(EVENT_MS_COLUMN, pa.array(evt))
    for c in spec.id_cols:
        if c in names:
            table = table.set_column(names.index(c), table.schema.field(c), one_nan(table[c]))
    if BATCH_COLUMN not in names:
        if src.batch_column:
            batch = pc.fill_null(table[src.batch_column].cast(pa.int64()), 0).to_numpy()
        else:
            batch = np.floor_divide(table[ARRIVAL_MS_COLUMN].to_numpy(), cast(int, src.batch_interval_ms))
        table = table.append_column(BATCH_COLUMN, pa.array(batch))
    return table


def one_nan(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A float column with every NaN (any sign or payload) as the one NaN; other columns as
    they are. A key's or worker's identity is its bits but for this (docs/semantics.md
    section 1): Spark's shuffle (``doubleToLongBits``) and its writers already treat all
    NaNs as one, so ``-NaN`` and ``NaN`` must not be two keys here."""
    if not pa.types.is_floating(column.type):
        return column
    nan = pc.is_nan(column)
    if not pc.any(nan).as_py():
        return column
    return pc.if_else(nan, pa.scalar(float("nan"), column.type), column)


# =========================================================================== inputs


class KeyIds:
    """Dense ids for the (worker, key) pairs in the table, and their carried state."""

    def __init__(self, table: pa.Table, spec: Spec):
        self.table = table
        n = table.num_rows
        self.kind = table[KIND_COLUMN].to_numpy().astype(np.int8)
        codes = []
        if KEY_ID not in table.column_names:
            codes = [group_codes(table[c]) for c in spec.id_cols]
        if KEY_ID in table.column_names:  # ids of a table these rows were taken from: made dense again
            ids = as_int64(table[KEY_ID])
            seen = np.zeros(int(ids.max(initial=-1)) + 1, dtype=np.int64)
            seen[ids] = 1
            self.gid = (np.cumsum(seen) - 1)[ids]
        elif codes:
            self.gid = _combined_ids(codes)
        else:
            self.gid = np.zeros(n, dtype=np.int64)
        self.n = int(self.gid.max()) + 1 if n else 0
        first = np.full(self.n, n, dtype=np.int64)
        np.minimum.at(first, self.gid, np.arange(n, dtype=np.int64))
        self.rep_row = first  # a row of each key, to copy its worker/key values from
        if spec.worker_col:
            wvals = table[spec.worker_col].take(pa.array(first)).to_pylist()
        else:
            wvals = [0] * self.n
        self.worker_values = wvals
        self.wm0 = np.full(self.n, MIN_TIMESTAMP, dtype=np.int64)
        self.maxev0 = self.wm0.copy()
        self.maxarr0 = self.wm0.copy()
        rows = np.flatnonzero(self.kind == STATE_KEY)
        if len(rows):
            g = self.gid[rows]
            for arr, col in ((self.wm0, "watermark_ms"), (self.maxev0, "max_event_ms"), (self.maxarr0, "clock_ms")):
                v = state_column(table, col, rows)
                arr[g] = pc.fill_null(v, MIN_TIMESTAMP).to_numpy().astype(np.int64)

    def take_key_columns(self, gids: np.ndarray, spec: Spec) -> dict[str, pa.Array]:
        rows = pa.array(self.rep_row[gids])
        return {c: self.table[c].take(rows) for c in spec.id_cols}


def _combined_ids(codes: list[np.ndarray]) -> np.ndarray:
    """Dense ids of the distinct tuples of per-column codes (:func:`group_codes`: an
    integer column is its own code, of any sign and size), by hashing (no sort): the ids'
    order carries no meaning. The tuple is combined one column at a time, each part as a
    small non-negative code (:func:`_small`), so no two tuples mix to one value and the
    mixed value stays within int64; the combination is made dense again."""
    gid = _small(codes[0])
    for more in codes[1:]:
        part = _small(more)
        gid = _small(gid * (int(part.max(initial=0)) + 1) + part)
    return _dense(gid)


def _small(codes: np.ndarray) -> np.ndarray:
    """``codes`` as values in ``[0, len]``: shifted by one when they already lie in
    ``[-1, len)`` (a dictionary's indices, nulls -1; small integers), else made dense (an
    integer column's own values: negative or large ones)."""
    n = len(codes)
    if n == 0 or (int(codes.min()) >= -1 and int(codes.max()) < n):
        shifted: np.ndarray = codes + 1
        return shifted
    return _dense(codes)


def _dense(codes: np.ndarray) -> np.ndarray:
    dense: np.ndarray = pc.dictionary_encode(pa.array(codes, pa.int64())).indices.to_numpy().astype(np.int64)
    return dense


#: Optional input column: each event's place in the arrival order of a table its rows were
#: taken from (:func:`with_arrival_ranks`). Several replays of subsets of one table (other
#: keys, other events left out) then order their events by one sort of (key, rank).
ARRIVAL_RANK = "__arrival_rank"
#: Optional input column beside it: each row's (worker, key) id in that table.
KEY_ID = "__key_id"


class SortedEvents:
    """The events, sorted in arrival order per key."""

    def __init__(self, table: pa.Table, spec: Spec, keyset: KeyIds):
        rows = np.flatnonzero(keyset.kind == EVENT)
        src = spec.pipeline.source
        ranked = ARRIVAL_RANK in table.column_names
        # Only the sort columns, and only the event rows (state rows have nulls there).
        sub = table.select(
            [*([ARRIVAL_RANK] if ranked else src.arrival_order), ARRIVAL_MS_COLUMN, BATCH_COLUMN, EVENT_MS_COLUMN]
        )
        if len(rows) != table.num_rows:
            sub = sub.take(pa.array(rows))
        arr, batch = as_int64(sub[ARRIVAL_MS_COLUMN]), as_int64(sub[BATCH_COLUMN])
        if ranked:
            # By (key id, rank): a key's ranks are distinct, so the order is total.
            order = sort_order(packed_keys([as_int64(sub[ARRIVAL_RANK]), keyset.gid[rows]]))
        else:
            # (key, batch, arrival) in one sort (packed into an int64 when it fits); the
            # rare events equal in all three are then ordered by the configured arrival
            # order, computed for them alone (a second full sort cost ~4x the first).
            primary = packed_keys([arr, batch, keyset.gid[rows]])
            order = sort_order(primary)
            order = _break_ties(order, primary, sub, src.arrival_order, table, rows, spec)
        self.rows = rows[order]  # table row of each sorted event
        self.n = len(self.rows)
        self.g = keyset.gid[self.rows]
        self.batch = batch[order]
        self.arr = arr[order]
        self.t = as_int64(sub[EVENT_MS_COLUMN])[order]
        self.table = table


def with_arrival_ranks(table: pa.Table, spec: Spec) -> pa.Table:
    """The table with :data:`ARRIVAL_RANK`: each event's position in the arrival order of
    its key (:class:`SortedEvents`), state rows 0; and :data:`KEY_ID`. Any subset of the
    rows keeps the order and the keys (without hashing their columns again)."""
    table = table.drop_columns([c for c in (ARRIVAL_RANK, KEY_ID) if c in table.column_names])
    keys = KeyIds(table, spec)
    events = SortedEvents(table, spec, keys)
    rank = np.zeros(table.num_rows, np.int64)
    rank[events.rows] = np.arange(events.n, dtype=np.int64)
    return table.append_column(ARRIVAL_RANK, pa.array(rank)).append_column(KEY_ID, pa.array(keys.gid))


def _tied_runs(order: np.ndarray, keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The positions in ``order`` of events equal in every key to a neighbour, and a run
    number per position (equal for the events of one run of ties)."""
    if len(order) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    same = np.ones(len(order) - 1, dtype=bool)
    for key in keys:
        ks = key[order]
        same &= ks[1:] == ks[:-1]
    if not same.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tied = np.zeros(len(order), dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    pos = np.flatnonzero(tied)
    return pos, np.cumsum(np.concatenate(([True], ~same)))[pos]


def _break_ties(
    order: np.ndarray,
    keys: list[np.ndarray],
    sub: pa.Table,
    arrival_order: Sequence[str],
    table: pa.Table,
    rows: np.ndarray,
    spec: Spec,
) -> np.ndarray:
    """Order events equal in (key, batch, arrival) (``keys``, by which ``order`` sorts
    ``sub``'s rows) by the configured arrival order, then by their other columns.

    The contract's arrival order ends with "the row's remaining columns": runs of events
    tied in the arrival order too are sorted by every input column's value, columns taken
    by name, so the order is total on distinct rows and does not depend on how the input
    came. Only the tied events' values are read.
    """
    pos, run = _tied_runs(order, keys)
    if not len(pos):
        return order
    order = order.copy()
    at = pa.array(order[pos])
    arrival = [order_codes(sub[c].take(at)) for c in reversed(arrival_order)]
    by_arrival = np.lexsort([*arrival, run])
    order[pos] = order[pos][by_arrival]
    arrival, run = [k[by_arrival] for k in arrival], run[by_arrival]
    # Runs tied in the arrival order too: by every input column's value.
    local = np.arange(len(pos))
    still, still_run = _tied_runs(local, [*arrival, run])
    if not len(still):
        return order
    take = pa.array(rows[order[pos[still]]])
    sort_keys = []
    for c in sorted(spec.input_types, reverse=True):
        sort_keys += value_order_keys(table[c].take(take))
    sub_order = np.lexsort([*sort_keys, still_run])
    tied_at = pos[still]
    order[tied_at] = order[tied_at][sub_order]
    return order


def as_int64(col: pa.ChunkedArray) -> NDArray[np.int64]:
    ints: NDArray[np.int64] = col.to_numpy().astype(np.int64, copy=False)
    return ints


class KeyBatches:
    """One entry per (key, batch) with events: watermarks before and after its commit."""

    def __init__(self, sorted_events: SortedEvents, keyset: KeyIds, spec: Spec):
        w = spec.window
        reduce = np.minimum if w.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else np.maximum
        kb_rows = np.flatnonzero(keyset.kind == KEY_BATCH)
        if len(kb_rows):
            cand, maxev, maxarr = self._from_rows(kb_rows, sorted_events, keyset, reduce)
        else:
            if sorted_events.n:
                g, batch = sorted_events.g, sorted_events.batch
                change = np.concatenate(([True], (g[1:] != g[:-1]) | (batch[1:] != batch[:-1])))
            else:
                change = np.zeros(0, dtype=bool)
            self.start = np.flatnonzero(change)
            self.n = len(self.start)
            self.of_event = np.cumsum(change) - 1
            self.g = sorted_events.g[self.start]
            self.batch = sorted_events.batch[self.start]
            if self.n:
                cand = reduce.reduceat(sorted_events.t, self.start)
                maxev = np.maximum.reduceat(sorted_events.t, self.start)
                maxarr = np.maximum.reduceat(sorted_events.arr, self.start)
            else:
                cand = maxev = maxarr = np.zeros(0, dtype=np.int64)
        self.first_of_key = starts_of(self.g)
        self.key_first = np.full(keyset.n, -1, dtype=np.int64)
        self.key_last = np.full(keyset.n, -1, dtype=np.int64)
        self.key_first[self.g[self.first_of_key]] = self.first_of_key
        self.key_last[self.g[self.first_of_key]] = np.append(self.first_of_key[1:], self.n) - 1
        self.wm_after = self._running(cand, keyset.wm0)
        self.maxev_after = self._running(maxev, keyset.maxev0)
        self.maxarr_after = self._running(maxarr, keyset.maxarr0)
        wm_before = np.empty_like(self.wm_after)
        if self.n:
            wm_before[1:] = self.wm_after[:-1]
            wm_before[self.first_of_key] = keyset.wm0[self.g[self.first_of_key]]
        self.eff_before = sat_sub(wm_before, w.delay_ms)
        self.eff_after = sat_sub(self.wm_after, w.delay_ms)
        # The key's values at the end of this replay.
        has = self.key_last >= 0
        self.wm_final = keyset.wm0.copy()
        self.maxev_final = keyset.maxev0.copy()
        self.maxarr_final = keyset.maxarr0.copy()
        self.wm_final[has] = self.wm_after[self.key_last[has]]
        self.maxev_final[has] = self.maxev_after[self.key_last[has]]
        self.maxarr_final[has] = self.maxarr_after[self.key_last[has]]
        self.eff_final = sat_sub(self.wm_final, w.delay_ms)

    def _from_rows(
        self, kb_rows: np.ndarray, sorted_events: SortedEvents, keyset: KeyIds, reduce: np.ufunc
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The (key, batch) entries from key-batch rows (a sliced replay: the key's events
        are not all here, its batches are), rows of one (key, batch) reduced into one.
        ``start`` is then each entry's first event here (or where it would be)."""
        table = keyset.table
        g = keyset.gid[kb_rows]
        cols = [as_int64(table[c].take(pa.array(kb_rows))) for c in KB_COLUMNS]
        order = np.lexsort((cols[0], g))
        g, (batch, cand, maxev, maxarr) = g[order], [c[order] for c in cols]
        firsts = (
            np.flatnonzero(np.concatenate(([True], (g[1:] != g[:-1]) | (batch[1:] != batch[:-1]))))
            if len(g)
            else np.zeros(0, np.int64)
        )
        self.g, self.batch, self.n = g[firsts], batch[firsts], len(firsts)
        width = np.int64(
            int(max(batch.max(), sorted_events.batch.max(initial=0)))
            - int(min(batch.min(), sorted_events.batch.min(initial=0)))
            + 1
        )
        low = min(int(batch.min()), int(sorted_events.batch.min(initial=0)))
        code = self.g * width + (self.batch - low)
        event_code = sorted_events.g * width + (sorted_events.batch - low)
        self.of_event = np.searchsorted(code, event_code)
        if sorted_events.n and (
            np.any(self.of_event >= self.n) or np.any(code[np.minimum(self.of_event, self.n - 1)] != event_code)
        ):
            raise ValueError("key-batch rows do not cover every batch of the events (a sliced replay needs them all)")
        self.start = np.searchsorted(event_code, code)
        return (reduce.reduceat(cand, firsts), np.maximum.reduceat(maxev, firsts), np.maximum.reduceat(maxarr, firsts))

    def _running(self, per_batch: np.ndarray, initial: np.ndarray) -> np.ndarray:
        v = per_batch.astype(np.int64, copy=True)
        if self.n:
            f = self.first_of_key
            v[f] = np.maximum(v[f], initial[self.g[f]])
        return seg_cummax(v, self.g)


class _OneNaN(float):
    """NaN as a dict key equal to every NaN: a float NaN is not equal to itself, so each NaN
    object would be a key of its own. Equality by value survives pickling (timelines are
    made in the driver and sent to the tasks), where an identity would not."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, float) and math.isnan(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash("NaN")


_NAN_KEY = _OneNaN("nan")


def hashable(v: Any) -> Hashable:
    """A worker value as a dict key (lists and maps by their ``repr``, every NaN as one):
    how timelines and carried worker rows are looked up."""
    if isinstance(v, (list, dict)):
        return repr(v)
    return _NAN_KEY if isinstance(v, float) and v != v else v


def state_column(table: pa.Table, name: str, rows: np.ndarray) -> pa.Array:
    """State column ``name`` at ``rows`` (no state rows: the column may not exist)."""
    if len(rows) == 0:
        return pa.array([], pa.int64())
    return table[STATE_PREFIX + name].take(pa.array(rows)).combine_chunks()


# =========================================================================== groups
