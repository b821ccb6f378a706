"""The historical events: the landing zone, partitioned by arrival time, **observed**.

``historical_events`` is an observable asset with the pipelines' time-window partitions
(Dagster records observations of it, never materializations: rewindow does not write the
landing zone). Each observation is one partition's, and its data version
(``dagster/data_version``) is the digest of the partition's day folder as a listing gives
it (:func:`windowing.storage.input_record.digest_of`: each file's path, size and
modification time), the same digest a partition's commit records (issue 46). Hourly
partitions share their day's folder, so every hour of a day has that day's digest.

The pipelines' partitions record the data version they read (Dagster's provenance), so
an observation with another digest, after a file was added to, removed from or rewritten
in a committed day, makes Dagster show that day's outputs *Unsynced* at once, before any
rerun. Two things observe it:

* the replay job, first in every run (:func:`build_events_asset`), with Spark: per
  partition the data version and what materializing it used to show (rows, files, bytes,
  arrival range, a preview, the standard row count, columns and URI), so the replay that
  follows records the digest it read;
* ``landing_zone_sensor`` (``orchestration/sensors.py``), listings only, when a day's
  digest differs from the one it observed last (:func:`observation`).
"""

# No `from __future__ import annotations`: Dagster reads the `context` annotation as a class.

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG
from dagster._core.definitions.source_asset import SYSTEM_METADATA_KEY_SOURCE_ASSET_OBSERVATION as OWN_OBSERVATIONS

from assets.preview import column_schema, table_preview
from assets.resources import SparkResource, StorageResource
from windowing import landing
from windowing.storage import input_record
from windowing.storage.lake import qualify

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.storage.lake import Entry

EVENTS_KEY = dg.AssetKey(["historical_events"])


def day_folders(
    partitions_def: dg.TimeWindowPartitionsDefinition, keys: Sequence[str], partition_column: str
) -> dict[str, str]:
    """``{partition key: its day folder under the landing zone}`` (``date=YYYY-MM-DD``)."""
    out = {}
    for key in keys:
        window = partitions_def.time_window_for_partition_key(key)
        out[key] = landing.day_folder(partition_column, landing.day_of(window.start, window.end))
    return out


def observation(
    key: str, files: Sequence[input_record.InputFile], metadata: Mapping[str, Any] | None = None
) -> dg.AssetObservation:
    """The observation of partition ``key`` whose day folder lists ``files``: its data
    version is their digest; metadata ``files``, ``bytes``, ``digest`` and ``metadata``."""
    digest = input_record.digest_of(files)
    return dg.AssetObservation(
        asset_key=EVENTS_KEY,
        partition=key,
        tags={DATA_VERSION_TAG: digest},
        metadata={
            "files": dg.MetadataValue.int(len(files)),
            "bytes": dg.MetadataValue.int(sum(f.size for f in files)),
            "digest": dg.MetadataValue.text(digest),
            **(metadata or {}),
        },
    )


def build_events_asset(
    partitions_def: dg.TimeWindowPartitionsDefinition, owners: tuple[str, ...] = ("team:rewindow",)
) -> dg.AssetsDefinition:
    @dg.multi_observable_source_asset(  # type: ignore[untyped-decorator]  # (Dagster leaves it untyped)
        name="historical_events", specs=[_events_spec(partitions_def, owners)], partitions_def=partitions_def
    )
    def historical_events(
        context: dg.AssetExecutionContext, pyspark: SparkResource, storage: StorageResource
    ) -> Iterator[dg.Output[None]]:
        spark = pyspark.spark_session
        column = storage.arrival_time_column
        zone = storage.landing_path()
        keys = (
            context.partition_keys
            if context.has_partition_key or context.has_partition_key_range
            else partitions_def.get_partition_keys()
        )
        partition_column = storage.partition_column()
        for key in keys:
            observed = _observe_partition(spark, partitions_def, zone, column, partition_column, key, context.log.info)
            context.log_event(observed)
        # The step's output, marked as the observations' own (Dagster then adds none of its own).
        yield dg.Output(None, output_name=EVENTS_KEY.to_python_identifier(), metadata={OWN_OBSERVATIONS: True})

    # One run observes a range (as the replay: the job's runs cover ranges).
    observed: dg.AssetsDefinition = historical_events
    return observed.with_attributes(backfill_policy=dg.BackfillPolicy.single_run())


def _events_spec(partitions_def: dg.TimeWindowPartitionsDefinition, owners: tuple[str, ...]) -> dg.AssetSpec:
    return dg.AssetSpec(
        EVENTS_KEY,
        group_name="landing_zone",
        description=(
            "Historical events from the Parquet landing zone, partitioned by arrival time. Observed: "
            "each partition's data version is the digest of its day folder's files, so a day whose "
            "files change shows the pipelines' partitions of that day Unsynced."
        ),
        kinds={"spark", "parquet"},
        owners=list(owners),
        partitions_def=partitions_def,
    )


def _observe_partition(
    spark: "SparkSession",
    partitions_def: dg.TimeWindowPartitionsDefinition,
    zone: str,
    column: str,
    partition_column: str | None,
    key: str,
    say: Callable[[str], None],
) -> dg.AssetObservation:
    """The observation of partition ``key``: its files' digest (:func:`observation`), its
    rows, arrival range and preview (read from its events). ``say``: one line to the log."""
    window = partitions_def.time_window_for_partition_key(key)
    events, entries = landing.read_partition_events(
        spark, zone, window.start, window.end, column, partition_column=partition_column
    )
    has_arrival = column in events.columns
    rows, first, last = _arrival_range(events, column if has_arrival else None)
    files = _landed_files(partitions_def, zone, key, partition_column, entries or [])
    say(f"historical_events {key}: {rows} rows in {len(files)} files")
    return observation(
        key,
        files,
        {
            "rows": dg.MetadataValue.int(rows),
            "first_arrival": dg.MetadataValue.text(str(first)),
            "last_arrival": dg.MetadataValue.text(str(last)),
            "path": dg.MetadataValue.path(zone),
            "preview": table_preview(events.orderBy(column) if has_arrival else events),
            # Dagster's standard keys (the catalog's row count, Columns and location).
            "dagster/row_count": dg.MetadataValue.int(rows),
            "dagster/column_schema": dg.MetadataValue.table_schema(column_schema(events)),
            "dagster/uri": dg.MetadataValue.url(qualify(zone)),
        },
    )


def _arrival_range(events: "DataFrame", column: str | None) -> tuple[int, Any, Any]:
    """The rows of ``events``, and the least and greatest value of its arrival ``column``
    (None, None without one), in one aggregate."""
    from pyspark.sql import functions as F

    row = events.select(
        F.count(F.lit(1)),
        F.min(column) if column is not None else F.lit(None),
        F.max(column) if column is not None else F.lit(None),
    ).first()
    assert row is not None  # an aggregate without grouping: one row, always
    rows, first, last = row
    return rows, first, last


def _landed_files(
    partitions_def: dg.TimeWindowPartitionsDefinition,
    zone: str,
    key: str,
    partition_column: str | None,
    entries: "list[Entry]",
) -> list[input_record.InputFile]:
    """The files partition ``key`` read: those of its day folder (a flat landing zone, with
    no partition column: those of the zone)."""
    if partition_column is not None:
        folder = day_folders(partitions_def, [key], partition_column)[key]
        return list(input_record.InputRecord.of_listing(zone, folder, entries).files)
    # a flat landing zone: no day folder, the files read
    return list(input_record.InputRecord.of_listing(zone, "", entries).files)
