"""Resources: the Spark session and the storage locations.

Settings come from run configuration or from environment variables through
``dg.EnvVar``, resolved by Dagster when a run starts. Nothing here reads the
environment at import time; :func:`storage_from_env` and :func:`spark_from_env` are
called by ``build_definitions()`` and only check *whether* a variable is set, so an
unset variable falls back to the default instead of failing the run.

| variable | resource field | default |
|---|---|---|
| ``REWINDOW_SPARK_MASTER`` | ``SparkResource.master`` | ``local[*]`` |
| ``REWINDOW_SPARK_CONF`` | ``SparkResource.extra_conf`` | none |
| ``REWINDOW_METASTORE_DIR`` | ``SparkResource.metastore_dir`` | ``<output root>/_metastore`` (publishing) |
| ``REWINDOW_LANDING_ZONE`` | ``StorageResource.landing_zone`` | ``data/landing`` |
| ``REWINDOW_PIPELINES_DIR`` | ``StorageResource.pipelines_dir`` | ``data/pipelines`` |
| ``REWINDOW_OUTPUT_ROOT`` | ``StorageResource.output_root`` | ``data/output`` |
| ``REWINDOW_ARRIVAL_COLUMN`` | ``StorageResource.arrival_time_column`` | ``arrival_time`` |
| ``REWINDOW_LANDING_PARTITION_COLUMN`` | ``StorageResource.landing_partition_column`` | ``date`` |

The landing zone and the output root are local folders or any URI Spark reaches
(``s3a://bucket/events``, ``abfss://...``, ``gs://...``, ``hdfs://...``); the
pipelines folder is local (it is read when the definitions load). Relative paths are
relative to the working directory of the code location (the repository root with
``workspace.yaml``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster_pyspark import PySparkResource
from pydantic import Field

from windowing.runner.session import parse_conf
from windowing.storage.lake import absolute

if TYPE_CHECKING:
    from windowing.config import Pipeline

DEFAULT_MASTER = "local[*]"
DEFAULT_LANDING_ZONE = "data/landing"
DEFAULT_PIPELINES_DIR = "data/pipelines"
DEFAULT_OUTPUT_ROOT = "data/output"
DEFAULT_ARRIVAL_COLUMN = "arrival_time"
DEFAULT_PARTITION_COLUMN = "date"


class SparkResource(PySparkResource):
    """dagster-pyspark's ``PySparkResource``, with the master and extra settings as typed
    fields so that they can come from ``dg.EnvVar`` (values of the inherited
    ``spark_config`` dict are not resolved from the environment by Dagster).

    The session is built with ``windowing.runner.session.spark_session()``, which always sets
    ``spark.sql.session.timeZone=UTC`` and ``PYSPARK_PYTHON``; with a ``local`` master
    ``spark.pyspark.python`` is also pinned to this interpreter. Settings are merged as
    ``spark_config``, then ``extra_conf``, then ``spark.master`` = ``master``.

    When a session already runs in the process (the test suite's shared session, a
    notebook), it is reused as it is rather than through ``getOrCreate()``, which would
    silently rewrite its runtime settings; only the UTC time zone is re-asserted.
    """

    # Any: a run config may give a setting as a number or a boolean (each is str()ed: settings()).
    spark_config: dict[str, Any] = Field(default_factory=dict, description="Spark settings.")
    master: str = Field(default=DEFAULT_MASTER, description="Spark master URL.")
    extra_conf: str = Field(
        default="", description="More Spark settings as 'key=value,key=value' (e.g. from an env var)."
    )
    metastore_dir: str = Field(
        default="",
        description=(
            "Set when a pipeline publishes to a catalog (output.catalog): the session starts with Hive support, "
            "over an embedded Derby metastore in this local folder unless the settings name a metastore "
            "(spark.hadoop.hive.metastore.uris, Glue's client factory: docs/deployment.md)."
        ),
    )

    def settings(self) -> dict[str, str]:
        conf = {k: str(v) for k, v in self.spark_config.items()}
        conf.update(parse_conf(self.extra_conf))
        if self.metastore_dir:
            from windowing.metastore import session_conf

            conf.update(session_conf(self.metastore_dir, conf))
        if self.master.startswith("local"):
            conf.setdefault("spark.pyspark.python", sys.executable)
        return conf

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from pyspark.sql import SparkSession

        from windowing.runner.session import REQUIRED_CONF, spark_session

        active = SparkSession.getActiveSession()
        if active is not None:
            # A session already runs in this process (tests, notebooks, the demo's second run):
            # getOrCreate() would silently rewrite its runtime settings, so take it as it is.
            for key, value in REQUIRED_CONF.items():
                active.conf.set(key, value)
            if active.sparkContext.master != self.master and context.log:
                context.log.warning(
                    f"reusing the running Spark session (master {active.sparkContext.master}); "
                    f"master {self.master} applies to new processes only"
                )
            self._spark_session = active
            return
        conf = self.settings()
        if "spark.pyspark.python" in conf:
            # PySpark takes the workers' interpreter from the environment, not the setting.
            os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
        self._spark_session = spark_session(master=self.master, conf=conf)


# Unparametrized, as Dagster documents it (and as dagster-pyspark's PySparkResource is): a
# ConfigurableResource is its own resource value, which its type parameter cannot express.
class StorageResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where the events come from and where the outputs go."""

    landing_zone: str = Field(
        default=DEFAULT_LANDING_ZONE,
        description="Events (folder or URI), one <partition column>=YYYY-MM-DD folder per arrival day.",
    )
    pipelines_dir: str = Field(
        default=DEFAULT_PIPELINES_DIR, description="Folder of pipeline YAML files (read when definitions load)."
    )
    output_root: str = Field(
        default=DEFAULT_OUTPUT_ROOT, description="Outputs (folder or URI): <output_root>/<pipeline>/<partition key>/."
    )
    arrival_time_column: str = Field(
        default=DEFAULT_ARRIVAL_COLUMN,
        description="Arrival-time column of the landing zone (used by the historical_events asset).",
    )
    landing_partition_column: str = Field(
        default=DEFAULT_PARTITION_COLUMN,
        description=(
            "Column of the landing zone's Hive-style layout holding the arrival day (date=YYYY-MM-DD), so a "
            "partition reads only its day's files; empty: no such layout, partitions filter on the arrival time."
        ),
    )

    def landing_path(self) -> str:
        return absolute(self.landing_zone)

    def output_path(self) -> str:
        return absolute(self.output_root)

    def partition_column(self) -> str | None:
        return self.landing_partition_column.strip() or None


