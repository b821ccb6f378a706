"""The Arrow schemas of a replay's outputs, as functions of the pipeline and the input
columns' Arrow types: the kernel writes them (:class:`windowing.kernel.Spec`) and
:mod:`windowing.validation` checks them, from this one definition.

Not imported by :mod:`windowing.config` itself (it imports pyarrow; the command line loads
pipelines without it). The column names are :mod:`windowing.contract`'s.
"""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa

from windowing.config.model import Aggregate, Pipeline, WindowType
from windowing.contract import (
    EMIT_COLUMNS,
    LATE_ADDED_COLUMNS,
    MAX_DECIMAL_DIGITS,
    STATE_COLUMNS,
    STATE_HEAD_COLUMNS,
    WINDOW_COLUMNS,
)

#: The outputs' timestamps: microseconds, UTC.
_TS = pa.timestamp("us", tz="UTC")
#: Types of :data:`~windowing.contract.EMIT_COLUMNS` and
#: :data:`~windowing.contract.LATE_ADDED_COLUMNS`, in their order.
_EMIT_TYPES = (pa.string(), pa.int64(), _TS, _TS, pa.int64())
_LATE_ADDED_TYPES = (pa.int64(), _TS, _TS, _TS, pa.int64())


def sum_type(vt: pa.DataType) -> pa.DataType:
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
        return sum_type(vt)
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
        partial_type = sum_type(input_types[agg.column])
        out = [pa.field(name, partial_type), pa.field(name + "_n", pa.int64())]
        if pa.types.is_decimal(partial_type):
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
    return [pa.field(c, input_types[c]) for c in pipeline.id_columns]


def aggregates_schema(pipeline: Pipeline, input_types: Mapping[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of ``aggregates``."""
    return pa.schema(
        key_fields(pipeline, input_types)
        + [pa.field(c, _TS) for c in WINDOW_COLUMNS]
        + [pa.field(a.name, aggregate_output_type(a, input_types)) for a in pipeline.aggregates]
        + [pa.field(c, t) for c, t in zip(EMIT_COLUMNS, _EMIT_TYPES)]
    )


def late_input_columns(input_types: Mapping[str, pa.DataType]) -> list[str]:
    """Input columns carried into late_events (a same-named added column wins)."""
    return [c for c in input_types if c not in LATE_ADDED_COLUMNS]


def late_schema(input_types: Mapping[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of ``late_events``."""
    return pa.schema(
        [pa.field(c, input_types[c]) for c in late_input_columns(input_types)]
        + [pa.field(c, t) for c, t in zip(LATE_ADDED_COLUMNS, _LATE_ADDED_TYPES)]
    )


def state_schema(pipeline: Pipeline, input_types: Mapping[str, pa.DataType]) -> pa.Schema:
    """The Arrow schema of ``state``."""
    fields = [pa.field(c, pa.string()) for c in STATE_HEAD_COLUMNS]
    fields += key_fields(pipeline, input_types)
    fields += [pa.field(n, pa.int64()) for n in STATE_COLUMNS]
    for a in pipeline.aggregates:
        fields += aggregate_state_fields(pipeline, a, input_types)
    return pa.schema(fields)
