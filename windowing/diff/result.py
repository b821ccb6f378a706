"""``diff(spark, before, after)``: two versions of a history (or two replay outputs)
compared, per partition and in total (:class:`DiffResult`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from windowing.diff import compare
from windowing.diff.compare import CATEGORIES, DIFFERING, IN_PARTITION_ONLY_IN_AFTER, IN_PARTITION_ONLY_IN_BEFORE
from windowing.diff.sides import DATASETS, HISTORY, Side, bound_key, open_side
from windowing.storage.errors import InputError
from windowing.storage.lake import display

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: A partition's status.
BOTH = "in both"
ONLY_BEFORE = "only in BEFORE: not yet rebuilt in AFTER"
ONLY_AFTER = "only in AFTER: not in BEFORE"


@dataclass(eq=False)
class DiffResult:
    """What :func:`diff` found.

    ``figures``: the JSON-able summary (``equal``, both sides, the columns added, removed
    and retyped per dataset, ``total`` and ``partitions``: per dataset the rows of each
    side and of each category, and per changed column its rows and largest difference);
    ``tables``: per dataset the differing rows (:func:`windowing.diff.compare.differences`),
    held until :meth:`unpersist` (or the end of a ``with diff(...) as result:`` block)."""

    before: Side
    after: Side
    figures: dict[str, Any]
    tables: dict[str, DataFrame]
    _held: list[DataFrame] = field(default_factory=list, repr=False)

    @property
    def equal(self) -> bool:
        return bool(self.figures["equal"])

    def summary(self) -> str:
        """A few lines for a terminal (or a version's record): the verdict, the columns
        added and removed, the totals, then one line per partition that differs."""
        from windowing.diff.text import format_summary  # noqa: PLC0415

        return format_summary(self.figures)

    def unpersist(self) -> None:
        for df in self._held:
            df.unpersist()
        self._held.clear()

    def __enter__(self) -> "DiffResult":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpersist()


def diff(
    spark: SparkSession,
    before: str | Side,
    after: str | Side,
    pipeline: str | None = None,
    first: str | None = None,
    last: str | None = None,
) -> DiffResult:
    """Compare ``before`` with ``after`` (paths, or :class:`Side` s from
    :func:`windowing.diff.sides.open_side`): histories partition by partition, a replay
    output (or a history against one) as a whole. ``pipeline`` picks the pipeline of an
    output root holding several; ``first``/``last`` (``2024-01-01``, ``2024-01-01T05``)
    keep only those partitions of a history."""
    started = time.monotonic()
    b = before if isinstance(before, Side) else open_side(spark, before, pipeline, "BEFORE")
    a = after if isinstance(after, Side) else open_side(spark, after, pipeline, "AFTER")
    if (first or last) and not (b.partitioned and a.partitioned):
        raise ValueError("--from/--to: both sides must be histories (a replay output has no partitions)")
    b, a = b.within(bound_key(first), bound_key(last)), a.within(bound_key(first), bound_key(last))
    for side, option in ((b, "BEFORE"), (a, "AFTER")):
        if not side.runs:
            raise InputError(
                f"{option} {side.describe()}: no partition in --from {first or '...'} --to {last or '...'}"
            )
    partitioned = b.kind == HISTORY and a.kind == HISTORY and b.grain == a.grain
    b_keys, a_keys = set(b.keys), set(a.keys)
    only_before = sorted(b_keys - a_keys) if partitioned else []
    only_after = sorted(a_keys - b_keys) if partitioned else []
    b_frames, a_frames = b.frames(spark, partitioned), a.frames(spark, partitioned)
    held: list[DataFrame] = []
    tables: dict[str, DataFrame] = {}
    counted: dict[str, dict[str | None, dict[str, Any]]] = {}
    columns: dict[str, Any] = {}
    layouts: dict[str, compare.Layout] = {}
    try:
        for name in DATASETS:
            lay = compare.layout(name, b_frames[name], a_frames[name])
            layouts[name] = lay
            pairs = compare.paired(lay, b_frames[name], a_frames[name], only_before, only_after)
            held.append(pairs)
            counted[name] = compare.count(lay, pairs)
            tables[name] = compare.differences(lay, pairs)
            columns[name] = {**lay.columns(), "identity": lay.identity}
    except BaseException:
        for df in held:
            df.unpersist()
        raise
    keys = sorted(b_keys | a_keys) if partitioned else []
    parts = []
    for key in keys:
        status = ONLY_BEFORE if key in only_before else ONLY_AFTER if key in only_after else BOTH
        parts.append({"partition_key": key, "status": status, **{n: _block(counted[n].get(key)) for n in DATASETS}})
    total = {n: _merge([_block(v) for v in counted[n].values()]) for n in DATASETS}
    differing = sum(total[n][c] for n in DATASETS for c in DIFFERING)
    columns_differ = any(columns[n]["added"] or columns[n]["removed"] or columns[n]["retyped"] for n in DATASETS)
    figures = {
        "pipeline": a.pipeline or b.pipeline,
        "before": _side(b),
        "after": _side(a),
        "partitioned": partitioned,
        "equal": not differing and not columns_differ and not only_before and not only_after,
        "partitions_only_in_before": only_before,
        "partitions_only_in_after": only_after,
        "columns": columns,
        "total": total,
        "partitions": parts,
        "seconds": round(time.monotonic() - started, 3),
    }
    return DiffResult(b, a, figures, tables, held)


def _side(s: Side) -> dict[str, Any]:
    return {
        "location": display(s.location),
        "kind": s.kind,
        "pipeline": s.pipeline,
        "grain": s.grain,
        "partitions": s.keys,
    }


def _block(d: dict[str, Any] | None) -> dict[str, Any]:
    d = d or {}
    out: dict[str, Any] = {"before_rows": int(d.get("before_rows", 0)), "after_rows": int(d.get("after_rows", 0))}
    out.update({c: int(d.get(c, 0)) for c in CATEGORIES})
    out["changed_columns"] = dict(d.get("changed_columns") or {})
    return out


def _merge(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    out = _block(None)
    for blk in blocks:
        for k, v in blk.items():
            if k == "changed_columns":
                for c, fig in v.items():
                    mine = out["changed_columns"].setdefault(c, {"rows": 0, "largest_difference": None})
                    mine["rows"] += fig["rows"]
                    big = [x for x in (mine["largest_difference"], fig["largest_difference"]) if x is not None]
                    mine["largest_difference"] = max(big) if big else None
            else:
                out[k] += v
    out["changed_columns"] = dict(sorted(out["changed_columns"].items()))
    return out


__all__ = ["DiffResult", "diff", "IN_PARTITION_ONLY_IN_AFTER", "IN_PARTITION_ONLY_IN_BEFORE"]
