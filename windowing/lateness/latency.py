"""Exact emission-latency percentiles over every task's latencies, in two passes (the
tasks' bucketed counts locate each percentile's rank, then only the latencies of those
buckets are fetched): :func:`latency_figures`, on Spark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from windowing.lateness.tables import latency_bucket
from windowing.runner.api import decode_blob, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

QUANTILES = (0.5, 0.9, 0.99)


def latency_figures(
    spark: SparkSession, exact: DataFrame, coarse: pa.Table | None = None
) -> tuple[dict[str, dict[str, Any]], dict[str, DataFrame]]:
    """Exact emission-latency percentiles (linear interpolation, as ``numpy.percentile``),
    greatest latency and window count per variant, in two passes over the tasks' outputs.

    ``exact``: a DataFrame of one binary column ``data``, Arrow IPC blobs of (variant,
    latency_ms, windows); ``coarse``: the same in buckets, (variant, bucket, windows,
    max_ms) rows (``whatif.latency_bucket``; the tasks' own, summed here), else counted
    from ``exact`` by a first pass. The summed buckets locate the two ranks each percentile
    interpolates between; a second pass fetches only the latencies of those buckets.
    Returns the figures by variant label, and the table ``latency_exact`` (the blobs, so a
    range of partitions can do the same).
    """
    if coarse is None:
        coarse = exact.mapInArrow(_BucketTask(), spark_schema(_COARSE_SCHEMA)).toArrow()
    merged: dict[tuple[str, int], list[int]] = {}
    for label, b, n, mx in zip(*(coarse[c].to_pylist() for c in ("variant", "bucket", "windows", "max_ms"))):
        acc = merged.setdefault((label, b), [0, mx])
        acc[0] += n
        acc[1] = max(acc[1], mx)
    by_variant: dict[str, list[tuple[int, int, int]]] = {}
    for (label, b), (n, mx) in sorted(merged.items()):
        by_variant.setdefault(label, []).append((b, n, mx))
    wanted: dict[str, dict[int, int]] = {}  # label -> rank -> bucket
    starts: dict[tuple[str, int], int] = {}  # (label, bucket) -> rank of its first value
    for label, rows in by_variant.items():
        cum = np.cumsum([n for _, n, _ in rows])
        total = int(cum[-1])
        for b, c0 in zip((b for b, _, _ in rows), np.concatenate([[0], cum[:-1]])):
            starts[(label, b)] = int(c0)
        for q in QUANTILES:
            pos = (total - 1) * q
            for r in {int(np.floor(pos)), int(np.ceil(pos))}:
                wanted.setdefault(label, {})[r] = rows[int(np.searchsorted(cum, r + 1))][0]
    need = {label: sorted(set(ranks.values())) for label, ranks in wanted.items()}
    picked = (
        exact.mapInArrow(_PickTask(need), spark_schema(_LATENCY_SCHEMA)).toArrow()
        if need
        else _LATENCY_SCHEMA.empty_table()
    )
    values: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
    buckets = latency_bucket(picked["latency_ms"].to_numpy()) if picked.num_rows else np.zeros(0, np.int64)
    labels = picked["variant"].to_pylist()
    for key in {(label, int(b)) for label, b in zip(labels, buckets.tolist())}:
        sel = np.flatnonzero((np.array(labels, dtype=object) == key[0]) & (buckets == key[1]))
        v, n = picked["latency_ms"].to_numpy()[sel], picked["windows"].to_numpy()[sel]
        order = np.argsort(v, kind="stable")
        values[key] = (v[order], np.cumsum(n[order]))

    def at(label: str, rank: int) -> int:
        b = wanted[label][rank]
        v, cum = values[(label, b)]
        return int(v[np.searchsorted(cum, rank - starts[(label, b)] + 1)])

    out: dict[str, dict[str, Any]] = {}
    for label, rows in by_variant.items():
        total = sum(n for _, n, _ in rows)
        ps = []
        for q in QUANTILES:
            pos = (total - 1) * q
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            a, b = at(label, lo), at(label, hi)
            ps.append(a + (b - a) * (pos - lo))
        out[label] = {
            "p50_ms": ps[0],
            "p90_ms": ps[1],
            "p99_ms": ps[2],
            "max_ms": max(mx for _, _, mx in rows),
            "windows": int(total),
        }
    return out, {"latency_exact": exact.select(F.col("data").cast("binary").alias("data"))}


_LATENCY_SCHEMA = pa.schema([("variant", pa.string()), ("latency_ms", pa.int64()), ("windows", pa.int64())])
_COARSE_SCHEMA = pa.schema(
    [("variant", pa.string()), ("bucket", pa.int64()), ("windows", pa.int64()), ("max_ms", pa.int64())]
)


class _BucketTask:
    """Latency blobs in buckets (the first pass of :func:`latency_figures` over stored blobs)."""

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for data in batch.column(0):
                t = decode_blob(data.as_buffer())
                codes, names = _label_codes(t["variant"])
                for code, label in enumerate(names):
                    mine = codes == code
                    if not mine.any():
                        continue
                    v, n = t["latency_ms"].to_numpy()[mine], t["windows"].to_numpy()[mine]
                    b = latency_bucket(v)
                    uniq, inv = np.unique(b, return_inverse=True)
                    mx = np.full(len(uniq), np.iinfo(np.int64).min, np.int64)
                    np.maximum.at(mx, inv.reshape(-1), v)
                    yield pa.RecordBatch.from_arrays(
                        [
                            pa.array([label] * len(uniq), pa.string()),
                            pa.array(uniq),
                            pa.array(np.bincount(inv.reshape(-1), weights=n).astype(np.int64)),
                            pa.array(mx),
                        ],
                        schema=_COARSE_SCHEMA,
                    )


class _PickTask:
    """The (variant, latency, windows) rows of the wanted buckets, from IPC blobs."""

    def __init__(self, need: Mapping[str, Sequence[int]]):
        self.need = {k: np.asarray(v, np.int64) for k, v in need.items()}

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for data in batch.column(0):
                t = decode_blob(data.as_buffer())
                if not t.num_rows:
                    continue
                codes, names = _label_codes(t["variant"])
                b = latency_bucket(t["latency_ms"].to_numpy())
                keep = np.zeros(t.num_rows, bool)
                for code, label in enumerate(names):
                    wanted = self.need.get(label)
                    if wanted is not None:
                        keep |= (codes == code) & np.isin(b, wanted)
                if keep.any():
                    yield from t.filter(pa.array(keep)).cast(_LATENCY_SCHEMA).to_batches()


def _label_codes(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Each row's variant as a code into the returned labels (a dictionary-coded column's
    own codes: integer masks instead of string comparisons per row)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(column.type):
        return column.indices.to_numpy(zero_copy_only=False), column.dictionary.to_pylist()
    return _label_codes(pc.dictionary_encode(column))  # plain strings (outputs of earlier versions)
