"""The pipeline assets on the real engine: partition by partition, backfills, reruns, failures."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta

import dagster as dg
import pytest

from assets.pipelines import CHECK_NAME
from tests.support.dagster_harness import DAYS, Replayer, failure_message, lineage, rows
from tests.support.histories import landing_with_odd_row as _landing_with_odd_row
from tests.support.outputs import current
from tests.support.outputs import metrics as metrics_of
from windowing.durations import human_duration
from windowing.metrics import render_prometheus
from windowing.storage.store import state_content_hash

AGG = dg.AssetKey(["clicks_hourly", "windowed_aggregates"])
STATE = dg.AssetKey(["clicks_hourly", "window_state"])


@pytest.fixture(scope="module")
def one_by_one(spark, history, pipelines_dir, tmp_path_factory) -> Replayer:
    """Three daily partitions, one run each, oldest first."""
    r = Replayer(history, pipelines_dir, tmp_path_factory.mktemp("one_by_one"))
    for day in DAYS:
        result = r.run(day)
        assert result.success, failure_message(result)
    return r


@pytest.fixture(scope="module")
def backfill(spark, history, pipelines_dir, tmp_path_factory) -> Replayer:
    """The same three partitions as one single-run backfill."""
    r = Replayer(history, pipelines_dir, tmp_path_factory.mktemp("backfill"))
    result = r.run(DAYS[0], DAYS[-1], checks=True)  # with the data-quality checks, as a scheduled run
    assert result.success, failure_message(result)
    assert len(result.get_asset_materialization_events()) == 3 * 4  # 3 partitions x 4 outputs
    observed = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert len(observed) == 3  # historical_events: one observation per partition, first
    return r


def _union(spark, replayer: Replayer, output: str):
    frames = [spark.read.parquet(str(replayer.current(day) / output)) for day in DAYS]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def test_one_by_one_equals_backfill_equals_single_replay(spark, history, pipelines_dir, one_by_one, backfill):
    from windowing import load_pipeline, replay
    from windowing.storage.inputs import read_events

    for day in DAYS:  # each partition folder: identical, output by output
        for output in ("aggregates", "late_events", "rejected", "state"):
            a = spark.read.parquet(str(one_by_one.current(day) / output))
            b = spark.read.parquet(str(backfill.current(day) / output))
            assert rows(a) == rows(b), (day, output)
        assert lineage(one_by_one.folder(day)).state_hash == lineage(backfill.folder(day)).state_hash

    pipeline = load_pipeline(pipelines_dir / "clicks-hourly.yaml")
    whole = replay(spark, pipeline, read_events(spark, [str(history / f"date={d}") for d in DAYS]))
    try:
        expected_aggregates, expected_late = rows(whole.aggregates), rows(whole.late_events)
        expected_state = state_content_hash(whole.state)
    finally:
        whole.unpersist()
    assert len(expected_aggregates) > 100 and expected_late  # the comparison is not vacuous
    for replayer in (one_by_one, backfill):
        assert rows(_union(spark, replayer, "aggregates")) == expected_aggregates
        assert rows(_union(spark, replayer, "late_events")) == expected_late
        assert lineage(replayer.folder(DAYS[-1])).state_hash == expected_state


def test_the_cli_backfill_equals_the_dagster_backfill(spark, history, pipelines_dir, backfill, tmp_path):
    """``rewindow backfill`` over the same three partitions: the same outputs, row for row,
    the same schemas and the same lineage; and it reads the store Dagster wrote."""
    from tests.support.cli import rewindow

    cli_root = tmp_path / "cli"
    rc, out, err = rewindow(
        "backfill",
        "--config",
        pipelines_dir / "clicks-hourly.yaml",
        "--input",
        history,
        "--output",
        cli_root,
        "--from",
        DAYS[0],
        "--to",
        DAYS[-1],
    )
    assert rc == 0, err
    cli = Replayer(history, pipelines_dir, cli_root)  # only to find its folders
    for day in DAYS:
        for output in ("aggregates", "late_events", "rejected", "state"):
            a = spark.read.parquet(str(backfill.current(day) / output))
            b = spark.read.parquet(str(cli.current(day) / output))
            assert a.schema == b.schema, (day, output)
            assert rows(a) == rows(b), (day, output)
        ours, theirs = lineage(cli.folder(day)), lineage(backfill.folder(day))
        assert (ours.state_hash, ours.start_state_hash, ours.previous_partition, ours.fingerprint) == (
            theirs.state_hash,
            theirs.start_state_hash,
            theirs.previous_partition,
            theirs.fingerprint,
        )
    # the demo's table, one line per partition; the progress on stderr
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["partition", "events"])
    assert [line.split()[0] for line in lines[header + 1 : header + 4]] == DAYS
    assert "3/3" in err and "events/s" in err
    rc, out, _ = rewindow("status", "--output", backfill.output_root)  # the store Dagster wrote
    assert rc == 0 and out.count(" committed ") == 3, out


def test_materializations_carry_per_partition_metadata(spark, one_by_one, backfill):
    for replayer in (one_by_one, backfill):
        series: dict[str, list] = {}
        for day in DAYS:
            records = replayer.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=AGG, asset_partitions=[day]), limit=1
            ).records
            meta = records[0].asset_materialization.metadata
            metrics = metrics_of(replayer.folder(day))
            # In the backfill too, each partition has its own figures, not the run's.
            assert meta["input_rows"].value == metrics["input_rows"] == 300
            assert meta["emitted_by_reason"].value == metrics["emitted_by_reason"]
            assert meta["windows_emitted"].value == metrics["windows_emitted"] > 0
            assert meta["late_events"].value == metrics["late_events"]
            assert meta["late_event_windows"].value == metrics["late_event_windows"]
            assert meta["windows_closed"].value == metrics["windows_closed"] == metrics["windows_emitted"]
            assert meta["keys_held"].value == metrics["keys_held"]
            # VoltSP's window metrics beside metrics.json, as the CLI writes them.
            [prom] = [p for p in (replayer.current(day) / "metrics.prom").glob("part-*") if p.is_file()]
            assert prom.read_text() == render_prometheus(metrics)
            assert meta["rejected_rows"] == dg.MetadataValue.text("0")  # text: the rejected_events asset plots them
            assert meta["unique_keys"].value == metrics["unique_keys"] > 0
            # The watermark as a Dagster timestamp (the UI shows it in the viewer's zone), issue 47.
            assert isinstance(meta["watermark_reached"], dg.TimestampMetadataValue)
            reached = datetime.fromisoformat(metrics["watermark_reached"])
            assert meta["watermark_reached"].value == reached.timestamp() and reached.date().isoformat() == day
            # Lateness percentiles in seconds, typed (plotted), and as text in human units; never a JSON blob.
            assert "lateness_ms_percentiles" not in meta
            for q in ("p50", "p90", "p99", "max"):
                ms = metrics["lateness_ms_percentiles"][q] or 0
                assert meta[f"lateness_{q}_seconds"].value == round(ms / 1000, 3), q
                assert meta[f"lateness_{q}"].value == (human_duration(round(ms)) if ms else "-"), q
                assert not any(k.startswith("lateness_") and k.endswith("_ms") for k in meta), sorted(meta)
            # Dagster's standard keys: the catalog's row count, Columns section and location.
            folder = replayer.current(day) / "aggregates"
            assert meta["dagster/row_count"].value == spark.read.parquet(str(folder)).count() > 0
            columns = {c.name: c for c in meta["dagster/column_schema"].value.columns}
            assert (
                columns["sum_amount"].type == "double"
                and "not the Dagster partition" in columns["partition"].description
            )
            assert meta["dagster/uri"].value == f"file:{folder}"
            assert meta["path"].value == str(replayer.current(day) / "aggregates")
            preview = meta["preview"].value
            columns = [c.name for c in preview.schema.columns][:4]
            assert columns == ["partition", "user_id", "window_start", "window_end"]
            assert (
                dict(zip((c.name for c in preview.schema.columns), (c.type for c in preview.schema.columns)))[
                    "sum_amount"
                ]
                == "double"
            )
            assert 0 < len(preview.records) <= 5 and isinstance(preview.records[0].data["count"], int)
            # Times in the preview say their zone (issue 47): UTC, as the engine computes them.
            start = preview.records[0].data["window_start"]
            assert start.endswith("Z") and datetime.fromisoformat(start).utcoffset() == timedelta(0), start
            # Numbers Dagster plots over partitions, one series each: the reasons this pipeline
            # (tumbling, with an idle timeout) closes windows by; the exceptions in the JSON only.
            assert meta["closed_by_reason"].value == metrics["closed_by_reason"]
            for reason in ("watermark", "idle"):
                assert meta[f"windows_emitted_{reason}"].value == metrics["emitted_by_reason"].get(reason.upper(), 0)
                assert meta[f"windows_closed_{reason}"].value == metrics["closed_by_reason"].get(reason.upper(), 0)
            assert not [k for k in meta if k.endswith(("_max_duration", "_end_of_input"))], sorted(meta)
            assert "snapshots_emitted" not in meta  # atWindowEnd: no snapshot rows, by configuration
            accepted = metrics["input_rows"] - metrics["rejected_rows"]
            assert meta["late_share"].value == round(metrics["late_events"] / accepted, 6) > 0
            assert meta["lateness_p99_seconds"].value == round(metrics["lateness_ms_percentiles"]["p99"] / 1000, 3)
            assert isinstance(meta["lateness_p50_seconds"].value, float)
            assert meta["replay_seconds"].value > 0 and meta["events_per_second"].value > 0
            for k, v in meta.items():
                if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue)):
                    series.setdefault(k, []).append(v.value)
        # Every number is a plot over the partitions: none is zero on every partition (a flat line).
        assert series and not {k: v for k, v in series.items() if not any(v)}, series


def test_rerun_of_a_past_partition_is_identical_and_leaves_later_ones_in_sync(spark, one_by_one):
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    day = DAYS[1]
    before = {o: rows(spark.read.parquet(str(one_by_one.current(day) / o))) for o in ("aggregates", "late_events")}
    hash_before = lineage(one_by_one.folder(day)).state_hash

    result = one_by_one.run(day)
    assert result.success, failure_message(result)
    for output, expected in before.items():
        assert rows(spark.read.parquet(str(one_by_one.current(day) / output))) == expected
    assert lineage(one_by_one.folder(day)).state_hash == hash_before
    # Same state as before: the chain check finds nothing to rerun, for the day and the one after it.
    checks = {c.partition: c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME}
    assert sorted(checks) == DAYS[1:] and all(c.passed for c in checks.values()), checks

    # Dagster sees the rerun read the same input (the day's observed digest) with the same code
    # version: its data version is unchanged, so the next partition is not marked unsynced.
    assets = list(one_by_one.defs.resolve_asset_graph().assets_defs)
    resolver = get_stale_status_resolver(one_by_one.instance, assets)
    assert resolver.get_status(STATE, DAYS[2]) == StaleStatus.FRESH
    assert resolver.get_status(STATE, DAYS[0]) == StaleStatus.FRESH


def test_a_partition_without_the_previous_state_fails(spark, history, pipelines_dir, tmp_path):
    r = Replayer(history, pipelines_dir, tmp_path)
    result = r.run(DAYS[2])
    assert not result.success
    assert "the state of partition 2024-01-01 is missing" in failure_message(result)

    assert r.run(DAYS[0]).success
    result = r.run(DAYS[2])
    message = failure_message(result)
    assert not result.success
    assert "Cannot replay partition 2024-01-03 of pipeline clicks-hourly" in message
    assert "the state of partition 2024-01-02 is missing" in message
    assert "materialize 2024-01-02..2024-01-03" in message
    assert not r.folder(DAYS[2]).exists()  # nothing written


def test_changed_history_flags_later_partitions_until_they_are_rerun(spark, history, one_by_one, tmp_path):
    r = Replayer(history, one_by_one.storage.pipelines_dir, tmp_path / "out")
    shutil.copytree(one_by_one.output_root, r.output_root)
    # Day 1 of the landing zone is corrected: one of its files is withdrawn.
    changed = tmp_path / "landing"
    shutil.copytree(history, changed)
    next(iter(sorted((changed / "date=2024-01-01").glob("*.parquet")))).unlink()

    result = r.with_landing(changed).run(DAYS[0])
    assert result.success, failure_message(result)
    # One evaluation per partition: the rerun one passes, each later one is out of date,
    # on its own materialization (what the asset and its partitions show), reported last.
    checks = [c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME]
    assert [(c.partition, c.passed) for c in checks] == [(DAYS[0], True), (DAYS[1], False), (DAYS[2], False)]
    for check in checks[1:]:
        assert check.metadata["rerun_range"].value == "2024-01-02..2024-01-03"
        assert check.description.startswith(f"partition {check.partition} is out of date"), check.description
        # (this instance never materialized them: the outputs were copied, so no target)
        mats = r.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=STATE, asset_partitions=[check.partition]), limit=1
        ).records
        target = check.target_materialization_data
        assert (target.storage_id if target else None) == (mats[0].storage_id if mats else None)

    result = r.with_landing(changed).run(DAYS[2])
    message = failure_message(result)
    assert "partition 2024-01-02 was computed from an older state of partition 2024-01-01" in message
    assert "Rerun 2024-01-02..2024-01-03" in message

    result = r.with_landing(changed).run(DAYS[1], DAYS[2])
    assert result.success, failure_message(result)
    checks = [c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME]
    assert sorted(c.partition for c in checks) == DAYS[1:] and all(c.passed for c in checks)  # one per partition


def test_flush_at_end_and_an_empty_day(spark, history, one_by_one, tmp_path):
    r = Replayer(history, one_by_one.storage.pipelines_dir, tmp_path / "out")
    shutil.copytree(one_by_one.output_root, r.output_root)
    result = r.run(DAYS[2], flush_at_end=True)
    assert result.success, failure_message(result)
    reasons = metrics_of(r.folder(DAYS[2]))["emitted_by_reason"]
    assert reasons.get("END_OF_INPUT", 0) > 0

    # 2024-01-04 has no landing folder: an empty day, but it cannot continue a flushed state.
    result = r.run("2024-01-04")
    assert "partition 2024-01-03 was replayed with flush_at_end" in failure_message(result)

    assert r.run(DAYS[2]).success
    result = r.run("2024-01-04")
    assert result.success, failure_message(result)
    metrics = metrics_of(r.folder("2024-01-04"))
    assert metrics["input_rows"] == 0
    assert lineage(r.folder("2024-01-04")).previous_partition == DAYS[2]


def test_hourly_partitions_equal_one_replay_of_those_hours(spark, history, pipelines_dir, tmp_path):
    from pyspark.sql import functions as F

    from windowing import load_pipeline, replay
    from windowing.storage.inputs import read_events

    r = Replayer(history, pipelines_dir, tmp_path, grain="hourly")
    hours = ["2024-01-01-00:00", "2024-01-01-01:00", "2024-01-01-02:00"]
    result = r.run(hours[0], hours[-1])
    assert result.success, failure_message(result)

    pipeline = load_pipeline(pipelines_dir / "clicks-hourly.yaml")
    events = read_events(spark, [str(history / "date=2024-01-01")])
    first_hours = events.where(F.col("arrival_time") < F.lit("2024-01-01 03:00:00").cast("timestamp"))
    whole = replay(spark, pipeline, first_hours)
    try:
        expected = rows(whole.aggregates)
        inputs = whole.metrics["input_rows"]
    finally:
        whole.unpersist()
    got = [spark.read.parquet(str(r.current(h) / "aggregates")) for h in hours]
    assert rows(got[0].unionByName(got[1]).unionByName(got[2])) == expected
    counts = [metrics_of(r.folder(h))["input_rows"] for h in hours]
    assert sum(counts) == inputs > 0


def test_backfill_ran_blocking_quality_checks_that_passed(backfill):
    """Every output asset has a blocking pandera/rule check; the backfill ran them per partition."""
    for day in DAYS:
        results = current(backfill.folder(day))["extra"]["checks"]
        assert {r["name"] for r in results} >= {"conservation", "aggregates_schema", "late_rule", "state_unique"}
        assert all(r["passed"] for r in results), [r for r in results if not r["passed"]]
    # The replay's checks (the lateness analysis and its check run in their own job).
    checks = [
        k
        for k in backfill.defs.resolve_asset_graph().asset_check_keys
        if k.asset_key.path[0] == "clicks_hourly" and k.asset_key.path[-1] != "lateness"
    ]
    names = {k.name for k in checks}
    assert {"window_state_valid", "windowed_aggregates_valid", "late_events_valid", "rejected_events_valid"} <= names
    # What the UI's check history lists: per check, one execution per partition of the run,
    # each naming its partition and targeting that partition's materialization; none SKIPPED.
    storage = backfill.instance.event_log_storage
    for key in checks:
        executions = storage.get_asset_check_execution_history(key, limit=50)
        assert sorted(e.partition for e in executions) == DAYS, key
        assert {e.status.value for e in executions} == {"SUCCEEDED"}, key
        for e in executions:
            target = e.event.asset_check_evaluation.target_materialization_data
            [mat] = backfill.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key.asset_key, asset_partitions=[e.partition]), limit=1
            ).records
            assert target is not None and target.storage_id == mat.storage_id, (key, e.partition)


def _check_evaluations(result) -> dict:
    """The run's asset check evaluations, by check name."""
    return {
        e.event_specific_data.check_name: e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def _committed(folder) -> bool:
    commits = folder / "_commits"
    return commits.is_dir() and any(commits.iterdir())


def test_failing_quality_check_blocks_the_next_partition(spark, history, pipelines_dir, tmp_path):
    """Day 2 holds an event stamped 30 days before its arrival: the input skew check fails,
    the run fails naming it, day 2's output is staged but not committed (write-audit-publish),
    Dagster does not show it materialized, and day 3 refuses to continue from it."""
    landing = _landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    r = Replayer(landing, pipelines_dir, tmp_path / "out")
    assert r.run("2024-01-01", checks=True).success
    second = r.run("2024-01-02", checks=True)
    assert not second.success
    message = failure_message(second)
    assert "input_event_time_skew" in message and "not committed" in message
    day2 = r.folder("2024-01-02")
    assert not _committed(day2)  # nothing current ...
    staged = list((day2 / "runs").iterdir())
    assert len(staged) == 1 and (staged[0] / "aggregates").is_dir()  # ... the staged run kept for inspection
    assert str(staged[0]) in message
    assert r.instance.get_materialized_partitions(STATE) == {"2024-01-01"}  # Dagster agrees with the disk
    checks = _check_evaluations(second)
    failing = checks["rejected_events_valid"]
    assert not failing.passed
    assert failing.metadata["not_committed"].value == {"2024-01-02": str(staged[0])}
    assert CHECK_NAME in checks  # the chain check reports even when the run fails
    third = r.run("2024-01-03", checks=True)
    assert not third.success
    assert "state of partition 2024-01-02 is missing" in failure_message(third)


def test_a_failing_partition_in_a_range_leaves_the_ones_before_it_materialized(spark, history, pipelines_dir, tmp_path):
    """A backfill of days 1-3 where day 2 fails: day 1 is committed and shown materialized
    under its own partition key, day 2 is staged only, day 3 never ran."""
    landing = _landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    r = Replayer(landing, pipelines_dir, tmp_path / "out")
    result = r.run(DAYS[0], DAYS[-1], checks=True)
    assert not result.success
    assert _committed(r.folder("2024-01-01")) and not _committed(r.folder("2024-01-02"))
    assert not r.folder("2024-01-03").exists()
    assert r.instance.get_materialized_partitions(AGG) == {"2024-01-01"}
    assert r.instance.get_materialized_partitions(STATE) == {"2024-01-01"}


@pytest.mark.parametrize("limit, blocks", [("1%", False), ("0.1%", True), (0, True)])
def test_rejected_rows_warn_within_the_pipelines_limit_and_block_above_it(spark, history, tmp_path, limit, blocks):
    """One row of 301 (0.33 %) with a null event time: it is rejected either way. Within
    quality.maxRejectedShare (1 %) the input check warns and the partition is committed;
    above it (the default 0.1 %, or 0) it blocks and nothing is committed."""
    from tests.support.dagster_harness import PIPELINE_YAML

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "clicks-hourly.yaml").write_text(
        PIPELINE_YAML + f"quality:\n  maxRejectedShare: {limit!r}\n".replace("'", "")
    )
    landing = _landing_with_odd_row(history, tmp_path, "2024-01-01", event_time=lambda t: None)
    r = Replayer(landing, pipelines, tmp_path / "out")
    result = r.run("2024-01-01", checks=True)
    check = _check_evaluations(result)["rejected_events_valid"]
    assert not check.passed
    assert check.metadata["failures_by_partition" if blocks else "warnings_by_partition"].value == {
        "2024-01-01": {"input_times_parseable": 1}
    }
    assert result.success is (not blocks)
    assert _committed(r.folder("2024-01-01")) is (not blocks)
    if not blocks:
        assert check.severity == dg.AssetCheckSeverity.WARN
        assert metrics_of(r.folder("2024-01-01"))["rejected_rows"] == 1


