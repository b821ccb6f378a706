"""One Spark session for the whole test run (start-up costs seconds)."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# Generated cases: the same cases on every run by default, so a test run (and CI) is
# repeatable. REWINDOW_HYPOTHESIS=explore draws new cases each run (bug hunting), and
# REWINDOW_CASES_SCALE=N multiplies the number of cases of the model comparisons.
settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("REWINDOW_HYPOTHESIS", "repeatable"))


@pytest.fixture(scope="session")
def spark():
    from windowing.runner.session import spark_session

    session = spark_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.driver.memory": "2g",
            "spark.python.worker.reuse": "true",
            # Small test jobs: the quick JIT tier and a serial GC cost less CPU than full C2.
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
        app_name="rewindow-tests",
    )
    yield session
    session.stop()


#: The fast tier (``-m "not spark"``) draws this share of each model comparison's generated
#: cases (the full run draws them all), unless REWINDOW_CASES_SCALE says otherwise.
FAST_TIER_CASES = "0.25"


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: uses a Spark session (set automatically from the fixtures)")
    if " ".join(str(config.getoption("markexpr", "") or "").split()) == "not spark":
        os.environ.setdefault("REWINDOW_CASES_SCALE", FAST_TIER_CASES)


def pytest_report_header(config):
    scale = os.environ.get("REWINDOW_CASES_SCALE")
    return [f"rewindow: generated cases x{scale} (REWINDOW_CASES_SCALE)"] if scale else []


#: Fixtures that start Spark: the session, or Spark in processes of their own
#: (tests/windowing/test_catalog.py's published history and Thrift server).
SPARK_FIXTURES = {"spark", "published"}


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs Spark, so the fast tier is ``-m "not spark"`` (the
    reference model, the kernel against it, configuration: about a minute)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SPARK_FIXTURES or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.spark)


def xdist_unit(nodeid: str) -> str:
    """The unit of work of one pytest-xdist process: a test module, run whole, so its
    fixtures (a demo run, a webserver, an Airflow database) are made once; the lake tests
    as one, as their services (a standalone cluster, a Spark Connect server) are session
    fixtures."""
    module = nodeid.split("::", 1)[0]
    return "tests/lake" if module.startswith("tests/lake/") else module


#: The units that take minutes (CI's --durations), longest first. They start first, so the
#: processes end together instead of one running a long module after the other is done.
LONG_UNITS = (
    "tests/lake",
    "tests/windowing/test_catalog.py",
    "tests/assets/test_replay_assets.py",
    "tests/orchestration/test_airflow.py",
    "tests/orchestration/test_webserver_ui.py",
    "tests/orchestration/test_concurrent_runs.py",
    "tests/windowing/test_chain.py",
    "tests/quality/test_checks.py",
    "tests/windowing/runner/test_engine_vs_model.py",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``-n``, pyproject's ``addopts``) send :func:`xdist_unit` units
    whole to a worker, :data:`LONG_UNITS` first. (``--dist loadgroup`` would do the first
    from markers, but pytest 9.2 no longer lets pytest-xdist 3.8 rename the tests it groups.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete when the first unit is handed out
                self.ordered = True
                rank = {unit: i for i, unit in enumerate(LONG_UNITS)}
                units = sorted(self.workqueue.items(), key=lambda item: rank.get(item[0], len(rank)))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return ByModule(config, log)
