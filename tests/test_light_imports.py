"""The spec layer imports no execution code (issue 51): ``import windowing``, the
configuration, the shared vocabulary, the kernel, the storage's path arithmetic and the
command line's ``--help`` load no pyspark, py4j or pandera, so that reading a pipeline,
the fast tier and ``rewindow <command> --help`` start no Spark machinery.

Each module is imported in a fresh interpreter (this process has long imported pyspark);
a failure names the heavy modules it found and which of ours were loaded with them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Top-level packages the light modules must not load: Spark's Python side (pyspark,
#: pandas-on-Spark included), its JVM bridge, and pandera (whose Spark backend they bring).
HEAVY = ("pyspark", "py4j", "pandera")

#: The modules that promise to be light (their docstrings say so).
LIGHT = (
    "windowing",
    "windowing.config",
    "windowing.config.outputs",
    "windowing.contract",
    "windowing.partitions",
    "windowing.durations",
    "windowing.metrics",
    "windowing.kernel",
    "windowing.storage",
    "windowing.storage.lake",
    "windowing.jvm_lookups",
    # `rewindow --help` and every command's: the commands import pyspark inside run() only
    "windowing.command_line",
    "windowing.cli",
)

_PROBE = """
import json, sys
import {module}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
ours = sorted(m for m in sys.modules if m.split(".")[0] == "windowing")
print(json.dumps({{"heavy": heavy, "ours": ours}}))
"""


def _imported_by(module: str) -> dict[str, list[str]]:
    probe = _PROBE.format(module=module, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("module", LIGHT)
def test_a_light_module_imports_no_spark(module):
    found = _imported_by(module)
    assert found["heavy"] == [], f"import {module} loads {found['heavy'][:5]}; ours loaded: {found['ours']}"
