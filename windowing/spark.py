"""The Spark session rewindow runs on: `local[*]` by default, any master by configuration."""

from __future__ import annotations

import os
import sys
from typing import Mapping

#: Settings every rewindow session needs, whatever the master.
REQUIRED_CONF = {
    # One time zone for every timestamp conversion: window bounds are UTC.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

#: Defaults for the embedded `local[*]` session (a cluster brings its own).
LOCAL_DEFAULT_CONF = {
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}


def spark_session(master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "rewindow",
                  remote: str | None = None):
    """Build (or reuse) the SparkSession.

    ``remote`` (``sc://host:port``) connects to a Spark Connect server instead (Databricks
    serverless and shared clusters speak only Spark Connect); ``conf`` entries are then
    set as runtime settings of the session, where the server allows.

    ``master`` defaults to ``local[*]``. ``conf`` entries override the local defaults;
    the settings in :data:`REQUIRED_CONF` are always applied. Workers run the current
    interpreter (``PYSPARK_PYTHON``), so they see the same installed packages.
    """
    from pyspark.sql import SparkSession

    if remote:
        spark = SparkSession.builder.remote(remote).getOrCreate()
        for k, v in {**{k: str(v) for k, v in (conf or {}).items()}, **REQUIRED_CONF}.items():
            try:
                spark.conf.set(k, v)
            except Exception:  # noqa: BLE001 - static settings belong to the server's own start-up
                if k in REQUIRED_CONF and spark.conf.get(k, None) != v:
                    raise
        return spark
    active = SparkSession.getActiveSession()
    if active is not None:
        # Reuse the running session as it is (a test run, a notebook, Dagster's resource):
        # a builder would overwrite its settings with ours. Only correctness is asserted.
        for k, v in REQUIRED_CONF.items():
            active.conf.set(k, v)
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or "local[*]"
    settings: dict[str, str] = {}
    if master.startswith("local"):
        settings.update(LOCAL_DEFAULT_CONF)
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    settings.update(REQUIRED_CONF)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
