"""``rewindow reconcile``: its arguments (:func:`add_parser`) and the command (:func:`run`):
compare, write, print a summary. Spark and the comparison are imported when it runs.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import datetime, timezone
from typing import Any

from windowing import command_line as common
from windowing.config import ConfigError
from windowing.config.fields import parse_share
from windowing.config.reconcile import LiveSource
from windowing.metastore import names_table, session_conf_for_tables
from windowing.reconcile.vocabulary import FIELD, FIGURES

NAME = "reconcile"


def add_parser(subparsers: Any) -> None:
    c = subparsers.add_parser(NAME, help="compare a replay's aggregates with what the live pipeline emitted")
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
    common.spark_args(c)


def _parse_edge(text: str) -> int:
    """An edge from the command line: ``2024-01-02`` or ``2024-01-02T06:00:00Z`` (UTC
    unless it has an offset), as epoch ms."""
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--partition-edge: {text!r} is not an ISO-8601 date or time") from None
    return int((t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp() * 1000)


def run(args: Any) -> int:
    """``rewindow reconcile``: compare, write, print a summary; the exit code.

    ``args`` has ``config``, ``replay`` (a replay output), ``live`` (path/URI or None: the
    YAML's ``reconcile.live``), ``output``, and optionally ``live_format``, ``min_match``
    (a share ``0.99`` or ``99%``; default the YAML's ``minMatch``), ``partition_edge``
    (ISO dates/times, increasing), ``master``, ``remote``, ``conf`` (KEY=VALUE pairs).

    Returns 0 when the match rate is at least the minimum, 1 when under it. Bad
    configuration, input or output raise (``ConfigError``, ``InputError``,
    ``OutputError``: all ``ValueError``), which the CLI turns into exit code 2.
    """
    from windowing.catalog import read_published  # noqa: PLC0415 - keeps the CLI fast: catalog imports pyspark
    from windowing.reconcile.compare import reconcile  # noqa: PLC0415 - keeps the CLI fast: it imports pyspark
    from windowing.reconcile.live import load_reconcile, read_live  # noqa: PLC0415 - keeps the CLI fast
    from windowing.reconcile.outputs import write_reconcile  # noqa: PLC0415 - keeps the CLI fast
    from windowing.reconcile.text import format_summary  # noqa: PLC0415 - keeps the CLI fast
    from windowing.storage.outputs import check_output_target, read_outputs  # noqa: PLC0415 - keeps the CLI fast: io imports pyspark

    pipeline, spec = load_reconcile(args.config)
    min_match = getattr(args, "min_match", None)
    if min_match is not None:
        spec = dataclasses.replace(spec, min_match=parse_share(min_match, "--min-match"))
    edges = [_parse_edge(e) for e in (getattr(args, "partition_edge", None) or [])]
    if edges and len(edges) < 2:
        raise ConfigError("--partition-edge: give at least two (the start and end of the partitions)")
    live_where = getattr(args, "live", None) or (spec.live.path if spec.live else None)
    if live_where is None and not (spec.live and spec.live.table):
        raise ConfigError(f"--live: no live aggregates given; pass --live or set {FIELD}.live in {args.config}")
    # --replay (and --live) may name a catalog table (windowing.catalog) instead of a folder.
    replay_table = names_table(args.replay)
    live_table = names_table(getattr(args, "live", None))
    if live_table:
        spec = dataclasses.replace(spec, live=dataclasses.replace(spec.live or LiveSource(), table=args.live))
        args.live, live_where = None, None
    conf = dict(getattr(args, "conf", None) or [])
    if (replay_table or live_table) and not getattr(args, "remote", None):
        # The embedded metastore's settings join --conf (the last of a key wins), as catalog_setup adds its own.
        args.conf = [*conf.items(), *session_conf_for_tables(getattr(args, "metastore_dir", None), conf).items()]
    common.check_local_paths(args, [None if replay_table else args.replay], "no such folder")
    common.check_local_paths(args, [live_where], "the live aggregates do not exist")
    spark = common.spark_for(args)
    inputs = ([] if replay_table else [args.replay]) + ([live_where] if live_where else [])
    check_output_target(spark, args.output, inputs)
    outputs = read_published(spark, args.replay) if replay_table else read_outputs(spark, args.replay)
    live = read_live(spark, spec, path=getattr(args, "live", None), fmt=getattr(args, "live_format", None))
    result = reconcile(
        spark, pipeline, spec, outputs.aggregates, live, outputs.late_events, partition_edges=edges or None
    )
    try:
        commit = write_reconcile(result, args.output, pipeline=pipeline, inputs=inputs)
    finally:
        result.unpersist()
    print(format_summary(result.figures))
    print(
        f"mismatches and summary in {commit.run_path}/ (mismatches, summary, {FIGURES}), "
        f"committed as run {commit.seq} of {args.output}"
    )
    if not result.passed:
        print(
            f"rewindow: reconcile: match rate {100 * result.figures['match_rate']:.4f} % is under the minimum "
            f"{100 * spec.min_match:.4f} %",
            file=sys.stderr,
        )
        return 1
    return 0
