"""What every check shares: :class:`CheckResult`, its defaults, and the Spark helpers
(rules evaluated in one aggregation, keys as the engine tells them apart, duplicates)."""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Hashable, Iterable, Sequence

from pyspark.sql import functions as F
from pyspark.sql import types as T

from windowing.runner.columns import col as _col

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


def skip_result(name: str, description: str, why: str) -> CheckResult:
    return CheckResult(name, True, 0, [], f"{description} (skipped: {why})", skipped=True, skip_reason=why)


def jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set)):
        return [jsonable(x) for x in v]
    if isinstance(v, (_dt.datetime, _dt.date)):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if hasattr(v, "asDict"):
        return jsonable(v.asDict(recursive=True))
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


# =========================================================================== Spark helpers


def col_ms(name: str) -> Column:
    """A timestamp column as epoch milliseconds (floored, like the engine)."""
    return F.unix_millis(_col(name))


def rule_holds(cond: Column) -> Column:
    """True only when ``cond`` is true (null counts as not holding)."""
    return F.coalesce(cond, F.lit(False))


@dataclass(frozen=True)
class Rule:
    """A row rule: rows where ``applies`` and not ``ok`` fail. ``ok=None``: not applicable."""

    name: str
    description: str
    ok: Any = None
    applies: Any = None
    why_skipped: str = "not applicable to this pipeline"

    def fail(self) -> Column:
        cond = ~rule_holds(self.ok)
        return cond if self.applies is None else (rule_holds(self.applies) & cond)


def wanted(only: Collection[str] | None, name: str) -> bool:
    return only is None or name in only


#: What planning a check returns: computes its results once its :class:`CountPass` has run.
Finish = Callable[[], "list[CheckResult]"]


class PassSums:
    """The sums one :meth:`CountPass.add` or :meth:`CountPass.group` asked for, by name (once the pass has run)."""

    def __init__(self, owner: CountPass, columns: dict[Hashable, str]):
        self._owner, self._columns = owner, columns

    def __getitem__(self, name: Hashable) -> Any:
        return self._owner.value(self._columns[name])


#: A column by name: of the rows being grouped (in ``aggs``), or of a group (in ``having`` and ``values``).
Resolve = Callable[[str], "Column"]


#: The rows (input, outputs and state together) up to which a :class:`CountPass` is ``small``.
SMALL_PASS_ROWS = 200_000
#: The types a pass sums as they are (any other value is summed as a long).
_SUMMABLE = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType)


@dataclass(frozen=True)
class _Grouping:
    """One :meth:`CountPass.group` request."""

    df: DataFrame
    keys: list[Column]
    aggs: Callable[[Resolve], dict[str, Column]]
    having: Callable[[Resolve], Column] | None
    values: Callable[[Resolve], dict[Hashable, Column]]
    columns: dict[Hashable, str]


