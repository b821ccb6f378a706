"""Reading events and state, and committing a replay's outputs, on any filesystem Spark reaches.

Every data path is a string: a local folder or any URI Spark reads (``file:``,
``s3a:``, ``gs:``, ``abfss:``, ``hdfs:``, ``viewfs:``). Data goes through Spark's
readers and writers only; the few other filesystem operations go through
:class:`windowing.lake.Lake` (Hadoop's API), never Python file I/O.

Output layout (one *output* = one replay target, e.g. one partition)::

    OUT/runs/<run id>/aggregates/ late_events/ rejected/ state/ metrics.json/ metrics.prom/
    OUT/_commits/<seq>-<run id>/part-*.json      one commit record per committed run

**Commit.** A replay writes into a run folder of its own, then writes one small commit
record (a single JSON object, written last by Spark's committer). Readers — ``rewindow
verify``, the next partition, the Dagster assets — take the record that sorts last
(highest sequence number, then run id) and read that run, so they see the previous
complete output or the new complete output, never a mix or a part, on object stores
as on local disks. A run killed at any moment leaves no record, so the previous output
stays current and a rerun gives the same rows. The last :data:`KEEP_RUNS` committed
runs are kept for rollback and comparison (:func:`list_commits`); older runs and
abandoned run folders are deleted where the session can delete (not over Spark Connect).

**Concurrent runs of one output** do not lock each other out: both write complete run
folders and both commit; the record that sorts last wins as a whole. Each run takes
sequence number (greatest seen + 1), so a run that commits after another has seen it
sorts after it; two runs that read the same greatest number tie and the later run id
(its start time) wins. Either way the current output is exactly one run's.

**Output targets.** A replay writes only where rewindow's own layout is, or nothing is:
an existing target holding anything else (``thesis.tex``, ``src/``, the events) is
refused, naming what is there, and so is an output that is an input or inside one, or
holds one. Nothing is ever deleted outside ``OUT/runs`` and ``OUT/_commits``.

**Input failures.** A path that does not exist, a missing catalog table and an unknown
data source are :class:`InputError` naming them, before any work. For Parquet, every
file's footer is read (Hadoop's Parquet reader; no data pages): a file that is not
Parquet, and a file lacking a configured column or holding it with another type than
the other files, is named, with the column. An empty partition (no data files) is
zero events with a schema derived from the pipeline (and the carried state's types).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, Sequence, cast
from urllib.parse import unquote

import pyarrow.dataset as pads
from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing import manifest
from windowing.config import check_input_columns
from windowing.contract import OUTPUTS, STATE_REQUIRED_COLUMNS
from windowing.lake import Lake, display, glob_escape, inside, join, qualify
from windowing.metrics import ReplayMetrics, render_prometheus
from windowing.records import RECORD_FOLDER, DamagedCommitError, DamagedRecord, is_run_id, record_problem, run_started

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, Row, SparkSession
    from pyspark.sql.types import StructType

    from windowing.config import Pipeline, Source
    from windowing.engine import ReplayResult

#: A folder or URI as callers give it (made a string before use).
PathArg = str | os.PathLike[str]

RUNS = "runs"
COMMITS = "_commits"
#: Records of runs that were staged but not committed (windowing.chain: blocking checks failed).
FAILURES = "_failures"
METRICS = "metrics.json"
#: The metrics' ``voltsp`` block in Prometheus' text format (windowing.metrics.render_prometheus).
PROMETHEUS = "metrics.prom"
#: Committed runs kept per output (the current one and the four before it).
KEEP_RUNS = 5
#: Uncommitted run folders older than this are abandoned (their run was killed).
ABANDONED_AFTER_S = 6 * 3600
COMMIT_SCHEMA = (
    "seq long, run_id string, run string, committed_at string, pipeline string, fingerprint string, "
    "metrics string, extra string"
)


class InputError(ValueError):
    """Events cannot be read. The message names the path (the file, when one is bad)."""


class StateError(ValueError):
    """Carried state is missing or unreadable. The message names the path."""


class OutputError(ValueError):
    """The output target cannot be written. The message names the path."""


# --------------------------------------------------------------------------- errors


def _first_line(exc: BaseException) -> str:
    """The first informative line of an error (py4j puts "An error occurred ..." first)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("An error occurred while calling", "JVM stacktrace")):
            return ln[:500]
    return lines[0][:500] if lines else type(exc).__name__


def _root_cause(exc: BaseException) -> str:
    """The innermost ``Caused by:`` of a JVM error (its first line otherwise)."""
    causes = [
        ln.strip()[len("Caused by:") :].strip() for ln in str(exc).splitlines() if ln.strip().startswith("Caused by:")
    ]
    return causes[-1][:300] if causes else _first_line(exc)


def _path_part(uri: str) -> str:
    return re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?", "", uri)