def _checks_of(r: Replayer) -> set[dg.AssetCheckKey]:
    return set(r.defs.resolve_assets_def(AGG).check_keys)


def test_checks_executed_on_their_own_verify_the_committed_outputs(spark, history, pipelines_dir, tmp_path):
    """Checks only (the UI's Execute button on a check): nothing is replayed or written, each
    check re-runs on each committed partition, one evaluation per partition; after the
    landed history of day 2 changed, day 2's committed output no longer conserves it."""
    r = Replayer(history, pipelines_dir, tmp_path / "out")
    assert r.run(DAYS[0], DAYS[1]).success
    runs_before = {day: sorted(p.name for p in (r.folder(day) / "runs").iterdir()) for day in DAYS[:2]}

    def verify(replayer: Replayer):
        checks_only = replayer.job.get_subset(asset_selection=set(), asset_check_selection=_checks_of(replayer))
        result = checks_only.execute_in_process(
            instance=replayer.instance,
            raise_on_error=False,
            tags={"dagster/asset_partition_range_start": DAYS[0], "dagster/asset_partition_range_end": DAYS[1]},
            run_config={"ops": {"clicks_hourly_replay": {"config": {}}}},
        )
        evaluations = [
            e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
        ]
        return result, {(e.check_name, e.partition): e for e in evaluations}

    result, evaluations = verify(r)
    assert result.success, failure_message(result)
    assert not result.get_asset_materialization_events()  # nothing replayed ...
    assert {day: sorted(p.name for p in (r.folder(day) / "runs").iterdir()) for day in DAYS[:2]} == runs_before
    names = {k.name for k in _checks_of(r)}
    # ... one evaluation per check and day, and the run's own per check (Dagster plans a
    # checks-only range run's checks without a partition; none is left SKIPPED)
    assert set(evaluations) == {(n, d) for n in names for d in (None, *DAYS[:2])}
    assert all(e.passed for e in evaluations.values()), {k: e.description for k, e in evaluations.items()}
    assert evaluations[(CHECK_NAME, None)].description == f"2 partition(s) checked ({DAYS[0]}..{DAYS[1]}): all passed"
    # Each evaluation targets its own partition's materialization.
    for (name, day), e in ((k, e) for k, e in evaluations.items() if k[1] is not None):
        mats = r.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=e.asset_key, asset_partitions=[day]), limit=1
        ).records
        assert e.target_materialization_data.storage_id == mats[0].storage_id, (name, day)

    # The Checks tab's Execute button launches a run without a partition: one summary
    # evaluation per check (the one Dagster planned), then one per committed partition.
    unpartitioned = r.job.get_subset(asset_selection=set(), asset_check_selection=_checks_of(r)).execute_in_process(
        instance=r.instance, raise_on_error=False, run_config={"ops": {"clicks_hourly_replay": {"config": {}}}}
    )
    assert unpartitioned.success, failure_message(unpartitioned)
    got = [(e.asset_key, e.check_name, e.partition, e.passed) for e in unpartitioned.get_asset_check_evaluations()]
    expected = [(k.asset_key, k.name, p, True) for k in _checks_of(r) for p in (None, *DAYS[:2])]
    assert sorted(got, key=repr) == sorted(expected, key=repr)  # (input_unchanged: one per output asset)
    summary = next(e for e in unpartitioned.get_asset_check_evaluations() if e.partition is None)
    assert summary.description == f"2 partition(s) checked ({DAYS[0]}..{DAYS[1]}): all passed"
    history_rows = r.instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(STATE, CHECK_NAME), limit=10
    )
    assert {e.status.value for e in history_rows if e.run_id == unpartitioned.run_id} == {"SUCCEEDED"}

    changed = r.with_landing(_landing_with_odd_row(history, tmp_path, "2024-01-02"))
    result, evaluations = verify(changed)
    assert evaluations[("window_state_valid", "2024-01-01")].passed
    bad = evaluations[("window_state_valid", "2024-01-02")]
    assert not bad.passed and "committed output does not pass" in bad.description
    assert "conservation" in bad.metadata["failures_by_partition"].value["2024-01-02"]


