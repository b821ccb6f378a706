"""What a lateness run computes and writes: its options (delays, target late share,
lateness modes, future-skew threshold), the variants they make, the names of its outputs,
and its result. No Spark: the command line and the Dagster asset build options here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from windowing.config import ConfigError, Lateness, Pipeline, WatermarkStrategy
from windowing.durations import format_duration_ms, parse_duration_ms
from windowing.lateness.defaults import DEFAULT_WORST
from windowing.lateness.variants import Variant

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Each variant's counters (name -> value), by variant label.
Counters = dict[str, dict[str, int]]
#: A (strategy, mode)'s summed slack histogram: slack (ms), events, pairs (numpy arrays).
Histogram = tuple[np.ndarray, np.ndarray, np.ndarray]

#: Parquet datasets of a lateness run (``OUT/runs/<run id>/``), its figures (JSON text)
#: and its report (one HTML file).
TABLES = (
    "curves",
    "slack_histogram",
    "cost",
    "late_by_key",
    "late_by_hour",
    "latency_exact",
    "future_skew",
    "skew_late",
    "state",
)
FIGURES = "figures.json"
REPORT = "report.html"
KIND = "lateness"


class LatenessStateError(ValueError):
    """``--state-in`` is not a lateness output of this pipeline with these variants."""


@dataclass(frozen=True)
class LatenessOptions:
    """What to compute: delays (ms), the late share to stay under, the lateness modes (None:
    the configured one), the future-skew listing threshold (None: off), flush at end."""

    delays_ms: tuple[int, ...] = (0, 1_000, 5_000, 30_000, 120_000)
    target_late: float = 0.001
    lateness_modes: tuple[Lateness, ...] | None = None
    future_skew_ms: int | None = 10_000
    worst: int = DEFAULT_WORST
    flush_at_end: bool | None = None

    def __post_init__(self) -> None:
        if not self.delays_ms:
            raise ConfigError("--delays: give at least one delay")
        if any(d < 0 for d in self.delays_ms):
            raise ConfigError(f"--delays: {[format_duration_ms(d) for d in self.delays_ms if d < 0]} are negative")
        if not 0 <= self.target_late <= 1:
            raise ConfigError(f"--target-late: {self.target_late!r} is not between 0 and 1")

    def modes(self, pipeline: Pipeline) -> tuple[Lateness, ...]:
        return self.lateness_modes or (pipeline.window.lateness,)

    def variants(self, pipeline: Pipeline) -> tuple[Variant, ...]:
        """The configured pipeline (full), then every (strategy, mode, delay) of the grid
        (delay 0 always: it gives the slack), then the skew-free configured pipeline."""
        w = pipeline.window
        configured = (w.watermark_strategy, w.lateness, w.delay_ms)
        out = [Variant(*configured, full=True)]
        for mode in self.modes(pipeline):
            for strategy in WatermarkStrategy:
                for d in sorted(set(self.delays_ms) | {0}):
                    if (strategy, mode, d) != configured:
                        out.append(Variant(strategy, mode, d))
        if self.future_skew_ms is not None and w.event_time:
            out.append(Variant(*configured, skew_free=True))
        return tuple(out)


def parse_delays(text: str) -> tuple[int, ...]:
    """``"0s,1s,5s,30s,2m"`` -> milliseconds, sorted and distinct; errors name ``--delays``."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--delays: {text!r} holds no delay; write them like 0s,1s,5s,30s,2m")
    out = []
    for item in items:
        try:
            out.append(parse_duration_ms(item, "--delays"))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return tuple(sorted(set(out)))


def parse_modes(text: str | None) -> tuple[Lateness, ...] | None:
    """``--lateness-modes``: None or ``configured`` (the pipeline's), ``both``, or a list."""
    if text is None or text.strip().lower() == "configured":
        return None
    if text.strip().lower() == "both":
        return tuple(Lateness)
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        try:
            out.append(Lateness(item.upper()))
        except ValueError:
            raise ConfigError(
                f"--lateness-modes: {item!r} is not one of configured, both, {', '.join(m.value for m in Lateness)}"
            ) from None
    return tuple(dict.fromkeys(out)) or None


@dataclass
class LatenessResult:
    """The tables (Spark DataFrames, :data:`TABLES`) and the figures (plain values)."""

    tables: dict[str, DataFrame]
    figures: dict[str, Any]
    _held: list[DataFrame] = field(default_factory=list, repr=False)

    def unpersist(self) -> None:
        for df in self._held:
            df.unpersist()
        self._held = []


def check_analysable(pipeline: Pipeline) -> None:
    """Refuse a pipeline whose ``source.derive`` or ``source.filter`` the analysis does not
    apply (it reads the raw input): its figures would be of other events than the
    replay's. Before Spark starts (the command line) or any job (the Dagster asset)."""
    source = pipeline.source
    given = [f"source.{name}" for name, on in (("derive", source.derive), ("filter", source.filter)) if on]
    if given:
        raise ConfigError(
            f"pipeline {pipeline.name!r}: rewindow lateness does not apply {' and '.join(given)} yet (it analyses "
            "the raw input, so its figures would be of other events than the replay's); analyse a copy of the "
            "pipeline without them"
        )
