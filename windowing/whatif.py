"""What-if replays: one history under other delays, watermark strategies and lateness modes.

Pure NumPy/pyarrow, no Spark (:mod:`windowing.lateness` runs it on Spark partitions).
:func:`analyse` takes the events of a set of complete keys (with the carried state rows of
every variant) and replays them once per :class:`Variant` through the kernel itself
(:func:`windowing.kernel.process`), so every figure of a variant is what a real replay with
that configuration reports. What each variant costs is kept small: a *lean* variant counts
events only (one ``count`` aggregate, ``atWindowEnd``), and for tumbling and sliding windows
it drops the arrival-order columns (their windows, closes and lateness do not depend on the
order of events inside a batch; sessions keep every column, their merges do).

**Slack.** The raw watermarks (key and worker, before ``delayWindowClose``) do not depend
on the delay D: candidates include late events, and only accepted or rejected rows change
them. So an (event, window) pair is late under delay D exactly when ``D <= slack``, with

* ``WINDOW_CLOSED``, tumbling and sliding: ``slack = watermark - window_end``;
* ``WINDOW_CLOSED``, sessions: ``slack = watermark - t - gap``;
* ``BEFORE_WATERMARK``: ``slack = watermark - t - 1``;

where ``watermark`` is the key's raw watermark as of its previous commit and ``t`` the event
time. An event is late when one of its pairs is: its slack is the greatest of its pairs'.
The pairs late under D = 0 are exactly those with ``slack >= 0``, and they carry the
watermark they were checked against, so the late output of the D = 0 variant of a strategy
and mode gives the late count under *every* delay (:func:`late_counts`). That is the
curve; the variants at the asked delays give the rest (emission latency, IDLE closes), and
the tests check both against the reference model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import kernel as K
from windowing.arrays import group_codes, order_codes, sat_sub, value_order_keys
from windowing.config import Aggregate, Lateness, Pipeline, Trigger, WatermarkStrategy, Window, WindowType
from windowing.contract import CLOSE_REASONS, REASON_NAMES, WATERMARK
from windowing.durations import format_duration_ms
from windowing.runner.columns import MAX_EPOCH_MS, MIN_EPOCH_MS
from windowing.sweep import Lean, sweep, sweepable

#: A column the analysis adds to the events: the row's position in the task's table. Its
#: name sorts after every other column name, so it only orders rows that are equal in every
#: input column (interchangeable rows): the replay order stays that of a real replay.
ROW_ID = "\U0010ffff_row"
#: Whether an event is at least the listing threshold ahead of its arrival (future skew).
SKEWED = "__whatif_skewed"
#: Which variant a carried state row belongs to (events: null).
VARIANT = "__whatif_variant"
#: The aggregate of a lean variant: how many events its windows hold.
LEAN_AGGREGATE = Aggregate(type="count", column=None, name="whatif_events")
#: A delay under which no event is ever late: every effective watermark lies below every
#: window end of a representable time (columns.MIN_EPOCH_MS .. MAX_EPOCH_MS).
NEVER_LATE_DELAY_MS = MAX_EPOCH_MS - MIN_EPOCH_MS + 1
#: Reasons whose emit time measures emission latency (END_OF_INPUT is the end of a bounded
#: replay, not of the window's wait).
LATENCY_REASONS = ("WATERMARK", "IDLE", "MAX_DURATION")
HOUR_MS = 3_600_000
#: Upper bounds (ms, inclusive) of the lateness histogram's bins; the last bin is open.
LATENESS_BINS_MS = (
    0,
    10,
    100,
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
    10_800_000,
    21_600_000,
    86_400_000,
)


@dataclass(frozen=True)
class Variant:
    """One replay configuration: the pipeline with this watermark strategy, lateness mode
    and ``delayWindowClose``.

    ``full``: with the pipeline's own aggregates (the configured variant: its outputs are
    the replay's). ``skew_free``: without the events flagged as future-skewed (what
    ``source.maxFutureSkew`` at the listing threshold would do).
    """

    strategy: WatermarkStrategy
    lateness: Lateness
    delay_ms: int
    full: bool = False
    skew_free: bool = False

    @property
    def label(self) -> str:
        """``MIN_EVENT_TIME/WINDOW_CLOSED/5s`` (+ ``/full``, ``/skew_free``): unique per variant."""
        parts = [self.strategy.value, self.lateness.value, format_duration_ms(self.delay_ms)]
        return "/".join(parts + ["full"] * self.full + ["skew_free"] * self.skew_free)

    def pipeline(self, base: Pipeline) -> Pipeline:
        """``base`` configured as this variant (see the module docstring for lean variants)."""
        w = replace(base.window, watermark_strategy=self.strategy, lateness=self.lateness, delay_ms=self.delay_ms)
        if self.full:
            return replace(base, window=w, triggers=(Trigger.AT_WINDOW_END,))
        src = base.source if w.type is WindowType.SESSION else replace(base.source, arrival_order=())
        return replace(
            base, source=src, window=w, aggregates=(_lean_aggregate(base),), triggers=(Trigger.AT_WINDOW_END,)
        )

    def input_columns(self, base: Pipeline, input_columns: Sequence[str]) -> list[str]:
        """The input columns this variant's kernel reads (plus :data:`ROW_ID`)."""
        if self.full or base.window.type is WindowType.SESSION:
            cols = list(input_columns)
        else:
            cols = [c for c in input_columns if c in _identity_columns(base)]
        return cols + [ROW_ID]


def _lean_aggregate(base: Pipeline) -> Aggregate:
    """:data:`LEAN_AGGREGATE`, renamed if the pipeline uses its name (state columns differ)."""
    name = LEAN_AGGREGATE.name
    while any(a.name == name or f"partial_{a.name}".startswith(f"partial_{name}") for a in base.aggregates):
        name += "_"
    return replace(LEAN_AGGREGATE, name=name)


def _identity_columns(p: Pipeline) -> set[str]:
    return {
        c
        for c in (p.source.arrival_time, p.source.batch_column, p.source.worker, p.window.key, p.window.event_time)
        if c
    }


def perfect_pipeline(base: Pipeline) -> Pipeline:
    """The configured aggregates with no event ever late and no idle flush: what a perfect
    watermark gives each window (tumbling and sliding windows; see :func:`analyse`)."""
    w = replace(base.window, delay_ms=NEVER_LATE_DELAY_MS, idle_timeout_ms=None, lateness=Lateness.WINDOW_CLOSED)
    return replace(base, window=w, triggers=(Trigger.AT_WINDOW_END,))


# --------------------------------------------------------------------------- slack


def pair_slack(
    window: Window, lateness: Lateness, watermark_ms: np.ndarray, event_ms: np.ndarray, window_end_ms: np.ndarray
) -> np.ndarray:
    """Slack of late (event, window) pairs of a D = 0 replay: the pair is late under delay D
    exactly when ``D <= slack`` (module docstring). ``watermark_ms`` is the late row's
    ``watermark`` (at D = 0 the raw watermark)."""
    wm = np.asarray(watermark_ms, dtype=np.int64)
    t = np.asarray(event_ms, dtype=np.int64)
    if lateness is Lateness.BEFORE_WATERMARK:
        return wm - t - 1
    if window.type is WindowType.SESSION:
        return cast(np.ndarray, wm - t - window.gap_ms)
    return wm - np.asarray(window_end_ms, dtype=np.int64)


def late_counts(
    slack_ms: np.ndarray, events: np.ndarray, pairs: np.ndarray, delays_ms: Iterable[int]
) -> list[tuple[int, int]]:
    """(late events, late (event, window) pairs) under each delay of ``delays_ms``, from a
    slack histogram (``events[i]`` events and ``pairs[i]`` pairs have slack ``slack_ms[i]``)."""
    slack_ms = np.asarray(slack_ms, dtype=np.int64)
    order = np.argsort(slack_ms, kind="stable")
    s = slack_ms[order]
    ev_tail = np.concatenate([np.cumsum(np.asarray(events, dtype=np.int64)[order][::-1])[::-1], [0]])
    pr_tail = np.concatenate([np.cumsum(np.asarray(pairs, dtype=np.int64)[order][::-1])[::-1], [0]])
    at = np.searchsorted(s, np.asarray(list(delays_ms), dtype=np.int64), side="left")  # first slack >= d
    return list(zip(ev_tail[at].tolist(), pr_tail[at].tolist()))


