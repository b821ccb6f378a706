"""Publishing committed partitions to a catalog: tables anyone can query with SQL.

rewindow commits a partition's outputs as a run folder made current by a commit record
(:mod:`windowing.storage.commits`); only rewindow's own readers follow that record. With an
``output: {catalog: {database: D, table: T}}`` block in the pipeline YAML (read into a
:class:`~windowing.config.outputs.CatalogSpec`), each
partition's current run is also *published* as a partition of three external tables::

    D.T_aggregates    D.T_late_events    D.T_rejected      (partition column: partition_key)

**The rules.**

* Tables are created on first use, with the schema of the first run published, as
  external Parquet tables whose partitions point at the committed run folders: the data
  stays where rewindow committed it, nothing is copied. Their properties name the
  pipeline (``rewindow.pipeline``), the version of the history (``rewindow.version``), its
  configuration fingerprint (``rewindow.fingerprint``) and the run published last
  (``rewindow.run``, ``rewindow.partition``).
* A partition is published after its commit, and only after its blocking checks passed
  (:meth:`windowing.chain.Chain.replay_one`): one metastore operation per table,
  ``ALTER TABLE ... ADD PARTITION ... LOCATION`` the first time, ``ALTER TABLE ...
  PARTITION ... SET LOCATION`` after, so a reader sees the old run or the new one, never
  a mix. A rerun repoints the partition; a blocked, failed or killed run publishes
  nothing, so the published partition stays as it was.
* Pruning old runs (:func:`windowing.storage.commits.prune`) never deletes a run a table
  points at, the tables of every version included (:meth:`Publisher.pointed_runs`).
* The state stays internal: it is not published.

**Versions.** A history rebuilt after its pipeline changed is a new *version* of it
(``v1`` is the history as first built, then ``v2``, ``v3``, ...), and each version has
tables of its own, ``D.T_aggregates_v2`` and so on, with their own columns: an added or
removed aggregate never needs a table dropped. The stable names then become views::

    D.T_aggregates  =  VIEW AS SELECT * FROM D.T_aggregates_v2     (and _late_events, _rejected)

:meth:`Publisher.switch` makes them serve another version once it is complete, one
metastore operation per name, so a consumer of ``D.T_aggregates`` sees one version or the
other, never a mix of partitions. A history published before versions existed keeps its
three plain tables at the stable names (version ``v1``: publishing to them is unchanged)
until its first switch, which renames each to ``D.T_<output>_v1`` first (external tables:
only the metastore entry moves, the partitions keep their locations). Which of these
steps the metastore makes atomic, and the one-time window of that first switch:
:meth:`Publisher.switch`.

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
from typing import TYPE_CHECKING, Any, Iterable

from windowing.config.outputs import PUBLISHED, CatalogSpec, check_version
from windowing.contract import EMIT_COLUMNS, WINDOW_COLUMNS
from windowing.storage.lake import Lake, join

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from windowing.storage.commits import Commit

#: The tables' partition column: the history's partition key (``2024-01-01``, ``2024-01-01-05:00``).
PARTITION_COLUMN = "partition_key"
#: Where, under a pipeline's output folder, the tables' own root folders are (no data is written there).
TABLES_DIR = "_tables"
PROPERTY_PREFIX = "rewindow."
#: The version of a history published before versions existed (and of one never rebuilt).
FIRST_VERSION = "v1"


def _version_number(version: str) -> int:
    return int(version[1:])


class CatalogError(ValueError):
    """The catalog cannot be published to, or publishing failed. Says which table and why."""


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


def _aggregate_columns(pipeline: Any) -> list[str] | None:
    """The aggregates' column names in order, as
    :func:`windowing.config.arrow_schemas.aggregates_schema` makes them: they follow from the
    pipeline alone (some of their types follow the input's). None for a pipeline stand-in."""
    try:
        keys = list(pipeline.id_columns)
        names = [a.name for a in pipeline.aggregates]
    except AttributeError:
        return None
    return [*keys, *WINDOW_COLUMNS, *names, *EMIT_COLUMNS]


@dataclass(frozen=True)
class _Names:
    """What a database holds, read once per call: the names of its tables and views (SHOW
    TABLES lists both) and of its views."""

    tables: frozenset[str]
    views: frozenset[str]

    def table(self, name: str) -> bool:
        """``name`` is a table, not a view."""
        return name in self.tables and name not in self.views


@dataclass
class Publisher:
    """Publishes one pipeline's committed partitions to the catalog of ``spark``, into the
    tables of ``version`` of its history (:mod:`windowing.catalog`, "Versions").

    ``pipeline_dir``: the pipeline's output folder (``<output root>/<pipeline>``, whatever
    the version); the tables' root folders are ``<pipeline_dir>/_tables/<output>`` (the
    stable names' plain tables) and ``<pipeline_dir>/_tables/<output>_<version>`` (every
    partition has its own location, a run folder: nothing is written there).

    ``version`` (``v1``, ``v2``, ...): ``v1`` publishes to the stable names themselves while
    they are plain tables (a history published before versions existed, or never rebuilt),
    as rewindow always did; any other version, and ``v1`` once the stable names are views,
    to that version's own tables ``<table>_<output>_<version>``.
    """

    spark: Any
    spec: CatalogSpec
    pipeline: Any
    pipeline_dir: str
    version: str = FIRST_VERSION

    def __post_init__(self) -> None:
        try:
            check_version(self.version)
        except ValueError as exc:
            raise CatalogError(f"output.catalog: {exc}") from None

    def _sql(self, text: str) -> Any:
        return self.spark.sql(text)

    def _tables(self) -> set[str]:
        rows = self._sql(f"SHOW TABLES IN `{self.spec.database.lower()}`").collect()
        return {r["tableName"].lower() for r in rows}

    def _names(self) -> _Names:
        tables = self._tables()
        try:
            rows = self._sql(f"SHOW VIEWS IN `{self.spec.database.lower()}`").collect()
            views = {r["viewName"].lower() for r in rows if not r["isTemporary"]}
        except Exception:  # noqa: BLE001 - a catalog without SHOW VIEWS has no views of ours either
            views = set()
        return _Names(frozenset(tables), frozenset(views & tables))

    def _names_or_none(self) -> _Names:
        try:
            return self._names()
        except Exception:  # noqa: BLE001 - no database yet: nothing published
            return _Names(frozenset(), frozenset())

    def _table_of(self, output: str, version: str, names: _Names) -> str:
        """The table ``version``'s ``output`` is published to: for ``v1`` the stable name while
        it is not a view and no ``_v1`` table exists (what rewindow always published to), else
        the version's own table."""
        stable, own = self.spec.table_name(output), self.spec.table_name(output, version)
        if version == FIRST_VERSION and stable not in names.views and own not in names.tables:
            return stable
        return own

    def _every_table(self, names: _Names) -> list[str]:
        """The tables of every version: the stable names while they are tables (``v1``'s),
        and every ``<table>_<output>_v<N>``."""
        found = []
        for output in PUBLISHED:
            stable = self.spec.table_name(output)
            pattern = re.compile(re.escape(stable) + r"_v[1-9][0-9]*")
            found += [stable] if names.table(stable) else []
            found += sorted(t for t in names.tables if pattern.fullmatch(t) and names.table(t))
        return found

    def _view_version(self, output: str) -> tuple[str | None, str]:
        """The version the view at ``output``'s stable name selects from, by its definition
        (None when it is not ``SELECT * FROM`` one of this pipeline's version tables), and that
        definition."""
        rows = self._sql(f"DESCRIBE TABLE EXTENDED {self.spec.qualified(output)}").collect()
        info = {r["col_name"].strip(): (r["data_type"] or "").strip() for r in rows}
        text = info.get("View Text") or info.get("View Original Text") or ""
        db, stable = re.escape(self.spec.database.lower()), re.escape(self.spec.table_name(output))
        m = re.fullmatch(
            rf"\s*SELECT\s+\*\s+FROM\s+(?:`?\w+`?\s*\.\s*)?`?{db}`?\s*\.\s*`?{stable}_(v[1-9][0-9]*)`?\s*",
            text,
            flags=re.IGNORECASE,
        )
        return (m.group(1) if m else None), text

    def _served(self, names: _Names) -> dict[str, str]:
        """The version each existing stable name serves (a plain table: ``v1``)."""
        served = {}
        for output in PUBLISHED:
            stable = self.spec.table_name(output)
            if stable in names.views:
                version, text = self._view_version(output)
                if version is None:
                    raise CatalogError(self._foreign_view(output, text))
                served[output] = version
            elif stable in names.tables:
                served[output] = FIRST_VERSION
        return served

    def _foreign_view(self, output: str, text: str) -> str:
        return (
            f"output.catalog: {self.spec.qualified(output)} is a view rewindow did not make (it is {text!r}, not "
            f"SELECT * FROM one of {self.spec.qualified(output, 'v1')}, _v2, ...): drop it, or choose another "
            "output.catalog.table"
        )

    def check(self) -> None:
        """Before any work: the session's catalog takes external tables whose partitions
        point at rewindow's folders, and the tables this version publishes to, where they
        exist, are such tables, with the aggregates' columns this pipeline makes. Stable names
        that are views must be rewindow's (``SELECT * FROM`` a version's table). A version
        whose tables do not exist yet needs no column check: they are created with the
        columns of its first run. Creates the database if missing; probes the location swap
        on a scratch table, dropped again.

        (Only the aggregates' column names follow from the pipeline alone; their types, and
        the late events' and rejected rows' columns, which are the input's, are checked when
        a run is published.)

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
            names = self._names()
        except Exception as exc:
            raise CatalogError(f"{where}: cannot use database {self.spec.database!r}: {_error_line(exc)}") from exc
        self._served(names)  # a view at a stable name is one of rewindow's
        for output in PUBLISHED:
            stable = self.spec.table_name(output)
            if names.table(stable):  # v1's tables until the first switch renames them
                self._check_table(stable)
            table = self._table_of(output, self.version, names)
            if table in names.tables:
                if table != stable:
                    self._check_table(table)
                if output == "aggregates":
                    self._check_aggregate_columns(table)
        self._probe_swap(where)

    def _check_table(self, table: str) -> None:
        name = self.spec.quote(table)
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
        parts = self._partition_columns(name)
        if parts != [PARTITION_COLUMN]:
            raise CatalogError(
                f"output.catalog: table {name} exists and is partitioned by {parts or 'nothing'}, "
                f"not by {PARTITION_COLUMN}: it is not rewindow's; choose another output.catalog.table"
            )

    def _partition_columns(self, name: str) -> list[str]:
        rows = self._sql(f"DESCRIBE TABLE {name}").collect()
        names = [r["col_name"].strip() for r in rows]
        if "# Partition Information" not in names:
            return []
        after = names[names.index("# Partition Information") + 1 :]
        return [n for n in after if n and not n.startswith("#")]

    def _columns(self, table: str) -> list[tuple[str, str]]:
        """A table's columns but the partition column: (lower-case name, type) in order."""
        fields = self._sql(f"SELECT * FROM {self.spec.quote(table)} LIMIT 0").schema.fields
        return [(f.name.lower(), f.dataType.simpleString()) for f in fields if f.name != PARTITION_COLUMN]

    def _check_aggregate_columns(self, table: str) -> None:
        want = _aggregate_columns(self.pipeline)
        if want is None:
            return
        have = [n for n, _ in self._columns(table)]
        if have != [n.lower() for n in want]:
            raise CatalogError(
                f"output.catalog: table {self.spec.quote(table)} has columns {', '.join(have)} but this pipeline's "
                f"aggregates are {', '.join(want)} (the pipeline's outputs changed): "
                + self._rebuild_hint(table != self.spec.table_name("aggregates"))
            )

    def _rebuild_hint(self, own: bool) -> str:
        """What to do when a table's columns are not the run's (``own``: a version's own table)."""
        if own:
            return (
                f"a version's tables keep the columns it was first published with; rebuild the history as a new "
                f"version (tables of its own), or drop {self.version}'s tables"
            )
        return (
            "rebuild the history as a new version (tables of its own, which the stable names serve once "
            "switched to), drop the table, or publish to another output.catalog.table"
        )

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

    def _published(self, table: str, partition: str, names: _Names) -> Published | None:
        """Where ``table``'s ``partition`` points (None: no such table or partition)."""
        if not names.table(table):
            return None
        name = self.spec.quote(table)
        if not self._sql(f"SHOW PARTITIONS {name} PARTITION ({PARTITION_COLUMN}={_quote(partition)})").collect():
            return None  # asked first: a missing partition is not an error the metastore logs
        loc = self._location(name, partition)
        return Published(table, partition, loc, run_id_of(loc)) if loc else None

    def pointed(self, partition: str) -> dict[str, Published | None]:
        """Where each of this version's tables' ``partition`` points, by output (None: not
        published, or no table yet): what ``rewindow status`` and the Dagster check compare
        with the commit record. :meth:`pointed_runs` covers every version."""
        names = self._names_or_none()
        return {o: self._published(self._table_of(o, self.version, names), partition, names) for o in PUBLISHED}

    def pointed_runs(self, partition: str) -> set[str]:
        """The run ids any table's ``partition`` points at, in the tables of every version
        that has tables (v1..vN), the stable names' included: what pruning must keep."""
        names = self._names_or_none()
        found = (self._published(table, partition, names) for table in self._every_table(names))
        return {p.run_id for p in found if p is not None and p.run_id}

    def publish(self, partition: str, commit: Commit) -> list[Published]:
        """Point each of this version's tables' ``partition`` at ``commit``'s run (creating
        the table on first use): one ``ADD PARTITION ... LOCATION`` or ``SET LOCATION`` per table.

        Raises:
            CatalogError: a table's columns differ from the run's output (the pipeline's
                outputs changed), or the metastore refused.
        """
        names = self._names()
        done = []
        for output in PUBLISHED:
            location = join(commit.run_path, output)
            table = self._table_of(output, self.version, names)
            name = self.spec.quote(table)
            if table in names.views:
                raise CatalogError(
                    f"output.catalog: {name} is a view: version {self.version} publishes to tables; drop the view"
                )
            schema = self.spark.read.parquet(location).schema
            if PARTITION_COLUMN in schema.fieldNames():
                raise CatalogError(
                    f"output.catalog: the {output} output has a column {PARTITION_COLUMN!r}, "
                    "the tables' partition column: rename that column"
                )
            try:
                if table not in names.tables:
                    self._create(output, table, schema)
                else:
                    self._check_columns(output, table, schema)
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
            done.append(Published(table, partition, location, commit.run_id))
        return done

    def _create(self, output: str, table: str, schema: StructType) -> None:
        own = table != self.spec.table_name(output)  # a version's own table (else the stable name's)
        root = join(self.pipeline_dir, TABLES_DIR, f"{output}_{self.version}" if own else output)
        props = {
            "pipeline": self.pipeline.name,
            "fingerprint": self.pipeline.fingerprint(),
            "output": output,
            "version": self.version,
        }
        what = f"rewindow pipeline {self.pipeline.name}" + (f", version {self.version}" if own else "")
        self._sql(
            f"CREATE TABLE IF NOT EXISTS {self.spec.quote(table)} ({_ddl(schema)}, {PARTITION_COLUMN} STRING) "
            f"USING parquet PARTITIONED BY ({PARTITION_COLUMN}) LOCATION {_quote(root)} "
            f"COMMENT {_quote(f'{what}: the {output} of each committed partition')} "
            "TBLPROPERTIES (" + ", ".join(f"{_quote(PROPERTY_PREFIX + k)}={_quote(v)}" for k, v in props.items()) + ")"
        )

    def _check_columns(self, output: str, table: str, schema: StructType) -> None:
        have = self._columns(table)
        want = [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]
        if have != want:
            raise CatalogError(
                f"output.catalog: table {self.spec.quote(table)} has columns "
                f"{', '.join(f'{n} {t}' for n, t in have)} but this run's {output} has "
                f"{', '.join(f'{n} {t}' for n, t in want)} (the pipeline's outputs changed): "
                + self._rebuild_hint(table != self.spec.table_name(output))
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

    # ----------------------------------------------------------------------- versions

    def served_version(self) -> str | None:
        """The version the stable names serve now: the one their views select from (read
        from each view's definition, which :meth:`switch` changes in one operation), ``v1``
        while they are plain tables, None when none exists (nothing published, or only
        versions never switched to).

        Raises:
            CatalogError: a stable name is a view rewindow did not make, or the three serve
                different versions (a switch was interrupted: run it again).
        """
        served = self._served(self._names_or_none())
        versions = sorted(set(served.values()), key=_version_number)
        if len(versions) > 1:
            raise CatalogError(
                f"output.catalog: the stable names serve different versions "
                f"({', '.join(f'{self.spec.table_name(o)}: {v}' for o, v in served.items())}): a switch was "
                f"interrupted; switch again to the version they should serve"
            )
        return versions[0] if versions else None

    def switch(self, version: str) -> list[str]:
        """Make the stable names ``D.T_aggregates``, ``D.T_late_events`` and ``D.T_rejected``
        serve ``version``: each becomes (or stays) the view ``SELECT * FROM D.T_<output>_<version>``.
        Returns what was done, one line per table. Everything is checked before anything is
        changed.

        One metastore operation per name, each atomic (the first switch of a history that has
        plain tables at the stable names excepted, below): a consumer of ``D.T_x`` sees the
        version before or the version after, whole, never a mix of their partitions.

        * A view already there is changed with ``ALTER VIEW ... AS SELECT * FROM
          D.T_x_<version>``: one ``alter_table`` call of the metastore, one transaction (its
          definition and columns together). Not ``CREATE OR REPLACE VIEW``: Spark runs that on
          an existing view as a drop, then a create (``CreateViewCommand``), two operations
          between which the name does not exist.
        * A stable name that is still a plain table (a history published before versions
          existed: its ``v1``) is migrated once: ``ALTER TABLE D.T_x RENAME TO D.T_x_v1`` (one
          ``alter_table`` call; an external table, so only the metastore entry moves and its
          partitions keep their locations), then ``CREATE VIEW D.T_x ... AS SELECT * FROM
          D.T_x_<version>`` (one ``create_table`` call). Between those two operations, a few
          milliseconds once per table in a history's life, ``D.T_x`` does not exist: a query
          then fails with "table not found" (it never sees wrong rows).
        * The three names are three operations: for the moment between them one name may
          serve the new version and another the old one.

        The views' ``rewindow.version`` property is set after each switch, for people to
        read: :meth:`served_version` goes by the views' definitions.

        Raises:
            CatalogError: ``version`` has no tables (publish its partitions first), a stable
                name is a view rewindow did not make, or the migration would overwrite a table.
        """
        try:
            check_version(version)
        except ValueError as exc:
            raise CatalogError(f"output.catalog: {exc}") from None
        names = self._names()
        served = self._served(names)
        plan = []
        for output in PUBLISHED:
            stable, target = self.spec.table_name(output), self.spec.table_name(output, version)
            migrate = names.table(stable)
            first = self.spec.table_name(output, FIRST_VERSION)
            if migrate:
                self._check_table(stable)
                if first in names.tables:
                    raise CatalogError(
                        f"output.catalog: {self.spec.quote(stable)} is a table (version {FIRST_VERSION}) and "
                        f"{self.spec.quote(first)} exists too: the switch would rename the first onto the second. "
                        "Drop the one that is not wanted"
                    )
            has = target in names.tables or (migrate and version == FIRST_VERSION)
            if not has or target in names.views:
                raise CatalogError(
                    f"output.catalog: version {version} has no table {self.spec.quote(target)}: publish its "
                    f"partitions first (rewindow publishes a version's partitions to tables of its own)"
                )
            plan.append((output, stable, target, migrate, served.get(output)))
        lines = []
        for output, stable, target, migrate, before in plan:
            view, source = self.spec.quote(stable), self.spec.quote(target)
            try:
                if migrate:
                    first = self.spec.qualified(output, FIRST_VERSION)
                    self._sql(f"ALTER TABLE {view} RENAME TO {first}")
                    self._create_view(output, version)
                    self._sql(f"ALTER TABLE {first} SET TBLPROPERTIES ({self._version_property(FIRST_VERSION)})")
                    lines.append(
                        f"{view}: was version {FIRST_VERSION}'s table, now {first} (its partitions keep their "
                        f"locations); {view} is a view serving {version}"
                    )
                elif before is None:
                    self._create_view(output, version)
                    lines.append(f"{view}: a view serving {version} (created)")
                elif before == version:
                    self._sql(f"ALTER VIEW {view} SET TBLPROPERTIES ({self._version_property(version)})")
                    lines.append(f"{view}: serves {version} already")
                else:
                    self._sql(f"ALTER VIEW {view} AS SELECT * FROM {source}")  # the switch: one operation
                    self._sql(f"ALTER VIEW {view} SET TBLPROPERTIES ({self._version_property(version)})")
                    lines.append(f"{view}: serves {version} (was {before})")
            except Exception as exc:
                raise CatalogError(
                    f"output.catalog: cannot switch {view} to version {version}: {_error_line(exc)}"
                    + (f" (done before: {'; '.join(lines)})" if lines else "")
                ) from exc
        return lines

    @staticmethod
    def _version_property(version: str) -> str:
        return f"{_quote(PROPERTY_PREFIX + 'version')}={_quote(version)}"

    def _create_view(self, output: str, version: str) -> None:
        comment = f"rewindow pipeline {self.pipeline.name}: the {output} of the version it selects from"
        pipeline = f"{_quote(PROPERTY_PREFIX + 'pipeline')}={_quote(self.pipeline.name)}"
        props = f"{pipeline}, {self._version_property(version)}"
        self._sql(
            f"CREATE VIEW {self.spec.qualified(output)} COMMENT {_quote(comment)} TBLPROPERTIES ({props}) "
            f"AS SELECT * FROM {self.spec.qualified(output, version)}"
        )

    def drop_version(self, version: str) -> list[str]:
        """Drop ``version``'s three tables (when its runs are pruned): metastore entries only,
        external tables, so the run folders they point at stay where they are. Returns what
        was dropped, one line per table.

        Raises:
            CatalogError: the stable names serve ``version`` (switch to another first).
        """
        try:
            check_version(version)
        except ValueError as exc:
            raise CatalogError(f"output.catalog: {exc}") from None
        served = self.served_version()
        if served == version:
            raise CatalogError(
                f"output.catalog: {self.spec.database}.{self.spec.table}_* serve version {version}: switch them to "
                "another version before dropping its tables"
            )
        names = self._names()
        lines = []
        for output in PUBLISHED:
            table = self.spec.table_name(output, version)
            if not names.table(table):
                continue
            self._sql(f"DROP TABLE {self.spec.quote(table)}")
            lines.append(f"{self.spec.quote(table)}: dropped (the runs it pointed at stay)")
        return lines


@dataclass(frozen=True)
class PublishedOutputs:
    """A published history read back through its tables (each partition's current run)."""

    aggregates: Any
    late_events: Any


def read_published(spark: SparkSession, name: str) -> PublishedOutputs:
    """The outputs published as ``database.<table>_aggregates`` (``name`` may be that table or
    view, ``database.<table>``, or one version's table ``database.<table>_aggregates_v2``),
    without the partition column.

    Raises:
        CatalogError: a table is missing or unreadable, naming it.
    """
    database, table = name.split(".", 1)
    m = re.fullmatch(r"(.*)_aggregates(_v[1-9][0-9]*)?", table, flags=re.IGNORECASE)
    prefix, version = (m.group(1), m.group(2) or "") if m else (table, "")
    frames = {}
    for output in ("aggregates", "late_events"):
        qualified = f"`{database}`.`{prefix}_{output}{version}`"
        try:
            df = spark.table(qualified)
            df.schema  # noqa: B018 - resolve now: a missing table fails here, named
        except Exception as exc:
            raise CatalogError(
                f"{database}.{prefix}_{output}{version}: cannot read the table: {_error_line(exc)}"
            ) from exc
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
