"""What the kernel is given and gives back, as plain values: :class:`Spec` (the pipeline
and input types), :class:`Timeline` (a worker's commits) and :class:`KernelOutput`. The
emit reasons and the state prefix are :mod:`windowing.contract`'s, the row kinds of the
input table :mod:`windowing.kernel.inputs`'.

Invariants: every state column is ``STATE_PREFIX + name`` in the input table; a
:class:`Spec` answers every type question (output, state, late schemas) from the pipeline
and the input types alone, so every task of a replay builds the same schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, cast

import numpy as np
import pyarrow as pa

from windowing.arrays import MIN_TIMESTAMP
from windowing.config import Aggregate, Pipeline, Trigger, Window, arrow_schemas
from windowing.kernel.aggregates import Aggregator, aggregator

#: The outputs' timestamps: microseconds, UTC.
TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Timeline:
    """A worker's commits in this replay: batches in order and the clocks after each.

    ``geff[i]`` is the effective global watermark and ``clock[i]`` the processing clock
    (the greatest arrival time committed so far) after committing ``batches[i]``;
    ``min_arrival[i]`` is the smallest arrival time in ``batches[i]`` (heartbeat ticks
    before it stop there). ``last_batch`` is the last committed batch, including earlier
    partitions (None if the worker never committed one). ``batch0`` and ``clock0`` are
    the last batch and the clock carried from earlier partitions (None and
    ``MIN_TIMESTAMP`` for a worker without state).

    Every task receives every worker's timeline, so the runner ships only what the kernel
    reads: ``geff`` is empty unless an idle timeout runs on the event-time clock, and
    ``min_arrival`` unless heartbeat ticks apply (``Pipeline.idle_heartbeat_ms``).
    """

    batches: np.ndarray
    geff: np.ndarray
    clock: np.ndarray
    last_batch: int | None
    min_arrival: np.ndarray
    batch0: int | None = None
    clock0: int = MIN_TIMESTAMP

    @property
    def last_clock(self) -> int:
        """The clock after the last commit (this replay's, else the carried one)."""
        return int(self.clock[-1]) if len(self.clock) else self.clock0


@dataclass(frozen=True)
class Spec:
    """What the kernel needs from a pipeline, as plain values."""

    pipeline: Pipeline
    input_types: Mapping[str, pa.DataType]

    @property
    def window(self) -> Window:
        return self.pipeline.window

    @property
    def worker_col(self) -> str | None:
        return self.pipeline.source.worker

    @property
    def key_cols(self) -> tuple[str, ...]:
        """The key's columns (none: one window per worker)."""
        return self.pipeline.window.keys

    @property
    def id_cols(self) -> tuple[str, ...]:
        """The columns that identify a (worker, key): the worker's, then the key's."""
        return self.pipeline.id_columns

    @property
    def snapshots(self) -> bool:
        return Trigger.AT_AGGREGATE in self.pipeline.triggers

    def value_type(self, agg: Aggregate) -> pa.DataType:
        return self.input_types[cast(str, agg.column)]

    @cached_property
    def aggregators(self) -> list[Aggregator]:
        """The :class:`~windowing.kernel.aggregates.Aggregator` of each aggregate, in order."""
        return [aggregator(a, self) for a in self.pipeline.aggregates]

    def output_type(self, agg: Aggregate) -> pa.DataType:
        """The output column's type (:meth:`Aggregator.output_type`)."""
        return arrow_schemas.aggregate_output_type(agg, self.input_types)

    def partial_fields(self, agg: Aggregate) -> list[pa.Field]:
        """State columns of one aggregate's partial value (:meth:`Aggregator.state_fields`).

        ``first`` / ``last`` of sessions add ``partial_<name>_batch`` and
        ``partial_<name>_seq`` (int64, null while the value is null): the arrival position
        of the event that gave the value, as (its batch, its rank among its key's events
        of that batch in arrival order, from 0). Batches of a worker only grow from one
        partition to the next and a batch is never split between partitions, so these
        pairs order a key's events by arrival across partitions, and they do not depend
        on which other keys or rows a replay holds (see :func:`_sessions`).

        Decimal sums add ``partial_<name>_overflow`` (int64): the exact partial sum is
        ``partial_<name> + partial_<name>_overflow * 10^(P - s)`` for a partial of type
        decimal(P, s), so a running sum past P digits (which a later event may bring back)
        is carried exactly; the overflow is 0 otherwise.
        """
        return arrow_schemas.aggregate_state_fields(self.pipeline, agg, self.input_types)

    def key_fields(self) -> list[pa.Field]:
        return arrow_schemas.key_fields(self.pipeline, self.input_types)

    def aggregates_schema(self) -> pa.Schema:
        return arrow_schemas.aggregates_schema(self.pipeline, self.input_types)

    def late_input_columns(self) -> list[str]:
        """Input columns carried into late_events (a same-named added column wins)."""
        return arrow_schemas.late_input_columns(self.input_types)

    def late_schema(self) -> pa.Schema:
        return arrow_schemas.late_schema(self.input_types)

    def state_schema(self) -> pa.Schema:
        return arrow_schemas.state_schema(self.pipeline, self.input_types)


@dataclass
class KernelOutput:
    aggregates: pa.Table
    late: pa.Table
    state: pa.Table
    #: This task's counters (windowing.metrics.COUNTERS), summed over its workers.
    counters: dict[str, int] = field(default_factory=dict)
    #: The same per worker label (windowing.metrics.worker_label).
    counters_by_worker: dict[str, dict[str, int]] = field(default_factory=dict)
