"""Publishing to a catalog, proven through a real SQL endpoint.

``rewindow backfill`` processes publish a 3-day history to catalog tables in an embedded
Derby metastore (``OUTPUT/_metastore``); then Spark's Thrift JDBC server, started from
the pyspark package on the same metastore, is queried with the package's ``beeline``.

Embedded Derby admits one process at a time, and the pyspark package cannot start a
shared metastore (the standalone ``HiveMetaStore`` lacks the LMAX disruptor jar, and
Derby's network server jar is not shipped). So the history is published first, in
three processes one after the other: a Dagster backfill (into a database of its own); six
``rewindow`` commands in one process (tests/support/catalog_cli_runs.py: one Spark
start-up): the backfill, ``rewindow status``, a rerun of the middle day with a changed
input, a rerun blocked by a failing check, a single ``rewindow replay --partition`` (into
a database of its own) and a ``rewindow reconcile`` whose both sides are tables; and a
rerun killed mid-write. Then the Thrift server starts once on that metastore and the
queries check the result of all of them.
Two processes publishing at once cannot share embedded Derby: the test shows instead that
a publisher started while the server holds the metastore fails before any work.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.dagster_harness import PIPELINE_YAML
from tests.support.outputs import commits, current
from tests.support.processes import kill_when
from tests.support.services import ManagedProcess, base_env, free_port, port_open, spark_home
from windowing.catalog import published_table, run_id_of
from windowing.config import parse_pipeline
from windowing.metastore import session_conf, thrift_server_command

DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]
MIDDLE = DAYS[1]
OUTPUTS = ("aggregates", "late_events", "rejected")
NEW_KEY = "user-rerun"  # a key only the changed input of the middle day has
SPARK_ARGS = [
    "--master",
    "local[2]",
    "--conf",
    "spark.sql.shuffle.partitions=2",
    "--conf",
    "spark.driver.memory=1g",
    "--conf",
    "spark.sql.adaptive.enabled=false",
    "--conf",
    "spark.ui.enabled=false",
    "--conf",
    "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
]
CATALOG_YAML = (
    PIPELINE_YAML
    + """\
output:
  catalog: {database: replay, table: clicks_hourly}
quality: {maxRejectedShare: 1%}   # the changed middle day has two rows without an event time
reconcile:   # the live side is this pipeline's own output here
  columns: {worker: partition, key: user_id, windowStart: window_start, windowEnd: window_end, emission: emission,
            emitTime: emit_time, aggregates: {count: count, sum_amount: sum_amount, unique_events: unique_events,
                                              last_event_id: last_event_id}}
