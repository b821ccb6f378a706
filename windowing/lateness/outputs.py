"""A lateness run's outputs: its tables (Parquet), ``figures.json`` and ``report.html``
written into a new run folder and committed (:func:`write_lateness`), and read back
(:func:`read_lateness`: the next partition's ``--state-in``, a range's report).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from windowing.config import Pipeline
from windowing.lateness.options import FIGURES, KIND, REPORT, TABLES, LatenessResult
from windowing.lateness.report import render_report
from windowing.storage.commits import current_commit, new_run_id
from windowing.storage.errors import InputError
from windowing.storage.lake import Lake, glob_escape, join
from windowing.storage.manifest import write_manifest
from windowing.storage.outputs import Staged, check_manifest, check_output_target, write_datasets

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

    from windowing.storage.commits import Commit


def write_lateness(
    result: LatenessResult, out_dir: str | Path, pipeline: Pipeline, inputs: Sequence[str] = ()
) -> Commit:
    """Write the tables (Parquet), ``figures.json`` and ``report.html`` into a new run
    folder of ``out_dir`` and commit it (as :mod:`windowing.storage.outputs` commits a replay: a crash
    leaves the previous run current). Returns the :class:`windowing.storage.commits.Commit`."""
    out = str(out_dir)
    spark = result.tables["curves"].sparkSession
    check_output_target(spark, out, inputs)
    staged = Staged(spark, out, new_run_id(), result.figures, pipeline.name, pipeline.fingerprint())
    frames = dict(result.tables)
    frames[FIGURES] = spark.createDataFrame(
        [(json.dumps(result.figures, sort_keys=True, default=str),)], "value string"
    ).coalesce(1)

    write_datasets(staged, frames, text=(FIGURES,), workers=6)
    if "state" in frames:  # the next partition's --state-in: whole or refused (windowing.storage.manifest)
        staged.state_manifest = write_manifest(spark, join(staged.path, "state")).to_dict()
    Lake(spark).put_text(join(staged.path, REPORT), render_report(result.figures))
    return staged.commit({"kind": KIND, "tables": sorted(result.tables)})


@dataclass(frozen=True)
class LatenessOutput:
    """A committed lateness output: its tables (DataFrames), figures, commit and report path."""

    tables: dict[str, DataFrame]
    figures: dict[str, Any]
    commit: Commit
    report: str


def read_lateness(spark: SparkSession, out_dir: str | Path) -> LatenessOutput:
    """The current run of a lateness output: its tables (DataFrames), figures and commit."""
    commit = current_commit(spark, str(out_dir))
    if commit is None or commit.extra.get("kind") != KIND:
        raise InputError(f"{out_dir}: no lateness output here (nothing committed by rewindow lateness)")
    names = commit.extra.get("tables") or TABLES
    if "state" in names:
        check_manifest(spark, join(commit.run_path, "state"), commit, str(out_dir))
    tables = {name: spark.read.parquet(glob_escape(join(commit.run_path, name))) for name in names}
    return LatenessOutput(tables, commit.metrics, commit, join(commit.run_path, REPORT))
