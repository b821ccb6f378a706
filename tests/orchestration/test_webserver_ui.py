"""What the Dagster UI shows after the demo, read through the UI's own GraphQL API.

The module runs ``python -m orchestration.demo`` (3 days x 2,000 events, every example
pipeline, one single-run backfill on a persistent instance) into a temporary folder,
starts the real ``dagster-webserver`` on that instance with the same environment, and
asks ``POST /graphql`` the questions the UI's pages ask:

* the asset graph and catalog (``assetNodes { partitionStats }``): every partition
  materialized, none failed, and as many partitions as days landed;
* the asset's Partitions page (``assetPartitionStatuses``): one materialized range;
* the Plots -> Partitions tab: the UI takes the newest 120 partition keys
  (``partitionKeyConnection(limit: 120, ascending: false)``), then the latest
  materialization of each (``latestMaterializationByPartition``) and draws every
  Int/Float metadata entry;
* the Checks tab (``assetChecksOrError { executionForLatestMaterialization }`` and the
  execution history ``assetCheckExecutions``);
* then a rerun of the last day with a bad row: the blocking check fails, and the
  materialization Dagster shows for that day is still the demo's committed output.

Stdlib only (``subprocess``, ``urllib``); the demo's command and environment are the
screenshot script's (``scripts/ui_screenshots.py``). The webserver is stopped by its
process group in the fixture's finalizer. Marked ``spark`` (the demo runs Spark in a
subprocess), so the fast tier skips it. About 2-4 minutes, mostly the demo's Spark.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scripts.ui_screenshots import PYTHON, WEBSERVER, demo_command, demo_env, free_port  # the same demo and server

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
#: The demo's days without --start: the three days up to yesterday (UTC).
DAYS = [(datetime.now(timezone.utc).date() - timedelta(days=n)).isoformat() for n in (3, 2, 1)]
OUTPUTS = ("window_state", "windowed_aggregates", "late_events", "rejected_events")
CHAIN_CHECK = "state_chain_in_sync"
#: What the UI's Plots -> Partitions tab and the asset sidebar ask for (ui-core AssetEventMetadataEntriesTable).
PLOTS_PARTITION_LIMIT = 120
#: Numeric metadata of windowed_aggregates each demo partition must carry, by GraphQL type.
PLOTTED = {
    "late_share": "FloatMetadataEntry",
    "lateness_p50_ms": "IntMetadataEntry",
    "lateness_p99_ms": "IntMetadataEntry",
    "windows_emitted": "IntMetadataEntry",
    "windows_emitted_watermark": "IntMetadataEntry",
    "rejected_rows": "IntMetadataEntry",
    "events_per_second": "FloatMetadataEntry",
    "replay_seconds": "FloatMetadataEntry",
}
DEMO_TIMEOUT = 480
START_TIMEOUT = 120


def pipeline_prefixes() -> list[str]:
    """Asset prefixes of the example pipelines the demo copies (``clicks-hourly`` -> ``clicks_hourly``)."""
    from assets.pipelines import asset_prefix

    names = []
    for f in sorted((REPO / "examples" / "pipelines").glob("*.yaml")):
        m = re.search(r"^name:\s*['\"]?([^'\"\s#]+)", f.read_text(), re.MULTILINE)
        assert m, f"{f}: no top-level name"
        names.append(asset_prefix(m.group(1)))
    assert names, "no example pipelines"
    return names


PREFIXES = pipeline_prefixes()


def live_checked() -> set[str]:
    """Prefixes of the example pipelines with a live output (reconcile.live): the demo makes
    it up, and their aggregates get the check matches_live."""
    from assets.pipelines import asset_prefix
    from windowing import load_pipeline

    out = set()
    for f in sorted((REPO / "examples" / "pipelines").glob("*.yaml")):
        pipeline = load_pipeline(f)
        if pipeline.reconcile is not None and pipeline.reconcile.live is not None:
            out.add(asset_prefix(pipeline.name))
    return out


LIVE_CHECKED = live_checked()
LIVE_CHECK = "matches_live"


# --------------------------------------------------------------------------- fixtures


def _tail(path: Path, chars: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


class Demo:
    def __init__(self, root: Path, env: dict[str, str], run_id: str, seconds: float, stdout: str):
        self.root, self.env, self.run_id, self.seconds, self.stdout = root, env, run_id, seconds, stdout


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    root = tmp_path_factory.mktemp("ui_demo")
    env = demo_env(root)
    began = time.monotonic()
    try:
        done = subprocess.run(demo_command(env), cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=DEMO_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the demo did not finish in {DEMO_TIMEOUT}s:\n{(exc.stdout or '')[-4000:]}\n"
                    f"{(exc.stderr or '')[-4000:]}")
    seconds = time.monotonic() - began
    if done.returncode != 0:
        pytest.fail(f"the demo failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
    assert f"partitions {DAYS[0]}..{DAYS[-1]} " in done.stdout, f"the demo replayed other days:\n{done.stdout[-4000:]}"
    m = re.search(r"done\s+run (\S+) in", done.stdout)
    assert m, f"the demo did not print its run id:\n{done.stdout[-4000:]}"
    return Demo(root, env, m.group(1), seconds, done.stdout)


class UI:
    """A running dagster-webserver and its GraphQL endpoint."""

    def __init__(self, url: str, proc: subprocess.Popen, stderr: Path):
        self.url, self.proc, self.stderr = url, proc, stderr

    def query(self, query: str, **variables):
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            doc = json.loads(response.read())
        assert not doc.get("errors"), f"GraphQL errors: {doc['errors']}"
        return doc["data"]


WORKSPACE_QUERY = """
query { workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message stack } } } } ... on PythonError { message } } }
"""


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the process group we started (webserver + its code server), then kill it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def ui(demo) -> UI:
    port = free_port()
    log_dir = demo.root / "webserver"
    log_dir.mkdir()
    stdout, stderr = log_dir / "stdout.log", log_dir / "stderr.log"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [WEBSERVER, "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO, env=demo.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the finalizer stops it and its children
        )
    server = UI(f"http://127.0.0.1:{port}", proc, stderr)
    try:
        _wait_until_loaded(server)
        yield server
    finally:
        _stop(proc)


def _wait_until_loaded(server: UI) -> None:
    """Until /server_info answers and the code location is LOADED (or fail with why not)."""
    deadline = time.monotonic() + START_TIMEOUT
    last = "no answer yet"
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            pytest.fail(f"dagster-webserver exited ({server.proc.returncode}):\n{_tail(server.stderr)}")
        try:
            with urllib.request.urlopen(f"{server.url}/server_info", timeout=5) as r:
                r.read()
            ws = server.query(WORKSPACE_QUERY)["workspaceOrError"]
            assert ws["__typename"] == "Workspace", ws
            entries = ws["locationEntries"]
            last = json.dumps(entries)[:2000]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                errors = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
                if errors:
                    pytest.fail(f"the code location failed to load: {errors[0]['locationOrLoadError']}")
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = repr(exc)
        time.sleep(1)
    pytest.fail(f"dagster-webserver not ready after {START_TIMEOUT}s ({last}):\n{_tail(server.stderr)}")


# --------------------------------------------------------------------------- queries

ASSETS_QUERY = """
query UIAssets {
  assetNodes {
    assetKey { path }
    isPartitioned
    partitionStats { numMaterialized numMaterializing numPartitions numFailed }
    partitionKeysByDimension { name partitionKeys }
    assetPartitionStatuses { __typename ... on TimePartitionStatuses { ranges { status startKey endKey } } }
    assetChecksOrError {
      __typename
      ... on AssetChecks {
        checks { name blocking canExecuteIndividually
          executionForLatestMaterialization { runId status partition evaluation { success description } } }
      }
    }
  }
}
"""

# The Plots -> Partitions tab, step 1 (ui-core useRecentAssetEvents: LatestAssetPartitionsQuery).
PLOT_KEYS_QUERY = """
query LatestAssetPartitionsQuery($assetKey: AssetKeyInput!, $limit: Int!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode { id partitionKeyConnection(limit: $limit, ascending: false) { results } }
  }
}
"""

# The Plots -> Partitions tab, step 2 (AssetPartitionEventsQuery), with the metadata it plots.
PARTITION_EVENTS_QUERY = """
query AssetPartitionEventsQuery($assetKey: AssetKeyInput!, $partitions: [String!]!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      id
      latestMaterializationByPartition(partitions: $partitions) {
        partition runId timestamp
        metadataEntries {
          __typename label
          ... on IntMetadataEntry { intValue intRepr }
          ... on FloatMetadataEntry { floatValue }
          ... on PathMetadataEntry { path }
        }
      }
    }
  }
}
"""

CHECK_EXECUTIONS_QUERY = """
query CheckExecutions($assetKey: AssetKeyInput!, $checkName: String!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: 100) {
    id runId status partition
    evaluation { success severity partition description targetMaterialization { runId } }
  }
}
"""

# The check's execution as its page shows it: the evaluation's metadata.
CHECK_METADATA_QUERY = """
query CheckMetadata($assetKey: AssetKeyInput!, $checkName: String!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: 100) {
    runId partition
    evaluation { success severity metadataEntries { __typename label
      ... on IntMetadataEntry { intValue }
      ... on FloatMetadataEntry { floatValue }
      ... on MarkdownMetadataEntry { mdStr }
      ... on JsonMetadataEntry { jsonString } } }
  }
}
"""


def _key(*path: str) -> dict:
    return {"path": list(path)}


def _assets(ui: UI) -> dict[tuple, dict]:
    return {tuple(n["assetKey"]["path"]): n for n in ui.query(ASSETS_QUERY)["assetNodes"]}


def _expected_checks() -> dict[tuple, set[str]]:
    """Checks per asset: the chain check on window_state, ``<output>_valid`` on every output,
    matches_live on the aggregates of a pipeline with a live output."""
    out = {}
    for prefix in PREFIXES:
        for name in OUTPUTS:
            out[(prefix, name)] = ({f"{name}_valid"} | ({CHAIN_CHECK} if name == "window_state" else set())
                                   | ({LIVE_CHECK} if name == "windowed_aggregates" and prefix in LIVE_CHECKED
                                      else set()))
    return out


def _plotted(entry: dict):
    """The y value the UI's plot takes from a metadata entry (AssetMaterializationGraphs.extractNumericData)."""
    if entry["__typename"] == "IntMetadataEntry":
        return entry["intValue"] if entry["intValue"] is not None else int(entry["intRepr"])
    if entry["__typename"] == "FloatMetadataEntry":
        return entry["floatValue"]
    return None


