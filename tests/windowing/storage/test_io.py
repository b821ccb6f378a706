"""Where events come from: ``source.path`` URIs, ``source.table``, ``source.format``
(parquet, orc, json, csv), and how a partition's rows are chosen in a landing zone
(Spark filters: a partition column, or the arrival time). Bad locations fail before
any work, naming what is wrong.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from windowing import parse_pipeline, replay
from windowing.landing import LandingZoneError, landed_days, read_partition_events
from windowing.sample import generate_history
from windowing.storage.errors import InputError
from windowing.storage.inputs import read_events

ROOT = Path(__file__).resolve().parents[3]
START = datetime(2024, 6, 1, tzinfo=timezone.utc)
#: The generated files' columns, in their order (csv is positional).
DDL = (
    "arrival_time timestamp, event_time timestamp, offset long, partition int, user_id string, amount double, "
    "event_id string"
)


def _pipeline(**source):
    return parse_pipeline(
        {
            "version": 1,
            "name": "src",
            "source": {
                "arrivalTime": "arrival_time",
                "arrivalOrder": ["offset"],
                "batch": {"interval": "1s"},
                "worker": "partition",
                **source,
            },
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "1h",
                    "keyExtractor": "user_id",
                    "timeConfig": {"eventTimeExtractor": "event_time", "delayWindowClose": "5s"},
                    "aggregateDefinition": [
                        {"type": "count"},
                        {"type": "sum", "column": "amount"},
                        {"type": "distinct", "column": "event_id"},
                    ],
                }
            },
        }
    )


def _rows(df):
    return sorted((tuple(r) for r in df.collect()), key=repr)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    base = tmp_path_factory.mktemp("sources")
    days = generate_history(base / "landing", START, days=2, events_per_day=800, keys=15, seed=9, files_per_day=2)
    return base, days


@pytest.fixture(scope="module")
def expected(spark, history):
    """Day 1 replayed from its Parquet folder: what every other source must give."""
    _, days = history
    pipeline = _pipeline()
    result = replay(spark, pipeline, read_events(spark, [str(days[0])], pipeline=pipeline))
    out = {name: _rows(getattr(result, name)) for name in ("aggregates", "late_events", "state")}
    result.unpersist()
    return out


@pytest.mark.parametrize("fmt", ["orc", "json", "csv"])
def test_other_formats_replay_to_the_same_output(spark, history, expected, tmp_path, fmt):
    _, days = history
    target = tmp_path / fmt
    events = spark.read.parquet(str(days[0]))
    writer = events.write.option("header", "true") if fmt == "csv" else events.write
    writer.format(fmt).save(str(target))
    options = {"header": True} if fmt == "csv" else {}
    pipeline = _pipeline(
        path=str(target),
        format=fmt,
        **({"schema": DDL} if fmt != "orc" else {}),
        **({"options": options} if options else {}),
    )
    result = replay(spark, pipeline, read_events(spark, pipeline=pipeline))  # the source from the YAML
    try:
        for name, rows in expected.items():
            assert _rows(getattr(result, name)) == rows, name
    finally:
        result.unpersist()


def test_an_empty_partition_takes_the_schema_its_ddl_names(spark, tmp_path):
    """No data files: zero events with exactly the columns and types of ``source.schema``
    (a DDL string, parsed by pyspark's public ``DataType.fromDDL``)."""
    (tmp_path / "empty").mkdir()
    pipeline = _pipeline(path=str(tmp_path / "empty"), format="csv", schema=DDL)
    df = read_events(spark, pipeline=pipeline)
    assert df.count() == 0
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("arrival_time", "timestamp"),
        ("event_time", "timestamp"),
        ("offset", "bigint"),
        ("partition", "int"),
        ("user_id", "string"),
        ("amount", "double"),
        ("event_id", "string"),
    ]


def test_csv_and_json_need_a_schema():
    with pytest.raises(Exception, match="source.schema: source.format csv needs an explicit schema"):
        _pipeline(path="x", format="csv")


def test_a_catalog_table_replays_to_the_same_output(spark, history, expected):
    _, days = history
    spark.read.parquet(str(days[0])).createOrReplaceTempView("rewindow_test_events")
    pipeline = _pipeline(table="rewindow_test_events")
    result = replay(spark, pipeline, read_events(spark, pipeline=pipeline))
    try:
        assert _rows(result.aggregates) == expected["aggregates"]
    finally:
        result.unpersist()


