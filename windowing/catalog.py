"""Publishing committed partitions to a catalog: tables anyone can query with SQL.

rewindow commits a partition's outputs as a run folder made current by a commit record
(:mod:`windowing.storage.commits`); only rewindow's own readers follow that record. With an
``output: {catalog: {database: D, table: T}}`` block in the pipeline YAML, each
partition's current run is also *published* as a partition of three external tables::

    D.T_aggregates    D.T_late_events    D.T_rejected      (partition column: partition_key)

**The rules.**

* Tables are created on first use, with the schema of the first run published, as
  external Parquet tables whose partitions point at the committed run folders: the data
  stays where rewindow committed it, nothing is copied. Their properties name the
  pipeline (``rewindow.pipeline``), its configuration fingerprint
  (``rewindow.fingerprint``) and the run published last (``rewindow.run``,
  ``rewindow.partition``).
* A partition is published after its commit, and only after its blocking checks passed
  (:meth:`windowing.chain.Chain.replay_one`): one metastore operation per table,
  ``ALTER TABLE ... ADD PARTITION ... LOCATION`` the first time, ``ALTER TABLE ...
  PARTITION ... SET LOCATION`` after, so a reader sees the old run or the new one, never
  a mix. A rerun repoints the partition; a blocked, failed or killed run publishes
  nothing, so the published partition stays as it was.
* Pruning old runs (:func:`windowing.storage.commits.prune`) never deletes a run a table points at
  (:meth:`Publisher.pointed_runs`).
* The state stays internal: it is not published.

**Where.** The catalog is the Spark session's: Spark's Hive support
(``spark.sql.catalogImplementation=hive``) over an embedded Derby metastore in a local
folder by default (:func:`windowing.metastore.session_conf`), or whatever metastore the session is configured
for (``spark.hadoop.hive.metastore.uris``, Glue's client factory, Unity over Spark
Connect): ``docs/deployment.md``. :meth:`Publisher.check` runs before any work and
refuses a catalog that cannot point a table partition at a folder of rewindow's
(an in-memory catalog, a catalog that manages its own storage), saying so: data is never
silently copied instead.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from windowing.storage.lake import Lake, join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from windowing.storage.commits import Commit

#: The outputs published, by table suffix (the state stays internal).
PUBLISHED = ("aggregates", "late_events", "rejected")
#: The tables' partition column: the history's partition key (``2024-01-01``, ``2024-01-01-05:00``).
PARTITION_COLUMN = "partition_key"
#: Where, under a pipeline's output folder, the tables' own root folders are (no data is written there).
TABLES_DIR = "_tables"
PROPERTY_PREFIX = "rewindow."

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class CatalogError(ValueError):
    """The catalog cannot be published to, or publishing failed. Says which table and why."""


@dataclass(frozen=True)
class CatalogSpec:
    """``output.catalog``: the database and the table prefix a pipeline publishes to."""

    database: str
    table: str

    def __post_init__(self) -> None:
        for name, value in (("database", self.database), ("table", self.table)):
            if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
                raise ValueError(
                    f"output.catalog.{name}: {value!r} must be a name of letters, digits and _ "
                    "(not starting with a digit)"
                )

    def table_name(self, output: str) -> str:
        """``<table>_<output>``, lower case (how a Hive metastore stores it)."""
        return f"{self.table}_{output}".lower()

    def qualified(self, output: str) -> str:
        return f"`{self.database.lower()}`.`{self.table_name(output)}`"


def parse_output(doc: Any) -> CatalogSpec | None:
    """The ``output:`` block of a pipeline YAML: ``{catalog: {database: D, table: T}}``.

    Raises ``ValueError`` naming the field (``windowing.config`` turns it into a ConfigError).
    """
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise ValueError(f"output: expected a mapping such as {{catalog: {{database: D, table: T}}}}, got {doc!r}")
    unknown = [k for k in doc if k != "catalog"]
    if unknown:
        raise ValueError(f"output.{unknown[0]}: unknown field (output holds catalog)")
    cat = doc.get("catalog")
    if cat is None:
        return None
    if not isinstance(cat, Mapping):
        raise ValueError(f"output.catalog: expected a mapping {{database: D, table: T}}, got {cat!r}")
    unknown = [k for k in cat if k not in ("database", "table")]
    if unknown:
        raise ValueError(f"output.catalog.{unknown[0]}: unknown field (use database and table)")
    for name in ("database", "table"):
        if name not in cat:
            raise ValueError(
                f"output.catalog.{name}: required (the catalog database and the table prefix: "
                f"tables <table>_{', <table>_'.join(PUBLISHED)})"
            )
    return CatalogSpec(database=cat["database"], table=cat["table"])


def with_overrides(
    spec: CatalogSpec | None,
    database: str | None = None,
    table: str | None = None,
    where: str = "--catalog-database/--catalog-table",
) -> CatalogSpec | None:
    """``spec`` with a database or table prefix given on the command line (or a resource)."""
    if not database and not table:
        return spec
    if spec is None and not (database and table):
        raise ValueError(f"{where}: the pipeline has no output.catalog block; give both the database and the table")
    try:
        return CatalogSpec(database or (spec.database if spec else ""), table or (spec.table if spec else ""))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


# --------------------------------------------------------------------------- publishing


@dataclass(frozen=True)
class Published:
    """Where one table's partition points: its location and the run it is (None: not a run folder)."""

    table: str
    partition: str
    location: str
    run_id: str | None


