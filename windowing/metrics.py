"""A replay's figures: what the kernel counts, the metrics built from it, and VoltSP's
window metrics under their Prometheus names (docs/semantics.md, section 10 "Metrics").

Three layers, all plain values (nothing here imports Spark):

* **Counters** (:data:`COUNTERS`): what each kernel task counts per worker, for the keys
  it replays. Every key is in exactly one task, so the driver sums a counter over tasks,
  per worker and in total.
* **Figures** (:func:`figures`): the metrics of one scope (a worker, or the whole replay)
  derived from its counters: windows closed, emitted, late events and pairs, keys seen
  and held, ...
* **VoltSP metrics** (:data:`VOLTSP_METRICS`): each metric of VoltSP's ``WindowMetric``
  mapped to one figure, written to ``metrics.json`` (the ``voltsp`` block,
  :func:`voltsp_block`) and as Prometheus text (``metrics.prom``, :func:`render_prometheus`).

A replay covers one stretch of history (one partition): a "counter" here counts what
that replay did, it does not run on across partitions; the gauge
(``voltsp_aggregations_unique_keys_total``) is its value at the end of the replay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Callable, Mapping

from windowing.contract import CLOSE_REASONS

# --------------------------------------------------------------------------- counters

#: Accepted events (not rejected) of the task's keys.
EVENTS = "events"
#: Late (event, window) pairs: one row each in ``late_events``.
LATE_PAIRS = "late"
#: Late events, each counted once however many windows it missed.
LATE_EVENTS = "late_events"
#: Windows opened by an accepted event (a window re-opened after an idle flush counts again).
WINDOWS_CREATED = "windows_created"
#: Prefix of the windows closed per reason (``closed_WATERMARK``, ...), whatever the triggers.
CLOSED_PREFIX = "closed_"
#: ``atAggregate`` snapshot rows.
SNAPSHOTS = "snapshots"
#: Idle flushes: a key with open windows found idle, its windows emitted and removed.
IDLE_KEYS_REMOVED = "idle_keys_removed"
#: Keys with at least one accepted event in this replay.
KEYS_SEEN = "unique_keys"
#: Keys holding at least one open window at the end of the replay.
KEYS_HELD = "keys_held"
#: Windows open at the end of the replay (carried in the state).
OPEN_WINDOWS = "open_windows"

#: Every counter a kernel task reports per worker.
COUNTERS = (EVENTS, LATE_PAIRS, LATE_EVENTS, WINDOWS_CREATED, *[CLOSED_PREFIX + r for r in CLOSE_REASONS],
            SNAPSHOTS, IDLE_KEYS_REMOVED, KEYS_SEEN, KEYS_HELD, OPEN_WINDOWS)


def worker_label(value: Any) -> str:
    """The text of a worker value, as a label and a JSON key: integers and strings as they
    are (no worker column: the one worker ``0``), a null worker ``null``, booleans
    ``true``/``false``, floats by ``repr`` (``-0.0`` and ``0.0`` are two workers, as two
    keys), dates and timestamps in ISO-8601."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


# --------------------------------------------------------------------------- figures


def figures(counters: Mapping[str, int], at_window_end: bool) -> dict[str, Any]:
    """The metrics of one scope (a worker, or all of them) from its summed counters.

    ``at_window_end``: the pipeline has the ``atWindowEnd`` trigger, so every closed
    window is also a row of ``aggregates`` (without it, windows still close, and count
    as closed, but are not written).
    """
    def c(name: str) -> int:
        return int(counters.get(name, 0))

    closed = {r: c(CLOSED_PREFIX + r) for r in CLOSE_REASONS if c(CLOSED_PREFIX + r)}
    windows_closed = sum(closed.values())
    emitted = dict(closed) if at_window_end else {}
    return {
        "accepted_events": c(EVENTS),
        "late_events": c(LATE_EVENTS),
        "late_event_windows": c(LATE_PAIRS),
        "windows_created": c(WINDOWS_CREATED),
        "windows_closed": windows_closed,
        "closed_by_reason": closed,
        "windows_emitted": sum(emitted.values()),
        "emitted_by_reason": emitted,
        "snapshots_emitted": c(SNAPSHOTS),
        "idle_keys_removed": c(IDLE_KEYS_REMOVED),
        "unique_keys": c(KEYS_SEEN),
        "keys_held": c(KEYS_HELD),
        "open_windows": c(OPEN_WINDOWS),
    }


