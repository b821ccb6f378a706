"""quality.maxRejectedShare: the input check that flags rejected rows warns within the
pipeline's share and blocks above it (docs/data-quality.md, "Rejected rows")."""

from __future__ import annotations

import pytest

from windowing import parse_pipeline
from windowing.validation import CheckResult, apply_rejection_policy, blocking_failures

DOC = {
    "name": "policy",
    "source": {"arrivalTime": "arr"},
    "emitter": {
        "tumbling-time-window": {"windowSpan": "1h", "keyExtractor": "k", "aggregateDefinition": [{"type": "count"}]}
    },
}


def _pipeline(share=None):
    return parse_pipeline({**DOC, **({"quality": {"maxRejectedShare": share}} if share is not None else {})})


def _results(failing: int):
    return [
        CheckResult("input_times_parseable", failing == 0, failing, [], "arrival and event times present"),
        CheckResult("input_event_time_skew", False, 3, [], "skew"),  # not about rejected rows: untouched
        CheckResult("aggregates_schema", True, 0, [], "schema"),
    ]


@pytest.mark.parametrize(
    "share, rows, rejected, blocking, says",
    [
        (None, 10_000, 10, False, "10 of 10,000 rows rejected (0.1000%), within quality.maxRejectedShare (0.1000%)"),
        (None, 10_000, 11, True, "11 of 10,000 rows rejected (0.1100%), above quality.maxRejectedShare (0.1000%)"),
        ("5%", 100, 5, False, "within"),
        (0, 100, 1, True, "above"),
    ],
)
def test_the_share_decides_whether_the_input_check_blocks(share, rows, rejected, blocking, says):
    out = apply_rejection_policy(_pipeline(share), _results(rejected), rows, rejected)
    times, skew, schema = out
    assert times.blocking is blocking and not times.passed
    assert times.status == ("FAIL" if blocking else "WARN")
    assert says in times.description
    assert skew.blocking and skew.status == "FAIL"  # other failures keep blocking
    assert schema.passed
    assert [r.name for r in blocking_failures(out)] == (["input_times_parseable"] if blocking else []) + [
        "input_event_time_skew"
    ]


def test_a_passing_check_and_unknown_counts_are_left_alone():
    passing = apply_rejection_policy(_pipeline(), _results(0), 100, 0)
    assert passing[0].passed and passing[0].status == "PASS"
    unknown = apply_rejection_policy(_pipeline(), _results(4), None, None)
    assert unknown[0].blocking and unknown[0].description == "arrival and event times present"
