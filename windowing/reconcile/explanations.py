"""Why a mismatch happened, from the replay's own data: each explanation of
:data:`windowing.reconcile.vocabulary.EXPLANATIONS` as a Spark condition and a detail text
over a mismatch row and its window's figures (:func:`explanation_columns`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from pyspark.sql import functions as F

from windowing.config import Pipeline
from windowing.contract import CLOSE_REASONS, WATERMARK_REASON
from windowing.durations import format_duration_ms
from windowing.reconcile.matching import Compared, reason_name
from windowing.reconcile.vocabulary import (
    CONFLICTING_DUPLICATE,
    DUPLICATE_IN_LIVE,
    EMIT_REASON,
    EXTRA_IN_REPLAY,
    FLOAT_ROUNDING,
    LATE_IN_LIVE,
    LATE_IN_REPLAY,
    MISSING_IN_REPLAY,
    NULL_IN_LIVE,
    PARTITION_EDGE,
    ROUNDING_RELATIVE,
    VALUE_MISMATCH,
)
from windowing.runner.columns import col as _col

if TYPE_CHECKING:
    from pyspark.sql import Column


def _seconds(ms_col: Column) -> Column:
    return F.format_string("%.3f s", ms_col / F.lit(1000.0))


def explanation_columns(
    pipeline: Pipeline, compared: list[Compared], count_agg: Compared | None, edges: list[int] | None
) -> tuple[list[Column], list[Column]]:
    """(explanation codes, detail texts) of a mismatch row: Spark expressions, null where
    one does not apply.

    Every condition reads the row (its category, both sides' values, ``__copy`` > 0 for a
    further copy of a repeated live identity) and its window's figures: ``__n_replay`` /
    ``__n_live`` (rows of the window on each side), ``__n_<reason>`` (the replay's
    emissions by reason), ``__r_total`` / ``__l_total`` (the count aggregate over all
    emissions), ``__late_n`` and the first and last arrival of the replay's late events
    of the window. In order: what differs (texts only), then each explanation that may
    apply, each a (code, text) pair."""
    codes: list[Column] = []
    texts: list[Column] = _what_differs(compared)
    pairs = [_emitted_differently(count_agg)]
    if count_agg is not None:
        pairs += _late_on_one_side(pipeline, count_agg)
    if edges:
        pairs.append(_on_partition_edge(edges))
    if any(a.floating for a in compared):
        pairs.append(_float_rounding(compared))
    pairs.append(_duplicate_in_live())
    # The others are proven from values that are there and agree: not from a null live
    # aggregate, nor from copies of one live emission that differ.
    null_code, null_text = _null_in_live(compared)
    conflict = F.coalesce(F.col("__l_conflict"), F.lit(False))
    trusted = ~conflict & null_code.isNull()
    for code, text in pairs:
        codes.append(F.when(trusted, code))
        texts.append(F.when(trusted, text))
    conflict_code, conflict_text = _conflicting_duplicate()
    codes += [F.when(~conflict, null_code), conflict_code]
    texts += [F.when(~conflict, null_text), conflict_text]
    return codes, texts


def _null_in_live(compared: list[Compared]) -> tuple[Column, Column]:
    """:data:`NULL_IN_LIVE`: a value mismatch where live aggregates are null and the
    replay's are not (named)."""
    cat, _, own = _row_columns()
    nulls = [
        F.when(
            F.array_contains("__differing", F.lit(a.agg.name)) & _col(a.live).isNull() & _col(a.replay).isNotNull(),
            F.lit(a.agg.name),
        )
        for a in compared
    ]
    named = F.array_compact(F.array(*nulls)) if nulls else F.array().cast("array<string>")
    here = own & (cat == F.lit(VALUE_MISMATCH)) & (F.size(named) > 0)
    return F.when(here, F.lit(NULL_IN_LIVE)), F.when(
        here,
        F.concat(
            F.lit("the live side has no value (null) for "),
            F.array_join(named, ", "),
            F.lit(": its sink lost or never wrote them; nothing about the window's events follows from that"),
        ),
    )


def _conflicting_duplicate() -> tuple[Column, Column]:
    """:data:`CONFLICTING_DUPLICATE`: the live side has this emission several times with
    different values (on the compared row and on each further copy)."""
    here = F.coalesce(F.col("__l_conflict"), F.lit(False))
    return F.when(here, F.lit(CONFLICTING_DUPLICATE)), F.when(
        here,
        F.concat(
            F.lit("the live side has this window emission "),
            F.col("__l_n").cast("string"),
            F.lit(" times with different values: which copy is right cannot be told from the live side"),
        ),
    )


