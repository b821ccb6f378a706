"""What every ``rewindow`` command shares (:mod:`windowing.commands`' and the analyses'
own, :mod:`windowing.diff.cli`, :mod:`windowing.lateness.cli`, :mod:`windowing.reconcile.cli`):
the Spark options (``--master``, ``--remote``, ``--conf``) and the session made from them
(:func:`spark_for`), the catalog options, progress lines, the exit on Ctrl-C.

It stands below every command, so that an analysis's command and the commands that use an
analysis (``rewindow backfill`` diffs a rebuilt history) never import each other. pyspark
is imported when a session starts, never for ``--help``.

:func:`spark_for` is the one place a command gets its Spark session: a test injects its own
session by replacing it, ``monkeypatch.setattr(windowing.command_line, "spark_for",
lambda args: spark)`` (the commands call it through this module, never a copy of it).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterable
from types import FrameType
from typing import TYPE_CHECKING

from windowing.catalog import Publisher
from windowing.config.outputs import with_overrides
from windowing.metastore import default_metastore_dir, session_conf
from windowing.runner.session import spark_session
from windowing.storage.errors import InputError
from windowing.storage.lake import Lake, join, local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from windowing.config import Pipeline
    from windowing.config.outputs import CatalogSpec


def spark_args(p: argparse.ArgumentParser) -> None:
    """A command's Spark options: ``--master`` or ``--remote``, and ``--conf KEY=VALUE``."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--master", default=None, help="Spark master: local[*] (default), spark://, yarn, k8s://")
    where.add_argument("--remote", default=None, help="Spark Connect server: sc://HOST:PORT")
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help="extra Spark setting (repeatable)",
    )


def key_value(text: str) -> tuple[str, str]:
    """``--conf KEY=VALUE`` (the value may hold ``=``), refused by argparse otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def positive_int(text: str) -> int:
    """A count of at least 1 (``--days``, ``--keys``, ...), refused by argparse otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


#: The sessions :func:`spark_for` started in this process (no session or context was active
#: before: never one a caller made), which :func:`stop_started` stops when the command ends.
STARTED: list[SparkSession] = []


def spark_for(args: argparse.Namespace) -> SparkSession:
    """The Spark session of a command: ``--master`` or ``--remote`` with the ``--conf``
    settings (the catalog's added by :func:`catalog_setup`). Tests replace this function
    to run a command on their own session (module docstring)."""
    from pyspark import SparkContext  # noqa: PLC0415 - the session starts here: `--help` needs no pyspark
    from pyspark.sql import SparkSession  # noqa: PLC0415

    started = SparkSession.getActiveSession() is None and SparkContext._active_spark_context is None
    spark = spark_session(args.master, dict(args.conf), remote=args.remote)
    if started:
        STARTED.append(spark)
    if _EXIT_ON_SIGNALS:
        exit_on_signals()  # pyspark's SparkContext installs its own SIGINT handler
    return spark


#: Whether :func:`exit_on_signals` was called (by the ``rewindow`` script): :func:`spark_for`
#: then installs the handlers again once Spark has started.
_EXIT_ON_SIGNALS = False
#: What the one line says after the signal's word, when a command has set it: where a
#: backfill stands and the command that goes on from there (``windowing.commands.backfill``).
ON_SIGNAL_SAY: list[str] = []
#: The signals a command ends on, and the word its one line says.
SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def exit_on_signals() -> None:
    """Make SIGINT (Ctrl-C) and SIGTERM end the process at once, with one line
    (``rewindow: interrupted``) and exit code 128 + the signal (130, 143), as a shell reports
    them: no ``KeyboardInterrupt`` or py4j traceback from the main thread, the threads a
    backfill overlaps its audit with, or Spark's jobs cancelled under them.

    For the ``rewindow`` script only (:func:`windowing.cli.script`), not for callers of
    :func:`windowing.cli.main` in a process of their own. Stopping there is as safe as a
    SIGKILL, which rewindow's outputs are built for: nothing partial becomes current, and
    an abandoned run folder is swept later. Spark's JVM ignores SIGINT (pyspark starts it
    so) and exits when this process's end closes its standard input.
    """
    global _EXIT_ON_SIGNALS
    _EXIT_ON_SIGNALS = True
    for signum in SIGNALS:
        signal.signal(signum, _exit_on_signal)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """:func:`exit_on_signals`' handler: one line on stderr, then ``os._exit`` (no unwinding:
    ``finally`` blocks would call into a Spark that is stopping, and print its errors)."""
    try:
        sys.stdout.flush()
        if sys.stderr.isatty():  # a progress bar may be drawn, with the cursor hidden
            sys.stderr.write("\x1b[?25h\n")
        said = f": {ON_SIGNAL_SAY[-1]}" if ON_SIGNAL_SAY else ""
        sys.stderr.write(f"rewindow: {SIGNALS.get(signal.Signals(signum), 'stopped')}{said}\n")
        sys.stderr.flush()
    finally:
        os._exit(128 + signum)


