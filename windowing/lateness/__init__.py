"""What lateness cost, and which delay and watermark strategy to run with (``rewindow lateness``).

One Spark job replays a history under every configuration asked for (each watermark
strategy, lateness mode and ``delayWindowClose`` of the grid) next to the configured
pipeline, and sums what its tasks found (docs/lateness.md). The modules, by role:

* what to compute: :mod:`~windowing.lateness.options` (options, output names, the result),
  :mod:`~windowing.lateness.defaults` (the command's defaults, without Spark),
  :mod:`~windowing.lateness.variants` (a variant; what a task's analysis needs);
* per task, pure NumPy/pyarrow: :mod:`~windowing.lateness.whatif` (the variants' replays),
  :mod:`~windowing.lateness.sweep` (every delay of a lean variant in one pass),
  :mod:`~windowing.lateness.skew_subset` (the skew-free variant where it can differ),
  :mod:`~windowing.lateness.tables` (the task's tables), :mod:`~windowing.lateness.curves`
  (slack arithmetic), :mod:`~windowing.lateness.group_ids` (group ids of keyed rows);
* on Spark: :mod:`~windowing.lateness.job` (the job), :mod:`~windowing.lateness.latency`
  (exact latency percentiles), :mod:`~windowing.lateness.figures` (the figures and summed
  tables), :mod:`~windowing.lateness.ranges` (a range of partitions);
* out: :mod:`~windowing.lateness.outputs` (write, read), :mod:`~windowing.lateness.report`
  (the HTML report), :mod:`~windowing.lateness.text` (terminal and markdown text),
  :mod:`~windowing.lateness.cli` (the command).

Nothing is imported here: ``rewindow --help`` imports :mod:`~windowing.lateness.cli`
without Spark.
"""