def _latest_by_partition(ui: UI, key: tuple, partitions) -> dict[str, dict]:
    node = ui.query(PARTITION_EVENTS_QUERY, assetKey=_key(*key), partitions=list(partitions))["assetNodeOrError"]
    return {e["partition"]: e for e in node["latestMaterializationByPartition"] if e is not None}


# --------------------------------------------------------------------------- the demo as the UI shows it


def test_the_catalog_lists_every_pipeline_asset_and_check(ui):
    assets = _assets(ui)
    expected = {("historical_events",)} | {(p, name) for p in PREFIXES for name in OUTPUTS}
    assert expected <= set(assets), f"missing from the UI: {sorted(expected - set(assets))}"
    checks = {
        key: {c["name"] for c in assets[key]["assetChecksOrError"].get("checks", [])} for key in _expected_checks()
    }
    assert checks == _expected_checks()


def test_every_asset_shows_the_three_demo_partitions_materialized(ui):
    """The asset graph's and catalog's partition counts: 3 of 3 materialized, none failed."""
    assets = _assets(ui)
    keys = [("historical_events",)] + [(p, name) for p in PREFIXES for name in OUTPUTS]
    stats = {"/".join(k): assets[k]["partitionStats"] for k in keys}
    want = {"numMaterialized": 3, "numMaterializing": 0, "numPartitions": 3, "numFailed": 0}
    # numPartitions == 3: partitions end after the last landed day (orchestration.partitions,
    # REWINDOW_HISTORY_END unset), not today.
    assert stats == {k: want for k in stats}
    for k in keys:
        assert assets[k]["partitionKeysByDimension"][0]["partitionKeys"] == DAYS, k


