"""``rewindow diff BEFORE AFTER``: its arguments (:func:`add_parser`) and the command
(:func:`run`): compare, print the summary, write the outputs with ``--output``; exit 0
when the sides are equal, 1 when not, 2 on a usage or input error (before any work)."""

from __future__ import annotations

import argparse
from typing import Any

from windowing import command_line
from windowing.config import load_pipeline
from windowing.partitions import check_bound, check_range
from windowing.storage.lake import inside

NAME = "diff"


def add_parser(subparsers: Any) -> None:
    d = subparsers.add_parser(
        NAME,
        help="compare two versions of a history (or two replay outputs): windows changed, "
        "only in one, columns added; exit 1 when they differ",
        description="Compare BEFORE with AFTER: per partition and in total, the windows, late events and "
        "rejected rows only in BEFORE, only in AFTER, and changed (which columns, the largest difference), "
        "and the columns added and removed. Exit 0 when equal, 1 when not, 2 on a usage or input error.",
    )
    d.add_argument("before", metavar="BEFORE", help="a history (output root or ROOT/PIPELINE) or a replay output")
    d.add_argument("after", metavar="AFTER", help="the same kinds as BEFORE: the version to compare with it")
    d.add_argument("--config", help="pipeline YAML: picks its pipeline in output roots holding several")
    d.add_argument(
        "--output",
        help="report folder or URI: the differing rows (Parquet), summary.json and report.html (committed atomically)",
    )
    d.add_argument("--from", dest="first", help="first partition of the histories to compare (YYYY-MM-DD[THH])")
    d.add_argument("--to", dest="last", help="last partition of the histories to compare, included")
    command_line.spark_args(d)


def run(args: argparse.Namespace) -> int:
    from windowing.diff.outputs import write_diff  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.diff.result import diff  # noqa: PLC0415 - keeps the CLI fast: imports pyspark
    from windowing.diff.sides import check_location  # noqa: PLC0415 - keeps the CLI fast: imports pyspark

    pipeline = load_pipeline(args.config).name if args.config else None
    for option, bound in (("--from", args.first), ("--to", args.last)):
        if bound is not None:
            check_bound(bound, option, grain_option=False)
    check_range(args.first, args.last)
    if not args.remote:  # a Spark Connect server's paths are its own disk's
        check_location(args.before, "BEFORE")
        check_location(args.after, "AFTER")
    if args.output:
        for side in (args.before, args.after):
            if inside(str(args.output), side) or inside(side, str(args.output)):
                raise ValueError(f"--output {args.output}: is, holds or lies inside {side}: choose another folder")
    spark = command_line.spark_for(args)
    with diff(spark, args.before, args.after, pipeline=pipeline, first=args.first, last=args.last) as result:
        print(result.summary())
        if args.output:
            commit = write_diff(result, args.output, inputs=[args.before, args.after])
            print(f"differences, summary.json and report.html in {commit.run_path}/, committed as run {commit.seq}")
    return 0 if result.equal else 1
