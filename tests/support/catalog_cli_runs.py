"""Several ``rewindow`` commands in one process, one after the other, each as the command
line runs it (``windowing.cli.main``): the first starts Spark with Hive support on the
embedded metastore, the next ones reuse that session (one Spark start-up for all of them).
The catalog test's published history runs its ``status`` and its two reruns of the middle
day this way. One JSON line per command on stdout: its exit code, and what it printed on
stdout and stderr (rewindow's own lines; Spark's logs go to the process's stderr):

    python -m tests.support.catalog_cli_runs '[["status", ...], ["backfill", ...]]'
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

from windowing.cli import main


def run(commands: list[list[str]]) -> None:
    for argv in commands:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 2
        print(
            json.dumps({"argv": argv, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}),
            flush=True,
        )


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
