"""The diff's summary for a terminal (and a version's record): plain text from the figures."""

from __future__ import annotations

from typing import Any, Mapping

from windowing.diff.compare import CHANGED, IN_PARTITION_ONLY_IN_AFTER, IN_PARTITION_ONLY_IN_BEFORE, PARTITION_COLUMN
from windowing.diff.compare import ONLY_IN_AFTER as _OA
from windowing.diff.compare import ONLY_IN_BEFORE as _OB

#: The datasets by the names the summary gives them.
NOUNS = {"aggregates": "windows", "late_events": "late events", "rejected": "rejected rows"}


def largest(column: str, value: float | None, time_like: bool = False) -> str:
    """A changed column's largest difference, for people."""
    if value is None:
        return ""
    if column == PARTITION_COLUMN:
        return ""
    if time_like:
        return f"largest {value / 1000:g} s"
    return f"largest {value:.6g}"


def changed_text(block: Mapping[str, Any]) -> str:
    """``count 12 (largest 3), emit_time 40 (largest 5 s)``."""
    parts = []
    for c, fig in block["changed_columns"].items():
        big = largest(c, fig["largest_difference"], c.startswith("emit_time") or c in ("emit_watermark", "watermark"))
        parts.append(f"{c} {fig['rows']:,}" + (f" ({big})" if big else ""))
    return ", ".join(parts)


def block_text(name: str, block: Mapping[str, Any]) -> str:
    """One dataset's counts: ``windows: 592 before, 590 after; 10 changed, 2 only in BEFORE, 0 only in AFTER``."""
    line = (
        f"{NOUNS[name]}: {block['before_rows']:,} before, {block['after_rows']:,} after; "
        f"{block[CHANGED]:,} changed, {block[_OB]:,} only in BEFORE, {block[_OA]:,} only in AFTER"
    )
    unpaired = block[IN_PARTITION_ONLY_IN_BEFORE] + block[IN_PARTITION_ONLY_IN_AFTER]
    if unpaired:
        line += f" ({unpaired:,} in partitions only one side has, not compared)"
    return line


def differs(block: Mapping[str, Any]) -> bool:
    return bool(block[CHANGED] or block[_OB] or block[_OA])


def format_summary(f: Mapping[str, Any]) -> str:
    verdict = "EQUAL" if f["equal"] else "DIFFERENT"
    b, a = f["before"], f["after"]

    def side(s: Mapping[str, Any]) -> str:
        n = len(s["partitions"])
        return f"{s['location']} ({s['kind']}" + (f", {n} partition(s))" if s["kind"] == "history" else ")")

    lines = [
        f"diff {f.get('pipeline') or ''!s}: BEFORE {side(b)} against AFTER {side(a)}: {verdict}".replace("  ", " ")
    ]
    if not f["partitioned"] and (b["kind"] == "history" or a["kind"] == "history"):
        lines.append("  compared as a whole (the sides' partitions do not line up)")
    for name, cols in f["columns"].items():
        for what in ("added", "removed"):
            if cols[what]:
                lines.append(f"  columns {what} in {name}: {', '.join(cols[what])}")
        for c, (t1, t2) in cols["retyped"].items():
            lines.append(f"  column {c} of {name}: {t1} in BEFORE, {t2} in AFTER")
    for name, block in f["total"].items():
        lines.append("  " + block_text(name, block))
        if block["changed_columns"]:
            lines.append(f"    changed columns: {changed_text(block)}")
    for p in f["partitions"]:
        if p["status"] != "in both":
            rows = p["aggregates"]["before_rows"] or p["aggregates"]["after_rows"]
            lines.append(f"  partition {p['partition_key']}: {p['status']} ({rows:,} windows)")
            continue
        diffs = [f"{NOUNS[n]} {_short(p[n])}" for n in NOUNS if differs(p[n])]
        if diffs:
            lines.append(f"  partition {p['partition_key']}: " + "; ".join(diffs))
    return "\n".join(lines)


def _short(block: Mapping[str, Any]) -> str:
    return f"{block[CHANGED]:,} changed, {block[_OB]:,} only in BEFORE, {block[_OA]:,} only in AFTER"
