"""What the Airflow data-quality task says when an interval's partition is not committed
and current (``orchestration/airflow.py``), as plain Python: no Airflow import, so the
main environment tests it.

A partition *out of date* (its landed files changed since its commit, issue 46, or it
follows one that did or was rerun) is not fixed by rerunning that interval alone: every
committed partition after the first out-of-date one must be replayed again, in order.
The message names those intervals, the ``airflow tasks clear`` command that clears them
(replay with Downstream: each replay then runs again after the one before it) and the
equivalent ``rewindow backfill --rerun-from``; ``rewindow status`` is the source of truth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from windowing.chain import OUT_OF_DATE

if TYPE_CHECKING:
    from windowing.chain import Chain, PartitionStatus


def not_current(chain: "Chain", status: "PartitionStatus", dag_id: str, pipeline_file: str) -> str:
    """The failure message of the data-quality task of ``status``'s interval (not committed
    and current), naming what to clear."""
    key = status.key
    message = f"partition {key} of pipeline {chain.pipeline.name} is {status.status}: {status.detail}" + (
        f" (run {status.run_path})" if status.run_path else ""
    )
    if status.status != OUT_OF_DATE:
        return message + (
            ". The next interval will not run until this one passes: fix the input and clear this run's "
            f"replay task (or rewindow backfill ... --rerun-from {key})"
        )
    stale = [s.partition for s in chain.out_of_date()]  # oldest first
    first = stale[0] if stale else key
    start_of = chain.partitions.start_of
    todo = [k for k in chain.committed_keys() if start_of(k) >= start_of(first)] or [key]
    last = todo[-1]
    span = first if first == last else f"{first}..{last}"
    starts = [chain.partitions.window(k)[0].isoformat() for k in (first, last)]
    root = str(chain.output_root)
    return message + (
        f". Clear the intervals {span} ({len(todo)} partition(s), replayed in order from {first}): "
        f"`airflow tasks clear {dag_id} -t replay -s {starts[0]} -e {starts[1]} -d -y`, or once "
        f"`rewindow backfill --config {pipeline_file} --input {chain.landing_zone} --output {root} "
        f"--rerun-from {first} --to {last}`. `rewindow status --output {root}` lists every partition "
        "and why (the source of truth)."
    )
