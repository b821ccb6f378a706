"""Fixtures of the orchestration tests: tests/support/dagster_harness.py."""

from tests.support.dagster_harness import history, pipelines_dir  # noqa: F401  (fixtures)
