"""py4j's class and static-method lookups, made once per JVM (windowing.jvm_lookups):
counted in py4j round trips on the test run's session, which rewindow built."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
from py4j.protocol import Py4JError

from windowing.jvm_lookups import remember_jvm_lookups

pytestmark = pytest.mark.spark


@pytest.fixture
def round_trips(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Any]], int]]:
    """How many py4j round trips a call makes, counted at the session's gateway client."""
    client = spark.sparkContext._gateway._gateway_client
    count = [0]
    send = client.send_command

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return send(*args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)

    def trips(call: Callable[[], Any]) -> int:
        count[0] = 0
        call()
        return count[0]

    yield trips


def test_a_spark_function_costs_one_round_trip_once_it_has_been_found(spark: Any, round_trips: Any) -> None:
    from pyspark.sql import functions as F

    remember_jvm_lookups()  # the session fixture's spark_session did it already; again is a no-op
    F.col("warm")
    # Without remembering: three (the functions class, its method "col", then the call).
    assert round_trips(lambda: F.col("user_id")) == 1
    assert round_trips(lambda: F.lit(3)) <= 2  # a literal once "lit" is found: the call (and a type)
    df = spark.createDataFrame([(1, "a"), (2, "b")], "n int, s string")
    assert df.select(F.col("n") + 1, F.upper("s")).orderBy("n").collect() == [(2, "A"), (3, "B")]


def test_what_can_change_is_looked_up_every_time(spark: Any, round_trips: Any) -> None:
    jvm = spark.sparkContext._jvm
    # A class that is not there (py4j takes the name for a package): asked each time, in
    # case it appears, and a method of a class that is not there fails each time.
    for _ in range(2):
        assert round_trips(lambda: getattr(jvm, "org.example.rewindow.NoSuchClass")) == 1
        with pytest.raises(Py4JError, match="does not exist"):
            getattr(jvm, "java.lang.Integer").noSuchMethod  # noqa: B018 - the lookup is the point
    integer = getattr(jvm, "java.lang.Integer")
    assert round_trips(lambda: getattr(jvm, "java.lang.Integer")) == 0  # a full name: found once
    # A static field is a value: read from the JVM each time.
    assert integer.MAX_VALUE == 2**31 - 1
    assert round_trips(lambda: integer.MAX_VALUE) == 1
    # A short name that is not PySpark's own resolves through the view's imports, which
    # java_import can change: looked up each time.
    jvm.SparkConf  # noqa: B018 - the lookup is the point
    assert round_trips(lambda: jvm.SparkConf) == 1
    # A static method is found once.
    assert integer.parseInt("41") + 1 == 42
    assert round_trips(lambda: integer.parseInt) == 0