# --------------------------------------------------------------------------- VoltSP


@dataclass(frozen=True)
class VoltspMetric:
    """One of VoltSP's window metrics (``org.voltdb.stream.plugin.window.WindowMetric``):
    its Prometheus name, type and help (VoltSP's description), and what a replay reports
    for it (``meaning``, computed from a scope's :func:`figures` by ``value``)."""

    name: str
    type: str
    help: str
    meaning: str
    value: Callable[[Mapping[str, Any]], int]


VOLTSP_METRICS: tuple[VoltspMetric, ...] = (
    VoltspMetric(
        "voltsp_aggregations_unique_keys_total", "gauge",
        "Current number of unique aggregate keys held by a local window.",
        "keys holding at least one open window at the end of the replay (keys_held)",
        lambda f: f["keys_held"]),
    VoltspMetric(
        "voltsp_aggregations_created_total", "counter",
        "Number of aggregate windows created.",
        "windows opened by an accepted event (windows_created)",
        lambda f: f["windows_created"]),
    VoltspMetric(
        "voltsp_aggregations_emitted_total", "counter",
        "Number of aggregate snapshots emitted by a local window.",
        "rows of aggregates: closed windows emitted at window end plus atAggregate snapshots "
        "(windows_emitted + snapshots_emitted)",
        lambda f: f["windows_emitted"] + f["snapshots_emitted"]),
    VoltspMetric(
        "voltsp_emitted_total", "counter",
        "Number of events emitted by a local window. This can be errors, original events, late events, etc.",
        "rows the window emits: rows of aggregates plus rows of late_events "
        "(windows_emitted + snapshots_emitted + late_event_windows)",
        lambda f: f["windows_emitted"] + f["snapshots_emitted"] + f["late_event_windows"]),
    VoltspMetric(
        "voltsp_idle_keys_total", "counter",
        "Number of idle aggregate keys removed by a local window.",
        "idle flushes: a key with open windows found idle, its windows emitted and removed (idle_keys_removed)",
        lambda f: f["idle_keys_removed"]),
    VoltspMetric(
        "voltsp_late_event_total", "counter",
        "Number of late events observed by a local window.",
        "late events, each once however many windows it missed (late_events)",
        lambda f: f["late_events"]),
)


def voltsp_block(total: Mapping[str, Any], by_worker: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``metrics.json``'s ``voltsp`` block: per VoltSP metric, its value for the whole
    replay (``total``) and per worker label (``by_worker``), from the scopes' figures."""
    return {
        m.name: {
            "total": int(m.value(total)),
            "by_worker": {w: int(m.value(f)) for w, f in sorted(by_worker.items())},
        }
        for m in VOLTSP_METRICS
    }


def _label_value(text: str) -> str:
    """A label value escaped for the text exposition format (backslash, quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _help_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _worker_order(label: str) -> tuple[int, int, str]:
    """Workers in numeric order when they are integers (``2`` before ``10``), else by text."""
    return (0, int(label), "") if re.fullmatch(r"-?\d+", label) else (1, 0, label)


def render_prometheus(metrics: Mapping[str, Any]) -> str:
    """``metrics.prom``: the ``voltsp`` block of ``metrics`` in Prometheus' text exposition
    format (version 0.0.4), one ``# HELP`` and ``# TYPE`` line per metric, then its total
    (labelled ``pipeline`` only) and one sample per worker (labels ``pipeline`` and
    ``worker``). Ends with a newline, as the format requires.

    A sum over the ``worker``-labelled samples equals the total; select them with
    ``{worker!=""}`` to leave the total out.
    """
    pipeline = _label_value(str(metrics.get("pipeline", "")))
    block = metrics.get("voltsp") or {}
    lines: list[str] = []
    for m in VOLTSP_METRICS:
        entry = block.get(m.name, {"total": 0, "by_worker": {}})
        lines.append(f"# HELP {m.name} {_help_text(m.help)} Replay: {_help_text(m.meaning)}.")
        lines.append(f"# TYPE {m.name} {m.type}")
        lines.append(f'{m.name}{{pipeline="{pipeline}"}} {int(entry["total"])}')
        for w in sorted(entry.get("by_worker", {}), key=_worker_order):
            lines.append(f'{m.name}{{pipeline="{pipeline}",worker="{_label_value(w)}"}} '
                         f'{int(entry["by_worker"][w])}')
    return "\n".join(lines) + "\n"
