"""The partition chain: a history of arrival-time partitions replayed in order, each from the
state the one before it left. One implementation for every way of running a backfill: the
Dagster assets (``assets/pipelines.py``), ``rewindow backfill`` and the Airflow operator
(``orchestration/airflow.py``) all call :class:`Chain`. Nothing here imports Dagster.

The rules, over a pipeline, a landing zone, an output root and :class:`Partitions`:

* **Order.** Partitions are replayed oldest to newest. The first partition of the history
  starts from no state (and takes the landing zone's unplaced rows: see
  :mod:`windowing.landing`); every other one starts from the current state of the
  partition before it, read from the store (:mod:`windowing.storage.store`), never from memory,
  so a range in one go equals partition after partition, bit for bit.
* **Refusals before any work.** A partition is not replayed when the one before it is
  missing, out of date (a rerun changed an earlier state since), failed its blocking
  checks, or was flushed at end: :class:`ChainError` names the partition and what to run.
* **Write-audit-publish.** Each partition's outputs are staged, checked
  (:func:`windowing.validation.run_checks`), and committed with their lineage and check
  results only when no blocking check failed. A failing partition is not committed: its
  staged run stays for inspection, a failure record (``_failures/``) says why, and the
  chain stops before the next partition. (The next partition replays from the staged
  state while a partition is audited, and is staged only: if the audit fails, its staged
  run is deleted, and what the chain committed and reported is what it would have been
  one partition after the other.)
* **Reruns.** A rerun of a past partition that changes its state marks every later
  committed partition out of date (:func:`windowing.storage.store.out_of_date_partitions`);
  replaying from there makes them equal to a fresh full run again. A rerun that
  reproduces the same state (replays are deterministic) changes nothing.
* **Resume.** After a killed run, :meth:`Chain.resume_point` is the first partition of a
  range that is not committed and current: nothing before it is replayed again.

One module over the ~600 lines of the others, for one concept: these rules read the same
store they write, and a refusal (:meth:`Chain.starting_state`), a status
(:meth:`Chain.status`) and a commit must agree on what "committed and current" means.
The partition calendar is :mod:`windowing.partitions`; reports over a stored history are
:mod:`windowing.history`.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generator, Iterable, Iterator, Protocol, Sequence

from pyspark.sql import Row
from pyspark.sql import functions as F

from windowing import landing
from windowing.catalog import CatalogError
from windowing.config import ConfigError
from windowing.metrics import ReplayMetrics
from windowing.partitions import Partitions
from windowing.runner import placement
from windowing.runner.normalise import StateMismatchError
from windowing.runner.passes import PART_COLUMN, batch_ranges, replay_pass
from windowing.runner.replay import release_held, replay
from windowing.storage import input_record, store
from windowing.storage.commits import (
    FAILURES,
    RUNS,
    commits_under,
    orphaned_message,
    run_is_whole,
)
from windowing.storage.errors import InputError, OutputError, StateError, missing_path
from windowing.storage.lake import Lake, glob_escape, inside, is_connect, join
from windowing.storage.outputs import read_state, read_state_and_commit, stage_outputs
from windowing.storage.pass_outputs import written_pass
from windowing.validation import CheckResult, blocking_failures, run_checks, run_pass_checks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.catalog import Published, Publisher
    from windowing.config import Pipeline
    from windowing.storage.commits import Commit
    from windowing.storage.lake import Entry
    from windowing.storage.outputs import ReplayOutputs, Staged

#: Spark setting: partitions one pass replays at most (:meth:`Chain.pass_keys`); ``1``
#: replays them one by one; unset (the default), as many as the events allow.
PASS_CONF = "spark.rewindow.partitionsPerPass"

#: Partition statuses of :meth:`Chain.status`.
COMMITTED, OUT_OF_DATE, FAILED, MISSING = "committed", "out of date", "failed", "missing"
#: A partition whose newest commit record is damaged, or whose committed run is gone (issue 26).
DAMAGED = "damaged"

log_default = logging.getLogger("rewindow.chain")


class ChainLog(Protocol):
    """Where the chain says what it does: a :class:`logging.Logger`, Dagster's log manager,
    Airflow's task log (the three levels it uses, each with one message)."""

    def info(self, msg: str, /) -> None: ...

    def warning(self, msg: str, /) -> None: ...

    def error(self, msg: str, /) -> None: ...


class ChainError(RuntimeError):
    """A partition cannot be replayed (or the chain cannot go on): says which and what to run."""

    def __init__(self, message: str, partition: str | None = None, metadata: dict[str, Any] | None = None):
        super().__init__(message)
        self.partition = partition
        self.metadata = metadata or {}


def check_roots(output_root: str, landing_zone: str) -> None:
    """The output root must not be the landing zone, inside it, or hold it (:class:`ChainError`)."""
    out, zone = str(output_root), str(landing_zone)
    if inside(out, zone) or inside(zone, out):
        raise ChainError(
            f"output root {out} overlaps the landing zone {zone}: outputs would be read as events "
            "(or written over them); choose an output root outside the landing zone "
            "(REWINDOW_OUTPUT_ROOT, --output)"
        )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PartitionResult:
    """One partition replayed (or, for the partition before a run, read back)."""

    key: str
    folder: str  # the partition's output (its commit records and runs)
    run_path: str  # the committed run this result is
    metrics: ReplayMetrics
    lineage: store.Lineage
    state: DataFrame | None  # the state as written, read back: the next partition's start (None: not read)
    checks: tuple[CheckResult, ...] = ()  # this partition's data-quality results (empty: not run)
    seconds: float = 0.0  # replay and write time of the partition
    #: False: a blocking check failed, so the run was staged but not committed (run_path
    #: is the staged run, kept for inspection; the previous committed output stays current).
    committed: bool = True


