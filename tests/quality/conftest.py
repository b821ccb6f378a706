"""Shared data of the data-quality tests: a small generated history, replayed once per pipeline.

Everything here is session-scoped and built on the suite's one Spark session, so the bad-
input, fault and check tests reuse the same outputs instead of replaying again.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "pipelines"
START = datetime(2024, 1, 1, tzinfo=timezone.utc)

# Sliding windows with an offset, MAX_EVENT_TIME, BEFORE_WATERMARK lateness, idle flushes
# and both triggers: the check branches the two example pipelines do not reach.
SLIDING_YAML = """\
version: 1
name: clicks-sliding
source:
  arrivalTime: arrival_time
  arrivalOrder: [offset]
  batch: {interval: 10s}
  worker: partition
emitter:
  sliding-time-window:
    windowSpan: 1h
    windowSlide: 20m
    windowOffset: 5m
    keyExtractor: user_id
    timeConfig:
      eventTimeExtractor: event_time
      watermarkStrategy: MAX_EVENT_TIME
      lateness: BEFORE_WATERMARK
      idleTimeout: 2h
    aggregateDefinition:
      - type: count
      - {type: sum, column: amount}
      - {type: min, column: amount}
      - {type: avg, column: amount}
      - {type: max, column: amount}
      - {type: distinct, column: event_id}
      - {type: count, column: event_id, name: ids}
  triggers: [atWindowEnd, atAggregate]
"""


@dataclass
class Replayed:
    """One pipeline replayed over day 1, then day 2 from day 1's state (both written)."""

    name: str
    config: Path
    pipeline: object
    day1: Path  # input folders
    day2: Path
    out1: Path  # write_outputs outputs (committed runs)
    out2: Path
    result2: object = None  # day 2's ReplayResult, still cached (checks on results in memory)

    def events(self, spark, day: int = 2):
        from windowing.storage.inputs import read_events

        return read_events(spark, [str(self.day1 if day == 1 else self.day2)])

    def state1(self, spark):
        from windowing.storage.outputs import read_state

        return read_state(spark, self.out1)

    def outputs(self, spark, day: int = 2):
        from windowing.storage.outputs import read_outputs

        return read_outputs(spark, self.out1 if day == 1 else self.out2)


@pytest.fixture(scope="session")
def history(tmp_path_factory) -> list[Path]:
    """Two days of 600 events over 25 users (late, future and retried events included)."""
    from windowing.sample import generate_history

    return generate_history(
        tmp_path_factory.mktemp("quality-history"), START, days=2, events_per_day=600, keys=25, seed=5, files_per_day=3
    )


@pytest.fixture(scope="session")
def configs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("quality-pipelines")
    (d / "clicks-sliding.yaml").write_text(SLIDING_YAML)
    return {
        "clicks": EXAMPLES / "clicks-hourly.yaml",
        "sessions": EXAMPLES / "sessions.yaml",
        "sliding": d / "clicks-sliding.yaml",
    }


@pytest.fixture(scope="session")
def replayed(spark, history, configs, tmp_path_factory):
    """``replayed(name)``: the pipeline's two-day replay, computed on first use."""
    from windowing import load_pipeline, replay
    from windowing.storage.inputs import read_events
    from windowing.storage.outputs import read_state, write_outputs

    cache: dict[str, Replayed] = {}

    def get(name: str) -> Replayed:
        if name not in cache:
            pipeline = load_pipeline(configs[name])
            base = tmp_path_factory.mktemp(f"replayed-{name}")
            out1, out2 = base / "day1", base / "day2"
            r1 = replay(spark, pipeline, read_events(spark, [str(history[0])]))
            write_outputs(r1, out1)
            r1.unpersist()
            r2 = replay(spark, pipeline, read_events(spark, [str(history[1])]), state=read_state(spark, out1))
            write_outputs(r2, out2)
            cache[name] = Replayed(name, configs[name], pipeline, history[0], history[1], out1, out2, r2)
        return cache[name]

    yield get
    for r in cache.values():
        r.result2.unpersist()


@pytest.fixture
def verify(spark, monkeypatch, capsys):
    """``rewindow verify ARGS`` in this process (on the suite's Spark): (exit code, stdout, stderr)."""
    from windowing import cli, command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)

    def run(*args):
        code = cli.main(["verify", *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def rows(df) -> list[tuple]:
    """A DataFrame's rows in a canonical order (row-for-row comparison)."""
    return sorted((tuple(r) for r in df.collect()), key=repr)


# --------------------------------------------------------------------------- background CLI runs


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cli_runs: checks the background `rewindow replay` processes (run last, see processes.py)"
    )


def pytest_collection_modifyitems(config, items):
    """Tests that wait for the background processes go last, so the rest runs meanwhile."""
    last = [i for i in items if i.get_closest_marker("cli_runs")]
    if last:
        items[:] = [i for i in items if not i.get_closest_marker("cli_runs")] + last


@pytest.fixture(scope="session")
def cli_runs(replayed, tmp_path_factory):
    """The fault scenarios of processes.py on clicks day 1, started now (see ``CliRuns``).

    The killed runs' outputs hold day 2's output beforehand, so old and new differ.
    """
    from tests.support.processes import CliRuns

    r = replayed("clicks")
    runs = CliRuns.start(r.config, r.day1, r.day2, r.out2, tmp_path_factory.mktemp("cli-runs"))
    yield runs
    runs.stop()


@pytest.fixture(scope="session", autouse=True)
def _start_cli_runs_early(request):
    if any(i.get_closest_marker("cli_runs") for i in request.session.items):
        request.getfixturevalue("cli_runs")
