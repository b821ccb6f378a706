"""A class-data-sharing archive of the classes a Spark driver loads, for the suite's JVMs.

Most of the suite's Spark drivers are short: a ``rewindow`` command, a Dagster run, a
service, each in a process of its own. Loading and verifying Spark's classes is a large
part of each one's CPU time on this project's two-core machines: a one-day replay took
15.0 to 16.1 CPU-s without an archive and 9.7 to 11.4 with one (three runs each, load 2.3,
2026-11-27); a Hive session writing a table loaded 3,662 classes from pyspark's jars with
an archive of a replay without Hive, 521 with this one. The JVM maps the archived classes
instead (JDK 13+ dynamic archives, ``-XX:ArchiveClassesAtExit`` /
``-XX:SharedArchiveFile``); what runs is unchanged.

:func:`make_in_background` makes the archive once per pyspark install and JVM (a one-day
replay published to a catalog table, in a process of its own, under
``-XX:ArchiveClassesAtExit``: half a minute to a minute, while the first tests run) and
keeps it in the temporary directory (:func:`archive_path`, the newest few of other
installs beside it);
:func:`submit_opts` is what ``SPARK_SUBMIT_OPTS`` gets, so every ``spark-submit`` started
from the test process or its subprocesses uses it once it is there.
``REWINDOW_SPARK_CLASSES=off`` runs the suite without it. The standalone cluster's daemons
and executors (tests/support/services.py) get the same options through
``REWINDOW_TEST_JVM_ARCHIVE`` (:data:`ENV`): their class path is the drivers'. A JVM whose
class path or build does not match the archive (Airflow's environment has its own pyspark)
ignores it; its CDS messages are off, so no output changes.

    python -m tests.support.spark_classes ARCHIVE    # the run that writes the archive
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
#: The environment variable with :func:`archive_opts`, for JVMs that ``SPARK_SUBMIT_OPTS``
#: does not reach (tests/support/services.py's ``QUICK_JVM_OPTS``).
ENV = "REWINDOW_TEST_JVM_ARCHIVE"
#: Part of the archive's key: raise it when :func:`_dump` loads other classes.
DUMP_VERSION = 2
#: Archives of other pyspark installs or JVMs (other clones) kept besides this one's.
KEEP_OTHERS = 2
#: Unified-logging tags of CDS off: a JVM that cannot map the archive would say so on stdout.
QUIET = "-Xlog:cds*=off"


def _key() -> str | None:
    """What the archive is valid for: the java binary and pyspark's jars (names, sizes, times)."""
    import pyspark

    java = (
        shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin"))
        if os.environ.get("JAVA_HOME")
        else shutil.which("java")
    )
    if java is None:
        return None
    java = os.path.realpath(java)
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    h = hashlib.sha256(f"{java} {os.stat(java).st_mtime_ns} {jars}".encode())
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    h.update(f"dump {DUMP_VERSION}".encode())
    return h.hexdigest()[:16]


def archive_path() -> Path | None:
    """Where the archive for this pyspark and JVM is kept (it may not exist yet); None if no
    java is found, or ``REWINDOW_SPARK_CLASSES=off`` (the suite then runs without one)."""
    if os.environ.get("REWINDOW_SPARK_CLASSES", "").lower() == "off":
        return None
    try:
        key = _key()
    except (ImportError, OSError):
        return None
    return None if key is None else Path(tempfile.gettempdir()) / "rewindow-tests" / f"spark-classes-{key}.jsa"


def make(archive: Path, timeout: float = 600) -> bool:
    """Write ``archive`` (a dump run in a process of its own; renamed into place when whole,
    so a JVM started meanwhile finds no file and runs as without one)."""
    partial = archive.with_name(f".{archive.stem}-{os.getpid()}.jsa")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        # capture_output: the run returns when the driver's JVM, which shares the pipes, is gone
        proc = subprocess.run(
            [sys.executable, "-m", "tests.support.spark_classes", str(partial)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not partial.is_file():
            return False
        os.replace(partial, archive)
        others = sorted(
            (p for p in archive.parent.glob("spark-classes-*.jsa") if p != archive),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for stale in others[KEEP_OTHERS:]:  # other clones' or pyspark installs' (~230 MB each)
            stale.unlink(missing_ok=True)  # a JVM that maps it keeps its pages
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        partial.unlink(missing_ok=True)


def make_in_background(archive: Path) -> threading.Thread:
    """:func:`make` in a thread: the tests start meanwhile, and their Spark drivers use the
    archive from when it is there (about half a minute in)."""
    thread = threading.Thread(target=make, args=(archive,), name="spark-classes", daemon=True)
    thread.start()
    return thread


def archive_opts(archive: Path | None) -> str:
    """The JVM options that map ``archive`` ("" for None)."""
    return "" if archive is None else f"-XX:SharedArchiveFile={archive} {QUIET}"


def submit_opts(archive: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` with the archive (the environment's own value first)."""
    return f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {archive_opts(archive)}".strip()


def _dump(archive: str) -> int:
    """A one-day replay of a small generated history, published to a catalog table in an
    embedded metastore, in a driver that writes ``archive`` at exit: the classes of a
    session, Parquet, a shuffle, Arrow and Python workers, a commit, and Hive's client,
    Derby and DataNucleus (the catalog tests' and the Dagster demo's drivers load them)."""
    from datetime import datetime, timezone

    from windowing.cli import main
    from windowing.sample import generate_history

    os.environ["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={archive} {QUIET}"
    with tempfile.TemporaryDirectory() as tmp:
        [day] = generate_history(
            Path(tmp) / "in", datetime(2024, 1, 1, tzinfo=timezone.utc), days=1, events_per_day=300, keys=20
        )
        config = Path(tmp) / "clicks-hourly.yaml"
        config.write_text(
            (ROOT / "examples" / "pipelines" / "clicks-hourly.yaml").read_text()
            + "\noutput:\n  catalog: {database: replay, table: clicks_hourly}\n"
        )
        return main(
            [
                "replay",
                "--config",
                str(config),
                "--input",
                str(day),
                "--output",
                str(Path(tmp) / "out"),
                "--partition",
                "2024-01-01",
                "--metastore-dir",
                str(Path(tmp) / "metastore"),
                "--master",
                "local[2]",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            ]
        )


if __name__ == "__main__":
    sys.exit(_dump(sys.argv[1]))