def stop_started() -> None:
    """Stop the sessions :func:`spark_for` started, before the command returns: Spark then
    ends its application (event log closed, executors released, a Spark Connect session
    let go) while ``rewindow`` still runs, not in the JVM's shutdown hook after it exited.
    A session that fails to stop (its cluster gone) is left to that hook."""
    while STARTED:
        spark = STARTED.pop()
        try:
            spark.stop()
        except Exception as exc:  # noqa: BLE001 - the command's own result stands; the JVM's hook ends it
            print(f"rewindow: note: Spark did not stop cleanly: {exc}", file=sys.stderr)


def check_local_paths(args: argparse.Namespace, paths: Iterable[str | None], missing: str) -> None:
    """Refuse a path on this machine's disk that is not there, before Spark starts (which
    takes seconds): ``{path}: {missing}``, the line the command gives once Spark has looked.
    A URI (``s3a:``, ``hdfs:``, ...) and every path of a Spark Connect session (the
    server's disk, not this one's) are left to that look."""
    if getattr(args, "remote", None):
        return
    for path in paths:
        local = local_path(path) if path else None
        if local is not None and not Lake(None).exists(local):
            raise InputError(f"{path}: {missing}")


def progress(step: int, of: int, what: str) -> None:
    """One line per phase of a command, on stderr (stdout keeps the summary)."""
    print(f"rewindow: [{step}/{of}] {what}", file=sys.stderr, flush=True)


def escape(text: str) -> str:
    """``text`` for an argparse help string, which is %-formatted (``0.1%`` would crash ``--help``)."""
    return text.replace("%", "%%")


def catalog_args(p: argparse.ArgumentParser) -> None:
    """The catalog settings: override the YAML's ``output.catalog`` and place the embedded metastore."""
    p.add_argument(
        "--catalog-database", help="publish to this catalog database (default: the YAML's output.catalog.database)"
    )
    p.add_argument(
        "--catalog-table",
        help="table prefix: <prefix>_aggregates, _late_events, _rejected (default: the YAML's output.catalog.table)",
    )
    p.add_argument(
        "--metastore-dir",
        help="folder of the embedded Derby metastore (default: "
        "REWINDOW_METASTORE_DIR, else OUTPUT/_metastore); unused when --conf "
        "names a metastore (spark.hadoop.hive.metastore.uris, ...)",
    )


def catalog_setup(args: argparse.Namespace, pipeline: Pipeline | None, output_root: str) -> CatalogSpec | None:
    """The pipeline's catalog (``output.catalog`` with the command line's overrides), or
    None; when set, the session settings publishing needs are added to ``args.conf``
    (Hive support, the embedded metastore: :func:`windowing.catalog.session_conf`)."""

    spec = with_overrides(
        pipeline.catalog if pipeline is not None else None,
        getattr(args, "catalog_database", None),
        getattr(args, "catalog_table", None),
    )
    if spec is None or getattr(args, "remote", None):  # Spark Connect: the server's catalog as it is
        return spec
    folder = args.metastore_dir or os.environ.get("REWINDOW_METASTORE_DIR") or default_metastore_dir(output_root)
    args.conf = [*args.conf, *session_conf(folder, dict(args.conf)).items()]
    return spec


def publisher(
    spark: SparkSession, catalog: CatalogSpec | None, pipeline: Pipeline, output_root: str, version: str = "v1"
) -> Publisher | None:
    """The catalog publisher of a history (None without a catalog): each partition's run of
    ``version`` is published as that table partition of the version's tables
    (:class:`windowing.catalog.Publisher`). ``output_root``: the history's (v1's) root."""
    if catalog is None:
        return None
    return Publisher(spark, catalog, pipeline, join(output_root, pipeline.name), version=version)