def file_named_in(exc: BaseException, files: Iterable[str]) -> str | None:
    """The one of ``files`` (URIs) that Spark's error message names, if any."""
    text = str(exc)
    for f in sorted(files, key=len, reverse=True):
        if f in text or (_path_part(f) and _path_part(f) in text):
            return f
    return None


def input_error_from(exc: BaseException, files: Iterable[str]) -> InputError | None:
    """An :class:`InputError` naming the input file a Spark failure names, or None.

    Spark reads data pages lazily, at the first action: a file whose footer is fine but
    whose pages are damaged fails there, deep inside a job.
    """
    bad = file_named_in(exc, files)
    if bad is None:
        return None
    return InputError(f"{display(bad)}: cannot read Parquet input: {_root_cause(exc)}")


def _missing_path(exc: BaseException) -> bool:
    return "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc)


# --------------------------------------------------------------------------- events


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
            raise InputError(f"{p}: cannot reach it: {_root_cause(exc)}") from exc
        if not found:
            raise InputError(f"{p}: input does not exist")
    footers = None
    if fmt == "parquet":
        # Every footer first: Spark infers the schema from one file and reads pages lazily,
        # so a damaged or foreign file would otherwise fail later, or unnamed.
        footers = read_footers(lake, [e.path for p in paths for e in lake.files(p)], InputError)
        if not footers:
            return _empty_events(spark, paths, schema, pipeline, state)
    reader = _reader(spark, src, recursive=True)
    try:
        # Each path exists as written (checked above): escaped, Spark reads exactly it.
        df = reader.load([glob_escape(p) for p in paths])
        df.schema  # noqa: B018 - resolve now: a bad path or format fails here, naming it
    except Exception as exc:  # Spark wraps everything in its own exception types
        if "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return _empty_events(spark, paths, schema, pipeline, state)
        raise _read_error(exc, fmt, paths) from exc
    if footers:
        # Columns missing from the whole input are the engine's to report (naming the YAML
        # field); here, a column some files have and others lack, or hold as another type.
        check_columns(footers, pipeline, InputError, only=set(df.columns))
    return df


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
        raise InputError(f"source.table {table!r}: cannot read the table: {_first_line(exc)}") from exc


def _read_error(exc: BaseException, fmt: str, paths: Sequence[str]) -> InputError:
    text = str(exc)
    if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
        return InputError(f"source.format {fmt!r}: Spark has no such data source (is its package on the classpath?)")
    if _missing_path(exc):
        return InputError(f"{', '.join(paths)}: input does not exist ({_first_line(exc)})")
    return InputError(f"{', '.join(paths)}: cannot read {fmt} input: {_first_line(exc)}")


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


def read_footers(lake: Lake, files: Iterable[str], error: type[ValueError] = InputError) -> dict[str, dict[str, str]]:
    """Every file's top-level columns and types, from its Parquet footer (never data pages);
    raises ``error`` naming the first file that is not readable Parquet."""
    footers: dict[str, dict[str, str]] = {}
    for f in files:
        try:
            footers[f] = lake.parquet_columns(f)
        except Exception as exc:  # Hadoop/Spark raise many types for bad files
            raise error(
                f"{display(f)}: not a readable Parquet file (corrupted, truncated or another format?): "
                f"{_root_cause(exc)}"
            ) from exc
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
) -> None:
    """:func:`read_footers` then :func:`check_columns`."""
    check_columns(read_footers(lake, files, error), pipeline, error, only)


