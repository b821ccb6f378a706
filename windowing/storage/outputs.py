"""A replay's outputs written into a run folder and committed, and read back.

A replay writes only where rewindow's own layout is (:mod:`windowing.storage.commits`), or
nothing is: an existing target holding anything else (``thesis.tex``, ``src/``, the
events) is refused, naming what is there, and so is an output that is an input or inside
one, or holds one (:func:`check_output_target`). Nothing is ever deleted outside
``OUT/runs`` and ``OUT/_commits``. :func:`stage_outputs` writes a run's datasets with
Spark's writer (any filesystem, any cluster), :meth:`Staged.commit` makes the run current;
:func:`write_outputs` does both. :func:`read_outputs` reads an output's current run back
(:class:`ReplayOutputs`), :func:`read_state` its state for the next partition, checked
against its manifest (:mod:`windowing.storage.manifest`).
"""

from __future__ import annotations

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, cast

from pyspark.sql import types as T
from pyspark.util import inheritable_thread_target

from windowing.contract import OUTPUTS, STATE_REQUIRED_COLUMNS
from windowing.metrics import ReplayMetrics, render_prometheus
from windowing.storage import manifest
from windowing.storage.commits import (
    COMMIT_SCHEMA,
    COMMITS,
    FAILURES,
    RUNS,
    Commit,
    current_commit,
    new_run_id,
    orphaned_message,
    prune,
    read_records,
    record_json_line,
    run_is_whole,
)
from windowing.storage.errors import (
    InputError,
    OutputError,
    StateError,
    file_named_in,
    first_line,
    input_error_from,
    root_cause,
)
from windowing.storage.inputs import check_parquet_files
from windowing.storage.lake import Lake, PathArg, display, glob_escape, inside, is_connect, join, qualify

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from windowing.config import Pipeline

METRICS = "metrics.json"
#: The metrics' ``voltsp`` block in Prometheus' text format (windowing.metrics.render_prometheus).
PROMETHEUS = "metrics.prom"


@dataclass(frozen=True, eq=False)
class ReplayOutputs:
    """A replay's outputs: the ``aggregates``, ``late_events``, ``rejected`` and ``state``
    DataFrames and the ``metrics``. What :func:`stage_outputs` writes and :func:`read_run`
    and :func:`read_outputs` read back (a replay's own are a
    :class:`windowing.runner.replay.ReplayResult`).

    ``metrics`` is a :class:`~windowing.metrics.ReplayMetrics` for a replay's result, and
    ``metrics.json`` as stored (a dict; None without the file) for outputs read back.
    """

    aggregates: DataFrame
    late_events: DataFrame
    rejected: DataFrame
    state: DataFrame
    metrics: ReplayMetrics | dict[str, Any] | None
    #: The input files Spark read (to name a damaged one if a later write fails on it).
    input_files: tuple[str, ...] = ()
    #: The run folder the outputs were read from (None: not read from one).
    path: str | None = None
    #: The commit record :func:`read_outputs` followed (None: not read through one).
    commit: Commit | None = None


#: The name of :func:`check_output_target`'s write probe folder, before a unique suffix.
PROBE_PREFIX = ".rewindow-probe-"


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
        if lake.is_file(out):  # is_file checks existence itself
            raise OutputError(f"{out}: is a file, not an output folder")
        ours = (RUNS, COMMITS, FAILURES)
        names = ((e, e.path.rstrip("/").rsplit("/", 1)[-1]) for e in lake.children(out))
        foreign = [e for e, name in names if name not in ours and not name.startswith(PROBE_PREFIX)]
    if foreign:
        raise OutputError(
            f"{out}: exists and is not a rewindow output (it holds {display(foreign[0].path)}); "
            "rewindow replaces only what it wrote: choose an empty or new folder"
        )
    # A write probe: a read-only target fails now, not after the replay. The probe is a
    # folder of its own, named for this call, in ``out`` or in the nearest folder that
    # exists above it (where ``out`` will be created), and only it is removed again: a
    # refused run leaves nothing behind, and a concurrent run of the same output never
    # sees its folders vanish (removing the empty ``out/runs`` a probe had made did that).
    if lake.connect:
        return
    home, name = _probe_home(lake, out), f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    probe = join(home, name) if home else name  # "": relative to the working folder
    try:
        made, why = lake.mkdirs(probe), "the filesystem refused to create a folder (read-only? no permission?)"
    except Exception as exc:  # noqa: BLE001 - Hadoop's AccessControlException, IOException, ...
        made, why = False, root_cause(exc)
    if not made:
        raise OutputError(f"{out}: cannot write here: {why}")
    lake.delete(probe)


