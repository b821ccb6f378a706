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
* the catalog's standard fields: ``dagster/row_count``, ``dagster/column_schema`` and
  ``dagster/uri`` on every asset of every demo partition, owners, code version, code
  references;
* checks executed on their own, launched with the parameters the UI's Execute button
  sends (``launchRun``, no assets, the checks): for one chosen partition and for none
  (every committed partition), passing, replaying nothing, the asset not red; the
  landing zone's freshness check; and in headless Chromium, the Execute button of the
  Checks tab pressed, its run shown as the check's latest execution, passed;
* then a rerun of the last day with a bad row: the blocking check fails, and the
  materialization Dagster shows for that day is still the demo's committed output;
* then a rerun of the middle day with a withdrawn file: the last day is out of date, the
  asset's chain check shows it, and the automation condition asks to rerun exactly it.

Runs launched through the API are queued (the demo instance allows one at a time): the
fixture starts ``dagster-daemon`` beside the webserver, as ``dagster dev`` does.

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
#: The demo's days: the three days up to yesterday (UTC) when this module was imported, given to
#: the demo as ``--start`` (its own default is chosen when it runs: a run crossing midnight
#: would replay other days than these).
DAYS = [(datetime.now(timezone.utc).date() - timedelta(days=n)).isoformat() for n in (3, 2, 1)]
OUTPUTS = ("window_state", "windowed_aggregates", "late_events", "rejected_events")
CHAIN_CHECK = "state_chain_in_sync"
#: On the outputs but window_state: the partition's landed files are the ones it read (assets/pipelines.py).
INPUT_CHECK = "input_unchanged"
#: Runs after the commit and the publish, so it warns rather than blocks (assets/catalog.py).
PUBLISHED_CHECK = "published_matches_commit"
#: What the UI's Plots -> Partitions tab and the asset sidebar ask for (ui-core AssetEventMetadataEntriesTable).
PLOTS_PARTITION_LIMIT = 120
#: Numeric metadata of windowed_aggregates each demo partition must carry, by GraphQL type.
PLOTTED = {
    "late_share": "FloatMetadataEntry",
    "lateness_p50_seconds": "FloatMetadataEntry",
    "lateness_p99_seconds": "FloatMetadataEntry",
    "windows_emitted": "IntMetadataEntry",
    "windows_emitted_watermark": "IntMetadataEntry",
    "windows_emitted_idle": "IntMetadataEntry",
    "events_per_second": "FloatMetadataEntry",
    "replay_seconds": "FloatMetadataEntry",
}
#: Counts that are zero on most partitions, so not plotted: text, or only in the ``*_by_reason`` JSON.
NOT_PLOTTED = {
    "rejected_rows": "TextMetadataEntry",
    "emitted_by_reason": "JsonMetadataEntry",
    "closed_by_reason": "JsonMetadataEntry",
}
#: Dagster's standard keys, not ours to leave out: ``dagster/row_count`` of ``rejected_events``
#: is zero on every demo day (the demo's history has no rejected row).
STANDARD_PREFIX = "dagster/"
DEMO_TIMEOUT = 480
START_TIMEOUT = 120
RUN_TIMEOUT = 420
DAEMON = str(Path(WEBSERVER).with_name("dagster-daemon"))
FRESHNESS_CHECK = "newest_partition_on_time"
STANDARD_KEYS = ("dagster/row_count", "dagster/column_schema", "dagster/uri")


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
        done = subprocess.run(
            [*demo_command(env), "--start", DAYS[0]],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"the demo did not finish in {DEMO_TIMEOUT}s:\n{(exc.stdout or '')[-4000:]}\n{(exc.stderr or '')[-4000:]}"
        )
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
        self.daemon_log: Path | None = None

    def query(self, query: str, **variables):
        body = json.dumps({"query": query, "variables": variables}).encode()
        request = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
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
    """The webserver, and the daemon ``dagster dev`` runs beside it: runs launched from the
    UI (a check's Execute button) are queued (the demo instance allows one run at a time)
    and the daemon starts them."""
    port = free_port()
    log_dir = demo.root / "webserver"
    log_dir.mkdir()
    stdout, stderr = log_dir / "stdout.log", log_dir / "stderr.log"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [WEBSERVER, "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
            cwd=REPO,
            env=demo.env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the finalizer stops it and its children
        )
    with open(log_dir / "daemon.log", "wb") as out:
        daemon = subprocess.Popen(
            [DAEMON, "run", "-w", "workspace.yaml"],
            cwd=REPO,
            env=demo.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = UI(f"http://127.0.0.1:{port}", proc, stderr)
    server.daemon_log = log_dir / "daemon.log"
    try:
        _wait_until_loaded(server)
        yield server
    finally:
        _stop(daemon)
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
          executionForLatestMaterialization { runId status partition evaluation { success severity description } } }
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
          ... on TextMetadataEntry { text }
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
    matches_live on the aggregates of a pipeline with a live output, and
    published_matches_commit on the aggregates (the demo publishes every pipeline to its
    embedded metastore: orchestration/demo.py)."""
    out = {}
    for prefix in PREFIXES:
        for name in OUTPUTS:
            out[(prefix, name)] = (
                {f"{name}_valid"}
                | ({CHAIN_CHECK} if name == "window_state" else {INPUT_CHECK})
                | ({LIVE_CHECK} if name == "windowed_aggregates" and prefix in LIVE_CHECKED else set())
                | ({PUBLISHED_CHECK} if name == "windowed_aggregates" else set())
            )
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
    """The asset graph's and catalog's partition counts: 3 of 3 materialized, none failed
    (historical_events is observed, never materialized: assets/events.py)."""
    assets = _assets(ui)
    keys = [(p, name) for p in PREFIXES for name in OUTPUTS]
    stats = {"/".join(k): assets[k]["partitionStats"] for k in keys}
    want = {"numMaterialized": 3, "numMaterializing": 0, "numPartitions": 3, "numFailed": 0}
    # numPartitions == 3: partitions end after the last landed day (orchestration.partitions,
    # REWINDOW_HISTORY_END unset), not today.
    assert stats == {k: want for k in stats}
    for k in keys:
        assert assets[k]["partitionKeysByDimension"][0]["partitionKeys"] == DAYS, k


def test_the_partitions_page_shows_one_materialized_range(ui):
    assets = _assets(ui)
    for key in [(p, name) for p in PREFIXES for name in OUTPUTS]:  # historical_events: observed
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
        wrong_type = {
            label: entries[label]["__typename"] if label in entries else "missing"
            for label, kind in PLOTTED.items()
            if entries.get(label, {}).get("__typename") != kind
        }
        assert not wrong_type, f"{prefix} {day}: {wrong_type}"
        values = {label: _plotted(entries[label]) for label in PLOTTED}
        assert all(v is not None for v in values.values()), f"{prefix} {day}: {values}"
        assert values["windows_emitted"] > 0, f"{prefix} {day}: {values}"
        assert 0.0 <= values["late_share"] <= 1.0, f"{prefix} {day}: {values}"
        assert {label: entries[label]["__typename"] for label in NOT_PLOTTED if label in entries} == NOT_PLOTTED
        assert entries["rejected_rows"]["text"] == "0", f"{prefix} {day}"
        assert values["lateness_p50_seconds"] <= values["lateness_p99_seconds"], f"{prefix} {day}: {values}"
        # Durations also as text in human units, the watermark a timestamp (issue 47).
        p99 = entries["lateness_p99"]["text"]
        assert re.fullmatch(r"-|\d[\d.hms ]*", p99) and not p99.isdigit(), entries["lateness_p99"]
        assert entries["watermark_reached"]["__typename"] == "TimestampMetadataEntry", entries["watermark_reached"]
        assert values["replay_seconds"] > 0 and values["events_per_second"] > 0, f"{prefix} {day}: {values}"
        assert _plotted(entries["input_rows"]) == 2000, f"{prefix} {day}"


def test_no_partition_plot_is_a_flat_zero_or_has_gaps(ui, demo):
    """Every Int/Float entry is a plot in Plots -> Partitions (extractNumericData): on every
    asset, each numeric series is given on every demo partition (a missing one is a gap the
    UI draws as no data) and is not zero on all of them (a flat line at zero says nothing),
    but Dagster's standard keys. (historical_events is observed: no materialization to plot.)"""
    keys = [(p, name) for p in PREFIXES for name in OUTPUTS]
    flat, gaps = {}, {}
    for key in keys:
        latest = _latest_by_partition(ui, key, DAYS)
        assert sorted(latest) == DAYS, key
        series: dict[str, dict[str, float]] = {}
        for day, event in latest.items():
            for entry in event["metadataEntries"]:
                y = _plotted(entry)
                if y is not None:
                    series.setdefault(entry["label"], {})[day] = y
        for label, ys in series.items():
            if sorted(ys) != DAYS:
                gaps["/".join(key) + f" {label}"] = sorted(ys)
            elif not any(ys.values()) and not label.startswith(STANDARD_PREFIX):
                flat["/".join(key) + f" {label}"] = ys
        assert len(series) >= (3 if key == ("historical_events",) else len(PLOTTED)), (key, sorted(series))
    assert not flat, f"all-zero plots: {flat}"
    assert not gaps, f"series missing on some demo partitions: {gaps}"


