"""What the driver learns of an input before Spark reads it (issue 29: fewer py4j calls and
no process per file): :meth:`Lake.files` lists the files Spark's reader reads, a local
folder walked folder by folder; :meth:`Lake.parquet_columns` gives each column the type
Spark's reader gives it, from the footer alone."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from windowing.config import parse_pipeline
from windowing.storage.inputs import InputError, read_events
from windowing.storage.lake import Lake


def _tree(root: Path) -> set[str]:
    """A nested input with every kind of name Spark's file index skips; the files it reads."""
    table = pa.table({"x": [1, 2]})
    read = []
    for rel in ("a.parquet", "date=1/b.parquet", "date=1/deep/c d%20é.parquet", "date=2/x/y/z/d.parquet"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / rel)
        read.append(rel)
    skipped = ["_SUCCESS", ".a.parquet.crc", "_temporary/0/e.parquet"]
    skipped += ["date=1/.hidden/f.parquet", "date=2/_g/h.parquet"]
    for rel in skipped:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, root / rel)
    return {"file:" + str(root / rel) for rel in read}


def test_a_local_folder_lists_the_files_sparks_reader_reads(spark, tmp_path):
    expected = _tree(tmp_path / "in")
    lake = Lake(spark)
    listed = [e.path for e in lake.files(str(tmp_path / "in"))]
    assert listed == sorted(expected)
    spark_reads = spark.read.option("recursiveFileLookup", "true").parquet(str(tmp_path / "in")).inputFiles()
    assert len(spark_reads) == len(expected)
    assert [e.size for e in lake.files(str(tmp_path / "in"))] == [Path(p[5:]).stat().st_size for p in sorted(expected)]
    one = sorted(expected)[0]
    assert [e.path for e in lake.files(one)] == [one]  # a file given itself is listed
    hidden = "file:" + str(tmp_path / "in" / "_temporary" / "0" / "e.parquet")
    assert [e.path for e in lake.files(hidden)] == [hidden]  # ... whatever its name
    assert lake.files(str(tmp_path / "nothing")) == []


def test_a_local_glob_lists_the_files_of_every_matched_folder(spark, tmp_path):
    expected = _tree(tmp_path / "in")
    found = Lake(spark).glob_files(str(tmp_path / "in" / "date=*"), 100)
    assert found is not None
    assert [p for p, _ in found] == sorted(p for p in expected if "/date=" in p)
    deep = str(tmp_path / "in/date=1/deep")
    (spark_uri,) = {r[0] for r in spark.read.parquet(deep).select(F.input_file_name()).collect()}
    assert [u for _, u in found if "/deep/" in u] == [spark_uri]  # as Spark's input_file_name gives it


def _types_table() -> pa.Table:
    return pa.table(
        {
            "i8": pa.array([1], pa.int8()),
            "i32": pa.array([1], pa.int32()),
            "i64": pa.array([1], pa.int64()),
            "f": pa.array([1.5], pa.float32()),
            "d": pa.array([1.5], pa.float64()),
            "s": pa.array(["a"], pa.string()),
            "b": pa.array([b"a"], pa.binary()),
            "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC")),
            "ts_ms": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)], pa.timestamp("ms", tz="UTC")),
            "ntz": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")),
            "day": pa.array([dt.date(2024, 1, 1)], pa.date32()),
            "dec": pa.array([Decimal("1.25")], pa.decimal128(10, 2)),
            "arr": pa.array([["a", "b"]], pa.list_(pa.string())),
            "st": pa.array([{"p": 1, "q": "r"}], pa.struct([("p", pa.int64()), ("q", pa.string())])),
            "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
            "with space": pa.array([True], pa.bool_()),
        }
    )


def test_footer_types_are_the_types_sparks_reader_gives(spark, tmp_path):
    f = tmp_path / "t.parquet"
    pq.write_table(_types_table(), f)
    pq.write_table(_types_table(), tmp_path / "int96.parquet", use_deprecated_int96_timestamps=True)
    lake = Lake(spark)
    for path in (f, tmp_path / "int96.parquet"):
        spark_types = {c.name: c.dataType.simpleString() for c in spark.read.parquet(str(path)).schema.fields}
        assert lake.parquet_columns(str(path)) == spark_types
    # An INT96 timestamp is read as the same timestamp as an int64 one: not a conflict.
    assert lake.parquet_columns(str(f))["ts"] == lake.parquet_columns(str(tmp_path / "int96.parquet"))["ts"]


def test_a_type_spark_does_not_read_keeps_parquets_words(spark, tmp_path):
    f = tmp_path / "nanos.parquet"
    pq.write_table(pa.table({"ns": pa.array([1], pa.timestamp("ns", tz="UTC")), "x": [1]}), f, version="2.6")
    cols = Lake(spark).parquet_columns(str(f))
    assert cols == {"ns": "INT64 (TIMESTAMP(NANOS,true))", "x": "INT64"}


def test_a_file_holding_a_column_as_another_type_is_named_with_sparks_types(spark, tmp_path):
    pipeline = parse_pipeline(
        {
            "name": "p",
            "source": {"arrivalTime": "arr"},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "keyExtractor": "user_id",
                    "timeConfig": {"eventTimeExtractor": "arr"},
                    "aggregateDefinition": ["count"],
                }
            },
        }
    )
    folder = tmp_path / "in"
    folder.mkdir()
    arr = [dt.datetime(2024, 1, 1)]
    pq.write_table(pa.table({"arr": arr, "user_id": ["a"]}), folder / "a.parquet")
    pq.write_table(pa.table({"arr": arr, "user_id": [1]}), folder / "b.parquet")
    with pytest.raises(InputError) as err:
        read_events(spark, str(folder), pipeline=pipeline)
    msg = str(err.value)
    assert msg.startswith(f"{folder / 'b.parquet'}: column 'user_id' is bigint here but string in"), msg


def test_footers_are_read_several_at_a_time_and_the_first_bad_file_in_order_is_named():
    """read_footers reads an object store's files side by side (it answers each in tens of
    milliseconds), local files one at a time; whichever fails first in time, the error
    names the first bad file of the list, and a good input's columns come back in its order."""
    import threading
    import time

    from windowing.storage import inputs

    class SlowLake:
        def __init__(self, bad: set[str]) -> None:
            self.bad, self.at_once, self.running, self.lock = bad, 0, 0, threading.Lock()

        def parquet_columns(self, path: str) -> dict[str, str]:
            with self.lock:
                self.running += 1
                self.at_once = max(self.at_once, self.running)
            time.sleep(0.2 if path.endswith("/f1") else 0.02)  # the first bad file answers last
            with self.lock:
                self.running -= 1
            if path in self.bad:
                raise OSError(f"{path} is not Parquet")
            return {"x": "bigint", "file": path}

    files = [f"s3a://bucket/day/f{i}" for i in range(12)]
    lake = SlowLake({files[1], files[9]})
    with pytest.raises(InputError, match=r"^s3a://bucket/day/f1: not a readable Parquet file .*f1 is not Parquet"):
        inputs.read_footers(lake, files)  # type: ignore[arg-type]
    assert lake.at_once > 1
    good = SlowLake(set())
    assert list(inputs.read_footers(good, files)) == files  # type: ignore[arg-type]
    assert 1 < good.at_once <= inputs.FOOTER_THREADS
    local = SlowLake(set())
    assert list(inputs.read_footers(local, ["file:/day/a", "/day/b", "c"])) == ["file:/day/a", "/day/b", "c"]  # type: ignore[arg-type]
    assert local.at_once == 1
