"""A class-data-sharing archive of the classes a Spark driver loads: a cold process starts faster.

Every ``rewindow`` command and every Dagster or Airflow run is a process of its own, with a
Spark driver JVM of its own. Loading and verifying Spark's classes is a large part of a
short driver's time (measured: docs/architecture.md, "A cold process"). The JVM maps the
archived classes instead of loading them (JDK 13+ dynamic archives: ``-XX:ArchiveClassesAtExit`` writes one,
``-XX:SharedArchiveFile`` maps it); what runs is unchanged, and a JVM whose class path or
build does not match the archive ignores it (silently: its CDS messages are off).

:func:`use_archive` runs before a classic session's JVM starts
(:func:`windowing.runner.session.spark_session`): with an archive for this pyspark and
Java, ``SPARK_SUBMIT_OPTS`` gets the options that map it; without one, a process of its
own writes it in the background (:func:`start_making`: a small replay published to a
catalog table, under ``-XX:ArchiveClassesAtExit``, about a minute at low priority), so the
runs after it find it. It is kept in :func:`archive_dir` (``~/.cache/rewindow``), about
230 MB, one per pyspark install and Java (:data:`KEEP_OTHERS` of others beside it).

``REWINDOW_SPARK_CLASSES=off`` runs without one; ``REWINDOW_SPARK_CLASSES_DIR`` keeps it
elsewhere. ``SPARK_SUBMIT_OPTS`` that already names an archive is left as it is.

    python -m windowing.runner.jvm_classes [ARCHIVE]   # write it now (in the foreground)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: ``off`` runs every driver without an archive (and makes none).
SWITCH_ENV = "REWINDOW_SPARK_CLASSES"
#: Where the archive is kept, instead of :func:`archive_dir`'s default.
DIR_ENV = "REWINDOW_SPARK_CLASSES_DIR"
#: Part of the archive's key: raise it when :func:`make`'s replay loads other classes.
DUMP_VERSION = 3
#: Archives of other pyspark installs or JVMs kept besides this one's (~230 MB each).
KEEP_OTHERS = 2
#: Unified-logging tags of CDS off: a JVM that cannot map the archive would say so on stdout.
QUIET = "-Xlog:cds*=off"
#: A maker's lock older than this is taken as left by a killed maker.
STALE_LOCK_S = 900
#: The argument :func:`start_making` passes its maker: the maker removes the lock when done.
HOLDING_LOCK = "--holding-lock"
#: The JVM options that already choose an archive (the caller's, or the tests').
_ARCHIVE_OPTS = ("SharedArchiveFile", "ArchiveClassesAtExit")

#: The pipeline :func:`make` replays: the quick start's hourly pipeline, published to a
#: catalog table (the classes of a session, Parquet, a shuffle, Arrow and Python workers, a
#: commit, and Hive's client, Derby and DataNucleus).
_PIPELINE = """\
version: 1
name: spark-classes
source: {arrivalTime: arrival_time, arrivalOrder: [offset], batch: {interval: 1s}, worker: partition}
emitter:
  tumbling-time-window:
    windowSpan: 1h
    keyExtractor: user_id
    timeConfig:
      eventTimeExtractor: event_time
      watermarkStrategy: MIN_EVENT_TIME
      delayWindowClose: 5s
      idleTimeout: 30m
      idleTimeoutClock: EVENT_TIME
      lateness: WINDOW_CLOSED
    aggregateDefinition:
      - type: count
      - {type: sum, column: amount}
      - {type: distinct, column: event_id, name: unique_events}
  triggers: [atWindowEnd]
output:
  catalog: {database: replay, table: spark_classes}
"""


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(home, "bin")) if home else shutil.which("java")
    return os.path.realpath(java) if java else None


def _key() -> str | None:
    """What the archive is valid for: the java binary and pyspark's jars (names, sizes, times)."""
    import pyspark  # noqa: PLC0415 - only once a session is wanted

    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    h = hashlib.sha256(f"{java} {os.stat(java).st_mtime_ns} {jars}".encode())
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        h.update(f"{jar.name} {st.st_size} {st.st_mtime_ns}\n".encode())
    h.update(f"dump {DUMP_VERSION}".encode())
    return h.hexdigest()[:16]


def archive_dir() -> Path:
    """``$REWINDOW_SPARK_CLASSES_DIR``, else ``$XDG_CACHE_HOME/rewindow``, else ``~/.cache/rewindow``."""
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rewindow"


def archive_path() -> Path | None:
    """Where the archive for this pyspark and Java is kept (it may not exist yet); None if
    no java is found, or ``REWINDOW_SPARK_CLASSES=off``."""
    if os.environ.get(SWITCH_ENV, "").lower() == "off":
        return None
    try:
        key = _key()
    except (ImportError, OSError):
        return None
    return None if key is None else archive_dir() / f"spark-classes-{key}.jsa"


