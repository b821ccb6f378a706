"""Files on any filesystem Spark reaches, through Spark and Hadoop.

rewindow never opens, lists, renames or locks a data path with Python's ``os``,
``pathlib`` or ``shutil`` (but for the driver's own small files on its own disk, below):
a data path may be ``s3a://``, ``gs://``, ``abfss://``,
``hdfs://`` or ``viewfs://`` as well as a local folder, and on a cluster the driver
and the executors share no ``/tmp``. Datasets are read and written by Spark's own
readers and writers. The few operations a writer needs besides (does a path exist,
what is directly under it, delete a run folder that is no longer kept, read a Parquet
footer) go through :class:`Lake`:

* on a classic session, Hadoop's ``FileSystem`` API in the driver's JVM (the same
  code and settings, ``spark.hadoop.*``, Spark's own readers use);
* the small files the driver itself writes on a local folder (a run's ``metrics.json``
  and ``metrics.prom``, the state manifest, the commit record, the write probe):
  :mod:`windowing.storage.local_files`, the files Hadoop's local filesystem would write,
  without the ``chmod`` process Hadoop starts for each. Everything else, Spark's writers
  included, goes through Hadoop;
* over Spark Connect (no JVM in the client), Spark reads: the ``binaryFile`` source
  lists files (its content column is never read) and Parquet footers come from Spark's
  schema inference of one file. Deletions are not available there: old runs are left
  for the store's lifecycle rules (see docs/deployment.md).

Paths are plain strings. A path without a scheme is a local path, made absolute
(string arithmetic only) so that two spellings of one folder compare equal.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, cast

from windowing.jvm_lookups import remember_jvm_lookups
from windowing.storage import local_files

# Re-exported: most callers take them from here, beside the Lake they display paths of.
from windowing.storage.names import display as display
from windowing.storage.names import hidden as hidden
from windowing.storage.names import time_kind as time_kind
from windowing.storage.names import time_ms as time_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

#: A folder or URI as callers give it (made a string before use).
PathArg = str | os.PathLike[str]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def qualify(path: str | os.PathLike[str]) -> str:
    """``path`` as a URI: local paths become ``file:/abs/path``; trailing ``/`` removed."""
    s = os.fspath(path)
    if not _SCHEME.match(s):
        s = "file:" + os.path.abspath(s)
    elif s.startswith("file://") and not s.startswith("file:///"):
        pass  # file://host/... is left alone
    elif s.startswith("file:///"):
        s = "file:" + s[len("file://") :]
    return s.rstrip("/") if len(s.rstrip("/")) > len(s.split(":", 1)[0]) + 2 else s


def local_path(path: str | os.PathLike[str]) -> str | None:
    """``path`` on this machine's disk (``file:/...`` or no scheme) as a plain path; None for
    any other filesystem (``file://host/...`` included)."""
    uri = qualify(path)
    if not uri.startswith("file:/") or uri.startswith("file://"):
        return None
    return uri[len("file:") :]


def absolute(location: str | os.PathLike[str]) -> str:
    """A URI as it is; a local path made absolute (no filesystem access)."""
    s = os.fspath(location)
    return s if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", s) or s.startswith("file:") else os.path.abspath(s)


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for URIs and local paths alike."""
    out = os.fspath(base).rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


def inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both qualified first)."""
    p, r = qualify(path), qualify(root)
    return p == r or p.startswith(r.rstrip("/") + "/")


#: Characters Hadoop's path globbing (``FileSystem.globStatus``, Spark's readers) treats as a pattern.
_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")


def glob_escape(path: str) -> str:
    """``path`` with Hadoop's glob characters escaped, so that Spark reads exactly that
    folder: ``out/br[1]`` would otherwise read ``out/br1``, and ``out/cu{a,b}`` two others.
    Every read path rewindow builds from a folder name goes through here; a pattern it adds
    itself (``*``) is appended after."""
    return _GLOB_CHARS.sub(r"\\\1", path)


@dataclass(frozen=True)
class Entry:
    """A file or folder as a listing saw it. ``mtime``: its modification time in ms since
    the epoch (0 where the listing gives none); ``rows``: a Parquet file's row count from its
    footer, where the caller read it (None otherwise)."""

    path: str
    is_dir: bool
    size: int
    mtime: int = 0
    rows: int | None = None


class NeedsSpark(RuntimeError):
    """A :class:`Lake` of no session was asked about a path only Spark reaches."""


class Lake:
    """Filesystem operations for one Spark session (see the module docstring); ``Lake(None)``
    answers a few queries of the driver's own disk with no session (:meth:`on_driver`)."""

    def __init__(self, spark: SparkSession | None) -> None:
        self.spark = spark
        self.connect = is_connect(spark)
        self._conf: Any = None  # a py4j JavaObject (Hadoop Configuration): no Python type
        self._converter: Any = None  # likewise (Spark's Parquet schema converter)
        self._read_options: Any = None  # likewise (Parquet's read options)
        #: The rows of each Parquet file whose footer :meth:`parquet_columns` read (classic
        #: sessions): what :meth:`rows_in` sums.
        self.footer_rows: dict[str, int] = {}

    def _local(self, path: str) -> str | None:
        """``path`` on the driver's own disk (``file:`` or no scheme; a classic session):
        the small files the driver writes there are written with Python's calls (module
        docstring). None for any other filesystem."""
        return None if self.connect else local_path(path)

    @property
    def _session(self) -> SparkSession:
        """The session, for what only Spark reaches (:class:`NeedsSpark` for ``Lake(None)``)."""
        if self.spark is None:
            raise NeedsSpark("this needs a Spark session: the Lake has none")
        return self.spark

    # ------------------------------------------------------------------ JVM side

    def _hadoop_conf(self) -> Any:
        """The session's Hadoop settings as Spark's own readers see them (``spark.hadoop.*``
        at start-up and Hadoop keys set at runtime with ``spark.conf.set``)."""
        if self._conf is None:
            self._conf = self._session._jsparkSession.sessionState().newHadoopConf()
        return self._conf

    def _class(self, name: str) -> Any:
        """The JVM class ``name`` (fully qualified), looked up once per JVM: py4j resolves
        ``jvm.org.apache...`` one package at a time, each step a round trip and a failed
        class lookup that searches every jar on Spark's class path (a share of the driver
        JVM's time worth saving in an hourly backfill: docs/architecture.md). By its full
        name, in one lookup that py4j remembers (:mod:`windowing.jvm_lookups`), as it does
        the class's static methods."""
        remember_jvm_lookups()
        return getattr(self._session._jvm, name)

    def _path(self, *parts: Any) -> Any:
        return self._class("org.apache.hadoop.fs.Path")(*parts)

    def _fs(self, path: str) -> tuple[Any, Any]:
        jpath = self._path(path)
        return jpath.getFileSystem(self._hadoop_conf()), jpath

    def _parquet_reader(self, path: str) -> Any:
        """An open ``ParquetFileReader`` of ``path``, with the session's Hadoop settings.
        (``ParquetFileReader.open`` given the file alone builds its options on a new Hadoop
        ``Configuration``, which parses Hadoop's default XML resources again for every file.)"""
        conf = self._hadoop_conf()
        input_file = self._class("org.apache.parquet.hadoop.util.HadoopInputFile").fromPath(self._path(path), conf)
        if self._read_options is None:  # immutable: one for every file this Lake reads
            self._read_options = self._class("org.apache.parquet.HadoopReadOptions").builder(conf).build()
        return self._class("org.apache.parquet.hadoop.ParquetFileReader").open(input_file, self._read_options)

    # ------------------------------------------------------------------ queries

    def exists(self, path: str) -> bool:
        if self.spark is None:
            return bool(self.on_driver(path, "exists"))
        if not self.connect:
            fs, p = self._fs(path)
            return bool(fs.exists(p))
        try:
            self._session.read.format("binaryFile").load(path).select("path").limit(1).collect()
            return True
        except Exception as exc:  # Spark reports a missing path as an AnalysisException
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                return False
            raise

    def is_file(self, path: str) -> bool:
        if not self.connect:
            fs, p = self._fs(path)
            return bool(fs.exists(p)) and bool(fs.getFileStatus(p).isFile())
        files = self.files(path)
        return len(files) == 1 and qualify(files[0].path) == qualify(path)

    def children(self, path: str) -> list[Entry]:
        """What is directly under ``path`` (hidden names included), sorted; [] if missing.

        Over Spark Connect only files are seen (recursively), hidden ones not at all.
        """
        if self.spark is None:
            return [Entry(qualify(p), d, size, mtime) for p, d, size, mtime in self.on_driver(path, "children")]
        if self.connect:
            return self.files(path)
        fs, p = self._fs(path)
        if not fs.exists(p):
            return []
        return sorted(
            (Entry(str(s.getPath().toString()), bool(s.isDirectory()), int(s.getLen())) for s in fs.listStatus(p)),
            key=lambda e: e.path,
        )

    def files(self, path: str, within: str | None = None) -> list[Entry]:
        """The data files Spark would read under ``path`` (recursive, hidden skipped), each
        once, sorted, with its size and modification time.

        On the driver's own disk symbolic links are resolved (:meth:`tree`): a file reached
        by two paths is listed once, by its real path (spelled under ``within``, default
        ``path``: the links below it resolved, the folder itself as given), and a file
        whose real path is outside ``path`` but inside ``within`` (a day's link to another
        day's file) is not listed, as it is read where it really is. A link loop, or a link
        out of ``within``, raises :class:`windowing.storage.local_files.LinkError`. Other
        filesystems have no links that Spark follows.
        """
        tree = self.tree(path, within, sizes=True)
        if tree is not None:
            return [Entry("file:" + name, False, size, mtime) for name, size, mtime in tree.files]
        if not self.connect:
            fs, p = self._fs(path)
            if not fs.exists(p):
                return []
            out = [
                Entry(name, False, int(s.getLen()), int(s.getModificationTime())) for name, s in self._leaf_files(fs, p)
            ]
            return sorted(out, key=lambda e: e.path)
        try:
            rows = (
                self._session.read.format("binaryFile")
                .option("recursiveFileLookup", "true")
                .load(path)
                .select("path", "length", "modificationTime")
                .collect()
            )
        except Exception as exc:
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                return []
            raise
        return sorted(
            (Entry(r["path"], False, int(r["length"]), int(r["modificationTime"].timestamp() * 1000)) for r in rows),
            key=lambda e: e.path,
        )

    def tree(self, path: str, within: str | None = None, sizes: bool = False) -> local_files.Tree | None:
        """The data files under ``path`` on the driver's own disk, symbolic links resolved and
        checked (:func:`windowing.storage.local_files.walk`: each file once, the paths through
        links, the link-free folders that hold the files, uploads in progress); None for
        any other filesystem (Hadoop's local filesystem follows links; HDFS has them off by
        default, object stores have none). ``sizes``: each file's size and mtime too.
        Raises :class:`windowing.storage.local_files.LinkError` for a loop or a link out of
        ``within`` (default ``path``)."""
        local = self._local(path)
        if local is not None:
            return local_files.walk(local, hidden, within=self._local(within) if within else None, sizes=sizes)
        return None

    def glob_files(self, pattern: str, most: int) -> list[tuple[str, str]] | None:
        """The data files Spark's readers read for the glob ``pattern`` (a matched folder:
        the files under it, hidden names skipped), sorted, each as ``(path, uri)``: its
        path for :meth:`read_text` and its URI, %-quoted, as Spark's ``input_file_name``
        gives it; [] when nothing matches. None over Spark Connect, or past ``most`` files
        (reading them one at a time from the driver would then cost more than Spark's job)."""
        if self.connect:
            return None
        fs, p = self._fs(pattern)
        out: list[tuple[str, str]] = []
        for match in fs.globStatus(p) or []:
            if hidden(str(match.getPath().getName())):
                continue
            if match.isDirectory():
                leaves = self._leaf_files(fs, match.getPath())
            else:
                leaves = iter([(str(match.getPath().toString()), match)])
            for name, s in leaves:
                out.append((name, str(s.getPath().toUri().toString())))
                if len(out) > most:
                    return None
        return sorted(out)

    @staticmethod
    def _leaf_files(fs: Any, p: Any) -> Iterator[tuple[str, Any]]:
        """``(path, status)`` of every file under the folder ``p`` that Spark's readers read
        (recursive; a hidden name anywhere below ``p`` skips it).

        A local folder is walked with ``listStatus``: Hadoop's recursive ``listFiles``
        builds a ``LocatedFileStatus`` per file, which loads the file's owner and
        permissions, and without Hadoop's native library that is an ``ls -ld`` process per
        file (most of a small input's read: docs/architecture.md). Any other store keeps
        ``listFiles``, which an object store answers with one flat listing rather than a
        request per folder.
        """
        if str(fs.getUri().getScheme()) == "file":
            top = fs.getFileStatus(p)
            if top.isDirectory():
                yield from Lake._walk(fs, p)
            else:
                yield str(top.getPath().toString()), top
            return
        root = len(str(fs.makeQualified(p).toString()))
        it = fs.listFiles(p, True)
        while it.hasNext():
            s = it.next()
            name = str(s.getPath().toString())
            if not any(hidden(part) for part in name[root:].split("/") if part):
                yield name, s

    @staticmethod
    def _walk(fs: Any, p: Any) -> Iterator[tuple[str, Any]]:
        """:meth:`_leaf_files` of a local folder: ``listStatus``, folder by folder, hidden
        names pruned."""
        for s in fs.listStatus(p):
            name = str(s.getPath().toString())
            if hidden(name.rstrip("/").rsplit("/", 1)[-1]):
                continue
            if s.isDirectory():
                yield from Lake._walk(fs, s.getPath())
            else:
                yield name, s

    # ------------------------------------------------------------------ without a session

    def on_driver(self, path: str, what: str, under: tuple[str, ...] = ()) -> Any:
        """A query of the driver's own disk that a :class:`Lake` of no session (``Lake(None)``)
        answers with Python's calls, starting no JVM (``rewindow status`` on a local history):
        ``exists``, ``children`` or ``texts``
        (each file or folder matching the glob ``under`` below ``path``: its data files, as
        ``(URI, text)``).
        Raises :class:`NeedsSpark` for a path that is not on the driver's disk."""
        local = self._local(path)
        if local is not None:
            return local_files.query(local, what, under)
        raise NeedsSpark(f"{display(path)} is not on this machine's disk: reading it needs a Spark session")

    # ------------------------------------------------------------------ changes

    def mkdirs(self, path: str) -> bool:
        """Create ``path`` and its parents (a write probe); False where this session cannot."""
        if self.connect:
            return False
        local = self._local(path)
        if local is not None:
            local_files.make_folders(local)
            return True
        fs, p = self._fs(path)
        return bool(fs.mkdirs(p))

    def delete_if_empty(self, path: str) -> bool:
        """Delete ``path`` only if it is an empty folder (never anything another run wrote)."""
        if self.connect:
            return False
        fs, p = self._fs(path)
        try:
            return bool(fs.exists(p)) and not list(fs.listStatus(p)) and bool(fs.delete(p, False))
        except Exception:  # noqa: BLE001 - not empty after all (a concurrent writer): leave it
            return False

    def delete_empty_folders(self, folders: Iterable[str]) -> None:
        """Delete ``folders`` in turn (deepest first), each only if empty; stop at the first
        that is not (or that this session cannot delete)."""
        for folder in folders:
            if not self.delete_if_empty(folder):
                return

    def delete(self, path: str) -> bool:
        """Delete ``path`` recursively; False where this session cannot (Spark Connect)."""
        if self.connect:
            return False
        fs, p = self._fs(path)
        return bool(fs.delete(p, True))

    def move(self, src: str, dst: str) -> None:
        """Move the file or folder ``src`` to ``dst``, which must not exist (its parents are
        made): a rename, on the driver (classic sessions)."""
        local_dst = self._local(dst)  # both on the driver's disk, or neither: Hadoop's
        local = self._local(src) if local_dst is not None else None
        if local is not None:
            local_files.move(local, cast("str", local_dst))
            return
        fs, p = self._fs(src)
        target = self._path(dst)
        if fs.exists(target):
            raise FileExistsError(f"path {dst} already exists")
        fs.mkdirs(target.getParent())
        if not fs.rename(p, target):
            raise OSError(f"could not move {src} to {dst}")

    def copy_file(self, src: str, dst: str) -> None:
        """Copy the file ``src`` to ``dst`` (its parents made), on the driver (classic sessions)."""
        local_dst = self._local(dst)  # both on the driver's disk, or neither: Hadoop's
        local = self._local(src) if local_dst is not None else None
        if local is not None:
            local_files.copy_file(local, cast("str", local_dst))
            return
        fs, p = self._fs(src)
        target = self._path(dst)
        util = self._class("org.apache.hadoop.fs.FileUtil")
        if not util.copy(fs, p, target.getFileSystem(self._hadoop_conf()), target, False, self._hadoop_conf()):
            raise OSError(f"could not copy {src} to {dst}")

    def touch(self, path: str) -> None:
        """An empty file at ``path`` (a ``_SUCCESS`` marker), replacing one that is there."""
        local = self._local(path)
        if local is not None:
            local_files.touch(local)
            return
        fs, p = self._fs(path)
        fs.create(p, True).close()

    def put_text(self, path: str, text: str) -> None:
        """Write one small text file (a report) at ``path``, UTF-8, refusing to overwrite.

        Through Hadoop's ``FileSystem.create`` on a classic session (on the driver's own
        disk, Python's calls: the module docstring). Over Spark Connect
        (no JVM here) Spark's text writer writes it instead: ``path`` is then a folder
        holding the text as its one part file.
        """
        if self.connect:
            (self._session.createDataFrame([(text,)], "value string").coalesce(1).write.mode("error").text(path))
            return
        local = self._local(path)
        if local is not None:
            local_files.write_file(local, text.encode("utf-8"))
            return
        fs, p = self._fs(path)
        out = fs.create(p, False)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def put_text_dataset(self, folder: str, text: str, extension: str = "txt") -> None:
        """Write ``text`` as a one-file dataset at ``folder``, as Spark's text (or JSON)
        writer writes a one-row DataFrame in mode ``error``: ``folder/part-00000-<uuid>-c000.<extension>``
        holding ``text`` as it is (give it its final newline), then an empty ``_SUCCESS``;
        refused (``FileExistsError``) when ``folder`` exists.

        On a classic session, from the driver through Hadoop's ``FileSystem`` (on the
        driver's own disk, Python's calls, writing the same files), with no
        Spark job: the file is written under a hidden name in ``folder`` (``_part-...``,
        which Spark's readers skip) and renamed into place, so a reader sees the whole file
        or none. (Not under ``folder/_temporary/<job>/`` as Spark's committer does: on a
        local folder Hadoop starts a ``chmod`` process for every folder it creates, and
        those two were a quarter of the ``chmod`` processes a replay's driver started.)
        Over Spark Connect (no JVM here), Spark's text writer writes it (one row: the text
        without its final newline, which the writer adds; the file is then named ``.txt``
        whatever ``extension`` says).
        """
        if self.connect:
            (
                self._session.createDataFrame([(text.removesuffix("\n"),)], "value string")
                .coalesce(1)
                .write.mode("error")
                .text(folder)
            )
            return
        name = f"part-00000-{uuid.uuid4()}-c000.{extension}"
        local = self._local(folder)
        if local is not None:
            local_files.write_text_dataset(local, name, text)
            return
        fs, target = self._fs(folder)
        if fs.exists(target):
            raise FileExistsError(f"path {folder} already exists")
        staged = self._path(target, f"_{name}")
        out = fs.create(staged, False)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        if not fs.rename(staged, self._path(target, name)):
            raise OSError(f"could not move {staged.toString()} into {folder}")
        fs.create(self._path(target, "_SUCCESS"), True).close()

    def get_text(self, path: str) -> str:
        """The text of a file :meth:`put_text` wrote (UTF-8)."""
        rows = self._session.read.option("wholetext", "true").text(path).collect()
        return "".join(r[0] for r in rows)

    def read_text(self, path: str) -> str:
        """The text of a small file :meth:`put_text` wrote, hidden names too (Spark's readers
        skip a file named ``_x`` even when given its path): through Hadoop's ``FileSystem.open``
        on a classic session, :meth:`get_text` (of the folder) over Spark Connect."""
        if self.connect:
            return self.get_text(glob_escape(path))
        fs, p = self._fs(path)
        stream = fs.open(p)
        try:
            data = self._class("org.apache.commons.io.IOUtils").toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    # ------------------------------------------------------------------ Parquet

    def parquet_columns(self, path: str) -> dict[str, str]:
        """A Parquet file's top-level columns and the types Spark's reader gives them
        (``DataType.simpleString``: ``bigint``, ``string``, ``array<string>``), from its
        footer only; two files agree exactly when these do.

        On a classic session, Spark's own Parquet-to-Spark schema converter with the
        session's settings (``spark.sql.parquet.binaryAsString`` and the like): one
        conversion a file, where walking the footer's types from Python took ~60 py4j
        calls a file. A type the converter refuses (``TIMESTAMP(NANOS)``, say) keeps
        Parquet's own description (``INT64 (TIMESTAMP(NANOS,true))``), so that such a file
        is still compared, not refused here. Over Spark Connect, Spark's schema inference
        of the one file. Raises whatever the reader raises for a file that is not Parquet.
        """
        if self.connect:
            schema = self._session.read.parquet(path).schema
            return {f.name: f.dataType.simpleString() for f in schema.fields}
        reader = self._parquet_reader(path)
        try:
            footer = reader.getFooter().getFileMetaData().getSchema()
            self.footer_rows[path] = int(reader.getRecordCount())
        finally:
            reader.close()
        try:
            converted = _struct_type(self._schema_converter().convert(footer).json())
        except Exception:  # noqa: BLE001 - a type Spark (or PySpark) does not read: Parquet's own words
            return self._parquet_types(footer)
        return {f.name: f.dataType.simpleString() for f in converted.fields}

    def parquet_schema(self, path: str) -> StructType:
        """The schema Spark's Parquet reader infers from the file ``path`` (classic sessions):
        Spark's own ``ParquetFileFormat.readSchemaFromFooter``, the Spark schema the file
        records if it does, else the footer converted under the session's settings. What
        the reader infers when it reads one file's footer (``mergeSchema`` off): given to
        the reader, it spares Spark the job it runs for it."""
        reader = self._parquet_reader(path)
        try:
            footer = self._class("org.apache.parquet.hadoop.Footer")(self._path(path), reader.getFooter())
        finally:
            reader.close()
        cls = self._class("org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat")
        return _struct_type(cls.readSchemaFromFooter(footer, self._schema_converter()).json())

    def rows_in(self, files: Iterable[str]) -> int | None:
        """The rows of ``files``, from the footers :meth:`parquet_columns` read (None when
        it read one of them not, or over Spark Connect)."""
        rows = [self.footer_rows.get(f) for f in files]
        return None if any(r is None for r in rows) else sum(cast(int, r) for r in rows)

    def _schema_converter(self) -> Any:
        """Spark's ``ParquetToSparkSchemaConverter`` under the session's SQL settings (the one
        its Parquet reader infers schemas with), made once per :class:`Lake`."""
        if self._converter is None:
            cls = "org.apache.spark.sql.execution.datasources.parquet.ParquetToSparkSchemaConverter"
            self._converter = self._class(cls)(self._session._jsparkSession.sessionState().conf())
        return self._converter

    @staticmethod
    def _parquet_types(schema: Any) -> dict[str, str]:
        """A Parquet schema's top-level columns in Parquet's words (``INT64 (TIMESTAMP(...))``)."""
        out = {}
        for i in range(schema.getFieldCount()):
            t = schema.getType(i)
            if t.isPrimitive():
                logical = t.getLogicalTypeAnnotation()
                out[t.getName()] = str(t.asPrimitiveType().getPrimitiveTypeName()) + (
                    f" ({logical})" if logical is not None else ""
                )
            else:
                out[t.getName()] = str(t).replace("\n", " ")
        return out

    def column_range(self, path: str, column: str) -> tuple[int | None, int | None, int, str | None] | None:
        """``(min, max, nulls, kind)`` of the top-level column ``column`` over a Parquet
        file's row groups, from its footer's statistics (classic sessions): the raw values
        and what they count (:func:`time_kind`: ``millis``, ``micros``, ``nanos``, ``days``,
        ``ms`` for a plain integer, None for another type). None when a row group has no
        statistics for it (or no null count), or the file has no such column."""
        reader = self._parquet_reader(path)
        try:
            footer = reader.getFooter()
        finally:
            reader.close()
        lo = hi = None
        nulls = 0
        kind: str | None = None
        seen = False
        for block in footer.getBlocks():
            for chunk in block.getColumns():
                names = list(chunk.getPath().toArray())
                if names != [column]:
                    continue
                seen = True
                stats = chunk.getStatistics()
                if stats is None or stats.isEmpty() or not stats.isNumNullsSet():
                    return None
                primitive = chunk.getPrimitiveType()
                kind = time_kind(str(primitive.getPrimitiveTypeName()), str(primitive.getLogicalTypeAnnotation()))
                nulls += int(stats.getNumNulls())
                if stats.hasNonNullValue():
                    a, b = stats.genericGetMin(), stats.genericGetMax()
                    if not isinstance(a, int) or not isinstance(b, int):
                        return None
                    lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
        return (lo, hi, nulls, kind) if seen else None

    def parquet_rows(self, path: str) -> int:
        """A Parquet file's row count, from its footer only (over Spark Connect, a count)."""
        if self.connect:
            return int(self._session.read.parquet(glob_escape(path)).count())
        reader = self._parquet_reader(path)
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()


def _struct_type(schema_json: str) -> StructType:
    """A JVM schema's JSON as PySpark's ``StructType``. Only a classic session's JVM gives
    one, so pyspark is loaded then, and importing this module (the command line's path
    arithmetic, :class:`Entry`) needs none."""
    from pyspark.sql.types import StructType  # noqa: PLC0415 - only with a session: keeps `import windowing` light

    return StructType.fromJson(json.loads(schema_json))
