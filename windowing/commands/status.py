"""``rewindow status``: a history's partitions (:mod:`windowing.chain`) listed as committed,
out of date, failed, damaged or missing, with the catalog tables they are published to."""

from __future__ import annotations

import argparse
import contextlib
import io
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

from windowing import command_line
from windowing.catalog import published_table
from windowing.config import load_pipeline
from windowing.partitions import Partitions, check_bound, check_range
from windowing.storage import versions
from windowing.storage.lake import Lake, NeedsSpark, absolute, display, join

if TYPE_CHECKING:
    from windowing.chain import Chain
    from windowing.config import Pipeline

NAME = "status"


def add_parser(subparsers: Any) -> None:
    s = subparsers.add_parser(NAME, help="list a history's partitions: committed, out of date, failed or missing")
    s.add_argument("--output", required=True, help="output root (as given to backfill)")
    s.add_argument(
        "--config",
        help="pipeline YAML (default: every pipeline under --output, checked against the "
        "configuration of its newest partition)",
    )
    s.add_argument("--from", dest="first", help="first partition to list (default: the start of the history)")
    s.add_argument("--to", dest="last", help="last partition to list (default: the newest committed or failed)")
    command_line.catalog_args(s)
    command_line.spark_args(s)


def run(args: argparse.Namespace) -> int:
    pipeline = load_pipeline(args.config) if args.config else None
    for option, bound in (("--from", args.first), ("--to", args.last)):
        if bound is not None:
            check_bound(bound, option, grain_option=False)  # before Spark starts (the history has its grain)
    check_range(args.first, args.last)
    output_root = absolute(args.output)
    if pipeline is None:  # with --config, a history not started yet is a status ("nothing committed")
        command_line.check_local_paths(args, [output_root], "no such folder")
    catalog = command_line.catalog_setup(args, pipeline, output_root)
    if catalog is None and not (args.master or args.remote or args.conf):
        shown = io.StringIO()
        try:  # a local history (and landing zone) is read with no Spark session: no JVM starts
            with contextlib.redirect_stdout(shown):
                code = _report(None, args, pipeline, output_root, catalog)
        except NeedsSpark:  # a history, or a landing zone it was read from, that only Spark reaches
            pass
        else:
            print(shown.getvalue(), end="")
            return code
    return _report(command_line.spark_for(args), args, pipeline, output_root, catalog)


def _report(spark: Any, args: argparse.Namespace, pipeline: Any, output_root: str, catalog: Any) -> int:
    """Print the status of each pipeline's history under ``output_root``; ``spark`` None:
    read the local store and landing zone with Python's calls (``Lake.on_driver``)."""
    from windowing.history import stored_history  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.storage import store  # noqa: PLC0415 - keeps the CLI fast: the commit records are read with pyspark

    if pipeline is not None:
        names = [pipeline.name]
    else:
        names = sorted(e.path.rstrip("/").rsplit("/", 1)[-1] for e in Lake(spark).children(output_root))
    shown = 0
    for name in names:
        current = versions.current_version(spark, output_root, name)
        root = versions.version_root(output_root, name, current)
        stored = stored_history(spark, root, name)
        if stored is None:
            if pipeline is not None:
                print(f"pipeline {name!r}: nothing committed under {join(root, name)}")
            continue
        grain, start = stored
        partitions = Partitions(grain, Partitions(grain, datetime(1970, 1, 1, tzinfo=timezone.utc)).start_of(start))
        chain = _reading_chain(spark, pipeline or _NewestConfig(spark, root, name), root, partitions)
        keys = None
        if args.first or args.last:
            committed = chain.committed_keys()
            first = partitions.span(args.first, args.first)[0] if args.first else start
            last = partitions.span(args.last, args.last)[-1] if args.last else (committed[-1] if committed else first)
            keys = partitions.keys(first, last)
        rows = chain.status(keys)
        shown += 1
        publisher = None if pipeline is None else command_line.publisher(spark, catalog, pipeline, output_root, current)
        print(
            f"pipeline {name!r} ({grain} partitions from {start}), version {current}, in {chain.pipeline_dir}"
            + (f"; tables {catalog.database}.{catalog.table}_*" if publisher is not None else "")
        )
        # The rows source.filter dropped, once a partition has some (input = filtered + rejected + replayed).
        filtered = any(s.metrics is not None and s.metrics.filtered_rows for s in rows)
        print(
            f"  {'partition':<18}{'status':<13}{'events':>10}"
            + (f"{'filtered':>10}" if filtered else "")
            + f"{'emitted':>10}  detail"
        )
        for s in rows:
            m = s.metrics
            tables = f"; {_published(publisher, s.key)}" if publisher is not None else ""
            print(
                f"  {s.key:<18}{s.status:<13}{f'{m.input_rows:,}' if m is not None else '':>10}"
                + (f"{f'{m.filtered_rows:,}' if m is not None else '':>10}" if filtered else "")
                + f"{f'{m.windows_emitted:,}' if m is not None else '':>10}  {s.detail}{tables}"
            )
        counts = {st: sum(1 for s in rows if s.status == st) for st in dict.fromkeys(s.status for s in rows)}
        print("  " + ", ".join(f"{n} {st}" for st, n in counts.items()))
        unknown = [s.key for s in rows if s.input_unknown]
        if unknown:
            print(
                f"  note: {len(unknown)} partition(s) ({_keys(unknown)}) committed without a record of their input "
                "files (before rewindow kept one, or a flat landing zone): input unknown, so a file landing late "
                "in them is not seen; a rerun records them"
            )
        stale = [s for s in rows if s.status == "out of date"]
        others = _other_versions(spark, output_root, name, current, pipeline, partitions, [s.key for s in rows])
        for line in others:
            print(f"  {line}")
        if stale and pipeline is not None and all(s.detail == store.ANOTHER_CONFIGURATION for s in stale):
            print(
                f"  the pipeline changed: rewindow backfill --config {args.config} --output {output_root} "
                f"(--input ...) rebuilds the history as a new version beside {current}, which stays current "
                "until the rebuild is whole"
            )
        elif stale:
            zones = {s.landing_zone for s in rows if s.landing_zone}
            where = f" --input {display(zones.pop())}" if len(zones) == 1 else ""
            print(
                f"  {len(stale)} partition(s) out of date from {stale[0].key}: bring them in line with "
                f"rewindow backfill --config {args.config or 'PIPELINE.yaml'}{where} --output {output_root} --resume"
            )
    if not shown and pipeline is None:
        print(f"no rewindow history under {output_root}")
    return 0


