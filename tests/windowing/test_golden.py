"""The contract's worked examples, run through every executor and in shuffled orders."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.engine_harness import run_engine
from tests.support.kernel_harness import local_replay
from tests.support.reference_model import reference_replay
from windowing.config import parse_pipeline

S = 1000
DOC = yaml.safe_load((Path(__file__).parent.parent / "golden" / "contract_examples.yaml").read_text())
CASES = DOC["cases"]


def _case(case):
    events = DOC["inputs"][case["input"]] if isinstance(case["input"], str) else case["input"]
    arrivals = case.get("arrivals")
    rows = []
    for i, (name, t, batch) in enumerate(events):
        arrival = arrivals[i] * S if arrivals else batch * 100 * S + i
        rows.append(
            {"name": name, "event_time": t * S, "batch": batch, "arrival": arrival, "offset": i, "amount": float(2**i)}
        )
    pipeline = parse_pipeline(
        {
            "name": "golden",
            "source": {"arrivalTime": "arrival", "arrivalOrder": ["offset"], "batch": {"column": "batch"}},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "10s",
                    "timeConfig": case["timeConfig"],
                    "aggregateDefinition": [{"type": "count"}, {"type": "sum", "column": "amount"}],
                }
            },
            **({"replay": case["replay"]} if "replay" in case else {}),
        }
    )
    bit = {r["name"]: r["amount"] for r in rows}
    emitted = sorted(
        (ws * S, we * S, sum(bit[e] for e in names), batch, reason, *(s * S for s in emit_time))
        for ws, we, names, batch, reason, *emit_time in case["expect"]["emitted"]
    )
    late = sorted((name, ws * S, wm * S) for name, ws, wm in case["expect"]["late"])
    return pipeline, rows, case.get("flushAtEnd", False), emitted, late


def _observed(aggs, late, emitted):
    """The rows as the expectation has them (with ``emit_time`` where it gives it)."""
    with_time = any(len(e) == 6 for e in emitted)
    return (
        sorted(
            (
                r["window_start"],
                r["window_end"],
                r["sum_amount"],
                r["emit_batch"],
                r["emit_reason"],
                *([r["emit_time"]] if with_time else []),
            )
            for r in aggs
        ),
        sorted((r["name"], r["window_start"], r["watermark"]) for r in late),
    )


ids = [c["name"] for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_reference_model(case):
    pipeline, rows, flush, emitted, late = _case(case)
    res = reference_replay(pipeline, rows, flush_at_end=flush)
    assert _observed(res.aggregates, res.late_events, emitted) == (emitted, late)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_kernel(case):
    pipeline, rows, flush, emitted, late = _case(case)
    aggs, late_rows, _, _ = local_replay(pipeline, rows[::-1], flush_at_end=flush)
    assert _observed(aggs, late_rows, emitted) == (emitted, late)


@pytest.mark.parametrize("seed", [None, 2])
@pytest.mark.parametrize("case", CASES, ids=ids)
def test_spark_engine(spark, case, seed):
    pipeline, rows, flush, emitted, late = _case(case)
    aggs, late_rows, rejected, _, _ = run_engine(
        spark, pipeline, rows, flush_at_end=flush, seed=seed, partitions=seed and seed + 1
    )
    assert _observed(aggs, late_rows, emitted) == (emitted, late)
    assert rejected == []
