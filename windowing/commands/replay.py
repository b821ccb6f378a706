"""``rewindow replay``: replay events (Parquet) through a pipeline (YAML) into a committed
run of an output folder, published to the catalog when the pipeline has one (after the
blocking data-quality checks pass on the staged run)."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from typing import Any

from windowing import command_line
from windowing.catalog import CatalogError, Publisher
from windowing.config import ConfigError, ignored_fields_note, load_pipeline
from windowing.storage.lake import absolute

NAME = "replay"


def add_parser(subparsers: Any) -> None:
    r = subparsers.add_parser(NAME, help="replay events (Parquet) through a pipeline (YAML)")
    r.add_argument("--config", required=True, help="pipeline YAML (contract section 10)")
    r.add_argument("--input", nargs="+", help="events: folders, files or URIs (default: the pipeline's source)")
    r.add_argument("--output", required=True, help="output folder or URI (a new run, committed atomically)")
    r.add_argument("--state-in", help="the previous replay's output (or its OUT_DIR/state)")
    r.add_argument("--flush-at-end", action="store_true", default=None, help="emit open windows at the end")
    r.add_argument(
        "--partition",
        help="with output.catalog: the table partition (partition_key) this run is published as, e.g. 2024-01-01",
    )
    r.add_argument(
        "--checks",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the data-quality checks on the staged run before it is committed, and record them with it "
        "(as rewindow backfill does); a blocking failure leaves it uncommitted (default: only when publishing)",
    )
    command_line.catalog_args(r)
    command_line.spark_args(r)


def run(args: argparse.Namespace) -> int:
    pipeline = load_pipeline(args.config)  # before Spark starts: config errors are instant
    from windowing.chain import ChainError, OneRun, carried_start  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.partitions import Partitions  # noqa: PLC0415 - keeps the CLI fast
    from windowing.storage.commits import current_commit  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.storage.inputs import check_input_schema, read_events  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark
    from windowing.storage.outputs import check_output_target  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark

    note = ignored_fields_note(pipeline)
    if note:
        print(f"rewindow: note: {note}", file=sys.stderr)
    inputs = args.input or ([pipeline.source.path] if pipeline.source.path else [])
    command_line.check_local_paths(args, inputs, "input does not exist")  # before Spark starts, as is
    # local Parquet input lacking a configured column. (--state-in names a run's state as its
    # output folder does, OUT/state, which may be no folder: read_state says what is missing.)
    check_input_schema(pipeline, inputs)
    # The tables' root folders sit beside the output (OUT/../_tables), the embedded metastore in OUT/../_metastore.
    parent = absolute(args.output).rstrip("/").rsplit("/", 1)[0]
    catalog = command_line.catalog_setup(args, pipeline, parent)
    if catalog is not None and not args.partition:
        raise ConfigError(
            "--partition: required when the pipeline publishes to a catalog (output.catalog): "
            "the table partition this run is published as (e.g. 2024-01-01)"
        )
    command_line.progress(1, 3, f"starting Spark ({args.remote or args.master or 'local[*]'})")
    spark = command_line.spark_for(args)
    publisher = None
    if catalog is not None:
        publisher = Publisher(spark, catalog, pipeline, parent)
        publisher.check()  # a catalog that cannot take a location swap fails before any work
    started = time.monotonic()
    check_output_target(spark, args.output, inputs)  # before any work: never write over the events
    what = ", ".join(map(str, inputs)) or "no input"
    command_line.progress(2, 3, f"replaying {what} through pipeline {pipeline.name!r}")
    start = carried_start(spark, args.state_in) if args.state_in else None
    # pipeline/state: an empty partition (no files) replays as zero events.
    events = read_events(spark, args.input, pipeline=pipeline, state=start.state if start else None)
    # The chain's write-audit-publish, over one partition in this folder (windowing.chain.OneRun):
    # staged, checked (when publishing, or --checks), committed with its lineage, published.
    key = args.partition or absolute(args.output).rstrip("/").rsplit("/", 1)[-1]
    one = OneRun(
        # One partition: no partitions before or after it (its lineage's previous is --state-in's).
        spark, pipeline, "", parent, Partitions("day", datetime(1970, 1, 1, tzinfo=timezone.utc)), publisher=publisher,
        output=args.output, events=events, inputs=[str(i) for i in inputs],
    )  # fmt: skip
    checks = args.checks if args.checks is not None else publisher is not None
    try:
        flush = pipeline.flush_at_end if args.flush_at_end is None else args.flush_at_end
        command_line.progress(3, 3, f"writing outputs to {args.output}")
        part = one.replay_one(key, start, flush=flush, checks=checks)
    except ChainError as exc:
        if isinstance(exc.__cause__, (ConfigError, ValueError, OSError)) and not isinstance(
            exc.__cause__, CatalogError
        ):
            raise exc.__cause__ from None  # the message it had before the chain wrapped it
        raise ConfigError(str(exc)) from exc
    if not part.committed:
        print(
            f"rewindow: replay: blocking data-quality checks failed ({', '.join(part.lineage.failed_checks)}): "
            f"the run is not committed nor published (kept at {part.run_path}); rewindow verify shows why",
            file=sys.stderr,
        )
        return 1
    commit = current_commit(spark, args.output)
    assert commit is not None  # just committed
    if publisher is not None:
        print(
            f"published run {commit.run_id} as partition {args.partition} of "
            f"{', '.join(f'{publisher.spec.database}.{p.table}' for p in one.published)}"
        )
    m = part.metrics
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
