"""The ``rewindow`` commands that are not an analysis's: one module per command.

Every command module (these, and the analyses' own: :mod:`windowing.lateness.cli`,
:mod:`windowing.reconcile.cli`) has ``NAME``, ``add_parser(subparsers) -> None`` (its
arguments and help) and ``run(args) -> int`` (its exit code); :mod:`windowing.cli` lists
them and dispatches. A command imports pyspark inside ``run`` only, so that ``rewindow
--help`` stays fast; it gets its Spark session from :func:`windowing.commands.common.spark_for`.
"""
