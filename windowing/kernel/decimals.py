"""Exact decimal arithmetic for ``sum`` and ``avg`` of decimal columns.

Decimal values travel as unscaled Python integers in object arrays (read straight from
Arrow's 16-byte two's complement values), so sums are exact whatever their order or
split into partitions. Invariants: a sum past the output precision is null (Spark's
overflow), but the carried partial keeps it exactly (``split_overflow``), since a later
event may bring it back; averages round HALF_UP like Spark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def is_decimal(t: pa.DataType) -> bool:
    decimal: bool = pa.types.is_decimal(t)
    return decimal


def sum_dtype(t: pa.DataType) -> type[np.int64] | type[np.float64] | type[object]:
    """NumPy dtype of the sums of a column of type ``t``: exact int64 for integers, exact
    Python ints (unscaled) for decimals, float64 otherwise."""
    if pa.types.is_integer(t):
        return np.int64
    return object if is_decimal(t) else np.float64


def decimal_ints(arr: pa.Array | pa.ChunkedArray, scale: int | None = None) -> np.ndarray:
    """The unscaled values of a decimal array as Python ints (object array; 0 for nulls),
    at ``scale`` if given (exactly: a value that does not fit is an error).

    Read straight from the 16-byte two's complement values (through int64 when every
    value fits 64 bits), never through ``Decimal`` objects.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    t = arr.type
    if not pa.types.is_decimal128(t):
        arr = arr.cast(pa.decimal128(t.precision, t.scale))
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=object)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64, count=2 * (arr.offset + n))[2 * arr.offset :]
    lo, hi = raw[0::2], raw[1::2]
    if arr.null_count:
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        lo, hi = np.where(valid, lo, 0), np.where(valid, hi, 0)
    if (hi == (lo >> 63)).all():
        out = lo.astype(object)
    else:
        out = hi.astype(object) * (1 << 64) + lo.view(np.uint64).astype(object)
    if scale is not None and scale != t.scale:
        if scale > t.scale:
            out = out * 10 ** (scale - t.scale)
        else:
            f = 10 ** (t.scale - scale)
            if any(v % f for v in out.tolist()):
                raise ValueError(f"decimal values of scale {t.scale} do not fit scale {scale}")
            out = np.array([v // f for v in out.tolist()], dtype=object)
    return out


_M64 = (1 << 64) - 1


def decimal_array(x: np.ndarray, null: np.ndarray, t: pa.DataType) -> pa.Array:
    """A decimal128 array of type ``t`` from unscaled Python ints; null where ``null`` or
    where the value does not fit ``t``'s precision (an overflow)."""
    n = len(x)
    limit = 10**t.precision
    null = np.asarray(null, dtype=bool)
    if n:
        null = null | ~((x < limit) & (x > -limit)).astype(bool)
    v = np.where(null, 0, x)
    if n == 0 or ((v < 2**63) & (v >= -(2**63))).all():
        lo = v.astype(np.int64)
        hi = lo >> 63
    else:
        lo = (v & _M64).astype(np.uint64).view(np.int64)
        hi = (v >> 64).astype(np.int64)
    data = np.empty(2 * n, dtype=np.int64)
    data[0::2], data[1::2] = lo, hi
    validity = pa.array(~null, pa.bool_()).buffers()[1] if null.any() else None
    return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)], null_count=int(null.sum()))


def _div_half_up(a: int, b: int) -> int:
    """``a / b`` (b > 0) rounded to an integer, halves away from zero."""
    q, r = divmod(abs(a), b)
    q += 2 * r >= b
    return q if a >= 0 else -q


def decimal_avg(sums: np.ndarray, n: np.ndarray, sum_type: pa.DataType, t: pa.DataType) -> pa.Array:
    """Spark's avg of decimals: the exact ``sum / n`` rounded HALF_UP to ``t``'s scale; null
    when there is no value, when the sum overflows ``sum_type``, or the average ``t``.

    (Spark divides at 39 decimals rounding down, then rounds HALF_UP to the scale, which
    is the same: a half-way point of at most 38 decimals survives the truncation.)
    """
    shift = 10 ** (t.scale - sum_type.scale)
    limit = 10**sum_type.precision
    out = np.zeros(len(sums), dtype=object)
    null = np.asarray(n, dtype=np.int64) <= 0
    for i, (x, k) in enumerate(zip(sums.tolist(), np.asarray(n).tolist())):
        if k <= 0 or not -limit < x < limit:
            null[i] = True
        else:
            out[i] = _div_half_up(x * shift, k)
    return decimal_array(out, null, t)


def split_overflow(x: np.ndarray, t: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
    """Exact unscaled partial sums ``x`` as ``(low, high)`` with ``x = low + high *
    10^precision``, ``low`` fitting ``t`` and both of the sign of ``x`` (``high`` is 0 unless
    the sum outgrew ``t``; it stays far within int64: every event adds less than one)."""
    limit = 10**t.precision
    high = [(abs(v) // limit) * (1 if v >= 0 else -1) for v in x.tolist()]
    low = np.array([v - h * limit for v, h in zip(x.tolist(), high)], dtype=object)
    return low, np.array(high, dtype=np.int64)
