"""The commit records of an output: which of its runs is current, read and written safely.

Output layout (one *output* = one replay target, e.g. one partition)::

    OUT/runs/<run id>/aggregates/ late_events/ rejected/ state/ metrics.json/ metrics.prom/
    OUT/_commits/<seq>-<run id>/part-*.json      one commit record per committed run

**Commit.** A replay writes into a run folder of its own, then writes one small commit
record (a single JSON object, written last by Spark's committer:
:meth:`windowing.storage.outputs.Staged.commit`). Readers — ``rewindow verify``, the next
partition, the Dagster assets — take the record that sorts last (highest sequence number,
then run id) and read that run, so they see the previous complete output or the new
complete output, never a mix or a part, on object stores as on local disks. A run killed
at any moment leaves no record, so the previous output stays current and a rerun gives
the same rows. The last :data:`KEEP_RUNS` committed runs are kept for rollback and
comparison (:func:`list_commits`); older runs and abandoned run folders are deleted where
the session can delete (not over Spark Connect, :func:`prune`).

**Concurrent runs of one output** do not lock each other out: both write complete run
folders and both commit; the record that sorts last wins as a whole. Each run takes
sequence number (greatest seen + 1), so a run that commits after another has seen it
sorts after it; two runs that read the same greatest number tie and the later run id
(its start time) wins. Either way the current output is exactly one run's.

Every record is checked before it is followed (:mod:`windowing.storage.records`).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Collection, Mapping, Sequence
from urllib.parse import unquote

from pyspark.sql import Row
from pyspark.sql import functions as F

from windowing.contract import OUTPUTS
from windowing.storage.errors import OutputError, first_line, missing_path
from windowing.storage.lake import Lake, PathArg, display, glob_escape, join
from windowing.storage.records import (
    RECORD_FOLDER,
    DamagedCommitError,
    DamagedRecord,
    is_run_id,
    record_problem,
    run_started,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUNS = "runs"
COMMITS = "_commits"
#: Records of runs that were staged but not committed (windowing.chain: blocking checks failed).
FAILURES = "_failures"
#: Committed runs kept per output (the current one and the four before it).
KEEP_RUNS = 5
#: Uncommitted run folders older than this are abandoned (their run was killed).
ABANDONED_AFTER_S = 6 * 3600
COMMIT_SCHEMA = (
    "seq long, run_id string, run string, committed_at string, pipeline string, fingerprint string, "
    "metrics string, extra string"
)


@dataclass(frozen=True)
class Commit:
    """One commit record: which run of an output is (or was) current, and its figures.

    ``metrics`` is the record's JSON as stored: a replay's metrics
    (``windowing.metrics.ReplayMetrics.from_dict`` reads them), or the figures of another
    analysis written to the same kind of output (lateness, reconcile)."""

    seq: int
    run_id: str
    run: str  # the run folder, relative to the output
    committed_at: str
    pipeline: str
    fingerprint: str
    metrics: dict[str, Any]
    extra: dict[str, Any]
    output: str  # the output this record belongs to

    @property
    def run_path(self) -> str:
        return join(self.output, self.run)

    @property
    def order(self) -> tuple[int, str]:
        return (self.seq, self.run_id)


def list_commits(spark: SparkSession, out: PathArg) -> list[Commit]:
    """Every commit record of the output ``out``, oldest first; [] when none.

    Raises:
        DamagedCommitError: the record that sorts last is damaged (truncated, unparseable,
            or naming a run folder that is not its own under ``out/runs/``): the message
            names its file and how to recover (:mod:`windowing.storage.records`).
    """
    out = str(out)
    commits, damaged = read_records(spark, out)
    blocking = _blocking(commits, damaged)
    if blocking is not None:
        raise DamagedCommitError(blocking.message(out))
    return commits


def read_records(spark: SparkSession, out: str) -> tuple[list[Commit], list[DamagedRecord]]:
    """``(the trusted commit records of out, oldest first; the damaged ones)``: every record
    is checked (:func:`windowing.storage.records.record_problem`), none is followed unchecked."""
    pattern = join(glob_escape(out), COMMITS, "*")
    try:
        rows = _driver_rows(spark, pattern)
        if rows is None:
            rows = spark.read.schema(COMMIT_SCHEMA).json(pattern).withColumn("__file", F.input_file_name()).collect()
    except Exception as exc:
        if missing_path(exc):
            return [], []
        raise OutputError(f"{join(out, COMMITS)}: commit records are unreadable: {first_line(exc)}") from exc
    by_folder: dict[str, list[Row]] = {}
    for r in rows:
        by_folder.setdefault(_record_folder(r["__file"]), []).append(r)
    return _judge(by_folder, out)


#: Up to this many record files, an output's records are read from the driver (no Spark job).
DRIVER_RECORD_FILES = 64


def _driver_rows(spark: SparkSession, pattern: str) -> list[Row] | None:
    """The rows Spark's JSON reader gives for the record files of ``pattern`` with
    :data:`COMMIT_SCHEMA` (and ``__file``), read from the driver through Hadoop's
    ``FileSystem``: one row per non-blank line, all fields null for a line that is not a
    JSON object (a truncated or foreign file), a field null where its value has another
    type. None over Spark Connect or past :data:`DRIVER_RECORD_FILES` files."""
    lake = Lake(spark)
    files = lake.glob_files(pattern, DRIVER_RECORD_FILES)
    if files is None:
        return None
    rows = []
    for path, uri in files:
        for line in lake.read_text(path).split("\n"):  # Spark's line ends (not str.splitlines')
            if line.strip():
                rows.append(Row(**_record_fields(line), __file=uri))
    return rows


def text_rows(root: str, under: tuple[str, ...]) -> list[Row]:
    """The rows Spark's JSON reader gives for the record files matching the glob ``under``
    below the local folder ``root`` (and ``__file``), read with no session
    (:meth:`windowing.storage.lake.Lake.on_driver`): what ``rewindow status`` reads of a
    local history without starting Spark."""
    rows = []
    for uri, text in Lake(None).on_driver(root, "texts", under):
        for line in text.split("\n"):  # Spark's line ends (not str.splitlines')
            if line.strip():
                rows.append(Row(**_record_fields(line), __file=uri))
    return rows


def _record_fields(line: str) -> dict[str, Any]:
    """One line of a record file as Spark's JSON reader reads it under :data:`COMMIT_SCHEMA`."""
    try:
        doc = json.loads(line)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return dict.fromkeys(_COMMIT_FIELDS)
    out: dict[str, Any] = {}
    for name in _COMMIT_FIELDS:
        v = doc.get(name)
        if name == "seq":
            out[name] = v if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63 else None
        elif v is None or isinstance(v, str):
            out[name] = v
        else:  # Spark reads any other JSON value into a string column as its JSON text
            # (a nested one with its source spacing, here compact: only a damaged record has one)
            out[name] = json.dumps(v, separators=(",", ":"))
    return out


