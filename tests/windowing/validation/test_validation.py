"""The check registry (windowing.validation.registry): one list of every check, the output
each belongs to and which reject rows, from which run_checks' names, the rejection policy
and the Dagster asset checks' names (assets/pipelines.py QUALITY_CHECKS) all follow."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.engine_harness import to_df
from windowing import contract
from windowing import validation as V
from windowing.config import arrow_schemas, parse_pipeline
from windowing.runner.replay import replay
from windowing.validation import registry as R


def _pipeline(window: str = "tumbling-time-window"):
    return parse_pipeline(
        {
            "name": "registry-test",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"interval": "1s"}},
            "emitter": {
                window: {
                    **({"idleTimeout": "2s"} if window == "session-window" else {"windowSpan": "2s"}),
                    "keyExtractor": "user",
                    "timeConfig": {"eventTimeExtractor": "event_time"},
                    "aggregateDefinition": [
                        {"type": "count"},
                        {"type": "sum", "column": "amount"},
                        {"type": "min", "column": "amount"},
                        {"type": "max", "column": "amount"},
                    ],
                },
                "triggers": ["atWindowEnd"],
            },
        }
    )


def _rows() -> list[dict]:
    rows = []
    for i in range(40):
        arrival = 1_000 + i * 250
        event = arrival - (5_000 if i % 13 == 12 else 100)  # now and then a late one
        rows.append({"arrival": arrival, "event_time": event, "offset": i, "user": f"u{i % 3}", "amount": float(i % 7)})
    return rows


# --------------------------------------------------------------------------- without Spark


def test_the_registry_lists_each_check_once_with_a_known_output():
    names = [c.name for c in R.CHECKS]
    assert len(names) == len(set(names))
    assert V.CHECK_NAMES == tuple(names)
    assert {c.output for c in R.CHECKS} <= {*contract.OUTPUTS, None}
    assert [c.name for c in R.CHECKS if c.output is None] == [V.RECOMPUTE_CHECK]
    assert set(V.INPUT_CHECKS) == {n for n in names if n.startswith("input_")}


def test_every_rejecting_check_is_a_registered_check_of_the_input_or_the_rejected_rows():
    assert V.REJECTING_CHECKS
    assert all(R.checks_of("rejected").count(n) == 1 for n in V.REJECTING_CHECKS)
    assert all(n.startswith(("input_", "rejected_")) for n in V.REJECTING_CHECKS)
    assert {c.name for c in R.CHECKS if c.rejecting} == set(V.REJECTING_CHECKS)


def test_every_output_has_checks_and_every_check_but_the_recompute_an_output():
    by_output = {o: R.checks_of(o) for o in contract.OUTPUTS}
    assert all(by_output.values())
    assert sorted(n for names in by_output.values() for n in names) == sorted(
        n for n in V.CHECK_NAMES if n != V.RECOMPUTE_CHECK
    )


@pytest.mark.parametrize("output", contract.OUTPUTS)
def test_quality_checks_select_exactly_the_outputs_checks(output):
    short = R.quality_checks(output)
    selected = tuple(n for n in V.CHECK_NAMES if n.startswith(short))
    assert selected == R.checks_of(output)


def test_dagster_quality_checks_are_the_registrys():
    from assets.pipelines import OUTPUTS, QUALITY_CHECKS

    assert QUALITY_CHECKS == {asset: R.quality_checks(ds) for asset, ds in OUTPUTS.items()}
    # the names the asset checks' descriptions showed before the registry
    assert QUALITY_CHECKS == {
        "window_state": ("state_", "conservation"),
        "windowed_aggregates": ("aggregates_", "metrics_consistent"),
        "late_events": ("late_",),
        "rejected_events": ("rejected_", "input_"),
    }


@pytest.mark.parametrize("window", ["tumbling-time-window", "session-window"])
def test_contract_schemas_are_the_kernels(window):
    from windowing.kernel import Spec

    pipeline = _pipeline(window)
    types = {
        "arrival": pa.int64(),
        "event_time": pa.int64(),
        "offset": pa.int64(),
        "user": pa.string(),
        "amount": pa.decimal128(12, 2),
    }
    spec = Spec(pipeline=pipeline, input_types=types)
    assert spec.aggregates_schema() == arrow_schemas.aggregates_schema(pipeline, types)
    assert spec.late_schema() == arrow_schemas.late_schema(types)
    assert spec.state_schema() == arrow_schemas.state_schema(pipeline, types)


# --------------------------------------------------------------------------- with Spark


def test_run_checks_reports_the_registrys_names_per_output(spark):
    pipeline = _pipeline()
    events = to_df(spark, _rows())
    result = replay(spark, pipeline, events)
    try:
        results = V.run_checks(spark, pipeline, result, input_df=events)
        assert tuple(r.name for r in results) == V.CHECK_NAMES
        assert not V.failures(results), V.format_table(results)
        only = set(R.checks_of("late_events"))  # an output's checks, by the registry, run alone
        assert {r.name for r in V.run_checks(spark, pipeline, result, input_df=events, only=only)} == only
    finally:
        result.unpersist()


def test_a_partition_is_checked_as_small_from_its_metrics_only_when_they_say_it_is():
    """The checks' pass reads a small partition in one task (base.CountPass(small=True)):
    decided from the replay's metrics (a dict read back, or ReplayMetrics), never guessed."""
    from windowing.metrics import ReplayMetrics
    from windowing.validation.base import SMALL_PASS_ROWS

    hourly = {"input_rows": 830, "windows_emitted": 300, "snapshots_emitted": 0, "late_event_windows": 20}
    assert R._pass_rows({**hourly, "open_windows": 500}) == 830 + 300 + 20 + 2 * 500
    assert R._pass_rows(ReplayMetrics(**hourly, open_windows=500)) == 2150
    big = {**hourly, "open_windows": SMALL_PASS_ROWS}  # a tiny hour over a large state
    assert R._pass_rows(big) > SMALL_PASS_ROWS
    assert R._pass_rows(None) is None
    assert R._pass_rows({"input_rows": 5}) is None  # not all known: not small  # not all known: not small