def test_materializing_one_output_replays_and_records_all_four(spark, history, pipelines_dir, tmp_path):
    """The asset is subsettable (for its checks), but a replay writes the four outputs
    together: selecting one records every one of them materialized, as on disk."""
    r = Replayer(history, pipelines_dir, tmp_path / "out")
    one = r.job.get_subset(asset_selection={AGG}, asset_check_selection=set())
    result = one.execute_in_process(
        instance=r.instance,
        partition_key=DAYS[0],
        raise_on_error=False,
        run_config={"ops": {"clicks_hourly_replay": {"config": {}}}},
    )
    assert result.success, failure_message(result)
    for name in ("window_state", "windowed_aggregates", "late_events", "rejected_events"):
        key = dg.AssetKey(["clicks_hourly", name])
        assert r.instance.get_materialized_partitions(key) == {DAYS[0]}, name
        mat = r.instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1).records[0]
        assert mat.asset_materialization.metadata["input_rows"].value == 300, name
    # ... and evaluates the checks of all four, so none shows a materialization it did not check.
    evaluated = {(e.check_name, e.partition) for e in result.get_asset_check_evaluations()}
    assert evaluated == {(k.name, DAYS[0]) for k in _checks_of(r)}, evaluated
    assert r.run(DAYS[1]).success  # the next day starts from the state it wrote