def _other_versions(
    spark: Any, output_root: str, name: str, current: str, pipeline: Any, partitions: Any, keys: list[str]
) -> list[str]:
    """A line for each version of the history besides the current one: a rebuild under way
    (k of n partitions), or one kept from before."""
    from windowing.chain import COMMITTED  # noqa: PLC0415 - keeps the CLI fast: chain imports pyspark

    lines = []
    for version in versions.versions(spark, output_root, name):
        if version == current:
            continue
        root = versions.version_root(output_root, name, version)
        if versions.number(version) < versions.number(current):
            lines.append(f"version {version}: kept (the one before {current}), in {join(root, name)}")
            continue
        try:
            config = pipeline or _NewestConfig(spark, root, name)
        except ValueError:  # nothing committed in it yet
            lines.append(f"version {version}: being built: 0 of {len(keys)} partition(s) committed")
            continue
        done = sum(s.status == COMMITTED for s in _reading_chain(spark, config, root, partitions).status(keys))
        lines.append(
            f"version {version}: being built: {done} of {len(keys)} partition(s) committed; it becomes current "
            f"when whole: rewindow backfill --config ... --output {output_root} --resume"
        )
    return lines


def _keys(keys: list[str]) -> str:
    return ", ".join(keys) if len(keys) <= 3 else f"{keys[0]}..{keys[-1]}"


def _published(publisher: Any, key: str) -> str:
    """What each catalog table's partition ``key`` points at, for ``rewindow status``."""
    return published_table(publisher.pointed(key).values())


def _reading_chain(spark: Any, config: Pipeline | _NewestConfig, root: str, partitions: Partitions) -> Chain:
    """The chain of the history under ``root``, to read its status: of ``config``, or of its
    stand-in (a chain that reads its status asks the pipeline for its name and fingerprint only)."""
    from windowing.chain import Chain  # noqa: PLC0415 - keeps the CLI fast: chain imports pyspark

    return Chain(spark, cast("Pipeline", config), "", root, partitions)


class _NewestConfig:
    """A pipeline stand-in for ``rewindow status`` without ``--config``: its name, and the
    configuration fingerprint of its newest committed partition taken as the current one."""

    def __init__(self, spark: Any, output_root: str, name: str) -> None:
        from windowing.storage.commits import current_commits_under  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark

        self.name = name
        commits = current_commits_under(spark, join(output_root, name))
        newest = max(commits.values(), key=lambda c: c.committed_at)
        self._fingerprint = newest.fingerprint

    def fingerprint(self) -> str:
        return self._fingerprint