def check_input_schema(pipeline: Pipeline, paths: Sequence[PathArg]) -> None:
    """Refuse local Parquet input that lacks a column ``pipeline`` reads, before Spark starts.

    A pre-flight look, the one place that reads data files without Spark: pyarrow reads
    the footers of the Parquet files under the local ``paths`` (names starting with ``_``
    or ``.`` skipped, as Spark does) and :func:`windowing.config.check_input_columns`
    judges the union of their columns, raising its ``ConfigError``. Everything else is
    left to the same check after Spark's schema read (``engine.replay``): another format,
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
        uri = qualify(p)
        if not uri.startswith("file:/") or uri.startswith("file://"):
            return None
        local.append(uri[len("file:") :])
    names: set[str] = set()
    try:
        for path in local:
            for fragment in pads.dataset(path, format="parquet").get_fragments():
                names.update(fragment.physical_schema.names)
    except Exception:  # noqa: BLE001 - not readable here: Spark's reader names the problem
        return None
    return names or None


def _empty_frame(spark: SparkSession, schema: StructType | str) -> DataFrame:
    # A DDL column list ("a string, b long") parses to a StructType.
    struct = cast("StructType", T._parse_datatype_string(schema)) if isinstance(schema, str) else schema
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
    for id_column in (src.worker, w.key):
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


# --------------------------------------------------------------------------- commits


@dataclass(frozen=True)
class Commit:
    """One commit record: which run of an output is (or was) current, and its figures.

    ``metrics`` is the record's JSON as stored: a replay's metrics
    (``windowing.metrics.ReplayMetrics.from_dict`` reads them), or the figures of another
    analysis written to the same kind of output (lateness, reconcile)."""

    seq: int
    run_id: str
    run: str  # the run folder, relative to the output
    committed_at: str
    pipeline: str
    fingerprint: str
    metrics: dict[str, Any]
    extra: dict[str, Any]
    output: str  # the output this record belongs to

    @property
    def run_path(self) -> str:
        return join(self.output, self.run)

    @property
    def order(self) -> tuple[int, str]:
        return (self.seq, self.run_id)


def list_commits(spark: SparkSession, out: PathArg) -> list[Commit]:
    """Every commit record of the output ``out``, oldest first; [] when none.

    Raises:
        DamagedCommitError: the record that sorts last is damaged (truncated, unparseable,
            or naming a run folder that is not its own under ``out/runs/``): the message
            names its file and how to recover (:mod:`windowing.records`).
    """
    out = str(out)
    commits, damaged = read_records(spark, out)
    blocking = _blocking(commits, damaged)
    if blocking is not None:
        raise DamagedCommitError(blocking.message(out))
    return commits


def read_records(spark: SparkSession, out: str) -> tuple[list[Commit], list[DamagedRecord]]:
    """``(the trusted commit records of out, oldest first; the damaged ones)``: every record
    is checked (:func:`windowing.records.record_problem`), none is followed unchecked."""
    try:
        rows = (
            spark.read.schema(COMMIT_SCHEMA)
            .json(join(glob_escape(out), COMMITS, "*"))
            .withColumn("__file", F.input_file_name())
            .collect()
        )
    except Exception as exc:
        if _missing_path(exc):
            return [], []
        raise OutputError(f"{join(out, COMMITS)}: commit records are unreadable: {_first_line(exc)}") from exc
    by_folder: dict[str, list[Row]] = {}
    for r in rows:
        by_folder.setdefault(_record_folder(r["__file"]), []).append(r)
    return _judge(by_folder, out)


def _judge(by_folder: Mapping[str, list[Row]], out: str) -> tuple[list[Commit], list[DamagedRecord]]:
    """The records of one output, by record folder: ``(trusted commits, oldest first; damaged)``."""
    commits, damaged = [], []
    for folder, found in sorted(by_folder.items()):
        problem = "holds more than one record" if len(found) > 1 else record_problem(folder, found[0].asDict(), RUNS)
        if problem is None:
            commits.append(_commit_of(found[0], out))
        else:
            damaged.append(DamagedRecord(unquote(found[0]["__file"]), folder, problem))
    return sorted(commits, key=lambda c: c.order), damaged


def _record_folder(file: str) -> str:
    """The folder name (``<seq>-<run id>``) of a record file Spark listed (a URI, %-quoted)."""
    return unquote(file.rsplit("/", 2)[-2])


def _blocking(commits: Sequence[Commit], damaged: Sequence[DamagedRecord]) -> DamagedRecord | None:
    """The damaged record that sorts after every trusted one, if any: it may have been the
    current record, so the output's current run is unknown. (A damaged record older than
    the current one changes nothing and is swept by :func:`prune`.)"""
    newest = f"{commits[-1].seq:010d}-{commits[-1].run_id}" if commits else ""
    later = [d for d in damaged if d.folder > newest]
    return later[-1] if later else None


def _commit_of(r: Row, output: str) -> Commit:
    """A :class:`Commit` from a commit record row (JSON fields parsed; checked by the caller)."""
    return Commit(
        seq=r["seq"],
        run_id=r["run_id"],
        run=r["run"],
        committed_at=r["committed_at"],
        pipeline=r["pipeline"],
        fingerprint=r["fingerprint"],
        metrics=json.loads(r["metrics"] or "null") or {},
        extra=json.loads(r["extra"] or "null") or {},
        output=output,
    )


def current_commits_under(spark: SparkSession, root: PathArg) -> dict[str, Commit]:
    """The current commit of every output directly under ``root`` (``root/<name>/``),
    by name, in one read (e.g. every partition of a pipeline). An output whose newest
    record is damaged is left out (see :func:`commits_under`)."""
    return commits_under(spark, root)[0]


def commits_under(spark: SparkSession, root: PathArg) -> tuple[dict[str, Commit], dict[str, DamagedRecord]]:
    """``(current commit by output name, the damaged newest record by output name)`` of every
    output directly under ``root``, in one read. An output is in one of the two at most."""
    root = str(root)
    try:
        rows = (
            spark.read.schema(COMMIT_SCHEMA)
            .json(join(glob_escape(root), "*", COMMITS, "*"))
            .withColumn("__file", F.input_file_name())
            .collect()
        )
    except Exception as exc:
        if _missing_path(exc):
            return {}, {}
        raise OutputError(f"{root}: commit records are unreadable: {_first_line(exc)}") from exc
    grouped: dict[str, dict[str, list[Row]]] = {}
    for r in rows:
        name = unquote(r["__file"].split(f"/{COMMITS}/", 1)[0].rstrip("/").rsplit("/", 1)[-1])
        grouped.setdefault(name, {}).setdefault(_record_folder(r["__file"]), []).append(r)
    best: dict[str, Commit] = {}
    broken: dict[str, DamagedRecord] = {}
    for name, folders in grouped.items():
        commits, damaged = _judge(folders, join(root, name))
        blocking = _blocking(commits, damaged)
        if blocking is not None:
            broken[name] = blocking
        elif commits:
            best[name] = commits[-1]
    return best, broken


def current_commit(spark: SparkSession, out: PathArg) -> Commit | None:
    """The commit record that names ``out``'s current run, or None before the first commit."""
    commits = list_commits(spark, out)
    return commits[-1] if commits else None


