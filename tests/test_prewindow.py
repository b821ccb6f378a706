"""What the live pipeline does before its window (issue 49): ``source.derive`` and
``source.filter`` through the command line equal a replay of the input derived and
filtered by hand (in Python, not Spark), each refusal names its field, conservation
counts the filtered rows, and a live pipeline's ``processors`` stop the load unless
``replay.liveProcessors: ignore`` acknowledges them."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.cli import rewindow
from tests.support.outputs import current, run_dir
from windowing import ConfigError, load_pipeline, parse_pipeline
from windowing.runner.replay import replay
from windowing.validation.conservation import conservation_check
from windowing.validation.metrics import metrics_check

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2024, 5, 6, tzinfo=timezone.utc)
DAYS = ("2024-05-06", "2024-05-07")

#: The live pipeline's processors, written as rewindow's derive and filter.
BEFORE = {
    "derive": {
        "amount_eur": "amount * 0.92",
        "user_key": "concat(user_id, '-x')",
        "tier": "if(amount >= 10, 'high', 'low')",
    },
    "filter": "amount_eur > 9.5 AND partition = 0 OR amount_eur < 2",
}


def _by_hand(row: dict) -> dict | None:
    """``BEFORE`` in Python: the derived row, or None when the filter drops it."""
    eur = None if row["amount"] is None else row["amount"] * 0.92
    row = {
        **row,
        "amount_eur": eur,
        "user_key": None if row["user_id"] is None else row["user_id"] + "-x",
        "tier": "high" if row["amount"] is not None and row["amount"] >= 10 else "low",  # SQL's if: null is false
    }
    keep = eur is not None and (eur > 9.5 and row["partition"] == 0 or eur < 2)
    return row if keep else None


def _doc(before: bool) -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "pipelines" / "clicks-hourly.yaml").read_text())
    doc.pop("reconcile")
    doc["source"].pop("path")
    window = doc["emitter"]["tumbling-time-window"]
    window["keyExtractor"] = ["user_key", "tier"]  # a key of two columns, both derived
    window["aggregateDefinition"] = [{"type": "count"}, {"type": "sum", "column": "amount_eur"}]
    if before:
        doc["source"].update(copy.deepcopy(BEFORE))
    return doc


@pytest.fixture(scope="module")
def zones(tmp_path_factory):
    """A landing zone of two days, and the same zone derived and filtered by hand."""
    from windowing.sample import generate_history

    base = tmp_path_factory.mktemp("prewindow")
    generate_history(base / "raw", START, days=2, events_per_day=400, keys=6, seed=5, partitions=2, files_per_day=2)
    for day in DAYS:
        table = pq.read_table(base / "raw" / f"date={day}")
        kept = [r for r in map(_by_hand, table.to_pylist()) if r is not None]
        schema = table.schema
        for name, type_ in (("amount_eur", pa.float64()), ("user_key", pa.string()), ("tier", pa.string())):
            schema = schema.append(pa.field(name, type_))
        (base / "hand" / f"date={day}").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(kept, schema=schema), base / "hand" / f"date={day}" / "part-0.parquet")
    for name, before in (("with.yaml", True), ("without.yaml", False)):
        (base / name).write_text(yaml.safe_dump(_doc(before), sort_keys=False))
    return base


def _rows(spark, folder) -> list:
    df = spark.read.parquet(str(folder))
    return sorted((tuple(sorted(r.asDict().items())) for r in df.collect()), key=repr)


def test_replay_of_derive_and_filter_equals_the_input_derived_by_hand(spark, zones):
    day = DAYS[0]
    rc, _, err = rewindow(
        "replay", "--config", zones / "with.yaml", "--input", zones / "raw" / f"date={day}", "--output", zones / "r1"
    )
    assert rc == 0, err
    rc, _, err = rewindow(
        "replay",
        "--config",
        zones / "without.yaml",
        "--input",
        zones / "hand" / f"date={day}",
        "--output",
        zones / "r2",
    )
    assert rc == 0, err
    one, two = run_dir(zones / "r1"), run_dir(zones / "r2")
    for output in ("aggregates", "late_events", "rejected"):
        assert _rows(spark, one / output) == _rows(spark, two / output), output
    assert _rows(spark, one / "aggregates")  # something was replayed
    m1, m2 = current(zones / "r1")["metrics"], current(zones / "r2")["metrics"]
    raw = pq.read_table(zones / "raw" / f"date={day}").num_rows
    assert m1["input_rows"] == raw
    assert m1["filtered_rows"] == raw - m2["input_rows"] > 0 and m2["filtered_rows"] == 0
    assert m1["rejected_rows"] == m2["rejected_rows"]
    assert m1["input_rows"] == m1["filtered_rows"] + m1["rejected_rows"] + (m2["input_rows"] - m2["rejected_rows"])


def test_backfill_of_derive_and_filter_equals_the_input_derived_by_hand(spark, zones):
    printed = {}
    for config, zone, out in (("with.yaml", "raw", "b1"), ("without.yaml", "hand", "b2")):
        rc, printed[out], err = rewindow(
            "backfill", "--config", zones / config, "--input", zones / zone, "--output", zones / out,
            "--from", DAYS[0], "--to", DAYS[-1],
        )  # fmt: skip
        assert rc == 0, err
    # The rows the filter dropped are in the backfill's lines and table, and in status's table.
    raw = {day: pq.read_table(zones / "raw" / f"date={day}").num_rows for day in DAYS}
    hand = {day: pq.read_table(zones / "hand" / f"date={day}").num_rows for day in DAYS}
    rc, status, err = rewindow("status", "--output", zones / "b1")
    assert rc == 0, err
    for out in (printed["b1"], status):
        header = next(line for line in out.splitlines() if line.strip().startswith("partition"))
        names = header.split()
        assert names[names.index("events") + 1] == "filtered", header
        for day in DAYS:
            line = next(line for line in out.splitlines() if line.split()[:1] == [day])  # the table's row
            assert f"{raw[day]:,}" in line.split() and f"{raw[day] - hand[day]:,}" in line.split(), line
    assert "filtered" not in printed["b2"]
    one = sorted(p for p in (zones / "b1").rglob("aggregates") if p.is_dir())
    two = sorted(p for p in (zones / "b2").rglob("aggregates") if p.is_dir())
    assert len(one) == len(two) >= 2
    for a, b in zip(one, two):
        assert _rows(spark, a) == _rows(spark, b)


def _events(spark, zones, day=DAYS[0]):
    return spark.read.parquet(str(zones / "raw" / f"date={day}"))


def test_conservation_counts_the_filtered_rows(spark, zones):
    pipeline = parse_pipeline(_doc(True))
    events = _events(spark, zones)
    with replay(spark, pipeline, events, flush_at_end=True) as result:
        from windowing.prewindow import derive

        derived = derive(pipeline.source, events)
        check = conservation_check(pipeline, result, derived)
        assert check.passed, check.sample
        assert "filtered" in check.description
        assert metrics_check(pipeline, result, derived).passed
        assert result.metrics.filtered_rows > 0
    # Without the filtered side the balance would not hold: the filtered rows are in no output.
    unfiltered = parse_pipeline({**_doc(True), "source": {**_doc(True)["source"], "filter": "true"}})
    with replay(spark, unfiltered, events, flush_at_end=True) as whole:
        assert whole.metrics.filtered_rows == 0
        assert whole.metrics.input_rows == result.metrics.input_rows


def _with(**source) -> dict:
    doc = _doc(True)
    doc["source"].update(source)
    if isinstance(doc["source"]["derive"], dict):  # the key's second column
        doc["source"]["derive"] = {"tier": "'low'", **doc["source"]["derive"]}
    return doc


@pytest.mark.parametrize(
    "source, message",
    [
        ({"derive": {"amount_eur": "amount +* 2", "user_key": "user_id"}}, "source.derive.amount_eur: 'amount +* 2'"),
        ({"derive": {"amount_eur": "amountt * 2", "user_key": "user_id"}}, "UNRESOLVED_COLUMN"),
        ({"filter": "amount + 1"}, "source.filter: 'amount + 1' is double, not a boolean condition"),
        ({"derive": {"amount_eur": "sum(amount)", "user_key": "user_id"}}, "holds an aggregate function"),
        (
            {"derive": {"amount_eur": "row_number() over (order by amount)", "user_key": "user_id"}},
            "holds a window function",
        ),
        ({"derive": {"amount_eur": "amount * rand()", "user_key": "user_id"}}, "is not deterministic"),
        ({"derive": {"amount_eur": "amount", "user_key": "uuid()"}}, "source.derive.user_key: 'uuid()' is not det"),
        ({"filter": "event_time < current_timestamp()"}, "reads current_timestamp()"),
        ({"derive": {"amount_eur": "user_key", "user_key": "user_id"}}, "which source.derive gives after it"),
        ({"derive": {"Amount": "amount", "amount_eur": "amount", "user_key": "user_id"}}, "already a column"),
    ],
)
def test_each_unsound_expression_is_refused_before_any_work(spark, zones, tmp_path, source, message):
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(_with(**source), sort_keys=False))
    rc, _, err = rewindow(
        "replay", "--config", f, "--input", zones / "raw" / f"date={DAYS[0]}", "--output", tmp_path / "o"
    )
    assert rc != 0 and message in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "source, message",
    [
        ({"derive": ["amount * 2"]}, "source.derive: expected a mapping"),
        ({"derive": {"x": ""}}, "source.derive.x: '' must be a Spark SQL expression"),
        ({"derive": {"__x": "1"}}, "reserved for the engine"),
        ({"derive": {"x": "1", "X": "2"}}, "source.derive.X: derived as source.derive.x too"),
        ({"filter": 3}, "source.filter: 3 must be a Spark SQL condition"),
    ],
)
def test_malformed_derive_or_filter_is_refused_when_the_file_is_read(source, message):
    with pytest.raises(ConfigError, match=None) as exc:
        parse_pipeline(_with(**source))
    assert message in str(exc.value)


def test_derive_and_filter_enter_the_fingerprint_only_when_present():
    plain = parse_pipeline(_doc(False))
    doc = _doc(False)
    doc["source"]["filter"] = None
    assert parse_pipeline(doc).fingerprint() == plain.fingerprint()
    with_before = parse_pipeline(_doc(True))
    assert with_before.fingerprint() != plain.fingerprint()
    other = _with(filter="amount_eur > 1")
    assert parse_pipeline(other).fingerprint() != with_before.fingerprint()
    # The example pipelines keep the fingerprint they had (state carried by them stays valid).
    assert load_pipeline(ROOT / "examples" / "pipelines" / "clicks-hourly.yaml").fingerprint() == "0bc5ca02fc804cba"


def test_processors_stop_the_load_naming_each_and_the_key_that_acknowledges_them(spark, zones, tmp_path):
    doc = _doc(True)
    doc["processors"] = [{"javascript": {"script": "x"}}, "com.example.DropTestUsers"]
    doc["emitter"]["triggers"] = [{"trigger": "atWindowEnd", "processors": [{"map": {}}], "sink": {"stdout": {}}}]
    with pytest.raises(ConfigError) as exc:
        parse_pipeline(doc)
    text = str(exc.value)
    for named in (
        "processors[0] (javascript)",
        "processors[1] (com.example.DropTestUsers)",
        "emitter.triggers[0].processors[0] (map)",
        "source.filter",
        "source.derive",
        "replay.liveProcessors: ignore",
    ):
        assert named in text, text
    doc["replay"]["liveProcessors"] = "ignore"
    pipeline = parse_pipeline(doc)
    assert pipeline.live_processors_ignored == (
        "processors[0] (javascript)",
        "processors[1] (com.example.DropTestUsers)",
        "emitter.triggers[0].processors[0] (map)",
    )
    assert pipeline.fingerprint() == parse_pipeline(_doc(True)).fingerprint()  # the same replay
    with replay(spark, pipeline, _events(spark, zones)) as result:
        assert result.metrics.live_processors_ignored == list(pipeline.live_processors_ignored)
        assert result.metrics.to_dict()["live_processors_ignored"] == list(pipeline.live_processors_ignored)
    doc["replay"]["liveProcessors"] = "run"
    with pytest.raises(ConfigError, match="replay.liveProcessors: 'run' is not supported"):
        parse_pipeline(doc)


def test_an_empty_processors_block_holds_none_and_needs_no_acknowledgement():
    doc = _doc(False)
    doc["processors"] = None
    assert parse_pipeline(doc).live_processors_ignored == ()


def test_lateness_refuses_a_pipeline_it_would_analyse_unfiltered(tmp_path, monkeypatch):
    """The lateness analysis reads the raw input: with derive or filter, its figures would be
    of other events than the replay's, so it says so before Spark starts (and the job, for
    the Dagster asset, before any work)."""
    from tests.support.cli import rewindow
    from windowing import command_line
    from windowing.lateness.options import check_analysable

    config = tmp_path / "with.yaml"
    config.write_text(yaml.safe_dump(_doc(True), sort_keys=False))
    monkeypatch.setattr(command_line, "spark_for", lambda args: pytest.fail("Spark started"))
    rc, _, err = rewindow("lateness", "--config", config, "--input", tmp_path, "--output", tmp_path / "out")
    assert rc == 2 and "rewindow lateness does not apply source.derive and source.filter yet" in err, err
    check_analysable(parse_pipeline(_doc(False)))  # without them: analysed as before


def test_a_dagster_run_of_derive_and_filter_equals_the_input_derived_by_hand(spark, zones):
    """The replay asset over the raw zone with derive, filter and a key of two columns, and
    over the zone derived by hand without them: the same rows, partition by partition, and
    the filtered rows in the materializations' metadata."""
    import dagster as dg

    from assets.resources import StorageResource
    from orchestration.definitions import build_definitions
    from orchestration.partitions import PartitionSettings
    from orchestration.schedules import REPLAY_JOB

    folders = {}
    for config, zone in (("with.yaml", "raw"), ("without.yaml", "hand")):
        pipelines = zones / f"dagster-{zone}"
        pipelines.mkdir()
        (pipelines / "clicks-hourly.yaml").write_text((zones / config).read_text())
        storage = StorageResource(
            landing_zone=str(zones / zone), pipelines_dir=str(pipelines), output_root=str(zones / f"d-{zone}")
        )
        defs = build_definitions(
            storage=storage, partitions=PartitionSettings(grain="daily", start=DAYS[0], end="2024-05-08")
        )
        instance = dg.DagsterInstance.ephemeral()
        result = defs.resolve_job_def(REPLAY_JOB).execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": DAYS[0], "dagster/asset_partition_range_end": DAYS[-1]},
            raise_on_error=False,
        )
        assert result.success
        key = dg.AssetKey(["clicks_hourly", "windowed_aggregates"])
        events = instance.fetch_materializations(key, limit=10).records
        filtered = {e.partition_key: e.asset_materialization.metadata.get("filtered_rows") for e in events}
        assert set(filtered) == set(DAYS)
        if zone == "raw":
            raw = {day: pq.read_table(zones / "raw" / f"date={day}").num_rows for day in DAYS}
            hand = {day: pq.read_table(zones / "hand" / f"date={day}").num_rows for day in DAYS}
            assert {k: v.value for k, v in filtered.items()} == {day: raw[day] - hand[day] for day in DAYS}
        else:
            assert set(filtered.values()) == {None}  # no filter: no filtered_rows to plot
        folders[zone] = sorted(p for p in (zones / f"d-{zone}").rglob("aggregates") if p.is_dir())
    assert len(folders["raw"]) == len(folders["hand"]) >= 2
    for a, b in zip(folders["raw"], folders["hand"]):
        assert _rows(spark, a) == _rows(spark, b)


