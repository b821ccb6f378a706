"""Reconcile a replay with the live pipeline's own output (``rewindow reconcile``).

The live side is any dataset Spark reads (a path or URI in a format, or a catalog table)
holding the windows the live pipeline emitted; a column mapping (the ``reconcile:`` block
of the pipeline YAML, :func:`windowing.config.reconcile.parse_reconcile`) says which of its columns hold the key,
the window bounds, the aggregates and, optionally, the worker, the emission number and
the emit time. :func:`windowing.reconcile.compare.reconcile` compares it with a replay's ``aggregates`` output, all
in Spark DataFrame expressions (no Python per row).

**Matching.** A window emission is identified by
``(worker, key, window_start_ms, window_end_ms, emission)``: the worker only when the
mapping has one, the key when the pipeline has one (a null worker or key is a value like
any other, as in the replay). Without a live emission column the live rows of a window
are numbered ``1, 2, ...`` in emit order (emit time, then the aggregate values, so the
numbering never depends on row order); without a live emit time either, both sides are
numbered by their values; without a live worker, the replay's rows of a (key, window) are
numbered over its workers in emit order (from the replay's first emission number of the
window, so a replay of a later partition continues the count). A live identity given more than once is
compared once (with its copies' greatest values: the same values when the copies are
exact, as a sink writing twice makes them); each further copy is ``MISSING_IN_REPLAY``,
explained ``DUPLICATE_IN_LIVE``. Replay snapshots (``emit_reason = AGGREGATE``, the
``atAggregate`` trigger) are not windows and are left out.

**Comparing.** Counts, distinct counts and every other aggregate whose types on both
sides are not floating point are compared exactly (``<=>``: null equals null). When
either side is floating point, two values ``live`` and ``replay`` match when they are
equal (NaN equals NaN, infinities their own sign) or
``|live - replay| <= max(absolute, relative * max(|live|, |replay|))``.

**Categories** of each identity: ``MATCH``, ``VALUE_MISMATCH`` (both sides have it; the
aggregates that differ are listed with both values), ``MISSING_IN_REPLAY`` (only the
live side has it), ``EXTRA_IN_REPLAY`` (only the replay has it). The match rate is
``MATCH / (all four)``, 1.0 when both sides are empty.

**Explanations** come from the replay's own data only (:data:`windowing.reconcile.vocabulary.EXPLANATIONS`).

**Partitions.** Given ``partition_edges`` ``e0 < e1 < ... < en`` (the arrival-time
bounds of the replayed partitions), each identity belongs to the partition ``[ei, ei+1)``
holding its *placing time*: the replay's emit time, else the live emit time, else the
window end (a replay row outside the edges goes to the first or last partition; a live
row that matches nothing and lies outside them is out of scope and only counted,
``live_rows_outside_partitions``). Figures are given per partition and in total.

**Modules.** :mod:`~windowing.reconcile.vocabulary` (categories, explanations, output
names), :mod:`~windowing.reconcile.live` (the live side: reading it, checking its
columns), :mod:`~windowing.reconcile.matching` (both sides in one union, paired by
identity), :mod:`~windowing.reconcile.explanations` (why a mismatch happened),
:mod:`~windowing.reconcile.figures` (counts, match rate, summary rows),
:mod:`~windowing.reconcile.compare` (:func:`~windowing.reconcile.compare.reconcile`, which
runs them), :mod:`~windowing.reconcile.outputs` (write, read), :mod:`~windowing.reconcile.text`
(a terminal summary), :mod:`~windowing.reconcile.cli` (``rewindow reconcile``).
"""