def run_id_of(location: str) -> str | None:
    """The run id of a run dataset's location (``.../runs/<run id>/<output>``)."""
    m = re.search(r"/runs/([^/]+)/[^/]+/?$", location)
    return m.group(1) if m else None


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _error_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:400]


def _ddl(schema: StructType) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)


@dataclass
class Publisher:
    """Publishes one pipeline's committed partitions to the catalog of ``spark``.

    ``pipeline_dir``: the pipeline's output folder (``<output root>/<pipeline>``); the
    tables' root folders are ``<pipeline_dir>/_tables/<output>`` (every partition has
    its own location, a run folder).
    """

    spark: Any
    spec: CatalogSpec
    pipeline: Any
    pipeline_dir: str

    def _sql(self, text: str) -> Any:
        return self.spark.sql(text)

    def _tables(self) -> set[str]:
        rows = self._sql(f"SHOW TABLES IN `{self.spec.database.lower()}`").collect()
        return {r["tableName"].lower() for r in rows}

    def check(self) -> None:
        """Before any work: the session's catalog takes external tables whose partitions
        point at rewindow's folders, and the target tables, where they exist, are such
        tables. Creates the database if missing; probes the location swap on a scratch
        table, dropped again.

        Raises:
            CatalogError: saying what the catalog cannot do, and what to configure.
        """
        where = f"output.catalog ({self.spec.database}.{self.spec.table}_*)"
        try:
            impl = self.spark.conf.get("spark.sql.catalogImplementation", "in-memory")
        except Exception:  # noqa: BLE001 - Spark Connect may not expose static settings
            impl = None
        if impl == "in-memory":
            raise CatalogError(
                f"{where}: the Spark session's catalog is in-memory (spark.sql.catalogImplementation=in-memory): "
                "tables would vanish with this process. Start the session with Hive support "
                "(rewindow does so when it starts Spark itself; see docs/deployment.md)"
            )
        try:
            if not self.spark.catalog.databaseExists(self.spec.database.lower()):  # asked first: quietly
                self._sql(f"CREATE DATABASE IF NOT EXISTS `{self.spec.database.lower()}`")
            existing = self._tables()
        except Exception as exc:
            raise CatalogError(f"{where}: cannot use database {self.spec.database!r}: {_error_line(exc)}") from exc
        for output in PUBLISHED:
            if self.spec.table_name(output) in existing:
                self._check_table(output)
        self._probe_swap(where)

    def _check_table(self, output: str) -> None:
        name = self.spec.qualified(output)
        info = {
            r["col_name"].strip(): (r["data_type"] or "").strip()
            for r in self._sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
        }
        kind = info.get("Type", "")
        if kind.upper() != "EXTERNAL":
            raise CatalogError(
                f"output.catalog: table {name} exists and is {kind or 'not external'}: rewindow publishes to external "
                "tables whose partitions point at its committed runs, and never writes into a managed table. "
                "Drop it, or choose another output.catalog.table"
            )
        parts = self._partition_columns(output)
        if parts != [PARTITION_COLUMN]:
            raise CatalogError(
                f"output.catalog: table {name} exists and is partitioned by {parts or 'nothing'}, "
                f"not by {PARTITION_COLUMN}: it is not rewindow's; choose another output.catalog.table"
            )

    def _partition_columns(self, output: str) -> list[str]:
        rows = self._sql(f"DESCRIBE TABLE {self.spec.qualified(output)}").collect()
        names = [r["col_name"].strip() for r in rows]
        if "# Partition Information" not in names:
            return []
        after = names[names.index("# Partition Information") + 1 :]
        return [n for n in after if n and not n.startswith("#")]

    def _probe_swap(self, where: str) -> None:
        """Create a scratch external partitioned table, add a partition at one folder, move
        it to another, read the location back, drop the table."""
        tag = uuid.uuid4().hex[:10]
        name = f"`{self.spec.database.lower()}`.`{self.spec.table.lower()}__rewindow_probe_{tag}`"
        root = join(self.pipeline_dir, TABLES_DIR, f"_probe-{tag}")
        lake = Lake(self.spark)
        try:
            self._sql(
                f"CREATE TABLE {name} (v INT, {PARTITION_COLUMN} STRING) USING parquet "
                f"PARTITIONED BY ({PARTITION_COLUMN}) LOCATION {_quote(root)}"
            )
        except Exception as exc:
            raise CatalogError(
                f"{where}: the catalog cannot create an external table at {root} "
                f"(it may manage its own storage): {_error_line(exc)}. rewindow publishes by "
                "pointing table partitions at its committed runs and does not copy data; "
                "see docs/deployment.md"
            ) from exc
        try:
            spec = f"PARTITION ({PARTITION_COLUMN}='probe')"
            self._sql(f"ALTER TABLE {name} ADD {spec} LOCATION {_quote(join(root, 'a'))}")
            self._sql(f"ALTER TABLE {name} {spec} SET LOCATION {_quote(join(root, 'b'))}")
            got = self._location(name, "probe")
            if got is None or not got.rstrip("/").endswith("/b"):
                raise CatalogError(
                    f"{where}: the catalog did not move a partition to another folder "
                    f"(it reads back {got}): it cannot publish by location swap"
                )
        except CatalogError:
            raise
        except Exception as exc:
            raise CatalogError(
                f"{where}: the catalog cannot point a table partition at another folder "
                f"(ALTER TABLE ... PARTITION ... SET LOCATION): {_error_line(exc)}. rewindow "
                "publishes by location swap and does not copy data; see docs/deployment.md"
            ) from exc
        finally:
            try:
                self._sql(f"DROP TABLE IF EXISTS {name}")
            finally:
                if not lake.connect:
                    lake.delete(root)

    def _location(self, name: str, partition: str) -> str | None:
        try:
            rows = self._sql(
                f"DESCRIBE TABLE EXTENDED {name} PARTITION ({PARTITION_COLUMN}={_quote(partition)})"
            ).collect()
        except Exception as exc:
            if "PARTITIONS_NOT_FOUND" in str(exc) or "NoSuchPartition" in str(exc) or "not found" in str(exc):
                return None
            raise
        for r in rows:
            if r["col_name"].strip() == "Location":
                return str(r["data_type"]).strip()
        return None

    def pointed(self, partition: str) -> dict[str, Published | None]:
        """Where each table's ``partition`` points (None: not published, or no table yet)."""
        try:
            existing = self._tables()
        except Exception:  # noqa: BLE001 - no database yet
            existing = set()
        out: dict[str, Published | None] = {}
        for output in PUBLISHED:
            name = self.spec.table_name(output)
            loc = self._location(self.spec.qualified(output), partition) if name in existing else None
            out[output] = Published(name, partition, loc, run_id_of(loc)) if loc else None
        return out

    def pointed_runs(self, partition: str) -> set[str]:
        """The run ids any table's ``partition`` points at (what pruning must keep)."""
        return {p.run_id for p in self.pointed(partition).values() if p is not None and p.run_id}

    def publish(self, partition: str, commit: Commit) -> list[Published]:
        """Point each table's ``partition`` at ``commit``'s run (creating the table on first
        use): one ``ADD PARTITION ... LOCATION`` or ``SET LOCATION`` per table.

        Raises:
            CatalogError: a table's columns differ from the run's output (the pipeline's
                outputs changed), or the metastore refused.
        """
        existing = self._tables()
        done = []
        for output in PUBLISHED:
            location = join(commit.run_path, output)
            name = self.spec.qualified(output)
            schema = self.spark.read.parquet(location).schema
            if PARTITION_COLUMN in schema.fieldNames():
                raise CatalogError(
                    f"output.catalog: the {output} output has a column {PARTITION_COLUMN!r}, "
                    "the tables' partition column: rename that column"
                )
            try:
                if self.spec.table_name(output) not in existing:
                    self._create(output, schema)
                else:
                    self._check_columns(output, schema)
                self._point(name, partition, location)
                self._sql(
                    f"ALTER TABLE {name} SET TBLPROPERTIES ("
                    + ", ".join(
                        f"{_quote(PROPERTY_PREFIX + k)}={_quote(v)}"
                        for k, v in (
                            ("pipeline", self.pipeline.name),
                            ("fingerprint", commit.fingerprint),
                            ("run", commit.run_id),
                            ("partition", partition),
                        )
                    )
                    + ")"
                )
            except CatalogError:
                raise
            except Exception as exc:
                raise CatalogError(
                    f"output.catalog: cannot publish partition {partition} to {name}: {_error_line(exc)}"
                ) from exc
            done.append(Published(self.spec.table_name(output), partition, location, commit.run_id))
        return done

    def _create(self, output: str, schema: StructType) -> None:
        root = join(self.pipeline_dir, TABLES_DIR, output)
        props = {"pipeline": self.pipeline.name, "fingerprint": self.pipeline.fingerprint(), "output": output}
        self._sql(
            f"CREATE TABLE IF NOT EXISTS {self.spec.qualified(output)} ({_ddl(schema)}, {PARTITION_COLUMN} STRING) "
            f"USING parquet PARTITIONED BY ({PARTITION_COLUMN}) LOCATION {_quote(root)} "
            f"COMMENT {_quote(f'rewindow pipeline {self.pipeline.name}: the {output} of each committed partition')} "
            "TBLPROPERTIES (" + ", ".join(f"{_quote(PROPERTY_PREFIX + k)}={_quote(v)}" for k, v in props.items()) + ")"
        )

    def _check_columns(self, output: str, schema: StructType) -> None:
        table = [
            f
            for f in self._sql(f"SELECT * FROM {self.spec.qualified(output)} LIMIT 0").schema.fields
            if f.name != PARTITION_COLUMN
        ]
        have = [(f.name.lower(), f.dataType.simpleString()) for f in table]
        want = [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]
        if have != want:
            raise CatalogError(
                f"output.catalog: table {self.spec.qualified(output)} has columns "
                f"{', '.join(f'{n} {t}' for n, t in have)} but this run's {output} has "
                f"{', '.join(f'{n} {t}' for n, t in want)} (the pipeline's outputs changed): drop the table, or "
                "publish to another output.catalog.table"
            )

    def _point(self, name: str, partition: str, location: str) -> None:
        """One metastore operation: move the partition to ``location`` when the table has
        it, else add it there. (Asked first, not tried: the metastore logs every refused
        ``ADD PARTITION`` as an ``ERROR`` with its Java stack, though the move that follows
        succeeds: 24 of them and 2,376 stack lines a rerun in the ``dagster dev`` terminal.)"""
        spec = f"PARTITION ({PARTITION_COLUMN}={_quote(partition)})"
        if self._sql(f"SHOW PARTITIONS {name} {spec}").collect():
            self._sql(f"ALTER TABLE {name} {spec} SET LOCATION {_quote(location)}")
            return
        try:
            self._sql(f"ALTER TABLE {name} ADD {spec} LOCATION {_quote(location)}")
        except Exception as exc:  # added meanwhile by a concurrent publisher: move it
            text = str(exc)
            if "PARTITIONS_ALREADY_EXIST" not in text and "AlreadyExists" not in text and "already exists" not in text:
                raise
            self._sql(f"ALTER TABLE {name} {spec} SET LOCATION {_quote(location)}")


