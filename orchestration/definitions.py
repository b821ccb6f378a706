"""The Dagster definitions of rewindow (loaded by ``workspace.yaml``).

Everything is built in :func:`build_definitions`, which Dagster calls when it loads
the code location (``@dg.definitions``): the pipelines folder and the partition
grain decide the shape of the asset graph, so they are read then (from the arguments
or the environment), never when this module is imported. Tests and the demo call
``build_definitions(...)`` with explicit settings.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

from assets.events import EVENTS_KEY, build_events_asset
from assets.lateness import build_lateness_asset
from assets.pipelines import DEFAULT_OWNERS, asset_prefix, build_pipeline_assets
from assets.resources import (
    SparkResource,
    StorageResource,
    resolved,
    spark_from_env,
    storage_from_env,
    with_catalog,
)
from orchestration.freshness import build_freshness_check
from orchestration.partitions import PartitionSettings
from orchestration.schedules import lateness_job, newest_partition_schedule, replay_job
from orchestration.sensors import build_landing_zone_sensor, landing_location, rerun_out_of_date_sensor

if TYPE_CHECKING:
    from windowing.config import Pipeline


def load_pipelines(folder: str | Path) -> list[tuple[Pipeline, Path]]:
    """Every ``*.yaml`` / ``*.yml`` pipeline in ``folder``, by file name.

    A file that does not validate stops the load with its message (which names the file
    and field); so do two pipelines whose names map to the same asset prefix.
    """
    from windowing import load_pipeline

    folder = Path(folder)
    if not folder.is_dir():
        warnings.warn(
            f"pipelines folder {folder.resolve()} does not exist: no pipeline assets. Run "
            "`python -m orchestration.demo` (it copies examples/pipelines there) or set REWINDOW_PIPELINES_DIR",
            stacklevel=2,
        )
        return []
    files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    out: list[tuple[Pipeline, Path]] = []
    seen: dict[str, Path] = {}
    for f in files:
        pipeline = load_pipeline(f)
        prefix = asset_prefix(pipeline.name)
        if prefix in seen:
            raise ValueError(
                f"{f}: pipeline name {pipeline.name!r} clashes with {seen[prefix]} (both become asset group {prefix!r})"
            )
        seen[prefix] = f
        out.append((pipeline, f))
    return out


def asset_owners() -> tuple[str, ...]:
    """The catalog's owners of every asset: ``REWINDOW_ASSET_OWNERS`` (comma-separated e-mail
    addresses or ``team:<name>``), else ``team:rewindow``. Read when the definitions load."""
    import os

    given = tuple(o.strip() for o in os.environ.get("REWINDOW_ASSET_OWNERS", "").split(",") if o.strip())
    return given or DEFAULT_OWNERS


def build_definitions(
    *,
    storage: StorageResource | None = None,
    spark: SparkResource | None = None,
    partitions: PartitionSettings | None = None,
) -> dg.Definitions:
    """Assemble assets, job, schedule, sensor, resources and the in-process executor.

    Unset arguments come from the environment (see ``assets.resources`` and
    ``orchestration.partitions``). Partitions without an end end where the landing zone
    ends (``PartitionSettings.with_landed_end``, which lists it now). The in-process
    executor runs every step of a run in one process, so Spark starts once per run.
    """
    storage = storage or storage_from_env()
    spark = spark or spark_from_env()
    partitions = (partitions or PartitionSettings.from_env()).with_landed_end(*landing_location(storage))
    partitions_def = partitions.partitions_def()
    pipelines = load_pipelines(resolved(storage.pipelines_dir))
    spark = with_catalog(spark, [p for p, _ in pipelines], storage)  # Hive support where a pipeline publishes
    with warnings.catch_warnings():
        # Dagster marks `backfill_policy` beta; rewindow's assets rely on single-run backfills
        # (a range in one Spark job) knowingly, so its notice is not shown to every user.
        warnings.filterwarnings("ignore", message="Parameter `backfill_policy`", category=dg.BetaWarning)
        # So are code references (the catalog's links to the pipeline YAML and the replay's code)
        # and the automation sensor evaluated in the code server (rewindow's own condition).
        warnings.filterwarnings(
            "ignore", message="Class `(CodeReferencesMetadataValue|LocalFileCodeReference)`", category=dg.BetaWarning
        )
        warnings.filterwarnings("ignore", message="Parameter `use_user_code_server`", category=dg.BetaWarning)
        # historical_events is an observable asset (its data version per partition: assets/events.py).
        warnings.filterwarnings("ignore", message="Function `multi_observable_source_asset`", category=dg.BetaWarning)
        owners = asset_owners()
        assets = [build_events_asset(partitions_def, owners)]
        assets += [build_pipeline_assets(p, f, partitions_def, owners) for p, f in pipelines]
        # What the replay job materializes (historical_events is observed, never materialized).
        replayed = [k for a in assets for k in a.keys if k != EVENTS_KEY]
        assets += [build_lateness_asset(p, f, partitions_def) for p, f in pipelines]
        rerun_sensor = rerun_out_of_date_sensor([k for k in replayed if k.path[-1] == "window_state"])
    job = replay_job()
    return dg.Definitions(
        assets=assets,
        asset_checks=[build_freshness_check(partitions.grain)],
        jobs=[job, lateness_job()],
        schedules=[newest_partition_schedule(job, partitions.grain)],
        sensors=[
            build_landing_zone_sensor(job, partitions, storage, replayed, [p for p, _ in pipelines]),
            rerun_sensor,
        ],
        resources={"pyspark": spark, "storage": storage},
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