@dataclass(frozen=True)
class PartitionStatus:
    """Where one partition stands: :data:`COMMITTED`, :data:`OUT_OF_DATE`, :data:`FAILED` or :data:`MISSING`."""

    key: str
    status: str
    detail: str = ""
    run_path: str | None = None
    #: The committed run's metrics; None for a missing or failed partition.
    metrics: ReplayMetrics | None = field(default=None, compare=False)
    #: How its landed files changed since its commit (:mod:`windowing.storage.input_record`); None: unchanged.
    changes: input_record.InputChanges | None = field(default=None, compare=False)
    #: Its commit records no input files (committed before they were recorded, or a flat landing zone).
    input_unknown: bool = field(default=False, compare=False)
    #: The landing zone its commit read (a URI); None where the commit records none.
    landing_zone: str | None = field(default=None, compare=False)


def _zone_of(commit: Commit) -> str | None:
    """The landing zone ``commit`` records it read, if it records one."""
    record = input_record.InputRecord.of(commit)
    return record.landing_zone if record is not None else None


def _checks_extra(results: Iterable[CheckResult]) -> dict[str, Any]:
    """The partition's data-quality results, for its commit record (beside its lineage and
    its input files)."""
    return {"checks": [{"name": r.name, "passed": r.passed, **r.metadata()} for r in results]}


@dataclass(frozen=True)
class _StagedPartition:
    """A partition replayed and staged: not yet checked or committed. The next partition
    can start from it (``key``, ``run_path``, ``state``). Its outputs are read back from the
    staged run when first asked for (a pass's partitions, checked together, need only their
    state's)."""

    key: str
    staged: Staged
    events: DataFrame  # the partition's events, as the replay read them (for the input checks)
    metrics: ReplayMetrics
    flush: bool
    seconds: float  # replay and write time
    #: The landed files the partition read (None: a flat landing zone, not tracked per partition).
    inputs: input_record.InputRecord | None = None
    #: Its check results, when its pass ran every partition's checks together (None: not yet run).
    checks: tuple[CheckResult, ...] | None = None

    @property
    def run_path(self) -> str:
        return str(self.staged.path)

    @cached_property
    def outputs(self) -> ReplayOutputs:
        """The staged outputs, read back (:meth:`Staged.read`)."""
        return self.staged.read()

    @cached_property
    def state(self) -> DataFrame:
        """The staged state, read back (alone, unless the outputs are read already)."""
        return self.outputs.state if "outputs" in self.__dict__ else self.staged.read_state()

    def discard(self) -> None:
        """Delete the staged run (never committed: nothing points at it), and the partition's
        ``runs/`` and own folder if that leaves them empty (a partition never replayed before)."""
        lake = Lake(self.staged.spark)
        if lake.delete(self.staged.path):
            lake.delete_empty_folders([join(self.staged.output, RUNS), self.staged.output])


# --------------------------------------------------------------------------- the chain