def _probe_home(lake: Lake, out: str) -> str:
    """``out`` if it exists, else the nearest folder above it that does: where the write
    probe goes. A bucket's or host's root counts as existing; ``""`` is the working folder
    (a relative ``out`` whose first folder is missing)."""
    path = out.rstrip("/")
    while path and not lake.exists(path):
        rest = path.split("://", 1)[-1].strip("/")
        if "://" in path and "/" not in rest:
            break  # a bucket or a host's root
        cut = path.rfind("/")
        if cut < 0:
            return ""
        parent = path[:cut]
        path = parent if parent and not parent.endswith(":") else parent + "/"  # "/x" -> "/", "file:/x" -> "file:/"
    return path


@dataclass
class Staged:
    """A run's outputs, written and complete but not yet current (see :func:`stage_outputs`)."""

    spark: SparkSession
    output: str
    run_id: str
    metrics: dict[str, Any]
    pipeline: str
    fingerprint: str
    #: The state's manifest (windowing.storage.manifest), recorded in the commit record; None
    #: for outputs without a state (lateness, reconcile).
    state_manifest: dict[str, Any] | None = None
    #: The written datasets' schemas, as Spark reads them back (every field nullable): the
    #: staged outputs are read with them, with no schema inference (a Spark job each).
    schemas: dict[str, StructType] | None = None
    #: :func:`windowing.storage.manifest.content_hash` of the whole written state (computed by
    #: Spark as it wrote the state, with the manifest's: ``manifest.ObservedState``); None when
    #: not computed.
    state_hash: str | None = None
    #: What a replay continuing from the written state reads of it first (computed as it was
    #: written); None when not computed.
    state_summary: manifest.StateSummary | None = None

    @property
    def run(self) -> str:
        return f"{RUNS}/{self.run_id}"

    @property
    def path(self) -> str:
        return join(self.output, self.run)

    def read(self) -> ReplayOutputs:
        """The staged outputs, as :func:`read_outputs` returns them (read with the schemas
        they were written with, when known)."""
        return read_run(self.spark, self.path, self.schemas)

    def read_state(self) -> DataFrame:
        """The staged state alone: read with the schema it was written with (the run this
        process just staged, its files not checked again), else as :meth:`read` reads it."""
        if not self.schemas or "state" not in self.schemas:
            return self.read().state
        return self.spark.read.schema(self.schemas["state"]).parquet(glob_escape(join(self.path, "state")))

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
            raise OutputError(f"{target}: cannot write the commit record: {root_cause(exc)}") from exc
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


def write_texts(lake: Lake, run_path: str, metrics: Mapping[str, Any]) -> None:
    """A run's two small text datasets, from the driver (no Spark job): the bytes Spark's
    text writer wrote for them, ``metrics.json`` (one line of JSON) and ``metrics.prom``
    (the Prometheus text), one file each."""
    texts = {
        METRICS: json.dumps(metrics, indent=None, sort_keys=True) + "\n",
        PROMETHEUS: render_prometheus(metrics).removesuffix("\n") + "\n",
    }
    for name, text in texts.items():
        target = join(run_path, name)
        try:
            lake.put_text_dataset(target, text)
        except Exception as exc:  # Spark/Hadoop raise many types
            raise OutputError(f"{target}: cannot write: {root_cause(exc)}") from exc


def stage_outputs(
    result: ReplayOutputs,
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
    metrics = m.to_dict() if isinstance(m, ReplayMetrics) else dict(cast("Mapping[str, Any]", m))
    staged = Staged(
        spark,
        out,
        new_run_id(),
        metrics,
        pipeline.name if pipeline is not None else str(metrics.get("pipeline")),
        pipeline.fingerprint() if pipeline is not None else "",
    )
    files = list(result.input_files)
    frames = {name: getattr(result, name) for name in OUTPUTS}
    state = manifest.ObservedState(frames["state"])  # its hashes, computed as it is written
    write_datasets(staged, {**frames, "state": state.frame}, files=files)
    write_texts(Lake(spark), staged.path, metrics)
    staged.schemas = {name: nullable(frames[name].schema) for name in OUTPUTS}
    try:
        written, staged.state_hash = manifest.write_state_manifest(
            spark, join(staged.path, "state"), staged.schemas["state"], state.hashes()
        )
    except Exception as exc:  # Spark/Hadoop raise many types
        raise OutputError(
            f"{join(staged.path, 'state', manifest.MANIFEST)}: cannot write the state manifest: {root_cause(exc)}"
        ) from exc
    staged.state_manifest = written.to_dict()
    staged.state_summary = state.summary()
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
            raise OutputError(f"{target}: cannot write: {root_cause(exc)}") from exc

    # Each write in a thread of its own, with this thread's job tags (a partition's tag,
    # windowing.chain.partition_jobs) and local properties: its jobs are the partition's too.
    # (Over Spark Connect, tags are the client thread's own: the writes go untagged.)
    tagged = write if is_connect(staged.spark) else inheritable_thread_target(staged.spark)(write)
    with ThreadPoolExecutor(max_workers=workers or len(frames)) as pool:
        futures = [pool.submit(tagged, name) for name in frames]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]


