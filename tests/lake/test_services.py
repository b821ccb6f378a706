"""The lake services are real: jobs run on standalone executors and on a Connect server,
Python UDFs run this interpreter there, Parquet goes through viewfs://, and stop() leaves
no process behind."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from tests.support.services import (
    QUICK_JVM_OPTS,
    SparkConnectServer,
    SparkStandalone,
    hadoop_viewfs_conf,
    last_json_line,
    pid_alive,
    run_python,
)

pytestmark = pytest.mark.cluster

# Shared by the snippets below: double `id` with pyarrow in a mapInArrow UDF and tag each
# row with where the Python worker ran (the JVM that spawned it, and its interpreter).
UDF_SNIPPET = """
import json, os, sys
import pyarrow as pa
import pyarrow.compute as pc

def where():
    # Python worker -> (pyspark daemon ->) the JVM that runs the task.
    pid = os.getppid()
    for _ in range(6):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\\0")
        except OSError:
            break
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in args:
            return "executor-" + args[args.index("--executor-id") + 1]
        if any(a.endswith("/java") for a in args[:1]):
            return "jvm-" + str(pid)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return "unknown"

def double(batches):
    here = where()
    for b in batches:
        n = b.num_rows
        yield pa.RecordBatch.from_arrays(
            [b.column(0), pc.multiply(b.column(0), 2),
             pa.array([here] * n), pa.array([sys.executable] * n)],
            names=["id", "x", "ran_on", "python"],
        )

SCHEMA = "id long, x long, ran_on string, python string"
"""


def _summary_code(out_url: str, partitions: int) -> str:
    return (
        UDF_SNIPPET
        + f"""
df = spark.range(0, 100, 1, {partitions}).mapInArrow(double, SCHEMA)
df.write.mode("overwrite").parquet({out_url!r})
back = spark.read.parquet({out_url!r})
rows = back.collect()
print(json.dumps({{
    "n": len(rows),
    "sum_x": sum(r.x for r in rows),
    "ran_on": sorted({{r.ran_on for r in rows}}),
    "python": sorted({{r.python for r in rows}}),
    "tz": spark.conf.get("spark.sql.session.timeZone"),
}}))
"""
    )


# --------------------------------------------------------------------------- standalone


def test_standalone_cluster_runs_python_udfs_on_both_workers(spark_standalone, lake_dir):
    state = spark_standalone.master_json()
    assert state["status"] == "ALIVE"
    assert state["aliveworkers"] == 2
    assert [w["state"] for w in state["workers"]] == ["ALIVE", "ALIVE"]
    assert all(w["cores"] == 1 for w in state["workers"])

    out_url = lake_dir.url("standalone", "doubled")
    # A second mount, set at runtime with bare Hadoop keys (hadoop_viewfs_conf).
    runtime_dir = lake_dir.local("standalone-runtime-mount")
    runtime_dir.mkdir()
    runtime_conf = hadoop_viewfs_conf("lake2", runtime_dir)
    code = (
        _summary_code(out_url, partitions=4)
        + f"""
for k, v in {runtime_conf!r}.items():
    spark.conf.set(k, v)
spark.range(10).write.parquet("viewfs://lake2/data/ten")
print(json.dumps({{"runtime_mount": spark.read.parquet("viewfs://lake2/data/ten").count()}}))
"""
    )
    t0 = time.monotonic()
    proc = spark_standalone.run_driver(code, conf=lake_dir.conf, app_name="lake-standalone-udf")
    elapsed = time.monotonic() - t0
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result, runtime = lines[0], lines[1]

    assert result["n"] == 100
    assert result["sum_x"] == 2 * sum(range(100))
    assert result["tz"] == "UTC"
    # Python ran in executors of both workers, with this very interpreter.
    assert result["ran_on"] == ["executor-0", "executor-1"], result
    assert result["python"] == [sys.executable]
    assert runtime == {"runtime_mount": 10}
    # viewfs://lake/data/... is the lake directory on disk.
    written = os.listdir(lake_dir.local("standalone", "doubled"))
    assert "_SUCCESS" in written and any(f.endswith(".parquet") for f in written)
    assert "_SUCCESS" in os.listdir(runtime_dir / "ten")

    # The master saw the application finish, with both workers' cores.
    deadline = time.monotonic() + 20
    while True:
        apps = [a for a in spark_standalone.master_json()["completedapps"] if a["name"] == "lake-standalone-udf"]
        if apps or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert apps and apps[0]["state"] == "FINISHED" and apps[0]["cores"] == 2, apps
    assert spark_standalone.master_json()["aliveworkers"] == 2
    print(f"standalone start {spark_standalone.startup_seconds:.1f}s, driver subprocess {elapsed:.1f}s")


# --------------------------------------------------------------------------- Connect


def test_connect_session_coexists_with_classic_session(spark, spark_remote, spark_connect, lake_dir):
    """The suite's classic session (``spark``) and an in-process Connect session work side
    by side when the Connect session is built by services.connect_session."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession, is_remote
    from pyspark.sql import functions as F
    from pyspark.sql.connect import functions as CF
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # The process did not switch to Connect mode: the classic API is untouched.
    assert not is_remote() and "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    assert SparkSession.getActiveSession() is spark
    assert ConnectSession.getActiveSession() is spark_remote
    assert spark.range(5).select(F.sum(F.col("id"))).first()[0] == 10

    # The public builder refuses while a classic context exists (and changes nothing).
    with pytest.raises(PySparkRuntimeError, match="SESSION_ALREADY_EXIST"):
        SparkSession.builder.remote(spark_connect.url).getOrCreate()
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ

    # Connect: Python UDF on the server, Parquet through viewfs://.
    ns = {"__name__": "lake_udf_snippet"}
    exec(UDF_SNIPPET, ns)  # not an importable module: cloudpickle ships the functions by value
    out_url = lake_dir.url("connect", "doubled")
    spark_remote.range(0, 100, 1, 2).mapInArrow(ns["double"], ns["SCHEMA"]).write.mode("overwrite").parquet(out_url)
    back = spark_remote.read.parquet(out_url)
    assert back.count() == 100
    assert back.select(CF.sum("x")).first()[0] == 2 * sum(range(100))
    assert [r.python for r in back.select("python").distinct().collect()] == [sys.executable]
    assert spark_remote.conf.get("spark.sql.session.timeZone") == "UTC"
    assert "_SUCCESS" in os.listdir(lake_dir.local("connect", "doubled"))

    # The classic session and its functions still work afterwards.
    assert spark.range(3).select(F.max("id")).first()[0] == 2
    assert SparkSession.getActiveSession() is spark
    print(f"connect start {spark_connect.startup_seconds:.1f}s")


