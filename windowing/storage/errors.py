"""The storage errors, and what they say about a failure from Spark or Hadoop.

:class:`InputError` (events), :class:`StateError` (carried state) and
:class:`OutputError` (an output target) name the path; the helpers here turn Spark's and
Hadoop's long errors into the one line that matters (:func:`first_line`,
:func:`root_cause`) and name the input file a failure came from
(:func:`input_error_from`, :func:`naming_bad_files`).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterable, Iterator

from windowing.storage.names import display


class InputError(ValueError):
    """Events cannot be read. The message names the path (the file, when one is bad)."""


class StateError(ValueError):
    """Carried state is missing or unreadable. The message names the path."""


class OutputError(ValueError):
    """The output target cannot be written. The message names the path."""


# --------------------------------------------------------------------------- from Spark's errors


def first_line(exc: BaseException) -> str:
    """The first informative line of an error (py4j puts "An error occurred ..." first)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("An error occurred while calling", "JVM stacktrace")):
            return ln[:500]
    return lines[0][:500] if lines else type(exc).__name__


def root_cause(exc: BaseException) -> str:
    """The innermost ``Caused by:`` of a JVM error (its first line otherwise)."""
    causes = [
        ln.strip()[len("Caused by:") :].strip() for ln in str(exc).splitlines() if ln.strip().startswith("Caused by:")
    ]
    return causes[-1][:300] if causes else first_line(exc)


def _path_part(uri: str) -> str:
    return re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?", "", uri)


def file_named_in(exc: BaseException, files: Iterable[str]) -> str | None:
    """The one of ``files`` (URIs) that Spark's error message names, if any."""
    text = str(exc)
    for f in sorted(files, key=len, reverse=True):
        if f in text or (_path_part(f) and _path_part(f) in text):
            return f
    return None


def input_error_from(exc: BaseException, files: Iterable[str]) -> InputError | None:
    """An :class:`InputError` naming the input file a Spark failure names, or None.

    Spark reads data pages lazily, at the first action: a file whose footer is fine but
    whose pages are damaged fails there, deep inside a job.
    """
    bad = file_named_in(exc, files)
    if bad is None:
        return None
    return InputError(f"{display(bad)}: cannot read Parquet input: {root_cause(exc)}")


def missing_path(exc: BaseException) -> bool:
    """Whether a Spark error says a path does not exist."""
    return "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc)


@contextmanager
def naming_bad_files(inputs: Iterable[str]) -> Iterator[None]:
    """Spark reads data pages at the first action: name the damaged input file then."""
    try:
        yield
    except Exception as exc:
        err = input_error_from(exc, inputs)
        if err is None:
            raise
        raise err from exc
