"""The per-key windowing kernel: pure NumPy/pyarrow over many keys at once.

It takes one Arrow table holding the events of a set of complete keys (in any row
order) together with those keys' carried state rows, and returns the emitted windows,
the late (event, window) pairs, and the new state — following docs/semantics.md.
Nothing here imports Spark; :mod:`windowing.runner` runs this on Spark partitions.

How tumbling and sliding windows are computed without a per-event loop:

* events are sorted in arrival order per key; a key's watermark after each of its
  batches is a segmented running maximum of per-batch candidates;
* lateness is an array comparison against the watermark of the key's previous batch;
* a window closes at the first of its key's batches whose effective watermark reaches
  its end (a segmented ``searchsorted``);
* an idle flush of a key between two of its own batches is a ``searchsorted`` in its
  worker's global timeline; each flush starts a new *generation* of the key's windows;
  with the processing-time clock a heartbeat tick can only flush it in the gap just
  before that commit, which one more comparison decides (``_heartbeat_flush``), so the
  ticks themselves are never listed;
* every emitted row's ``emit_time`` is its worker's clock then, read from the same
  timeline (or the tick);
* aggregates per (key, generation, window) are unbuffered ``ufunc.at`` reductions in
  arrival order, so float sums are a left fold that a carried partial sum continues;
  decimal sums are exact: unscaled Python integers in object arrays (see ``_decimal_ints``).

Session windows merge sequentially and run a tight per-key loop (``session_windows``).

The phases, one module each:

* :mod:`.inputs`: decode the table, order the events, key ids, per-(key, batch) watermarks;
* :mod:`.clocks`: worker timelines and idle flushes (generations);
* :mod:`.assignment`: :func:`assign_windows`, the windows of an event time;
* :mod:`.fixed`: tumbling and sliding windows (:func:`fixed_windows`);
* :mod:`.sessions`: session windows (:func:`session_windows`);
* :mod:`.aggregates`: value domains, reductions, carried partials;
* :mod:`.outputs`: the aggregates, late, state tables and the counters;
* :mod:`.spec` and :mod:`.decimals`: the shared types and exact decimal arithmetic;
* :mod:`.phases`: the phases' public building blocks, for callers that run them one at
  a time (the delay sweep).
"""

from __future__ import annotations

from typing import Any, Mapping

import pyarrow as pa

from windowing.config import Trigger, WindowType
from windowing.contract import LATE_ADDED_COLUMNS, STATE_PREFIX
from windowing.kernel import slices
from windowing.kernel.assignment import assign_windows
from windowing.kernel.clocks import IdleClocks
from windowing.kernel.fixed import fixed_windows
from windowing.kernel.inputs import (
    EVENT,
    STATE_EMITTED,
    STATE_KEY,
    STATE_WINDOW,
    KeyBatches,
    KeyIds,
    SortedEvents,
    with_event_columns,
)
from windowing.kernel.outputs import counters_table, key_state_rows, ts_array
from windowing.kernel.sessions import session_windows
from windowing.kernel.slices import WindowSlice
from windowing.kernel.spec import TS, KernelOutput, Spec, Timeline

# The kernel's user-facing concepts, what callers outside its engine (windowing.runner)
# import from here (the engine imports the submodules it drives directly):
# - the entry point and its types: process, Spec, Timeline, KernelOutput, WindowSlice, TS;
# - window assignment, a pure function of an event time: assign_windows;
# - the row kinds of its input table and its state columns' prefix: EVENT, STATE_KEY,
#   STATE_WINDOW, STATE_EMITTED, STATE_PREFIX;
# - the columns late_events adds to an event: LATE_ADDED_COLUMNS;
# - epoch ms as output times, null at the sentinels: ts_array.
# The phases, for callers that run them one at a time (the delay sweep), are
# windowing.kernel.phases. Kept short (tests/windowing/lateness/test_public_api.py).
__all__ = [
    "process",
    "Spec",
    "Timeline",
    "KernelOutput",
    "WindowSlice",
    "TS",
    "assign_windows",
    "EVENT",
    "STATE_KEY",
    "STATE_WINDOW",
    "STATE_EMITTED",
    "STATE_PREFIX",
    "LATE_ADDED_COLUMNS",
    "ts_array",
]


def process(
    table: pa.Table,
    spec: Spec,
    timelines: Mapping[Any, Timeline],
    flush_at_end: bool,
    window_slice: WindowSlice | None = None,
) -> KernelOutput:
    """Replay the events of complete keys in ``table`` (events and state rows, any order).

    With ``window_slice``, replay only that slice of the keys' windows (:mod:`.slices`):
    ``table`` then holds the slice's rows and every key-batch row of its keys."""
    table = with_event_columns(table, spec)
    keyset = KeyIds(table, spec)
    sorted_events = SortedEvents(table, spec, keyset)
    key_batches = KeyBatches(sorted_events, keyset, spec)
    idle = IdleClocks(key_batches, keyset, spec, timelines)
    if spec.window.type is WindowType.SESSION:
        if window_slice is not None:
            raise ValueError("session windows merge in order: they are never replayed in slices")
        groups, late, snaps = session_windows(sorted_events, key_batches, keyset, idle, spec, flush_at_end)
    else:
        groups, late, snaps = fixed_windows(sorted_events, key_batches, keyset, idle, spec, flush_at_end, window_slice)
    # Windows close (and count for `emission`) either way; atWindowEnd decides if that is output.
    out_aggs = [groups.emitted_table(keyset, spec)] if Trigger.AT_WINDOW_END in spec.pipeline.triggers else []
    if snaps is not None:
        out_aggs.append(snaps.emitted_table(keyset, spec))
    aggs = pa.concat_tables(out_aggs) if out_aggs else spec.aggregates_schema().empty_table()
    state = pa.concat_tables(
        [
            key_state_rows(keyset, key_batches, spec),
            groups.state_table(keyset, spec),
            groups.emitted_counter_table(keyset, spec),
        ]
    )
    by_worker = counters_table(keyset, sorted_events, key_batches, groups, snaps, late, spec, window_slice)
    totals: dict[str, int] = {}
    for figures in slices.resolved(by_worker).values():
        for name, v in figures.items():
            totals[name] = totals.get(name, 0) + v
    return KernelOutput(aggs, late.table(sorted_events, spec), state, totals, by_worker)
