"""``rewindow verify`` is neither too strict nor too weak (issue 8, items 5 and 6).

* Too strict (item 5): correct output with keys ``-0.0`` and ``0.0`` (two keys to the
  engine), NaN and infinite amounts must pass every check.
* Too weak (item 6): a changed value that keeps every rule (``sum_amount`` + 1000, a
  lowered ``min_amount``, a changed ``unique_events``, an edited late row) must fail once
  verify can recompute (``--input``, ``--state-in``): ``replay_reproduces``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.quality.conftest import copy_tree
from tests.support.outputs import run_dir
from windowing import cli, command_line
from windowing import validation as V


def statuses(out: str) -> dict[str, str]:
    """check name -> PASS/FAIL/SKIP, from verify's table."""
    return {ln.split()[0]: ln.split()[1] for ln in out.splitlines() if ln.split() and ln.split()[0] in V.CHECK_NAMES}


# --------------------------------------------------------------------------- small float pipelines

T0 = dt.datetime(2024, 1, 1)
FLOATS = {
    "version": 1,
    "name": "floats",
    "source": {"arrivalTime": "arr", "arrivalOrder": ["seq"], "worker": "w"},
    "emitter": {
        "tumbling-time-window": {
            "windowSpan": "10s",
            "keyExtractor": "k",
            "timeConfig": {"eventTimeExtractor": "evt"},
            "aggregateDefinition": [
                "count",
                {"type": "sum", "column": "v"},
                {"type": "min", "column": "v"},
                {"type": "avg", "column": "v"},
                {"type": "max", "column": "v"},
                {"type": "distinct", "column": "id"},
            ],
        }
    },
    "triggers": ["atWindowEnd", "atAggregate"],
    "replay": {"flushAtEnd": True},
}
SCHEMA = pa.schema(
    [
        ("arr", pa.timestamp("us")),
        ("evt", pa.timestamp("us")),
        ("seq", pa.int64()),
        ("w", pa.float64()),
        ("k", pa.float64()),
        ("v", pa.float64()),
        ("id", pa.string()),
    ]
)
INF, NAN = math.inf, math.nan


def _bits(x: float) -> str:
    return struct.pack(">d", x).hex()


def write_case(base: Path, events: list[tuple]) -> tuple[Path, Path]:
    """A config and an input folder: ``events`` = (second, worker, key, amount) rows,
    arriving in that order; windows of 10 s, the second window's events close the first."""
    base.mkdir(parents=True, exist_ok=True)
    config = base / "floats.yaml"
    config.write_text(yaml.safe_dump(FLOATS))
    rows = [
        dict(arr=T0 + dt.timedelta(seconds=s), evt=T0 + dt.timedelta(seconds=s), seq=i, w=w, k=k, v=v, id=f"e{i}")
        for i, (s, w, k, v) in enumerate(events)
    ]
    (base / "in").mkdir()
    pq.write_table(pa.Table.from_pylist(rows, SCHEMA), base / "in" / "part-00000.parquet")
    return config, base / "in"


def replay_case(base: Path, events) -> tuple[Path, Path, Path]:
    """Replay the case with the CLI (flushAtEnd: true): (config, input, output)."""
    config, inp = write_case(base, events)
    code = cli.main(["replay", "--config", str(config), "--input", str(inp), "--output", str(base / "out")])
    assert code == 0
    return config, inp, base / "out"


def test_signed_zero_keys_are_two_keys_for_the_engine_and_the_checks(spark, verify, monkeypatch, tmp_path):
    """-0.0 and 0.0 are different keys (and workers) to the engine, bit for bit; the checks
    group keys the same way, so the engine's correct output passes."""
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    events = [(s, w, k, float(s + 1)) for s in (1, 2) for w in (0.0, -0.0) for k in (0.0, -0.0)]
    events += [(12, w, k, 5.0) for w in (0.0, -0.0) for k in (0.0, -0.0)]  # closes the first windows
    config, inp, out = replay_case(tmp_path, events)
    aggs = pq.read_table(run_dir(out) / "aggregates").to_pylist()
    keys = {(_bits(r["w"]), _bits(r["k"])) for r in aggs if r["emit_reason"] != "AGGREGATE"}
    assert len(keys) == 4  # two workers x two keys, each its own window
    code, text, err = verify(out, "--config", config, "--input", inp)
    assert code == 0, text + err
    st = statuses(text)
    for name in ("aggregates_unique_emission", "state_unique", "conservation", "replay_reproduces"):
        assert st[name] == "PASS", text


