"""The Spark session rewindow runs on: `local[*]` by default, any master by configuration.

Also the runtime settings a job sets around itself (:func:`session_conf`), and the checks
that make a misconfigured Spark fail at once, in one line, before any work: a master or
Connect server nobody listens on (:func:`check_reachable`), and Python workers that cannot
run rewindow (:func:`check_workers`).
"""

from __future__ import annotations

import builtins
import os
import re
import socket
import sys
import types
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from windowing.jvm_lookups import remember_jvm_lookups
from windowing.runner import jvm_classes
from windowing.storage.lake import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings every rewindow session needs, whatever the master.
REQUIRED_CONF = {
    # One time zone for every timestamp conversion: window bounds are UTC.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

#: Defaults for every session rewindow builds, whatever the master (``conf`` overrides).
DEFAULT_CONF = {
    # Spark's console progress bars (a line per stage update, on stderr) drown the
    # command line's own progress lines; a classic session started from Python shows them
    # unless told otherwise.
    "spark.ui.showConsoleProgress": "false",
    # PySpark records the Python call site of every DataFrame and Column call in the JVM
    # (five py4j round trips each) for the query context of Spark's own error messages.
    # Planning a partition's replay and checks makes thousands of such calls (measured:
    # docs/architecture.md, "PySpark's call-site capture"). rewindow's errors name the
    # field, file or row themselves; `--conf` it back on to debug Spark's.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark keeps the file listings of every read in one cache per JVM, each read under a
    # key of its own that no later read asks for again, until the cache weighs 250 MB (its
    # default): a session that replays partition after partition (a year's backfill, a
    # service) fills it with listings nothing reads (about 1 MB per 100 hourly partitions,
    # bench/soak.py --chain). 16 MB still serves a catalog table's repeated queries.
    "spark.sql.hive.filesourcePartitionFileCacheSize": str(16 * 2**20),
}

#: Defaults for the embedded `local[*]` session (a cluster brings its own).
LOCAL_DEFAULT_CONF = {
    "spark.driver.memory": "4g",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}

#: Seconds to wait for a master's or Connect server's port to accept a connection.
#: Spark itself retries an unreachable standalone master for about a minute.
CONNECT_TIMEOUT_S = 5.0

#: Default ports of the URL schemes :func:`check_reachable` probes.
_DEFAULT_PORTS = {"spark": 7077, "sc": 15002}

#: What the executors' Python must import to run the kernel (numpy, pyarrow, pyyaml and
#: rewindow itself: importing the kernel imports the rest).
WORKER_MODULES = ("numpy", "pyarrow", "windowing.kernel")


class SparkUnreachableError(ConnectionError):
    """The Spark master or Spark Connect server does not accept connections."""


class WorkerEnvironmentError(RuntimeError):
    """Spark's Python workers run an interpreter that cannot run rewindow's kernel."""


def session_settings(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings :func:`spark_session` builds a classic session on ``master`` with:
    :data:`DEFAULT_CONF`, then :data:`LOCAL_DEFAULT_CONF` for a ``local`` master, then
    ``conf``, then :data:`REQUIRED_CONF` (always wins)."""
    settings = dict(DEFAULT_CONF)
    if master.startswith("local"):
        settings.update(LOCAL_DEFAULT_CONF)
    settings.update({k: str(v) for k, v in (conf or {}).items()})
    settings.update(REQUIRED_CONF)
    return settings


def check_reachable(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast if ``url`` (``spark://host:port[,host2:port2]`` or ``sc://host:port/...``)
    names no listening server; other masters (``local``, ``yarn``, ``k8s://``) pass.

    A standalone master given with several hosts (high availability) passes if any of
    them accepts a TCP connection within ``timeout_s``.

    Raises:
        SparkUnreachableError: naming the URL and why each host failed.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in _DEFAULT_PORTS:
        return
    hostports = rest.split("/", 1)[0].split(";", 1)[0]
    failures = []
    for hostport in hostports.split(","):
        try:
            parts = urlsplit(f"//{hostport}")
            host, port = parts.hostname, parts.port or _DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise SparkUnreachableError(f"Spark {_what(scheme)} {url}: cannot read {hostport!r}: {exc}") from None
        if not host:
            raise SparkUnreachableError(f"Spark {_what(scheme)} {url}: no host in {hostport!r}")
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except socket.gaierror as exc:
            failures.append(f"{host}: unknown host ({exc.strerror or exc})")
        except TimeoutError:
            failures.append(f"{host}:{port}: no answer within {timeout_s:g}s")
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or exc}")
    flag = "--remote" if scheme == "sc" else "--master"
    raise SparkUnreachableError(
        f"Spark {_what(scheme)} {url} is unreachable ({'; '.join(failures)}): is it running? check {flag}"
    )


def _what(scheme: str) -> str:
    return "Connect server" if scheme == "sc" else "master"


def spark_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "rewindow",
    remote: str | None = None,
) -> SparkSession:
    """Build (or reuse) the SparkSession.

    ``remote`` (``sc://host:port``) connects to a Spark Connect server instead (Databricks
    serverless and shared clusters speak only Spark Connect); ``conf`` entries are then
    set as runtime settings of the session, where the server allows.

    ``master`` defaults to ``local[*]``; its settings are :func:`session_settings`.
    Workers run ``conf["spark.pyspark.python"]`` if given, else ``PYSPARK_PYTHON``, else
    the current interpreter, so they see the same installed packages. (PySpark itself
    ignores ``spark.pyspark.python`` in a session started from Python; only
    ``spark-submit`` applies it.)

    Raises:
        SparkUnreachableError: a ``spark://`` master or the Connect server does not
            accept connections (checked before anything starts).
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415 - keeps `rewindow --help` fast: the CLI imports this module

    if remote:
        check_reachable(remote)
        spark = SparkSession.builder.remote(remote).getOrCreate()
        for k, v in {**{k: str(v) for k, v in (conf or {}).items()}, **REQUIRED_CONF}.items():
            try:
                spark.conf.set(k, v)
            except Exception:  # static settings belong to the server's own start-up
                if k in REQUIRED_CONF and spark.conf.get(k, None) != v:
                    raise
        return spark
    active = SparkSession.getActiveSession()
    if active is not None:
        # Reuse the running session as it is (a test run, a notebook, Dagster's resource):
        # a builder would overwrite its settings with ours. Only correctness is asserted.
        for k, v in REQUIRED_CONF.items():
            active.conf.set(k, v)
        if not is_connect(active):
            remember_jvm_lookups()
        return active
    master = master or "local[*]"
    check_reachable(master)  # Spark would retry for a minute, then end in a Py4J traceback
    settings = session_settings(master, conf)
    if settings.get("spark.pyspark.python"):
        # PySpark takes the workers' interpreter from the environment, not the setting.
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    jvm_classes.use_archive()  # the driver JVM maps Spark's classes from an archive, once there is one
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    remember_jvm_lookups()
    return spark


# --------------------------------------------------------------------------- job settings

#: Settings for the small aggregations the driver collects (a few rows: rejected rows per
#: reason and worker, the carried state's worker rows and fingerprints): one Spark job with
#: its stages, not one job per stage as adaptive execution runs them, and one reduce task.
SMALL_JOB_CONF = {"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "1"}


@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """Set runtime SQL settings for the jobs started inside the block, then put back the
    previous values (Spark reads them when a job or a cache is planned)."""
    before = {k: spark.conf.get(k, None) for k in conf}
    try:
        for k, v in conf.items():
            spark.conf.set(k, v)
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


# --------------------------------------------------------------------------- workers

#: What :func:`check_workers` found the workers run fine (:func:`_workers_key`): checked
#: once per Spark application and interpreter, whatever session object asks.
_WORKERS_OK: set[tuple[str, ...]] = set()
#: Sessions whose workers passed :func:`check_workers`, when no key can be had (weak: a
#: stopped session goes).
_SESSIONS_OK: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def _workers_key(spark: SparkSession) -> tuple[str, ...] | None:
    """What the probe's answer depends on: the Spark application (its executors and their
    Python workers) and the interpreter it hands them; over Spark Connect the server's
    session. None when that cannot be told."""
    try:
        if is_connect(spark):
            return ("connect", str(getattr(spark, "session_id")))  # noqa: B009 - a Connect session's own attribute
        sc = spark.sparkContext
        # spark.conf reads one setting; sc.getConf() would copy all of them (once a partition).
        return ("classic", str(sc.applicationId), str(sc.pythonExec), str(spark.conf.get("spark.pyspark.python", "")))
    except Exception:  # noqa: BLE001 - a session that cannot say: probe it, keyed on the object
        return None


def _worker_report(_: object, modules: Sequence[str] = WORKER_MODULES) -> str:
    """Runs on a Python worker: its interpreter, then one line per import that fails.
    Uses only the standard library, so it runs anywhere."""
    import importlib  # noqa: PLC0415 - runs on a worker, pickled with builtins alone as its globals
    import sys  # noqa: PLC0415 - runs on a worker, pickled with builtins alone as its globals

    failed: list[str] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure to import is what we report
            failed.append(f"{name} ({type(exc).__name__}: {exc})")
    return "\n".join([sys.executable, *failed])


def check_workers(spark: SparkSession) -> None:
    """Fail before any work if Spark's Python workers cannot run rewindow's kernel.

    Runs one one-row job (a plain pickled UDF, so it needs neither Arrow nor rewindow on
    the workers) that imports :data:`WORKER_MODULES` there; once per session, as the
    workers' interpreter is fixed when the session starts. A worker whose Python has a
    different minor version than the driver's, or an interpreter that does not exist, is
    reported the same way.

    Raises:
        WorkerEnvironmentError: naming the workers' interpreter, what it lacks, and what
            to set (``PYSPARK_PYTHON``).
    """
    if not is_connect(spark):
        remember_jvm_lookups()  # a session rewindow did not build (a notebook's, Dagster's) plans as fast
    key = _workers_key(spark)
    if (key in _WORKERS_OK) if key is not None else (spark in _SESSIONS_OK):
        return
    from pyspark.sql import functions as F  # noqa: PLC0415 - keeps `rewindow --help` fast: the CLI imports this module

    exec_ = _configured_worker_python(spark)
    # Pickled by value (module "__main__"): the worker needs no rewindow to unpickle it.
    probe = types.FunctionType(
        _worker_report.__code__, {"__builtins__": builtins}, "rewindow_worker_probe", _worker_report.__defaults__
    )
    probe.__module__ = "__main__"
    try:
        with _quiet_task_failures(spark):
            row = spark.range(1, numPartitions=1).select(F.udf(probe, "string", useArrow=False)("id")).first()
    except Exception as exc:  # turned into one clear line where recognised
        problem = _worker_failure(str(exc))
        if problem is None:
            raise
        raise _worker_error(exec_, problem) from None
    assert row is not None  # a one-row job returns its row
    used, *failed = row[0].split("\n")
    if failed:
        raise _worker_error(used, f"cannot import {'; '.join(failed)}")
    if key is not None:
        _WORKERS_OK.add(key)
    else:
        _SESSIONS_OK.add(spark)


#: Loggers that print a failed task's whole worker traceback on the driver's console.
_TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")


@contextmanager
def _quiet_task_failures(spark: SparkSession) -> Iterator[None]:
    """Silence the driver's logs of a failing probe task (a classic session's JVM): the
    error raised says what they say, in one line."""
    if is_connect(spark):  # the server logs it, not this console
        yield
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic session's context has its JVM view
    log4j = jvm.org.apache.logging.log4j
    before = {name: log4j.LogManager.getLogger(name).getLevel() for name in _TASK_FAILURE_LOGGERS}
    for name in before:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
    try:
        yield
    finally:
        for name, level in before.items():
            log4j.core.config.Configurator.setLevel(name, level)


def _configured_worker_python(spark: SparkSession) -> str | None:
    """The interpreter a classic session hands to every Python UDF; None under Spark
    Connect (the server's workers)."""
    return None if is_connect(spark) else spark.sparkContext.pythonExec


def _worker_failure(text: str) -> str | None:
    """What a failed probe job says about the workers' interpreter, or None if it failed
    for another reason."""
    m = re.search(r"Python in worker has different version:? \(?([\d.]+)\)?\s+than that in driver:? \(?([\d.]+)", text)
    if m:
        worker, driver = m.groups()
        return f"is Python {worker} while the driver runs Python {driver} (PySpark needs the same minor version)"
    m = re.search(r"Cannot run program \"[^\"]*\"[^\n]*?(error=\d+, [^\n]*)", text)
    if m:  # java.io.IOException from ProcessBuilder: no such file, not executable, ...
        return f"cannot be started ({m.group(1).strip()})"
    m = re.search(r"(ModuleNotFoundError|ImportError): ([^\n]*)", text)
    if m:
        return f"cannot import what PySpark's worker needs ({m.group(1)}: {m.group(2).strip()})"
    return None


def _worker_error(used: str | None, problem: str) -> WorkerEnvironmentError:
    who = f"interpreter {used!r}" if used else "their interpreter"
    return WorkerEnvironmentError(
        f"Spark's Python workers cannot run rewindow: {who} {problem}. Set PYSPARK_PYTHON (or "
        f"spark.pyspark.python with spark-submit or `rewindow --conf`) to a Python {sys.version_info[0]}."
        f"{sys.version_info[1]} with rewindow and its dependencies (numpy, pyarrow, pyyaml) installed, "
        f"such as this driver's {sys.executable!r}, before the Spark session starts"
    )


def parse_conf(text: str) -> dict[str, str]:
    """``"k1=v1,k2=v2"`` (commas or newlines) into a dict; refuses an entry without ``=``."""
    out: dict[str, str] = {}
    for item in text.replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"REWINDOW_SPARK_CONF / extra_conf: {item!r} is not key=value")
        out[key.strip()] = value.strip()
    return out
