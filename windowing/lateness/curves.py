"""The arithmetic of the late-count curve: slack, late counts under any delay, the
smallest delay for a target, weighted percentiles. Pure NumPy.

Why one D = 0 replay gives the late count under every delay D (an (event, window) pair is
late under D exactly when ``D <= slack``) is told in :mod:`windowing.lateness.whatif`.
"""

from __future__ import annotations

from typing import Iterable, Sequence, cast

import numpy as np

from windowing.config import Lateness, Window, WindowType


def pair_slack(
    window: Window, lateness: Lateness, watermark_ms: np.ndarray, event_ms: np.ndarray, window_end_ms: np.ndarray
) -> np.ndarray:
    """Slack of late (event, window) pairs of a D = 0 replay: the pair is late under delay D
    exactly when ``D <= slack`` (:mod:`windowing.lateness.whatif`). ``watermark_ms`` is the late row's
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
