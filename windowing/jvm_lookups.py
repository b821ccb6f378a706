"""py4j's lookups of JVM classes and static methods, made once per JVM rather than per call.

Every ``pyspark.sql.functions`` call in a classic session (``F.col``, ``F.lit``,
``F.when``, ...) finds its JVM function again: ``getattr(jvm, "org.apache.spark.sql.functions")``
asks the JVM for the class, then ``getattr(that_class, "col")`` for the method, two py4j
round trips before the call itself; ``select`` and ``groupBy`` find
``PythonUtils.toSeq`` the same way: a good share of the round trips that planning one
hourly partition's replay and checks makes (counted in docs/architecture.md).

What such a lookup finds does not change while the JVM runs: a class by its full name,
a class's static method, its nested class. :func:`remember_jvm_lookups` makes py4j keep
them, per gateway connection (``GatewayClient``), for as long as that gateway lives.
What can change is looked up each time, as before: a static *field* (a value), a name
that is not a class (py4j takes it for a package, and asks again next time) or a member
that is not there (an error, every time), and a short class name other than PySpark's
own (:data:`PYSPARK_SHORT_NAMES`), which resolves through the view's imports and a
later ``java_import`` can redirect.

Process-wide and idempotent; a Spark Connect session uses no py4j and is unaffected.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

#: Short names PySpark itself looks up on ``SparkContext._jvm`` (through the imports it
#: sets up when it starts the gateway): remembered like full names. Any other short name
#: is looked up each time.
PYSPARK_SHORT_NAMES = frozenset({"functions", "PythonUtils", "PythonSQLUtils", "SerDeUtil", "PythonRDD"})

#: The attribute each gateway client keeps its remembered lookups in.
_CACHE_ATTR = "_rewindow_jvm_lookups"

_installed = False
_lock = threading.Lock()


def remember_jvm_lookups() -> None:
    """Make py4j remember class and static-method lookups (the module docstring); once
    per process, later calls do nothing."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        from py4j import java_gateway as gw  # noqa: PLC0415 - py4j comes with pyspark, imported only when a session is

        gw.JVMView.__getattr__ = _remembered_view(gw.JVMView.__getattr__, gw.JavaClass)
        gw.JavaClass.__getattr__ = _remembered_member(gw.JavaClass.__getattr__, (gw.JavaMember, gw.JavaClass))
        _installed = True


def _recall(client: Any, key: tuple[str, ...], find: Callable[[], Any], kept: type | tuple[type, ...]) -> Any:
    """What ``find()`` gives for ``key``: remembered in ``client`` (on first use; it lives as
    long as the client does) when it is one of ``kept``, else asked again next time."""
    cache: dict[tuple[str, ...], Any] | None = getattr(client, _CACHE_ATTR, None)
    if cache is None:
        cache = {}
        setattr(client, _CACHE_ATTR, cache)
    found = cache.get(key)
    if found is None:
        found = find()
        if isinstance(found, kept):
            cache[key] = found
    return found


def _remembered_view(lookup: Callable[[Any, str], Any], java_class: type) -> Callable[[Any, str], Any]:
    """``JVMView.__getattr__`` that remembers the classes a full name (or one of
    :data:`PYSPARK_SHORT_NAMES`) finds; packages and other short names as before."""

    def __getattr__(self: Any, name: str) -> Any:
        if "." not in name and name not in PYSPARK_SHORT_NAMES:
            return lookup(self, name)
        # A name that is no class comes back as a package: not remembered.
        return _recall(self._gateway_client, ("view", self._id, name), lambda: lookup(self, name), java_class)

    return __getattr__


def _remembered_member(lookup: Callable[[Any, str], Any], kept: tuple[type, ...]) -> Callable[[Any, str], Any]:
    """``JavaClass.__getattr__`` that remembers static methods and nested classes; a static
    field's value is read each time."""

    def __getattr__(self: Any, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            return lookup(self, name)  # py4j's own handling of Python's special names
        return _recall(self._gateway_client, ("member", self._fqn, name), lambda: lookup(self, name), kept)

    return __getattr__
