"""A publishing process that is also the SQL endpoint, for tests/windowing/test_catalog_versions.py.

Embedded Derby admits one process at a time, so a Thrift JDBC server in a process of its
own (test_catalog.py) can only query a history once it is published. To query the stable
names *while* another version is published, and right after a switch, this process holds
the metastore once for both: a Spark session with Hive support on the embedded metastore,
Spark's Thrift JDBC server (``HiveThriftServer2``, the class ``thrift_server_command``
starts, here started on this driver's own session) and the publishing, each beeline
connection a session of its own over the same metastore. The test drives it over a local
connection (:class:`HostClient`): replays through :class:`windowing.chain.Chain` with a
:class:`windowing.catalog.Publisher` of a given version, calls of the Publisher's methods,
SQL. It writes a ready file once both ports listen; the test stops it by its PID.

    python -m tests.support.catalog_versions_host METASTORE_DIR THRIFT_PORT RPC_PORT READY_FILE
    (the connection's key in REWINDOW_TEST_HOST_KEY)

No pytest import: the test module imports :class:`HostClient` from here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from datetime import datetime, timezone
from multiprocessing.connection import Client, Listener
from typing import Any

KEY_ENV = "REWINDOW_TEST_HOST_KEY"
HOST = "127.0.0.1"


class HostError(RuntimeError):
    """A call failed in the host: ``kind`` is the exception's class name, the message its text."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class HostClient:
    """The test's end of the connection: one request at a time, each answered in turn."""

    def __init__(self, port: int, key: bytes, timeout: float = 600.0):
        self.conn = Client((HOST, port), authkey=key)
        self.timeout = timeout

    def __call__(self, op: str, **args: Any) -> Any:
        self.conn.send({"op": op, **args})
        if not self.conn.poll(self.timeout):
            raise TimeoutError(f"host: no answer to {op} in {self.timeout:.0f}s")
        answer = self.conn.recv()
        if "error" in answer:
            raise HostError(answer["error"], answer["message"])
        return answer["result"]

    def close(self) -> None:
        self.conn.close()


def _plain(value: Any) -> Any:
    """``value`` as plain data (a Published as a dict, a set as a sorted list)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Host:
    def __init__(self, spark: Any):
        self.spark = spark
        self.statements: list[str] = []  # every statement a Publisher issued, in order
        from windowing.catalog import Publisher

        issue = Publisher._sql

        def recorded(pub: Any, text: str) -> Any:
            self.statements.append(" ".join(text.split()))
            return issue(pub, text)

        Publisher._sql = recorded

    def publisher(self, config: str, pipeline_dir: str, version: str) -> Any:
        from windowing.catalog import Publisher
        from windowing.config import load_pipeline

        pipeline = load_pipeline(config)
        return Publisher(self.spark, pipeline.catalog, pipeline, pipeline_dir, version)

    def op_replay(self, config: str, landing: str, output_root: str, pipeline_dir: str, version: str, days: list[str]):
        """Replay ``days`` into ``output_root`` with ``version``'s publisher (as ``rewindow
        backfill`` does): each day's committed flag."""
        from windowing.chain import Chain
        from windowing.partitions import Partitions

        pub = self.publisher(config, pipeline_dir, version)
        chain = Chain(
            self.spark,
            pub.pipeline,
            landing,
            output_root,
            Partitions("day", datetime(2024, 1, 1, tzinfo=timezone.utc)),
            publisher=pub,
        )
        return {r.key: r.committed for r in chain.replay(days)}

    def op_publish(self, config: str, pipeline_dir: str, version: str, partition: str, folder: str):
        """Publish the current commit of the partition folder ``folder`` with ``version``'s publisher."""
        from windowing.storage.commits import current_commit

        commit = current_commit(self.spark, folder)
        assert commit is not None, folder
        return self.publisher(config, pipeline_dir, version).publish(partition, commit)

    def op_call(self, config: str, pipeline_dir: str, version: str, method: str, args: list[Any]):
        return getattr(self.publisher(config, pipeline_dir, version), method)(*args)

    def op_sql(self, text: str):
        return [r.asDict() for r in self.spark.sql(text).collect()]

    def op_read_published(self, name: str):
        from windowing.catalog import read_published

        outputs = read_published(self.spark, name)
        return {o: {"columns": df.columns, "rows": df.count()} for o, df in vars(outputs).items()}

    def op_statements(self, since: int = 0):
        return self.statements[since:]

    def op_switch_under_reads(self, config: str, pipeline_dir: str, versions: list[str]):
        """Switch to each of ``versions`` in turn while a reader (a session of its own, as a
        beeline connection has) resolves the stable names as fast as it can: how many of
        its reads found each name, and how many did not."""
        from windowing.config.outputs import PUBLISHED

        pub = self.publisher(config, pipeline_dir, versions[0])
        reader = self.spark.newSession()
        names = [pub.spec.qualified(o) for o in PUBLISHED]
        stats = {"reads": 0, "missing": 0, "other": []}
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                for name in names:
                    try:
                        reader.sql(f"SELECT * FROM {name} LIMIT 0").schema  # noqa: B018 - resolves the name
                    except Exception as exc:
                        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
                            stats["missing"] += 1
                        else:
                            stats["other"].append(str(exc)[:300])
                    stats["reads"] += 1

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        began = time.monotonic()
        try:
            for version in versions:
                pub.switch(version)
        finally:
            stop.set()
            thread.join(60)
        return {**stats, "switches": len(versions), "seconds": time.monotonic() - began}

    def serve(self, listener: Listener) -> None:
        conn = listener.accept()
        while True:
            try:
                request = conn.recv()
            except EOFError:
                return
            op = request.pop("op")
            try:
                answer = {"result": _plain(getattr(self, f"op_{op}")(**request))}
            except Exception as exc:  # the test asserts on it
                print(f"host: {op} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
                answer = {"error": type(exc).__name__, "message": str(exc)}
            conn.send(answer)


def main(metastore_dir: str, thrift_port: int, rpc_port: int, ready: str) -> None:
    from windowing.metastore import session_conf
    from windowing.runner.session import spark_session

    # Hive support on the embedded metastore (its derby.log in its folder), as rewindow starts Spark
    conf = session_conf(metastore_dir, {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    conf.update(
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.adaptive.enabled": "false",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "1g",
            # read by HiveThriftServer2 from the session's Hadoop configuration
            "spark.hadoop.hive.server2.thrift.port": str(thrift_port),
            "spark.hadoop.hive.server2.thrift.bind.host": HOST,
        }
    )
    spark = spark_session("local[2]", conf, app_name="rewindow-catalog-versions")
    spark._jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2.startWithSparkSession(
        spark._jsparkSession, False
    )
    listener = Listener((HOST, rpc_port), authkey=os.environ[KEY_ENV].encode())
    with open(ready + ".part", "w") as f:
        json.dump({"pid": os.getpid(), "thrift_port": thrift_port, "rpc_port": rpc_port}, f)
    os.replace(ready + ".part", ready)
    Host(spark).serve(listener)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