def _judge(by_folder: Mapping[str, list[Row]], out: str) -> tuple[list[Commit], list[DamagedRecord]]:
    """The records of one output, by record folder: ``(trusted commits, oldest first; damaged)``."""
    commits, damaged = [], []
    for folder, found in sorted(by_folder.items()):
        problem = "holds more than one record" if len(found) > 1 else record_problem(folder, found[0].asDict(), RUNS)
        if problem is None:
            commits.append(_commit_of(found[0], out))
        else:
            damaged.append(DamagedRecord(unquote(found[0]["__file"]), folder, problem))
    return sorted(commits, key=lambda c: c.order), damaged


def _record_folder(file: str) -> str:
    """The folder name (``<seq>-<run id>``) of a record file Spark listed (a URI, %-quoted)."""
    return unquote(file.rsplit("/", 2)[-2])


def _blocking(commits: Sequence[Commit], damaged: Sequence[DamagedRecord]) -> DamagedRecord | None:
    """The damaged record that sorts after every trusted one, if any: it may have been the
    current record, so the output's current run is unknown. (A damaged record older than
    the current one changes nothing and is swept by :func:`prune`.)"""
    newest = f"{commits[-1].seq:010d}-{commits[-1].run_id}" if commits else ""
    later = [d for d in damaged if d.folder > newest]
    return later[-1] if later else None


