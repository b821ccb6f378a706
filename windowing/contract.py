"""The shared vocabulary of a replay's outputs, in one place (issue 14, item 4).

What several modules used to spell out as their own strings: the output names, why a
window is emitted, why a row is rejected, the kinds of state row, and the columns the
engine adds, and the outputs' Arrow schemas. Plain values and pyarrow schemas only (no
Spark, no NumPy), so any layer may import it (but :mod:`windowing.config`, whose
enums and pipeline it uses).

The kernel (``windowing/kernel``) codes emission reasons as the integers below and
names its carried columns with ``STATE_PREFIX``.
"""

from __future__ import annotations

from typing import Final, Mapping

import pyarrow as pa

from windowing.config import Aggregate, Pipeline, WindowType

# --------------------------------------------------------------------------- outputs

#: The datasets a replay writes, in the order they are committed.
OUTPUTS: Final = ("aggregates", "late_events", "rejected", "state")

# --------------------------------------------------------------------------- emit reasons

#: Emission reasons as the kernel codes them (``OPEN``: not emitted yet).
OPEN, WATERMARK, IDLE, MAX_DURATION, END_OF_INPUT, AGGREGATE = 0, 1, 2, 3, 4, 5
#: ``emit_reason`` of an output row, by code.
REASON_NAMES: Final = {
    WATERMARK: "WATERMARK",
    IDLE: "IDLE",
    MAX_DURATION: "MAX_DURATION",
    END_OF_INPUT: "END_OF_INPUT",
    AGGREGATE: "AGGREGATE",
}
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

# --------------------------------------------------------------------------- output schemas
# The Arrow schemas of the outputs, as functions of the pipeline and the input columns'
# Arrow types: the kernel writes them (windowing.kernel.Spec) and windowing.validation
# checks them, from this one definition.

#: The most digits a decimal holds (Spark's, and Arrow's decimal128).
MAX_DECIMAL_DIGITS: Final = 38


def _sum_type(vt: pa.DataType) -> pa.DataType:
    """The type of a sum (and of a partial sum or avg's partial) of values of type ``vt``."""
    if pa.types.is_decimal(vt):
        return pa.decimal128(min(MAX_DECIMAL_DIGITS, vt.precision + 10), vt.scale)
    return pa.int64() if pa.types.is_integer(vt) else pa.float64()


def aggregate_output_type(agg: Aggregate, input_types: Mapping[str, pa.DataType]) -> pa.DataType:
    """The output column's type of one aggregate (Spark's types: a decimal(p, s) sum is
    decimal(min(38, p + 10), s), an avg decimal(min(38, p + 4), min(38, s + 4)))."""
    if agg.type in ("count", "distinct"):
        return pa.int64()
    if agg.type in ("stddev_pop", "stddev_samp", "percentile"):
        return pa.float64()
    assert agg.column is not None
    vt = input_types[agg.column]
    if agg.type == "sum":
        return _sum_type(vt)
    if agg.type == "avg":
        if pa.types.is_decimal(vt):
            return pa.decimal128(min(MAX_DECIMAL_DIGITS, vt.precision + 4), min(MAX_DECIMAL_DIGITS, vt.scale + 4))
        return pa.float64()
    return vt  # min, max, first, last


def aggregate_state_fields(
    pipeline: Pipeline, agg: Aggregate, input_types: Mapping[str, pa.DataType]
) -> list[pa.Field]:
    """State columns of one aggregate's partial value (see ``Spec.partial_fields``)."""
    name = f"partial_{agg.name}"
    if agg.type in ("sum", "avg"):
        assert agg.column is not None
        sum_type = _sum_type(input_types[agg.column])
        out = [pa.field(name, sum_type), pa.field(name + "_n", pa.int64())]
        if pa.types.is_decimal(sum_type):
            out.append(pa.field(name + "_overflow", pa.int64()))
        return out
    if agg.type == "distinct":
        assert agg.column is not None
        return [pa.field(name, pa.list_(input_types[agg.column]))]
    if agg.type in ("stddev_pop", "stddev_samp"):
        return [
            pa.field(name, pa.string()),
            pa.field(name + "_squares", pa.string()),
            pa.field(name + "_n", pa.int64()),
            pa.field(name + "_nonfinite", pa.int64()),
        ]
    if agg.type == "percentile":
        return [pa.field(name, pa.list_(pa.float64()))]
    fields = [pa.field(name, aggregate_output_type(agg, input_types))]
    if agg.type in ("first", "last") and pipeline.window.type is WindowType.SESSION:
        fields += [pa.field(name + "_batch", pa.int64()), pa.field(name + "_seq", pa.int64())]
    return fields


def key_fields(pipeline: Pipeline, input_types: Mapping[str, pa.DataType]) -> list[pa.Field]:
    """The worker and key columns, as the input has them."""
    return [pa.field(c, input_types[c]) for c in (pipeline.source.worker, pipeline.window.key) if c]


def aggregates_schema(pipeline: Pipeline, input_types: Mapping[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of ``aggregates``."""
    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        key_fields(pipeline, input_types)
        + [pa.field("window_start", ts), pa.field("window_end", ts)]
        + [pa.field(a.name, aggregate_output_type(a, input_types)) for a in pipeline.aggregates]
        + [
            pa.field("emit_reason", pa.string()),
            pa.field("emit_batch", pa.int64()),
            pa.field("emit_time", ts),
            pa.field("emit_watermark", ts),
            pa.field("emission", pa.int64()),
        ]
    )


def late_input_columns(input_types: Mapping[str, pa.DataType]) -> list[str]:
    """Input columns carried into late_events (a same-named added column wins)."""
    return [c for c in input_types if c not in LATE_ADDED_COLUMNS]


def late_schema(input_types: Mapping[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of ``late_events``."""
    ts = pa.timestamp("us", tz="UTC")
    return pa.schema(
        [pa.field(c, input_types[c]) for c in late_input_columns(input_types)]
        + [
            pa.field("batch", pa.int64()),
            pa.field("window_start", ts),
            pa.field("window_end", ts),
            pa.field("watermark", ts),
            pa.field("lateness_ms", pa.int64()),
        ]
    )


def state_schema(pipeline: Pipeline, input_types: Mapping[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of ``state``."""
    fields = [pa.field("state_kind", pa.string()), pa.field("fingerprint", pa.string())]
    fields += key_fields(pipeline, input_types)
    fields += [
        pa.field(n, pa.int64())
        for n in (
            "batch",
            "watermark_ms",
            "clock_ms",
            "max_event_ms",
            "window_start_ms",
            "window_end_ms",
            "emissions",
            "events",
        )
    ]
    for a in pipeline.aggregates:
        fields += aggregate_state_fields(pipeline, a, input_types)
    return pa.schema(fields)
