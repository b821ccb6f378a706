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
import shutil
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote

from windowing.storage.errors import InputError
from windowing.storage.names import time_kind, time_ms

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


def text_of(path: str) -> str:
    """A small local file's text (UTF-8): a record the driver wrote."""
    with open(path, encoding="utf-8") as f:
        return f.read()


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


def move(src: str, dst: str) -> None:
    """Move the file or folder ``src`` to the new path ``dst`` (parents made; a folder's
    ``.crc`` files go with it, a file's beside it)."""
    make_folders(os.path.dirname(dst))
    if os.path.exists(dst):
        raise FileExistsError(f"path {dst} already exists")
    os.rename(src, dst)
    if os.path.isfile(dst) and os.path.exists(crc_path(src)):
        os.rename(crc_path(src), crc_path(dst))


def touch(path: str) -> None:
    """An empty file at ``path`` and its ``.crc``, replacing one that is there."""
    if os.path.exists(path):
        os.remove(path)
    write_file(path, b"")


def copy_file(src: str, dst: str) -> None:
    """Copy the file ``src`` to the new path ``dst``, with its ``.crc`` file when it has one."""
    make_folders(os.path.dirname(dst))
    shutil.copyfile(src, dst)
    if os.path.exists(crc_path(src)):
        shutil.copyfile(crc_path(src), crc_path(dst))


