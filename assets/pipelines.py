"""One asset group per pipeline YAML: the replay of the event history, partition by partition.

Each pipeline gets a ``@multi_asset`` producing four assets from one replay:

| asset | what | where |
|---|---|---|
| ``<pipeline>/window_state`` | state carried to the next partition | ``<out>/state/`` |
| ``<pipeline>/windowed_aggregates`` | emitted windows | ``<out>/aggregates/`` |
| ``<pipeline>/late_events`` | (event, window) pairs that were late | ``<out>/late_events/`` |
| ``<pipeline>/rejected_events`` | rows that could not be processed | ``<out>/rejected/`` |

with ``<out>`` the current run of ``<output_root>/<pipeline name>/<partition key>/``,
committed by ``windowing.storage.outputs`` (a rerun commits a new run that replaces it as a whole;
the output root may be any URI Spark writes).

The state of partition N is the starting state of N+1. ``window_state`` declares that
dependency on its own previous partition, and reads the state from the store above,
never through an IO manager, so a single-run backfill over a range works: it replays
the partitions oldest to newest inside the one run, each to its own folder, carrying
the state from one to the next exactly as separate runs would.
"""

# No `from __future__ import annotations` here: Dagster reads the asset function's `config`
# annotation as a class, not as a string. Names imported for type checking only are quoted.

import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from assets.automation import rerun_out_of_date
from assets.catalog import published_check_result, published_check_spec, publisher, table_name_metadata
from assets.events import EVENTS_KEY
from assets.matches_live import LivePartition, live_check_results, live_check_spec
from assets.preview import column_schema, table_preview
from assets.resources import SparkResource, StorageResource
from windowing import rebuild
from windowing.chain import Chain, ChainError, PartitionResult
from windowing.config import Pipeline, Trigger, ignored_fields_note
from windowing.contract import CLOSE_REASONS, IDLE_REASON, WATERMARK_REASON, WINDOW_COLUMNS
from windowing.durations import human_duration
from windowing.metrics import ReplayMetrics
from windowing.partitions import Partitions
from windowing.storage import store, versions
from windowing.storage.lake import join, qualify
from windowing.validation.registry import quality_checks

if TYPE_CHECKING:
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )
    from pyspark.sql import SparkSession

    from windowing.storage.commits import Commit
    from windowing.storage.input_record import InputChanges

#: ``(partition key, result)`` of one check, per partition.
PartitionResults = list[tuple[str, dg.AssetCheckResult]]

OUTPUTS = {  # asset name -> dataset of a committed run (windowing.storage.outputs)
    "window_state": "state",
    "windowed_aggregates": "aggregates",
    "late_events": "late_events",
    "rejected_events": "rejected",
}
CHECK_NAME = "state_chain_in_sync"
#: The check on the outputs but ``window_state`` (whose chain check says it too) that fails
#: for a partition whose landed files changed since its commit, and every partition after it.
INPUT_CHECK = "input_unchanged"
INPUT_CHECKED = ("windowed_aggregates", "late_events", "rejected_events")
#: Blocking data-quality checks per output asset: which windowing.validation checks each covers.
#: Names, and prefixes ending in ``_``; derived from the check registry (windowing.validation.registry).
QUALITY_CHECKS = {asset: quality_checks(dataset) for asset, dataset in OUTPUTS.items()}


class ReplayConfig(dg.Config):
    """Run configuration of a pipeline's replay."""

    flush_at_end: bool = Field(
        default=False,
        description=(
            "Emit every window still open after the newest partition of this run (reason END_OF_INPUT). "
            "Use it only at the real end of the history: a flushed partition's state cannot be continued."
        ),
    )
    checks: bool = Field(
        default=True,
        description=(
            "Validate every partition's input and outputs (pandera schemas, window rules, conservation). "
            "A failing partition stops the run before the next one, and later runs refuse to continue from it."
        ),
    )


def asset_prefix(pipeline_name: str) -> str:
    """A Dagster-safe name for a pipeline (``clicks-hourly`` -> ``clicks_hourly``)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", pipeline_name)
    return name if re.match(r"[A-Za-z_]", name) else f"p_{name}"


#: Owners of the pipeline assets when none are given (``REWINDOW_ASSET_OWNERS``).
DEFAULT_OWNERS = ("team:rewindow",)

#: What each output asset holds (its description, before the pipeline's name).
DESCRIPTIONS = {
    "window_state": "Watermarks, clocks and open windows at the end of the partition: "
    "the next partition starts from it.",
    "windowed_aggregates": "Windows emitted during the partition (one row per emission).",
    "late_events": "Events that arrived after their window had closed, one row per (event, window).",
    "rejected_events": "Rows that could not be processed, with the reason.",
}
CHAIN_CHECK_DESCRIPTION = (
    "Every materialized partition was computed from the current state of the partition before it. "
    "Fails (warning) after a rerun changed an earlier partition's state; its metadata names the "
    "partitions to rerun. Executed on its own, it "
    "recomputes the chain over the committed partitions."
)
INPUT_CHECK_DESCRIPTION = (
    "The partition's landed files are the ones it read (its commit's record of them, compared with a "
    "listing of its day folder now). Fails (warning) for a partition whose files were added, removed "
    "or rewritten since its commit, naming them, and for every partition after it; its metadata "
    "names the range to rerun. The landing-zone sensor evaluates it when a day's files change."
)


@dataclass(frozen=True)
class _ReplayAssets:
    """What one pipeline's replay asset is made of: the pipeline, its partitions, the keys of
    its four outputs (output name -> key) and its check specs. Each step of a run reads it."""

    pipeline: Pipeline
    pipeline_file: Path
    partitions_def: dg.TimeWindowPartitionsDefinition
    prefix: str
    keys: dict[str, dg.AssetKey]
    chain_check: dg.AssetCheckSpec  # state_chain_in_sync
    inputs: list[dg.AssetCheckSpec]  # input_unchanged, one per INPUT_CHECKED
    quality: list[dg.AssetCheckSpec]  # <output>_valid, one per output
    live: dg.AssetCheckSpec | None  # matches_live; None without reconcile.live
    published: dg.AssetCheckSpec | None  # published_matches_commit; None without output.catalog

    @property
    def state_key(self) -> dg.AssetKey:
        return self.keys["window_state"]

    @property
    def check_specs(self) -> list[dg.AssetCheckSpec]:
        optional = [spec for spec in (self.live, self.published) if spec is not None]
        return [self.chain_check, *self.inputs, *self.quality, *optional]

    @property
    def replay_checks(self) -> set[dg.AssetCheckKey]:
        """The checks a replay that committed a partition evaluates, selected or not: all but
        ``published_matches_commit`` (:func:`_published_checks` reports it)."""
        live = [self.live.key] if self.live else []
        return {self.chain_check.key, *(i.key for i in self.inputs), *(q.key for q in self.quality), *live}

    def blocking(self, checks: Iterable[dg.AssetCheckKey]) -> dict[dg.AssetCheckKey, bool]:
        """Whether each of ``checks`` blocks, as declared: the quality checks do, and
        ``matches_live`` when its spec says so; the chain and input checks never do."""
        live = self.live
        return {k: k.name.endswith("_valid") or (live is not None and k == live.key and live.blocking) for k in checks}


def _replay_assets(
    pipeline: Pipeline, pipeline_file: Path, partitions_def: dg.TimeWindowPartitionsDefinition
) -> _ReplayAssets:
    """The keys and check specs of ``pipeline``'s replay asset."""
    prefix = asset_prefix(pipeline.name)
    keys = {name: dg.AssetKey([prefix, name]) for name in OUTPUTS}
    return _ReplayAssets(
        pipeline,
        pipeline_file,
        partitions_def,
        prefix,
        keys,
        chain_check=dg.AssetCheckSpec(CHECK_NAME, asset=keys["window_state"], description=CHAIN_CHECK_DESCRIPTION),
        inputs=[
            dg.AssetCheckSpec(INPUT_CHECK, asset=keys[name], description=INPUT_CHECK_DESCRIPTION)
            for name in INPUT_CHECKED
        ],
        quality=[_quality_check_spec(keys[name], name) for name in OUTPUTS],
        live=live_check_spec(pipeline, keys["windowed_aggregates"]),
        published=published_check_spec(pipeline, keys["windowed_aggregates"]),
    )


