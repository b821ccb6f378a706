"""A replay's metrics (docs/semantics.md section 10) and VoltSP's window metrics.

Every expected figure is computed independently of the engine's counters: from the
reference model (tests/support/reference_model.py), replayed over all events and over each
worker's events alone (workers never interact), or from the written datasets.

The history (``_history``), on three workers, one second per batch::

    users u0 u1 u2   an event every ~0.5 s for 60 s, event time a little behind arrival;
                     now and then one 30 s behind (late for all five of its 10 s / 2 s
                     windows) or 7 s behind (late for some, accepted by the others)
    user  u3         only the first 20 s: idle after that (idleTimeout 5 s), its
                     windows flushed (IDLE) and the key no longer held
    user  solo       on worker 2 only: the workers' figures differ
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import replace

import pytest
import yaml

from tests.support.engine_harness import rows_of, to_df
from tests.support.outputs import late_events_in, run_dir
from tests.support.outputs import metrics as metrics_of
from tests.support.reference_model import reference_replay, window_bounds
from windowing import metrics as M
from windowing.config import Trigger, parse_pipeline
from windowing.runner.replay import replay

S = 1000
WORKERS = (0, 1, 2)


def _pipeline(window: str = "sliding-time-window", triggers=("atWindowEnd",), **fields):
    window_fields = {"windowSpan": "10s", "windowSlide": "2s"} if window == "sliding-time-window" else {}
    window_fields.update(fields)
    return parse_pipeline(
        {
            "name": "metrics-test",
            "source": {
                "arrivalTime": "arrival",
                "arrivalOrder": ["offset"],
                "batch": {"interval": "1s"},
                "worker": "worker",
            },
            "emitter": {
                window: {
                    **window_fields,
                    "keyExtractor": "user",
                    "timeConfig": {"eventTimeExtractor": "event_time", "idleTimeout": "5s"},
                    "aggregateDefinition": [{"type": "count"}, {"type": "sum", "column": "amount"}],
                },
                "triggers": list(triggers),
            },
        }
    )


def _history(seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for w in WORKERS:
        users = ["u0", "u1", "u2", "u3"] + (["solo"] if w == 2 else [])
        arrival = 1_000 + w * 37
        for offset in range(130):
            arrival += rng.randint(300, 600)
            user = rng.choice([u for u in users if u != "u3" or arrival < 20 * S])
            behind = rng.choices([rng.randint(0, 400), 30 * S, 7 * S], weights=[18, 1, 1])[0]
            rows.append(
                {
                    "arrival": arrival,
                    "event_time": max(0, arrival - behind),
                    "offset": offset,
                    "worker": w,
                    "user": user,
                    "amount": float(rng.randint(1, 9)),
                    "name": f"w{w}-{offset}",
                }
            )
    return rows


def _replay(spark, pipeline, rows):
    result = replay(spark, pipeline, to_df(spark, rows, partitions=3))
    return result, rows_of(result.aggregates), rows_of(result.late_events)


def _keys_held(ref, worker=None) -> int:
    return sum(
        1
        for w, ws in ref.state.workers.items()
        if worker is None or w == worker
        for ks in ws.keys.values()
        if ks.windows
    )


@pytest.fixture(scope="module")
def sliding(spark):
    """The sliding pipeline over the history: (pipeline, rows, result, aggregates, late)."""
    pipeline = _pipeline()
    rows = _history()
    result, aggs, late = _replay(spark, pipeline, rows)
    yield pipeline, rows, result, aggs, late
    result.unpersist()


# --------------------------------------------------------------------------- closed windows


@pytest.mark.parametrize("triggers", [("atAggregate",), ("atWindowEnd", "atAggregate")])
def test_windows_that_close_are_counted_whatever_the_triggers(spark, triggers):
    """With only atAggregate, windows still close (they are just not written): they count
    as closed, per reason, apart from the snapshot rows."""
    rows = _history()
    pipeline = _pipeline(triggers=triggers)
    result, aggs, _ = _replay(spark, pipeline, rows)
    m = result.metrics
    # What closes does not depend on the triggers: the model with atWindowEnd writes it.
    closing = reference_replay(replace(pipeline, triggers=(Trigger.AT_WINDOW_END,)), rows)
    closed = Counter(r["emit_reason"] for r in closing.aggregates)
    assert set(closed) == {"WATERMARK", "IDLE"}  # both kinds happen in this history
    assert m["windows_closed"] == sum(closed.values()) > 0
    assert m["closed_by_reason"] == dict(closed)
    written = Counter(r["emit_reason"] for r in aggs)
    assert m["snapshots_emitted"] == written.pop("AGGREGATE") > 0
    assert m["windows_emitted"] == sum(written.values())
    assert m["emitted_by_reason"] == dict(written)
    assert m["windows_emitted"] == (m["windows_closed"] if "atWindowEnd" in triggers else 0)
    for w in WORKERS:  # VoltSP's aggregates emitted, per worker: the rows written
        emitted = m["voltsp"]["voltsp_aggregations_emitted_total"]["by_worker"][str(w)]
        assert emitted == sum(1 for r in aggs if r["worker"] == w) > 0
    result.unpersist()


# --------------------------------------------------------------------------- late events


def test_one_late_event_on_a_sliding_window_is_one_event_and_five_pairs(spark):
    """The issue's example: a 10 s / 2 s sliding window; an event 30 s behind misses all
    five of its windows. It is one late event and five late (event, window) pairs."""
    pipeline = _pipeline()
    row = {"worker": 0, "user": "a", "amount": 1.0}
    rows = [
        {**row, "arrival": 40 * S, "event_time": 40 * S, "offset": 0, "name": "on-time"},
        {**row, "arrival": 41 * S, "event_time": 11 * S, "offset": 1, "name": "late"},
    ]
    result, _, late = _replay(spark, pipeline, rows)
    windows = len(window_bounds(pipeline.window, 11 * S))
    assert windows == 5
    assert len(late) == windows and {r["name"] for r in late} == {"late"}  # the dataset: one row per pair
    assert result.metrics["late_events"] == 1
    assert result.metrics["late_event_windows"] == windows
    assert result.metrics["voltsp"]["voltsp_late_event_total"] == {"total": 1, "by_worker": {"0": 1}}
    result.unpersist()


def test_late_events_and_late_pairs_match_the_outputs_and_the_model(sliding):
    pipeline, rows, result, _, late = sliding
    m = result.metrics
    ref = reference_replay(pipeline, rows)
    assert m["late_event_windows"] == len(late) == len(ref.late_events)
    assert m["late_events"] == len({r["name"] for r in late}) == late_events_in(ref.late_events)
    # Some event missed several windows, some only part of its windows: the two differ.
    per_event = Counter(r["name"] for r in late)
    assert max(per_event.values()) == 5 and min(per_event.values()) < 5
    assert m["late_events"] < m["late_event_windows"]
    by_worker = m["voltsp"]["voltsp_late_event_total"]["by_worker"]
    assert by_worker == {str(w): len({r["name"] for r in late if r["worker"] == w}) for w in WORKERS}


def test_metadata_and_checks_use_late_events_as_events(spark, sliding, tmp_path):
    """The consumers: Dagster's late_share is a share of accepted events (<= 1), the
    pairs are their own series; metrics_consistent recounts both from the datasets and
    fails on the old meaning (late_events = pairs)."""
    from assets.pipelines import PartitionResult, _metadata
    from windowing import validation as V
    from windowing.storage.store import Lineage

    pipeline, rows, result, _, _ = sliding
    m = result.metrics
    from windowing.storage.commits import list_commits
    from windowing.storage.outputs import write_outputs

    out = str(tmp_path / "out")
    write_outputs(result, out)
    run = list_commits(spark, out)[-1].run_path
    lineage = Lineage(pipeline.name, pipeline.fingerprint(), "p", None, None, "h", False, run)
    meta = _metadata(spark, pipeline, PartitionResult("p", out, run, m, lineage, None), "window_state")
    assert meta["late_events"].value == m["late_events"]
    assert meta["late_event_windows"].value == m["late_event_windows"]
    assert meta["late_share"].value == round(m["late_events"] / len(rows), 6) <= 1
    assert meta["windows_closed"].value == m["windows_closed"] and meta["keys_held"].value == m["keys_held"]

    events = to_df(spark, rows)
    checked = V.run_checks(spark, pipeline, result, input_df=events, only={"metrics_consistent", "conservation"})
    assert [(r.name, r.passed, r.skipped) for r in checked] == [
        ("conservation", True, False),
        ("metrics_consistent", True, False),
    ]
    old = replace_metrics(result, late_events=m["late_event_windows"])
    [res] = V.run_checks(spark, pipeline, old, input_df=events, only={"metrics_consistent"})
    assert not res.passed and {w["metric"] for w in res.sample} >= {"late_events"}


def replace_metrics(result, **changes):
    """``result`` with some top-level metrics changed (the datasets as they are)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        aggregates=result.aggregates,
        late_events=result.late_events,
        rejected=result.rejected,
        state=result.state,
        metrics={**result.metrics, **changes},
    )


