"""The defaults of ``rewindow lateness``, apart from the analysis.

The command line builds its parser, these defaults included, on every ``rewindow`` run,
``--help`` too (:mod:`windowing.lateness.cli`); the analysis imports Spark and the engine,
this module nothing. The analysis imports them from here.
"""

from __future__ import annotations

DEFAULT_DELAYS = "0s,1s,5s,30s,2m"
DEFAULT_TARGET_LATE = "0.1%"
#: Default of ``--future-skew``: events more than this ahead of their arrival are listed.
DEFAULT_FUTURE_SKEW = "10s"
#: Windows listed as the worst (most missed events) in the figures and the report.
DEFAULT_WORST = 20
