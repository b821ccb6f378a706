"""Realistic demo data: clickstream-like events, and a stand-in for the live pipeline's output.

:func:`generate_history` writes events, out of order, a few percent late, with NumPy and
pyarrow (no Spark needed), one folder per arrival day:
``out_dir/date=YYYY-MM-DD/part-NNNNN.parquet``. Columns:

| column | type | meaning |
|---|---|---|
| arrival_time | timestamp (UTC) | when the live pipeline saw the event |
| event_time | timestamp (UTC) | when it happened: arrival minus a small lag, sometimes much more (late) |
| offset | int64 | per-partition sequence number in arrival order (the arrival tie-breaker) |
| partition | int32 | source partition = the live worker (a hash of the key, as in Kafka) |
| user_id | string | the key; popularity follows a Zipf-like law |
| amount | float64 | a value to sum |
| event_id | string | an identifier, occasionally repeated (retries) |

:func:`write_sample_live` writes what a live pipeline could have emitted from those
events (a replay of them, with a few known differences) for ``rewindow reconcile`` and
the Dagster check ``matches_live`` to find.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.config import ConfigError
from windowing.contract import AGGREGATE_REASON
from windowing.durations import DAY_MS
from windowing.reconcile.vocabulary import (
    DUPLICATE_IN_LIVE,
    EXTRA_IN_REPLAY,
    FLOAT_ROUNDING,
    LATE_IN_REPLAY,
    MISSING_IN_REPLAY,
    VALUE_MISMATCH,
)
from windowing.runner.columns import col
from windowing.runner.replay import replay

if TYPE_CHECKING:
    from windowing.config import Aggregate, Pipeline
    from windowing.config.reconcile import ReconcileSpec


def generate_history(
    out_dir: str | Path,
    start: datetime,
    days: int,
    events_per_day: int,
    keys: int,
    seed: int = 7,
    late_fraction: float = 0.03,
    partitions: int = 4,
    files_per_day: int = 4,
) -> list[Path]:
    """Write ``days`` days of events starting at ``start`` (UTC midnight); return the day folders."""
    start = start.replace(tzinfo=start.tzinfo or timezone.utc).astimezone(timezone.utc)
    start_ms = int(start.timestamp() * 1000) // DAY_MS * DAY_MS
    rng = np.random.default_rng(seed)
    out = Path(out_dir)
    key_names = np.array([f"user-{i:06d}" for i in range(keys)], dtype=object)
    key_partition = np.array([zlib.crc32(k.encode()) % partitions for k in key_names], dtype=np.int32)
    # Zipf-like popularity, capped so one key never holds the whole history.
    weights = 1.0 / np.arange(1, keys + 1) ** 0.8
    weights /= weights.sum()
    next_offset = np.zeros(partitions, dtype=np.int64)
    folders = []
    for d in range(days):
        n = events_per_day
        day_start = start_ms + d * DAY_MS
        arrival = np.sort(rng.integers(day_start, day_start + DAY_MS, size=n))
        key_idx = rng.choice(keys, size=n, p=weights)
        lag = rng.exponential(2_000.0, size=n).astype(np.int64)  # ~2 s of transport jitter
        late = rng.random(n) < late_fraction
        lag[late] += rng.integers(60_000, 3 * 3_600_000, size=int(late.sum()))  # minutes to hours late
        future = rng.random(n) < 0.002
        lag[future] = -rng.integers(1, 30_000, size=int(future.sum()))  # clocks out of sync
        event = arrival - lag
        part = key_partition[key_idx]
        # Offsets: per partition, increasing in arrival order (stable sort keeps arrival order).
        order = np.argsort(part, kind="stable")
        offsets = np.empty(n, dtype=np.int64)
        counts = np.bincount(part, minlength=partitions)
        pos = 0
        for p in range(partitions):
            c = counts[p]
            offsets[order[pos : pos + c]] = next_offset[p] + np.arange(c)
            next_offset[p] += c
            pos += c
        amount = np.round(rng.lognormal(2.0, 1.0, size=n), 2)
        ids = rng.integers(0, 2**62, size=n)
        retry = rng.random(n) < 0.01
        ids[1:][retry[1:]] = ids[:-1][retry[1:]]
        table = pa.table(
            {
                "arrival_time": pa.array(arrival, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
                "event_time": pa.array(event, pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
                "offset": pa.array(offsets, pa.int64()),
                "partition": pa.array(part, pa.int32()),
                "user_id": pa.array(key_names[key_idx], pa.string()),
                "amount": pa.array(amount, pa.float64()),
                "event_id": pa.array([f"{i:016x}" for i in ids], pa.string()),
            }
        )
        # Files hold rows in an arbitrary order, as landing zones do.
        table = table.take(pa.array(rng.permutation(n)))
        day = datetime.fromtimestamp(day_start / 1000, tz=timezone.utc).strftime("%Y-%m-%d")
        folder = out / f"date={day}"
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.parquet"):
            old.unlink()
        for i, chunk in enumerate(np.array_split(np.arange(n), max(1, files_per_day))):
            pq.write_table(table.take(pa.array(chunk)), folder / f"part-{i:05d}.parquet")
        folders.append(folder)
    return folders


# --------------------------------------------------------------------------- a live output for the demo

#: The known differences :func:`write_sample_live` makes, in the order they are spread
#: over the days of the emissions (kind i on day i mod days).
LIVE_DIFFERENCE_KINDS = ("count", "late_counted", "float", "rounding", "dropped", "duplicate")
#: ``float`` adds this to the float sum: far beyond rounding for sums under
#: :data:`_LARGEST_SHIFTED_SUM`.
FLOAT_SHIFT = 1.0
#: ``rounding`` multiplies the float sum by ``1 + ROUNDING_SHIFT``: beyond the default
#: tolerance (1e-9), within what windowing.reconcile.vocabulary.FLOAT_ROUNDING explains (1e-6).
ROUNDING_SHIFT = 1e-7
_LARGEST_SHIFTED_SUM = 1e5
#: Candidate windows looked at per day (of each of: with late events, without).
_CANDIDATES_PER_DAY = 8


@dataclass(frozen=True)
class KnownDifference:
    """One difference :func:`write_sample_live` put into the live output on purpose.

    The window emission is the replay's ``(worker, key, window_start_ms, window_end_ms,
    emission)`` (worker and key None when the pipeline has none), emitted at
    ``emit_time_ms`` (epoch ms, UTC). ``category``, ``differing`` (the aggregates
    changed) and ``explanation`` are what :func:`windowing.reconcile.compare.reconcile` must
    report for it (``explanation`` None: unexplained); ``live_values`` are the changed
    aggregates' values on the live side, ``(name, value)``.
    """

    kind: str
    category: str
    differing: tuple[str, ...]
    explanation: str | None
    worker: Any
    key: Any
    window_start_ms: int
    window_end_ms: int
    emission: int
    emit_time_ms: int
    live_values: tuple[tuple[str, Any], ...] = ()


def write_sample_live(
    spark: Any, pipeline: Pipeline, events_df: Any, out: str, differences: bool = True
) -> list[KnownDifference]:
    """Write (Parquet, replacing ``out``) a stand-in for what the live pipeline emitted from
    ``events_df``: ``pipeline``'s replay of them from no state, windows only, columns named
    as ``pipeline.reconcile.columns`` maps them; with ``differences``, one window of each
    kind of :data:`LIVE_DIFFERENCE_KINDS` changed:

    | kind | the live side has | category | explanation |
    |---|---|---|---|
    | ``count`` | count + 1 | VALUE_MISMATCH | none |
    | ``late_counted`` | count + N events the replay marks late, sum + their amounts | VALUE_MISMATCH | LATE_IN_REPLAY |
    | ``float`` | sum + :data:`FLOAT_SHIFT` | VALUE_MISMATCH | none |
    | ``rounding`` | sum * (1 + :data:`ROUNDING_SHIFT`) | VALUE_MISMATCH | FLOAT_ROUNDING |
    | ``dropped`` | no row | EXTRA_IN_REPLAY | none |
    | ``duplicate`` | the row twice | MISSING_IN_REPLAY (the copy) | DUPLICATE_IN_LIVE |

    "count" is the pipeline's first plain ``count`` aggregate and "sum" its first ``sum``
    of doubles, each only when the mapping compares it. Each difference is in its own
    window, emitted once, with its start and emission on the same UTC day (no daily
    partition edge between them) and, for ``late_counted``, its late events arriving that
    day too; ``late_counted`` picks a window with late events, the others one without.
    Kind i goes to the i-th day of the emissions (round robin) when that day has a fitting
    window, else to the next; inside a day the windows are taken in the order of a hash
    of their identity, so every run picks the same. A kind the pipeline, its mapping or
    the data cannot show is left out (no count or float sum compared, no window with late
    events, a tolerance too wide for ``rounding``, no live emission column for
    ``duplicate``: without one, a repeated row is a second emission).

    Returns the differences made, in kind order.

    Raises:
        ConfigError: the pipeline has no ``reconcile:`` block, or a key of several columns.
    """
    spec = pipeline.reconcile
    if spec is None:
        raise ConfigError(f"pipeline {pipeline.name!r} has no reconcile: block to name the live columns by")
    if len(pipeline.window.keys) > 1:
        raise ConfigError(f"pipeline {pipeline.name!r}: the sample live output is made for a key of one column")
    result = replay(spark, pipeline, events_df)
    try:
        windows = result.aggregates.where(
            F.col("emit_reason").isNull() | (F.col("emit_reason") != F.lit(AGGREGATE_REASON))
        )
        made = _pick_differences(pipeline, spec, windows, result.late_events) if differences else []
        live = _with_differences(pipeline, windows, made)
        cols = spec.columns
        named = [
            (pipeline.source.worker, cols.worker),
            *zip(pipeline.window.keys, cols.keys),
            ("window_start", cols.window_start),
            ("window_end", cols.window_end),
            ("emission", cols.emission),
            ("emit_time", cols.emit_time),
            *cols.aggregates,
        ]
        columns = [col(src).alias(dst) for src, dst in named if src and dst]
        live.select(*columns).write.mode("overwrite").parquet(str(out))
    finally:
        result.unpersist()
    return made


def _sample_aggregates(
    pipeline: Pipeline, spec: ReconcileSpec, windows: Any
) -> tuple[Aggregate | None, Aggregate | None]:
    """(count, float sum) aggregates the differences change: compared ones only, or None."""
    compared = dict(spec.columns.aggregates)
    types = {f.name: f.dataType for f in windows.schema.fields}
    count = next(
        (a for a in pipeline.aggregates if a.type == "count" and a.column is None and a.name in compared), None
    )
    total = next(
        (
            a
            for a in pipeline.aggregates
            if a.type == "sum" and a.name in compared and isinstance(types.get(a.name), T.DoubleType)
        ),
        None,
    )
    return count, total


def _key(pipeline: Pipeline) -> str | None:
    """The key's one column (the sample live output is made for a key of one column)."""
    return pipeline.window.keys[0] if pipeline.window.keys else None


