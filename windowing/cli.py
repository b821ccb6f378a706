"""``rewindow``: replay historical events through a pipeline's window, from the shell."""

# The docstring above is `rewindow --help`'s description. This module only assembles the
# commands: each is a module with NAME, add_parser(subparsers) and run(args) -> int (an
# analysis's in its package, the others in windowing/commands/), listed below in the
# order `rewindow --help` shows them. A command's Spark session comes from
# windowing.command_line.spark_for, which tests replace to inject their own.

from __future__ import annotations

import argparse
import sys
from typing import Any, Protocol

from windowing import command_line
from windowing.commands import backfill, generate, replay, status, verify
from windowing.config import ConfigError
from windowing.diff import cli as diff
from windowing.lateness import cli as lateness
from windowing.reconcile import cli as reconcile
from windowing.runner.session import WorkerEnvironmentError


class Command(Protocol):
    """A command module: its name, its arguments and help, and the command itself."""

    NAME: str

    def add_parser(self, subparsers: Any) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


#: The exit code of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130

#: The subcommands of ``rewindow``, in the order of its help.
COMMANDS: tuple[Command, ...] = (replay, verify, reconcile, diff, lateness, backfill, status, generate)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run its command; the exit code (2 for
    a configuration, input or output error, printed as ``rewindow: error: ...``)."""
    parser = argparse.ArgumentParser(prog="rewindow", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    args = parser.parse_args(argv)
    run = {command.NAME: command.run for command in COMMANDS}[args.command]
    try:
        return run(args)
    except (ConfigError, ValueError, OSError, WorkerEnvironmentError) as exc:
        print(f"rewindow: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # in a process that did not call command_line.exit_on_signals
        print("rewindow: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def script() -> int:
    """The installed ``rewindow`` script: :func:`main` on ``sys.argv``, then the Spark
    session it started stopped before the process exits (:func:`command_line.stop_started`).
    :func:`main` itself leaves it running, for callers that run several commands in one
    process on one session. Ctrl-C (SIGINT) and SIGTERM end it with one line and exit code
    130 or 143, without a traceback (:func:`command_line.exit_on_signals`)."""
    command_line.exit_on_signals()
    try:
        return main()
    finally:
        command_line.stop_started()


if __name__ == "__main__":
    sys.exit(script())
