"""``rewindow``: replay historical events through a pipeline's window, from the shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from windowing.backfill import add_arguments, catalog_args, catalog_setup, main_backfill, main_status
from windowing.config import ConfigError, ignored_fields_note, load_pipeline
from windowing.durations import parse_duration_ms
from windowing.lateness_defaults import DEFAULT_DELAYS, DEFAULT_FUTURE_SKEW, DEFAULT_TARGET_LATE, DEFAULT_WORST
from windowing.runner.session import WorkerEnvironmentError, spark_session
from windowing.storage.lake import absolute


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rewindow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("replay", help="replay events (Parquet) through a pipeline (YAML)")
    r.add_argument("--config", required=True, help="pipeline YAML (contract section 10)")
    r.add_argument("--input", nargs="+", help="events: folders, files or URIs (default: the pipeline's source)")
    r.add_argument("--output", required=True, help="output folder or URI (a new run, committed atomically)")
    r.add_argument("--state-in", help="the previous replay's output (or its OUT_DIR/state)")
    r.add_argument("--flush-at-end", action="store_true", default=None, help="emit open windows at the end")
    r.add_argument(
        "--partition",
        help="with output.catalog: the table partition (partition_key) this run is published as, e.g. 2024-01-01",
    )
    catalog_args(r)
    _spark_args(r)
    v = sub.add_parser("verify", help="run the data-quality checks on a replay's output folder")
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
    _spark_args(v)
    c = sub.add_parser("reconcile", help="compare a replay's aggregates with what the live pipeline emitted")
    c.add_argument("--config", required=True, help="the pipeline YAML (its reconcile: block maps the live columns)")
    c.add_argument(
        "--replay",
        required=True,
        help="a `rewindow replay --output` folder or URI, or the catalog "
        "table a history was published to (database.table)",
    )
    c.add_argument(
        "--live",
        help="the live aggregates: folder, file, URI or catalog table database.table "
        "(default: the YAML's reconcile.live)",
    )
    c.add_argument(
        "--metastore-dir",
        help="the embedded metastore of the tables --replay/--live name (default REWINDOW_METASTORE_DIR)",
    )
    c.add_argument("--live-format", help="Spark format of --live (default: the YAML's, else parquet)")
    c.add_argument("--output", required=True, help="report folder or URI (mismatches, summary; committed atomically)")
    c.add_argument("--min-match", help="exit 1 under this match rate, e.g. 99.5%% (default: the YAML's, else 100%%)")
    c.add_argument(
        "--partition-edge",
        action="append",
        metavar="TIME",
        help="a partition boundary, ISO date or time (repeatable, increasing): per-partition figures",
    )
    _spark_args(c)
    _lateness_args(sub)
    add_arguments(sub, _spark_args)
    g = sub.add_parser("generate", help="write sample event history (Parquet)")
    g.add_argument("--output", required=True)
    g.add_argument("--start", default="2024-01-01")
    g.add_argument("--days", type=int, default=2)
    g.add_argument("--events-per-day", type=int, default=50_000)
    g.add_argument("--keys", type=int, default=1_000)
    g.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    try:
        if args.command == "replay":
            return _replay(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "reconcile":
            from windowing.reconcile import (  # noqa: PLC0415 - keeps the CLI fast: reconcile imports pyspark
                main_reconcile,
            )

            return main_reconcile(args)
        if args.command in ("backfill", "status"):
            return (main_backfill if args.command == "backfill" else main_status)(args, _spark)
        if args.command == "lateness":
            from windowing.lateness import main_lateness  # noqa: PLC0415 - keeps the CLI fast: lateness imports pyspark

            return main_lateness(args)
        return _generate(args)
    except (ConfigError, ValueError, OSError, WorkerEnvironmentError) as exc:
        print(f"rewindow: error: {exc}", file=sys.stderr)
        return 2


def _lateness_args(sub: Any) -> None:
    p = sub.add_parser("lateness", help="what lateness cost, and which delay and watermark strategy to run with")
    p.add_argument("--config", required=True, help="pipeline YAML")
    p.add_argument("--input", nargs="+", help="events: folders, files or URIs (default: the pipeline's source)")
    p.add_argument("--output", required=True, help="report folder or URI (tables, figures, report.html; committed)")
    p.add_argument("--state-in", help="the previous partition's `rewindow lateness` output (same options)")
    p.add_argument(
        "--delays", default=DEFAULT_DELAYS, help=f"delayWindowClose values to replay (default {DEFAULT_DELAYS})"
    )
    p.add_argument(
        "--target-late",
        default=DEFAULT_TARGET_LATE,
        help=f"late share to stay at or under, e.g. 0.1%% (default {_escape(DEFAULT_TARGET_LATE)})",
    )
    p.add_argument(
        "--lateness-modes", default=None, help="configured (default), both, or WINDOW_CLOSED,BEFORE_WATERMARK"
    )
    p.add_argument(
        "--future-skew",
        default=DEFAULT_FUTURE_SKEW,
        help=f"list events this far ahead of their arrival, or off (default {DEFAULT_FUTURE_SKEW})",
    )
    p.add_argument("--worst", type=int, default=DEFAULT_WORST, help="windows listed as the worst (default 20)")
    p.add_argument("--flush-at-end", action="store_true", default=None, help="emit open windows at the end")
    _spark_args(p)


def _escape(text: str) -> str:
    """``text`` for an argparse help string, which is %-formatted (``0.1%`` would crash ``--help``)."""
    return text.replace("%", "%%")


def _spark_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, help="Spark master: local[*] (default), spark://, yarn, k8s://")
    where.add_argument("--remote", default=None, help="Spark Connect server: sc://HOST:PORT")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        type=_key_value,
        metavar="KEY=VALUE",
        help="extra Spark setting (repeatable)",
    )


def _key_value(text: str) -> tuple[str, str]:
    """``--conf KEY=VALUE`` (the value may hold ``=``), refused by argparse otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _spark(args: argparse.Namespace) -> Any:
    return spark_session(args.master, dict(args.conf), remote=args.remote)


