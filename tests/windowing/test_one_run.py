"""``rewindow replay --output`` goes through the chain's write-audit-publish (issue 51):
a one-partition history (``windowing.chain.OneRun``) written, checked and committed by the
same code as every partition of a backfill."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.support.cli import rewindow
from tests.support.outputs import current, snapshot

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
DAY, NEXT = "2024-03-04", "2024-03-05"

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    from windowing.sample import generate_history

    zone = tmp_path_factory.mktemp("one-run") / "landing"
    start = datetime.fromisoformat(DAY).replace(tzinfo=timezone.utc)
    generate_history(zone, start, days=2, events_per_day=600, keys=8, seed=3, partitions=2, files_per_day=2)
    return zone


def _without_run(record: dict) -> dict:
    """A commit record's lineage and check results, less what names its own run."""
    lineage = {k: v for k, v in record["extra"]["lineage"].items() if k != "run_id"}
    return {"lineage": lineage, "checks": record["extra"]["checks"], "metrics": record["metrics"]}


def test_a_checked_replay_writes_what_a_one_partition_backfill_writes(spark, landing, tmp_path):
    rc, out, err = rewindow(
        "replay", "--config", CLICKS, "--input", landing / f"date={DAY}", "--output", tmp_path / "replay" / DAY,
        "--checks", "--partition", DAY,
    )  # fmt: skip
    assert rc == 0, err
    assert "committed as run 1" in out
    rc, _, err = rewindow(
        "backfill", "--config", CLICKS, "--input", landing, "--output", tmp_path / "backfill", "--from", DAY,
    )  # fmt: skip
    assert rc == 0, err
    one, backfilled = tmp_path / "replay" / DAY, tmp_path / "backfill" / "clicks-hourly" / DAY
    assert snapshot(spark, one) == snapshot(spark, backfilled)  # the same rows in every output, and metrics
    replayed, chained = _without_run(current(one)), _without_run(current(backfilled))
    assert replayed == chained
    assert {c["name"] for c in replayed["checks"]} >= {"conservation", "metrics_consistent", "input_schema"}
    assert replayed["lineage"]["partition"] == DAY and replayed["lineage"]["previous_partition"] is None


def test_a_replay_from_a_state_records_where_it_started_and_a_failing_check_commits_nothing(spark, landing, tmp_path):
    """--state-in: the lineage names the output it continued and that state's hash; a
    blocking check that fails leaves the output uncommitted (exit 1), as a failing
    partition of a backfill is."""
    first, second = tmp_path / "first", tmp_path / "second"
    rc, _, err = rewindow("replay", "--config", CLICKS, "--input", landing / f"date={DAY}", "--output", first)
    assert rc == 0, err
    assert current(first)["extra"]["checks"] == []  # not publishing, not asked: not run
    rc, _, err = rewindow(
        "replay", "--config", CLICKS, "--input", landing / f"date={NEXT}", "--output", second,
        "--state-in", first, "--checks",
    )  # fmt: skip
    assert rc == 0, err
    before, after = current(first)["extra"]["lineage"], current(second)["extra"]["lineage"]
    assert after["previous_partition"] == "first" and after["start_state_hash"] == before["state_hash"]
    again = tmp_path / "again"
    rc, _, err = rewindow(
        "replay", "--config", CLICKS, "--input", landing / f"date={NEXT}", "--output", again,
        "--state-in", second, "--checks",
    )  # fmt: skip
    # The same events after their own state: every batch is already committed, so every row
    # is rejected, far over the pipeline's maxRejectedShare: a blocking failure.
    assert rc == 1 and "blocking data-quality checks failed" in err, err
    assert not (again / "_commits").exists() or not any((again / "_commits").iterdir())
