"""Aggregates: value domains, per-group reductions in arrival order, carried partials.

Algorithm: aggregates over arbitrary types (strings, timestamps, ...) work on integer
codes into a per-column *domain* of distinct values (sorted for min/max, so a code's
order is the value's order). A group's aggregate is an unbuffered ``ufunc.at`` reduction
over its events in arrival order, started from its carried partial: float sums are then a
left fold that a carried partial continues, so a replay split into partitions gives the
same bits as one replay.

Each aggregate type is one :class:`Aggregator` subclass holding all its rules: reduce,
running value (``atAggregate``), session accumulators, state columns, final value and
types. Adding an aggregate is one class here and its name in :data:`AGGREGATORS`.

Why one module of over a thousand lines: it is one concept, the aggregators, and every
one of them is built on the same domain coding and fold helpers at its top; they are
read side by side when one is added or changed (the same rules for every aggregate), and
split by type they would only import each other's helpers.

Invariants: carried partials come first in every fold; a code of -1 is null; a partial
written to state does not depend on input row order (distinct members are sorted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from windowing.arrays import MAX_TIMESTAMP, MIN_TIMESTAMP, codes_in, sorted_distinct, starts_of
from windowing.config import Aggregate, WindowType, arrow_schemas
from windowing.config.model import DEFAULT_PERCENTAGE
from windowing.contract import STATE_PREFIX
from windowing.kernel.decimals import (
    decimal_array,
    decimal_avg,
    decimal_ints,
    is_decimal,
    split_overflow,
    sum_dtype,
)
from windowing.kernel.inputs import STATE_WINDOW, state_column

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from windowing.kernel.inputs import KeyIds, SortedEvents
    from windowing.kernel.spec import Spec


class _Domain(NamedTuple):
    """The distinct values of a column (sorted where order matters) and the table
    column's codes into them (-1 for null)."""

    values: pa.Array
    codes: np.ndarray


#: The value domains of a replay, by :attr:`Aggregator.domain_key` (see :func:`value_domains`).
Domains = dict[tuple[str, bool], _Domain]
#: The key of an aggregate's :class:`EventInput` (:attr:`Aggregator.input_key`).
InputKey = tuple[str | bool | None, ...]
#: A session accumulator (:meth:`Aggregator.empty`): a short list the merge loop updates in place.
Accumulator = list[Any]


def value_domains(keyset: KeyIds, aggregators: list[Aggregator]) -> Domains:
    """Distinct values per column (events and carried partials), sorted where order matters.

    Aggregates over arbitrary types (strings, timestamps, ...) work on integer codes into
    these domains; only min/max need the codes to follow the values' order. One hash
    pass (``dictionary_encode``) gives both the values and the codes.
    """
    table = keyset.table
    out: Domains = {}
    state_rows = np.flatnonzero(keyset.kind == STATE_WINDOW)
    for agg in aggregators:
        key = agg.domain_key
        if key is None or key in out:
            continue
        column = table[key[0]].combine_chunks()
        parts = [column]
        for other in aggregators:
            if other.domain_key is not None and other.agg.column == key[0] and len(state_rows):
                parts.append(other.domain_values(state_column(table, other.name, state_rows)))
        encoded = pc.dictionary_encode(pa.concat_arrays(parts) if len(parts) > 1 else column)
        values = encoded.dictionary
        codes = pc.fill_null(encoded.indices.slice(0, len(column)), -1).to_numpy(zero_copy_only=False)
        codes = codes.astype(np.int64)
        if key[1] and len(values):
            order = pc.sort_indices(values).to_numpy()
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            values = values.take(pa.array(order))
            codes = np.where(codes >= 0, rank[np.maximum(codes, 0)], -1)
        out[key] = _Domain(values, codes)
    return out


def event_inputs(
    sorted_events: SortedEvents, aggregators: list[Aggregator], domains: Domains
) -> dict[InputKey, EventInput]:
    """Per aggregate input (:attr:`Aggregator.input_key`): its :class:`EventInput`.

    Codes are computed on the table's column as it came and then permuted into event
    order: integers are cheap to move, strings are not.
    """
    out: dict[InputKey, EventInput] = {}
    for agg in aggregators:
        if agg.agg.column is not None and agg.input_key not in out:
            column = sorted_events.table[agg.agg.column].combine_chunks()
            out[agg.input_key] = agg.event_input(column, sorted_events, domains)
    return out


def state_partials(aggregators: list[Aggregator], keyset: KeyIds, rows: np.ndarray, domains: Domains) -> list[Any]:
    """Partial aggregates of carried windows (table rows ``rows``), one per aggregate."""
    return [agg.from_state(keyset.table, rows, domains) for agg in aggregators]


def reduce_groups(
    aggregators: list[Aggregator],
    inputs: dict[InputKey, EventInput],
    group: np.ndarray,
    n_groups: int,
    events: np.ndarray,
    carried: list[Any] | None,
    carried_group: np.ndarray,
    domains: Domains,
) -> list[Any]:
    """Aggregate ``events`` (in arrival order) into ``group``s, per aggregate.

    ``carried`` are the partials of groups ``carried_group``; they come first in every fold.
    """
    return [
        agg.reduce(
            inputs.get(agg.input_key),
            group,
            n_groups,
            events,
            carried[i] if carried is not None else None,
            carried_group,
            domains,
        )
        for i, agg in enumerate(aggregators)
    ]