def test_nan_and_infinite_amounts_follow_sparks_order_and_pass(spark, verify, monkeypatch, tmp_path):
    """NaN is greater than every other value (+inf included) and equal to itself, as in
    Spark: a NaN amount makes the window's max and sum NaN, its min ignores it unless every
    amount is NaN. avg is the sum (an IEEE left fold) over the count, so it is NaN or
    infinite exactly when the sum is; these are correct output and pass."""
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    cases = {
        1.0: [NAN],
        2.0: [1.0, NAN],
        3.0: [NAN, 1.0],
        4.0: [INF, -INF],
        5.0: [1.0, INF],
        6.0: [-INF, 1.0],
        7.0: [NAN, -INF],
        8.0: [1e308, 1e308],
        9.0: [-1e308, -1e308],
        10.0: [1e308, 1e308, -INF],
        11.0: [None, NAN],
        12.0: [-0.0, 0.0],
    }
    events = [(j, 0.0, k, v) for k, vals in cases.items() for j, v in enumerate(vals)]
    events += [(12, 0.0, k, 0.5) for k in cases]
    config, inp, out = replay_case(tmp_path, events)
    got = {r["k"]: r for r in pq.read_table(run_dir(out) / "aggregates").to_pylist() if r["emit_reason"] == "WATERMARK"}

    def same(a, b):
        return (a is None and b is None) or (a is not None and b is not None and (a == b or (a != a and b != b)))

    for k, vals in cases.items():  # the engine's min and max are Spark's
        df = spark.createDataFrame([(v,) for v in vals], "v double")
        want = df.selectExpr("min(v) lo", "max(v) hi").first()
        assert same(got[k]["min_v"], want["lo"]) and same(got[k]["max_v"], want["hi"]), (k, got[k], want)
    assert math.isnan(got[4.0]["avg_v"]) and got[8.0]["avg_v"] == INF and math.isnan(got[10.0]["avg_v"])
    code, text, err = verify(out, "--config", config, "--input", inp)
    assert code == 0, text + err
    assert statuses(text)["aggregates_min_avg_max"] == "PASS"


@pytest.mark.parametrize(
    ("what", "row"),
    [
        ("an avg NaN without a NaN or infinite amount", {"min_v": 1.0, "avg_v": NAN, "max_v": 2.0, "count": 2}),
        ("an avg +inf below a small max", {"min_v": 1.0, "avg_v": INF, "max_v": 2.0, "count": 2}),
        ("an avg -inf above a small min", {"min_v": -2.0, "avg_v": -INF, "max_v": 2.0, "count": 2}),
        ("an avg above a NaN-free max", {"min_v": 1.0, "avg_v": 3.0, "max_v": 2.0, "count": 2}),
        ("a NaN min below a number max", {"min_v": NAN, "avg_v": NAN, "max_v": 2.0, "count": 2}),
        ("a max below the min", {"min_v": 0.0, "avg_v": 0.0, "max_v": -1.0, "count": 2}),
    ],
)
def test_min_avg_max_still_fails_on_impossible_values(spark, what, row):
    from windowing import parse_pipeline

    p = parse_pipeline(FLOATS)
    df = spark.createDataFrame([row], "min_v double, avg_v double, max_v double, count long")
    [res] = V.aggregates_checks(p, df, only={"aggregates_min_avg_max"})
    assert not res.passed and res.failure_count == 1, what


NEG_NAN = struct.unpack(">d", bytes.fromhex("fff8000000000000"))[0]
PAYLOAD_NAN = struct.unpack(">d", bytes.fromhex("7ff0000000000001"))[0]


@pytest.mark.parametrize("column", ["k", "w"])
def test_nan_keys_and_workers_of_any_bit_pattern_are_one(spark, verify, monkeypatch, tmp_path, column):
    """NaN, -NaN and a NaN with a payload are one key (one worker) (docs/semantics.md
    section 1), as Spark's shuffle and writers treat them: the first window holds the
    three events and is emitted once, and the checks pass."""
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    nans = [NAN, NEG_NAN, PAYLOAD_NAN, NAN]
    events = [
        (s, 0.0, nan, v) if column == "k" else (s, nan, 0.0, v)
        for s, nan, v in zip((1, 2, 3, 12), nans, (1.0, 2.0, 4.0, 3.0))
    ]
    config, inp, out = replay_case(tmp_path, events)
    aggs = pq.read_table(run_dir(out) / "aggregates").to_pylist()
    emitted = sorted(
        (r["window_start"].second, r["count"], r["sum_v"], r["emit_reason"])
        for r in aggs
        if r["emit_reason"] != "AGGREGATE"
    )
    assert emitted == [(0, 3, 7.0, "WATERMARK"), (10, 1, 3.0, "END_OF_INPUT")]
    assert all(math.isnan(r[column]) for r in aggs)
    code, text, err = verify(out, "--config", config, "--input", inp)
    assert code == 0, text + err


# --------------------------------------------------------------------------- tampered values