def parquet_footer(path: str, column: str | None) -> tuple[int | None, tuple[int | None, int | None, int] | None]:
    """``(rows, arrival range)`` of a local Parquet file from its footer (pyarrow): its row
    count, and with ``column`` that column's ``(earliest, latest, nulls)`` in ms over its
    row groups (None when the statistics do not tell); ``(None, None)`` when it is not
    readable Parquet."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - only `rewindow status` reads a footer here

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
                a, b = time_ms(stats.min_raw, kind), time_ms(stats.max_raw, kind)
                assert a is not None and b is not None  # has_min_max
                lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
    return rows, ((lo, hi, nulls) if seen else None)


def _hidden(name: str) -> bool:
    """A commit or failure record's name that Spark's JSON reader skips (``_SUCCESS``, ``.crc``)."""
    return name.startswith(("_", "."))


def query(path: str, what: str, under: tuple[str, ...] = ()) -> Any:
    """What ``Lake.on_driver`` asks of a local ``path``: ``exists``; ``children``
    (``(path, is folder, size, mtime ms)`` directly under it, sorted; [] when missing);
    ``texts`` (the glob ``under`` below ``path``:
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
    if what == "texts":
        found = []
        for match in sorted(glob.glob(os.path.join(glob.escape(path), *under))):
            files = walk(match, _hidden, sizes=False).files if os.path.isdir(match) else [(match, 0, 0)]
            for file, _, _ in files:
                with open(file, encoding="utf-8", errors="replace") as f:
                    found.append(("file://" + quote(file), f.read()))
        return sorted(found)
    raise ValueError(f"unknown query {what!r}")


# --------------------------------------------------------------------------- reading: a folder's files, links resolved


class LinkError(InputError):
    """A symbolic link under a folder that cannot be followed: a loop, or a link whose real
    path leaves the folder (or names what Spark's readers skip). The message names the link
    and where it points. An :class:`~windowing.storage.errors.InputError`: events that
    cannot be read."""


@dataclass
class Tree:
    """What :func:`walk` found under a local folder. Every path is spelled under the folder
    as the caller gave it (``top``, or ``within`` when given): links below it resolved, the
    folder itself as given.

    ``files``: each data file once, reached without passing a link, sorted, as ``(path,
    size, mtime)`` (mtime in ms; 0, 0 when not asked for). ``aliases``: ``(link, the path
    it leads to)``, each link met (to a folder or a file), whose files are read by their real
    paths (among ``files``, or outside ``top`` but inside ``within``). ``linked``: whether any link was met (Spark's
    readers follow them: given ``top``, they would read an aliased file twice).
    ``roots``: the fewest folders and files, none with a link below it, that hold exactly
    ``files``: what Spark is given instead of ``top`` when ``linked``. ``skipped``:
    uploads in progress (``._COPYING_``), which Spark skips. ``dangling``: ``(link, target)``
    of links to nothing (Hadoop's listing skips them)."""

    base: str = ""
    base_real: str = ""
    files: list[tuple[str, int, int]] = field(default_factory=list)
    aliases: list[tuple[str, str]] = field(default_factory=list)
    roots: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    dangling: list[tuple[str, str]] = field(default_factory=list)
    linked: bool = False

    def real(self, path: str) -> str:
        """Where ``path`` (one of :attr:`files`) really is: the same file by any spelling."""
        return self.base_real + path[len(self.base) :] if path.startswith(self.base) else path


def walk(top: str, hidden: Callable[[str], bool], within: str | None = None, sizes: bool = True) -> Tree:
    """The data files under the local folder (or file) ``top``, symbolic links resolved: a
    file reached by two paths is listed once, by its real path (spelled under ``within``,
    default ``top``); a name ``hidden`` says Spark skips is skipped (and not followed).

    Raises :class:`LinkError` for a link loop (a link to a folder above it, or links that
    point at each other) and for a link whose real path is outside ``within``'s real path
    or names something Spark skips. ``sizes``: stat every file for its size and mtime
    (otherwise only folders are read: one ``scandir`` each).

    A file reached through a link whose real path is outside ``top`` but inside ``within``
    (a day's link to another day's file) is an alias: it is read as the other day's."""
    top = os.path.abspath(top)
    base = os.path.abspath(within) if within else top
    tree = Tree(base=base)
    if not os.path.lexists(top):
        return tree
    try:
        base_real = os.path.realpath(base, strict=True)
        top_real = os.path.realpath(top, strict=True)
    except FileNotFoundError:
        return tree
    except OSError as exc:  # ELOOP: links pointing at each other
        raise LinkError(f"{top}: a loop of symbolic links ({exc.strerror})") from exc
    tree.base_real = base_real

    def spelled(real: str) -> str:
        rel = os.path.relpath(real, base_real)
        return base if rel == "." else f"{base}/{rel}"

    def check(link: str, real: str) -> str:
        """``real`` (where ``link`` leads), once checked: inside ``base``, no name Spark skips."""
        target = os.readlink(link) if os.path.islink(link) else real
        if real != base_real and not real.startswith(base_real.rstrip("/") + "/"):
            raise LinkError(
                f"{link} is a symbolic link to {target} ({real}), outside {base}"
                + (f" ({base_real})" if base_real != base else "")
                + ": "
                "rewindow reads only files inside the folder it is given; copy or move the files in, "
                "or remove the link"
            )
        rel = os.path.relpath(real, base_real)
        if rel != "." and any(hidden(part) for part in rel.split("/")):
            raise LinkError(
                f"{link} is a symbolic link to {target} ({real}), a name Spark's readers skip "
                "(starting with _ or ., or an upload in progress): link to the data file itself"
            )
        return real

    def follow(link: str) -> str:
        """The real path of the link ``link``, checked; "" for a link to nothing."""
        try:
            real = os.path.realpath(link, strict=True)
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise LinkError(
                f"{link} is a symbolic link to {os.readlink(link)}: a loop of links ({exc.strerror})"
            ) from exc
        return check(link, real)

    if os.path.isfile(top):
        if sizes:
            st = os.stat(top)
            tree.files.append((top, st.st_size, st.st_mtime_ns // 1_000_000))
        else:
            tree.files.append((top, 0, 0))
        tree.roots.append(top)
        return tree
    if within and top_real != os.path.normpath(os.path.join(base_real, os.path.relpath(top, base))):
        # ``top`` is reached through a link below ``within`` (a day folder that is a link to
        # another day): its files are read as the other folder's, none as ``top``'s.
        tree.linked = True
        tree.aliases.append((top, spelled(check(top, top_real))))
        _visit(tree, top, top_real, True, (), hidden, follow, spelled, sizes)
        return tree
    _visit(tree, top, top_real, False, (), hidden, follow, spelled, sizes)
    tree.files.sort()
    tree.roots.sort()
    return tree


def _visit(
    tree: Tree,
    path: str,
    real: str,
    linked: bool,
    above: tuple[str, ...],
    hidden: Callable[[str], bool],
    follow: Callable[[str], str],
    spelled: Callable[[str], str],
    sizes: bool,
) -> bool:
    """:func:`walk` of the folder ``path`` (really at ``real``; ``linked``: reached through a
    link; ``above``: the real paths of the folders above it). Whether it holds no link
    anywhere below (it is then one of ``tree.roots``, unless reached through a link)."""
    above = (*above, real)
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    clean = True
    files: list[str] = []
    folders: list[str] = []
    for e in entries:
        child = f"{path}/{e.name}"
        if hidden(e.name):
            if e.name.endswith("._COPYING_") and not linked:
                tree.skipped.append(child)
            continue
        if e.is_symlink():
            clean = False
            tree.linked = True
            child_real = follow(child)
            if not child_real:
                tree.dangling.append((child, os.readlink(child)))
            elif os.path.isdir(child_real):
                if child_real in above or real.startswith(child_real.rstrip("/") + "/"):
                    raise LinkError(
                        f"{child} is a symbolic link to {os.readlink(child)} ({child_real}), a folder above "
                        "it: a loop (Spark would read the folder's files again at every turn); remove the link"
                    )
                tree.aliases.append((child, spelled(child_real)))
                _visit(tree, child, child_real, True, above, hidden, follow, spelled, sizes)
            else:
                tree.aliases.append((child, spelled(child_real)))
        elif e.is_dir():
            if _visit(tree, child, f"{real}/{e.name}", linked, above, hidden, follow, spelled, sizes):
                folders.append(child)
            else:
                clean = False
        elif not linked:
            if sizes:
                st = e.stat()
                tree.files.append((child, st.st_size, st.st_mtime_ns // 1_000_000))
            else:
                tree.files.append((child, 0, 0))
            files.append(child)
    if not linked and not clean:
        tree.roots.extend(files)
        tree.roots.extend(folders)
    elif not linked and not above[:-1]:
        tree.roots.append(path)  # the top folder itself, with no link below it
    return clean
