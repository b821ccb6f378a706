"""The words of a reconciliation: the categories of an identity, the explanations of a
mismatch, the datasets a reconcile run writes and its summary's columns. Plain constants."""

from __future__ import annotations

MATCH = "MATCH"
VALUE_MISMATCH = "VALUE_MISMATCH"
MISSING_IN_REPLAY = "MISSING_IN_REPLAY"
EXTRA_IN_REPLAY = "EXTRA_IN_REPLAY"
CATEGORIES = (MATCH, VALUE_MISMATCH, MISSING_IN_REPLAY, EXTRA_IN_REPLAY)

#: The live and replay sides emitted the window a different number of times: one of them
#: flushed it idle where the other closed it once (IDLE against WATERMARK).
EMIT_REASON = "EMIT_REASON"
#: The live side counted more events than the replay, and the replay has events of this
#: window in its late_events output (the recorded batches may not be the live commits).
LATE_IN_REPLAY = "LATE_IN_REPLAY"
#: The replay counted more events than the live side and closed the window by watermark:
#: with shorter live commit batches, the events just before that commit were late there.
LATE_IN_LIVE = "LATE_IN_LIVE"
#: A partition edge lies in ``(window_start, max(window_end, emit times)]``: the
#: window's events and its emission fall in different partitions.
PARTITION_EDGE = "PARTITION_EDGE"
#: Only floating-point aggregates differ, each by at most :data:`ROUNDING_RELATIVE`
#: relative: a different summation order, not different events.
FLOAT_ROUNDING = "FLOAT_ROUNDING"
#: The live side has this (worker, key, window, emission) more than once, the copies alike.
DUPLICATE_IN_LIVE = "DUPLICATE_IN_LIVE"
#: The live side has null aggregates where the replay has values: nothing about events
#: can be read from them (not a late event, not an idle flush).
NULL_IN_LIVE = "NULL_IN_LIVE"
#: The live side has this (worker, key, window, emission) more than once with different
#: values: which copy is right cannot be told, so no other explanation is given.
CONFLICTING_DUPLICATE = "CONFLICTING_DUPLICATE"
EXPLANATIONS = (
    EMIT_REASON,
    LATE_IN_REPLAY,
    LATE_IN_LIVE,
    PARTITION_EDGE,
    FLOAT_ROUNDING,
    DUPLICATE_IN_LIVE,
    NULL_IN_LIVE,
    CONFLICTING_DUPLICATE,
)

#: Largest relative difference a float aggregate can owe to summation order alone in
#: this explanation (double sums of up to millions of values drift by far less).
ROUNDING_RELATIVE = 1e-6

#: Datasets of a reconcile run (``OUT/runs/<run id>/``) and its figures (JSON text).
OUTPUTS = ("mismatches", "summary")
FIGURES = "figures.json"

SUMMARY_COLUMNS = (
    "scope",
    "partition_key",
    "partition_start",
    "partition_end",
    "replay_rows",
    "live_rows",
    "compared",
    "match",
    "value_mismatch",
    "missing_in_replay",
    "extra_in_replay",
    "explained",
    "unexplained",
    "match_rate",
)
SUMMARY_SCHEMA = (
    "scope string, partition_key string, partition_start timestamp, partition_end timestamp, replay_rows long, "
    "live_rows long, compared long, match long, value_mismatch long, missing_in_replay long, "
    "extra_in_replay long, explained long, unexplained long, match_rate double"
)
FIELD = "reconcile"
