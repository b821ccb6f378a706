"""What a Spark Python worker sets once, at its first task (``tasks.settle_worker``): a frozen
heap, and glibc's ``malloc`` keeping freed memory for the kernel's next arrays."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import pytest

from windowing.runner import tasks

# Allocates and frees the kernel's kind of arrays (500,000 int64s: 4 MB each), then prints
# the minor page faults the second round took (the first one grows the heap).
_ROUNDS = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from windowing.runner import tasks
    kept = tasks.keep_freed_memory() if sys.argv[1] == "keep" else None

    def faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(50):
            a = np.arange(500_000) * 2
            b = a.argsort()
            del a, b
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults()
    print(kept, faults())
    """
)


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, check=True).stdout
    kept, n = out.split()
    return kept, int(n)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
def test_freed_arrays_are_reused_rather_than_mapped_and_zeroed_again():
    _, by_default = _faults("default")
    kept, after = _faults("keep")
    if kept != "True":
        pytest.skip("this C library has no glibc mallopt (musl?): the defaults stay")
    # 50 rounds of two 4 MB arrays: ~100,000 page faults by default, none once memory is kept.
    assert by_default > 20_000
    assert after < by_default / 20


def test_nothing_is_settled_outside_a_spark_task():
    frozen = gc.get_freeze_count()
    tasks.settle_worker()  # the driver, the tests' in-process harness: no TaskContext
    assert gc.get_freeze_count() == frozen


def test_a_worker_settles_at_its_first_task_only(monkeypatch):
    calls = []
    monkeypatch.setattr(tasks, "_settled", False)
    monkeypatch.setattr(tasks.TaskContext, "get", staticmethod(lambda: object()))  # as in a Spark task
    monkeypatch.setattr(tasks, "_freeze_heap", lambda: calls.append("freeze"))
    monkeypatch.setattr(tasks, "keep_freed_memory", lambda: calls.append("keep") or True)
    for _ in range(3):  # three tasks in one reused worker
        tasks.settle_worker()
    assert calls == ["freeze", "keep"]
