"""The lateness curves against real replays (the reference model), without Spark.

Every late count the analysis reports for a delay D, whether from the slack of each event
(any D) or from its replay at a listed D, must equal what a replay of the same history
with ``delayWindowClose: D`` reports; so must the closes per reason and the emission
latencies at the listed delays. Checked on generated cases (every window type, both
strategies, both lateness modes, idle timeouts on both clocks, heartbeats, workers, keys,
batches), in one go and in pieces with the analysis' own state carried between them, and
on the contract's worked examples.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.support.generators import cases, histories, pipelines, split_points
from tests.support.lateness_harness import local_lateness, model_figures
from tests.support.reference_model import reference_replay
from windowing.config import Lateness, Trigger, WatermarkStrategy, parse_pipeline
from windowing.lateness.curves import smallest_delay, weighted_percentiles
from windowing.lateness.options import LatenessOptions
from windowing.lateness.variants import perfect_pipeline

S = 1000
#: Delays the analysis replays; the curve is probed at these and between them.
LISTED = (0, 1_000, 3_000)
#: Delays where the curve is checked against a replay: on, next to and between the listed
#: ones and the generated times (whole seconds, 300 ms steps).
PROBES = (0, 1, 299, 300, 999, 1_000, 1_001, 2_000, 2_700, 3_000, 3_001, 4_500, 7_000, 12_000, 40_000)


def _named(rows):
    """Each row with a distinct ``name`` (late events are counted by it)."""
    return [{**r, "name": f"e{i}"} for i, r in enumerate(rows)]


def _as(pipeline, strategy, lateness, delay_ms):
    """``pipeline`` replayed under another strategy, lateness mode and delay, emitting its
    closes (the triggers decide what is written, never what closes)."""
    w = replace(pipeline.window, watermark_strategy=strategy, lateness=lateness, delay_ms=delay_ms)
    return replace(pipeline, window=w, triggers=(Trigger.AT_WINDOW_END,))


def _model(p, pieces, flush):
    """The model's replay of the last of ``pieces``, continuing from its replay of the others."""
    state = None
    for piece in pieces[:-1]:
        state = reference_replay(p, piece, state=state).state
    return reference_replay(p, pieces[-1], state=state, flush_at_end=flush)


def _check(pipeline, pieces, result, flush=False):
    """Compare ``result`` (the analysis of the last of ``pieces``, continuing from the
    others) with model replays at every probe delay."""
    for lateness in Lateness:
        for strategy in WatermarkStrategy:
            slack = result.slack.get((strategy.value, lateness.value), (np.zeros(0, np.int64),))[0]
            # Where the curve steps (slack s: late at s, not at s + 1), and fixed probes.
            probes = sorted(set(PROBES) | {int(x) + e for x in slack if x >= 0 for e in (0, 1)})
            curve = result.late_counts(strategy, lateness, probes)
            for d, (late_ev, late_pairs) in zip(probes, curve):
                p = _as(pipeline, strategy, lateness, d)
                fig = model_figures(_model(p, pieces, flush), p)
                assert (late_ev, late_pairs) == (fig["late_events"], fig["late_pairs"]), (strategy, lateness, d)
                if late_ev:
                    event("late events")
                if d not in LISTED:
                    continue
                v = _variant(result, strategy, lateness, d)
                c = result.counters.get(v.label, {})
                assert (c.get("late_events", 0), c.get("late", 0)) == (late_ev, late_pairs)
                assert {r: c.get("closed_" + r, 0) for r in fig["closes"]} == fig["closes"], (v.label,)
                values, weights = result.latency.get(v.label, ([], []))
                assert sorted(np.repeat(values, weights).tolist()) == fig["latencies"], v.label
                if fig["closes"]["IDLE"]:
                    event("IDLE closes")


def _variant(result, strategy, lateness, d):
    return next(
        v
        for v in result.variants
        if (v.strategy, v.lateness, v.delay_ms) == (strategy, lateness, d) and not v.skew_free
    )


OPTIONS = LatenessOptions(delays_ms=LISTED, lateness_modes=tuple(Lateness), future_skew_ms=None)


@cases(40)
@given(pipelines(event_time=True), histories(max_events=25), st.booleans())
def test_curves_equal_replays(pipeline, rows, flush):
    rows = _named(rows)
    event(pipeline.window.type.value)
    result = local_lateness(pipeline, rows, OPTIONS, flush_at_end=flush)
    _check(pipeline, [rows], result, flush=flush)