def _carried_arrival(t: pa.Table, a: Aggregate, rows: np.ndarray, take: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(batch, seq) where carried sessions' ``first`` / ``last`` values arrived
    (:meth:`Spec.partial_fields`). State written before these columns existed has none:
    its sessions then rank by start, which is how merges combined them then."""
    names = [STATE_PREFIX + f"partial_{a.name}_{c}" for c in ("batch", "seq")]
    if not all(n in t.column_names for n in names):
        start = pc.fill_null(state_column(t, "window_start_ms", rows), 0).to_numpy().astype(np.int64)
        return np.full(len(rows), MIN_TIMESTAMP, dtype=np.int64), start
    b, q = (pc.fill_null(t[n].take(take), 0).to_numpy().astype(np.int64) for n in names)
    return b, q


def _decode(codes: np.ndarray, domain: pa.Array) -> pa.Array:
    mask = codes < 0
    return (
        domain.take(pa.array(np.where(mask, 0, codes), pa.int64(), mask=mask))
        if len(domain)
        else pa.nulls(len(codes), domain.type)
    )


def _list_members(column: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """A carried list column as (length of each list, list index of each member, members)."""
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy().astype(np.int64)
    return lengths, np.repeat(np.arange(len(column)), lengths), pc.list_flatten(column)


def _with_carried_members(
    inp: EventInput,
    group: np.ndarray,
    events: np.ndarray,
    carried_group: np.ndarray,
    carried_members: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(group, value) of every non-null event value, after the carried members (their
    carried partial's index and value) of groups ``carried_group``."""
    valid = inp.valid[events]
    member_group, member_value = group[valid], inp.values[events][valid]
    if carried_members is not None:
        member_group = np.concatenate([carried_group[carried_members[0]], member_group])
        member_value = np.concatenate([carried_members[1], member_value])
    return member_group, member_value


def _selected_members(
    n_groups: int, member_group: np.ndarray, member_value: np.ndarray, sel: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The members of groups ``sel``, as (row in ``sel``, value)."""
    row_of = np.full(n_groups, -1, dtype=np.int64)
    row_of[sel] = np.arange(len(sel))
    keep = row_of[member_group] >= 0
    return row_of[member_group[keep]], member_value[keep]


def _seg_cumsum_int(v: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running integer sum restarting at each segment (exact, so a global cumsum works)."""
    if len(v) == 0:
        return v.astype(np.int64)
    c = np.cumsum(v)
    st = starts_of(seg)
    before = (c - v)[st]
    running: NDArray[np.int64] = c - np.repeat(before, np.diff(np.append(st, len(v))))
    return running


@dataclass(frozen=True)
class EventInput:
    """One aggregate input per event, in the kernel's event order: ``values`` (numbers,
    codes into a domain, or the non-null mask itself) and ``valid`` (non-null)."""

    values: np.ndarray
    valid: np.ndarray
    nonfinite: np.ndarray | None = None  # stddev: NaN or infinite values (their ``values`` are 0)


@dataclass
class CountPartial:
    count: np.ndarray  # non-null values (all events for ``count`` without a column)


@dataclass
class SumPartial:
    total: np.ndarray  # int64, float64 (a left fold in arrival order), or exact Python ints (decimals)
    count: np.ndarray  # non-null values


@dataclass
class CodePartial:
    """min / max / first / last as codes into the column's domain (-1: null)."""

    code: np.ndarray
    #: Sessions' first / last: where the value arrived, as (batch, seq) for the state
    #: (:meth:`Spec.partial_fields`) ...
    arrival: tuple[np.ndarray, np.ndarray] | None = None
    #: ... and as a position of the session merge (:func:`windowing.kernel.sessions._sessions`).
    position: np.ndarray | None = None


@dataclass
class DistinctPartial:
    count: np.ndarray  # distinct non-null values per group
    member_group: np.ndarray  # the (group, code) pairs of the distinct values, any order
    member_code: np.ndarray


@dataclass(frozen=True)
class Prefixes:
    """The running aggregates of ``atAggregate`` snapshots: one prefix per accepted
    (event, window) pair, "the group so far". Pairs come sorted by (group, arrival)."""

    group: np.ndarray  # the group of each pair
    event: np.ndarray  # the event of each pair (index in arrival order)
    rank: np.ndarray  # the pair's rank in its group, from 0
    carried_index: np.ndarray  # per pair: its group's carried partial (index), or -1
    carried_group: np.ndarray  # per carried partial: its group
    n_groups: int

    @property
    def has_carried(self) -> np.ndarray:
        return self.carried_index >= 0

    def carried(self, per_carried: np.ndarray, default: Any = 0) -> np.ndarray:
        """Per pair: the carried value of its group, else ``default``."""
        per_pair: np.ndarray = np.where(self.has_carried, per_carried[np.maximum(self.carried_index, 0)], default)
        return per_pair


class Aggregator:
    """Everything the kernel needs of one aggregate type, for one configured aggregate.

    Vectorised (many groups at once): :meth:`reduce` (a group in arrival order, after its
    carried partial), :meth:`running` (the value after each event, for ``atAggregate``),
    :meth:`from_state` / :meth:`state_columns` (the carried partial), :meth:`final`
    (the output column). One value at a time, for the session merge loop: :meth:`empty`,
    :meth:`apply`, :meth:`combine`, :meth:`copy`, :meth:`carried` and :meth:`collect`.
    Types: :meth:`output_type` and :meth:`state_fields`.

    Invariants every subclass keeps: carried partials come first in a fold; results do
    not depend on the input's row order; the session accumulators give the same values
    (bit for bit) as :meth:`reduce` over the same events in the same order.
    """

    #: The event input: "valid" (the non-null mask), "number" or "code".
    input_kind: ClassVar[str] = "code"
    #: Whether codes must follow the values' order (min / max).
    sorted_domain: ClassVar[bool] = False

    def __init__(self, agg: Aggregate, spec: Spec):
        self.agg = agg
        self.spec = spec

    @property
    def name(self) -> str:
        return f"partial_{self.agg.name}"

    @property
    def domain_key(self) -> tuple[str, bool] | None:
        """Which value domain the aggregate codes its column in (None: it reads numbers)."""
        return (self.agg.column, self.sorted_domain) if self.input_kind == "code" and self.agg.column else None

    def domain(self, domains: Domains) -> _Domain:
        """Its column's value domain (an aggregate that codes its column: ``domain_key`` is set)."""
        return domains[cast("tuple[str, bool]", self.domain_key)]

    @property
    def input_key(self) -> InputKey:
        """The key of its :class:`EventInput` (aggregates over one column share one)."""
        if self.input_kind == "code":
            return ("code", *(self.domain_key or ()))
        return (self.input_kind, self.agg.column)

    def output_type(self) -> pa.DataType:
        """The output column's type (:func:`windowing.config.arrow_schemas.aggregate_output_type`)."""
        return arrow_schemas.aggregate_output_type(self.agg, self.spec.input_types)

    def state_fields(self) -> list[pa.Field]:
        """The partial's state columns (:func:`windowing.config.arrow_schemas.aggregate_state_fields`)."""
        return arrow_schemas.aggregate_state_fields(self.spec.pipeline, self.agg, self.spec.input_types)

    def domain_values(self, state_column: pa.Array) -> pa.Array:
        """The values a carried partial adds to the column's domain."""
        return state_column

    def event_input(self, column: pa.Array, sorted_events: SortedEvents, domains: Domains) -> EventInput:
        valid = ~column.is_null().to_numpy(zero_copy_only=False)[sorted_events.rows]
        return EventInput(self.domain(domains).codes[sorted_events.rows], valid)

    def state_column(self, table: pa.Table, take: pa.Array, suffix: str = "") -> pa.Array:
        return table[STATE_PREFIX + self.name + suffix].take(take).combine_chunks()

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> Any:
        raise NotImplementedError

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: Any,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> Any:
        """Aggregate ``events`` (in arrival order) into ``group``s, after the ``carried``
        partials of groups ``carried_group``."""
        raise NotImplementedError

    def running(self, inp: EventInput | None, prefixes: Prefixes, carried: Any, domains: Domains) -> Any:
        raise NotImplementedError

    def final(self, partial: Any, sel: np.ndarray, domains: Domains) -> pa.Array:
        raise NotImplementedError

    def state_columns(self, partial: Any, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        raise NotImplementedError

    # -- one value at a time (sessions)

    def session_inputs(self, inp: EventInput | None, n_events: int) -> tuple[list[Any], list[Any]]:
        """(values, valid) per event as Python lists, for the merge loop."""
        assert inp is not None
        return inp.values.tolist(), inp.valid.tolist()

    def empty(self) -> Accumulator:
        raise NotImplementedError

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        """Add one non-null event value (``position``: the event's arrival position)."""
        raise NotImplementedError

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        """Merge ``other`` (a session starting later) into ``acc``."""
        raise NotImplementedError

    def copy(self, acc: Accumulator) -> Accumulator:
        return list(acc)

    def carried(self, partial: Any, positions: np.ndarray | None) -> list[Accumulator]:
        """A carried partial as one accumulator per row (``positions``: the arrival
        positions of first / last values, see :func:`windowing.kernel.sessions._sessions`)."""
        raise NotImplementedError

    def collect(self, accs: list[Accumulator]) -> Any:
        """Accumulators as one partial (one group each)."""
        raise NotImplementedError


class CountAggregator(Aggregator):
    """``count``: events (``count`` without a column) or non-null values."""

    input_kind = "valid"

    def event_input(self, column: pa.Array, sorted_events: SortedEvents, domains: Domains) -> EventInput:
        valid = ~column.is_null().to_numpy(zero_copy_only=False)[sorted_events.rows]
        return EventInput(valid, valid)

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> CountPartial:
        column = self.state_column(table, pa.array(rows))
        return CountPartial(pc.fill_null(column, 0).to_numpy().astype(np.int64))

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: CountPartial | None,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> CountPartial:
        counted = group if inp is None else group[inp.valid[events]]
        count = np.bincount(counted, minlength=n_groups).astype(np.int64)
        if carried is not None:
            np.add.at(count, carried_group, carried.count)
        return CountPartial(count)

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: CountPartial | None, domains: Domains
    ) -> CountPartial:
        if inp is None:
            count = prefixes.rank + 1
        else:
            count = _seg_cumsum_int(inp.valid[prefixes.event].astype(np.int64), prefixes.group)
        if carried is not None:
            count = count + prefixes.carried(carried.count)
        return CountPartial(count)

    def final(self, partial: CountPartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        return pa.array(partial.count[sel], pa.int64())

    def state_columns(self, partial: CountPartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        return {self.name: pa.array(partial.count[sel], pa.int64())}

    def session_inputs(self, inp: EventInput | None, n_events: int) -> tuple[list[Any], list[Any]]:
        valid = inp.valid.tolist() if inp is not None else [True] * n_events
        return valid, valid

    def empty(self) -> Accumulator:
        return [0]

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0] += 1

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        acc[0] += other[0]

    def carried(self, partial: CountPartial, positions: np.ndarray | None) -> list[Accumulator]:
        return [[n] for n in partial.count.tolist()]

    def collect(self, accs: list[Accumulator]) -> CountPartial:
        return CountPartial(np.array([a[0] for a in accs], dtype=np.int64))


class SumAggregator(Aggregator):
    """``sum``: exact for integers (int64) and decimals (unscaled Python ints, see
    :mod:`.decimals`); a left fold in arrival order for floats. Null without a value."""

    input_kind = "number"

    def sum_type(self) -> pa.DataType:
        """The type of the partial sum."""
        return arrow_schemas.sum_type(self.spec.value_type(self.agg))

    def event_input(self, column: pa.Array, sorted_events: SortedEvents, domains: Domains) -> EventInput:
        valid = ~column.is_null().to_numpy(zero_copy_only=False)[sorted_events.rows]
        if is_decimal(column.type):
            values = decimal_ints(column)[sorted_events.rows]
        else:
            values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(sum_dtype(column.type))
            values = values[sorted_events.rows]
        return EventInput(values, valid)

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> SumPartial:
        take = pa.array(rows)
        column = self.state_column(table, take)
        sum_type = self.sum_type()
        if is_decimal(sum_type):
            total = decimal_ints(column, sum_type.scale)
            overflow = STATE_PREFIX + self.name + "_overflow"
            if overflow in table.column_names:
                high = pc.fill_null(table[overflow].take(take), 0).to_numpy().astype(np.int64)
                if high.any():
                    total = total + high.astype(object) * 10**sum_type.precision
        else:
            dtype = np.int64 if pa.types.is_integer(column.type) else np.float64
            total = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(dtype)
        count = pc.fill_null(table[STATE_PREFIX + self.name + "_n"].take(take), 0).to_numpy().astype(np.int64)
        return SumPartial(total, count)

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: SumPartial | None,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> SumPartial:
        assert inp is not None
        values, valid = inp.values[events], inp.valid[events]
        total = np.zeros(n_groups, dtype=values.dtype)
        count = np.zeros(n_groups, dtype=np.int64)
        if carried is not None:
            total[carried_group] = carried.total
            count[carried_group] = carried.count
        np.add.at(total, group[valid], values[valid])  # unbuffered: a left fold in arrival order
        count += np.bincount(group[valid], minlength=n_groups)
        return SumPartial(total, count)

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: SumPartial | None, domains: Domains
    ) -> SumPartial:
        assert inp is not None
        values, valid = inp.values[prefixes.event], inp.valid[prefixes.event]
        group, n = prefixes.group, len(prefixes.group)
        total = np.zeros(n, dtype=values.dtype)
        initial = np.zeros(prefixes.n_groups, dtype=values.dtype)
        count = _seg_cumsum_int(valid.astype(np.int64), group)
        if carried is not None:
            initial[prefixes.carried_group] = carried.total
            count = count + prefixes.carried(carried.count)
        # A sequential running sum per group: the same left fold as the final sum.
        starts = starts_of(group)
        ends = np.append(starts[1:], n)
        added = np.where(valid, values, 0)
        for a, b in zip(starts.tolist(), ends.tolist()):
            total[a:b] = np.cumsum(np.concatenate(([initial[group[a]]], added[a:b])))[1:]
        return SumPartial(total, count)

    def final(self, partial: SumPartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        count, total = partial.count[sel], partial.total[sel]
        if is_decimal(self.sum_type()):
            return decimal_array(total, count == 0, self.output_type())
        return pa.array(total, self.output_type(), mask=count == 0)

    def state_columns(self, partial: SumPartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        sum_type = self.sum_type()
        count = pa.array(partial.count[sel], pa.int64())
        if is_decimal(sum_type):
            low, high = split_overflow(partial.total[sel], sum_type)
            return {
                self.name: decimal_array(low, np.zeros(len(sel), bool), sum_type),
                self.name + "_n": count,
                self.name + "_overflow": pa.array(high, pa.int64()),
            }
        return {self.name: pa.array(partial.total[sel], sum_type), self.name + "_n": count}

    def empty(self) -> Accumulator:
        return [0, 0]  # count, total

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[1] = acc[1] + value
        acc[0] += 1

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        acc[0] += other[0]
        acc[1] = acc[1] + other[1]

    def carried(self, partial: SumPartial, positions: np.ndarray | None) -> list[Accumulator]:
        return [[n, total] for n, total in zip(partial.count.tolist(), partial.total.tolist())]

    def collect(self, accs: list[Accumulator]) -> SumPartial:
        return SumPartial(
            np.array([a[1] for a in accs], dtype=sum_dtype(self.spec.value_type(self.agg))),
            np.array([a[0] for a in accs], dtype=np.int64),
        )


class AvgAggregator(SumAggregator):
    """``avg``: the sum and the count of its values; decimal(p, s) averages to Spark's
    decimal(min(38, p + 4), min(38, s + 4)), rounded HALF_UP."""

    def final(self, partial: SumPartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        count, total = partial.count[sel], partial.total[sel]
        if is_decimal(self.sum_type()):
            return decimal_avg(total, count, self.sum_type(), self.output_type())
        with np.errstate(invalid="ignore", divide="ignore"):
            return pa.array(total.astype(np.float64) / np.where(count > 0, count, 1), pa.float64(), mask=count == 0)


class _CodeAggregator(Aggregator):
    """An aggregate whose value is one of its column's values, kept as a code."""

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> CodePartial:
        column = self.state_column(table, pa.array(rows))
        return CodePartial(codes_in(column, self.domain(domains).values))

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: CodePartial | None,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> CodePartial:
        assert inp is not None
        valid = inp.valid[events]
        code = np.full(n_groups, -1, dtype=np.int64)
        if carried is not None:
            code[carried_group] = carried.code
        self.fold(code, group[valid], inp.values[events][valid])
        return CodePartial(code)

    def fold(self, code: np.ndarray, group: np.ndarray, value: np.ndarray) -> None:
        """Fold non-null ``value``s (in arrival order) into ``code`` per group, in place."""
        raise NotImplementedError

    def final(self, partial: CodePartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        return _decode(partial.code[sel], self.domain(domains).values)

    def state_columns(self, partial: CodePartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        return {self.name: _decode(partial.code[sel], self.domain(domains).values)}

    def empty(self) -> Accumulator:
        return [-1]

    def carried(self, partial: CodePartial, positions: np.ndarray | None) -> list[Accumulator]:
        return [[code] for code in partial.code.tolist()]

    def collect(self, accs: list[Accumulator]) -> CodePartial:
        return CodePartial(np.array([a[0] for a in accs], dtype=np.int64))


class _ExtremumAggregator(_CodeAggregator):
    """min / max over codes that follow the values' order."""

    sorted_domain = True
    is_max: ClassVar[bool] = True

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: CodePartial | None, domains: Domains
    ) -> CodePartial:
        # A running maximum of (group, value) encoded in one int64; min runs on reversed codes.
        assert inp is not None
        code, valid = inp.values[prefixes.event], inp.valid[prefixes.event]
        big = np.int64(len(self.domain(domains).values) + 2)

        def flip(c: np.ndarray) -> np.ndarray:
            return c if self.is_max else big - 2 - c

        value = np.where(valid, flip(code), -1)
        initial = np.full(prefixes.n_groups, -1, dtype=np.int64)
        if carried is not None:
            initial[prefixes.carried_group] = np.where(carried.code >= 0, flip(carried.code), -1)
        value = np.maximum(value, initial[prefixes.group])
        group_base = prefixes.group.astype(np.int64) * big
        best = np.maximum.accumulate(group_base + (value + 1)) - group_base - 1
        return CodePartial(np.where(best < 0, -1, flip(best)))


class MinAggregator(_ExtremumAggregator):
    is_max = False

    def fold(self, code: np.ndarray, group: np.ndarray, value: np.ndarray) -> None:
        code[code < 0] = MAX_TIMESTAMP
        np.minimum.at(code, group, value)
        code[code == MAX_TIMESTAMP] = -1

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0] = value if acc[0] < 0 else min(acc[0], value)

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        acc[0] = other[0] if acc[0] < 0 else (min(acc[0], other[0]) if other[0] >= 0 else acc[0])


class MaxAggregator(_ExtremumAggregator):
    is_max = True

    def fold(self, code: np.ndarray, group: np.ndarray, value: np.ndarray) -> None:
        np.maximum.at(code, group, value)

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0] = max(acc[0], value)

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        acc[0] = max(acc[0], other[0])


class ArrivalAggregator(_CodeAggregator):
    """first / last: by arrival order. Of sessions, the partial keeps where its value
    arrived (:meth:`Spec.partial_fields`), since a merge can join a session that started
    later but arrived earlier; the accumulator is ``[code, position]``."""

    @property
    def keeps_arrival(self) -> bool:
        return self.spec.window.type is WindowType.SESSION

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> CodePartial:
        partial = super().from_state(table, rows, domains)
        if self.keeps_arrival:
            partial.arrival = _carried_arrival(table, self.agg, rows, pa.array(rows))
        return partial

    def state_columns(self, partial: CodePartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        out = super().state_columns(partial, sel, domains)
        if self.keeps_arrival:
            assert partial.arrival is not None
            null = partial.code[sel] < 0
            out[self.name + "_batch"] = pa.array(partial.arrival[0][sel], pa.int64(), mask=null)
            out[self.name + "_seq"] = pa.array(partial.arrival[1][sel], pa.int64(), mask=null)
        return out

    @staticmethod
    def pairs(inp: EventInput | None, prefixes: Prefixes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(code, valid, index) of each snapshot's own event, in snapshot order."""
        assert inp is not None
        return inp.values[prefixes.event], inp.valid[prefixes.event], np.arange(len(prefixes.group), dtype=np.int64)

    def empty(self) -> Accumulator:
        return [-1, 0]

    def carried(self, partial: CodePartial, positions: np.ndarray | None) -> list[Accumulator]:
        if positions is None:
            positions = np.zeros(len(partial.code), dtype=np.int64)
        return [[code, at] for code, at in zip(partial.code.tolist(), positions.tolist())]

    def collect(self, accs: list[Accumulator]) -> CodePartial:
        partial = super().collect(accs)
        if self.keeps_arrival:
            partial.position = np.array([a[1] for a in accs], dtype=np.int64)
        return partial


class FirstAggregator(ArrivalAggregator):
    def fold(self, code: np.ndarray, group: np.ndarray, value: np.ndarray) -> None:
        # The carried first wins; else the first non-null event.
        groups, first = np.unique(group, return_index=True)
        unset = code[groups] < 0
        code[groups[unset]] = value[first[unset]]

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: CodePartial | None, domains: Domains
    ) -> CodePartial:
        code, valid, index = self.pairs(inp, prefixes)
        n = len(index)
        first_at = np.full(prefixes.n_groups, n, dtype=np.int64)
        np.minimum.at(first_at, prefixes.group, np.where(valid, index, n))
        at = first_at[prefixes.group]
        out = np.where(at <= index, code[np.minimum(at, n - 1)] if n else -1, -1)
        if carried is not None:
            carried_code = prefixes.carried(carried.code, -1)
            out = np.where(carried_code >= 0, carried_code, out)
        return CodePartial(out)

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        if acc[0] < 0:
            acc[0], acc[1] = value, position

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        # The value that arrived first, whichever session holds it.
        if other[0] >= 0 and (acc[0] < 0 or other[1] < acc[1]):
            acc[0], acc[1] = other[0], other[1]


class LastAggregator(ArrivalAggregator):
    def fold(self, code: np.ndarray, group: np.ndarray, value: np.ndarray) -> None:
        # The last non-null event; else the carried last.
        groups, from_end = np.unique(group[::-1], return_index=True)
        code[groups] = value[len(value) - 1 - from_end]

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: CodePartial | None, domains: Domains
    ) -> CodePartial:
        code, valid, index = self.pairs(inp, prefixes)
        n = len(index)
        last_at = np.where(valid, index, -1)
        last_at = np.maximum.accumulate(last_at) if n else last_at
        out = np.where(last_at >= index - prefixes.rank, code[np.maximum(last_at, 0)] if n else -1, -1)
        if carried is not None:
            out = np.where(out >= 0, out, prefixes.carried(carried.code, -1))
        return CodePartial(out)

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0], acc[1] = value, position

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        if other[0] >= 0 and (acc[0] < 0 or other[1] > acc[1]):
            acc[0], acc[1] = other[0], other[1]


class DistinctAggregator(Aggregator):
    """``distinct``: the number of distinct non-null values; the partial is the set of
    values (carried as a list in value order)."""

    def domain_values(self, state_column: pa.Array) -> pa.Array:
        return pc.list_flatten(state_column)

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> DistinctPartial:
        lengths, member_group, members = _list_members(self.state_column(table, pa.array(rows)))
        return DistinctPartial(lengths, member_group, codes_in(members, self.domain(domains).values))

    def _width(self, domains: Domains) -> np.int64:
        return np.int64(len(self.domain(domains).values) + 1)

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: DistinctPartial | None,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> DistinctPartial:
        assert inp is not None
        carried_members = (carried.member_group, carried.member_code) if carried is not None else None
        member_group, member_code = _with_carried_members(inp, group, events, carried_group, carried_members)
        # Distinct (group, value) pairs, sorted (NumPy's sort of int64 is vectorised: ~10x
        # faster than a hash pass at a million pairs); their order does not matter.
        width = self._width(domains)
        pairs = sorted_distinct(member_group.astype(np.int64) * width + member_code)
        unique_group, unique_code = pairs // width, pairs % width
        return DistinctPartial(
            np.bincount(unique_group, minlength=n_groups).astype(np.int64), unique_group, unique_code
        )

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: DistinctPartial | None, domains: Domains
    ) -> DistinctPartial:
        assert inp is not None
        code, valid = inp.values[prefixes.event], inp.valid[prefixes.event]
        group, n = prefixes.group, len(prefixes.group)
        width = self._width(domains)
        pair = group.astype(np.int64) * width + np.where(valid, code, 0)
        seen_carried = np.zeros(n, dtype=bool)
        if carried is not None:
            carried_pair = prefixes.carried_group[carried.member_group].astype(np.int64) * width + carried.member_code
            seen_carried = np.isin(pair, carried_pair)
        valid_at = np.flatnonzero(valid)
        _, first = np.unique(pair[valid_at], return_index=True)
        new = np.zeros(n, dtype=bool)
        new[valid_at[first]] = True
        new &= ~seen_carried
        count = _seg_cumsum_int(new.astype(np.int64), group)
        if carried is not None:
            count = count + prefixes.carried(np.bincount(carried.member_group, minlength=len(prefixes.carried_group)))
        return DistinctPartial(count, np.zeros(0, np.int64), np.zeros(0, np.int64))

    def final(self, partial: DistinctPartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        return pa.array(partial.count[sel], pa.int64())

    def state_columns(self, partial: DistinctPartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        # Members of the selected groups, as one sorted list per group.
        rows, codes = _selected_members(len(partial.count), partial.member_group, partial.member_code, sel)
        # Each list in value order: the carried state must not depend on input row order.
        values = _decode(codes, self.domain(domains).values)
        order = pc.sort_indices(pa.table({"g": rows, "v": values}), [("g", "ascending"), ("v", "ascending")])
        rows = rows[order.to_numpy()]
        values = values.take(order)
        offsets = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=len(sel)))))
        return {self.name: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)}

    def empty(self) -> Accumulator:
        return [set()]

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0].add(value)

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        acc[0] |= other[0]

    def copy(self, acc: Accumulator) -> Accumulator:
        return [set(acc[0])]

    def carried(self, partial: DistinctPartial, positions: np.ndarray | None) -> list[Accumulator]:
        accs: list[Accumulator] = [[set()] for _ in range(len(partial.count))]
        for row, code in zip(partial.member_group.tolist(), partial.member_code.tolist()):
            accs[row][0].add(code)
        return accs

    def collect(self, accs: list[Accumulator]) -> DistinctPartial:
        rows = [r for r, a in enumerate(accs) for _ in a[0]]
        codes = [c for a in accs for c in sorted(a[0])]
        return DistinctPartial(
            np.array([len(a[0]) for a in accs], dtype=np.int64),
            np.array(rows, dtype=np.int64),
            np.array(codes, dtype=np.int64),
        )