def env_or(name: str, default: str) -> str:
    """``dg.EnvVar(name)`` when the variable is set (resolved by Dagster at run time), else ``default``."""
    return dg.EnvVar(name) if os.environ.get(name) else default


def storage_from_env() -> StorageResource:
    return StorageResource(
        landing_zone=env_or("REWINDOW_LANDING_ZONE", DEFAULT_LANDING_ZONE),
        pipelines_dir=env_or("REWINDOW_PIPELINES_DIR", DEFAULT_PIPELINES_DIR),
        output_root=env_or("REWINDOW_OUTPUT_ROOT", DEFAULT_OUTPUT_ROOT),
        arrival_time_column=env_or("REWINDOW_ARRIVAL_COLUMN", DEFAULT_ARRIVAL_COLUMN),
        landing_partition_column=env_or("REWINDOW_LANDING_PARTITION_COLUMN", DEFAULT_PARTITION_COLUMN),
    )


def spark_from_env() -> SparkResource:
    return SparkResource(
        master=env_or("REWINDOW_SPARK_MASTER", DEFAULT_MASTER),
        extra_conf=env_or("REWINDOW_SPARK_CONF", ""),
        metastore_dir=env_or("REWINDOW_METASTORE_DIR", ""),
    )


def with_catalog(spark: SparkResource, pipelines: Iterable[Pipeline], storage: StorageResource) -> SparkResource:
    """``spark`` with a metastore folder when a pipeline publishes to a catalog and none is
    set: ``<output root>/_metastore`` (a local output root; otherwise the settings must name
    a metastore, see docs/deployment.md)."""
    if spark.metastore_dir or not any(getattr(p, "catalog", None) is not None for p in pipelines):
        return spark
    from windowing.metastore import METASTORE_SETTINGS, default_metastore_dir

    conf = {**spark.spark_config, **parse_conf(resolved(spark.extra_conf))}
    # "-": Hive support over the metastore the settings name (no folder used).
    folder = "-" if any(k in conf for k in METASTORE_SETTINGS) else default_metastore_dir(resolved(storage.output_root))
    # A new resource, not model_copy(): Dagster builds the resource from its constructor's arguments.
    return SparkResource(
        spark_config=spark.spark_config, master=spark.master, extra_conf=spark.extra_conf, metastore_dir=folder
    )


def resolved(value: str) -> str:
    """The value of a field that may hold a ``dg.EnvVar`` (for use when definitions load)."""
    if not isinstance(value, dg.EnvVar):
        return value
    got = value.get_value()
    if got is None:  # set when the resource was built (env_or), unset since
        raise ValueError(f"environment variable {value.env_var_name} is not set")
    return got
