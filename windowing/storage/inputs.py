"""Reading events, on any filesystem Spark reaches, and checking them before any work.

Every data path is a string: a local folder or any URI Spark reads (``file:``,
``s3a:``, ``gs:``, ``abfss:``, ``hdfs:``, ``viewfs:``). Data goes through Spark's
readers only; the few other filesystem operations go through
:class:`windowing.storage.lake.Lake` (Hadoop's API), never Python file I/O.

**Input failures.** A path that does not exist, a missing catalog table and an unknown
data source are :class:`~windowing.storage.errors.InputError` naming them, before any
work. For Parquet, every file's footer is read (Hadoop's Parquet reader; no data pages):
a file that is not Parquet, and a file lacking a configured column or holding it with
another type than the other files, is named, with the column. An empty partition (no
data files) is zero events with a schema derived from the pipeline (and the carried
state's types).

**Every file once.** On the driver's own disk, symbolic links are resolved before Spark
reads (:func:`read_once`): a file reached by two paths is read once, by its real path, with
a warning naming both; a link loop, or a link out of its input path, is an
:class:`~windowing.storage.errors.InputError` naming the link and where it points. An upload
in progress (``._COPYING_``) is skipped, as Spark's readers skip it.
"""

from __future__ import annotations

import logging
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Collection, Iterable, Iterator, Mapping, Sequence, cast

import pyarrow.dataset as pads
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.config import check_input_columns
from windowing.contract import quoted
from windowing.storage.errors import InputError, first_line, missing_path, root_cause
from windowing.storage.lake import Lake, PathArg, display, glob_escape, is_connect, local_path, qualify
from windowing.storage.local_files import LinkError, Tree, crc_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructType

    from windowing.config import Pipeline, Source


log = logging.getLogger("rewindow.inputs")

#: For DataFrames read here from Parquet files, at most how many rows each holds: its files'
#: rows, from the footers read to check them (a view of some of their rows, as a landing
#: zone's hour of a day's files, is noted with all of them). The kernel stage of a small
#: input is planned from it, without a Spark job counting its rows per worker
#: (:func:`windowing.runner.placement.hashed_plan`). A DataFrame made from one of these
#: (filtered, joined) is not noted: it is counted.
_ROWS_AT_MOST: weakref.WeakKeyDictionary[DataFrame, int] = weakref.WeakKeyDictionary()


def note_rows_at_most(df: DataFrame, rows: int | None) -> DataFrame:
    """Note that ``df`` holds at most ``rows`` rows (None: not known); returns ``df``."""
    if rows is not None:
        _ROWS_AT_MOST[df] = rows
    return df


def rows_at_most(df: DataFrame) -> int | None:
    """At most how many rows ``df`` holds, when it was read here (:func:`note_rows_at_most`)."""
    return _ROWS_AT_MOST.get(df)


