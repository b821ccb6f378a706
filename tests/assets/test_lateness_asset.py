"""The lateness asset: partitioned like the replay, downstream of it, a chain of its own.

One replay backfill of two days, then the lateness job over the same range as one run:
each partition's analysis matches its replay (the ``matches_replay`` check), carries the
numbers the UI plots, and the range gets its own report, equal to the partitions added up.
"""

from __future__ import annotations

import dagster as dg

from orchestration.schedules import LATENESS_JOB, REPLAY_JOB
from tests.support.dagster_harness import DAYS, Replayer, failure_message
from windowing.lateness.outputs import read_lateness
from windowing.storage.lake import Lake

LATENESS = dg.AssetKey(["clicks_hourly", "lateness"])


def test_lateness_asset_over_a_range_matches_the_replays(spark, history, pipelines_dir, tmp_path):
    r = Replayer(history, pipelines_dir, tmp_path / "out")
    assert LATENESS not in r.defs.resolve_job_def(REPLAY_JOB).asset_layer.selected_asset_keys  # not replayed
    replayed = r.run(DAYS[0], DAYS[1])
    assert replayed.success, failure_message(replayed)
    job = r.defs.resolve_job_def(LATENESS_JOB)
    result = job.execute_in_process(
        instance=r.instance,
        raise_on_error=False,
        tags={"dagster/asset_partition_range_start": DAYS[0], "dagster/asset_partition_range_end": DAYS[1]},
    )
    assert result.success, failure_message(result)
    assert r.instance.get_materialized_partitions(LATENESS) == set(DAYS[:2])
    checks = result.get_asset_check_evaluations()
    assert sorted((c.partition, c.passed) for c in checks) == [(DAYS[0], True), (DAYS[1], True)]
    mats = {m.partition: m.materialization.metadata for m in result.get_asset_materialization_events()}
    for day in DAYS[:2]:
        meta = mats[day]
        assert isinstance(meta["late_share"], dg.FloatMetadataValue) and isinstance(
            meta["latency_p99_ms"], dg.FloatMetadataValue
        )
        assert isinstance(meta["smallest_delay_ms_min_event_time"], dg.IntMetadataValue)
        assert "| MIN_EVENT_TIME | WINDOW_CLOSED | 5s (configured) |" in meta["curve"].value
        assert Lake(spark).get_text(meta["report"].path).startswith("<!DOCTYPE html>")
    # The range report: the partitions' figures added up.
    figs = [read_lateness(spark, mats[day]["path"].path.rsplit("/runs/", 1)[0]).figures for day in DAYS[:2]]
    whole = read_lateness(spark, mats[DAYS[1]]["range_report"].path.rsplit("/runs/", 1)[0]).figures
    assert whole["accepted_events"] == sum(f["accepted_events"] for f in figs)
    for c, *parts in zip(whole["curves"], *(f["curves"] for f in figs)):
        assert c["late_events"] == sum(p["late_events"] for p in parts)
        assert c["closed_idle"] == sum(p["closed_idle"] for p in parts)
        assert c["latency_windows"] == sum(p["latency_windows"] for p in parts)
