"""Demo without the UI: generate sample history, then replay it through Dagster in one run.

    python -m orchestration.demo --days 3

1. writes ``--days`` days of sample clickstream events (``windowing.sample``) into the
   landing zone (``data/landing`` by default): the days up to yesterday (UTC) the first
   time, the same days again when the landing zone already holds some (``--start`` to
   choose);
2. puts the example pipelines (``examples/pipelines/*.yaml``) into the pipelines folder
   when it holds none (``data/pipelines`` by default);
3. writes a stand-in for what the live pipeline emitted, for each pipeline whose
   ``reconcile.live.path`` lies in the live folder (``--live-root``, by default ``live``
   beside the landing zone: ``data/live``): that pipeline's replay of the same history,
   made with the engine's Python API before the Dagster run, with a few known
   differences (``windowing.sample.write_sample_live``), so that the Dagster check
   ``matches_live`` has something real to find and explain;
4. materializes every asset over all the generated partitions as ONE single-run
   backfill, in process, on a persistent Dagster instance (``data/dagster_home`` unless
   ``DAGSTER_HOME`` is set), so the UI shows the runs afterwards;
5. prints where the outputs are, a summary per partition and the checks' results.

Storage paths and the partition grain come from the same environment variables as the
definitions (see docs/orchestration.md), unless given here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg
    from pyspark.sql import DataFrame

    from assets.resources import SparkResource, StorageResource
    from windowing.config import Pipeline
    from windowing.sample import KnownDifference

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "pipelines"
#: Where the example pipelines' ``reconcile.live.path`` points (relative to the working
#: directory, the repository root): the demo writes their live outputs there.
EXAMPLE_LIVE_ROOT = "data/live"
#: The notice Dagster 1.13's ``dagster dev`` prints (``dg dev``, in another package, supersedes
#: it), filtered in the command the demo prints and in ``make ui``.
DEV_NOTICE = "ignore:Function `dev_command` is superseded"
#: ``dagster.yaml`` of the demo's instance (kept if the user has one, but for the demo's
#: own earlier version, which is replaced).
DAGSTER_YAML = """\
# Dagster instance of the rewindow demo (written by python -m orchestration.demo).
telemetry:
  enabled: false
concurrency:
  runs:
    max_concurrent_runs: 1   # one Spark at a time on a laptop; a pipeline's partitions run in order anyway
# Dagster's queue, whose daemon says once (not every 5 s) that a run is in progress (orchestration/run_queue.py).
run_coordinator:
  module: orchestration.run_queue
  class: QuietQueuedRunCoordinator
"""
#: What earlier demos wrote, replaced by :data:`DAGSTER_YAML`.
EARLIER_DAGSTER_YAMLS = (
    """\
# Dagster instance of the rewindow demo (written by python -m orchestration.demo).
telemetry:
  enabled: false
concurrency:
  runs:
    max_concurrent_runs: 1   # one Spark at a time on a laptop; a pipeline's partitions run in order anyway