def _progress(step: int, of: int, what: str) -> None:
    """One line per phase of a command, on stderr (stdout keeps the summary)."""
    print(f"rewindow: [{step}/{of}] {what}", file=sys.stderr, flush=True)


def _replay(args: argparse.Namespace) -> int:
    pipeline = load_pipeline(args.config)  # before Spark starts: config errors are instant
    from windowing.runner.replay import replay  # noqa: PLC0415 - keeps the CLI fast: the runner imports pyspark
    from windowing.storage.inputs import check_input_schema, read_events  # noqa: PLC0415 - keeps the CLI fast: storage imports pyspark
    from windowing.storage.outputs import check_output_target, read_state, stage_outputs  # noqa: PLC0415 - keeps the CLI fast: storage imports pyspark

    note = ignored_fields_note(pipeline)
    if note:
        print(f"rewindow: note: {note}", file=sys.stderr)
    # Local Parquet input lacking a configured column is refused before Spark starts, too.
    check_input_schema(pipeline, args.input or ([pipeline.source.path] if pipeline.source.path else []))
    # The tables' root folders sit beside the output (OUT/../_tables), the embedded metastore in OUT/../_metastore.
    parent = absolute(args.output).rstrip("/").rsplit("/", 1)[0]
    catalog = catalog_setup(args, pipeline, parent)
    if catalog is not None and not args.partition:
        raise ConfigError(
            "--partition: required when the pipeline publishes to a catalog (output.catalog): "
            "the table partition this run is published as (e.g. 2024-01-01)"
        )
    _progress(1, 3, f"starting Spark ({args.remote or args.master or 'local[*]'})")
    spark = _spark(args)
    publisher = None
    if catalog is not None:
        from windowing.catalog import Publisher  # noqa: PLC0415 - keeps the CLI fast

        publisher = Publisher(spark, catalog, pipeline, parent)
        publisher.check()  # a catalog that cannot take a location swap fails before any work
    started = time.monotonic()
    inputs = args.input or ([pipeline.source.path] if pipeline.source.path else [])
    check_output_target(spark, args.output, inputs)  # before any work: never write over the events
    _progress(2, 3, f"replaying {', '.join(map(str, inputs)) or 'no input'} through pipeline {pipeline.name!r}")
    state = read_state(spark, args.state_in) if args.state_in else None
    # pipeline/state: an empty partition (no files) replays as zero events.
    events = read_events(spark, args.input, pipeline=pipeline, state=state)
    # Both name an input file Spark fails to read (a damaged data page) in an InputError.
    result = replay(spark, pipeline, events, state=state, flush_at_end=args.flush_at_end)
    try:
        _progress(3, 3, f"writing outputs to {args.output}")
        staged = stage_outputs(result, args.output, pipeline=pipeline, inputs=inputs)
        if publisher is not None and _blocked(spark, pipeline, staged, events, state):
            return 1
        commit = staged.commit(keep=publisher.pointed_runs(args.partition) if publisher is not None else ())
    finally:
        result.unpersist()
    if publisher is not None:
        published = publisher.publish(args.partition, commit)
        print(
            f"published run {commit.run_id} as partition {args.partition} of "
            f"{', '.join(f'{catalog.database}.{p.table}' for p in published)}"
        )
    m = result.metrics
    print(
        f"replayed {m.input_rows:,} events of pipeline {pipeline.name!r} in {time.monotonic() - started:.1f}s: "
        f"{m.windows_closed:,} windows closed {m.closed_by_reason} ({m.windows_emitted:,} windows emitted, "
        f"{m.snapshots_emitted:,} snapshots), {m.late_events:,} late events "
        f"({m.late_event_windows:,} late (event, window) pairs), "
        f"{m.rejected_rows:,} rejected, {m.open_windows:,} still open; watermark {m.watermark_reached}"
    )
    print(
        f"outputs in {commit.run_path}/ (aggregates, late_events, rejected, state, metrics.json, metrics.prom), "
        f"committed as run {commit.seq} of {args.output}"
    )
    return 0