@dataclass
class Chain:
    """The partition chain of one pipeline (module docstring).

    ``landing_zone``: the events (any URI Spark reads; ``partition_column`` as in
    :mod:`windowing.landing`, None for a flat layout). ``output_root``: partition ``K``
    is committed under ``<output_root>/<pipeline name>/<K without ':'>/``.
    """

    #: None: a local history, read with no JVM (commit records and listings only: no replay).
    spark: SparkSession | None
    pipeline: Pipeline
    landing_zone: str
    output_root: str
    partitions: Partitions
    partition_column: str | None = landing.DEFAULT_PARTITION_COLUMN
    log: ChainLog = log_default
    #: Publishes each committed partition to catalog tables; None: not published.
    publisher: Publisher | None = None
    #: Arrival ranges of the landed files read so far, by (path, size, mtime) (hourly records).
    _arrivals: dict[tuple[str, int, int], tuple[int | None, int | None, int] | None] = field(
        default_factory=dict, repr=False, init=False
    )

    @property
    def session(self) -> SparkSession:
        """The Spark session, for the work that needs one (replaying, checking, reading a state)."""
        assert self.spark is not None, "a chain without a Spark session reads its history only"
        return self.spark

    @property
    def pipeline_dir(self) -> str:
        return join(str(self.output_root), self.pipeline.name)

    def folder(self, key: str) -> str:
        return store.partition_dir(self.output_root, self.pipeline.name, key)

    def check_roots(self) -> None:
        check_roots(self.output_root, self.landing_zone)

    def input_paths(self) -> list[str]:
        """What the partitions read (an output may not be inside one, nor hold one)."""
        return [self.landing_zone]

    def previous_partition(self, key: str, start: PartitionResult | None) -> str | None:
        """The partition before ``key`` in its lineage (None for the first of the history)."""
        return self.partitions.previous(key)

    # ----------------------------------------------------------------- reading the store

    def commits(self, keys: Iterable[str]) -> dict[str, Commit]:
        """The current commit of each of ``keys`` that has one (one read)."""
        return store.pipeline_commits(self.spark, self.pipeline_dir, keys)

    def committed(self) -> dict[str, Commit]:
        """Every committed partition of the history, oldest first: key -> current commit
        (one read of the commit records). Partitions whose newest record is damaged are
        not among them (:meth:`damaged`)."""
        return self._store()[0]

    def damaged(self) -> dict[str, str]:
        """The partitions whose newest commit record is damaged: key -> what to tell the user
        (the record's file, what is wrong, and the way out)."""
        return self._store()[1]

    def _store(self) -> tuple[dict[str, Commit], dict[str, str]]:
        current, broken = commits_under(self.spark, self.pipeline_dir)
        found: dict[str, Commit] = {}
        damaged: dict[str, str] = {}
        for name in (*current, *broken):  # a name is in one of the two at most
            try:
                key = self._key_of_folder(name)
            except ValueError:
                continue
            if self.partitions.start_of(key) < self.partitions.start:
                continue
            if name in current:
                found[key] = current[name]
            else:
                damaged[key] = (
                    f"{broken[name].message(join(self.pipeline_dir, name))}; "
                    f"or rerun it: rewindow backfill ... --rerun-from {key}"
                )
        return dict(sorted(found.items(), key=lambda kv: self.partitions.start_of(kv[0]))), damaged

    def committed_keys(self) -> list[str]:
        """Every partition of the history with a commit, oldest first."""
        return list(self.committed())

    def _key_of_folder(self, name: str) -> str:
        key = f"{name[:-2]}:{name[-2:]}" if self.partitions.grain == "hour" else name
        self.partitions.start_of(key)
        return key

    def out_of_date(self, last: str | None = None) -> list[store.OutOfDate]:
        """The committed partitions up to ``last`` (default: the newest committed) that no
        longer follow from the state before them, oldest first."""
        commits = self.committed()
        keys = self._up_to(last, commits)
        changed, _ = self.input_changes(commits, keys)
        return store.out_of_date_partitions(
            commits,
            self.pipeline.fingerprint(),
            [(k, self.partitions.previous(k)) for k in keys],
            {k: c.describe() for k, c in changed.items()},
        )

    def input_changes(
        self, commits: dict[str, Commit], keys: Iterable[str] | None = None
    ) -> tuple[dict[str, input_record.InputChanges], list[str]]:
        """``(how each committed partition's landed files changed since its commit, where
        they did; the partitions whose commit records no files)``, over ``keys`` of
        ``commits`` (default: all): each compared with the landing zone it was read from,
        one listing a day folder (:mod:`windowing.storage.input_record`)."""
        return input_record.input_changes(self.spark, commits, keys)

    def _up_to(self, last: str | None, known: Iterable[str]) -> list[str]:
        """Every partition from the start of the history to the newest of ``last`` and ``known``."""
        ends = [k for k in (last, *known) if k]
        return self.partitions.keys(None, max(ends, key=self.partitions.start_of)) if ends else []

    def failures(self, keys: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """The newest failure record of each of ``keys`` (default: every partition) that has
        one (see :meth:`_record_failure`)."""
        wanted = None if keys is None else {store.partition_folder(k): k for k in keys}
        if wanted == {}:
            return {}
        try:
            if self.spark is None:  # a local history, read with no JVM
                rows = [
                    Row(**{k: doc.get(k) for k in ("run_id", "run_path", "failed_checks", "recorded_at")}, __file=uri)
                    for uri, text in Lake(None).on_driver(self.pipeline_dir, "texts", ("*", FAILURES, "*"))
                    for line in text.split("\n")
                    if line.strip() and isinstance(doc := _json_object(line), dict)
                ]
            else:
                records = join(glob_escape(self.pipeline_dir), "*", FAILURES, "*")
                rows = (
                    self.spark.read.schema(FAILURE_SCHEMA)
                    .json(records)
                    .withColumn("__file", F.input_file_name())
                    .collect()
                )
        except Exception as exc:
            if missing_path(exc):
                return {}
            raise
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            folder = r["__file"].split(f"/{FAILURES}/", 1)[0].rstrip("/").rsplit("/", 1)[-1]
            key: str | None
            if wanted is None:
                try:
                    key = self._key_of_folder(folder)
                except ValueError:
                    continue
            else:
                key = wanted.get(folder)
            if key is not None and (key not in out or r["run_id"] > out[key]["run_id"]):
                out[key] = r.asDict()
        return out

    def status(self, keys: Sequence[str] | None = None) -> list[PartitionStatus]:
        """Where each partition stands, oldest first: ``keys``, or every partition from the
        start of the history to the newest committed or failed one.

        *failed*: its newest replay failed a blocking check (or crashed after staging) and
        was not committed, after its current commit if any; *out of date*: committed, but no
        longer following from the state before it; *committed*; *missing*: nothing committed.
        """
        commits, damaged = self._store()
        failed = self.failures()
        keys = self._up_to(None, [*commits, *failed, *damaged]) if keys is None else list(keys)
        if not keys:
            return []
        history = self._up_to(None, keys)
        changed, unknown = self.input_changes(commits, history)
        stale = {
            s.partition: s.reason
            for s in store.out_of_date_partitions(
                commits,
                self.pipeline.fingerprint(),
                [(k, self.partitions.previous(k)) for k in history],
                {k: c.describe() for k, c in changed.items()},
            )
        }
        unknown_inputs = set(unknown)
        out = []
        for key in keys:
            commit = commits.get(key)
            fail = failed.get(key)
            if key in damaged:
                out.append(PartitionStatus(key, DAMAGED, damaged[key]))
            elif fail is not None and (commit is None or fail["run_id"] > commit.run_id):
                out.append(PartitionStatus(key, FAILED, f"checks failed: {fail['failed_checks']}", fail["run_path"]))
            elif commit is None:
                out.append(PartitionStatus(key, MISSING, "nothing committed"))
            elif not run_is_whole(self.spark, commit):  # a record whose run is gone is not trusted
                out.append(
                    PartitionStatus(
                        key,
                        DAMAGED,
                        f"{orphaned_message(commit)}; or rerun it: rewindow backfill ... --rerun-from {key}",
                        commit.run_path,
                    )
                )
            elif key in stale:
                out.append(
                    PartitionStatus(
                        key,
                        OUT_OF_DATE,
                        stale[key],
                        commit.run_path,
                        ReplayMetrics.from_dict(commit.metrics),
                        changed.get(key),
                        key in unknown_inputs,
                        _zone_of(commit),
                    )
                )
            else:
                out.append(
                    PartitionStatus(
                        key,
                        COMMITTED,
                        f"run {commit.run_id}",
                        commit.run_path,
                        ReplayMetrics.from_dict(commit.metrics),
                        input_unknown=key in unknown_inputs,
                        landing_zone=_zone_of(commit),
                    )
                )
        return out

    def resume_point(self, keys: Sequence[str]) -> str | None:
        """The first of ``keys`` (a range, oldest first) that is not committed and current:
        where a killed or failed backfill of that range goes on. None: all are done."""
        for s in self.status(keys):
            if s.status != COMMITTED:
                return s.key
        return None

    # ----------------------------------------------------------------- replaying

    def starting_state(self, first_key: str) -> PartitionResult | None:
        """The state partition ``first_key`` starts from, after checking the chain up to it.

        None for the first partition of the history. Raises :class:`ChainError`, saying what
        to run, when the previous state is missing, out of date, failed, or was flushed at end.
        """
        name = self.pipeline.name
        prev = self.partitions.previous(first_key)
        if prev is None:
            return None
        earlier = self.partitions.keys(None, prev)
        current, broken = self._store()
        if prev in broken:
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: partition {prev}: {broken[prev]}",
                first_key,
                {"damaged": prev},
            )
        commits = {k: current[k] for k in (*earlier, first_key) if k in current}
        missing = store.first_missing(commits, earlier)
        if missing is not None:
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: the state of partition "
                f"{missing} is missing (nothing committed in {self.folder(missing)}; "
                "a replay that fails a blocking data-quality check is not committed). Partitions are replayed in "
                f"order, each from the state of the one before: materialize {missing}..{first_key} "
                "(one backfill runs them in order).",
                first_key,
                {"missing": missing},
            )
        changed, _ = self.input_changes(commits, earlier)
        stale = store.out_of_date_partitions(
            commits,
            self.pipeline.fingerprint(),
            [(k, self.partitions.previous(k)) for k in earlier],
            {k: c.describe() for k, c in changed.items()},
        )
        if stale:
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: partition {stale[0].partition} "
                f"{stale[0].reason}. Rerun {stale[0].partition}..{first_key} (one backfill runs them in order).",
                first_key,
                {"out_of_date": [vars(s) for s in stale]},
            )
        commit = commits[prev]
        lineage = store.Lineage.of(commit)
        if lineage is None:
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: partition {prev} has no "
                f"lineage in its commit record (written outside this chain): rerun {prev}",
                first_key,
            )
        if lineage.failed_checks:
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: partition {prev} failed its "
                f"data-quality checks ({', '.join(lineage.failed_checks)}; see the check results of "
                f"{commit.run_path}). Fix the input and rerun {prev} first.",
                first_key,
            )
        if lineage.flushed_at_end:
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: partition {prev} was replayed "
                "with flush_at_end, so the windows open at its end were emitted and are not in its state. "
                f"Rerun {prev} without flush_at_end first.",
                first_key,
            )
        if not run_is_whole(self.spark, commit):
            raise ChainError(
                f"Cannot replay partition {first_key} of pipeline {name}: partition {prev}: "
                f"{orphaned_message(commit)}; or rerun it: rewindow backfill ... --rerun-from {prev}",
                first_key,
                {"damaged": prev},
            )
        try:
            state = read_state(self.session, commit.output)
        except StateError as exc:
            raise ChainError(f"Cannot replay partition {first_key} of pipeline {name}: {exc}", first_key) from exc
        return PartitionResult(
            prev, commit.output, commit.run_path, ReplayMetrics.from_dict(commit.metrics), lineage, state
        )

    def replay(
        self, keys: Sequence[str], *, flush_at_end: bool = False, checks: bool = True, run_id: str | None = None
    ) -> Iterator[PartitionResult]:
        """Replay ``keys`` (consecutive partitions) oldest to newest, each from the state the
        one before left, yielding a :class:`PartitionResult` once each is stored.

        The oldest starts from the stored state of the partition before it (checked first:
        :meth:`starting_state`); the others from the state the previous one wrote and read
        back, exactly what a separate run would read. ``flush_at_end`` applies to the newest
        only. Stops after a partition that failed its blocking checks (not committed).
        """
        keys = sorted(keys, key=self.partitions.start_of)
        if not keys:
            return
        expected = self.partitions.keys(keys[0], keys[-1])
        if keys != expected:
            gap = next(k for k in expected if k not in keys)
            raise ChainError(
                f"partitions {keys[0]}..{keys[-1]} of pipeline {self.pipeline.name} are not "
                f"consecutive ({gap} is missing): each partition starts from the one before",
                gap,
            )
        self.check_roots()
        if self.publisher is not None:  # a catalog that cannot take a location swap fails before any work
            try:
                self.publisher.check()
            except CatalogError as exc:
                raise ChainError(f"Cannot replay pipeline {self.pipeline.name}: {exc}", keys[0]) from exc
        run_id = run_id or _run_id()
        before = self.starting_state(keys[0])
        # Partition K's checks and commit (its audit) run in a thread of their own while
        # partition K+1 replays from K's staged state: the files K's commit makes current,
        # so the outputs are those of one partition after the other. The audits run one at
        # a time, in order, and K+1's starts once K is committed; if K is not committed,
        # K+1's staged run is deleted and the chain stops, as it would have before K+1.
        # A small partition's time is mostly fixed cost (planning in the driver, py4j,
        # starting small jobs) that leaves cores idle between its jobs: two partitions
        # fill them (measured in docs/architecture.md).
        start: PartitionResult | _StagedPartition | None = before
        known = landing.KnownSchemas()  # the landing zone's schema, inferred once for the run
        staged: _StagedPartition | None = None  # replayed, not yet handed to an audit
        queue: list[_StagedPartition] = []  # replayed by a pass, not yet handed to an audit
        audit: tuple[int, Future[PartitionResult]] | None = None
        passes = self.passes_allowed()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rewindow-audit") as audits:
            try:
                for i, key in enumerate(keys, 1):
                    try:
                        if not queue:
                            group = self.pass_keys(keys[i - 1 :]) if passes else [key]
                            if len(group) > 1:
                                queue = (
                                    self._stage_pass(
                                        group,
                                        start,
                                        flush=flush_at_end and group[-1] == keys[-1],
                                        known=known,
                                        first=i,
                                        n=len(keys),
                                        checks=checks,
                                    )
                                    or []
                                )
                                passes = bool(queue)  # refused once (the data's batches): refused again
                        staged = (
                            queue.pop(0)
                            if queue
                            else self._stage(
                                key,
                                start,
                                flush=flush_at_end and key == keys[-1],
                                known=known,
                                position=f" ({i} of {len(keys)})" if len(keys) > 1 else "",
                            )
                        )
                    except Exception as exc:
                        if audit is None:
                            raise
                        # The partition before ends as it would have without the overlap:
                        # committed (then this error), or not (then this one never ran).
                        if (yield from self._finish(audit, len(keys))).committed:
                            raise exc
                        return
                    if audit is not None:
                        before = yield from self._finish(audit, len(keys))
                        audit = None
                        if not before.committed:
                            return
                    audit = (i, audits.submit(self._audit, staged, before, checks, run_id))
                    start, staged = staged, None
                if audit is not None:
                    yield from self._finish(audit, len(keys))
            finally:
                for left in [staged, *queue]:  # replayed after a partition that was not committed
                    if left is not None:
                        left.discard()

    def _finish(
        self, audit: tuple[int, Future[PartitionResult]], n: int
    ) -> Generator[PartitionResult, None, PartitionResult]:
        """Wait for the audit of the partition before, yield its result, and return it: the
        caller goes on only if it was committed."""
        done = self._audited(*audit, n)
        yield done
        return done

    def _audited(self, i: int, audit: Future[PartitionResult], n: int) -> PartitionResult:
        """The result of partition ``i`` of ``n``'s audit (waited for), logged."""
        done = audit.result()
        m = done.metrics
        by_reason = ", ".join(f"{reason} {count:,}" for reason, count in sorted(m.closed_by_reason.items()))
        self.log.info(
            f"[{i}/{n}] {self.pipeline.name} {done.key}: {m.input_rows:,} events, "
            f"{m.windows_closed:,} windows closed{f' ({by_reason})' if by_reason else ''}, "
            f"{m.windows_emitted:,} emitted, {m.snapshots_emitted:,} snapshots, "
            f"{m.late_events:,} late events ({m.late_event_windows:,} late (event, window) pairs), "
            f"{m.rejected_rows:,} rejected, watermark "
            f"{m.watermark_reached}{' (flushed at end)' if done.lineage.flushed_at_end else ''} "
            f"in {done.seconds:.1f}s ({m.input_rows / done.seconds if done.seconds else 0:,.0f} events/s) "
            f"-> {done.run_path}"
        )
        for r in done.checks if done.committed else ():
            if not r.passed:  # failed, not blocking: a warning (rejected rows within quality.maxRejectedShare)
                self.log.warning(
                    f"{self.pipeline.name} {done.key}: committed with a warning: {r.name}: {r.description}"
                )
        if not done.committed:
            self.log.error(
                f"{self.pipeline.name} {done.key}: data-quality checks failed "
                f"({', '.join(done.lineage.failed_checks)}); not replaying the partitions after it. "
                f"Details: the check results of {done.run_path}"
            )
        return done

    def read_events(self, key: str, known: landing.KnownSchemas | None = None) -> tuple[DataFrame, list[Entry] | None]:
        """``(events, files)`` of partition ``key`` from the landing zone (:mod:`windowing.landing`);
        ``known``: the schemas the partitions before in the same run inferred."""
        start, end = self.partitions.window(key)
        return landing.read_partition_events(
            self.session,
            self.landing_zone,
            start,
            end,
            self.pipeline.source.arrival_time,
            source=self.pipeline.source,
            pipeline=self.pipeline,
            partition_column=self.partition_column,
            unplaced=self.partitions.previous(key) is None,
            known=known,
        )

    def replay_one(
        self,
        key: str,
        start: PartitionResult | None,
        *,
        flush: bool = False,
        checks: bool = True,
        run_id: str | None = None,
    ) -> PartitionResult:
        """Replay one partition from ``start`` (the previous partition's result, or None), check
        its staged outputs, and commit outputs, lineage and check results together, only if
        no blocking check failed (write-audit-publish). A failing partition's staged run is
        left uncommitted, for inspection, with a failure record: the previous committed
        output stays current."""
        return self._audit(self._stage(key, start, flush=flush), start, checks, run_id)

    def _stage(
        self,
        key: str,
        start: PartitionResult | _StagedPartition | None,
        *,
        flush: bool = False,
        known: landing.KnownSchemas | None = None,
        position: str = "",
    ) -> _StagedPartition:
        """Replay partition ``key`` from ``start``'s state and stage its outputs (read back).
        ``position``: `` (3 of 72)`` in a range, for the log's phase lines."""
        with partition_jobs(self.spark, key):
            began = time.monotonic()
            try:
                self.log.info(f"{self.pipeline.name} {key}{position}: reading its landed events")
                events, files = self.read_events(key, known)
                if files is not None and not files:
                    self.log.warning(
                        f"{key}: no landing files for this partition; replayed as a partition without events"
                    )
                self.log.info(
                    f"{self.pipeline.name} {key}{position}: replaying "
                    + (f"{len(files):,} file(s) " if files is not None else "")
                    + ("from the state of " + start.key if start is not None else "from no state")
                )
                result = replay(
                    self.session,
                    self.pipeline,
                    events,
                    state=start.state if start else None,
                    flush_at_end=flush,
                    # A staged partition's state summary was computed as its state was written.
                    state_summary=start.staged.state_summary if isinstance(start, _StagedPartition) else None,
                )
                try:
                    staged = stage_outputs(result, self.folder(key), pipeline=self.pipeline, inputs=self.input_paths())
                finally:
                    result.unpersist()
            except (StateMismatchError, StateError) as exc:
                source = f" (the carried state is partition {start.key}'s, run {start.run_path})" if start else ""
                raise ChainError(
                    f"Cannot replay partition {key} of pipeline {self.pipeline.name}{source}: {exc}", key
                ) from exc
            except (ConfigError, InputError, OutputError, landing.LandingZoneError) as exc:
                raise ChainError(f"Cannot replay partition {key} of pipeline {self.pipeline.name}: {exc}", key) from exc
            record = self._input_record(key, files)
            return _StagedPartition(key, staged, events, result.metrics, flush, time.monotonic() - began, record)

    # ----------------------------------------------------------------- passes

    def passes_allowed(self) -> bool:
        """Whether this chain's runs may replay many partitions in one pass
        (:mod:`windowing.runner.passes`): a classic session, a landing zone of Parquet day
        folders, and :data:`PASS_CONF` not 1."""
        if self.spark is None or is_connect(self.spark) or self.partition_column is None:
            return False
        if self.pipeline.source.format != "parquet" or type(self).read_events is not Chain.read_events:
            return False
        return placement.int_setting(self.spark, PASS_CONF, 0) != 1

    def pass_keys(self, keys: Sequence[str]) -> list[str]:
        """The first partitions of ``keys`` (oldest first) one pass replays: whole days of
        them while their events (the day folders' footers) stay within one kernel task's
        (``spark.rewindow.eventsPerTask``, what holds every worker whole in one task), and
        at most :data:`PASS_CONF` partitions (unset: no limit). At least the first."""
        most = placement.int_setting(self.session, PASS_CONF, 0)
        budget = placement.int_setting(self.session, placement.EVENTS_PER_TASK_CONF, placement.EVENTS_PER_TASK)
        assert self.partition_column is not None
        lake = Lake(self.spark)
        rows, day_seen, out = 0, None, []
        for key in keys:
            day = landing.day_of(*self.partitions.window(key))
            if day != day_seen:
                folder = join(self.landing_zone, landing.day_folder(self.partition_column, day))
                try:
                    rows += sum(lake.parquet_rows(e.path) for e in lake.files(folder, within=self.landing_zone))
                except Exception:  # noqa: BLE001 - a bad file: its own partition's read names it
                    break
                if rows > budget:
                    break
                day_seen = day
            out.append(key)
            if most and len(out) >= most:
                break
        return out or list(keys[:1])

    def _stage_pass(
        self,
        keys: list[str],
        start: PartitionResult | _StagedPartition | None,
        *,
        flush: bool,
        known: landing.KnownSchemas,
        first: int,
        n: int,
        checks: bool = True,
    ) -> list[_StagedPartition] | None:
        """Replay ``keys`` (consecutive) in one pass from ``start``'s state and stage each
        one's outputs as its own run (:func:`windowing.storage.pass_outputs.stage_pass`);
        None, with nothing written, when the pass cannot vouch for its result (then the
        partitions are replayed one by one). ``first`` of ``n``: where ``keys`` begin in the run."""
        windows = [self.partitions.window(k) for k in keys]
        edges = [int(w[0].timestamp() * 1000) for w in windows] + [int(windows[-1][1].timestamp() * 1000)]
        ranges = batch_ranges(self.pipeline, edges)
        if ranges is None:
            return None
        span = f"{keys[0]}..{keys[-1]}"
        events: DataFrame | None = None
        with partition_jobs(self.spark, span):
            began = time.monotonic()
            try:
                self.log.info(
                    f"{self.pipeline.name} {span} ({first}..{first + len(keys) - 1} of {n}): replaying "
                    f"{len(keys)} partitions in one pass "
                    + ("from the state of " + start.key if start is not None else "from no state")
                )
                try:
                    read, files, _ = landing.read_pass_events(
                        self.session,
                        self.landing_zone,
                        windows,
                        self.pipeline.source.arrival_time,
                        PART_COLUMN,
                        source=self.pipeline.source,
                        pipeline=self.pipeline,
                        partition_column=self.partition_column or landing.DEFAULT_PARTITION_COLUMN,
                        known=known,
                    )
                except InputError as exc:  # a day refused before any work: one by one, the
                    # partitions before it are committed and the error names the partition
                    self.log.info(f"{self.pipeline.name} {span}: replaying them one by one ({exc})")
                    return None
                # Held while the pass runs: the kernel reads the events once, the checks each
                # partition's again (within eventsPerTask's bound, as the kernel's own input).
                events = read.persist()
                result = replay_pass(
                    self.session,
                    self.pipeline,
                    events,
                    ranges,
                    state=start.state if start else None,
                    flush_at_end=flush,
                    state_summary=start.staged.state_summary if isinstance(start, _StagedPartition) else None,
                    input_files=[[e.path for e in f] for f in files],
                )
                if result is None:
                    self.log.info(f"{self.pipeline.name} {span}: replaying them one by one instead")
                    return None
                stored = [json.loads(json.dumps(m.to_dict(), sort_keys=True)) for m in result.metrics]
                with (
                    result,
                    written_pass(
                        self.session,
                        result.frames,
                        PART_COLUMN,
                        [self.folder(k) for k in keys],
                        self.pipeline_dir,
                        self.input_paths(),
                        files=sorted({e.path for f in files for e in f}),
                    ) as written,
                ):
                    checked: list[tuple[CheckResult, ...]] | None = None
                    if checks:  # every partition's checks at once, on the pass's outputs as written
                        self.log.info(
                            f"{self.pipeline.name} {span}: checking every partition's staged outputs together"
                        )
                        found = run_pass_checks(
                            self.session,
                            self.pipeline,
                            written.read(),
                            stored,
                            events,
                            start.state if start is not None else None,
                            PART_COLUMN,
                        )
                        checked = [tuple(r) for r in found]
                    staged = written.complete(result.metrics, [self.folder(k) for k in keys], self.pipeline)
                out = self._pass_staged(keys, staged, events, files, list(result.metrics), flush)
                if checked is not None:
                    out = [replace(p, checks=r) for p, r in zip(out, checked)]
            except (StateMismatchError, StateError) as exc:
                source = f" (the carried state is partition {start.key}'s, run {start.run_path})" if start else ""
                raise ChainError(
                    f"Cannot replay partitions {span} of pipeline {self.pipeline.name}{source}: {exc}", keys[0]
                ) from exc
            except (ConfigError, InputError, OutputError, landing.LandingZoneError) as exc:
                raise ChainError(
                    f"Cannot replay partitions {span} of pipeline {self.pipeline.name}: {exc}", keys[0]
                ) from exc
            finally:
                if events is not None:
                    release_held(events)
        seconds = (time.monotonic() - began) / len(keys)
        return [replace(p, seconds=seconds) for p in out]

    def _pass_staged(
        self,
        keys: list[str],
        staged: list[Staged],
        events: DataFrame,
        files: list[list[Entry]],
        metrics: list[ReplayMetrics],
        flush: bool,
    ) -> list[_StagedPartition]:
        """A pass's staged runs as the partitions the chain audits, each with its own events."""
        out = []
        for i, (key, run) in enumerate(zip(keys, staged)):
            if not files[i]:
                self.log.warning(f"{key}: no landing files for this partition; replayed as a partition without events")
            own = events.where(F.col(PART_COLUMN) == i).drop(PART_COLUMN)
            last = flush and i == len(keys) - 1
            out.append(_StagedPartition(key, run, own, metrics[i], last, 0.0, self._input_record(key, files[i])))
        return out

    def _input_record(self, key: str, files: list[Entry] | None) -> input_record.InputRecord | None:
        """What partition ``key`` read from the landing zone, for its commit record."""
        if files is None or self.partition_column is None:
            return None
        start, end = self.partitions.window(key)
        day = landing.day_of(start, end)
        folder = landing.day_folder(self.partition_column, day)
        if end - start >= landing.DAY:
            return input_record.InputRecord.of_listing(self.landing_zone, folder, files)
        # An hour of its day: each file's arrival range (footer statistics) tells later which
        # hours a file landing in the day can change (once a file per chain: a day's hours share them).
        column = self.pipeline.source.arrival_time
        parquet = self.pipeline.source.format == "parquet"
        lake = Lake(self.spark)

        def arrival(e: Entry) -> tuple[int | None, int | None, int] | None:
            seen = (e.path, e.size, e.mtime)
            if seen not in self._arrivals:
                self._arrivals[seen] = input_record.arrival_range(lake, e.path, column) if parquet else None
            return self._arrivals[seen]

        window = (int(start.timestamp() * 1000), int(end.timestamp() * 1000))
        return input_record.InputRecord.of_listing(self.landing_zone, folder, files, window, column, arrival)

    def _audit(
        self, part: _StagedPartition, start: PartitionResult | None, checks: bool = True, run_id: str | None = None
    ) -> PartitionResult:
        """Check ``part``'s staged outputs and commit them with their lineage and check
        results, unless a blocking check failed (then record the failure)."""
        with partition_jobs(self.spark, part.key):
            key, staged, folder = part.key, part.staged, self.folder(part.key)
            results: tuple[CheckResult, ...] = ()
            failed: tuple[str, ...] = ()
            if checks and part.checks is not None:
                results = part.checks
            elif checks:
                self.log.info(f"{self.pipeline.name} {key}: checking the staged outputs")
                results = tuple(
                    run_checks(
                        self.session,
                        self.pipeline,
                        part.outputs,
                        input_df=part.events,
                        prev_state=start.state if start else None,
                    )
                )
            failed = tuple(r.name for r in blocking_failures(results))
            state = part.state
            lineage = store.Lineage(
                pipeline=self.pipeline.name,
                fingerprint=self.pipeline.fingerprint(),
                partition=key,
                previous_partition=self.previous_partition(key, start),
                start_state_hash=start.lineage.state_hash if start else None,
                # Computed by Spark as the staged state was written (manifest.ObservedState).
                state_hash=staged.state_hash or store.state_content_hash(state),
                flushed_at_end=part.flush,
                run_id=run_id or _run_id(),
                failed_checks=failed,
            )
            metrics = part.metrics
            inputs = part.inputs.to_extra() if part.inputs is not None else {}
            if failed:  # write-audit-publish: a partition that fails its checks is not published
                self._record_failure(key, staged, lineage)
                return PartitionResult(
                    key, folder, staged.path, metrics, lineage, state, results, part.seconds, committed=False
                )
            if self.publisher is None:
                staged.commit({**lineage.to_extra(), **_checks_extra(results), **inputs})
            else:
                self._commit_and_publish(
                    self.publisher, key, staged, {**lineage.to_extra(), **_checks_extra(results), **inputs}
                )
            return PartitionResult(key, folder, staged.path, metrics, lineage, state, results, part.seconds)

    def _commit_and_publish(
        self, publisher: Publisher, key: str, staged: Staged, extra: dict[str, Any]
    ) -> list[Published]:
        """Commit (pruning never deletes the runs the tables point at), then point the
        catalog tables' partition ``key`` at the committed run (:mod:`windowing.catalog`)."""
        try:
            pointed = publisher.pointed_runs(key)
            commit = staged.commit(extra, keep=pointed)
            self.log.info(f"{self.pipeline.name} {key}: committed run {staged.run_id}; publishing it")
            published = publisher.publish(key, commit)
        except CatalogError as exc:
            raise ChainError(
                f"Partition {key} of pipeline {self.pipeline.name} is committed ({staged.path}) but "
                f"not published: {exc}. Rerun it once the catalog is fixed.",
                key,
            ) from exc
        self.log.info(
            f"{self.pipeline.name} {key}: published run {staged.run_id} to {', '.join(p.table for p in published)}"
        )
        return list(published)

    def _record_failure(self, key: str, staged: Staged, lineage: store.Lineage) -> None:
        """``<partition>/_failures/<run id>``: a one-line JSON record of a run that was not
        committed because blocking checks failed (what :meth:`status` reports as failed)."""
        record = {
            "run_id": staged.run_id,
            "run_path": staged.path,
            "failed_checks": ", ".join(lineage.failed_checks),
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        }
        target = join(self.folder(key), FAILURES, staged.run_id)
        self.session.createDataFrame([record], FAILURE_SCHEMA).coalesce(1).write.mode("overwrite").json(target)


