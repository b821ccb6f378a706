"""Versions of a history in the catalog, proven through a real SQL endpoint.

A 3-day history is published as it was before versions existed (``v1``: plain tables at
the stable names ``replay.clicks_hourly_*``), then rebuilt with an added aggregate as
``v2``, into tables of its own, while beeline queries the stable names; then the stable
names are switched to ``v2`` (views) and queried again.

Embedded Derby admits one process at a time, so the stable names cannot be queried by a
Thrift server of their own while another process publishes. One process holds the
metastore for both instead (tests/support/catalog_versions_host.py): a Spark session with
Hive support that replays and publishes, and Spark's Thrift JDBC server started on that
session, which the pyspark package's ``beeline`` queries (test_catalog.py's helper). The
test drives that process over a local connection and stops it by its PID.
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.support.catalog_versions_host import KEY_ENV, HostClient, HostError
from tests.support.dagster_harness import PIPELINE_YAML
from tests.support.outputs import current
from tests.support.services import ManagedProcess, base_env, free_port, port_open
from tests.windowing.test_catalog import DAYS, beeline
from windowing.catalog import _aggregate_columns
from windowing.config import parse_pipeline

OUTPUTS = ("aggregates", "late_events", "rejected")
LAST_AGGREGATE = "      - {type: last, column: event_id}\n"
V1_YAML = PIPELINE_YAML + "output:\n  catalog: {database: replay, table: clicks_hourly}\n"
#: The changed pipeline: one aggregate more, so its aggregates have one column more.
V2_YAML = V1_YAML.replace(LAST_AGGREGATE, LAST_AGGREGATE + "      - {type: max, column: amount, name: max_amount}\n")
NEW_COLUMN = "max_amount"
STABLE = "replay.clicks_hourly_aggregates"


def _answers(url: str, *tables: str) -> dict[str, dict]:
    """What beeline answers for each of ``tables`` (``replay.<table>``): the runs each partition's
    rows come from (by the files read), its row count, and the columns."""
    statements = []
    for t in tables:
        statements += [
            f"SELECT '{t}' AS q, partition_key, input_file_name() AS f, count(*) AS n FROM replay.{t} "
            "GROUP BY partition_key, input_file_name()",
            f"SELECT '{t}' AS q, * FROM replay.{t} LIMIT 1",
        ]
    answers = beeline(url, *statements)
    out = {}
    for i, t in enumerate(tables):
        files, row = answers[2 * i], answers[2 * i + 1]
        runs: dict[str, set[str]] = {}
        counts: dict[str, int] = {}
        for r in files:
            run = re.search(r"/runs/([^/]+)/[^/]+/[^/]+$", r["f"])
            runs.setdefault(r["partition_key"], set()).add(run.group(1) if run else r["f"])
            counts[r["partition_key"]] = counts.get(r["partition_key"], 0) + int(r["n"])
        out[t] = {"runs": runs, "counts": counts, "columns": [c for c in row[0] if c != "q"] if row else []}
    return out


def _info(client: HostClient, sql: str) -> dict[str, str]:
    return {r["col_name"].strip(): (r["data_type"] or "").strip() for r in client("sql", text=sql)}


def _table_facts(client: HostClient, table: str) -> dict:
    """A table's metastore entry as the host's session sees it: created when, and where each partition points."""
    info = _info(client, f"DESCRIBE TABLE EXTENDED {table}")
    locations = {
        d: _info(client, f"DESCRIBE TABLE EXTENDED {table} PARTITION (partition_key='{d}')")["Location"] for d in DAYS
    }
    return {"created": info["Created Time"], "type": info["Type"], "locations": locations}


def _columns(run: Path, output: str) -> list[str]:
    return pq.read_schema(next((run / output).glob("*.parquet"))).names


@pytest.fixture(scope="module")
def published_versions(tmp_path_factory):
    """v1 published, then v2 beside it with beeline's answers meanwhile, then the switch."""
    from windowing.sample import generate_history

    began = time.monotonic()
    base = tmp_path_factory.mktemp("catalog_versions")
    landing, out, out_v2 = base / "landing", base / "out", base / "out-v2"
    generate_history(landing, datetime(2024, 1, 1, tzinfo=timezone.utc), days=3, events_per_day=300, keys=20, seed=11)
    v1, v2 = base / "v1.yaml", base / "v2.yaml"
    v1.write_text(V1_YAML)
    v2.write_text(V2_YAML)
    pipeline_dir = out / "clicks-hourly"
    thrift_port, rpc_port, key = free_port(), free_port(), os.urandom(16).hex()
    ready = base / "host.ready"
    host = ManagedProcess(
        "catalog-versions-host",
        [
            sys.executable,
            "-m",
            "tests.support.catalog_versions_host",
            str(out / "_metastore"),
            str(thrift_port),
            str(rpc_port),
            str(ready),
        ],
        base_env({"PYTHONPATH": str(Path(__file__).parents[2]), KEY_ENV: key}),
        base / "host.log",
        base,
    )
    client = None
    seconds, step = {}, began

    def took(what: str) -> None:
        nonlocal step
        seconds[what], step = time.monotonic() - step, time.monotonic()

    try:
        deadline = time.monotonic() + 240
        while not (ready.exists() and port_open(thrift_port)):
            assert host.running() and time.monotonic() < deadline, host.describe()
            time.sleep(0.5)
        client = HostClient(rpc_port, key.encode())
        url = f"jdbc:hive2://127.0.0.1:{thrift_port}"

        def call(config: Path, version: str, method: str, *args):
            return client(
                "call", config=str(config), pipeline_dir=str(pipeline_dir), version=version, method=method, args=args
            )

        def replay(config: Path, root: Path, version: str, days: list[str]):
            got = client(
                "replay",
                config=str(config),
                landing=str(landing),
                output_root=str(root),
                pipeline_dir=str(pipeline_dir),
                version=version,
                days=days,
            )
            assert got == {d: True for d in days}

        facts: dict = {"client": client, "call": call, "url": url, "v1": v1, "v2": v2, "landing": landing}
        took("the history generated, the host up")
        facts["served_before"] = call(v1, "v1", "served_version")
        # 1. v1, as a history published before versions existed: plain tables at the stable names
        replay(v1, out, "v1", DAYS)
        took("v1 replayed and published")
        facts["served_v1"] = call(v1, "v1", "served_version")
        facts["v1_table"] = _table_facts(client, STABLE)
        facts["v1_runs"] = {d: current(pipeline_dir / d) for d in DAYS}
        mark = len(client("statements"))
        # 2. v2's first day, into v2's own tables; beeline meanwhile
        replay(v2, out_v2, "v2", DAYS[:1])
        took("v2's first day")
        facts["while_v2"] = _answers(url, "clicks_hourly_aggregates", "clicks_hourly_aggregates_v2")
        took("beeline")
        facts["served_while_v2"] = call(v2, "v2", "served_version")
        facts["stable_while_v2"] = _table_facts(client, STABLE)
        # 3. the rest of v2, then the switch
        replay(v2, out_v2, "v2", DAYS[1:])
        took("v2's other days")
        facts["v2_runs"] = {d: current(out_v2 / "clicks-hourly" / d) for d in DAYS}
        facts["switched"] = call(v2, "v2", "switch", "v2")
        took("switch")
        facts["statements"] = client("statements", since=mark)
        facts["after"] = _answers(url, "clicks_hourly_aggregates", "clicks_hourly_aggregates_v1")
        facts["served_after"] = call(v2, "v2", "served_version")
        facts["v1_table_after"] = _table_facts(client, STABLE + "_v1")
        facts["dirs"] = {"v1": pipeline_dir, "v2": out_v2 / "clicks-hourly"}
        took("beeline and the rest")
        facts["seconds"] = {"in all": time.monotonic() - began, **seconds}
        yield facts
    finally:
        if client is not None:
            client.close()
        host.stop()  # by its own PID (and its process group): the Thrift server was in it
        assert not host.running()


