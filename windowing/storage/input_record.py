"""What a partition read from its landing zone, kept in its commit record, and how that
compares with the landing zone as it is now (issue 46).

A partition of a ``date=YYYY-MM-DD`` landing zone reads the files of its day folder. Its
commit records them (:class:`InputRecord`, under ``extra["inputs"]``): the landing zone,
the day folder, and for each file its path relative to the landing zone, its size, its
modification time and its row count (from the footer the replay reads to check it), with
one digest of the list. The digest covers what a listing alone gives (path, size,
modification time), so that comparing the landing zone with a record, or giving Dagster a
data version per partition, costs one listing of the folder and no footer.

:func:`changes` tells a partition whose files were added, removed or rewritten since its
commit (:class:`InputChanges`); :func:`windowing.storage.store.out_of_date_partitions` then
marks it, and every partition after it, out of date. A record written before this existed
has no ``inputs``: its input is *unknown*, never called out of date for it.

Listing a local landing zone starts no JVM (:func:`list_folder` without a Spark session),
so ``rewindow status`` on a local history answers without Spark.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from windowing.storage import local_files
from windowing.storage.lake import Entry, Lake, join, qualify

if TYPE_CHECKING:
    from windowing.storage.commits import Commit

#: The key of the commit record's ``extra`` that holds the record.
EXTRA_KEY = "inputs"


@dataclass(frozen=True)
class InputFile:
    """One file a partition read: ``path`` relative to the landing zone, ``size`` in bytes,
    ``mtime`` in ms since the epoch, ``rows`` from its footer (None: not known)."""

    path: str
    size: int
    mtime: int
    rows: int | None = None

    def same_bytes_as(self, other: "InputFile") -> bool:
        """Whether ``other`` is this file unchanged, as a listing can tell (size and time)."""
        return self.size == other.size and self.mtime == other.mtime

    def shown(self) -> str:
        return f"{self.path} ({self.rows:,} rows)" if self.rows is not None else self.path


def digest_of(files: Iterable[InputFile]) -> str:
    """One SHA-256 of a file list (paths, sizes and times, in path order): equal for two
    listings of unchanged files, whatever order they were listed in."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.path}\t{f.size}\t{f.mtime}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True)
class InputRecord:
    """What one partition read (module docstring). ``landing_zone`` is a URI
    (:func:`windowing.storage.lake.qualify`); ``folder`` the partition's folder under it."""

    landing_zone: str
    folder: str
    files: tuple[InputFile, ...]

    @property
    def digest(self) -> str:
        return digest_of(self.files)

    @property
    def rows(self) -> int | None:
        rows = [f.rows for f in self.files]
        return None if any(r is None for r in rows) else sum(r for r in rows if r is not None)

    @classmethod
    def of_listing(cls, landing_zone: str, folder: str, entries: Iterable[Entry]) -> "InputRecord":
        """The record of the files ``entries`` (a listing of ``folder`` under ``landing_zone``)."""
        zone = qualify(landing_zone)
        return cls(zone, folder, tuple(sorted((_file(zone, e) for e in entries), key=lambda f: f.path)))

    def to_extra(self) -> dict[str, Any]:
        """The record as the commit record's ``extra`` holds it."""
        return {
            EXTRA_KEY: {
                "landing_zone": self.landing_zone,
                "folder": self.folder,
                "digest": self.digest,
                "files": [[f.path, f.size, f.mtime, f.rows] for f in self.files],
            }
        }

    @classmethod
    def of(cls, commit: "Commit | None") -> "InputRecord | None":
        """The record a commit carries; None for a commit without one (written before
        records were kept, or of a flat landing zone): its input is unknown."""
        doc = (commit.extra or {}).get(EXTRA_KEY) if commit is not None else None
        if not isinstance(doc, Mapping):
            return None
        try:
            files = tuple(
                InputFile(str(p), int(s), int(m), None if r is None else int(r)) for p, s, m, r in doc["files"]
            )
            return cls(str(doc["landing_zone"]), str(doc["folder"]), files)
        except (KeyError, TypeError, ValueError):
            return None


def _file(zone: str, e: Entry) -> InputFile:
    uri = qualify(e.path)
    rel = uri[len(zone) + 1 :] if uri.startswith(zone.rstrip("/") + "/") else uri
    return InputFile(rel, e.size, e.mtime, e.rows)