@pytest.mark.parametrize("prefix", PREFIXES)
def test_the_partition_plots_tab_picks_the_demo_partitions(ui, prefix):
    """Which partitions the Plots -> Partitions tab plots: the newest 120 keys of the asset
    (the 120 before today in Dagster 1.13, whatever the end: the demo's days are recent)."""
    node = ui.query(PLOT_KEYS_QUERY, assetKey=_key(prefix, "windowed_aggregates"), limit=PLOTS_PARTITION_LIMIT)[
        "assetNodeOrError"
    ]
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
            assert (latest["runId"], latest["status"]) == (demo.run_id, "SUCCEEDED" if passes else "FAILED"), (
                f"{key} {name}: {latest}"
            )
            assert latest["evaluation"]["success"] is passes, f"{key} {name}: {latest}"
            warns = (CHAIN_CHECK, INPUT_CHECK, LIVE_CHECK, PUBLISHED_CHECK)
            assert checks[name]["blocking"] is (name not in warns), f"{key} {name}"
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
            done = sorted(
                e["partition"]
                for e in execs
                if e["status"] == "FAILED" and not e["evaluation"]["success"] and e["evaluation"]["severity"] == "WARN"
            )
        else:
            done = sorted(
                e["partition"]
                for e in execs
                if e["status"] == "SUCCEEDED" and e["evaluation"] and e["evaluation"]["success"]
            )
        assert done == DAYS, f"{check}: {execs}"
        assert all(e["evaluation"]["partition"] == e["partition"] for e in execs), check