@pytest.mark.parametrize(
    "source, message",
    [
        ({"table": "no_such_table_here"}, r"source.table 'no_such_table_here': cannot read the table"),
        ({"path": "{base}", "format": "nosuchformat"}, r"source.format 'nosuchformat': Spark has no such data source"),
        ({"path": "{base}/nowhere"}, r"{base}/nowhere: input does not exist"),
        ({"path": "s3a://bucket/events"}, r"s3a://bucket/events: cannot reach it: .*s3a"),
    ],
)
def test_bad_locations_fail_before_any_work_naming_them(spark, history, source, message):
    base, _ = history
    source = {k: v.format(base=base) for k, v in source.items()}
    with pytest.raises(InputError, match=message.format(base=base)):
        read_events(spark, pipeline=_pipeline(**source))


def test_a_partition_reads_only_its_day_through_the_partition_column(spark, history):
    base, days = history
    day = START + timedelta(days=1)
    events, files = read_partition_events(
        spark, str(base / "landing"), day, day + timedelta(days=1), "arrival_time", pipeline=_pipeline()
    )
    assert [f.path.rsplit("/", 2)[-2] for f in files] == ["date=2024-06-02"] * len(files) and files
    assert "date" not in events.columns
    # Spark prunes the other day's files: the scan's files are the day's own.
    plan = events._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters" in plan and "2024-06-02" in plan.replace("19876", "2024-06-02")
    assert _rows(events) == _rows(spark.read.parquet(str(days[1])))


def test_without_a_partition_column_rows_are_chosen_by_arrival_time(spark, history, tmp_path):
    """A flat landing zone: each hour is the rows arriving in it; rows with a null arrival
    time go with the history's first partition (where the engine rejects them), once."""
    from pyspark.sql import functions as F

    _, days = history
    flat = tmp_path / "flat"
    all_events = spark.read.parquet(*map(str, days))
    nulls = all_events.limit(3).withColumn("arrival_time", F.lit(None).cast("timestamp"))
    all_events.unionByName(nulls).repartition(3).write.parquet(str(flat))
    hours = [START + timedelta(hours=h) for h in range(48)]
    counts = []
    for i, h in enumerate(hours):
        events, files = read_partition_events(
            spark, str(flat), h, h + timedelta(hours=1), "arrival_time", partition_column=None, unplaced=i == 0
        )
        assert files is None
        counts.append(events.count())
    assert sum(counts) == all_events.count() + 3  # every row in exactly one partition
    first, _ = read_partition_events(
        spark, str(flat), hours[0], hours[1], "arrival_time", partition_column=None, unplaced=True
    )
    assert first.where(F.col("arrival_time").isNull()).count() == 3


def test_the_landed_days_from_the_folders_or_the_arrival_times(spark, history, tmp_path):
    """What ``rewindow backfill`` replays without ``--from``: the ``date=`` folders, or in
    a flat landing zone every day from the earliest to the latest arrival."""
    base, days = history
    landed = landed_days(spark, str(base / "landing"), "arrival_time")
    assert landed == [(START + timedelta(days=i)).date() for i in range(len(days))]
    flat = tmp_path / "flat"
    spark.read.parquet(str(days[-1])).write.parquet(str(flat))
    last = (START + timedelta(days=len(days) - 1)).date()
    assert landed_days(spark, str(flat), "arrival_time", partition_column=None) == [last]


def test_a_missing_landing_zone_is_named(spark, tmp_path):
    with pytest.raises(LandingZoneError, match=f"landing zone {tmp_path / 'none'} holds no events"):
        read_partition_events(spark, str(tmp_path / "none"), START, START + timedelta(days=1), "arrival_time")


