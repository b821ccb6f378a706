"""Data-quality checks of a replay's input and outputs, as plain functions over Spark.

Usable from tests, notebooks, ``rewindow verify`` and orchestration alike (nothing here
imports Dagster). Every check returns a :class:`CheckResult`: its name, whether it
passed, how many rows (or groups, or schema errors) failed, a few failing rows as plain
dicts, and what it checks. An asset check turns one into::

    dg.AssetCheckResult(check_name=r.name, passed=r.passed,
                        severity=dg.AssetCheckSeverity.ERROR, metadata=r.metadata())

Three kinds of checks:

* **Schema checks** (``*_schema``) are pandera ``DataFrameSchema`` validations: columns
  present, with the types the kernel writes, required values non-null. pandera on Spark
  does **not** raise: it records its findings in ``df.pandera.errors``. A non-empty
  report is a failure here, and so is a missing one (validation switched off by
  ``PANDERA_VALIDATION_ENABLED``): the checks force pandera on, schema *and* data depth.
* **Rule checks** are Spark expressions evaluated in one aggregation per dataset, so they
  can report how many rows fail and show some of them: window bounds and alignment,
  aggregate consistency (``min <= avg <= max``, ``distinct <= count``, ``count >= 1``),
  emission watermarks, uniqueness of emissions and state rows, the lateness rules, and
  **conservation**: every valid input event is accounted for exactly once.
* **The recompute** (``replay_reproduces``, only when asked for: it costs a replay):
  a fresh replay of the input from the same state writes the same rows, every value
  exact. The rules cannot see a value changed within them (a sum + 1000); this can.

Keys are grouped as the engine tells them apart (:func:`as_key`: ``-0.0`` and ``0.0``
are two keys); values are ordered as Spark orders them (NaN above everything, ``-0.0 ==
0.0``; see ``_min_avg_max_rule`` and docs/data-quality.md).

Conservation, per (worker, key, window) for tumbling and sliding windows and per
(worker, key) for sessions, with *memberships* = the (event, window) pairs an event
belongs to (1 for tumbling and session windows, up to ``ceil(span/slide)`` for sliding)::

    memberships(input_N) - memberships(rejected_N) + open events(state_{N-1})
        == sum(count of emitted windows_N) + open events(state_N) + late rows_N

``AGGREGATE`` snapshot rows are not windows and are left out. When the pipeline has no
plain ``count`` aggregate but the ``atAggregate`` trigger, the snapshots are used
instead: there is exactly one per accepted (event, window), so
``memberships(input_N) - memberships(rejected_N) == snapshots_N + late rows_N``.

Times are compared as integer epoch milliseconds, as in the engine (docs/semantics.md).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from windowing.columns import col as _col
from windowing.columns import epoch_ms
from windowing.config import NUMERIC_AGGREGATES, Aggregate, Lateness, Pipeline, Trigger, WindowType
from windowing.contract import AGGREGATE_REASON, REJECT_REASONS, STATE_KINDS

#: Default of ``max_skew_ms``: how far an event time may be from its arrival time.
DEFAULT_MAX_SKEW_MS = 7 * 86_400_000
#: Failing rows kept in a result.
DEFAULT_SAMPLE_SIZE = 5


# =========================================================================== results


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    ``failure_count`` counts failing rows (rule checks), failing groups (uniqueness,
    conservation) or errors in pandera's report (schema checks). ``sample`` holds up to
    a few failing rows / groups / pandera errors as JSON-friendly dicts. A ``skipped``
    check did not apply (e.g. no input given, or no aggregate to compare) and passed;
    ``skip_reason`` says why (``rewindow verify`` refuses a requested check that skips).
    """

    name: str
    passed: bool
    failure_count: int
    sample: list[dict]
    description: str
    skipped: bool = False
    skip_reason: str = ""
    #: A failure that blocks (stops the run, is not committed); False: a warning.
    blocking: bool = True

    @property
    def status(self) -> str:
        return "SKIP" if self.skipped else ("PASS" if self.passed else ("FAIL" if self.blocking else "WARN"))

    def metadata(self) -> dict[str, Any]:
        """Plain values for an asset check's metadata (or a JSON report)."""
        return {
            "failure_count": self.failure_count,
            "sample": self.sample,
            "description": self.description,
            "skipped": self.skipped,
            "blocking": self.blocking,
        }


def failures(results: Iterable[CheckResult]) -> list[CheckResult]:
    """The results that did not pass (blocking or warnings)."""
    return [r for r in results if not r.passed]


def blocking_failures(results: Iterable[CheckResult]) -> list[CheckResult]:
    """The results that did not pass and block: what stops a partition from being committed."""
    return [r for r in results if not r.passed and r.blocking]


#: Input checks whose failing rows are rows the replay rejects (with a reason): they warn
#: while the rejected rows are within ``quality.maxRejectedShare``, and block above it.
REJECTING_CHECKS = ("input_times_parseable",)


def apply_rejection_policy(pipeline: Pipeline, results: list[CheckResult], input_rows: int | None,
                           rejected_rows: int | None) -> list[CheckResult]:
    """``results`` with the checks of :data:`REJECTING_CHECKS` made warnings when the
    replay's rejected rows are at most ``pipeline.quality.max_rejected_share`` of its
    input, and left blocking (saying why) above it."""
    from dataclasses import replace

    limit = pipeline.quality.max_rejected_share
    out = []
    for r in results:
        if r.name in REJECTING_CHECKS and not r.passed and input_rows is not None and rejected_rows is not None:
            share = rejected_rows / input_rows if input_rows else 0.0
            within = share <= limit
            r = replace(r, blocking=not within, description=(
                f"{r.description}; {rejected_rows:,} of {input_rows:,} rows rejected ({share:.4%}), "
                + ("within" if within else "above")
                + f" quality.maxRejectedShare ({limit:.4%}): " + ("a warning" if within else "blocking")))
        out.append(r)
    return out


def _skip(name: str, description: str, why: str) -> CheckResult:
    return CheckResult(name, True, 0, [], f"{description} (skipped: {why})", skipped=True, skip_reason=why)


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if hasattr(v, "asDict"):
        return _jsonable(v.asDict(recursive=True))
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


# =========================================================================== Spark helpers


def _F():
    from pyspark.sql import functions as F

    return F


def _ms(name: str):
    """A timestamp column as epoch milliseconds (floored, like the engine)."""
    return _F().unix_millis(_col(name))


def _holds(cond):
    """True only when ``cond`` is true (null counts as not holding)."""
    return _F().coalesce(cond, _F().lit(False))