def test_the_live_check_shows_the_demos_known_differences(ui, demo):
    """The demo's made-up live output differs from the replay in six known places (two per
    day with three days): each partition's check execution says how many, by category,
    with a table of them; half are explained. The demo prints the same."""
    from windowing.sample import LIVE_DIFFERENCE_KINDS

    assert LIVE_CHECKED, "no example pipeline has a live output"
    for prefix in sorted(LIVE_CHECKED):
        execs = ui.query(CHECK_METADATA_QUERY, assetKey=_key(prefix, "windowed_aggregates"), checkName=LIVE_CHECK)[
            "assetCheckExecutions"
        ]
        mismatches = explained = 0
        for e in (e for e in execs if e["runId"] == demo.run_id):
            meta = {m["label"]: m for m in e["evaluation"]["metadataEntries"]}
            counts = {label: meta[label]["intValue"] for label in ("compared", "match", "explained")}
            assert counts["compared"] > counts["match"] > 0, (e["partition"], counts)
            table = meta["mismatches"]["mdStr"]
            rows = [line for line in table.splitlines() if line.startswith("| ") and "| category |" not in line]
            assert len(rows) == counts["compared"] - counts["match"], table
            assert meta["match_percent"]["floatValue"] == round(100 * counts["match"] / counts["compared"], 4)
            mismatches += counts["compared"] - counts["match"]
            explained += counts["explained"]
        assert (mismatches, explained) == (len(LIVE_DIFFERENCE_KINDS), 3)
    assert (
        f"live check (matches_live): FAILED in {', '.join(DAYS)} (3 partition(s))" in demo.stdout
        and f"{len(LIVE_DIFFERENCE_KINDS)} mismatch(es), 3 explained; the demo's live output has "
        f"{len(LIVE_DIFFERENCE_KINDS)} known differences"
        in demo.stdout
    ), demo.stdout[-3000:]


def test_check_history_has_no_skipped_execution_for_the_demo_run(ui, demo):
    skipped = {
        check: [e["partition"] for e in execs if e["status"] == "SKIPPED"]
        for check, execs in _demo_executions(ui, demo.run_id).items()
    }
    assert not {c: p for c, p in skipped.items() if p}


# --------------------------------------------------------------------------- the catalog's standard fields

ASSET_FIELDS_QUERY = """
query AssetFields($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      opVersion
      owners { __typename ... on TeamAssetOwner { team } ... on UserAssetOwner { email } }
      metadataEntries { __typename label ... on CodeReferencesMetadataEntry { codeReferences {
        __typename ... on LocalFileCodeReference { filePath lineNumber label } } } }
    }
  }
}
"""

STANDARD_METADATA_QUERY = """
query StandardMetadata($assetKey: AssetKeyInput!, $partitions: [String!]!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      latestMaterializationByPartition(partitions: $partitions) {
        partition
        metadataEntries {
          __typename label
          ... on IntMetadataEntry { intValue }
          ... on UrlMetadataEntry { url }
          ... on TableSchemaMetadataEntry { schema { columns { name type description } } }
        }
      }
    }
  }
}
"""


def test_every_demo_partition_carries_dagsters_standard_metadata(ui):
    """The catalog's row count, Columns section and location (``dagster/row_count``,
    ``dagster/column_schema``, ``dagster/uri``) on every output of every demo partition
    (historical_events carries them on its observations: tests/assets/test_landing_zone_observed.py)."""
    keys = [(p, name) for p in PREFIXES for name in OUTPUTS]
    for key in keys:
        node = ui.query(STANDARD_METADATA_QUERY, assetKey=_key(*key), partitions=DAYS)["assetNodeOrError"]
        events = {e["partition"]: e for e in node["latestMaterializationByPartition"] if e}
        assert sorted(events) == DAYS, key
        for day, event in events.items():
            entries = {e["label"]: e for e in event["metadataEntries"]}
            assert all(k in entries for k in STANDARD_KEYS), (key, day, sorted(entries))
            assert entries["dagster/row_count"]["__typename"] == "IntMetadataEntry", (key, day)
            rows = entries["dagster/row_count"]["intValue"]
            assert rows == 2000 if key == ("historical_events",) else rows >= 0, (key, day, rows)
            columns = entries["dagster/column_schema"]["schema"]["columns"]
            assert columns and all(c["name"] and c["type"] for c in columns), (key, day)
            uri = entries["dagster/uri"]["url"]
            assert uri.startswith("file:/") and Path(uri[len("file:") :]).exists(), (key, day, uri)
            if key != ("historical_events",):
                assert f"/{day}/runs/" in uri, (key, day, uri)  # the partition's committed run
    # The aggregates have rows, and say which column is the worker, not the Dagster partition.
    for prefix in PREFIXES:
        node = ui.query(STANDARD_METADATA_QUERY, assetKey=_key(prefix, "windowed_aggregates"), partitions=DAYS)[
            "assetNodeOrError"
        ]
        for event in node["latestMaterializationByPartition"]:
            entries = {e["label"]: e for e in event["metadataEntries"]}
            assert entries["dagster/row_count"]["intValue"] > 0
            described = [c for c in entries["dagster/column_schema"]["schema"]["columns"] if c["description"]]
            assert described and "not the Dagster partition" in described[0]["description"], prefix