def _run_columns(facts: dict, version: str, output: str = "aggregates") -> list[str]:
    runs = facts[f"{version}_runs"]
    return _columns(facts["dirs"][version] / DAYS[0] / runs[DAYS[0]]["run"], output)


def _row_counts(facts: dict, version: str) -> dict[str, int]:
    runs, folder = facts[f"{version}_runs"], facts["dirs"][version]
    return {d: pq.read_table(folder / d / runs[d]["run"] / "aggregates").num_rows for d in DAYS}


def test_the_stable_names_answer_v1_while_v2_is_published(published_versions):
    f = published_versions
    assert f["served_before"] is None and f["served_v1"] == "v1" and f["served_while_v2"] == "v1"
    v1_runs = {d: {f["v1_runs"][d]["run_id"]} for d in DAYS}
    stable, v2 = f["while_v2"]["clicks_hourly_aggregates"], f["while_v2"]["clicks_hourly_aggregates_v2"]
    # the stable name: v1's runs, rows and columns (no new column) ...
    assert stable["runs"] == v1_runs
    assert stable["counts"] == _row_counts(f, "v1")
    assert stable["columns"] == [*_run_columns(f, "v1"), "partition_key"] and NEW_COLUMN not in stable["columns"]
    # ... while v2's own table has its first day, with the new column
    assert v2["runs"] == {DAYS[0]: {f["v2_runs"][DAYS[0]]["run_id"]}}
    assert v2["columns"] == [*_run_columns(f, "v2"), "partition_key"] and NEW_COLUMN in v2["columns"]
    # no drop: the stable table is the same metastore entry, its partitions where they were
    assert f["stable_while_v2"] == f["v1_table"] and f["v1_table"]["type"] == "EXTERNAL"
    ddl = [s for s in f["statements"] if re.match(r"(DROP|CREATE OR REPLACE)\b", s) and "__rewindow_probe_" not in s]
    assert ddl == []