@dataclass(frozen=True)
class _Rule:
    """A row rule: rows where ``applies`` and not ``ok`` fail. ``ok=None``: not applicable."""

    name: str
    description: str
    ok: Any = None
    applies: Any = None
    why_skipped: str = "not applicable to this pipeline"

    def fail(self):
        cond = ~_holds(self.ok)
        return cond if self.applies is None else (_holds(self.applies) & cond)


def _wanted(only, name: str) -> bool:
    return only is None or name in only


def _evaluate(df, rules: Sequence[_Rule], sample_size: int, only=None) -> list[CheckResult]:
    """All rules of one DataFrame in one aggregation; samples only for failing rules."""
    F = _F()
    rules = [r for r in rules if _wanted(only, r.name)]
    active = [r for r in rules if r.ok is not None]
    counts = {}
    if active:
        row = df.agg(*[F.sum(F.when(r.fail(), 1).otherwise(0)).alias(f"r{i}") for i, r in enumerate(active)]).first()
        counts = {r.name: int(row[f"r{i}"] or 0) for i, r in enumerate(active)}
    out = []
    for r in rules:
        if r.ok is None:
            out.append(_skip(r.name, r.description, r.why_skipped))
            continue
        n = counts[r.name]
        failing = df.where(r.fail()).limit(sample_size).collect() if n else []
        sample = [_jsonable(x.asDict(recursive=True)) for x in failing]
        out.append(CheckResult(r.name, n == 0, n, sample, r.description))
    return out


def _has_float(dtype) -> bool:
    from pyspark.sql import types as T

    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return True
    if isinstance(dtype, T.ArrayType):
        return _has_float(dtype.elementType)
    if isinstance(dtype, T.MapType):
        return _has_float(dtype.keyType) or _has_float(dtype.valueType)
    if isinstance(dtype, T.StructType):
        return any(_has_float(f.dataType) for f in dtype.fields)
    return False


#: ``to_json`` options that keep every timestamp digit (the default drops microseconds).
_JSON_EXACT = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
               "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"}


def as_key(c, dtype):
    """A worker or key column as the engine tells keys apart, for grouping.

    The engine groups keys by value with floats compared bit for bit (Arrow hashing):
    ``-0.0`` and ``0.0`` are two keys. Spark's ``groupBy`` normalises ``-0.0`` to ``0.0``
    (and every NaN to one NaN), which would merge two of the engine's keys into one; a
    float's text form keeps them apart (``CAST(-0.0 AS STRING)`` is ``-0.0``, and
    distinct doubles have distinct texts). Every NaN is one key: Spark writes one NaN
    bit pattern, so no output could tell NaNs apart anyway. Floats nested in arrays,
    maps or structs go through ``to_json`` the same way; other types group as they are.
    """
    from pyspark.sql import types as T

    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return c.cast("string")
    if _has_float(dtype):
        return _F().to_json(c, _JSON_EXACT)
    return c


def _duplicates(name: str, description: str, df, cols: list[str], sample_size: int) -> CheckResult:
    F = _F()
    types = {f.name: f.dataType for f in df.schema.fields}
    dup = (df.groupBy(*[as_key(_col(c), types[c]).alias(c) for c in cols])
           .agg(F.count(F.lit(1)).alias("copies")).where(F.col("copies") > 1))
    n = dup.count()
    sample = [_jsonable(r.asDict(recursive=True)) for r in dup.limit(sample_size).collect()] if n else []
    return CheckResult(name, n == 0, n, sample, description)


# =========================================================================== pandera schemas


def _pandera_check(name: str, description: str, schema, df, sample_size: int) -> CheckResult:
    """Validate ``df`` with a pandera pyspark schema; any recorded error fails the check."""
    from pandera.config import ValidationDepth, config_context
    from pandera.errors import SchemaError, SchemaErrors

    try:
        with config_context(validation_enabled=True, validation_depth=ValidationDepth.SCHEMA_AND_DATA):
            validated = schema.validate(df, lazy=True)
        report = validated.pandera.errors
    except (SchemaError, SchemaErrors) as exc:  # pandera versions that raise after all
        return CheckResult(name, False, 1, [{"error": str(exc)[:2000]}], description)
    if report is None:  # validation did not run: never a pass
        return CheckResult(name, False, 1, [{"error": "pandera recorded no report (validation disabled?)"}],
                           description)
    errors = [
        {"scope": scope, "reason": reason, **{k: _jsonable(v) for k, v in e.items()}}
        for scope, by_reason in dict(report).items()
        for reason, items in dict(by_reason).items()
        for e in items
    ]
    return CheckResult(name, not errors, len(errors), errors[:sample_size], description)


def _schema_check(name: str, description: str, skip_description: str, schema_of, pipeline: Pipeline, df,
                  input_types: dict | None, sample_size: int, only) -> list[CheckResult]:
    """An output's pandera schema check, skipped when the input column types are unknown."""
    if not _wanted(only, name):
        return []
    if input_types is None:
        return [_skip(name, skip_description, "input types unknown")]
    return [_pandera_check(name, description, schema_of(pipeline, input_types), df, sample_size)]


def _schema(columns: dict, name: str):
    import pandera.pyspark as pa

    return pa.DataFrameSchema(columns, name=name, strict=False)


def _column(dtype, nullable=True, checks=None):
    import pandera.pyspark as pa

    return pa.Column(dtype, nullable=nullable, checks=checks or None, required=True)


def input_schema(pipeline: Pipeline, input_types: dict | None = None):
    """pandera schema of a pipeline's input events.

    Every configured column is required; time columns must be a timestamp, date, integer
    (epoch ms) or string, a batch column an integer, a sum/avg column a number, other
    aggregated columns anything but a nested or binary type. Null times are not the
    schema's business: those rows are rejected by the replay and flagged by
    ``input_times_parseable``. ``input_types`` (the frame's own types) lets an acceptable type stand;
    an unacceptable one is checked against the canonical type, so pandera reports it.
    """
    from pyspark.sql import types as T

    types = input_types or {}
    src, w = pipeline.source, pipeline.window
    integral = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
    numeric = integral + (T.FloatType, T.DoubleType, T.DecimalType)
    times = integral + (T.TimestampType, T.TimestampNTZType, T.DateType, T.StringType)
    nested = (T.ArrayType, T.MapType, T.StructType, T.BinaryType)

    def want(col, accepted, canonical):
        t = types.get(col)
        return t if isinstance(t, accepted) else canonical

    cols: dict[str, Any] = {}
    cols[src.arrival_time] = _column(want(src.arrival_time, times, T.TimestampType()))
    if w.event_time:
        cols.setdefault(w.event_time, _column(want(w.event_time, times, T.TimestampType())))
    if src.batch_column:
        cols.setdefault(src.batch_column, _column(want(src.batch_column, integral, T.LongType())))
    for c in (*src.arrival_order, src.worker, w.key):
        if c:
            cols.setdefault(c, _column(None))
    for a in pipeline.aggregates:
        if a.column is None:
            continue
        if a.type in NUMERIC_AGGREGATES:
            cols[a.column] = _column(want(a.column, numeric, T.DoubleType()))
        elif a.column not in cols:
            t = types.get(a.column)
            cols[a.column] = _column(T.StringType() if isinstance(t, nested) else None)
    return _schema(cols, f"{pipeline.name}.input")


