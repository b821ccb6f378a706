"""The pipeline model: the frozen values :func:`~windowing.config.loading.load_pipeline`
returns, their enums and defaults, and :meth:`Pipeline.fingerprint` (what decides the
carried state's meaning). Nothing here parses or validates; it imports nothing of rewindow's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class WindowType(str, Enum):
    TUMBLING = "tumbling-time-window"
    SLIDING = "sliding-time-window"
    SESSION = "session-window"


class WatermarkStrategy(str, Enum):
    MIN_EVENT_TIME = "MIN_EVENT_TIME"
    MAX_EVENT_TIME = "MAX_EVENT_TIME"


class Lateness(str, Enum):
    WINDOW_CLOSED = "WINDOW_CLOSED"
    BEFORE_WATERMARK = "BEFORE_WATERMARK"


class Clock(str, Enum):
    EVENT_TIME = "EVENT_TIME"
    PROCESSING_TIME = "PROCESSING_TIME"


class Trigger(str, Enum):
    AT_WINDOW_END = "atWindowEnd"
    AT_AGGREGATE = "atAggregate"


AGGREGATE_TYPES = (
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "distinct",
    "first",
    "last",
    "stddev_pop",
    "stddev_samp",
    "percentile",
)
#: Aggregates that need a numeric column.
NUMERIC_AGGREGATES = ("sum", "avg", "stddev_pop", "stddev_samp", "percentile")
#: The percentage of a ``percentile`` without one: the median.
DEFAULT_PERCENTAGE = 0.5

#: The largest ``windowSpan / windowSlide`` of a sliding window: each event belongs to about
#: that many windows (``1h`` over ``1ms``, a typo for ``1m``, is 3.6 million per event).
MAX_SLIDE_RATIO = 10_000

#: Batch interval used when ``source.batch`` is not configured.
DEFAULT_BATCH_INTERVAL_MS = 1_000


@dataclass(frozen=True)
class Aggregate:
    """One aggregate column of the output: ``type`` over ``column``, named ``name``."""

    type: str
    column: str | None
    name: str


@dataclass(frozen=True)
class PercentileAggregate(Aggregate):
    """A ``percentile`` given its ``percentage`` (in [0, 1]); a plain :class:`Aggregate` of
    type ``percentile`` is the median (:data:`DEFAULT_PERCENTAGE`). A subclass, so that
    every other aggregate (and its state fingerprint) stays what it was."""

    percentage: float = DEFAULT_PERCENTAGE


@dataclass(frozen=True)
class ColumnBinding:
    """How the YAML field ``field`` came to read input column ``column``.

    ``written`` is the field's text (``com.example.Event::getUserId``); ``via`` is
    ``"bean"`` (the bean convention made the column), ``"columns"`` (the ``columns:``
    map did) or None (the text is the column). ``role`` says which use it is
    (``keyExtractor``, ``eventTimeExtractor``, ``aggregate[i]``).
    """

    role: str
    field: str
    written: str
    column: str
    via: str | None = None


@dataclass(frozen=True)
class Source:
    arrival_time: str
    arrival_order: tuple[str, ...] = ()
    batch_column: str | None = None
    batch_interval_ms: int | None = DEFAULT_BATCH_INTERVAL_MS
    worker: str | None = None
    #: Where the events live: ``path`` (a folder or any URI Spark reads: ``file:``,
    #: ``s3a:``, ``gs:``, ``abfss:``, ``hdfs:``, ``viewfs:``) or ``table`` (a catalog
    #: table), one of them at most (neither: the caller names the input).
    path: str | None = None
    table: str | None = None
    #: Spark data source name: parquet (default), orc, json, csv, or one the cluster
    #: provides (delta, iceberg, ...).
    format: str = "parquet"
    #: The events' schema as a Spark DDL string; required for csv and json.
    schema: str | None = None
    #: A column of a Hive-style layout (``date=YYYY-MM-DD/``) holding the arrival day:
    #: partitions filter on it so that Spark reads only the day's files.
    partition_column: str | None = None
    #: Extra reader options (``header: true`` for csv, ...).
    options: tuple[tuple[str, str], ...] = ()
    #: ``maxFutureSkew``: an event whose event time is more than this ahead of its arrival
    #: time is rejected (reason ``FUTURE_SKEW``) before it moves any watermark. None: off
    #: (the live semantics, where such an event moves its key's and worker's watermarks).
    max_future_skew_ms: int | None = None
    #: ``derive``: (name, Spark SQL expression) pairs, in order, computed before the window;
    #: each may read the input's columns and the names derived before it.
    derive: tuple[tuple[str, str], ...] = ()
    #: ``filter``: a Spark SQL boolean expression over the input's columns and the derived
    #: names; a row it does not hold for (false or null) is filtered, before the window.
    filter: str | None = None

    #: Fields that say where events are, not what they mean (not in the fingerprint).
    LOCATION_FIELDS = ("path", "table", "format", "schema", "partition_column", "options")

    @property
    def derived_names(self) -> tuple[str, ...]:
        """The names ``derive`` gives, in order: columns of the events the window sees, not of the input."""
        return tuple(name for name, _ in self.derive)


@dataclass(frozen=True)
class Window:
    """Window shape and time configuration, all durations in milliseconds.

    Tumbling, span S, offset O: ``[N*S + O, (N+1)*S + O)``.
    Sliding, span S, slide L:   every ``[N*L + O, N*L + O + S)`` containing t.
    The offset satisfies ``0 <= O < S``.
    Session, gap G:             events closer than G merge; see docs/semantics.md.
    """

    type: WindowType
    span_ms: int | None = None
    slide_ms: int | None = None
    offset_ms: int = 0
    maximum_duration_ms: int | None = None
    #: ``keyExtractor``: the key's columns (one, several for a key of several columns, or
    #: none: one window per worker).
    keys: tuple[str, ...] = ()
    event_time: str | None = None
    watermark_strategy: WatermarkStrategy = WatermarkStrategy.MIN_EVENT_TIME
    delay_ms: int = 0
    idle_timeout_ms: int | None = None
    idle_clock: Clock = Clock.PROCESSING_TIME
    lateness: Lateness = Lateness.WINDOW_CLOSED

    @property
    def key_label(self) -> str:
        """The key's columns as a message names them: ``account`` or ``(account, region)``."""
        return self.keys[0] if len(self.keys) == 1 else f"({', '.join(self.keys)})"

    @property
    def gap_ms(self) -> int:
        """Session gap (the session window's idleTimeout)."""
        assert self.idle_timeout_ms is not None
        return self.idle_timeout_ms