@dataclass(frozen=True)
class InputChanges:
    """How a partition's folder differs from its record: files added, removed, and
    rewritten (``(as recorded, as now)``: another size or modification time)."""

    added: tuple[InputFile, ...] = ()
    removed: tuple[InputFile, ...] = ()
    rewritten: tuple[tuple[InputFile, InputFile], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.rewritten)

    def describe(self, most: int = 5) -> str:
        """``landing zone changed since its commit: 1 file added: date=.../late.parquet (250 rows); ...``"""
        parts = []
        for what, files in (
            ("added", [f.shown() for f in self.added]),
            ("removed", [f.shown() for f in self.removed]),
            ("rewritten", [f"{now.path} ({_rows(then)} -> {_rows(now)} rows)" for then, now in self.rewritten]),
        ):
            if files:
                more = f", and {len(files) - most} more" if len(files) > most else ""
                parts.append(
                    f"{len(files)} file{'s' if len(files) > 1 else ''} {what}: {', '.join(files[:most])}{more}"
                )
        return "landing zone changed since its commit: " + "; ".join(parts)

    def to_metadata(self) -> dict[str, Any]:
        """The changes as plain values (Dagster metadata, JSON)."""
        return {
            "added": [f.shown() for f in self.added],
            "removed": [f.shown() for f in self.removed],
            "rewritten": [now.shown() for _, now in self.rewritten],
        }


def _rows(f: InputFile) -> str:
    return "?" if f.rows is None else f"{f.rows:,}"


def changes(record: InputRecord, now: Sequence[InputFile]) -> InputChanges:
    """How ``now`` (the record's folder listed again, :func:`list_folder`) differs from ``record``."""
    then = {f.path: f for f in record.files}
    current = {f.path: f for f in now}
    return InputChanges(
        added=tuple(current[p] for p in sorted(current) if p not in then),
        removed=tuple(then[p] for p in sorted(then) if p not in current),
        rewritten=tuple(
            (then[p], current[p]) for p in sorted(current) if p in then and not then[p].same_bytes_as(current[p])
        ),
    )


def list_folder(spark: Any, landing_zone: str, folder: str, rows_of: Iterable[str] = ()) -> list[InputFile]:
    """The data files of ``folder`` under ``landing_zone`` now, as :class:`InputFile` (paths
    relative to the landing zone), with the row counts of those in ``rows_of`` (relative
    paths: the added and rewritten ones, read from their footers). A local landing zone is
    listed with Python's calls (``spark`` may be None: no JVM); any other through
    :class:`windowing.storage.lake.Lake`, as the replay lists it."""
    zone = qualify(landing_zone)
    path = join(zone, folder)
    wanted = set(rows_of)
    if spark is None:  # the driver's own disk, no JVM (raises NeedsSpark for any other)
        found = [Entry(qualify(p), False, size, mtime) for p, size, mtime in Lake(None).on_driver(path, "data_files")]
        out = [_file(zone, e) for e in found]
        rows = {
            f.path: local_files.parquet_rows(e.path[len("file:") :]) for f, e in zip(out, found) if f.path in wanted
        }
        return [InputFile(f.path, f.size, f.mtime, rows[f.path]) if f.path in wanted else f for f in out]
    lake = Lake(spark)
    out = [_file(zone, e) for e in lake.files(path)]
    return [
        InputFile(f.path, f.size, f.mtime, _remote_rows(lake, join(zone, f.path))) if f.path in wanted else f
        for f in out
    ]


def _remote_rows(lake: Lake, path: str) -> int | None:
    try:
        return lake.parquet_rows(path)
    except Exception:  # noqa: BLE001 - not Parquet, or unreadable: the row count is unknown
        return None


def compare(
    spark: Any, record: InputRecord, listed: dict[tuple[str, str], list[InputFile]] | None = None
) -> InputChanges:
    """:func:`changes` of ``record`` against its folder now; footers read only for the files
    added or rewritten. ``listed`` caches the listings by ``(landing zone, folder)``
    (the hourly partitions of one day share one)."""
    where = (record.landing_zone, record.folder)
    now = listed.get(where) if listed is not None else None
    if now is None:
        now = list_folder(spark, record.landing_zone, record.folder)
        if listed is not None:
            listed[where] = now
    found = changes(record, now)
    if not found:
        return found
    wanted = {f.path for f in found.added} | {now.path for _, now in found.rewritten}
    with_rows = {f.path: f for f in list_folder(spark, record.landing_zone, record.folder, wanted)}
    return InputChanges(
        added=tuple(with_rows.get(f.path, f) for f in found.added),
        removed=found.removed,
        rewritten=tuple((then, with_rows.get(now.path, now)) for then, now in found.rewritten),
    )


def input_changes(
    spark: Any, commits: Mapping[str, "Commit"], keys: Iterable[str] | None = None
) -> tuple[dict[str, InputChanges], list[str]]:
    """``(the changes of each partition whose files changed since its commit, the partitions
    whose input is unknown)`` over ``commits`` (key -> current commit), or ``keys`` of it.
    One listing per day folder, footers only for new or rewritten files."""
    listed: dict[tuple[str, str], list[InputFile]] = {}
    changed: dict[str, InputChanges] = {}
    unknown: list[str] = []
    for key in commits if keys is None else keys:
        commit = commits.get(key)
        if commit is None:
            continue
        record = InputRecord.of(commit)
        if record is None:
            unknown.append(key)
            continue
        found = compare(spark, record, listed)
        if found:
            changed[key] = found
    return changed, unknown


def dumps(record: InputRecord) -> str:
    """The record as JSON text (for logs and tests)."""
    return json.dumps(record.to_extra()[EXTRA_KEY], sort_keys=True)