def test_a_derived_arrival_time_places_rows_in_hourly_partitions(spark, zones, tmp_path):
    """``arrivalTime`` derived 30 minutes later: an hourly backfill places each row by the
    derived time (clamped into its day folder, as every arrival time is: docs), so each
    hour replays the rows its replay's arrival times say."""
    import datetime as dt

    doc = _doc(False)
    doc["source"]["derive"] = {
        "arrival_later": "arrival_time + INTERVAL 30 MINUTES",
        "user_key": "user_id",
        "tier": "'low'",
    }
    doc["source"]["arrivalTime"] = "arrival_later"
    doc["emitter"]["tumbling-time-window"]["aggregateDefinition"] = [{"type": "count"}]
    (tmp_path / "later.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, _, err = rewindow(
        "backfill", "--config", tmp_path / "later.yaml", "--input", zones / "raw", "--output", tmp_path / "o",
        "--grain", "hour", "--from", f"{DAYS[0]}T00", "--to", f"{DAYS[0]}T02",
    )  # fmt: skip
    assert rc == 0, err
    arrivals = pq.read_table(zones / "raw" / f"date={DAYS[0]}", columns=["arrival_time"]).column(0).to_pylist()
    later = [t + dt.timedelta(minutes=30) for t in arrivals]  # the next day's go to the last hour
    by_derived = {h: sum(1 for t in later if t.hour == h and t.date().isoformat() == DAYS[0]) for h in range(3)}
    by_raw = {h: sum(1 for t in arrivals if t.hour == h) for h in range(3)}
    rc, status, err = rewindow("status", "--output", tmp_path / "o")
    assert rc == 0, err
    got = {
        int(line.split()[0][11:13]): int(line.split()[2].replace(",", ""))
        for line in status.splitlines()
        if line.split()[:1] and line.split()[0].startswith(DAYS[0])
    }
    assert got == by_derived and got != by_raw