def _new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%fZ}-{uuid.uuid4().hex[:8]}"


def check_output_target(spark: SparkSession, out: PathArg, inputs: Iterable[PathArg] = ()) -> None:
    """Refuse, before any work, an output that is not rewindow's to write (module docstring).

    Raises:
        OutputError: ``out`` is an input, inside one or holds one; or it exists and
            holds something other than rewindow's ``runs/`` and ``_commits/``.
    """
    out = str(out)
    for p in inputs or ():
        if inside(out, str(p)) or inside(str(p), out):
            raise OutputError(
                f"{out}: the output is the input {p} or overlaps it; choose an output folder outside the events"
            )
    lake = Lake(spark)
    if lake.connect:
        foreign = [e for e in lake.files(out) if not inside(e.path, join(qualify(out), RUNS))]
    else:
        if lake.exists(out) and lake.is_file(out):
            raise OutputError(f"{out}: is a file, not an output folder")
        ours = (RUNS, COMMITS, FAILURES)
        foreign = [e for e in lake.children(out) if e.path.rstrip("/").rsplit("/", 1)[-1] not in ours]
    if foreign:
        raise OutputError(
            f"{out}: exists and is not a rewindow output (it holds {display(foreign[0].path)}); "
            "rewindow replaces only what it wrote: choose an empty or new folder"
        )
    # A write probe: a read-only target fails now, not after the replay. What the probe
    # created is removed again if still empty, so a refused run leaves nothing behind.
    created: list[str] = []  # the folders the probe will create: out and its missing parents, deepest first
    parent = out.rstrip("/")
    while not lake.connect and parent and not lake.exists(parent):
        rest = parent.split("://", 1)[-1].strip("/")
        if "/" not in rest and "://" in parent:
            break  # a bucket or a host's root: never created by the probe
        created.append(parent)
        if "/" not in rest:
            break  # the first folder of a relative path (``out``)
        parent = parent.rsplit("/", 1)[0]
    try:
        made = lake.connect or lake.mkdirs(join(out, RUNS)) or lake.exists(join(out, RUNS))
        why = "the filesystem refused to create a folder (read-only? no permission?)"
    except Exception as exc:  # noqa: BLE001 - Hadoop's AccessControlException, IOException, ...
        made, why = False, _root_cause(exc)
    if not made:
        raise OutputError(f"{out}: cannot write here: {why}")
    if created and lake.delete_if_empty(join(out, RUNS)):
        for folder in created:
            if not lake.delete_if_empty(folder):
                break


@dataclass
class Staged:
    """A run's outputs, written and complete but not yet current (see :func:`stage_outputs`)."""

    spark: SparkSession
    output: str
    run_id: str
    metrics: dict[str, Any]
    pipeline: str
    fingerprint: str
    #: The state's manifest (windowing.manifest), recorded in the commit record; None
    #: for outputs without a state (lateness, reconcile).
    state_manifest: dict[str, Any] | None = None
    #: The written datasets' schemas, as Spark reads them back (every field nullable): the
    #: staged outputs are read with them, with no schema inference (a Spark job each).
    schemas: dict[str, StructType] | None = None
    #: :func:`windowing.manifest.content_hash` of the whole written state (computed with
    #: the manifest's, in the same job); None when not computed.
    state_hash: str | None = None

    @property
    def run(self) -> str:
        return f"{RUNS}/{self.run_id}"

    @property
    def path(self) -> str:
        return join(self.output, self.run)

    def read(self) -> SimpleNamespace:
        """The staged outputs, as :func:`read_outputs` returns them (read with the schemas
        they were written with, when known)."""
        return read_run(self.spark, self.path, self.schemas)

    def commit(self, extra: dict[str, Any] | None = None, keep: Collection[str] = ()) -> Commit:
        """Make this run the output's current one: write its commit record (last).
        ``keep``: run ids pruning must not delete (runs a catalog table points at)."""
        # After every record, a damaged one too (its folder name orders it): this commit
        # supersedes it, which is the way out of a damaged newest record.
        previous, damaged = read_records(self.spark, self.output)
        seq = max([c.seq for c in previous] + [d.seq or 0 for d in damaged] + [0]) + 1
        committed_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        record = {
            "seq": seq,
            "run_id": self.run_id,
            "run": self.run,
            "committed_at": committed_at,
            "pipeline": self.pipeline,
            "fingerprint": self.fingerprint,
            "metrics": json.dumps(self.metrics, sort_keys=True),
            "extra": json.dumps(self._extra(extra), sort_keys=True, default=str),
        }
        target = join(self.output, COMMITS, f"{seq:010d}-{self.run_id}")
        lake = Lake(self.spark)
        try:
            if lake.connect:  # no JVM here: Spark's JSON writer
                (self.spark.createDataFrame([record], COMMIT_SCHEMA).coalesce(1).write.mode("error").json(target))
            else:  # the line Spark's JSON writer writes for this row, from the driver (no job)
                lake.put_text_dataset(target, record_json_line(record), "json")
        except Exception as exc:
            raise OutputError(f"{target}: cannot write the commit record: {_root_cause(exc)}") from exc
        commit = Commit(
            seq=seq,
            run_id=self.run_id,
            run=self.run,
            committed_at=committed_at,
            pipeline=self.pipeline,
            fingerprint=self.fingerprint,
            metrics=self.metrics,
            extra=self._extra(extra),
            output=self.output,
        )
        # The records as they now are: those read above and this one (pruning reads no more).
        prune(self.spark, self.output, keep, records=([*previous, commit], damaged))
        return commit

    def _extra(self, extra: dict[str, Any] | None) -> dict[str, Any]:
        if self.state_manifest is None:
            return dict(extra or {})
        return {**(extra or {}), manifest.RECORD_KEY: self.state_manifest}