# --------------------------------------------------------------------------- keys


def test_keys_seen_and_keys_held(spark, sliding):
    """unique_keys: keys seen; keys_held (VoltSP's gauge): keys with open windows at the end."""
    pipeline, rows, result, _, _ = sliding
    m = result.metrics
    ref = reference_replay(pipeline, rows)
    seen = {(r["worker"], r["user"]) for r in rows}
    assert m["unique_keys"] == len(seen) == 13
    state = result.state.where("state_kind = 'window'").select("worker", "user").distinct().collect()
    assert m["keys_held"] == len(state) == _keys_held(ref)
    assert 0 < m["keys_held"] < m["unique_keys"]  # the u3 keys were flushed idle: seen, not held
    gauge = m["voltsp"]["voltsp_aggregations_unique_keys_total"]
    assert gauge["total"] == m["keys_held"]
    assert gauge["by_worker"] == {str(w): _keys_held(ref, w) for w in WORKERS}
    # Flushed at the end, nothing is held any more; every key was still seen.
    flushed = replay(spark, pipeline, to_df(spark, rows), flush_at_end=True)
    assert flushed.metrics["keys_held"] == 0 and flushed.metrics["unique_keys"] == len(seen)
    flushed.unpersist()


# --------------------------------------------------------------------------- VoltSP