def test_the_partitions_page_shows_one_materialized_range(ui):
    assets = _assets(ui)
    for key in [("historical_events",)] + [(p, name) for p in PREFIXES for name in OUTPUTS]:
        statuses = assets[key]["assetPartitionStatuses"]
        assert statuses["__typename"] == "TimePartitionStatuses", key
        assert statuses["ranges"] == [{"status": "MATERIALIZED", "startKey": DAYS[0], "endKey": DAYS[-1]}], key


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_partition_plots_have_every_metric_for_every_demo_partition(ui, demo, prefix):
    """What Plots -> Partitions draws for the demo days: the latest materialization of each
    partition, with the replay's numbers as Int/Float metadata."""
    key = (prefix, "windowed_aggregates")
    latest = _latest_by_partition(ui, key, DAYS)
    assert sorted(latest) == DAYS
    for day in DAYS:
        event = latest[day]
        assert event["runId"] == demo.run_id, day
        entries = {e["label"]: e for e in event["metadataEntries"]}
        wrong_type = {label: entries[label]["__typename"] if label in entries else "missing"
                      for label, kind in PLOTTED.items() if entries.get(label, {}).get("__typename") != kind}
        assert not wrong_type, f"{prefix} {day}: {wrong_type}"
        values = {label: _plotted(entries[label]) for label in PLOTTED}
        assert all(v is not None for v in values.values()), f"{prefix} {day}: {values}"
        assert values["windows_emitted"] > 0, f"{prefix} {day}: {values}"
        assert 0.0 <= values["late_share"] <= 1.0 and values["rejected_rows"] == 0, f"{prefix} {day}: {values}"
        assert values["lateness_p50_ms"] <= values["lateness_p99_ms"], f"{prefix} {day}: {values}"
        assert values["replay_seconds"] > 0 and values["events_per_second"] > 0, f"{prefix} {day}: {values}"
        assert _plotted(entries["input_rows"]) == 2000, f"{prefix} {day}"


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_partition_plots_tab_picks_the_demo_partitions(ui, prefix):
    """Which partitions the Plots -> Partitions tab plots: the newest 120 keys of the asset
    (the 120 before today in Dagster 1.13, whatever the end: the demo's days are recent)."""
    node = ui.query(PLOT_KEYS_QUERY, assetKey=_key(prefix, "windowed_aggregates"),
                    limit=PLOTS_PARTITION_LIMIT)["assetNodeOrError"]
    keys = node["partitionKeyConnection"]["results"]
    assert list(reversed(keys)) == DAYS, f"the plots tab asks for {keys[:3]}...{keys[-3:]} ({len(keys)} keys)"


