"""A diff's outputs: the differing rows (Parquet: ``windows/``, ``late_events/``,
``rejected/``), ``summary.json`` and ``report.html``, written into a new run folder and
committed as a replay's outputs are (:func:`write_diff`), and read back (:func:`read_diff`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from windowing.diff.report import render_report
from windowing.diff.result import DiffResult
from windowing.storage.commits import current_commit, new_run_id
from windowing.storage.errors import InputError
from windowing.storage.lake import Lake, glob_escape, join
from windowing.storage.outputs import Staged, check_output_target, write_datasets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.storage.commits import Commit

KIND = "diff"
SUMMARY = "summary.json"
REPORT = "report.html"
#: The differing rows' tables, by the dataset they come from.
TABLES = {"aggregates": "windows", "late_events": "late_events", "rejected": "rejected"}


def write_diff(result: DiffResult, out_dir: str, inputs: Sequence[str] = ()) -> Commit:
    """Write the tables, ``summary.json`` (the figures) and ``report.html`` into a new run
    folder of ``out_dir`` and make it current with a commit record written last (a crash
    leaves the previous run current). ``inputs`` (both sides) may not be or hold it."""
    spark = next(iter(result.tables.values())).sparkSession
    check_output_target(spark, out_dir, inputs)
    staged = Staged(spark, out_dir, new_run_id(), result.figures, str(result.figures.get("pipeline") or ""), "")
    write_datasets(staged, {TABLES[name]: df for name, df in result.tables.items()}, workers=3)
    lake = Lake(spark)
    lake.put_text(join(staged.path, SUMMARY), json.dumps(result.figures, indent=2, sort_keys=True, default=str) + "\n")
    lake.put_text(join(staged.path, REPORT), render_report(result.figures))
    return staged.commit({"kind": KIND})


@dataclass(frozen=True)
class DiffOutput:
    """A committed diff: its tables (DataFrames), figures, commit, and the report's and
    summary's paths."""

    tables: dict[str, DataFrame]
    figures: dict[str, Any]
    commit: Commit
    report: str
    summary: str


def read_diff(spark: SparkSession, out_dir: str) -> DiffOutput:
    """The current run of a :func:`write_diff` output."""
    commit = current_commit(spark, out_dir)
    if commit is None or commit.extra.get("kind") != KIND:
        raise InputError(f"{out_dir}: no diff output here (nothing committed by rewindow diff)")
    tables = {t: spark.read.parquet(glob_escape(join(commit.run_path, t))) for t in TABLES.values()}
    return DiffOutput(tables, commit.metrics, commit, join(commit.run_path, REPORT), join(commit.run_path, SUMMARY))
