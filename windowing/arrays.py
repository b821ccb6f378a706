"""Small vectorised building blocks over NumPy arrays: segments, scans, searches.

A *segmented* array is a flat array plus a sorted, non-decreasing segment id per
element (e.g. one segment per key). Every helper here works on all segments at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from numpy.typing import NDArray

#: Minus infinity for watermarks and clocks that have not moved yet.
MIN_TIMESTAMP = np.iinfo(np.int64).min
#: Plus infinity, for "never".
MAX_TIMESTAMP = np.iinfo(np.int64).max


def sat_sub(values: np.ndarray, delta: int) -> np.ndarray:
    """``values - delta`` where MIN_TIMESTAMP stays MIN_TIMESTAMP (minus infinity)."""
    out = values - delta
    out[values == MIN_TIMESTAMP] = MIN_TIMESTAMP
    return out


def sat_add(values: np.ndarray, delta: int) -> np.ndarray:
    """``values + delta`` saturating at MAX_TIMESTAMP, MIN_TIMESTAMP kept."""
    out = values.astype(np.int64, copy=True)
    ok = (values != MIN_TIMESTAMP) & (values <= MAX_TIMESTAMP - delta)
    out[ok] = values[ok] + delta
    out[(values != MIN_TIMESTAMP) & ~ok] = MAX_TIMESTAMP
    return out


def starts_of(seg: np.ndarray) -> np.ndarray:
    """Indices where a new segment begins (``seg`` sorted)."""
    if len(seg) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], seg[1:] != seg[:-1])))


def dense_rank(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique values, rank of each value among them)."""
    uniq, inv = np.unique(values, return_inverse=True)
    return uniq, inv.astype(np.int64).reshape(-1)


