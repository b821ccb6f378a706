"""Fixtures of the orchestration tests: tests/dagster_harness.py."""

from tests.dagster_harness import history, pipelines_dir  # noqa: F401  (fixtures)
