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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from windowing.storage import local_files
from windowing.storage.lake import Entry, Lake, NeedsSpark, display, join, qualify, time_ms

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
    #: ``(earliest, latest, nulls)`` of its arrival times in ms, from the footer's statistics
    #: (earliest/latest None: every one null); None: not read or not told. Kept for a
    #: partition narrower than its folder (an hour of a day), to tell which hours a change touches.
    arrival: tuple[int | None, int | None, int] | None = None

    def same_bytes_as(self, other: "InputFile") -> bool:
        """Whether ``other`` is this file unchanged, as a listing can tell (size and time)."""
        return self.size == other.size and self.mtime == other.mtime

    def shown(self) -> str:
        if self.rows is None:
            return self.path
        return f"{self.path} ({self.rows:,} row{'' if self.rows == 1 else 's'})"


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
    #: ``[start, end)`` of the partition in ms when it is narrower than its folder (an hour
    #: of a day folder); None: the partition is the whole folder.
    window: tuple[int, int] | None = None
    #: The arrival-time column the files' ranges are of (with ``window``).
    arrival_column: str | None = None

    @property
    def digest(self) -> str:
        return digest_of(self.files)

    @property
    def rows(self) -> int | None:
        rows = [f.rows for f in self.files]
        return None if any(r is None for r in rows) else sum(r for r in rows if r is not None)

    @classmethod
    def of_listing(
        cls,
        landing_zone: str,
        folder: str,
        entries: Iterable[Entry],
        window: tuple[int, int] | None = None,
        arrival_column: str | None = None,
        arrival_of: Callable[[Entry], tuple[int | None, int | None, int] | None] | None = None,
    ) -> "InputRecord":
        """The record of the files ``entries`` (a listing of ``folder`` under ``landing_zone``);
        with ``window`` (a partition narrower than its folder), each file's arrival range
        from ``arrival_of``."""
        zone = qualify(landing_zone)
        files = []
        for e in entries:
            f = _file(zone, e)
            if window is not None and arrival_of is not None:
                f = replace(f, arrival=arrival_of(e))
            files.append(f)
        return cls(zone, folder, tuple(sorted(files, key=lambda f: f.path)), window, arrival_column)

    def to_extra(self) -> dict[str, Any]:
        """The record as the commit record's ``extra`` holds it."""
        doc: dict[str, Any] = {
            "landing_zone": self.landing_zone,
            "folder": self.folder,
            "digest": self.digest,
            "files": [
                [f.path, f.size, f.mtime, f.rows, None if f.arrival is None else list(f.arrival)] for f in self.files
            ],
        }
        if self.window is not None:
            doc["window"] = list(self.window)
            doc["arrival_column"] = self.arrival_column
        return {EXTRA_KEY: doc}

    @classmethod
    def of(cls, commit: "Commit | None") -> "InputRecord | None":
        """The record a commit carries; None for a commit without one (written before
        records were kept, or of a flat landing zone): its input is unknown."""
        doc = (commit.extra or {}).get(EXTRA_KEY) if commit is not None else None
        if not isinstance(doc, Mapping):
            return None
        try:
            files = tuple(
                InputFile(
                    str(f[0]),
                    int(f[1]),
                    int(f[2]),
                    None if f[3] is None else int(f[3]),
                    _range(f[4]) if len(f) > 4 else None,
                )
                for f in doc["files"]
            )
            window = doc.get("window")
            return cls(
                str(doc["landing_zone"]),
                str(doc["folder"]),
                files,
                (int(window[0]), int(window[1])) if window is not None else None,
                doc.get("arrival_column"),
            )
        except (KeyError, TypeError, ValueError, IndexError):
            return None

    def touched_by(self, then: InputFile | None, now: InputFile | None) -> bool:
        """Whether a file's change can change this partition's rows: always for a partition
        that is its whole folder; for one narrower (an hour of its day), when the file's
        arrival times, clamped into the day as the landing zone places them, reach the
        window (before or after the change), a null one reaching the day's first hour, or
        when the footer does not tell."""
        if self.window is None:
            return True
        return any(_reaches(f.arrival, self.window) for f in (then, now) if f is not None)


def _range(doc: Any) -> tuple[int | None, int | None, int] | None:
    if doc is None:
        return None
    lo, hi, nulls = doc
    return (None if lo is None else int(lo), None if hi is None else int(hi), int(nulls))


DAY_MS = 86_400_000


def _reaches(arrival: tuple[int | None, int | None, int] | None, window: tuple[int, int]) -> bool:
    """Whether rows with arrival times ``arrival`` (``(earliest, latest, nulls)`` ms) can be
    placed in ``window``, an hour (or less) of a day (windowing.landing: a row's
    arrival time clamped into its folder's day; a null one in the day's first hour)."""
    if arrival is None:
        return True
    lo, hi, nulls = arrival
    start, end = window
    day = start // DAY_MS * DAY_MS
    if nulls and start == day:
        return True
    if lo is None or hi is None:
        return False
    lo, hi = min(max(lo, day), day + DAY_MS - 1), min(max(hi, day), day + DAY_MS - 1)
    return lo < end and hi >= start


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


