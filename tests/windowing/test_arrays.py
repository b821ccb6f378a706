"""The segmented NumPy helpers against one-element-at-a-time versions, on narrow and very
wide value ranges (which take different paths) and with minus infinity mixed in."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tests.support.generators import cases
from windowing.arrays import (
    MIN_TIMESTAMP,
    packed_keys,
    searchsorted_left,
    seg_cummax,
    seg_searchsorted,
    sort_order,
    sorted_distinct,
    value_order_keys,
)

VALUES = st.one_of(
    st.integers(-50, 50),
    st.sampled_from([MIN_TIMESTAMP, 2**62, -(2**62), 2**63 - 1, 1_700_000_000_000]),
)


@st.composite
def segmented(draw, sorted_inside=False):
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6))
    seg = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    values = np.array([draw(VALUES) for _ in range(len(seg))], dtype=np.int64)
    if sorted_inside:
        for s in range(len(sizes)):
            values[seg == s] = np.sort(values[seg == s])
    return values, seg


@cases(300)
@given(segmented())
def test_seg_cummax_restarts_at_every_segment(vs):
    values, seg = vs
    expected, run, prev = [], None, None
    for v, s in zip(values.tolist(), seg.tolist()):
        run = v if s != prev else max(run, v)
        prev = s
        expected.append(run)
    assert seg_cummax(values, seg).tolist() == expected


@cases(300)
@given(segmented(sorted_inside=True), segmented())
def test_seg_searchsorted_finds_the_first_greater_or_equal_in_the_segment(table, queries):
    tv, ts = table
    qv, qs = queries
    got = seg_searchsorted(tv, ts, qv, qs)
    for q, s, g in zip(qv.tolist(), qs.tolist(), got.tolist()):
        inside = [i for i in range(len(tv)) if ts[i] == s]
        hit = [i for i in inside if tv[i] >= q]
        if hit:
            assert g == hit[0]
        else:  # past the segment's last element (its end, or the next segment's start)
            end = (inside[-1] + 1) if inside else int(np.searchsorted(ts, s))
            assert g == end


@cases(300)
@given(
    st.lists(st.integers(-(2**40), 2**40), max_size=30),
    st.integers(-300, 300),
    st.integers(1, 500),
    st.lists(st.integers(-600, 900), max_size=30),
)
def test_searchsorted_left_is_numpys_on_dense_and_sparse_values(far, base, span, queries):
    """The counting table (dense batch ids) and the binary search (sparse) agree with numpy,
    duplicates, queries below, between and above the values included."""
    dense = np.sort(np.array([base + (q % span) for q in queries[: len(queries) // 2 + 1]], np.int64))
    for values in (dense, np.sort(np.array(far, np.int64)), np.unique(dense)):
        wanted = np.array([base + q for q in queries], np.int64)
        assert searchsorted_left(values, wanted).tolist() == np.searchsorted(values, wanted, side="left").tolist()


def test_value_order_keys_orders_floats_totally_and_nulls_first():
    import pyarrow as pa

    arr = pa.array([1.0, -0.0, 0.0, None, float("nan"), -2.0, float("-inf")])
    order = np.lexsort(value_order_keys(arr))
    assert [repr(v) for v in arr.take(pa.array(order)).to_pylist()] == [
        "None",
        "-inf",
        "-2.0",
        "-0.0",
        "0.0",
        "1.0",
        "nan",
    ]


# A key's values: a few distinct ones, on a lattice (window starts an hour apart from an
# odd offset), or spread over the whole int64 range (no packing possible).
KEY = st.one_of(
    st.lists(st.integers(-3, 3), min_size=1, max_size=1),
    st.lists(st.integers(0, 2_000), min_size=1, max_size=1).map(lambda v: [7 + 3_600_000 * v[0]]),
    st.lists(st.sampled_from([MIN_TIMESTAMP, -(2**62), 2**62, 2**63 - 1]), min_size=1, max_size=1),
)


@cases(300)
@given(st.integers(1, 4).flatmap(lambda k: st.lists(st.tuples(*[KEY] * k), min_size=1, max_size=40)))
def test_packed_keys_sort_as_numpys_lexsort_whatever_the_ranges(rows):
    keys = [np.array([r[i][0] for r in rows], dtype=np.int64) for i in range(len(rows[0]))]
    expected = np.lexsort(keys)
    packed = packed_keys(keys)
    got = sort_order(packed, stable=True)
    # The same order, ties (equal in every key) in input order as lexsort leaves them.
    assert got.tolist() == expected.tolist()
    if len(packed) == 1:  # packed: equal rows get equal values, and only they
        pairs = [(i, j) for i in range(len(rows)) for j in range(len(rows))]
        same = [tuple(k[i] for k in keys) == tuple(k[j] for k in keys) for i, j in pairs]
        assert same == [packed[0][i] == packed[0][j] for i, j in pairs]


def test_packed_keys_divide_a_lattice_by_its_step():
    """Window starts an hour apart over 2 days and event ids: too wide as they are (ms),
    one int64 once the starts are counted in hours."""
    rng = np.random.default_rng(3)
    start = 1_700_000_000_000 + 3_600_000 * rng.integers(0, 48, 10_000)
    event = rng.permutation(10_000)
    key = rng.integers(0, 2**20, 10_000)
    keys = [event, start + 3_600_000 - start, start, start + 3_600_000, key]
    assert len(packed_keys(keys)) == 1
    assert sort_order(packed_keys(keys)).tolist() == np.lexsort(keys).tolist()


@cases(200)
@given(st.lists(st.sampled_from([0, 1, -1, 5, 2**62, -(2**63)]), max_size=30))
def test_sorted_distinct_is_numpys_unique(values):
    v = np.array(values, dtype=np.int64)
    assert sorted_distinct(v).tolist() == np.unique(v).tolist()