def _voltsp_of(ref) -> dict[str, int]:
    """VoltSP's window metrics of a reference replay (docs/semantics.md section 10)."""
    return {
        "voltsp_aggregations_unique_keys_total": _keys_held(ref),
        "voltsp_aggregations_created_total": ref.metrics["windows_created"],
        "voltsp_aggregations_emitted_total": len(ref.aggregates),
        "voltsp_emitted_total": len(ref.aggregates) + len(ref.late_events),
        "voltsp_idle_keys_total": ref.metrics["idle_keys_removed"],
        "voltsp_late_event_total": late_events_in(ref.late_events),
    }


@pytest.mark.parametrize("window", ["sliding-time-window", "session-window"])
def test_voltsp_metrics_per_worker_and_in_total(spark, sliding, window):
    if window == "sliding-time-window":
        pipeline, rows, result, _, _ = sliding
    else:  # merges (created once per new session), MAX_DURATION closes
        pipeline = _pipeline("session-window", triggers=("atWindowEnd", "atAggregate"), maximumDuration="8s")
        rows = _history()
        result = replay(spark, pipeline, to_df(spark, rows, partitions=2))
    block = result.metrics["voltsp"]
    assert list(block) == [m.name for m in M.VOLTSP_METRICS]
    whole = _voltsp_of(reference_replay(pipeline, rows))
    for w in WORKERS:  # a worker's window sees only its own events
        alone = _voltsp_of(reference_replay(pipeline, [r for r in rows if r["worker"] == w]))
        for name, value in alone.items():
            assert block[name]["by_worker"][str(w)] == value, (name, w)
    for name, value in whole.items():
        assert block[name]["total"] == value == sum(block[name]["by_worker"].values()), name
    assert all(v > 0 for v in whole.values()), whole  # every metric is exercised here
    if window != "sliding-time-window":
        assert result.metrics["closed_by_reason"].get("MAX_DURATION", 0) > 0
        result.unpersist()