def list_folder(
    spark: Any,
    landing_zone: str,
    folder: str,
    footers_of: Iterable[str] = (),
    arrival_column: str | None = None,
) -> list[InputFile]:
    """The data files of ``folder`` under ``landing_zone`` now, as :class:`InputFile` (paths
    relative to the landing zone); those in ``footers_of`` (relative paths: the added and
    rewritten ones) with their row counts and, given ``arrival_column``, arrival ranges,
    read from their footers. A local landing zone is listed with Python's calls when
    ``spark`` is None (no JVM; :class:`windowing.storage.lake.NeedsSpark` for any other);
    else through :class:`windowing.storage.lake.Lake`, as the replay lists it."""
    zone = qualify(landing_zone)
    path = join(zone, folder)
    wanted = set(footers_of)
    lake = Lake(spark)
    if spark is None and lake.tree(path) is None:  # Lake(None) lists the driver's own disk only
        raise NeedsSpark(f"{display(path)} is not on this machine's disk: listing it needs a Spark session")
    out = []
    for e in lake.files(path, within=zone):  # as the replay lists it (links resolved)
        f = _file(zone, e)
        if f.path in wanted:
            if spark is None:  # no JVM: pyarrow reads the footer
                rows, arrival = local_files.parquet_footer(e.path[len("file:") :], arrival_column)
                f = replace(f, rows=rows, arrival=arrival)
            else:
                f = replace(
                    f,
                    rows=_remote_rows(lake, e.path),
                    arrival=arrival_range(lake, e.path, arrival_column) if arrival_column else None,
                )
        out.append(f)
    return out


def arrival_range(lake: Lake, path: str, column: str) -> tuple[int | None, int | None, int] | None:
    """A Parquet file's ``(earliest, latest, nulls)`` of the time column ``column`` in ms, from
    its footer (:meth:`windowing.storage.lake.Lake.column_range`); None when it does not tell."""
    try:
        found = lake.column_range(path, column)
    except Exception:  # noqa: BLE001 - not Parquet, unreadable: the range is unknown
        return None
    if found is None:
        return None
    lo, hi, nulls, kind = found
    return (time_ms(lo, kind), time_ms(hi, kind), nulls) if kind is not None else None


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
    read = {
        f.path: f
        for f in list_folder(spark, record.landing_zone, record.folder, wanted, record.arrival_column)
        if f.path in wanted
    }
    added = tuple(read.get(f.path, f) for f in found.added)
    rewritten = tuple((then, read.get(now.path, now)) for then, now in found.rewritten)
    return InputChanges(  # of these, the ones that can reach the partition's rows
        added=tuple(f for f in added if record.touched_by(None, f)),
        removed=tuple(f for f in found.removed if record.touched_by(f, None)),
        rewritten=tuple((then, now) for then, now in rewritten if record.touched_by(then, now)),
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
    records: dict[str, InputRecord] = {}
    for key in commits if keys is None else keys:
        commit = commits.get(key)
        if commit is None:
            continue
        record = InputRecord.of(commit)
        if record is None:
            unknown.append(key)
        else:
            records[key] = record
    folders: dict[str, set[str]] = {}
    for record in records.values():
        folders.setdefault(record.landing_zone, set()).add(record.folder)
    for zone, names in folders.items():
        if len(names) >= ZONE_LISTING_FROM:
            listed.update(list_zone(spark, zone, names))
    for key, record in records.items():
        found = compare(spark, record, listed)
        if found:
            changed[key] = found
    return changed, unknown


#: From this many day folders of one landing zone, :func:`input_changes` lists the zone
#: once rather than folder by folder: an object store answers a recursive listing in
#: pages of 1,000 files (three years of days, 4 files each: 5 requests, against 1,095).
ZONE_LISTING_FROM = 8


def list_zone(spark: Any, landing_zone: str, folders: Iterable[str]) -> dict[tuple[str, str], list[InputFile]]:
    """The files of each of ``folders`` under ``landing_zone`` now, from one listing of the
    whole zone (as :func:`list_folder` gives them; a folder with no file gives [])."""
    zone = qualify(landing_zone)
    lake = Lake(spark)
    if spark is None and lake.tree(zone) is None:
        raise NeedsSpark(f"{display(zone)} is not on this machine's disk: listing it needs a Spark session")
    out: dict[tuple[str, str], list[InputFile]] = {(zone, f): [] for f in folders}
    for e in lake.files(zone, within=zone):
        f = _file(zone, e)
        where = (zone, f.path.split("/", 1)[0])
        if where in out:
            out[where].append(f)
    return out


def dumps(record: InputRecord) -> str:
    """The record as JSON text (for logs and tests)."""
    return json.dumps(record.to_extra()[EXTRA_KEY], sort_keys=True)
