"""Window assignment and lateness, pinned at their boundaries.

``windowing.kernel.assign_windows(t, window)`` gives, for every event time, every window the
event belongs to (docs/semantics.md section 4):

* tumbling, span S, offset O: ``[floor((t - O) / S) * S + O, ... + S)``;
* sliding, span S, slide L:   every ``[k * L + O, k * L + O + S)`` with ``start <= t < end``.

Start inclusive, end exclusive, aligned to the Unix epoch (plus the offset), negative
times floored (never truncated toward zero). Times are integer epoch milliseconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.kernel_harness import local_replay
from tests.support.reference_model import reference_replay
from windowing.config import WindowType, parse_pipeline
from windowing.kernel import assign_windows

S = 1_000
M = 60 * S
H = 60 * M
D = 24 * H


def _window(kind: str, **fields):
    return parse_pipeline(
        {
            "name": "assign",
            "source": {"arrivalTime": "arrival"},
            "emitter": {kind: {**fields, "aggregateDefinition": ["count"]}},
        }
    ).window


WINDOWS = {
    "tumbling 10s": _window("tumbling-time-window", windowSpan="10s"),
    "tumbling 1h": _window("tumbling-time-window", windowSpan="1h"),
    "tumbling 1d": _window("tumbling-time-window", windowSpan="1d"),
    "tumbling 1h +15m": _window("tumbling-time-window", windowSpan="1h", windowOffset="15m"),
    "sliding 1h/15m": _window("sliding-time-window", windowSpan="1h", windowSlide="15m"),
    "sliding 10s/5s": _window("sliding-time-window", windowSpan="10s", windowSlide="5s"),
    "sliding 10s/3s": _window("sliding-time-window", windowSpan="10s", windowSlide="3s"),
    "sliding 10s/5s +2s": _window("sliding-time-window", windowSpan="10s", windowSlide="5s", windowOffset="2s"),
    "sliding 10s/10s": _window("sliding-time-window", windowSpan="10s", windowSlide="10s"),
}

T0 = 1_700_000_123_456  # 2023-11-14T22:15:23.456Z: a realistic epoch time
T0_HOUR = 1_699_999_200_000  # 2023-11-14T22:00:00Z
T0_DAY = 1_699_920_000_000  # 2023-11-14T00:00:00Z


# Sliding 10s / 3s: starts are multiples of 3 s; S is not a multiple of L, so an event
# is in ceil(10/3) = 4 windows, or 3:
#
#   t(s)     -9  -6  -3   0   1   2   3
#             |   |   |   |   |   |   |
#   [-9, 1)   [===================)             holds 0, not 1 (end exclusive)
#   [-6, 4)       [===================)         holds 0 .. 3
#   [-3, 7)           [===================)
#   [ 0,10)               [===================)
#   [ 3,13)                           [=======  holds 3 (start inclusive)
#
#   t = 0 -> 4 windows, t = 1 or 2 -> 3 windows, t = 3 -> 4 windows again.

CASES = [
    # window,             t,            expected windows [start, end) in ms
    ("tumbling 10s", 0, [(0, 10 * S)]),  # epoch aligned: t = 0 opens [0, 10s)
    ("tumbling 10s", 9_999, [(0, 10 * S)]),  # last ms before the end is inside
    ("tumbling 10s", 10_000, [(10 * S, 20 * S)]),  # end exclusive: t == end is the next window
    ("tumbling 10s", 10_001, [(10 * S, 20 * S)]),  # start inclusive, just past the boundary
    ("tumbling 10s", -1, [(-10 * S, 0)]),  # negative time floors down, not toward zero
    ("tumbling 10s", -9_999, [(-10 * S, 0)]),  # still the window before the epoch
    ("tumbling 10s", -10_000, [(-10 * S, 0)]),  # negative boundary: start inclusive
    ("tumbling 10s", -10_001, [(-20 * S, -10 * S)]),  # one ms earlier: the window before
    ("tumbling 1h", T0, [(T0_HOUR, T0_HOUR + H)]),  # epoch-aligned UTC hours
    ("tumbling 1d", T0, [(T0_DAY, T0_DAY + D)]),  # days start at UTC midnight
    ("tumbling 1h +15m", 15 * M, [(15 * M, 75 * M)]),  # offset: windows start at :15
    ("tumbling 1h +15m", 15 * M - 1, [(-45 * M, 15 * M)]),  # just before the offset boundary
    ("tumbling 1h +15m", 0, [(-45 * M, 15 * M)]),  # epoch itself is inside [-45m, 15m)
    ("tumbling 1h +15m", T0, [(T0_HOUR + 15 * M, T0_HOUR + 75 * M)]),  # 22:15:23 -> [22:15, 23:15)
    ("sliding 1h/15m", 0, [(-45 * M, 15 * M), (-30 * M, 30 * M), (-15 * M, 45 * M), (0, H)]),  # S/L = 4 windows
    (
        "sliding 1h/15m",
        15 * M - 1,
        [(-45 * M, 15 * M), (-30 * M, 30 * M), (-15 * M, 45 * M), (0, H)],
    ),  # last ms of [-45m, 15m)
    (
        "sliding 1h/15m",
        15 * M,
        [(-30 * M, 30 * M), (-15 * M, 45 * M), (0, H), (15 * M, 75 * M)],
    ),  # end exclusive, new start inclusive
    (
        "sliding 1h/15m",
        T0,
        [(T0_HOUR + (k - 2) * 15 * M, T0_HOUR + (k - 2) * 15 * M + H) for k in range(4)],
    ),  # 22:15:23 -> starts 21:30 .. 22:15
    ("sliding 10s/5s", -1, [(-10 * S, 0), (-5 * S, 5 * S)]),  # negative time: floored to the slide
    ("sliding 10s/5s", 4_999, [(-5 * S, 5 * S), (0, 10 * S)]),  # overlap: two windows
    ("sliding 10s/5s", 5_000, [(0, 10 * S), (5 * S, 15 * S)]),  # [-5s, 5s) ends exactly here: excluded
    ("sliding 10s/3s", 0, [(-9 * S, S), (-6 * S, 4 * S), (-3 * S, 7 * S), (0, 10 * S)]),  # ceil(10/3) = 4 windows
    ("sliding 10s/3s", 1_000, [(-6 * S, 4 * S), (-3 * S, 7 * S), (0, 10 * S)]),  # [-9s, 1s) ended: only 3
    ("sliding 10s/3s", 2_999, [(-6 * S, 4 * S), (-3 * S, 7 * S), (0, 10 * S)]),  # still 3
    (
        "sliding 10s/3s",
        3_000,
        [(-6 * S, 4 * S), (-3 * S, 7 * S), (0, 10 * S), (3 * S, 13 * S)],
    ),  # [3s, 13s) opens: 4 again
    ("sliding 10s/5s +2s", 2_000, [(-3 * S, 7 * S), (2 * S, 12 * S)]),  # offset: starts at 5k + 2 s
    ("sliding 10s/5s +2s", 1_999, [(-8 * S, 2 * S), (-3 * S, 7 * S)]),  # just before an offset start
    ("sliding 10s/10s", 9_999, [(0, 10 * S)]),  # slide == span: one window, like tumbling
    ("sliding 10s/10s", 10_000, [(10 * S, 20 * S)]),  # slide == span: end exclusive
    ("sliding 10s/10s", -1, [(-10 * S, 0)]),  # slide == span: negative floors
]


def _windows_of(window, times) -> list[list[tuple[int, int]]]:
    """Per event, its windows as (start, end) in the order assign_windows returns them."""
    idx, ws, we = assign_windows(np.asarray(times, dtype=np.int64), window)
    out: list[list[tuple[int, int]]] = [[] for _ in times]
    for i, s, e in zip(idx.tolist(), ws.tolist(), we.tolist()):
        out[i].append((s, e))
    return out


@pytest.mark.parametrize(("name", "t", "expected"), CASES, ids=[f"{c[0]} t={c[1]}" for c in CASES])
def test_assign_boundaries(name, t, expected):
    assert _windows_of(WINDOWS[name], [t]) == [expected]


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES}))
def test_assign_many_events_at_once(name):
    """One call over many events gives each event its own windows, in (event, start) order."""
    rows = [c for c in CASES if c[0] == name]
    times = [t for _, t, _ in rows][::-1]  # not sorted by time: the index must follow the input
    expected = [exp for _, _, exp in rows][::-1]
    assert _windows_of(WINDOWS[name], times) == expected
    idx, ws, _ = assign_windows(np.asarray(times, dtype=np.int64), WINDOWS[name])
    assert idx.dtype == np.int64 and ws.dtype == np.int64
    assert list(zip(idx.tolist(), ws.tolist())) == sorted(zip(idx.tolist(), ws.tolist()))


def test_assign_no_events():
    for w in WINDOWS.values():
        idx, ws, we = assign_windows(np.zeros(0, dtype=np.int64), w)
        assert len(idx) == len(ws) == len(we) == 0


def _brute_force(t: int, span: int, slide: int, offset: int) -> list[tuple[int, int]]:
    """Every [s, s + span) with s = k * slide + offset and s <= t < s + span, by plain search."""
    k = (t - offset) // slide
    out = []
    while k * slide + offset + span > t:
        out.append((k * slide + offset, k * slide + offset + span))
        k -= 1
    return sorted(out)


@pytest.mark.parametrize(
    ("span", "slide", "offset"),
    [
        (10 * S, 5 * S, 0),  # S a multiple of L: always S/L windows
        (10 * S, 3 * S, 0),  # not a multiple: ceil(S/L) or floor(S/L)
        (H, 15 * M, 0),  # the production shape
        (H, 7 * M, 2 * M),  # awkward slide and an offset
        (7 * S, 7 * S, 3 * S),  # slide == span with an offset: tumbling
        (1_000, 1, 0),  # 1000 windows per event
    ],
)
def test_sliding_matches_brute_force(span, slide, offset):
    w = _window("sliding-time-window", windowSpan=f"{span}ms", windowSlide=f"{slide}ms", windowOffset=f"{offset}ms")
    rng = np.random.default_rng(span + slide + offset)
    times = np.concatenate(
        [
            rng.integers(-3 * span, 3 * span, size=150),  # around the epoch, negatives included
            rng.integers(T0 - 3 * span, T0 + 3 * span, size=50),  # realistic epoch times
            np.arange(-2 * slide, 2 * slide + 1, max(1, slide // 4)) + offset,  # on and around starts
        ]
    ).astype(np.int64)
    got = _windows_of(w, times.tolist())
    counts = set()
    for t, windows in zip(times.tolist(), got):
        assert windows == _brute_force(t, span, slide, offset), t
        counts.add(len(windows))
    ceil = -(-span // slide)
    if span % slide == 0:
        assert counts == {ceil}
    else:
        assert counts == {ceil - 1, ceil}  # fewer windows when S is not a multiple of L


def test_slide_equal_to_span_is_tumbling():
    sliding = _window("sliding-time-window", windowSpan="10s", windowSlide="10s", windowOffset="3s")
    tumbling = _window("tumbling-time-window", windowSpan="10s", windowOffset="3s")
    assert sliding.type is WindowType.SLIDING and tumbling.type is WindowType.TUMBLING
    times = np.concatenate([np.arange(-25_003, 25_004, 997), [-7_001, -7_000, -6_999, 2_999, 3_000, 13_000]])
    got_s = assign_windows(times.astype(np.int64), sliding)
    got_t = assign_windows(times.astype(np.int64), tumbling)
    for a, b in zip(got_s, got_t):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------- lateness at the boundary
#
# Batch 1 sets the key's watermark; batch 2 holds one probe event, checked against the
# effective watermark (watermark - delayWindowClose) of batch 1's commit. Tumbling 10 s:
#
#   event time (s)   0         5         10        15        20
#                    [--------- w0 ------)[--------- w1 ------)
#   WINDOW_CLOSED, watermark 10 s:        ^ wm
#     probe 9.999 s -> w0 ended at 10 s <= wm: w0 is closed, the probe is late for it
#     probe 10 s    -> w1 is open: accepted, although t == wm
#   BEFORE_WATERMARK, watermark 5 s:  ^ wm
#     probe 4.999 s -> t < wm: late, although w0 is still open
#     probe 5 s     -> t == wm: not late

LATENESS_CASES = [
    # lateness,          span/slide,  delay,  batch 1 (s),  probe (ms),  late for [(start, end, watermark)],    accepted into
    (
        "WINDOW_CLOSED",
        "10s",
        "0s",
        [10],
        9_999,
        [(0, 10 * S, 10 * S)],
        [],
    ),  # window end == effective watermark: closed, late
    (
        "WINDOW_CLOSED",
        "10s",
        "0s",
        [10],
        10_000,
        [],
        [(10 * S, 20 * S)],
    ),  # event exactly at the watermark: its window is open
    ("WINDOW_CLOSED", "10s", "0s", [9.999], 0, [], [(0, 10 * S)]),  # wm one ms short of the end: still open
    ("WINDOW_CLOSED", "10s", "2s", [12], 9_999, [(0, 10 * S, 10 * S)], []),  # effective wm = 12 s - 2 s = end: closed
    ("WINDOW_CLOSED", "10s", "2s", [11.999], 9_999, [], [(0, 10 * S)]),  # effective wm 9.999 s < end: open
    (
        "WINDOW_CLOSED",
        "10s",
        "0s",
        [40, 12],
        9_999,
        [(0, 10 * S, 12 * S)],
        [],
    ),  # MIN_EVENT_TIME: the batch's smallest time is the wm
    (
        "WINDOW_CLOSED",
        "10s/5s",
        "0s",
        [10],
        7_000,
        [(0, 10 * S, 10 * S)],
        [(5 * S, 15 * S)],
    ),  # sliding: late for one window, accepted by the other
    ("BEFORE_WATERMARK", "10s", "0s", [5], 5_000, [], [(0, 10 * S)]),  # t == watermark is not late
    (
        "BEFORE_WATERMARK",
        "10s",
        "0s",
        [5],
        4_999,
        [(0, 10 * S, 5 * S)],
        [],
    ),  # t < watermark: late, though the window is open
    ("BEFORE_WATERMARK", "10s", "2s", [7], 5_000, [], [(0, 10 * S)]),  # t == effective wm (7 s - 2 s): not late
    ("BEFORE_WATERMARK", "10s", "2s", [7], 4_999, [(0, 10 * S, 5 * S)], []),  # t < effective wm: late
    (
        "BEFORE_WATERMARK",
        "10s/5s",
        "0s",
        [5],
        4_999,
        [(-5 * S, 5 * S, 5 * S), (0, 10 * S, 5 * S)],
        [],
    ),  # late for all its windows
]


def _lateness_pipeline(lateness: str, shape: str, delay: str):
    span, _, slide = shape.partition("/")
    window = {"windowSpan": span, **({"windowSlide": slide} if slide else {})}
    return parse_pipeline(
        {
            "name": "lateness",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
            "emitter": {
                ("sliding-time-window" if slide else "tumbling-time-window"): {
                    **window,
                    "timeConfig": {"eventTimeExtractor": "event_time", "lateness": lateness, "delayWindowClose": delay},
                    "aggregateDefinition": [{"type": "count"}, {"type": "last", "column": "name"}],
                }
            },
        }
    )


def _lateness_rows(batch1_s, probe_ms):
    rows = [
        {"name": f"b1-{i}", "event_time": round(t * S), "batch": 1, "arrival": 100 * S + i, "offset": i}
        for i, t in enumerate(batch1_s)
    ]
    rows.append({"name": "probe", "event_time": probe_ms, "batch": 2, "arrival": 200 * S, "offset": 99})
    return rows


def _run_reference(pipeline, rows):
    res = reference_replay(pipeline, rows, flush_at_end=True)
    return res.aggregates, res.late_events


def _run_kernel(pipeline, rows):
    aggs, late, _, _ = local_replay(pipeline, rows[::-1], flush_at_end=True)
    return aggs, late


@pytest.mark.parametrize("executor", [_run_reference, _run_kernel], ids=["reference", "kernel"])
@pytest.mark.parametrize(
    ("lateness", "shape", "delay", "batch1_s", "probe_ms", "late", "accepted"),
    LATENESS_CASES,
    ids=[f"{c[0]}-{c[1]}-delay{c[2]}-wm{c[3]}-probe{c[4]}" for c in LATENESS_CASES],
)
def test_lateness_boundary(executor, lateness, shape, delay, batch1_s, probe_ms, late, accepted):
    pipeline = _lateness_pipeline(lateness, shape, delay)
    aggs, late_rows = executor(pipeline, _lateness_rows(batch1_s, probe_ms))
    assert sorted(
        (r["name"], r["window_start"], r["window_end"], r["watermark"], r["lateness_ms"]) for r in late_rows
    ) == sorted(("probe", s, e, wm, wm - probe_ms) for s, e, wm in late)
    # The probe arrives after every batch-1 event, so it is `last` in each window it entered.
    assert sorted((r["window_start"], r["window_end"]) for r in aggs if r["last_name"] == "probe") == accepted
    # Nothing is dropped: every batch-1 event is in an emitted window, the probe in one or late.
    assert sum(r["count"] for r in aggs) == (
        sum(len(assign_windows(np.array([round(t * S)], np.int64), pipeline.window)[0]) for t in batch1_s)
        + len(accepted)
    )