@dataclass(frozen=True)
class PublishedOutputs:
    """A published history read back through its tables (each partition's current run)."""

    aggregates: Any
    late_events: Any


def read_published(spark: SparkSession, name: str) -> PublishedOutputs:
    """The outputs published as ``database.<table>_aggregates`` (``name`` may be that table or
    ``database.<table>``), without the partition column.

    Raises:
        CatalogError: a table is missing or unreadable, naming it.
    """
    database, table = name.split(".", 1)
    prefix = table[: -len("_aggregates")] if table.lower().endswith("_aggregates") else table
    frames = {}
    for output in ("aggregates", "late_events"):
        qualified = f"`{database}`.`{prefix}_{output}`"
        try:
            df = spark.table(qualified)
            df.schema  # noqa: B018 - resolve now: a missing table fails here, named
        except Exception as exc:
            raise CatalogError(f"{database}.{prefix}_{output}: cannot read the table: {_error_line(exc)}") from exc
        frames[output] = df.drop(PARTITION_COLUMN)
    return PublishedOutputs(**frames)


def published_table(partitions: Iterable[Published | None]) -> str:
    """``run <id>`` when every table points at one run, else each table's run."""
    got = list(partitions)
    runs = {p.run_id if p else None for p in got}
    if runs == {None}:
        return "not published"
    if len(runs) == 1:
        return f"published run {runs.pop()}"
    return "published " + ", ".join(f"{p.table}: {p.run_id}" for p in got if p is not None)