def test_after_the_switch_the_stable_names_answer_v2_and_v1_stays_readable(published_versions):
    f = published_versions
    assert f["served_after"] == "v2"
    stable, v1 = f["after"]["clicks_hourly_aggregates"], f["after"]["clicks_hourly_aggregates_v1"]
    assert stable["runs"] == {d: {f["v2_runs"][d]["run_id"]} for d in DAYS}
    assert stable["counts"] == _row_counts(f, "v2")
    assert stable["columns"] == [*_run_columns(f, "v2"), "partition_key"] and NEW_COLUMN in stable["columns"]
    assert v1["runs"] == {d: {f["v1_runs"][d]["run_id"]} for d in DAYS}
    assert v1["columns"] == [*_run_columns(f, "v1"), "partition_key"]
    # the first switch renamed v1's tables (the same entries: created when they were, partitions
    # where they were), then made the stable names views: one line per table
    assert f["v1_table_after"] == f["v1_table"]
    assert len(f["switched"]) == 3 and all("now `replay`.`clicks_hourly_" in ln for ln in f["switched"])
    switch = [s for s in f["statements"] if s.startswith(("ALTER TABLE", "CREATE VIEW")) and "PARTITION" not in s]
    renames = [s for s in switch if " RENAME TO " in s]
    assert [s.split()[2] for s in renames] == [f"`replay`.`clicks_hourly_{o}`" for o in OUTPUTS]
    assert sum(s.startswith("CREATE VIEW") for s in switch) == 3
    # what the metastore keeps on each: the view's definition, its properties; the tables' own
    (props,) = beeline(f["url"], f"SHOW TBLPROPERTIES {STABLE}")
    assert {r["key"]: r["value"] for r in props}["rewindow.version"] == "v2"
    for version in ("v1", "v2"):
        (props,) = beeline(f["url"], f"SHOW TBLPROPERTIES {STABLE}_{version}")
        assert {r["key"]: r["value"] for r in props}["rewindow.version"] == version
    view = _info(f["client"], f"DESCRIBE TABLE EXTENDED {STABLE}")
    assert view["Type"] == "VIEW" and view["View Text"] == "SELECT * FROM `replay`.`clicks_hourly_aggregates_v2`"


def test_pointed_runs_cover_every_version(published_versions):
    f = published_versions
    for d in DAYS:
        v1, v2 = f["v1_runs"][d]["run_id"], f["v2_runs"][d]["run_id"]
        for config, version in ((f["v1"], "v1"), (f["v2"], "v2")):
            assert f["call"](config, version, "pointed_runs", d) == sorted([v1, v2])
        # pointed: the publisher's own version's tables, by output (rewindow status, the Dagster check)
        pointed = f["call"](f["v1"], "v1", "pointed", d)
        assert {o: (p["table"], p["run_id"]) for o, p in pointed.items()} == {
            o: (f"clicks_hourly_{o}_v1", v1) for o in OUTPUTS
        }
        pointed = f["call"](f["v2"], "v2", "pointed", d)
        assert {o: (p["table"], p["run_id"]) for o, p in pointed.items()} == {
            o: (f"clicks_hourly_{o}_v2", v2) for o in OUTPUTS
        }


