"""What every check shares: :class:`CheckResult`, its defaults, and the Spark helpers
(rules evaluated in one aggregation, keys as the engine tells them apart, duplicates)."""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Collection, Iterable, Sequence

from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.columns import col as _col

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

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
    sample: list[dict[str, Any]]
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


def _ms(name: str) -> Column:
    """A timestamp column as epoch milliseconds (floored, like the engine)."""
    return F.unix_millis(_col(name))


def _holds(cond: Column) -> Column:
    """True only when ``cond`` is true (null counts as not holding)."""
    return F.coalesce(cond, F.lit(False))


@dataclass(frozen=True)
class _Rule:
    """A row rule: rows where ``applies`` and not ``ok`` fail. ``ok=None``: not applicable."""

    name: str
    description: str
    ok: Any = None
    applies: Any = None
    why_skipped: str = "not applicable to this pipeline"

    def fail(self) -> Column:
        cond = ~_holds(self.ok)
        return cond if self.applies is None else (_holds(self.applies) & cond)


def _wanted(only: Collection[str] | None, name: str) -> bool:
    return only is None or name in only


def _evaluate(df: DataFrame, rules: Sequence[_Rule], sample_size: int,
              only: Collection[str] | None = None) -> list[CheckResult]:
    """All rules of one DataFrame in one aggregation; samples only for failing rules."""
    rules = [r for r in rules if _wanted(only, r.name)]
    active = [r for r in rules if r.ok is not None]
    counts = {}
    if active:
        row = df.agg(*[F.sum(F.when(r.fail(), 1).otherwise(0)).alias(f"r{i}") for i, r in enumerate(active)]).first()
        assert row is not None
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


def _has_float(dtype: DataType) -> bool:
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


def as_key(c: Column, dtype: DataType) -> Column:
    """A worker or key column as the engine tells keys apart, for grouping.

    The engine groups keys by value with floats compared bit for bit (Arrow hashing):
    ``-0.0`` and ``0.0`` are two keys. Spark's ``groupBy`` normalises ``-0.0`` to ``0.0``
    (and every NaN to one NaN), which would merge two of the engine's keys into one; a
    float's text form keeps them apart (``CAST(-0.0 AS STRING)`` is ``-0.0``, and
    distinct doubles have distinct texts). Every NaN is one key: Spark writes one NaN
    bit pattern, so no output could tell NaNs apart anyway. Floats nested in arrays,
    maps or structs go through ``to_json`` the same way; other types group as they are.
    """
    if isinstance(dtype, (T.FloatType, T.DoubleType)):
        return c.cast("string")
    if _has_float(dtype):
        return F.to_json(c, _JSON_EXACT)
    return c


def _duplicates(name: str, description: str, df: DataFrame, cols: list[str], sample_size: int) -> CheckResult:
    types = {f.name: f.dataType for f in df.schema.fields}
    dup = (df.groupBy(*[as_key(_col(c), types[c]).alias(c) for c in cols])
           .agg(F.count(F.lit(1)).alias("copies")).where(F.col("copies") > 1))
    n = dup.count()
    sample = [_jsonable(r.asDict(recursive=True)) for r in dup.limit(sample_size).collect()] if n else []
    return CheckResult(name, n == 0, n, sample, description)



def _all(conds: list[Column]) -> Column | None:
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = out & c
    return out


def _any(conds: list[Column]) -> Column:
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out