def _quality_check_spec(asset_key: dg.AssetKey, name: str) -> dg.AssetCheckSpec:
    """The blocking data-quality check of output ``name``."""
    return dg.AssetCheckSpec(
        f"{name}_valid",
        asset=asset_key,
        blocking=True,
        description=(
            "Data-quality checks of each partition a run replays, one result per partition (windowing.validation: "
            + ", ".join(f"`{p}*`" if p.endswith("_") else f"`{p}`" for p in QUALITY_CHECKS[name])
            + "). A partition that fails is not committed, and the run stops before the next one; rejected rows "
            "within the pipeline's `quality.maxRejectedShare` only warn. Executed on its own, it re-runs them "
            "on the "
            "committed output of each partition, against its landed input."
        ),
    )


def _asset_specs(assets: _ReplayAssets, owners: tuple[str, ...]) -> list[dg.AssetSpec]:
    """The four output assets. ``window_state`` depends on its own previous partition."""
    pipeline, pipeline_file = assets.pipeline, assets.pipeline_file
    previous = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)
    common = _common_metadata(pipeline, pipeline_file)
    return [
        dg.AssetSpec(
            key,
            deps=[EVENTS_KEY, dg.AssetDep(assets.state_key, partition_mapping=previous)]
            if name == "window_state"
            else [EVENTS_KEY],
            description=f"{DESCRIPTIONS[name]} Pipeline `{pipeline.name}` ({pipeline_file.name}).",
            group_name=assets.prefix,
            partitions_def=assets.partitions_def,
            metadata=common,
            kinds={"spark", "parquet"},
            owners=list(owners),
            code_version=pipeline.fingerprint(),
            # Off until the sensor rerun_out_of_date_partitions is turned on (orchestration/sensors.py).
            automation_condition=rerun_out_of_date() if name == "window_state" else None,
        )
        for name, key in assets.keys.items()
    ]


def _common_metadata(pipeline: Pipeline, pipeline_file: Path) -> dict[str, Any]:
    """The metadata every output asset carries: the pipeline, its fingerprint, its window,
    and code references to its YAML and to this module."""
    return {
        "pipeline": pipeline.name,
        "pipeline_file": str(pipeline_file),
        "fingerprint": pipeline.fingerprint(),
        "window": pipeline.window.type.value,
        "dagster/code_references": dg.CodeReferencesMetadataValue(
            code_references=[
                dg.LocalFileCodeReference(
                    file_path=str(Path(pipeline_file).resolve()), line_number=1, label=f"pipeline {pipeline_file.name}"
                ),
                dg.LocalFileCodeReference(
                    file_path=str(Path(__file__).resolve()),
                    line_number=build_pipeline_assets.__code__.co_firstlineno,
                    label="replay (assets/pipelines.py)",
                ),
            ]
        ),
    }


def build_pipeline_assets(
    pipeline: Pipeline,
    pipeline_file: Path,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    owners: tuple[str, ...] = DEFAULT_OWNERS,
) -> dg.AssetsDefinition:
    """The ``@multi_asset`` replaying ``pipeline`` (a :class:`windowing.Pipeline`).

    Each asset carries Dagster's standard catalog fields: ``owners``, the pipeline's
    fingerprint as its code version (a change of configuration makes Dagster show the
    partitions replayed before it as unsynced) and code references to the pipeline's
    YAML and to this module. A run's steps are the functions below it."""
    assets = _replay_assets(pipeline, pipeline_file, partitions_def)

    @dg.multi_asset(
        name=f"{assets.prefix}_replay",
        specs=_asset_specs(assets, owners),
        check_specs=assets.check_specs,
        # Subsettable so that a check can be executed on its own (against the committed
        # outputs); the four outputs are still written together by every replay.
        can_subset=True,
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def replay_pipeline(
        context: dg.AssetExecutionContext, config: ReplayConfig, pyspark: SparkResource, storage: StorageResource
    ) -> Iterator[dg.Output[None] | dg.MaterializeResult[Any] | dg.AssetCheckEvaluation]:
        spark = pyspark.spark_session
        selected_checks = [k for k in context.assets_def.check_keys if k in context.selected_asset_check_keys]
        yield from _check_outputs(context, selected_checks)
        if not context.selected_asset_keys:
            yield from _checks_only(context, spark, assets, storage, selected_checks)
            return
        _warn_about_ignored_settings(context.log, pipeline, pipeline_file, storage)
        parts, refused = _replay(context, config, spark, assets, storage)
        succeeded = refused is None and all(p.committed for p in parts)
        yield from _record_materializations(context, spark, assets, parts, succeeded)
        yield from _replay_evaluations(context, config, spark, assets, storage, parts, selected_checks)
        _raise_failure(pipeline, parts, refused)

    return replay_pipeline


# --------------------------------------------------------------------------- the steps of a run


def _check_outputs(
    context: dg.AssetExecutionContext, selected_checks: Sequence[dg.AssetCheckKey]
) -> Iterator[dg.Output[None]]:
    """Each selected check's output (Dagster requires them; the results are evaluations)."""
    for check_key in selected_checks:
        yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key))