#: The commit record's fields in :data:`COMMIT_SCHEMA`'s order (Spark's JSON writer's order).
_COMMIT_FIELDS = tuple(f.strip().split(" ", 1)[0] for f in COMMIT_SCHEMA.split(","))
#: How Spark's JSON writer (Jackson) escapes a character in a string: the two-character
#: escapes, other control characters as ``\u00XX`` (upper-case hex); nothing else.
_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
    **{chr(i): f"\\u{i:04X}" for i in range(0x20) if chr(i) not in "\b\t\n\f\r"},
}
_JSON_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def record_json_line(record: Mapping[str, Any]) -> str:
    """A commit record as the line Spark's JSON writer writes for it as a
    :data:`COMMIT_SCHEMA` row: fields in the schema's order, null ones left out, no
    spaces, strings escaped as Jackson escapes them, then a newline."""
    parts = []
    for name in _COMMIT_FIELDS:
        value = record.get(name)
        if value is None:
            continue
        if isinstance(value, str):
            value = '"' + _JSON_ESCAPE.sub(lambda m: _JSON_ESCAPES[m.group(0)], value) + '"'
        else:
            value = str(int(value))
        parts.append(f'"{name}":{value}')
    return "{" + ",".join(parts) + "}\n"


def stage_outputs(
    result: ReplayResult | SimpleNamespace,
    out_dir: PathArg,
    pipeline: Pipeline | None = None,
    inputs: Iterable[PathArg] = (),
) -> Staged:
    """Write a replay's outputs into a new run folder of ``out_dir`` (not yet current).

    Spark's own writer writes ``aggregates/ late_events/ rejected/ state/``,
    ``metrics.json/`` (a one-line JSON dataset) and ``metrics.prom/`` (one text file:
    VoltSP's window metrics in Prometheus' exposition format). Raises :class:`OutputError` naming the
    path when the target is refused or a write fails, :class:`InputError` when Spark
    fails reading an input file while computing the outputs (the file named).
    """
    out = str(out_dir)
    spark = result.aggregates.sparkSession
    check_output_target(spark, out, inputs)
    # The JSON form, as metrics.json and the commit record store it (outputs read back
    # with read_outputs carry it as stored: a dict).
    m = result.metrics
    metrics = m.to_dict() if isinstance(m, ReplayMetrics) else dict(m)
    staged = Staged(
        spark,
        out,
        _new_run_id(),
        metrics,
        pipeline.name if pipeline is not None else str(metrics.get("pipeline")),
        pipeline.fingerprint() if pipeline is not None else "",
    )
    files = list(getattr(result, "input_files", ()) or ())
    frames = {name: getattr(result, name) for name in OUTPUTS}
    write_datasets(staged, frames, files=files)
    # The two small text datasets, from the driver (no Spark job): the bytes Spark's text
    # writer wrote for them, one line of JSON and the Prometheus text (one file each).
    texts = {
        METRICS: json.dumps(metrics, indent=None, sort_keys=True) + "\n",
        PROMETHEUS: render_prometheus(metrics).removesuffix("\n") + "\n",
    }
    lake = Lake(spark)
    for name, text in texts.items():
        target = join(staged.path, name)
        try:
            lake.put_text_dataset(target, text)
        except Exception as exc:  # Spark/Hadoop raise many types
            raise OutputError(f"{target}: cannot write: {_root_cause(exc)}") from exc
    staged.schemas = {name: nullable(frames[name].schema) for name in OUTPUTS}
    try:
        written, staged.state_hash = manifest.write_state_manifest(
            spark, join(staged.path, "state"), staged.schemas["state"]
        )
    except Exception as exc:  # Spark/Hadoop raise many types
        raise OutputError(
            f"{join(staged.path, 'state', manifest.MANIFEST)}: cannot write the state manifest: {_root_cause(exc)}"
        ) from exc
    staged.state_manifest = written.to_dict()
    return staged


