"""The historical events: the landing zone, partitioned by arrival time.

Materializing a partition registers what the landing zone holds for it (rows, files,
arrival-time range, a preview). The pipelines read the landing zone themselves, so
they do not need this asset materialized first; depending on it shows the lineage,
and re-registering a partition whose files changed marks the pipelines' partition
as unsynced in the UI.
"""

from typing import Any

import dagster as dg

from assets.preview import column_schema, table_preview
from assets.resources import SparkResource, StorageResource
from windowing.storage import landing
from windowing.storage.lake import qualify

EVENTS_KEY = dg.AssetKey(["historical_events"])


def build_events_asset(
    partitions_def: dg.TimeWindowPartitionsDefinition, owners: tuple[str, ...] = ("team:rewindow",)
) -> dg.AssetsDefinition:
    @dg.asset(
        key=EVENTS_KEY,
        group_name="landing_zone",
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Historical events from the Parquet landing zone, partitioned by arrival time.",
        kinds={"spark", "parquet"},
        owners=list(owners),
    )
    def historical_events(
        context: dg.AssetExecutionContext, pyspark: SparkResource, storage: StorageResource
    ) -> dg.MaterializeResult[Any]:
        from pyspark.sql import functions as F

        spark = pyspark.spark_session
        column = storage.arrival_time_column
        for key in context.partition_keys:
            window = partitions_def.time_window_for_partition_key(key)
            events, files = landing.read_partition_events(
                spark,
                storage.landing_path(),
                window.start,
                window.end,
                column,
                partition_column=storage.partition_column(),
            )
            files = files or []
            has_arrival = column in events.columns
            row = events.select(
                F.count(F.lit(1)),
                F.min(column) if has_arrival else F.lit(None),
                F.max(column) if has_arrival else F.lit(None),
            ).first()
            assert row is not None  # an aggregate without grouping: one row, always
            rows, first, last = row
            context.log.info(f"historical_events {key}: {rows} rows in {len(files)} files")
            context.add_asset_metadata(
                {
                    "rows": dg.MetadataValue.int(rows),
                    "files": dg.MetadataValue.int(len(files)),
                    "bytes": dg.MetadataValue.int(sum(f.size for f in files)),
                    "first_arrival": dg.MetadataValue.text(str(first)),
                    "last_arrival": dg.MetadataValue.text(str(last)),
                    "path": dg.MetadataValue.path(storage.landing_path()),
                    "preview": table_preview(events.orderBy(column) if has_arrival else events),
                    # Dagster's standard keys (the catalog's row count, Columns and location).
                    "dagster/row_count": dg.MetadataValue.int(rows),
                    "dagster/column_schema": dg.MetadataValue.table_schema(column_schema(events)),
                    "dagster/uri": dg.MetadataValue.url(qualify(storage.landing_path())),
                },
                partition_key=key,
            )
        return dg.MaterializeResult()

    return historical_events