def _seg_keys(values: np.ndarray, seg: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """Int64 keys ordered like the pairs (seg, value), minus infinity first in a segment:
    ``(keys, width, lo)`` with ``key = seg * width + (value - lo + 1)`` (0 for minus
    infinity), or None when the values span too wide a range for that (then callers rank
    the values first, which costs a sort)."""
    seg64 = seg.astype(np.int64)
    real = values != MIN_TIMESTAMP
    lo, hi = (int(values[real].min()), int(values[real].max())) if real.any() else (0, 0)
    width = hi - lo + 2
    if len(seg64) and (int(seg64.min()) < 0 or width * (int(seg64.max()) + 1) >= 2**62):
        return None
    return np.where(real, values - (lo - 1), 0) + seg64 * width, width, lo


def seg_cummax(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running maximum that restarts at every segment (``seg`` sorted).

    Values are shifted into disjoint ranges per segment (directly, or through their
    ranks when the range is too wide), so one ``np.maximum.accumulate`` never carries a
    maximum across segments.
    """
    if len(values) == 0:
        return values.copy()
    seg64 = seg.astype(np.int64)
    width: int | np.int64
    keyed = _seg_keys(values, seg64)
    if keyed is not None:
        enc, width, lo = keyed
        out = np.maximum.accumulate(enc) - seg64 * width
        return np.where(out == 0, MIN_TIMESTAMP, out + (lo - 1))
    uniq, rank = dense_rank(values)
    width = np.int64(len(uniq))
    enc = seg64 * width + rank
    cummax: np.ndarray = uniq[np.maximum.accumulate(enc) - seg64 * width]
    return cummax


def seg_searchsorted(table: np.ndarray, table_seg: np.ndarray, query: np.ndarray, query_seg: np.ndarray) -> np.ndarray:
    """For each query, the first index i of ``table`` in the query's segment with
    ``table[i] >= query`` (``side='left'``); ``len(table)`` or the next segment's first
    index when there is none — callers compare against the segment's end.

    ``table`` must be non-decreasing inside each segment, ``table_seg`` sorted.
    """
    if len(query) == 0:
        return np.zeros(0, dtype=np.int64)
    keyed = _seg_keys(np.concatenate([table, query]), np.concatenate([table_seg, query_seg]))
    if keyed is not None:
        enc = keyed[0]
        return np.searchsorted(enc[: len(table)], enc[len(table) :], side="left")
    uniq, rank = dense_rank(np.concatenate([table, query]))
    width = np.int64(len(uniq))
    enc_t = table_seg.astype(np.int64) * width + rank[: len(table)]
    enc_q = query_seg.astype(np.int64) * width + rank[len(table) :]
    found: NDArray[np.intp] = np.searchsorted(enc_t, enc_q, side="left")
    return found


def searchsorted_left(sorted_values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``np.searchsorted(sorted_values, wanted, side="left")`` for int64 arrays: by a table
    of counts when the values span a range no wider than a few times the lookups (batch
    ids of fixed intervals, one commit a second), else by binary search."""
    n = len(sorted_values)
    if not n or not len(wanted):
        return np.searchsorted(sorted_values, wanted, side="left")
    lo, hi = int(sorted_values[0]), int(sorted_values[-1])
    if hi - lo > 4 * (n + len(wanted)):
        return np.searchsorted(sorted_values, wanted, side="left")
    # below[v - lo] = how many values are < v, for v in lo .. hi + 1.
    below = np.cumsum(np.bincount(np.asarray(sorted_values, np.int64) - lo + 1, minlength=hi - lo + 2))
    return below[np.clip(np.asarray(wanted, np.int64) - lo, 0, hi - lo + 1)]


def seg_rank(seg: np.ndarray) -> np.ndarray:
    """0-based position of each element inside its segment (``seg`` sorted)."""
    n = len(seg)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    st = starts_of(seg)
    first = np.repeat(st, np.diff(np.append(st, n)))
    rank: NDArray[np.int64] = np.arange(n, dtype=np.int64) - first
    return rank


def order_codes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Order-preserving int64 codes of any sortable Arrow array; nulls get -1 (first)."""
    arr = _one_chunk(arr)
    ints = _null_free_ints(arr)
    return ints if ints is not None else codes_in(arr, sorted_unique(arr))


def sorted_unique(*arrays: pa.Array) -> pa.Array:
    """Sorted distinct non-null values of the given arrays (one common type)."""
    parts = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    parts = [a for a in parts if len(a)]
    if not parts:
        return arrays[0].slice(0, 0) if arrays else pa.array([])
    allv = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
    uniq = pc.unique(allv.drop_null())
    return uniq.take(pc.sort_indices(uniq))


def codes_in(arr: pa.Array, uniq: pa.Array) -> np.ndarray:
    """Index of each value of ``arr`` in ``uniq`` (sorted); -1 for nulls."""
    arr = _one_chunk(arr)
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    return _indices_or_minus_one(pc.index_in(arr, value_set=uniq))


def _one_chunk(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _null_free_ints(arr: pa.Array) -> NDArray[np.int64] | None:
    """An integer array without nulls is its own code; None for any other array."""
    if pa.types.is_integer(arr.type) and arr.null_count == 0:
        ints: NDArray[np.int64] = arr.to_numpy(zero_copy_only=False).astype(np.int64)
        return ints
    return None


def _indices_or_minus_one(idx: pa.Array) -> NDArray[np.int64]:
    codes: NDArray[np.int64] = pc.fill_null(idx, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes


def group_codes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Equal values get equal int64 codes (in no particular order); nulls get -1."""
    arr = _one_chunk(arr)
    ints = _null_free_ints(arr)
    return ints if ints is not None else _indices_or_minus_one(pc.dictionary_encode(arr).indices)


def value_order_keys(arr: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
    """``np.lexsort`` keys (least significant first) ordering values of any type.

    Nulls come first, then values in order: floats by IEEE total order (-0.0 before
    0.0, NaN last, so no two distinct floats tie), integers and temporal types by their
    integer value, strings and binaries bytewise, nested values by their ``repr``.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    valid = arr.is_valid().to_numpy(zero_copy_only=False).astype(np.int8)
    if pa.types.is_dictionary(t):
        return value_order_keys(arr.cast(t.value_type))
    if pa.types.is_floating(t):
        bits = pc.fill_null(arr.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False).view(np.int64)
        return [np.where(bits < 0, bits ^ np.int64(0x7FFF_FFFF_FFFF_FFFF), bits), valid]
    if pa.types.is_temporal(t) and t.bit_width in _INT_OF:
        arr, t = arr.view(_INT_OF[t.bit_width]), _INT_OF[t.bit_width]
    if (pa.types.is_integer(t) and t != pa.uint64()) or pa.types.is_boolean(t):
        return [pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False).astype(np.int64), valid]
    if pa.types.is_nested(t) or pa.types.is_interval(t):
        arr = pa.array([None if v is None else repr(v) for v in arr.to_pylist()], pa.string())
    return [order_codes(arr)]


_INT_OF = {32: pa.int32(), 64: pa.int64()}


def packed_keys(keys: list[np.ndarray]) -> list[np.ndarray]:
    """Sort keys (least significant first, as ``np.lexsort`` takes them) as one int64 of
    mixed-radix digits when their ranges fit (one sort pass instead of one per key), else
    as they are. Ties are the same either way.

    A key whose values lie on a lattice (window starts a slide apart, say) is first
    divided by the lattice's step: the order is the same and its digit far smaller."""
    if not len(keys[0]):
        return keys
    lows = [int(k.min()) for k in keys]
    steps = [1] * len(keys)
    spans = [int(k.max()) - low + 1 for k, low in zip(keys, lows)]
    if math.prod(spans) >= 2**62:
        if max(spans) > 2**63:  # the differences overflow int64: no lattice to find
            return keys
        steps = [max(1, int(np.gcd.reduce(k.astype(np.int64) - low))) for k, low in zip(keys, lows)]
        spans = [(span - 1) // step + 1 for span, step in zip(spans, steps)]
        if math.prod(spans) >= 2**62:
            return keys
    packed = np.zeros(len(keys[0]), np.int64)
    for k, low, step, span in zip(reversed(keys), reversed(lows), reversed(steps), reversed(spans)):
        digit = k.astype(np.int64) - low
        packed = packed * span + (digit // step if step > 1 else digit)
    return [packed]


def sort_order(keys: list[np.ndarray], stable: bool = False) -> np.ndarray:
    """The order by ``keys`` (``np.lexsort``'s, least significant first). Ties: in input
    order with ``stable``, else in no particular order (the caller orders them if it must)."""
    if not len(keys[0]):
        return np.zeros(0, dtype=np.int64)
    if len(keys) > 1:
        return np.lexsort(keys)
    return np.argsort(keys[0], kind="stable" if stable else None)


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, sorted (``np.unique`` without its extras)."""
    if not len(values):
        return values
    ordered = np.sort(values)
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
