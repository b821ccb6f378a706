"""The ``output:`` block (windowing.config.outputs): the catalog tables a pipeline is
published to, its refusals naming the field, and the command line's overrides. No Spark."""

from __future__ import annotations

import pytest
import yaml

from windowing.config import ConfigError, parse_pipeline
from windowing.config.outputs import CatalogSpec, parse_output, with_overrides

OUTPUTS = ("aggregates", "late_events", "rejected")
PIPELINE_YAML = """\
version: 1
name: clicks-hourly
source: {arrivalTime: arrival_time}
emitter:
  tumbling-time-window:
    windowSpan: 1h
    keyExtractor: user_id
    timeConfig: {eventTimeExtractor: event_time}
    aggregateDefinition: [{type: count}]
"""


def _doc(output):
    doc = yaml.safe_load(PIPELINE_YAML)
    doc["output"] = output
    return doc


def test_the_output_block_names_the_catalog_tables():
    spec = parse_pipeline(_doc({"catalog": {"database": "replay", "table": "clicks_hourly"}})).catalog
    assert spec == CatalogSpec("replay", "clicks_hourly")
    assert [spec.table_name(o) for o in OUTPUTS] == [
        "clicks_hourly_aggregates",
        "clicks_hourly_late_events",
        "clicks_hourly_rejected",
    ]
    assert parse_pipeline(_doc(None)).catalog is None
    # the catalog is where outputs go, not what they mean: the fingerprint stays
    assert (
        parse_pipeline(_doc(None)).fingerprint()
        == parse_pipeline(_doc({"catalog": {"database": "replay", "table": "x"}})).fingerprint()
    )


@pytest.mark.parametrize(
    "output, message",
    [
        ({"catalog": {"database": "replay"}}, "output.catalog.table: required"),
        ({"catalog": {"database": "re play", "table": "t"}}, "output.catalog.database: 're play'"),
        ({"catalog": {"database": "d", "table": "t", "path": "x"}}, "output.catalog.path: unknown field"),
        ({"table": "t"}, "output.table: unknown field"),
        ({"catalog": "replay.t"}, "output.catalog: expected a mapping"),
    ],
)
def test_a_bad_output_block_is_refused_naming_the_field(output, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_pipeline(_doc(output))


def test_the_command_line_overrides_the_output_block():
    spec = parse_output({"catalog": {"database": "replay", "table": "clicks"}})
    assert with_overrides(spec, database="staging") == CatalogSpec("staging", "clicks")
    with pytest.raises(ValueError, match="--catalog-database/--catalog-table: the pipeline has no output.catalog"):
        with_overrides(None, database="staging")
