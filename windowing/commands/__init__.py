"""The ``rewindow`` commands that are not an analysis's: one module per command.

Every command module (these, and the analyses' own: :mod:`windowing.diff.cli`,
:mod:`windowing.lateness.cli`, :mod:`windowing.reconcile.cli`) has ``NAME``, ``add_parser(subparsers) -> None`` (its
arguments and help) and ``run(args) -> int`` (its exit code); :mod:`windowing.cli` lists
them and dispatches. A command imports pyspark inside ``run`` only, so that ``rewindow
--help`` stays fast (``tests/test_light_imports.py``); it gets its Spark session from
:func:`windowing.command_line.spark_for`. What they share is :mod:`windowing.command_line`,
below them all, so that a command may use an analysis and an analysis's command the shared
options, without either importing the other.
"""
