"""Real Spark services for tests, started from the installed pyspark package.

* :class:`SparkStandalone` - a standalone master and N workers (``spark://`` URL).
* :class:`SparkConnectServer` - a Spark Connect server (``sc://`` URL).
* :func:`viewfs_conf` - Hadoop settings mapping ``viewfs://<mount>/data/...`` onto a
  local directory, so tests can use a non-``file:`` filesystem scheme.

Every JVM is started with ``bin/spark-class`` / ``bin/spark-submit`` of pyspark's own
install directory (``SPARK_HOME = dirname(pyspark.__file__)``). These scripts ``exec``
the JVM, so the Popen PID *is* the JVM. Each service runs in its own session (process
group), and ``stop()`` signals exactly those groups: executors and Python workers the
services spawn live in the same group and go with them. Nothing here touches processes
it did not start.

No pytest import: usable from scripts and notebooks too.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

HOST = "127.0.0.1"

#: Quick JVM start-up for short test jobs (the C1 tier only, a serial GC), and under pytest
#: the archive of Spark's classes (tests/support/spark_classes.py: tests/conftest.py sets
#: REWINDOW_TEST_JVM_ARCHIVE; the daemons and executors do not read SPARK_SUBMIT_OPTS).
QUICK_JVM_OPTS = f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {os.environ.get('REWINDOW_TEST_JVM_ARCHIVE', '')}".strip()

#: Environment variables that must not leak from the test process into a service or a
#: client subprocess: they switch pyspark into Connect mode or make it attach to the
#: parent's Py4J gateway instead of starting its own JVM.
_SCRUBBED_ENV = (
    "SPARK_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_LOCAL_REMOTE",
    "SPARK_API_MODE",
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "PYSPARK_SUBMIT_ARGS",
    "MASTER",
    "SPARK_CONF_DIR",
    "SPARK_ENV_LOADED",
)


class ServiceError(RuntimeError):
    """A service did not start (the message carries the tails of its logs)."""


def spark_home() -> str:
    """pyspark's install directory: it is a complete SPARK_HOME (bin/, jars/, sbin/)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port(host: str = HOST) -> int:
    """A TCP port that is free right now (the OS picks it; a tiny race is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a service or client: this interpreter for Python workers,
    pyspark's SPARK_HOME, loopback only, and no inherited Connect/gateway switches."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env.update(
        SPARK_HOME=spark_home(),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP=HOST,
        PYTHONHASHSEED="0",
    )
    env.update(extra or {})
    return env


def tail(path: str | os.PathLike, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def error_lines(path: str | os.PathLike, limit: int = 8) -> str:
    """The first ERROR / Exception lines of a log (the cause, before the shutdown noise)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    hits = [ln for ln in text.splitlines() if " ERROR " in ln or "Exception" in ln or ln.startswith("Error")]
    return "\n".join(hits[:limit])


def _signal0_alive(send, target: int) -> bool:
    """Whether signal 0 reaches ``target`` through ``send`` (``os.kill`` or ``os.killpg``)."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists (a zombie counts as existing until it is reaped)."""
    return _signal0_alive(os.kill, pid)


def _group_alive(pgid: int) -> bool:
    return _signal0_alive(os.killpg, pgid)


