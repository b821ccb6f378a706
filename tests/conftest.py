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
            # A serial GC (two cores, a small heap). Full tiered JIT, unlike the suite's short
            # driver processes (C1 only: QUICK_JVM_OPTS): this JVM plans queries for the whole
            # run, and C2's code repays its compiling (three Spark-heavy modules alone, -n 0:
            # 238 s with C1 only, 214 s tiered, 2026-11-27).
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
        },
        app_name="rewindow-tests",
    )
    yield session
    session.stop()


#: The fast tier (``-m "not spark"``) draws this share of each model comparison's generated
#: cases (the full run draws them all), unless REWINDOW_CASES_SCALE says otherwise.
FAST_TIER_CASES = "0.25"


_MAKING_ARCHIVE = pytest.StashKey["threading.Thread"]()


def pytest_configure(config):
    config.addinivalue_line("markers", "spark: uses a Spark session (set automatically from the fixtures)")
    config.addinivalue_line("markers", "slow: minutes on its own (the soak); run in CI all the same")
    if " ".join(str(config.getoption("markexpr", "") or "").split()) == "not spark":
        os.environ.setdefault("REWINDOW_CASES_SCALE", FAST_TIER_CASES)
    elif not hasattr(config, "workerinput"):
        # Spark drivers map their classes from one archive (tests/support/spark_classes.py), made once
        # per pyspark and JVM while the first tests run; pytest-xdist's processes, started
        # after this, inherit SPARK_SUBMIT_OPTS.
        from tests.support.spark_classes import ENV, archive_opts, archive_path, make_in_background, submit_opts

        archive = archive_path()
        if archive is not None and not archive.is_file():
            config.stash[_MAKING_ARCHIVE] = make_in_background(archive)
        os.environ["SPARK_SUBMIT_OPTS"] = submit_opts(archive)
        os.environ[ENV] = archive_opts(archive)


def pytest_unconfigure(config):
    making = config.stash.get(_MAKING_ARCHIVE, None)
    if making is not None:
        making.join(timeout=600)


def pytest_report_header(config):
    scale = os.environ.get("REWINDOW_CASES_SCALE")
    lines = [f"rewindow: generated cases x{scale} (REWINDOW_CASES_SCALE)"] if scale else []
    if "SharedArchiveFile" in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        making = " (being made)" if config.stash.get(_MAKING_ARCHIVE, None) else ""
        lines.append(f"rewindow: SPARK_SUBMIT_OPTS={os.environ['SPARK_SUBMIT_OPTS']}{making}")
    return lines


#: Fixtures that start Spark: the session, or Spark in processes of their own
#: (tests/windowing/test_catalog.py's published history and Thrift server,
#: tests/windowing/test_catalog_versions.py's publishing process and its Thrift server).
SPARK_FIXTURES = {"spark", "published", "published_versions"}


def pytest_collection_modifyitems(config, items):
    """Mark every test that needs Spark, so the fast tier is ``-m "not spark"`` (the
    reference model, the kernel against it, configuration: about a minute)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SPARK_FIXTURES or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.spark)


#: Folders whose modules go to one pytest-xdist process together: their session fixtures are
#: made once. tests/lake: the services (a standalone cluster, a Spark Connect server);
#: tests/quality: the replayed outputs, and the background ``rewindow replay`` processes of the
#: fault tests (``cli_runs``, started by the first quality test a process runs: split over
#: two processes, each started its own four Spark applications).
GROUPED = ("tests/lake", "tests/quality")


def xdist_unit(nodeid: str) -> str:
    """The unit of work of one pytest-xdist process: a test module, run whole, so its
    fixtures (a demo run, a webserver, an Airflow database) are made once; the modules of a
    :data:`GROUPED` folder as one."""
    module = nodeid.split("::", 1)[0]
    return next((group for group in GROUPED if module.startswith(group + "/")), module)


#: The units that take more than half a minute, longest first (CPU seconds of each alone,
#: ``-n 0``, 2026-11-27: quality 470, lake 470, catalog 320, webserver 320, replay assets 260,
#: engine vs model 190, backfill CLI 145, Airflow 135, determinism 130, chain 115,
#: reconcile 110, catalog versions 105 (2026-12-02), concurrent runs 90, CLI 65, then 25 to
#: 50). They start first, longest first, so the processes end together instead of one running
#: a long unit after the other is done (the rest follows in collection order: seconds each).
LONG_UNITS = (
    "tests/windowing/test_soak.py",
    "tests/quality",
    "tests/lake",
    "tests/windowing/test_catalog.py",
    "tests/orchestration/test_webserver_ui.py",
    "tests/assets/test_replay_assets.py",
    "tests/windowing/runner/test_engine_vs_model.py",
    "tests/orchestration/test_backfill_cli.py",
    "tests/orchestration/test_airflow.py",
    "tests/windowing/runner/test_determinism.py",
    "tests/windowing/test_chain.py",
    "tests/windowing/reconcile/test_reconcile.py",
    "tests/windowing/test_catalog_versions.py",
    "tests/orchestration/test_concurrent_runs.py",
    "tests/test_cli.py",
    "tests/assets/test_matches_live.py",
    "tests/orchestration/test_partition_end.py",
    "tests/windowing/kernel/test_kernel_vs_model.py",
    "tests/windowing/test_golden.py",
    "tests/windowing/lateness/test_lateness.py",
    "tests/orchestration/test_demo.py",
    "tests/assets/test_lateness_asset.py",
    "tests/windowing/kernel/test_decimal.py",
    "tests/windowing/runner/test_metrics.py",
    "tests/windowing/storage/test_io.py",
    "tests/windowing/runner/test_engine_settings.py",
    "tests/windowing/validation/test_validation.py",
    "tests/test_partition_jobs.py",
    "tests/test_cli_errors.py",
    "tests/windowing/config/test_voltsp_yaml.py",
    "tests/windowing/test_heartbeat.py",
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