def _spec(pipeline: Pipeline, input_types: dict):
    """The kernel's output schemas (as Spark types) for these input types."""
    from pyspark.sql.pandas.types import to_arrow_type

    from windowing.kernel import Spec

    return Spec(pipeline=pipeline, input_types={c: to_arrow_type(t, timezone="UTC") for c, t in input_types.items()})


def _spark_fields(arrow_schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema, prefer_timestamp_ntz=False).fields


def _output_schema(name: str, arrow_schema, not_null: set[str], extra_checks: dict | None = None):
    cols = {}
    for f in _spark_fields(arrow_schema):
        cols[f.name] = _column(f.dataType, nullable=f.name not in not_null, checks=(extra_checks or {}).get(f.name))
    return _schema(cols, name)


def aggregates_schema(pipeline: Pipeline, input_types: dict):
    """pandera schema of ``aggregates`` (kernel ``Spec.aggregates_schema``)."""
    import pandera.pyspark as pa

    spec = _spec(pipeline, input_types)
    not_null = {"window_start", "window_end", "emit_reason", "emit_batch", "emit_time", "emission"}
    not_null |= {a.name for a in pipeline.aggregates if a.type in ("count", "distinct")}
    return _output_schema(f"{pipeline.name}.aggregates", spec.aggregates_schema(), not_null,
                          {"emission": [pa.Check.ge(1)]})


def late_schema(pipeline: Pipeline, input_types: dict):
    """pandera schema of ``late_events`` (kernel ``Spec.late_schema``)."""
    import pandera.pyspark as pa

    spec = _spec(pipeline, input_types)
    return _output_schema(f"{pipeline.name}.late_events", spec.late_schema(),
                          {"batch", "window_start", "window_end", "watermark", "lateness_ms"},
                          {"lateness_ms": [pa.Check.ge(0)]})


def state_schema(pipeline: Pipeline, input_types: dict):
    """pandera schema of ``state`` (kernel ``Spec.state_schema``); the kinds are the
    ``state_kind`` rule's, which can show the offending rows."""
    spec = _spec(pipeline, input_types)
    return _output_schema(f"{pipeline.name}.state", spec.state_schema(), {"state_kind", "fingerprint"})


def rejected_schema(pipeline: Pipeline, input_types: dict):
    """pandera schema of ``rejected``: the input columns and a non-null ``reason``."""
    from pyspark.sql import types as T

    cols = {c: _column(t) for c, t in input_types.items()}
    cols["reason"] = _column(T.StringType(), nullable=False)
    return _schema(cols, f"{pipeline.name}.rejected")


# =========================================================================== the checks


def _aggregate_names(pipeline: Pipeline, typ: str, column: str | None = ...) -> list[Aggregate]:
    return [a for a in pipeline.aggregates if a.type == typ and (column is ... or a.column == column)]


def _plain_count(pipeline: Pipeline) -> Aggregate | None:
    found = _aggregate_names(pipeline, "count", None)
    return found[0] if found else None


def _group_columns(pipeline: Pipeline) -> list[str]:
    return [c for c in (pipeline.source.worker, pipeline.window.key) if c]


def allowed_reasons(pipeline: Pipeline) -> list[str]:
    """The ``emit_reason`` values this pipeline's output may hold."""
    w = pipeline.window
    out = []
    if Trigger.AT_WINDOW_END in pipeline.triggers:
        out += ["WATERMARK", "END_OF_INPUT"]
        if w.idle_timeout_ms is not None:
            out.append("IDLE")
        if w.type is WindowType.SESSION and w.maximum_duration_ms:
            out.append("MAX_DURATION")
    if Trigger.AT_AGGREGATE in pipeline.triggers:
        out.append(AGGREGATE_REASON)
    return out


def input_checks(pipeline: Pipeline, events_df, max_skew_ms: int = DEFAULT_MAX_SKEW_MS,
                 sample_size: int = DEFAULT_SAMPLE_SIZE, only=None) -> list[CheckResult]:
    """Checks of a pipeline's input events.

    * ``input_schema`` (pandera): configured columns present with usable types, arrival
      time non-null;
    * ``input_times_parseable``: arrival and event times present and parseable (rows
      failing this go to ``rejected``);
    * ``input_event_time_skew``: ``|event time - arrival time| <= max_skew_ms``.
    """
    F = _F()
    types = {f.name: f.dataType for f in events_df.schema.fields}
    out = []
    if _wanted(only, "input_schema"):
        out.append(_pandera_check("input_schema", "configured columns present, with usable types",
                                  input_schema(pipeline, types), events_df, sample_size))
    src, w = pipeline.source, pipeline.window
    names = [src.arrival_time] + ([w.event_time] if w.event_time else [])
    if any(c not in types for c in names):
        missing = ", ".join(c for c in names if c not in types)
        for n in ("input_times_parseable", "input_event_time_skew"):
            if _wanted(only, n):
                out.append(_skip(n, "arrival/event times present, parseable and close", f"missing {missing}"))
        return out
    arr = epoch_ms(src.arrival_time, types[src.arrival_time])
    evt = epoch_ms(w.event_time, types[w.event_time]) if w.event_time else arr
    rules = [
        _Rule("input_times_parseable",
              "arrival and event times present and parseable (failing rows are rejected by the replay)",
              arr.isNotNull() & evt.isNotNull()),
        _Rule("input_event_time_skew",
              f"|event time - arrival time| <= {max_skew_ms} ms (max_skew)",
              F.abs(evt - arr) <= F.lit(int(max_skew_ms)) if w.event_time else None,
              applies=arr.isNotNull() & evt.isNotNull(),
              why_skipped="processing time: event time is the arrival time"),
    ]
    return out + _evaluate(events_df, rules, sample_size, only)


