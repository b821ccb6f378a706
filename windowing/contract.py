"""The shared vocabulary of a replay's outputs, in one place (issue 14, item 4; issue 30).

What several modules used to spell out as their own strings: the output names, why a
window is emitted, why a row is rejected, the kinds of state row, the columns the
outputs carry and the engine adds. Plain values only: this module imports nothing of
rewindow's (and no third-party package), so any layer may import it, the configuration
included. The outputs' Arrow schemas, which depend on a pipeline, are
:mod:`windowing.config.arrow_schemas`.

The kernel (``windowing/kernel``) codes emission reasons as the integers below and
names its carried columns with ``STATE_PREFIX``.
"""

from __future__ import annotations

from typing import Final

# --------------------------------------------------------------------------- outputs

#: The datasets a replay writes, in the order they are committed.
OUTPUTS: Final = ("aggregates", "late_events", "rejected", "state")

# --------------------------------------------------------------------------- emit reasons

#: Emission reasons as the kernel codes them (``OPEN``: not emitted yet).
OPEN, WATERMARK, IDLE, MAX_DURATION, END_OF_INPUT, AGGREGATE = 0, 1, 2, 3, 4, 5
#: ``emit_reason`` of an output row: the watermark passed the window's end.
WATERMARK_REASON: Final = "WATERMARK"
#: ``emit_reason``: the key went idle (``idleTimeout``).
IDLE_REASON: Final = "IDLE"
#: ``emit_reason``: a session reached its ``maximumDuration``.
MAX_DURATION_REASON: Final = "MAX_DURATION"
#: ``emit_reason``: the replay ended (``replay.flushAtEnd``).
END_OF_INPUT_REASON: Final = "END_OF_INPUT"
#: ``emit_reason`` of an ``atAggregate`` snapshot row.
AGGREGATE_REASON: Final = "AGGREGATE"
#: ``emit_reason`` of an output row, by code.
REASON_NAMES: Final = {
    WATERMARK: WATERMARK_REASON,
    IDLE: IDLE_REASON,
    MAX_DURATION: MAX_DURATION_REASON,
    END_OF_INPUT: END_OF_INPUT_REASON,
    AGGREGATE: AGGREGATE_REASON,
}
#: Why a window closes (``emit_reason`` of its row), in the order they are reported.
CLOSE_REASONS: Final = (WATERMARK_REASON, IDLE_REASON, MAX_DURATION_REASON, END_OF_INPUT_REASON)

# --------------------------------------------------------------------------- reject reasons
# The ``reason`` of a rejected row (docs/semantics.md section 1).

ARRIVAL_NULL: Final = "arrival time is null"
ARRIVAL_UNPARSEABLE: Final = "arrival time unparseable"
EVENT_TIME_NULL: Final = "event time is null"
EVENT_TIME_UNPARSEABLE: Final = "event time unparseable"
#: Reasons of rows whose time lies outside [columns.MIN_EPOCH_MS, columns.MAX_EPOCH_MS].
ARRIVAL_OUT_OF_RANGE: Final = "arrival time out of range"
EVENT_OUT_OF_RANGE: Final = "event time out of range"
#: A row whose windows would reach outside that range (a tumbling or sliding window
#: starting before 0001-01-01 or ending after 9999-12-31T23:59:59.999): every time an
#: output holds stays a datetime (docs/semantics.md section 1).
WINDOW_OUT_OF_RANGE: Final = "window out of range"
BATCH_NULL: Final = "batch is null"
#: A batch the carried state has already committed (a partition replayed twice).
BATCH_COMMITTED: Final = "batch already committed"
#: An event time more than ``source.maxFutureSkew`` ahead of the arrival time: rejected
#: before it moves any watermark.
FUTURE_SKEW: Final = "FUTURE_SKEW"
#: Every reason the engine gives for a rejected row.
REJECT_REASONS: Final = (
    ARRIVAL_NULL,
    ARRIVAL_UNPARSEABLE,
    EVENT_TIME_NULL,
    EVENT_TIME_UNPARSEABLE,
    ARRIVAL_OUT_OF_RANGE,
    EVENT_OUT_OF_RANGE,
    WINDOW_OUT_OF_RANGE,
    BATCH_NULL,
    BATCH_COMMITTED,
    FUTURE_SKEW,
)

# --------------------------------------------------------------------------- state

#: ``state_kind`` of a state row: a worker's clocks, a key's watermark, an open window,
#: an emitted window that may re-open.
WORKER_KIND: Final = "worker"
KEY_KIND: Final = "key"
WINDOW_KIND: Final = "window"
EMITTED_KIND: Final = "emitted"
STATE_KINDS: Final = (WORKER_KIND, KEY_KIND, WINDOW_KIND, EMITTED_KIND)

# --------------------------------------------------------------------------- output columns

#: Columns rewindow adds to the ``aggregates`` output, before and after the aggregates
#: (the worker and key columns come first).
WINDOW_COLUMNS: Final = ("window_start", "window_end")
EMIT_COLUMNS: Final = ("emit_reason", "emit_batch", "emit_time", "emit_watermark", "emission")
#: Columns of the ``state`` output around the worker and key columns; the aggregates'
#: partial values follow.
STATE_HEAD_COLUMNS: Final = ("state_kind", "fingerprint")
STATE_COLUMNS: Final = (
    "batch",
    "watermark_ms",
    "clock_ms",
    "max_event_ms",
    "window_start_ms",
    "window_end_ms",
    "emissions",
    "events",
)
#: Columns every state dataset has, whatever the pipeline.
STATE_REQUIRED_COLUMNS: Final = ("state_kind", "fingerprint", "window_start_ms", "window_end_ms", "events")
#: Columns late_events adds to the input columns.
LATE_ADDED_COLUMNS: Final = ("batch", "window_start", "window_end", "watermark", "lateness_ms")
#: Columns of reconcile's ``mismatches`` output besides the worker and key columns and the
#: ``live_<aggregate>`` / ``replay_<aggregate>`` pairs; the worker and key may not take these names.
MISMATCH_COLUMNS: Final = (
    "partition_key",
    "category",
    "window_start",
    "window_end",
    "emission",
    "differing",
    "replay_emit_reason",
    "replay_emit_time",
    "live_emit_time",
    "explanations",
    "detail",
)

# --------------------------------------------------------------------------- internal columns

#: Prefix of the kernel's carried partial-aggregate columns.
STATE_PREFIX: Final = "__s_"
#: The columns the engine adds to the events it hands the kernel (``windowing.runner.normalise``):
#: each row's kind (an event, a carried state row, ...: ``windowing.kernel.inputs``), its
#: arrival and event time in epoch milliseconds, and its batch id.
KIND_COLUMN: Final = "__kind"
ARRIVAL_MS_COLUMN: Final = "__arr"
EVENT_MS_COLUMN: Final = "__evt"
BATCH_COLUMN: Final = "__batch"

# --------------------------------------------------------------------------- names


def quoted(name: str) -> str:
    """A column name quoted for Spark (``F.col``, SQL text): in backticks, each backtick
    doubled, so that dots, spaces and backticks are part of the name (``user.id`` is one
    column, not field ``id`` of ``user``). ``windowing.runner.columns.col`` builds on it."""
    return "`" + name.replace("`", "``") + "`"


# --------------------------------------------------------------------------- types

#: The most digits a decimal holds (Spark's, and Arrow's decimal128).
MAX_DECIMAL_DIGITS: Final = 38
