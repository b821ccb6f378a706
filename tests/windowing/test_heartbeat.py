"""The pipeline heartbeat and the ``emit_time`` column (contract sections 5.2 and 10).

Live VoltSP with ``idleTimeoutClock: PROCESSING_TIME`` also flushes idle keys at its
pipeline heartbeat while the whole pipeline is silent. Every case here is worked out by
hand and run through the reference model and the kernel, in one go and in pieces with
the state carried (the Spark engine runs the pinned example in ``test_spark_engine``).
Times in the timelines are ``mm:ss`` after the epoch.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.engine_harness import canon, run_engine
from tests.support.kernel_harness import local_replay
from tests.support.reference_model import reference_replay
from windowing.config import ConfigError, parse_pipeline
from windowing.runner.normalise import StateMismatchError, mismatch_message
from windowing.storage.outputs import read_state

S = 1000
M = 60 * S


def mmss(text: str) -> int:
    """``"06:00"`` -> epoch milliseconds; ``"06:00.001"`` has milliseconds."""
    minutes, seconds = text.split(":")
    return int(minutes) * M + round(float(seconds) * S)


def pipeline(
    heartbeat=None, clock=None, event_time=False, batch=None, triggers=None, key=False, worker=False, idle="5m"
):
    """Tumbling 1 h windows, ``count``, idle timeout ``idle``; batches of 1 s unless told."""
    tc: dict = {"idleTimeout": idle}
    if event_time:
        tc["eventTimeExtractor"] = "event_time"
    if clock:
        tc["idleTimeoutClock"] = clock
    window = {"windowSpan": "1h", "timeConfig": tc, "aggregateDefinition": [{"type": "count"}]}
    if key:
        window["keyExtractor"] = "user"
    source = {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": batch or {"interval": "1s"}}
    if worker:
        source["worker"] = "worker"
    doc = {"name": "hb", "source": source, "emitter": {"tumbling-time-window": window}}
    if triggers:
        doc["emitter"]["triggers"] = triggers
    if heartbeat is not None:
        doc["replay"] = {"heartbeat": heartbeat}
    return parse_pipeline(doc)


def row(arrival: str, i: int, **cols) -> dict:
    ms = mmss(arrival)
    return {"arrival": ms, "event_time": ms, "offset": i, "name": f"e{i}", **cols}


def replay_model(p, pieces, flush):
    state, out = None, []
    for i, piece in enumerate(pieces):
        res = reference_replay(p, piece, state=state, flush_at_end=flush and i == len(pieces) - 1)
        state, out = res.state, out + res.aggregates
    return out


def replay_kernel(p, pieces, flush):
    state, out = None, []
    for i, piece in enumerate(pieces):
        aggs, _, _, state = local_replay(p, piece, state, flush_at_end=flush and i == len(pieces) - 1)
        out += aggs
    return out


EXECUTORS = {"model": replay_model, "kernel": replay_kernel}


def emitted(rows):
    """(count, reason, emit_batch, emit_time, emit_watermark, emission) of each row, sorted."""
    return sorted(
        (r["count"], r["emit_reason"], r["emit_batch"], r["emit_time"], r["emit_watermark"], r["emission"])
        for r in rows
    )


def run_all(p, rows, flush=True, cuts=()):
    """What every executor emits (as :func:`emitted`), in one go and cut before each index
    in ``cuts``: checked equal, then returned."""
    pieces = [rows[lo:hi] for lo, hi in zip([0, *cuts], [*cuts, len(rows)])]
    once = emitted(replay_model(p, [rows], flush))
    for name, run in EXECUTORS.items():
        assert emitted(run(p, [rows], flush)) == once, name
        assert emitted(run(p, pieces, flush)) == once, (name, cuts)
    return once


# --------------------------------------------------------------------------- the pinned example


#: One key, 5 min idle timeout on the processing-time clock, tumbling 1 h.
#:
#:   00:30  e0 arrives (batch 30)          clock 00:30; due idle at 05:30
#:   ...    15 minutes of total silence:   live, the 60 s heartbeat ticks at 01:00 ... 15:00;
#:          the tick at 06:00 finds the key idle and flushes [0, 1h) {e0}
#:   15:30  e1 arrives (batch 930)         [0, 1h) opens again: emission 2
#:   end    flush at end emits it
#:
#: A replay whose clock moves only at commits sees 15:30 - 15:30 < 5 min at batch 930 and
#: emits one window {e0, e1}: live emits two.
SILENCE = [row("00:30", 0), row("15:30", 1)]


@pytest.mark.parametrize("cuts", [(), (1,)], ids=["one go", "cut in the silence"])
def test_fifteen_minutes_of_silence_flush_at_the_heartbeat_tick(cuts):
    """The contract's case (section 5.2): two windows; the first is flushed IDLE at the
    06:00 tick with the last committed batch (30) and emit time 06:00, its watermark that
    of its key (00:30). Cut into two partitions in the silence, the tick is applied when
    the second one starts, from the carried clock and batch: the same rows."""
    got = run_all(pipeline(), SILENCE, cuts=cuts)
    assert got == [
        (1, "END_OF_INPUT", 930, mmss("15:30"), mmss("15:30"), 2),
        (1, "IDLE", 30, mmss("06:00"), mmss("00:30"), 1),
    ]


@pytest.mark.parametrize(
    "heartbeat, flushed_at",
    [
        (None, "06:00"),  # the default, 60 s: the first tick at or after 05:30
        ("60s", "06:00"),
        ("5m", "10:00"),  # ticks 05:00 (too early), 10:00
        ("7m", "07:00"),  # 07:00 is the first multiple of 7 min after 05:30
        ("PT90S", "06:00"),  # 04:30 too early, 06:00
        ("15m", "15:00"),  # the only tick in the silence, half a minute before the next batch
        ("16m", None),  # no tick between 00:30 and 15:30
        ("0s", None),  # off: the clock moves only at commits, as before the heartbeat
    ],
)
def test_heartbeat_interval(heartbeat, flushed_at):
    got = run_all(pipeline(heartbeat), SILENCE, cuts=(1,))
    if flushed_at is None:
        assert got == [(2, "END_OF_INPUT", 930, mmss("15:30"), mmss("15:30"), 1)]
    else:
        assert got == [
            (1, "END_OF_INPUT", 930, mmss("15:30"), mmss("15:30"), 2),
            (1, "IDLE", 30, mmss(flushed_at), mmss("00:30"), 1),
        ]


@pytest.mark.parametrize(
    "second, windows",
    [
        ("06:00", 1),  # the tick at 06:00 is not strictly before the next batch's arrival: no tick
        ("06:00.001", 2),  # now it is
        ("05:59", 1),  # no tick between 00:30 and 05:59 finds the key idle
    ],
)
def test_a_tick_must_come_strictly_before_the_next_batch(second, windows):
    got = run_all(pipeline(), [row("00:30", 0), row(second, 1)])
    assert len(got) == windows


def test_a_key_is_idle_at_a_tick_exactly_idle_timeout_after_its_last_arrival():
    """``t - greatest arrival >= idleTimeout``: due at 05:00, flushed by the 05:00 tick."""
    got = run_all(pipeline(), [row("00:00", 0), row("15:30", 1)], cuts=(1,))
    assert got[1][1:4] == ("IDLE", 0, mmss("05:00"))


def test_ticks_run_from_the_worker_clock_and_flush_each_key_when_due():
    """Keys a and b on one worker: the ticks start after the worker's last commit (b's
    arrivals moved it) and flush each key at the first tick it is due, with the batch
    committed last before that tick.

      00:30 a (batch 30); 04:00 b (batch 240): clock 04:00, a due at 05:30
      ticks 05:00 (a not due), 06:00 (a flushed: IDLE, batch 240, 06:00), 07:00, 08:00
      08:30 b (batch 510): b due at 13:30
      ticks 09:00 ... 14:00 (b flushed: IDLE, batch 510, 14:00) ... 19:00
      20:00 a (batch 1200): [0, 1h) of a opens again, flushed at end
    """
    p = pipeline(key=True)
    rows = [row("00:30", 0, user="a"), row("04:00", 1, user="b"), row("08:30", 2, user="b"), row("20:00", 3, user="a")]
    got = run_all(p, rows, cuts=(2,))
    by_user = sorted(
        (r["user"], r["emit_reason"], r["emit_batch"], r["emit_time"], r["count"])
        for r in replay_model(p, [rows], True)
    )
    assert by_user == [
        ("a", "END_OF_INPUT", 1200, mmss("20:00"), 1),
        ("a", "IDLE", 240, mmss("06:00"), 1),
        ("b", "IDLE", 510, mmss("14:00"), 2),
    ]
    assert len(got) == 3


def test_ticks_are_per_worker():
    """Worker 1's arrivals do not move worker 0's clock, nor its ticks (contract section 5.2:
    the worker's clock, its next batch)."""
    p = pipeline(worker=True)
    rows = [row("00:30", 0, worker=0), row("02:00", 1, worker=1), row("09:00", 2, worker=1), row("15:30", 3, worker=0)]
    got = sorted(
        (r["worker"], r["emit_reason"], r["emit_batch"], r["emit_time"], r["count"])
        for r in replay_model(p, [rows], True)
    )
    assert got == [
        (0, "END_OF_INPUT", 930, mmss("15:30"), 1),
        (0, "IDLE", 30, mmss("06:00"), 1),
        # worker 1: 02:00 is due at 07:00, flushed by the 07:00 tick before its 09:00 batch
        (1, "END_OF_INPUT", 540, mmss("09:00"), 1),
        (1, "IDLE", 120, mmss("07:00"), 1),
    ]
    assert emitted(replay_kernel(p, [rows[:2], rows[2:]], True)) == emitted(replay_model(p, [rows], True))


def test_no_next_batch_no_tick():
    """Ticks need a next batch to stop before: after the last one, the window stays open in
    the state (or is flushed END_OF_INPUT at the last commit's clock)."""
    p = pipeline()
    for run in EXECUTORS.values():
        assert run(p, [[row("00:30", 0)]], False) == []
        assert emitted(run(p, [[row("00:30", 0)]], True)) == [(1, "END_OF_INPUT", 30, mmss("00:30"), mmss("00:30"), 1)]
    # the window carried in the state is flushed by the ticks once the next partition starts
    got = emitted(replay_kernel(p, [[row("00:30", 0)], [], [row("15:30", 1)]], True))
    assert got == emitted(replay_model(p, [SILENCE], True))


def test_event_time_clock_ignores_the_heartbeat():
    """With ``idleTimeoutClock: EVENT_TIME`` the heartbeat moves no watermark: one window."""
    for heartbeat in (None, "1s"):
        p = pipeline(heartbeat, clock="EVENT_TIME", event_time=True)
        got = run_all(p, SILENCE, cuts=(1,))
        assert got == [(2, "END_OF_INPUT", 930, mmss("15:30"), mmss("15:30"), 1)]


def test_session_windows_flush_at_the_tick():
    """Session gap 5 min, PROCESSING_TIME clock (no event-time column): the session {e0}
    is flushed at the 06:00 tick, before the 15:30 event opens a new one."""
    p = parse_pipeline(
        {
            "name": "hb",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"]},
            "emitter": {
                "session-window": {
                    "timeConfig": {"idleTimeout": "5m", "delayWindowClose": "1h"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    got = run_all(p, SILENCE + [row("15:40", 2)], cuts=(1,))
    assert got == [
        (1, "IDLE", 30, mmss("06:00"), mmss("00:30") - 60 * M, 1),
        (2, "END_OF_INPUT", 940, mmss("15:40"), mmss("15:40") - 60 * M, 1),
    ]


# --------------------------------------------------------------------------- emit_time


def test_emit_time_of_watermark_and_end_of_input_rows_is_the_worker_clock():
    """Batch 2 holds a (08:00) and b (09:00): the commit's clock is 09:00, so a's window
    closed by that commit carries emit time 09:00, not a's own arrival."""
    p = parse_pipeline(
        {
            "name": "t",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "keyExtractor": "user",
                    "timeConfig": {"eventTimeExtractor": "event_time"},
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    rows = [
        {"arrival": mmss("00:05"), "event_time": 1 * S, "batch": 1, "offset": 0, "user": "a"},
        {"arrival": mmss("08:00"), "event_time": 12 * S, "batch": 2, "offset": 1, "user": "a"},
        {"arrival": mmss("09:00"), "event_time": 30 * S, "batch": 2, "offset": 2, "user": "b"},
    ]
    for run in EXECUTORS.values():
        got = sorted(
            (r["user"], r["window_start"], r["emit_reason"], r["emit_batch"], r["emit_time"])
            for r in run(p, [rows], True)
        )
        assert got == [
            ("a", 0, "WATERMARK", 2, mmss("09:00")),
            ("a", 10 * S, "END_OF_INPUT", 2, mmss("09:00")),
            ("b", 30 * S, "END_OF_INPUT", 2, mmss("09:00")),
        ]


def test_at_aggregate_snapshot_emit_time_is_the_worker_clock_with_the_event():
    """A snapshot is emitted while its event is processed, before the batch commits: its
    emit time is the worker's clock then, the greatest arrival time it has seen, this
    event's included. Batch 2 is stamped earlier (04:00) than batch 1 (05:00): the clock
    does not go back, so its first snapshot says 05:00; its next event (06:00) moves it."""
    p = pipeline(batch={"column": "batch"}, triggers=["atAggregate"], key=True)
    rows = [row("05:00", 0, batch=1, user="a"), row("04:00", 1, batch=2, user="b"), row("06:00", 2, batch=2, user="a")]
    for name, run in EXECUTORS.items():
        got = sorted((r["emit_batch"], r["user"], r["count"], r["emit_time"]) for r in run(p, [rows], False))
        assert got == [(1, "a", 1, mmss("05:00")), (2, "a", 2, mmss("06:00")), (2, "b", 1, mmss("05:00"))], name
        cut = sorted(
            (r["emit_batch"], r["user"], r["count"], r["emit_time"]) for r in run(p, [rows[:1], rows[1:]], False)
        )
        assert cut == got, name


# --------------------------------------------------------------------------- configuration


def _doc(heartbeat=None, time=None):
    doc = {
        "name": "p",
        "source": {"arrivalTime": "arrival"},
        "emitter": {
            "tumbling-time-window": {
                "windowSpan": "1h",
                "timeConfig": {"idleTimeout": "5m"} if time is None else time,
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    }
    if heartbeat is not None:
        doc["replay"] = {"heartbeat": heartbeat}
    return doc


@pytest.mark.parametrize(
    "text, ms", [(None, 60_000), ("60s", 60_000), ("0s", 0), ("500ms", 500), ("PT2M", 120_000), ("1h", 3_600_000)]
)
def test_replay_heartbeat_parses(text, ms):
    assert parse_pipeline(_doc(text)).heartbeat_ms == ms


@pytest.mark.parametrize("bad", ["60", 60, "-1s", "soon", True])
def test_replay_heartbeat_refuses_what_is_no_duration(bad):
    with pytest.raises(ConfigError, match=r"replay\.heartbeat: .* is not a duration"):
        parse_pipeline(_doc(bad))


def test_heartbeat_is_in_the_fingerprint_only_where_it_flushes():
    """State carried under one heartbeat would not give the rows of one replay under
    another, so the fingerprint holds it, but only where it changes a replay (an idle
    timeout on the PROCESSING_TIME clock, heartbeat on). Elsewhere, and at 0s (which
    replays as before the heartbeat existed), the fingerprint is unchanged."""
    fp = lambda **kw: parse_pipeline(_doc(**kw)).fingerprint()  # noqa: E731
    assert len({fp(), fp(heartbeat="30s"), fp(heartbeat="0s")}) == 3
    assert fp() == fp(heartbeat="60s")
    event_clock = {"eventTimeExtractor": "t", "idleTimeout": "5m"}
    assert fp(time=event_clock) == fp(time=event_clock, heartbeat="30s") == fp(time=event_clock, heartbeat="0s")
    assert fp(time={}) == fp(time={}, heartbeat="30s")  # no idle timeout


# --------------------------------------------------------------------------- Spark


def test_spark_engine(spark, tmp_path):
    """The pinned example through the Spark engine: in one go, and cut in the silence
    with the state written to Parquet and read back (it carries the worker's clock and
    last batch, from which the second partition applies the ticks)."""
    p = pipeline()
    expected = emitted(replay_model(p, [SILENCE], True))
    aggs, *_ = run_engine(spark, p, SILENCE, flush_at_end=True, seed=1, partitions=2)
    assert emitted(aggs) == expected
    a1, _, _, state_df, _ = run_engine(spark, p, SILENCE[:1])
    state_df.write.parquet(str(tmp_path / "state"))
    worker = [r.asDict() for r in read_state(spark, tmp_path / "state").collect() if r["state_kind"] == "worker"]
    assert [(r["batch"], r["clock_ms"]) for r in worker] == [(30, mmss("00:30"))]
    a2, *_ = run_engine(spark, p, SILENCE[1:], state=read_state(spark, tmp_path / "state"), flush_at_end=True)
    assert emitted(a1 + a2) == expected
    assert canon(a1 + a2) == canon(replay_model(p, [SILENCE], True))
    # State written without ticks does not continue under a heartbeat that flushes.
    *_, off_state, _ = run_engine(spark, pipeline("0s"), SILENCE[:1])
    off_state.write.parquet(str(tmp_path / "off"))
    with pytest.raises(StateMismatchError, match="set replay.heartbeat: 0s to continue it"):
        run_engine(spark, p, SILENCE[1:], state=read_state(spark, tmp_path / "off"), flush_at_end=True)


def test_state_without_heartbeat_ticks_is_refused_with_what_to_do():
    """State written with no ticks (before ``replay.heartbeat`` existed, or with ``0s``) by a
    pipeline whose heartbeat now flushes is refused; the message says both ways on."""
    p = pipeline()
    old = replace(p, heartbeat_ms=0).fingerprint()
    message = mismatch_message(p, [old])
    assert "replay from the first partition" in message
    assert "set replay.heartbeat: 0s to continue it" in message and "60000 ms" in message
    other = mismatch_message(p, [pipeline(idle="6m").fingerprint()])  # another configuration: no such hint
    assert "replay from the first partition" in other and "heartbeat" not in other
