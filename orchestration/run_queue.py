"""The demo instance's run coordinator: Dagster's queue, saying once that it is full.

The demo's ``dagster.yaml`` allows one run at a time (``concurrency: runs:
max_concurrent_runs: 1``). While that run goes, Dagster 1.13's queue daemon logs, on
every pass (every 5 s by default), at INFO, on the logger
``dagster.daemon.QueuedRunCoordinatorDaemon``::

    1 runs are currently in progress. Maximum is 1, won't launch more.

(``dagster/_daemon/run_coordinator/queued_run_coordinator_daemon.py``,
``_get_runs_to_dequeue``). What Dagster offers does not reach that one line:
``python_logs`` (``managed_python_loggers``, ``python_log_level``,
``dagster_handler_config``) configures the logging of runs, not the daemon's own
output; ``dagster-daemon run --log-level warning`` (``dagster dev --log-level``) also
hides the daemon's other INFO lines ("Launched 1 runs.", sensor and schedule ticks);
``max_concurrent_runs: -1`` with tag limits instead repeats "Priority sorting ..." while
runs wait.

:class:`QuietQueuedRunCoordinator` is Dagster's ``QueuedRunCoordinator`` (same config,
same queue, same daemon) which, where it is built (every process that loads the
instance, the daemon among them), adds a filter to that logger: the "currently in
progress" line is logged when the queue becomes full, not again while it stays full and
nothing else happened. Everything else the daemon logs, errors and launches included, passes.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from dagster import QueuedRunCoordinator

#: The logger of Dagster's queue daemon (``get_default_daemon_logger(type(daemon).__name__)``).
QUEUE_DAEMON_LOGGER = "dagster.daemon.QueuedRunCoordinatorDaemon"
#: The line it repeats on every pass while the queue is full.
QUEUE_FULL = re.compile(r"^\d+ runs are currently in progress\. Maximum is -?\d+")


class SayOnceQueueFull(logging.Filter):
    """Drops a "runs are currently in progress" record identical to the record before it
    on the same logger and less than ``quiet_seconds`` after the previous such record: the
    first one of a stretch passes, its repeats (one every pass while the queue stays full)
    do not. Any other record (a launch, an error, the queue's sorting) ends the stretch,
    and so does a pass without it (the queue was not full: a gap in the repeats)."""

    def __init__(self, quiet_seconds: float) -> None:
        super().__init__()
        self.quiet_seconds = quiet_seconds
        self._last: str | None = None
        self._last_full = float("-inf")
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        full = QUEUE_FULL.match(message) is not None
        with self._lock:
            repeated = full and message == self._last and record.created - self._last_full < self.quiet_seconds
            self._last = message
            if full:
                self._last_full = record.created
        return not repeated


def quiet_queue_daemon(dequeue_interval_seconds: float) -> None:
    """Adds :class:`SayOnceQueueFull` to the queue daemon's logger (once per process): a
    stretch ends after three passes (``dequeue_interval_seconds`` apart) without the line."""
    logger = logging.getLogger(QUEUE_DAEMON_LOGGER)
    if not any(isinstance(f, SayOnceQueueFull) for f in logger.filters):
        logger.addFilter(SayOnceQueueFull(quiet_seconds=3 * dequeue_interval_seconds))


class QuietQueuedRunCoordinator(QueuedRunCoordinator):
    """Dagster's ``QueuedRunCoordinator``, whose daemon says once, not every 5 s, that the
    queue is full. Configured like it (``concurrency: runs:`` in ``dagster.yaml``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # QueuedRunCoordinator's, passed on
        super().__init__(*args, **kwargs)
        quiet_queue_daemon(self.dequeue_interval_seconds)
