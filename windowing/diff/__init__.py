"""Two versions of a history compared (``rewindow diff BEFORE AFTER``, issue 48).

After a bug is fixed or an aggregate added and the history rebuilt, what changed:
windows only in BEFORE, only in AFTER, and changed (which columns, by how much), the
columns added and removed, the same for the late events and the rejected rows, per
partition and in total; a partition only one side has is reported as such, not as
every one of its windows missing.

``windowing.diff.diff(spark, before, after) -> DiffResult`` (:mod:`~windowing.diff.result`);
the sides (:mod:`~windowing.diff.sides`: a history, a replay output), the pairing in one
shuffle (:mod:`~windowing.diff.compare`), the outputs (:mod:`~windowing.diff.outputs`:
Parquet tables, ``summary.json``, ``report.html`` from :mod:`~windowing.diff.report`), the
terminal summary (:mod:`~windowing.diff.text`), the command (:mod:`~windowing.diff.cli`).
See docs/diff.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DiffResult", "diff"]


def __getattr__(name: str) -> Any:
    """``diff`` and ``DiffResult``, imported when first asked for: the command line
    imports this package and should not import Spark before it runs."""
    if name in __all__:
        from windowing.diff import result  # noqa: PLC0415

        return getattr(result, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
