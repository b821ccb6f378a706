"""A Dagster backfill of the catalog test's pipeline, in a process of its own (its Spark
session needs Hive support, which the suite's shared session has not), printing what the
asset catalog recorded as one JSON line:

    python -m tests.support.catalog_dagster_run LANDING PIPELINES_DIR OUTPUT_ROOT FIRST LAST

The metastore folder comes from ``REWINDOW_METASTORE_DIR`` (``SparkResource.metastore_dir``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg

from tests.support.dagster_harness import Replayer


def main(landing: str, pipelines: str, output_root: str, first: str, last: str) -> None:
    r = Replayer(Path(landing), Path(pipelines), Path(output_root))
    result = r.run(first, last, checks=True)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    agg = dg.AssetKey(["clicks_hourly", "windowed_aggregates"])
    metadata = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        if mat.asset_key == agg:
            meta = {k: v.value for k, v in mat.metadata.items() if k.startswith("dagster/")}
            meta["dagster/column_schema"] = [c.name for c in meta["dagster/column_schema"].columns]
            metadata[mat.partition] = meta
    checks = {
        ev.partition: {"passed": ev.passed, "description": ev.description}
        for ev in result.get_asset_check_evaluations()
        if ev.check_name == "published_matches_commit"
    }
    print(json.dumps({"metadata": metadata, "checks": checks}, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:6])
