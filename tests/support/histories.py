"""Sample histories edited for a test: a copy of a landing zone with one more row."""

from __future__ import annotations

import shutil


def landing_with_odd_row(history, tmp_path, day: str, **edit):
    """A copy of the landing zone with one extra row in ``day``, edited by ``edit``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = tmp_path / "landing"
    shutil.copytree(history, landing)
    folder = landing / f"date={day}"
    t = pq.read_table(next(folder.glob("*.parquet")))
    odd = t.slice(0, 1).to_pylist()[0]
    odd["offset"] = 10**9
    for column, change in edit.items():
        odd[column] = change(odd[column])
    pq.write_table(pa.Table.from_pylist([odd], schema=t.schema), folder / "zz-odd.parquet")
    return landing
