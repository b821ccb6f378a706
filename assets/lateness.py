"""One lateness asset per pipeline: what lateness cost, and which delay and watermark strategy to run with.

``<pipeline>/lateness`` is partitioned like the replay and downstream of it. Each partition
is analysed by :func:`windowing.lateness.job.lateness` from the landed events of the partition,
continuing from the previous partition's lateness output (every variant's carried state),
and written, tables, figures and ``report.html``, to the current run of::

    <output_root>/<pipeline name>/lateness/<partition folder>/

A run over several partitions (a backfill of a range, run as one) also writes one report
over the range, ``<output_root>/<pipeline name>/lateness/range-<first>-to-<last>/``
(:func:`windowing.lateness.ranges.combine_lateness`). The asset's metadata per partition are the
figures the UI plots across partitions (late share, p99 emission latency, the smallest
delay per strategy), a markdown table of the curve and the report's path; the check
``matches_replay`` compares the analysis' configured replay with the replay partition.
"""

# No `from __future__ import annotations` here: Dagster reads the asset function's `config`
# annotation as a class, not as a string. Names imported for type checking only are quoted.

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from assets.pipelines import asset_prefix, check_evaluation, pipeline_chain
from assets.resources import SparkResource, StorageResource
from windowing import landing
from windowing.config import Pipeline
from windowing.contract import IDLE_REASON, MAX_DURATION_REASON, WATERMARK_REASON
from windowing.metrics import ReplayMetrics
from windowing.storage import store
from windowing.storage.lake import join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from windowing.lateness.options import LatenessOptions
    from windowing.storage.commits import Commit

LATENESS_ASSET = "lateness"
CHECK = "matches_replay"
#: Tags of the analysis assets: the replay job leaves them out (orchestration.schedules.ANALYSIS_TAG).
ANALYSIS_TAGS = {"rewindow/role": "analysis"}


class LatenessConfig(dg.Config):
    """Run configuration of a pipeline's lateness analysis (``rewindow lateness`` options)."""

    delays: str = Field(default="0s,1s,5s,30s,2m", description="delayWindowClose values to replay.")
    target_late: str = Field(default="0.1%", description="Late share to stay at or under (0.1%, or 0.001).")
    lateness_modes: str = Field(
        default="configured", description="configured, both, or WINDOW_CLOSED,BEFORE_WATERMARK."
    )
    future_skew: str = Field(default="10s", description="List events this far ahead of their arrival (or off).")


def lateness_dir(output_root: str, pipeline_name: str, partition_key: str) -> str:
    """``<output_root>/<pipeline>/lateness/<partition folder>``."""
    return join(str(output_root), pipeline_name, LATENESS_ASSET, store.partition_folder(partition_key))


def range_dir(output_root: str, pipeline_name: str, first: str, last: str) -> str:
    return join(
        str(output_root),
        pipeline_name,
        LATENESS_ASSET,
        f"range-{store.partition_folder(first)}-to-{store.partition_folder(last)}",
    )


