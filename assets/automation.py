"""Declarative automation: rerun the partitions the state-chain check found out of date,
and rebuild the history when the pipeline changed.

After a rerun changed a partition's state (its landed input changed), the partitions
after it no longer follow from it: ``state_chain_in_sync`` reports each of them, failed,
on its own current materialization (``assets/pipelines.py``). :func:`rerun_out_of_date`
is true for exactly those partitions, and for none while a run or backfill of the asset
is in progress. It is attached to each pipeline's ``window_state``; nothing evaluates it
until the automation sensor ``rerun_out_of_date_partitions`` (stopped by default,
``orchestration/definitions.py``) is turned on. Its requests become one backfill, which
the single-run backfill policy makes one run over the range, replayed oldest first.

The condition reads Dagster's own check records (no Spark, nothing listed): a
partition counts while its newest chain evaluation failed and targets its newest
materialization, so a rerun (a newer materialization, then a passing evaluation) ends it.
"""

from __future__ import annotations

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

#: The name the UI shows for the condition.
LABEL = "chain check out of date"


class ChainOutOfDate(dg.AutomationCondition[dg.AssetKey]):
    """The partitions of a ``window_state`` whose newest ``state_chain_in_sync`` evaluation
    failed on their newest materialization."""

    check_name: str = "state_chain_in_sync"

    @property
    def name(self) -> str:
        return LABEL

    def evaluate(self, context: dg.AutomationContext[dg.AssetKey]) -> dg.AutomationResult[dg.AssetKey]:
        key = dg.AssetCheckKey(context.key, self.check_name)
        storage = context.asset_graph_view.instance.event_log_storage
        stale = {
            info.partition_key
            for info in storage.get_asset_check_partition_info([key])
            if info.partition_key is not None
            and info.latest_execution_status == AssetCheckExecutionRecordStatus.FAILED
            and info.latest_target_materialization_storage_id is not None
            and info.latest_target_materialization_storage_id == info.latest_materialization_storage_id
        }
        if not stale:
            return dg.AutomationResult(context, context.get_empty_subset())
        return dg.AutomationResult(context, context.candidate_subset.compute_intersection_with_partition_keys(stale))


#: The label of the rebuild the condition asks for when the pipeline changed.
REBUILD_LABEL = "pipeline changed: rebuild"


def rerun_out_of_date() -> dg.AutomationCondition[dg.AssetKey]:
    """:class:`ChainOutOfDate`, or the pipeline changed (a new code version: its
    fingerprint) with the partitions materialized before: a rebuild of them, which the
    replay writes as a new version of the history and switches in when whole
    (:mod:`windowing.rebuild`); and no run or backfill of the asset in progress."""
    changed = (dg.AutomationCondition.code_version_changed() & ~dg.AutomationCondition.missing()).with_label(
        REBUILD_LABEL
    )
    return ((ChainOutOfDate() | changed) & ~dg.AutomationCondition.in_progress()).with_label(LABEL)