def test_parquet_is_read_with_the_schema_spark_infers_and_no_job_for_it(spark, tmp_path):
    """read_events gives Spark's reader the schema it would infer from the first file's
    footer (issue 29: a job fewer a partition): the same schema and rows as Spark's own
    inference, for files pyarrow wrote (unsigned, INT96, decimal, nested) and files Spark
    wrote (its recorded schema: char/varchar, timestamp without zone); with ``mergeSchema``
    on, Spark infers it as before."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    ts = datetime(2024, 1, 1, 12, 30)
    table = pa.table(
        {
            "a": pa.array([1, None], pa.int8()),
            "b": pa.array([1, 2], pa.uint32()),
            "tz": pa.array([ts, ts], pa.timestamp("ms", tz="UTC")),
            "dec": pa.array([decimal.Decimal("1.23"), None], pa.decimal128(10, 2)),
            "l": pa.array([[1], []], pa.list_(pa.int64())),
            "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int64())),
            "s": pa.array([{"x": 1}, {"x": None}]),
        }
    )
    (tmp_path / "pa").mkdir()
    pq.write_table(table, tmp_path / "pa" / "b.parquet")
    pq.write_table(table.slice(1), tmp_path / "pa" / "c.parquet")
    (tmp_path / "int96").mkdir()
    pq.write_table(pa.table({"ts": pa.array([ts], pa.timestamp("us"))}), tmp_path / "int96" / "x.parquet",
                   use_deprecated_int96_timestamps=True)  # fmt: skip
    spark.sql(
        "select cast('a' as char(3)) c, cast('b' as varchar(5)) v, 1 n, timestamp_ntz'2024-01-01 00:00:00' ntz"
    ).write.parquet(str(tmp_path / "spark"))
    sc = spark.sparkContext
    keys = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    for folder in ("pa", "int96", "spark"):
        path = str(tmp_path / folder)
        group = f"read-{folder}-{id(tmp_path)}"
        before = {k: sc.getLocalProperty(k) for k in keys}
        sc.setJobGroup(group, "read_events")
        try:
            df = read_events(spark, path)
        finally:
            for k, v in before.items():  # this thread's jobs as they were (setJobGroup sets all three)
                sc.setLocalProperty(k, v)  # None removes it
        assert list(sc.statusTracker().getJobIdsForGroup(group)) == [], folder
        inferred = spark.read.option("recursiveFileLookup", "true").parquet(path)
        assert df.schema == inferred.schema, folder
        assert sorted(map(str, df.collect())) == sorted(map(str, inferred.collect())), folder
    # mergeSchema: every file's columns, as Spark merges them (here: b.parquet has "b" only).
    (tmp_path / "merge").mkdir()
    pq.write_table(pa.table({"a": [1]}), tmp_path / "merge" / "a.parquet")
    pq.write_table(pa.table({"b": [2]}), tmp_path / "merge" / "b.parquet")
    spark.conf.set("spark.sql.parquet.mergeSchema", "true")
    try:
        assert read_events(spark, str(tmp_path / "merge")).columns == ["a", "b"]
    finally:
        spark.conf.unset("spark.sql.parquet.mergeSchema")
    assert read_events(spark, str(tmp_path / "merge")).columns == ["a"]


# --------------------------------------------------------------------------- hostile landing zones (issue 47)


def _landing_copy(history, tmp_path):
    import shutil

    base, _ = history
    return shutil.copytree(base / "landing", tmp_path / "landing")


@pytest.mark.parametrize("name", ["date=20240603", "date=2024-06-31", "date=June 3"])
def test_a_day_folder_not_named_as_a_day_is_refused_naming_it(spark, history, tmp_path, name):
    """Finding 7: ``date=20240603`` gave CAST_INVALID_INPUT (the cast to a date, under ANSI)."""
    import shutil

    landing = _landing_copy(history, tmp_path)
    shutil.copytree(landing / "date=2024-06-02", landing / name)
    message = f"{landing / name}: not a day folder of the landing zone: a day folder is named date=YYYY-MM-DD"
    with pytest.raises(InputError) as err:
        landed_days(spark, str(landing), "arrival_time")
    assert str(err.value).startswith(message), err.value
    day = START + timedelta(days=1)
    with pytest.raises(InputError, match="not a day folder"):  # a partition's read refuses it too
        read_partition_events(spark, str(landing), day, day + timedelta(days=1), "arrival_time", pipeline=_pipeline())


def test_twin_day_folders_are_refused_naming_both(spark, history, tmp_path):
    """Finding 8: ``date=2024-06-02`` and ``date=2024-6-2`` were read as one day, but only the
    first one's files passed the footer check."""
    import shutil

    landing = _landing_copy(history, tmp_path)
    shutil.copytree(landing / "date=2024-06-02", landing / "date=2024-6-2")
    message = f"{landing / 'date=2024-06-02'} and {landing / 'date=2024-6-2'}: two folders of the day 2024-06-02"
    with pytest.raises(InputError) as err:
        landed_days(spark, str(landing), "arrival_time")
    assert str(err.value).startswith(message), err.value
    day = START + timedelta(days=1)
    with pytest.raises(InputError, match="two folders of the day 2024-06-02"):
        read_partition_events(spark, str(landing), day, day + timedelta(days=1), "arrival_time", pipeline=_pipeline())