def build_lateness_asset(
    pipeline: Pipeline, pipeline_file: Path, partitions_def: dg.TimeWindowPartitionsDefinition
) -> dg.AssetsDefinition:
    """The lateness asset of ``pipeline`` (a :class:`windowing.Pipeline`)."""
    prefix = asset_prefix(pipeline.name)
    key = dg.AssetKey([prefix, LATENESS_ASSET])
    previous = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)

    @dg.asset(
        key=key,
        deps=[
            dg.AssetKey([prefix, "late_events"]),
            dg.AssetKey([prefix, "windowed_aggregates"]),
            dg.AssetDep(key, partition_mapping=previous),
        ],
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run(),
        group_name=prefix,
        kinds={"spark", "parquet", "html"},
        tags=ANALYSIS_TAGS,
        metadata={"pipeline": pipeline.name, "pipeline_file": str(pipeline_file)},
        description=_description(pipeline),
        check_specs=[_check_spec(key)],
    )
    def lateness_asset(
        context: dg.AssetExecutionContext, config: LatenessConfig, pyspark: SparkResource, storage: StorageResource
    ) -> Iterator[dg.Output[None] | dg.MaterializeResult[Any] | dg.AssetCheckEvaluation]:
        spark = pyspark.spark_session
        check_keys = [k for k in context.assets_def.check_keys if k in context.selected_asset_check_keys]
        for check_key in check_keys:  # each selected check's output (Dagster requires them)
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key))
        options = _asked_options(pipeline, config)
        keys = sorted(context.partition_keys, key=lambda k: partitions_def.time_window_for_partition_key(k).start)
        done = _analysed(spark, pipeline, partitions_def, storage, keys, options, context.log)
        for part in done:
            context.add_asset_metadata(part.metadata, partition_key=part.key)
        if len(done) > 1:
            _range_report(spark, pipeline, storage, done, context)
        yield dg.MaterializeResult(asset_key=key)
        if check_keys:  # one evaluation per partition, each naming its own materialization
            for part in done:
                yield check_evaluation(context.instance, _check_result(key, part), part.key, blocking=False)

    return lateness_asset


def _description(pipeline: Pipeline) -> str:
    return (
        f"What lateness cost pipeline `{pipeline.name}` and which delayWindowClose and watermark strategy "
        "to run with: the history replayed under every strategy and the listed delays (exact late counts at "
        "every delay, emission latency, IDLE closes), the windows that missed events, future skew, and a "
        "report.html. Each partition continues from the previous one's analysis."
    )


def _check_spec(key: dg.AssetKey) -> dg.AssetCheckSpec:
    return dg.AssetCheckSpec(
        CHECK,
        asset=key,
        description="The analysis' configured replay reports what the replay partition reports (late events, "
        "late pairs, windows closed by WATERMARK, IDLE and MAX_DURATION).",
    )


def _asked_options(pipeline: Pipeline, config: LatenessConfig) -> "LatenessOptions":
    """The run config's options (:func:`_options`); one that does not parse fails the run."""
    from windowing.config import ConfigError

    try:
        return _options(config)
    except ConfigError as exc:
        raise dg.Failure(f"lateness of {pipeline.name}: {exc}") from exc


def _analysed(
    spark: "SparkSession",
    pipeline: Pipeline,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    storage: StorageResource,
    keys: Sequence[str],
    options: "LatenessOptions",
    log: dg.DagsterLogManager,
) -> list["_Done"]:
    """Every partition of ``keys`` analysed (:func:`analyse_partitions`); what a user can fix
    (the configuration, the input, the output, the landing zone) fails the run, naming it."""
    from windowing.config import ConfigError
    from windowing.storage.errors import InputError, OutputError

    done: list[_Done] = []
    try:
        for part in analyse_partitions(spark, pipeline, partitions_def, storage, keys, options, log):
            done.append(part)
    except (ConfigError, InputError, OutputError, landing.LandingZoneError, ValueError) as exc:
        raise dg.Failure(f"lateness of {pipeline.name}: {exc}") from exc
    return done


def _check_result(key: dg.AssetKey, part: "_Done") -> dg.AssetCheckResult:
    """``matches_replay`` of one analysed partition."""
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=CHECK,
        passed=part.matches,
        metadata=part.check,
        severity=dg.AssetCheckSeverity.WARN,
        description=part.check_text,
    )


class _Done:
    def __init__(
        self,
        key: str,
        folder: str,
        commit: "Commit",
        figures: Mapping[str, Any],
        seconds: float,
        replay_metrics: ReplayMetrics | None,
    ) -> None:
        self.key, self.folder, self.commit, self.figures = key, folder, commit, figures
        self.metadata = metadata(figures, commit.run_path, seconds)
        self.matches, self.check_text, self.check = compare_with_replay(figures, replay_metrics)


