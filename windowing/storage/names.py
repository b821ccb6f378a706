"""Plain functions on names and raw values that every storage module uses, with no import
of its own: how a path is shown in messages, which names Spark's file index skips, and
what a Parquet time column's raw integers count. (They lived in :mod:`.lake`, which
imports :mod:`.local_files`, which needed them back: a cycle.)"""

from __future__ import annotations


def display(path: str) -> str:
    """How a path is shown in messages: local paths without ``file:``."""
    if path.startswith("file:///"):
        return path[len("file://") :]
    return path[len("file:") :] if path.startswith("file:/") and not path.startswith("file://") else path


def hidden(name: str) -> bool:
    """Names Spark's file index skips (``_SUCCESS``, ``.crc`` files, ``_temporary/``), as
    Spark 4's ``HadoopFSUtils.shouldFilterOutPathName`` and the file index's data-path
    rule do: a name starting with ``_`` (unless it holds ``=``, a partition folder) or
    ``.``, and an upload in progress (``part-9.parquet._COPYING_``)."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


#: Milliseconds per unit of a time column's raw integers, by :func:`time_kind` (a divisor
#: below one unit of ms: micros, nanos).
_PER_MS = {"millis": 1, "ms": 1, "micros": 1000, "nanos": 1_000_000}


def time_ms(raw: int | None, kind: str) -> int | None:
    """A time column's raw Parquet value (:func:`time_kind`: ``millis``, ``micros``,
    ``nanos``, ``days`` or ``ms``) in ms since the epoch; floored, which keeps every row in
    its hour (hour edges are whole ms)."""
    if raw is None:
        return None
    return raw * 86_400_000 if kind == "days" else raw // _PER_MS[kind]


def time_kind(physical: str, logical: str | None) -> str | None:
    """What a Parquet column's raw integers count, from its physical type and its logical
    type as parquet-java or pyarrow names it (``TIMESTAMP(MICROS,true)``, ``Timestamp(...,
    timeUnit=microseconds, ...)``, ``DATE``/``Date``, ``INTEGER(64,true)``/``Int(...)``):
    ``millis``, ``micros``, ``nanos``, ``days``, ``ms`` (an integer column of ms since the
    epoch, docs/semantics.md §1), or None (a string, INT96, anything else)."""
    text = (logical or "").lower()
    if text.startswith("timestamp"):
        return next((unit for unit in ("millis", "micros", "nanos") if unit in text), None)  # MICROS, microseconds
    if text.startswith("date"):
        return "days"
    if physical in ("INT64", "INT32") and (text in ("", "none", "null") or text.startswith(("int", "integer"))):
        return "ms"
    return None