def nullable(schema: StructType) -> StructType:
    """``schema`` with every field, array element and map value nullable: the schema Spark
    reads back from the Parquet files it wrote a DataFrame of ``schema`` to."""

    def of(t: T.DataType) -> T.DataType:
        if isinstance(t, T.StructType):
            return T.StructType([T.StructField(f.name, of(f.dataType), True, f.metadata) for f in t.fields])
        if isinstance(t, T.ArrayType):
            return T.ArrayType(of(t.elementType), True)
        if isinstance(t, T.MapType):
            return T.MapType(of(t.keyType), of(t.valueType), True)
        return t

    return cast("StructType", of(schema))


def write_datasets(
    staged: Staged,
    frames: Mapping[str, DataFrame],
    text: Collection[str] = (),
    files: Collection[str] = (),
    workers: int | None = None,
) -> None:
    """Write each DataFrame of ``frames`` into the staged run as the dataset of its name:
    Parquet, or Spark text for the names in ``text`` (one-row JSON or text files).

    The datasets are independent Spark jobs, run side by side (``workers`` at a time, all
    by default), so that the small ones do not wait for each other's start-up. Raises
    :class:`OutputError` naming the dataset's path, or the :class:`InputError` naming an
    input file of ``files`` that Spark failed to read while computing one (a damaged data
    page surfaces here, at the first action).
    """

    def write(name: str) -> None:
        target = join(staged.path, name)
        try:
            writer = frames[name].write.mode("error")
            writer.text(target) if name in text else writer.parquet(target)
        except Exception as exc:  # Spark/Hadoop raise many types
            err = input_error_from(exc, files) if files else None
            if err is not None:
                raise err from exc
            raise OutputError(f"{target}: cannot write: {_root_cause(exc)}") from exc

    with ThreadPoolExecutor(max_workers=workers or len(frames)) as pool:
        futures = [pool.submit(write, name) for name in frames]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]


def write_outputs(
    result: ReplayResult | SimpleNamespace,
    out_dir: PathArg,
    pipeline: Pipeline | None = None,
    inputs: Iterable[PathArg] = (),
    extra: dict[str, Any] | None = None,
) -> ReplayMetrics | dict[str, Any]:
    """Write a replay's outputs under ``out_dir`` and make them current (stage, then commit).

    Returns the metrics (``result.metrics``: a :class:`~windowing.metrics.ReplayMetrics`,
    or the stored dict of outputs read back with :func:`read_outputs`). A rerun makes a
    new run current with the same rows; a crash or kill part-way leaves the previous
    output current. See the module docstring.
    """
    staged = stage_outputs(result, out_dir, pipeline=pipeline, inputs=inputs)
    staged.commit(extra)
    return result.metrics


def prune(
    spark: SparkSession,
    out: str,
    keep: Collection[str] = (),
    records: tuple[list[Commit], list[DamagedRecord]] | None = None,
) -> list[str]:
    """Delete runs beyond the last :data:`KEEP_RUNS` committed, abandoned run folders,
    damaged records older than the current one, and commit folders a killed commit left
    without a record (``_commits/<seq>-<run id>/_temporary/``) once abandoned; never the
    runs of ``keep`` (run ids: the runs catalog tables point at, see :mod:`windowing.catalog`).

    Only what rewindow made is deleted: folders directly under ``out/runs/`` and
    ``out/_commits/`` whose names are its run ids and record folders
    (:mod:`windowing.records`); a record's ``run`` is never followed unchecked. Returns
    what was deleted. A no-op where the session cannot delete (Spark Connect).

    ``records``: the output's records as :func:`read_records` returns them, when the
    caller has them (a commit: those it read, and its own); else they are read.
    """
    lake = Lake(spark)
    if lake.connect:
        return []
    commits, damaged = records if records is not None else read_records(spark, out)
    keep_runs: list[str] = []
    for c in reversed(commits):
        if c.run_id not in keep_runs:
            keep_runs.append(c.run_id)
        if len(keep_runs) == KEEP_RUNS:
            break
    deleted: list[str] = []
    for c in commits:
        if c.run_id not in keep_runs and c.run_id not in keep and is_run_id(c.run_id):
            for p in (join(out, COMMITS, f"{c.seq:010d}-{c.run_id}"), join(out, RUNS, c.run_id)):
                if lake.delete(p):
                    deleted.append(p)
    if commits and _blocking(commits, damaged) is None:
        for d in damaged:  # all older than the current record: superseded
            if RECORD_FOLDER.fullmatch(d.folder) and lake.delete(d.folder_path(out)):
                deleted.append(d.folder_path(out))
    committed = {c.run_id for c in commits}
    seen = {f"{c.seq:010d}-{c.run_id}" for c in commits} | {d.folder for d in damaged}
    now = datetime.now(timezone.utc)
    for parent, in_use in ((RUNS, committed), (COMMITS, seen)):
        for e in lake.children(join(out, parent)):
            name = e.path.rstrip("/").rsplit("/", 1)[-1]
            started = run_started(name)
            if started is None or not e.is_dir or name in in_use:
                continue
            if (now - started).total_seconds() > ABANDONED_AFTER_S and lake.delete(e.path):
                deleted.append(e.path)
    return deleted


