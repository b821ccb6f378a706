"""A lateness run's figures as text: the recommendation and the curves for a terminal
(:func:`format_figures`), the curves as a markdown table (:func:`curve_markdown`, the
Dagster asset's metadata).
"""

from __future__ import annotations

from typing import Any, Mapping

from windowing.durations import format_duration_ms, human_duration


def format_figures(figures: Mapping[str, Any]) -> str:
    """The recommendation and a short curve table, for a terminal."""
    cfg = figures["configured"]
    cr = figures["configured_replay"]
    out = [
        f"lateness of pipeline {figures['pipeline']!r}: {figures['accepted_events']:,} events, configured "
        f"{cfg['strategy']} {cfg['lateness']} delay {format_duration_ms(cfg['delay_ms'])}: "
        f"{cr['late_events']:,} late ({100 * cr['late_share']:.4f} %), "
        f"{figures['cost']['windows']:,} windows missed events"
    ]
    for r in figures["recommendations"]:
        listed = (
            f"; of --delays, {format_duration_ms(r['listed_delay_ms'])} "
            f"(late {100 * r['listed_late_share']:.4f} %, "
            f"latency p50 {_ms_text(r['listed_latency_p50_ms'])}, p99 {_ms_text(r['listed_latency_p99_ms'])})"
            if r["listed_delay_ms"] is not None
            else "; no listed delay is enough"
        )
        out.append(
            f"recommendation {r['strategy']} {r['lateness']}: delay >= {human_duration(r['smallest_delay_ms'])} "
            f"keeps late events <= {100 * r['target_late']:.4f} % ({100 * r['late_share_at_smallest']:.4f} %)" + listed
        )
    out.append(
        f"{'strategy':<15} {'lateness':<16} {'delay':>7} {'late':>10} {'late %':>9} {'p50 latency':>12} "
        f"{'p99 latency':>12} {'IDLE':>8}"
    )
    for r in figures["curves"]:
        out.append(
            f"{r['strategy']:<15} {r['lateness']:<16} {format_duration_ms(r['delay_ms']):>7} "
            f"{r['late_events']:>10,} {100 * r['late_share']:>8.4f}% {_ms_text(r['latency_p50_ms']):>12} "
            f"{_ms_text(r['latency_p99_ms']):>12} {r['closed_idle']:>8,}"
            + ("  (configured)" if r["configured"] else "")
        )
    fs = figures["future_skew"]
    if fs.get("threshold_ms") is not None:
        out.append(
            f"future skew > {format_duration_ms(fs['threshold_ms'])}: {fs['skewed_events']:,} events, "
            f"causing {fs['late_events_caused']:,} late events ({fs['late_event_windows_caused']:,} pairs)"
        )
    return "\n".join(out)


def curve_markdown(figures: Mapping[str, Any]) -> str:
    """The curves at the listed delays and the recommendations, as a markdown table."""
    lines = [
        "| strategy | lateness | delay | late events | late share | latency p50 | latency p99 | IDLE closes |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in figures["curves"]:
        lines.append(
            f"| {r['strategy']} | {r['lateness']} | {format_duration_ms(r['delay_ms'])}"
            f"{' (configured)' if r['configured'] else ''} | {r['late_events']:,} | "
            f"{100 * r['late_share']:.4f} % | {_ms_text(r['latency_p50_ms'])} | "
            f"{_ms_text(r['latency_p99_ms'])} | {r['closed_idle']:,} |"
        )
    lines.append("")
    for r in figures["recommendations"]:
        lines.append(
            f"- **{r['strategy']} {r['lateness']}**: late events <= {100 * r['target_late']:.4g} % needs "
            f"delay >= **{human_duration(r['smallest_delay_ms'])}**"
        )
    return "\n".join(lines)


def _ms_text(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.1f}s" if abs(v) >= 1000 else f"{v:.0f}ms"
