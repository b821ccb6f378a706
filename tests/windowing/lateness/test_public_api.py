"""The lateness analyses use the kernel's and the runner's public API only (issue 51): the
names in ``windowing.kernel.__all__`` (its few user-facing concepts), in
``windowing.kernel.phases.__all__`` (the phases the delay sweep runs one at a time) and in
``windowing.runner.api.__all__``; nothing from the kernel's other modules or the replay's
own runner modules, and no private name.

The modules are read, not imported: every ``import`` of the kernel or the runner, and every
attribute read from a module so imported (``K.process``), is checked against the lists.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import windowing

ROOT = Path(windowing.__file__).parent
LATENESS = sorted((ROOT / "lateness").glob("*.py"))
#: The modules whose ``__all__`` is the API, and the packages only they may be used from.
API_MODULES = {
    "windowing.kernel": ROOT / "kernel" / "__init__.py",
    "windowing.kernel.phases": ROOT / "kernel" / "phases.py",
    "windowing.runner.api": ROOT / "runner" / "api.py",
}
#: ``windowing.kernel.__all__`` stays a short list of user-facing concepts.
KERNEL_ALL_MAX = 16
GUARDED = ("windowing.kernel", "windowing.runner")


def declared(path: Path) -> set[str]:
    """The names a module's ``__all__`` lists (read from its source)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{path}: no __all__")


PUBLIC = {module: declared(path) for module, path in API_MODULES.items()}


def _guarded(module: str) -> bool:
    return any(module == g or module.startswith(g + ".") for g in GUARDED)


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (ROOT.parent / rel).with_suffix(".py").is_file() or (ROOT.parent / rel / "__init__.py").is_file()


def findings(source: str) -> list[str]:
    """What ``source`` uses of the kernel or the runner outside their public API."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # a local name -> the guarded module it is
    used: list[tuple[int, str, str]] = []  # (line, module, name)
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _guarded(full) and _is_module(full):
                    bound[alias.asname or alias.name] = full
                elif _guarded(node.module):
                    used.append((node.lineno, node.module, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level:
            bad.append(f"line {node.lineno}: a relative import (name the module)")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _guarded(alias.name):
                    if alias.asname is None:
                        bad.append(f"line {node.lineno}: import {alias.name} (import the API module as a name)")
                    else:
                        bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            used.append((node.lineno, bound[node.value.id], node.attr))
    for module in set(bound.values()) - set(PUBLIC):
        bad.append(f"{module}: not a public API module (use {', '.join(PUBLIC)})")
    for line, module, name in used:
        if name.startswith("_"):
            bad.append(f"line {line}: {module}.{name} is private")
        elif module not in PUBLIC:
            bad.append(f"line {line}: {module}.{name} is not from a public API module")
        elif name not in PUBLIC[module]:
            bad.append(f"line {line}: {module}.{name} is not in {module}.__all__")
    return bad


def test_the_lateness_modules_are_all_read():
    assert len(LATENESS) > 10
    assert {p.name for p in LATENESS} >= {"job.py", "sweep.py", "whatif.py", "latency.py", "variants.py"}


@pytest.mark.parametrize("path", LATENESS, ids=lambda p: p.name)
def test_a_lateness_module_uses_the_public_api_only(path):
    assert findings(path.read_text()) == []


def test_the_lateness_package_uses_both_apis():
    """The check sees the imports it judges (so an empty list above is no accident)."""
    text = "\n".join(p.read_text() for p in LATENESS)
    assert "from windowing import kernel as K" in text
    assert "from windowing.kernel.phases import" in text
    assert "from windowing.runner.api import" in text


def test_the_kernels_all_is_short():
    assert len(PUBLIC["windowing.kernel"]) <= KERNEL_ALL_MAX, sorted(PUBLIC["windowing.kernel"])
    assert {"process", "Spec", "KernelOutput", "Timeline"} <= PUBLIC["windowing.kernel"]


@pytest.mark.parametrize("module", sorted(API_MODULES))
def test_every_public_name_exists(module):
    """Each ``__all__`` names what its module has (so a removed name is not still listed)."""
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == sorted(PUBLIC[module])
    assert len(imported.__all__) == len(PUBLIC[module]), f"{module}.__all__ lists a name twice"
    assert [n for n in imported.__all__ if not hasattr(imported, n)] == []


@pytest.mark.parametrize(
    "source",
    [
        "from windowing.kernel.inputs import state_column",
        "from windowing.kernel.outputs import LatePairs",
        "from windowing.kernel import slices",
        "from windowing.kernel import _decimal_ints",
        "from windowing.kernel import KB_BATCH",
        "from windowing.kernel import state_rows",
        "from windowing.kernel.phases import hashable",
        "from windowing.kernel.phases import _private",
        "from windowing.kernel import phases as P\nP.worker_timelines",
        "from windowing import kernel as K\nK.KeyIds",
        "from windowing import kernel as K\nK.seg_searchsorted",
        "from windowing import kernel as K\nK.phases.KeyIds",
        "from windowing.runner import tasks",
        "from windowing.runner.tasks import BLOB_ROWS",
        "from windowing.runner.columns import col as _col",
        "from windowing.runner.api import tasks",
        "from windowing.runner.api import _private",
        "from windowing import kernel as K\nK.fixed_windows",
        "from windowing import kernel as K\nK._heartbeat_flush",
        "from windowing.runner import api\napi.tasks",
        "from windowing.runner import api as R\nR.placement.session_slots",
        "from windowing import runner\nrunner.tasks.hold",
        "import windowing.runner.tasks as tasks",
        "import windowing.kernel.inputs",
        "def f():\n    from windowing.runner.session import check_workers",
    ],
)
def test_an_internal_is_found(source):
    assert findings(source), source


@pytest.mark.parametrize(
    "source",
    [
        "from windowing import kernel as K\nK.process, K.Spec, K.ts_array, K.STATE_WINDOW",
        "from windowing.kernel.phases import KeyIds, LatePairs, state_rows",
        "from windowing.kernel import phases\nphases.IdleClocks",
        "from windowing.kernel import KernelOutput, ts_array",
        "from windowing.runner.api import col, hold, side_output_batch",
        "from windowing.runner import api\napi.kernel_input",
        "from windowing import metrics as M\nM._anything",
    ],
)
def test_the_public_api_passes(source):
    assert findings(source) == []