def test_every_asset_has_owners_a_code_version_and_code_references(ui):
    from windowing import load_pipeline

    for f in sorted((REPO / "examples" / "pipelines").glob("*.yaml")):
        pipeline = load_pipeline(f)
        from assets.pipelines import asset_prefix

        for name in OUTPUTS:
            node = ui.query(ASSET_FIELDS_QUERY, assetKey=_key(asset_prefix(pipeline.name), name))["assetNodeOrError"]
            assert node["owners"] == [{"__typename": "TeamAssetOwner", "team": "rewindow"}], node["owners"]
            assert node["opVersion"] == pipeline.fingerprint()  # the catalog's code version
            refs = next(e for e in node["metadataEntries"] if e["label"] == "dagster/code_references")
            files = [Path(r["filePath"]).name for r in refs["codeReferences"]]
            assert files == [f.name, "pipelines.py"], files


# --------------------------------------------------------------------------- checks executed on their own

LAUNCH_MUTATION = """
mutation LaunchChecks($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on Error { message }
  }
}
"""

CHECK_JOBS_QUERY = """
query CheckJobs($assetKey: AssetKeyInput!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      repository { name location { name } }
      assetChecksOrError { ... on AssetChecks { checks { name jobNames } } }
    }
  }
}
"""

RUN_QUERY = """
query Run($runId: ID!) { runOrError(runId: $runId) { __typename ... on Run { status jobName } } }
"""

RUN_EXECUTIONS_QUERY = """
query RunExecutions($assetKey: AssetKeyInput!, $checkName: String!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: 100) {
    runId status partition timestamp
    evaluation { success severity description timestamp
      targetMaterialization { runId timestamp }
      metadataEntries { __typename label ... on TextMetadataEntry { text } } }
  }
}
"""