def _pick_differences(pipeline: Pipeline, spec: ReconcileSpec, windows: Any, late_events: Any) -> list[KnownDifference]:
    """Choose the window of each kind (see :func:`write_sample_live`): one Spark job ranks
    a few candidate windows per day (:func:`_candidates`), then each kind takes the first
    that fits, each kind starting on its own day."""
    count, total = _sample_aggregates(pipeline, spec, windows)
    worker, key = pipeline.source.worker, _key(pipeline)
    by_day: dict[Any, list[Any]] = {}
    for r in sorted(
        _candidates(pipeline, windows, late_events, count, total), key=lambda r: (r["__day"], r["__late"], r["__rank"])
    ):
        by_day.setdefault(r["__day"], []).append(r)
    days = sorted(by_day)
    made, used = [], set()
    for i, kind in enumerate(LIVE_DIFFERENCE_KINDS):
        for d in (days[i % len(days) :] + days[: i % len(days)]) if days else []:
            r = next(
                (
                    r
                    for r in by_day[d]
                    if _fits(kind, r, spec, count, total) and (d, r["__late"], r["__rank"]) not in used
                ),
                None,
            )
            if r is None:
                continue
            used.add((d, r["__late"], r["__rank"]))
            category, explanation, live_values = _difference(kind, r, count, total)
            made.append(
                KnownDifference(
                    kind,
                    category,
                    tuple(name for name, _ in live_values),
                    explanation,
                    r["__id_" + worker] if worker else None,
                    r["__id_" + key] if key else None,
                    r["__ws"],
                    r["__we"],
                    r["__em"],
                    r["__emit"],
                    live_values,
                )
            )
            break
    return made