class CountPass:
    """Sums over the rows of one or more DataFrames, and over groups of rows, computed by
    one Spark action.

    :meth:`add` asks for the sum of per-row values over a DataFrame (count a condition with
    ``F.when(cond, 1)``: a null adds nothing); :meth:`group`, for sums over the groups of a
    ``groupBy``. :meth:`run` computes every sum asked for at once: a no-op write of the union
    of the frames, observed (``DataFrame.observe``), which has no shuffle of its own, and
    every grouping done by one ``groupBy`` of the union of the grouped rows (one shuffle).
    So a pass is one Spark job, or two with groupings when adaptive execution runs the
    shuffle stage as a job of its own (its default). Sums over the same DataFrame object
    share one scan of it. A sum is an int (a float for float values, whose last digit may
    depend on the order Spark adds them in, as in any Spark sum); over no rows it is 0.

    One ``groupBy`` for all groupings means one aggregation kind for all: a ``collect_set``
    in one grouping's ``aggs`` (``metrics_consistent``'s windows per late row) makes Spark
    aggregate every grouping with its object hash aggregate, which sorts once a task holds
    more than a few groups (about twice the time of a plain hash aggregate over millions of
    groups): a job fewer for each small partition, at that cost for the large ones.

    :func:`run_checks <windowing.validation.registry.run_checks>` plans every check of a
    partition on one pass: where each rule, uniqueness check, conservation and each count of
    ``metrics_consistent`` ran Spark jobs of its own (one to three), the checks run these.
    """

    def __init__(self, small: bool = False) -> None:
        #: The frames hold a few hundred thousand rows at most (:data:`SMALL_PASS_ROWS`): the
        #: pass then reads and groups them in one task, one job. One partition needs no
        #: shuffle to group, so none is planned, and no setting is changed (the chain's
        #: audits run beside the next partition's replay, in the same session). A small
        #: partition's pass used to be two jobs (adaptive execution) of ~15 tasks and 8,
        #: each task costing more to start than its share of the rows.
        self.small = small
        self._frames: list[tuple[DataFrame, dict[str, Column]]] = []
        self._groupings: list[_Grouping] = []
        self._count = 0
        self._values: dict[str, Any] | None = None

    #: The column every frame of the pass carries and every sum is taken by (a
    #: :class:`KeyedPass`'s partition index); None: one sum over all rows.
    key: str | None = None

    @property
    def carry(self) -> list[str]:
        """The columns a check must keep in a frame it derives for the pass (``select``)."""
        return [self.key] if self.key is not None else []

    def rows(self, df: DataFrame) -> DataFrame:
        """The rows of ``df`` a check's results are about (for its samples): all of them."""
        return df

    def shared(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``: what a check works out once for all the partitions of a
        :class:`KeyedPass` (what depends on no partition's rows); here, once."""
        return compute()

    def _columns(self, names: Iterable[Hashable]) -> dict[Hashable, str]:
        if self._values is not None:
            raise RuntimeError("this pass has run: plan a new one")
        out = {}
        for name in names:
            out[name] = f"v{self._count}"
            self._count += 1
        return out

    def add(self, df: DataFrame, values: dict[Any, Column]) -> PassSums:
        """Sums over the rows of ``df`` of each of ``values`` (per-row numbers, null adding nothing)."""
        columns = self._columns(values)
        self._add(df, {columns[n]: v for n, v in values.items()})
        return PassSums(self, columns)

    def _add(self, df: DataFrame, values: dict[str, Column]) -> None:
        mine = next((sums for frame, sums in self._frames if frame is df), None)
        if mine is None:
            mine = {}
            self._frames.append((df, mine))
        mine.update(values)

    def group(
        self,
        df: DataFrame,
        keys: list[Column],
        aggs: Callable[[Resolve], dict[str, Column]],
        values: Callable[[Resolve], dict[Hashable, Column]],
        having: Callable[[Resolve], Column] | None = None,
    ) -> tuple[Callable[[], DataFrame], PassSums]:
        """Sums of ``values`` over the groups of ``df.groupBy(*keys).agg(*aggs).where(having)``.

        ``aggs`` (by name) take the columns of ``df`` from the resolver they are given;
        ``having`` and ``values``, the columns of a group (its ``aggs`` by name). Returns a
        function giving that grouped DataFrame itself (for samples, planned only when a
        failing check asks for them) and the sums, which the pass computes with every other
        grouping in one ``groupBy``. Over no rows there is no group (a global aggregate of no
        keys would have one, of nulls: give a ``having`` that does not hold for it).
        """

        def grouped() -> DataFrame:
            out = self._scoped(df).groupBy(*keys).agg(*[v.alias(n) for n, v in aggs(_col).items()])
            out = out.where(having(_col)) if having is not None else out
            return out.drop(*self.carry)

        columns = self._columns(values(_col))
        self._groupings.append(_Grouping(df, keys, aggs, having, values, columns))
        return grouped, PassSums(self, columns)

    def _scoped(self, df: DataFrame) -> DataFrame:
        return df

    def _grouping_plan(self) -> tuple[DataFrame, list[str], list[Column], dict[str, Column]]:
        """Every grouping as one ``groupBy`` of the union of their rows, tagged: each
        grouping's keys, and the columns its ``aggs`` read, are a struct column of its own
        (null in the other groupings' rows), so groups never mix. Returns ``(union, keys,
        aggs, values)``: ``values`` are the sums' per-group values, over the grouped rows."""
        own: list[dict[str, Column]] = []  # each grouping's struct columns
        aggs, outputs = [], []
        for t, g in enumerate(self._groupings):
            read: dict[str, None] = {}

            def field(n: str, t: int = t, read: dict[str, None] = read) -> Column:
                read[n] = None  # the columns the aggregates read, found as they are built
                return F.col(f"__r{t}").getField(n)

            mine_aggs = g.aggs(field)
            out = {n: f"__a{t}_{i}" for i, n in enumerate(mine_aggs)}
            aggs += [v.alias(out[n]) for n, v in mine_aggs.items()]
            outputs.append(out)
            mine = {f"__k{t}": F.struct(*g.keys) if g.keys else F.struct(F.lit(0).alias("_"))}
            if read:
                mine[f"__r{t}"] = F.struct(*[_col(n).alias(n) for n in read])
            own.append(mine)
        # Each grouping's rows carry only its own columns; the union fills the others with
        # nulls (by name), so no null column is built per grouping and name (py4j calls).
        union = union_all(
            [
                g.df.select(*self.carry, F.lit(t).alias("__t"), *[v.alias(n) for n, v in own[t].items()])
                for t, g in enumerate(self._groupings)
            ]
        )
        keys = [*self.carry, "__t", *[n for mine in own for n in mine if n.startswith("__k")]]
        values: dict[str, Column] = {}
        for t, g in enumerate(self._groupings):

            def of(n: str, t: int = t) -> Column:
                return F.col(outputs[t][n])

            mine_t = F.col("__t") == t
            if g.having is not None:
                mine_t = mine_t & g.having(of)
            values.update({g.columns[n]: F.when(mine_t, v) for n, v in g.values(of).items()})
        return union, keys, aggs, values

    def _grouped(self) -> None:
        union, keys, aggs, values = self._grouping_plan()
        if self.small:
            union = union.coalesce(1)
        grouped = union.groupBy(*keys).agg(*aggs) if aggs else union.groupBy(*keys).count()
        self._add(grouped, values)

    def _branches(self, tag: Column | None = None) -> list[DataFrame]:
        """Each frame's values, named (and ``tag`` as ``__part`` first); a value neither
        integral nor floating (a decimal) as a long, as the sums' types promise."""
        branches = []
        for df, mine in self._frames:
            own = df.select(*([tag.alias("__part")] if tag is not None else []), *[v.alias(c) for c, v in mine.items()])
            fields = [f for f in own.schema.fields if f.name != "__part"]
            odd = [f.name for f in fields if not isinstance(f.dataType, _SUMMABLE)]
            if odd:
                own = own.select(*[F.col(c).cast("long").alias(c) if c in odd else F.col(c) for c in own.columns])
            branches.append(own)
        return branches

    def run(self) -> None:
        """Compute every sum asked for (once)."""
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark Connect picks its own class here

        if self._values is not None:
            return
        if self._groupings:
            self._grouped()
        if not self._frames:
            self._values = {}
            return
        # The union fills the others' columns with nulls (by name): a null column per frame
        # and value cost py4j calls in the thousands.
        every = [c for _, mine in self._frames for c in mine]
        union = union_all(self._branches())
        observation = Observation()
        observed = union.coalesce(1) if self.small else union
        observed.observe(observation, *[F.sum(c).alias(c) for c in every]).write.format("noop").mode("overwrite").save()
        got = observation.get
        self._values = {c: (got.get(c) or 0) for c in every}

    def value(self, column: str) -> Any:
        if self._values is None:
            raise RuntimeError("the pass has not run yet")
        return self._values[column]


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    """The union of ``frames`` by column name, a column missing from a frame null in its
    rows: unioned in pairs, a balanced tree (a chain of N unions re-analyses the growing plan
    N times, seconds for the hundred branches of a pass's checks)."""
    level = list(frames)
    while len(level) > 1:
        pairs = [a.unionByName(b, allowMissingColumns=True) for a, b in zip(level[::2], level[1::2])]
        level = pairs + ([level[-1]] if len(level) % 2 else [])
    return level[0]


class KeyedPass(CountPass):
    """A :class:`CountPass` over many partitions' rows at once, every sum taken per
    partition: each frame carries the partition's index in ``key``, each :meth:`add` is
    summed by it and each :meth:`group` groups by it first. Checks are planned once, over
    the frames of every partition (a pass's outputs, read in one scan each), and
    :meth:`results` gives each partition's results, reading the sums at that partition:
    the results :func:`run_checks <windowing.validation.registry.run_checks>` gives the
    partition alone, with one plan (one set of generated classes, each frame scanned once)
    whatever the number of partitions. A check's samples come from its partition's rows
    (:meth:`rows`), and what does not depend on the rows (a pandera schema's column types)
    is worked out once (:meth:`shared`).
    """

    def __init__(self, key: str, n: int, small: bool = False) -> None:
        super().__init__(small)
        self.key = key
        self.n = n
        #: The partition whose results are being finished (:meth:`results`).
        self.current: int | None = None
        self._by_part: dict[int, dict[str, Any]] = {}
        self._shared: dict[Hashable, Any] = {}

    def rows(self, df: DataFrame) -> DataFrame:
        """The rows of ``df`` of the partition being finished, without the key."""
        return self._scoped(df).drop(*self.carry)

    def _scoped(self, df: DataFrame) -> DataFrame:
        if self.current is None:
            raise RuntimeError("no partition is being finished")
        assert self.key is not None
        return df.where(F.col(self.key) == F.lit(self.current))

    def shared(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, once for every partition: for what depends on no partition's rows."""
        if key not in self._shared:
            self._shared[key] = compute()
        return self._shared[key]

    def run(self) -> None:
        if self._values is not None:
            return
        assert self.key is not None
        if self._groupings:
            self._grouped()
        every = [c for _, mine in self._frames for c in mine]
        if every:
            union = union_all(self._branches(F.col(self.key)))
            if self.small:
                union = union.coalesce(1)
            sums = union.groupBy("__part").agg(*[F.sum(c).alias(c) for c in every]).collect()
            self._by_part = {r["__part"]: r.asDict() for r in sums}
        self._values = {c: 0 for c in every}

    def value(self, column: str) -> Any:
        if self._values is None:
            raise RuntimeError("the pass has not run yet")
        if self.current is None:
            raise RuntimeError("no partition is being finished")
        return self._by_part.get(self.current, {}).get(column) or 0

    def results(self, finish: Finish) -> list[list[CheckResult]]:
        """Each partition's results (``finish`` planned on this pass), in partition order."""
        self.run()
        out = []
        try:
            for i in range(self.n):
                self.current = i
                out.append(finish())
        finally:
            self.current = None
        return out


def run_alone(plan: Callable[[CountPass], Finish]) -> list[CheckResult]:
    """The results of checks planned on a pass of their own."""
    p = CountPass()
    finish = plan(p)
    p.run()
    return finish()


def then(*finishes: Finish) -> Finish:
    """The results of ``finishes``, in order."""
    return lambda: [r for f in finishes for r in f()]


def rule_checks(
    p: CountPass, df: DataFrame, rules: Sequence[Rule], sample_size: int, only: Collection[str] | None = None
) -> Finish:
    """All rules of one DataFrame, counted on ``p``; samples only for failing rules."""
    rules = [r for r in rules if wanted(only, r.name)]
    active = [r for r in rules if r.ok is not None]
    sums = p.add(df, {r.name: F.when(r.fail(), 1) for r in active}) if active else None

    def finish() -> list[CheckResult]:
        out = []
        for r in rules:
            if r.ok is None:
                out.append(skip_result(r.name, r.description, r.why_skipped))
                continue
            assert sums is not None
            n = int(sums[r.name])
            failing = p.rows(df).where(r.fail()).limit(sample_size).collect() if n else []
            sample = [jsonable(x.asDict(recursive=True)) for x in failing]
            out.append(CheckResult(r.name, n == 0, n, sample, r.description))
        return out

    return finish


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
JSON_EXACT = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
}


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
        return F.to_json(c, JSON_EXACT)
    return c


def duplicates_check(
    p: CountPass, name: str, description: str, df: DataFrame, cols: list[str], sample_size: int
) -> Finish:
    """Groups of ``cols`` (keys as the engine tells them apart) found more than once, counted on ``p``."""
    types = {f.name: f.dataType for f in df.schema.fields}
    dup, sums = p.group(
        df,
        [as_key(_col(c), types[c]).alias(c) for c in cols],
        aggs=lambda c: {"copies": F.count(F.lit(1))},
        having=lambda g: g("copies") > 1,
        values=lambda g: {"groups": F.lit(1)},
    )

    def finish() -> list[CheckResult]:
        n = int(sums["groups"])
        sample = [jsonable(r.asDict(recursive=True)) for r in dup().limit(sample_size).collect()] if n else []
        return [CheckResult(name, n == 0, n, sample, description)]

    return finish


def all_of(conds: list[Column]) -> Column | None:
    if not conds:
        return None
    out = conds[0]
    for c in conds[1:]:
        out = out & c
    return out


def any_of(conds: list[Column]) -> Column:
    out = conds[0]
    for c in conds[1:]:
        out = out | c
    return out
