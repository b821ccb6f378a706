"""The check registry: every check's name, the output it belongs to, which checks
reject rows, and :func:`run_checks`, which runs them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

from pyspark.sql import functions as F

from windowing import prewindow
from windowing.config import Pipeline
from windowing.storage.outputs import read_outputs
from windowing.validation.base import (
    DEFAULT_MAX_SKEW_MS,
    DEFAULT_SAMPLE_SIZE,
    SMALL_PASS_ROWS,
    CheckResult,
    CountPass,
    Finish,
    KeyedPass,
    skip_result,
    wanted,
)
from windowing.validation.conservation import plan_conservation_check
from windowing.validation.metrics import plan_metrics_check
from windowing.validation.recompute import RECOMPUTE_CHECK, replay_check
from windowing.validation.rules import (
    plan_aggregates_checks,
    plan_input_checks,
    plan_late_checks,
    plan_rejected_checks,
    plan_state_checks,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

#: Checks whose failing rows are rows the replay rejects (with a reason): they warn while
#: the rejected rows (all of them, whatever their reason) are within
#: ``quality.maxRejectedShare`` of the input rows, and block above it.
REJECTING_CHECKS = ("input_times_parseable", "rejected_batch_committed")


def apply_rejection_policy(
    pipeline: Pipeline, results: list[CheckResult], input_rows: int | None, rejected_rows: int | None
) -> list[CheckResult]:
    """``results`` with the checks of :data:`REJECTING_CHECKS` made warnings when the
    replay's rejected rows are at most ``pipeline.quality.max_rejected_share`` of its
    input, and left blocking (saying why) above it."""
    limit = pipeline.quality.max_rejected_share
    out = []
    for r in results:
        if r.name in REJECTING_CHECKS and not r.passed and input_rows is not None and rejected_rows is not None:
            share = rejected_rows / input_rows if input_rows else 0.0
            within = share <= limit
            r = replace(
                r,
                blocking=not within,
                description=(
                    f"{r.description}; {rejected_rows:,} of {input_rows:,} rows rejected ({share:.4%}), "
                    + ("within" if within else "above")
                    + f" quality.maxRejectedShare ({limit:.4%}): "
                    + ("a warning" if within else "blocking")
                ),
            )
        out.append(r)
    return out


def input_types_of(outputs: Any, input_df: DataFrame | None = None) -> dict[str, DataType] | None:
    """The input columns' Spark types: the input's, or those ``rejected`` carries."""
    if input_df is not None:
        return {f.name: f.dataType for f in input_df.schema.fields}
    rej = getattr(outputs, "rejected", None)
    if rej is None:
        return None
    return {f.name: f.dataType for f in rej.schema.fields if f.name != "reason"}


def load_outputs(spark: SparkSession, outputs: Any) -> Any:
    """Accept an output folder (``rewindow replay --output``), a ``ReplayResult``, or any
    object with ``aggregates``, ``late_events``, ``rejected``, ``state`` (and ``metrics``)."""
    if isinstance(outputs, (str, Path)):
        return read_outputs(spark, outputs)
    return outputs


def _row_counts(p: CountPass, o: Any, input_df: DataFrame | None) -> Callable[[], tuple[int, int] | None]:
    """(input rows, rejected rows) of the replay being checked: from its metrics (read as
    the results are finished: a :class:`KeyedPass`'s partition's), or counted on ``p``
    (None without metrics or the input: unknown)."""

    def known() -> tuple[int, int] | None:
        m = getattr(o, "metrics", None) or {}
        if isinstance(m.get("input_rows"), int) and isinstance(m.get("rejected_rows"), int):
            return m["input_rows"], m["rejected_rows"]
        return None

    if known() is not None or input_df is None:
        return known
    rows, rejected = p.add(input_df, {"rows": F.lit(1)}), p.add(o.rejected, {"rows": F.lit(1)})
    return lambda: (int(rows["rows"]), int(rejected["rows"]))


def _pass_rows(m: Any) -> int | None:
    """About how many rows the checks' pass reads, from the replay's metrics ``m`` (None: unknown):
    the input, the emitted rows, the late rows and, twice (before and after), the open windows."""
    m = m or {}  # a dict read back, or ReplayMetrics (dict-like), as in _row_counts
    names = ("input_rows", "windows_emitted", "snapshots_emitted", "late_event_windows", "open_windows", "open_windows")
    counts = [c for c in map(m.get, names) if isinstance(c, int)]
    return sum(counts) if len(counts) == len(names) else None


def run_checks(
    spark: SparkSession,
    pipeline: Pipeline,
    outputs: Any,
    input_df: DataFrame | None = None,
    prev_state: DataFrame | None = None,
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    only: Collection[str] | None = None,
    recompute: bool = False,
    flush_at_end: bool | None = None,
) -> list[CheckResult]:
    """Every check, on one replay's outputs (and its input and starting state, if given).

    Args:
        spark: the SparkSession.
        pipeline: the pipeline the replay ran.
        outputs: an output folder, a :class:`~windowing.runner.replay.ReplayResult`, or an object
            with the four DataFrames (and ``metrics``).
        input_df: the events the replay read (enables the input and conservation checks).
        prev_state: the state the replay started from (the previous partition's); without
            it conservation assumes the replay started from no open windows.
        max_skew_ms: the largest accepted ``|event time - arrival time|``.
        sample_size: failing rows kept per check.
        only: names of the checks to run (default: all of :data:`CHECK_NAMES`).
        recompute: run ``replay_reproduces`` (a fresh replay of ``input_df`` from
            ``prev_state``, compared row for row). It costs a replay, so it runs only when
            asked: ``recompute=True`` or named in ``only``; it needs ``input_df``.
        flush_at_end: how the replay being checked flushed (default: the pipeline's).

    Returns:
        One :class:`CheckResult` per check run, in a stable order; skipped ones included.

    Every check is planned first and their counts are taken in one pass over the outputs
    (:class:`~windowing.validation.base.CountPass`: one Spark job, plus one per shuffle stage of
    the uniqueness, conservation and metrics groupings); a check that fails then samples its
    failing rows with a query of its own.
    """
    _check_only(only)
    o = load_outputs(spark, outputs)
    rows = _pass_rows(getattr(o, "metrics", None))
    p = CountPass(small=rows is not None and rows <= SMALL_PASS_ROWS)
    finish = plan_checks(
        p, spark, pipeline, o, input_df, prev_state, max_skew_ms, sample_size, only, recompute, flush_at_end
    )
    p.run()
    return finish()


def _check_only(only: Collection[str] | None) -> None:
    if only is not None:
        unknown = set(only) - set(CHECK_NAMES)
        if unknown:
            raise ValueError(f"unknown check(s) {sorted(unknown)}; known: {', '.join(CHECK_NAMES)}")


class _PassOutputs:
    """A pass's outputs as the checks read them: the four datasets of every partition
    (their rows carrying the partition's index in the pass's key) and, as a partition's
    results are finished, that partition's ``metrics``."""

    def __init__(self, frames: Mapping[str, DataFrame], metrics: Sequence[Mapping[str, Any]], p: KeyedPass) -> None:
        self.aggregates, self.late_events = frames["aggregates"], frames["late_events"]
        self.state, self.rejected = frames["state"], frames["rejected"]
        self._metrics, self._pass = metrics, p

    @property
    def metrics(self) -> Mapping[str, Any]:
        """The metrics of the partition being finished (while planning: the first's, all alike in form)."""
        return self._metrics[self._pass.current or 0]


def run_pass_checks(
    spark: SparkSession,
    pipeline: Pipeline,
    frames: Mapping[str, DataFrame],
    metrics: Sequence[Mapping[str, Any]],
    input_df: DataFrame,
    start_state: DataFrame | None,
    key: str,
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> list[list[CheckResult]]:
    """:func:`run_checks` of every partition of a pass, planned once for all of them.

    ``frames``: the pass's four outputs, each row carrying its partition's index (0 to
    ``len(metrics) - 1``) in ``key``, as are the rows of ``input_df`` (the events the
    pass read); ``metrics[i]``, partition ``i``'s metrics as stored; ``start_state``, the
    state the first partition started from (each later one starts from the one before's
    ``state``). Every check is planned once, on a :class:`~windowing.validation.base.KeyedPass`
    (every count taken per partition, each dataset scanned once): partition ``i``'s
    results are what :func:`run_checks` gives its outputs alone, with ``input_df``'s rows
    of ``i`` and its previous state (samples from its own rows).
    """
    n = len(metrics)
    counts = [_pass_rows(m) for m in metrics]
    small = all(c is not None for c in counts) and sum(c or 0 for c in counts) <= SMALL_PASS_ROWS
    p = KeyedPass(key, n, small)
    state = frames["state"]
    prev = state.where(F.col(key) < F.lit(n - 1)).withColumn(key, F.col(key) + F.lit(1))
    if start_state is not None:
        prev = start_state.withColumn(key, F.lit(0)).unionByName(prev)
    o = _PassOutputs(frames, metrics, p)
    finish = plan_checks(p, spark, pipeline, o, input_df, prev, max_skew_ms, sample_size, None, False, None)
    return p.results(finish)


def plan_checks(
    p: CountPass,
    spark: SparkSession,
    pipeline: Pipeline,
    o: Any,
    input_df: DataFrame | None,
    prev_state: DataFrame | None,
    max_skew_ms: int,
    sample_size: int,
    only: Collection[str] | None,
    recompute: bool,
    flush_at_end: bool | None,
) -> Callable[[], list[CheckResult]]:
    """Plan :func:`run_checks`' checks of the loaded outputs ``o`` on ``p``; the function
    returned gives their results once ``p`` has run."""
    _check_only(only)
    # The checks read the events as the window's stage sees them: source.derive's columns
    # added (the outputs carry them); the input checks only the rows source.filter keeps.
    raw_input = input_df
    if input_df is not None:
        input_df = prewindow.derive(pipeline.source, input_df)
    types = input_types_of(o, input_df)
    if types is not None and p.key is not None:
        types = {c: t for c, t in types.items() if c != p.key}
    planned: list[Finish] = []
    counts = _row_counts(p, o, input_df) if any(wanted(only, n) for n in REJECTING_CHECKS) else None
    if input_df is not None:
        kept = prewindow.window_input(pipeline.source, input_df)
        planned.append(plan_input_checks(p, pipeline, kept, max_skew_ms, sample_size, only))
    else:
        skipped = [skip_result(n, "input events", "no input given") for n in INPUT_CHECKS if wanted(only, n)]
        planned.append(lambda: skipped)
    planned.append(plan_aggregates_checks(p, pipeline, o.aggregates, types, sample_size, only))
    planned.append(plan_late_checks(p, pipeline, o.late_events, types, sample_size, only))
    planned.append(plan_state_checks(p, pipeline, o.state, types, sample_size, only))
    planned.append(plan_rejected_checks(p, pipeline, o.rejected, types, sample_size, only))
    if wanted(only, "conservation"):
        planned.append(plan_conservation_check(p, pipeline, o, input_df, prev_state, sample_size))
    if wanted(only, "metrics_consistent"):
        planned.append(plan_metrics_check(p, pipeline, o, input_df))

    def finish() -> list[CheckResult]:
        results = [r for done in planned for r in done()]
        if any(r.name in REJECTING_CHECKS and not r.passed for r in results):
            found = counts() if counts is not None else None
            if found is not None:
                results = apply_rejection_policy(pipeline, results, *found)
        if wanted(only, RECOMPUTE_CHECK):
            if recompute or (only is not None and RECOMPUTE_CHECK in only):
                results.append(replay_check(spark, pipeline, o, raw_input, prev_state, flush_at_end, sample_size))
            else:
                results.append(
                    skip_result(
                        RECOMPUTE_CHECK,
                        "a fresh replay of the input writes these outputs row for row",
                        "not asked for (run_checks(recompute=True); rewindow verify --input does)",
                    )
                )
        return results

    return finish


@dataclass(frozen=True)
class Check:
    """A registered check: its name, the output whose asset check reports it, and whether
    its failing rows are rows the replay rejects (see :func:`apply_rejection_policy`)."""

    name: str
    #: A dataset of :data:`windowing.contract.OUTPUTS`, or None (not part of an output's checks).
    output: str | None
    rejecting: bool = False


def _of(output: str | None, *names: str) -> tuple[Check, ...]:
    return tuple(Check(n, output, rejecting=n in REJECTING_CHECKS) for n in names)


#: Every check :func:`run_checks` runs, in its order. Input checks are reported with
#: ``rejected`` (their failing rows are the rejected rows), conservation with ``state``,
#: the metrics with ``aggregates``; the recompute belongs to no output.
CHECKS: tuple[Check, ...] = (
    *_of("rejected", "input_schema", "input_times_parseable", "input_event_time_skew"),
    *_of(
        "aggregates",
        "aggregates_schema",
        "aggregates_window_bounds",
        "aggregates_window_span",
        "aggregates_count_positive",
        "aggregates_min_avg_max",
        "aggregates_distinct_le_count",
        "aggregates_emit_watermark",
        "aggregates_emit_reason",
        "aggregates_unique_emission",
    ),
    *_of("late_events", "late_events_schema", "late_rule", "late_lateness_ms", "late_window_membership"),
    *_of("state", "state_schema", "state_kind", "state_fingerprint", "state_window_bounds", "state_unique"),
    *_of("rejected", "rejected_schema", "rejected_reason", "rejected_batch_committed"),
    *_of("state", "conservation"),
    *_of("aggregates", "metrics_consistent"),
    *_of(None, RECOMPUTE_CHECK),
)
#: Every check's name, in :func:`run_checks`' order.
CHECK_NAMES = tuple(c.name for c in CHECKS)
#: The input checks (run only when the input is given).
INPUT_CHECKS = tuple(c.name for c in CHECKS if c.name.startswith("input_"))


def checks_of(output: str) -> tuple[str, ...]:
    """The names of the checks reported with ``output`` (a dataset of ``contract.OUTPUTS``)."""
    return tuple(c.name for c in CHECKS if c.output == output)


def _family(name: str) -> str:
    return name.split("_", 1)[0]


def quality_checks(output: str) -> tuple[str, ...]:
    """:func:`checks_of` ``output`` in short: a family of two or more checks sharing a first
    word (all of them this output's) as its prefix (``"state_"``), other checks by name;
    the output's own family first. Select with ``name.startswith(tuple(...))``."""
    mine = checks_of(output)
    out: list[str] = []
    for n in mine:
        fam = [c for c in CHECKS if _family(c.name) == _family(n)]
        short = f"{_family(n)}_" if len(fam) > 1 and all(c.output == output for c in fam) else n
        if short not in out:
            out.append(short)
    own = _family(output) + "_"
    return tuple(sorted(out, key=lambda s: s != own))


def format_table(results: Sequence[CheckResult], samples: int = 2) -> str:
    """A plain-text table of results, with a few failing rows under each failure."""
    width = max([len(r.name) for r in results] + [5])
    lines = [f"{'check':<{width}}  status  failures  description", f"{'-' * width}  ------  --------  -----------"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {r.failure_count:>8}  {r.description}")
        if not r.passed:
            for s in r.sample[:samples]:
                lines.append(" " * (width + 2) + "  e.g. " + json.dumps(s, default=str, sort_keys=True)[:400])
    return "\n".join(lines)
