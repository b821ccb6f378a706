"""A reconcile run's outputs: ``mismatches/``, ``summary/`` and ``figures.json`` written
into a new run folder and committed (:func:`write_reconcile`), and read back
(:func:`read_reconcile`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Sequence

from windowing.config import Pipeline
from windowing.reconcile.compare import ReconcileResult
from windowing.reconcile.vocabulary import FIGURES, OUTPUTS
from windowing.storage.commits import current_commit, new_run_id
from windowing.storage.errors import InputError
from windowing.storage.lake import glob_escape, join
from windowing.storage.outputs import Staged, check_output_target, write_datasets

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from windowing.storage.commits import Commit


def write_reconcile(
    result: ReconcileResult, out_dir: str | Path, pipeline: Pipeline | None = None, inputs: Sequence[Any] = ()
) -> Commit:
    """Write ``mismatches/``, ``summary/`` (Parquet) and ``figures.json/`` into a new run
    folder of ``out_dir`` and make it current with a commit record written last, as
    :mod:`windowing.storage.outputs` does for a replay (a crash leaves the previous run current; the
    last :data:`windowing.storage.commits.KEEP_RUNS` are kept). ``inputs`` (the replay output and the
    live path) may not be or hold the output.

    Returns the :class:`windowing.storage.commits.Commit`. Raises :class:`windowing.storage.errors.OutputError`
    naming the path when the target is refused or a write fails.
    """
    out = str(out_dir)
    spark = result.summary.sparkSession
    check_output_target(spark, out, inputs)
    staged = Staged(
        spark,
        out,
        new_run_id(),
        result.figures,
        pipeline.name if pipeline else result.pipeline,
        pipeline.fingerprint() if pipeline else "",
    )
    frames = {
        "mismatches": result.mismatches,
        "summary": result.summary.coalesce(1),
        FIGURES: spark.createDataFrame([(json.dumps(result.figures, sort_keys=True),)], "value string").coalesce(1),
    }

    write_datasets(staged, frames, text=(FIGURES,))
    return staged.commit({"kind": "reconcile"})


def read_reconcile(spark: SparkSession, out_dir: str | Path) -> SimpleNamespace:
    """The current run of a :func:`write_reconcile` output: ``mismatches``, ``summary``
    (DataFrames), ``figures`` (dict) and ``commit``."""
    commit = current_commit(spark, str(out_dir))
    if commit is None:
        raise InputError(f"{out_dir}: no reconcile output here (nothing committed)")
    frames = {name: spark.read.parquet(glob_escape(join(commit.run_path, name))) for name in OUTPUTS}
    return SimpleNamespace(**frames, figures=commit.metrics, commit=commit)
