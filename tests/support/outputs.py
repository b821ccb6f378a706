"""Reading a committed replay output in tests, with plain file I/O (local outputs only).

The engine reads outputs through Spark (``windowing.storage.outputs.read_outputs``); the tests read
the commit records directly, so that they check what is on disk independently.
"""

from __future__ import annotations

import json
from pathlib import Path

#: The datasets of a replay's run.
OUTPUTS = ("aggregates", "late_events", "rejected", "state")


def commits(out: Path) -> list[dict]:
    """Every commit record under ``out/_commits``, oldest first (metrics/extra parsed)."""
    folder = Path(out) / "_commits"
    records = []
    for d in sorted(folder.iterdir()) if folder.is_dir() else []:
        parts = [p for p in d.glob("part-*") if p.is_file()]
        if not parts:
            continue  # a commit still being written (only a hidden _part-... file)
        (line,) = [ln for p in parts for ln in p.read_text().splitlines() if ln.strip()]
        rec = json.loads(line)
        rec["metrics"] = json.loads(rec["metrics"])
        rec["extra"] = json.loads(rec.get("extra") or "{}")
        records.append(rec)
    return sorted(records, key=lambda r: (r["seq"], r["run_id"]))


def current(out: Path) -> dict:
    recs = commits(out)
    assert recs, f"{out}: nothing committed"
    return recs[-1]


def run_dir(out: Path) -> Path:
    """The folder of ``out``'s current run (``out/runs/<run id>``)."""
    return Path(out) / current(out)["run"]


def metrics(out: Path) -> dict:
    """The current run's metrics: its ``metrics.json`` dataset, checked against the commit record's."""
    folder = run_dir(out) / "metrics.json"
    (part,) = [p for p in folder.glob("part-*") if p.is_file()]
    written = json.loads(part.read_text())
    assert written == current(out)["metrics"]
    return written


def snapshot(spark, out: Path) -> dict:
    """An output's current run as canonical rows per dataset (floats by their bits,
    timestamps as epoch microseconds), plus its metrics: two replays gave identical rows
    when their snapshots are equal. ``out`` is the output's local folder (its commit
    records are read from disk; the rows with ``spark``)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def canon(v):
        if isinstance(v, float):
            return v.hex()
        if isinstance(v, (list, tuple)):
            return tuple(canon(x) for x in v)
        return v

    snap = {}
    for name in OUTPUTS:
        df = spark.read.parquet(str(run_dir(out) / name))
        cols = [
            F.unix_micros(F.col(f"`{f.name}`")).alias(f.name)
            if isinstance(f.dataType, T.TimestampType)
            else F.col(f"`{f.name}`")
            for f in df.schema.fields
        ]
        snap[name] = (
            df.schema.simpleString(),
            sorted((tuple(canon(v) for v in r) for r in df.select(*cols).collect()), key=repr),
        )
    snap["metrics"] = metrics(out)
    return snap


def late_events_in(late_rows: list[dict]) -> int:
    """Distinct events among late (event, window) rows: identical rows (an event and its
    exact duplicates: same key, batch and event time) are late for the same windows, so
    a group of identical rows holds copies x windows rows, i.e. rows / windows events."""
    groups: dict[tuple, list] = {}
    for r in late_rows:
        same = tuple(sorted((k, repr(v)) for k, v in r.items() if k not in ("window_start", "window_end")))
        groups.setdefault(same, []).append((r["window_start"], r["window_end"]))
    total = 0
    for windows in groups.values():
        copies, rest = divmod(len(windows), len(set(windows)))
        assert rest == 0, f"identical late rows missed different windows: {windows}"
        total += copies
    return total
