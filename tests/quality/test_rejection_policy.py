"""quality.maxRejectedShare: the input check that flags rejected rows warns within the
pipeline's share and blocks above it (docs/data-quality.md, "Rejected rows")."""

from __future__ import annotations

import re

import pyarrow as pa
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


# --------------------------------------------------------------------------- issue 47: arrivals in a later day's folder


def test_arrivals_filed_in_a_later_days_folder_count_against_the_share_and_warn(
    spark, history, configs, tmp_path, caplog, verify
):
    """Day-1 arrivals found in day 2's folder are rejected as ``batch already committed``
    (their workers committed later batches on day 1). They count against
    ``quality.maxRejectedShare`` as any rejected row: ``rejected_batch_committed`` blocks
    above it (the partition is not committed, ``verify`` exits 1) and warns within it (the
    partition commits, and the backfill's log and the check's result say so)."""
    import logging

    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import yaml

    from tests.quality.conftest import START
    from windowing import load_pipeline
    from windowing.chain import Chain
    from windowing.contract import BATCH_COMMITTED
    from windowing.partitions import Partitions

    day1, day2 = (pq.read_table(d) for d in history)
    noon = pc.less(day1["arrival_time"], pa.scalar(START.replace(hour=12), day1.schema.field("arrival_time").type))
    moved = day1.filter(noon)
    landing = tmp_path / "landing"
    for day, table in (("2024-01-01", day1.filter(pc.invert(noon))), ("2024-01-02", pa.concat_tables([day2, moved]))):
        (landing / f"date={day}").mkdir(parents=True)
        pq.write_table(table, landing / f"date={day}" / "part-0.parquet")
    doc = yaml.safe_load(configs["clicks"].read_text())
    doc.pop("reconcile")
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(yaml.safe_dump({**doc, "quality": {"maxRejectedShare": "50%"}}))
    strict = tmp_path / "strict.yaml"  # the default share, 0.1 %
    strict.write_text(yaml.safe_dump(doc))
    share = moved.num_rows / (day2.num_rows + moved.num_rows)
    assert 0.2 < share < 0.5

    chain = Chain(spark, load_pipeline(lenient), str(landing), str(tmp_path / "out"), Partitions("day", START))
    with caplog.at_level(logging.WARNING, logger="rewindow.chain"):
        parts = list(chain.replay(["2024-01-01", "2024-01-02"]))
    assert [p.committed for p in parts] == [True, True]
    assert parts[1].metrics.rejected_by_reason == {BATCH_COMMITTED: moved.num_rows}
    [check] = [r for r in parts[1].checks if r.name == "rejected_batch_committed"]
    assert (check.passed, check.blocking, check.failure_count) == (False, False, moved.num_rows)
    says = f"{moved.num_rows:,} of {day2.num_rows + moved.num_rows:,} rows rejected ({share:.4%}), within"
    assert says in check.description
    [warning] = [r.getMessage() for r in caplog.records if "2024-01-02" in r.getMessage()]
    assert "committed with a warning: rejected_batch_committed" in warning and says in warning

    folder = chain.folder("2024-01-02")
    code, out, _ = verify(folder, "--config", strict)
    assert code == 1 and re.search(rf"rejected_batch_committed +FAIL +{moved.num_rows} .*, above quality", out), out