def test_check_takes_a_switched_history_and_refuses_a_version_table_with_other_columns(published_versions, tmp_path):
    f = published_versions
    for config, version in ((f["v1"], "v1"), (f["v2"], "v2"), (f["v1"], "v3"), (f["v2"], "v3")):
        assert f["call"](config, version, "check") is None  # v3 has no tables: no column check
    # v2's tables have v2's columns: the first pipeline (one aggregate fewer) cannot publish to them
    with pytest.raises(HostError, match=r"table `replay`.`clicks_hourly_aggregates_v2` has columns .*max_amount"):
        f["call"](f["v1"], "v2", "check")
    # ... and a replay with it stops before any work
    with pytest.raises(HostError, match=r"ChainError: Cannot replay pipeline clicks-hourly: .*aggregates_v2"):
        f["client"](
            "replay",
            config=str(f["v1"]),
            landing=str(f["landing"]),
            output_root=str(tmp_path / "out"),
            pipeline_dir=str(f["dirs"]["v1"]),
            version="v2",
            days=DAYS[:1],
        )
    assert not (tmp_path / "out").exists()
    with pytest.raises(HostError, match=r"version 'v0': expected v1, v2"):
        f["call"](f["v1"], "v0", "check")


def test_read_published_reads_the_views_and_the_version_tables(published_versions):
    f = published_versions
    client = f["client"]
    got = client("read_published", name=STABLE)
    assert got["aggregates"]["columns"] == _run_columns(f, "v2")
    assert got["aggregates"]["rows"] == sum(_row_counts(f, "v2").values())
    assert client("read_published", name="replay.clicks_hourly")["late_events"] == got["late_events"]
    old = client("read_published", name=STABLE + "_v1")
    assert old["aggregates"]["columns"] == _run_columns(f, "v1")
    assert old["aggregates"]["rows"] == sum(_row_counts(f, "v1").values())
    assert old["late_events"]["columns"] == _run_columns(f, "v1", "late_events")


def test_a_switch_changes_each_stable_name_in_one_operation(published_versions):
    """A reader in a session of its own resolves the stable names while they are switched
    back and forth: it never finds one missing (CREATE OR REPLACE VIEW, a drop then a
    create in Spark, would leave it missing now and then)."""
    f = published_versions
    client = f["client"]
    mark = len(client("statements"))
    versions = ["v1", "v2"] * 5
    got = client("switch_under_reads", config=str(f["v2"]), pipeline_dir=str(f["dirs"]["v1"]), versions=versions)
    assert got["missing"] == 0 and got["other"] == [], got
    assert got["reads"] > 30, got  # the reader overlapped the switches
    switches = [s for s in client("statements", since=mark) if s.startswith("ALTER VIEW") and " AS SELECT " in s]
    assert len(switches) == 30
    assert f["call"](f["v2"], "v2", "served_version") == "v2"
    print(f"\n{got['switches']} switches of 3 names in {got['seconds']:.1f}s, {got['reads']} reads meanwhile")


def test_a_version_no_longer_served_is_dropped_and_its_runs_stay(published_versions):
    f = published_versions
    client, call = f["client"], f["call"]
    folder = f["dirs"]["v2"] / DAYS[0]
    config, pipeline_dir = str(f["v2"]), str(f["dirs"]["v1"])
    published = client(
        "publish", config=config, pipeline_dir=pipeline_dir, version="v3", partition=DAYS[0], folder=str(folder)
    )
    assert [p["table"] for p in published] == [f"clicks_hourly_{o}_v3" for o in OUTPUTS]
    with pytest.raises(HostError, match=r"serve version v2: switch them to another version"):
        call(f["v2"], "v2", "drop_version", "v2")
    assert call(f["v2"], "v3", "drop_version", "v3") == [
        f"`replay`.`clicks_hourly_{o}_v3`: dropped (the runs it pointed at stay)" for o in OUTPUTS
    ]
    tables = {r["tableName"] for r in client("sql", text="SHOW TABLES IN replay")}
    assert not {t for t in tables if t.endswith("_v3")} and f"clicks_hourly_{OUTPUTS[0]}_v2" in tables
    assert (folder / f["v2_runs"][DAYS[0]]["run"] / "aggregates").is_dir()
    assert call(f["v2"], "v2", "served_version") == "v2"
    print("\nsetting up: " + ", ".join(f"{k} {v:.1f}s" for k, v in f["seconds"].items()))