def test_checks_tab_shows_every_check_passed_for_the_latest_materialization(ui, demo):
    """Every check passed, but matches_live: the demo's live output differs on purpose."""
    assets = _assets(ui)
    for key, names in _expected_checks().items():
        checks = {c["name"]: c for c in assets[key]["assetChecksOrError"]["checks"]}
        for name in names:
            latest = checks[name]["executionForLatestMaterialization"]
            passes = name != LIVE_CHECK
            assert latest is not None, f"{key} {name}: no execution shown"
            assert (latest["runId"], latest["status"]) == (demo.run_id, "SUCCEEDED" if passes else "FAILED"), \
                f"{key} {name}: {latest}"
            assert latest["evaluation"]["success"] is passes, f"{key} {name}: {latest}"
            assert checks[name]["blocking"] is (name not in (CHAIN_CHECK, LIVE_CHECK)), f"{key} {name}"
            # The Checks tab's Execute button: a check runs on its own, against the committed outputs.
            assert checks[name]["canExecuteIndividually"] == "CAN_EXECUTE", f"{key} {name}"


def _demo_executions(ui: UI, run_id: str) -> dict[tuple, list[dict]]:
    out = {}
    for key, names in _expected_checks().items():
        for name in names:
            execs = ui.query(CHECK_EXECUTIONS_QUERY, assetKey=_key(*key), checkName=name)["assetCheckExecutions"]
            out[(*key, name)] = [e for e in execs if e["runId"] == run_id]
    return out


