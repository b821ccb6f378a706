"""The small files a replay's driver writes itself, on the driver's own disk.

:class:`windowing.storage.lake.Lake` writes a run's ``metrics.json`` and ``metrics.prom``,
the state manifest, the commit record and the write probe from the driver. On a local
folder (``file:`` or no scheme, a classic session: ``Lake._local``) it writes them here,
with Python's calls, rather than through Hadoop's local filesystem: without Hadoop's
native library (the pyspark package has none), Hadoop starts a ``chmod`` process for
every folder and file it creates, ~7 ms each, 18 of them a replay. These are the files
Hadoop writes: the same names, the same bytes, and the same ``.crc`` checksum file beside
each (``tests/windowing/storage/test_driver_writes.py`` compares them byte for byte).
Every other path, and every dataset Spark writes, goes through Hadoop.
"""

from __future__ import annotations

import glob
import os
import zlib
from typing import Any
from urllib.parse import quote

#: Bytes per checksum of Hadoop's local ``.crc`` files (``file.bytes-per-checksum``).
CRC_CHUNK = 512


def crc_file(data: bytes) -> bytes:
    """The ``.crc`` file Hadoop's local filesystem (``ChecksumFileSystem``) writes beside a
    file of ``data``: ``crc\\0``, the bytes per checksum, then a CRC-32 of every 512 bytes."""
    out = bytearray(b"crc\x00" + CRC_CHUNK.to_bytes(4, "big"))
    for i in range(0, len(data), CRC_CHUNK):
        out += zlib.crc32(data[i : i + CRC_CHUNK]).to_bytes(4, "big")
    return bytes(out)


def crc_path(path: str) -> str:
    """Where Hadoop keeps ``path``'s checksums: ``.<name>.crc`` beside it."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.crc")


def make_folders(path: str) -> None:
    """``path`` and its parents (as Hadoop's ``mkdirs``; an existing folder is fine)."""
    os.makedirs(path, exist_ok=True)


def write_file(path: str, data: bytes) -> None:
    """A new file and its ``.crc`` file, parent folders made (``FileExistsError`` when
    ``path`` exists: Hadoop's ``create`` without overwrite)."""
    make_folders(os.path.dirname(path))
    with open(path, "xb") as f:
        f.write(data)
    with open(crc_path(path), "wb") as f:
        f.write(crc_file(data))


def write_text_dataset(folder: str, name: str, text: str) -> None:
    """A one-file dataset at the new folder ``folder``: ``name`` holding ``text`` (written
    as ``_name`` and renamed into place, so a reader sees the whole file or none), then an
    empty ``_SUCCESS``; ``FileExistsError`` when ``folder`` exists."""
    make_folders(os.path.dirname(folder))
    try:
        os.mkdir(folder)
    except FileExistsError:
        raise FileExistsError(f"path {folder} already exists") from None
    staged = os.path.join(folder, f"_{name}")
    write_file(staged, text.encode("utf-8"))
    os.rename(staged, os.path.join(folder, name))
    os.rename(crc_path(staged), crc_path(os.path.join(folder, name)))
    write_file(os.path.join(folder, "_SUCCESS"), b"")


def data_files(folder: str) -> list[tuple[str, int, int]]:
    """``(path, size, modification time in ms)`` of every file under the local ``folder``
    that Spark's readers read (recursive; a name starting with ``_`` or ``.`` anywhere below
    skipped, as ``Lake.files`` does through Hadoop), sorted by path; [] when it is missing.
    The times are Hadoop's (``File.lastModified``: whole milliseconds)."""
    out = []
    for top, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        for name in files:
            if name.startswith(("_", ".")):
                continue
            path = os.path.join(top, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:  # removed while listed
                continue
            out.append((path, st.st_size, st.st_mtime_ns // 1_000_000))
    return sorted(out)


def parquet_footer(path: str, column: str | None) -> tuple[int | None, tuple[int | None, int | None, int] | None]:
    """``(rows, arrival range)`` of a local Parquet file from its footer (pyarrow): its row
    count, and with ``column`` that column's ``(earliest, latest, nulls)`` in ms over its
    row groups (None when the statistics do not tell); ``(None, None)`` when it is not
    readable Parquet."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only `rewindow status` reads a footer here

    from windowing.storage.lake import time_kind  # noqa: PLC0415 - lake imports this module

    try:
        meta = pq.read_metadata(path)
    except Exception:  # noqa: BLE001 - not Parquet, truncated, gone: nothing known
        return None, None
    rows = int(meta.num_rows)
    if column is None:
        return rows, None
    lo = hi = None
    nulls = 0
    seen = False
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(group.num_columns):
            chunk = group.column(j)
            if chunk.path_in_schema != column:
                continue
            seen = True
            stats = chunk.statistics
            if stats is None or not stats.has_null_count:
                return rows, None
            kind = time_kind(chunk.physical_type, str(stats.logical_type))
            if kind is None:
                return rows, None
            nulls += int(stats.null_count)
            if stats.has_min_max:
                a, b = _ms(stats.min_raw, kind), _ms(stats.max_raw, kind)
                lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
    return rows, ((lo, hi, nulls) if seen else None)


def _ms(raw: int, kind: str) -> int:
    return {"millis": raw, "ms": raw, "micros": raw // 1000, "nanos": raw // 1_000_000, "days": raw * 86_400_000}[kind]


def query(path: str, what: str, under: tuple[str, ...] = ()) -> Any:
    """What ``Lake.on_driver`` asks of a local ``path``: ``exists``; ``children``
    (``(path, is folder, size, mtime ms)`` directly under it, sorted; [] when missing);
    ``data_files`` (:func:`data_files`); ``texts`` (the glob ``under`` below ``path``:
    the data files of each match, a folder's files below it, as ``(URI as Spark's
    input_file_name gives it, text)``, sorted)."""
    if what == "exists":
        return os.path.exists(path)
    if what == "children":
        if not os.path.isdir(path):
            return []
        out = []
        for e in os.scandir(path):
            st = e.stat()
            out.append((e.path, e.is_dir(), 0 if e.is_dir() else st.st_size, st.st_mtime_ns // 1_000_000))
        return sorted(out)
    if what == "data_files":
        return data_files(path)
    if what == "texts":
        found = []
        for match in sorted(glob.glob(os.path.join(glob.escape(path), *under))):
            files = data_files(match) if os.path.isdir(match) else [(match, 0, 0)]
            for file, _, _ in files:
                with open(file, encoding="utf-8", errors="replace") as f:
                    found.append(("file://" + quote(file), f.read()))
        return sorted(found)
    raise ValueError(f"unknown query {what!r}")
