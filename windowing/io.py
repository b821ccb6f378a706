"""Reading events and state, and writing a replay's outputs atomically.

Failure behaviour, which the data-quality tests (tests/quality/) pin down:

* A corrupted, truncated or empty Parquet file is an :class:`InputError` (or a
  :class:`StateError` for state) whose message starts with **that file's path**: every
  local data file's footer is opened with pyarrow before Spark reads it (a few KB per
  file, no data pages), because Spark only reads footers lazily and its errors name the
  folder or nothing.
* An empty partition (a folder without data files) is a success with zero rows, given
  a schema: ``schema=`` explicitly, or derived from the pipeline (and the carried
  state, which records the key and value column types). Files with zero rows carry
  their own schema and need nothing.
* :func:`write_outputs` holds an exclusive lock (``flock`` on ``.<out>.lock`` beside the
  output folder) for the whole write: two runs writing the same folder take turns.
  Outputs are written to a staging folder and swapped in with one atomic
  ``renameat2(RENAME_EXCHANGE)``: a run killed at any point leaves either the previous
  output or the new one, complete. Leftovers of killed runs (staging folders, a
  displaced previous output) are cleaned up or restored by the next write.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from types import SimpleNamespace

OUTPUTS = ("aggregates", "late_events", "rejected", "state")
#: Columns every state dataset has (kernel ``Spec.state_schema``).
STATE_REQUIRED_COLUMNS = ("state_kind", "fingerprint", "window_start_ms", "window_end_ms", "events")


class InputError(ValueError):
    """Events cannot be read. The message names the path (the file, when one is bad)."""


class StateError(ValueError):
    """Carried state is missing or unreadable. The message names the path."""


def _local(path: str | os.PathLike) -> Path:
    s = str(path)
    if "://" in s and not s.startswith("file://"):
        raise ValueError(f"{s}: only local paths are supported for atomic writes")
    return Path(s.removeprefix("file://"))


def _is_local(path) -> bool:
    s = str(path)
    return "://" not in s or s.startswith("file://")


# --------------------------------------------------------------------------- files


def _hidden(name: str) -> bool:
    # Spark's file index skips these too (_SUCCESS, .crc files, _temporary/ ...).
    return name.startswith(("_", "."))


def data_files(path: str | os.PathLike) -> list[Path]:
    """The files Spark reads under ``path`` (recursively, hidden names skipped), sorted."""
    p = _local(path)
    if p.is_file():
        return [p]
    out: list[Path] = []
    for root, dirs, files in os.walk(p):
        dirs[:] = sorted(d for d in dirs if not _hidden(d))
        out += [Path(root) / f for f in sorted(files) if not _hidden(f)]
    return out


def check_parquet_footers(files, error: type[ValueError] = InputError) -> int:
    """Open every file's Parquet footer; raise ``error`` naming the first bad file.

    Returns the total number of rows the footers declare. Cheap: pyarrow reads the
    footer only (the file's tail), never the data pages.
    """
    import pyarrow.parquet as pq

    rows = 0
    for f in files:
        try:
            rows += pq.ParquetFile(f).metadata.num_rows
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for bad files
            size = f.stat().st_size if f.exists() else None
            raise error(f"{f}: not a readable Parquet file ({size} bytes; corrupted or truncated?): "
                        f"{_first_line(exc)}") from exc
    return rows


_SPARK_PATH = re.compile(r"file:/*(/[^\s,;'\"\]\)]+)")


def _file_named_in(exc: BaseException, roots) -> Path | None:
    """A data file under ``roots`` that Spark's error message names, if any."""
    roots = [_local(r).resolve() for r in roots]
    for m in _SPARK_PATH.finditer(str(exc)):
        f = Path(m.group(1).rstrip(".:"))
        if f.is_file() and any(r == f or r in f.resolve().parents for r in roots):
            return f
    return None


def _root_cause(exc: BaseException) -> str:
    """The innermost ``Caused by:`` of a JVM error (its first line otherwise)."""
    causes = [ln.strip()[len("Caused by:"):].strip() for ln in str(exc).splitlines()
              if ln.strip().startswith("Caused by:")]
    return causes[-1][:300] if causes else _first_line(exc)


def input_error_from(exc: BaseException, inputs) -> InputError | None:
    """An :class:`InputError` naming the input file a Spark failure names, or None.

    Spark reads data pages lazily, at the first action: a file whose footer is fine but
    whose pages are damaged fails there, deep inside a job. Callers that run the replay
    (the CLI) turn such a failure into an error naming the file.
    """
    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    bad = _file_named_in(exc, [p for p in inputs if _is_local(p)])
    if bad is None:
        return None
    return InputError(f"{bad}: cannot read Parquet input: {_root_cause(exc)}")


# --------------------------------------------------------------------------- events


def read_events(spark, paths, schema=None, pipeline=None, state=None):
    """Read a Parquet dataset of events (a folder, nested folders, a file, or a list).

    Args:
        spark: the SparkSession.
        paths: one path or a list of them.
        schema: the events' schema (a ``StructType`` or DDL string), used when the
            dataset holds no data file at all (an empty partition).
        pipeline: without ``schema``, an empty partition gets a schema derived from the
            pipeline's columns (see :func:`empty_events_schema`), with the types the
            carried ``state`` records when it is given.
        state: the carried state DataFrame (only read for its column types).

    Raises:
        InputError: a path does not exist, a file is not readable Parquet (the message
            names the file), or the dataset is empty and no schema can be had.
    """
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise InputError("no input path given")
    for p in paths:
        if _is_local(p) and not _local(p).exists():
            raise InputError(f"{p}: input does not exist")
    local = [p for p in paths if _is_local(p)]
    files = [f for p in local for f in data_files(p)]
    check_parquet_footers(files, InputError)
    if len(local) == len(paths) and not files:
        if schema is None and pipeline is None:
            raise InputError(
                f"{', '.join(map(str, paths))}: no Parquet files (an empty partition); "
                "pass the events' schema or the pipeline to replay it as zero events"
            )
        return _empty_frame(spark, schema if schema is not None else empty_events_schema(pipeline, state))
    try:
        # recursiveFileLookup: folder names like date=... must not become columns,
        # or one day read alone would differ from the same day read with the others.
        df = spark.read.option("recursiveFileLookup", "true").parquet(*[str(p) for p in paths])
        df.schema  # noqa: B018 - resolve now, so a bad file fails here with its path
    except Exception as exc:  # Spark wraps everything in its own exception types
        bad = _file_named_in(exc, local)
        where = str(bad) if bad else ", ".join(map(str, paths))
        raise InputError(f"{where}: cannot read Parquet input: {_first_line(exc)}") from exc
    return df


def _empty_frame(spark, schema):
    from pyspark.sql import types as T

    if isinstance(schema, str):
        schema = T._parse_datatype_string(schema)
    return spark.createDataFrame([], schema)


def empty_events_schema(pipeline, state=None):
    """A Spark schema with the columns ``pipeline`` reads, for a partition without events.

    Times are timestamps, ``arrivalOrder`` and batch columns longs. Worker, key and
    aggregated columns take the type the carried ``state`` records for them (its key
    columns, and the partial-aggregate columns of min/max/first/last/distinct, which keep
    the value's type); otherwise strings (doubles for sum/avg). With no events the types
    only have to agree with the state the replay carries forward.
    """
    from pyspark.sql import types as T

    src, w = pipeline.source, pipeline.window
    state_types = {f.name: f.dataType for f in state.schema.fields} if state is not None else {}
    types: dict[str, T.DataType] = {}

    def put(col, dtype):
        if col and col not in types:
            types[col] = dtype

    put(src.arrival_time, T.TimestampType())
    put(w.event_time, T.TimestampType())
    for c in src.arrival_order:
        put(c, T.LongType())
    put(src.batch_column, T.LongType())
    for c in (src.worker, w.key):
        put(c, state_types.get(c, T.StringType()))
    for a in pipeline.aggregates:
        if a.column is None:
            continue
        partial = state_types.get(f"partial_{a.name}")
        if a.type in ("sum", "avg"):
            put(a.column, partial if isinstance(partial, (T.LongType, T.DoubleType)) else T.DoubleType())
        elif a.type == "distinct" and isinstance(partial, T.ArrayType):
            put(a.column, partial.elementType)
        elif a.type in ("min", "max", "first", "last") and partial is not None:
            put(a.column, partial)
    for a in pipeline.aggregates:
        put(a.column, T.StringType())
    return T.StructType([T.StructField(c, t, True) for c, t in types.items()])


# --------------------------------------------------------------------------- state


def read_state(spark, state_dir):
    """Read the state a previous replay wrote (``OUT_DIR/state``).

    Raises:
        StateError: the folder is missing, incomplete (no ``_SUCCESS``: an interrupted
            run), holds a file that is not readable Parquet (named), or is not a
            rewindow state.
    """
    p = _local(state_dir)
    if not p.is_dir():
        raise StateError(
            f"{state_dir}: no state here (the folder does not exist); replay the previous partition first"
        )
    if not (p / "_SUCCESS").exists():
        raise StateError(f"{state_dir}: no complete state here (missing _SUCCESS: from an interrupted run?)")
    check_parquet_footers(data_files(p), StateError)
    try:
        df = spark.read.parquet(str(p))
        df.schema  # noqa: B018
    except Exception as exc:
        bad = _file_named_in(exc, [p])
        raise StateError(f"{bad or state_dir}: state is unreadable: {_first_line(exc)}") from exc
    missing = [c for c in STATE_REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise StateError(f"{state_dir}: not a rewindow state (missing columns {', '.join(missing)})")
    return df


def read_outputs(spark, out_dir):
    """A replay's written outputs: ``aggregates``, ``late_events``, ``rejected``, ``state``
    DataFrames and ``metrics`` (a dict, or None without ``metrics.json``)."""
    out = _local(out_dir)
    if not out.is_dir():
        raise InputError(f"{out_dir}: no replay output here")
    frames = {}
    for name in OUTPUTS:
        folder = out / name
        if not (folder / "_SUCCESS").exists():
            raise InputError(f"{folder}: missing or incomplete output")
        check_parquet_footers(data_files(folder), InputError)
        frames[name] = spark.read.parquet(str(folder))
    metrics_file = out / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else None
    return SimpleNamespace(**frames, metrics=metrics, path=out)


# --------------------------------------------------------------------------- writing


def lock_path(out_dir) -> Path:
    """The lock file guarding ``out_dir``: ``.<name>.lock`` beside it (never deleted)."""
    out = _local(out_dir)
    return out.parent / f".{out.name}.lock"


@contextlib.contextmanager
def output_lock(out_dir):
    """Hold the exclusive lock of ``out_dir`` (blocks while another writer holds it).

    ``flock`` locks die with their process, so a killed writer never leaves a stale lock.
    """
    path = lock_path(out_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        os.close(fd)  # releases the lock


def write_outputs(result, out_dir) -> dict:
    """Write ``aggregates/ late_events/ rejected/ state/ metrics.json`` under ``out_dir``.

    Holds :func:`output_lock` throughout. Everything is written to a staging folder next
    to ``out_dir`` and swapped in atomically: a rerun replaces the previous output
    exactly, and a crash or kill part-way leaves the previous output untouched.

    Raises:
        InputError: Spark failed reading an input file while computing the outputs (the
            message names the file when Spark's error does).
    """
    out = _local(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    with output_lock(out):
        _recover(out)
        tag = uuid.uuid4().hex[:8]
        staging = out.parent / f".{out.name}.staging-{tag}"
        try:
            files = getattr(result, "files", None) or {}
            for name in OUTPUTS:
                if name in files and _is_local(files[name]):
                    # The kernel tasks already wrote these parts: copying files is enough.
                    shutil.copytree(files[name], staging / name)
                    (staging / name / "_SUCCESS").touch()
                    continue
                try:
                    getattr(result, name).write.mode("error").parquet(str(staging / name))
                except Exception as exc:  # a damaged input page surfaces here, at the first action
                    bad = _file_named_in(exc, ["/"]) if "FAILED_READ_FILE" in str(exc) else None
                    if bad is not None and staging not in bad.parents:
                        raise InputError(f"{bad}: cannot read Parquet input: {_root_cause(exc)}") from exc
                    raise
            (staging / "metrics.json").write_text(json.dumps(result.metrics, indent=2, sort_keys=True) + "\n")
            _swap(staging, out)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return result.metrics


def _leftovers(out: Path, kind: str) -> list[Path]:
    return sorted(out.parent.glob(f".{glob_escape(out.name)}.{kind}-*"))


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _recover(out: Path) -> None:
    """Undo what a killed writer left (called under the lock, so no writer is running)."""
    old = _leftovers(out, "old")
    if not out.exists() and old:
        os.rename(old[-1], out)  # killed between the two renames of the fallback swap
        old = old[:-1]
    for p in old + _leftovers(out, "staging"):
        shutil.rmtree(p, ignore_errors=True)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux ``renameat2``); False when unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap(staging: Path, out: Path) -> None:
    if not out.exists():
        os.rename(staging, out)
        return
    if _exchange(staging, out):
        shutil.rmtree(staging, ignore_errors=True)  # now holds the previous output
        return
    # No atomic exchange here: two renames; _recover() repairs a kill between them.
    old = out.parent / f".{out.name}.old-{staging.name.rsplit('-', 1)[-1]}"
    os.rename(out, old)
    try:
        os.rename(staging, out)
    except BaseException:
        if old.exists() and not out.exists():
            os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    """The first informative line of an error (py4j puts "An error occurred ..." first)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("An error occurred while calling", "JVM stacktrace")):
            return ln[:500]
    return lines[0][:500] if lines else type(exc).__name__