# --------------------------------------------------------------------------- reading


def read_run(spark: SparkSession, run_path: str, schemas: Mapping[str, StructType] | None = None) -> SimpleNamespace:
    """The outputs of one run folder: ``aggregates``, ``late_events``, ``rejected``,
    ``state`` DataFrames and ``metrics`` (a dict, or None without ``metrics.json``).
    ``schemas``: the outputs' schemas when known (a run just written: :attr:`Staged.schemas`),
    else Spark infers each from a file.

    ``metrics`` is ``metrics.json`` as stored, not a :class:`~windowing.metrics.ReplayMetrics`:
    the checks verify what the file holds (a key missing is a finding, not a default);
    ``ReplayMetrics.from_dict`` reads it as figures."""
    lake = Lake(spark)
    frames: dict[str, DataFrame] = {}
    for name in OUTPUTS:
        folder = join(run_path, name)
        if not lake.exists(join(folder, "_SUCCESS")):
            raise InputError(f"{folder}: missing or incomplete output")
        files = [e.path for e in lake.files(folder)]
        if not files:
            raise InputError(f"{folder}: the output holds no data file (not even an empty one): it was damaged")
        check_parquet_files(lake, files, None, InputError)
        reader = spark.read.schema(schemas[name]) if schemas and name in schemas else spark.read
        frames[name] = reader.parquet(glob_escape(folder))
    return SimpleNamespace(**frames, metrics=_read_metrics(spark, lake, join(run_path, METRICS)), path=run_path)


def _read_metrics(spark: SparkSession, lake: Lake, path: str) -> dict[str, Any] | None:
    if not lake.exists(path):
        return None
    try:
        metrics = json.loads(_text_lines(spark, lake, path))
    except Exception as exc:  # json or Spark errors
        raise InputError(f"{path}: not readable metrics JSON: {_first_line(exc)}") from exc
    if not isinstance(metrics, dict):
        raise InputError(f"{path}: not readable metrics JSON: expected an object")
    return metrics


def _text_lines(spark: SparkSession, lake: Lake, path: str) -> str:
    """The lines of a text dataset (or file), joined by newlines, as Spark's text reader
    reads them: on a classic session from the driver through Hadoop (no Spark job), each
    data file in name order; over Spark Connect by Spark's reader."""
    if lake.connect:
        return "\n".join(r[0] for r in spark.read.text(glob_escape(path)).collect())
    lines: list[str] = []
    for f in lake.files(path):
        text = lake.read_text(f.path)
        if not text:
            continue
        # Lines end at \n, \r or \r\n (Hadoop's line reader); the last one may not end.
        end = 2 if text.endswith("\r\n") else 1 if text.endswith(("\n", "\r")) else 0
        lines += re.split(r"\r\n|\r|\n", text[: len(text) - end])
    return "\n".join(lines)


def run_is_whole(spark: SparkSession, commit: Commit) -> bool:
    """Whether the run a commit record names is still there: every output with its ``_SUCCESS``."""
    lake = Lake(spark)
    return all(lake.exists(join(commit.run_path, name, "_SUCCESS")) for name in OUTPUTS)


def orphaned_message(commit: Commit) -> str:
    """The error for a commit record whose run folder (or part of it) is gone."""
    record = join(commit.output, COMMITS, f"{commit.seq:010d}-{commit.run_id}")
    return (
        f"{display(record)}: the current commit record names run {commit.run}, but "
        f"{display(commit.run_path)} is gone or incomplete (an output or its _SUCCESS is missing): "
        "the output is damaged. Replay into it again (a new record supersedes this one), "
        "or delete this record to make the run before it current"
    )


def read_outputs(spark: SparkSession, out_dir: PathArg) -> SimpleNamespace:
    """The current outputs of ``out_dir`` (through its last commit record), as
    :func:`read_run` returns them plus ``commit``.

    ``out_dir`` may also be a run folder (``OUT/runs/<id>``), read as it is.
    """
    out = str(out_dir)
    commit = current_commit(spark, out)
    if commit is None:
        if Lake(spark).exists(join(out, "aggregates", "_SUCCESS")):
            return SimpleNamespace(**vars(read_run(spark, out)), commit=None)
        raise InputError(f"{out_dir}: no replay output here (nothing committed under {COMMITS}/)")
    outputs = read_run(spark, commit.run_path) if run_is_whole(spark, commit) else None
    if outputs is None:
        raise InputError(orphaned_message(commit))
    if outputs.metrics is None:
        outputs.metrics = commit.metrics
    return SimpleNamespace(**vars(outputs), commit=commit)


