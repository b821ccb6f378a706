"""The state manifest: a run's state is whole, or it is refused (issue 26).

Spark reads a Parquet dataset as whatever part files are in its folder: a state that lost
a part file reads fine, with fewer rows, and the windows that part held open are lost
without a word. So a replay writes, with its state, a manifest of it::

    OUT/runs/<run id>/state/_manifest.json     (a hidden name: Spark's readers skip it)

and the same manifest goes into the run's commit record (``extra.state_manifest``), where
deleting the file cannot hide a change. It lists every part file with its row count
(from the Parquet footer), the total, and :func:`content_hash` of the window rows
(``state_kind = 'window'``: the open windows the next partition continues).

Every reader of a state (:func:`windowing.storage.outputs.read_state`: ``--state-in``, the next
partition of a backfill, the Dagster assets, ``verify --state-in``) checks part names and
row counts against the manifest before any work (footers only, no Spark job): a missing or
extra part, or a count that differs, is a :class:`~windowing.storage.errors.StateError` naming the run
and the part. ``rewindow verify`` checks it too, and recomputes the content hash.

A state written before manifests existed (no manifest anywhere) is read as before.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql.types import MapType

from windowing.contract import WINDOW_KIND, WORKER_KIND, quoted
from windowing.storage.lake import Lake, display, glob_escape, is_connect, join

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

#: The manifest's file name inside the state folder.
MANIFEST = "_manifest.json"
#: Its key in a commit record's ``extra``.
RECORD_KEY = "state_manifest"


@dataclass(frozen=True)
class StateManifest:
    """What a state folder holds: ``parts`` (file name, rows) sorted by name, their
    ``total_rows``, and ``window_rows_hash`` (:func:`content_hash` of the window rows)."""

    parts: tuple[tuple[str, int], ...]
    total_rows: int
    window_rows_hash: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "parts": [{"file": f, "rows": n} for f, n in self.parts],
            "total_rows": self.total_rows,
            "window_rows_hash": self.window_rows_hash,
        }

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> StateManifest:
        """Read a manifest; ``ValueError`` naming ``where`` when it is not one."""
        try:
            parts = tuple((str(p["file"]), int(p["rows"])) for p in doc["parts"])
            return cls(parts, int(doc["total_rows"]), str(doc["window_rows_hash"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: not a state manifest ({type(exc).__name__}: {exc})") from None


def content_hash(df: DataFrame) -> str:
    """An order-independent hash of a DataFrame's content: ``<rows>-<sum of row hashes>``.

    Spark's Parquet files are not byte-identical across runs (file names, writer
    metadata), but the rows are: hash each row with ``xxhash64`` over all columns in
    name order (maps turned into key-sorted entry arrays, which xxhash64 accepts) and
    add the hashes up exactly, so row order and file layout do not matter.
    """
    return content_hashes(df)[0]


def content_hashes(df: DataFrame, where: Column | None = None) -> tuple[str, str | None]:
    """:func:`content_hash` of ``df``, and of its rows where ``where`` holds (None without
    it), from one aggregation: the same strings as two calls, one job."""
    first = df.select(*hash_aggregates(df, where)).first()
    assert first is not None  # a global aggregate has exactly one row
    return _hash_strings(list(first), where is not None)


def hash_aggregates(df: DataFrame, where: Column | None) -> list[Column]:
    """The aggregates :func:`content_hashes` computes: rows and the exact sum of their
    hashes, then the same over the rows where ``where`` holds (with ``where``)."""
    cols = []
    for field in sorted(df.schema.fields, key=lambda f: f.name):
        c = F.col(quoted(field.name))
        if isinstance(field.dataType, MapType):
            c = F.array_sort(F.map_entries(c))
        cols.append(c)
    row = (F.xxhash64(*cols) if cols else F.lit(0)).cast("decimal(38,0)")
    aggs = [F.count(F.lit(1)).alias("n"), F.coalesce(F.sum(row), F.lit(0)).alias("s")]
    if where is not None:
        chosen = F.coalesce(where, F.lit(False))
        aggs += [
            F.count(F.when(chosen, F.lit(1))).alias("n_where"),
            F.coalesce(F.sum(F.when(chosen, row)), F.lit(0)).alias("s_where"),
        ]
    return aggs


def _hash_strings(values: list[Any], with_where: bool) -> tuple[str, str | None]:
    return f"{values[0]}-{values[1]}", (f"{values[2]}-{values[3]}" if with_where else None)


#: Seconds :class:`ObservedState` waits, after the write, for Spark to report the metrics.
OBSERVED_WAIT_S = 30.0


@dataclass(frozen=True)
class StateSummary:
    """What a replay continuing from a state reads of it before its kernel
    (``windowing.runner.normalise.split_state``): its distinct ``fingerprints`` (at most
    three; none without the column) and its ``worker_rows`` (``state_kind = 'worker'``:
    one per worker, with at least the worker column, ``batch``, ``watermark_ms`` and
    ``clock_ms``)."""

    fingerprints: tuple[str, ...]
    worker_rows: tuple[Row, ...]


class ObservedState:
    """A state DataFrame whose :func:`content_hash` (whole, and of its window rows) Spark
    computes while the state is written: ``frame`` is what to write, :meth:`hashes` the two
    strings once the write has succeeded (the same strings as :func:`content_hashes` of the
    state read back, without reading it: one job fewer per replay). On a classic session
    only (a Spark Connect write does not report observed metrics): elsewhere ``frame`` is
    the state as given and :meth:`hashes` is None."""

    def __init__(self, state: DataFrame) -> None:
        self.where = F.col("state_kind") == WINDOW_KIND if "state_kind" in state.columns else None
        self.observation: Observation | None = None
        self._metrics: dict[str, Any] | None = None
        self.frame = state
        if not is_connect(state.sparkSession):
            aggs = state_aggregates(state)
            self.observation = Observation(f"rewindow_state_hashes_{uuid.uuid4().hex}")
            self.frame = state.observe(self.observation, *aggs)

    def _observed(self) -> dict[str, Any] | None:
        """The observed metrics once Spark has reported them (its listener reports them just
        after the write returns), else None: a plan Spark ran without the observation is
        read back instead of waiting for metrics that will not come."""
        if self.observation is None:
            return None
        if self._metrics is None:
            jo = self.observation._jo  # the JVM Observation: its future says whether Spark reported
            if jo is None:
                return None
            future = jo.future()
            deadline = time.monotonic() + OBSERVED_WAIT_S
            while not future.isCompleted() and time.monotonic() < deadline:
                time.sleep(0.005)
            if not future.isCompleted():
                self.observation = None
                return None
            self._metrics = self.observation.get
        return self._metrics

    def hashes(self) -> tuple[str, str] | None:
        """``(whole, window rows)`` of the written state (both the whole hash without a
        ``state_kind`` column); call after the write has succeeded."""
        got = self._observed()
        if got is None:
            return None
        return observed_hashes(got, self.where is not None)

    def summary(self) -> StateSummary | None:
        """The written state's :class:`StateSummary` (None where not observed: over Spark
        Connect, or for a state without ``state_kind``); call after the write."""
        got = self._observed() if self.where is not None else None
        if got is None:
            return None
        return summary_of(got)


def state_aggregates(state: DataFrame) -> list[Column]:
    """What :class:`ObservedState` observes of a state as it is written: its
    :func:`hash_aggregates` (the window rows apart), and with a ``state_kind`` column the
    summary the next replay reads (:class:`StateSummary`: ``workers``, ``fingerprints``)."""
    where = F.col("state_kind") == WINDOW_KIND if "state_kind" in state.columns else None
    aggs = hash_aggregates(state, where)
    if where is not None:
        worker = F.col("state_kind") == WORKER_KIND
        aggs.append(
            F.collect_list(F.when(worker, F.struct(*[F.col(quoted(c)).alias(c) for c in state.columns]))).alias(
                "workers"
            )
        )
        if "fingerprint" in state.columns:
            aggs.append(F.collect_set("fingerprint").alias("fingerprints"))
    return aggs


def observed_hashes(got: Mapping[str, Any], with_where: bool) -> tuple[str, str]:
    """``(whole, window rows)`` hashes from the values of :func:`hash_aggregates` (the whole
    hash twice without ``where``)."""
    keys = ("n", "s", "n_where", "s_where") if with_where else ("n", "s")
    whole, windows = _hash_strings([got[k] for k in keys], with_where)
    return whole, windows or whole


def summary_of(got: Mapping[str, Any]) -> StateSummary:
    """The :class:`StateSummary` from a state's aggregated ``workers`` and ``fingerprints``."""
    return StateSummary(tuple(sorted(got.get("fingerprints") or ()))[:3], tuple(got.get("workers") or ()))


