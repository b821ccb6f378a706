"""``windowing.reconcile``: a replay against the live pipeline's output (issue 12).

The "live" output is made by replaying generated history (``windowing.sample``) through
the example pipeline ``clicks-hourly`` (idle timeout: windows emitted ``IDLE`` and again
later), then perturbed in known ways: rows dropped and added, counts and sums changed,
floats shifted by less and by more than the tolerance, columns renamed through the
mapping, the emission (and emit time) column left out. Each test asserts that the
report finds exactly those differences, in the right categories, and no others.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from windowing import command_line
from windowing.config import ConfigError, parse_pipeline
from windowing.config.reconcile import parse_reconcile
from windowing.durations import DAY_MS
from windowing.reconcile import cli as reconcile_cli
from windowing.reconcile.compare import reconcile
from windowing.reconcile.live import load_reconcile
from windowing.reconcile.outputs import read_reconcile, write_reconcile
from windowing.reconcile.vocabulary import (
    CONFLICTING_DUPLICATE,
    DUPLICATE_IN_LIVE,
    EMIT_REASON,
    EXTRA_IN_REPLAY,
    FLOAT_ROUNDING,
    LATE_IN_LIVE,
    LATE_IN_REPLAY,
    MISSING_IN_REPLAY,
    NULL_IN_LIVE,
    PARTITION_EDGE,
    VALUE_MISMATCH,
)
from windowing.runner.replay import replay
from windowing.sample import generate_history
from windowing.storage.errors import InputError, OutputError
from windowing.storage.inputs import read_events
from windowing.storage.outputs import read_outputs, write_outputs

ROOT = Path(__file__).resolve().parents[3]
START = datetime(2024, 2, 5, tzinfo=timezone.utc)
START_MS = int(START.timestamp() * 1000)
EDGES = [START, START + timedelta(days=1), START + timedelta(days=2)]


def _clicks_doc() -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "pipelines" / "clicks-hourly.yaml").read_text())
    doc["source"].pop("path")
    doc.pop("reconcile")  # the example's block points at the quick start's live output; tests give their own
    return doc


PIPELINE = parse_pipeline(_clicks_doc())

#: The live sink's names for the replay's columns (renamed through the mapping).
RENAMED = {
    "worker": "worker_id",
    "key": "user",
    "windowStart": "ws",
    "windowEnd": "we",
    "emission": "emission_no",
    "emitTime": "emitted_at",
}
RENAMED_AGGREGATES = {
    "count": "n",
    "sum_amount": "total",
    "min_amount": "lo",
    "max_amount": "hi",
    "unique_events": "uniq",
}
#: The live frame: window start and emit time as epoch ms, window end as a timestamp.
LIVE_SCHEMA = (
    "worker_id int, user string, ws long, we_ms long, n long, total double, lo double, hi double, "
    "uniq long, emission_no long, emitted_ms long"
)


def _mapping(emission: bool = True, emit_time: bool = True) -> dict:
    columns = {k: v for k, v in RENAMED.items() if (emission or k != "emission") and (emit_time or k != "emitTime")}
    return {"columns": {**columns, "aggregates": dict(RENAMED_AGGREGATES)}}


@pytest.fixture(scope="module")
def replayed(spark, tmp_path_factory):
    """Two days of generated history replayed in one go, written and read back; the
    replay's windows as plain rows (times in epoch ms) and late rows per window."""
    from pyspark.sql import functions as F

    root = tmp_path_factory.mktemp("reconcile")
    generate_history(root / "events", START, days=2, events_per_day=2_500, keys=30, seed=5)
    result = replay(spark, PIPELINE, read_events(spark, str(root / "events")))
    write_outputs(result, str(root / "replay"), pipeline=PIPELINE)
    result.unpersist()
    out = read_outputs(spark, str(root / "replay"))
    rows = [
        r.asDict()
        for r in out.aggregates.select(
            "partition",
            "user_id",
            F.unix_millis("window_start").alias("ws"),
            F.unix_millis("window_end").alias("we"),
            "count",
            "sum_amount",
            "min_amount",
            "max_amount",
            "unique_events",
            "emission",
            F.unix_millis("emit_time").alias("emit_ms"),
            "emit_reason",
        ).collect()
    ]
    rows.sort(key=lambda r: (r["partition"], r["user_id"], r["ws"], r["emission"]))
    late = Counter(
        (r["partition"], r["user_id"], r["ws"])
        for r in out.late_events.select("partition", "user_id", F.unix_millis("window_start").alias("ws")).collect()
    )
    return {"root": root, "out": out, "rows": rows, "late": late}


def _identity(r) -> tuple:
    return r["user_id"], r["ws"], r["emission"]


def _emissions(rows) -> Counter:
    return Counter((r["partition"], r["user_id"], r["ws"]) for r in rows)


