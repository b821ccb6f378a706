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

A replay's metrics as a whole are a :class:`ReplayMetrics` (``ReplayResult.metrics``):
typed fields, and :meth:`ReplayMetrics.to_dict` for the JSON form stored in
``metrics.json`` and in commit records (:meth:`ReplayMetrics.from_dict` reads it back).

A replay covers one stretch of history (one partition): a "counter" here counts what
that replay did, it does not run on across partitions; the gauge
(``voltsp_aggregations_unique_keys_total``) is its value at the end of the replay.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from typing import Any, Callable, KeysView, Mapping

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
COUNTERS = (
    EVENTS,
    LATE_PAIRS,
    LATE_EVENTS,
    WINDOWS_CREATED,
    *[CLOSED_PREFIX + r for r in CLOSE_REASONS],
    SNAPSHOTS,
    IDLE_KEYS_REMOVED,
    KEYS_SEEN,
    KEYS_HELD,
    OPEN_WINDOWS,
)


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
        "voltsp_aggregations_unique_keys_total",
        "gauge",
        "Current number of unique aggregate keys held by a local window.",
        "keys holding at least one open window at the end of the replay (keys_held)",
        lambda f: f["keys_held"],
    ),
    VoltspMetric(
        "voltsp_aggregations_created_total",
        "counter",
        "Number of aggregate windows created.",
        "windows opened by an accepted event (windows_created)",
        lambda f: f["windows_created"],
    ),
    VoltspMetric(
        "voltsp_aggregations_emitted_total",
        "counter",
        "Number of aggregate snapshots emitted by a local window.",
        "rows of aggregates: closed windows emitted at window end plus atAggregate snapshots "
        "(windows_emitted + snapshots_emitted)",
        lambda f: f["windows_emitted"] + f["snapshots_emitted"],
    ),
    VoltspMetric(
        "voltsp_emitted_total",
        "counter",
        "Number of events emitted by a local window. This can be errors, original events, late events, etc.",
        "rows the window emits: rows of aggregates plus rows of late_events "
        "(windows_emitted + snapshots_emitted + late_event_windows)",
        lambda f: f["windows_emitted"] + f["snapshots_emitted"] + f["late_event_windows"],
    ),
    VoltspMetric(
        "voltsp_idle_keys_total",
        "counter",
        "Number of idle aggregate keys removed by a local window.",
        "idle flushes: a key with open windows found idle, its windows emitted and removed (idle_keys_removed)",
        lambda f: f["idle_keys_removed"],
    ),
    VoltspMetric(
        "voltsp_late_event_total",
        "counter",
        "Number of late events observed by a local window.",
        "late events, each once however many windows it missed (late_events)",
        lambda f: f["late_events"],
    ),
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


def render_prometheus(metrics: ReplayMetrics | Mapping[str, Any]) -> str:
    """``metrics.prom``: the ``voltsp`` block of ``metrics`` in Prometheus' text exposition
    format (version 0.0.4), one ``# HELP`` and ``# TYPE`` line per metric, then its total
    (labelled ``pipeline`` only) and one sample per worker (labels ``pipeline`` and
    ``worker``). Ends with a newline, as the format requires.

    A sum over the ``worker``-labelled samples equals the total; select them with
    ``{worker!=""}`` to leave the total out.
    """
    if isinstance(metrics, ReplayMetrics):
        metrics = metrics.to_dict()
    pipeline = _label_value(str(metrics.get("pipeline", "")))
    block = metrics.get("voltsp") or {}
    lines: list[str] = []
    for m in VOLTSP_METRICS:
        entry = block.get(m.name, {"total": 0, "by_worker": {}})
        lines.append(f"# HELP {m.name} {_help_text(m.help)} Replay: {_help_text(m.meaning)}.")
        lines.append(f"# TYPE {m.name} {m.type}")
        lines.append(f'{m.name}{{pipeline="{pipeline}"}} {int(entry["total"])}')
        for w in sorted(entry.get("by_worker", {}), key=_worker_order):
            lines.append(f'{m.name}{{pipeline="{pipeline}",worker="{_label_value(w)}"}} {int(entry["by_worker"][w])}')
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- a replay's metrics