def step_curve(
    slack_ms: np.ndarray, events: np.ndarray, pairs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole late-count curve as a step function: ``(delay_ms, late_events, late_pairs)``
    at every delay where it changes (0, then each distinct slack + 1); between two rows it
    keeps the earlier row's values, after the last it is 0."""
    slack_ms = np.asarray(slack_ms, dtype=np.int64)
    keep = slack_ms >= 0
    uniq = np.unique(slack_ms[keep])
    delays = np.unique(np.concatenate([[0], uniq + 1]))
    counts = late_counts(slack_ms[keep], np.asarray(events)[keep], np.asarray(pairs)[keep], delays)
    return delays, np.array([c[0] for c in counts], np.int64), np.array([c[1] for c in counts], np.int64)


def smallest_delay(slack_ms: np.ndarray, events: np.ndarray, allowed_late: int) -> int:
    """The smallest delay D >= 0 under which at most ``allowed_late`` events are late."""
    slack_ms = np.asarray(slack_ms, dtype=np.int64)
    events = np.asarray(events, dtype=np.int64)
    keep = slack_ms >= 0
    s, n = slack_ms[keep], events[keep]
    if int(n.sum()) <= allowed_late:
        return 0
    order = np.argsort(-s, kind="stable")  # largest slack first
    cum = np.cumsum(n[order])
    # late(D) = events with slack >= D; the (allowed + 1)-th largest slack must be < D.
    i = int(np.searchsorted(cum, allowed_late + 1, side="left"))
    return int(s[order][i]) + 1


def weighted_percentiles(
    values: np.ndarray, weights: np.ndarray, qs: Sequence[float] = (50, 90, 99)
) -> list[float | None]:
    """Percentiles (linear interpolation, as ``numpy.percentile`` and Spark's ``percentile``)
    of the multiset holding ``weights[i]`` copies of ``values[i]``."""
    values = np.asarray(values, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.int64)
    n = int(weights.sum())
    if n == 0:
        return [None] * len(qs)
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    out: list[float | None] = []
    for q in qs:
        pos = (n - 1) * q / 100
        lo, hi = int(np.floor(pos)), int(np.ceil(pos))
        a = int(v[np.searchsorted(cum, lo + 1)])
        b = int(v[np.searchsorted(cum, hi + 1)])
        out.append(a + (b - a) * (pos - lo))
    return out


# --------------------------------------------------------------------------- the analysis


@dataclass(frozen=True)
class WhatIf:
    """What :func:`analyse` needs besides the events: the configured pipeline, the
    variants, the input columns and types, and each worker's timeline per strategy (the
    configured pipeline's, delay 0; per variant the delay is applied here)."""

    pipeline: Pipeline
    variants: tuple[Variant, ...]
    input_types: Mapping[str, pa.DataType]
    #: (strategy value, skew_free) -> worker -> kernel.Timeline at delay 0.
    timelines: Mapping[tuple[str, bool], Mapping[Any, K.Timeline]]
    flush_at_end: bool = False
    #: The listing threshold of future skew (None: no listing).
    skew_threshold_ms: int | None = None
    #: Windows that missed the most events, kept per task (the driver keeps the top of them).
    worst: int = 20
    #: Replay the lean variants of each strategy and mode in one delay sweep where the
    #: window type allows it (:mod:`windowing.sweep`); False: one kernel pass per variant.
    sweep: bool = True
    #: Replay the skew-free variant only for the keys where it can differ from the
    #: configured replay, where that is provably the same (:func:`_skew_dirty_rows`);
    #: False: a kernel pass over every key.
    skew_subset: bool = True

    @property
    def full(self) -> Variant:
        return next(v for v in self.variants if v.full)

    def spec(self, v: Variant) -> K.Spec:
        types = {**self.input_types, ROW_ID: pa.int64()}
        return K.Spec(
            pipeline=v.pipeline(self.pipeline),
            input_types={c: types[c] for c in v.input_columns(self.pipeline, list(self.input_types))},
        )

    def variant_timelines(self, v: Variant) -> dict[Any, K.Timeline]:
        base = self.timelines[(v.strategy.value, v.skew_free)]
        if not v.delay_ms:
            return dict(base)
        return {w: replace(tl, geff=sat_sub(tl.geff, v.delay_ms)) for w, tl in base.items()}


@dataclass
class Analysis:
    """One task's results, as Arrow tables (schemas: :func:`output_schemas`)."""

    counters: pa.Table
    latency: pa.Table
    slack: pa.Table
    cost: pa.Table
    by_key: pa.Table
    by_hour: pa.Table
    lateness_bins: pa.Table
    skew_late: pa.Table
    skewed: pa.Table
    cost_top: pa.Table
    latency_coarse: pa.Table
    state: pa.Table


def output_schemas(wi: WhatIf) -> dict[str, pa.Schema]:
    """The schema of each table :func:`analyse` returns (the Spark side's output schemas)."""
    p = wi.pipeline
    key_fields = [pa.field(c, wi.input_types[c]) for c in (p.source.worker, p.window.key) if c]
    worker_fields = [pa.field(p.source.worker, wi.input_types[p.source.worker])] if p.source.worker else []
    full_spec = wi.spec(wi.full)
    aggs = [
        pa.field(f"{side}_{a.name}", full_spec.output_type(a)) for side in ("emitted", "perfect") for a in p.aggregates
    ]
    i64, ts, s = pa.int64(), K.TS, pa.string()
    cost = pa.schema(
        key_fields
        + [
            ("window_start", ts),
            ("window_end", ts),
            ("missed_events", i64),
            ("max_lateness_ms", i64),
            ("first_missed_arrival", ts),
            ("last_missed_arrival", ts),
            ("emissions", i64),
            ("last_emit_reason", s),
            ("last_emit_time", ts),
        ]
        + aggs
    )
    return {
        "counters": pa.schema([("variant", s), ("name", s), ("value", i64)]),
        # One row per distinct latency, about one per window: the label is a dictionary code.
        "latency": pa.schema([("variant", pa.dictionary(pa.int32(), s)), ("latency_ms", i64), ("windows", i64)]),
        "slack": pa.schema([("strategy", s), ("lateness", s), ("slack_ms", i64), ("events", i64), ("pairs", i64)]),
        "cost": cost,
        "cost_top": cost,
        "by_key": pa.schema(key_fields + [("events", i64), ("late_events", i64), ("late_event_windows", i64)]),
        "by_hour": pa.schema(
            worker_fields + [("hour", ts), ("events", i64), ("late_events", i64), ("late_event_windows", i64)]
        ),
        "lateness_bins": pa.schema([("upper_ms", i64), ("pairs", i64), ("events", i64)]),
        "skew_late": pa.schema(
            key_fields
            + [
                ("arrival_ms", i64),
                ("event_ms", i64),
                ("batch", i64),
                ("window_start", ts),
                ("window_end", ts),
                ("watermark", ts),
                ("raw_watermark_ms", i64),
                ("lateness_ms", i64),
                ("first_of_event", pa.bool_()),
                ("cause_batch", i64),
                ("cause_arrival_ms", i64),
                ("cause_event_ms", i64),
                ("cause_skew_ms", i64),
            ]
        ),
        "skewed": pa.schema(
            [pa.field(c, t) for c, t in wi.input_types.items()]
            + [
                ("arrival_ms", i64),
                ("event_ms", i64),
                ("skew_ms", i64),
                ("batch", i64),
                ("late_caused", i64),
                ("late_event_windows_caused", i64),
            ]
        ),
        "latency_coarse": pa.schema([("variant", s), ("bucket", i64), ("windows", i64), ("max_ms", i64)]),
        "state": state_schema(wi),
    }


def state_schema(wi: WhatIf) -> pa.Schema:
    """Every variant's kernel state columns (the union, by name) plus ``variant``."""
    fields: dict[str, pa.Field] = {}
    for v in wi.variants:
        for f in wi.spec(v).state_schema():
            fields.setdefault(f.name, f)
    return pa.schema([pa.field("variant", pa.string()), *fields.values()])


def analyse(table: pa.Table, wi: WhatIf) -> Analysis:
    """Replay the complete keys of ``table`` once per variant of ``wi``.

    ``table`` holds the keys' events (input columns; :data:`SKEWED` when future skew is
    listed) and the carried state rows of every variant (kernel state columns under
    ``kernel.STATE_PREFIX``, ``__kind``, :data:`VARIANT` naming the variant), in any order.
    """
    full_spec = wi.spec(wi.full)
    table = _with_row_ids(_shared_key_rows(K.with_event_columns(table, full_spec), wi))
    # Every replay below orders its events by one sort of (key, rank), not the whole order.
    table = K.with_arrival_ranks(table, full_spec)
    is_event = (table["__kind"].to_numpy() == K.EVENT) if table.num_rows else np.zeros(0, bool)
    variant_of = _variant_codes(table, wi)  # -1: an event; else the row's variant's index in wi.variants
    skewed = (
        pc.fill_null(table[SKEWED], False).to_numpy(zero_copy_only=False).astype(bool)
        if SKEWED in table.column_names
        else np.zeros(table.num_rows, bool)
    )
    outs = _swept_outputs(table, wi, is_event, variant_of)
    _replay_others(table, wi, outs, is_event, skewed, variant_of)
    outs = {v: outs[v] for v in wi.variants}  # the variants' order, whichever way each ran
    owners = _key_row_owners(wi)
    state_parts = [
        _tag(out.state if owners[v.label] == v.label else _without_key_rows(out.state), v) for v, out in outs.items()
    ]
    outs = {
        v: replace(out, state=out.state.slice(0, 0)) if not (v.full or v.skew_free) else out for v, out in outs.items()
    }
    schemas = output_schemas(wi)
    full = outs[wi.full]
    events = table.filter(pa.array(is_event)) if not is_event.all() else table
    skewed = skewed[is_event]
    latency, latency_coarse = _latency(outs, schemas)
    cost = _cost(table, full, wi, variant_of, is_event, schemas["cost"])
    skew_late, listing = _skew(events, skewed, outs, wi, schemas)
    return Analysis(
        counters=_counters(
            outs,
            schemas["counters"],
            {
                SKEWED_EVENTS: int(skewed.sum()) if wi.skew_threshold_ms is not None else 0,
                COST_WINDOWS: cost.num_rows,
                COST_MISSED: int(pc.sum(cost["missed_events"]).as_py() or 0),
                SKEW_CAUSED_PAIRS: skew_late.num_rows,
                SKEW_CAUSED_EVENTS: int(pc.sum(skew_late["first_of_event"].cast(pa.int64())).as_py() or 0),
                SKEW_ATTRIBUTED_PAIRS: skew_late.num_rows - skew_late["cause_batch"].null_count,
            },
        ),
        latency=latency,
        slack=_slack(outs, wi, schemas["slack"]),
        cost=cost,
        cost_top=worst_windows(cost, wi.worst),
        by_key=_by_key(events, full, wi, schemas["by_key"]),
        by_hour=_by_hour(events, full, wi, schemas["by_hour"]),
        lateness_bins=_lateness_bins(full, schemas["lateness_bins"]),
        skew_late=skew_late,
        skewed=listing,
        latency_coarse=latency_coarse,
        state=_concat_state(state_parts, schemas["state"]),
    )


def _swept_outputs(
    table: pa.Table, wi: WhatIf, is_event: np.ndarray, variant_of: np.ndarray
) -> dict[Variant, K.KernelOutput]:
    """The outputs of the lean variants one delay sweep replays (:func:`_swept`), per variant."""
    outs: dict[Variant, K.KernelOutput] = {}
    kind = table["__kind"].to_numpy()
    counters_carried = {wi.variants[i].label for i in np.unique(variant_of[kind == K.STATE_EMITTED]) if i >= 0}
    # Emitted-window counters (after a flush at end) need the kernel: those groups go to it.
    groups = [g for g in _swept(wi) if not counters_carried & {v.label for v in g}]
    if groups:
        keep = is_event | np.isin(variant_of, [wi.variants.index(v) for g in groups for v in g])
        sub = table.filter(pa.array(keep)) if not keep.all() else table
        timelines = {g[0].strategy: wi.variant_timelines(replace(g[0], delay_ms=0)) for g in groups}
        swept = sweep(
            sub,
            [[Lean(v.delay_ms, wi.spec(v), v.label, keep_late=not v.delay_ms) for v in g] for g in groups],
            VARIANT,
            timelines,
        )
        outs.update((v, swept[v.label]) for g in groups for v in g)
    return outs


def _replay_others(
    table: pa.Table,
    wi: WhatIf,
    outs: dict[Variant, K.KernelOutput],
    is_event: np.ndarray,
    skewed: np.ndarray,
    variant_of: np.ndarray,
) -> None:
    """Replay every variant ``outs`` lacks (kernel passes), adding its output to ``outs``."""
    # The skew-free variant of the keys without skewed events (where provably the same):
    # the configured replay, done in two parts (the keys it takes, the others).
    free = next((v for v in wi.variants if v.skew_free), None)
    changes = _clock_changes_by_worker(wi, free) if free is not None else {}
    dirty = _skew_dirty_rows(table, wi, free, changes, is_event, skewed, variant_of) if free is not None else None
    clean_full: K.KernelOutput | None = None
    for code, v in enumerate(wi.variants):
        if v in outs:
            continue
        carried = variant_of == code
        if dirty is not None and v.full:
            clean_full, dirty_full = _replay_in_parts(table, wi, v, [~dirty, dirty], is_event | carried)
            outs[v] = _concat_outputs([o for o in (clean_full, dirty_full) if o is not None])  # events: one
            continue
        if dirty is not None and v.skew_free:
            (dirty_free,) = _replay_in_parts(table, wi, v, [dirty], (is_event & ~skewed) | carried)
            outs[v] = _skew_free_from(clean_full, dirty_free, wi, v, changes)
            continue
        keep = (is_event & ~(skewed & v.skew_free)) | carried
        spec = wi.spec(v)
        sub = table.filter(pa.array(keep)) if not keep.all() else table
        out = K.process(sub, spec, wi.variant_timelines(v), wi.flush_at_end)
        outs[v] = out if v.full or v.skew_free else _slim(out, keep_late=not v.delay_ms)


def _swept(wi: WhatIf) -> list[list[Variant]]:
    """The lean variants :func:`windowing.sweep.sweep` replays, per (strategy, lateness
    mode), when the pipeline allows it and the replay does not flush at its end (a flush
    leaves emitted-window counters in the state, which the sweep does not keep)."""
    if not (wi.sweep and sweepable(wi.pipeline)) or wi.flush_at_end:
        return []
    groups: dict[tuple[Any, ...], list[Variant]] = {}
    for v in wi.variants:
        if not (v.full or v.skew_free):
            groups.setdefault((v.strategy, v.lateness), []).append(v)
    return [sorted(g, key=lambda v: v.delay_ms) for g in groups.values()]


#: The share of the events above which the skew-free variant is one whole pass (replaying
#: the dirty keys twice, under both variants, costs more). Skewed events tend to fall on
#: the busiest keys: on the full-size bench history 9 % of a task's keys are dirty and
#: hold 56 % of its events, and the subset still costs 11 % less CPU than a whole pass.
SKEW_SUBSET_MAX_SHARE = 0.8


def _skew_dirty_rows(
    table: pa.Table,
    wi: WhatIf,
    v: Variant,
    changes: Mapping[Any, np.ndarray | None],
    is_event: np.ndarray,
    skewed: np.ndarray,
    variant_of: np.ndarray,
) -> np.ndarray | None:
    """The rows of the keys whose skew-free replay ``v`` can differ from their configured
    one (the *dirty* keys, by key value under every worker); None where a key's skew-free
    replay is not provably its configured one (then every key is replayed). ``changes``:
    :func:`_clock_changes_by_worker`.

    Without an idle timeout a key's replay reads nothing of other keys but its worker's
    clock at its own commits (the emit times; and the worker's last commit and clock, which
    end-of-input flushes read). So a key's skew-free replay is its configured replay (the
    lean outputs of the configured strategy, mode and delay: the same windows, closes, late
    pairs and counters, the count partial of an open window being its ``events``) when it
    has no skewed event here and carried the same state under both variants, with each
    emit time read from its worker's skew-free timeline (:func:`_free_emit_times`; a
    worker whose skew-free timeline has another last commit or clock, or other commits,
    makes all its keys dirty). With an idle timeout (a session's gap is one) a skewed event
    moves its worker's clocks that idleness reads, for every key of the worker: None.
    """
    p = wi.pipeline
    kcol = p.window.key or p.source.worker
    if not wi.skew_subset or p.window.idle_timeout_ms is not None or kcol is None or not is_event.any():
        return None
    dirty = is_event & skewed
    # The workers whose skew-free timeline has other commits (with the same commits, the
    # emit times are remapped: _free_emit_times).
    for worker, changed in changes.items():
        if changed is not None:
            continue
        if p.source.worker and worker is not None and not isinstance(worker, (str, int, float, bool)):
            return None
        dirty |= _of_worker(table, p, worker)
    # The carried state: keys whose rows differ between the two variants.
    dirty |= _state_changes(table, wi, v, variant_of)
    if dirty.any():
        values = pc.unique(table[kcol].filter(pa.array(dirty)))
        dirty = pc.is_in(table[kcol], value_set=values, skip_nulls=False).to_numpy(zero_copy_only=False).astype(bool)
        if int((dirty & is_event).sum()) > SKEW_SUBSET_MAX_SHARE * int(is_event.sum()):
            return None  # most keys: one whole pass costs less
    return cast(np.ndarray, dirty)


def _of_worker(table: pa.Table, p: Pipeline, worker: Any) -> np.ndarray:
    """The rows of ``table`` of one worker (every row without a worker column)."""
    if not p.source.worker:
        return np.ones(table.num_rows, bool)
    col = table[p.source.worker]
    of_worker = pc.is_null(col) if worker is None else pc.fill_null(pc.equal(col, worker), False)
    return np.asarray(of_worker.to_numpy(zero_copy_only=False), dtype=bool)


def _free_emit_times(
    aggregates: pa.Table, wi: WhatIf, v: Variant, changes: Mapping[Any, np.ndarray | None]
) -> pa.Table:
    """The configured replay's ``aggregates`` of clean keys (:func:`_skew_dirty_rows`) with
    the emit times the skew-free replay ``v`` gives them: a WATERMARK close is emitted at
    the same commit, whose worker clock is read from the skew-free timeline instead (the
    workers left clean have the same commits and last clock under both; ``changes``:
    :func:`_clock_changes_by_worker`)."""
    free = wi.timelines[(v.strategy.value, True)]
    if not aggregates.num_rows:
        return aggregates
    column = aggregates["emit_time"].combine_chunks()
    micros = pc.fill_null(column.cast(pa.int64()), 0).to_numpy(zero_copy_only=False).copy()
    changed = False
    watermark = pc.fill_null(pc.equal(aggregates["emit_reason"], REASON_NAMES[WATERMARK]), False)
    watermark = np.asarray(watermark.to_numpy(zero_copy_only=False), dtype=bool)
    batch = pc.fill_null(aggregates["emit_batch"], 0).to_numpy()
    for worker, bad in changes.items():
        if bad is None or not len(bad):
            continue
        rows = np.flatnonzero(_of_worker(aggregates, wi.pipeline, worker) & watermark & np.isin(batch, bad))
        if not len(rows):
            continue
        tl = free[worker]
        micros[rows] = np.asarray(tl.clock)[np.searchsorted(np.asarray(tl.batches), batch[rows])] * 1000
        changed = True
    if not changed:
        return aggregates
    i = aggregates.schema.get_field_index("emit_time")
    mask = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return aggregates.set_column(i, aggregates.field(i), pa.array(micros, pa.int64(), mask=mask).cast(column.type))


def _replay_in_parts(
    table: pa.Table, wi: WhatIf, v: Variant, parts: Sequence[np.ndarray], rows: np.ndarray
) -> list[K.KernelOutput | None]:
    """``v``'s replay of ``rows`` (a mask), in ``parts`` (masks of whole keys): one
    output per part (None: the part holds no row)."""
    spec, timelines = wi.spec(v), wi.variant_timelines(v)
    outs: list[K.KernelOutput | None] = []
    for part in parts:
        keep = part & rows
        outs.append(K.process(table.filter(pa.array(keep)), spec, timelines, wi.flush_at_end) if keep.any() else None)
    return outs


def _concat_outputs(
    parts: Sequence[K.KernelOutput], cut: Sequence[str] | None = None, late_schema: pa.Schema | None = None
) -> K.KernelOutput:
    """The outputs of disjoint sets of keys as one replay's (row order aside)."""
    counters: dict[str, int] = {}
    by_worker: dict[str, dict[str, int]] = {}
    for o in parts:
        counters = _add_counters(counters, o.counters)
        for w, c in o.counters_by_worker.items():
            by_worker[w] = _add_counters(by_worker.get(w, {}), c)
    aggs = [o.aggregates.select(list(cut)) if cut else o.aggregates for o in parts]
    late = [o.late.cast(late_schema) if late_schema else o.late for o in parts]
    return K.KernelOutput(
        pa.concat_tables(aggs), pa.concat_tables(late), pa.concat_tables([o.state for o in parts]), counters, by_worker
    )


def _skew_free_from(
    clean: K.KernelOutput | None,
    dirty: K.KernelOutput | None,
    wi: WhatIf,
    v: Variant,
    changes: Mapping[Any, np.ndarray | None],
) -> K.KernelOutput:
    """The skew-free replay ``v``: the configured replay of the clean keys as the lean
    replay writes it (see :func:`_skew_dirty_rows`), and its own replay of the dirty ones.
    Its aggregates are cut to what the sums read (``window_end``, ``emit_reason``,
    ``emit_time``), as a lean variant's."""
    spec = wi.spec(v)
    parts = []
    if clean is not None:
        parts.append(
            K.KernelOutput(
                _free_emit_times(clean.aggregates, wi, v, changes),
                clean.late.select(spec.late_schema().names),
                _as_lean_state(clean.state, spec),
                clean.counters,
                clean.counters_by_worker,
            )
        )
    if dirty is not None:
        parts.append(dirty)
    if not parts:  # no event and no carried state in this task
        return K.KernelOutput(
            spec.aggregates_schema().empty_table().select(["window_end", "emit_reason", "emit_time"]),
            spec.late_schema().empty_table(),
            spec.state_schema().empty_table(),
        )
    return _concat_outputs(parts, cut=["window_end", "emit_reason", "emit_time"], late_schema=spec.late_schema())


def _clock_changes_by_worker(wi: WhatIf, v: Variant) -> dict[Any, np.ndarray | None]:
    """:func:`_clock_changes` of every worker between the configured and the skew-free
    timelines of ``v``'s strategy."""
    configured, free = wi.timelines[(v.strategy.value, False)], wi.timelines[(v.strategy.value, True)]
    return {
        worker: _clock_changes(configured.get(worker), free.get(worker))
        for worker in dict.fromkeys([*configured, *free])
    }


def _clock_changes(configured: K.Timeline | None, free: K.Timeline | None) -> np.ndarray | None:
    """The batches of a worker where its skew-free timeline's clock after the commit (the
    emit time of what the commit closes) is not its configured timeline's; None: the whole
    worker (its last commit, carried clock or batches differ). The clock before a commit is
    read by ``atAggregate`` snapshots only, which neither replay emits (``atWindowEnd``)."""
    if configured is None or free is None:
        return None if (configured is not None or free is not None) else np.zeros(0, np.int64)
    if (configured.last_batch, configured.last_clock, configured.batch0, configured.clock0) != (
        free.last_batch,
        free.last_clock,
        free.batch0,
        free.clock0,
    ):
        return None
    cb, fb = np.asarray(configured.batches), np.asarray(free.batches)
    if not len(fb):
        return np.zeros(0, np.int64)
    at = np.searchsorted(cb, fb)
    if (at >= len(cb)).any() or (cb[np.minimum(at, len(cb) - 1)] != fb).any():
        return None
    changed: np.ndarray = fb[configured.clock[at] != free.clock]
    return changed


#: State columns a lean replay shares with the configured one (the rest are partials).
_SHARED_STATE = (
    "batch",
    "watermark_ms",
    "clock_ms",
    "max_event_ms",
    "window_start_ms",
    "window_end_ms",
    "emissions",
    "events",
)


def _state_changes(table: pa.Table, wi: WhatIf, v: Variant, variant_of: np.ndarray) -> np.ndarray:
    """Rows of the carried state whose key carried other rows under ``v`` than under the
    configured variant (the shared columns, and a lean window's count partial against its
    ``events``)."""
    out = np.zeros(table.num_rows, bool)
    rows = [np.flatnonzero(variant_of == wi.variants.index(u)) for u in (wi.full, v)]
    if not (len(rows[0]) or len(rows[1])):
        return out
    kcols = _key_columns(wi.pipeline)
    (count,) = wi.spec(v).pipeline.aggregates
    partial = K.STATE_PREFIX + f"partial_{count.name}"
    parts = []
    for i, r in enumerate(rows):
        t = table.take(pa.array(r))
        kind = t["__kind"].combine_chunks()
        cols: list[Any] = [t[c] for c in kcols] + [kind]
        cols += [
            t[K.STATE_PREFIX + c] if K.STATE_PREFIX + c in t.column_names else pa.nulls(len(r), pa.int64())
            for c in _SHARED_STATE
        ]
        if i == 0:  # the count partial a lean replay would carry: a window's events
            events = cols[-1]
            cols.append(pc.if_else(pc.equal(kind, K.STATE_WINDOW), events, pa.scalar(None, pa.int64())))
        else:
            cols.append(t[partial].cast(pa.int64()) if partial in t.column_names else pa.nulls(len(r), pa.int64()))
        parts.append([c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in cols])
    ids = _group_ids(parts)
    out[rows[0][~np.isin(ids[0], ids[1])]] = True
    out[rows[1][~np.isin(ids[1], ids[0])]] = True
    return out


def _as_lean_state(state: pa.Table, spec: K.Spec) -> pa.Table:
    """Configured state rows as the lean replay ``spec`` writes them: the shared columns,
    its fingerprint, and its count partial (a window's events)."""
    (count,) = spec.pipeline.aggregates
    schema = spec.state_schema()
    n = state.num_rows
    cols = []
    for f in schema:
        if f.name == "fingerprint":
            cols.append(pa.array([spec.pipeline.fingerprint()] * n, f.type))
        elif f.name == f"partial_{count.name}":
            cols.append(
                pc.if_else(pc.equal(state["state_kind"], "window"), state["events"], pa.scalar(None, pa.int64())).cast(
                    f.type
                )
            )
        elif f.name in state.column_names:
            cols.append(state[f.name].cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _add_counters(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: int(a.get(k, 0)) + int(b.get(k, 0)) for k in dict.fromkeys([*a, *b])}


def _slim(out: K.KernelOutput, keep_late: bool) -> K.KernelOutput:
    """What the sums need of a lean variant's replay (its emit times and window ends, its
    late pairs at delay 0 for the slack, its counters), so that a task holds little more
    than one replay's outputs at a time."""
    return K.KernelOutput(
        out.aggregates.select(["window_end", "emit_reason", "emit_time"]),
        out.late if keep_late else out.late.slice(0, 0),
        out.state,
        out.counters,
        out.counters_by_worker,
    )


def _with_row_ids(table: pa.Table) -> pa.Table:
    if ROW_ID in table.column_names:
        table = table.drop_columns([ROW_ID])
    return table.append_column(ROW_ID, pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _variant_codes(table: pa.Table, wi: WhatIf) -> np.ndarray:
    """Each row's :data:`VARIANT` as its index in ``wi.variants``; -1 for events (no
    variant) and for labels not analysed. Integer masks, not string comparisons per row."""
    if VARIANT not in table.column_names:
        return np.full(table.num_rows, -1, np.int64)
    labels = table[VARIANT]
    if pa.types.is_dictionary(labels.type):
        labels = labels.cast(pa.string())
    found = pc.index_in(labels, value_set=pa.array([v.label for v in wi.variants], labels.type))
    codes: np.ndarray = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes


def _key_row_owners(wi: WhatIf) -> dict[str, str]:
    """Each variant's label -> the variant whose carried key rows it shares: the first of its
    (strategy, lateness mode, skew-free) group. A key's watermark, greatest event time and
    clock do not depend on the delay, so the state holds them once per group."""
    first: dict[tuple[Any, ...], str] = {}
    return {v.label: first.setdefault((v.strategy, v.lateness, v.skew_free), v.label) for v in wi.variants}


def _without_key_rows(state: pa.Table) -> pa.Table:
    return state.filter(pc.not_equal(state["state_kind"], "key"))


def _shared_key_rows(table: pa.Table, wi: WhatIf) -> pa.Table:
    """The carried key rows of each variant, copied from its group's (:func:`_key_row_owners`).
    Key rows under other variants (a state written before the rows were shared) are left
    out: they hold the same values."""
    if VARIANT not in table.column_names or not table.num_rows:
        return table
    is_key = table["__kind"].to_numpy() == K.STATE_KEY
    if not is_key.any():
        return table
    keys = table.filter(pa.array(is_key))
    label_of = np.array(keys[VARIANT].to_pylist(), dtype=object)
    members: dict[str, list[str]] = {}
    for label, owner in _key_row_owners(wi).items():
        members.setdefault(owner, []).append(label)
    at, vtype = table.column_names.index(VARIANT), table.schema.field(VARIANT).type
    parts = [table.filter(pa.array(~is_key))]
    for owner, labels in members.items():
        mine = keys.filter(pa.array(label_of == owner))
        parts += [
            mine.set_column(at, VARIANT, pa.array([label] * mine.num_rows, pa.string()).cast(vtype)) for label in labels
        ]
    return pa.concat_tables(parts)


def _tag(state: pa.Table, v: Variant) -> pa.Table:
    return state.add_column(0, "variant", pa.array([v.label] * state.num_rows, pa.string()))


def _concat_state(parts: list[pa.Table], schema: pa.Schema) -> pa.Table:
    out = []
    for t in parts:
        cols = [t[f.name] if f.name in t.column_names else pa.nulls(t.num_rows, f.type) for f in schema]
        out.append(pa.Table.from_arrays(cols, schema=schema))
    return pa.concat_tables(out) if out else schema.empty_table()


def _ms(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Epoch ms of a UTC timestamp column (the kernel's outputs: microseconds)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    ms: np.ndarray = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy() // 1000
    return ms


#: Counters of the analysis itself (under the configured variant): events flagged as
#: skewed, windows that missed events and the (event, window) pairs they missed, late
#: events and pairs the skewed events caused, and the pairs attributed to one of them.
SKEWED_EVENTS, COST_WINDOWS, COST_MISSED = "skewed_events", "cost_windows", "cost_missed_events"
SKEW_CAUSED_EVENTS, SKEW_CAUSED_PAIRS, SKEW_ATTRIBUTED_PAIRS = (
    "skew_caused_events",
    "skew_caused_pairs",
    "skew_attributed_pairs",
)


def _counters(outs: Mapping[Variant, K.KernelOutput], schema: pa.Schema, extra: Mapping[str, int]) -> pa.Table:
    rows = [
        (v.label, name, int(value)) for v, out in outs.items() for name, value in sorted(out.counters.items()) if value
    ]
    full = next(v for v in outs if v.full).label
    rows += [(full, name, int(value)) for name, value in extra.items() if value]
    if not rows:
        return schema.empty_table()
    label, name, value = zip(*rows)
    return pa.table(
        [pa.array(label, pa.string()), pa.array(name, pa.string()), pa.array(value, pa.int64())], schema=schema
    )


def _latency(outs: Mapping[Variant, K.KernelOutput], schemas: Mapping[str, pa.Schema]) -> tuple[pa.Table, pa.Table]:
    """Emission latency (emit time - window end) of every window a variant closed by
    WATERMARK, IDLE or MAX_DURATION: (variant, latency, windows) counts, and the same in
    buckets (:func:`latency_bucket`: variant, bucket, windows, greatest latency)."""
    parts, coarse = [], []
    for v, out in outs.items():
        aggs = out.aggregates
        if not aggs.num_rows:
            continue
        aggs = aggs.filter(pc.is_in(aggs["emit_reason"], pa.array(LATENCY_REASONS)))
        if not aggs.num_rows:
            continue
        values, counts = np.unique(_ms(aggs["emit_time"]) - _ms(aggs["window_end"]), return_counts=True)
        counts = counts.astype(np.int64)
        label = pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(values), np.int32)), pa.array([v.label]))
        parts.append(
            pa.table([label, pa.array(values, pa.int64()), pa.array(counts, pa.int64())], schema=schemas["latency"])
        )
        buckets, first, inv = np.unique(latency_bucket(values), return_index=True, return_inverse=True)
        last = np.append(first[1:], len(values)) - 1  # values are sorted: a bucket's greatest is its last
        coarse.append(
            pa.table(
                [
                    pa.array([v.label] * len(buckets), pa.string()),
                    pa.array(buckets, pa.int64()),
                    pa.array(np.bincount(inv.reshape(-1), weights=counts).astype(np.int64)),
                    pa.array(values[last], pa.int64()),
                ],
                schema=schemas["latency_coarse"],
            )
        )
    exact = pa.concat_tables(parts).unify_dictionaries().combine_chunks() if parts else schemas["latency"].empty_table()
    return (exact, pa.concat_tables(coarse) if coarse else schemas["latency_coarse"].empty_table())


#: Buckets of the latency histogram per doubling of the latency: a bucket is at most
#: 2^(1/256) - 1 = 0.27 % wide, so the exact percentiles need only the values of a few.
BUCKETS_PER_DOUBLING = 256


def latency_bucket(latency_ms: np.ndarray) -> np.ndarray:
    """The bucket of each latency: ``floor(256 * log2(1 + ms))`` (negative latencies, which
    a batch stamped before the window's end can give, go to ``-bucket(-ms) - 1``)."""
    v = np.asarray(latency_ms, dtype=np.int64)
    b = np.floor(BUCKETS_PER_DOUBLING * np.log2(1.0 + np.abs(v).astype(np.float64))).astype(np.int64)
    bucket: np.ndarray = np.where(v >= 0, b, -b - 1)
    return bucket


def _slack(outs: Mapping[Variant, K.KernelOutput], wi: WhatIf, schema: pa.Schema) -> pa.Table:
    """Slack histograms per (strategy, lateness) from the late output of its D = 0 variant."""
    parts, done = [], set()
    for v, out in outs.items():
        if v.delay_ms or v.skew_free or (v.strategy, v.lateness) in done:
            continue
        done.add((v.strategy, v.lateness))
        late = out.late
        if not late.num_rows:
            continue
        wm = _ms(late["watermark"])
        s = pair_slack(wi.pipeline.window, v.lateness, wm, wm - late["lateness_ms"].to_numpy(), _ms(late["window_end"]))
        rows = late[ROW_ID].to_numpy()
        # An event's slack: the greatest of its pairs' (late as soon as one pair is).
        ev_rows, inv = np.unique(rows, return_inverse=True)
        ev_slack = np.full(len(ev_rows), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(ev_slack, inv.reshape(-1), s)
        values = np.unique(np.concatenate([s, ev_slack]))
        pairs = np.bincount(np.searchsorted(values, s), minlength=len(values))
        events = np.bincount(np.searchsorted(values, ev_slack), minlength=len(values))
        n = len(values)
        parts.append(
            pa.table(
                [
                    pa.array([v.strategy.value] * n, pa.string()),
                    pa.array([v.lateness.value] * n, pa.string()),
                    pa.array(values, pa.int64()),
                    pa.array(events.astype(np.int64)),
                    pa.array(pairs.astype(np.int64)),
                ],
                schema=schema,
            )
        )
    return pa.concat_tables(parts) if parts else schema.empty_table()


# --------------------------------------------------------------------------- group ids


def _key_columns(p: Pipeline) -> list[str]:
    return [c for c in (p.source.worker, p.window.key) if c]


def _keys_of(t: pa.Table, kcols: Sequence[str]) -> list[Any]:
    """``t``'s key columns for :func:`_group_ids` (one constant column without any)."""
    return [t[c] for c in kcols] if kcols else [np.zeros(t.num_rows, np.int64)]


def _group_ids(parts: list[list[Any]]) -> list[np.ndarray]:
    """Common ids for the rows of several tables keyed by the same columns: ``parts[i]`` is
    table i's key columns (Arrow arrays or int64 NumPy arrays, same order and types in
    every table). A null is a value like any other (docs/semantics.md section 1).

    The ids are dense and ordered as the tuples of the columns' codes (Arrow columns by
    :func:`group_codes`, NumPy ones by value): the columns are packed into one int64 as
    digits of a mixed radix, so one sort ranks them all, with a re-ranking only when the
    next digit would overflow."""
    sizes = [len(p[0]) if p else 0 for p in parts]
    enc = _packed(parts)
    if parts and parts[0]:
        _, inv = np.unique(enc, return_inverse=True)  # dense ids
        enc = inv.reshape(-1).astype(np.int64)
    return np.split(enc, np.cumsum(sizes)[:-1]) if parts else []


def _groups_of(columns: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """One table's :func:`_group_ids` (its key ``columns``) and the first row of each
    group, from the same sort."""
    _, first, inv = np.unique(_packed([columns]), return_index=True, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), first


def _packed(parts: list[list[Any]]) -> np.ndarray:
    """The rows of every table of ``parts`` as one int64 each, ordered as :func:`_group_ids`
    orders them (not dense)."""
    sizes = [len(p[0]) if p else 0 for p in parts]
    ncols = len(parts[0]) if parts else 0
    enc = np.zeros(sum(sizes), dtype=np.int64)
    span = 1  # enc < span
    for j in range(ncols):
        codes, k = _column_codes([p[j] for p in parts])
        if span * k >= 2**62:
            _, inv = np.unique(enc, return_inverse=True)
            enc = inv.reshape(-1).astype(np.int64)
            span = int(enc.max(initial=0)) + 1
        enc = enc * k + codes
        span *= k
    return enc


def _column_codes(col: list[Any]) -> tuple[np.ndarray, int]:
    """One key column of every table as codes in ``0 .. k-1`` and ``k``, ordered as the
    Arrow codes of :func:`group_codes` (of the tables' rows in a row) or the NumPy values."""
    if isinstance(col[0], np.ndarray):
        codes = np.concatenate(col).astype(np.int64)
    else:
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in col]
        codes = group_codes(pa.concat_arrays(arrays))
    if not len(codes):
        return codes, 1
    lo, hi = int(codes.min()), int(codes.max())
    if hi - lo <= 4 * len(codes) + 1024:  # a small range: the offsets are the codes
        return codes - lo, hi - lo + 1
    _, inv = np.unique(codes, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    return inv, int(inv.max()) + 1


# --------------------------------------------------------------------------- cost


def _cost(
    table: pa.Table, full: K.KernelOutput, wi: WhatIf, variant_of: np.ndarray, is_event: np.ndarray, schema: pa.Schema
) -> pa.Table:
    """One row per (worker, key, window) that missed events in the configured replay.

    ``emitted_<aggregate>``: the window's last emission in this replay (null if it was not
    emitted in it); ``perfect_<aggregate>``: the value over all its events, late ones
    included (tumbling and sliding windows emitted in this replay; the events of earlier
    partitions enter through the carried partial aggregate), computed by the kernel with a
    watermark that never makes an event late and no idle flush (:func:`perfect_pipeline`).
    """
    late = full.late
    if not late.num_rows:
        return schema.empty_table()
    p = wi.pipeline
    kcols = _key_columns(p)
    win = ["window_start", "window_end"]
    aggs = full.aggregates.filter(pc.is_in(full.aggregates["emit_reason"], pa.array(CLOSE_REASONS)))
    ids = _group_ids(
        [_keys_of(late, kcols) + [_ms(late[c]) for c in win], _keys_of(aggs, kcols) + [_ms(aggs[c]) for c in win]]
    )
    late_id, agg_id = ids
    uniq, first, inv = np.unique(late_id, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    n = len(uniq)
    missed = np.bincount(inv, minlength=n).astype(np.int64)
    lateness = late["lateness_ms"].to_numpy()
    max_late = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(max_late, inv, lateness)
    arr = table["__arr"].to_numpy()[late[ROW_ID].to_numpy()]
    first_arr = np.full(n, np.iinfo(np.int64).max, np.int64)
    last_arr = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(first_arr, inv, arr)
    np.maximum.at(last_arr, inv, arr)
    head = late.take(pa.array(first))
    cols: dict[str, Any] = {c: head[c] for c in kcols}
    cols["window_start"], cols["window_end"] = head["window_start"], head["window_end"]
    cols.update(
        missed_events=pa.array(missed),
        max_lateness_ms=pa.array(max_late),
        first_missed_arrival=K._ts(first_arr),
        last_missed_arrival=K._ts(last_arr),
    )
    # The last emission of each window in this replay.
    pos = np.searchsorted(uniq, agg_id)
    hit = (pos < n) & (uniq[np.minimum(pos, n - 1)] == agg_id) if n else np.zeros(len(agg_id), bool)
    emissions = np.bincount(pos[hit], minlength=n).astype(np.int64)
    last = np.full(n, -1, np.int64)
    rows = np.flatnonzero(hit)
    if len(rows):
        order = np.lexsort((aggs["emission"].to_numpy()[rows], pos[rows]))
        rows = rows[order]
        last[pos[rows]] = rows  # the greatest emission wins (written last)
    cols["emissions"] = pa.array(emissions)
    cols["last_emit_reason"] = _take_or_null(aggs["emit_reason"], last)
    cols["last_emit_time"] = _take_or_null(aggs["emit_time"], last)
    for a in p.aggregates:
        cols[f"emitted_{a.name}"] = _take_or_null(aggs[a.name], last)
    perfect = _perfect(table, full, wi, variant_of, is_event, head, kcols)
    for a in p.aggregates:
        col = perfect[a.name] if perfect is not None else None
        if col is None:
            cols[f"perfect_{a.name}"] = pa.nulls(n, schema.field(f"perfect_{a.name}").type)
        else:  # only for windows emitted in this replay (the others' earlier events are not here)
            cols[f"perfect_{a.name}"] = _take_or_null(col, np.where(emissions > 0, np.arange(n), -1))
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def _take_or_null(col: pa.Array | pa.ChunkedArray, idx: np.ndarray) -> pa.Array:
    """``col[idx]``, null where ``idx`` is -1."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not len(col):
        return pa.nulls(len(idx), col.type)
    taken = col.take(pa.array(np.maximum(idx, 0), pa.int64()))
    return pc.if_else(pa.array(idx >= 0), taken, pa.scalar(None, col.type))


def _perfect(
    table: pa.Table,
    full: K.KernelOutput,
    wi: WhatIf,
    variant_of: np.ndarray,
    is_event: np.ndarray,
    head: pa.Table,
    kcols: Sequence[str],
) -> pa.Table | None:
    """The perfect value of each missed window (rows aligned with ``head``), or None for
    session windows (a late session event would have merged sessions whose values are
    not defined by one window)."""
    p = wi.pipeline
    if p.window.type is WindowType.SESSION or not head.num_rows:
        return None
    # The events and carried open windows of the windows that missed events, nothing else
    # (an event enters the perfect run when one of its windows missed events; its other
    # windows come out incomplete, and are not looked at).
    kind = table["__kind"].to_numpy()
    carried = np.flatnonzero((kind == K.STATE_WINDOW) & (variant_of == wi.variants.index(wi.full)))
    events = np.flatnonzero(is_event)
    pe, ws, _ = K._assign(table["__evt"].to_numpy()[events], p.window)
    keyed = table.select(kcols or ["__kind"])  # the key columns only (all the pairs)
    ev_t, st_t = keyed.take(pa.array(events[pe])), table.take(pa.array(carried))
    ids = _group_ids(
        [
            _keys_of(head, kcols) + [_ms(head["window_start"])],
            _keys_of(ev_t, kcols) + [ws],
            _keys_of(st_t, kcols)
            + [
                pc.fill_null(st_t[K.STATE_PREFIX + "window_start_ms"], 0).to_numpy()
                if len(carried)
                else np.zeros(0, np.int64)
            ],
        ]
    )
    missed = np.zeros(int(max((x.max(initial=-1) for x in ids), default=-1)) + 1, bool)
    missed[ids[0]] = True  # the ids are dense: marks, not sorts
    take = np.zeros(table.num_rows, bool)
    take[events[pe[missed[ids[1]]]]] = True
    take[carried[missed[ids[2]]]] = True
    sub = table.filter(pa.array(take))
    pipeline = perfect_pipeline(p)
    spec = K.Spec(pipeline=pipeline, input_types=wi.spec(wi.full).input_types)
    timelines = wi.variant_timelines(replace(wi.full, delay_ms=0))
    out = K.process(sub, spec, timelines, True)
    aggs = out.aggregates
    ids = _group_ids(
        [
            _keys_of(head, kcols) + [_ms(head["window_start"]), _ms(head["window_end"])],
            _keys_of(aggs, kcols) + [_ms(aggs["window_start"]), _ms(aggs["window_end"])],
        ]
    )
    order = np.argsort(ids[1], kind="stable")
    pos = np.searchsorted(ids[1][order], ids[0])
    ok = (
        (pos < len(order)) & (ids[1][order][np.minimum(pos, max(len(order) - 1, 0))] == ids[0])
        if len(order)
        else np.zeros(len(ids[0]), bool)
    )
    idx = np.where(ok, order[np.minimum(pos, max(len(order) - 1, 0))] if len(order) else 0, -1)
    return pa.table({a.name: _take_or_null(aggs[a.name], idx) for a in p.aggregates})


# --------------------------------------------------------------------------- where lateness fell


def _late_event_rows(full: K.KernelOutput) -> tuple[np.ndarray, np.ndarray]:
    """(row ids of the late events, late pairs per late event) of the configured replay."""
    if not full.late.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, counts = np.unique(full.late[ROW_ID].to_numpy(), return_counts=True)
    return rows, counts.astype(np.int64)


def _by_key(events: pa.Table, full: K.KernelOutput, wi: WhatIf, schema: pa.Schema) -> pa.Table:
    """Events, late events and late pairs per (worker, key) of the configured replay."""
    kcols = _key_columns(wi.pipeline)
    n = events.num_rows
    if not n:
        return schema.empty_table()
    inv, first = _groups_of(_keys_of(events, kcols))
    late_rows, pairs = _late_event_rows(full)
    at = _position_of(events[ROW_ID].to_numpy(), late_rows)
    late_ev = np.bincount(inv[at], minlength=len(first)).astype(np.int64)
    late_pairs = np.bincount(inv[at], weights=pairs, minlength=len(first)).astype(np.int64)
    head = events.take(pa.array(first))
    cols = {c: head[c] for c in kcols}
    cols.update(
        events=pa.array(np.bincount(inv, minlength=len(first)).astype(np.int64)),
        late_events=pa.array(late_ev),
        late_event_windows=pa.array(late_pairs),
    )
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def _first_of_each(ids: np.ndarray) -> np.ndarray:
    """True at the first occurrence of each value (counts events among their pairs)."""
    out = np.zeros(len(ids), bool)
    out[np.unique(ids, return_index=True)[1]] = True
    return out


def _position_of(row_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions in ``row_ids`` of each of ``wanted`` (all present)."""
    if len(row_ids) < 2 or bool((row_ids[1:] > row_ids[:-1]).all()):  # ascending (the events' own order)
        found: np.ndarray = np.searchsorted(row_ids, wanted)
        return found
    order = np.argsort(row_ids, kind="stable")
    return order[np.searchsorted(row_ids[order], wanted)]


def _by_hour(events: pa.Table, full: K.KernelOutput, wi: WhatIf, schema: pa.Schema) -> pa.Table:
    """Events, late events and late pairs per worker and hour of arrival."""
    p = wi.pipeline
    n = events.num_rows
    if not n:
        return schema.empty_table()
    hour = np.floor_divide(events["__arr"].to_numpy(), HOUR_MS)
    inv, first = _groups_of([events[p.source.worker] if p.source.worker else np.zeros(n, np.int64), hour])
    late_rows, pairs = _late_event_rows(full)
    at = _position_of(events[ROW_ID].to_numpy(), late_rows)
    cols: dict[str, Any] = {}
    if p.source.worker:
        cols[p.source.worker] = events[p.source.worker].take(pa.array(first))
    cols.update(
        hour=K._ts(hour[first] * HOUR_MS),
        events=pa.array(np.bincount(inv, minlength=len(first)).astype(np.int64)),
        late_events=pa.array(np.bincount(inv[at], minlength=len(first)).astype(np.int64)),
        late_event_windows=pa.array(np.bincount(inv[at], weights=pairs, minlength=len(first)).astype(np.int64)),
    )
    return pa.table({f.name: cols[f.name] for f in schema}, schema=schema)


def lateness_bin(lateness_ms: np.ndarray) -> np.ndarray:
    """The upper bound of each value's bin in :data:`LATENESS_BINS_MS` (-1: above the last)."""
    bounds = np.array(LATENESS_BINS_MS, np.int64)
    i = np.searchsorted(bounds, np.asarray(lateness_ms, np.int64), side="left")
    return np.where(i < len(bounds), bounds[np.minimum(i, len(bounds) - 1)], -1)


def _lateness_bins(full: K.KernelOutput, schema: pa.Schema) -> pa.Table:
    """How late the configured replay's late pairs and events were (``lateness_ms``: the
    watermark they were checked against minus their event time; an event by its latest pair)."""
    late = full.late
    if not late.num_rows:
        return schema.empty_table()
    lat = late["lateness_ms"].to_numpy()
    rows = late[ROW_ID].to_numpy()
    ev, inv = np.unique(rows, return_inverse=True)
    ev_lat = np.full(len(ev), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(ev_lat, inv.reshape(-1), lat)
    pb, eb = lateness_bin(lat), lateness_bin(ev_lat)
    bins = np.unique(np.concatenate([pb, eb]))
    pairs = np.bincount(np.searchsorted(bins, pb), minlength=len(bins)).astype(np.int64)
    events = np.bincount(np.searchsorted(bins, eb), minlength=len(bins)).astype(np.int64)
    return pa.table([pa.array(bins, pa.int64()), pa.array(pairs), pa.array(events)], schema=schema)


# --------------------------------------------------------------------------- future skew


def _skew(
    events: pa.Table,
    skewed: np.ndarray,
    outs: Mapping[Variant, K.KernelOutput],
    wi: WhatIf,
    schemas: Mapping[str, pa.Schema],
) -> tuple[pa.Table, pa.Table]:
    """(late pairs the skewed events caused, the skewed events) of the task's keys.

    Caused: late in the configured replay, not in the skew-free one (skewed events
    themselves left out). Each is attributed to the skewed event that set the watermark it
    was checked against: the first (in arrival order) skewed event of its key, in an
    earlier batch, whose event time is that raw watermark; none when the watermark came
    from elsewhere (an earlier partition, or a batch whose other events set it too).
    """
    if wi.skew_threshold_ms is None:
        return schemas["skew_late"].empty_table(), schemas["skewed"].empty_table()
    p = wi.pipeline
    kcols = _key_columns(p)
    sk = np.flatnonzero(skewed)  # positions in ``events``
    arr, evt, batch = (events[c].to_numpy() for c in ("__arr", "__evt", "__batch"))
    free = next((v for v in outs if v.skew_free), None)
    late = outs[wi.full].late
    if free is not None and late.num_rows:
        other = outs[free].late
        ids = _group_ids(
            [
                [late[ROW_ID].to_numpy(), _ms(late["window_start"])],
                [other[ROW_ID].to_numpy(), _ms(other["window_start"])],
            ]
        )
        keep = ~np.isin(ids[0], ids[1]) & ~np.isin(late[ROW_ID].to_numpy(), events[ROW_ID].to_numpy()[sk])
        late = late.filter(pa.array(keep))
    else:
        late = late.slice(0, 0)
    at = _position_of(events[ROW_ID].to_numpy(), late[ROW_ID].to_numpy())
    raw_wm = _ms(late["watermark"]) + wi.full.delay_ms
    # Candidate causes, in arrival order (ties by every input column: the kernel's order).
    order_keys = [arr[sk], batch[sk]]
    if len(sk) > 1:
        rest = events.take(pa.array(sk))
        order_keys = (
            [k for c in sorted(wi.input_types, reverse=True) for k in value_order_keys(rest[c])]
            + [order_codes(rest[c]) for c in reversed(p.source.arrival_order)]
            + order_keys
        )
    ids = _group_ids(
        [_keys_of(events.take(pa.array(at)), kcols) + [raw_wm], _keys_of(events.take(pa.array(sk)), kcols) + [evt[sk]]]
    )
    order = np.lexsort([*order_keys, ids[1]]) if len(sk) else np.zeros(0, np.int64)
    first_ids, first_at = np.unique(ids[1][order], return_index=True)
    cause = np.full(len(at), -1, np.int64)  # position in ``sk`` of each late pair's cause
    if len(first_ids) and len(at):
        pos = np.minimum(np.searchsorted(first_ids, ids[0]), len(first_ids) - 1)
        cand = order[first_at[pos]]
        ok = (first_ids[pos] == ids[0]) & (batch[sk][cand] < late["batch"].to_numpy())
        cause = np.where(ok, cand, -1)
    first = _first_of_each(late[ROW_ID].to_numpy())
    has = cause >= 0
    cols: dict[str, Any] = {c: late[c] for c in kcols}
    cols.update(
        arrival_ms=pa.array(arr[at]),
        event_ms=pa.array(evt[at]),
        batch=late["batch"],
        window_start=late["window_start"],
        window_end=late["window_end"],
        watermark=late["watermark"],
        raw_watermark_ms=pa.array(raw_wm),
        lateness_ms=late["lateness_ms"],
        first_of_event=pa.array(first),
    )
    for name, values in (("cause_batch", batch), ("cause_arrival_ms", arr), ("cause_event_ms", evt)):
        cols[name] = pa.array(values[sk][np.maximum(cause, 0)] if len(sk) else np.zeros(len(at), np.int64), mask=~has)
    cols["cause_skew_ms"] = pa.array(
        (evt - arr)[sk][np.maximum(cause, 0)] if len(sk) else np.zeros(len(at), np.int64), mask=~has
    )
    skew_late = pa.table({f.name: cols[f.name] for f in schemas["skew_late"]}, schema=schemas["skew_late"])
    caused_events = np.bincount(cause[has & first], minlength=len(sk)).astype(np.int64)
    caused_pairs = np.bincount(cause[has], minlength=len(sk)).astype(np.int64)
    t = events.take(pa.array(sk))
    listing = {c: t[c] for c in wi.input_types}
    listing.update(
        arrival_ms=pa.array(arr[sk]),
        event_ms=pa.array(evt[sk]),
        skew_ms=pa.array(evt[sk] - arr[sk]),
        batch=pa.array(batch[sk]),
        late_caused=pa.array(caused_events),
        late_event_windows_caused=pa.array(caused_pairs),
    )
    return skew_late, pa.table({f.name: listing[f.name] for f in schemas["skewed"]}, schema=schemas["skewed"])


def worst_windows(cost: pa.Table, n: int) -> pa.Table:
    """The ``n`` windows that missed the most events (then the latest missed, then the
    earliest window): each task's top ``n`` hold the whole history's top ``n``."""
    if cost.num_rows <= n:
        return cost
    order = np.lexsort(
        [_ms(cost["window_start"]), -cost["max_lateness_ms"].to_numpy(), -cost["missed_events"].to_numpy()]
    )
    return cost.take(pa.array(order[:n]))