def _live(spark, rows, emission: bool = True, emit_time: bool = True):
    """The live side from replay-shaped rows, under the live sink's names."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(
        [
            (
                r["partition"],
                r["user_id"],
                r["ws"],
                r["we"],
                r["count"],
                r["sum_amount"],
                r["min_amount"],
                r["max_amount"],
                r["unique_events"],
                r["emission"],
                r["emit_ms"],
            )
            for r in rows
        ],
        LIVE_SCHEMA,
    )
    df = (
        df.withColumn("we", F.timestamp_millis("we_ms"))
        .withColumn("emitted_at", F.timestamp_millis("emitted_ms"))
        .drop("we_ms", "emitted_ms")
    )
    if not emission:
        df = df.drop("emission_no")
    if not emit_time:
        df = df.drop("emitted_at")
    return df


def _report(result) -> dict[tuple, tuple]:
    """(key, window start ms, emission) -> (category, differing, explanations) of every mismatch row."""
    from pyspark.sql import functions as F

    rows = result.mismatches.select(
        "user_id", F.unix_millis("window_start").alias("ws"), "emission", "category", "differing", "explanations"
    ).collect()
    report = {}
    for r in rows:
        ident = (r["user_id"], r["ws"], r["emission"])
        assert ident not in report, f"two mismatch rows for {ident}"
        report[ident] = (r["category"], tuple(sorted(r["differing"])), tuple(sorted(r["explanations"])))
    return report


def _details(result) -> dict[tuple, str]:
    from pyspark.sql import functions as F

    return {
        (r["user_id"], r["ws"], r["emission"]): r["detail"]
        for r in result.mismatches.select(
            "user_id", F.unix_millis("window_start").alias("ws"), "emission", "detail"
        ).collect()
    }


def _pick(rows, n, used, where=lambda r: True):
    """``n`` rows (in the fixture's order) not used yet, of windows emitted once."""
    once = _emissions(rows)
    out = [
        r for r in rows if _identity(r) not in used and once[(r["partition"], r["user_id"], r["ws"])] == 1 and where(r)
    ][:n]
    assert len(out) == n, "the generated history has too few such windows"
    used.update(_identity(r) for r in out)
    return out


def _perturb(replayed) -> tuple[list[dict], dict[tuple, tuple]]:
    """The live rows with every kind of perturbation, and the report they must give.

    Perturbed rows are of windows emitted once and without late events, so the report
    holds no explanation besides the float rounding one (the explanations have their
    own tests)."""
    rows = [dict(r) for r in replayed["rows"]]
    late = replayed["late"]
    used: set = set()
    plain = lambda r: late[(r["partition"], r["user_id"], r["ws"])] == 0  # noqa: E731
    expected: dict[tuple, tuple] = {}
    dropped = _pick(rows, 3, used, plain)
    for r in dropped:
        expected[_identity(r)] = (EXTRA_IN_REPLAY, (), ())
    changes = [
        ("count", lambda v: v + 1, ("count",), ()),
        ("sum_amount", lambda v: v + 10.0, ("sum_amount",), ()),
        ("sum_amount", lambda v: v * (1 + 1e-12), None, None),  # within the tolerance: no difference
        ("sum_amount", lambda v: v * (1 + 1e-8), ("sum_amount",), (FLOAT_ROUNDING,)),  # past it, still rounding
        ("max_amount", lambda v: v + 0.5, ("max_amount",), ()),
    ]
    for column, change, differing, explanations in changes:
        for r in _pick(rows, 2, used, plain):
            r[column] = change(r[column])
            if differing is not None:
                expected[_identity(r)] = (VALUE_MISMATCH, differing, explanations)
    live = [r for r in rows if r not in dropped]
    base = max(r["we"] for r in rows)
    for i in range(2):  # windows the replay never had
        ws = base + i * 3_600_000
        live.append(
            {
                "partition": 0,
                "user_id": "user-ghost",
                "ws": ws,
                "we": ws + 3_600_000,
                "count": 4,
                "sum_amount": 12.5,
                "min_amount": 1.0,
                "max_amount": 5.0,
                "unique_events": 4,
                "emission": 1,
                "emit_ms": ws + 3_605_000,
                "emit_reason": "WATERMARK",
            }
        )
        expected[("user-ghost", ws, 1)] = (MISSING_IN_REPLAY, (), ())
    return live, expected


def test_self_match_is_complete(spark, replayed):
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(
        spark, PIPELINE, spec, replayed["out"].aggregates, _live(spark, replayed["rows"]), replayed["out"].late_events
    )
    try:
        f = result.figures
        assert f["match"] == f["compared"] == f["replay_rows"] == f["live_rows"] == len(replayed["rows"])
        assert f["match_rate"] == 1.0 and f["passed"]
        assert result.mismatches.count() == 0
        # Re-emitted windows are there, and matched emission by emission.
        assert max(_emissions(replayed["rows"]).values()) >= 2
    finally:
        result.unpersist()


@pytest.mark.parametrize(
    "emission, emit_time",
    [
        (True, True),  # matched by the emission column
        (False, True),  # no emission column: numbered in emit order
        (False, False),  # neither: both sides numbered by their values
    ],
)
def test_finds_exactly_the_perturbations(spark, replayed, emission, emit_time):
    live_rows, expected = _perturb(replayed)
    spec = parse_reconcile(_mapping(emission, emit_time), PIPELINE)
    result = reconcile(
        spark,
        PIPELINE,
        spec,
        replayed["out"].aggregates,
        _live(spark, live_rows, emission, emit_time),
        replayed["out"].late_events,
    )
    try:
        assert _report(result) == expected
        f = result.figures
        kinds = Counter(category for category, _, _ in expected.values())
        assert (f["value_mismatch"], f["missing_in_replay"], f["extra_in_replay"]) == (
            kinds[VALUE_MISMATCH],
            kinds[MISSING_IN_REPLAY],
            kinds[EXTRA_IN_REPLAY],
        )
        assert f["compared"] == len(replayed["rows"]) + kinds[MISSING_IN_REPLAY]
        assert f["match"] == f["compared"] - len(expected)
        assert f["match_rate"] == f["match"] / f["compared"] and not f["passed"]
        assert f["explained_by"][FLOAT_ROUNDING] == 2 and f["explained"] == 2
        total = result.summary.where("scope = 'total'").collect()
        assert [(r["compared"], r["match"], r["unexplained"]) for r in total] == [
            (f["compared"], f["match"], len(expected) - 2)
        ]
    finally:
        result.unpersist()


def test_mismatch_rows_carry_both_values(spark, replayed):
    rows = [dict(r) for r in replayed["rows"]]
    target = next(r for r in rows if replayed["late"][(r["partition"], r["user_id"], r["ws"])] == 0)
    replay_count = target["count"]
    target["count"] += 3
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(spark, PIPELINE, spec, replayed["out"].aggregates, _live(spark, rows))
    try:
        (row,) = result.mismatches.collect()
        assert (row["category"], row["differing"]) == (VALUE_MISMATCH, ["count"])
        assert (row["live_count"], row["replay_count"]) == (replay_count + 3, replay_count)
        assert (row["partition"], row["user_id"], row["emission"]) == (
            target["partition"],
            target["user_id"],
            target["emission"],
        )
        assert row["replay_emit_reason"] == target["emit_reason"]
        assert f"count: live {replay_count + 3} against replay {replay_count}" in row["detail"]
    finally:
        result.unpersist()


def test_emit_reason_explains_an_idle_flush_the_live_side_did_not_do(spark, replayed):
    """Live emitted once (WATERMARK) what the replay flushed IDLE and emitted again."""
    rows = [dict(r) for r in replayed["rows"]]
    emissions = _emissions(rows)
    first = next(
        r
        for r in rows
        if emissions[(r["partition"], r["user_id"], r["ws"])] == 2 and r["emission"] == 1 and r["emit_reason"] == "IDLE"
    )
    second = next(r for r in rows if _identity(r) == (first["user_id"], first["ws"], 2))
    merged = {
        **second,
        "emission": 1,
        "count": first["count"] + second["count"],
        "sum_amount": first["sum_amount"] + second["sum_amount"],
        "min_amount": min(first["min_amount"], second["min_amount"]),
        "max_amount": max(first["max_amount"], second["max_amount"]),
        "unique_events": first["unique_events"] + second["unique_events"],
    }
    live = [r for r in rows if r is not first and r is not second] + [merged]
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(spark, PIPELINE, spec, replayed["out"].aggregates, _live(spark, live))
    try:
        report = _report(result)
        assert set(report) == {_identity(first), _identity(second)}
        assert report[_identity(first)][0] == VALUE_MISMATCH and EMIT_REASON in report[_identity(first)][2]
        assert report[_identity(second)][0] == EXTRA_IN_REPLAY and EMIT_REASON in report[_identity(second)][2]
        details = [r["detail"] for r in result.mismatches.collect()]
        total = first["count"] + second["count"]
        assert all("IDLE against WATERMARK" in d and f"both count count = {total}" in d for d in details)
    finally:
        result.unpersist()


def test_late_events_explain_a_count_difference(spark, replayed):
    """The live side counted the events the replay marks late; or the replay counted more
    and closed the window by watermark; a window without late events stays unexplained."""
    rows = [dict(r) for r in replayed["rows"]]
    emissions, late = _emissions(rows), replayed["late"]
    once = [r for r in rows if emissions[(r["partition"], r["user_id"], r["ws"])] == 1]
    with_late = next(r for r in once if late[(r["partition"], r["user_id"], r["ws"])] > 0)
    without = next(r for r in once if late[(r["partition"], r["user_id"], r["ws"])] == 0)
    fewer = next(
        r
        for r in once
        if r["emit_reason"] == "WATERMARK" and r["count"] > 1 and r is not with_late and r is not without
    )
    n_late = late[(with_late["partition"], with_late["user_id"], with_late["ws"])]
    with_late["count"] += n_late
    without["count"] += 1
    fewer["count"] -= 1
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(
        spark, PIPELINE, spec, replayed["out"].aggregates, _live(spark, rows), replayed["out"].late_events
    )
    try:
        report = _report(result)
        assert report == {
            _identity(with_late): (VALUE_MISMATCH, ("count",), (LATE_IN_REPLAY,)),
            _identity(without): (VALUE_MISMATCH, ("count",), ()),
            _identity(fewer): (VALUE_MISMATCH, ("count",), (LATE_IN_LIVE,)),
        }
        detail = _details(result)[_identity(with_late)]
        assert f"counted {n_late} more event(s); the replay marks {n_late} event(s) of this window late" in detail
        assert "the recorded batches (1s) may not be the live commit batches" in detail
    finally:
        result.unpersist()


def test_partition_edges(spark, replayed):
    """Figures per partition (placed by the replay's emit time); a window started before
    an edge and emitted after it is explained; live rows outside the edges are out of scope."""
    from pyspark.sql import functions as F

    rows = [dict(r) for r in replayed["rows"]]
    day2, day3 = START_MS + DAY_MS, START_MS + 2 * DAY_MS
    used: set = set()
    across = _pick(rows, 1, used, lambda r: r["ws"] < day2 <= r["emit_ms"])[0]
    inside = _pick(rows, 1, used, lambda r: r["we"] < day2 and r["emit_ms"] < day2)[0]
    also_day2 = _pick(
        rows,
        1,
        used,
        lambda r: r["ws"] >= day2 and r["we"] < day3 and replayed["late"][(r["partition"], r["user_id"], r["ws"])] == 0,
    )[0]
    also_day2["count"] += 1
    outside = {
        **inside,
        "ws": START_MS - DAY_MS,
        "we": START_MS - DAY_MS + 3_600_000,
        "emit_ms": START_MS - DAY_MS + 3_700_000,
    }
    live = [r for r in rows if r is not across and r is not inside] + [outside]
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(
        spark,
        PIPELINE,
        spec,
        replayed["out"].aggregates,
        _live(spark, live),
        replayed["out"].late_events,
        partition_edges=EDGES,
    )
    try:
        assert _report(result) == {
            _identity(across): (EXTRA_IN_REPLAY, (), (PARTITION_EDGE,)),
            _identity(inside): (EXTRA_IN_REPLAY, (), ()),
            _identity(also_day2): (VALUE_MISMATCH, ("count",), ()),
        }
        keys = {
            (r["user_id"], r["ws"], r["emission"]): r["partition_key"]
            for r in result.mismatches.select(
                "user_id", F.unix_millis("window_start").alias("ws"), "emission", "partition_key"
            ).collect()
        }
        assert keys[_identity(across)] == "2024-02-06T00:00:00Z"
        assert keys[_identity(inside)] == "2024-02-05T00:00:00Z"
        f = result.figures
        assert f["live_rows_outside_partitions"] == 1
        assert f["compared"] == len(rows)
        by_day = {p["partition_key"]: p for p in f["partitions"]}
        day1_rows = sum(1 for r in rows if r["emit_ms"] < day2)
        assert by_day["2024-02-05T00:00:00Z"]["compared"] == day1_rows
        assert by_day["2024-02-06T00:00:00Z"]["compared"] == len(rows) - day1_rows
        assert (
            by_day["2024-02-05T00:00:00Z"]["extra_in_replay"],
            by_day["2024-02-06T00:00:00Z"]["extra_in_replay"],
            by_day["2024-02-06T00:00:00Z"]["value_mismatch"],
        ) == (1, 1, 1)
        summary = sorted(result.summary.collect(), key=lambda r: (r["scope"] == "total", r["partition_start"]))
        assert [(r["scope"], r["compared"]) for r in summary] == [
            ("partition", day1_rows),
            ("partition", len(rows) - day1_rows),
            ("total", len(rows)),
        ]
    finally:
        result.unpersist()


def test_a_repeated_live_row_is_missing_in_replay(spark, replayed):
    rows = [dict(r) for r in replayed["rows"]]
    copied = rows[5]
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(spark, PIPELINE, spec, replayed["out"].aggregates, _live(spark, rows + [dict(copied)]))
    try:
        assert _report(result) == {_identity(copied): (MISSING_IN_REPLAY, (), (DUPLICATE_IN_LIVE,))}
        assert (result.figures["match"], result.figures["compared"]) == (len(rows), len(rows) + 1)
    finally:
        result.unpersist()


def test_null_keys_match_null_keys(spark):
    """A null key is an ordinary key (docs/semantics.md section 1) on both sides."""
    replay_rows = [
        (0, None, 0, 3_600_000, 3, "WATERMARK", 1, 3_700_000),
        (0, "a", 0, 3_600_000, 2, "WATERMARK", 1, 3_700_000),
        (1, None, 0, 3_600_000, 5, "IDLE", 1, 3_000_000),
    ]
    schema = "w int, k string, ws long, we long, count long, emit_reason string, emission long, et long"
    pipeline = parse_pipeline(
        {
            "name": "nulls",
            "source": {"arrivalTime": "t", "worker": "w"},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "1h",
                    "keyExtractor": "k",
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    from pyspark.sql import functions as F

    def frame(rows):
        return (
            spark.createDataFrame(rows, schema)
            .withColumn("window_start", F.timestamp_millis("ws"))
            .withColumn("window_end", F.timestamp_millis("we"))
            .withColumn("emit_time", F.timestamp_millis("et"))
        )

    live = frame([replay_rows[0], replay_rows[1], (1, None, 0, 3_600_000, 6, "IDLE", 1, 3_000_000)])
    spec = parse_reconcile({"columns": {"worker": "w", "emission": "emission", "emitTime": "emit_time"}}, pipeline)
    result = reconcile(spark, pipeline, spec, frame(replay_rows), live)
    try:
        rows = result.mismatches.collect()
        assert [(r["w"], r["k"], r["category"], r["live_count"], r["replay_count"]) for r in rows] == [
            (1, None, VALUE_MISMATCH, 6, 5)
        ]
        assert result.figures["match"] == 2
    finally:
        result.unpersist()


def test_a_key_of_several_columns_matches_by_every_part(spark):
    """Issue 49: windows match by the whole tuple (a null part is a value); the live side
    names its column for each part, in the key's order, and mismatches carry each part."""
    replay_rows = [
        ("a", 1, 0, 3_600_000, 3, "WATERMARK", 1, 3_700_000),
        ("a", 2, 0, 3_600_000, 2, "WATERMARK", 1, 3_700_000),
        ("a", None, 0, 3_600_000, 4, "WATERMARK", 1, 3_700_000),
        ("b", 1, 0, 3_600_000, 5, "WATERMARK", 1, 3_700_000),
    ]
    schema = "acct string, region int, ws long, we long, count long, emit_reason string, emission long, et long"
    pipeline = parse_pipeline(
        {
            "name": "composite",
            "source": {"arrivalTime": "t"},
            "emitter": {
                "tumbling-time-window": {
                    "windowSpan": "1h",
                    "keyExtractor": ["acct", "region"],
                    "aggregateDefinition": [{"type": "count"}],
                }
            },
        }
    )
    from pyspark.sql import functions as F

    def frame(rows, names=("acct", "region")):
        return (
            spark.createDataFrame(rows, schema)
            .withColumnsRenamed(dict(zip(("acct", "region"), names)))
            .withColumn("window_start", F.timestamp_millis("ws"))
            .withColumn("window_end", F.timestamp_millis("we"))
            .withColumn("emit_time", F.timestamp_millis("et"))
        )

    # The live side swaps the counts of (a, 1) and (a, 2), and has no (b, 1) but a (b, 2).
    live_rows = [
        ("a", 1, 0, 3_600_000, 2, "", 1, 0),
        ("a", 2, 0, 3_600_000, 3, "", 1, 0),
        ("a", None, 0, 3_600_000, 4, "", 1, 0),
        ("b", 2, 0, 3_600_000, 5, "", 1, 0),
    ]
    spec = parse_reconcile({"columns": {"key": ["live_acct", "live_region"]}}, pipeline)
    assert spec.columns.keys == ("live_acct", "live_region")
    result = reconcile(spark, pipeline, spec, frame(replay_rows), frame(live_rows, ("live_acct", "live_region")))
    try:
        got = sorted(
            (
                (r["acct"], r["region"], r["category"], r["live_count"], r["replay_count"])
                for r in result.mismatches.collect()
            ),
            key=repr,
        )
        assert got == sorted(
            [
                ("a", 1, VALUE_MISMATCH, 2, 3),
                ("a", 2, VALUE_MISMATCH, 3, 2),
                ("b", 1, EXTRA_IN_REPLAY, None, 5),
                ("b", 2, MISSING_IN_REPLAY, 5, None),
            ],
            key=repr,
        )
        assert result.figures["match"] == 1  # (a, null) on both sides
    finally:
        result.unpersist()
    with pytest.raises(ConfigError, match=r"reconcile.columns.key: the key has 2 columns \(acct, region\)"):
        parse_reconcile({"columns": {"key": "live_acct"}}, pipeline)


# --------------------------------------------------------------------------- the live columns


def _live_frame(spark, schema: str):
    return spark.createDataFrame([], schema)


@pytest.mark.parametrize(
    "schema, message",
    [
        # window start missing (renamed to something close): named, with the nearest column
        (
            "user string, window_strat timestamp, window_end timestamp, count long",
            "reconcile.columns.windowStart: column 'window_start' is not in the live aggregates",
        ),
        # a window end of floating-point seconds is not a time
        (
            "user string, window_start timestamp, window_end double, count long",
            "reconcile.columns.windowEnd: live column 'window_end' is double; it must be a timestamp or epoch",
        ),
        # a count held as text
        (
            "user string, window_start timestamp, window_end timestamp, count string",
            "reconcile.columns.aggregates.count: live column 'count' is string; it must be an integer",
        ),
        # a key of another kind than the replay's string key
        (
            "user bigint, window_start timestamp, window_end timestamp, count long",
            "reconcile.columns.key: live column 'user' is bigint; it must be comparable with the replay's 'user_id'",
        ),
    ],
)
def test_live_columns_are_checked_up_front(spark, replayed, schema, message):
    spec = parse_reconcile({"columns": {"key": "user", "aggregates": ["count"]}}, PIPELINE)
    with pytest.raises(ConfigError) as err:
        reconcile(spark, PIPELINE, spec, replayed["out"].aggregates, _live_frame(spark, schema))
    assert message in str(err.value)
    if "window_strat" in schema:
        assert "did you mean 'window_strat'?" in str(err.value)


def test_missing_mapped_aggregate_column_is_named(spark, replayed):
    spec = parse_reconcile(_mapping(), PIPELINE)
    live = _live(spark, replayed["rows"][:3]).withColumnRenamed("total", "totals")
    with pytest.raises(
        ConfigError,
        match=r"reconcile.columns.aggregates.sum_amount: column 'total' is not in the "
        r"live aggregates .*did you mean 'totals'\?",
    ):
        reconcile(spark, PIPELINE, spec, replayed["out"].aggregates, live)


# --------------------------------------------------------------------------- outputs and the command


def test_write_read_and_main_reconcile(spark, replayed, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    live_rows, expected = _perturb(replayed)
    live_dir = tmp_path / "live"
    _live(spark, live_rows).write.parquet(str(live_dir))
    doc = _clicks_doc()
    doc["reconcile"] = {**_mapping(), "live": {"path": str(live_dir)}, "tolerance": {"relative": "1e-9"}}
    config = tmp_path / "clicks.yaml"
    config.write_text(yaml.safe_dump(doc))
    replay_dir = str(replayed["root"] / "replay")

    def run(output, **extra):
        args = argparse.Namespace(config=str(config), replay=replay_dir, live=None, output=str(output), **extra)
        return reconcile_cli.run(args)

    assert run(tmp_path / "rec") == 1  # under the default minimum of 100 %
    printed = capsys.readouterr()
    assert "FAILED" in printed.out and "under the minimum" in printed.err
    written = read_reconcile(spark, str(tmp_path / "rec"))
    assert written.mismatches.count() == len(expected)
    assert written.figures["value_mismatch"] == sum(1 for c, _, _ in expected.values() if c == VALUE_MISMATCH)
    assert written.summary.where("scope = 'total'").collect()[0]["match"] == written.figures["match"]

    assert run(tmp_path / "rec", min_match="90%", partition_edge=["2024-02-05", "2024-02-07"]) == 0
    assert "passed" in capsys.readouterr().out
    assert read_reconcile(spark, str(tmp_path / "rec")).commit.seq == 2  # a new run, committed over the first

    with pytest.raises(OutputError, match="overlaps"):
        run(replayed["root"] / "replay" / "reconcile")


def test_main_reconcile_needs_a_live_side(spark, replayed, tmp_path, monkeypatch):
    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    config = tmp_path / "clicks.yaml"
    config.write_text(yaml.safe_dump(_clicks_doc()))
    args = argparse.Namespace(
        config=str(config), replay=str(replayed["root"] / "replay"), live=None, output=str(tmp_path / "rec")
    )
    with pytest.raises(ConfigError, match="--live: no live aggregates given"):
        reconcile_cli.run(args)
    args.live = str(tmp_path / "nowhere")
    with pytest.raises(InputError, match="nowhere: the live aggregates do not exist"):
        reconcile_cli.run(args)


# --------------------------------------------------------------------------- configuration (no Spark)


def test_defaults():
    spec = parse_reconcile(None, PIPELINE)
    assert spec.columns.keys == ("user_id",) and spec.columns.worker is None and spec.columns.emission is None
    assert (spec.columns.window_start, spec.columns.window_end) == ("window_start", "window_end")
    assert spec.columns.aggregates == tuple((a.name, a.name) for a in PIPELINE.aggregates)
    assert (spec.min_match, spec.blocking, spec.live) == (1.0, False, None)
    assert parse_reconcile(
        {"minMatch": "99.5%", "tolerance": {"absolute": "1e-6", "relative": 0}}, PIPELINE
    ).min_match == pytest.approx(0.995)


def test_a_full_block():
    spec = parse_reconcile(
        {
            "live": {"table": "lake.live_clicks", "format": "delta"},
            **_mapping(),
            "tolerance": {"absolute": 0.01, "relative": 1e-6},
            "minMatch": 0.999,
            "blocking": True,
        },
        PIPELINE,
    )
    assert spec.live.table == "lake.live_clicks" and spec.live.format == "delta"
    assert spec.columns.worker == "worker_id" and spec.columns.emit_time == "emitted_at"
    assert dict(spec.columns.aggregates)["sum_amount"] == "total"
    assert (spec.tolerance.absolute, spec.tolerance.relative, spec.min_match, spec.blocking) == (
        0.01,
        1e-6,
        0.999,
        True,
    )


@pytest.mark.parametrize(
    "block, message",
    [
        ({"colums": {}}, "reconcile.colums: unknown field (did you mean columns?)"),
        (
            {"columns": {"aggregates": {"sum_amout": "total"}}},
            "reconcile.columns.aggregates.sum_amout: the pipeline has no aggregate 'sum_amout'",
        ),
        (
            {"columns": {"windowStart": "t", "windowEnd": "t"}},
            "reconcile.columns.windowEnd: live column 't' is already mapped by reconcile.columns.windowStart",
        ),
        ({"columns": {"emission": 3}}, "reconcile.columns.emission: 3 must be a column name"),
        ({"tolerance": {"relative": -1}}, "reconcile.tolerance.relative: -1 must be a finite number >= 0"),
        ({"tolerance": {"absolute": "tiny"}}, "reconcile.tolerance.absolute: 'tiny' is not a number"),
        ({"minMatch": "150%"}, "reconcile.minMatch: '150%' is not between 0 and 1"),
        ({"blocking": "yes"}, "reconcile.blocking: 'yes' must be true or false"),
        (
            {"live": {"path": "a", "table": "b"}},
            "reconcile.live: give exactly one of reconcile.live.path or reconcile.live.table",
        ),
        ({"live": {"path": "a", "format": "csv"}}, "reconcile.live.schema: format csv needs an explicit schema"),
    ],
)
def test_bad_blocks_name_the_field(block, message):
    with pytest.raises(ConfigError) as err:
        parse_reconcile(block, PIPELINE)
    assert message in str(err.value)


def test_key_and_worker_need_the_pipeline_to_have_them():
    keyless = parse_pipeline(
        {
            "name": "all",
            "source": {"arrivalTime": "t"},
            "emitter": {"tumbling-time-window": {"windowSpan": "1h", "aggregateDefinition": [{"type": "count"}]}},
        }
    )
    with pytest.raises(ConfigError, match="reconcile.columns.key: the pipeline has no keyExtractor"):
        parse_reconcile({"columns": {"key": "user"}}, keyless)
    with pytest.raises(ConfigError, match="reconcile.columns.worker: the pipeline has no source.worker"):
        parse_reconcile({"columns": {"worker": "p"}}, keyless)
    assert parse_reconcile({}, keyless).columns.keys == ()


def test_load_reconcile_reads_the_block_beside_the_pipeline(tmp_path):
    doc = _clicks_doc()
    doc["reconcile"] = {"live": {"path": "s3a://lake/live"}, "minMatch": "99%"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    pipeline, spec = load_reconcile(path)
    assert pipeline == PIPELINE and spec.live.path == "s3a://lake/live" and spec.min_match == 0.99
    doc["reconcile"] = {"minMatch": 2}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"p.yaml: reconcile.minMatch: 2 is not between 0 and 1"):
        load_reconcile(path)


# --------------------------------------------------------------------------- the bench's quick size


def test_self_match_at_the_bench_quick_size(spark, tmp_path):
    """1 million events, 20,000 keys, two days, generated as ``bench/replay_bench.py
    --quick`` does: the replay reconciled with itself is a 100 % match.

    Both times are printed (``-s``): replay and write, then read, reconcile and write. They
    are not compared here: on a shared machine single runs vary by more than the margin at
    this size; docs/reconcile.md gives the medians at full size, as the bench measures them."""
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    from replay_bench import PIPELINE as BENCH

    bench = parse_pipeline(BENCH)
    generate_history(
        tmp_path / "events",
        datetime(2024, 1, 1, tzinfo=timezone.utc),
        2,
        500_000,
        20_000,
        seed=11,
        partitions=8,
        files_per_day=8,
    )
    started = time.monotonic()
    result = replay(spark, bench, read_events(spark, str(tmp_path / "events")))
    write_outputs(result, str(tmp_path / "replay"), pipeline=bench)
    result.unpersist()
    replay_s = time.monotonic() - started

    started = time.monotonic()
    out = read_outputs(spark, str(tmp_path / "replay"))
    spec = parse_reconcile({"columns": {"worker": "partition", "emission": "emission", "emitTime": "emit_time"}}, bench)
    rec = reconcile(
        spark,
        bench,
        spec,
        out.aggregates,
        out.aggregates,
        out.late_events,
        partition_edges=[datetime(2024, 1, d, tzinfo=timezone.utc) for d in (1, 2, 3)],
    )
    write_reconcile(rec, str(tmp_path / "reconcile"), pipeline=bench)
    rec.unpersist()
    reconcile_s = time.monotonic() - started
    print(f"quick size: {rec.figures['compared']:,} windows; replay {replay_s:.1f}s, reconcile {reconcile_s:.1f}s")
    assert rec.figures["match_rate"] == 1.0 and rec.figures["compared"] == rec.figures["replay_rows"] > 300_000
    written = read_reconcile(spark, str(tmp_path / "reconcile"))
    assert written.mismatches.count() == 0
    assert written.figures["match"] == rec.figures["compared"]


def test_the_cli_runs_reconcile_and_load_pipeline_keeps_the_block(spark, replayed, tmp_path, capsys):
    """`rewindow reconcile` through the command line: a self-match exits 0; the pipeline
    YAML with a reconcile: block loads (the block on Pipeline.reconcile, outside the
    fingerprint); a bad block is a usage error naming the field, before Spark is asked."""
    from windowing import cli
    from windowing.config import load_pipeline
    from windowing.storage.outputs import read_outputs

    doc = _clicks_doc()
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(doc))
    doc["reconcile"] = {"live": {"path": str(replayed["root"] / "replay")}, "minMatch": "100%"}
    config = tmp_path / "clicks.yaml"
    config.write_text(yaml.safe_dump(doc))
    pipeline = load_pipeline(config)
    assert pipeline.reconcile.min_match == 1.0
    assert pipeline.fingerprint() == load_pipeline(plain).fingerprint()

    live = tmp_path / "live"
    read_outputs(spark, str(replayed["root"] / "replay")).aggregates.write.parquet(str(live))
    code = cli.main(
        [
            "reconcile",
            "--config",
            str(config),
            "--replay",
            str(replayed["root"] / "replay"),
            "--live",
            str(live),
            "--output",
            str(tmp_path / "rec"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert read_reconcile(spark, str(tmp_path / "rec")).figures["match_rate"] == 1.0

    doc["reconcile"] = {"tolerance": {"relative": "lots"}}
    config.write_text(yaml.safe_dump(doc))
    code = cli.main(
        [
            "reconcile",
            "--config",
            str(config),
            "--replay",
            str(replayed["root"] / "replay"),
            "--live",
            str(live),
            "--output",
            str(tmp_path / "rec2"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "reconcile.tolerance.relative" in err, err
    assert not (tmp_path / "rec2").exists()


# --------------------------------------------------------------------------- explain only what can be proven (issue 26)


def test_null_live_aggregates_conflicting_copies_and_a_summary_that_agrees_with_its_table(spark, replayed):
    """A null live ``count`` was explained LATE_IN_LIVE; two live copies of one emission with
    different counts were "the live side flushed it idle"; a live row without a window start
    was counted in the summary's missing but absent from the table."""
    from pyspark.sql import functions as F

    rows = [dict(r) for r in replayed["rows"]]
    used: set = set()
    nulled = _pick(rows, 1, used, lambda r: r["emit_reason"] == "WATERMARK" and r["count"] > 1)[0]
    nulled["count"] = None
    conflict = _pick(rows, 1, used)[0]
    other_copy = {**conflict, "count": conflict["count"] + 1}
    no_start = {**_pick(rows, 1, used)[0], "ws": None}
    spec = parse_reconcile(_mapping(), PIPELINE)
    result = reconcile(
        spark,
        PIPELINE,
        spec,
        replayed["out"].aggregates,
        _live(spark, rows + [other_copy, no_start]),
        replayed["out"].late_events,
        partition_edges=EDGES,
    )
    try:
        table = [
            r.asDict()
            for r in result.mismatches.select(
                "user_id",
                F.unix_millis("window_start").alias("ws"),
                "emission",
                "category",
                "differing",
                "explanations",
                "detail",
            ).collect()
        ]
        by_id: dict = {}
        for r in table:
            by_id.setdefault((r["user_id"], r["ws"], r["emission"]), []).append(
                (r["category"], tuple(r["differing"]), tuple(r["explanations"]))
            )
        assert by_id[_identity(nulled)] == [(VALUE_MISMATCH, ("count",), (NULL_IN_LIVE,))]
        assert sorted(by_id[_identity(conflict)]) == [
            (MISSING_IN_REPLAY, (), (CONFLICTING_DUPLICATE,)),
            (VALUE_MISMATCH, ("count",), (CONFLICTING_DUPLICATE,)),
        ]
        assert by_id[(no_start["user_id"], None, no_start["emission"])] == [(MISSING_IN_REPLAY, (), ())]
        assert len(table) == 4
        details = " ".join(r["detail"] for r in table)
        assert "flushed it idle" not in details and "late" not in details, details
        # The summary counts the table's rows, category by category, in total and per partition.
        f = result.figures
        for name, category in (
            ("value_mismatch", VALUE_MISMATCH),
            ("missing_in_replay", MISSING_IN_REPLAY),
            ("extra_in_replay", EXTRA_IN_REPLAY),
        ):
            assert f[name] == sum(1 for r in table if r["category"] == category), name
        assert f["explained"] == sum(1 for r in table if r["explanations"])
        assert f["explained_by"][NULL_IN_LIVE] == 1 and f["explained_by"][CONFLICTING_DUPLICATE] == 2
        assert f["explained_by"][LATE_IN_LIVE] == 0 and f["explained_by"][EMIT_REASON] == 0
        [total] = [r for r in result.summary.collect() if r["scope"] == "total"]
        assert (total["value_mismatch"], total["missing_in_replay"]) == (2, 2)
        assert f["compared"] == len(rows) + 2  # the further copy and the row without a start: missing in replay
        assert f["explained_by"][DUPLICATE_IN_LIVE] == 0  # the copies differ: not a plain duplicate
    finally:
        result.unpersist()