def _blocked(spark: Any, pipeline: Any, staged: Any, events: Any, state: Any) -> bool:
    """Write-audit-publish for a published replay: the data-quality checks on the staged
    run; True (and the run left uncommitted, unpublished) when a blocking one fails."""
    from windowing.validation import blocking_failures, run_checks  # noqa: PLC0415 - keeps the CLI fast

    failed = blocking_failures(run_checks(spark, pipeline, staged.read(), input_df=events, prev_state=state))
    if failed:
        print(
            f"rewindow: replay: blocking data-quality checks failed ({', '.join(r.name for r in failed)}): "
            f"the run is not committed nor published (kept at {staged.path}); rewindow verify shows why",
            file=sys.stderr,
        )
    return bool(failed)


def _verify(args: argparse.Namespace) -> int:
    """Exit 0: every check that ran passed or only warned (rejected rows within the
    pipeline's ``quality.maxRejectedShare``); 1: a blocking check failed; 2: a usage or
    input error, including a check asked for with --check that cannot run (say, no
    metrics to compare)."""
    pipeline = load_pipeline(args.config)
    try:
        max_skew_ms = parse_duration_ms(args.max_skew, "--max-skew")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    from windowing.storage.inputs import read_events  # noqa: PLC0415 - keeps the CLI fast: storage imports pyspark
    from windowing.storage.outputs import read_outputs, read_state  # noqa: PLC0415 - keeps the CLI fast: storage imports pyspark
    from windowing.validation import (  # noqa: PLC0415 - keeps the CLI fast: validation imports pyspark
        format_table,
        run_checks,
    )

    spark = _spark(args)
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
        results = [_state_manifest_check(spark, outputs), *results]
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


def _generate(args: argparse.Namespace) -> int:
    from windowing.sample import generate_history  # noqa: PLC0415 - keeps the CLI fast: sample imports pyspark

    start = datetime.strptime(args.start, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    folders = generate_history(args.output, start, args.days, args.events_per_day, args.keys, seed=args.seed)
    print(json.dumps({"days": [str(f) for f in folders]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