def test_the_aggregates_columns_follow_from_the_pipeline(published_versions):
    """What check() compares a version's table with before any work, against real runs."""
    f = published_versions
    for version, text in (("v1", V1_YAML), ("v2", V2_YAML)):
        assert _aggregate_columns(parse_pipeline(yaml.safe_load(text))) == _run_columns(f, version)


@pytest.mark.spark  # rewindow in a process of its own, which starts Spark
def test_the_command_line_rebuilds_a_published_history_and_switches_its_tables(tmp_path):
    """The user's own path, issue 48: a published history, the pipeline changed (an aggregate
    added), ``rewindow backfill`` of the new configuration. It used to commit day 1 and exit 1
    ("table ... has columns ...: drop the table"); now it builds v2 beside v1, publishes it to
    tables of its own, and switches the stable names to it as one step, no drop. Here the
    rebuild's first run stops at a blocked day having committed two days it did not publish
    (run without the catalog block): the switch publishes them first, never a hole."""
    from tests.support.histories import landing_with_odd_row
    from tests.support.outputs import current
    from tests.windowing.test_catalog import CATALOG_YAML, DAYS, _rewindow_runs
    from windowing.sample import generate_history

    landing, out = tmp_path / "landing", tmp_path / "out"
    generate_history(landing, datetime(2024, 1, 1, tzinfo=timezone.utc), days=3, events_per_day=300, keys=10, seed=4)
    odd = landing_with_odd_row(landing, tmp_path / "odd", DAYS[2], event_time=lambda t: t - timedelta(days=30))
    added = "      - {type: sum, column: amount}\n      - {type: avg, column: amount}\n"
    v1, v2, v2_unpublished = tmp_path / "v1.yaml", tmp_path / "v2.yaml", tmp_path / "v2-unpublished.yaml"
    v1.write_text(CATALOG_YAML)
    v2.write_text(CATALOG_YAML.replace("      - {type: sum, column: amount}\n", added))
    catalog_block = "output:\n  catalog: {database: replay, table: clicks_hourly}\n"
    assert catalog_block in v2.read_text()
    v2_unpublished.write_text(v2.read_text().replace(catalog_block, ""))
    span = ["--output", out, "--from", DAYS[0], "--to", DAYS[-1]]
    first, stopped, rebuilt, status = _rewindow_runs(
        ["backfill", "--config", v1, "--input", landing, *span],
        ["backfill", "--config", v2_unpublished, "--input", odd, *span],
        ["backfill", "--config", v2, "--input", landing, *span, "--resume"],
        ["status", "--config", v2, "--output", out],
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert stopped.returncode == 1 and "v2 of 'clicks-hourly' is not switched in" in stopped.stderr, stopped.stderr
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"resuming at {DAYS[2]}" in rebuilt.stderr, rebuilt.stderr
    for day in DAYS[:2]:
        assert f"published partition {day} of v2, which its run had committed but not published" in rebuilt.stderr
    assert "switched 'clicks-hourly' from v1 to v2" in rebuilt.stderr and "drop the table" not in rebuilt.stderr
    assert "columns added in aggregates: avg_amount" in rebuilt.stderr
    assert status.returncode == 0 and "version v2," in status.stdout, status.stdout
    assert "version v1: kept" in status.stdout
    for day in DAYS:
        line = next(x for x in status.stdout.splitlines() if x.strip().startswith(day))
        run = current(out / "clicks-hourly" / "_versions" / "v2" / "clicks-hourly" / day)["run_id"]
        assert "committed" in line and f"published run {run}" in line, line