""",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestration.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=3, help="days of history to generate and replay (default 3)")
    parser.add_argument(
        "--start",
        default=os.environ.get("REWINDOW_HISTORY_START") or None,
        help="first day, YYYY-MM-DD; also the first partition (default $REWINDOW_HISTORY_START, else the "
        "oldest day the landing zone holds, else --days days before today, UTC)",
    )
    parser.add_argument("--events-per-day", type=int, default=20_000, help="default %(default)s")
    parser.add_argument("--keys", type=int, default=500, help="distinct user_id values (default %(default)s)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--flush-at-end", action="store_true", help="emit the windows still open after the last day")
    parser.add_argument("--landing-zone", help="default $REWINDOW_LANDING_ZONE or data/landing")
    parser.add_argument("--pipelines-dir", help="default $REWINDOW_PIPELINES_DIR or data/pipelines")
    parser.add_argument("--output-root", help="default $REWINDOW_OUTPUT_ROOT or data/output")
    parser.add_argument("--dagster-home", help="Dagster instance folder (default $DAGSTER_HOME or data/dagster_home)")
    parser.add_argument(
        "--live-root",
        help="where the demo writes the live outputs it makes up (default: the folder "
        "'live' beside the landing zone, data/live)",
    )
    parser.add_argument("--no-generate", action="store_true", help="replay the landing zone as it is")
    parser.add_argument(
        "--lateness",
        action="store_true",
        help="then materialize each pipeline's lateness analysis over the same partitions",
    )
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error("--days must be at least 1")
    start = None
    if args.start is not None:
        try:
            start = datetime.strptime(args.start, "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            parser.error(f"--start: {args.start!r} is not a date (YYYY-MM-DD)")
    return run_demo(args, start)


def default_start(landing_zone: str, partition_column: str | None, days: int) -> datetime:
    """The demo's first day without ``--start``: the oldest day the landing zone holds (so a
    second run replays the same history), else ``days`` days before today (UTC), so the
    history ends yesterday. Recent days matter for the UI: Dagster 1.13's Plots ->
    Partitions tab only looks at the 120 partitions before today."""
    from orchestration.partitions import landed_day_folders

    try:
        landed = landed_day_folders(landing_zone, partition_column) if partition_column else []
    except Exception:  # noqa: BLE001 - no landing zone yet
        landed = []
    first = landed[0] if landed else datetime.now(timezone.utc).date() - timedelta(days=days)
    return datetime(first.year, first.month, first.day, tzinfo=timezone.utc)


def run_demo(args: argparse.Namespace, start: datetime | None) -> int:
    import dagster as dg

    from assets.matches_live import LIVE_CHECK
    from assets.pipelines import CHECK_NAME, asset_prefix
    from assets.resources import (
        DEFAULT_LANDING_ZONE,
        DEFAULT_OUTPUT_ROOT,
        DEFAULT_PIPELINES_DIR,
        StorageResource,
        resolved,
        spark_from_env,
        storage_from_env,
        with_catalog,
    )
    from orchestration.definitions import build_definitions, load_pipelines
    from orchestration.partitions import DEFAULT_GRAIN, PartitionSettings
    from orchestration.schedules import REPLAY_JOB
    from windowing.storage.lake import absolute

    env = storage_from_env()
    storage = StorageResource(
        landing_zone=absolute(args.landing_zone or resolved(env.landing_zone)),
        pipelines_dir=str(Path(args.pipelines_dir or resolved(env.pipelines_dir)).resolve()),
        output_root=absolute(args.output_root or resolved(env.output_root)),
        arrival_time_column=resolved(env.arrival_time_column),
        landing_partition_column=resolved(env.landing_partition_column),
    )
    pipelines_dir = Path(storage.pipelines_dir)
    live_root = absolute(args.live_root or f"{storage.landing_zone.rstrip('/').rsplit('/', 1)[0]}/live")
    if not any(pipelines_dir.glob("*.y*ml")):
        copy_examples(pipelines_dir, live_root, catalog=is_local(storage.output_root))
    pipelines = load_pipelines(pipelines_dir)
    if not pipelines:
        print(f"error: no pipeline YAML in {pipelines_dir} (and none in {EXAMPLES})", file=sys.stderr)
        return 2

    from orchestration.sensors import landing_location

    if start is None:
        start = default_start(*landing_location(storage), args.days)
    if not args.no_generate:
        from windowing.sample import generate_history

        folders = generate_history(
            storage.landing_zone, start, args.days, args.events_per_day, args.keys, seed=args.seed
        )
        print(f"history    {len(folders)} day(s) x {args.events_per_day:,} events -> {storage.landing_zone}")

    configured = PartitionSettings.from_env()
    settings = PartitionSettings(grain=configured.grain, start=start.strftime("%Y-%m-%d"), end=configured.end)
    # Without REWINDOW_HISTORY_END the partitions end after the newest landed day, as `dagster dev` computes it.
    settings = settings.with_landed_end(*landing_location(storage))
    partitions_def = settings.partitions_def()
    first = partitions_def.get_partition_key_for_timestamp(start.timestamp())
    last = partitions_def.get_partition_key_for_timestamp((start + timedelta(days=args.days)).timestamp() - 1)
    newest = partitions_def.get_last_partition_key()
    if newest is None or newest < first:
        print(
            f"error: no partition from {first}: the partitions end before it (REWINDOW_HISTORY_END "
            f"{settings.end or 'unset: up to the last complete partition'})",
            file=sys.stderr,
        )
        return 2
    last = min(last, newest)  # --no-generate over fewer landed days than --days

    # Hive support over the embedded metastore in <output root>/_metastore where a pipeline publishes.
    spark_resource = with_catalog(spark_from_env(), [p for p, _ in pipelines], storage)
    made_up = write_live_outputs(
        spark_resource, storage, [p for p, _ in pipelines], live_root, partitions_def, first, last
    )

    home = Path(args.dagster_home or os.environ.get("DAGSTER_HOME") or "data/dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    write_instance_settings(home)
    instance = dg.DagsterInstance.from_config(str(home))
    defs = build_definitions(storage=storage, spark=spark_resource, partitions=settings)
    job = defs.resolve_job_def(REPLAY_JOB)
    run_config = {
        "loggers": {"console": {"config": {"log_level": "INFO"}}},
        "ops": {
            f"{asset_prefix(p.name)}_replay": {"config": {"flush_at_end": args.flush_at_end}} for p, _ in pipelines
        },
    }
    print(f"replaying  partitions {first}..{last} of {len(pipelines)} pipeline(s) in one Dagster run ...")
    began = time.monotonic()
    result = job.execute_in_process(
        instance=instance,
        run_config=run_config,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
        raise_on_error=False,
    )
    elapsed = time.monotonic() - began
    if not result.success:
        for event in result.all_events:
            if event.is_failure and event.step_failure_data and event.step_failure_data.error:
                print(f"error: {event.step_failure_data.error.message.strip()}", file=sys.stderr)
        print(f"run {result.run_id} failed after {elapsed:.1f}s", file=sys.stderr)
        return 1

    print(f"done       run {result.run_id} in {elapsed:.1f}s\n")
    keys = partitions_def.get_partition_keys_in_range(dg.PartitionKeyRange(first, last))
    from windowing.history import summary_table
    from windowing.runner.session import spark_session
    from windowing.storage.commits import current_commits_under
    from windowing.storage.lake import join
    from windowing.storage.store import partition_folder

    spark = spark_session()  # the run's session, still running in this process
    for pipeline, _ in pipelines:
        root = join(storage.output_root, pipeline.name)
        commits = current_commits_under(spark, root)
        print(
            f"pipeline {pipeline.name!r}: outputs in {root}/<partition>/runs/<run>/"
            "{aggregates,late_events,rejected,state} (the current run: see _commits/)"
        )
        print(
            summary_table(
                pipeline.name, keys, {k: commits[folder] for k in keys if (folder := partition_folder(k)) in commits}
            )
        )
        chain = [
            ev
            for ev in result.get_asset_check_evaluations()
            if ev.check_name == CHECK_NAME and ev.asset_key.path[0] == asset_prefix(pipeline.name)
        ]
        if chain:  # one evaluation per partition of the run, all of the same chain
            # (a run's summary evaluation has no partition: it fails with the partitions it names)
            failed = [ev.partition for ev in chain if not ev.passed and ev.partition is not None]
            print(
                f"  state chain check: {'FAILED in ' + ', '.join(failed) if failed else 'passed'} "
                f"({len(chain)} partition(s))"
            )
        live = [
            ev
            for ev in result.get_asset_check_evaluations()
            if ev.check_name == LIVE_CHECK and ev.asset_key.path[0] == asset_prefix(pipeline.name)
        ]
        if live:
            print(live_summary(live, made_up.get(pipeline.name)))
        if pipeline.catalog is not None:
            print(catalog_summary(pipeline, spark_resource.metastore_dir))
    if getattr(args, "lateness", False):
        code = _lateness(defs, instance, pipelines, storage, first, last)
        if code:
            return code
    hints = {"DAGSTER_HOME": str(home)}
    # What `dagster dev` will take as the start: $REWINDOW_HISTORY_START, else the oldest landed day.
    ui_start = PartitionSettings.from_env().with_landed_end(*landing_location(storage)).start
    for var, ours, default in (
        ("REWINDOW_LANDING_ZONE", storage.landing_zone, DEFAULT_LANDING_ZONE),
        ("REWINDOW_PIPELINES_DIR", storage.pipelines_dir, DEFAULT_PIPELINES_DIR),
        ("REWINDOW_OUTPUT_ROOT", storage.output_root, DEFAULT_OUTPUT_ROOT),
        ("REWINDOW_PARTITION_GRAIN", settings.grain, DEFAULT_GRAIN),
        ("REWINDOW_HISTORY_START", settings.start, ui_start),
        ("REWINDOW_HISTORY_END", configured.end, None),
    ):
        if ours is not None and ours != default and ours != str(Path(default or "").resolve()):
            hints[var] = ours
    print(f"\nBrowse it in the UI (http://127.0.0.1:3000), from {REPO}:")
    # Dagster 1.13's `dagster dev` says `dg dev` (another package) supersedes it: filtered here.
    hints["PYTHONWARNINGS"] = f"'{DEV_NOTICE}'"
    print("  " + " ".join(f"{k}={v}" for k, v in hints.items()) + f" {venv_command('dagster')} dev -w workspace.yaml")
    return 0


def venv_command(name: str) -> str:
    """How to run the command ``name`` of this Python's environment from the repository:
    ``.venv/bin/dagster`` (runs without the environment activated), or the absolute path
    for an environment elsewhere; the bare name when it is not installed beside Python."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        return name
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def write_instance_settings(home: Path) -> None:
    """The demo's instance settings, ``home/dagster.yaml`` (Dagster warns at start-up
    without the file): written when missing or when an earlier demo wrote it; a file the
    user wrote is kept."""
    settings_file = home / "dagster.yaml"
    if not settings_file.exists() or settings_file.read_text() in EARLIER_DAGSTER_YAMLS:
        settings_file.write_text(DAGSTER_YAML)