def _commit_of(r: Row, output: str) -> Commit:
    """A :class:`Commit` from a commit record row (JSON fields parsed; checked by the caller)."""
    return Commit(
        seq=r["seq"],
        run_id=r["run_id"],
        run=r["run"],
        committed_at=r["committed_at"],
        pipeline=r["pipeline"],
        fingerprint=r["fingerprint"],
        metrics=json.loads(r["metrics"] or "null") or {},
        extra=json.loads(r["extra"] or "null") or {},
        output=output,
    )


def current_commits_under(spark: SparkSession | None, root: PathArg) -> dict[str, Commit]:
    """The current commit of every output directly under ``root`` (``root/<name>/``),
    by name, in one read (e.g. every partition of a pipeline). An output whose newest
    record is damaged is left out (see :func:`commits_under`)."""
    return commits_under(spark, root)[0]


def commits_under(spark: SparkSession | None, root: PathArg) -> tuple[dict[str, Commit], dict[str, DamagedRecord]]:
    """``(current commit by output name, the damaged newest record by output name)`` of every
    output directly under ``root``, in one read. An output is in one of the two at most."""
    root = str(root)
    try:
        if spark is None:  # a local history, read with no JVM (Lake.on_driver)
            rows = text_rows(root, ("*", COMMITS, "*"))
        else:
            rows = (
                spark.read.schema(COMMIT_SCHEMA)
                .json(join(glob_escape(root), "*", COMMITS, "*"))
                .withColumn("__file", F.input_file_name())
                .collect()
            )
    except Exception as exc:
        if missing_path(exc):
            return {}, {}
        raise OutputError(f"{root}: commit records are unreadable: {first_line(exc)}") from exc
    grouped: dict[str, dict[str, list[Row]]] = {}
    for r in rows:
        name = unquote(r["__file"].split(f"/{COMMITS}/", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        grouped.setdefault(name, {}).setdefault(_record_folder(r["__file"]), []).append(r)
    best: dict[str, Commit] = {}
    broken: dict[str, DamagedRecord] = {}
    for name, folders in grouped.items():
        commits, damaged = _judge(folders, join(root, name))
        blocking = _blocking(commits, damaged)
        if blocking is not None:
            broken[name] = blocking
        elif commits:
            best[name] = commits[-1]
    return best, broken


def current_commit(spark: SparkSession, out: PathArg) -> Commit | None:
    """The commit record that names ``out``'s current run, or None before the first commit."""
    commits = list_commits(spark, out)
    return commits[-1] if commits else None


def new_run_id() -> str:
    """A new run's id: its start time (UTC, to the microsecond) and 8 random hex digits."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"


#: The commit record's fields in :data:`COMMIT_SCHEMA`'s order (Spark's JSON writer's order).
_COMMIT_FIELDS = tuple(f.strip().split(" ", 1)[0] for f in COMMIT_SCHEMA.split(","))
#: How Spark's JSON writer (Jackson) escapes a character in a string: the two-character
#: escapes, other control characters as ``\u00XX`` (upper-case hex); nothing else.
_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    **{chr(i): f"\\u{i:04X}" for i in range(0x20) if chr(i) not in "\b\t\n\f\r"},
}
_JSON_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def record_json_line(record: Mapping[str, Any]) -> str:
    """A commit record as the line Spark's JSON writer writes for it as a
    :data:`COMMIT_SCHEMA` row: fields in the schema's order, null ones left out, no
    spaces, strings escaped as Jackson escapes them, then a newline."""
    parts = []
    for name in _COMMIT_FIELDS:
        value = record.get(name)
        if value is None:
            continue
        if isinstance(value, str):
            value = '"' + _JSON_ESCAPE.sub(lambda m: _JSON_ESCAPES[m.group(0)], value) + '"'
        else:
            value = str(int(value))
        parts.append(f'"{name}":{value}')
    return "{" + ",".join(parts) + "}\n"


def prune(
    spark: SparkSession,
    out: str,
    keep: Collection[str] = (),
    records: tuple[list[Commit], list[DamagedRecord]] | None = None,
) -> list[str]:
    """Delete runs beyond the last :data:`KEEP_RUNS` committed, abandoned run folders,
    damaged records older than the current one, and commit folders a killed commit left
    without a record (only a hidden ``_part-...`` file, or an older version's ``_temporary/``)
    once abandoned; never the runs of ``keep`` (run ids: the runs catalog tables point at,
    see :mod:`windowing.catalog`).

    Only what rewindow made is deleted: folders directly under ``out/runs/`` and
    ``out/_commits/`` whose names are its run ids and record folders
    (:mod:`windowing.storage.records`); a record's ``run`` is never followed unchecked. Returns
    what was deleted. A no-op where the session cannot delete (Spark Connect).

    ``records``: the output's records as :func:`read_records` returns them, when the
    caller has them (a commit: those it read, and its own); else they are read.
    """
    lake = Lake(spark)
    if lake.connect:
        return []
    commits, damaged = records if records is not None else read_records(spark, out)
    keep_runs: list[str] = []
    for c in reversed(commits):
        if c.run_id not in keep_runs:
            keep_runs.append(c.run_id)
        if len(keep_runs) == KEEP_RUNS:
            break
    deleted: list[str] = []
    for c in commits:
        if c.run_id not in keep_runs and c.run_id not in keep and is_run_id(c.run_id):
            for p in (join(out, COMMITS, f"{c.seq:010d}-{c.run_id}"), join(out, RUNS, c.run_id)):
                if lake.delete(p):
                    deleted.append(p)
    if commits and _blocking(commits, damaged) is None:
        for d in damaged:  # all older than the current record: superseded
            if RECORD_FOLDER.fullmatch(d.folder) and lake.delete(d.folder_path(out)):
                deleted.append(d.folder_path(out))
    committed = {c.run_id for c in commits}
    seen = {f"{c.seq:010d}-{c.run_id}" for c in commits} | {d.folder for d in damaged}
    now = datetime.now(timezone.utc)
    for parent, in_use in ((RUNS, committed), (COMMITS, seen)):
        for e in lake.children(join(out, parent)):
            name = e.path.rstrip("/").rsplit("/", 1)[-1]
            started = run_started(name)
            if started is None or not e.is_dir or name in in_use:
                continue
            if (now - started).total_seconds() > ABANDONED_AFTER_S and lake.delete(e.path):
                deleted.append(e.path)
    return deleted


def run_is_whole(spark: SparkSession | None, commit: Commit) -> bool:
    """Whether the run a commit record names is still there: every output with its ``_SUCCESS``."""
    lake = Lake(spark)
    return all(lake.exists(join(commit.run_path, name, "_SUCCESS")) for name in OUTPUTS)


def orphaned_message(commit: Commit) -> str:
    """The error for a commit record whose run folder (or part of it) is gone."""
    record = join(commit.output, COMMITS, f"{commit.seq:010d}-{commit.run_id}")
    return (
        f"{display(record)}: the current commit record names run {commit.run}, but "
        f"{display(commit.run_path)} is gone or incomplete (an output or its _SUCCESS is missing): "
        "the output is damaged. Replay into it again (a new record supersedes this one), "
        "or delete this record to make the run before it current"
    )