def _options(config: LatenessConfig) -> "LatenessOptions":
    from windowing.config.fields import parse_share
    from windowing.durations import parse_duration_ms
    from windowing.lateness.options import LatenessOptions, parse_delays, parse_modes

    future = None if config.future_skew.strip().lower() in ("off", "none") else config.future_skew
    try:
        future_ms = None if future is None else parse_duration_ms(future, "future_skew")
    except ValueError as exc:
        from windowing.config import ConfigError

        raise ConfigError(str(exc)) from None
    return LatenessOptions(
        delays_ms=parse_delays(config.delays),
        target_late=parse_share(config.target_late, "target_late"),
        lateness_modes=parse_modes(config.lateness_modes),
        future_skew_ms=future_ms,
        flush_at_end=False,
    )


def analyse_partitions(
    spark: "SparkSession",
    pipeline: Pipeline,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    storage: StorageResource,
    keys: Sequence[str],
    options: "LatenessOptions",
    log: dg.DagsterLogManager,
) -> Iterator[_Done]:
    """Analyse ``keys`` oldest to newest, each from the previous partition's lateness output.

    Yields one result per partition once its output is committed. The first key starts
    from the stored output of the partition before it (none for the first partition of the
    history); a missing one fails the run, naming what to materialize first.
    """
    from windowing.lateness.job import lateness
    from windowing.lateness.outputs import read_lateness, write_lateness

    chain = pipeline_chain(spark, pipeline, storage, partitions_def)
    root = storage.output_path()
    state, figures = _continued_from(spark, pipeline, root, keys[0], chain.partitions.previous(keys[0]))
    replays = store.pipeline_commits(spark, join(root, pipeline.name), keys)
    for i, key in enumerate(keys, 1):
        began = time.monotonic()
        events, _ = chain.read_events(key)  # the rows the replay of the partition read
        result = lateness(spark, pipeline, events, state=state, options=options, state_figures=figures)
        folder = lateness_dir(root, pipeline.name, key)
        try:
            commit = write_lateness(result, folder, pipeline, inputs=[storage.landing_path()])
        finally:
            result.unpersist()
        out = read_lateness(spark, folder)  # what the next partition reads, as a separate run would
        state, figures = out.tables["state"], out.figures
        seconds = time.monotonic() - began
        replay = replays.get(key)
        log.info(
            f"[{i}/{len(keys)}] {pipeline.name} lateness {key}: {figures['accepted_events']} events, "
            f"{figures['configured_replay']['late_events']} late; report {commit.run_path}/report.html "
            f"in {seconds:.1f}s"
        )
        yield _Done(
            key,
            folder,
            commit,
            figures,
            seconds,
            ReplayMetrics.from_dict(replay.metrics) if replay is not None else None,
        )


def _continued_from(
    spark: "SparkSession", pipeline: Pipeline, root: str, first: str, prev: str | None
) -> tuple["DataFrame | None", Mapping[str, Any] | None]:
    """The carried state and the figures the analysis of partition ``first`` continues from:
    the stored analysis of ``prev``, the partition before it (none for the first partition
    of the history). A missing one fails the run, naming what to materialize first."""
    from windowing.lateness.outputs import read_lateness
    from windowing.storage.errors import InputError

    if prev is None:
        return None, None
    try:
        out = read_lateness(spark, lateness_dir(root, pipeline.name, prev))
    except InputError:
        raise dg.Failure(
            f"lateness of {pipeline.name}: partition {first} continues from the analysis of {prev}, which is "
            f"not materialized; materialize {pipeline.name} lateness from the first partition (one backfill "
            "runs them in a single run)"
        ) from None
    return out.tables["state"], out.figures


