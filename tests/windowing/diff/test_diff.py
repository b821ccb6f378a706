"""``rewindow diff`` and ``windowing.diff.diff``: two histories (or replay outputs)
compared, checked against the rows compared independently with pandas."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.support.cli import rewindow
from windowing import command_line
from windowing.diff import diff
from windowing.diff.outputs import read_diff
from windowing.sample import generate_history

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pipelines" / "clicks-hourly.yaml"
DAYS = ("2024-01-01", "2024-01-02")
WINDOW_ID = ["partition", "user_id", "window_start", "window_end", "emission"]


def _yaml(folder: Path, name: str, edit=lambda s: s) -> Path:
    text = EXAMPLE.read_text().split("\nreconcile:")[0] + "\n"  # no live side needed
    path = folder / f"{name}.yaml"
    path.write_text(edit(text))
    return path


@pytest.fixture(scope="module")
def made(spark, tmp_path_factory):
    """A landing zone of two days, its history under the example pipeline (two
    partitions), under the pipeline with an added ``avg`` (the first day only), and one-go
    replays under the example and under a longer ``delayWindowClose``."""
    mp = pytest.MonkeyPatch()
    mp.setattr(command_line, "spark_for", lambda args: spark)
    root = tmp_path_factory.mktemp("diff")
    landing = root / "landing"
    generate_history(landing, datetime(2024, 1, 1), days=2, events_per_day=300, keys=20, files_per_day=1)
    base = _yaml(root, "base")
    delay = _yaml(root, "delay", lambda s: s.replace("delayWindowClose: 5s", "delayWindowClose: 10m"))
    avg = _yaml(
        root,
        "avg",
        lambda s: s.replace(
            "      - {type: max, column: amount}\n",
            "      - {type: max, column: amount}\n      - {type: avg, column: amount}\n",
        ),
    )
    assert "10m" in delay.read_text() and "avg" in avg.read_text()
    for name, cfg, last in (("before", base, DAYS[-1]), ("avg", avg, DAYS[0])):
        rc, _, err = rewindow(
            "backfill", "--config", cfg, "--input", landing, "--output", root / name, "--no-checks", "--to", last
        )
        assert rc == 0, err
    for name, cfg in (("replay_base", base), ("replay_delay", delay)):
        rc, _, err = rewindow("replay", "--config", cfg, "--input", landing, "--output", root / name)
        assert rc == 0, err
    yield root
    mp.undo()


def _rows(folder: Path, dataset: str) -> pd.DataFrame:
    (run,) = (folder / "runs").iterdir()
    return pq.read_table(run / dataset).to_pandas()


def _independent(before: pd.DataFrame, after: pd.DataFrame, ids: list[str]) -> dict[str, int]:
    """Rows only in one side and changed, by pandas on the identity ``ids``."""
    assert not before.duplicated(ids).any() and not after.duplicated(ids).any()
    m = before.merge(after, on=ids, how="outer", suffixes=("_b", "_a"), indicator=True)
    values = [c for c in before.columns if c not in ids]
    both = m[m["_merge"] == "both"]
    changed = pd.Series(False, index=both.index)
    for c in values:
        b, a = both[f"{c}_b"], both[f"{c}_a"]
        changed |= ~((b == a) | (b.isna() & a.isna()))
    return {
        "only_in_before": int((m["_merge"] == "left_only").sum()),
        "only_in_after": int((m["_merge"] == "right_only").sum()),
        "changed": int(changed.sum()),
        "equal": int((~changed).sum()),
    }


def test_identical_histories_are_equal_every_count_0(spark, made):
    with diff(spark, str(made / "before"), str(made / "before" / "clicks-hourly")) as result:
        f = result.figures
        assert result.equal and f["partitioned"]
        assert [p["partition_key"] for p in f["partitions"]] == list(DAYS)
        for name, block in f["total"].items():
            assert block["before_rows"] == block["after_rows"]
            assert block["changed"] == block["only_in_before"] == block["only_in_after"] == 0, name
            assert block["changed_columns"] == {}
        assert f["total"]["aggregates"]["equal"] > 100
        assert all(not c["added"] and not c["removed"] for c in f["columns"].values())
        assert result.tables["aggregates"].count() == 0
        assert "EQUAL" in result.summary()
    assert result._held == [], "the with block let go of the differing rows"


def test_a_changed_delay_counts_as_the_rows_compared_independently(spark, made):
    with diff(spark, str(made / "replay_base"), str(made / "replay_delay")) as result:
        f = result.figures
        assert not result.equal and not f["partitioned"]
        for held in result._held:  # the pairing is planned with one shuffle
            assert held._jdf.queryExecution().executedPlan().toString().count("Exchange") == 1
        for dataset, ids in (
            ("aggregates", WINDOW_ID),
            ("late_events", None),
        ):
            b, a = _rows(made / "replay_base", dataset), _rows(made / "replay_delay", dataset)
            ids = ids or [c for c in b.columns if c not in ("watermark", "lateness_ms")]
            expected = _independent(b, a, ids)
            got = f["total"][dataset]
            assert {k: got[k] for k in expected} == expected, dataset
            assert got["before_rows"] == len(b) and got["after_rows"] == len(a)
        agg = f["total"]["aggregates"]
        assert agg["changed"] > 0 and agg["only_in_before"] + agg["only_in_after"] > 0
        # the window closes 10 minutes minus 5 s later: its emit time moves, by at most that and the idle clock
        assert "emit_watermark" in agg["changed_columns"]
        assert agg["changed_columns"]["emit_watermark"]["largest_difference"] > 0
        table = result.tables["aggregates"].toPandas()
        assert len(table) == agg["changed"] + agg["only_in_before"] + agg["only_in_after"]
        assert set(table["category"]) <= {"changed", "only_in_before", "only_in_after"}
        assert {"before_count", "after_count", "changed"} <= set(table.columns)


def test_an_added_aggregate_is_a_column_added_and_a_partition_only_before_is_not_missing(spark, made):
    with diff(spark, str(made / "before"), str(made / "avg")) as result:
        f = result.figures
        assert f["columns"]["aggregates"]["added"] == ["avg_amount"]
        assert f["columns"]["aggregates"]["removed"] == []
        agg = f["total"]["aggregates"]
        assert agg["changed"] == agg["only_in_before"] == agg["only_in_after"] == 0
        assert agg["changed_columns"] == {}
        first, second = f["partitions"]
        assert first["partition_key"] == DAYS[0] and first["status"] == "in both"
        assert first["aggregates"]["equal"] == first["aggregates"]["before_rows"] > 0
        assert second["partition_key"] == DAYS[1] and second["status"].startswith("only in BEFORE")
        assert second["aggregates"]["in_partition_only_in_before"] == second["aggregates"]["before_rows"] > 0
        assert second["aggregates"]["only_in_before"] == 0
        assert f["partitions_only_in_before"] == [DAYS[1]] and not result.equal
        text = result.summary()
        assert "columns added in aggregates: avg_amount" in text
        assert f"partition {DAYS[1]}: only in BEFORE" in text
    # --from/--to keep the partitions both have: then only the column differs
    with diff(spark, str(made / "before"), str(made / "avg"), first=DAYS[0], last=DAYS[0]) as result:
        assert result.figures["partitions_only_in_before"] == []
        assert [p["partition_key"] for p in result.figures["partitions"]] == [DAYS[0]]


def test_the_cli_exit_codes_and_output_files(spark, made, tmp_path):
    rc, out, err = rewindow("diff", made / "before", made / "before")
    assert rc == 0, err
    assert "EQUAL" in out
    report = tmp_path / "report"
    rc, out, err = rewindow("diff", made / "replay_base", made / "replay_delay", "--output", report)
    assert rc == 1, err
    assert "DIFFERENT" in out
    written = read_diff(spark, str(report))
    run = Path(written.commit.run_path.removeprefix("file:"))
    windows = pq.read_table(run / "windows").to_pandas()
    summary = json.loads((run / "summary.json").read_text())
    total = summary["total"]["aggregates"]
    assert len(windows) == total["changed"] + total["only_in_before"] + total["only_in_after"] > 0
    assert summary == written.figures
    page = (run / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert f">{total['changed']:,}</td>" in page and f">{total['before_rows']:,}</td>" in page
    assert "<h2>Total</h2>" in page
    assert pq.read_table(run / "late_events").num_rows == (
        summary["total"]["late_events"]["changed"]
        + summary["total"]["late_events"]["only_in_before"]
        + summary["total"]["late_events"]["only_in_after"]
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{missing}", "{before}"], "BEFORE {missing}: no such folder"),
        (["{before}", "{before}", "--from", "2024-13-01"], "--from '2024-13-01': not a day"),
        (["{landing}", "{before}"], "neither a replay output"),
        (["{before}", "{before}", "--output", "{before}/x"], "lies inside"),
        # review findings: a range holding no partition was a TypeError traceback; hours compared as text
        (["{before}", "{before}", "--from", "2030-01-01"], "no partition in --from 2030-01-01 --to ..."),
        (["{before}", "{before}", "--from", "2024-01-01T05", "--to", "2024-01-01T04"], "--to 2024-01-01T04 is before"),
    ],
)
def test_usage_and_input_errors_exit_2_naming_them(spark, made, tmp_path, argv, message):
    names = {"missing": tmp_path / "nope", "before": made / "before", "landing": made / "landing"}
    rc, out, err = rewindow("diff", *[a.format(**names) for a in argv])
    assert rc == 2 and "Traceback" not in err, (out, err)
    assert message.format(**names) in err, err