def window_rows_hash(state: DataFrame) -> str:
    """:func:`content_hash` of a state's window rows (of every row for a state without
    ``state_kind``: the open windows of ``rewindow lateness``' variants)."""
    if "state_kind" not in state.columns:
        return content_hash(state)
    return content_hash(state.where(F.col("state_kind") == WINDOW_KIND))


def _part_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def part_rows(lake: Lake, folder: str) -> dict[str, int]:
    """Every part file of a state folder (as Spark would read them) and its row count, from
    the Parquet footers (no data page read)."""
    rows = {}
    for e in lake.files(folder):
        try:
            rows[_part_name(e.path)] = lake.parquet_rows(e.path)
        except Exception as exc:  # Hadoop/Parquet raise many types for a bad file
            raise ValueError(f"{display(e.path)}: not a readable Parquet file (corrupted or truncated?)") from exc
    return rows


def write_manifest(spark: SparkSession, folder: str) -> StateManifest:
    """Make the manifest of the state just written in ``folder`` and write it there."""
    return write_state_manifest(spark, folder)[0]


def write_state_manifest(
    spark: SparkSession, folder: str, schema: StructType | None = None, hashes: tuple[str, str] | None = None
) -> tuple[StateManifest, str]:
    """:func:`write_manifest`, and :func:`content_hash` of the whole state as written (the
    partition's lineage records it). ``hashes``: the whole state's and its window rows'
    hashes when Spark computed them as it wrote the state (:class:`ObservedState`); else
    both come from one read of the state, with ``schema``, the state's as Spark reads it
    back, when known (else inferred, a job of its own)."""
    lake = Lake(spark)
    parts = tuple(sorted(part_rows(lake, folder).items()))
    if hashes is not None:
        whole, windows = hashes
    else:
        reader = spark.read.schema(schema) if schema is not None else spark.read
        state = reader.parquet(glob_escape(folder))
        if "state_kind" in state.columns:
            whole, found = content_hashes(state, F.col("state_kind") == WINDOW_KIND)
            assert found is not None  # asked for
            windows = found
        else:  # every row (window_rows_hash)
            whole = windows = content_hash(state)
    manifest = StateManifest(parts, sum(n for _, n in parts), windows)
    lake.put_text(join(folder, MANIFEST), json.dumps(manifest.to_dict(), sort_keys=True))
    return manifest, whole


