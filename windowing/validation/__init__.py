"""Data-quality checks of a replay's input and outputs, as plain functions over Spark.

Usable from tests, notebooks, ``rewindow verify`` and orchestration alike (nothing here
imports Dagster). Every check returns a :class:`CheckResult`: its name, whether it
passed, how many rows (or groups, or schema errors) failed, a few failing rows as plain
dicts, and what it checks. An asset check turns one into::

    dg.AssetCheckResult(check_name=r.name, passed=r.passed,
                        severity=dg.AssetCheckSeverity.ERROR, metadata=r.metadata())

Three kinds of checks:

* **Schema checks** (``*_schema``) are pandera ``DataFrameSchema`` validations: columns
  present, with the types the replay writes, required values non-null. pandera on Spark
  does **not** raise: it records its findings in ``df.pandera.errors``. A non-empty
  report is a failure here, and so is a missing one (validation switched off by
  ``PANDERA_VALIDATION_ENABLED``): the checks force pandera on, schema *and* data depth.
* **Rule checks** are Spark expressions whose failing rows are counted, so they can
  report how many rows fail and show some of them: window bounds and alignment,
  aggregate consistency (``min <= avg <= max``, ``distinct <= count``, ``count >= 1``),
  emission watermarks, uniqueness of emissions and state rows, the lateness rules, and
  **conservation**: every valid input event is accounted for exactly once.
* **The recompute** (``replay_reproduces``, only when asked for: it costs a replay):
  a fresh replay of the input from the same state writes the same rows, every value
  exact. The rules cannot see a value changed within them (a sum + 1000); this can.

Keys are grouped as the engine tells them apart (:func:`as_key`: ``-0.0`` and ``0.0``
are two keys); values are ordered as Spark orders them (NaN above everything, ``-0.0 ==
0.0``; see ``_min_avg_max_rule`` and docs/data-quality.md).

Conservation, per (worker, key, window) for tumbling and sliding windows and per
(worker, key) for sessions, with *memberships* = the (event, window) pairs an event
belongs to (1 for tumbling and session windows, up to ``ceil(span/slide)`` for sliding)::

    memberships(input_N) - memberships(rejected_N) + open events(state_{N-1})
        == sum(count of emitted windows_N) + open events(state_N) + late rows_N

``AGGREGATE`` snapshot rows are not windows and are left out. When the pipeline has no
plain ``count`` aggregate but the ``atAggregate`` trigger, the snapshots are used
instead: there is exactly one per accepted (event, window), so
``memberships(input_N) - memberships(rejected_N) == snapshots_N + late rows_N``.

Times are compared as integer epoch milliseconds, as in the engine (docs/semantics.md).

:func:`run_checks` takes the counts of every check in one pass (``base.CountPass``: one Spark
action over every dataset, its groupings in one ``groupBy``), pandera's included: the
nulls and data checks it would spend a Spark job a column on are counted there, and pandera
validates the data of only the columns with a finding (``schemas._pandera``), reporting
what it reports validating the whole schema. A failing check then queries its samples.

Modules: :mod:`~windowing.validation.base` (results, Spark helpers),
:mod:`~windowing.validation.schemas` (pandera schemas), :mod:`~windowing.validation.rules`
(rule checks), :mod:`~windowing.validation.conservation`, :mod:`~windowing.validation.metrics`,
:mod:`~windowing.validation.recompute` and :mod:`~windowing.validation.registry` (every
check's name and output, the rejecting checks, :func:`run_checks`). This package re-exports
their public API.
"""

from __future__ import annotations

from windowing.validation.base import (
    DEFAULT_MAX_SKEW_MS,
    DEFAULT_SAMPLE_SIZE,
    CheckResult,
    as_key,
    blocking_failures,
    failures,
    jsonable,
)
from windowing.validation.conservation import conservation_check
from windowing.validation.metrics import metrics_check
from windowing.validation.recompute import RECOMPUTE_CHECK, canonical_rows, compare_frames, replay_check
from windowing.validation.registry import (
    CHECK_NAMES,
    CHECKS,
    INPUT_CHECKS,
    REJECTING_CHECKS,
    apply_rejection_policy,
    checks_of,
    format_table,
    input_types_of,
    load_outputs,
    quality_checks,
    run_checks,
    run_pass_checks,
)
from windowing.validation.rules import (
    aggregates_checks,
    allowed_reasons,
    input_checks,
    late_checks,
    rejected_checks,
    state_checks,
)
from windowing.validation.schemas import aggregates_schema, input_schema, late_schema, rejected_schema, state_schema

__all__ = [
    "CHECKS",
    "CHECK_NAMES",
    "CheckResult",
    "DEFAULT_MAX_SKEW_MS",
    "DEFAULT_SAMPLE_SIZE",
    "INPUT_CHECKS",
    "RECOMPUTE_CHECK",
    "REJECTING_CHECKS",
    "jsonable",
    "aggregates_checks",
    "aggregates_schema",
    "allowed_reasons",
    "apply_rejection_policy",
    "as_key",
    "blocking_failures",
    "canonical_rows",
    "checks_of",
    "compare_frames",
    "conservation_check",
    "failures",
    "format_table",
    "input_checks",
    "input_schema",
    "input_types_of",
    "late_checks",
    "late_schema",
    "load_outputs",
    "metrics_check",
    "quality_checks",
    "rejected_checks",
    "rejected_schema",
    "replay_check",
    "run_checks",
    "run_pass_checks",
    "state_checks",
    "state_schema",
]