def _row_columns() -> tuple[Column, Column, Column]:
    """(category, a further live copy, the identity's own row) of a mismatch row."""
    copy = F.col("__copy") > 0
    return F.col("__category"), copy, ~copy


def _what_differs(compared: list[Compared]) -> list[Column]:
    """Detail texts of what differs: the values of a value mismatch, the emission only
    one side has."""
    cat, _, own = _row_columns()
    diffs = [
        F.when(
            F.array_contains("__differing", F.lit(a.agg.name)),
            F.concat(
                F.lit(f"{a.agg.name}: live "),
                F.coalesce(_col(a.live).cast("string"), F.lit("null")),
                F.lit(" against replay "),
                F.coalesce(_col(a.replay).cast("string"), F.lit("null")),
            ),
        )
        for a in compared
    ]
    return [
        F.when(cat == F.lit(VALUE_MISMATCH), F.concat_ws("; ", *diffs)),
        F.when(
            own & (cat == F.lit(MISSING_IN_REPLAY)),
            F.concat(
                F.lit("the live side has emission "),
                F.col("__em").cast("string"),
                F.lit(" of this window; the replay has not"),
            ),
        ),
        F.when(
            cat == F.lit(EXTRA_IN_REPLAY),
            F.concat(
                F.lit("the replay has emission "),
                F.col("__em").cast("string"),
                F.lit(" of this window ("),
                reason_name(F.col("__r_reason")),
                F.lit("); the live side has not"),
            ),
        ),
    ]


def _emitted_differently(count_agg: Compared | None) -> tuple[Column, Column]:
    """:data:`EMIT_REASON`: the sides emitted the window a different number of times (one
    side flushed it idle)."""
    _, _, own = _row_columns()
    n_r, n_l = F.col("__n_replay"), F.col("__n_live")
    emit = own & (n_r > 0) & (n_l > 0) & (n_r != n_l)
    reasons = F.concat_ws(
        ", ",
        *[
            F.when(F.col(f"__n_{r.lower()}") > 0, F.concat(F.col(f"__n_{r.lower()}").cast("string"), F.lit(f" {r}")))
            for r in CLOSE_REASONS
        ],
    )
    how = (
        F.when(
            (n_r > n_l) & (F.col("__n_idle") > 0),
            F.lit("the replay flushed it idle where the live side did not (IDLE against WATERMARK)"),
        )
        .when(
            n_r < n_l,
            F.lit(
                "the live side flushed it idle where the replay did not (IDLE against "
                "WATERMARK): the idle clock or heartbeat differs"
            ),
        )
        .otherwise(F.lit("the sides closed it by different reasons"))
    )
    same_total = F.lit("")
    if count_agg is not None:
        same_total = F.coalesce(
            F.when(
                F.col("__r_total") == F.col("__l_total"),
                F.concat(
                    F.lit(f"; over all emissions both count {count_agg.agg.name} = "), F.col("__r_total").cast("string")
                ),
            ),
            F.lit(""),
        )
    return F.when(emit, F.lit(EMIT_REASON)), F.when(
        emit,
        F.concat(
            F.lit("the replay emitted this window "),
            n_r.cast("string"),
            F.lit(" time(s) ("),
            reasons,
            F.lit("), the live side "),
            n_l.cast("string"),
            F.lit(": "),
            how,
            same_total,
        ),
    )


