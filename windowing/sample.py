"""Realistic demo history: clickstream-like events, out of order, a few percent late.

Written with NumPy and pyarrow (no Spark needed), one folder per arrival day:
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
"""

from __future__ import annotations

import zlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from windowing.durations import DAY_MS


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