def stored_manifest(spark: SparkSession, folder: str, record_extra: Mapping[str, Any] | None) -> StateManifest | None:
    """The manifest a state folder must match: its commit record's when it has one (the
    record cannot lose it), else the folder's ``_manifest.json``; None for a state written
    before manifests. ``ValueError`` naming the file when the manifest itself is damaged."""
    if record_extra and RECORD_KEY in record_extra:
        return StateManifest.from_dict(record_extra[RECORD_KEY], "the commit record's state manifest")
    lake = Lake(spark)
    path = join(folder, MANIFEST)
    if not lake.exists(path):
        return None
    try:
        doc = json.loads(lake.read_text(path))
    except ValueError as exc:
        raise ValueError(f"{display(path)}: not a state manifest ({exc})") from None
    return StateManifest.from_dict(doc, display(path))


def manifest_problem(lake: Lake, folder: str, manifest: StateManifest) -> str | None:
    """What in ``folder`` disagrees with ``manifest`` (a part missing, a part it does not
    list, a row count), as one phrase naming the part; None when the parts are as written."""
    found = part_rows(lake, folder)
    listed = dict(manifest.parts)
    for name, rows in manifest.parts:
        if name not in found:
            return (
                f"state part {name} ({rows} rows) is missing: the manifest lists {len(listed)} part(s), "
                f"{manifest.total_rows} rows"
            )
    for name in sorted(found):
        if name not in listed:
            return f"state part {name} is not in its manifest (a file added after the run wrote its state)"
    for name, rows in manifest.parts:
        if found[name] != rows:
            return f"state part {name} holds {found[name]} rows, its manifest says {rows}"
    if sum(found.values()) != manifest.total_rows:
        return f"the state holds {sum(found.values())} rows, its manifest says {manifest.total_rows}"
    return None


def verify_problem(
    spark: SparkSession, run_path: str, record_extra: Mapping[str, Any] | None, state: DataFrame
) -> str | None:
    """For ``rewindow verify``: what is wrong with a run's state against its manifest (parts,
    row counts, then the window rows' content hash, recomputed from ``state``); None when
    it matches. Raises ``LookupError`` when the run has no manifest (written before them)."""
    folder = join(run_path, "state")
    try:
        stored = stored_manifest(spark, folder, record_extra)
        if stored is None:
            raise LookupError("the state has no manifest (written by a rewindow before 2026-11)")
        problem = manifest_problem(Lake(spark), folder, stored)
    except ValueError as exc:
        return str(exc)
    if problem is not None:
        return problem
    found = window_rows_hash(state)
    if found != stored.window_rows_hash:
        return (
            f"the window rows' content hash is {found}, its manifest says {stored.window_rows_hash}: "
            "the state's rows were changed after the run wrote them"
        )
    return None
