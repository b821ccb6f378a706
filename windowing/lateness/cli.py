"""``rewindow lateness``: its arguments (:func:`add_parser`) and the command (:func:`run`):
analyse a history under every variant asked for, write the tables, figures and report,
print the recommendation. Spark and the analysis are imported when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from windowing import command_line
from windowing.config import ConfigError, load_pipeline
from windowing.config.fields import parse_share
from windowing.durations import parse_duration_ms
from windowing.lateness.defaults import DEFAULT_DELAYS, DEFAULT_FUTURE_SKEW, DEFAULT_TARGET_LATE, DEFAULT_WORST

NAME = "lateness"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(NAME, help="what lateness cost, and which delay and watermark strategy to run with")
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
        help=f"late share to stay at or under, e.g. 0.1%% (default {command_line.escape(DEFAULT_TARGET_LATE)})",
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
    command_line.spark_args(p)


def run(args: argparse.Namespace) -> int:
    """``rewindow lateness``: analyse, write, print the recommendation; exit code 0."""
    from windowing.lateness.job import lateness  # noqa: PLC0415 - keeps the CLI fast: the job imports pyspark
    from windowing.lateness.options import (  # noqa: PLC0415 - keeps the CLI fast: the variants import the kernel
        FIGURES,
        REPORT,
        TABLES,
        LatenessOptions,
        check_analysable,
        parse_delays,
        parse_modes,
    )
    from windowing.lateness.outputs import (  # noqa: PLC0415 - keeps the CLI fast: outputs import pyspark
        read_lateness,
        write_lateness,
    )
    from windowing.lateness.text import format_figures  # noqa: PLC0415 - keeps the CLI fast
    from windowing.storage.inputs import check_input_schema, read_events  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark
    from windowing.storage.outputs import check_output_target  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark

    pipeline = load_pipeline(args.config)
    check_analysable(pipeline)  # before Spark starts
    future = (
        None
        if str(args.future_skew).strip().lower() in ("off", "none")
        else _duration(args.future_skew, "--future-skew")
    )
    options = LatenessOptions(
        delays_ms=parse_delays(args.delays),
        target_late=parse_share(args.target_late, "--target-late"),
        lateness_modes=parse_modes(args.lateness_modes),
        future_skew_ms=future,
        worst=args.worst,
        flush_at_end=args.flush_at_end,
    )
    inputs = args.input or ([pipeline.source.path] if pipeline.source.path else [])
    command_line.check_local_paths(args, inputs, "input does not exist")
    check_input_schema(pipeline, inputs)
    print(f"rewindow: [1/3] starting Spark ({args.remote or args.master or 'local[*]'})", file=sys.stderr, flush=True)
    spark = command_line.spark_for(args)
    check_output_target(spark, args.output, inputs + ([args.state_in] if args.state_in else []))
    state, state_figures = None, None
    if args.state_in:
        prev = read_lateness(spark, args.state_in)
        state, state_figures = prev.tables["state"], prev.figures
    events = read_events(spark, args.input, pipeline=pipeline)
    print(
        f"rewindow: [2/3] replaying {len(options.variants(pipeline))} variants of pipeline {pipeline.name!r}",
        file=sys.stderr,
        flush=True,
    )
    result = lateness(spark, pipeline, events, state=state, options=options, state_figures=state_figures)
    try:
        print(f"rewindow: [3/3] writing {args.output}", file=sys.stderr, flush=True)
        commit = write_lateness(result, args.output, pipeline, inputs=inputs)
    finally:
        result.unpersist()
    print(format_figures(result.figures))
    print(
        f"tables and report in {commit.run_path}/ ({', '.join(TABLES)}, {FIGURES}, {REPORT}), "
        f"committed as run {commit.seq} of {args.output}"
    )
    return 0


def _duration(text: str, field: str) -> int:
    try:
        return parse_duration_ms(text, field)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