def _launch_checks(ui: UI, checks: list[tuple[tuple, str]], partition: str | None = None) -> str:
    """Launch ``checks`` (asset key, check name) on their own, with the parameters the UI's
    Execute button sends (ExecuteChecksButton: the checks' first common job, no assets, empty
    run config), plus the ``dagster/partition`` tag when a partition is chosen."""
    jobs, where = None, None
    for key, name in checks:
        node = ui.query(CHECK_JOBS_QUERY, assetKey=_key(*key))["assetNodeOrError"]
        where = node["repository"]
        names = next(c["jobNames"] for c in node["assetChecksOrError"]["checks"] if c["name"] == name)
        jobs = [j for j in (jobs if jobs is not None else names) if j in names]
    assert jobs and where, f"no job runs {checks}"
    params = {
        "mode": "default",
        "runConfigData": "{}",
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}] if partition else []},
        "selector": {
            "jobName": jobs[0],
            "repositoryLocationName": where["location"]["name"],
            "repositoryName": where["name"],
            "assetSelection": [],
            "assetCheckSelection": [{"assetKey": _key(*key), "name": name} for key, name in checks],
        },
    }
    launched = ui.query(LAUNCH_MUTATION, executionParams=params)["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def _wait_for_run(ui: UI, run_id: str) -> dict:
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        run = ui.query(RUN_QUERY, runId=run_id)["runOrError"]
        if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            return run
        time.sleep(2)
    pytest.fail(
        f"run {run_id} not finished after {RUN_TIMEOUT}s ({run['status']}); daemon log:\n"
        f"{_tail(ui.daemon_log) if ui.daemon_log else ''}"
    )


def _run_executions(ui: UI, key: tuple, check: str, run_id: str) -> list[dict]:
    execs = ui.query(RUN_EXECUTIONS_QUERY, assetKey=_key(*key), checkName=check)["assetCheckExecutions"]
    return [e for e in execs if e["runId"] == run_id]


def _latest_check_status(ui: UI, key: tuple) -> dict[str, dict]:
    return {c["name"]: c["executionForLatestMaterialization"] for c in _assets(ui)[key]["assetChecksOrError"]["checks"]}


STATE = (PREFIXES[0], "window_state")
ON_THEIR_OWN = [(STATE, CHAIN_CHECK), (STATE, "window_state_valid")]


@pytest.fixture(scope="module")
def checks_for_one_partition(ui, demo):
    """The chain check and ``window_state_valid`` executed on their own for the middle demo
    day (the launchpad's partition tag)."""
    run_id = _launch_checks(ui, ON_THEIR_OWN, partition=DAYS[1])
    return run_id, _wait_for_run(ui, run_id)


@pytest.fixture(scope="module")
def checks_for_every_partition(ui, demo):
    """The same checks and the landing zone's freshness check, executed on their own with no
    partition, exactly as the Checks tab's "Execute all" button launches them."""
    run_id = _launch_checks(ui, [*ON_THEIR_OWN, (("historical_events",), FRESHNESS_CHECK)])
    return run_id, _wait_for_run(ui, run_id)


def _materializations_unchanged(ui: UI, demo) -> None:
    for name in OUTPUTS:
        latest = _latest_by_partition(ui, (PREFIXES[0], name), DAYS)
        assert {d: e["runId"] for d, e in latest.items()} == {d: demo.run_id for d in DAYS}, name


def test_checks_executed_on_their_own_for_one_partition_pass_and_replay_nothing(ui, demo, checks_for_one_partition):
    run_id, run = checks_for_one_partition
    assert run["status"] == "SUCCESS", (run, _tail(ui.daemon_log) if ui.daemon_log else "")
    for key, check in ON_THEIR_OWN:
        execs = {e["partition"] or "": e for e in _run_executions(ui, key, check, run_id)}
        # The partition's evaluation, and the run's summary (Dagster plans a one-partition
        # run's check without a partition): none left SKIPPED.
        assert {p: e["status"] for p, e in execs.items()} == {"": "SUCCEEDED", DAYS[1]: "SUCCEEDED"}, execs
        assert execs[""]["evaluation"]["description"] == f"1 partition(s) checked ({DAYS[1]}): all passed"
        evaluation = execs[DAYS[1]]["evaluation"]
        assert evaluation["success"] and DAYS[1] in evaluation["description"], evaluation
        assert {m["label"]: m.get("text") for m in evaluation["metadataEntries"]}["partition"] == DAYS[1]
        # The check's time is not before the materialization it targets.
        assert evaluation["targetMaterialization"]["runId"] == demo.run_id
        assert execs[DAYS[1]]["timestamp"] >= evaluation["targetMaterialization"]["timestamp"], execs[DAYS[1]]
    _materializations_unchanged(ui, demo)  # nothing replayed, nothing written


def test_checks_executed_on_their_own_for_every_partition_pass_and_paint_nothing_red(
    ui, demo, checks_for_every_partition
):
    run_id, run = checks_for_every_partition
    assert run["status"] == "SUCCESS", (run, _tail(ui.daemon_log) if ui.daemon_log else "")
    for key, check in ON_THEIR_OWN:
        execs = _run_executions(ui, key, check, run_id)
        # One summary evaluation for the run (Dagster plans one without a partition), then one per partition.
        assert sorted((e["partition"] or "", e["status"]) for e in execs) == sorted(
            [("", "SUCCEEDED")] + [(d, "SUCCEEDED") for d in DAYS]
        ), (check, execs)
        summary = next(e for e in execs if e["partition"] is None)["evaluation"]
        assert summary["description"] == f"3 partition(s) checked ({DAYS[0]}..{DAYS[-1]}): all passed", summary
        for e in execs:
            if e["partition"]:
                assert e["evaluation"]["success"] and e["partition"] in e["evaluation"]["description"], e
    # What the asset shows: every check passed for its latest materialization, none failed.
    latest = _latest_check_status(ui, STATE)
    for _, check in ON_THEIR_OWN:
        assert latest[check]["runId"] == run_id and latest[check]["status"] == "SUCCEEDED", (check, latest[check])
    assert all(c and c["status"] == "SUCCEEDED" for c in latest.values()), latest
    _materializations_unchanged(ui, demo)


def test_the_freshness_check_evaluates(ui, checks_for_every_partition):
    """The landing zone's newest day (yesterday) is not late: the freshness check passes, naming it."""
    run_id, _ = checks_for_every_partition
    [e] = _run_executions(ui, ("historical_events",), FRESHNESS_CHECK, run_id)
    assert e["status"] == "SUCCEEDED" and e["evaluation"]["success"], e
    meta = {m["label"]: m.get("text") for m in e["evaluation"]["metadataEntries"]}
    assert meta["newest_landed_day"] == DAYS[-1], meta


#: A line of the queue daemon in dagster-daemon's output (colours stripped): its time and message.
QUEUE_DAEMON_LINE = re.compile(r"^(\S+ \S+ \S+) - dagster\.daemon\.QueuedRunCoordinatorDaemon - INFO - (.*)$")
QUEUE_FULL = "1 runs are currently in progress. Maximum is 1, won't launch more."
#: A stretch of full queue ends after 15 s without the line (orchestration/run_queue.py: three passes).
QUEUE_QUIET_SECONDS = 15


def test_the_daemon_says_once_while_a_run_goes_that_the_queue_is_full(
    ui, checks_for_one_partition, checks_for_every_partition
):
    """The demo instance allows one run at a time. While each of the two queued runs goes
    (20-40 s), the queue daemon says once that the queue is full, where Dagster's own
    coordinator says it every 5 s; it launched both runs, and says so."""
    for _, run in (checks_for_one_partition, checks_for_every_partition):
        assert run["status"] == "SUCCESS", run
    assert ui.daemon_log is not None
    text = re.sub(r"\x1b\[[0-9;]*m", "", ui.daemon_log.read_text(errors="replace"))
    said = [
        (datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S %z"), m.group(2))
        for line in text.splitlines()
        if (m := QUEUE_DAEMON_LINE.search(line))
    ]
    messages = [message for _, message in said]
    assert messages.count("Launched 1 runs.") >= 2, messages
    assert QUEUE_FULL in messages, messages  # said
    repeats = [
        (a[0].isoformat(), b[0].isoformat())
        for a, b in zip(said, said[1:])
        if a[1] == b[1] == QUEUE_FULL and (b[0] - a[0]).total_seconds() < QUEUE_QUIET_SECONDS
    ]
    assert not repeats, messages  # but not again, every 5 s, while the run goes


def test_the_execute_button_of_the_checks_tab_runs_the_check_and_shows_it_passed(ui, demo):
    """Headless Chromium on the Checks tab of window_state: select state_chain_in_sync,
    press Execute, and see the run's evaluation shown as the check's latest, passed."""
    import shutil
    import tempfile

    from scripts.ui_screenshots import Chromium, text_present

    binary = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    assert binary, "Chromium is needed (apt-get install -y chromium; .ci/run installs it)"
    before = {
        e["runId"]
        for e in ui.query(RUN_EXECUTIONS_QUERY, assetKey=_key(*STATE), checkName=CHAIN_CHECK)["assetCheckExecutions"]
    }
    profile = Path(tempfile.mkdtemp(prefix="rewindow-chromium-"))
    browser = Chromium(binary, profile)
    try:
        page = browser.new_page()
        page.goto(f"{ui.url}/assets/{'/'.join(STATE)}?view=checks")
        page.wait_for(text_present(CHAIN_CHECK), "the asset's checks")
        page.settle(1)
        page.dismiss_dialogs()
        page.click_text(CHAIN_CHECK, "span, div", last=True)
        page.wait_for(
            "[...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'Execute' && !b.disabled)",
            "an enabled Execute button",
        )
        page.click_text("Execute")
        deadline = time.monotonic() + 60
        new: set[str] = set()
        while not new and time.monotonic() < deadline:
            time.sleep(1)
            new = {
                e["runId"]
                for e in ui.query(RUN_EXECUTIONS_QUERY, assetKey=_key(*STATE), checkName=CHAIN_CHECK)[
                    "assetCheckExecutions"
                ]
            } - before
        assert len(new) == 1, "pressing Execute launched no run of the check"
        run_id = new.pop()
        assert _wait_for_run(ui, run_id)["status"] == "SUCCESS"
        page.goto(f"{ui.url}/assets/{'/'.join(STATE)}?view=checks")
        page.wait_for(text_present(CHAIN_CHECK), "the asset's checks again")
        page.click_text(CHAIN_CHECK, "span, div", last=True)
        page.wait_for(
            f"!!document.querySelector('a[href*=\"/runs/{run_id}\"]')",
            "the latest execution linking to the run",
            timeout=60,
        )
        page.wait_for(
            text_present("Passed") + " && " + text_present(f"partition {DAYS[-1]} follows"),
            "the evaluation shown passed",
        )
        assert not page.js(text_present("Execution failed"))
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
    execs = _run_executions(ui, STATE, CHAIN_CHECK, run_id)
    assert sorted(e["partition"] or "" for e in execs) == ["", *DAYS] and all(
        e["status"] == "SUCCEEDED" for e in execs
    ), execs


# --------------------------------------------------------------------------- a failing rerun keeps the output

#: One process for the reruns of this module (a Python start-up, Dagster's imports and a Spark
#: session with Hive support, once): it reads a partition key a line from stdin and reruns that
#: partition alone on the demo's instance, as the "Materialize" button would, with definitions
#: built afresh for each; a line ``DAY automation`` then prints what the automation sensor
#: rerun_out_of_date_partitions would request, were it on. Stdin closed: it exits.
RERUNS = textwrap.dedent(
    """
    import json
    import sys
    import dagster as dg
    from orchestration.definitions import build_definitions
    from orchestration.schedules import REPLAY_JOB

    instance = dg.DagsterInstance.get()
    for line in sys.stdin:
        day, _, then = line.strip().partition(" ")
        defs = build_definitions()
        result = defs.resolve_job_def(REPLAY_JOB).execute_in_process(instance=instance, partition_key=day,
                                                                     raise_on_error=False)
        print(f"rerun {result.run_id} success={result.success}", flush=True)
        if then == "automation":
            evaluated = dg.evaluate_automation_conditions(defs=defs, instance=instance)
            states = [k for k in defs.resolve_asset_graph().get_all_asset_keys() if k.path[-1] == "window_state"]
            print("requested " + json.dumps({"/".join(k.path): sorted(evaluated.get_requested_partitions(k))
                                             for k in states}), flush=True)
        print("done", flush=True)
    """
)


class Reruns:
    """The running :data:`RERUNS` process (its own process group, stopped by the fixture);
    a thread hands over the lines it prints."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        import queue
        import threading

        self.proc, self.log = proc, log
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")  # the process closed its output

    def rerun(self, line: str) -> str:
        """Send ``line``; what the process printed for it, up to its ``done``."""
        import queue

        assert self.proc.stdin
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + DEMO_TIMEOUT
        while time.monotonic() < deadline:
            try:
                got = self.lines.get(timeout=5)
            except queue.Empty:
                continue
            if got.strip() == "done":
                return "".join(out)
            if not got:
                break
            out.append(got)
        pytest.fail(
            f"the rerun of {line!r} did not report (exit {self.proc.poll()}):\n{''.join(out)[-3000:]}\n"
            f"{_tail(self.log)}"
        )


@pytest.fixture(scope="module")
def reruns(demo):
    with open(demo.root / "reruns.log", "wb") as err:
        proc = subprocess.Popen(
            [PYTHON, "-c", RERUNS],
            cwd=REPO,
            env=demo.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    try:
        yield Reruns(proc, demo.root / "reruns.log")
    finally:
        if proc.stdin:
            proc.stdin.close()  # it ends its loop and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        _stop(proc)
        assert proc.poll() is not None


@pytest.fixture(scope="module")
def failed_rerun(ui, demo, reruns):
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
    out = reruns.rerun(day)
    m = re.search(r"rerun (\S+) success=(\w+)", out)
    assert m, f"the rerun did not report:\n{out[-3000:]}\n{_tail(reruns.log)}"
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
        execs = ui.query(
            CHECK_EXECUTIONS_QUERY, assetKey=_key(prefix, "rejected_events"), checkName="rejected_events_valid"
        )["assetCheckExecutions"]
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
            assert node["partitionStats"] == {
                "numMaterialized": 2,
                "numMaterializing": 0,
                "numPartitions": 3,
                "numFailed": 1,
            }, (prefix, name)
            assert node["assetPartitionStatuses"]["ranges"] == [
                {"status": "MATERIALIZED", "startKey": DAYS[0], "endKey": DAYS[1]},
                {"status": "FAILED", "startKey": day, "endKey": day},
            ], (prefix, name)


# --------------------------------------------------------------------------- out of date, where people look


@pytest.fixture(scope="module")
def changed_input_rerun(ui, demo, failed_rerun, reruns):
    """One landed file of the middle demo day is withdrawn (a corrected export), and the day is
    rerun alone: its state changes, so the last day, computed from the old state, is out of
    date. Runs after the failing rerun (its day stays the demo's committed output)."""
    day = DAYS[1]
    folder = demo.root / "landing" / f"date={day}"
    withdrawn = sorted(folder.glob("*.parquet"))[0]
    withdrawn.rename(demo.root / f"withdrawn-{withdrawn.name}")
    out = reruns.rerun(f"{day} automation")
    m = re.search(r"rerun (\S+) success=(\w+)", out)
    asked = re.search(r"^requested (.*)$", out, re.MULTILINE)
    assert m and asked, f"the rerun did not report:\n{out[-3000:]}\n{_tail(reruns.log)}"
    assert m.group(2) == "True", f"the rerun failed:\n{_tail(reruns.log)}"
    return m.group(1), json.loads(asked.group(1))


def test_a_partition_out_of_date_shows_on_the_asset_and_is_what_automation_reruns(ui, changed_input_rerun):
    rerun_id, requested = changed_input_rerun
    for prefix in PREFIXES:
        state = (prefix, "window_state")
        # The asset's check status (lineage node, catalog, Checks tab): the chain check warns,
        # on the out-of-date partition's own materialization, naming the range to rerun.
        latest = _latest_check_status(ui, state)[CHAIN_CHECK]
        assert (latest["runId"], latest["status"], latest["partition"]) == (rerun_id, "FAILED", DAYS[2]), latest
        assert latest["evaluation"]["description"].startswith(f"partition {DAYS[2]} is out of date"), latest
        assert f"rerun {DAYS[2]}..{DAYS[2]}" in latest["evaluation"]["description"], latest
        # The rerun day itself follows from the day before it.
        execs = {e["partition"]: e for e in _run_executions(ui, state, CHAIN_CHECK, rerun_id)}
        assert execs[DAYS[1]]["evaluation"]["success"] and not execs[DAYS[2]]["evaluation"]["success"], execs
        assert execs[DAYS[2]]["evaluation"]["severity"] == "WARN"
        # The automation condition (its sensor is off by default) asks for exactly that partition.
        assert requested["/".join(state)] == [DAYS[2]], requested


# --------------------------------------------------------------------------- a file lands late (issue 46)

SENSORS_QUERY = """
query { repositoriesOrError { ... on RepositoryConnection { nodes { name location { name }
  sensors { name sensorState { status ticks(limit: 5) { status timestamp error { message } } } } } } } }
"""
STALE_QUERY = """
query Stale($keys: [AssetKeyInput!], $partitions: [String!]) {
  assetNodes(assetKeys: $keys) { assetKey { path } staleStatusByPartition(partitions: $partitions) }
}
"""
RUNS_QUERY = """
query { runsOrError(limit: 100) { ... on Runs { results { runId status jobName } } } }
"""
LATE_FILE = "late-arrival.parquet"
LATE_ROWS = 40


def _input_rows(ui: UI, prefix: str, day: str) -> int:
    entry = _latest_by_partition(ui, (prefix, "windowed_aggregates"), [day])[day]
    return int(next(e["intValue"] for e in entry["metadataEntries"] if e["label"] == "input_rows"))


def _sensors(ui: UI) -> dict[str, dict]:
    nodes = ui.query(SENSORS_QUERY)["repositoriesOrError"]["nodes"]
    return {s["name"]: s["sensorState"] for n in nodes for s in n["sensors"]}


def _toggle_sensor(page, ui: UI, name: str) -> None:
    """On the Automation page, press the switch on the row of sensor ``name``, and wait
    until Dagster has it running."""
    from scripts.ui_screenshots import text_present

    page.goto(f"{ui.url}/automation")
    page.wait_for(text_present(name), f"the sensor {name} listed")
    page.settle(1)
    page.dismiss_dialogs()
    pressed = page.js(
        f"""(() => {{
          const named = [...document.querySelectorAll('a, span, div')]
            .filter(e => e.childElementCount === 0 && e.innerText && e.innerText.trim() === {json.dumps(name)});
          for (const el of named) {{
            for (let up = el; up; up = up.parentElement) {{
              // the row's on/off switch (the rows also have selection checkboxes)
              const box = up.querySelector('label[class*="formatSwitch"] input[type="checkbox"]');
              if (box) {{ box.scrollIntoView({{block: 'center'}}); box.click(); return true; }}
            }}
          }}
          return false;
        }})()"""
    )
    assert pressed, f"no switch beside {name} on the Automation page"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _sensors(ui)[name]["status"] != "RUNNING":
        time.sleep(1)
    assert _sensors(ui)[name]["status"] == "RUNNING", _sensors(ui)[name]


@pytest.fixture(scope="module")
def late_file(ui, demo, changed_input_rerun, reruns):
    """A file lands late in the first committed demo day (and the last day's odd event of the
    failing rerun is withdrawn). Runs last: it turns the sensors on and catches up. The reruns'
    process is ended first: it holds the demo's embedded (one-process) Derby metastore, which
    the daemon's catch-up run publishes to."""
    import pyarrow.parquet as pq

    if reruns.proc.stdin:
        reruns.proc.stdin.close()  # it ends its loop and exits
    try:
        reruns.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        _stop(reruns.proc)

    for odd in (demo.root / "landing" / f"date={DAYS[-1]}").glob("zz-odd.parquet"):
        odd.unlink()
    folder = demo.root / "landing" / f"date={DAYS[0]}"
    table = pq.read_table(sorted(folder.glob("*.parquet"))[0])
    pq.write_table(table.slice(0, LATE_ROWS), folder / LATE_FILE)
    return {p: _input_rows(ui, p, DAYS[0]) for p in PREFIXES}


def test_a_late_file_shows_unsynced_and_warns_then_automation_catches_up(ui, demo, late_file):
    """The whole walkthrough in headless Chromium: the landing zone sensor turned on sees the
    changed day (observed: the pipelines' partitions Unsynced, and the warning check naming
    the file on the Checks tab, with no rerun); the automation sensor turned on catches the
    history up in one run; then every check passes, with the late rows counted."""
    import shutil
    import tempfile

    from scripts.ui_screenshots import Chromium, text_present

    binary = shutil.which("chromium") or shutil.which("chromium-headless-shell")
    assert binary, "Chromium is needed (apt-get install -y chromium; .ci/run installs it)"
    aggregates = (PREFIXES[0], "windowed_aggregates")
    runs_before = {r["runId"] for r in ui.query(RUNS_QUERY)["runsOrError"]["results"]}
    profile = Path(tempfile.mkdtemp(prefix="rewindow-chromium-"))
    browser = Chromium(binary, profile)
    try:
        page = browser.new_page()
        toggled = time.time()
        _toggle_sensor(page, ui, "landing_zone_sensor")
        # Its first tick observes the changed days and reports the warning checks: the
        # changed day's evaluation (the latest materialization's is the last day's).
        deadline = time.monotonic() + 180
        latest: dict = {}
        while time.monotonic() < deadline and not latest:
            execs = ui.query(RUN_EXECUTIONS_QUERY, assetKey=_key(*aggregates), checkName=INPUT_CHECK)
            reported = [
                e for e in execs["assetCheckExecutions"] if e["partition"] == DAYS[0] and e["timestamp"] >= toggled - 1
            ]
            latest = max(reported, key=lambda e: e["timestamp"], default={})
            if not latest:
                time.sleep(2)
        assert latest.get("status") == "FAILED", (latest, _sensors(ui)["landing_zone_sensor"])
        assert LATE_FILE in latest["evaluation"]["description"], latest
        assert latest["evaluation"]["severity"] == "WARN"
        stale = ui.query(STALE_QUERY, keys=[_key(*aggregates)], partitions=DAYS)["assetNodes"][0]
        assert stale["staleStatusByPartition"][0] == "STALE", stale  # Unsynced before any rerun
        page.goto(f"{ui.url}/assets/{'/'.join(aggregates)}?view=checks")
        page.wait_for(text_present(INPUT_CHECK), "the asset's checks")
        page.settle(1)
        page.click_text(INPUT_CHECK, "span, div", last=True)
        page.wait_for(text_present(LATE_FILE), "the warning naming the late file")
        assert not {r["runId"] for r in ui.query(RUNS_QUERY)["runsOrError"]["results"]} - runs_before  # no rerun yet

        _toggle_sensor(page, ui, "rerun_out_of_date_partitions")
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
    deadline = time.monotonic() + RUN_TIMEOUT
    new: list[dict] = []
    while time.monotonic() < deadline and not new:
        new = [r for r in ui.query(RUNS_QUERY)["runsOrError"]["results"] if r["runId"] not in runs_before]
        time.sleep(3)
    assert len(new) == 1, f"the automation sensor launched {len(new)} runs: {new}"
    assert _wait_for_run(ui, new[0]["runId"])["status"] == "SUCCESS"
    for prefix in PREFIXES:
        # The automation's run selects window_state alone: the checks of all four outputs are
        # still evaluated, published_matches_commit too (it was "Not Evaluated", issue 47).
        for check, asset in (
            (INPUT_CHECK, "windowed_aggregates"),
            (CHAIN_CHECK, "window_state"),
            (PUBLISHED_CHECK, "windowed_aggregates"),
        ):
            execs = _run_executions(ui, (prefix, asset), check, new[0]["runId"])
            assert {e["partition"] for e in execs} >= set(DAYS), (prefix, check, execs)
            assert all(e["evaluation"]["success"] for e in execs), (prefix, check, execs)
        rows = _input_rows(ui, prefix, DAYS[0])
        assert rows == late_file[prefix] + LATE_ROWS, (prefix, rows)
