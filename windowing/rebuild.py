"""Rebuilding a changed pipeline's history beside the current one
(:mod:`windowing.storage.versions`): which version a run writes (:func:`plan`), and the
switch once the rebuild is whole (:func:`switch_if_whole`). ``rewindow backfill`` and the
Dagster assets run the same two steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from windowing.config import ConfigError
from windowing.diff import diff
from windowing.storage import versions
from windowing.storage.commits import current_commits_under
from windowing.storage.lake import join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from windowing.catalog import Publisher
    from windowing.chain import Chain
    from windowing.config import Pipeline
    from windowing.partitions import Partitions
    from windowing.storage.commits import Commit


@dataclass(frozen=True)
class VersionPlan:
    """Which version of the history a backfill writes (:mod:`windowing.storage.versions`):
    ``current`` (what readers read, at ``read_root``) or, for a pipeline whose fingerprint
    is not the current version's (``rebuild``), ``version`` beside it at ``build_root``."""

    current: str
    version: str
    read_root: str
    build_root: str
    current_keys: tuple[str, ...] = ()
    #: The history's own output root (v1's), under which every version is.
    output_root: str = ""

    @property
    def rebuild(self) -> bool:
        return self.version != self.current

    def whole(self, partitions: Partitions, last: str) -> list[str]:
        """A rebuild's partitions: the whole history, from its start through the newest the
        current version holds, or ``last`` if later."""
        newest = max((*self.current_keys, last), key=partitions.start_of)
        return list(partitions.keys(None, newest))


def _built_with(spark: SparkSession, root: str, name: str, fingerprint: str) -> tuple[dict[str, Commit], bool]:
    """The commits of the history under ``root``, and whether none was made under another
    fingerprint than ``fingerprint`` (true when there are none)."""
    commits = current_commits_under(spark, join(root, name))
    return commits, {c.fingerprint for c in commits.values()} <= {fingerprint}


def plan(spark: SparkSession, pipeline: Pipeline, output_root: str, rerun_from: str | None = None) -> VersionPlan:
    """The current version, and the version this backfill builds: the current one while
    its commits were made under this configuration (or it has none), else the rebuild under
    way under this configuration (a version newer than the current one), else a new one."""
    name, fingerprint = pipeline.name, pipeline.fingerprint()
    current = versions.current_version(spark, output_root, name)
    read_root = versions.version_root(output_root, name, current)
    commits, same = _built_with(spark, read_root, name, fingerprint)
    if same:
        return VersionPlan(current, current, read_root, read_root, output_root=output_root)
    if rerun_from:
        raise ConfigError(
            f"--rerun-from {rerun_from}: the pipeline changed since {current} of {name!r} was built (another "
            "window/time/aggregate configuration): a rebuild replays the whole history into a new version beside "
            f"{current}; run without --rerun-from (--resume continues a rebuild)"
        )
    building = None
    for version in reversed(versions.versions(spark, output_root, name)):
        if versions.number(version) <= versions.number(current):
            break
        if _built_with(spark, versions.version_root(output_root, name, version), name, fingerprint)[1]:
            building = version
            break
    version = building or versions.next_version(spark, output_root, name)
    return VersionPlan(
        current, version, read_root, versions.version_root(output_root, name, version), tuple(commits), output_root
    )


def switch_if_whole(
    chain: Chain, plan: VersionPlan, keys: list[str], keep: int, say: Callable[[str], None]
) -> versions.Switch | None:
    """Make the rebuilt version current once every partition of ``keys`` (the whole
    history) is committed and current in it: what changed (:func:`windowing.diff.diff` of
    the two versions, kept in the switch record), the switch record, the catalog's stable
    names (:meth:`windowing.catalog.Publisher.switch`), then the versions beyond ``keep``
    pruned. ``say``: one line to the user at each step. None: not whole yet."""
    name = chain.pipeline.name
    incomplete = chain.resume_point(keys)
    if incomplete is not None:
        say(
            f"{plan.version} of {name!r} is not switched in: partition {incomplete} is not committed and current "
            f"in it; {plan.current} stays current"
        )
        return None
    if chain.publisher is not None:
        _publish_missing(chain, chain.publisher, keys, say)
    with diff(chain.spark, plan.read_root, plan.build_root, pipeline=name) as result:
        summary = result.summary()
    switch = versions.record_switch(
        chain.spark, plan.output_root, name, plan.version, chain.pipeline.fingerprint(), keys[0], keys[-1], summary
    )
    say(
        f"switched {name!r} from {plan.current} to {plan.version} ({len(keys)} partition(s) {keys[0]}..{keys[-1]}); "
        f"what changed ({plan.current} -> {plan.version}):\n" + "\n".join(f"  {line}" for line in summary.splitlines())
    )
    if chain.publisher is not None:
        say("\n".join(f"  {line}" for line in chain.publisher.switch(plan.version)))
    pruned = versions.prune(chain.spark, plan.output_root, name, keep)
    for old in pruned:
        if chain.publisher is not None:
            chain.publisher.drop_version(old)
    if pruned:
        say(f"removed version(s) {', '.join(pruned)} (keep {keep} versions)")
    return switch


def _publish_missing(chain: Chain, publisher: Publisher, keys: list[str], say: Callable[[str], None]) -> None:
    """Publish to the new version's tables (``publisher``, the chain's) each partition they
    do not point at its current commit for (a run stopped between a commit and its
    publishing, then resumed past it): the stable names must never switch to tables with a
    hole."""
    commits = chain.commits(keys)
    for key in keys:
        commit = commits[key]
        pointed = publisher.pointed(key)
        if any(p is None or p.run_id != commit.run_id for p in pointed.values()):
            publisher.publish(key, commit)
            version = publisher.version
            say(f"published partition {key} of {version}, which its run had committed but not published")