def _checks_only(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    assets: _ReplayAssets,
    storage: StorageResource,
    selected_checks: Sequence[dg.AssetCheckKey],
) -> Iterator[dg.AssetCheckEvaluation]:
    """Checks executed on their own: verify what is committed, replay nothing. The UI's
    Execute button launches a run without a partition: then every committed one."""
    asked = list(context.partition_keys) if context.has_partition_key or context.has_partition_key_range else None
    published = assets.published
    if published is not None and published.key in selected_checks:
        published_keys = (
            asked
            if asked is not None
            else sorted(pipeline_chain(spark, assets.pipeline, storage, assets.partitions_def).committed())
        )
        yield from _published_checks(context, spark, assets.pipeline, storage, published, published_keys)
    yield from _verify_committed(context, spark, assets, storage, selected_checks, asked)


def _replay(
    context: dg.AssetExecutionContext,
    config: ReplayConfig,
    spark: "SparkSession",
    assets: _ReplayAssets,
    storage: StorageResource,
) -> tuple[list[PartitionResult], dg.Failure | None]:
    """``(the run's partitions replayed, oldest first; the refusal that stopped the chain
    before or between partitions, if one did)``: a refused run still reports the chain."""
    parts: list[PartitionResult] = []
    try:
        for part in replay_partitions(
            spark,
            assets.pipeline,
            assets.partitions_def,
            storage,
            context.partition_keys,
            config.flush_at_end,
            context.log,
            context.run.run_id,
            config.checks,
        ):
            parts.append(part)
    except dg.Failure as exc:
        return parts, exc
    return parts, None


def _record_materializations(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    assets: _ReplayAssets,
    parts: Sequence[PartitionResult],
    succeeded: bool,
) -> Iterator[dg.MaterializeResult[Any]]:
    """Each replayed partition's four outputs as materialized, with their metadata.

    A replay writes the four outputs together: when only some were selected, the others
    are recorded as materialized too (events), so Dagster agrees with the disk. When the
    run fails (not ``succeeded``), the partitions it committed before stopping are current
    on disk: they are recorded as materialized, each under its own partition key, so that
    Dagster shows what the next partition will start from."""
    selected = {name: k for name, k in assets.keys.items() if k in context.selected_asset_keys}
    for part in (p for p in parts if p.committed):  # all of them when the run succeeded
        for name, asset_key in assets.keys.items():
            metadata = _metadata(spark, assets.pipeline, part, name)
            if succeeded and name in selected:
                context.add_asset_metadata(metadata, asset_key=asset_key, partition_key=part.key)
            else:
                context.log_event(dg.AssetMaterialization(asset_key=asset_key, partition=part.key, metadata=metadata))
    if succeeded:
        for asset_key in selected.values():
            yield dg.MaterializeResult(asset_key=asset_key)


def _replay_evaluations(
    context: dg.AssetExecutionContext,
    config: ReplayConfig,
    spark: "SparkSession",
    assets: _ReplayAssets,
    storage: StorageResource,
    parts: Sequence[PartitionResult],
    selected_checks: Sequence[dg.AssetCheckKey],
) -> Iterator[dg.AssetCheckEvaluation]:
    """The checks' evaluations after a replay, one per partition, each naming its partition
    and its own materialization (Dagster plans a check execution per partition of a range
    run; a run-level result would leave the others SKIPPED).

    A replay records the four outputs, so once it committed a partition it evaluates the
    checks of all four, selected or not (a check Dagster did not plan is recorded as its
    own execution): a run of window_state alone, or the automation sensor's, leaves none
    "Not Evaluated" (issue 47). A run that committed nothing evaluates the selected ones."""
    committed = any(p.committed for p in parts)
    published = assets.published
    if published is not None and (published.key in selected_checks or committed):
        keys = [p.key for p in parts] or context.partition_keys
        yield from _published_checks(context, spark, assets.pipeline, storage, published, keys)
    evaluated = assets.replay_checks if committed else set(selected_checks)
    results = _replay_results(context, config, spark, assets, storage, parts, evaluated)
    yield from _evaluations(context, results, assets.blocking(results))


def _replay_results(
    context: dg.AssetExecutionContext,
    config: ReplayConfig,
    spark: "SparkSession",
    assets: _ReplayAssets,
    storage: StorageResource,
    parts: Sequence[PartitionResult],
    evaluated: set[dg.AssetCheckKey],
) -> dict[dg.AssetCheckKey, PartitionResults]:
    """The results of the ``evaluated`` checks after a replay, per partition. The chain and
    input checks cover every partition the run was asked for, refused runs included; the
    quality checks the partitions it replayed; ``matches_live`` those it committed."""
    keys = assets.keys
    results: dict[dg.AssetCheckKey, PartitionResults] = {}
    asked = context.partition_keys if not parts else [p.key for p in parts]
    chain = pipeline_chain(spark, assets.pipeline, storage, assets.partitions_def)
    if assets.chain_check.key in evaluated:
        results[assets.chain_check.key] = list(_chain_results(chain, assets.state_key, asked, later_too=True))
    results.update(_inputs_results(chain, [i.key for i in assets.inputs if i.key in evaluated], asked, later_too=True))
    for name in OUTPUTS:
        key = dg.AssetCheckKey(keys[name], f"{name}_valid")
        if key in evaluated:
            results[key] = [
                (part.key, _quality_check(keys[name], key.name, QUALITY_CHECKS[name], [part], config.checks))
                for part in parts
            ]
    live = assets.live
    if live is not None and live.key in evaluated:
        runs = {p.key: (p.run_path, p.folder) for p in parts if p.committed}
        results[live.key] = list(
            _live_results(context, spark, assets.pipeline, assets.pipeline_file, assets.partitions_def, live, runs)
        )
    return results


def _raise_failure(pipeline: Pipeline, parts: Sequence[PartitionResult], refused: dg.Failure | None) -> None:
    """Fail the run, once its events are recorded: with the refusal that stopped the chain,
    or with the first partition that failed its blocking checks (nothing after it was
    replayed, and its output was not committed: write-audit-publish)."""
    if refused is not None:
        raise refused
    bad = [p for p in parts if not p.committed]
    if bad:
        raise dg.Failure(
            f"partition {bad[0].key} of pipeline {pipeline.name} failed its data-quality checks "
            f"({', '.join(bad[0].lineage.failed_checks)}); its output was not committed (the previous "
            f"output of {bad[0].key}, if any, stays current; the staged run is kept for inspection at "
            f"{bad[0].run_path}). The partitions after it were not replayed."
        )


def pipeline_chain(
    spark: "SparkSession",
    pipeline: Pipeline,
    storage: StorageResource,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    log: dg.DagsterLogManager | None = None,
) -> Chain:
    """The :class:`windowing.chain.Chain` of ``pipeline`` over the Dagster partitions: of
    the history's current version, or of the version a changed pipeline is rebuilt as
    (:func:`windowing.rebuild.plan`)."""
    return _chain_and_plan(spark, pipeline, storage, partitions_def, log)[0]