def archive_opts(archive: Path | None) -> str:
    """The JVM options that map ``archive`` ("" for None)."""
    return "" if archive is None else f"-XX:SharedArchiveFile={archive} {QUIET}"


def submit_opts(archive: Path | None) -> str:
    """``SPARK_SUBMIT_OPTS`` with the archive (the environment's own value first)."""
    return f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {archive_opts(archive)}".strip()


def use_archive() -> Path | None:
    """Before a driver JVM starts from this process: map the archive if there is one (into
    ``SPARK_SUBMIT_OPTS``), else start writing it in the background for the runs after
    this one. Returns the archive mapped, or None."""
    if any(opt in os.environ.get("SPARK_SUBMIT_OPTS", "") for opt in _ARCHIVE_OPTS):
        return None  # the caller chose (the tests map theirs)
    archive = archive_path()
    if archive is None:
        return None
    if archive.is_file():
        os.environ["SPARK_SUBMIT_OPTS"] = submit_opts(archive)
        return archive
    start_making(archive)
    return None


def _lock(archive: Path) -> Path:
    return archive.with_name(f".{archive.stem}.making")


def start_making(archive: Path) -> bool:
    """Write ``archive`` in a process of its own, at low priority, unless another is already
    writing it; True if this call started one. Its log: ``<archive>.log``."""
    lock = _lock(archive)
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink(missing_ok=True)  # left by a killed maker
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:  # being made, or a folder we cannot write: run without
        return False
    os.close(fd)
    try:
        with open(archive.with_suffix(".log"), "wb") as log:
            subprocess.Popen(
                [sys.executable, "-m", "windowing.runner.jvm_classes", str(archive), HOLDING_LOCK],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives this process: a short command does not wait for it
            )
    except OSError:
        lock.unlink(missing_ok=True)
        return False
    print(
        f"rewindow: writing an archive of Spark's classes to {archive.parent} in the background "
        f"(about 230 MB, once per Spark and Java install): later runs start faster. "
        f"{SWITCH_ENV}=off runs without it.",
        file=sys.stderr,
    )
    return True


def make(archive: Path, timeout: float = 600) -> bool:
    """Write ``archive`` now: a one-day replay of a small generated history published to a
    catalog table, in a driver that writes the archive at exit (renamed into place when
    whole, so a JVM started meanwhile finds no file and runs as without one)."""
    partial = archive.with_name(f".{archive.stem}-{os.getpid()}.jsa")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
    env["SPARK_SUBMIT_OPTS"] = f"-XX:ArchiveClassesAtExit={partial} {QUIET}"
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    cli = [sys.executable, "-m", "windowing.cli"]
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="rewindow-spark-classes-") as tmp:
            config = Path(tmp) / "pipeline.yaml"
            config.write_text(_PIPELINE)
            generate = [*cli, "generate", "--output", f"{tmp}/in", "--days", "1", "--events-per-day", "300"]
            if subprocess.run([*generate, "--keys", "20"], env=env, capture_output=True, timeout=timeout).returncode:
                return False
            replay = [*cli, "replay", "--config", str(config), "--input", f"{tmp}/in/date=2024-01-01"]
            replay += ["--output", f"{tmp}/out", "--partition", "2024-01-01", "--metastore-dir", f"{tmp}/metastore"]
            replay += ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2"]
            replay += ["--conf", "spark.ui.enabled=false"]
            replay += ["--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"]
            # capture_output: the run returns when the driver's JVM, which shares the pipes, is gone
            proc = subprocess.run(replay, env=env, capture_output=True, timeout=timeout, cwd=tmp)
        if proc.returncode != 0 or not partial.is_file():
            sys.stderr.write(proc.stderr.decode(errors="replace")[-4000:])
            return False
        os.replace(partial, archive)
        others = sorted(
            (p for p in archive.parent.glob("spark-classes-*.jsa") if p != archive),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for stale in others[KEEP_OTHERS:]:  # other clones' or pyspark installs'
            stale.unlink(missing_ok=True)  # a JVM that maps it keeps its pages
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        partial.unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    os.nice(10)  # beside the runs that wanted it: they go first
    holding = HOLDING_LOCK in argv
    paths = [a for a in argv if a != HOLDING_LOCK]
    archive = Path(paths[0]) if paths else archive_path()
    if archive is None:
        print(f"no archive: no java found, or {SWITCH_ENV}=off", file=sys.stderr)
        return 1
    try:
        ok = make(archive)
    finally:
        if holding:  # the lock start_making took for this process (a maker by hand takes none)
            _lock(archive).unlink(missing_ok=True)
    print(f"{archive}: {'written' if ok else 'not written'}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