@cases(15)
@given(pipelines(windows=("session-window",), event_time=True), histories(max_events=25, bridges=5))
def test_session_curves_equal_replays(pipeline, rows):
    """Sessions: lateness does not depend on merges (``t + gap <= watermark - D``), but the
    sessions, their closes and latencies do: the replays at the listed delays give those."""
    rows = _named(rows)
    _check(pipeline, [rows], local_lateness(pipeline, rows, OPTIONS))


@cases(15)
@given(pipelines(windows=("sliding-time-window",), event_time=True), histories(max_events=25))
def test_sliding_curves_equal_replays(pipeline, rows):
    """Sliding windows: an event late for some of its windows counts once as a late event,
    once per window as a late pair; its slack is that of its earliest-ending window."""
    rows = _named(rows)
    _check(pipeline, [rows], local_lateness(pipeline, rows, OPTIONS))


@cases(15)
@given(pipelines(event_time=True), histories(max_events=30), st.lists(st.floats(0.1, 0.9), min_size=1, max_size=2))
def test_curves_in_pieces_equal_replays_in_pieces(pipeline, rows, cuts):
    """Partitions: each piece continues from the analysis' own state (every variant's), and
    its figures equal the model's replay of that piece continuing from the model's state."""
    rows = _named(rows)
    pieces = split_points(pipeline, rows, cuts)
    state = None
    for i, piece in enumerate(pieces):
        result = local_lateness(pipeline, piece, OPTIONS, state=state)
        _check(pipeline, pieces[: i + 1], result)
        state = result.state


@cases(10)
@given(pipelines(event_time=True), histories(max_events=30), st.floats(0.2, 0.8))
def test_key_rows_are_carried_once_per_group_and_old_states_still_continue(pipeline, rows, cut):
    """A key's watermark, greatest event time and clock do not depend on the delay: the
    state holds its key rows once per (strategy, lateness mode, skew-free) group. A state
    written with key rows under every variant (before they were shared) continues the
    same way."""
    rows = _named(rows)
    pieces = split_points(pipeline, rows, [cut])
    first, second = pieces[0], [r for piece in pieces[1:] for r in piece]
    state = local_lateness(pipeline, first, OPTIONS).state
    keys = state.rows.filter(pa.array([k == "key" for k in state.rows["state_kind"].to_pylist()], pa.bool_()))
    owners = {v.label: v.label for v in OPTIONS.variants(pipeline)}
    for v in OPTIONS.variants(pipeline):  # every variant's group has its owner's key rows, no one else's
        owners[v.label] = next(
            o.label
            for o in OPTIONS.variants(pipeline)
            if (o.strategy, o.lateness, o.skew_free) == (v.strategy, v.lateness, v.skew_free)
        )
    assert set(keys["variant"].to_pylist()) <= set(owners.values())
    labels = keys["variant"].to_pylist()
    old_rows = pa.concat_tables(
        [state.rows]
        + [
            keys.filter(pa.array([x == owner for x in labels], pa.bool_())).set_column(
                keys.column_names.index("variant"), "variant", pa.array([label] * labels.count(owner), pa.string())
            )
            for label, owner in owners.items()
            if label != owner
        ]
    )
    shared = local_lateness(pipeline, second, OPTIONS, state=state)
    old = local_lateness(pipeline, second, OPTIONS, state=replace(state, rows=old_rows))
    assert old.counters == shared.counters and old.latency == shared.latency
    assert sorted(map(repr, old.tables["state"].to_pylist())) == sorted(map(repr, shared.tables["state"].to_pylist()))
    _check(pipeline, [first, second], shared)


# --------------------------------------------------------------------------- worked examples

#: The contract's inputs A and B (section 9): (name, event time s, arrival batch).
INPUT_A = [("e1", 2, 1), ("e2", 5, 1), ("e4", 12, 2), ("e3", 8, 3), ("e5", 25, 4)]
INPUT_B = [("e1", 2, 1), ("e2", 5, 1), ("e4", 12, 2), ("e6", 9, 2), ("e3", 8, 3), ("e5", 25, 4)]


