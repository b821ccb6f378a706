"""The partition store: where each pipeline partition's outputs live, and how they chain.

Layout under the output root (a local folder or any URI Spark writes), one output per
pipeline and partition, committed by :mod:`windowing.storage.outputs`::

    <output_root>/<pipeline name>/<partition key>/
        runs/<run id>/aggregates/ late_events/ rejected/ state/ metrics.json/ metrics.prom/
        _commits/<seq>-<run id>/     the commit record: the current run, its metrics,
                                     this module's lineage, the check results (windowing.chain)

``state/`` of partition N's current run is the starting state of partition N+1. The
lineage in the commit record says which state a partition started from and which
state it ended with, as content hashes, so that a rerun of an earlier partition that
*changed* its state shows every later partition as out of date, while a rerun that
reproduced the same state (the normal case: replays are deterministic) changes nothing.
Lineage and checks are part of the commit itself: a partition's outputs, lineage and
check results become current together, or not at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from windowing.storage.commits import Commit, current_commits_under
from windowing.storage.lake import join
from windowing.storage.manifest import content_hash

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STATE_DIR = "state"
#: Why a partition committed under another fingerprint is out of date (:func:`out_of_date_partitions`).
ANOTHER_CONFIGURATION = "was computed with another window/time/aggregate configuration of the pipeline"


def partition_folder(partition_key: str) -> str:
    """The folder name of a partition: its key without ``:`` (hourly keys are
    ``2024-01-01-00:00``; Hadoop paths cannot hold a colon), so ``2024-01-01-0000``."""
    return partition_key.replace(":", "")


def partition_dir(output_root: str, pipeline_name: str, partition_key: str) -> str:
    """``<output_root>/<pipeline>/<partition folder>``: the output one partition owns."""
    return join(str(output_root), pipeline_name, partition_folder(partition_key))


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

    def to_extra(self) -> dict[str, Any]:
        return {"lineage": asdict(self)}

    @classmethod
    def of(cls, commit: Commit | None) -> "Lineage | None":
        """The lineage a commit record carries, or ``None`` (no commit, or no lineage)."""
        doc = (commit.extra or {}).get("lineage") if commit is not None else None
        if not isinstance(doc, dict):
            return None
        try:
            return cls(**{**doc, "failed_checks": tuple(doc.get("failed_checks", ()))})
        except TypeError:
            return None


def pipeline_commits(spark: SparkSession | None, pipeline_dir: str, partition_keys: Iterable[str]) -> dict[str, Commit]:
    """The current commit of each of ``partition_keys`` that has one, by key (one read)."""
    found = current_commits_under(spark, pipeline_dir)
    return {k: found[partition_folder(k)] for k in partition_keys if partition_folder(k) in found}


@dataclass(frozen=True)
class OutOfDate:
    """A materialized partition whose outputs no longer follow from the history before it."""

    partition: str
    reason: str


def out_of_date_partitions(
    commits: Mapping[str, Commit],
    fingerprint: str,
    partitions: Sequence[tuple[str, str | None]],
    changed: Mapping[str, str] | None = None,
) -> list[OutOfDate]:
    """Check the state chain of the materialized partitions, oldest first.

    ``commits`` maps partition keys to their current commit (:func:`pipeline_commits`);
    ``partitions`` lists ``(partition key, previous partition key or None for the first
    partition of the history)`` in time order; only committed ones are checked;
    ``changed`` maps the partitions whose landed files changed since their commit to what
    changed (:mod:`windowing.storage.input_record`). A partition is out of date when its
    commit has no lineage (written outside Dagster), was computed under another pipeline
    configuration, its landing zone changed since its commit, its predecessor has no
    outputs, its predecessor's current state is not the one it started from, or its
    predecessor is itself out of date (the error carries forward).
    """
    out: list[OutOfDate] = []
    stale: dict[str, str] = {}  # out-of-date partition -> the changed partition it follows, if any
    changed = changed or {}
    for key, prev in partitions:
        if key not in commits:
            continue
        lin = Lineage.of(commits[key])
        reason = None
        origin = ""
        if lin is None:
            reason = "has no lineage in its commit record (written outside this chain): rerun it"
        elif lin.fingerprint != fingerprint:
            reason = ANOTHER_CONFIGURATION
        elif key in changed:
            reason, origin = changed[key], key
        elif prev is not None:
            prev_lin = Lineage.of(commits.get(prev))
            if prev in stale:
                origin = stale[prev]
                reason = (
                    f"after a changed partition: starts from partition {prev}, which is out of date "
                    f"({origin}'s landing zone changed since its commit)"
                    if origin
                    else f"starts from partition {prev}, which is out of date"
                )
            elif prev not in commits:
                reason = f"its previous partition {prev} has no outputs"
            elif prev_lin is not None and prev_lin.state_hash != lin.start_state_hash:
                reason = f"was computed from an older state of partition {prev}, which has been rerun since"
            elif prev_lin is not None and prev_lin.flushed_at_end:
                reason = f"continues from partition {prev}, which was replayed with flush_at_end"
        if reason:
            stale[key] = origin
            out.append(OutOfDate(key, reason))
    return out


def first_missing(commits: Mapping[str, Commit], keys: Iterable[str]) -> str | None:
    """The first of ``keys`` (in the given order) that has no committed output."""
    for key in keys:
        if key not in commits:
            return key
    return None


def state_content_hash(state_df: DataFrame) -> str:
    """An order-independent hash of a state DataFrame's content
    (:func:`windowing.storage.manifest.content_hash`: ``<rows>-<sum of row hashes>``)."""
    return content_hash(state_df)