def _chain_and_plan(
    spark: "SparkSession",
    pipeline: Pipeline,
    storage: StorageResource,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    log: dg.DagsterLogManager | None = None,
) -> tuple[Chain, rebuild.VersionPlan]:
    first = partitions_def.get_first_partition_key()
    window = partitions_def.time_window_for_partition_key(first)
    grain = "hour" if window.end - window.start <= timedelta(hours=1) else "day"
    plan = rebuild.plan(spark, pipeline, storage.output_path())
    chain = Chain(
        spark,
        pipeline,
        storage.landing_path(),
        plan.build_root,
        Partitions(grain, window.start),
        partition_column=storage.partition_column(),
        **({"log": log} if log is not None else {}),
        publisher=publisher(spark, pipeline, storage.output_path(), plan.version),
    )
    return chain, plan


def replay_partitions(
    spark: "SparkSession",
    pipeline: Pipeline,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    storage: StorageResource,
    partition_keys: Sequence[str],
    flush_at_end: bool,
    log: dg.DagsterLogManager,
    run_id: str,
    checks: bool = True,
) -> Iterator[PartitionResult]:
    """The chain's replay of ``partition_keys`` (:meth:`windowing.chain.Chain.replay`), a
    refusal raised as a :class:`dagster.Failure`."""
    chain, plan = _chain_and_plan(spark, pipeline, storage, partitions_def, log)
    if plan.rebuild:
        log.info(
            f"{pipeline.name}: the pipeline changed since {plan.current} was built: these partitions go to "
            f"{plan.version}, rebuilt beside it; {plan.current} stays current (and published) until {plan.version} "
            "holds every partition it holds, then one switch"
        )
    try:
        yield from chain.replay(partition_keys, flush_at_end=flush_at_end, checks=checks, run_id=run_id)
    except ChainError as exc:
        raise as_failure(exc) from exc
    if plan.rebuild:
        keys = plan.whole(chain.partitions, partition_keys[-1])
        rebuild.switch_if_whole(chain, plan, keys, versions.KEEP_VERSIONS, say=lambda line: log.info(line))


def as_failure(exc: ChainError) -> dg.Failure:
    return dg.Failure(str(exc), metadata={k: dg.MetadataValue.json(v) for k, v in exc.metadata.items()})


def _warn_about_ignored_settings(
    log: dg.DagsterLogManager, pipeline: Pipeline, pipeline_file: Path, storage: StorageResource
) -> None:
    from windowing.storage.lake import qualify

    if pipeline.source.path and qualify(pipeline.source.path) != qualify(storage.landing_path()):
        log.warning(
            f"{pipeline_file.name}: source.path {pipeline.source.path} is not the landing zone; "
            f"Dagster runs read {storage.landing_path()} (StorageResource.landing_zone)"
        )
    if pipeline.flush_at_end:
        log.warning(
            f"{pipeline_file.name}: replay.flushAtEnd is ignored by Dagster runs; "
            "use the run config flush_at_end for the newest partition of a run"
        )
    note = ignored_fields_note(pipeline)
    if note:
        log.warning(f"{pipeline_file.name}: {note}")


#: Emit reasons (every one counted in ``emitted_by_reason`` and ``closed_by_reason``).
EMIT_REASONS = CLOSE_REASONS


def plotted_reasons(pipeline: Pipeline) -> tuple[str, ...]:
    """The reasons whose counts are numbers Dagster plots (``windows_emitted_<reason>``,
    ``windows_closed_<reason>``): those the pipeline closes windows by in any replay,
    ``WATERMARK``, and ``IDLE`` when its window has an idle timeout. ``MAX_DURATION`` (a
    session reaching its cap) and ``END_OF_INPUT`` (a run flushing its newest partition)
    are exceptions, zero on most partitions: a plot of them is a flat zero line, and one
    emitted only when non-zero leaves gaps the UI draws as missing data. They are in the
    ``*_by_reason`` JSON of each partition (docs/orchestration.md, "What is plotted")."""
    return (WATERMARK_REASON, IDLE_REASON) if pipeline.window.idle_timeout_ms is not None else (WATERMARK_REASON,)


def snapshots_possible(pipeline: Pipeline) -> bool:
    """Whether the pipeline's triggers emit snapshot rows (``atAggregate``): without one,
    ``snapshots_emitted`` is zero by its configuration, and not given."""
    return any(t is not Trigger.AT_WINDOW_END for t in pipeline.triggers)


def column_descriptions(pipeline: Pipeline) -> dict[str, str]:
    """What the output columns whose names could mislead mean (the catalog's Columns section)."""
    worker = getattr(pipeline.source, "worker", None)
    return (
        {
            worker: f"the worker the events were replayed on (the pipeline's source.worker column `{worker}`), "
            "not the Dagster partition"
        }
        if worker
        else {}
    )


def _metadata(spark: "SparkSession", pipeline: Pipeline, part: PartitionResult, name: str) -> dict[str, Any]:
    """Metadata of one asset of one partition: numbers Dagster plots across partitions
    (Plots → Partitions), the path, a typed preview.

    Every Int/Float entry is a plot in Plots -> Partitions: only numbers a replay of this
    pipeline gives on every partition, and can give non-zero (docs/orchestration.md)."""
    m = part.metrics
    return {
        **_window_metadata(pipeline, m),
        **_lateness_metadata(m),
        **_row_metadata(pipeline, m),
        **_run_metadata(part, name),
        **_table_metadata(spark, pipeline, part, name),
    }


def _window_metadata(pipeline: Pipeline, m: ReplayMetrics) -> dict[str, Any]:
    """The input rows, and the windows emitted and closed: in all, by plotted reason, by every reason."""
    by_reason = m.emitted_by_reason
    closed = m.closed_by_reason
    reasons = plotted_reasons(pipeline)
    return {
        "input_rows": dg.MetadataValue.int(m.input_rows),
        "windows_emitted": dg.MetadataValue.int(m.windows_emitted),
        **{f"windows_emitted_{r.lower()}": dg.MetadataValue.int(by_reason.get(r, 0)) for r in reasons},
        "emitted_by_reason": dg.MetadataValue.json(dict(by_reason)),
        "windows_closed": dg.MetadataValue.int(m.windows_closed),
        **{f"windows_closed_{r.lower()}": dg.MetadataValue.int(closed.get(r, 0)) for r in reasons},
        "closed_by_reason": dg.MetadataValue.json(dict(closed)),
        **({"snapshots_emitted": dg.MetadataValue.int(m.snapshots_emitted)} if snapshots_possible(pipeline) else {}),
    }


