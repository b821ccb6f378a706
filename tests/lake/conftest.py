"""Real Spark services for the lake tests: a standalone cluster and a Connect server.

Session-scoped and lazy: a service starts when the first test asks for it and stops at
the end of the run (its processes are checked gone). Tests using them carry the
``cluster`` marker (``pytestmark = pytest.mark.cluster``), so ``-m "not cluster"`` skips
them.

Only one *classic* SparkSession can live in a Python process, and the suite's ``spark``
fixture (tests/conftest.py) may already hold it: drive the standalone cluster from a
subprocess (``spark_standalone.run_driver(code)``). A Connect session can share the
process (``spark_remote``), with the caveats of :func:`services.connect_session`;
``spark_connect.run_client(code)`` runs a snippet in a clean Connect-mode process.
"""

from __future__ import annotations

import pytest

from tests.support.services import Lake, SparkConnectServer, SparkStandalone, pid_alive

#: The viewfs mount table name of the session lake: ``viewfs://lake/data/...``.
LAKE_MOUNT = "lake"

#: Start-up seconds of the services this run started, and what the runs on them took
#: (shown in the terminal summary).
_STARTUP: dict[str, float] = {}
TIMINGS: dict[str, float] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cluster: starts real Spark services (standalone master/workers, Connect server)"
    )


def pytest_terminal_summary(terminalreporter):
    if _STARTUP or TIMINGS:
        terminalreporter.write_sep("-", "lake services: start-up and runs")
        for name, seconds in {**_STARTUP, **TIMINGS}.items():
            terminalreporter.write_line(f"{name}: {seconds:.1f}s")


def _assert_stopped(pids: list[int], what: str) -> None:
    alive = [pid for pid in pids if pid_alive(pid)]
    assert not alive, f"{what}: processes still alive after stop(): {alive}"


def _serve(service, name: str, ready: str):
    """Start ``service``, yield it, then stop it and check its processes are gone."""
    service.start()
    _STARTUP[f"{name} ({ready})"] = service.startup_seconds
    try:
        yield service
    finally:
        pids = service.pids
        service.stop()
        _assert_stopped(pids, name)


@pytest.fixture(scope="session")
def lake_dir(tmp_path_factory) -> Lake:
    """A session tmp dir seen as ``viewfs://lake/data``: ``.path``, ``.uri``,
    ``.url(*parts)``, ``.local(*parts)``, ``.conf`` (``spark.hadoop.*``) and
    ``.hadoop_conf`` (bare keys). Tests should write under their own sub-path."""
    return Lake(path=tmp_path_factory.mktemp("lake"), mount=LAKE_MOUNT)


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory):
    """A started :class:`SparkStandalone`: master + 2 workers (1 core, 2g each)."""
    cluster = SparkStandalone(tmp_path_factory.mktemp("standalone"), workers=2, cores=1, memory="2g")
    yield from _serve(cluster, "spark_standalone", "master + 2 workers ALIVE")


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory, lake_dir):
    """A started :class:`SparkConnectServer` (``local[2]``, UTC, 2 shuffle partitions)
    with ``viewfs://lake/data`` mounted onto ``lake_dir``."""
    server = SparkConnectServer(
        tmp_path_factory.mktemp("connect"),
        conf={
            **lake_dir.conf,
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    yield from _serve(server, "spark_connect", "port open + client verified")


@pytest.fixture(scope="session")
def spark_remote(spark_connect):
    """A Connect session on ``spark_connect`` in this process, built without switching
    the process into Connect mode (a classic ``spark`` session keeps working). Use
    ``pyspark.sql.connect.functions`` (not ``pyspark.sql.functions``) with it."""
    session = spark_connect.session()
    yield session
    # spark_connect.stop() closes it too; closing here first keeps the order explicit.
    from tests.support.services import close_connect_session

    close_connect_session(session)