#: Default of ``replay.heartbeat``: live VoltSP's pipeline heartbeat, 60 seconds.
DEFAULT_HEARTBEAT_MS = 60_000

#: Default of ``quality.maxRejectedShare``: one rejected row in a thousand.
DEFAULT_MAX_REJECTED_SHARE = 0.001


@dataclass(frozen=True)
class Quality:
    """``quality:``: how many rejected rows a partition may have before its checks block.

    Rejected rows are expected data (the replay routes them to ``rejected`` with the
    reason). While a partition's rejected rows are at most ``max_rejected_share`` of its
    input rows, the input checks that flag them warn; above it they block.
    """

    max_rejected_share: float = DEFAULT_MAX_REJECTED_SHARE


@dataclass(frozen=True)
class Pipeline:
    name: str
    source: Source
    window: Window
    aggregates: tuple[Aggregate, ...]
    triggers: tuple[Trigger, ...] = (Trigger.AT_WINDOW_END,)
    flush_at_end: bool = False
    version: int = 1
    quality: Quality = Quality()
    #: ``replay.heartbeat``: the live pipeline's wake-up interval; 0 turns it off.
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS
    #: Where extractor fields got their columns (for messages; not part of the meaning).
    column_bindings: tuple[ColumnBinding, ...] = field(default=(), compare=False)
    #: YAML fields of the live pipeline that a replay accepts and does not use
    #: (``emitter.session-window.exceptionHandler``, ``source.kafka``, ...).
    ignored_fields: tuple[str, ...] = field(default=(), compare=False)
    #: The ``reconcile:`` block (:class:`~windowing.config.reconcile.ReconcileSpec`): how to compare a
    #: replay with the live pipeline's output. Not part of the meaning of a replay.
    reconcile: Any = field(default=None, compare=False)
    #: The ``output.catalog`` block (:class:`windowing.config.outputs.CatalogSpec`): the catalog
    #: tables each committed partition is published to; None: not published. Not part of
    #: the meaning of a replay.
    catalog: Any = field(default=None, compare=False)
    #: The live pipeline's ``processors`` a replay does not run (``processors[0] (javascript)``),
    #: acknowledged by ``replay.liveProcessors: ignore``: the outputs stand before them.
    live_processors_ignored: tuple[str, ...] = field(default=(), compare=False)

    @property
    def idle_heartbeat_ms(self) -> int:
        """The heartbeat that flushes idle keys between batches (contract section 5.2):
        ``heartbeat_ms`` with an ``idleTimeout`` on the ``PROCESSING_TIME`` clock, else 0
        (the event-time clock does not move at a heartbeat, so it changes nothing)."""
        w = self.window
        if w.idle_timeout_ms is None or w.idle_clock is not Clock.PROCESSING_TIME:
            return 0
        return self.heartbeat_ms

    @property
    def id_columns(self) -> tuple[str, ...]:
        """The columns that tell one (worker, key) from another: the worker's, then the
        key's (a window belongs to one of each)."""
        return tuple(c for c in (self.source.worker, *self.window.keys) if c)

    @property
    def input_columns(self) -> tuple[str, ...]:
        """Every input column the configuration names, in a stable order (a name
        ``source.derive`` gives is not one: the replay computes it)."""
        cols: list[str] = [self.source.arrival_time, *self.source.arrival_order]
        for c in (self.source.batch_column, self.source.worker, *self.window.keys, self.window.event_time):
            if c:
                cols.append(c)
        cols += [a.column for a in self.aggregates if a.column]
        derived = set(self.source.derived_names)
        return tuple(c for c in dict.fromkeys(cols) if c not in derived)

    def fingerprint(self) -> str:
        """Hash of everything that decides the carried state's meaning and the outputs.

        State written under one fingerprint is refused under another: windows,
        watermarks and partial aggregates would silently mean something else. A history
        committed under another fingerprint is rebuilt as a new version
        (:mod:`windowing.storage.versions`); what only checks or compares a replay
        (``quality:``, ``reconcile:``, ``output.catalog``, the source's location) is left out.
        """
        semantic: dict[str, Any] = {
            "source": {
                k: v
                for k, v in asdict(self.source).items()
                if k not in Source.LOCATION_FIELDS
                # Off (None, no derivation) leaves the fingerprint what it was before the option existed.
                and not (k in ("max_future_skew_ms", "filter") and v is None)
                and not (k == "derive" and not v)
            },
            "window": _window_meaning(self.window),
            "aggregates": [asdict(a) for a in self.aggregates],
        }
        # The heartbeat changes the replay only where it flushes idle keys; elsewhere (and
        # at 0s, the behaviour before it existed) the fingerprint stays what it was, so state
        # carried by those pipelines stays valid.
        if self.idle_heartbeat_ms:
            semantic["heartbeat_ms"] = self.idle_heartbeat_ms
        # The triggers decide which rows are emitted (snapshots at each aggregate), not the
        # state: part of what a version of the history holds. The default leaves the
        # fingerprint what it was before they counted.
        if self.triggers != (Trigger.AT_WINDOW_END,):
            semantic["triggers"] = sorted(t.value for t in self.triggers)
        blob = json.dumps(semantic, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _window_meaning(window: Window) -> dict[str, Any]:
    """The window's fields for the fingerprint: a key of one column (or none) as the one
    ``key`` field it was before keys of several columns existed, so state carried by those
    pipelines stays valid."""
    d = asdict(window)
    keys = d.pop("keys")
    d["key"] = keys[0] if len(keys) == 1 else (list(keys) if keys else None)
    return d
