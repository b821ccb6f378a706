"""The ``output:`` block: the catalog tables a pipeline's committed partitions are published
to (``output: {catalog: {database: D, table: T}}``), as a :class:`CatalogSpec`.

The spec alone: its names, their rules and the command line's overrides. Publishing to a
catalog is :mod:`windowing.catalog`'s (Spark's), which reads this spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

#: The outputs published, by table suffix (the state stays internal).
PUBLISHED = ("aggregates", "late_events", "rejected")

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VERSION = re.compile(r"v[1-9][0-9]*")


def check_version(version: str) -> str:
    """``version`` when it is ``v<N>`` (N >= 1), else ``ValueError``."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ValueError(f"version {version!r}: expected v1, v2, ... (v and a whole number from 1)")
    return version


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

    def table_name(self, output: str, version: str | None = None) -> str:
        """``<table>_<output>``, the stable name, or with a ``version`` that version's own
        table ``<table>_<output>_<version>``; lower case (how a Hive metastore stores it)."""
        name = f"{self.table}_{output}" if version is None else f"{self.table}_{output}_{check_version(version)}"
        return name.lower()

    def qualified(self, output: str, version: str | None = None) -> str:
        return self.quote(self.table_name(output, version))

    def quote(self, table: str) -> str:
        """``database.table`` quoted for SQL."""
        return f"`{self.database.lower()}`.`{table}`"


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