def is_local(location: str) -> bool:
    return not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", location) or location.startswith("file:")


def catalog_summary(pipeline: Pipeline, metastore_dir: str) -> str:
    """Where the pipeline's tables are, and one query to run against them."""
    import shlex

    from windowing.metastore import spark_sql_command

    c = pipeline.catalog
    table = f"{c.database}.{c.table_name('aggregates')}"
    query = f"SELECT partition_key, count(*) AS windows FROM {table} GROUP BY partition_key ORDER BY 1"
    command = shlex.join(spark_sql_command(metastore_dir, query))
    return (
        f"  tables {table}, {c.database}.{c.table_name('late_events')}, {c.database}.{c.table_name('rejected')} "
        f"(metastore {metastore_dir}); query them with SQL:\n    {command}"
    )


#: The catalog block the demo adds to the examples it copies (a local output root):
#: each pipeline's outputs become tables of the database ``demo`` in the embedded metastore.
DEMO_CATALOG = "\noutput:\n  catalog: {{database: demo, table: {table}}}\n"


def copy_examples(pipelines_dir: Path, live_root: str, catalog: bool = False) -> None:
    """Copy the example pipelines into ``pipelines_dir``. Their live outputs
    (``reconcile.live.path`` under :data:`EXAMPLE_LIVE_ROOT`) are moved under
    ``live_root`` when it is another folder. ``catalog``: add :data:`DEMO_CATALOG`,
    publishing each to tables named after its asset prefix."""
    from assets.pipelines import asset_prefix
    from windowing.config import load_pipeline
    from windowing.storage.lake import join, qualify

    pipelines_dir.mkdir(parents=True, exist_ok=True)
    moved = qualify(live_root) != qualify(EXAMPLE_LIVE_ROOT)
    for f in sorted(EXAMPLES.glob("*.yaml")):
        text = f.read_text()
        if moved:  # a JSON string is a YAML string, whatever the path holds
            text = re.sub(
                rf"path: {re.escape(EXAMPLE_LIVE_ROOT)}/([^,}}\s]+)",
                lambda m: f"path: {json.dumps(join(live_root, m.group(1)))}",
                text,
            )
        if catalog and "\noutput:" not in text:
            text = text.rstrip("\n") + "\n" + DEMO_CATALOG.format(table=asset_prefix(load_pipeline(f).name))
        (pipelines_dir / f.name).write_text(text)
        print(f"pipeline   {f.relative_to(REPO)} -> {pipelines_dir / f.name}")


