"""The small files a run writes from the driver (issue 29: no Spark job for them, and on a
local folder no Hadoop either) are the files Spark's own writers wrote: ``metrics.json``,
``metrics.prom`` and the commit record, byte for byte, with the same files beside them
(Hadoop's ``.crc`` checksum files too); and an output's commit records read from the
driver are the rows Spark's JSON reader reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from windowing.storage import commits
from windowing.storage.commits import COMMIT_SCHEMA, record_json_line
from windowing.storage.lake import Lake, glob_escape
from windowing.storage.outputs import nullable

#: Strings that need escaping, and some that must not be (non-ASCII, "/", DEL, U+2028).
AWKWARD = 'a "quoted" \\ back/slash\t\n\r\b\f\x01\x1f\x7f é \u2028 \U0001f600'


def _written(folder: Path) -> dict[str, bytes]:
    """Every file's bytes, by its name with the part file's unique part cut (the ``.crc``
    checksum files beside them included: a wrong checksum fails a later read)."""

    def name(n: str) -> str:
        if n.startswith("part-"):
            return "part" + n.rsplit("-c000", 1)[1]
        if n.startswith(".part-"):
            return ".part" + n.rsplit("-c000", 1)[1]
        return n

    return {name(p.name): p.read_bytes() for p in folder.iterdir()}


@pytest.fixture(params=["python", "hadoop"])
def lake(request, spark, monkeypatch):
    """A Lake writing local files with Python's calls (as it does), or through Hadoop's
    local filesystem (as it does any other filesystem's): the same files either way."""
    if request.param == "hadoop":
        monkeypatch.setattr(Lake, "_local", lambda self, path: None)
    return Lake(spark)


def test_text_datasets_and_commit_records_are_what_sparks_writers_wrote(spark, lake, tmp_path):
    long_text = "".join(f"line {i} {AWKWARD}\n" for i in range(40))  # several 512-byte checksum chunks
    for i, text in enumerate(['{"a": 1, "b": "é"}\n', '# HELP x y\nx{a="b"} 1\ny 2\n', AWKWARD + "\n", long_text]):
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
    with pytest.raises(FileExistsError, match="already exists"):
        lake.put_text_dataset(str(tmp_path / "driver-rec"), "again\n")


def test_a_text_file_is_what_hadoops_create_wrote(spark, lake, tmp_path):
    """put_text (the state manifest, the lateness report) writes the file and checksum
    Hadoop's ``FileSystem.create`` writes, in a folder it makes, and never overwrites."""
    text = "".join(f"{i} {AWKWARD}\n" for i in range(30))
    fs = spark._jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    out = fs.create(spark._jvm.org.apache.hadoop.fs.Path(str(tmp_path / "hadoop" / "m.json")), False)
    out.write(bytearray(text.encode("utf-8")))
    out.close()
    lake.put_text(str(tmp_path / "driver" / "m.json"), text)
    assert _written(tmp_path / "driver") == _written(tmp_path / "hadoop")
    with pytest.raises(Exception, match="exists"):
        lake.put_text(str(tmp_path / "driver" / "m.json"), "again")
    assert lake.mkdirs(str(tmp_path / "a" / "b")) and (tmp_path / "a" / "b").is_dir()


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


def test_the_state_hashes_and_summary_computed_as_it_is_written_are_those_read_back(spark, tmp_path):
    """A staged run's state hash, its manifest's window rows hash and the summary the next
    partition starts from are computed while Spark writes the state (no job of their own):
    they are what reading the written state back gives."""
    from datetime import datetime, timezone

    from windowing import load_pipeline, replay
    from windowing.runner.normalise import split_state
    from windowing.sample import generate_history
    from windowing.storage.inputs import read_events
    from windowing.storage.manifest import content_hashes, stored_manifest
    from windowing.storage.outputs import read_run, stage_outputs

    examples = Path(__file__).parents[3] / "examples" / "pipelines"
    days = generate_history(
        tmp_path / "in", datetime(2024, 1, 1, tzinfo=timezone.utc), days=2, events_per_day=400, keys=12
    )
    for name in ("clicks-hourly", "sessions"):
        pipeline = load_pipeline(examples / f"{name}.yaml")
        result = replay(spark, pipeline, read_events(spark, [str(days[0])]))
        staged = stage_outputs(result, tmp_path / name, pipeline=pipeline)
        result.unpersist()
        state = read_run(spark, staged.path, staged.schemas).state
        whole, windows = content_hashes(state, state["state_kind"] == "window")
        assert staged.state_hash == whole and int(whole.split("-")[0]) > 0
        assert stored_manifest(spark, f"{staged.path}/state", None).window_rows_hash == windows
        summary = staged.state_summary
        assert summary is not None and summary.fingerprints == (pipeline.fingerprint(),)
        events = read_events(spark, [str(days[1])])
        observed, _ = split_state(spark, pipeline, state, events, summary)
        read_back, _ = split_state(spark, pipeline, state, events)
        assert observed == read_back and len(read_back) > 1  # one row per worker


def test_a_state_written_without_its_metrics_reported_is_hashed_by_reading_it_back(spark, monkeypatch):
    """Should Spark run the write without reporting the observed metrics, staging does not
    wait for them: the hashes and the summary are None, so the state is read back instead."""
    from windowing.storage import manifest

    monkeypatch.setattr(manifest, "OBSERVED_WAIT_S", 0.05)
    observed = manifest.ObservedState(spark.createDataFrame([("worker", 1)], "state_kind string, batch long"))
    assert observed.observation is not None
    assert observed.hashes() is None and observed.summary() is None  # no action ran: nothing reported


RECORD_LINES = {
    "good": record_json_line({"seq": 3, "run_id": "r", "run": "runs/r", "metrics": AWKWARD, "extra": "{}"}),
    "spaced": '{"seq": 4, "run_id": "x", "run": "runs/x", "committed_at": null}\r\n',
    "two records": '{"seq": 1, "run_id": "a"}\n\n{"seq": 2, "run_id": "b"}\n',
    "truncated": '{"seq": 5, "run_id": "20260101T0000',
    "empty object": "{}\n",
    "not json": "garbage\n",
    "an array": "[1, 2]\n",
    # (A nested value is read as its JSON text: Spark's keeps its source spacing, the
    # driver's is compact; only a damaged record can hold one.)
    "odd types": '{"seq": "7", "run_id": 8, "run": {"a":[1,true]}, "pipeline": false, "fingerprint": 1.5}\n',
    "a float seq": '{"seq": 2.5, "run_id": "f"}\n',
    "blank": "\n \n",
}


@pytest.mark.parametrize("name", ["plain", "odd n\u00e4me %20#,;", "br[1]"])
def test_commit_records_read_from_the_driver_are_the_rows_sparks_json_reader_reads(spark, tmp_path, name):
    out = tmp_path / name
    for i, (what, text) in enumerate(RECORD_LINES.items()):
        folder = out / "_commits" / f"{i:010d}-{what.replace(' ', '_')}"
        folder.mkdir(parents=True)
        (folder / "part-00000.json").write_text(text)
        (folder / "_SUCCESS").write_text("")
        (folder / "_hidden.json").write_text(RECORD_LINES["good"])  # hidden: skipped by both
    (out / "_commits" / "0000000099-interrupted" / "_temporary" / "0").mkdir(parents=True)
    pattern = f"{glob_escape(str(out))}/_commits/*"
    spark_rows = spark.read.schema(COMMIT_SCHEMA).json(pattern).withColumn("__file", F.input_file_name()).collect()
    driver_rows = commits._driver_rows(spark, pattern)
    assert driver_rows is not None
    assert sorted(map(repr, driver_rows)) == sorted(map(repr, spark_rows))
    # What readers make of them is the same too: the good record trusted, the others damaged.
    trusted, damaged = commits.read_records(spark, str(out))
    assert (len(trusted), len(damaged)) == (0, len(RECORD_LINES) - 1)  # no folder is a real record's
