"""``replay_reproduces``: a fresh replay writes the same rows (and row comparisons)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.config import ConfigError, Pipeline
from windowing.contract import END_OF_INPUT_REASON
from windowing.runner.columns import col as _col
from windowing.runner.normalise import StateMismatchError
from windowing.runner.replay import replay
from windowing.validation.base import DEFAULT_SAMPLE_SIZE, JSON_EXACT, CheckResult, jsonable, skip_result

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RECOMPUTE_CHECK = "replay_reproduces"


def canonical_rows(df: DataFrame) -> DataFrame:
    """``df`` with every column in a form whose equality is exact, for row comparisons.

    Spark compares doubles as numbers in set operations and joins (``-0.0 = 0.0``, every
    NaN alike) and cannot compare maps at all; floats become their text (one text per
    double: the sign of zero kept), nested values their JSON (with every timestamp
    digit). Columns are taken in name order.
    """
    cols = []
    for f in sorted(df.schema.fields, key=lambda f: f.name):
        c, t = _col(f.name), f.dataType
        if isinstance(t, (T.FloatType, T.DoubleType)):
            c = c.cast("string")
        elif isinstance(t, (T.ArrayType, T.MapType, T.StructType)):
            c = F.to_json(c, JSON_EXACT)
        cols.append(c.alias(f.name))
    return df.select(*cols)


def _schema_text(df: DataFrame) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def compare_frames(
    dataset: str, found: DataFrame, expected: DataFrame, sample_size: int = DEFAULT_SAMPLE_SIZE
) -> tuple[int, list[dict[str, Any]]]:
    """Rows of ``found`` and ``expected`` that differ, as a multiset (floats bit for bit).

    Returns (differing rows: those only in ``found`` plus those only in ``expected``,
    a sample of them). Different columns or types are one difference, shown.
    """
    a, b = _schema_text(found), _schema_text(expected)
    if a != b:
        diff = {c: {"output": a.get(c), "replay": b.get(c)} for c in sorted(set(a) | set(b)) if a.get(c) != b.get(c)}
        return 1, [{"dataset": dataset, "schema": diff}]
    fa, fb = canonical_rows(found), canonical_rows(expected)
    only_out, only_replay = fa.exceptAll(fb), fb.exceptAll(fa)
    n_out, n_replay = only_out.count(), only_replay.count()
    sample = []
    for side, frame, n in (("output", only_out, n_out), ("replay", only_replay, n_replay)):
        if n:
            sample += [
                {"dataset": dataset, "only_in": side, "row": jsonable(r.asDict(recursive=True))}
                for r in frame.limit(sample_size).collect()
            ]
    # interleave so that a changed row shows both versions first
    outs = [x for x in sample if x["only_in"] == "output"]
    reps = [x for x in sample if x["only_in"] == "replay"]
    mixed = [x for pair in zip(outs, reps) for x in pair] + outs[len(reps) :] + reps[len(outs) :]
    return n_out + n_replay, mixed


def replay_check(
    spark: SparkSession,
    pipeline: Pipeline,
    outputs: Any,
    input_df: DataFrame | None,
    prev_state: DataFrame | None = None,
    flush_at_end: bool | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> CheckResult:
    """The outputs are what a fresh replay of their input writes, row for row.

    Replays ``input_df`` from ``prev_state`` (the engine is deterministic: docs/semantics.md)
    and compares ``aggregates``, ``late_events``, ``rejected`` and ``state`` as multisets
    of rows, every value exactly (floats bit for bit), and ``metrics`` key by key. This is
    the one check that sees a changed value that keeps every rule (a sum + 1000, a lowered
    min); it needs the input and the state the replay started from.
    ``flush_at_end`` defaults to the pipeline's ``replay.flushAtEnd``.
    """
    name = RECOMPUTE_CHECK
    flush = pipeline.flush_at_end if flush_at_end is None else bool(flush_at_end)
    desc = (
        f"a fresh replay of the input (from the given state; flush at end: {str(flush).lower()}) "
        "writes these outputs row for row, floats bit for bit, and these metrics"
    )
    if input_df is None:
        return skip_result(
            name,
            desc,
            "no input given: nothing to recompute from (pass the input, and the state the replay started from)",
        )
    try:
        fresh = replay(spark, pipeline, input_df, state=prev_state, flush_at_end=flush)
    except (ConfigError, StateMismatchError) as exc:
        return CheckResult(name, False, 1, [{"error": f"the input cannot be replayed: {exc}"[:2000]}], desc)
    try:
        total, sample, per = 0, [], {}
        for ds in ("aggregates", "late_events", "rejected", "state"):
            n, rows = compare_frames(ds, getattr(outputs, ds), getattr(fresh, ds), sample_size)
            if n:
                per[ds] = n
                total += n
                sample += rows
        mine = getattr(outputs, "metrics", None)
        if mine:

            def norm(m: Any) -> dict[str, Any]:
                return cast("dict[str, Any]", json.loads(json.dumps(dict(m), sort_keys=True, default=str)))

            a, b = norm(mine), norm(fresh.metrics)
            wrong = [
                {"dataset": "metrics", "metric": k, "output": a.get(k), "replay": b.get(k)}
                for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)
            ]
            if wrong:
                per["metrics"] = len(wrong)
                total += len(wrong)
                sample += wrong
    finally:
        fresh.unpersist()
    if total:
        desc += " (differing: " + ", ".join(f"{ds} {n}" for ds, n in per.items()) + ")"
        if not flush and outputs.aggregates.where(_col("emit_reason") == END_OF_INPUT_REASON).limit(1).count():
            desc += "; the output holds END_OF_INPUT emissions: was it replayed with --flush-at-end?"
    # one sample per differing dataset first, then the rest
    firsts: dict[str, dict[str, Any]] = {}
    for x in sample:
        firsts.setdefault(x["dataset"], x)
    ordered = list(firsts.values()) + [x for x in sample if x not in firsts.values()]
    return CheckResult(name, total == 0, total, ordered[: max(sample_size, len(firsts))], desc)