class ManagedProcess:
    """One service process, its own session/process group, its log file."""

    def __init__(self, name: str, cmd: Sequence[str], env: Mapping[str, str], log_path: Path, cwd: Path):
        self.name = name
        self.cmd = list(cmd)
        self.log_path = log_path
        with open(log_path, "ab") as log:
            log.write(("$ " + shlex.join(self.cmd) + "\n").encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.cmd,
                env=dict(env),
                cwd=str(cwd),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session => own process group (pgid == pid)
            )
        self.pid = self.popen.pid
        self.pgid = self.pid
        self._stopped = False

    def running(self) -> bool:
        return self.popen.poll() is None

    def describe(self, lines: int = 40) -> str:
        state = "running" if self.running() else f"exited with {self.popen.returncode}"
        errors = error_lines(self.log_path)
        first_errors = f"first errors:\n{errors}\nlast lines:\n" if errors else ""
        head = f"--- {self.name} (pid {self.pid}, {state}), {self.log_path}:\n"
        return f"{head}{first_errors}{tail(self.log_path, lines)}"

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        """SIGTERM the process and its group (no wait). No-op once stopped."""
        if self._stopped:
            return
        if self.popen.poll() is None:
            self.popen.terminate()
        self._signal_group(signal.SIGTERM)

    def wait_stopped(self, timeout: float = 15.0) -> None:
        """Wait for the process (SIGKILL to the group after ``timeout``), reap it, then
        make sure nothing of its group is left. Idempotent."""
        if self._stopped:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.popen.kill()
            self.popen.wait(timeout=timeout)
        # Children of the JVM (executors, Python workers) share the group: give them a
        # moment to follow, then kill the rest. A group id cannot be reused while any
        # member is alive, so this signals only what we started.
        deadline = time.monotonic() + 5.0
        while _group_alive(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(self.pgid):
            self._signal_group(signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while _group_alive(self.pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
        # Never signal this pgid again: once empty, the number may be reused.
        self._stopped = True

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process and its group, SIGKILL whatever is left after ``timeout``,
        reap the process. Idempotent."""
        self.terminate()
        self.wait_stopped(timeout)


def run_python(
    code: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """Run ``code`` with this interpreter in a fresh process (its own session, killed
    with its group on timeout). Raises :class:`RuntimeError` with the output if it
    fails; returns the CompletedProcess (text stdout/stderr) otherwise."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=base_env(env),
        cwd=None if cwd is None else str(cwd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise RuntimeError(
            f"snippet timed out after {timeout}s\n--- stdout:\n{out[-4000:]}\n--- stderr:\n{err[-8000:]}"
        ) from None
    # The driver JVM of a classic session is a child of the snippet: make sure it went.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode != 0:
        raise RuntimeError(
            f"snippet exited with {proc.returncode}\n--- stdout:\n{out[-4000:]}\n--- stderr:\n{err[-8000:]}"
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def last_json_line(stdout: str):
    """The JSON value printed last by a snippet (other lines may be Spark noise)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith(("{", "[")):
            return json.loads(line)
    raise ValueError(f"no JSON line in output:\n{stdout[-2000:]}")


# --------------------------------------------------------------------------- viewfs


def viewfs_uri(mount_name: str, path: str = "/data") -> str:
    """``viewfs://<mount_name><path>``."""
    return f"viewfs://{mount_name}/{path.lstrip('/')}"


def hadoop_viewfs_conf(
    mount_name: str,
    local_dir: str | os.PathLike,
    mount_point: str = "/data",
    *,
    disable_cache: bool = False,
) -> dict[str, str]:
    """Bare Hadoop keys that mount ``viewfs://<mount_name><mount_point>`` onto the local
    directory ``local_dir``: ``{"fs.viewfs.mounttable.<mount_name>.link./data":
    "file:///abs/local_dir"}``.

    Use them in ``core-site.xml``, ``sc._jsc.hadoopConfiguration()``, or as *runtime*
    session settings (``spark.conf.set(k, v)``, Connect sessions included): Spark copies
    the SQL conf into the Hadoop conf of every query. (``spark.hadoop.*`` keys, see
    :func:`viewfs_conf`, only count when the SparkContext starts.)

    Hadoop's ``core-default.xml`` already maps the ``viewfs`` scheme onto
    ``ViewFileSystem`` (``fs.viewfs.impl``), so one link per mount is all it takes.
    Renames work inside a link (Spark's commit protocol renames within the output
    directory); paths outside every link (``viewfs://<mount>/other``) do not exist.
    Hadoop caches a FileSystem per scheme+authority: a mount name keeps its first
    mapping for the life of the JVM unless ``disable_cache`` (so use a fresh mount name
    for a different directory).
    """
    target = Path(local_dir).resolve().as_uri()  # file:///abs/dir
    conf = {f"fs.viewfs.mounttable.{mount_name}.link.{mount_point}": target}
    if disable_cache:
        conf["fs.viewfs.impl.disable.cache"] = "true"
    return conf


def viewfs_conf(
    mount_name: str,
    local_dir: str | os.PathLike,
    mount_point: str = "/data",
    *,
    disable_cache: bool = False,
) -> dict[str, str]:
    """Spark launch settings (``spark.hadoop.`` + :func:`hadoop_viewfs_conf`) so that
    ``viewfs://<mount_name>/data/x`` reads and writes ``<local_dir>/x``. For
    ``spark-submit --conf`` / ``SparkSession.builder.config`` (before the context starts)."""
    bare = hadoop_viewfs_conf(mount_name, local_dir, mount_point, disable_cache=disable_cache)
    return {f"spark.hadoop.{k}": v for k, v in bare.items()}


@dataclass(frozen=True)
class Lake:
    """A local directory seen as ``viewfs://<mount>/data``."""

    path: Path  #: the local directory
    mount: str  #: the viewfs mount table name (the URI authority)

    @property
    def uri(self) -> str:
        """``viewfs://<mount>/data`` (no trailing slash)."""
        return viewfs_uri(self.mount, "/data")

    @property
    def conf(self) -> dict[str, str]:
        """Launch settings (``spark.hadoop.`` keys), see :func:`viewfs_conf`."""
        return viewfs_conf(self.mount, self.path)

    @property
    def hadoop_conf(self) -> dict[str, str]:
        """Bare Hadoop keys, see :func:`hadoop_viewfs_conf`."""
        return hadoop_viewfs_conf(self.mount, self.path)

    def url(self, *parts: str) -> str:
        """``viewfs://<mount>/data/<parts...>``."""
        return "/".join([self.uri, *(p.strip("/") for p in parts)])

    def local(self, *parts: str) -> Path:
        """The local path behind :meth:`url` of the same parts."""
        return self.path.joinpath(*parts)


# --------------------------------------------------------------------------- standalone


class SparkStandalone:
    """A Spark standalone cluster: one master, ``workers`` workers on 127.0.0.1.

    ``tmp_dir`` receives the logs (``master.log``, ``worker-N.log``), the workers' work
    dirs (``worker-N/``: executor stdout/stderr per app) and Spark's scratch space.
    ``start()`` returns once the master reports every worker ALIVE.
    """

    def __init__(
        self,
        tmp_dir: str | os.PathLike,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "2g",
        daemon_memory: str = "512m",
        startup_timeout: float = 90.0,
        env: Mapping[str, str] | None = None,
    ):
        self.tmp_dir = Path(tmp_dir)
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.startup_timeout = startup_timeout
        self.extra_env = dict(env or {})
        self.port = free_port()
        self.webui_port = free_port()
        self.master: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self.startup_seconds: float | None = None

    # -- addresses
    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    @property
    def processes(self) -> list[ManagedProcess]:
        return ([self.master] if self.master else []) + self.workers

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def worker_dir(self, i: int) -> Path:
        return self.tmp_dir / f"worker-{i}"

    # -- state
    def master_json(self, timeout: float = 2.0) -> dict:
        """The master's state as its web UI serves it (``/json/``): ``workers``,
        ``aliveworkers``, ``activeapps``, ``completedapps``, ``status``, ..."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=timeout) as resp:
            return json.load(resp)

    def alive_workers(self) -> int:
        state = self.master_json()
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def executors(self, app_id: str) -> dict[str, int]:
        """The executor JVMs of application ``app_id`` running now, ``{executor id: pid}``:
        the ``CoarseGrainedExecutorBackend`` processes the workers of this cluster started
        (children of their JVMs, read from ``/proc``). For tests that kill one."""
        workers = {w.pid for w in self.workers}
        return {
            _arg(args, "--executor-id"): pid
            for pid, (parent, args) in process_table().items()
            if parent in workers
            and "org.apache.spark.executor.CoarseGrainedExecutorBackend" in args
            and _arg(args, "--app-id") == app_id
        }

    def _env(self) -> dict[str, str]:
        scratch = self.tmp_dir / "local"
        scratch.mkdir(parents=True, exist_ok=True)
        return base_env(
            {
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM_OPTS,
                "SPARK_LOCAL_DIRS": str(scratch),
                "SPARK_LOG_DIR": str(self.tmp_dir),
                "SPARK_PID_DIR": str(self.tmp_dir),
                "SPARK_NO_DAEMONIZE": "1",
                **self.extra_env,
            }
        )

    def _failure(self, why: str) -> ServiceError:
        parts = [why] + [p.describe() for p in self.processes]
        return ServiceError("\n".join(parts))

    def _wait(self, what: str, ok, deadline: float) -> None:
        last_exc: Exception | None = None
        while time.monotonic() < deadline:
            for p in self.processes:
                if not p.running():
                    raise self._failure(f"{p.name} exited while waiting for {what}")
            try:
                if ok():
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last_exc = exc
            time.sleep(0.25)
        raise self._failure(f"timed out after {self.startup_timeout}s waiting for {what} (last error: {last_exc!r})")

    # -- life cycle
    def start(self) -> "SparkStandalone":
        if self.master is not None:
            return self
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        deadline = t0 + self.startup_timeout
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        env = self._env()
        try:
            self.master = ManagedProcess(
                "master",
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
                env,
                self.tmp_dir / "master.log",
                self.tmp_dir,
            )
            # Workers that find no master back off for several seconds: start them once
            # the master answers (its web UI binds after its RPC endpoint).
            self._wait("the master web UI", lambda: "status" in self.master_json(), deadline)
            for i in range(self.n_workers):
                work_dir = self.worker_dir(i)
                work_dir.mkdir(parents=True, exist_ok=True)
                self.workers.append(
                    ManagedProcess(
                        f"worker-{i}",
                        [
                            spark_class,
                            "org.apache.spark.deploy.worker.Worker",
                            self.master_url,
                            "--cores",
                            str(self.cores),
                            "--memory",
                            self.memory,
                            "--work-dir",
                            str(work_dir),
                            "--host",
                            HOST,
                            "--webui-port",
                            str(free_port()),
                        ],
                        env,
                        self.tmp_dir / f"worker-{i}.log",
                        self.tmp_dir,
                    )
                )
            self._wait(f"{self.n_workers} ALIVE workers", lambda: self.alive_workers() >= self.n_workers, deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop every process of the cluster (all signalled at once, then waited for);
        executors and their Python workers go with their worker's process group."""
        procs = list(reversed(self.processes))
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait_stopped()

    def __enter__(self) -> "SparkStandalone":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients
    def driver_conf(self, conf: Mapping[str, str] | None = None) -> dict[str, str]:
        """Modest settings for a driver of this cluster (overridable by ``conf``)."""
        settings = {
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.driver.memory": "512m",
            "spark.driver.extraJavaOptions": QUICK_JVM_OPTS,
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.executor.extraJavaOptions": QUICK_JVM_OPTS,
            "spark.cores.max": str(self.n_workers * self.cores),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
            # Schedule once every executor registered, so a job spreads over all workers.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "30s",
        }
        settings.update({k: str(v) for k, v in (conf or {}).items()})
        return settings

    def run_driver(
        self,
        code: str,
        conf: Mapping[str, str] | None = None,
        *,
        app_name: str = "rewindow-cluster-test",
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess:
        """Run ``code`` in a fresh Python process whose ``spark`` is a classic session
        on this cluster (:meth:`driver_conf` + ``conf``); the session is stopped after
        the snippet. A classic session per process only: hence the subprocess."""
        settings = self.driver_conf(conf)
        prelude = (
            "from pyspark.sql import SparkSession\n"
            f"_b = SparkSession.builder.master({self.master_url!r}).appName({app_name!r})\n"
            f"for _k, _v in {settings!r}.items():\n"
            "    _b = _b.config(_k, _v)\n"
            "spark = _b.getOrCreate()\n"
            "spark.sparkContext.setLogLevel('ERROR')\n"
        )
        body = "try:\n" + textwrap.indent(textwrap.dedent(code), "    ") + "\n    pass\nfinally:\n    spark.stop()\n"
        env = {"SPARK_LOCAL_DIRS": str(self.tmp_dir / "local")}
        return run_python(prelude + body, env=env, timeout=timeout, cwd=self.tmp_dir)


def process_table() -> dict[int, tuple[int, list[str]]]:
    """Every process this user can read now: ``{pid: (parent pid, command line)}`` (``/proc``)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
        table[int(entry.name)] = (parent, args)
    return table


def _arg(args: Sequence[str], flag: str) -> str | None:
    """The value after ``flag`` in a command line, or None."""
    return args[args.index(flag) + 1] if flag in args[:-1] else None


# --------------------------------------------------------------------------- Connect


CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnectServer:
    """A Spark Connect server (``spark-submit --class SparkConnectServer spark-internal``)
    on 127.0.0.1, running its Spark on ``master`` (``local[2]`` by default; a
    ``spark://`` URL works too). ``conf`` adds ``--conf`` entries (Hadoop settings such
    as :func:`viewfs_conf`, SQL settings, ...). Python UDFs run with this interpreter.
    ``tmp_dir`` receives ``connect.log``, the warehouse and Spark's scratch space.
    ``start()`` returns once the gRPC port is open and (``verify``) a Connect session in
    this process - built by :func:`connect_session`, so no process-wide Connect mode -
    answered ``spark.range(1).count()``.
    """

    def __init__(
        self,
        tmp_dir: str | os.PathLike,
        *,
        conf: Mapping[str, str] | None = None,
        master: str = "local[2]",
        port: int | None = None,
        driver_memory: str = "1g",
        startup_timeout: float = 120.0,
        verify: bool = True,
        env: Mapping[str, str] | None = None,
    ):
        self.tmp_dir = Path(tmp_dir)
        self.master = master
        self.port = port or free_port()
        self.driver_memory = driver_memory
        self.startup_timeout = startup_timeout
        self.verify = verify
        self.extra_env = dict(env or {})
        self.conf = self.default_conf()
        self.conf.update({k: str(v) for k, v in (conf or {}).items()})
        self.process: ManagedProcess | None = None
        self.startup_seconds: float | None = None
        self._sessions: list = []

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def pids(self) -> list[int]:
        return [self.process.pid] if self.process else []

    @property
    def log_path(self) -> Path:
        return self.tmp_dir / "connect.log"

    def default_conf(self) -> dict[str, str]:
        return {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            # Fail rather than silently move to the next port if ours was taken.
            "spark.connect.grpc.port.maxRetries": "0",
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.driver.extraJavaOptions": QUICK_JVM_OPTS,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.warehouse.dir": str(self.tmp_dir / "warehouse"),
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.python.worker.reuse": "true",
        }

    def _failure(self, why: str) -> ServiceError:
        desc = self.process.describe(60) if self.process else "<not started>"
        return ServiceError(f"{why}\n{desc}")

    def start(self) -> "SparkConnectServer":
        if self.process is not None:
            return self
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        (self.tmp_dir / "local").mkdir(exist_ok=True)
        if port_open(self.port):
            raise ServiceError(f"port {self.port} is already in use: cannot start a Connect server there")
        t0 = time.monotonic()
        deadline = t0 + self.startup_timeout
        cmd = [
            os.path.join(spark_home(), "bin", "spark-submit"),
            "--class",
            CONNECT_SERVER_CLASS,
            "--name",
            "rewindow-connect-test",
            "--master",
            self.master,
            "--driver-memory",
            self.driver_memory,
        ]
        for k, v in self.conf.items():
            cmd += ["--conf", f"{k}={v}"]
        cmd.append("spark-internal")
        env = base_env(
            {
                # What sbin/start-connect-server.sh sets: a server, not a Connect client.
                "SPARK_CONNECT_MODE": "0",
                "SPARK_LOCAL_DIRS": str(self.tmp_dir / "local"),
                **self.extra_env,
            }
        )
        try:
            self.process = ManagedProcess("connect-server", cmd, env, self.log_path, self.tmp_dir)
            # The gRPC port opens once the server's SparkSession is up.
            while not port_open(self.port):
                if not self.process.running():
                    raise self._failure("the Connect server exited during start-up")
                if time.monotonic() > deadline:
                    raise self._failure(f"timed out after {self.startup_timeout}s waiting for port {self.port}")
                time.sleep(0.25)
            if self.verify:
                # A real round trip: a Connect session (in this process, without switching
                # it to Connect mode, see connect_session) runs a query.
                try:
                    session = connect_session(self.url)
                    try:
                        count = session.range(1).count()
                    finally:
                        close_connect_session(session)
                except Exception as exc:
                    raise self._failure(f"a client could not use the Connect server: {exc!r}") from None
                if count != 1:
                    raise self._failure(f"unexpected answer from the Connect server: {count!r}")
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Close the in-process sessions of :meth:`session` first (a Connect client whose
        server is gone retries for ~10 minutes), then stop the server's process group."""
        reachable = self.process is not None and self.process.running() and port_open(self.port)
        for session in self._sessions:
            close_connect_session(session, release=reachable)
        self._sessions.clear()
        if self.process is not None:
            self.process.stop()

    def __enter__(self) -> "SparkConnectServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients
    def client_prelude(self) -> str:
        return (
            f"from pyspark.sql import SparkSession\nspark = SparkSession.builder.remote({self.url!r}).getOrCreate()\n"
        )

    def run_client(self, code: str, *, timeout: float = 300.0) -> subprocess.CompletedProcess:
        """Run ``code`` in a fresh Python process whose ``spark`` is a Connect session on
        this server (stopped after the snippet). Use it when the calling process must
        stay free of Connect mode (see :func:`connect_session`)."""
        body = "try:\n" + textwrap.indent(textwrap.dedent(code), "    ") + "\n    pass\nfinally:\n    spark.stop()\n"
        return run_python(self.client_prelude() + body, timeout=timeout, cwd=self.tmp_dir)

    def session(self, *, quick_fail: bool = True):
        """A new Connect session in *this* process (see :func:`connect_session`),
        closed by :meth:`stop` if still open."""
        session = connect_session(self.url, quick_fail=quick_fail)
        self._sessions.append(session)
        return session


def connect_session(url: str, *, quick_fail: bool = True):
    """A Spark Connect session on ``url`` in this process, without switching the process
    into Connect mode.

    ``pyspark.sql.SparkSession.builder.remote(url).getOrCreate()`` refuses to run
    (``SESSION_ALREADY_EXIST``) when a classic SparkContext lives in the process, and its
    ``.create()`` sets ``SPARK_CONNECT_MODE_ENABLED`` in ``os.environ``, after which
    ``pyspark.sql.functions``, ``SparkSession.getActiveSession()`` & co. of the *whole
    process* dispatch to Connect - which breaks the classic session of other tests.
    Building the session with the Connect class directly avoids both. Use the column
    functions of ``pyspark.sql.connect.functions`` with it when a classic session is
    also around (``pyspark.sql.functions`` then builds classic Columns).

    ``quick_fail`` trims the client's retry policy (by default up to ~10 minutes of
    back-off when the server is unreachable) to a few seconds, which suits tests.
    """
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession

    session = ConnectSparkSession.builder.remote(url).create()
    if quick_fail:
        try:
            from pyspark.sql.connect.client.retries import DefaultPolicy

            session.client.set_retry_policies([DefaultPolicy(max_retries=4, max_backoff=2000)])
        except Exception:  # pragma: no cover - an API change only costs the quick failure
            pass
    return session


def close_connect_session(session, *, release: bool = True) -> None:
    """Stop a Connect client session; with ``release=False`` only close the channel (no
    ReleaseSession RPC: for a server that is already gone)."""
    if not release:
        session.release_session_on_close = False
    try:
        session.stop()
    except Exception:
        pass
