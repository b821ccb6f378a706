"""The shared vocabulary of a replay's outputs, in one place (issue 14, item 4).

What several modules used to spell out as their own strings: the output names, why a
window is emitted, why a row is rejected, the kinds of state row, and the columns the
engine adds. Plain values only (no Spark, no NumPy), so any layer may import it.

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
#: ``emit_reason`` of an output row, by code.
REASON_NAMES: Final = {WATERMARK: "WATERMARK", IDLE: "IDLE", MAX_DURATION: "MAX_DURATION",
                       END_OF_INPUT: "END_OF_INPUT", AGGREGATE: "AGGREGATE"}
#: ``emit_reason`` of an ``atAggregate`` snapshot row.
AGGREGATE_REASON: Final = "AGGREGATE"
#: Why a window closes (``emit_reason`` of its row), in the order they are reported.
CLOSE_REASONS: Final = ("WATERMARK", "IDLE", "MAX_DURATION", "END_OF_INPUT")

# --------------------------------------------------------------------------- reject reasons

#: Every reason the engine gives for a rejected row (docs/semantics.md section 1).
REJECT_REASONS: Final = (
    "arrival time is null",
    "arrival time unparseable",
    "event time is null",
    "event time unparseable",
    "arrival time out of range",
    "event time out of range",
    "batch is null",
    "batch already committed",
    "FUTURE_SKEW",
)

# --------------------------------------------------------------------------- state

#: ``state_kind`` of a state row.
STATE_KINDS: Final = ("worker", "key", "window", "emitted")
#: Columns every state dataset has, whatever the pipeline.
STATE_REQUIRED_COLUMNS: Final = ("state_kind", "fingerprint", "window_start_ms", "window_end_ms", "events")

# --------------------------------------------------------------------------- internal columns

#: Prefix of the kernel's carried partial-aggregate columns.
STATE_PREFIX: Final = "__s_"
#: Columns late_events adds to the input columns.
LATE_ADDED_COLUMNS: Final = ("batch", "window_start", "window_end", "watermark", "lateness_ms")