def test_connect_client_subprocess(spark_connect, lake_dir):
    """run_client: a clean process in Connect mode, where pyspark.sql.functions work."""
    out_url = lake_dir.url("connect-sub", "doubled")
    runtime_dir = lake_dir.local("connect-runtime-mount")
    runtime_dir.mkdir()
    code = (
        _summary_code(out_url, partitions=2)
        + f"""
from pyspark.sql import SparkSession, functions as F, is_remote
for k, v in {hadoop_viewfs_conf("lake3", runtime_dir)!r}.items():
    spark.conf.set(k, v)
spark.range(10).write.parquet("viewfs://lake3/data/ten")
print(json.dumps({{
    "runtime_mount": spark.read.parquet("viewfs://lake3/data/ten").select(F.count("*")).first()[0],
    "is_remote": is_remote(),
    "active_is_connect": type(SparkSession.getActiveSession()).__module__,
}}))
"""
    )
    proc = spark_connect.run_client(code)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result, extra = lines[0], lines[1]
    assert result["n"] == 100 and result["sum_x"] == 2 * sum(range(100))
    assert result["python"] == [sys.executable]
    assert result["tz"] == "UTC"
    assert extra == {
        "runtime_mount": 10,
        "is_remote": True,
        "active_is_connect": "pyspark.sql.connect.session",
    }
    assert "_SUCCESS" in os.listdir(runtime_dir / "ten")


def test_public_remote_builder_switches_the_whole_process(spark_connect):
    """Why connect_session exists: ``SparkSession.builder.remote(url).create()`` next to
    a classic session flips the *process* into Connect mode (an os.environ flag that
    session.stop() does not clear): getActiveSession() and pyspark.sql.functions then
    serve Connect, and the classic session's column functions break."""
    code = f"""
import json, os
from pyspark.sql import SparkSession, functions as F, is_remote
classic = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
           .config("spark.driver.extraJavaOptions", {QUICK_JVM_OPTS!r}).getOrCreate())
remote = SparkSession.builder.remote({spark_connect.url!r}).create()
active = SparkSession.getActiveSession()
try:
    classic.range(3).select(F.sum(F.col("id"))).first()
    classic_functions = "ok"
except Exception as e:
    classic_functions = type(e).__name__
remote.stop()
print(json.dumps({{
    "is_remote": is_remote(),
    "active": type(active).__module__,
    "classic_functions": classic_functions,
    "classic_string_api": classic.range(3).selectExpr("sum(id)").first()[0],
}}))
classic.stop()
"""
    result = last_json_line(run_python(code, timeout=180).stdout)
    assert result == {
        "is_remote": True,
        "active": "pyspark.sql.connect.session",
        "classic_functions": "PySparkTypeError",
        "classic_string_api": 3,
    }


# --------------------------------------------------------------------------- stop


def _assert_gone(pids):
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_stop_leaves_no_process(tmp_path):
    with SparkStandalone(tmp_path / "sa", workers=1, memory="1g") as cluster:
        pids = cluster.pids
        assert len(pids) == 2 and all(pid_alive(p) for p in pids)
        assert cluster.master_json()["aliveworkers"] == 1
    _assert_gone(pids)

    with SparkConnectServer(tmp_path / "sc", verify=False) as server:
        pid = server.pid
        assert pid_alive(pid)
    _assert_gone([pid])
    server.stop()  # idempotent
