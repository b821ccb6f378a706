"""One hot key's tumbling or sliding windows replayed in slices, in parallel and exactly.

A key's windows depend on each other only through the key's batches: the watermark
after each batch (a running max of per-batch candidates), the greatest event and arrival
time (idleness), and the worker's timeline. Given those for every batch of the key (its
*key-batch rows*, :data:`~windowing.kernel.inputs.KEY_BATCH`, one per (worker, key,
batch), summed up by Spark from all the key's events), a replay of some of its windows
needs only the events of those windows. So a key too big for one task is cut by window:

* windows are grouped into blocks of ``block_ms`` of window start (``B``: the span for
  tumbling windows, so an event is in one slice; for sliding ones the smallest multiple
  of the slide that is at least the span, so an event is in at most two), and block
  ``b`` belongs to slice ``pmod(b, count)``: consecutive blocks go round the slices;
* each slice gets the events with a window in its blocks (:func:`event_slices`), the
  key's carried windows and emission counters of its blocks, the key's carried key row
  and every key-batch row, and replays only the (event, window) pairs of its blocks;
* what the slices emit, make late and leave open is disjoint and together the key's;
  slice 0 (the *home* slice) writes the key's state row and counts it as seen; an event
  counts in the slice of its latest window start (:func:`latest_start`), a late event in
  the slice of its earliest window (late windows are a prefix of an event's windows by
  start, so it is late at all exactly when that one is).

Two counters are about the key across its windows: ``keys_held`` (has it any window
open at the end?) and ``idle_keys_removed`` (its idle flushes that removed a window).
A slice reports them as *facts*, counter names ``<counter><FACT>`` plus the key and the
flush, value 1 (:func:`fact`): the driver counts each distinct fact once
(:func:`resolved`). Session windows merge in order and are never sliced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing import metrics
from windowing.config import WatermarkStrategy, Window, WindowType
from windowing.contract import ARRIVAL_MS_COLUMN, BATCH_COLUMN, EVENT_MS_COLUMN, KEY_KIND, KIND_COLUMN
from windowing.kernel.inputs import (
    EVENT,
    KB_BATCH,
    KB_CAND,
    KB_MAXARR,
    KB_MAXEV,
    KEY_BATCH,
    STATE_EMITTED,
    STATE_KEY,
    STATE_WINDOW,
    hashable,
    state_column,
    with_event_columns,
)

if TYPE_CHECKING:
    from windowing.kernel.spec import Spec

#: Separates a fact's counter name from what it is about (:func:`fact`).
FACT = "\x00"
#: The counters a slice reports as facts.
FACT_COUNTERS = (metrics.KEYS_HELD, metrics.IDLE_KEYS_REMOVED)


def sliceable(window: Window) -> bool:
    """Whether ``window``'s keys can be replayed in slices (tumbling and sliding)."""
    return window.type in (WindowType.TUMBLING, WindowType.SLIDING)