FAILURE_SCHEMA = "run_id string, run_path string, failed_checks string, recorded_at string"


def _json_object(line: str) -> Any:
    """A failure record's line parsed (None when it is not JSON: Spark's reader skips it too)."""
    try:
        return json.loads(line)
    except ValueError:
        return None


#: Every Spark job a partition runs carries the tag ``PARTITION_TAG + key`` (Spark's job
#: tags: in the event log, the UI's REST API; ``SparkSession.interruptTag`` cancels its queries,
#: ``SparkContext.cancelJobsWithTag`` every job). A pass's jobs, shared by its partitions,
#: carry ``PARTITION_TAG + "<first>..<last>"``; each partition's audit, its own key's.
PARTITION_TAG = "rewindow-partition-"


@contextmanager
def partition_jobs(spark: Any, key: str) -> Iterator[None]:
    """Tag the Spark jobs this thread starts inside the block as partition ``key``'s."""
    tag = PARTITION_TAG + key.replace(",", "_")
    spark.addTag(tag)
    # Spark's own jobs outside a query (a Parquet schema inference) carry only the Spark
    # context's tags: tag those too, on a classic session.
    context = None if is_connect(spark) else spark.sparkContext
    if context is not None:
        context.addJobTag(tag)
    try:
        yield
    finally:
        spark.removeTag(tag)
        if context is not None:
            context.removeJobTag(tag)