def _example(events, **time_config):
    rows = [
        {"name": n, "event_time": t * S, "batch": b, "arrival": b * 100 * S + i, "offset": i}
        for i, (n, t, b) in enumerate(events)
    ]
    pipeline = parse_pipeline(
        {
            "name": "example",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "timeConfig": {"eventTimeExtractor": "event_time", **time_config},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    return pipeline, rows


WHOLE_SECONDS = (0, 1_000, 2_000, 3_000, 4_000, 5_000)


@pytest.mark.parametrize(
    "events, strategy, late_until_ms, case",
    [
        # B, MAX (case 3): after b2 the watermark is 12 s (e4); e3 (8 s) misses [0, 10) while
        # 10 <= 12 - D: late up to D = 2 s, kept from 2.001 s, so of whole seconds D >= 3 s
        # (case 5: delay 3 s keeps it), the seed's "needs delay >= 3s".
        (INPUT_B, WatermarkStrategy.MAX_EVENT_TIME, 2_000, "case 3 and 5"),
        # B, MIN (case 4): the watermark after b2 is 9 s (e6): e3 is never late.
        (INPUT_B, WatermarkStrategy.MIN_EVENT_TIME, None, "case 4"),
        # A, MIN (cases 1 and 2): e4 alone in b2 takes the watermark to 12 s: as case 3; delay 5 s keeps it.
        (INPUT_A, WatermarkStrategy.MIN_EVENT_TIME, 2_000, "cases 1 and 2"),
    ],
)
def test_worked_examples(events, strategy, late_until_ms, case):
    pipeline, rows = _example(events, watermarkStrategy=strategy.value)
    result = local_lateness(
        pipeline, rows, LatenessOptions(delays_ms=WHOLE_SECONDS, target_late=0.0, future_skew_ms=None)
    )
    curve = result.late_counts(strategy, Lateness.WINDOW_CLOSED, [0, 2_000, 2_001, 3_000, 5_000])
    expect = [int(late_until_ms is not None and d <= late_until_ms) for d in (0, 2_000, 2_001, 3_000, 5_000)]
    assert [c[0] for c in curve] == expect, case
    hv, he, _ = result.slack.get((strategy.value, "WINDOW_CLOSED"), (np.zeros(0, np.int64),) * 3)
    smallest = smallest_delay(hv, he, 0)
    assert smallest == (0 if late_until_ms is None else late_until_ms + 1)
    listed = min(d for d in WHOLE_SECONDS if d >= smallest)
    assert listed == (0 if late_until_ms is None else 3_000)
    for d in WHOLE_SECONDS:  # the replays at the listed delays say the same
        v = _variant(result, strategy, Lateness.WINDOW_CLOSED, d)
        assert result.counters.get(v.label, {}).get("late_events", 0) == int(
            late_until_ms is not None and d <= late_until_ms
        )


def test_before_watermark_example():
    """BEFORE_WATERMARK, MAX (contract section 9): batch 1 = 2, 4, 9 s; batch 2 = 5, 8, 15 s:
    5 s and 8 s are late against 9 s; 8 s stays late while 8 < 9 - D (D < 1 s), 5 s while D < 4 s."""
    rows = [
        {"name": f"e{t}", "event_time": t * S, "batch": b, "arrival": b * 100 * S + i, "offset": i}
        for i, (t, b) in enumerate([(2, 1), (4, 1), (9, 1), (5, 2), (8, 2), (15, 2)])
    ]
    pipeline = parse_pipeline(
        {
            "name": "progression",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "timeConfig": {
                        "eventTimeExtractor": "event_time",
                        "watermarkStrategy": "MAX_EVENT_TIME",
                        "lateness": "BEFORE_WATERMARK",
                    },
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    result = local_lateness(pipeline, rows, LatenessOptions(delays_ms=(0,), future_skew_ms=None))
    counts = result.late_counts(
        WatermarkStrategy.MAX_EVENT_TIME, Lateness.BEFORE_WATERMARK, [0, 999, 1_000, 3_999, 4_000]
    )
    assert [c[0] for c in counts] == [2, 2, 1, 1, 0]


@pytest.mark.parametrize(
    "values, events, allowed, expect",
    [
        ([], [], 0, 0),  # nothing late at D = 0
        ([0], [1], 0, 1),  # late at D = 0 only: 1 ms is enough
        ([0], [1], 1, 0),  # one late event allowed
        ([5, 2, 9], [1, 3, 1], 1, 6),  # one allowed: from 6 ms only the event of slack 9 is late
        ([5, 2, 9], [1, 3, 1], 2, 3),  # two allowed: from 3 ms the three of slack 2 are not late
        ([5, 2, 9], [1, 3, 1], 5, 0),  # all five allowed
    ],
)
def test_smallest_delay(values, events, allowed, expect):
    assert smallest_delay(np.array(values, np.int64), np.array(events, np.int64), allowed) == expect


def test_weighted_percentiles_interpolate_as_numpy():
    values, weights = np.array([3, 1, 10, 7]), np.array([2, 1, 3, 1])
    flat = np.repeat(values, weights)
    assert weighted_percentiles(values, weights) == pytest.approx(
        np.percentile(flat, [50, 90, 99]).tolist(), abs=0, rel=1e-15
    )


# --------------------------------------------------------------------------- what lateness cost


def _ms(v):
    from tests.support.engine_harness import to_ms

    return None if v is None else to_ms(v)


def _window_key(pipeline, r):
    return tuple(r.get(c) for c in pipeline.id_columns) + (
        _ms(r["window_start"]) if not isinstance(r["window_start"], int) else r["window_start"],
        _ms(r["window_end"]) if not isinstance(r["window_end"], int) else r["window_end"],
    )


@cases(30)
@given(pipelines(windows=("tumbling-time-window", "sliding-time-window"), event_time=True), histories(max_events=25))
def test_cost_rows_against_the_model(pipeline, rows):
    """Per window that missed events: the missed count, the window's emissions and the values
    of its last one are the model's; the perfect value is the model's replay with nothing
    late and no idle flush, and its count is the emitted counts plus the missed events."""
    rows = _named(rows)
    configured = replace(pipeline, triggers=(Trigger.AT_WINDOW_END,))
    ref = reference_replay(configured, rows)
    perfect = reference_replay(perfect_pipeline(pipeline), rows, flush_at_end=True)
    result = local_lateness(pipeline, rows, LatenessOptions(delays_ms=(0,), future_skew_ms=None))
    cost = result.tables["cost"].to_pylist()
    late_by = {}
    for r in ref.late_events:
        late_by.setdefault(_window_key(pipeline, r), []).append(r)
    assert sorted(_window_key(pipeline, r) for r in cost) == sorted(late_by)
    emitted = {}
    for r in ref.aggregates:
        emitted.setdefault(_window_key(pipeline, r), []).append(r)
    best = {_window_key(pipeline, r): r for r in perfect.aggregates}
    for row in cost:
        k = _window_key(pipeline, row)
        assert row["missed_events"] == len(late_by[k])
        ems = sorted(emitted.get(k, []), key=lambda r: r["emission"])
        assert row["emissions"] == len(ems)
        for a in pipeline.aggregates:
            assert row[f"emitted_{a.name}"] == (ems[-1][a.name] if ems else None), a.name
            assert row[f"perfect_{a.name}"] == (best[k][a.name] if ems else None), a.name
            if ems and a.type == "count" and a.column is None:
                assert row[f"perfect_{a.name}"] == sum(e[a.name] for e in ems) + row["missed_events"]
        event(
            "a window emitted more than once"
            if len(ems) > 1
            else "a window emitted once"
            if ems
            else "a window never emitted in this replay"
        )


# --------------------------------------------------------------------------- future skew


@cases(60)
@given(pipelines(event_time=True, future_skew=True), histories(max_events=25))
def test_max_future_skew_kernel_matches_model(pipeline, rows):
    """``source.maxFutureSkew``: events too far ahead are rejected (FUTURE_SKEW) before they
    move a watermark, in the kernel's runner as in the model, and every row is accounted
    for: rejected, or in a window (emitted or open) or late for each of its windows."""
    from tests.support.engine_harness import canon
    from tests.support.kernel_harness import local_replay

    ref = reference_replay(pipeline, rows, flush_at_end=True)
    aggs, late, rejected, _ = local_replay(pipeline, rows, flush_at_end=True)
    assert canon(rejected) == canon(ref.rejected)
    assert canon(late) == canon(ref.late_events)
    assert canon(aggs) == canon(ref.aggregates)
    skew = pipeline.source.max_future_skew_ms
    expect = [
        r
        for r in rows
        if r["arrival"] is not None and r["event_time"] is not None and r["event_time"] - r["arrival"] > skew
    ]
    assert len([r for r in rejected if r["reason"] == "FUTURE_SKEW"]) == len(expect)
    if expect:
        event("FUTURE_SKEW rows")
    # Conservation (tumbling windows and sessions: one window per accepted event).
    if (
        pipeline.window.type.value != "sliding-time-window"
        and Trigger.AT_WINDOW_END in pipeline.triggers
        and any(a.type == "count" and a.column is None for a in pipeline.aggregates)
    ):
        counted = sum(r["count"] for r in ref.aggregates if r["emit_reason"] != "AGGREGATE")
        assert len(rows) == len(ref.rejected) + counted + len(ref.late_events)


def _skew_case():
    """One key, MIN watermark, 1 s batches. At 10 s a clock 5 min ahead stamps an event 310 s
    (alone in its batch: it sets the watermark to 310 s); the events after it, on time, are
    late for their 10 s windows. ``e_after_*`` are caused by it; ``late_anyway`` is 60 s late
    against the 12 s watermark the on-time events set, skew or not."""
    S_ = S
    rows = [
        {"name": "e1", "arrival": 5 * S_, "event_time": 5 * S_},
        {"name": "e2", "arrival": 8 * S_, "event_time": 8 * S_},
        {"name": "skewed", "arrival": 10 * S_, "event_time": 310 * S_},
        {"name": "e_after_1", "arrival": 12 * S_, "event_time": 12 * S_},
        {"name": "late_anyway", "arrival": 13 * S_, "event_time": 1 * S_},
        {"name": "e_after_2", "arrival": 14 * S_, "event_time": 13 * S_},
        {"name": "e_after_3", "arrival": 21 * S_, "event_time": 20 * S_},
    ]
    pipeline = parse_pipeline(
        {
            "name": "skew",
            "source": {"arrivalTime": "arrival", "batch": {"interval": "1s"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "timeConfig": {"eventTimeExtractor": "event_time"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    return pipeline, rows


def test_future_skew_listing_is_what_max_future_skew_removes():
    pipeline, rows = _skew_case()
    result = local_lateness(pipeline, rows, LatenessOptions(delays_ms=(0,), future_skew_ms=60_000))
    caused = result.tables["skew_late"].to_pylist()
    # The replay with maxFutureSkew at the threshold: the skewed event rejected, nothing else late but one.
    fixed = reference_replay(
        parse_pipeline(
            {
                **_doc_of(pipeline),
                "source": {"arrivalTime": "arrival", "batch": {"interval": "1s"}, "maxFutureSkew": "60s"},
            }
        ),
        rows,
    )
    live = reference_replay(pipeline, rows)
    assert [r["name"] for r in fixed.rejected] == ["skewed"] and fixed.rejected[0]["reason"] == "FUTURE_SKEW"
    assert {r["name"] for r in fixed.late_events} == {"late_anyway"}
    late_live = {r["name"] for r in live.late_events}
    assert late_live == {"e_after_1", "late_anyway", "e_after_2", "e_after_3"}
    by_time = {r["event_time"]: r["name"] for r in rows}
    assert sorted(by_time[r["event_ms"]] for r in caused) == ["e_after_1", "e_after_2", "e_after_3"]
    assert all(r["raw_watermark_ms"] == 310 * S for r in caused)  # the skewed event's time
    free = next(v for v in result.variants if v.skew_free)
    assert result.counters[free.label]["late_events"] == len(fixed.late_events)


def _doc_of(pipeline):
    return {
        "name": pipeline.name,
        "emitter": {
            "tumbling-time-window": {
                "windowSpan": "10s",
                "timeConfig": {"eventTimeExtractor": "event_time"},
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    }


# --------------------------------------------------------------------------- options, configuration, report


def test_options_and_configuration_errors_name_the_field(tmp_path, capsys):
    from windowing.cli import main
    from windowing.config import ConfigError
    from windowing.lateness.options import parse_delays, parse_modes

    assert parse_delays("2m, 0s,5s,5s") == (0, 5_000, 120_000)
    assert parse_modes("both") == tuple(Lateness) and parse_modes("configured") is None
    for bad, field in (
        ("--delays", "--delays"),
        ("--target-late", "--target-late"),
        ("--lateness-modes", "--lateness-modes"),
        ("--future-skew", "--future-skew"),
    ):
        config = tmp_path / "p.yaml"
        config.write_text(_PIPELINE_YAML)
        rc = main(
            [
                "lateness",
                "--config",
                str(config),
                "--input",
                str(tmp_path),
                "--output",
                str(tmp_path / "o"),
                bad,
                "soon",
            ]
        )
        assert rc == 2 and field in capsys.readouterr().err, bad
    with pytest.raises(ConfigError, match="source.maxFutureSkew.*eventTimeExtractor"):
        parse_pipeline(
            {
                "name": "p",
                "source": {"arrivalTime": "arrival", "maxFutureSkew": "1m"},
                "emitter": {"tumbling-time-window": {"windowSpan": "10s", "aggregateDefinition": [{"type": "count"}]}},
            }
        )
    with pytest.raises(ConfigError, match="source.maxFutureSkew"):
        _skew_pipeline("later")


_PIPELINE_YAML = """\
name: p
source: {arrivalTime: arrival}
emitter:
  tumbling-time-window:
    windowSpan: 10s
    timeConfig: {eventTimeExtractor: event_time}
    aggregateDefinition: [{type: count}]
"""


def _skew_pipeline(skew=None):
    return parse_pipeline(
        {
            "name": "p",
            "source": {"arrivalTime": "arrival", **({"maxFutureSkew": skew} if skew else {})},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "timeConfig": {"eventTimeExtractor": "event_time"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )


def test_max_future_skew_in_the_fingerprint_only_when_set():
    """Off leaves the fingerprint of existing pipelines (and their carried state) as it was;
    set, state written without it (or with another value) is refused."""
    import hashlib
    import json
    from dataclasses import asdict

    plain = _skew_pipeline()
    source = {
        k: v
        for k, v in asdict(plain.source).items()
        if k not in plain.source.LOCATION_FIELDS and k not in ("max_future_skew_ms", "filter", "derive")
    }
    # The window as the fingerprint read it before keys of several columns: one ``key``.
    window = {k: v for k, v in asdict(plain.window).items() if k != "keys"}
    window["key"] = plain.window.keys[0] if plain.window.keys else None
    before = hashlib.sha256(
        json.dumps(
            {"source": source, "window": window, "aggregates": [asdict(a) for a in plain.aggregates]},
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()[:16]
    assert plain.fingerprint() == before
    assert len({plain.fingerprint(), _skew_pipeline("1m").fingerprint(), _skew_pipeline("2m").fingerprint()}) == 3


def test_no_events_gives_an_empty_analysis_and_a_report():
    from windowing.lateness.report import render_report

    pipeline, _ = _example(INPUT_A)
    result = local_lateness(pipeline, [], LatenessOptions())
    assert result.counters == {} and result.tables["cost"].num_rows == 0
    assert result.late_counts(WatermarkStrategy.MIN_EVENT_TIME, Lateness.WINDOW_CLOSED, [0]) == [(0, 0)]
    figures = {
        "pipeline": "p",
        "configured": {"strategy": "MIN_EVENT_TIME", "lateness": "WINDOW_CLOSED", "delay_ms": 0},
        "configured_replay": {"late_events": 0, "late_share": 0.0},
        "accepted_events": 0,
        "rejected_rows": 0,
        "variants": [],
        "cost": {"windows": 0, "worst_windows": []},
        "recommendations": [],
        "curves": [],
        "late_curve_points": {},
        "delays_ms": [0],
        "target_late": 0.001,
        "lateness_histogram": [],
        "late_by_hour": [],
        "late_by_worker": [],
        "future_skew": {"threshold_ms": None},
    }
    page = render_report(figures)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 4


def test_a_curve_that_coincides_with_another_says_so_in_the_legend():
    """On the demo the MIN and MAX strategies' curves coincide, so one hid the other (issue 47):
    the legend of the one drawn over says whose curve it is; distinct curves say nothing."""
    from windowing.lateness.report import _late_share_plot, _latency_plot

    def row(strategy, delay, share, p50):
        return {"strategy": strategy, "lateness": "WINDOW_CLOSED", "delay_ms": delay, "late_share": share,
                "latency_p50_ms": p50, "latency_p99_ms": p50 * 2}  # fmt: skip

    same = [row(s, d, 0.01 / (1 + d), 100 + d) for s in ("MIN_EVENT_TIME", "MAX_EVENT_TIME") for d in (0, 1000)]
    points = {f"{s}/WINDOW_CLOSED": [[0, 0.01], [1000, 0.005]] for s in ("MIN_EVENT_TIME", "MAX_EVENT_TIME")}
    figures = {"curves": same, "late_curve_points": points, "delays_ms": [0, 1000], "target_late": 0.001}
    note = "MAX_EVENT_TIME WINDOW_CLOSED (same curve as MIN_EVENT_TIME WINDOW_CLOSED, drawn over it)"
    assert note in _late_share_plot(figures) and note in _latency_plot(figures)
    figures["curves"] = [
        dict(r, latency_p50_ms=r["latency_p50_ms"] + (r["strategy"] == "MAX_EVENT_TIME")) for r in same
    ]
    figures["late_curve_points"]["MAX_EVENT_TIME/WINDOW_CLOSED"] = [[0, 0.02], [1000, 0.005]]
    assert "same curve" not in _late_share_plot(figures) and "same curve" not in _latency_plot(figures)
