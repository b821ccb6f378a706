"""The metastore a publishing session uses, and the SQL endpoints over it: local by design.

The embedded Derby metastore (Spark's Hive support, shipped in the pyspark package) lives
in a local folder, ``<output root>/_metastore`` by default: its ``metastore_db``,
``derby.log`` and default warehouse, never the working directory. Embedded Derby admits
one process at a time. A session whose settings name a metastore
(:data:`METASTORE_SETTINGS`: a Hive metastore service, Glue's client factory) uses that
instead. This module builds those settings and the command lines of the Thrift JDBC
server and ``spark-sql`` over the same folder (:mod:`windowing.catalog` publishes).
"""

from __future__ import annotations

import os
import re
from typing import Mapping

from windowing.catalog import CatalogError
from windowing.storage.lake import absolute, join

#: The embedded metastore's folder under a local output root, when none is given.
METASTORE_DIR = "_metastore"
#: Session settings that say the session already has a metastore of its own (no embedded Derby then).
METASTORE_SETTINGS = (
    "spark.hadoop.hive.metastore.uris",
    "spark.hadoop.javax.jdo.option.ConnectionURL",
    "spark.hadoop.hive.metastore.client.factory.class",
    "spark.hive.metastore.uris",
)


def default_metastore_dir(output_root: str) -> str:
    """``<output root>/_metastore`` for a local output root; a remote one needs a folder given."""
    root = absolute(output_root)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", root) and not root.startswith("file:"):
        raise CatalogError(
            f"output.catalog: the output root {root} is not local, so the embedded Derby metastore needs a local "
            "folder: give --metastore-dir (REWINDOW_METASTORE_DIR), or point the session at a metastore "
            "(--conf spark.hadoop.hive.metastore.uris=thrift://..., see docs/deployment.md)"
        )
    return join(root.removeprefix("file:"), METASTORE_DIR)


def session_conf(metastore_dir: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a session needs to publish: Spark's Hive support, and unless ``conf``
    names a metastore (:data:`METASTORE_SETTINGS`), an embedded Derby metastore whose
    ``metastore_db``, ``derby.log`` and default warehouse all live in ``metastore_dir``
    (never in the working directory). Merged over ``conf`` (a given
    ``spark.driver.extraJavaOptions`` keeps its options)."""
    conf = dict(conf or {})
    out = {"spark.sql.catalogImplementation": conf.get("spark.sql.catalogImplementation", "hive")}
    if any(k in conf for k in METASTORE_SETTINGS):
        return out
    folder = os.path.abspath(metastore_dir)
    java = f"-Dderby.system.home={folder} -Dderby.stream.error.file={os.path.join(folder, 'derby.log')}"
    extra = conf.get("spark.driver.extraJavaOptions", "")
    out.update(
        {
            "spark.hadoop.javax.jdo.option.ConnectionURL": derby_url(folder),
            "spark.sql.warehouse.dir": conf.get("spark.sql.warehouse.dir", os.path.join(folder, "warehouse")),
            "spark.driver.extraJavaOptions": f"{extra} {java}".strip(),
        }
    )
    os.makedirs(folder, exist_ok=True)
    return out


def session_conf_for_tables(metastore_dir: str | None, conf: Mapping[str, str]) -> dict[str, str]:
    """:func:`session_conf` for a command that reads published tables (``rewindow reconcile
    --replay db.table``): the metastore folder from ``--metastore-dir`` or
    ``REWINDOW_METASTORE_DIR``, unless ``conf`` names a metastore."""
    if any(k in conf for k in METASTORE_SETTINGS):
        return session_conf("", conf)
    folder = metastore_dir or os.environ.get("REWINDOW_METASTORE_DIR")
    if not folder:
        raise CatalogError(
            "--replay/--live name a catalog table: give the embedded metastore's folder "
            "(--metastore-dir or REWINDOW_METASTORE_DIR: the backfill's OUTPUT/_metastore), or "
            "--conf spark.hadoop.hive.metastore.uris=thrift://..."
        )
    return session_conf(folder, conf)


def derby_url(metastore_dir: str) -> str:
    """The JDBC URL of the embedded Derby metastore in ``metastore_dir``."""
    return f"jdbc:derby:;databaseName={os.path.join(os.path.abspath(metastore_dir), 'metastore_db')};create=true"


def thrift_server_command(
    metastore_dir: str, port: int, host: str = "127.0.0.1", spark_home: str | None = None
) -> list[str]:
    """The command line of Spark's Thrift JDBC/ODBC server (``HiveThriftServer2``, shipped in
    the pyspark package) over the embedded metastore of ``metastore_dir``: what
    ``beeline -u jdbc:hive2://HOST:PORT`` then queries. Embedded Derby admits one process at
    a time: start it when no replay publishes to the same metastore."""
    home = spark_home or spark_home_dir()
    folder = os.path.abspath(metastore_dir)
    return [
        os.path.join(home, "bin", "spark-submit"),
        "--class",
        "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
        "--master",
        "local[1]",
        "--driver-java-options",
        f"-Dderby.system.home={folder} -Dderby.stream.error.file={os.path.join(folder, 'derby.log')}",
        "--conf",
        f"spark.sql.warehouse.dir={os.path.join(folder, 'warehouse')}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--hiveconf",
        f"javax.jdo.option.ConnectionURL={derby_url(folder)}",
        "--hiveconf",
        f"hive.server2.thrift.port={port}",
        "--hiveconf",
        f"hive.server2.thrift.bind.host={host}",
        "spark-internal",
    ]


def spark_sql_command(metastore_dir: str, query: str, spark_home: str | None = None) -> list[str]:
    """The ``bin/spark-sql`` command line (shipped in the pyspark package) that runs ``query``
    on the embedded metastore of ``metastore_dir`` (when no replay publishes to it: one
    process at a time)."""
    home = spark_home or spark_home_dir()
    folder = os.path.abspath(metastore_dir)
    return [
        os.path.join(home, "bin", "spark-sql"),
        "--driver-java-options",
        f"-Dderby.system.home={folder} -Dderby.stream.error.file={os.path.join(folder, 'derby.log')}",
        "--conf",
        f"spark.hadoop.javax.jdo.option.ConnectionURL={derby_url(folder)}",
        "--conf",
        f"spark.sql.warehouse.dir={os.path.join(folder, 'warehouse')}",
        "--conf",
        "spark.ui.enabled=false",
        "-e",
        query,
    ]


def spark_home_dir() -> str:
    """``SPARK_HOME``, else the installed pyspark package's folder (which ships ``bin/``)."""
    import pyspark  # noqa: PLC0415 - only where a command line is wanted

    return os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)


_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")


def names_table(text: str | None) -> bool:
    """Whether ``text`` (a ``--replay`` or ``--live``) is a ``database.table`` rather than a
    folder or URI: it has that shape and no such local path exists."""
    return bool(text) and bool(_TABLE_NAME.fullmatch(str(text))) and not os.path.exists(str(text))
