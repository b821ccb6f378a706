"""Storage: events in, a replay's outputs out, on any filesystem Spark reaches.

:mod:`~windowing.storage.inputs` reads events (and checks Parquet footers first);
:mod:`~windowing.storage.outputs` writes a replay's outputs into a run folder and reads
runs back; :mod:`~windowing.storage.commits` is the commit protocol's records (which run
is current), checked as data by :mod:`~windowing.storage.records`;
:mod:`~windowing.storage.manifest` keeps a state whole; :mod:`~windowing.storage.store`
lays out a pipeline's partitions and their lineage; :mod:`~windowing.storage.lake` is the
filesystem (Hadoop's API, never Python file I/O); :mod:`~windowing.storage.errors` the
errors naming paths. A landing zone's days are read above the storage, with the pipeline's
derived columns (:mod:`windowing.landing`). Nothing is imported here, and
:mod:`~windowing.storage.lake` imports no pyspark: the CLI uses its paths without Spark.
"""
