"""A class-data-sharing archive of the classes a Spark driver loads, for the suite's JVMs.

Most of the suite's Spark drivers are short: a ``rewindow`` command, a Dagster run, a
service, each in a process of its own. The product maps an archive of Spark's classes
into every driver it starts (:mod:`windowing.runner.jvm_classes`, which makes it and says
why); the suite keeps its own in the temporary directory and makes it at its start.

:func:`make_in_background` makes the archive once per pyspark install and JVM
(:func:`windowing.runner.jvm_classes.make`, half a minute to a minute, while the first
tests run) and keeps it in the temporary directory (:func:`archive_path`, the newest few
of other installs beside it);
:func:`submit_opts` is what ``SPARK_SUBMIT_OPTS`` gets, so every ``spark-submit`` started
from the test process or its subprocesses uses it once it is there.
``REWINDOW_SPARK_CLASSES=off`` runs the suite without it. The standalone cluster's daemons
and executors (tests/support/services.py) get the same options through
``REWINDOW_TEST_JVM_ARCHIVE`` (:data:`ENV`): their class path is the drivers'. A JVM whose
class path or build does not match the archive (Airflow's environment has its own pyspark)
ignores it; its CDS messages are off, so no output changes.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from windowing.runner import jvm_classes
from windowing.runner.jvm_classes import archive_opts, make, submit_opts

__all__ = ["ENV", "archive_opts", "archive_path", "make", "make_in_background", "submit_opts"]

#: The environment variable with :func:`archive_opts`, for JVMs that ``SPARK_SUBMIT_OPTS``
#: does not reach (tests/support/services.py's ``QUICK_JVM_OPTS``).
ENV = "REWINDOW_TEST_JVM_ARCHIVE"
#: The suite's archives: in the temporary directory, not the user's cache.
DIR = Path(tempfile.gettempdir()) / "rewindow-tests"


def archive_path() -> Path | None:
    """Where the suite's archive for this pyspark and JVM is kept (it may not exist yet);
    None if no java is found, or ``REWINDOW_SPARK_CLASSES=off`` (the suite then runs
    without one). Anything the suite starts that builds a session keeps to this folder too
    (``REWINDOW_SPARK_CLASSES_DIR``)."""
    os.environ[jvm_classes.DIR_ENV] = str(DIR)
    return jvm_classes.archive_path()


def make_in_background(archive: Path) -> threading.Thread:
    """:func:`make` in a thread: the tests start meanwhile, and their Spark drivers use the
    archive from when it is there (about half a minute in)."""
    thread = threading.Thread(target=make, args=(archive,), name="spark-classes", daemon=True)
    thread.start()
    return thread
