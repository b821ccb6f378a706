"""A reconcile run's figures as a few lines for a terminal (:func:`format_summary`)."""

from __future__ import annotations

from typing import Any, Mapping


def format_summary(figures: Mapping[str, Any]) -> str:
    """A few lines for a terminal: the total, then one line per partition."""

    def line(d: Mapping[str, Any]) -> str:
        return (
            f"{d['compared']:,} compared, {d['match']:,} match ({100 * d['match_rate']:.2f} %), "
            f"{d['value_mismatch']:,} value mismatch, {d['missing_in_replay']:,} missing in replay, "
            f"{d['extra_in_replay']:,} extra in replay"
        )

    verdict = "passed" if figures["passed"] else "FAILED"
    out = [f"reconcile {figures['pipeline']!r}: {line(figures)}; minimum {100 * figures['min_match']:.2f} %: {verdict}"]
    mismatched = figures["compared"] - figures["match"]
    if mismatched:
        by = ", ".join(f"{k} {v:,}" for k, v in figures["explained_by"].items() if v)
        out.append(f"  explained: {figures['explained']:,} of {mismatched:,} mismatches" + (f" ({by})" if by else ""))
    for p in figures["partitions"]:
        out.append(f"  {p['partition_key']}: {line(p)}")
    if figures.get("live_rows_outside_partitions"):
        out.append(f"  {figures['live_rows_outside_partitions']:,} live rows lie outside the partitions (not compared)")
    return "\n".join(out)