"""
)


# --------------------------------------------------------------------------- configuration (no Spark)


def test_the_embedded_metastore_settings(tmp_path):
    conf = session_conf(str(tmp_path / "ms"), {"spark.driver.extraJavaOptions": "-Xss4m"})
    assert conf["spark.sql.catalogImplementation"] == "hive"
    assert f"databaseName={tmp_path / 'ms' / 'metastore_db'}" in conf["spark.hadoop.javax.jdo.option.ConnectionURL"]
    # derby.log and the warehouse stay in the metastore folder, never the working directory
    assert conf["spark.driver.extraJavaOptions"].startswith("-Xss4m ")
    assert f"-Dderby.stream.error.file={tmp_path / 'ms' / 'derby.log'}" in conf["spark.driver.extraJavaOptions"]
    assert conf["spark.sql.warehouse.dir"] == str(tmp_path / "ms" / "warehouse")
    # a session pointed at a metastore keeps it: no embedded Derby
    assert session_conf(str(tmp_path / "ms"), {"spark.hadoop.hive.metastore.uris": "thrift://m:9083"}) == {
        "spark.sql.catalogImplementation": "hive"
    }
    assert run_id_of("file:/o/p/2024-01-01/runs/20240101T000000Z-ab/aggregates") == "20240101T000000Z-ab"
    assert published_table([None, None]) == "not published"


# --------------------------------------------------------------------------- the real endpoint


def _rewindow(*argv, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = base_env({"PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])})
    proc = subprocess.run(
        [sys.executable, "-m", "windowing.cli", *map(str, argv), *SPARK_ARGS],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=cwd,
    )
    if check:
        assert proc.returncode == 0, f"rewindow {argv[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def _rewindow_runs(*commands, cwd: Path) -> list[SimpleNamespace]:
    """``rewindow`` ``commands`` (argument lists) one after the other in one process
    (tests/support/catalog_cli_runs.py): each one's ``returncode``, ``stdout`` and ``stderr``."""
    env = base_env({"PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])})
    argvs = [[*map(str, argv), *SPARK_ARGS] for argv in commands]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.catalog_cli_runs", json.dumps(argvs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=cwd,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and len(results) == len(commands), proc.stderr[-3000:]
    # Publishing creates quietly what may exist: no metastore ERROR for a partition or database it
    # then moves or uses (issue 47: 24 of them, 2,376 stack lines, a rerun).
    assert "AlreadyExistsException" not in proc.stderr, proc.stderr[-3000:]
    return [SimpleNamespace(**r) for r in results]


def _backfill(config, landing, out, first, last, *more, check=True):
    return _rewindow(
        "backfill",
        "--config",
        config,
        "--input",
        landing,
        "--output",
        out,
        "--from",
        first,
        "--to",
        last,
        *more,
        check=check,
        cwd=out.parent,
    )


#: Hive's metastore handler retries a failed connection 10 times, 2 s apart (twice over): a
#: locked embedded Derby stays locked meanwhile, so a publisher that cannot have it waits a
#: minute to say so. One attempt says the same, sooner.
ONE_METASTORE_ATTEMPT = (
    "--conf",
    "spark.hadoop.hive.hmshandler.retry.attempts=1",
    "--conf",
    "spark.hadoop.hive.metastore.connect.retries=0",
)


def _rows(run: Path, output: str) -> list[dict]:
    return pq.read_table(run / output).to_pylist()


def _change_middle_day(landing: Path) -> None:
    """The middle day again, with other amounts, a tenth of its events gone, a new key and
    two rows without an event time (rejected)."""
    folder = landing / f"date={MIDDLE}"
    files = sorted(folder.glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    for f in files:
        f.unlink()
    rows = table.to_pylist()
    kept = [r for i, r in enumerate(rows) if i % 10]
    for r in kept:
        r["amount"] = r["amount"] * 3 + 1
    for i, r in enumerate(rows[:40]):
        kept.append({**r, "user_id": NEW_KEY, "offset": 10**9 + i})
    kept += [{**r, "event_time": None, "offset": 10**9 + 100 + i} for i, r in enumerate(rows[:2])]  # rejected
    pq.write_table(pa.Table.from_pylist(kept, schema=table.schema), folder / "changed.parquet")


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """The history published step by step, then the Thrift server on its metastore."""
    from windowing.sample import generate_history

    began = time.monotonic()
    base = tmp_path_factory.mktemp("catalog")
    landing, out = base / "landing", base / "out"
    generate_history(landing, datetime(2024, 1, 1, tzinfo=timezone.utc), days=3, events_per_day=1000, keys=20, seed=11)
    config = base / "clicks-hourly.yaml"
    config.write_text(CATALOG_YAML)
    folders = {d: out / "clicks-hourly" / d for d in DAYS}
    facts: dict = {"out": out, "folders": folders, "base": base}

    # The inputs of every step, prepared first: the Dagster backfill's own copy of the history (as it
    # landed first), the middle day changed (a new run), and changed again with an odd event (blocked).
    dagster_landing, pipelines = base / "dagster_landing", base / "pipelines"
    shutil.copytree(landing, dagster_landing)
    changed = base / "landing-changed"  # the history with its middle day changed
    shutil.copytree(landing, changed)
    _change_middle_day(changed)
    blocked = base / "landing-blocked"  # the changed middle day, and the odd event
    shutil.copytree(changed / f"date={MIDDLE}", blocked / f"date={MIDDLE}")
    t = pq.read_table(blocked / f"date={MIDDLE}" / "changed.parquet")
    odd = {**t.slice(0, 1).to_pylist()[0], "offset": 2 * 10**9}
    odd["event_time"] = odd["event_time"] - timedelta(days=30)
    pq.write_table(pa.Table.from_pylist([odd], schema=t.schema), blocked / f"date={MIDDLE}" / "zz-odd.parquet")

    # 1. the Dagster assets publish the history to a database of its own
    pipelines.mkdir()
    (pipelines / "clicks-hourly.yaml").write_text(CATALOG_YAML.replace("database: replay", "database: dagster_replay"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.catalog_dagster_run",
            str(dagster_landing),
            str(pipelines),
            str(base / "dagster_out"),
            DAYS[0],
            DAYS[-1],
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=base,
        env=base_env(
            {
                "PYTHONPATH": str(Path(__file__).parents[2]),
                "REWINDOW_METASTORE_DIR": str(out / "_metastore"),
                "REWINDOW_SPARK_MASTER": "local[2]",
                "REWINDOW_SPARK_CONF": ",".join(SPARK_ARGS[3::2]),
            }
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts["dagster"] = json.loads(proc.stdout.strip().splitlines()[-1])
    facts["dagster_folders"] = {d: base / "dagster_out" / "clicks-hourly" / d for d in DAYS}

    # 2. six commands in one process (tests/support/catalog_cli_runs.py), one Spark start-up:
    # the backfill, every partition committed, then published; `rewindow status`; the middle day
    # rerun with a changed input: a new run, published in its place; a rerun blocked by a failing
    # check (an event 30 days before its arrival): not committed; one partition replayed alone
    # (`rewindow replay --partition`) into another database; and `rewindow reconcile`, both sides
    # named as tables: the CLI-published history (its middle day rerun with another input)
    # against the Dagster-published one (as first landed).
    facts["single"] = base / "single" / DAYS[0]
    rerun = ["backfill", "--config", config, "--output", out, "--from", MIDDLE, "--to", MIDDLE]
    runs = _rewindow_runs(
        ["backfill", "--config", config, "--input", landing, "--output", out, "--from", DAYS[0], "--to", DAYS[-1]],
        ["status", "--config", config, "--output", out],
        [*rerun, "--input", changed],
        [*rerun, "--input", blocked],
        [
            "replay",
            "--config",
            config,
            "--input",
            dagster_landing / f"date={DAYS[0]}",
            "--output",
            facts["single"],
            "--partition",
            DAYS[0],
            "--catalog-database",
            "single",
            "--metastore-dir",
            out / "_metastore",
        ],
        [
            "reconcile",
            "--config",
            config,
            "--replay",
            "replay.clicks_hourly",
            "--live",
            "dagster_replay.clicks_hourly_aggregates",
            "--output",
            base / "recon",
            "--metastore-dir",
            out / "_metastore",
            *[a for d in [*DAYS, "2024-01-04"] for a in ("--partition-edge", d)],
        ],
        cwd=base,
    )
    backfill, status, changed_run, facts["blocked"], facts["replay"], facts["reconcile"] = runs
    for run in (backfill, status, changed_run, facts["replay"]):
        assert run.returncode == 0, (run.argv[0], run.stderr[-3000:])
    facts["status_after_backfill"] = status.stdout
    facts["backfill"] = {d: commits(folders[d])[0] for d in DAYS}  # each partition's first commit
    assert len(commits(folders[MIDDLE])) == 2 and all(len(commits(folders[d])) == 1 for d in DAYS if d != MIDDLE)
    facts["rerun"] = current(folders[MIDDLE])  # the blocked rerun committed nothing (asserted below)

    # 3. a rerun killed while it writes its run: not committed
    env = base_env({"PYTHONPATH": str(Path(__file__).parents[2])})
    with open(base / "killed.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "windowing.cli",
                "backfill",
                "--config",
                str(config),
                "--input",
                str(changed),
                "--output",
                str(out),
                "--from",
                MIDDLE,
                "--to",
                MIDDLE,
                *SPARK_ARGS,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=base,
        )
    facts["killed"] = kill_when(proc, folders[MIDDLE], "write")
    facts["commits_after"] = {d: commits(folders[d]) for d in DAYS}
    facts["publish_seconds"] = time.monotonic() - began

    # 4. the Thrift JDBC server, once, on the same metastore
    port = free_port()
    cmd = thrift_server_command(str(out / "_metastore"), port, spark_home=spark_home())
    server = ManagedProcess("thrift", cmd, base_env(), base / "thrift.log", base)
    try:
        deadline = time.monotonic() + 240
        while not port_open(port):
            assert server.running() and time.monotonic() < deadline, server.describe()
            time.sleep(1)
        facts["url"] = f"jdbc:hive2://127.0.0.1:{port}"
        facts["server_pid"] = server.pid
        facts["config"], facts["landing"] = config, landing
        yield facts
    finally:
        server.stop()  # by its own PID (and its process group)
        assert not server.running()


def beeline(url: str, *statements: str) -> list[list[dict]]:
    """Run ``statements`` through ``bin/beeline`` of the pyspark package; one list of rows
    each. With several statements, each selects a first column ``q`` (beeline's CSV puts no
    line between result sets, so a ``q,...`` header starts the next one)."""
    proc = subprocess.run(
        [
            os.path.join(spark_home(), "bin", "beeline"),
            "-u",
            url,
            "--silent=true",
            "--showHeader=true",
            "--outputformat=csv2",
            "-e",
            "; ".join(statements),
        ],
        capture_output=True,
        text=True,
        env=base_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # (beeline may print its prompt before the first header)
    lines = [re.sub(r"^\d+: jdbc:hive2://\S+> ?", "", ln) for ln in proc.stdout.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    if len(statements) == 1:
        return [list(csv.DictReader(io.StringIO("\n".join(lines))))]
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith("q,"):
            blocks.append([])
        if blocks:
            blocks[-1].append(line)
    assert len(blocks) == len(statements), proc.stdout[-3000:]
    return [list(csv.DictReader(io.StringIO("\n".join(b)))) for b in blocks]


def test_the_published_tables_answer_with_each_partitions_current_run(published):
    folders = published["folders"]
    rerun = published["rerun"]
    old_middle = published["backfill"][MIDDLE]
    assert rerun["run_id"] != old_middle["run_id"]
    # the blocked and the killed reruns committed nothing
    assert published["blocked"].returncode == 1 and "input_event_time_skew" in published["blocked"].stderr
    assert published["killed"] == "killed mid-write"
    assert published["commits_after"][MIDDLE][-1]["run_id"] == rerun["run_id"]
    current_runs = {d: published["backfill"][d] for d in DAYS} | {MIDDLE: rerun}

    statements = [
        f"SELECT '{o}' AS q, partition_key, count(*) AS n FROM replay.clicks_hourly_{o} "
        "GROUP BY partition_key ORDER BY partition_key"
        for o in OUTPUTS
    ]
    statements.append(
        "SELECT 'middle' AS q, user_id, `count`, emit_batch, emission "
        f"FROM replay.clicks_hourly_aggregates WHERE partition_key = '{MIDDLE}'"
    )
    answers = beeline(published["url"], *statements)
    figures = {}
    for output, rows in zip(OUTPUTS, answers[:3]):
        got = {r["partition_key"]: int(r["n"]) for r in rows}
        want = {d: len(_rows(folders[d] / current_runs[d]["run"], output)) for d in DAYS}
        want = {d: n for d, n in want.items() if n}  # GROUP BY has no row for an empty partition
        assert got == want, output
        assert got, output
        figures[output] = got

    # the middle day: exactly the new run's rows, none of the old run's
    def key(r):
        return (r["user_id"], int(r["count"]), int(r["emit_batch"]), int(r["emission"]))

    got = sorted(key(r) for r in answers[3])
    new = sorted(key(r) for r in _rows(folders[MIDDLE] / rerun["run"], "aggregates"))
    old = sorted(key(r) for r in _rows(folders[MIDDLE] / old_middle["run"], "aggregates"))
    assert got == new and got != old
    assert any(r["user_id"] == NEW_KEY for r in answers[3])
    print(f"\nfigures through the Thrift server: {figures}; publishing took {published['publish_seconds']:.0f}s")


def test_table_properties_and_status_name_the_published_run(published):
    (props,) = beeline(published["url"], "SHOW TBLPROPERTIES replay.clicks_hourly_aggregates")
    values = {r["key"]: r["value"] for r in props}
    assert values["rewindow.run"] == published["rerun"]["run_id"]
    assert values["rewindow.partition"] == MIDDLE
    assert values["rewindow.fingerprint"] == published["rerun"]["fingerprint"]
    # the partition location is the committed run folder: external, nothing copied
    (desc,) = beeline(
        published["url"],
        f"DESCRIBE TABLE EXTENDED replay.clicks_hourly_late_events PARTITION (partition_key='{DAYS[0]}')",
    )
    location = next(r["data_type"] for r in desc if r["col_name"] == "Location")
    assert run_id_of(location) == published["backfill"][DAYS[0]]["run_id"]
    assert (
        Path(location.removeprefix("file:"))
        == published["folders"][DAYS[0]] / published["backfill"][DAYS[0]]["run"] / "late_events"
    )
    # `rewindow status` (run before the reruns) showed the run each table pointed at
    lines = {
        ln.split()[0]: ln for ln in published["status_after_backfill"].splitlines() if ln.strip().startswith("2024-")
    }
    for d in DAYS:
        assert f"published run {published['backfill'][d]['run_id']}" in lines[d]
    # the embedded metastore lives in OUTPUT/_metastore, never in the working directory
    assert (published["out"] / "_metastore" / "metastore_db").is_dir()
    assert not {"metastore_db", "derby.log", "spark-warehouse"} & {p.name for p in published["base"].iterdir()}


def test_a_publisher_that_cannot_reach_the_metastore_fails_before_any_work(published):
    """The Thrift server holds the embedded metastore: a second process cannot publish at
    the same time, and says so before replaying anything."""
    folders = published["folders"]
    before = {d: sorted(p.name for p in (folders[d] / "runs").iterdir()) for d in DAYS}
    proc = _backfill(
        published["config"],
        published["landing"],
        published["out"],
        DAYS[0],
        DAYS[0],
        *ONE_METASTORE_ATTEMPT,
        check=False,
    )
    assert proc.returncode == 1
    assert "output.catalog (replay.clicks_hourly_*)" in proc.stderr and "cannot use database" in proc.stderr
    assert {d: sorted(p.name for p in (folders[d] / "runs").iterdir()) for d in DAYS} == before


def test_the_dagster_assets_record_the_tables_and_check_them(published):
    folders = published["dagster_folders"]
    meta, checks = published["dagster"]["metadata"], published["dagster"]["checks"]
    assert sorted(meta) == DAYS and sorted(checks) == DAYS
    assert all(c["passed"] for c in checks.values()), checks
    (counts,) = beeline(
        published["url"],
        "SELECT partition_key, count(*) AS n FROM dagster_replay.clicks_hourly_aggregates GROUP BY partition_key",
    )
    for d in DAYS:
        run = folders[d] / current(folders[d])["run"]
        m = meta[d]
        assert m["dagster/table_name"] == "dagster_replay.clicks_hourly_aggregates"
        assert Path(m["dagster/uri"].removeprefix("file:")) == run / "aggregates"
        assert (
            m["dagster/row_count"]
            == len(_rows(run, "aggregates"))
            == int(next(r["n"] for r in counts if r["partition_key"] == d))
        )
        assert m["dagster/column_schema"] == pq.read_schema(next((run / "aggregates").glob("*.parquet"))).names


def test_reconcile_reads_published_tables_on_both_sides(published):
    """Only the middle day was rerun with another input: windows emitted in it mismatch, the
    other days' match (the tables hold each partition's current run, each window once)."""
    proc = published["reconcile"]
    assert proc.returncode == 1, proc.stderr[-3000:]  # under minMatch 100 %: the middle day differs
    assert "is under the minimum" in proc.stderr
    (recon,) = [p for p in (published["base"] / "recon" / "runs").iterdir()]
    mismatches = _rows(recon, "mismatches")
    assert mismatches
    days = {str(r["window_start"])[:10] for r in mismatches}
    assert MIDDLE in days and DAYS[-1] not in days, days


def test_a_single_replay_publishes_as_the_partition_it_is_given(published):
    assert "published run" in published["replay"].stdout
    run = published["single"] / current(published["single"])["run"]
    (rows,) = beeline(
        published["url"],
        "SELECT partition_key, count(*) AS n FROM single.clicks_hourly_aggregates GROUP BY partition_key",
    )
    assert rows == [{"partition_key": DAYS[0], "n": str(len(_rows(run, "aggregates")))}]


def test_pruning_keeps_the_runs_a_table_points_at(spark, tmp_path):
    """Seven committed runs: the last five are kept, and so is the oldest, which a table
    still points at (say publishing failed since); only the second is deleted."""
    from windowing.storage.commits import prune

    out = tmp_path / "out"
    ids = [f"20240101T00000{i}000000Z-0000000{i}" for i in range(7)]
    for seq, run_id in enumerate(ids, 1):
        (out / "runs" / run_id / "aggregates").mkdir(parents=True)
        record = out / "_commits" / f"{seq:010d}-{run_id}"
        record.mkdir(parents=True)
        (record / "part-00000.json").write_text(
            json.dumps(
                {
                    "seq": seq,
                    "run_id": run_id,
                    "run": f"runs/{run_id}",
                    "committed_at": "2024-01-01T00:00:00Z",
                    "pipeline": "p",
                    "fingerprint": "f",
                    "metrics": "{}",
                    "extra": "{}",
                }
            )
            + "\n"
        )
    deleted = prune(spark, str(out), keep={ids[0]})
    assert sorted(Path(p.removeprefix("file:")).name for p in deleted) == sorted([f"0000000002-{ids[1]}", ids[1]])
    assert {p.name for p in (out / "runs").iterdir()} == {ids[0], *ids[2:]}


def test_a_catalog_that_cannot_hold_the_tables_is_refused_before_any_work(spark, tmp_path):
    """The suite's shared session has Spark's in-memory catalog: tables in it would vanish
    with the process, so the chain refuses before replaying anything, saying why."""
    import yaml

    from windowing.catalog import Publisher
    from windowing.chain import Chain, ChainError
    from windowing.partitions import Partitions

    pipeline = parse_pipeline(yaml.safe_load(CATALOG_YAML))
    out = tmp_path / "out"
    pub = Publisher(spark, pipeline.catalog, pipeline, str(out / pipeline.name))
    chain = Chain(
        spark,
        pipeline,
        str(tmp_path / "landing"),
        str(out),
        Partitions("day", datetime(2024, 1, 1, tzinfo=timezone.utc)),
        publisher=pub,
    )
    with pytest.raises(
        ChainError,
        match=r"output.catalog \(replay.clicks_hourly_\*\): the Spark session's "
        r"catalog is in-memory",
    ):
        list(chain.replay(DAYS))
    assert not out.exists()
