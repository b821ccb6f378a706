"""What a stored history holds, for the commands that report on it and go on from it:
its grain and first partition (:func:`stored_history`), and the per-partition table
``rewindow backfill`` and the demo end with (:func:`summary_table`)."""

from __future__ import annotations

import re
from typing import Any, Sequence

from windowing.chain import ChainError
from windowing.metrics import ReplayMetrics
from windowing.storage import store
from windowing.storage.commits import current_commits_under
from windowing.storage.lake import join


def stored_history(spark: Any, output_root: str, pipeline_name: str) -> tuple[str, str] | None:
    """``(grain, first partition)`` of the history committed under ``output_root`` for a
    pipeline, from its folder names and lineage; None when nothing is committed.

    The first partition is the one whose lineage has no previous partition (it started
    from no state), else the oldest committed one.
    """
    found = current_commits_under(spark, join(str(output_root), pipeline_name))
    keys = {}
    for name, commit in found.items():
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}-\d{4}", name):
            keys[f"{name[:-2]}:{name[-2:]}"] = ("hour", commit)
        elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", name):
            keys[name] = ("day", commit)
    if not keys:
        return None
    grains = {g for g, _ in keys.values()}
    if len(grains) > 1:
        raise ChainError(
            f"{join(str(output_root), pipeline_name)} holds both day and hour partitions: one history has one grain"
        )
    grain = grains.pop()
    firsts = sorted(k for k, (_, c) in keys.items() if (lin := store.Lineage.of(c)) and lin.previous_partition is None)
    return grain, (firsts[0] if firsts else min(keys))


def summary_table(pipeline_name: str, keys: Sequence[str], commits: dict[str, Any]) -> str:
    """The per-partition table ``rewindow backfill``, ``rewindow status`` and the demo end
    with; a ``filtered`` column when a partition's ``source.filter`` dropped rows."""
    metrics = {key: ReplayMetrics.from_dict(c.metrics) for key, c in commits.items() if key in keys}
    filtered = any(m.filtered_rows for m in metrics.values())
    header = f"{'partition':<18}{'events':>10}" + (f"{'filtered':>10}" if filtered else "")
    header += f"{'emitted':>10}{'late':>8}{'rejected':>10}{'open':>8}"
    lines = [f"  {header}  watermark reached"]
    for key in keys:
        m = metrics.get(key)
        if m is None:
            lines.append(f"  {key:<18}{'(not committed)':>{56 if filtered else 46}}")
            continue
        lines.append(
            f"  {key:<18}{m.input_rows:>10,}"
            + (f"{m.filtered_rows:>10,}" if filtered else "")
            + f"{m.windows_emitted:>10,}{m.late_events:>8,}{m.rejected_rows:>10,}{m.open_windows:>8,}"
            f"  {m.watermark_reached}"
        )
    return "\n".join(lines)


def changed_windows(spark: Any, old_run: str, new_run: str) -> int | None:
    """The window emissions (rows of ``aggregates``) in one of two runs and not the other,
    counted exactly (``exceptAll`` both ways: duplicates counted, one Spark job): 0 when a
    rerun reproduced its partition; None when the old run is gone (a damaged output)."""
    from windowing.storage.lake import Lake, glob_escape  # noqa: PLC0415

    if not Lake(spark).exists(join(old_run, "aggregates", "_SUCCESS")):
        return None
    old = spark.read.parquet(glob_escape(join(old_run, "aggregates")))
    new = spark.read.parquet(glob_escape(join(new_run, "aggregates")))
    if sorted(old.columns) != sorted(new.columns):
        return int(max(old.count(), new.count()))
    new = new.select(*old.columns)
    return int(old.exceptAll(new).unionAll(new.exceptAll(old)).count())
