"""The kernel's phases, for callers that run them one at a time.

:func:`windowing.kernel.process` runs these in order on one table; a caller that needs
what they compute in between (the delay sweep, :mod:`windowing.lateness.sweep`, shares
one pass over the events among many delays) runs them itself, and writes its outputs with
the same helpers, so its tables are the kernel's, column for column:

* the input: :func:`task_derived` (the internal columns a task computes itself, so the
  engine need not ship them), :func:`with_event_columns` (compute them),
  :func:`with_arrival_ranks` (each event's rank in its key's arrival order);
* the phases: :class:`KeyIds` (dense ids of the (worker, key) pairs, and their carried state),
  :class:`SortedEvents` (the events in arrival order per key), :class:`KeyBatches`
  (per (key, batch) watermarks), :class:`IdleClocks` (worker clocks and idle flushes);
* the outputs: :func:`key_state_rows` and :func:`state_rows` (the new state's rows),
  :func:`state_column` (a carried state row's column), :class:`LatePairs` (the late
  (event, window) pairs as the late table).

Together with :mod:`windowing.kernel`'s own ``__all__`` this is the kernel's public API
(tests/windowing/lateness/test_public_api.py); the rest of :mod:`windowing.kernel` is
the kernel's and its engine's (:mod:`windowing.runner`).
"""

from __future__ import annotations

from windowing.kernel.clocks import IdleClocks
from windowing.kernel.inputs import (
    KeyBatches,
    KeyIds,
    SortedEvents,
    state_column,
    task_derived,
    with_arrival_ranks,
    with_event_columns,
)
from windowing.kernel.outputs import LatePairs, key_state_rows, state_rows

__all__ = [
    "IdleClocks",
    "KeyBatches",
    "KeyIds",
    "LatePairs",
    "SortedEvents",
    "key_state_rows",
    "state_column",
    "state_rows",
    "task_derived",
    "with_arrival_ranks",
    "with_event_columns",
]
