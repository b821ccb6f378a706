"""The same replay where users run it: a Spark standalone cluster, a Spark Connect server,
and a non-POSIX filesystem (Hadoop ``viewfs://`` mounted onto a temp folder), each giving
outputs identical, row for row and bit for bit, to a ``local`` run on plain folders.

Every data path below is a ``viewfs://`` URI (except the reference run's): a leftover
local-file shortcut in the engine, the commit or the Dagster assets fails these tests.
The services are real processes started by the fixtures in conftest.py (their own PIDs,
stopped at the end of the session).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.lake import conftest as lake_conftest
from tests.support.outputs import OUTPUTS, commits, current, run_dir, snapshot
from tests.support.processes import commit_folders, run_folders
from tests.support.services import base_env, hadoop_viewfs_conf, viewfs_conf

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CLICKS = ROOT / "examples" / "pipelines" / "clicks-hourly.yaml"
START = datetime(2024, 2, 1, tzinfo=timezone.utc)
DAYS = ("2024-02-01", "2024-02-02", "2024-02-03")
REWINDOW = str(Path(sys.executable).parent / "rewindow")
TIMEOUT_S = 600
#: What the cluster tests took: shown in the terminal summary (conftest.py).
TIMINGS = lake_conftest.TIMINGS


@pytest.fixture(scope="module")
def landing(lake_dir):
    """Three days of events in the lake (written locally, read through viewfs)."""
    from windowing.sample import generate_history

    generate_history(
        lake_dir.local("landing"), START, days=3, events_per_day=1_200, keys=20, seed=21, partitions=2, files_per_day=2
    )
    return lake_dir.local("landing")


@pytest.fixture(scope="module")
def reference(spark, landing, tmp_path_factory, monkeypatch_module):
    """Day after day on plain local folders, ``local[2]`` (the suite's session)."""
    from windowing import cli, command_line

    monkeypatch_module.setattr(command_line, "spark_for", lambda args: spark)
    base = tmp_path_factory.mktemp("reference")
    prev = None
    for day in DAYS:
        args = ["replay", "--config", str(CLICKS), "--input", str(landing / f"date={day}"), "--output", str(base / day)]
        assert cli.main(args + (["--state-in", str(prev)] if prev else [])) == 0
        prev = base / day
    return {day: snapshot(spark, base / day) for day in DAYS}


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _assert_same(spark, reference, out_for_day) -> None:
    for day in DAYS:
        got = snapshot(spark, out_for_day(day))
        for name in (*OUTPUTS, "metrics"):
            assert got[name] == reference[day][name], f"{day} {name}"


def test_viewfs_replay_in_process_equals_local_folders(spark, lake_dir, landing, reference, monkeypatch):
    """The CLI on the suite's own session, every path a viewfs:// URI (a mount of its own)."""
    from windowing import cli, command_line

    mount = "inproc"
    for k, v in hadoop_viewfs_conf(mount, str(lake_dir.path)).items():
        spark.conf.set(k, v)  # Hadoop settings at runtime: Spark's readers and rewindow's Lake see them
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    url = f"viewfs://{mount}/data"
    prev = None
    for day in DAYS:
        args = [
            "replay",
            "--config",
            str(CLICKS),
            "--input",
            f"{url}/landing/date={day}",
            "--output",
            f"{url}/inproc/{day}",
        ]
        assert cli.main(args + (["--state-in", prev] if prev else [])) == 0
        prev = f"{url}/inproc/{day}"
    _assert_same(spark, reference, lambda day: lake_dir.local("inproc", day))
    # verify reads through the commit record on viewfs too.
    assert (
        cli.main(
            [
                "verify",
                f"{url}/inproc/{DAYS[1]}",
                "--config",
                str(CLICKS),
                "--input",
                f"{url}/landing/date={DAYS[1]}",
                "--state-in",
                f"{url}/inproc/{DAYS[0]}",
            ]
        )
        == 0
    )


@pytest.mark.parametrize("moment", ["write", "commit"])
def test_a_replay_killed_mid_write_on_viewfs_leaves_the_previous_output_current(
    spark, lake_dir, landing, reference, tmp_path, monkeypatch, moment
):
    """``rewindow replay`` into a viewfs:// output holding a committed run (day 2's),
    SIGKILLed with its JVM as its run folder (``write``) or its commit record
    (``commit``) appears: the previous output stays byte for byte, the current run is
    the previous one whole (or, killed mid-commit, the new one whole), and a rerun
    commits day 1's rows and sweeps what the killed run left."""
    from tests.support.processes import kill_when, start_replay, tree_digest
    from windowing import cli, command_line
    from windowing.runner.session import session_conf
    from windowing.storage import commits as commit_records

    mount = f"killed-{moment}"  # a mount of its own: Hadoop caches a viewfs mount table per name
    url, out = f"viewfs://{mount}/data", lake_dir.local(f"killed-{moment}")
    replay = ["replay", "--config", str(CLICKS), "--output", f"{url}/killed-{moment}"]
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    with session_conf(spark, hadoop_viewfs_conf(mount, str(lake_dir.path))):
        assert cli.main([*replay, "--input", f"{url}/landing/date={DAYS[1]}"]) == 0
    previous, before, snap = current(out), tree_digest(out), snapshot(spark, out)

    log = tmp_path / "killed.log"
    conf = [a for k, v in viewfs_conf(mount, lake_dir.path).items() for a in ("--conf", f"{k}={v}")]
    proc = start_replay(CLICKS, f"{url}/landing/date={DAYS[0]}", f"{url}/killed-{moment}", log, conf)
    outcome = kill_when(proc, out, moment, timeout_s=TIMEOUT_S)
    assert outcome == f"killed mid-{moment}", outcome + "\n" + log.read_text()[-3000:]
    assert proc.returncode == -signal.SIGKILL

    after = tree_digest(out)
    assert {f: after.get(f) for f in before} == before, "a file of the previous output changed or went"
    if moment == "write" or current(out) == previous:
        assert current(out) == previous and snapshot(spark, out) == snap
    else:  # killed as it committed: the new run is current, whole
        assert all((run_dir(out) / n / "_SUCCESS").exists() for n in OUTPUTS)
        assert snapshot(spark, out) == reference[DAYS[0]]

    # The rerun completes it (and sweeps the abandoned run folder: its age limit zero here).
    monkeypatch.setattr(commit_records, "ABANDONED_AFTER_S", 0)
    with session_conf(spark, hadoop_viewfs_conf(mount, str(lake_dir.path))):
        assert cli.main([*replay, "--input", f"{url}/landing/date={DAYS[0]}"]) == 0
    assert snapshot(spark, out) == reference[DAYS[0]]
    assert run_folders(out) == {c["run_id"] for c in commits(out)}
    assert len(commit_folders(out)) == len(commits(out)), "a killed commit's folder was not swept"


def test_standalone_cluster_cli_backfill_equals_local_folders(spark, spark_standalone, lake_dir, landing, reference):
    """``rewindow backfill --master spark://...`` with two workers: the three days in one
    application, landing zone and output on viewfs, each day's output as the day-by-day
    local replay's."""
    conf = spark_standalone.driver_conf(lake_dir.conf)
    before = _apps(spark_standalone)
    began = time.monotonic()
    cmd = [
        REWINDOW,
        "backfill",
        "--config",
        str(CLICKS),
        "--input",
        lake_dir.url("landing"),
        "--output",
        lake_dir.url("cluster-cli"),
        "--from",
        DAYS[0],
        "--to",
        DAYS[-1],
        "--master",
        spark_standalone.master_url,
    ]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=base_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    TIMINGS["standalone CLI backfill, 3 partitions"] = time.monotonic() - began
    _assert_same(spark, reference, lambda day: lake_dir.local("cluster-cli", "clicks-hourly", day))
    # The work really ran on the cluster's workers: their work dirs hold the app's executors.
    assert _apps(spark_standalone) - before, "no application of the backfill ran on the standalone workers"


def _apps(standalone) -> set[str]:
    """The applications whose executors ran on the standalone workers (their work dirs)."""
    return {p.name for i in range(2) for p in standalone.worker_dir(i).iterdir()}


def test_standalone_cluster_dagster_backfill_equals_local_folders(
    spark, spark_standalone, lake_dir, landing, reference, tmp_path
):
    """A three-partition Dagster backfill (one run) on the cluster, landing zone and output
    root on viewfs: each partition's committed output equals the local day-by-day replay."""
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / CLICKS.name).write_text(CLICKS.read_text())
    conf = spark_standalone.driver_conf(lake_dir.conf)
    env = base_env(
        {
            "REWINDOW_SPARK_MASTER": spark_standalone.master_url,
            "REWINDOW_SPARK_CONF": ",".join(f"{k}={v}" for k, v in conf.items()),
            "DAGSTER_HOME": str(tmp_path / "home"),
        }
    )
    for var in ("REWINDOW_LANDING_ZONE", "REWINDOW_OUTPUT_ROOT", "REWINDOW_PARTITION_GRAIN", "REWINDOW_HISTORY_END"):
        env.pop(var, None)
    began = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.demo",
            "--no-generate",
            "--days",
            "3",
            "--start",
            DAYS[0],
            "--landing-zone",
            lake_dir.url("landing"),
            "--output-root",
            lake_dir.url("dagster"),
            "--pipelines-dir",
            str(pipelines),
            "--dagster-home",
            str(tmp_path / "home"),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        cwd=ROOT,
    )
    TIMINGS["standalone Dagster backfill, 3 partitions"] = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "state chain check: passed" in proc.stdout
    _assert_same(spark, reference, lambda day: lake_dir.local("dagster", "clicks-hourly", day))
    for day in DAYS:
        lineage = commits(lake_dir.local("dagster", "clicks-hourly", day))[-1]["extra"]["lineage"]
        assert lineage["partition"] == day and not lineage["failed_checks"]