def test_check_history_has_a_passed_evaluation_per_partition_of_the_demo_run(ui, demo):
    """Each check lists one execution per demo partition, passed (matches_live: failed, a
    warning), naming its partition."""
    for check, execs in _demo_executions(ui, demo.run_id).items():
        if check[-1] == LIVE_CHECK:
            done = sorted(e["partition"] for e in execs if e["status"] == "FAILED"
                          and not e["evaluation"]["success"] and e["evaluation"]["severity"] == "WARN")
        else:
            done = sorted(e["partition"] for e in execs
                          if e["status"] == "SUCCEEDED" and e["evaluation"] and e["evaluation"]["success"])
        assert done == DAYS, f"{check}: {execs}"
        assert all(e["evaluation"]["partition"] == e["partition"] for e in execs), check


def test_the_live_check_shows_the_demos_known_differences(ui, demo):
    """The demo's made-up live output differs from the replay in six known places (two per
    day with three days): each partition's check execution says how many, by category,
    with a table of them; half are explained. The demo prints the same."""
    from windowing.sample import LIVE_DIFFERENCE_KINDS

    assert LIVE_CHECKED, "no example pipeline has a live output"
    for prefix in sorted(LIVE_CHECKED):
        execs = ui.query(CHECK_METADATA_QUERY, assetKey=_key(prefix, "windowed_aggregates"),
                         checkName=LIVE_CHECK)["assetCheckExecutions"]
        mismatches = explained = 0
        for e in (e for e in execs if e["runId"] == demo.run_id):
            meta = {m["label"]: m for m in e["evaluation"]["metadataEntries"]}
            counts = {label: meta[label]["intValue"] for label in ("compared", "match", "explained")}
            assert counts["compared"] > counts["match"] > 0, (e["partition"], counts)
            table = meta["mismatches"]["mdStr"]
            rows = [line for line in table.splitlines() if line.startswith("| ") and "| category |" not in line]
            assert len(rows) == counts["compared"] - counts["match"], table
            assert meta["match_rate"]["floatValue"] == counts["match"] / counts["compared"]
            mismatches += counts["compared"] - counts["match"]
            explained += counts["explained"]
        assert (mismatches, explained) == (len(LIVE_DIFFERENCE_KINDS), 3)
    assert (f"live check (matches_live): FAILED in {', '.join(DAYS)} (3 partition(s))" in demo.stdout
            and f"{len(LIVE_DIFFERENCE_KINDS)} mismatch(es), 3 explained; the demo's live output has "
                f"{len(LIVE_DIFFERENCE_KINDS)} known differences" in demo.stdout), demo.stdout[-3000:]


def test_check_history_has_no_skipped_execution_for_the_demo_run(ui, demo):
    skipped = {check: [e["partition"] for e in execs if e["status"] == "SKIPPED"]
               for check, execs in _demo_executions(ui, demo.run_id).items()}
    assert not {c: p for c, p in skipped.items() if p}