def _late_on_one_side(pipeline: Pipeline, count_agg: Compared) -> list[tuple[Column, Column]]:
    """:data:`LATE_IN_REPLAY` (the live side counted events the replay marks late) and
    :data:`LATE_IN_LIVE` (the replay counted more, closing by WATERMARK: events late in
    the live run), as (code, text) pairs; both read the count aggregate."""
    cat, _, own = _row_columns()
    batches = (
        f"the recorded batches ({format_duration_ms(pipeline.source.batch_interval_ms)})"
        if pipeline.source.batch_interval_ms
        else f"the recorded batches (column {pipeline.source.batch_column!r})"
    )
    r_count = F.coalesce(F.col(count_agg.replay).cast("long"), F.lit(0))
    l_count = F.coalesce(F.col(count_agg.live).cast("long"), F.lit(0))
    more = l_count - r_count
    late_n = F.coalesce(F.col("__late_n"), F.lit(0))
    late_here = own & (
        ((cat == F.lit(VALUE_MISMATCH)) & (more > 0) & (late_n > 0))
        | ((cat == F.lit(MISSING_IN_REPLAY)) & (F.col("__n_replay") == 0) & (more > 0) & (late_n >= more))
    )
    close = F.col("__r_emit_ms")
    gaps = F.when(
        close.isNotNull() & F.col("__late_first_ms").isNotNull(),
        F.concat(
            F.lit(", arriving "),
            _seconds(F.col("__late_first_ms") - close),
            F.lit(" to "),
            _seconds(F.col("__late_last_ms") - close),
            F.lit(" after the replay's commit that emitted it"),
        ),
    )
    in_replay = (
        F.when(late_here, F.lit(LATE_IN_REPLAY)),
        F.when(
            late_here,
            F.concat(
                F.lit("the live side counted "),
                more.cast("string"),
                F.lit(" more event(s); the replay marks "),
                late_n.cast("string"),
                F.lit(" event(s) of this window late"),
                F.coalesce(gaps, F.lit("")),
                F.lit(
                    f": {batches} may not be the live commit batches; live batches longer than that gap commit "
                    "the watermark later, so these events were not late there"
                ),
            ),
        ),
    )
    watermark = F.col("__r_reason") == F.lit(CLOSE_REASONS.index(WATERMARK_REASON))
    late_live = (cat == F.lit(VALUE_MISMATCH)) & (more < 0) & watermark
    in_live = (
        F.when(late_live, F.lit(LATE_IN_LIVE)),
        F.when(
            late_live,
            F.concat(
                F.lit("the replay counted "),
                (-more).cast("string"),
                F.lit(" more event(s) and closed the window by WATERMARK at its commit of "),
                F.timestamp_millis(F.col("__r_emit_ms")).cast("string"),
                F.lit(
                    f": with live commit batches shorter than {batches}, the live watermark passes the window's end "
                    "sooner and events arriving just before that commit are late there"
                ),
            ),
        ),
    )
    return [in_replay, in_live]


def _on_partition_edge(edges: Sequence[int]) -> tuple[Column, Column]:
    """:data:`PARTITION_EDGE`: a partition edge falls inside the window (or before its
    emission): its events and its emission lie in different partitions."""
    _, _, own = _row_columns()
    hi = F.greatest(F.col("__we"), F.col("__r_emit_ms"), F.col("__l_emit_ms"))
    on_edge = F.filter(F.array(*[F.lit(e) for e in edges]), lambda e: (e > F.col("__ws")) & (e <= hi))
    edge_here = own & (F.size(on_edge) > 0)
    return F.when(edge_here, F.lit(PARTITION_EDGE)), F.when(
        edge_here,
        F.concat(
            F.lit("the window falls on the partition edge "),
            F.timestamp_millis(F.get(on_edge, 0)).cast("string"),
            F.lit(": its events and its emission lie in different partitions"),
        ),
    )


def _float_rounding(compared: list[Compared]) -> tuple[Column, Column]:
    """:data:`FLOAT_ROUNDING`: a value mismatch whose every difference is within
    :data:`ROUNDING_RELATIVE` of floating-point values."""
    cat, _, _ = _row_columns()
    only_rounding = cat == F.lit(VALUE_MISMATCH)
    for a in compared:
        differs = F.array_contains("__differing", F.lit(a.agg.name))
        if a.floating:
            r, lv = _col(a.replay), _col(a.live)
            within = F.abs(r - lv) <= F.lit(ROUNDING_RELATIVE) * F.greatest(F.abs(r), F.abs(lv))
            only_rounding = only_rounding & (~differs | F.coalesce(within, F.lit(False)))
        else:
            only_rounding = only_rounding & ~differs
    return F.when(only_rounding, F.lit(FLOAT_ROUNDING)), F.when(
        only_rounding,
        F.lit(
            f"only floating-point rounding (each difference at most {ROUNDING_RELATIVE:g} relative): "
            "a different summation order, not different events"
        ),
    )


def _duplicate_in_live() -> tuple[Column, Column]:
    """:data:`DUPLICATE_IN_LIVE`: a further copy of a window emission the live side has
    several times."""
    _, copy, _ = _row_columns()
    return F.when(copy, F.lit(DUPLICATE_IN_LIVE)), F.when(
        copy,
        F.concat(
            F.lit("the live side has this window emission "),
            F.col("__l_n").cast("string"),
            F.lit(" times; this is copy "),
            (F.col("__copy") + 1).cast("string"),
            F.lit(" (one is compared, with the copies' greatest values)"),
        ),
    )