@dataclass(frozen=True)
class LatenessPercentiles:
    """p50, p90, p99 and max of ``lateness_ms`` over the rows of ``late_events`` (all None
    without late events)."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"p50": self.p50, "p90": self.p90, "p99": self.p99, "max": self.max}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> LatenessPercentiles:
        d = d or {}
        return cls(p50=d.get("p50"), p90=d.get("p90"), p99=d.get("p99"), max=d.get("max"))


@dataclass(frozen=True)
class VoltspValue:
    """One VoltSP window metric of a replay: its value in total and per worker label."""

    total: int = 0
    by_worker: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "by_worker": dict(self.by_worker)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> VoltspValue:
        d = d or {}
        return cls(total=d.get("total", 0), by_worker=dict(d.get("by_worker") or {}))


#: The figures of :func:`figures` a :class:`ReplayMetrics` holds as they are (all but
#: ``accepted_events``, which it reports as ``input_rows - filtered_rows - rejected_rows``).
_FIGURES = (
    "late_events",
    "late_event_windows",
    "windows_created",
    "windows_closed",
    "closed_by_reason",
    "windows_emitted",
    "emitted_by_reason",
    "snapshots_emitted",
    "idle_keys_removed",
    "unique_keys",
    "keys_held",
    "open_windows",
)


@dataclass(frozen=True, eq=False)
class ReplayMetrics:
    """A replay's metrics (docs/semantics.md section 10, "Metrics"): ``ReplayResult.metrics``.

    Every figure is a typed field; :meth:`to_dict` is the JSON form written to
    ``metrics.json`` and commit records (the keys and values of the table in
    docs/semantics.md), :meth:`from_dict` reads it back, a key missing (a record written
    by an older version) taking its default. Fields are in the order of the JSON keys.

    **Compatibility path**: for code and tests written when the metrics were a dict,
    ``m["input_rows"]``, ``m.get("voltsp")``, ``m.keys()``, ``dict(m)``, ``{**m}`` and
    ``m == {...}`` work on the JSON form (:meth:`to_dict`): nested figures come back as
    dicts. New code reads the attributes.
    """

    pipeline: str = ""
    input_rows: int = 0
    rejected_rows: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    #: Rows ``source.filter`` dropped before the window (its condition false or null): not
    #: rejected, not replayed. ``input_rows = filtered_rows + rejected_rows + accepted events``.
    filtered_rows: int = 0
    #: Late events, each counted once however many windows it missed.
    late_events: int = 0
    #: Late (event, window) pairs: the rows of ``late_events``.
    late_event_windows: int = 0
    windows_created: int = 0
    windows_closed: int = 0
    closed_by_reason: dict[str, int] = field(default_factory=dict)
    windows_emitted: int = 0
    emitted_by_reason: dict[str, int] = field(default_factory=dict)
    snapshots_emitted: int = 0
    idle_keys_removed: int = 0
    unique_keys: int = 0
    keys_held: int = 0
    open_windows: int = 0
    #: The highest worker watermark at the end (ISO-8601, UTC); None without one.
    watermark_reached: str | None = None
    lateness_ms_percentiles: LatenessPercentiles = field(default_factory=LatenessPercentiles)
    #: VoltSP's window metrics by Prometheus name (:data:`VOLTSP_METRICS`).
    voltsp: dict[str, VoltspValue] = field(default_factory=dict)
    #: The live pipeline's processors the replay did not run (``replay.liveProcessors:
    #: ignore``): the outputs stand before them.
    live_processors_ignored: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        pipeline: str,
        total: Mapping[str, Any],
        rejected_by_reason: Mapping[str, int],
        watermark_reached: str | None,
        lateness: LatenessPercentiles,
        by_worker: Mapping[str, Mapping[str, Any]],
        filtered_rows: int = 0,
        live_processors_ignored: Any = (),
    ) -> ReplayMetrics:
        """The metrics of a replay from the :func:`figures` of all its workers (``total``)
        and of each worker (``by_worker``, by worker label), its rejected rows per reason,
        the watermark reached and the lateness percentiles."""
        rejected = sum(rejected_by_reason.values())
        block = voltsp_block(total, by_worker)
        return cls(
            pipeline=pipeline,
            input_rows=total["accepted_events"] + rejected + filtered_rows,
            rejected_rows=rejected,
            rejected_by_reason=dict(sorted(rejected_by_reason.items())),
            filtered_rows=filtered_rows,
            **{k: total[k] for k in _FIGURES},
            watermark_reached=watermark_reached,
            lateness_ms_percentiles=lateness,
            voltsp={name: VoltspValue.from_dict(v) for name, v in block.items()},
            live_processors_ignored=list(live_processors_ignored),
        )

    @property
    def accepted_events(self) -> int:
        """Events neither filtered nor rejected: ``input_rows - filtered_rows - rejected_rows``."""
        return self.input_rows - self.filtered_rows - self.rejected_rows

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``metrics.json``, the commit record's ``metrics``, byte for byte
        what the dict of earlier versions held (same keys, order and values)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, LatenessPercentiles):
                value = value.to_dict()
            elif f.name == "voltsp":
                value = {name: v.to_dict() for name, v in value.items()}
            elif isinstance(value, dict):
                value = dict(value)
            elif isinstance(value, list):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ReplayMetrics:
        """The metrics of their JSON form (:meth:`to_dict`), as stored by any version: a
        missing key takes the field's default (0, empty, None); unknown keys are left out."""
        d = d or {}
        known = {f.name for f in fields(cls)} - {"lateness_ms_percentiles", "voltsp"}
        plain: dict[str, Any] = {
            k: (dict(v) if isinstance(v, Mapping) else list(v) if isinstance(v, list) else v)
            for k, v in d.items()
            if k in known
        }
        return cls(
            **plain,
            lateness_ms_percentiles=LatenessPercentiles.from_dict(d.get("lateness_ms_percentiles")),
            voltsp={name: VoltspValue.from_dict(v) for name, v in (d.get("voltsp") or {}).items()},
        )

    # ----------------------------------------------------------- the compatibility path

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def keys(self) -> KeysView[str]:
        return self.to_dict().keys()

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ReplayMetrics):
            return self.to_dict() == other.to_dict()
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    #: Not hashable: it holds dicts (as the dict it replaces).
    __hash__ = None  # type: ignore[assignment]
