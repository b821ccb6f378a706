"""The demo instance's run queue says once, not every pass, that a run is in progress.

On an instance made from the demo's own ``dagster.yaml``, with a run in progress: the
queue daemon Dagster builds from it, passing over the queue as ``dagster-daemon`` does
every 5 s. The whole path with the real ``dagster-daemon`` process (the runs launched, the
line said once a run) is in tests/orchestration/test_webserver_ui.py.
"""

from __future__ import annotations

import logging
import time

import dagster as dg
import pytest
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus
from dagster._daemon.controller import create_daemons_from_instance
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from orchestration.demo import DAGSTER_YAML, EARLIER_DAGSTER_YAMLS, write_instance_settings
from orchestration.run_queue import QUEUE_DAEMON_LOGGER, QuietQueuedRunCoordinator, SayOnceQueueFull

QUEUE_FULL = "1 runs are currently in progress. Maximum is 1, won't launch more."


@pytest.fixture
def demo_instance(tmp_path, monkeypatch):
    # A fresh filter (the logger is the process's): the instance's coordinator adds it.
    monkeypatch.setattr(logging.getLogger(QUEUE_DAEMON_LOGGER), "filters", [])
    (tmp_path / "dagster.yaml").write_text(DAGSTER_YAML)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        yield instance


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == QUEUE_DAEMON_LOGGER]


def test_the_demo_queue_runs_one_at_a_time_and_says_so_once(demo_instance, caplog):
    instance = demo_instance
    assert isinstance(instance.run_coordinator, QuietQueuedRunCoordinator)
    config = instance.get_concurrency_config()
    assert config.run_queue_config is not None and config.run_queue_config.max_concurrent_runs == 1
    assert any(isinstance(f, SayOnceQueueFull) for f in logging.getLogger(QUEUE_DAEMON_LOGGER).filters)
    [daemon] = [d for d in create_daemons_from_instance(instance) if isinstance(d, QueuedRunCoordinatorDaemon)]

    instance.add_run(DagsterRun(job_name="replay", run_id="running", status=DagsterRunStatus.STARTED))
    caplog.set_level(logging.INFO, logger=QUEUE_DAEMON_LOGGER)
    for _ in range(4):  # four passes (20 s of dagster-daemon) while the run goes
        assert daemon._get_runs_to_dequeue(instance, config, None) == []  # the queue is full
    assert _said(caplog) == [QUEUE_FULL]

    # The run ends, nothing waits: nothing to say. Passes go by (three make a stretch's end;
    # 15 s with the default 5 s between passes, shortened here). The next run in progress
    # is said again, once.
    instance.report_run_failed(instance.get_run_by_id("running"))
    daemon._get_runs_to_dequeue(instance, config, None)
    assert _said(caplog) == [QUEUE_FULL]
    [said_once] = [f for f in logging.getLogger(QUEUE_DAEMON_LOGGER).filters if isinstance(f, SayOnceQueueFull)]
    assert said_once.quiet_seconds == 15
    said_once.quiet_seconds = 0.2
    time.sleep(0.3)
    instance.add_run(DagsterRun(job_name="replay", run_id="next", status=DagsterRunStatus.STARTED))
    for _ in range(3):
        daemon._get_runs_to_dequeue(instance, config, None)
    assert _said(caplog) == [QUEUE_FULL, QUEUE_FULL]


def test_other_lines_of_the_queue_daemon_pass(demo_instance, caplog):
    """Errors and launches pass, repeated or not; only the repeated full-queue line goes."""
    assert isinstance(demo_instance.run_coordinator, QuietQueuedRunCoordinator)
    logger = logging.getLogger(QUEUE_DAEMON_LOGGER)
    caplog.set_level(logging.INFO, logger=QUEUE_DAEMON_LOGGER)
    for message in ("Launched 1 runs.", "Launched 1 runs.", QUEUE_FULL, QUEUE_FULL, "Launched 1 runs.", QUEUE_FULL):
        logger.info(message)
    logger.error("Caught an error for run waiting while removing it from the queue.")
    logger.error("Caught an error for run waiting while removing it from the queue.")
    assert _said(caplog) == [
        "Launched 1 runs.",
        "Launched 1 runs.",
        QUEUE_FULL,
        "Launched 1 runs.",
        QUEUE_FULL,
        *["Caught an error for run waiting while removing it from the queue."] * 2,
    ]


def test_the_demo_writes_its_settings_and_replaces_only_its_own_earlier_ones(tmp_path):
    """A new instance gets the demo's settings; one the demo made before gets the quiet
    queue; settings a user wrote are kept."""
    fresh, earlier, own = tmp_path / "fresh", tmp_path / "earlier", tmp_path / "own"
    for home in (fresh, earlier, own):
        home.mkdir()
    [before] = EARLIER_DAGSTER_YAMLS
    (earlier / "dagster.yaml").write_text(before)
    mine = before.replace("max_concurrent_runs: 1", "max_concurrent_runs: 2")
    (own / "dagster.yaml").write_text(mine)
    for home in (fresh, earlier, own):
        write_instance_settings(home)
    assert (fresh / "dagster.yaml").read_text() == DAGSTER_YAML
    assert (earlier / "dagster.yaml").read_text() == DAGSTER_YAML
    assert (own / "dagster.yaml").read_text() == mine
