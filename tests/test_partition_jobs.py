"""A small partition's fixed cost, as Spark jobs: the number a backfill of many small
partitions pays each time (issue 29), with the data-quality checks. Counted
from Spark's event log by the bench's ``--backfill`` mode, in a process of its own (a
session with the event log on, and Spark's default settings: adaptive execution runs each
shuffle stage as a job of its own).

No time is measured: the count is what must not silently grow back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import QUICK_JVM_OPTS

ROOT = Path(__file__).resolve().parent.parent

#: Spark jobs a partition of the quick start's pipeline may run: replay, writes and commit
#: (no checks). 13 when this test was written, 26 to 28 before issue 29 cut them
#: (docs/architecture.md, "A partition's fixed cost"). Since the state's hashes and summary
#: are observed as the state is written, and a run infers the landing zone's schema once:
#: 8 in a partition carrying state, and 3 more in the first partition of a run (the zone's
#: and the day's schemas, the probe of the workers). Since the kernel's stage is planned
#: without adaptive execution (one job, not three): 6. Since a partition of at most one
#: task's worth of events is planned without counting its rows per worker (by its files'
#: footers; docs/architecture.md, "A plan without the count"): 5. Every job counted, its
#: own or Spark's (the chain tags both).
LATER_JOBS = 5
FIRST_JOBS = LATER_JOBS + 3
#: Spark jobs the checks add to a partition: the counts of every check are taken in one pass
#: (``windowing.validation.base.CountPass``), a no-op write. Its groupBy's shuffle stage was a
#: job of its own under adaptive execution (2); a small partition's pass reads and groups its
#: rows in one task, with no shuffle: 1. 72 before issue 29 cut them (pandera's job a column
#: and a data check, a job or two a rule, three a grouping), so 85 a partition with the checks.
CHECK_JOBS = 1


#: Spark jobs a pass pays for all its partitions, whatever their number (issue 50): the
#: zone's and the day's schemas and the workers' probe (3), the kernel (1), the four
#: outputs' writes and the empty file some partitions get (5), the states' hashes (2: a
#: shuffle stage), the written outputs read into Spark's cache for the checks (1: were they
#: read in the checks' job, adaptive execution would make each cache a job of its own) and
#: every partition's checks, planned once (1).
PASS_JOBS = 13


def _backfill(tmp_path, partitions: int, *conf: str) -> str:
    """The bench's ``--backfill`` report of the first ``partitions`` hours of a day."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "replay_bench.py"),
            "--backfill",
            "--grain",
            "hour",
            "--days",
            "1",
            "--partitions",
            str(partitions),
            *[a for c in conf for a in ("--conf", c)],
            "--master",
            "local[2]",
            "--workdir",
            str(tmp_path),
            "--conf",
            "spark.sql.shuffle.partitions=2",
            "--conf",
            "spark.driver.memory=1g",
            "--conf",
            f"spark.driver.extraJavaOptions={QUICK_JVM_OPTS}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.spark
def test_a_small_partition_runs_a_bounded_number_of_spark_jobs(tmp_path):
    """With the checks, as ``rewindow backfill`` runs by default, one partition at a time:
    what a partition pays in all (one process; a run without the checks would start a
    second Spark for a subset)."""
    out = _backfill(tmp_path, 2, "spark.rewindow.partitionsPerPass=1")
    counts = re.search(r"^jobs by partition: (.*)$", out, re.MULTILINE)
    assert counts is not None, out
    jobs = [int(n) for n in counts.group(1).split()]
    assert len(jobs) == 2 and jobs[0] <= FIRST_JOBS + CHECK_JOBS and jobs[1] <= LATER_JOBS + CHECK_JOBS, out


@pytest.mark.spark
def test_a_pass_runs_the_same_jobs_for_any_number_of_partitions(tmp_path):
    """Eight hours in one pass, with the checks: the jobs of two partitions' pass, not eight times one's."""
    out = _backfill(tmp_path, 8)
    passes = re.search(r"^passes: 1, jobs each: (\d+)$", out, re.MULTILINE)
    assert passes is not None, out
    assert int(passes.group(1)) <= PASS_JOBS, out
    assert re.search(r"^jobs per partition of its own: min 0, max 0", out, re.MULTILINE), out