CONNECT_CLIENT = """
import json
from windowing import load_pipeline, replay
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_state, write_outputs
from windowing.storage.lake import is_connect
from windowing.validation import run_checks

assert is_connect(spark), type(spark)
pipeline = load_pipeline({config!r})
prev = None
checks = {{}}
for day in {days!r}:
    state = read_state(spark, prev) if prev else None
    events = read_events(spark, "{url}/landing/date=" + day, pipeline=pipeline, state=state)
    result = replay(spark, pipeline, events, state=state)
    out = "{url}/connect/" + day
    write_outputs(result, out, pipeline=pipeline, inputs=["{url}/landing"])
    result.unpersist()
    found = run_checks(spark, pipeline, out, input_df=events, prev_state=state)
    checks[day] = {{r.name: (r.passed, r.failure_count) for r in found if not r.skipped}}
    prev = out
print(json.dumps({{"done": True, "checks": checks}}))
"""


def test_spark_connect_python_api_replay_equals_local_folders(spark, spark_connect, lake_dir, landing, reference):
    """The Python API over Spark Connect (``SparkSession.builder.remote``), as Databricks
    serverless and shared clusters require: no JVM in the client, every path on viewfs."""
    began = time.monotonic()
    proc = spark_connect.run_client(
        CONNECT_CLIENT.format(config=str(CLICKS), days=list(DAYS), url=lake_dir.uri), timeout=TIMEOUT_S
    )
    TIMINGS["Spark Connect Python API, 3 partitions"] = time.monotonic() - began
    assert '"done": true' in proc.stdout
    # The data-quality checks over Connect too: every one runs, and passes, in each partition.
    [report] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"done"')]
    assert sorted(report["checks"]) == sorted(DAYS)
    for day, found in report["checks"].items():
        assert {"conservation", "metrics_consistent", "input_schema"} <= set(found), (day, sorted(found))
        assert all(passed for passed, _ in found.values()), (day, found)
    _assert_same(spark, reference, lambda day: lake_dir.local("connect", day))