def metadata(figures: Mapping[str, Any], run_path: str, seconds: float) -> dict[str, Any]:
    """A partition's materialization metadata: numbers the UI plots across partitions, the
    curve as a markdown table, the report's path."""
    from windowing.lateness.options import REPORT
    from windowing.lateness.text import curve_markdown

    cr = figures["configured_replay"]
    lat = cr.get("latency") or {}
    meta: dict[str, Any] = {
        "events": dg.MetadataValue.int(int(figures["accepted_events"])),
        "late_events": dg.MetadataValue.int(int(cr["late_events"])),
        "late_share": dg.MetadataValue.float(float(cr["late_share"])),
        "latency_p50_ms": dg.MetadataValue.float(float(lat.get("p50_ms") or 0.0)),
        "latency_p99_ms": dg.MetadataValue.float(float(lat.get("p99_ms") or 0.0)),
        "windows_missing_events": dg.MetadataValue.int(int(figures["cost"]["windows"])),
        "skewed_events": dg.MetadataValue.int(int(figures["future_skew"].get("skewed_events", 0))),
        "late_events_caused_by_skew": dg.MetadataValue.int(int(figures["future_skew"].get("late_events_caused", 0))),
        "curve": dg.MetadataValue.md(curve_markdown(figures)),
        "report": dg.MetadataValue.path(join(run_path, REPORT)),
        "path": dg.MetadataValue.path(run_path),
        "analysis_seconds": dg.MetadataValue.float(round(seconds, 3)),
    }
    for r in figures["recommendations"]:
        name = (
            f"{r['strategy'].lower()}_{r['lateness'].lower()}"
            if len(figures["options"]["lateness_modes"]) > 1
            else r["strategy"].lower()
        )
        meta[f"smallest_delay_ms_{name}"] = dg.MetadataValue.int(int(r["smallest_delay_ms"]))
    return meta


#: Figures of the configured replay the check compares with the replay partition's metrics.
COMPARED = ("late_events", "late_event_windows", WATERMARK_REASON, IDLE_REASON, MAX_DURATION_REASON)


def compare_with_replay(
    figures: Mapping[str, Any], replay_metrics: ReplayMetrics | None
) -> tuple[bool, str, dict[str, Any]]:
    """(passed, description, metadata) of ``matches_replay`` for one partition."""
    if replay_metrics is None:
        return False, "the replay of this partition is not materialized: nothing to compare with", {}
    cr = figures["configured_replay"]
    ours = {
        "late_events": cr["late_events"],
        "late_event_windows": cr["late_event_windows"],
        **{r: cr["closed_by_reason"].get(r, 0) for r in COMPARED[2:]},
    }
    closed = replay_metrics.closed_by_reason
    theirs = {
        "late_events": replay_metrics.late_events,
        "late_event_windows": replay_metrics.late_event_windows,
        **{r: closed.get(r, 0) for r in COMPARED[2:]},
    }
    differ = {k: {"analysis": ours[k], "replay": theirs[k]} for k in COMPARED if ours[k] != theirs[k]}
    meta = {"compared": dg.MetadataValue.json({"analysis": ours, "replay": theirs})}
    if differ:
        return (
            False,
            (
                f"the analysis' configured replay differs from the replay partition in "
                f"{', '.join(differ)} (replayed from another state or other events?)"
            ),
            meta,
        )
    return True, "the analysis' configured replay reports what the replay partition reports", meta


def _range_report(
    spark: "SparkSession",
    pipeline: Pipeline,
    storage: StorageResource,
    done: Sequence[_Done],
    context: dg.AssetExecutionContext,
) -> None:
    from windowing.lateness.options import REPORT
    from windowing.lateness.outputs import write_lateness
    from windowing.lateness.ranges import combine_lateness
    from windowing.lateness.text import curve_markdown

    began = time.monotonic()
    result = combine_lateness(spark, pipeline, [d.folder for d in done])
    out = range_dir(storage.output_path(), pipeline.name, done[0].key, done[-1].key)
    commit = write_lateness(result, out, pipeline, inputs=[storage.landing_path()])
    context.log.info(
        f"{pipeline.name} lateness over {done[0].key}..{done[-1].key}: "
        f"{commit.run_path}/{REPORT} in {time.monotonic() - began:.1f}s"
    )
    context.add_asset_metadata(
        {
            "range_report": dg.MetadataValue.path(join(commit.run_path, REPORT)),
            "range": dg.MetadataValue.text(f"{done[0].key}..{done[-1].key}"),
            "range_curve": dg.MetadataValue.md(curve_markdown(result.figures)),
        },
        partition_key=done[-1].key,
    )
