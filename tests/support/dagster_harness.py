"""What the asset and orchestration tests share: a tiny history, its pipeline, and a way
to run the replay job in process (``Replayer``). ``tests/assets/conftest.py`` and
``tests/support/dagster_harness.py`` register the fixtures.

The Spark session is the suite's shared one (``spark`` in tests/conftest.py); tests
that run Dagster ask for it first, so the Spark resource reuses it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import StorageResource
from orchestration.definitions import build_definitions
from orchestration.partitions import PartitionSettings
from orchestration.schedules import REPLAY_JOB

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
DAYS = ["2024-01-01", "2024-01-02", "2024-01-03"]

# Tumbling hour per user, event time, a 5 s close delay and idle flushes: every emission
# reason except END_OF_INPUT shows up, late events too.
PIPELINE_YAML = """\
version: 1
name: clicks-hourly
source:
  arrivalTime: arrival_time
  arrivalOrder: [offset]
  batch: {interval: 1s}
  worker: partition
emitter:
  tumbling-time-window:
    windowSpan: 1h
    keyExtractor: user_id
    timeConfig:
      eventTimeExtractor: event_time
      watermarkStrategy: MIN_EVENT_TIME
      delayWindowClose: 5s
      idleTimeout: 30m
    aggregateDefinition:
      - type: count
      - {type: sum, column: amount}
      - {type: distinct, column: event_id, name: unique_events}
      - {type: last, column: event_id}
"""


@pytest.fixture(scope="session")
def history(tmp_path_factory) -> Path:
    """Three days of 300 events over 20 users: ``date=2024-01-0{1,2,3}/``."""
    from windowing.sample import generate_history

    out = tmp_path_factory.mktemp("landing")
    generate_history(out, START, days=3, events_per_day=300, keys=20, seed=11)
    return out


@pytest.fixture(scope="session")
def pipelines_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pipelines")
    (out / "clicks-hourly.yaml").write_text(PIPELINE_YAML)
    return out


class Replayer:
    """The project's definitions over given folders, run in process on an ephemeral instance.

    Partitions end on 2024-01-10, so there are few enough of them (< 100) for Dagster to
    compute the staleness of the state's self-dependency.
    """

    def __init__(self, landing: Path, pipelines: Path, output_root: Path, grain: str = "daily"):
        self.output_root = Path(output_root)
        self.storage = StorageResource(
            landing_zone=str(landing), pipelines_dir=str(pipelines), output_root=str(output_root)
        )
        self.defs = build_definitions(
            storage=self.storage, partitions=PartitionSettings(grain=grain, start="2024-01-01", end="2024-01-10")
        )
        self.job = self.defs.resolve_job_def(REPLAY_JOB)
        self.instance = dg.DagsterInstance.ephemeral()

    def with_landing(self, landing: Path) -> "Replayer":
        """Same output root and instance, another landing zone (history that changed)."""
        other = Replayer(landing, Path(self.storage.pipelines_dir), self.output_root)
        other.instance = self.instance
        return other

    def run(self, first: str, last: str | None = None, flush_at_end: bool = False, checks: bool = False):
        tags = {}
        if last is not None:
            tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        return self.job.execute_in_process(
            instance=self.instance,
            partition_key=None if last is not None else first,
            tags=tags,
            run_config={"ops": {"clicks_hourly_replay": {"config": {"flush_at_end": flush_at_end, "checks": checks}}}},
            raise_on_error=False,
        )

    def folder(self, partition: str) -> Path:
        """The partition's output (its runs and commit records)."""
        return self.output_root / "clicks-hourly" / partition.replace(":", "")

    def current(self, partition: str) -> Path:
        """The partition's current run folder."""
        from tests.support.outputs import run_dir

        return run_dir(self.folder(partition))


def lineage(folder: Path):
    """The lineage the partition's current commit record carries."""
    from tests.support.outputs import current
    from windowing.storage.store import Lineage

    doc = current(folder)["extra"]["lineage"]
    return Lineage(**{**doc, "failed_checks": tuple(doc["failed_checks"])})


def failure_message(result) -> str:
    """The message of the run's step failure ("" when it succeeded)."""
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            return event.step_failure_data.error.message
    return ""


def rows(df) -> list[tuple]:
    """A DataFrame's rows in a canonical order, for row-for-row comparison."""
    return sorted((tuple(r) for r in df.collect()), key=repr)
