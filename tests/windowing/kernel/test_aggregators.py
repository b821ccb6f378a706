"""The kernel's Aggregator classes one at a time (issue 14): every configured type has one,
and the new statistics keep their rules (the model comparisons cover the rest)."""

from __future__ import annotations

import math

import pytest

from windowing.config import AGGREGATE_TYPES
from windowing.kernel.aggregates import AGGREGATORS, _percentile_of_sorted


def test_every_aggregate_type_has_an_aggregator():
    assert set(AGGREGATORS) == set(AGGREGATE_TYPES)


@pytest.mark.parametrize(
    ("values", "percentage", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),  # between ranks 1 and 2
        ([1.0, 2.0, 3.0, 4.0], 1.0, 4.0),  # the maximum
        ([1.0, 2.0, 3.0, 4.0], 0.0, 1.0),  # the minimum
        ([0.1, 0.1], 0.3, 0.1),  # equal neighbours: 0.7 * 0.1 + 0.3 * 0.1 would round to 0.09999999999999999
        ([5.0], 0.9, 5.0),  # one value
    ],
)
def test_percentile_interpolates_like_spark(values, percentage, expected):
    assert _percentile_of_sorted(values, percentage) == expected


def test_stddev_partials_merge_exactly_in_any_order():
    from fractions import Fraction

    values = [0.1, 0.2, 0.3, 1e16, -1.5, 2.25]
    parts = [values[:2], values[2:3], values[3:]]

    def moments(xs):
        return len(xs), sum(map(Fraction, xs), Fraction(0)), sum((Fraction(x) ** 2 for x in xs), Fraction(0))

    merged = [sum(m) for m in zip(*(moments(p) for p in reversed(parts)))]
    assert tuple(merged) == moments(values)
    n, total, squares = merged
    assert math.sqrt(float((squares - total * total / n) / n)) == pytest.approx(3.7267799624996495e15)
