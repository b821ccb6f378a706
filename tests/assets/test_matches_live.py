"""The asset check ``matches_live``: each replayed partition against a live output, through Dagster.

The live output is the pipeline's own replay of the three days of history
(``windowing.sample.write_sample_live``), first as it is (every partition matches), then
with its known differences (a partition with some fails, with exactly those in its
metadata). One backfill replays the first two days (the live rows of the third are out
of every partition's scope); everything after it executes the check on its own, against
the committed outputs (nothing is replayed again). The mapping has no worker, so the
replay's emissions are renumbered over workers: a window emitted IDLE before midnight
and again after it is emission 2 in the second partition on both sides.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg
import pytest

from assets.matches_live import LIVE_CHECK
from tests.support.dagster_harness import DAYS, PIPELINE_YAML, Replayer, failure_message
from tests.support.outputs import metrics as metrics_of

AGG = dg.AssetKey(["clicks_hourly", "windowed_aggregates"])
CHECK = dg.AssetCheckKey(AGG, LIVE_CHECK)
DOWNSTREAM = dg.AssetKey(["clicks_report"])
REPLAYED = DAYS[:2]


def reconcile_block(live, blocking: bool) -> str:
    """The pipeline's reconcile: block: the live sink names the count ``clicks``."""
    return (
        f"reconcile:\n  live: {{path: '{live}'}}\n  columns:\n    emission: emission\n    emitTime: emit_time\n"
        f"    aggregates: {{count: clicks, sum_amount: sum_amount, unique_events: unique_events}}\n"
        f"  blocking: {'true' if blocking else 'false'}\n"
    )


def pipelines_with(root, live, blocking: bool):
    folder = root / ("blocking" if blocking else "warning")
    folder.mkdir()
    (folder / "clicks-hourly.yaml").write_text(PIPELINE_YAML + reconcile_block(live, blocking))
    return folder


def evaluations(result) -> dict[str, dg.AssetCheckEvaluation]:
    """The run's matches_live evaluations by partition (not the run's summary, without a
    partition, which a checks-only run reports for the execution Dagster planned)."""
    out = {}
    for e in result.all_events:
        if e.event_type_value == "ASSET_CHECK_EVALUATION" and e.event_specific_data.check_name == LIVE_CHECK:
            if e.event_specific_data.partition is not None:
                out[e.event_specific_data.partition] = e.event_specific_data
    return out


def day_of(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


@pytest.fixture(scope="module")
def replayed(spark, history, tmp_path_factory):
    """The first two days as one backfill, against a live output that is the pipeline's own
    replay of the three; then the live output gets its known differences (for the tests after)."""
    from windowing import load_pipeline
    from windowing.sample import write_sample_live
    from windowing.storage.inputs import read_events

    root = tmp_path_factory.mktemp("matches_live")
    live = root / "live"
    r = Replayer(history, pipelines_with(root, live, blocking=False), root / "out")
    pipeline = load_pipeline(root / "warning" / "clicks-hourly.yaml")
    events = read_events(spark, [str(history / f"date={d}") for d in DAYS])
    assert write_sample_live(spark, pipeline, events, str(live), differences=False) == []
    live_rows = spark.read.parquet(str(live)).count()
    result = r.run(REPLAYED[0], REPLAYED[-1])
    assert result.success, failure_message(result)
    differences = write_sample_live(spark, pipeline, events, str(live))
    return r, root, live, live_rows, evaluations(result), differences


def checks_only(defs: dg.Definitions, instance, days, assets=()):
    """Execute matches_live on its own (with ``assets`` downstream of it) over ``days``."""
    job = defs.resolve_implicit_global_asset_job_def().get_subset(
        asset_selection=set(assets), asset_check_selection={CHECK}
    )
    return job.execute_in_process(
        instance=instance,
        raise_on_error=False,
        tags={"dagster/asset_partition_range_start": days[0], "dagster/asset_partition_range_end": days[-1]},
        run_config={"ops": {"clicks_hourly_replay": {"config": {}}}},
    )


def with_downstream(defs: dg.Definitions) -> dg.Definitions:
    """``defs`` and a report downstream of the aggregates."""

    @dg.asset(
        key=DOWNSTREAM,
        deps=[AGG],
        partitions_def=defs.resolve_assets_def(AGG).partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )  # as the replay's: one run for a range
    def clicks_report() -> dg.MaterializeResult:
        return dg.MaterializeResult()

    return dg.Definitions.merge(defs, dg.Definitions(assets=[clicks_report]))


def test_a_live_output_equal_to_the_replay_matches_in_every_partition(replayed):
    r, _, live, live_rows, evaluated, _ = replayed
    assert sorted(evaluated) == REPLAYED
    for day in REPLAYED:
        e = evaluated[day]
        meta = {k: v.value for k, v in e.metadata.items()}
        emitted = metrics_of(r.folder(day))["windows_emitted"]
        assert e.passed, e.description
        assert e.description.startswith(f"partition {day}: 100.00 % of {emitted} window emissions"), e.description
        assert (meta["match_percent"], meta["compared"], meta["match"], meta["replay_rows"], meta["live_rows"]) == (
            100.0,
            emitted,
            emitted,
            emitted,
            emitted,
        )
        assert meta["value_mismatch"] + meta["missing_in_replay"] + meta["extra_in_replay"] == 0
        assert meta["mismatches"].startswith("No mismatches")
        # Each partition compares its own windows; the other days' live rows are out of its scope.
        assert meta["live_rows_outside_partition"] == live_rows - emitted
        assert f"--partition-edge {day}T00:00:00Z" in meta["reproduce"] and meta["live"] == str(live)
        # The evaluation targets the partition's own materialization.
        mat = r.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=AGG, asset_partitions=[day]), limit=1
        ).records[0]
        assert e.target_materialization_data.storage_id == mat.storage_id


