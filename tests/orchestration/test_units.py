"""Plain helpers of the orchestration layer (no Spark, no Dagster run)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from assets.pipelines import asset_prefix
from assets.resources import SparkResource
from orchestration.partitions import PartitionSettings
from windowing.landing import day_of
from windowing.runner.session import parse_conf
from windowing.storage.commits import Commit
from windowing.storage.store import Lineage, first_missing, out_of_date_partitions

D1, D2, D3, D4 = "2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"
CHAIN = [(D1, None), (D2, D1), (D3, D2), (D4, D3)]


def _commit(key, extra):
    return Commit(
        seq=1,
        run_id="r",
        run="runs/r",
        committed_at="",
        pipeline="p",
        fingerprint="fp",
        metrics={},
        extra=extra,
        output=f"/out/p/{key}",
    )


def _lineage(commits, key, prev, start, end, fingerprint="fp", flushed=False):
    commits[key] = _commit(key, Lineage("p", fingerprint, key, prev, start, end, flushed, "run").to_extra())


@pytest.mark.parametrize(
    "layout, expected",
    [
        # (partition, start hash, end hash) committed; expected out-of-date partitions
        ([(D1, None, "a"), (D2, "a", "b"), (D3, "b", "c")], []),  # a consistent chain
        ([(D1, None, "a2"), (D2, "a", "b"), (D3, "b", "c")], [D2, D3]),  # D1 rerun with other data
        ([(D1, None, "a"), (D2, "a", "b2"), (D3, "b", "c")], [D3]),  # D2 rerun, D3 not yet
        ([(D1, None, "a"), (D3, "b", "c")], [D3]),  # a gap: D2 never materialized
        ([(D2, "a", "b")], [D2]),  # the first partition is missing
    ],
)
def test_out_of_date_partitions(layout, expected):
    commits = {}
    for key, start, end in layout:
        _lineage(commits, key, dict(CHAIN)[key], start, end)
    got = out_of_date_partitions(commits, "fp", CHAIN)
    assert [o.partition for o in got] == expected


def test_out_of_date_reasons():
    commits = {}
    _lineage(commits, D1, None, None, "a", flushed=True)
    _lineage(commits, D2, D1, "a", "b")
    _lineage(commits, D3, D2, "b", "c", fingerprint="old")
    commits[D4] = _commit(D4, {})  # committed outside the chain (rewindow replay): no lineage
    got = {o.partition: o.reason for o in out_of_date_partitions(commits, "fp", CHAIN)}
    assert "flush_at_end" in got[D2]
    assert "another window/time/aggregate configuration" in got[D3]
    assert "no lineage" in got[D4]


def test_a_partition_after_another_configuration_is_not_blamed_on_the_landing_zone():
    """Review finding: every partition after a stale one was said to follow "a changed
    partition" (the wording of a landing-zone change), whatever made the first one stale."""
    commits = {}
    _lineage(commits, D1, None, None, "a", fingerprint="old")
    _lineage(commits, D2, D1, "a", "b")
    _lineage(commits, D3, D2, "b", "c")
    got = {o.partition: o.reason for o in out_of_date_partitions(commits, "fp", CHAIN, {D3: "its files changed"})}
    assert got[D2] == f"starts from partition {D1}, which is out of date"
    assert got[D3] == "its files changed"
    _lineage(commits, D1, None, None, "a")
    got = {o.partition: o.reason for o in out_of_date_partitions(commits, "fp", CHAIN, {D1: "its files changed"})}
    assert got[D2].startswith("after a changed partition: ") and f"({D1}'s landing zone changed" in got[D2]


def test_first_missing():
    commits = {D1: _commit(D1, {})}
    assert first_missing(commits, [D1, D2, D3]) == D2
    assert first_missing(commits, [D1]) is None


def test_lineage_round_trip_and_missing():
    assert Lineage.of(None) is None
    assert Lineage.of(_commit(D2, {})) is None
    lin = Lineage("p", "fp", D2, D1, "a", "b", False, "run", ("conservation",))
    assert Lineage.of(_commit(D2, json.loads(json.dumps(lin.to_extra())))) == lin


@pytest.mark.parametrize(
    "name, prefix",
    [("clicks-hourly", "clicks_hourly"), ("orders.v2", "orders_v2"), ("7day", "p_7day"), ("ok_1", "ok_1")],
)
def test_asset_prefix(name, prefix):
    assert asset_prefix(name) == prefix


def test_parse_conf():
    assert parse_conf("spark.a=1, spark.b = x=y\nspark.c=") == {"spark.a": "1", "spark.b": "x=y", "spark.c": ""}
    with pytest.raises(ValueError, match="not key=value"):
        parse_conf("spark.executor.memory")


def test_spark_settings_pin_the_interpreter_locally_only():
    import sys

    local = SparkResource(extra_conf="spark.sql.shuffle.partitions=16").settings()
    assert local == {"spark.sql.shuffle.partitions": "16", "spark.pyspark.python": sys.executable}
    cluster = SparkResource(master="spark://head:7077", spark_config={"spark.executor.memory": "8g"}).settings()
    assert cluster == {"spark.executor.memory": "8g"}


def test_partition_settings_validate():
    with pytest.raises(ValueError, match="REWINDOW_PARTITION_GRAIN"):
        PartitionSettings(grain="weekly")
    with pytest.raises(ValueError, match="REWINDOW_HISTORY_START"):
        PartitionSettings(start="01/01/2024")
    hourly = PartitionSettings(grain="hourly", start="2024-01-01", end="2024-01-02").partitions_def()
    assert hourly.get_partition_keys()[:2] == ["2024-01-01-00:00", "2024-01-01-01:00"]
    assert len(hourly.get_partition_keys()) == 24


def test_partition_settings_from_env(monkeypatch):
    monkeypatch.setenv("REWINDOW_PARTITION_GRAIN", " Hourly ")
    monkeypatch.setenv("REWINDOW_HISTORY_START", "2023-06-01")
    monkeypatch.delenv("REWINDOW_HISTORY_END", raising=False)
    assert PartitionSettings.from_env() == PartitionSettings("hourly", "2023-06-01", None)


def test_day_of_refuses_a_window_across_days():
    utc = timezone.utc
    assert day_of(datetime(2024, 1, 1, 5, tzinfo=utc), datetime(2024, 1, 1, 6, tzinfo=utc)) == datetime(
        2024, 1, 1, tzinfo=utc
    )
    with pytest.raises(ValueError, match="more than one arrival day"):
        day_of(datetime(2024, 1, 1, 23, tzinfo=utc), datetime(2024, 1, 2, 1, tzinfo=utc))


@pytest.mark.parametrize(
    "landing, output",
    [("/lake/events", "/lake/events/out"), ("/lake/events", "/lake"), ("/lake/events", "/lake/events")],
)
def test_an_output_root_overlapping_the_landing_zone_is_refused(landing, output):
    from windowing.chain import ChainError, check_roots

    with pytest.raises(ChainError, match="overlaps the landing zone"):
        check_roots(output, landing)
    check_roots("/lake/replays", landing)  # beside it: fine
