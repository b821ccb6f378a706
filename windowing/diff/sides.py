"""The two sides of a diff: what a location given as BEFORE or AFTER is, and its rows.

A side is one of:

* a **history**: ``<root>/<pipeline>`` (each partition's folder under it), or an output
  root with one pipeline under it (``--config`` picks one when it holds several). Each
  partition's current committed run is read, through its commit records, as
  ``rewindow status`` and :mod:`windowing.history` read them; the rows carry their
  partition's key.
* a **replay output** (a ``rewindow replay --output`` folder: its current run), or one run
  folder of it (``OUT/runs/<id>``): one unit, without partitions.

:func:`open_side` tries each kind's detector in :data:`DETECTORS` in turn; a further kind
(the version folders of issue 48) is one more detector returning a :class:`Side`.
Everything here is checked before any row is compared: a path that is not there, holds
no rewindow output, holds another command's output, several pipelines, or a damaged or
orphaned partition is an :class:`~windowing.storage.errors.InputError` naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import TYPE_CHECKING, Callable, Sequence

from pyspark.sql import functions as F

from windowing.storage import versions
from windowing.storage.commits import (
    COMMITS,
    Commit,
    commits_under,
    current_commit,
    orphaned_message,
    run_is_whole,
)
from windowing.storage.errors import InputError
from windowing.storage.lake import Lake, display, glob_escape, join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The kinds of side.
HISTORY, REPLAY = "history", "replay output"
#: The datasets compared, in the order they are reported.
DATASETS = ("aggregates", "late_events", "rejected")
#: The column holding each row's partition key (null for a side without partitions).
PART = "__part"

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_HOUR = re.compile(r"\d{4}-\d{2}-\d{2}-\d{4}")


@dataclass(frozen=True)
class Side:
    """One side of a diff: where it is, its kind, its pipeline, and the run of each of its
    partitions (a replay output: one run under the key ``None``)."""

    location: str
    kind: str
    pipeline: str | None
    #: ``day`` or ``hour`` for a history, None for a replay output.
    grain: str | None
    #: Partition key (``2024-01-01``, ``2024-01-01-00:00``) -> its current run folder.
    runs: dict[str | None, str] = field(default_factory=dict)

    @property
    def partitioned(self) -> bool:
        return self.kind == HISTORY

    @property
    def keys(self) -> list[str]:
        return sorted(k for k in self.runs if k is not None)

    def describe(self) -> str:
        what = f"{self.kind}, {len(self.runs)} partition(s)" if self.partitioned else self.kind
        return f"{display(self.location)} ({what})"

    def within(self, first: str | None, last: str | None) -> Side:
        """This side with only the partitions from ``first`` to ``last`` (bounds as
        :func:`bound_key` makes them; a day bound takes all hours of its day)."""
        if not self.partitioned or (first is None and last is None):
            return self
        runs: dict[str | None, str] = {
            k: r
            for k, r in self.runs.items()
            if k is not None
            and (first is None or k[: len(first)] >= first)
            and (last is None or k[: len(last)] <= last)
        }
        return Side(self.location, self.kind, self.pipeline, self.grain, runs)

    def frames(self, spark: SparkSession, partitioned: bool) -> dict[str, DataFrame]:
        """Each dataset of :data:`DATASETS`, every partition's rows in one DataFrame, with
        the partition key in :data:`PART` (null when ``partitioned`` is False)."""
        lake = Lake(spark)
        runs = sorted(self.runs.items(), key=lambda kv: kv[0] or "")
        out: dict[str, DataFrame] = {}
        for name in DATASETS:
            parts = [
                _dataset(spark, lake, run, name).withColumn(PART, F.lit(key if partitioned else None).cast("string"))
                for key, run in runs
            ]
            out[name] = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts)
        return out


def _dataset(spark: SparkSession, lake: Lake, run: str, name: str) -> DataFrame:
    """One dataset of a run folder (only the compared ones are read: not the state)."""
    folder = join(run, name)
    if not lake.exists(join(folder, "_SUCCESS")):
        raise InputError(f"{display(folder)}: missing or incomplete output")
    return spark.read.parquet(glob_escape(folder))


def bound_key(text: str | None) -> str | None:
    """A ``--from``/``--to`` bound as a partition key prefix: ``2024-01-02`` or
    ``2024-01-02T05`` -> ``2024-01-02-05:00``. Checked by :func:`windowing.partitions.check_bound` first."""
    if text is None:
        return None
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})(?:[T -](\d{2})(?::(\d{2}))?)?", text.strip())
    if m is None:  # check_bound refused it already
        raise ValueError(f"{text!r}: not a day or an hour")
    return m[1] if m[2] is None else f"{m[1]}-{m[2]}:{m[3] or '00'}"


def split_version(location: str) -> tuple[str, str | None]:
    """``OUT/<pipeline>@v2`` -> ``(OUT/<pipeline>, "v2")``: a version of a history by name
    (:mod:`windowing.storage.versions`); without ``@``, the current one (None)."""
    m = re.fullmatch(r"(.+)@(v[1-9][0-9]*)", location)
    return (m[1], m[2]) if m else (location, None)


def check_location(location: str, option: str) -> None:
    """Refuse, before Spark starts, a local path that does not exist (a URI is checked
    once Spark is up)."""
    location = split_version(location)[0]
    if "://" in location or location.startswith("file:"):
        return
    if not Lake(None).exists(location):  # the driver's own disk, no JVM
        raise InputError(f"{option} {location}: no such folder")


def open_side(spark: SparkSession, location: str, pipeline: str | None = None, option: str = "") -> Side:
    """What ``location`` holds, as a :class:`Side` (module docstring). ``pipeline``: the
    pipeline to take from an output root holding several. ``option`` names the argument
    in errors (``BEFORE``, ``AFTER``)."""
    lake = Lake(spark)
    where = f"{option} {display(location)}".strip()
    location, version = split_version(location)
    if not lake.exists(location):
        raise InputError(f"{where}: no such folder")
    if version is not None:  # OUT/<pipeline>@vN, or OUT@vN with one pipeline (or --config)
        top = location.rstrip("/")
        if pipeline is not None and top.rsplit("/", 1)[-1] != pipeline:
            top = join(top, pipeline)
        parent, name = top.rsplit("/", 1)
        have = versions.versions(spark, parent, name)
        if version not in have:
            raise InputError(f"{where}: {name!r} has no version {version} (it has {', '.join(have) or 'none'})")
        side = _history_at(spark, join(versions.version_root(parent, name, version), name), where)
        if side is None:
            raise InputError(f"{where}: nothing committed in version {version} of {name!r}")
        return replace(side, location=f"{top}@{version}")
    for detect in DETECTORS:
        side = detect(spark, lake, location, pipeline, where)
        if side is not None:
            return side
    raise InputError(
        f"{where}: neither a replay output (no {COMMITS}/ here) nor a history "
        "(no partition committed under it, nor under one pipeline folder in it)"
    )


Detector = Callable[["SparkSession", Lake, str, "str | None", str], "Side | None"]


def _replay_output(spark: SparkSession, lake: Lake, location: str, pipeline: str | None, where: str) -> Side | None:
    commit = current_commit(spark, location)
    if commit is None:
        return None
    kind = commit.extra.get("kind")
    if kind:
        raise InputError(f"{where}: this is a `rewindow {kind}` output, not a replay output or a history")
    _whole(spark, commit)
    return Side(location, REPLAY, commit.pipeline, None, {None: commit.run_path})


def _run_folder(spark: SparkSession, lake: Lake, location: str, pipeline: str | None, where: str) -> Side | None:
    if not lake.exists(join(location, "aggregates", "_SUCCESS")):
        return None
    return Side(location, REPLAY, None, None, {None: location})


def _pipeline_history(spark: SparkSession, lake: Lake, location: str, pipeline: str | None, where: str) -> Side | None:
    parent, _, name = location.rstrip("/").rpartition("/")
    current = versions.current_version(spark, parent, name) if parent else versions.FIRST
    if current != versions.FIRST:  # a history rebuilt and switched: its current version's folder
        return _history_at(spark, join(versions.version_root(parent, name, current), name), where)
    return _history_at(spark, location, where)


def _history_at(spark: SparkSession, location: str, where: str) -> Side | None:
    """The history whose partition folders are directly under ``location`` (one version)."""
    found, damaged = commits_under(spark, location)
    keys = {name: _key(name) for name in [*found, *damaged]}
    if not any(keys.values()):
        return None
    bad = sorted(name for name in damaged if keys[name])
    if bad:
        raise InputError(f"{where}: partition {bad[0]}: {damaged[bad[0]].message(join(location, bad[0]))}")
    grains = {g for k, g in (v for v in keys.values() if v)}
    if len(grains) > 1:
        raise InputError(f"{where}: holds both day and hour partitions: one history has one grain")
    runs: dict[str | None, str] = {}
    names = set()
    for name, commit in found.items():
        key = keys[name]
        if key is None:
            continue
        _whole(spark, commit)
        runs[key[0]] = commit.run_path
        names.add(commit.pipeline)
    name = location.rstrip("/").rsplit("/", 1)[-1]
    return Side(location, HISTORY, sorted(names)[0] if names else name, grains.pop(), runs)


def _output_root(spark: SparkSession, lake: Lake, location: str, pipeline: str | None, where: str) -> Side | None:
    children = [e.path.rstrip("/") for e in lake.children(location) if e.is_dir]
    children = [c for c in children if not c.rsplit("/", 1)[-1].startswith(("_", "."))]
    if pipeline is not None:
        named = [c for c in children if c.rsplit("/", 1)[-1] == pipeline]
        if not named:
            return None
        children = named
    sides = [s for s in (_pipeline_history(spark, lake, c, None, where) for c in children) if s is not None]
    if len(sides) > 1:
        names = ", ".join(s.location.rsplit("/", 1)[-1] for s in sides)
        raise InputError(f"{where}: holds the histories of several pipelines ({names}): pass --config to pick one")
    return sides[0] if sides else None


#: How a location is recognised, in order: the first detector that returns a side wins.
DETECTORS: Sequence[Detector] = (_replay_output, _run_folder, _pipeline_history, _output_root)


def _key(folder: str) -> tuple[str, str] | None:
    """``(partition key, grain)`` of a partition folder's name, or None."""
    if _HOUR.fullmatch(folder):
        return f"{folder[:-2]}:{folder[-2:]}", "hour"
    if _DAY.fullmatch(folder):
        return folder, "day"
    return None


def _whole(spark: SparkSession, commit: Commit) -> None:
    if not run_is_whole(spark, commit):
        raise InputError(orphaned_message(commit))