def write_live_outputs(
    spark_resource: SparkResource,
    storage: StorageResource,
    pipelines: Sequence[Pipeline],
    live_root: str,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    first: str,
    last: str,
) -> dict[str, list[KnownDifference]]:
    """For each pipeline whose ``reconcile.live.path`` (Parquet) lies in ``live_root``,
    write a stand-in for its live output over the partitions ``first..last``: its replay
    of those days of the landing zone, from no state, in one go (what the Dagster run's
    partition chain computes, row for row), with the known differences of
    :func:`windowing.sample.write_sample_live`. Returns them by pipeline name.

    The Spark session is the one the Dagster run will use (the run reuses a session that
    runs in the process), built from ``spark_resource``'s settings."""
    import dagster as dg

    from windowing.landing import read_partition_events
    from windowing.sample import write_sample_live
    from windowing.storage.lake import inside

    ours = [
        p
        for p in pipelines
        if p.reconcile is not None
        and p.reconcile.live is not None
        and p.reconcile.live.path
        and p.reconcile.live.format == "parquet"
        and inside(p.reconcile.live.path, live_root)
    ]
    if not ours:
        return {}
    with dg.build_resources({"pyspark": spark_resource}) as resources:
        spark = resources.pyspark.spark_session
    start = partitions_def.time_window_for_partition_key(first).start
    end = partitions_def.time_window_for_partition_key(last).end
    days = [start + timedelta(days=n) for n in range((end - start + timedelta(days=1, microseconds=-1)).days)]
    made: dict[str, list[KnownDifference]] = {}
    for pipeline in ours:
        began = time.monotonic()
        events: DataFrame | None = None
        for i, day in enumerate(days):
            day_events, _ = read_partition_events(
                spark,
                storage.landing_path(),
                day,
                day + timedelta(days=1),
                pipeline.source.arrival_time,
                source=pipeline.source,
                pipeline=pipeline,
                partition_column=storage.partition_column(),
                unplaced=i == 0,
            )
            events = day_events if events is None else events.unionByName(day_events)
        made[pipeline.name] = write_sample_live(spark, pipeline, events, pipeline.reconcile.live.path)
        print(
            f"live       {pipeline.name}: its replay of the history with {len(made[pipeline.name])} known "
            f"differences -> {pipeline.reconcile.live.path} ({time.monotonic() - began:.1f}s)"
        )
    return made