def aggregates_checks(pipeline: Pipeline, aggregates, input_types: dict | None = None,
                      sample_size: int = DEFAULT_SAMPLE_SIZE, only=None) -> list[CheckResult]:
    """Checks of the ``aggregates`` output (emitted windows and ``AGGREGATE`` snapshots)."""
    F = _F()
    w = pipeline.window
    session = w.type is WindowType.SESSION
    out = _schema_check("aggregates_schema",
                         "columns and types of the kernel's aggregates schema; "
                         "bounds, reason, batch, emit time, emission non-null; emission >= 1",
                         "columns and types of aggregates", aggregates_schema, pipeline, aggregates, input_types,
                         sample_size, only)
    ws, we, wm = _ms("window_start"), _ms("window_end"), _ms("emit_watermark")
    reason = _col("emit_reason")
    rules = [
        _Rule("aggregates_window_bounds",
              "window_end >= window_start (sessions)" if session else "window_end > window_start",
              (we >= ws) if session else (we > ws)),
    ]
    if w.type is WindowType.SESSION:
        rules.append(_Rule("aggregates_window_span", "session span window_end - window_start < maximumDuration",
                           (we - ws) < F.lit(w.maximum_duration_ms) if w.maximum_duration_ms else None,
                           why_skipped="sessions without maximumDuration have no span bound"))
    else:
        step = w.span_ms if w.type is WindowType.TUMBLING else w.slide_ms
        rules.append(_Rule("aggregates_window_span",
                           f"window_end - window_start == {w.span_ms} ms and window_start aligned to "
                           f"{step} ms (+ offset {w.offset_ms} ms)",
                           ((we - ws) == F.lit(w.span_ms)) & (F.pmod(ws - F.lit(w.offset_ms), F.lit(step)) == 0)))
    counts = _aggregate_names(pipeline, "count", None)
    rules.append(_Rule("aggregates_count_positive", "count >= 1 (every window holds an event)",
                       _all([_col(a.name) >= 1 for a in counts]), why_skipped="no plain count aggregate"))
    rules.append(_min_avg_max_rule(pipeline))
    rules.append(_distinct_rule(pipeline))
    gap = w.idle_timeout_ms if session else 0
    wm_ok = F.when(reason == "WATERMARK", wm >= we + F.lit(gap))
    if session and w.maximum_duration_ms:
        wm_ok = wm_ok.when(reason == "MAX_DURATION", wm >= ws + F.lit(w.maximum_duration_ms))
    rules.append(_Rule("aggregates_emit_watermark",
                       "WATERMARK emissions: emit_watermark >= window_end" + (" + gap" if session else "")
                       + ("; MAX_DURATION: emit_watermark >= window_start + maximumDuration"
                          if session and w.maximum_duration_ms else ""),
                       wm_ok.otherwise(F.lit(True))))
    allowed = allowed_reasons(pipeline)
    rules.append(_Rule("aggregates_emit_reason", f"emit_reason in {allowed}", reason.isin(allowed)))
    out += _evaluate(aggregates, rules, sample_size, only)
    key = _group_columns(pipeline) + ["window_start", "window_end", "emission"]
    if _wanted(only, "aggregates_unique_emission"):
        out.append(_duplicates("aggregates_unique_emission",
                               f"({', '.join(key)}) unique among emitted (non-AGGREGATE) rows",
                               aggregates.where(~_holds(reason == AGGREGATE_REASON)), key, sample_size))
    return out


def _all(conds: list):
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = out & c
    return out


def _min_avg_max_rule(pipeline: Pipeline) -> _Rule:
    """min <= avg <= max over one column, with values ordered as Spark orders them.

    * NaN equals NaN and is greater than every other value, +inf included; ``-0.0``
      equals ``0.0``. So a NaN amount makes ``max`` (and the sum) NaN, and ``min``
      ignores it unless every amount is NaN; ``min <= max`` always holds.
    * A finite avg lies within a relative 1e-9 of finite bounds (a float average of
      equal values may round past them).
    * avg is the sum (an IEEE left fold, like Spark's) over the count, so it is NaN or
      infinite exactly when the sum is, which needs a cause the bounds show: NaN needs
      a NaN amount (max NaN) or a +inf and a -inf (each an amount or an overflowing
      sum); +inf needs max +inf or an overflow (count x max >= the largest double) and
      no -inf; -inf the mirror image. Without a plain count any overflow is possible.
    """
    F = _F()
    inf, top = float("inf"), sys.float_info.max
    plain = _plain_count(pipeline)
    n = _col(plain.name).cast("double") if plain is not None else None

    def num(a: Aggregate):
        return _col(a.name).cast("double")

    def nan(x):
        return F.isnan(x)

    def finite(x):
        return ~nan(x) & (F.abs(x) != F.lit(inf))

    def reaches_up(hi):  # the sum can be +inf: an amount is, or it can overflow
        grow = (hi * n >= F.lit(top)) if n is not None else (hi > 0)
        return ~nan(hi) & ((hi == F.lit(inf)) | grow)

    def reaches_down(lo):
        grow = (lo * n <= F.lit(-top)) if n is not None else (lo < 0)
        return ~nan(lo) & ((lo == F.lit(-inf)) | grow)

    def every(conds):
        return _all(conds) if conds else F.lit(True)

    conds = []
    for col in dict.fromkeys(a.column for a in pipeline.aggregates if a.column):
        mins, maxs, avgs = (_aggregate_names(pipeline, t, col) for t in ("min", "max", "avg"))
        for lo in mins:
            for hi in maxs:
                conds.append(F.when(_col(lo.name).isNull() | _col(hi.name).isNull(), True)
                             .otherwise(_col(lo.name) <= _col(hi.name)))
        for av in avgs:
            if not (mins or maxs):
                continue
            a = num(av)
            los, his = [num(x) for x in mins], [num(x) for x in maxs]

            def tol(b):
                return F.lit(1e-9) * F.greatest(F.abs(b), F.lit(1.0))

            within = every([finite(lo) & (lo <= a + tol(lo)) for lo in los]
                           + [finite(hi) & (a - tol(hi) <= hi) for hi in his])
            nan_ok = every([nan(hi) | (reaches_up(hi) & every([reaches_down(lo) for lo in los])) for hi in his])
            up_ok = every([reaches_up(hi) for hi in his] + [~nan(lo) & (lo != F.lit(-inf)) for lo in los])
            down_ok = every([reaches_down(lo) for lo in los] + [~nan(hi) & (hi != F.lit(inf)) for hi in his])
            null = _any([_col(x.name).isNull() for x in (av, *mins, *maxs)])
            conds.append(F.when(null, True).when(nan(a), nan_ok).when(a == F.lit(inf), up_ok)
                         .when(a == F.lit(-inf), down_ok).otherwise(within))
    return _Rule("aggregates_min_avg_max",
                 "min <= avg <= max over the same column (Spark's order: NaN above +inf, -0.0 == 0.0; "
                 "a NaN or infinite avg only with the amounts or overflow that explain it)", _all(conds),
                 why_skipped="no two of min/avg/max over one column")


