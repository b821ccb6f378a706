"""The what-if variants and what a task's analysis needs: pure data, no computation.

A :class:`Variant` is one replay configuration of the lateness analysis (a watermark
strategy, a lateness mode, a ``delayWindowClose``; the configured one in full, the others
lean); :class:`WhatIf` is what :func:`windowing.lateness.whatif.analyse` takes besides the
events: the pipeline, the variants, the input types and each worker's timeline per strategy.
The column names the analysis adds to the events live here too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import pyarrow as pa

from windowing import kernel as K
from windowing.arrays import sat_sub
from windowing.config import Aggregate, Lateness, Pipeline, Trigger, WatermarkStrategy, WindowType
from windowing.durations import format_duration_ms
from windowing.runner.api import MAX_EPOCH_MS, MIN_EPOCH_MS

#: A column the analysis adds to the events: the row's position in the task's table. Its
#: name sorts after every other column name, so it only orders rows that are equal in every
#: input column (interchangeable rows): the replay order stays that of a real replay.
ROW_ID = "\U0010ffff_row"
#: Whether an event is at least the listing threshold ahead of its arrival (future skew).
SKEWED = "__whatif_skewed"
#: Which variant a carried state row belongs to (events: null).
VARIANT = "__whatif_variant"
#: The aggregate of a lean variant: how many events its windows hold.
LEAN_AGGREGATE = Aggregate(type="count", column=None, name="whatif_events")
#: A delay under which no event is ever late: every effective watermark lies below every
#: window end of a representable time (columns.MIN_EPOCH_MS .. MAX_EPOCH_MS).
NEVER_LATE_DELAY_MS = MAX_EPOCH_MS - MIN_EPOCH_MS + 1


@dataclass(frozen=True)
class Variant:
    """One replay configuration: the pipeline with this watermark strategy, lateness mode
    and ``delayWindowClose``.

    ``full``: with the pipeline's own aggregates (the configured variant: its outputs are
    the replay's). ``skew_free``: without the events flagged as future-skewed (what
    ``source.maxFutureSkew`` at the listing threshold would do).
    """

    strategy: WatermarkStrategy
    lateness: Lateness
    delay_ms: int
    full: bool = False
    skew_free: bool = False

    @property
    def label(self) -> str:
        """``MIN_EVENT_TIME/WINDOW_CLOSED/5s`` (+ ``/full``, ``/skew_free``): unique per variant."""
        parts = [self.strategy.value, self.lateness.value, format_duration_ms(self.delay_ms)]
        return "/".join(parts + ["full"] * self.full + ["skew_free"] * self.skew_free)

    def pipeline(self, base: Pipeline) -> Pipeline:
        """``base`` configured as this variant (lean variants: :mod:`windowing.lateness.whatif`)."""
        w = replace(base.window, watermark_strategy=self.strategy, lateness=self.lateness, delay_ms=self.delay_ms)
        if self.full:
            return replace(base, window=w, triggers=(Trigger.AT_WINDOW_END,))
        src = base.source if w.type is WindowType.SESSION else replace(base.source, arrival_order=())
        return replace(
            base, source=src, window=w, aggregates=(_lean_aggregate(base),), triggers=(Trigger.AT_WINDOW_END,)
        )

    def input_columns(self, base: Pipeline, input_columns: Sequence[str]) -> list[str]:
        """The input columns this variant's kernel reads (plus :data:`ROW_ID`)."""
        if self.full or base.window.type is WindowType.SESSION:
            cols = list(input_columns)
        else:
            cols = [c for c in input_columns if c in _identity_columns(base)]
        return cols + [ROW_ID]


def _lean_aggregate(base: Pipeline) -> Aggregate:
    """:data:`LEAN_AGGREGATE`, renamed if the pipeline uses its name (state columns differ)."""
    name = LEAN_AGGREGATE.name
    while any(a.name == name or f"partial_{a.name}".startswith(f"partial_{name}") for a in base.aggregates):
        name += "_"
    return replace(LEAN_AGGREGATE, name=name)


def _identity_columns(p: Pipeline) -> set[str]:
    return {
        c
        for c in (p.source.arrival_time, p.source.batch_column, p.source.worker, *p.window.keys, p.window.event_time)
        if c
    }


def perfect_pipeline(base: Pipeline) -> Pipeline:
    """The configured aggregates with no event ever late and no idle flush: what a perfect
    watermark gives each window (tumbling and sliding windows; see :func:`windowing.lateness.tables.cost`)."""
    w = replace(base.window, delay_ms=NEVER_LATE_DELAY_MS, idle_timeout_ms=None, lateness=Lateness.WINDOW_CLOSED)
    return replace(base, window=w, triggers=(Trigger.AT_WINDOW_END,))


@dataclass(frozen=True)
class WhatIf:
    """What :func:`windowing.lateness.whatif.analyse` needs besides the events: the configured pipeline, the
    variants, the input columns and types, and each worker's timeline per strategy (the
    configured pipeline's, delay 0; per variant the delay is applied here)."""

    pipeline: Pipeline
    variants: tuple[Variant, ...]
    input_types: Mapping[str, pa.DataType]
    #: (strategy value, skew_free) -> worker -> kernel.Timeline at delay 0.
    timelines: Mapping[tuple[str, bool], Mapping[Any, K.Timeline]]
    flush_at_end: bool = False
    #: The listing threshold of future skew (None: no listing).
    skew_threshold_ms: int | None = None
    #: Windows that missed the most events, kept per task (the driver keeps the top of them).
    worst: int = 20
    #: Replay the lean variants of each strategy and mode in one delay sweep where the
    #: window type allows it (:mod:`windowing.lateness.sweep`); False: one kernel pass per variant.
    sweep: bool = True
    #: Replay the skew-free variant only for the keys where it can differ from the
    #: configured replay, where that is provably the same (:func:`_skew_dirty_rows`);
    #: False: a kernel pass over every key.
    skew_subset: bool = True

    @property
    def full(self) -> Variant:
        return next(v for v in self.variants if v.full)

    def spec(self, v: Variant) -> K.Spec:
        types = {**self.input_types, ROW_ID: pa.int64()}
        return K.Spec(
            pipeline=v.pipeline(self.pipeline),
            input_types={c: types[c] for c in v.input_columns(self.pipeline, list(self.input_types))},
        )

    def variant_timelines(self, v: Variant) -> dict[Any, K.Timeline]:
        base = self.timelines[(v.strategy.value, v.skew_free)]
        if not v.delay_ms:
            return dict(base)
        return {w: replace(tl, geff=sat_sub(tl.geff, v.delay_ms)) for w, tl in base.items()}
