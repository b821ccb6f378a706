"""A replay in pieces inside one task: cut the task's events at batch boundaries, replay
each piece from the state the one before left, and add up what they did.

The contract's "a replay in pieces equals a replay in one go" is what bounds a task's
memory (:mod:`windowing.runner.chunks`): a piece holds every event of the task whose batch lies
in ``[lo, hi)``, each worker's timeline is cut at the same batches
(:func:`sliced_timeline`), and the state the piece leaves (:class:`KernelOutput.state`)
becomes the next piece's carried state rows (:func:`state_input_rows`), exactly as the
next partition's replay reads the state of the one before.

Invariants: a batch is never split between pieces (its events commit together); the
pieces' outputs concatenated are the one-go replay's rows; their counters summed are the
one-go counters, but for the gauges (:data:`GAUGES`: what the last piece holds) and
``keys_seen`` (a key seen in two pieces is one key: counted by :func:`merged_counters`
from the keys each piece saw).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import metrics
from windowing.contract import BATCH_COLUMN, EMITTED_KIND, KEY_KIND, KIND_COLUMN, STATE_PREFIX, WINDOW_KIND
from windowing.kernel.inputs import EVENT, KEY_BATCH, STATE_EMITTED, STATE_KEY, STATE_WINDOW, hashable
from windowing.kernel.slices import FACT, WindowSlice
from windowing.kernel.spec import Spec, Timeline

#: Counters that are a value at the end of a replay, not a count of what it did: the last
#: piece's value is the task's.
GAUGES = (metrics.KEYS_HELD, metrics.OPEN_WINDOWS)

_KINDS = {KEY_KIND: STATE_KEY, WINDOW_KIND: STATE_WINDOW, EMITTED_KIND: STATE_EMITTED}


def sliced_timeline(tl: Timeline, lo: int | None, hi: int | None) -> Timeline:
    """The worker's commits of batches in ``[lo, hi)`` (None: unbounded), as a replay of
    that piece sees them: the last commit before ``lo`` is its carried batch and clock.

    ``batches[i]`` sorted; for ``i0`` = the first commit at or after ``lo`` and ``i1`` the
    first at or after ``hi``, the piece has commits ``[i0, i1)``, ``batch0 = batches[i0 -
    1]`` and ``clock0 = clock[i0 - 1]`` (the carried ones when ``i0 == 0``).
    """
    n = len(tl.batches)
    i0 = 0 if lo is None else int(np.searchsorted(tl.batches, lo, side="left"))
    i1 = n if hi is None else int(np.searchsorted(tl.batches, hi, side="left"))
    if i0 == 0 and i1 == n:
        return tl
    batch0 = int(tl.batches[i0 - 1]) if i0 > 0 else tl.batch0
    clock0 = int(tl.clock[i0 - 1]) if i0 > 0 else tl.clock0
    last_batch = int(tl.batches[i1 - 1]) if i1 > i0 else batch0
    return Timeline(
        tl.batches[i0:i1],
        tl.geff[i0:i1] if len(tl.geff) else tl.geff,
        tl.clock[i0:i1],
        last_batch,
        tl.min_arrival[i0:i1] if len(tl.min_arrival) else tl.min_arrival,
        batch0=batch0,
        clock0=clock0,
    )


def state_input_rows(state: pa.Table, spec: Spec) -> pa.Table:
    """The kernel's ``state`` output as carried state rows of its input: the worker and key
    columns as they are, every other column under :data:`STATE_PREFIX`, ``__kind`` from
    ``state_kind`` (as the engine reads a carried state dataset, ``windowing.runner.normalise.split_state``)."""
    keep = list(spec.id_cols)
    cols: dict[str, Any] = {c: state[c] for c in keep}
    for c in state.column_names:
        if c not in keep and c != "fingerprint":
            cols[STATE_PREFIX + c] = state[c]
    kinds = state["state_kind"].to_pylist()
    cols[KIND_COLUMN] = pa.array([_KINDS[k] for k in kinds], pa.int8())
    return pa.table(cols)


def merged_commits(
    parts: Iterable[Mapping[Any, tuple[np.ndarray, ...]]], minimum: bool
) -> dict[Any, tuple[np.ndarray, ...]]:
    """Per-worker commit summaries (:func:`windowing.kernel.clocks.commit_summary`) of several
    slices of the same events, as one: per batch the candidate's min (``minimum``) or max,
    the greatest and the smallest arrival."""
    lists: dict[Any, list[tuple[np.ndarray, ...]]] = {}
    for part in parts:
        for w, arrays in part.items():
            lists.setdefault(w, []).append(arrays)
    pick = np.minimum if minimum else np.maximum
    out: dict[Any, tuple[np.ndarray, ...]] = {}
    for w, slices in lists.items():
        batch, cand, maxarr, minarr = (np.concatenate([a[i] for a in slices]) for i in range(4))
        order = np.argsort(batch, kind="stable")
        batch, cand, maxarr, minarr = batch[order], cand[order], maxarr[order], minarr[order]
        starts = np.flatnonzero(np.concatenate([[True], batch[1:] != batch[:-1]]))
        out[w] = (
            batch[starts],
            pick.reduceat(cand, starts),
            np.maximum.reduceat(maxarr, starts),
            np.minimum.reduceat(minarr, starts),
        )
    return out


def batch_counts(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The distinct batches of the table's events and their event counts."""
    kind = table[KIND_COLUMN].to_numpy()
    batch = table[BATCH_COLUMN].to_numpy()[kind == EVENT]
    values, counts = np.unique(batch, return_counts=True)
    return values.astype(np.int64), counts.astype(np.int64)


def cuts(values: np.ndarray, counts: np.ndarray, most: int) -> list[int]:
    """Batch values where pieces start (after the first), so that each piece holds at most
    ``most`` events, or a single batch (a batch is never split). ``values`` sorted."""
    out: list[int] = []
    held = 0
    for v, c in zip(values.tolist(), counts.tolist()):
        if held and held + c > most:
            out.append(v)
            held = 0
        held += c
    return out


def keys_seen(table: pa.Table, spec: Spec, window_slice: WindowSlice | None = None) -> set[Hashable]:
    """The (worker, key) pairs with events in ``table`` (a slice of keys' windows: those
    with key-batch rows, in the home slice only, :mod:`.slices`)."""
    if window_slice is not None and not window_slice.home:
        return set()
    kind = table[KIND_COLUMN]
    events = table.filter(pc.or_(pc.equal(kind, EVENT), pc.equal(kind, KEY_BATCH)))
    cols = list(spec.id_cols)
    if not cols:
        return {(0,)} if events.num_rows else set()
    distinct = events.select(cols).group_by(cols).aggregate([])
    return {tuple(hashable(v) for v in row.values()) for row in distinct.to_pylist()}


def merged_counters(pieces: list[dict[str, dict[str, int]]], seen: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """The counters per worker label of pieces replayed one after the other: summed, but for
    the :data:`GAUGES` (the last piece's) and ``keys_seen`` (``seen``: distinct keys with
    events per worker label)."""
    out: dict[str, dict[str, int]] = {}
    for i, by_worker in enumerate(pieces):
        last = i == len(pieces) - 1
        for label, counters in by_worker.items():
            acc = out.setdefault(label, {})
            for name, v in counters.items():
                if name.split(FACT, 1)[0] in GAUGES and not last:
                    continue
                acc[name] = acc.get(name, 0) + v
    for label, acc in out.items():
        acc[metrics.KEYS_SEEN] = seen.get(label, 0)
    return out
