"""The partition store: where each pipeline partition's outputs live, and how they chain.

Layout under the output root, one folder per pipeline and partition::

    <output_root>/<pipeline name>/<partition key>/
        aggregates/  late_events/  rejected/  state/  metrics.json   (windowing.io.write_outputs)
        lineage.json                                                 (this module)

``state/`` of partition N is the starting state of partition N+1. ``lineage.json``
records which state a partition started from and which state it ended with, as
content hashes, so that a rerun of an earlier partition that *changed* its state
shows every later partition as out of date, while a rerun that reproduced the same
state (the normal case: replays are deterministic) changes nothing.

Everything here except :func:`state_content_hash` is plain Python over files.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

LINEAGE_FILE = "lineage.json"
STATE_DIR = "state"


def partition_dir(output_root: str | Path, pipeline_name: str, partition_key: str) -> Path:
    """``<output_root>/<pipeline>/<partition key>``: the folder one partition owns."""
    return Path(output_root) / pipeline_name / partition_key


@dataclass(frozen=True)
class Lineage:
    """What one partition's outputs were computed from.

    ``start_state_hash`` is ``None`` for the first partition of the history (it starts
    from no state). ``flushed_at_end`` marks a partition replayed with flush at end: its
    state no longer holds the windows that were open, so history cannot continue from it.
    """

    pipeline: str
    fingerprint: str
    partition: str
    previous_partition: str | None
    start_state_hash: str | None
    state_hash: str
    flushed_at_end: bool
    run_id: str
    #: Data-quality checks (windowing.validation) that failed on this partition's outputs.
    failed_checks: tuple[str, ...] = ()

    def write(self, folder: Path) -> None:
        """Write ``lineage.json`` into ``folder`` atomically (temp file, then rename)."""
        fd, tmp = tempfile.mkstemp(prefix=".lineage-", suffix=".json", dir=folder)
        os.fchmod(fd, 0o644)  # mkstemp makes it private; it is as readable as the outputs beside it
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(self), fh, indent=2, sort_keys=True)
        os.replace(tmp, folder / LINEAGE_FILE)

    @classmethod
    def read(cls, folder: Path) -> "Lineage | None":
        """The lineage of the partition in ``folder``, or ``None`` when it has none."""
        try:
            doc = json.loads((folder / LINEAGE_FILE).read_text())
            doc["failed_checks"] = tuple(doc.get("failed_checks", ()))
            return cls(**doc)
        except (OSError, ValueError, TypeError):
            return None


@dataclass(frozen=True)
class OutOfDate:
    """A materialized partition whose outputs no longer follow from the history before it."""

    partition: str
    reason: str


def out_of_date_partitions(
    pipeline_dir: Path,
    fingerprint: str,
    partitions: Sequence[tuple[str, str | None]],
) -> list[OutOfDate]:
    """Check the state chain of the materialized partitions, oldest first.

    ``partitions`` lists ``(partition key, previous partition key or None for the
    first partition of the history)`` in time order; only those with a folder under
    ``pipeline_dir`` are checked. A partition is out of date when it has no lineage
    record (an interrupted run), was computed under another pipeline configuration,
    its predecessor has no outputs, its predecessor's current state is not the one it
    started from, or its predecessor is itself out of date (the error carries forward).
    """
    out: list[OutOfDate] = []
    lineages: dict[str, Lineage | None] = {}
    stale: set[str] = set()
    for key, prev in partitions:
        folder = pipeline_dir / key
        if not folder.is_dir():
            continue
        lin = lineages[key] = Lineage.read(folder)
        reason = None
        if lin is None:
            reason = f"has no {LINEAGE_FILE} (its run did not finish): rerun it"
        elif lin.fingerprint != fingerprint:
            reason = "was computed with another window/time/aggregate configuration of the pipeline"
        elif prev is not None:
            if prev in stale:
                reason = f"starts from partition {prev}, which is out of date"
            elif not (pipeline_dir / prev).is_dir():
                reason = f"its previous partition {prev} has no outputs"
            else:
                prev_lin = lineages[prev] if prev in lineages else Lineage.read(pipeline_dir / prev)
                if prev_lin is not None and prev_lin.state_hash != lin.start_state_hash:
                    reason = f"was computed from an older state of partition {prev}, which has been rerun since"
                elif prev_lin is not None and prev_lin.flushed_at_end:
                    reason = f"continues from partition {prev}, which was replayed with flush_at_end"
        if reason:
            stale.add(key)
            out.append(OutOfDate(key, reason))
    return out


def first_missing(pipeline_dir: Path, keys: Iterable[str]) -> str | None:
    """The first of ``keys`` (in the given order) that has no ``state/`` folder."""
    for key in keys:
        if not (pipeline_dir / key / STATE_DIR).is_dir():
            return key
    return None


def state_content_hash(state_df) -> str:
    """An order-independent hash of a state DataFrame's content: ``<rows>-<sum of row hashes>``.

    Spark's Parquet files are not byte-identical across runs (file names, writer
    metadata), but the rows are: hash each row with ``xxhash64`` over all columns in
    name order (maps turned into key-sorted entry arrays, which xxhash64 accepts) and
    add the hashes up exactly, so row order and file layout do not matter.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    cols = []
    for field in sorted(state_df.schema.fields, key=lambda f: f.name):
        c = F.col(f"`{field.name}`")
        if isinstance(field.dataType, MapType):
            c = F.array_sort(F.map_entries(c))
        cols.append(c)
    row = F.xxhash64(*cols) if cols else F.lit(0)
    rows, total = state_df.select(
        F.count(F.lit(1)), F.coalesce(F.sum(row.cast("decimal(38,0)")), F.lit(0))
    ).first()
    return f"{rows}-{total}"


CHECKS_FILE = "checks.json"


def write_checks(folder: Path, results) -> None:
    """The partition's data-quality results, beside its outputs (atomically)."""
    doc = [{"name": r.name, "passed": r.passed, **r.metadata()} for r in results]
    fd, tmp = tempfile.mkstemp(prefix=".checks-", suffix=".json", dir=folder)
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True, default=str)
    os.replace(tmp, folder / CHECKS_FILE)
