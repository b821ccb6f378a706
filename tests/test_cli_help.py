"""Every subcommand's ``--help`` prints and exits 0, and a bad argument is argparse's usage
line and exit 2, never a traceback (issue 26: ``rewindow lateness --help`` crashed on the
``%`` of a default value). In-process: argparse needs no Spark."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stderr, redirect_stdout

import pytest

from windowing.cli import main

SUBCOMMANDS = ("replay", "verify", "reconcile", "diff", "lateness", "backfill", "status", "generate")


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse exits for --help and usage errors
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_the_subcommands_are_every_one_the_cli_has():
    code, out, _ = _run(["--help"])
    assert code == 0
    listed = re.search(r"\{([a-z,-]+)\}", out)
    assert listed is not None, out
    assert tuple(listed.group(1).split(",")) == SUBCOMMANDS  # a new one is added here, and so tested


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_help_prints_and_exits_0(command):
    code, out, err = _run([command, "--help"])
    assert code == 0, err
    assert out.startswith(f"usage: rewindow {command}"), out
    assert "Traceback" not in err


def test_the_lateness_help_shows_its_percent_default():
    code, out, _ = _run(["lateness", "--help"])
    assert code == 0
    assert "(default 0.1%)" in " ".join(out.split())


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_a_bad_argument_is_a_usage_error_exit_2_without_traceback(command):
    code, out, err = _run([command, "--no-such-flag"])
    assert code == 2
    assert err.startswith(f"usage: rewindow {command}"), err
    # Missing required arguments are reported first where a command has them.
    assert "unrecognized arguments: --no-such-flag" in err or "the following arguments are required" in err, err
    assert "Traceback" not in err and out == ""