def _check_state_parts(lake: Lake, files: Iterable[str]) -> None:
    """Every state part is readable Parquet with the same columns of the same types.

    Spark takes a dataset's schema from one file (or the schema it stored in it), so a
    part lacking a column would be read as nulls, or fail far from here; a part whose
    column has another type, likewise. Footers only, each read once.
    """
    first: tuple[str, dict[str, str]] | None = None
    for f in files:
        try:
            cols = lake.parquet_columns(f)
        except Exception as exc:  # pyarrow/Hadoop raise many types for bad files
            raise StateError(
                f"{display(f)}: not a readable Parquet file (corrupted or truncated?): {_root_cause(exc)}"
            ) from exc
        if first is None:
            first = (f, cols)
            continue
        ref_file, ref = first
        for lacking, other, gone in (
            (f, ref_file, [c for c in ref if c not in cols]),
            (ref_file, f, [c for c in cols if c not in ref]),
        ):
            if gone:
                raise StateError(
                    f"{display(lacking)}: state column {gone[0]!r} is missing from this part "
                    f"({display(other)} has it): damaged state"
                )
        for c, t in cols.items():
            if ref[c] != t:
                raise StateError(f"{display(f)}: state column {c!r} is {t} here but {ref[c]} in {display(ref_file)}")


def check_manifest(spark: SparkSession, folder: str, commit: Commit | None, state_dir: PathArg) -> None:
    """Refuse a state folder whose parts disagree with its manifest (:mod:`windowing.manifest`),
    naming the run and the part, before any work (footers only)."""
    try:
        stored = manifest.stored_manifest(spark, folder, commit.extra if commit is not None else None)
    except ValueError as exc:
        raise StateError(f"{state_dir}: damaged state: {exc}") from None
    if stored is None:
        return  # a state written before manifests: read as before
    try:
        problem = manifest.manifest_problem(Lake(spark), folder, stored)
    except ValueError as exc:  # a part that is not readable Parquet
        raise StateError(f"{state_dir}: damaged state: {exc}") from exc
    if problem is not None:
        run = f"run {commit.run_id} of {display(commit.output)}" if commit is not None else display(folder)
        raise StateError(
            f"{state_dir}: damaged state of {run}: {problem}. It would lose the windows it held open: "
            "rerun the partition that wrote it (rewindow backfill ... --rerun-from DAY, or the replay "
            "with the same input)"
        )


def read_state(spark: SparkSession, state_dir: PathArg) -> DataFrame:
    """Read the state a previous replay wrote.

    ``state_dir`` is a replay output (its current run's state is read), that output's
    ``state`` folder (``OUT/state``, the same), or a plain state dataset folder.
    Whether the state fits a pipeline and its inputs is checked when a replay starts
    from it (``engine._split_state``).

    Raises:
        StateError: nothing is there, the dataset is incomplete (no ``_SUCCESS``: an
            interrupted run), holds a file that is not readable Parquet (named), parts
            that disagree on a column or its type (part and column named), or is not a
            rewindow state.
    """
    path = str(state_dir).rstrip("/")
    lake = Lake(spark)
    commit = current_commit(spark, path)
    if commit is None and path.rsplit("/", 1)[-1] == "state":
        commit = current_commit(spark, path.rsplit("/", 1)[0])
    if commit is not None and commit.extra.get("kind"):
        raise StateError(
            f"{state_dir}: this is a `rewindow {commit.extra['kind']}` output, not a replay's: it holds no state "
            "to continue from; pass the previous partition's `rewindow replay --output` folder"
        )
    folder = join(commit.run_path, "state") if commit is not None else path
    if not lake.exists(folder):
        raise StateError(f"{state_dir}: no state here (the folder does not exist); replay the previous partition first")
    if not lake.exists(join(folder, "_SUCCESS")):
        raise StateError(f"{state_dir}: no complete state here (missing _SUCCESS: from an interrupted run?)")
    files = [e.path for e in lake.files(folder)]
    _check_state_parts(lake, files)  # every part readable first (named), then all of them there
    check_manifest(spark, folder, commit, state_dir)
    try:
        df = spark.read.parquet(glob_escape(folder))
        df.schema  # noqa: B018
    except Exception as exc:
        bad = file_named_in(exc, files)
        raise StateError(f"{display(bad) if bad else state_dir}: state is unreadable: {_first_line(exc)}") from exc
    missing = [c for c in STATE_REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise StateError(f"{state_dir}: not a rewindow state (missing columns {', '.join(missing)})")
    return df
