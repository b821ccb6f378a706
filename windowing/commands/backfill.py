"""``rewindow backfill``: the partition chain (:mod:`windowing.chain`)
from the shell, the same code the Dagster assets and the Airflow operator run.

``rewindow backfill --config P.yaml --input LANDING --output ROOT --from 2024-01-01 --to 2024-01-31``
replays the range's partitions in order, each from the state of the one before, committing
each to ``ROOT/<pipeline>/<partition>/``. A progress bar (``rich``) shows the partition,
events per second and the time left; the command ends with the per-partition table of the
demo and exits 1 naming the first partition that failed (and its checks), or the reason the
chain refused to go on.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable

from windowing import command_line
from windowing.config import ConfigError, ignored_fields_note, load_pipeline
from windowing.metrics import ReplayMetrics
from windowing.partitions import Partitions, check_bound, check_range, day_key
from windowing.storage.lake import absolute

if TYPE_CHECKING:
    from windowing.rebuild import VersionPlan

EXIT_FAILED = 1

NAME = "backfill"


def add_parser(subparsers: Any) -> None:
    b = subparsers.add_parser(NAME, help="replay a range of arrival-time partitions in order, carrying the state")
    b.add_argument("--config", required=True, help="pipeline YAML")
    b.add_argument(
        "--input",
        help="the landing zone: a folder or URI of date=YYYY-MM-DD folders (default: the pipeline's source.path)",
    )
    b.add_argument("--output", required=True, help="output root: partition K goes to OUTPUT/<pipeline>/<K>/")
    b.add_argument(
        "--from",
        dest="first",
        help="first partition: YYYY-MM-DD, or YYYY-MM-DDTHH with --grain hour "
        "(default: the oldest day the landing zone holds)",
    )
    b.add_argument(
        "--to",
        dest="last",
        help="last partition, included (default: --from if given, else the newest day the landing zone holds)",
    )
    b.add_argument(
        "--grain",
        choices=("day", "hour"),
        default=None,
        help="partition size (default: the stored history's, else day)",
    )
    b.add_argument(
        "--history-start",
        help="the first partition of the history, which starts from no state "
        "(default: the stored history's, else --from)",
    )
    b.add_argument(
        "--partition-column",
        default="date",
        help="the landing zone's day folders (date=YYYY-MM-DD); '' for a flat folder filtered by arrival time",
    )
    how = b.add_mutually_exclusive_group()
    how.add_argument(
        "--resume",
        action="store_true",
        help="skip the partitions of the range already committed and current (after a killed run)",
    )
    how.add_argument(
        "--rerun-from",
        metavar="DATE",
        help="replay from this partition to --to (default: the newest committed partition), "
        "so that the later partitions become current again",
    )
    b.add_argument(
        "--keep-versions",
        type=command_line.positive_int,
        default=2,
        metavar="N",
        help="versions of the history kept after a rebuild is switched in (the current one included; default 2)",
    )
    b.add_argument("--flush-at-end", action="store_true", help="emit the windows still open after --to")
    b.add_argument("--no-checks", action="store_true", help="skip the data-quality checks (not recommended)")
    command_line.catalog_args(b)
    command_line.spark_args(b)


def run(args: argparse.Namespace) -> int:
    from windowing import rebuild  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.chain import Chain, ChainError  # noqa: PLC0415 - keeps the CLI fast: chain imports pyspark
    from windowing.history import stored_history, summary_table  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.landing import landed_days  # noqa: PLC0415 - keeps the CLI fast: landing imports pyspark

    pipeline = load_pipeline(args.config)  # before Spark starts: config errors are instant
    for option, bound in (
        ("--from", args.first),
        ("--to", args.last),
        ("--rerun-from", args.rerun_from),
        ("--history-start", args.history_start),
    ):
        if bound is not None:
            check_bound(bound, option)  # before Spark starts too
    check_range(args.first, args.last)
    landing_zone = args.input or pipeline.source.path
    if not landing_zone:
        raise ConfigError("--input: no landing zone given, and the pipeline has no source.path")
    command_line.check_local_paths(args, [landing_zone], "the landing zone does not exist")
    note = ignored_fields_note(pipeline)
    if note:
        print(f"rewindow: note: {note}", file=sys.stderr)
    landing_zone, output_root = absolute(landing_zone), absolute(args.output)
    catalog = command_line.catalog_setup(args, pipeline, output_root)
    spark = command_line.spark_for(args)
    try:
        plan = rebuild.plan(spark, pipeline, output_root, rerun_from=args.rerun_from)
        stored = stored_history(spark, plan.read_root, pipeline.name)
        grain = args.grain or (stored[0] if stored else "day")
        if stored and stored[0] != grain:
            raise ConfigError(f"--grain {grain}: the history under {output_root} has {stored[0]} partitions")
        probe = Partitions(grain, datetime(1, 1, 1, tzinfo=timezone.utc))  # any day: the probe only parses
        partition_column = args.partition_column.strip() or None
        landed = landed_days(
            spark, landing_zone, pipeline.source.arrival_time, source=pipeline.source, partition_column=partition_column
        )
        if not args.first and not args.rerun_from:
            if not landed:
                raise ConfigError(
                    f"--from: the landing zone {landing_zone} holds no events; which partition to "
                    "start at (YYYY-MM-DD)?"
                )
            args.first, args.last = day_key(landed[0]), args.last or day_key(landed[-1])
            print(f"rewindow: replaying the landed days {args.first}..{args.last}", file=sys.stderr)
        first = probe.span(args.first or args.rerun_from, args.first or args.rerun_from)[0]
        last = probe.span(args.last or args.first or args.rerun_from, args.last or args.first or args.rerun_from)[-1]
        start = (
            probe.span(args.history_start, args.history_start)[0]
            if args.history_start
            else stored[1]
            if stored
            else first
        )
        if stored and start != stored[1]:
            raise ConfigError(f"--history-start {start}: the history under {output_root} starts at {stored[1]}")
        partitions = Partitions(grain, probe.start_of(start))
        keys = partitions.keys(first, last)
        if not keys:
            raise ConfigError(f"--to {last} is before --from {first}")
        _warn_if_not_landed(keys, partitions, landed, landing_zone)
        chain = Chain(
            spark,
            pipeline,
            landing_zone,
            plan.build_root,
            partitions,
            partition_column=partition_column,
            publisher=command_line.publisher(spark, catalog, pipeline, output_root, plan.version),
        )
        if plan.rebuild:
            keys = _rebuild_range(plan, partitions, keys, args)
        if args.rerun_from and not args.first and not args.last:  # D through the newest committed, as --to's help says
            committed = chain.committed_keys()
            if committed and partitions.start_of(committed[-1]) > partitions.start_of(keys[-1]):
                keys = partitions.keys(keys[0], committed[-1])
        if args.rerun_from:
            rerun = probe.span(args.rerun_from, args.rerun_from)[0]
            if rerun not in keys:
                raise ConfigError(f"--rerun-from {rerun} is outside --from {first} --to {last}")
            keys = keys[keys.index(rerun) :]
        elif args.resume:
            at = chain.resume_point(keys)
            if at is None:
                print(
                    f"rewindow: every partition of {keys[0]}..{keys[-1]} is committed and current: nothing to do",
                    file=sys.stderr,
                )
                print(summary_table(pipeline.name, keys, chain.commits(keys)))
                if plan.rebuild:  # built whole, but the run that built it stopped before its switch
                    rebuild.switch_if_whole(chain, plan, keys, args.keep_versions, say=_say)
                return 0
            if at != keys[0]:
                print(
                    f"rewindow: resuming at {at} ({keys.index(at)} partition(s) of the range already done)",
                    file=sys.stderr,
                )
            keys = keys[keys.index(at) :]
        whole = plan.whole(partitions, keys[-1]) if plan.rebuild else keys
        code = _run(chain, keys, args, summary_table, output_root)
        if code == 0 and plan.rebuild:
            rebuild.switch_if_whole(chain, plan, whole, args.keep_versions, say=_say)
        elif plan.rebuild:
            print(
                f"rewindow: {plan.version} of {pipeline.name!r} is not switched in: {plan.current} stays current "
                "(and published) until every partition of the rebuild is committed",
                file=sys.stderr,
            )
        return code
    except ChainError as exc:
        print(f"rewindow: backfill: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _warn_if_not_landed(keys: list[str], partitions: Any, landed: list[Any], landing_zone: str) -> None:
    """A range with no landed day replays empty partitions: legal (a quiet day), but
    rarely what the user meant, so say what the landing zone holds."""
    days = {partitions.window(k)[0].date() for k in keys}
    if landed and not days & set(landed):
        print(
            f"rewindow: warning: the landing zone {landing_zone} holds no events for {keys[0]}..{keys[-1]} "
            f"(it holds {landed[0]}..{landed[-1]}): these partitions will be empty",
            file=sys.stderr,
        )
    elif not landed:
        print(f"rewindow: warning: the landing zone {landing_zone} holds no events", file=sys.stderr)


def _run(
    chain: Any, keys: list[str], args: argparse.Namespace, summary_table: Callable[..., str], output_root: str
) -> int:
    from rich.console import Console  # noqa: PLC0415 - keeps the CLI fast: rich only draws the progress bar
    from rich.progress import (  # noqa: PLC0415 - keeps the CLI fast: rich only draws the progress bar
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    name = chain.pipeline.name
    console = Console(stderr=True)
    began = time.monotonic()
    rows = 0
    failed = None
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    go_on = (
        f"go on with: rewindow backfill --config {args.config} --input {chain.landing_zone} "
        f"--output {output_root} --resume"
    )
    # Ctrl-C ends the process at once (command_line.exit_on_signals): the partition in flight is
    # committed or not, whole (its commit record is written last, in one rename).
    command_line.ON_SIGNAL_SAY[:] = [f"no partition committed by this run yet; {go_on}"]
    console.print(
        f"rewindow: backfilling {len(keys)} partition(s) {keys[0]}..{keys[-1]} of pipeline {name!r} "
        f"from {chain.landing_zone} into {chain.pipeline_dir}"
    )
    before = chain.commits(keys)  # what a rerun replaces: told apart at the end
    replayed = []
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(keys[0], total=len(keys), rate="")
        for part in chain.replay(keys, flush_at_end=args.flush_at_end, checks=not args.no_checks):
            m = part.metrics
            rows += m.input_rows
            rate = rows / (time.monotonic() - began)
            done = keys.index(part.key) + 1
            progress.update(
                task,
                completed=done,
                rate=f"{rate:,.0f} events/s",
                description=keys[done] if done < len(keys) else part.key,
            )
            verdict = "committed" if part.committed else f"FAILED {', '.join(part.lineage.failed_checks)}"
            filtered = f"{m.filtered_rows:,} filtered, " if m.filtered_rows else ""
            progress.console.print(
                f"  {part.key}: {m.input_rows:,} events, {filtered}{m.windows_emitted:,} windows emitted, "
                f"{m.late_events:,} late, {m.rejected_rows:,} rejected in {part.seconds:.1f}s: "
                f"{verdict}"
            )
            if not part.committed:
                failed = part
            else:
                replayed.append(part)
                command_line.ON_SIGNAL_SAY[:] = [f"partitions through {part.key} are committed; {go_on}"]
    if before:
        print(_what_changed(chain, before, replayed), file=sys.stderr)
    print(
        f"pipeline {name!r}: outputs in {chain.pipeline_dir}/<partition>/runs/<run>/"
        "{aggregates,late_events,rejected,state} (the current run: see _commits/)"
    )
    print(summary_table(name, keys, chain.commits(keys)))
    elapsed = time.monotonic() - began
    if failed is not None:
        after = keys[keys.index(failed.key) + 1 :]
        print(
            f"rewindow: backfill: partition {failed.key} failed its data-quality checks "
            f"({', '.join(failed.lineage.failed_checks)}); not committed (the staged run is kept at "
            f"{failed.run_path}){f'; {after[0]}..{after[-1]} not replayed' if after else ''}. "
            f"Fix its input, then: rewindow backfill ... --rerun-from {failed.key}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(
        f"backfilled {len(keys)} partition(s), {rows:,} events in {elapsed:.1f}s "
        f"({rows / elapsed if elapsed else 0:,.0f} events/s)"
    )
    _say_what_is_left(chain, keys[-1], output_root, args.config)
    return 0


def _say_what_is_left(chain: Any, last: str, output_root: str, config: str) -> None:
    """A run that leaves committed partitions after ``last`` out of date ends by saying so,
    with the command that brings them in line."""
    later = [s for s in chain.out_of_date() if chain.partitions.start_of(s.partition) > chain.partitions.start_of(last)]
    if later:
        print(
            f"rewindow: {len(later)} committed partition(s) after {last} are out of date from {later[0].partition} "
            f"({later[0].reason}); bring them in line with: rewindow backfill --config {config} --input "
            f"{chain.landing_zone} --output {output_root} --resume",
            file=sys.stderr,
        )


def _what_changed(chain: Any, before: dict[str, Any], replayed: list[Any]) -> str:
    """What a rerun changed, partition by partition: events in and windows emitted before
    and after, and the emissions only in the old run or only in the new one (an exact
    comparison of the two runs' aggregates, one Spark job a partition rerun)."""
    from windowing.history import changed_windows  # noqa: PLC0415 - keeps the CLI fast: imports pyspark

    lines, events, windows = [], 0, 0
    for part in replayed:
        old = before.get(part.key)
        if old is None:
            continue
        then = ReplayMetrics.from_dict(old.metrics)
        differ = changed_windows(chain.spark, old.run_path, part.run_path)
        events += part.metrics.input_rows - then.input_rows
        windows += differ or 0
        lines.append(
            f"  {part.key}: events {then.input_rows:,} -> {part.metrics.input_rows:,}, windows emitted "
            f"{then.windows_emitted:,} -> {part.metrics.windows_emitted:,}, "
            + (f"{differ:,} emission(s) changed" if differ is not None else "the run it replaced was gone")
        )
    if not lines:
        return "rewindow: no committed partition was replayed again"
    return "\n".join(
        [
            f"rewindow: what changed: {len(lines)} partition(s) replayed again, {events:+,} events, "
            f"{windows:,} window emission(s) changed (only in the old run or only in the new):",
            *lines,
        ]
    )


def _rebuild_range(plan: VersionPlan, partitions: Any, keys: list[str], args: argparse.Namespace) -> list[str]:
    """A rebuild's partitions: the whole history, from its start through the newest the
    current version holds (or ``keys``' last, if later)."""
    whole = plan.whole(partitions, keys[-1])
    if args.first and whole[0] != keys[0]:
        print(
            f"rewindow: note: --from {args.first}: a rebuild replays the whole history, from {whole[0]}",
            file=sys.stderr,
        )
    print(
        f"rewindow: the pipeline changed since {plan.current} was built: building {plan.version} beside it, "
        f"{len(whole)} partition(s) {whole[0]}..{whole[-1]}; {plan.current} stays current (and published) until "
        f"{plan.version} is whole, then one switch",
        file=sys.stderr,
    )
    return whole


def _say(line: str) -> None:
    print(f"rewindow: {line}", file=sys.stderr)
