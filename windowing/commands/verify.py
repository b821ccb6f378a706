"""``rewindow verify``: the data-quality checks (:mod:`windowing.validation`) on a replay's
output folder, as a table or JSON; exit 0 (passed or warned), 1 (a blocking check failed)
or 2 (a check asked for cannot run)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from windowing import command_line
from windowing.config import ConfigError, load_pipeline
from windowing.durations import parse_duration_ms

NAME = "verify"


def add_parser(subparsers: Any) -> None:
    v = subparsers.add_parser(NAME, help="run the data-quality checks on a replay's output folder")
    v.add_argument("output_dir", metavar="OUTPUT_DIR", help="a `rewindow replay --output` folder or URI")
    v.add_argument("--config", required=True, help="the pipeline YAML the replay ran")
    v.add_argument(
        "--input",
        nargs="+",
        help="the events it replayed: enables the input and conservation checks, and replay_reproduces "
        "(a fresh replay compared row for row)",
    )
    v.add_argument("--state-in", help="the state it started from (the previous partition's OUT_DIR/state)")
    v.add_argument(
        "--flush-at-end",
        action="store_true",
        default=None,
        help="the replay ran with --flush-at-end (default: the pipeline's replay.flushAtEnd)",
    )
    v.add_argument("--max-skew", default="7d", help="largest accepted |event time - arrival time| (default 7d)")
    v.add_argument(
        "--check",
        action="append",
        metavar="NAME",
        help="run only this check (repeatable); one that cannot run is an error",
    )
    v.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    command_line.spark_args(v)


def run(args: argparse.Namespace) -> int:
    """Exit 0: every check that ran passed or only warned (rejected rows within the
    pipeline's ``quality.maxRejectedShare``); 1: a blocking check failed; 2: a usage or
    input error, including a check asked for with --check that cannot run (say, no
    metrics to compare)."""
    pipeline = load_pipeline(args.config)
    try:
        max_skew_ms = parse_duration_ms(args.max_skew, "--max-skew")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    from windowing.storage.inputs import read_events  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark
    from windowing.storage.outputs import read_outputs, read_state  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark
    from windowing.validation import (  # noqa: PLC0415 - keeps the CLI fast: validation imports pyspark
        format_table,
        run_checks,
    )

    command_line.check_local_paths(args, [args.output_dir], "no such folder")
    command_line.check_local_paths(args, args.input or [], "input does not exist")
    spark = command_line.spark_for(args)
    outputs = read_outputs(spark, args.output_dir)
    prev = read_state(spark, args.state_in) if args.state_in else None
    events = read_events(spark, args.input, pipeline=pipeline, state=prev) if args.input else None
    only = set(args.check) if args.check else None
    results = run_checks(
        spark,
        pipeline,
        outputs,
        input_df=events,
        prev_state=prev,
        max_skew_ms=max_skew_ms,
        only=only,
        recompute=events is not None,
        flush_at_end=args.flush_at_end,
    )
    if only is None:
        landing = _landing_check(spark, outputs)  # only for a run that recorded its landed files
        results = [_state_manifest_check(spark, outputs), *([landing] if landing is not None else []), *results]
    failed = [r for r in results if not r.passed and r.blocking]
    warned = [r for r in results if not r.passed and not r.blocking]
    # A check asked for by name gives a verdict or an error, never a silent skip.
    cannot = [r for r in results if r.skipped] if only is not None else []
    if args.json:
        print(
            json.dumps([{"name": r.name, "status": r.status, **r.metadata()} for r in results], indent=2, default=str)
        )
    else:
        print(format_table(results))
        ran = [r for r in results if not r.skipped]
        summary = f"{len(ran) - len(failed) - len(warned)} of {len(ran)} checks passed" if ran else "no check ran"
        if warned:
            summary += f", {len(warned)} warned"
        skipped = f"{len(cannot)} requested check(s) could not run" if cannot else f"{len(results) - len(ran)} skipped"
        print(f"\n{summary} ({skipped}) on {args.output_dir}")
    if warned:
        print(f"rewindow: verify: {len(warned)} warning(s): {', '.join(r.name for r in warned)}", file=sys.stderr)
    if failed:
        print(f"rewindow: verify: {len(failed)} check(s) failed: {', '.join(r.name for r in failed)}", file=sys.stderr)
    if cannot:
        for r in cannot:
            print(f"rewindow: error: check {r.name} cannot run: {r.skip_reason}", file=sys.stderr)
        return 2
    return 1 if failed else 0


def _state_manifest_check(spark: Any, outputs: Any) -> Any:
    """``state_manifest``: the state's parts, row counts and window-rows hash against the
    manifest the run wrote (windowing.storage.manifest), with or without ``--input``."""
    from windowing.storage.manifest import verify_problem  # noqa: PLC0415 - keeps the CLI fast: manifest imports pyspark
    from windowing.validation import CheckResult  # noqa: PLC0415 - keeps the CLI fast: validation imports pyspark

    description = "the state's part files, row counts and window rows match the manifest written with it"
    extra = outputs.commit.extra if outputs.commit is not None else None
    try:
        problem = verify_problem(spark, outputs.path, extra, outputs.state)
    except LookupError as exc:
        return CheckResult("state_manifest", True, 0, [], description, skipped=True, skip_reason=str(exc))
    sample = [] if problem is None else [{"problem": problem}]
    return CheckResult("state_manifest", problem is None, len(sample), sample, description)


def _landing_check(spark: Any, outputs: Any) -> Any:
    """``landing_files_unchanged`` (a warning): the files the committed run read, as its
    commit recorded them, are the landing zone's files now (one listing; issue 46). None
    for a run whose commit records no landed files."""
    from windowing.storage.input_record import InputRecord, compare  # noqa: PLC0415 - keeps the CLI fast
    from windowing.validation import CheckResult  # noqa: PLC0415 - keeps the CLI fast: validation imports pyspark

    description = "the landed files the run read are the landing zone's files now (none added, removed or rewritten)"
    record = InputRecord.of(outputs.commit)
    if record is None:  # a replay of --input, or committed before records kept its files: nothing to compare
        return None
    changes = compare(spark, record)
    sample = [{"problem": changes.describe(), **changes.to_metadata()}] if changes else []
    return CheckResult("landing_files_unchanged", not changes, len(sample), sample, description, blocking=False)