def _candidates(
    pipeline: Pipeline, windows: Any, late_events: Any, count: Aggregate | None, total: Aggregate | None
) -> list[Any]:
    """Up to :data:`_CANDIDATES_PER_DAY` windows per day, late or not (``__late``: the
    replay has late events of the window, all arriving that day), ranked by a hash of
    their identity: windows emitted once, within one day, with non-null ids. One Spark job;
    the rows carry their identity, the count and sum aggregates and the late events' count
    and sum."""
    worker, key = pipeline.source.worker, _key(pipeline)
    ids = [c for c in (worker, key) if c] + ["window_start", "window_end"]
    arrival = pipeline.source.arrival_time
    late = late_events.groupBy(*ids).agg(
        F.count(F.lit(1)).alias("__late_n"),
        F.min(F.to_date(col(arrival))).alias("__late_first_day"),
        F.max(F.to_date(col(arrival))).alias("__late_last_day"),
        (F.sum(col(total.column)) if total and total.column else F.lit(None).cast("double")).alias("__late_sum"),
    )
    day = F.to_date(F.col("emit_time"))
    once = (F.count(F.lit(1)).over(Window.partitionBy(*[col(c) for c in ids])) == 1) & (
        F.to_date(F.col("window_start")) == F.to_date(F.greatest(F.col("window_end"), F.col("emit_time")))
    )
    for c in (worker, key):
        if c:
            once = once & col(c).isNotNull()  # joined with the late events by plain equality
    with_late = (F.col("__late_n") > 0) & (F.col("__late_first_day") == day) & (F.col("__late_last_day") == day)
    candidates = (
        windows.withColumn("__once", once)
        .where("__once")
        .join(late, ids, "left")
        .where(F.col("__late_n").isNull() | with_late)
        .withColumn("__day", day)
        .withColumn("__late", F.col("__late_n").isNotNull())
    )
    rank = F.row_number().over(
        Window.partitionBy("__day", "__late").orderBy(
            F.xxhash64(*[col(c) for c in ids], F.col("emission")), *[col(c) for c in ids]
        )
    )
    rows: list[Any] = (
        candidates.withColumn("__rank", rank)
        .where(F.col("__rank") <= _CANDIDATES_PER_DAY)
        .select(
            "__day",
            "__late",
            "__rank",
            *[col(c).alias(f"__id_{c}") for c in (worker, key) if c],
            F.unix_millis("window_start").alias("__ws"),
            F.unix_millis("window_end").alias("__we"),
            F.col("emission").alias("__em"),
            F.unix_millis("emit_time").alias("__emit"),
            (col(count.name) if count else F.lit(None)).alias("__count"),
            (col(total.name) if total else F.lit(None)).alias("__sum"),
            "__late_n",
            "__late_sum",
        )
        .collect()
    )
    return rows


