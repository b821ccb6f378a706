"""``rewindow`` run in this process, as the tests of its commands call it."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

from windowing.cli import main


def rewindow(*argv: object) -> tuple[int, str, str]:
    """``rewindow ARGV...`` through :func:`windowing.cli.main` (each argument made a string);
    (exit code, stdout, stderr). The command gets its Spark session as the script does
    (``command_line.spark_for``), which is the test run's shared one once it exists."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()
