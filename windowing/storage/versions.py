"""Versions of a history: a changed pipeline is rebuilt beside the current history, which
stays current (readable, published) until the rebuild is whole; then one switch.

A pipeline's history is **version** ``v1`` in the layout :mod:`windowing.storage.store`
describes. When a backfill runs a pipeline whose fingerprint
(:meth:`windowing.config.model.Pipeline.fingerprint`: what decides the outputs) is not the
current version's, it builds the next version, ``v2``, ``v3``, ..., as a history of its
own beside it::

    <output_root>/<pipeline>/                       v1 (the layout before versions existed)
    <output_root>/<pipeline>/_versions/v2/<pipeline>/<partition>/...   v2: the same layout,
                                                    under its own output root
    <output_root>/<pipeline>/_versions/_switches/<seq>-<version>.json  one record a switch

A version's root (:func:`version_root`) is an output root like any other: the chain,
``rewindow status``, ``rewindow diff`` and ``rewindow verify`` read it as they read the
first. Which version is *current* is the newest switch record's (no record: ``v1``). A
switch record is one small file, written once and never overwritten, so a reader sees the
switch or not, on object stores as on local disks.

**When a version becomes current.** Only when it holds every partition the current one
holds (and any it was asked for beyond), each committed with its blocking checks passed
and following from the state before it: :func:`complete_over`. Until then its partitions
are committed in its own folder, resumable, and no reader of the current version sees
them. The catalog's stable names move in the same step
(:meth:`windowing.catalog.Publisher.switch`).

**Old versions** are kept, the newest ``keep`` of them by number (the current one always):
:func:`prune`. A version newer than the current one (a rebuild under way) is never pruned.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from windowing.storage import local_files
from windowing.storage.lake import Lake, NeedsSpark, join, local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

VERSIONS = "_versions"
SWITCHES = "_switches"
FIRST = "v1"
#: Versions kept by default (``--keep-versions``): the current one and the one before.
KEEP_VERSIONS = 2

_VERSION = re.compile(r"v([1-9][0-9]{0,5})")
_SWITCH = re.compile(r"([0-9]{6})-(v[1-9][0-9]{0,5})\.json")


def number(version: str) -> int:
    m = _VERSION.fullmatch(version)
    if m is None:
        raise ValueError(f"{version!r} is not a version (v1, v2, ...)")
    return int(m[1])


def of_path(path: str) -> str:
    """The version a run folder (or any path in a history) belongs to, from where it is."""
    m = re.search(rf"/{VERSIONS}/(v[1-9][0-9]*)/", str(path))
    return m[1] if m else FIRST


def version_root(output_root: str, pipeline: str, version: str) -> str:
    """The output root that holds ``version`` of ``pipeline``'s history: ``output_root``
    itself for ``v1``, else ``<output_root>/<pipeline>/_versions/<version>``."""
    return str(output_root) if number(version) == 1 else join(str(output_root), pipeline, VERSIONS, version)


@dataclass(frozen=True)
class Switch:
    """One switch record: ``version`` became current at ``switched_at``, replacing
    ``previous``, over ``partitions`` (first..last); ``summary``: what changed (the diff's)."""

    seq: int
    version: str
    previous: str
    fingerprint: str
    switched_at: str
    first: str
    last: str
    summary: str = ""
    tables: list[str] = field(default_factory=list)


def _folder(output_root: str, pipeline: str) -> str:
    return join(str(output_root), pipeline, VERSIONS)


def _texts(spark: SparkSession | None, folder: str, names: re.Pattern[str]) -> list[tuple[str, str]]:
    """``(file name, text)`` of each file directly in ``folder`` whose name matches ``names``
    (not the ``.crc`` beside it); [] when it is missing. A local folder is read with
    Python's calls (``spark`` may be None: ``rewindow status``)."""
    lake = Lake(spark if local_path(folder) is None else None)
    out = []
    for entry in lake.children(folder):
        if entry.is_dir or not names.fullmatch(_name(entry.path)):
            continue
        local = local_path(entry.path)
        if local is not None:
            text = local_files.text_of(local)
        elif spark is None:
            raise NeedsSpark(f"{folder} is not on this machine's disk: reading it needs a Spark session")
        else:
            text = lake.read_text(entry.path)
        out.append((_name(entry.path), text))
    return sorted(out)


def switches(spark: SparkSession | None, output_root: str, pipeline: str) -> list[Switch]:
    """The switch records of ``pipeline``'s history, oldest first (a record that does not
    parse is skipped: it cannot name a version)."""
    out = []
    for _, text in _texts(spark, join(_folder(output_root, pipeline), SWITCHES), _SWITCH):
        try:
            doc = json.loads(text)
            out.append(Switch(**{k: doc[k] for k in Switch.__dataclass_fields__ if k in doc}))
        except (ValueError, TypeError, KeyError):
            continue
    return sorted(out, key=lambda s: s.seq)


def current_version(spark: SparkSession | None, output_root: str, pipeline: str) -> str:
    """The version readers of ``pipeline``'s history read: the newest switch's, else ``v1``."""
    found = switches(spark, output_root, pipeline)
    return found[-1].version if found else FIRST


def versions(spark: SparkSession | None, output_root: str, pipeline: str) -> list[str]:
    """Every version of ``pipeline``'s history that has a folder (``v1``: partition folders
    at the pipeline's own folder), by number."""
    top = join(str(output_root), pipeline)
    lake = Lake(spark if local_path(top) is None else None)
    names = [e.path.rstrip("/").rsplit("/", 1)[-1] for e in lake.children(join(top, VERSIONS)) if e.is_dir]
    found = {n for n in names if _VERSION.fullmatch(n)}
    if any(e.is_dir and not _name(e.path).startswith(("_", ".")) for e in lake.children(top)):
        found.add(FIRST)  # v1's partition folders, at the pipeline's own folder
    return sorted(found, key=number)


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def next_version(spark: SparkSession | None, output_root: str, pipeline: str) -> str:
    return f"v{max((number(v) for v in versions(spark, output_root, pipeline)), default=1) + 1}"


def record_switch(
    spark: SparkSession | None,
    output_root: str,
    pipeline: str,
    version: str,
    fingerprint: str,
    first: str,
    last: str,
    summary: str = "",
    tables: list[str] | None = None,
) -> Switch:
    """Make ``version`` current: one new switch record (written once, never overwritten:
    of two switches racing, the second fails rather than replace the first)."""
    before = switches(spark, output_root, pipeline)
    switch = Switch(
        seq=(before[-1].seq + 1) if before else 1,
        version=version,
        previous=before[-1].version if before else FIRST,
        fingerprint=fingerprint,
        switched_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        first=first,
        last=last,
        summary=summary,
        tables=list(tables or []),
    )
    lake = Lake(spark)
    folder = join(_folder(output_root, pipeline), SWITCHES)
    lake.mkdirs(folder)
    lake.put_text(join(folder, f"{switch.seq:06d}-{version}.json"), json.dumps(asdict(switch), indent=1) + "\n")
    return switch


def prune(spark: SparkSession | None, output_root: str, pipeline: str, keep: int = KEEP_VERSIONS) -> list[str]:
    """Delete the versions older than the newest ``keep`` up to the current one (the
    current one always kept, and every version newer than it: a rebuild under way);
    the versions deleted. ``v1`` (partition folders at the pipeline's own folder) is
    deleted partition folder by partition folder, its switch records and ``_tables`` kept."""
    current = number(current_version(spark, output_root, pipeline))
    older = [v for v in versions(spark, output_root, pipeline) if number(v) <= current]
    doomed = older[: max(0, len(older) - max(1, keep))]
    lake = Lake(spark)
    for version in doomed:
        if number(version) == 1:
            top = join(str(output_root), pipeline)
            for e in lake.children(top):
                name = e.path.rstrip("/").rsplit("/", 1)[-1]
                if e.is_dir and not name.startswith(("_", ".")):
                    lake.delete(e.path)
        else:
            lake.delete(join(_folder(output_root, pipeline), version))
    return doomed