def _distinct_rule(pipeline: Pipeline) -> _Rule:
    F = _F()
    conds = []
    plain = _plain_count(pipeline)
    for d in _aggregate_names(pipeline, "distinct"):
        same = _aggregate_names(pipeline, "count", d.column)
        for cnt in same or ([plain] if plain else []):
            conds.append(F.when(_col(cnt.name).isNull(), True).otherwise(_col(d.name) <= _col(cnt.name)))
    return _Rule("aggregates_distinct_le_count", "distinct <= count", _all(conds),
                 why_skipped="no distinct aggregate with a count to compare")


def _event_ms_in(pipeline: Pipeline, df):
    """The event time (ms) of rows carrying the input columns, or None if absent."""
    col = pipeline.window.event_time or pipeline.source.arrival_time
    types = {f.name: f.dataType for f in df.schema.fields}
    return epoch_ms(col, types[col]) if col in types else None


def late_checks(pipeline: Pipeline, late, input_types: dict | None = None,
                sample_size: int = DEFAULT_SAMPLE_SIZE, only=None) -> list[CheckResult]:
    """Checks of ``late_events``: the lateness rule of the pipeline's mode, ``lateness_ms``,
    and that each row names a window its event belongs to."""
    F = _F()
    w = pipeline.window
    session = w.type is WindowType.SESSION
    out = _schema_check("late_events_schema", "columns and types of the kernel's late_events schema",
                         "columns and types of late_events", late_schema, pipeline, late, input_types,
                         sample_size, only)
    t = _event_ms_in(pipeline, late)
    ws, we, wm = _ms("window_start"), _ms("window_end"), _ms("watermark")
    no_t = "the event time column is not in late_events"
    if w.lateness is Lateness.WINDOW_CLOSED:
        if session:
            rule = _Rule("late_rule", "WINDOW_CLOSED sessions: event time + gap <= watermark",
                         (t + F.lit(w.idle_timeout_ms) <= wm) if t is not None else None, why_skipped=no_t)
        else:
            rule = _Rule("late_rule", "WINDOW_CLOSED: window_end <= watermark", we <= wm)
    else:
        rule = _Rule("late_rule", "BEFORE_WATERMARK: event time < watermark",
                     (t < wm) if t is not None else None, why_skipped=no_t)
    if session:
        member = (ws == t) & (we == t) if t is not None else None
        member_desc = "session late rows: window_start == window_end == event time"
    else:
        step = w.span_ms if w.type is WindowType.TUMBLING else w.slide_ms
        member = None if t is None else (
            (ws <= t) & (t < we) & ((we - ws) == F.lit(w.span_ms))
            & (F.pmod(ws - F.lit(w.offset_ms), F.lit(step)) == 0))
        member_desc = "the event belongs to the (aligned) window it is late for"
    rules = [
        rule,
        _Rule("late_lateness_ms", "lateness_ms == watermark - event time",
              (_col("lateness_ms") == wm - t) if t is not None else None, why_skipped=no_t),
        _Rule("late_window_membership", member_desc, member, why_skipped=no_t),
    ]
    return out + _evaluate(late, rules, sample_size, only)


def state_checks(pipeline: Pipeline, state, input_types: dict | None = None,
                 sample_size: int = DEFAULT_SAMPLE_SIZE, only=None) -> list[CheckResult]:
    """Checks of ``state``: kinds, one (this pipeline's) fingerprint, window bounds, and
    no duplicate worker, key or window rows."""
    F = _F()
    session = pipeline.window.type is WindowType.SESSION
    out = _schema_check("state_schema",
                         "columns and types of the kernel's state schema; state_kind and fingerprint non-null",
                         "columns and types of state", state_schema, pipeline, state, input_types, sample_size, only)
    kind = _col("state_kind")
    ws, we = _col("window_start_ms"), _col("window_end_ms")
    fp = pipeline.fingerprint()
    bounds = (we >= ws) if session else (we > ws)
    rules = [
        _Rule("state_kind", f"state_kind in {list(STATE_KINDS)}", kind.isin(list(STATE_KINDS))),
        _Rule("state_fingerprint", f"one fingerprint, this pipeline's ({fp})", _col("fingerprint") == F.lit(fp)),
        _Rule("state_window_bounds",
              "window/emitted rows: window_end_ms " + (">=" if session else ">") + " window_start_ms; "
              "open windows hold events >= 1; emitted counters >= 1",
              bounds & F.when(kind == "window", _col("events") >= 1).otherwise(_col("emissions") >= 1),
              applies=kind.isin("window", "emitted")),
    ]
    out += _evaluate(state, rules, sample_size, only)
    if not _wanted(only, "state_unique"):
        return out
    # A window is either open or a re-openable emitted counter, never both, never twice.
    cls = F.when(kind.isin("window", "emitted"), F.lit("window")).otherwise(kind)
    key = _group_columns(pipeline)
    keyed = state.select(cls.alias("state_class"), *[_col(c) for c in key], "window_start_ms", "window_end_ms")
    out.append(_duplicates("state_unique", "no duplicate worker, key or (worker, key, window) rows",
                           keyed, ["state_class", *key, "window_start_ms", "window_end_ms"], sample_size))
    return out


def rejected_checks(pipeline: Pipeline, rejected, input_types: dict | None = None,
                    sample_size: int = DEFAULT_SAMPLE_SIZE, only=None) -> list[CheckResult]:
    """Checks of ``rejected``: the schema and known reasons."""
    out = _schema_check("rejected_schema", "the input columns and a non-null reason",
                         "the input columns and a reason", rejected_schema, pipeline, rejected, input_types,
                         sample_size, only)
    return out + _evaluate(rejected, [_Rule("rejected_reason", f"reason in {list(REJECT_REASONS)}",
                                            _col("reason").isin(list(REJECT_REASONS)))], sample_size, only)


# =========================================================================== conservation