def write_outputs(
    result: ReplayOutputs,
    out_dir: PathArg,
    pipeline: Pipeline | None = None,
    inputs: Iterable[PathArg] = (),
    extra: dict[str, Any] | None = None,
) -> ReplayMetrics | dict[str, Any] | None:
    """Write a replay's outputs under ``out_dir`` and make them current (stage, then commit).

    Returns the metrics (``result.metrics``: a :class:`~windowing.metrics.ReplayMetrics`,
    or the stored dict of outputs read back with :func:`read_outputs`). A rerun makes a
    new run current with the same rows; a crash or kill part-way leaves the previous
    output current. See the module docstring.
    """
    staged = stage_outputs(result, out_dir, pipeline=pipeline, inputs=inputs)
    staged.commit(extra)
    return result.metrics


# --------------------------------------------------------------------------- reading


def read_run(spark: SparkSession, run_path: str, schemas: Mapping[str, StructType] | None = None) -> ReplayOutputs:
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
    metrics = _read_metrics(spark, lake, join(run_path, METRICS))
    return ReplayOutputs(
        frames["aggregates"], frames["late_events"], frames["rejected"], frames["state"], metrics, path=run_path
    )


def _read_metrics(spark: SparkSession, lake: Lake, path: str) -> dict[str, Any] | None:
    if not lake.exists(path):
        return None
    try:
        metrics = json.loads(_text_lines(spark, lake, path))
    except Exception as exc:  # json or Spark errors
        raise InputError(f"{path}: not readable metrics JSON: {first_line(exc)}") from exc
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


def read_outputs(spark: SparkSession, out_dir: PathArg) -> ReplayOutputs:
    """The current outputs of ``out_dir`` (through its last commit record), as
    :func:`read_run` returns them plus ``commit``.

    ``out_dir`` may also be a run folder (``OUT/runs/<id>``), read as it is.
    """
    out = str(out_dir)
    commit = current_commit(spark, out)
    if commit is None:
        if Lake(spark).exists(join(out, "aggregates", "_SUCCESS")):
            return read_run(spark, out)
        raise InputError(f"{out_dir}: no replay output here (nothing committed under {COMMITS}/)")
    outputs = read_run(spark, commit.run_path) if run_is_whole(spark, commit) else None
    if outputs is None:
        raise InputError(orphaned_message(commit))
    return replace(outputs, metrics=commit.metrics if outputs.metrics is None else outputs.metrics, commit=commit)


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
                f"{display(f)}: not a readable Parquet file (corrupted or truncated?): {root_cause(exc)}"
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
    """Refuse a state folder whose parts disagree with its manifest (:mod:`windowing.storage.manifest`),
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
    """Read the state a previous replay wrote (:func:`read_state_and_commit`, its state)."""
    return read_state_and_commit(spark, state_dir)[0]


def read_state_and_commit(spark: SparkSession, state_dir: PathArg) -> tuple[DataFrame, Commit | None]:
    """Read the state a previous replay wrote, with the commit record of the run it is
    read from (None for a plain state dataset folder).

    ``state_dir`` is a replay output (its current run's state is read), that output's
    ``state`` folder (``OUT/state``, the same), or a plain state dataset folder.
    Whether the state fits a pipeline and its inputs is checked when a replay starts
    from it (:func:`windowing.runner.normalise.split_state`).

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
        raise StateError(f"{display(bad) if bad else state_dir}: state is unreadable: {first_line(exc)}") from exc
    missing = [c for c in STATE_REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise StateError(f"{state_dir}: not a rewindow state (missing columns {', '.join(missing)})")
    return df, commit