def test_one_worker_without_a_worker_column_is_worker_0(spark):
    pipeline = parse_pipeline(
        {
            "name": "t",
            "source": {"arrivalTime": "arrival", "batch": {"interval": "1s"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "keyExtractor": "user",
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    rows = [{"arrival": t * S, "user": u} for t, u in ((1, "a"), (2, "b"), (12, "a"))]
    result = replay(spark, pipeline, to_df(spark, rows))
    ref = reference_replay(pipeline, rows)
    block = result.metrics["voltsp"]
    for name, value in _voltsp_of(ref).items():
        assert block[name] == {"total": value, "by_worker": {"0": value}}, name
    result.unpersist()


# --------------------------------------------------------------------------- metrics.prom


def test_cli_writes_metrics_prom_beside_metrics_json(spark, tmp_path):
    """The CLI's run folder holds metrics.prom: valid exposition format (Prometheus' own
    parser), every VoltSP metric with HELP and TYPE, the totals and each worker, equal to
    metrics.json's voltsp block; and the summary line tells closed windows and late events."""
    from tests.test_cli import _cli

    rows = _history()
    to_df(spark, rows).write.parquet(str(tmp_path / "events"))
    config = tmp_path / "pipeline.yaml"
    doc = {
        "version": 1,
        "name": "metrics-test",
        "source": {
            "arrivalTime": "arrival",
            "arrivalOrder": ["offset"],
            "batch": {"interval": "1s"},
            "worker": "worker",
        },
        "emitter": {
            "sliding-time-window": {
                "windowSpan": "10s",
                "windowSlide": "2s",
                "keyExtractor": "user",
                "timeConfig": {"eventTimeExtractor": "event_time", "idleTimeout": "5s"},
                "aggregateDefinition": [{"type": "count"}],
            }
        },
    }
    config.write_text(yaml.safe_dump(doc))
    rc, stdout, stderr = _cli(
        spark, "replay", "--config", config, "--input", tmp_path / "events", "--output", tmp_path / "out"
    )
    assert rc == 0, stderr
    m = metrics_of(tmp_path / "out")
    assert (
        f"{m['windows_closed']:,} windows closed" in stdout
        and f"{m['late_events']:,} late events" in stdout
        and f"{m['late_event_windows']:,} late (event, window) pairs" in stdout
    ), stdout

    [part] = [p for p in (run_dir(tmp_path / "out") / "metrics.prom").glob("part-*") if p.is_file()]
    text = part.read_text()
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert text == M.render_prometheus(m)
    _check_exposition(text, m)


def _check_exposition(text: str, m: dict) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    for metric in M.VOLTSP_METRICS:
        # The parser names a counter family without its _total suffix.
        name = metric.name.removesuffix("_total") if metric.type == "counter" else metric.name
        family = families.pop(name)
        assert family.type == metric.type and family.documentation.startswith(metric.help)
        samples = {s.labels.get("worker"): s.value for s in family.samples}
        assert all(s.name == metric.name and s.labels["pipeline"] == m["pipeline"] for s in family.samples)
        block = m["voltsp"][metric.name]
        assert samples == {None: block["total"], **block["by_worker"]}
        assert sum(v for w, v in samples.items() if w is not None) == samples[None]
    assert families == {}
    assert len(re.findall(r"^# HELP ", text, re.M)) == len(re.findall(r"^# TYPE ", text, re.M)) == 6


# --------------------------------------------------------------------------- without Spark


def test_rendering_escapes_labels_and_help():
    """Label values with quotes, backslashes and newlines stay one valid sample."""
    from prometheus_client.parser import text_string_to_metric_families

    counters = {"0": {M.LATE_EVENTS: 2, M.LATE_PAIRS: 7}, 'a"b\\c\nd': {M.LATE_EVENTS: 1, M.LATE_PAIRS: 1}}
    figures = {w: M.figures(c, at_window_end=True) for w, c in counters.items()}
    total = M.figures({M.LATE_EVENTS: 3, M.LATE_PAIRS: 8}, at_window_end=True)
    m = {"pipeline": 'p"1\\', "voltsp": M.voltsp_block(total, figures)}
    text = M.render_prometheus(m)
    _check_exposition(text, m)
    late = next(f for f in text_string_to_metric_families(text) if f.name == "voltsp_late_event")
    assert {s.labels.get("worker"): s.value for s in late.samples} == {None: 3, "0": 2, 'a"b\\c\nd': 1}
    emitted = next(f for f in text_string_to_metric_families(text) if f.name == "voltsp_emitted")
    assert emitted.samples[0].value == 8  # the late rows are emitted, one per pair


def test_figures_tell_closed_from_emitted():
    counters = {M.CLOSED_PREFIX + "WATERMARK": 4, M.CLOSED_PREFIX + "IDLE": 2, M.SNAPSHOTS: 9}
    without = M.figures(counters, at_window_end=False)
    assert (without["windows_closed"], without["closed_by_reason"]) == (6, {"WATERMARK": 4, "IDLE": 2})
    assert (without["windows_emitted"], without["emitted_by_reason"], without["snapshots_emitted"]) == (0, {}, 9)
    with_end = M.figures(counters, at_window_end=True)
    assert (with_end["windows_emitted"], with_end["emitted_by_reason"]) == (6, {"WATERMARK": 4, "IDLE": 2})


@pytest.mark.parametrize(
    ("value", "label"),
    [
        (3, "3"),
        ("p-1", "p-1"),
        (None, "null"),
        (True, "true"),
        (-0.0, "-0.0"),
        (0.5, "0.5"),
    ],
)
def test_worker_labels(value, label):
    assert M.worker_label(value) == label


def test_task_counters_add_up_per_worker_and_in_total():
    """The driver's sum of the tasks' counters (a worker's keys spread over tasks)."""
    import pyarrow as pa

    from windowing.runner.replay import sum_counters

    def task(rows):
        w, n, v = zip(*rows)
        return pa.table({"worker": pa.array(w, pa.string()), "name": pa.array(n), "value": pa.array(v, pa.int64())})

    counts, by_worker = sum_counters(
        [
            task([("0", "late", 2), ("1", "late", 1), (None, "rows_aggregates", 5)]),
            task([("0", "late", 3), ("0", "keys_held", 1), (None, "rows_aggregates", 4)]),
        ]
    )
    assert counts == {"late": 6, "keys_held": 1, "rows_aggregates": 9}
    assert by_worker == {"0": {"late": 5, "keys_held": 1}, "1": {"late": 1}}


# --------------------------------------------------------------------------- ReplayMetrics


def test_replay_metrics_round_trip_through_their_json(sliding):
    """A real replay's metrics are typed, and read back from their JSON form (metrics.json,
    the commit record) as the same metrics."""
    import json

    m = sliding[2].metrics
    assert isinstance(m, M.ReplayMetrics)
    assert isinstance(m.lateness_ms_percentiles, M.LatenessPercentiles) and m.lateness_ms_percentiles.p99 > 0
    assert m.voltsp["voltsp_late_event_total"] == M.VoltspValue(
        m.late_events, m.voltsp["voltsp_late_event_total"].by_worker
    )
    assert m.accepted_events == m.input_rows - m.rejected_rows == len(sliding[1])
    assert M.ReplayMetrics.from_dict(m.to_dict()) == m
    stored = json.dumps(m.to_dict(), sort_keys=True)
    back = M.ReplayMetrics.from_dict(json.loads(stored))
    assert back == m and json.dumps(back.to_dict(), sort_keys=True) == stored
    assert M.render_prometheus(back) == M.render_prometheus(m.to_dict())
    # The compatibility path: the JSON form through mapping access.
    assert dict(m) == {**m} == m.to_dict() and m == m.to_dict() and m["voltsp"] == m.to_dict()["voltsp"]
    assert m.get("absent", 7) == 7 and "late_events" in m


def test_replay_metrics_are_the_dict_of_earlier_versions():
    """to_dict(): the keys, their order and values of the dict the engine built before
    ReplayMetrics (docs/semantics.md section 10), so stored metrics stay byte for byte."""
    from types import SimpleNamespace

    from windowing.runner.replay import build_metrics

    counters = {
        M.EVENTS: 10,
        M.LATE_PAIRS: 5,
        M.LATE_EVENTS: 2,
        M.WINDOWS_CREATED: 7,
        M.CLOSED_PREFIX + "WATERMARK": 3,
        M.CLOSED_PREFIX + "IDLE": 1,
        M.IDLE_KEYS_REMOVED: 1,
        M.KEYS_SEEN: 4,
        M.KEYS_HELD: 2,
        M.OPEN_WINDOWS: 3,
    }
    pipeline = SimpleNamespace(name="p", triggers=(Trigger.AT_WINDOW_END,))
    m = build_metrics(
        counters,
        {"p": [1.0, 2.5, 3.0], "mx": 4},
        {"NULL_KEY": 2, "BAD_TIME": 1},
        [{"watermark_ms": 1_000}, {"watermark_ms": None}],
        pipeline,
        by_worker={"0": counters},
    )
    voltsp = {
        "voltsp_aggregations_unique_keys_total": 2,
        "voltsp_aggregations_created_total": 7,
        "voltsp_aggregations_emitted_total": 4,
        "voltsp_emitted_total": 9,
        "voltsp_idle_keys_total": 1,
        "voltsp_late_event_total": 2,
    }
    expected = {
        "pipeline": "p",
        "input_rows": 13,
        "rejected_rows": 3,
        "rejected_by_reason": {"BAD_TIME": 1, "NULL_KEY": 2},
        "filtered_rows": 0,
        "late_events": 2,
        "late_event_windows": 5,
        "windows_created": 7,
        "windows_closed": 4,
        "closed_by_reason": {"WATERMARK": 3, "IDLE": 1},
        "windows_emitted": 4,
        "emitted_by_reason": {"WATERMARK": 3, "IDLE": 1},
        "snapshots_emitted": 0,
        "idle_keys_removed": 1,
        "unique_keys": 4,
        "keys_held": 2,
        "open_windows": 3,
        "watermark_reached": "1970-01-01T00:00:01+00:00",
        "lateness_ms_percentiles": {"p50": 1.0, "p90": 2.5, "p99": 3.0, "max": 4},
        "voltsp": {name: {"total": n, "by_worker": {"0": n}} for name, n in voltsp.items()},
        "live_processors_ignored": [],
    }
    assert list(m.to_dict().items()) == list(expected.items())
    assert list(M.ReplayMetrics.from_dict(expected).to_dict().items()) == list(expected.items())


def test_replay_metrics_from_a_record_of_an_older_version():
    """A commit written before some figures existed: each missing key takes its default."""
    old = {
        "pipeline": "clicks",
        "input_rows": 5,
        "rejected_rows": 1,
        "rejected_by_reason": {"NULL_KEY": 1},
        "late_events": 2,
        "windows_emitted": 3,
        "emitted_by_reason": {"WATERMARK": 3},
        "open_windows": 1,
        "watermark_reached": "2024-01-01T00:00:00+00:00",
        "retired_figure": 9,
    }
    m = M.ReplayMetrics.from_dict(old)
    assert (m.pipeline, m.input_rows, m.accepted_events, m.late_events, m.windows_emitted) == ("clicks", 5, 4, 2, 3)
    assert (m.windows_created, m.late_event_windows, m.unique_keys, m.keys_held, m.closed_by_reason) == (0, 0, 0, 0, {})
    assert m.lateness_ms_percentiles == M.LatenessPercentiles(None, None, None, None)
    assert m.voltsp == {} and "retired_figure" not in m.to_dict()
    assert M.ReplayMetrics.from_dict({}) == M.ReplayMetrics() and M.ReplayMetrics.from_dict(None) == M.ReplayMetrics()