def _lateness_metadata(m: ReplayMetrics) -> dict[str, Any]:
    """The late events and (event, window) pairs, their share, and the pairs' lateness."""
    pct = m.lateness_ms_percentiles
    accepted = m.accepted_events
    return {
        # Distinct late events: the share of accepted events that came late (at most 1).
        "late_events": dg.MetadataValue.int(m.late_events),
        "late_event_windows": dg.MetadataValue.int(m.late_event_windows),
        "late_share": dg.MetadataValue.float(round(m.late_events / accepted, 6) if accepted else 0.0),
        # Lateness of the late (event, window) pairs: seconds for the plots (0 without any), and
        # the same duration as text in the units it is read in (1h 32m 55.518s).
        **{
            name: value
            for q, v in (("p50", pct.p50), ("p90", pct.p90), ("p99", pct.p99), ("max", pct.max))
            for name, value in (
                (f"lateness_{q}_seconds", dg.MetadataValue.float(round(v / 1000, 3) if v is not None else 0.0)),
                (f"lateness_{q}", dg.MetadataValue.text(human_duration(round(v)) if v is not None else "-")),
            )
        },
    }


def _row_metadata(pipeline: Pipeline, m: ReplayMetrics) -> dict[str, Any]:
    """The rows not replayed (rejected, filtered), the processors left out, the keys."""
    return {
        # Plotted on the rejected_events asset, as its row count; text here (zero on most days).
        "rejected_rows": dg.MetadataValue.text(f"{m.rejected_rows:,}"),
        # Rows source.filter dropped before the window (not rejected: the live pipeline drops them too);
        # plotted only for a pipeline with a filter (without one it is zero by its configuration).
        **({"filtered_rows": dg.MetadataValue.int(m.filtered_rows)} if pipeline.source.filter else {}),
        # The live pipeline's processors this replay did not run: its outputs stand before them.
        **(
            {"live_processors_ignored": dg.MetadataValue.text(", ".join(m.live_processors_ignored))}
            if m.live_processors_ignored
            else {}
        ),
        "unique_keys": dg.MetadataValue.int(m.unique_keys),
        "keys_held": dg.MetadataValue.int(m.keys_held),
    }


def _run_metadata(part: PartitionResult, name: str) -> dict[str, Any]:
    """The run: its speed, its watermark, its lineage, where the asset is, which version."""
    rows = part.metrics.input_rows
    return {
        "replay_seconds": dg.MetadataValue.float(round(part.seconds, 3)),
        "events_per_second": dg.MetadataValue.float(round(rows / part.seconds, 1) if part.seconds else 0.0),
        "watermark_reached": _timestamp(part.metrics.watermark_reached),
        "previous_partition": dg.MetadataValue.text(str(part.lineage.previous_partition)),
        "state_hash": dg.MetadataValue.text(part.lineage.state_hash),
        "flushed_at_end": dg.MetadataValue.bool(part.lineage.flushed_at_end),
        "path": dg.MetadataValue.path(f"{part.run_path}/{OUTPUTS[name]}"),
        # which version of the history this is (a rebuild's until it is switched in: docs/orchestration.md)
        "history_version": dg.MetadataValue.text(versions.of_path(part.run_path)),
    }


def _table_metadata(spark: "SparkSession", pipeline: Pipeline, part: PartitionResult, name: str) -> dict[str, Any]:
    """What the asset's table adds, read from it: Dagster's standard keys (the catalog's row
    count, its Columns section, where it lives), then the window state's own counts or the
    other tables' preview, then the table names."""
    m = part.metrics
    location = f"{part.run_path}/{OUTPUTS[name]}"
    df = spark.read.parquet(location)
    descriptions = column_descriptions(pipeline)
    meta: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(df.count()),
        "dagster/column_schema": dg.MetadataValue.table_schema(column_schema(df, descriptions)),
        "dagster/uri": dg.MetadataValue.url(qualify(location)),
    }
    if name == "window_state":
        meta["windows_created"] = dg.MetadataValue.int(m.windows_created)
        if IDLE_REASON in plotted_reasons(pipeline):  # idle flushes need an idle timeout
            meta["idle_keys_removed"] = dg.MetadataValue.int(m.idle_keys_removed)
    else:
        order = [c for c in WINDOW_COLUMNS if c in df.columns]
        meta["preview"] = table_preview(df.orderBy(*order) if order else df, descriptions=descriptions)
    meta.update(table_name_metadata(pipeline, OUTPUTS[name]))
    return meta


def _timestamp(iso: str | None) -> dg.MetadataValue:
    """An ISO-8601 time of the metrics as a Dagster timestamp (shown in the viewer's zone,
    with it); text when there is none (no event yet)."""
    if not iso:
        return dg.MetadataValue.text("none")
    try:
        return dg.MetadataValue.timestamp(datetime.fromisoformat(iso))
    except ValueError:
        return dg.MetadataValue.text(iso)


def _published_checks(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    pipeline: Pipeline,
    storage: StorageResource,
    spec: dg.AssetCheckSpec,
    partition_keys: Sequence[str],
) -> Iterator[dg.AssetCheckEvaluation]:
    """One ``published_matches_commit`` evaluation per partition: the tables against the commit records."""
    pub = publisher(spark, pipeline, storage.output_path())
    assert pub is not None  # the check exists only for a pipeline with output.catalog, as the publisher
    commits = store.pipeline_commits(spark, join(storage.output_path(), pipeline.name), partition_keys)
    for key in partition_keys:
        commit = commits.get(key)
        result = published_check_result(pub, spec.asset_key, key, commit.run_id if commit is not None else None)
        yield check_evaluation(context.instance, result, key, blocking=False)


def _verify_committed(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    assets: _ReplayAssets,
    storage: StorageResource,
    selected_checks: Sequence[dg.AssetCheckKey],
    asked: list[str] | None,
) -> Iterator[dg.AssetCheckEvaluation]:
    """The selected checks, executed on their own: the chain check over the committed
    partitions, each quality check re-run (:func:`_recheck_quality`) on the committed
    output of every partition asked for, and ``matches_live``. Nothing is replayed or written.

    ``asked``: the run's partitions; None for a run without one (the UI's Execute button
    on the Checks tab), which checks every committed partition and first reports one
    summary evaluation per check, without a partition (the one Dagster planned for the
    run), naming the partitions checked. Then one evaluation per partition, each naming
    it and targeting its materialization. A blocking check that fails (ERROR) fails the
    run after every evaluation is recorded, so assets downstream in the same run do not
    run; otherwise the run succeeds whenever the checks ran, whatever they found."""
    chain = pipeline_chain(spark, assets.pipeline, storage, assets.partitions_def)
    everything = asked is None
    committed = chain.committed()
    asked = sorted(committed if asked is None else asked, key=chain.partitions.start_of)
    results: dict[dg.AssetCheckKey, PartitionResults] = {}
    if assets.chain_check.key in selected_checks:
        results[assets.chain_check.key] = list(_chain_results(chain, assets.state_key, asked, later_too=everything))
    results.update(
        _inputs_results(chain, [i.key for i in assets.inputs if i.key in selected_checks], asked, everything)
    )
    wanted = [name for name in OUTPUTS if dg.AssetCheckKey(assets.keys[name], f"{name}_valid") in selected_checks]
    if wanted:
        results.update(_recheck_quality(context, spark, chain, assets, wanted, asked))
    live = assets.live
    if live is not None and live.key in selected_checks:
        runs = {k: (c.run_path, c.output) if (c := committed.get(k)) else (None, None) for k in asked}
        results[live.key] = list(
            _live_results(context, spark, assets.pipeline, assets.pipeline_file, assets.partitions_def, live, runs)
        )
    # Blocking as declared: a failing blocking check stops what is downstream in the same run
    # (after every evaluation is recorded); the chain check never blocks.
    yield from _evaluations(context, results, assets.blocking(results), summary=everything)