def block_ms(window: Window) -> int:
    """The span of window starts one block covers (see the module's docstring)."""
    span = cast(int, window.span_ms)
    if window.type is WindowType.TUMBLING:
        return span
    slide = cast(int, window.slide_ms)
    return -(-span // slide) * slide


def latest_start(t: np.ndarray, window: Window) -> np.ndarray:
    """The latest window start at or before each event time (the start of its only window
    when tumbling; a sliding window's gap events have it too, though not its window)."""
    step = cast(int, window.span_ms if window.type is WindowType.TUMBLING else window.slide_ms)
    start: np.ndarray = np.floor_divide(t - window.offset_ms, step) * step + window.offset_ms
    return start


def earliest_start(t: np.ndarray, window: Window) -> np.ndarray:
    """The start of each event time's earliest window (greater than :func:`latest_start`
    for a sliding window's gap event, which has none)."""
    if window.type is WindowType.TUMBLING:
        return latest_start(t, window)
    span, slide = cast(int, window.span_ms), cast(int, window.slide_ms)
    start: np.ndarray = np.floor_divide(t - span - window.offset_ms, slide) * slide + window.offset_ms + slide
    return start


@dataclass(frozen=True)
class WindowSlice:
    """Slice ``index`` of ``count`` of a key's windows: those whose start lies in a block
    ``b = floor((start - offset) / block)`` with ``pmod(b, count) == index``."""

    index: int
    count: int
    block: int
    offset: int = 0

    @staticmethod
    def of(window: Window, index: int, count: int) -> WindowSlice:
        return WindowSlice(index, count, block_ms(window), window.offset_ms)

    @property
    def home(self) -> bool:
        """The slice that writes the key's state row and counts the key as seen."""
        return self.index == 0

    def slice_of(self, start: np.ndarray) -> np.ndarray:
        """The slice of each window start."""
        sl: np.ndarray = np.mod(np.floor_divide(start - self.offset, self.block), self.count)
        return sl

    def owns(self, start: np.ndarray) -> np.ndarray:
        owned: np.ndarray = self.slice_of(start) == self.index
        return owned


def event_slices(t: np.ndarray, window: Window, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The slices each event goes to: that of its latest window start (where it counts) and
    that of its earliest window (the same, but for sliding events near a block's edge)."""
    sl = WindowSlice.of(window, 0, count)
    latest = latest_start(t, window)
    return sl.slice_of(latest), sl.slice_of(np.minimum(earliest_start(t, window), latest))


def fact(counter: str, *about: Any) -> str:
    """A fact's counter name: what it is about, after :data:`FACT`."""
    return counter + FACT + repr(tuple(about))


def resolved(by_worker: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Counters per worker label with each distinct fact counted once into its counter."""
    out: dict[str, dict[str, int]] = {}
    for label, counters in by_worker.items():
        acc = out.setdefault(label, {})
        for name, v in counters.items():
            if FACT in name:
                base = name.split(FACT, 1)[0]
                acc[base] = acc.get(base, 0) + (1 if v else 0)
            else:
                acc[name] = acc.get(name, 0) + v
    return out


def key_token(worker: Any, key: Any) -> tuple[Any, Any]:
    """A (worker, key) as it reads in a fact: the same in every slice (one NaN)."""
    return hashable(worker), hashable(key)


# ----------------------------------------------------------------------- for tests and tools


def key_batch_rows(table: pa.Table, spec: Spec) -> pa.Table:
    """The key-batch rows of the events in ``table`` (as the engine sums them up in Spark):
    the worker and key columns, ``__kind`` and :data:`~windowing.kernel.inputs.KB_COLUMNS`."""
    table = with_event_columns(table, spec)
    events = table.filter(pc.equal(table[KIND_COLUMN], EVENT))
    keys = list(spec.id_cols)
    cand = "min" if spec.window.watermark_strategy is WatermarkStrategy.MIN_EVENT_TIME else "max"
    events = (
        events.select([*keys, BATCH_COLUMN])
        .append_column("__c", events[EVENT_MS_COLUMN])
        .append_column("__m", events[EVENT_MS_COLUMN])
        .append_column("__a", events[ARRIVAL_MS_COLUMN])
    )
    grouped = events.group_by([*keys, BATCH_COLUMN], use_threads=False).aggregate(
        [("__c", cand), ("__m", "max"), ("__a", "max")]
    )
    cols = {c: grouped[c] for c in keys}
    cols[KIND_COLUMN] = pa.array(np.full(grouped.num_rows, KEY_BATCH, np.int8))
    cols[KB_BATCH] = grouped[BATCH_COLUMN]
    cols[KB_CAND], cols[KB_MAXEV], cols[KB_MAXARR] = grouped[f"__c_{cand}"], grouped["__m_max"], grouped["__a_max"]
    return pa.table(cols)


def slice_table(table: pa.Table, kb_rows: pa.Table, spec: Spec, sl: WindowSlice) -> pa.Table:
    """The rows of slice ``sl`` of the keys in ``table`` (events and carried state rows):
    its events (:func:`event_slices`), every key row and key-batch row, and the carried
    windows and counters of its blocks."""
    table = with_event_columns(table, spec)
    kind = table[KIND_COLUMN].to_numpy()
    keep = np.zeros(table.num_rows, bool)
    ev = np.flatnonzero(kind == EVENT)
    counted, earliest = event_slices(table[EVENT_MS_COLUMN].to_numpy()[ev], spec.window, sl.count)
    keep[ev] = (counted == sl.index) | (earliest == sl.index)
    keep[kind == STATE_KEY] = True
    win = np.flatnonzero((kind == STATE_WINDOW) | (kind == STATE_EMITTED))
    if len(win):
        starts = pc.fill_null(state_column(table, "window_start_ms", win), 0).to_numpy().astype(np.int64)
        keep[win] = sl.owns(starts)
    return pa.concat_tables([table.filter(pa.array(keep)), kb_rows], promote_options="permissive")


def shed_shared(state: pa.Table, sl: WindowSlice) -> pa.Table:
    """A slice's state rows without the key rows but in the home slice."""
    if sl.home:
        return state
    return state.filter(pc.not_equal(state["state_kind"], KEY_KIND))