def test_the_day_folders_are_checked_once_a_run(spark, history, tmp_path, monkeypatch):
    """Review finding: every partition of a backfill listed the landing zone's top level
    again to check its day folders' names, though the run had checked them."""
    from windowing import landing as landing_module
    from windowing.landing import KnownSchemas

    landing = _landing_copy(history, tmp_path)
    calls = []
    checked = landing_module.check_day_folders
    monkeypatch.setattr(landing_module, "check_day_folders", lambda *a, **k: calls.append(a) or checked(*a, **k))
    known = KnownSchemas()
    for n in range(2):
        day = START + timedelta(days=n)
        read_partition_events(
            spark, str(landing), day, day + timedelta(days=1), "arrival_time", pipeline=_pipeline(), known=known
        )
    assert len(calls) == 1, calls


def test_files_holding_the_partition_column_the_pipeline_reads_are_named_as_such(spark, history, tmp_path):
    """Finding 9: data files that also hold ``date`` got "a column's type must not change
    between days", the wrong cause. A pipeline that does not read it replays as before."""
    import dataclasses

    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = _landing_copy(history, tmp_path)
    for f in landing.glob("date=*/*.parquet"):
        t = pq.read_table(f)
        pq.write_table(t.append_column("date", pa.array([f.parent.name[len("date=") :]] * t.num_rows)), f)
    plain = _pipeline()
    day = START + timedelta(days=1)
    events, _ = read_partition_events(spark, str(landing), day, day + timedelta(days=1), "arrival_time", pipeline=plain)
    assert events.count() == 800
    keyed = dataclasses.replace(plain, window=dataclasses.replace(plain.window, keys=("date",)))
    with pytest.raises(InputError) as err:
        read_partition_events(spark, str(landing), day, day + timedelta(days=1), "arrival_time", pipeline=keyed)
    msg = str(err.value)
    assert msg.startswith(
        f"{landing / 'date=2024-06-02'}: the data files hold a column 'date' (string), named like the partition "
        "column of the landing zone's date=YYYY-MM-DD folders, and the pipeline reads it"
    ), msg
    assert "Rename the column in the files" in msg and "must not change between days" not in msg


def test_a_stale_checksum_file_is_named_with_its_file_and_what_to_do(spark, history, tmp_path, monkeypatch, capsys):
    """Finding 10: a ``.crc`` left beside a rewritten file gave "cannot read it: An error
    occurred while calling o55.load." during a backfill; ``rewindow replay`` named the file."""
    import pyarrow.parquet as pq

    from windowing import cli, command_line
    from windowing.storage.local_files import crc_file, crc_path

    landing = _landing_copy(history, tmp_path)
    files = sorted(landing.glob("date=*/*.parquet"))
    for f in files:
        (landing / crc_path(str(f))).write_bytes(crc_file(f.read_bytes()))
        pq.write_table(pq.read_table(f).slice(1), f)  # rewritten: its checksums are stale
    with pytest.raises(InputError) as err:
        landed_days(spark, str(landing), "arrival_time")
    msg = str(err.value)
    assert msg.startswith(f"{files[0]}: does not match its checksum file {crc_path(str(files[0]))}"), msg
    assert "the .crc file is stale and can be deleted" in msg and "An error occurred" not in msg
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    config = tmp_path / "p.yaml"
    config.write_text((ROOT / "examples/pipelines/clicks-hourly.yaml").read_text())
    code = cli.main(["backfill", "--config", str(config), "--input", str(landing), "--output", str(tmp_path / "out")])
    err_text = capsys.readouterr().err
    assert code == 2 and f"rewindow: error: {files[0]}: does not match its checksum file" in err_text, err_text
    crc_path_ = Path(crc_path(str(files[0])))
    crc_path_.unlink()  # what the message says: the file is then read unchecked
    with pytest.raises(InputError, match=str(files[1])):
        landed_days(spark, str(landing), "arrival_time")