def _memberships(pipeline: Pipeline, df, key_types: dict, sign: int, source: str):
    """One row per (event, window) pair of the rows of ``df`` that can be processed."""
    F = _F()
    w, src = pipeline.window, pipeline.source
    types = {f.name: f.dataType for f in df.schema.fields}
    arr = epoch_ms(src.arrival_time, types[src.arrival_time])
    t = epoch_ms(w.event_time, types[w.event_time]) if w.event_time else arr
    valid = arr.isNotNull() & t.isNotNull()
    if src.batch_column:
        valid = valid & _col(src.batch_column).isNotNull()
    keys = [_col(c).cast(key_types[c]).alias(c) for c in key_types]
    base = df.where(valid).select(*keys, t.alias("__t"))
    tcol = F.col("__t")
    if w.type is WindowType.SESSION:
        ws = we = F.lit(None).cast("long")
        return base.select(*key_types, ws.alias("ws"), we.alias("we"), F.lit(source).alias("source"),
                           F.lit(sign).cast("long").alias("n"))
    S, off = w.span_ms, w.offset_ms
    L = w.span_ms if w.type is WindowType.TUMBLING else w.slide_ms
    last = tcol - F.pmod(tcol - F.lit(off), F.lit(L))  # the latest window start <= t
    k = -(-S // L)  # windows an event can belong to, at most
    starts = F.sequence(last - F.lit((k - 1) * L), last, F.lit(L))
    ex = base.select(*key_types, tcol, F.explode(starts).alias("ws")).where(F.col("ws") + F.lit(S) > tcol)
    return ex.select(*key_types, "ws", (F.col("ws") + F.lit(S)).alias("we"), F.lit(source).alias("source"),
                     F.lit(sign).cast("long").alias("n"))


def conservation_check(pipeline: Pipeline, outputs, input_df, prev_state=None,
                       sample_size: int = DEFAULT_SAMPLE_SIZE) -> CheckResult:
    """Every valid input event is accounted for exactly once (see the module docstring).

    Balances are per (worker, key, window) for tumbling/sliding windows and per
    (worker, key) for sessions; a failing group's sample shows each side.
    """
    F = _F()
    name = "conservation"
    w = pipeline.window
    session = w.type is WindowType.SESSION
    desc = ("input memberships - rejected + open events(previous state) == emitted counts + open events(state) "
            "+ late rows, per " + ("(worker, key)" if session else "(worker, key, window)"))
    if input_df is None:
        return _skip(name, desc, "no input given")
    plain = _plain_count(pipeline)
    by_counts = Trigger.AT_WINDOW_END in pipeline.triggers and plain is not None
    by_snapshots = Trigger.AT_AGGREGATE in pipeline.triggers
    if not (by_counts or by_snapshots):
        return _skip(name, desc, "no plain count aggregate and no atAggregate snapshots to count events")
    in_types = {f.name: f.dataType for f in input_df.schema.fields}
    missing = [c for c in pipeline.input_columns if c not in in_types]
    if missing:
        return _skip(name, desc, f"input lacks configured column(s) {', '.join(missing)}")
    key_types = {c: in_types[c] for c in _group_columns(pipeline)}
    kcols = [_col(c).cast(t).alias(c) for c, t in key_types.items()]

    def rows(df, ws, we, n, source):
        if session:
            ws = we = F.lit(None).cast("long")
        return df.select(*kcols, ws.alias("ws"), we.alias("we"), F.lit(source).alias("source"),
                         n.cast("long").alias("n"))

    parts = [_memberships(pipeline, input_df, key_types, 1, "input"),
             _memberships(pipeline, outputs.rejected, key_types, -1, "rejected"),
             rows(outputs.late_events, _ms("window_start"), _ms("window_end"), F.lit(-1), "late")]
    reason = _col("emit_reason")
    aggs = outputs.aggregates
    checks = []
    if by_counts:
        emitted = aggs.where(~_holds(reason == AGGREGATE_REASON))
        parts.append(rows(emitted, _ms("window_start"), _ms("window_end"), -_col(plain.name), "emitted"))
        st = outputs.state.where(_col("state_kind") == "window")
        parts.append(rows(st, _col("window_start_ms"), _col("window_end_ms"), -_col("events"), "open"))
        if prev_state is not None:
            pst = prev_state.where(_col("state_kind") == "window")
            parts.append(rows(pst, _col("window_start_ms"), _col("window_end_ms"), _col("events"), "prev_open"))
        checks.append("counts")
    if by_snapshots:
        snaps = aggs.where(_holds(reason == AGGREGATE_REASON))
        parts.append(rows(snaps, _ms("window_start"), _ms("window_end"), F.lit(-1), "snapshots"))
        checks.append("snapshots")
    allrows = parts[0]
    for p in parts[1:]:
        allrows = allrows.unionByName(p)
    src = F.col("source")

    def side(*names):
        return F.sum(F.when(src.isin(*names), F.col("n")).otherwise(0))

    aggs_exprs = [side("input").alias("input"), (-side("rejected")).alias("rejected"),
                  side("prev_open").alias("prev_open"), (-side("emitted")).alias("emitted"),
                  (-side("open")).alias("open"), (-side("late")).alias("late"),
                  (-side("snapshots")).alias("snapshots")]
    balance = []
    if by_counts:
        balance.append(("balance", side("input", "rejected", "prev_open", "emitted", "open", "late")))
    if by_snapshots:
        balance.append(("balance_snapshots", side("input", "rejected", "late", "snapshots")))
    group = [as_key(_col(c), t).alias(c) for c, t in key_types.items()] + ([] if session else [_col("ws"), _col("we")])
    g = allrows.groupBy(*group).agg(*aggs_exprs, *[e.alias(n) for n, e in balance])
    bad = g.where(_any([F.col(n) != 0 for n, _ in balance]))
    n = bad.count()
    sample = []
    if n:
        for r in bad.limit(sample_size).collect():
            d = r.asDict(recursive=True)
            for short, full in (("ws", "window_start"), ("we", "window_end")):
                v = d.pop(short, None)
                if v is not None:
                    d[full] = _dt.datetime.fromtimestamp(v / 1000, tz=_dt.timezone.utc)
            sample.append(_jsonable(d))
    if not by_counts:
        desc = ("input memberships - rejected == AGGREGATE snapshots + late rows, per "
                + ("(worker, key)" if session else "(worker, key, window)"))
    return CheckResult(name, n == 0, n, sample, desc + f" (by {' and '.join(checks)})")


def _any(conds):
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out


# =========================================================================== metrics


def metrics_check(pipeline: Pipeline, outputs, input_df=None) -> CheckResult:
    """``metrics.json`` agrees with the datasets it summarises.

    Row counts: windows emitted (in total and per reason), snapshots, late (event,
    window) pairs, rejected and input rows, open windows. Late events: identical input
    rows are late for the same windows (same key, batch and watermark), so a group of
    identical late rows holds copies x windows rows and ``count / distinct windows``
    events. Keys held: distinct keys of the open windows. With ``atWindowEnd``, every
    closed window is emitted (``windows_closed == windows_emitted``). The ``voltsp``
    block: each total is its figure (docs/semantics.md, "Metrics") and the sum of its
    workers.
    """
    from windowing.metrics import CLOSE_REASONS, VOLTSP_METRICS

    F = _F()
    name, desc = "metrics_consistent", "metrics.json counts equal the written datasets' row counts"
    m = getattr(outputs, "metrics", None)
    if not m:
        path = getattr(outputs, "path", None)
        where = f"{str(path).rstrip('/')}/metrics.json is missing" if path else "the outputs carry none"
        carried = " and no commit record carries them" if path else ""
        return _skip(name, desc, f"no metrics: {where}{carried}")
    reason = _col("emit_reason")
    a = outputs.aggregates.agg(
        F.sum(F.when(_holds(reason == AGGREGATE_REASON), 0).otherwise(1)).alias("emitted"),
        F.sum(F.when(_holds(reason == AGGREGATE_REASON), 1).otherwise(0)).alias("snapshots"),
        *[F.sum(F.when(_holds(reason == r), 1).otherwise(0)).alias(r) for r in CLOSE_REASONS]).first()
    late = outputs.late_events
    window_cols = ("window_start", "window_end")
    exact = canonical_rows(late)
    per_row = exact.groupBy(*[_col(c) for c in exact.columns if c not in window_cols]).agg(
        (F.count(F.lit(1)) / F.countDistinct(*[_col(c) for c in window_cols])).alias("events"))
    late_events = per_row.agg(F.sum("events")).first()[0] or 0
    open_windows = outputs.state.where(_col("state_kind") == "window")
    keys = _group_columns(pipeline)
    if keys:
        types = {f.name: f.dataType for f in open_windows.schema.fields}
        held = open_windows.select(*[as_key(_col(c), types[c]).alias(c) for c in keys]).distinct().count()
    else:
        held = min(open_windows.count(), 1)
    emitted = int(a["emitted"] or 0)
    found = {
        "windows_emitted": emitted,
        "emitted_by_reason": {r: int(a[r]) for r in CLOSE_REASONS if a[r]},
        "snapshots_emitted": int(a["snapshots"] or 0),
        "late_event_windows": late.count(),
        "late_events": int(late_events) if float(late_events).is_integer() else late_events,
        "rejected_rows": outputs.rejected.count(),
        "open_windows": open_windows.count(),
        "keys_held": held,
    }
    if Trigger.AT_WINDOW_END in pipeline.triggers:
        found["windows_closed"] = emitted
        found["closed_by_reason"] = found["emitted_by_reason"]
    if input_df is not None:
        found["input_rows"] = input_df.count()
    wrong = [{"metric": k, "metrics.json": m.get(k), "dataset": v} for k, v in found.items() if m.get(k) != v]
    block = m.get("voltsp") or {}
    for metric in VOLTSP_METRICS:
        entry = block.get(metric.name) or {}
        try:
            figure = metric.value(m)
        except (KeyError, TypeError):  # a figure missing from metrics.json
            figure = None
        workers = sum((entry.get("by_worker") or {}).values())
        if entry.get("total") is None or entry.get("total") != figure or workers != entry.get("total"):
            wrong.append({"metric": f"voltsp.{metric.name}", "metrics.json": entry.get("total"),
                          "figures": figure, "sum of workers": workers})
    return CheckResult(name, not wrong, len(wrong), wrong, desc)


# =========================================================================== recompute

RECOMPUTE_CHECK = "replay_reproduces"


def canonical_rows(df):
    """``df`` with every column in a form whose equality is exact, for row comparisons.

    Spark compares doubles as numbers in set operations and joins (``-0.0 = 0.0``, every
    NaN alike) and cannot compare maps at all; floats become their text (one text per
    double: the sign of zero kept), nested values their JSON (with every timestamp
    digit). Columns are taken in name order.
    """
    from pyspark.sql import types as T

    F = _F()
    cols = []
    for f in sorted(df.schema.fields, key=lambda f: f.name):
        c, t = _col(f.name), f.dataType
        if isinstance(t, (T.FloatType, T.DoubleType)):
            c = c.cast("string")
        elif isinstance(t, (T.ArrayType, T.MapType, T.StructType)):
            c = F.to_json(c, _JSON_EXACT)
        cols.append(c.alias(f.name))
    return df.select(*cols)


def _schema_text(df) -> dict[str, str]:
    return {f.name: f.dataType.simpleString() for f in df.schema.fields}


def compare_frames(dataset: str, found, expected, sample_size: int = DEFAULT_SAMPLE_SIZE) -> tuple[int, list[dict]]:
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
            sample += [{"dataset": dataset, "only_in": side, "row": _jsonable(r.asDict(recursive=True))}
                       for r in frame.limit(sample_size).collect()]
    # interleave so that a changed row shows both versions first
    outs = [x for x in sample if x["only_in"] == "output"]
    reps = [x for x in sample if x["only_in"] == "replay"]
    mixed = [x for pair in zip(outs, reps) for x in pair] + outs[len(reps):] + reps[len(outs):]
    return n_out + n_replay, mixed


def replay_check(spark, pipeline: Pipeline, outputs, input_df, prev_state=None, flush_at_end: bool | None = None,
                 sample_size: int = DEFAULT_SAMPLE_SIZE) -> CheckResult:
    """The outputs are what a fresh replay of their input writes, row for row.

    Replays ``input_df`` from ``prev_state`` (the engine is deterministic: docs/semantics.md)
    and compares ``aggregates``, ``late_events``, ``rejected`` and ``state`` as multisets
    of rows, every value exactly (floats bit for bit), and ``metrics`` key by key. This is
    the one check that sees a changed value that keeps every rule (a sum + 1000, a lowered
    min); it needs the input and the state the replay started from.
    ``flush_at_end`` defaults to the pipeline's ``replay.flushAtEnd``.
    """
    from windowing.config import ConfigError

    name = RECOMPUTE_CHECK
    flush = pipeline.flush_at_end if flush_at_end is None else bool(flush_at_end)
    desc = (f"a fresh replay of the input (from the given state; flush at end: {str(flush).lower()}) "
            "writes these outputs row for row, floats bit for bit, and these metrics")
    if input_df is None:
        return _skip(name, desc, "no input given: nothing to recompute from (pass the input, and the state "
                                 "the replay started from)")
    from windowing.engine import StateMismatchError, replay

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
            norm = lambda m: json.loads(json.dumps(dict(m), sort_keys=True, default=str))  # noqa: E731
            a, b = norm(mine), norm(fresh.metrics)
            wrong = [{"dataset": "metrics", "metric": k, "output": a.get(k), "replay": b.get(k)}
                     for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            if wrong:
                per["metrics"] = len(wrong)
                total += len(wrong)
                sample += wrong
    finally:
        fresh.unpersist()
    if total:
        desc += " (differing: " + ", ".join(f"{ds} {n}" for ds, n in per.items()) + ")"
        if not flush and outputs.aggregates.where(_col("emit_reason") == "END_OF_INPUT").limit(1).count():
            desc += "; the output holds END_OF_INPUT emissions: was it replayed with --flush-at-end?"
    # one sample per differing dataset first, then the rest
    firsts = {}
    for x in sample:
        firsts.setdefault(x["dataset"], x)
    ordered = list(firsts.values()) + [x for x in sample if x not in firsts.values()]
    return CheckResult(name, total == 0, total, ordered[:max(sample_size, len(firsts))], desc)


# =========================================================================== all of it


def input_types_of(outputs, input_df=None) -> dict | None:
    """The input columns' Spark types: the input's, or those ``rejected`` carries."""
    if input_df is not None:
        return {f.name: f.dataType for f in input_df.schema.fields}
    rej = getattr(outputs, "rejected", None)
    if rej is None:
        return None
    return {f.name: f.dataType for f in rej.schema.fields if f.name != "reason"}


def load_outputs(spark, outputs):
    """Accept an output folder (``rewindow replay --output``), a ``ReplayResult``, or any
    object with ``aggregates``, ``late_events``, ``rejected``, ``state`` (and ``metrics``)."""
    if isinstance(outputs, (str, Path)):
        from windowing.io import read_outputs

        return read_outputs(spark, outputs)
    return outputs


def _row_counts(o, input_df) -> tuple[int, int]:
    """(input rows, rejected rows) of the replay being checked: from its metrics, or counted."""
    m = getattr(o, "metrics", None) or {}
    if isinstance(m.get("input_rows"), int) and isinstance(m.get("rejected_rows"), int):
        return m["input_rows"], m["rejected_rows"]
    return input_df.count(), o.rejected.count()


def run_checks(spark, pipeline: Pipeline, outputs, input_df=None, prev_state=None,
               max_skew_ms: int = DEFAULT_MAX_SKEW_MS, sample_size: int = DEFAULT_SAMPLE_SIZE,
               only=None, recompute: bool = False, flush_at_end: bool | None = None) -> list[CheckResult]:
    """Every check, on one replay's outputs (and its input and starting state, if given).

    Args:
        spark: the SparkSession.
        pipeline: the pipeline the replay ran.
        outputs: an output folder, a :class:`~windowing.engine.ReplayResult`, or an object
            with the four DataFrames (and ``metrics``).
        input_df: the events the replay read (enables the input and conservation checks).
        prev_state: the state the replay started from (the previous partition's); without
            it conservation assumes the replay started from no open windows.
        max_skew_ms: the largest accepted ``|event time - arrival time|``.
        sample_size: failing rows kept per check.
        only: names of the checks to run (default: all of :data:`CHECK_NAMES`).
        recompute: run ``replay_reproduces`` (a fresh replay of ``input_df`` from
            ``prev_state``, compared row for row). It costs a replay, so it runs only when
            asked: ``recompute=True`` or named in ``only``; it needs ``input_df``.
        flush_at_end: how the replay being checked flushed (default: the pipeline's).

    Returns:
        One :class:`CheckResult` per check run, in a stable order; skipped ones included.
    """
    if only is not None:
        unknown = set(only) - set(CHECK_NAMES)
        if unknown:
            raise ValueError(f"unknown check(s) {sorted(unknown)}; known: {', '.join(CHECK_NAMES)}")
    o = load_outputs(spark, outputs)
    types = input_types_of(o, input_df)
    results: list[CheckResult] = []
    if input_df is not None:
        inputs = input_checks(pipeline, input_df, max_skew_ms, sample_size, only)
        if any(r.name in REJECTING_CHECKS and not r.passed for r in inputs):
            rows, rejected = _row_counts(o, input_df)
            inputs = apply_rejection_policy(pipeline, inputs, rows, rejected)
        results += inputs
    else:
        results += [_skip(n, "input events", "no input given") for n in INPUT_CHECKS if _wanted(only, n)]
    results += aggregates_checks(pipeline, o.aggregates, types, sample_size, only)
    results += late_checks(pipeline, o.late_events, types, sample_size, only)
    results += state_checks(pipeline, o.state, types, sample_size, only)
    results += rejected_checks(pipeline, o.rejected, types, sample_size, only)
    if _wanted(only, "conservation"):
        results.append(conservation_check(pipeline, o, input_df, prev_state, sample_size))
    if _wanted(only, "metrics_consistent"):
        results.append(metrics_check(pipeline, o, input_df))
    if _wanted(only, RECOMPUTE_CHECK):
        if recompute or (only is not None and RECOMPUTE_CHECK in only):
            results.append(replay_check(spark, pipeline, o, input_df, prev_state, flush_at_end, sample_size))
        else:
            results.append(_skip(RECOMPUTE_CHECK, "a fresh replay of the input writes these outputs row for row",
                                 "not asked for (run_checks(recompute=True); rewindow verify --input does)"))
    return results


INPUT_CHECKS = ("input_schema", "input_times_parseable", "input_event_time_skew")
#: Every check :func:`run_checks` runs, in its order.
CHECK_NAMES = (
    *INPUT_CHECKS,
    "aggregates_schema", "aggregates_window_bounds", "aggregates_window_span", "aggregates_count_positive",
    "aggregates_min_avg_max", "aggregates_distinct_le_count", "aggregates_emit_watermark", "aggregates_emit_reason",
    "aggregates_unique_emission",
    "late_events_schema", "late_rule", "late_lateness_ms", "late_window_membership",
    "state_schema", "state_kind", "state_fingerprint", "state_window_bounds", "state_unique",
    "rejected_schema", "rejected_reason",
    "conservation", "metrics_consistent", RECOMPUTE_CHECK,
)


def format_table(results: Sequence[CheckResult], samples: int = 2) -> str:
    """A plain-text table of results, with a few failing rows under each failure."""
    width = max([len(r.name) for r in results] + [5])
    lines = [f"{'check':<{width}}  status  failures  description", f"{'-' * width}  ------  --------  -----------"]
    for r in results:
        lines.append(f"{r.name:<{width}}  {r.status:<6}  {r.failure_count:>8}  {r.description}")
        if not r.passed:
            for s in r.sample[:samples]:
                lines.append(" " * (width + 2) + "  e.g. " + json.dumps(s, default=str, sort_keys=True)[:400])
    return "\n".join(lines)
