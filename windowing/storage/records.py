"""Commit records read as data, never as instructions (issue 26).

A commit record (``OUT/_commits/<seq>-<run id>/part-*.json``, :mod:`windowing.storage.commits`) names
the run folder that is current. Whatever is on disk may have been truncated, edited or
written by someone else, so a record is trusted only when it is exactly what rewindow
writes: its folder is ``<seq, ten digits>-<run id>``, its fields agree with that name, its
run id is one :func:`windowing.storage.commits.new_run_id` makes, and its ``run`` is that run's folder
directly under the output's own ``runs/``. Anything else is a :class:`DamagedRecord`,
named with its file; nothing it says is followed (no folder it names is read or deleted).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from windowing.storage.lake import display

#: A run id as rewindow makes it: the UTC start time to the microsecond, and 8 hex digits.
RUN_ID = re.compile(r"(\d{8}T\d{12}Z)-[0-9a-f]{8}")
#: A commit record's folder: the sequence number (ten digits) and the run id.
RECORD_FOLDER = re.compile(r"(\d{10})-(" + RUN_ID.pattern + ")")


class DamagedCommitError(ValueError):
    """The newest commit record of an output is damaged: the message names its file and
    says how to recover."""


@dataclass(frozen=True)
class DamagedRecord:
    """A commit record that cannot be trusted: its file (as Spark listed it), its folder
    name (``<seq>-<run id>``, which orders it among the others) and what is wrong."""

    file: str
    folder: str
    reason: str

    def message(self, output: str) -> str:
        """What a user reads: the file, what is wrong, and the two ways out."""
        return (
            f"{display(self.file)}: the newest commit record of {display(output)} is damaged ({self.reason}), "
            "so its current run is unknown. Replay into this output again (a new record supersedes it), "
            f"or delete the record's folder {display(self.folder_path(output))} to make the run before it "
            "current again"
        )

    def folder_path(self, output: str) -> str:
        return f"{output.rstrip('/')}/_commits/{self.folder}"

    @property
    def seq(self) -> int | None:
        """The sequence number its folder name gives, if it has one."""
        m = RECORD_FOLDER.fullmatch(self.folder)
        return int(m.group(1)) if m else None


def is_run_id(name: str) -> bool:
    """Whether ``name`` is a run id rewindow makes (only those run folders are ever deleted)."""
    return RUN_ID.fullmatch(name) is not None


def run_started(name: str) -> datetime | None:
    """When the run ``name`` (a run id, or a record folder ``<seq>-<run id>``) started; None
    for a name rewindow did not make."""
    m = RUN_ID.fullmatch(name) or RECORD_FOLDER.fullmatch(name)
    if m is None:
        return None
    stamp = m.group(1) if m.re is RUN_ID else m.group(3)
    return datetime.strptime(stamp, "%Y%m%dT%H%M%S%fZ").replace(tzinfo=timezone.utc)


def record_problem(folder: str, row: Mapping[str, Any], runs_dir: str = "runs") -> str | None:
    """Why the record in ``folder`` (its folder name) holding ``row`` (its parsed fields;
    all None when the JSON was truncated or unparseable) cannot be trusted; None if it can."""
    seq, run_id, run = row.get("seq"), row.get("run_id"), row.get("run")
    if seq is None or not run_id or not run:
        missing = [k for k in ("seq", "run_id", "run") if row.get(k) in (None, "")]
        return f"truncated or unparseable: no {', '.join(missing)}"
    if not isinstance(run_id, str) or not is_run_id(run_id):
        return f"run_id {run_id!r} is not a rewindow run id"
    if run != f"{runs_dir}/{run_id}":
        return f"run {run!r} is not its own run folder {runs_dir}/{run_id} under the output"
    if not isinstance(seq, int) or seq < 1 or folder != f"{seq:010d}-{run_id}":
        return f"seq {seq!r} and run_id {run_id!r} do not match its folder name {folder!r}"
    for k in ("metrics", "extra"):
        if row.get(k) is not None and not _is_json_object(row[k]):
            return f"{k} is not a JSON object"
    return None


def _is_json_object(text: Any) -> bool:
    try:
        return isinstance(json.loads(text), dict) if isinstance(text, str) else False
    except ValueError:
        return False