def read_events(
    spark: SparkSession,
    paths: Any = None,  # one path or URI, or an iterable of them
    schema: StructType | str | None = None,
    pipeline: Pipeline | None = None,
    state: DataFrame | None = None,
) -> DataFrame:
    """Read events: the given paths, else the pipeline's ``source.path`` or ``source.table``.

    Args:
        spark: the SparkSession (classic or Spark Connect).
        paths: one path/URI or a list of them; None reads the pipeline's source.
        schema: the events' schema (a ``StructType`` or DDL string), used when the
            dataset holds no data file at all (an empty partition).
        pipeline: gives the source's format, schema and options; without ``schema``,
            an empty partition gets a schema derived from the pipeline's columns (see
            :func:`empty_events_schema`), with the types ``state`` records.
        state: the carried state DataFrame (only read for its column types).

    Raises:
        InputError: a path, the table or the format does not exist, a file is not
            readable (named), a file lacks a configured column or holds it with another
            type (file and column named), or the dataset is empty and no schema can be had.
    """
    src = pipeline.source if pipeline is not None else None
    fmt = src.format if src else "parquet"
    if paths is None:
        if src is not None and src.table:
            return _read_table(spark, src.table)
        if src is None or not src.path:
            raise InputError("no input given: pass input paths, or set source.path or source.table in the pipeline")
        paths = [src.path]
    paths = [paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") else list(paths)
    paths = [str(p) for p in paths]
    if not paths:
        raise InputError("no input path given")
    lake = Lake(spark)
    for p in paths:
        try:
            found = lake.exists(p)
        except Exception as exc:  # e.g. no FileSystem for the scheme (a missing jar)
            raise InputError(f"{p}: cannot reach it: {root_cause(exc)}") from exc
        if not found:
            raise InputError(f"{p}: input does not exist")
    files, load = read_once(lake, paths)
    footers = None
    if fmt == "parquet":
        # Every footer first: Spark infers the schema from one file and reads pages lazily,
        # so a damaged or foreign file would otherwise fail later, or unnamed.
        footers = read_footers(lake, files, InputError)
        if not footers:
            return _empty_events(spark, paths, schema, pipeline, state)
    reader = _reader(spark, src, recursive=True)
    nanos = nanos_columns(footers or {})
    if footers and _infers_from_one_file(spark, src):
        # The schema Spark would infer from the first file (by path, as its file index
        # sorts them), read here from the footer: Spark runs a job for it otherwise.
        first = min(footers)
        if nanos_columns({first: footers[first]}):
            with nanos_as_long(spark):  # a converter of its own, made under the setting
                reader = reader.schema(Lake(spark).parquet_schema(first))
        else:
            reader = reader.schema(lake.parquet_schema(first))
    try:
        try:
            # Each path exists as written (checked above): escaped, Spark reads exactly it.
            df = reader.load([glob_escape(p) for p in load])
            df.schema  # noqa: B018 - resolve now: a bad path or format fails here, naming it
        except Exception as exc:
            if not (nanos and refuses_nanos(exc)):
                raise
            with nanos_as_long(spark):  # Spark infers the schema itself (mergeSchema, say)
                df = reader.load([glob_escape(p) for p in load])
                df.schema  # noqa: B018
    except Exception as exc:  # Spark wraps everything in its own exception types
        if "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return _empty_events(spark, paths, schema, pipeline, state)
        raise _read_error(exc, fmt, paths) from exc
    if footers:
        # Columns missing from the whole input are the engine's to report (naming the YAML
        # field); here, a column some files have and others lack, or hold as another type.
        check_columns(footers, pipeline, InputError, only=set(df.columns))
        df = times_from_nanos(df, nanos)  # nanosecond timestamps, read as integers, as times
        note_rows_at_most(df, lake.rows_in(footers))
    return df


def read_once(lake: Lake, paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(files, load)``: the data files under ``paths`` (:meth:`Lake.files`), each once, and
    what to give Spark's reader so that it reads each of them once: ``paths`` themselves,
    unless a symbolic link below one of them leads to files read already (Spark's readers
    follow links), or two paths hold the same file. Then the link-free folders and files
    that hold each file once (:meth:`Lake.tree`), and a warning names both paths of each
    such file. A link loop, or a link out of its input path, is an :class:`InputError`
    naming the link and where it points, before any work."""
    files: list[str] = []
    load: list[str] = []
    seen: dict[str, str] = {}  # where each file really is -> the path it is read as
    for p in paths:
        try:
            tree = lake.tree(p)
        except LinkError as exc:
            raise InputError(f"{p}: {exc}") from exc
        if tree is None:  # not on the driver's disk: no links Spark follows
            listed = [(e.path, e.path) for e in lake.files(p)]
            roots = [p]
        else:
            note_tree(tree)
            listed = [("file:" + f, "file:" + tree.real(f)) for f, _, _ in tree.files]
            roots = tree.roots if tree.linked else [p]
        again = [(f, seen[real]) for f, real in listed if real in seen]
        for f, first in again:
            log.warning(
                f"{display(f)} is {display(first)} (also under another input path): read once, as {display(first)}"
            )
        fresh = [(f, real) for f, real in listed if real not in seen]
        files.extend(f for f, _ in fresh)
        load.extend(roots if not again else [f for f, _ in fresh])
        seen.update((real, f) for f, real in fresh)
    return files, load


def note_tree(tree: Tree) -> None:
    """Log what :func:`windowing.storage.local_files.walk` found that a reader should know:
    each symbolic link and the path its files are read as, uploads in progress (skipped, as
    Spark's readers skip them), links to nothing."""
    for link, real in tree.aliases:
        log.warning(f"{link} is a symbolic link to {real}: read once, as {real} (not again through the link)")
    for f in tree.skipped:
        log.warning(f"{f}: an upload in progress (._COPYING_), skipped as Spark's readers skip it")
    for link, target in tree.dangling:
        log.warning(f"{link} is a symbolic link to {target}, which does not exist: skipped")


# --------------------------------------------------------------------------- nanosecond timestamps

#: Spark's setting that reads Parquet ``TIMESTAMP(NANOS)`` columns as their integers
#: (bigint nanoseconds); without it Spark refuses the file (``PARQUET_TYPE_ILLEGAL``).
#: Only Spark's schema inference needs it: given a schema with bigint for such a column,
#: its readers read the integers whatever the setting.
NANOS_AS_LONG = "spark.sql.legacy.parquet.nanosAsLong"
#: How a Parquet footer describes a nanosecond timestamp column (``INT64
#: (TIMESTAMP(NANOS,true))``: adjusted to UTC; ``false``: a local date-time, pandas' default).
_NANOS = "TIMESTAMP(NANOS,"


@contextmanager
def nanos_as_long(spark: SparkSession) -> Iterator[None]:
    """:data:`NANOS_AS_LONG` on for the block (a schema inferred in it has bigint for the
    nanosecond columns), then as it was."""
    before = spark.conf.get(NANOS_AS_LONG, None)
    spark.conf.set(NANOS_AS_LONG, "true")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(NANOS_AS_LONG)
        else:
            spark.conf.set(NANOS_AS_LONG, before)


def refuses_nanos(exc: BaseException) -> bool:
    """Whether ``exc`` is Spark refusing to infer a schema with a ``TIMESTAMP(NANOS)`` column."""
    return "PARQUET_TYPE_ILLEGAL" in str(exc) and "NANOS" in str(exc)


def nanos_columns(footers: Mapping[str, Mapping[str, str]]) -> dict[str, bool]:
    """The top-level columns that some file of ``footers`` (:func:`read_footers`) stores as
    Parquet ``TIMESTAMP(NANOS)``: name -> whether adjusted to UTC."""
    out: dict[str, bool] = {}
    for cols in footers.values():
        for c, t in cols.items():
            if _NANOS in t:
                out.setdefault(c, f"{_NANOS}true)" in t)
    return out


def times_from_nanos(df: DataFrame, nanos: Mapping[str, bool]) -> DataFrame:
    """``df`` with each column of ``nanos`` (:func:`nanos_columns`) that Spark read as its
    bigint nanoseconds turned into the time it is: a ``timestamp`` when adjusted to UTC, a
    ``timestamp_ntz`` otherwise (as Spark reads micro- and millisecond Parquet timestamps).
    Exact: nanoseconds are floor-divided into microseconds in 64-bit integers (every int64
    nanosecond time, 1677 to 2262, is a Spark timestamp); the engine then floors them to
    milliseconds as every timestamp's (docs/semantics.md section 1), so a time is floored
    to the millisecond, before 1970 too."""
    types = {f.name: f.dataType for f in df.schema.fields}
    for c, utc in nanos.items():
        if not isinstance(types.get(c), T.LongType):
            continue
        n = quoted(c)
        micros = f"(({n}) div 1000 - if(({n}) % 1000 < 0, 1, 0))"  # floor; no overflow at the int64 ends
        as_time = (
            F.expr(f"timestamp_micros({micros})")
            if utc
            else F.expr(f"timestampadd(MICROSECOND, {micros}, TIMESTAMP_NTZ'1970-01-01 00:00:00')")
        )
        df = df.withColumn(c, as_time)
    return df


def nanos_error(footers: Mapping[str, Mapping[str, str]], nanos: Mapping[str, bool]) -> InputError:
    """Spark could not read a nanosecond timestamp column here: the first file and column."""
    f, c = next((f, c) for f, cols in footers.items() for c in cols if c in nanos)
    return InputError(
        f"{display(f)}: column {c!r} is a Parquet {footers[f][c]} (nanosecond) timestamp, which Spark "
        f"cannot read here (it reads one given its schema, or with {NANOS_AS_LONG}=true as integers); "
        "rewrite it with microsecond or millisecond timestamps"
    )


def _infers_from_one_file(spark: SparkSession, src: Source | None) -> bool:
    """Whether Spark's Parquet reader would infer the input's schema from one file's footer:
    a classic session, no schema given, ``mergeSchema`` off (the option and the setting)."""
    if is_connect(spark) or (src is not None and src.schema):
        return False
    options = {k.lower(): str(v) for k, v in (src.options if src else ())}
    merge = options.get("mergeschema", spark.conf.get("spark.sql.parquet.mergeSchema", "false"))
    return str(merge).strip().lower() != "true"


def _reader(spark: SparkSession, src: Source | None, recursive: bool) -> DataFrameReader:
    reader = spark.read.format(src.format if src else "parquet")
    if src is not None and src.schema:
        reader = reader.schema(src.schema)
    for k, v in src.options if src else ():
        reader = reader.option(k, v)
    if recursive:
        # Folder names like date=... must not become columns, or one day read alone would
        # differ from the same day read with the others.
        reader = reader.option("recursiveFileLookup", "true")
    return reader


def _read_table(spark: SparkSession, table: str) -> DataFrame:
    try:
        df = spark.read.table(table)
        df.schema  # noqa: B018
        return df
    except Exception as exc:
        raise InputError(f"source.table {table!r}: cannot read the table: {first_line(exc)}") from exc


def _read_error(exc: BaseException, fmt: str, paths: Sequence[str]) -> InputError:
    text = str(exc)
    if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
        return InputError(f"source.format {fmt!r}: Spark has no such data source (is its package on the classpath?)")
    if missing_path(exc):
        return InputError(f"{', '.join(paths)}: input does not exist ({first_line(exc)})")
    return InputError(f"{', '.join(paths)}: cannot read {fmt} input: {first_line(exc)}")


def _empty_events(
    spark: SparkSession,
    paths: Sequence[str],
    schema: StructType | str | None,
    pipeline: Pipeline | None,
    state: DataFrame | None,
) -> DataFrame:
    if schema is None and pipeline is None:
        raise InputError(
            f"{', '.join(paths)}: no data files (an empty partition); "
            "pass the events' schema or the pipeline to replay it as zero events"
        )
    if schema is None:
        assert pipeline is not None  # refused above when both are None
        schema = pipeline.source.schema or empty_events_schema(pipeline, state)
    return _empty_frame(spark, schema)


#: Footers read at once from a store other than the local filesystem (:func:`read_footers`):
#: there each footer is a round trip (tens of milliseconds to an object store), and a day
#: of a topic with many partitions has many files. Local footers are read one at a time:
#: each is the driver's own short work, no faster in threads (docs/architecture.md).
FOOTER_THREADS = 8


def read_footers(lake: Lake, files: Iterable[str], error: type[ValueError] = InputError) -> dict[str, dict[str, str]]:
    """Every file's top-level columns and types, from its Parquet footer (never data pages),
    :data:`FOOTER_THREADS` files at a time off the local filesystem; raises ``error``
    naming the first file, in the order given, that is not readable Parquet."""
    files = list(files)
    remote = any(qualify(f).split(":", 1)[0] != "file" for f in files)

    def columns(f: str) -> dict[str, str] | BaseException:
        try:
            return lake.parquet_columns(f)
        except Exception as exc:  # noqa: BLE001 - Hadoop/Spark raise many types for bad files
            return exc

    if remote and len(files) > 1:
        with ThreadPoolExecutor(max_workers=min(FOOTER_THREADS, len(files))) as pool:
            results: Iterable[dict[str, str] | BaseException] = list(pool.map(columns, files))
    else:
        results = map(columns, files)  # lazily: one at a time, none read after a bad one
    footers: dict[str, dict[str, str]] = {}
    for f, got in zip(files, results):
        if isinstance(got, BaseException) and "ChecksumException" in str(got):
            raise error(
                f"{display(f)}: does not match its checksum file {display(crc_path(f))} "
                "(Hadoop's ChecksumException): a file rewritten after Spark or Hadoop wrote it leaves that "
                "checksum stale; if the file was rewritten on purpose, the .crc file is stale and can be deleted "
                "(Hadoop reads a file without one unchecked), else the file is damaged: write it again"
            ) from got
        if isinstance(got, BaseException):
            raise error(
                f"{display(f)}: not a readable Parquet file (corrupted, truncated or another format?): "
                f"{root_cause(got)}"
            ) from got
        footers[f] = got
    return footers


def check_columns(
    footers: dict[str, dict[str, str]],
    pipeline: Pipeline | None,
    error: type[ValueError] = InputError,
    only: Collection[str] | None = None,
) -> None:
    """Raise ``error`` naming the first file that lacks a column the pipeline reads, or holds
    it with another type than the first file that has it (only columns in ``only``, if given)."""
    wanted = [c for c in (pipeline.input_columns if pipeline is not None else ()) if only is None or c in only]
    seen: dict[str, tuple[str, str]] = {}
    for f, cols in footers.items():
        for c in wanted:
            if c not in cols:
                raise error(f"{display(f)}: column {c!r} is missing from this file (it has {', '.join(sorted(cols))})")
            if c in seen and seen[c][0] != cols[c]:
                raise error(f"{display(f)}: column {c!r} is {cols[c]} here but {seen[c][0]} in {display(seen[c][1])}")
            seen.setdefault(c, (cols[c], f))


def check_parquet_files(
    lake: Lake,
    files: Iterable[str],
    pipeline: Pipeline | None = None,
    error: type[ValueError] = InputError,
    only: Collection[str] | None = None,
) -> dict[str, dict[str, str]]:
    """:func:`read_footers` then :func:`check_columns`; returns the footers."""
    footers = read_footers(lake, files, error)
    check_columns(footers, pipeline, error, only)
    return footers


def check_input_schema(pipeline: Pipeline, paths: Sequence[PathArg]) -> None:
    """Refuse local Parquet input that lacks a column ``pipeline`` reads, before Spark starts.

    A pre-flight look, the one place that reads data files without Spark: pyarrow reads
    the footers of the Parquet files under the local ``paths`` (names starting with ``_``
    or ``.`` skipped, as Spark does) and :func:`windowing.config.check_input_columns`
    judges the union of their columns, raising its ``ConfigError``. Everything else is
    left to the same check after Spark's schema read (:func:`windowing.runner.replay.replay`): another format,
    a catalog table, a URI (``s3a:``, ``hdfs:``, ...) whose filesystem and credentials are
    Spark's (``spark.hadoop.*``), a file pyarrow cannot read, no files at all.
    """
    if pipeline.source.format != "parquet" or not paths:
        return
    names = _local_parquet_columns([str(p) for p in paths])
    if names is not None:
        check_input_columns(pipeline, names)


def _local_parquet_columns(paths: list[str]) -> set[str] | None:
    """Top-level column names of the Parquet files under local ``paths``; None when any
    path is not local or pyarrow cannot read it."""
    local = []
    for p in paths:
        path = local_path(p)
        if path is None:
            return None
        local.append(path)
    names: set[str] = set()
    try:
        for path in local:
            for fragment in pads.dataset(path, format="parquet").get_fragments():
                names.update(fragment.physical_schema.names)
    except Exception:  # noqa: BLE001 - not readable here: Spark's reader names the problem
        return None
    return names or None


def _empty_frame(spark: SparkSession, schema: StructType | str) -> DataFrame:
    # A DDL column list ("a string, b long") parses to a StructType (pyspark's public parser,
    # the session's own: the same types and errors as Spark's readers give such a schema).
    struct = cast("StructType", T.DataType.fromDDL(schema)) if isinstance(schema, str) else schema
    return spark.createDataFrame([], struct)


def empty_events_schema(pipeline: Pipeline, state: DataFrame | None = None) -> StructType:
    """A Spark schema with the columns ``pipeline`` reads, for a partition without events.

    Times are timestamps, ``arrivalOrder`` and batch columns longs. Worker, key and
    aggregated columns take the type the carried ``state`` records for them (its key
    columns, and the partial-aggregate columns of min/max/first/last/distinct, which keep
    the value's type; a decimal(P, s) partial sum gives that decimal type if one of these
    keeps it, else decimal(P - 10, s), or decimal(38, s) when P is 38, which sums to the
    same type); otherwise strings (doubles for sum/avg). With no events the types only
    have to agree with the state the replay carries forward.
    """
    src, w = pipeline.source, pipeline.window
    state_types = {f.name: f.dataType for f in state.schema.fields} if state is not None else {}
    types: dict[str, T.DataType] = {}

    def put(col: str | None, dtype: T.DataType) -> None:
        if col and col not in types:
            types[col] = dtype

    put(src.arrival_time, T.TimestampType())
    put(w.event_time, T.TimestampType())
    for c in src.arrival_order:
        put(c, T.LongType())
    put(src.batch_column, T.LongType())
    for id_column in (src.worker, *w.keys):
        put(id_column, state_types.get(id_column, T.StringType()) if id_column else T.StringType())
    for a in pipeline.aggregates:
        if a.column is None:
            continue
        partial = state_types.get(f"partial_{a.name}")
        if a.type in ("sum", "avg"):
            if isinstance(partial, T.DecimalType):  # the sum of decimal(p, s) is decimal(min(38, p + 10), s)
                kept = [
                    state_types.get(f"partial_{b.name}")
                    for b in pipeline.aggregates
                    if b.column == a.column and b.type in ("min", "max", "first", "last", "distinct")
                ]
                kept = [t.elementType if isinstance(t, T.ArrayType) else t for t in kept]
                exact = next((t for t in kept if isinstance(t, T.DecimalType)), None)
                p = partial.precision - 10 if partial.precision < 38 else 38
                put(a.column, exact or T.DecimalType(p, partial.scale))
                continue
            put(a.column, partial if isinstance(partial, (T.LongType, T.DoubleType)) else T.DoubleType())
        elif a.type in ("stddev_pop", "stddev_samp", "percentile"):  # partials independent of the column's type
            put(a.column, T.DoubleType())
        elif a.type == "distinct" and isinstance(partial, T.ArrayType):
            put(a.column, partial.elementType)
        elif a.type in ("min", "max", "first", "last") and partial is not None:
            put(a.column, partial)
    for a in pipeline.aggregates:
        put(a.column, T.StringType())
    return T.StructType([T.StructField(c, t, True) for c, t in types.items()])
