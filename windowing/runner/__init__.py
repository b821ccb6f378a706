"""The Spark runner: a replay as Spark jobs around the kernel (:mod:`windowing.kernel`).

:mod:`~windowing.runner.replay` is the job (``replay``, ``ReplayResult``) and builds its
metrics; :mod:`~windowing.runner.normalise` checks and normalises the input and splits the
carried state; :mod:`~windowing.runner.timelines` counts rows per worker and sums up the
workers' commits; :mod:`~windowing.runner.placement` plans the kernel stage and places
each row in its task; :mod:`~windowing.runner.tasks` is what a kernel task runs and how
its outputs come back; :mod:`~windowing.runner.chunks` holds or spills a task's rows;
:mod:`~windowing.runner.session` builds the Spark session, whose driver JVM maps Spark's
classes from the archive :mod:`~windowing.runner.jvm_classes` keeps; :mod:`~windowing.runner.columns`
holds the column expressions and type conversions. Nothing is imported here: the CLI
imports :mod:`~windowing.runner.session` without pyspark.
"""