AGGREGATORS: dict[str, type[Aggregator]] = {
    "count": CountAggregator,
    "sum": SumAggregator,
    "avg": AvgAggregator,
    "min": MinAggregator,
    "max": MaxAggregator,
    "first": FirstAggregator,
    "last": LastAggregator,
    "distinct": DistinctAggregator,
}


def aggregator(agg: Aggregate, spec: Spec) -> Aggregator:
    """The :class:`Aggregator` of ``agg`` (its type's class, in :data:`AGGREGATORS`)."""
    return AGGREGATORS[agg.type](agg, spec)


@dataclass
class MomentsPartial:
    """The exact moments of a group's values: non-null values, their sum and the sum of
    their squares as exact fractions (of the finite values), and the non-finite values."""

    count: np.ndarray
    total: np.ndarray  # object: Fraction (or int 0)
    squares: np.ndarray  # object: Fraction (or int 0)
    nonfinite: np.ndarray


def _fractions(column: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A numeric column's values as exact Fractions (object array; 0 for nulls and
    non-finite floats) and which are non-finite (NaN, +-inf)."""
    t = column.type
    n = len(column)
    if is_decimal(t):
        scale = 10**t.scale
        values: list[Fraction | int] = [Fraction(m, scale) for m in decimal_ints(column).tolist()]
        return np.array(values + [0], dtype=object)[:n], np.zeros(n, dtype=bool)
    if pa.types.is_integer(t):
        ints = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64).tolist()
        return np.array([Fraction(v) for v in ints] + [0], dtype=object)[:n], np.zeros(n, dtype=bool)
    floats = pc.fill_null(column.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
    nonfinite = ~np.isfinite(floats)
    values = [0 if bad else Fraction(v) for v, bad in zip(floats.tolist(), nonfinite.tolist())]
    return np.array(values + [0], dtype=object)[:n], nonfinite


class StddevAggregator(Aggregator):
    """``stddev_pop`` and ``stddev_samp``: the standard deviation of the non-null values,
    over ``n`` (population) or ``n - 1`` (sample).

    Exact and split-independent: the partial holds ``n``, the sum and the sum of squares of
    the values as exact fractions (carried as text), so merging partials (another
    partition, a session merge) is exact integer arithmetic whatever the order. The result
    is ``sqrt(float(variance))``: the exact variance ``(sum(x^2) - sum(x)^2 / n) / d``
    rounded once to a double, then IEEE square root. Null without a value (``stddev_samp``:
    with fewer than two); NaN if any value is NaN or infinite.
    """

    input_kind = "exact"

    @property
    def sample(self) -> bool:
        return self.agg.type == "stddev_samp"

    def event_input(self, column: pa.Array, sorted_events: SortedEvents, domains: Domains) -> EventInput:
        valid = ~column.is_null().to_numpy(zero_copy_only=False)[sorted_events.rows]
        values, nonfinite = _fractions(column)
        return EventInput(values[sorted_events.rows], valid, nonfinite[sorted_events.rows])

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> MomentsPartial:
        take = pa.array(rows)

        def fractions(suffix: str) -> np.ndarray:
            texts = self.state_column(table, take, suffix).to_pylist()
            return np.array([Fraction(t or 0) for t in texts] + [0], dtype=object)[: len(rows)]

        def ints(suffix: str) -> np.ndarray:
            column = pc.fill_null(self.state_column(table, take, suffix), 0)
            counts: NDArray[np.int64] = column.to_numpy().astype(np.int64)
            return counts

        return MomentsPartial(ints("_n"), fractions(""), fractions("_squares"), ints("_nonfinite"))

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: MomentsPartial | None,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> MomentsPartial:
        assert inp is not None and inp.nonfinite is not None
        valid = inp.valid[events]
        counted, values = group[valid], inp.values[events][valid]
        out = MomentsPartial(
            np.bincount(counted, minlength=n_groups).astype(np.int64),
            np.zeros(n_groups, dtype=object),
            np.zeros(n_groups, dtype=object),
            np.bincount(counted, weights=inp.nonfinite[events][valid], minlength=n_groups).astype(np.int64),
        )
        if carried is not None:
            out.total[carried_group] = carried.total
            out.squares[carried_group] = carried.squares
            np.add.at(out.count, carried_group, carried.count)
            np.add.at(out.nonfinite, carried_group, carried.nonfinite)
        np.add.at(out.total, counted, values)  # exact: the order does not matter
        np.add.at(out.squares, counted, values * values)
        return out

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: MomentsPartial | None, domains: Domains
    ) -> MomentsPartial:
        assert inp is not None and inp.nonfinite is not None
        valid = inp.valid[prefixes.event]
        values = np.where(valid, inp.values[prefixes.event], 0)
        group = prefixes.group
        out = MomentsPartial(
            _seg_cumsum_int(valid.astype(np.int64), group),
            _seg_cumsum(values, group),
            _seg_cumsum(values * values, group),
            _seg_cumsum_int((valid & inp.nonfinite[prefixes.event]).astype(np.int64), group),
        )
        if carried is not None:
            out.count = out.count + prefixes.carried(carried.count)
            out.nonfinite = out.nonfinite + prefixes.carried(carried.nonfinite)
            out.total = out.total + prefixes.carried(carried.total)
            out.squares = out.squares + prefixes.carried(carried.squares)
        return out

    def final(self, partial: MomentsPartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        out: list[float | None] = []
        for n, bad, total, squares in zip(
            partial.count[sel].tolist(),
            partial.nonfinite[sel].tolist(),
            partial.total[sel].tolist(),
            partial.squares[sel].tolist(),
        ):
            divisor = n - 1 if self.sample else n
            if divisor <= 0:
                out.append(None)
            elif bad:
                out.append(math.nan)
            else:
                variance = (Fraction(squares) - Fraction(total) * total / n) / divisor
                out.append(math.sqrt(float(variance)))
        return pa.array(out, pa.float64())

    def state_columns(self, partial: MomentsPartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        return {
            self.name: pa.array([str(v) for v in partial.total[sel].tolist()], pa.string()),
            self.name + "_squares": pa.array([str(v) for v in partial.squares[sel].tolist()], pa.string()),
            self.name + "_n": pa.array(partial.count[sel], pa.int64()),
            self.name + "_nonfinite": pa.array(partial.nonfinite[sel], pa.int64()),
        }

    def session_inputs(self, inp: EventInput | None, n_events: int) -> tuple[list[Any], list[Any]]:
        assert inp is not None and inp.nonfinite is not None
        values = [None if bad else v for v, bad in zip(inp.values.tolist(), inp.nonfinite.tolist())]
        return values, inp.valid.tolist()

    def empty(self) -> Accumulator:
        return [0, 0, 0, 0]  # count, total, squares, non-finite

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0] += 1
        if value is None:
            acc[3] += 1
        else:
            acc[1] += value
            acc[2] += value * value

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        for i in range(4):
            acc[i] += other[i]

    def carried(self, partial: MomentsPartial, positions: np.ndarray | None) -> list[Accumulator]:
        return [
            list(r)
            for r in zip(
                partial.count.tolist(), partial.total.tolist(), partial.squares.tolist(), partial.nonfinite.tolist()
            )
        ]

    def collect(self, accs: list[Accumulator]) -> MomentsPartial:
        def objects(i: int) -> np.ndarray:
            return np.array([a[i] for a in accs] + [0], dtype=object)[: len(accs)]

        return MomentsPartial(
            np.array([a[0] for a in accs], dtype=np.int64),
            objects(1),
            objects(2),
            np.array([a[3] for a in accs], dtype=np.int64),
        )


def _seg_cumsum(v: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running exact sum (object array) restarting at each segment."""
    if len(v) == 0:
        return v
    c = np.cumsum(v)
    st = starts_of(seg)
    running: np.ndarray = c - np.repeat((c - v)[st], np.diff(np.append(st, len(v))))
    return running