def _fits(kind: str, r: Any, spec: ReconcileSpec, count: Aggregate | None, total: Aggregate | None) -> bool:
    """Whether candidate ``r`` can carry a difference of ``kind``."""
    x = r["__sum"]
    if kind == "late_counted":
        return count is not None and r["__late"]
    if r["__late"]:
        return False
    if kind == "count":
        return count is not None
    if kind in ("float", "rounding"):
        if total is None or x is None or not 0.01 <= abs(x) < _LARGEST_SHIFTED_SUM:
            return False
        shifted = abs(x) * ROUNDING_SHIFT
        tol = spec.tolerance
        return kind == "float" or shifted > tol.absolute + tol.relative * abs(x) * (1 + ROUNDING_SHIFT)
    return kind == "dropped" or spec.columns.emission is not None


def _difference(
    kind: str, r: Any, count: Aggregate | None, total: Aggregate | None
) -> tuple[str, str | None, tuple[tuple[str, Any], ...]]:
    """(category, explanation, live values) of a difference of ``kind`` in candidate ``r``."""
    if kind in ("count", "late_counted"):
        assert count is not None  # these kinds fit only with a count aggregate (_fits)
        if kind == "count":
            return VALUE_MISMATCH, None, ((count.name, r["__count"] + 1),)
        more = ((total.name, r["__sum"] + r["__late_sum"]),) if total and r["__late_sum"] else ()
        return VALUE_MISMATCH, LATE_IN_REPLAY, ((count.name, r["__count"] + r["__late_n"]), *more)
    if kind in ("float", "rounding"):
        assert total is not None  # these kinds fit only with a float sum aggregate (_fits)
        if kind == "float":
            return VALUE_MISMATCH, None, ((total.name, r["__sum"] + FLOAT_SHIFT),)
        return VALUE_MISMATCH, FLOAT_ROUNDING, ((total.name, r["__sum"] * (1 + ROUNDING_SHIFT)),)
    if kind == "dropped":
        return EXTRA_IN_REPLAY, None, ()
    return MISSING_IN_REPLAY, DUPLICATE_IN_LIVE, ()


def _with_differences(pipeline: Pipeline, windows: Any, made: list[KnownDifference]) -> Any:
    """``windows`` with each of ``made`` applied: Spark expressions on the picked rows."""

    def this(d: KnownDifference) -> Any:
        cond = (
            (F.unix_millis("window_start") == F.lit(d.window_start_ms))
            & (F.unix_millis("window_end") == F.lit(d.window_end_ms))
            & (F.col("emission") == F.lit(d.emission))
        )
        for c, v in ((pipeline.source.worker, d.worker), (_key(pipeline), d.key)):
            if c:
                cond = cond & (col(c) == F.lit(v))
        return cond

    out = windows
    for d in made:
        if d.kind == "dropped":
            out = out.where(~this(d))
        elif d.kind == "duplicate":
            out = out.unionByName(out.where(this(d)))
        for name, value in d.live_values:
            out = out.withColumn(name, F.when(this(d), F.lit(value)).otherwise(col(name)))
    return out
