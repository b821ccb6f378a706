"""Reading events and state, and writing a replay's outputs atomically."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

OUTPUTS = ("aggregates", "late_events", "rejected", "state")


class InputError(ValueError):
    """Events cannot be read. The message names the path."""


class StateError(ValueError):
    """Carried state is missing or unreadable. The message names the path."""


def _local(path: str | os.PathLike) -> Path:
    s = str(path)
    if "://" in s and not s.startswith("file://"):
        raise ValueError(f"{s}: only local paths are supported for atomic writes")
    return Path(s.removeprefix("file://"))


def read_events(spark, paths):
    """Read a Parquet dataset (a folder, nested folders, or a list of them)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    for p in paths:
        if "://" not in str(p) and not Path(p).exists():
            raise InputError(f"{p}: input does not exist")
    try:
        # recursiveFileLookup: folder names like date=... must not become columns,
        # or one day read alone would differ from the same day read with the others.
        df = spark.read.option("recursiveFileLookup", "true").parquet(*[str(p) for p in paths])
        df.schema  # noqa: B018 - resolve now, so a bad file fails here with its path
    except Exception as exc:  # Spark wraps everything in its own exception types
        raise InputError(f"{', '.join(map(str, paths))}: cannot read Parquet input: {_first_line(exc)}") from exc
    return df


def read_state(spark, state_dir):
    """Read the state a previous replay wrote (``OUT_DIR/state``)."""
    p = _local(state_dir)
    if not (p / "_SUCCESS").exists():
        raise StateError(f"{state_dir}: no complete state here (missing or from an interrupted run)")
    try:
        df = spark.read.parquet(str(p))
        df.schema  # noqa: B018
    except Exception as exc:
        raise StateError(f"{state_dir}: state is unreadable: {_first_line(exc)}") from exc
    return df


def write_outputs(result, out_dir) -> dict:
    """Write ``aggregates/ late_events/ rejected/ state/ metrics.json`` under ``out_dir``.

    Everything is written to a staging folder next to ``out_dir`` and swapped in with
    renames: a rerun replaces the previous output exactly, and a crash part-way leaves
    the previous output untouched.
    """
    out = _local(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    staging = out.parent / f".{out.name}.staging-{tag}"
    try:
        for name in OUTPUTS:
            getattr(result, "late_events" if name == "late_events" else name).write.mode("error").parquet(
                str(staging / name)
            )
        (staging / "metrics.json").write_text(json.dumps(result.metrics, indent=2, sort_keys=True) + "\n")
        _swap(staging, out, tag)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return result.metrics


def _swap(staging: Path, out: Path, tag: str) -> None:
    old = out.parent / f".{out.name}.old-{tag}"
    if out.exists():
        os.rename(out, old)
    try:
        os.rename(staging, out)
    except BaseException:
        if old.exists() and not out.exists():
            os.rename(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