def _recheck_quality(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    chain: Chain,
    assets: _ReplayAssets,
    wanted: Sequence[str],
    asked: Sequence[str],
) -> dict[dg.AssetCheckKey, PartitionResults]:
    """The quality check of each output of ``wanted`` for each partition of ``asked``, oldest
    first: its checks re-run on its committed run (:func:`_recheck_partition`), or failed
    (a warning) when it has nothing committed."""
    keys = assets.keys
    results: dict[dg.AssetCheckKey, PartitionResults] = {}
    commits = chain.commits({k for key in asked for k in (key, chain.partitions.previous(key)) if k})
    for key in asked:
        part = _recheck_partition(context, spark, chain, assets.pipeline, commits, key)
        for name in wanted:
            check_name = f"{name}_valid"
            result = (
                _not_committed_result(keys[name], check_name, key)
                if part is None
                else _quality_check(keys[name], check_name, QUALITY_CHECKS[name], [part], True)
            )
            results.setdefault(dg.AssetCheckKey(keys[name], check_name), []).append((key, result))
    return results


def _recheck_partition(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    chain: Chain,
    pipeline: Pipeline,
    commits: Mapping[str, "Commit"],
    key: str,
) -> PartitionResult | None:
    """Partition ``key``'s committed run with its checks re-run (``windowing.validation.run_checks``)
    against its landed input and the state it started from; None when nothing is committed."""
    from windowing.storage.outputs import read_state
    from windowing.validation import run_checks

    commit = commits.get(key)
    lineage = store.Lineage.of(commit)
    if commit is None or lineage is None:
        return None
    prev_key = chain.partitions.previous(key)
    prev = commits.get(prev_key) if prev_key else None
    prev_state = read_state(spark, prev.output) if prev is not None else None
    events, _ = chain.read_events(key)
    checked = tuple(
        run_checks(
            spark,
            pipeline,
            commit.run_path,
            input_df=events,
            prev_state=prev_state,
            flush_at_end=lineage.flushed_at_end,
        )
    )
    context.log.info(f"{pipeline.name} {key}: re-checked the committed run {commit.run_path}")
    return PartitionResult(
        key, commit.output, commit.run_path, ReplayMetrics.from_dict(commit.metrics), lineage, None, checked
    )


def _not_committed_result(asset_key: dg.AssetKey, check_name: str, key: str) -> dg.AssetCheckResult:
    """A quality check of partition ``key``, which has nothing committed to check (a warning)."""
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=check_name,
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description=f"partition {key}: nothing committed, materialize it first",
        metadata={
            "partition": dg.MetadataValue.text(key),
            "checked_partitions": dg.MetadataValue.int(0),
        },
    )


def _evaluations(
    context: dg.AssetExecutionContext,
    results: Mapping[dg.AssetCheckKey, PartitionResults],
    blocking: Mapping[dg.AssetCheckKey, bool],
    summary: bool = False,
) -> Iterator[dg.AssetCheckEvaluation]:
    """Each check's results as evaluations, one per partition, the failing ones last (the
    newest evaluation is the one Dagster shows for the asset). First a summary evaluation
    without a partition when Dagster planned one for the run (a run without a partition,
    or with one partition: Dagster plans an unpartitioned execution of a check that does
    not declare partitions), so no execution of the run is left SKIPPED."""
    for check_key, per_partition in results.items():
        if summary or _planned_without_partition(context, check_key):
            keys = sorted({key for key, _ in per_partition})
            span = f"{keys[0]}..{keys[-1]}" if len(keys) > 1 else (keys[0] if keys else "none")
            yield _summary_evaluation(context.instance, check_key, per_partition, span)
        for key, result in sorted(per_partition, key=lambda kr: kr[1].passed, reverse=True):
            yield check_evaluation(context.instance, result, key, blocking=blocking[check_key])


def _planned_without_partition(context: dg.AssetExecutionContext, check_key: dg.AssetCheckKey) -> bool:
    from dagster._core.event_api import PartitionKeyFilter

    rows = context.instance.event_log_storage.get_asset_check_execution_history(
        check_key, limit=20, partition_filter=PartitionKeyFilter(key=None)
    )
    return any(r.run_id == context.run.run_id for r in rows)


def _summary_evaluation(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, per_partition: PartitionResults, span: str
) -> dg.AssetCheckEvaluation:
    """The evaluation of a run without a partition: how the partitions it checked fared."""
    failed = [key for key, result in per_partition if not result.passed]
    severities = {result.severity for _, result in per_partition if not result.passed}
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=check_key.asset_key), limit=1).records
    target = _target(records[0] if records else None)
    description = f"{len(per_partition)} partition(s) checked ({span}): " + (
        f"failed in {', '.join(failed)}" if failed else "all passed"
    )
    return dg.AssetCheckEvaluation(
        asset_key=check_key.asset_key,
        check_name=check_key.name,
        passed=not failed,
        severity=dg.AssetCheckSeverity.ERROR
        if dg.AssetCheckSeverity.ERROR in severities
        else dg.AssetCheckSeverity.WARN,
        description=description,
        blocking=False,
        partition=None,
        target_materialization_data=target,
        metadata={
            "checked_partitions": dg.MetadataValue.int(len(per_partition)),
            "partitions": dg.MetadataValue.text(span),
            "failed_partitions": dg.MetadataValue.text(", ".join(failed) or "none"),
        },
    )


def _live_results(
    context: dg.AssetExecutionContext,
    spark: "SparkSession",
    pipeline: Pipeline,
    pipeline_file: Path,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    live: dg.AssetCheckSpec,
    runs: Mapping[str, tuple[str | None, str | None]],
) -> Iterator[tuple[str, dg.AssetCheckResult]]:
    """``(partition, matches_live result)`` for each partition of ``runs``, oldest first."""
    keys = sorted(runs, key=lambda k: partitions_def.time_window_for_partition_key(k).start)
    windows = {k: partitions_def.time_window_for_partition_key(k) for k in keys}
    parts = [LivePartition(k, windows[k].start, windows[k].end, *runs[k]) for k in keys]
    began = time.monotonic()
    for key, result in live_check_results(spark, pipeline, pipeline_file, live.asset_key, parts):
        context.log.info(f"{pipeline.name} {key}: {live.name}: {result.description} ({time.monotonic() - began:.1f}s)")
        yield key, result
        began = time.monotonic()


