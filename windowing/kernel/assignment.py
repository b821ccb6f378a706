"""Window assignment: which windows an event belongs to (a pure function of its time).

Tumbling windows are ``[N * span + offset, (N + 1) * span + offset)``: one per event.
Sliding windows are ``[N * slide + offset, N * slide + offset + span)``: every one of
them whose interval holds the event, ``ceil(span / slide)`` at most.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np

from windowing.config import Window, WindowType


class WindowAssignment(NamedTuple):
    """Every (event, window) pair: ``event[i]`` belongs to ``[start[i], end[i])``, sorted
    by (event, start)."""

    event: np.ndarray
    start: np.ndarray
    end: np.ndarray


def assign_windows(event_time_ms: np.ndarray, window: Window) -> WindowAssignment:
    """Every window each event time belongs to (``window`` tumbling or sliding).

    Tumbling: one window per event, ``[N * span + offset, (N + 1) * span + offset)`` with
    ``N = floor((t - offset) / span)``. Sliding: the windows ``[N * slide + offset,
    N * slide + offset + span)`` whose interval holds ``t``: from the latest start at or
    before ``t`` back, ``ceil(span / slide)`` candidates. Returns (event index, start,
    end) sorted by (event, start).
    """
    t = event_time_ms
    idx = np.arange(len(t), dtype=np.int64)
    # Tumbling and sliding windows have a span, sliding ones a slide (windowing.config).
    span = cast(int, window.span_ms)
    if window.type is WindowType.TUMBLING:
        start = np.floor_divide(t - window.offset_ms, span) * span + window.offset_ms
        return WindowAssignment(idx, start, start + span)
    slide = cast(int, window.slide_ms)
    latest = np.floor_divide(t - window.offset_ms, slide) * slide + window.offset_ms
    events, starts = [], []
    for back in range(-(-span // slide)):
        start = latest - back * slide
        holds = start + span > t
        events.append(idx[holds])
        starts.append(start[holds])
    event, start = np.concatenate(events), np.concatenate(starts)
    order = np.lexsort((start, event))
    return WindowAssignment(event[order], start[order], start[order] + span)