@dataclass
class ValuesPartial:
    """Every non-null value of each group, as (group, value) pairs in any order."""

    count: np.ndarray
    member_group: np.ndarray
    member_value: np.ndarray  # float64


def _percentile_of_sorted(values: list[float], percentage: float) -> float:
    """Spark's ``percentile``: linear interpolation between the closest ranks of the
    sorted values: at position ``p * (n - 1)``, ``(hi - pos) * v[lo] + (pos - lo) * v[hi]``
    (``v[lo]`` itself when the two are equal, where the sum could round away from it)."""
    position = (len(values) - 1) * percentage
    lower, higher = math.floor(position), math.ceil(position)
    if lower == higher or values[lower] == values[higher]:  # equal neighbours: the value itself, as Spark
        return values[lower]
    return (higher - position) * values[lower] + (position - lower) * values[higher]


class PercentileAggregator(Aggregator):
    """``percentile``: the exact percentile (``percentage``, default the median) of the
    non-null values as doubles, interpolated like Spark's ``percentile``.

    Exact, not a sketch: the partial keeps every value (carried as a sorted list of
    doubles), so the result is split-independent; memory and state grow with the values
    of an open window (a t-digest would bound them but its result depends on the merge
    order). NaN sorts above every number; null without a value.
    """

    input_kind = "double"

    @property
    def percentage(self) -> float:
        return getattr(self.agg, "percentage", DEFAULT_PERCENTAGE)

    def event_input(self, column: pa.Array, sorted_events: SortedEvents, domains: Domains) -> EventInput:
        valid = ~column.is_null().to_numpy(zero_copy_only=False)[sorted_events.rows]
        if is_decimal(column.type):  # correctly rounded, like a Python float(Decimal)
            scale = 10**column.type.scale
            doubles = np.array([m / scale for m in decimal_ints(column).tolist()], dtype=np.float64)
        else:
            doubles = pc.fill_null(column.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        return EventInput(doubles.astype(np.float64)[sorted_events.rows], valid)

    def from_state(self, table: pa.Table, rows: np.ndarray, domains: Domains) -> ValuesPartial:
        lengths, member_group, members = _list_members(self.state_column(table, pa.array(rows)))
        return ValuesPartial(lengths, member_group, members.to_numpy(zero_copy_only=False).astype(np.float64))

    def reduce(
        self,
        inp: EventInput | None,
        group: np.ndarray,
        n_groups: int,
        events: np.ndarray,
        carried: ValuesPartial | None,
        carried_group: np.ndarray,
        domains: Domains,
    ) -> ValuesPartial:
        assert inp is not None
        carried_members = (carried.member_group, carried.member_value) if carried is not None else None
        member_group, member_value = _with_carried_members(inp, group, events, carried_group, carried_members)
        return ValuesPartial(np.bincount(member_group, minlength=n_groups).astype(np.int64), member_group, member_value)

    def _sorted_lists(self, partial: ValuesPartial, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, values): the selected groups' values, each group's sorted."""
        rows, values = _selected_members(len(partial.count), partial.member_group, partial.member_value, sel)
        order = np.lexsort((values, rows))  # NaN last in each group
        offsets = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=len(sel)))))
        return offsets, values[order]

    def final(self, partial: ValuesPartial, sel: np.ndarray, domains: Domains) -> pa.Array:
        offsets, values = self._sorted_lists(partial, sel)
        listed = values.tolist()
        out = [
            _percentile_of_sorted(listed[a:b], self.percentage) if b > a else None
            for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
        ]
        return pa.array(out, pa.float64())

    def state_columns(self, partial: ValuesPartial, sel: np.ndarray, domains: Domains) -> dict[str, pa.Array]:
        offsets, values = self._sorted_lists(partial, sel)
        return {self.name: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.float64()))}

    def running(
        self, inp: EventInput | None, prefixes: Prefixes, carried: ValuesPartial | None, domains: Domains
    ) -> ValuesPartial:
        # Every prefix's values, listed in full: quadratic in a window's events, for snapshots only.
        assert inp is not None
        valid, values = inp.valid[prefixes.event], inp.values[prefixes.event]
        carried_values: dict[int, list[float]] = {}
        if carried is not None:
            for row, v in zip(carried.member_group.tolist(), carried.member_value.tolist()):
                carried_values.setdefault(row, []).append(v)
        member_group: list[int] = []
        member_value: list[float] = []
        counts: list[int] = []
        so_far: list[float] = []
        starts = set(starts_of(prefixes.group).tolist())
        for i, (ok, v, ci) in enumerate(zip(valid.tolist(), values.tolist(), prefixes.carried_index.tolist())):
            if i in starts:
                so_far = list(carried_values.get(ci, [])) if ci >= 0 else []
            if ok:
                so_far.append(v)
            member_group += [i] * len(so_far)
            member_value += so_far
            counts.append(len(so_far))
        return ValuesPartial(
            np.array(counts, dtype=np.int64),
            np.array(member_group, dtype=np.int64),
            np.array(member_value, dtype=np.float64),
        )

    def empty(self) -> Accumulator:
        return [[]]

    def apply(self, acc: Accumulator, value: Any, position: int) -> None:
        acc[0].append(value)

    def combine(self, acc: Accumulator, other: Accumulator) -> None:
        acc[0].extend(other[0])

    def copy(self, acc: Accumulator) -> Accumulator:
        return [list(acc[0])]

    def carried(self, partial: ValuesPartial, positions: np.ndarray | None) -> list[Accumulator]:
        accs: list[Accumulator] = [[[]] for _ in range(len(partial.count))]
        for row, v in zip(partial.member_group.tolist(), partial.member_value.tolist()):
            accs[row][0].append(v)
        return accs

    def collect(self, accs: list[Accumulator]) -> ValuesPartial:
        rows = [r for r, a in enumerate(accs) for _ in a[0]]
        values = [v for a in accs for v in a[0]]
        return ValuesPartial(
            np.array([len(a[0]) for a in accs], dtype=np.int64),
            np.array(rows, dtype=np.int64),
            np.array(values, dtype=np.float64),
        )


AGGREGATORS.update(
    {"stddev_pop": StddevAggregator, "stddev_samp": StddevAggregator, "percentile": PercentileAggregator}
)
