"""The driver's moves and copies a pass's staging uses (``Lake.move``, ``copy_file``,
``touch``), on local folders with no Spark: Hadoop's ``.crc`` files go along."""

from __future__ import annotations

import pytest

from windowing.storage import local_files
from windowing.storage.lake import Lake


def test_a_moved_folder_and_a_copied_file_keep_their_checksums(tmp_path):
    lake = Lake(None)
    src = tmp_path / "work" / "state" / "__part=3"
    local_files.write_file(str(src / "part-0.parquet"), b"rows")
    lake.move(str(src), str(tmp_path / "out" / "runs" / "r1" / "state"))
    moved = tmp_path / "out" / "runs" / "r1" / "state"
    assert (moved / "part-0.parquet").read_bytes() == b"rows" and (moved / ".part-0.parquet.crc").exists()
    assert not src.exists()
    lake.copy_file(str(moved / "part-0.parquet"), str(tmp_path / "empty" / "part-0.parquet"))
    assert (tmp_path / "empty" / ".part-0.parquet.crc").read_bytes() == local_files.crc_file(b"rows")
    lake.touch(str(moved / "_SUCCESS"))
    lake.touch(str(moved / "_SUCCESS"))  # replaced, not refused
    assert (moved / "_SUCCESS").read_bytes() == b""
    with pytest.raises(FileExistsError):
        lake.move(str(tmp_path / "empty"), str(moved))
