"""The catalog side of a pipeline's replay assets (``windowing.catalog``).

* Each output asset's materialization of a partition carries Dagster's standard table
  metadata: ``dagster/uri`` (the committed run's dataset), ``dagster/row_count``,
  ``dagster/column_schema`` and, for the published outputs, ``dagster/table_name``
  (``database.table``), so the asset catalog shows the table, its columns and its
  volume per partition.
* ``published_matches_commit`` (on ``windowed_aggregates``, for a pipeline with an
  ``output.catalog`` block): each of the three tables' partition points at the run the
  partition's commit record names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import dagster as dg

from windowing.catalog import Publisher, published_table
from windowing.config.outputs import PUBLISHED
from windowing.storage.lake import join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from windowing.config import Pipeline

PUBLISHED_CHECK = "published_matches_commit"


def publisher(spark: SparkSession, pipeline: Pipeline, output_root: str, version: str = "v1") -> Publisher | None:
    """The pipeline's publisher of ``version`` of its history, or None without an
    ``output.catalog`` block."""
    if pipeline.catalog is None:
        return None
    return Publisher(spark, pipeline.catalog, pipeline, join(output_root, pipeline.name), version=version)


def table_metadata(spark: SparkSession, run_path: str, dataset: str, pipeline: Pipeline) -> dict[str, Any]:
    """Dagster's table metadata of one dataset of a committed run."""
    uri = join(run_path, dataset)
    df = spark.read.parquet(uri)
    meta: dict[str, Any] = {
        "dagster/uri": dg.MetadataValue.text(uri),
        "dagster/row_count": dg.MetadataValue.int(df.count()),
        "dagster/column_schema": dg.MetadataValue.table_schema(
            dg.TableSchema(columns=[dg.TableColumn(f.name, f.dataType.simpleString()) for f in df.schema.fields])
        ),
    }
    if pipeline.catalog is not None and dataset in PUBLISHED:
        meta["dagster/table_name"] = dg.MetadataValue.text(
            f"{pipeline.catalog.database.lower()}.{pipeline.catalog.table_name(dataset)}"
        )
    return meta


def table_name_metadata(pipeline: Pipeline, dataset: str) -> dict[str, Any]:
    """``dagster/table_name`` of a published dataset (empty without ``output.catalog``)."""
    if pipeline.catalog is None or dataset not in PUBLISHED:
        return {}
    return {
        "dagster/table_name": dg.MetadataValue.text(
            f"{pipeline.catalog.database.lower()}.{pipeline.catalog.table_name(dataset)}"
        )
    }


def published_check_spec(pipeline: Pipeline, asset_key: dg.AssetKey) -> dg.AssetCheckSpec | None:
    if pipeline.catalog is None:
        return None
    c = pipeline.catalog
    return dg.AssetCheckSpec(
        PUBLISHED_CHECK,
        asset=asset_key,
        description=(
            f"Each partition of `{c.database}.{c.table}_aggregates`, `_late_events` and `_rejected` points at the "
            "run the partition's commit record names (publishing follows every commit that passed its blocking "
            "checks). Fails when a table points elsewhere or the partition is not published."
        ),
    )


def published_check_result(
    pub: Publisher, asset_key: dg.AssetKey, partition: str, committed_run_id: str | None
) -> dg.AssetCheckResult:
    """Whether every table's ``partition`` points at ``committed_run_id``."""
    pointed = pub.pointed(partition)
    runs = {output: (p.run_id if p is not None else None) for output, p in pointed.items()}
    wrong = {o: r for o, r in runs.items() if r != committed_run_id}
    if committed_run_id is None:
        description = f"nothing committed for partition {partition}"
    elif wrong:
        description = (
            f"partition {partition}: {', '.join(pub.spec.table_name(o) for o in wrong)} "
            f"{'is' if len(wrong) == 1 else 'are'} not at the committed run {committed_run_id} "
            f"({published_table(pointed.values())})"
        )
    else:
        description = f"partition {partition}: every table points at the committed run {committed_run_id}"
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=PUBLISHED_CHECK,
        passed=committed_run_id is not None and not wrong,
        description=description,
        metadata={
            "committed_run": dg.MetadataValue.text(str(committed_run_id)),
            "published_runs": dg.MetadataValue.json(runs),
            "tables": dg.MetadataValue.json(
                [f"{pub.spec.database.lower()}.{pub.spec.table_name(o)}" for o in PUBLISHED]
            ),
        },
    )