def check_evaluation(
    instance: dg.DagsterInstance, result: dg.AssetCheckResult, partition: str, blocking: bool
) -> dg.AssetCheckEvaluation:
    """``result`` as the evaluation of one partition, targeting that partition's latest
    materialization (none if it was never materialized). The partition is named in the
    metadata too (``partition``), so the check's history and its Dagster event say it."""
    asset_key, check_name = result.asset_key, result.check_name
    assert asset_key is not None and check_name is not None  # every result made here names both
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
    ).records
    return dg.AssetCheckEvaluation(
        asset_key=asset_key,
        check_name=check_name,
        passed=result.passed,
        metadata={"partition": dg.MetadataValue.text(partition), **result.metadata},
        severity=result.severity,
        description=result.description,
        blocking=blocking,
        partition=partition,
        target_materialization_data=_target(records[0] if records else None),
    )


def _target(record: dg.EventLogRecord | None) -> "AssetCheckEvaluationTargetMaterializationData | None":
    """What an evaluation targets: the materialization ``record`` (None: never materialized)."""
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (  # not exported by dagster
        AssetCheckEvaluationTargetMaterializationData,
    )

    if record is None:
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=record.storage_id, run_id=record.event_log_entry.run_id, timestamp=record.timestamp
    )


def _chain_results(
    chain: Chain, state_key: dg.AssetKey, asked: Sequence[str], later_too: bool
) -> Iterator[tuple[str, dg.AssetCheckResult]]:
    """``(partition, result)`` of ``state_chain_in_sync`` for each partition of ``asked``,
    and with ``later_too`` each committed partition after the first of them (a rerun
    changes whether they follow from it) and each one out of date, oldest first: a
    committed partition passes when it follows from the current state of the one before
    (see store.out_of_date_partitions); one out of date fails (a warning) and names the
    range to rerun; one with nothing committed reports the chain of those that are."""
    committed = chain.committed_keys()
    stale = {s.partition: s.reason for s in chain.out_of_date()}
    rerun = f"{min(stale, key=chain.partitions.start_of)}..{committed[-1]}" if stale else None
    changed, _ = chain.input_changes(chain.committed()) if stale else ({}, [])
    keys = _with_later(asked, committed, chain.partitions, later_too) | set(stale)
    for key in sorted(keys, key=chain.partitions.start_of):
        meta = _chain_metadata(len(committed), stale, rerun, changed)
        passed, description = _chain_verdict(chain.partitions, key, committed, stale, rerun)
        yield (
            key,
            dg.AssetCheckResult(
                asset_key=state_key,
                check_name=CHECK_NAME,
                passed=passed,
                severity=dg.AssetCheckSeverity.WARN,
                metadata=meta,
                description=description,
            ),
        )


def _with_later(asked: Sequence[str], committed: Iterable[str], partitions: Partitions, later_too: bool) -> set[str]:
    """The partitions ``asked``, and with ``later_too`` each of ``committed`` that starts no
    earlier than the first of them."""
    keys = set(asked)
    if later_too and asked:
        first = min(partitions.start_of(k) for k in asked)
        keys |= {k for k in committed if partitions.start_of(k) >= first}
    return keys


def _chain_metadata(
    materialized: int, stale: Mapping[str, str], rerun: str | None, changed: Mapping[str, "InputChanges"]
) -> dict[str, Any]:
    """A ``state_chain_in_sync`` result's metadata: the partitions materialized, the range to
    rerun and why (``stale``: the partitions out of date), the landed files that changed."""
    meta: dict[str, Any] = {"materialized_partitions": dg.MetadataValue.int(materialized)}
    if rerun:
        meta["rerun_from"] = dg.MetadataValue.text(rerun.split("..")[0])
        meta["rerun_range"] = dg.MetadataValue.text(rerun)
        meta["out_of_date"] = dg.MetadataValue.md(
            "| partition | why |\n|---|---|\n" + "\n".join(f"| {k} | {why} |" for k, why in stale.items())
        )
    if changed:  # the landed files that changed since their partition's commit, named
        meta["changed_files"] = dg.MetadataValue.json({k: c.to_metadata() for k, c in changed.items()})
    return meta


def _chain_verdict(
    partitions: Partitions, key: str, committed: Sequence[str], stale: Mapping[str, str], rerun: str | None
) -> tuple[bool, str]:
    """Whether partition ``key`` passes ``state_chain_in_sync``, and why (:func:`_chain_results`)."""
    if key in stale:
        return False, f"partition {key} is out of date ({stale[key]}): rerun {rerun}"
    if key in committed:
        previous = partitions.previous(key)
        description = (
            f"partition {key} follows from the current state of {previous}"
            if previous
            else f"partition {key} is the first of the history"
        )
        if rerun:
            description += f"; {len(stale)} later partition(s) out of date: rerun {rerun}"
        return True, description
    return not stale, f"partition {key} is not materialized; " + (
        f"{len(stale)} materialized partition(s) out of date: rerun {rerun}"
        if stale
        else f"the {len(committed)} materialized partition(s) follow from each other"
    )


def _inputs_results(
    chain: Chain, check_keys: Sequence[dg.AssetCheckKey], asked: Sequence[str], later_too: bool
) -> dict[dg.AssetCheckKey, PartitionResults]:
    """``input_unchanged`` of each of ``check_keys`` for each partition of ``asked`` (and with
    ``later_too`` each committed partition after the first of them), and every partition
    whose landed files changed since its commit and each committed one after it, oldest
    first: one listing per day folder for all of them (:meth:`Chain.input_changes`)."""
    if not check_keys:
        return {}
    commits = chain.committed()
    committed = list(commits)
    changed, unknown = chain.input_changes(commits)
    start_of = chain.partitions.start_of
    first = min(changed, key=start_of) if changed else None
    rerun = f"{first}..{committed[-1]}" if first else None
    keys = _with_later(asked, committed, chain.partitions, later_too)
    if first is not None:
        keys |= {k for k in committed if start_of(k) >= start_of(first)}
    meta = _changed_metadata(changed, chain.partitions, first, rerun)
    out: dict[dg.AssetCheckKey, PartitionResults] = {k: [] for k in check_keys}
    for key in sorted(keys, key=start_of):
        passed, description = _input_verdict(chain.partitions, key, commits, changed, unknown, first, rerun)
        for check_key in check_keys:
            out[check_key].append(
                (
                    key,
                    dg.AssetCheckResult(
                        asset_key=check_key.asset_key,
                        check_name=check_key.name,
                        passed=passed,
                        severity=dg.AssetCheckSeverity.WARN,
                        metadata=meta,
                        description=description,
                    ),
                )
            )
    return out