# --------------------------------------------------------------------------- a failing rerun keeps the output

RERUN = textwrap.dedent(
    """
    import sys
    import dagster as dg
    from orchestration.definitions import build_definitions
    from orchestration.schedules import REPLAY_JOB

    job = build_definitions().resolve_job_def(REPLAY_JOB)
    result = job.execute_in_process(instance=dg.DagsterInstance.get(), partition_key=sys.argv[1],
                                    raise_on_error=False)
    print(f"rerun {result.run_id} success={result.success}")
    """
)


@pytest.fixture(scope="module")
def failed_rerun(ui, demo):
    """The last demo day gets an event stamped 30 days before its arrival (the input skew
    check fails, blocking), then the day is rerun alone on the same instance, as the
    "Materialize" button would. Runs after the tests above (it changes what the UI shows)."""
    from datetime import timedelta

    import pyarrow as pa
    import pyarrow.parquet as pq

    day = DAYS[-1]
    folder = demo.root / "landing" / f"date={day}"
    table = pq.read_table(sorted(folder.glob("*.parquet"))[0])
    odd = table.slice(0, 1).to_pylist()[0]
    odd["offset"] = 10**9
    odd["event_time"] = odd["event_time"] - timedelta(days=30)
    pq.write_table(pa.Table.from_pylist([odd], schema=table.schema), folder / "zz-odd.parquet")
    before = {p: _latest_by_partition(ui, (p, "windowed_aggregates"), [day])[day] for p in PREFIXES}
    done = subprocess.run([PYTHON, "-c", RERUN, day], cwd=REPO, env=demo.env, capture_output=True, text=True,
                          timeout=DEMO_TIMEOUT)
    m = re.search(r"rerun (\S+) success=(\w+)", done.stdout)
    assert m, f"the rerun did not report:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert m.group(2) == "False", "the rerun with a bad row should fail its blocking check"
    return day, m.group(1), before


def test_a_failing_rerun_leaves_the_previous_output_current(ui, demo, failed_rerun):
    day, rerun_id, before = failed_rerun
    for prefix in PREFIXES:
        # The day's materialization, as the UI shows it, is still the demo's, path and numbers alike.
        after = _latest_by_partition(ui, (prefix, "windowed_aggregates"), [day])[day]
        assert after["runId"] == demo.run_id != rerun_id
        assert after == before[prefix]
        path = next(e["path"] for e in after["metadataEntries"] if e["label"] == "path")
        assert Path(path).is_dir(), path  # the committed output it points at is still there

        # The blocking check that caught the bad row shows FAILED for the rerun.
        execs = ui.query(CHECK_EXECUTIONS_QUERY, assetKey=_key(prefix, "rejected_events"),
                         checkName="rejected_events_valid")["assetCheckExecutions"]
        failed = [e for e in execs if e["runId"] == rerun_id and e["evaluation"]]
        assert failed and failed[0]["status"] == "FAILED" and not failed[0]["evaluation"]["success"], execs
        assert day in failed[0]["evaluation"]["description"]

    # The partitions page and the counts show the day FAILED: Dagster's status is that of the
    # latest attempt, even though the day's previous output stays current (and is the
    # materialization shown for it, above). The events were not touched by the rerun.
    assets = _assets(ui)
    for prefix in PREFIXES:
        for name in OUTPUTS:
            node = assets[(prefix, name)]
            assert node["partitionStats"] == {"numMaterialized": 2, "numMaterializing": 0, "numPartitions": 3,
                                              "numFailed": 1}, (prefix, name)
            assert node["assetPartitionStatuses"]["ranges"] == [
                {"status": "MATERIALIZED", "startKey": DAYS[0], "endKey": DAYS[1]},
                {"status": "FAILED", "startKey": day, "endKey": day},
            ], (prefix, name)
    assert assets[("historical_events",)]["partitionStats"]["numMaterialized"] == 3