#: A pipeline with what a live pipeline does before its window (issue 49): derive, filter
#: and a key of two columns, one derived.
PREWINDOW = {
    "derive": {"amount_eur": "amount * 0.92", "tier": "if(amount >= 10, 'high', 'low')"},
    "filter": "amount_eur > 2",
}

CONNECT_PREWINDOW_CLIENT = """
import json
from windowing import ConfigError, parse_pipeline, replay
from windowing.storage.inputs import read_events
from windowing.storage.outputs import write_outputs

doc = json.loads({doc!r})
pipeline = parse_pipeline(doc)
events = read_events(spark, "{url}/landing/date={day}", pipeline=pipeline)
with replay(spark, pipeline, events) as result:
    write_outputs(result, "{url}/connect-prewindow/{day}", pipeline=pipeline, inputs=["{url}/landing"])
refused = {{}}
for name, expr in (("rand", "amount * rand()"), ("now", "current_timestamp()"), ("unknown", "amountt * 2")):
    bad = json.loads({doc!r})
    bad["source"]["derive"]["amount_eur"] = expr
    try:
        replay(spark, parse_pipeline(bad), events)
        refused[name] = None
    except ConfigError as exc:
        refused[name] = str(exc)
print(json.dumps({{"done": True, "refused": refused}}))
"""


def test_spark_connect_replays_derive_filter_and_a_two_column_key_as_in_process(
    spark, spark_connect, lake_dir, landing, tmp_path, monkeypatch
):
    """Over Spark Connect (no analysed plan to read) derive, filter and a key of two columns
    give the rows the in-process replay gives, and unsound expressions are still refused
    before any work, naming the field (docs/configuration.md)."""
    import yaml

    from windowing import cli, command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    doc = yaml.safe_load(CLICKS.read_text())
    doc.pop("reconcile")
    doc["source"].pop("path")
    doc["source"].update(PREWINDOW)
    window = doc["emitter"]["tumbling-time-window"]
    window["keyExtractor"] = ["user_id", "tier"]
    window["aggregateDefinition"] = [{"type": "count"}, {"type": "sum", "column": "amount_eur"}]
    day = DAYS[0]
    proc = spark_connect.run_client(
        CONNECT_PREWINDOW_CLIENT.format(doc=json.dumps(doc), url=lake_dir.uri, day=day), timeout=TIMEOUT_S
    )
    [report] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"done"')]
    # Refused by the functions' names over Connect (docs/configuration.md), naming the field.
    assert "source.derive.amount_eur: 'amount * rand()' calls rand()" in (report["refused"]["rand"] or "")
    assert "source.derive.amount_eur" in (report["refused"]["now"] or "")
    assert "source.derive.amount_eur" in (report["refused"]["unknown"] or "")
    config = tmp_path / "prewindow.yaml"
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    local = tmp_path / "local"
    assert (
        cli.main(["replay", "--config", str(config), "--input", str(landing / f"date={day}"), "--output", str(local)])
        == 0
    )
    got, want = snapshot(spark, lake_dir.local("connect-prewindow", day)), snapshot(spark, local)
    for name in (*OUTPUTS, "metrics"):
        assert got[name] == want[name], name
    assert want["metrics"]["filtered_rows"] > 0
