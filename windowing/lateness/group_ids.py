"""Common group ids for the rows of several Arrow tables keyed by the same columns
(worker, key, window bounds): one sort of packed codes. Pure NumPy/pyarrow."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from windowing.arrays import group_codes
from windowing.config import Pipeline


def key_columns(p: Pipeline) -> list[str]:
    return list(p.id_columns)


def keys_of(t: pa.Table, kcols: Sequence[str]) -> list[Any]:
    """``t``'s key columns for :func:`group_ids` (one constant column without any)."""
    return [t[c] for c in kcols] if kcols else [np.zeros(t.num_rows, np.int64)]


def group_ids(parts: list[list[Any]]) -> list[np.ndarray]:
    """Common ids for the rows of several tables keyed by the same columns: ``parts[i]`` is
    table i's key columns (Arrow arrays or int64 NumPy arrays, same order and types in
    every table). A null is a value like any other (docs/semantics.md section 1).

    The ids are dense and ordered as the tuples of the columns' codes (Arrow columns by
    :func:`group_codes`, NumPy ones by value): the columns are packed into one int64 as
    digits of a mixed radix, so one sort ranks them all, with a re-ranking only when the
    next digit would overflow."""
    sizes = [len(p[0]) if p else 0 for p in parts]
    enc = _packed(parts)
    if parts and parts[0]:
        _, inv = np.unique(enc, return_inverse=True)  # dense ids
        enc = inv.reshape(-1).astype(np.int64)
    return np.split(enc, np.cumsum(sizes)[:-1]) if parts else []


def groups_of(columns: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """One table's :func:`group_ids` (its key ``columns``) and the first row of each
    group, from the same sort."""
    _, first, inv = np.unique(_packed([columns]), return_index=True, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), first


def _packed(parts: list[list[Any]]) -> np.ndarray:
    """The rows of every table of ``parts`` as one int64 each, ordered as :func:`group_ids`
    orders them (not dense)."""
    sizes = [len(p[0]) if p else 0 for p in parts]
    ncols = len(parts[0]) if parts else 0
    enc = np.zeros(sum(sizes), dtype=np.int64)
    span = 1  # enc < span
    for j in range(ncols):
        codes, k = _column_codes([p[j] for p in parts])
        if span * k >= 2**62:
            _, inv = np.unique(enc, return_inverse=True)
            enc = inv.reshape(-1).astype(np.int64)
            span = int(enc.max(initial=0)) + 1
        enc = enc * k + codes
        span *= k
    return enc


def _column_codes(col: list[Any]) -> tuple[np.ndarray, int]:
    """One key column of every table as codes in ``0 .. k-1`` and ``k``, ordered as the
    Arrow codes of :func:`group_codes` (of the tables' rows in a row) or the NumPy values."""
    if isinstance(col[0], np.ndarray):
        codes = np.concatenate(col).astype(np.int64)
    else:
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in col]
        codes = group_codes(pa.concat_arrays(arrays))
    if not len(codes):
        return codes, 1
    lo, hi = int(codes.min()), int(codes.max())
    if hi - lo <= 4 * len(codes) + 1024:  # a small range: the offsets are the codes
        return codes - lo, hi - lo + 1
    _, inv = np.unique(codes, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    return inv, int(inv.max()) + 1