def _tamper(out: Path, dataset: str, column: str, change) -> dict:
    """Rewrite one Parquet part of ``out``'s current run: ``change`` the first row's
    ``column`` (keeping the schema). Returns the row before the change."""
    for part in sorted((run_dir(out) / dataset).glob("part-*.parquet")):
        table = pq.read_table(part)
        if table.num_rows:
            break
    else:
        raise AssertionError(f"{dataset}: no rows to tamper with")
    before = table.slice(0, 1).to_pylist()[0]
    values = table[column].to_pylist()
    values[0] = change(values[0])
    i = table.schema.get_field_index(column)
    table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
    pq.write_table(table, part)
    (part.parent / f".{part.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old bytes
    return before


TAMPERS = {
    "sum_amount + 1000": ("aggregates", "sum_amount", lambda v: v + 1000),
    "a lowered min_amount": ("aggregates", "min_amount", lambda v: v - 0.5),
    "unique_events - 1": ("aggregates", "unique_events", lambda v: v - 1),
    "an edited late row": ("late_events", "amount", lambda v: (v or 0) + 1),
}


@pytest.mark.parametrize("what", list(TAMPERS))
def test_verify_with_input_recomputes_and_catches_changed_values(verify, replayed, tmp_path, what):
    r = replayed("clicks")
    out = copy_tree(r.out2, tmp_path / "out")
    dataset, column, change = TAMPERS[what]
    _tamper(out, dataset, column, change)
    args = (out, "--config", r.config, "--input", r.day2, "--state-in", r.out1)
    if what == "sum_amount + 1000":  # every other check passes: only the recompute sees it
        code, text, err = verify(*args)
        st = statuses(text)
        assert {n for n, s in st.items() if s != "PASS"} == {"replay_reproduces"}, text
    else:
        code, text, err = verify(*args, "--check", "replay_reproduces")
        st = statuses(text)
    assert code == 1 and st["replay_reproduces"] == "FAIL", text + err
    assert "replay_reproduces" in err
    [res] = [ln for ln in text.splitlines() if ln.startswith("replay_reproduces")]
    assert res.split()[2] == "2", res  # the tampered row in the output, the true one in the replay
    assert f'"dataset": "{dataset}"' in text


def test_verify_with_input_passes_on_the_untouched_copy(verify, replayed, tmp_path):
    r = replayed("sessions")
    out = copy_tree(r.out2, tmp_path / "out")
    code, text, err = verify(
        out, "--config", r.config, "--input", r.day2, "--state-in", r.out1, "--check", "replay_reproduces", "--json"
    )
    assert code == 0, text + err
    [doc] = json.loads(text)
    assert doc["name"] == "replay_reproduces" and doc["status"] == "PASS"


def test_recompute_needs_the_state_the_replay_started_from(verify, replayed):
    r = replayed("clicks")
    code, text, err = verify(r.out2, "--config", r.config, "--input", r.day2, "--check", "replay_reproduces")
    assert code == 1 and statuses(text)["replay_reproduces"] == "FAIL", text + err


def test_recompute_flushes_as_the_replay_did(spark, verify, monkeypatch, tmp_path):
    """The pipeline does not flush; the replay was run with --flush-at-end: verify must be
    told (--flush-at-end), and says so when the output holds END_OF_INPUT emissions."""
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    config, inp = write_case(tmp_path, [(1, 0.0, 1.0, 1.0), (2, 0.0, 2.0, 2.0)])
    doc = yaml.safe_load(config.read_text())
    doc["replay"]["flushAtEnd"] = False
    config.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    assert (
        cli.main(["replay", "--config", str(config), "--input", str(inp), "--output", str(out), "--flush-at-end"]) == 0
    )
    code, text, err = verify(out, "--config", config, "--input", inp, "--check", "replay_reproduces")
    assert code == 1 and "was it replayed with --flush-at-end?" in text, text + err
    code, text, err = verify(out, "--config", config, "--input", inp, "--check", "replay_reproduces", "--flush-at-end")
    assert code == 0, text + err


def test_without_input_there_is_nothing_to_recompute(verify, replayed):
    r = replayed("clicks")
    code, text, err = verify(r.out2, "--config", r.config, "--check", "replay_reproduces")
    assert code == 2, text + err
    assert "replay_reproduces" in err and "no input given" in err


# --------------------------------------------------------------------------- metrics


def test_a_requested_check_that_cannot_run_is_an_error(verify, replayed, tmp_path):
    """A run folder read as it is, without metrics.json (nor a commit record to carry
    them): --check metrics_consistent cannot run, which is not a pass."""
    r = replayed("clicks")
    run = copy_tree(run_dir(r.out2), tmp_path / "run")
    shutil.rmtree(run / "metrics.json")
    code, text, err = verify(run, "--config", r.config, "--check", "metrics_consistent")
    assert code == 2, text + err
    assert "0 of 0 checks passed" not in text
    assert "metrics_consistent" in err and "no metrics" in err and "metrics.json" in err


@pytest.mark.parametrize("garbage", [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2]"])
def test_garbage_metrics_json_is_an_error_naming_the_file(verify, replayed, tmp_path, garbage):
    r = replayed("clicks")
    out = copy_tree(r.out2, tmp_path / "out")
    metrics = run_dir(out) / "metrics.json"
    [part] = metrics.glob("part-*")
    part.write_bytes(garbage)
    for crc in metrics.glob(".*.crc"):
        crc.unlink()
    code, text, err = verify(out, "--config", r.config, "--check", "metrics_consistent")
    assert code == 2, text + err
    [line] = err.strip().splitlines()
    assert line.startswith(f"rewindow: error: {metrics}") or line.startswith(f"rewindow: error: file:{metrics}"), line