def test_known_differences_fail_the_check_with_exactly_them(replayed):
    """Executed on its own (the UI's Execute button), against the perturbed live output:
    each partition lists its differences, in the right category, explained or not, and no
    others. Not blocking: the check warns, and the report downstream is materialized."""
    r, _, _, _, _, differences = replayed
    assert [d.kind for d in differences] == ["count", "late_counted", "float", "rounding", "dropped", "duplicate"]
    result = checks_only(with_downstream(r.defs), r.instance, REPLAYED, assets=[DOWNSTREAM])
    assert result.success, failure_message(result)
    assert r.instance.get_materialized_partitions(DOWNSTREAM) == set(REPLAYED)
    assert r.instance.get_materialized_partitions(AGG) == set(REPLAYED)  # nothing replayed again
    evaluated = evaluations(result)
    assert sorted(evaluated) == REPLAYED
    for day in REPLAYED:
        mine = [d for d in differences if day_of(d.emit_time_ms) == day]
        e = evaluated[day]
        meta = {k: v.value for k, v in e.metadata.items()}
        assert mine and not e.passed and e.severity == dg.AssetCheckSeverity.WARN and not e.blocking, e.description
        for category in ("VALUE_MISMATCH", "MISSING_IN_REPLAY", "EXTRA_IN_REPLAY"):
            assert meta[category.lower()] == sum(d.category == category for d in mine), (day, category, mine)
        assert meta["match"] == meta["compared"] - len(mine)
        assert meta["match_percent"] == round(100 * meta["match"] / meta["compared"], 4)
        want = {}
        for d in mine:
            if d.explanation:
                want[d.explanation] = want.get(d.explanation, 0) + 1
        assert meta["explained_by"] == want and meta["explained"] == sum(want.values())
        assert meta["unexplained"] == len(mine) - sum(want.values())
        # The table: one row per difference (its key, window, category and explanation).
        rows = [line for line in meta["mismatches"].splitlines() if line.startswith("| ") and "category" not in line]
        assert len(rows) == len(mine), meta["mismatches"]
        for d in mine:
            start = datetime.fromtimestamp(d.window_start_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            [row] = [x for x in rows if f"| {d.key} |" in x and start in x]
            assert f"| {d.category} |" in row and f"| {d.explanation or 'unexplained'} |" in row, row
            for name, value in d.live_values:
                assert f"{name}: live {value}" in row, row


def test_a_failing_blocking_check_stops_what_is_downstream(replayed, history):
    """The same check, configured blocking: an ERROR that fails the step, and the report
    downstream of the aggregates is not materialized."""
    r, root, live, _, _, differences = replayed
    day = day_of(differences[0].emit_time_ms)
    replayer = Replayer(history, pipelines_with(root, live, blocking=True), r.output_root)
    result = checks_only(with_downstream(replayer.defs), replayer.instance, [day], assets=[DOWNSTREAM])
    [e] = evaluations(result).values()
    assert (e.partition, e.passed, e.blocking, e.severity) == (day, False, True, dg.AssetCheckSeverity.ERROR)
    assert not result.success and "blocking asset check" in failure_message(result)
    assert replayer.instance.get_materialized_partitions(DOWNSTREAM) == set()


def test_an_unreadable_live_output_fails_the_check_naming_it(replayed, history):
    r, root, _, _, _, _ = replayed
    missing = root / "no-such-live"
    (root / "missing").mkdir()
    replayer = Replayer(history, pipelines_with(root / "missing", missing, blocking=False), r.output_root)
    result = checks_only(replayer.defs, replayer.instance, REPLAYED)
    assert result.success, failure_message(result)
    evaluated = evaluations(result)
    assert sorted(evaluated) == REPLAYED
    for e in evaluated.values():
        assert not e.passed and str(missing) in e.description and "do not exist" in e.description, e.description