def live_summary(evaluations: Sequence[dg.AssetCheckEvaluation], made_up: Sequence[KnownDifference] | None) -> str:
    """One line on the ``matches_live`` evaluations of a pipeline's partitions."""
    import dagster as dg

    def total(name: str) -> int:  # counts matches_live records as MetadataValue.int
        values = [ev.metadata[name] for ev in evaluations if name in ev.metadata]
        return sum(int(v.value or 0) for v in values if isinstance(v, dg.IntMetadataValue))

    compared, match, explained = total("compared"), total("match"), total("explained")
    failed = [ev.partition for ev in evaluations if not ev.passed and ev.partition is not None]
    line = (
        f"  live check (matches_live): {'FAILED in ' + ', '.join(failed) if failed else 'passed'} "
        f"({len(evaluations)} partition(s)): {match:,} of {compared:,} window emissions match the live output, "
        f"{compared - match:,} mismatch(es), {explained:,} explained"
    )
    if made_up is not None:
        line += f"; the demo's live output has {len(made_up)} known differences (docs/reconcile.md)"
    return line


def _lateness(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    pipelines: Sequence[tuple[Pipeline, Path]],
    storage: StorageResource,
    first: str,
    last: str,
) -> int:
    """Materialize every pipeline's lateness asset over ``first..last`` in one run, then
    print each pipeline's recommendation and where its reports are."""
    from assets.lateness import lateness_dir, range_dir
    from orchestration.schedules import LATENESS_JOB
    from windowing.lateness.outputs import read_lateness
    from windowing.lateness.text import format_figures
    from windowing.runner.session import spark_session

    print(f"\nanalysing  lateness of partitions {first}..{last} in one Dagster run ...")
    began = time.monotonic()
    result = defs.resolve_job_def(LATENESS_JOB).execute_in_process(
        instance=instance,
        raise_on_error=False,
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
    )
    if not result.success:
        print(f"lateness run {result.run_id} failed after {time.monotonic() - began:.1f}s", file=sys.stderr)
        return 1
    print(f"done       run {result.run_id} in {time.monotonic() - began:.1f}s\n")
    spark = spark_session()
    for pipeline, _ in pipelines:
        out = (
            range_dir(storage.output_root, pipeline.name, first, last)
            if first != last
            else lateness_dir(storage.output_root, pipeline.name, first)
        )
        report = read_lateness(spark, out)
        print(format_figures(report.figures))
        print(f"  report: {report.report}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