def _changed_metadata(
    changed: Mapping[str, "InputChanges"], partitions: Partitions, first: str | None, rerun: str | None
) -> dict[str, Any]:
    """An ``input_unchanged`` result's metadata: the partitions whose landed files changed
    (``first``: the earliest), the files, the range to rerun; none when nothing changed."""
    if first is None:
        return {}
    return {
        "changed_partitions": dg.MetadataValue.text(", ".join(sorted(changed, key=partitions.start_of))),
        "changed_files": dg.MetadataValue.json({k: c.to_metadata() for k, c in changed.items()}),
        "rerun_from": dg.MetadataValue.text(first),
        "rerun_range": dg.MetadataValue.text(str(rerun)),
    }


def _input_verdict(
    partitions: Partitions,
    key: str,
    commits: Mapping[str, "Commit"],
    changed: Mapping[str, "InputChanges"],
    unknown: Sequence[str],
    first: str | None,
    rerun: str | None,
) -> tuple[bool, str]:
    """Whether partition ``key`` passes ``input_unchanged``, and why (:func:`_inputs_results`)."""
    start_of = partitions.start_of
    if key in changed:
        return False, f"partition {key}: {changed[key].describe()}: rerun {rerun}"
    if first is not None and key in commits and start_of(key) > start_of(first):
        return False, f"partition {key} comes after partition {first}, whose {changed[first].describe()}: rerun {rerun}"
    if key in commits:
        return True, f"partition {key} read the files its day folder holds now" + (
            " (its commit records no files: input unknown)" if key in unknown else ""
        )
    return first is None, f"partition {key} is not materialized" + (f"; rerun {rerun}" if rerun else "")


def landing_change_evaluations(
    instance: dg.DagsterInstance, chain: Chain, prefix: str, asked: Sequence[str]
) -> list[dg.AssetCheckEvaluation]:
    """What the landing-zone sensor reports when the files of the partitions ``asked``
    changed (``orchestration/sensors.py``): ``state_chain_in_sync`` and ``input_unchanged``
    of pipeline ``prefix`` (its asset prefix) for those partitions and every committed one
    after them, each targeting its partition's materialization, the failing ones last.
    ``chain`` may have no Spark session (a local history: commit records and listings only)."""
    state_key = dg.AssetKey([prefix, "window_state"])
    results: dict[dg.AssetCheckKey, PartitionResults] = {
        dg.AssetCheckKey(state_key, CHECK_NAME): list(_chain_results(chain, state_key, asked, later_too=True))
    }
    results.update(
        _inputs_results(
            chain, [dg.AssetCheckKey(dg.AssetKey([prefix, n]), INPUT_CHECK) for n in INPUT_CHECKED], asked, True
        )
    )
    return [
        check_evaluation(instance, result, key, blocking=False)
        for per_partition in results.values()
        for key, result in sorted(per_partition, key=lambda kr: kr[1].passed, reverse=True)
    ]


def _quality_check(
    asset_key: dg.AssetKey, check_name: str, prefixes: Iterable[str], parts: Sequence[PartitionResult], enabled: bool
) -> dg.AssetCheckResult:
    """One blocking check over ``parts`` (the replay calls it with one partition at a time):
    the windowing.validation checks it covers."""
    if not enabled:
        return dg.AssetCheckResult(
            asset_key=asset_key,
            check_name=check_name,
            passed=True,
            description="not run: checks were disabled in this run's config",
            metadata={"checked_partitions": dg.MetadataValue.int(0)},
        )
    per_partition, warnings, samples = _check_failures(prefixes, parts)
    failed = {k: v for k, v in per_partition.items() if v}
    not_committed = {p.key: p.run_path for p in parts if not p.committed}
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=check_name,
        passed=not failed and not warnings,
        # A warning (rejected rows within the pipeline's quality.maxRejectedShare) does not block.
        severity=dg.AssetCheckSeverity.ERROR if failed else dg.AssetCheckSeverity.WARN,
        description=_quality_description(per_partition, failed, warnings, not_committed),
        metadata={
            "checked_partitions": dg.MetadataValue.int(len(per_partition)),
            "failure_count": dg.MetadataValue.int(sum(sum(v.values()) for v in failed.values())),
            "failures_by_partition": dg.MetadataValue.json(failed),
            "warnings_by_partition": dg.MetadataValue.json(warnings),
            "not_committed": dg.MetadataValue.json(not_committed),
            "sample_failing_rows": dg.MetadataValue.json(samples),
        },
    )


def _check_failures(
    prefixes: Iterable[str], parts: Sequence[PartitionResult]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]], dict[str, Any]]:
    """What the checks named ``prefixes*`` found in ``parts``: per partition, the blocking
    failures (every partition, {} when none) and the warnings (the partitions with some),
    as failure counts by check; and each failed check's first sample (its partition, its
    description, five rows)."""
    per_partition: dict[str, dict[str, int]] = {}
    warnings: dict[str, dict[str, int]] = {}
    samples: dict[str, Any] = {}
    for part in parts:
        mine = [r for r in part.checks if r.name.startswith(tuple(prefixes))]
        per_partition[part.key] = {r.name: r.failure_count for r in mine if not r.passed and r.blocking}
        warned = {r.name: r.failure_count for r in mine if not r.passed and not r.blocking}
        if warned:
            warnings[part.key] = warned
        for r in mine:
            if not r.passed and r.name not in samples:
                samples[r.name] = {"partition": part.key, "description": r.description, "rows": r.sample[:5]}
    return per_partition, warnings, samples


def _quality_description(
    per_partition: Mapping[str, object],
    failed: Mapping[str, object],
    warnings: Mapping[str, object],
    not_committed: Mapping[str, str],
) -> str:
    """A quality check's one line: failed on committed outputs (a check run on its own), failed
    and not committed, passed with warnings, or passed."""
    if failed and not not_committed:  # a check executed on its own, on committed outputs
        return (
            f"failed in partition {', '.join(failed)}: the committed output does not pass "
            "(see `failures_by_partition` and `sample_failing_rows`)"
        )
    if failed:
        return (
            f"failed in partition {', '.join(failed)}: not committed (the staged run is kept "
            "for inspection, see `not_committed`)"
        )
    if warnings:
        return f"passed with warnings in partition {', '.join(warnings)}: rejected rows within quality.maxRejectedShare"
    return (
        f"all checks passed in partition {next(iter(per_partition))}"
        if len(per_partition) == 1
        else f"all checks passed in {len(per_partition)} partitions"
    )
