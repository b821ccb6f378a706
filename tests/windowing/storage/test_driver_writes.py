"""The small files a run writes from the driver through Hadoop (issue 29: no Spark job for
them) are the files Spark's own writers wrote: ``metrics.json``, ``metrics.prom`` and the
commit record, byte for byte, with the same files beside them."""

from __future__ import annotations

import json
from pathlib import Path

from windowing.storage.commits import COMMIT_SCHEMA, record_json_line
from windowing.storage.lake import Lake
from windowing.storage.outputs import nullable

#: Strings that need escaping, and some that must not be (non-ASCII, "/", DEL, U+2028).
AWKWARD = 'a "quoted" \\ back/slash\t\n\r\b\f\x01\x1f\x7f é \u2028 \U0001f600'


def _written(folder: Path) -> tuple[bytes, list[str]]:
    """The data file's bytes, and every file's name with the part file's unique part cut."""
    part = next(folder.glob("part-*"))
    names = sorted(
        ("part" + n.rsplit("-c000", 1)[1])
        if n.startswith("part-")
        else (".part" + n.rsplit("-c000", 1)[1])
        if n.startswith(".part-")
        else n
        for n in (p.name for p in folder.iterdir())
    )
    return part.read_bytes(), names


def test_text_datasets_and_commit_records_are_what_sparks_writers_wrote(spark, tmp_path):
    lake = Lake(spark)
    for i, text in enumerate(['{"a": 1, "b": "é"}\n', '# HELP x y\nx{a="b"} 1\ny 2\n', AWKWARD + "\n"]):
        spark.createDataFrame([(text.removesuffix("\n"),)], "value string").coalesce(1).write.mode("error").text(
            str(tmp_path / f"spark{i}")
        )
        lake.put_text_dataset(str(tmp_path / f"driver{i}"), text)
        assert _written(tmp_path / f"driver{i}") == _written(tmp_path / f"spark{i}")
    record = {
        "seq": 12,
        "run_id": AWKWARD,
        "run": "runs/x",
        "committed_at": "2026-11-27T00:00:00.000+00:00",
        "pipeline": "p",
        "fingerprint": None,
        "metrics": json.dumps({"a": 1.5, "b": [1, None]}),
        "extra": json.dumps({"s": AWKWARD}, ensure_ascii=False),
    }
    spark.createDataFrame([record], COMMIT_SCHEMA).coalesce(1).write.mode("error").json(str(tmp_path / "spark-rec"))
    lake.put_text_dataset(str(tmp_path / "driver-rec"), record_json_line(record), "json")
    assert _written(tmp_path / "driver-rec") == _written(tmp_path / "spark-rec")


def test_outputs_are_read_back_with_the_schema_spark_infers(spark, tmp_path):
    from pyspark.sql import types as T

    long, text = T.LongType(), T.StringType()
    df = spark.createDataFrame(
        [(1, [1], {"a": 1}, (1, "x"))],
        T.StructType(
            [
                T.StructField("a", long, False),
                T.StructField("b", T.ArrayType(long, False), False),
                T.StructField("m", T.MapType(text, long, False), False),
                T.StructField(
                    "s", T.StructType([T.StructField("x", long, False), T.StructField("y", text, False)]), False
                ),
            ]
        ),
    )
    df.write.parquet(str(tmp_path / "t"))
    assert spark.read.parquet(str(tmp_path / "t")).schema == nullable(df.schema)