def _run_id() -> str:
    return f"chain-{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}"


# --------------------------------------------------------------------------- one run


@dataclass
class OneRun(Chain):
    """A history of one partition in one output folder: ``rewindow replay --output``.

    The same write-audit-publish as every partition of a chain (:meth:`Chain.replay_one`:
    stage, checks, commit with lineage and check results, publish), over events the caller
    read (``events``, from ``inputs``) into the folder ``output``, from the state of
    ``start`` (the ``--state-in`` output; None: no state). Its own rules are the caller's
    arguments: whether the checks run, and the partition key the catalog publishes it as.
    """

    output: str = ""
    events: Any = None
    inputs: Sequence[str] = ()
    #: The catalog tables the run was published to (:meth:`_commit_and_publish`).
    published: list[Published] = field(default_factory=list, init=False)

    def folder(self, key: str) -> str:
        return self.output

    def input_paths(self) -> list[str]:
        return [str(p) for p in self.inputs]

    def read_events(self, key: str, known: landing.KnownSchemas | None = None) -> tuple[Any, list[Any] | None]:
        return self.events, None

    def previous_partition(self, key: str, start: PartitionResult | None) -> str | None:
        return start.key if start is not None else None

    def _commit_and_publish(
        self, publisher: Publisher, key: str, staged: Staged, extra: dict[str, Any]
    ) -> list[Published]:
        self.published = super()._commit_and_publish(publisher, key, staged, extra)
        return self.published


def carried_start(spark: Any, state_in: str) -> PartitionResult:
    """The start of a :class:`OneRun` from a previous replay's output (or its ``OUT/state``):
    its state, and its lineage when its commit record has one (an output written before
    replays recorded one: its state's content hash stands in)."""
    state, commit = read_state_and_commit(spark, state_in)
    folder = commit.output if commit is not None else state_in.rstrip("/").removesuffix("/state")
    lineage = store.Lineage.of(commit)
    if lineage is None:
        lineage = store.Lineage(
            pipeline="",
            fingerprint="",
            partition=folder.rsplit("/", 1)[-1],
            previous_partition=None,
            start_state_hash=None,
            state_hash=store.state_content_hash(state),
            flushed_at_end=False,
            run_id="",
        )
    metrics = ReplayMetrics.from_dict(commit.metrics) if commit is not None else ReplayMetrics()
    run_path = commit.run_path if commit is not None else state_in
    return PartitionResult(lineage.partition, folder, run_path, metrics, lineage, state)
