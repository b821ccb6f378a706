"""``rewindow backfill`` and ``rewindow status``: failures, resume, usage errors. (The CLI backfill
against the Dagster backfill: tests/assets/test_replay_assets.py, which has the Dagster run.)"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.cli import rewindow
from tests.support.dagster_harness import DAYS

OUTPUTS = ("aggregates", "late_events", "rejected", "state")


def test_a_failing_partition_exits_1_naming_it_and_status_lists_it(spark, history, pipelines_dir, tmp_path):
    from tests.assets.test_replay_assets import _landing_with_odd_row

    landing = _landing_with_odd_row(history, tmp_path, "2024-01-02", event_time=lambda t: t - timedelta(days=30))
    root = tmp_path / "out"
    config = pipelines_dir / "clicks-hourly.yaml"
    rc, out, err = rewindow(
        "backfill", "--config", config, "--input", landing, "--output", root, "--from", DAYS[0], "--to", DAYS[-1]
    )
    assert rc == 1
    assert "partition 2024-01-02 failed its data-quality checks (input_event_time_skew" in err
    assert "2024-01-03..2024-01-03 not replayed" in err and "--rerun-from 2024-01-02" in err
    rc, out, _ = rewindow("status", "--config", config, "--output", root, "--to", DAYS[-1])
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("2024-")}
    assert "committed" in lines["2024-01-01"]
    assert "failed" in lines["2024-01-02"] and "input_event_time_skew" in lines["2024-01-02"]
    assert "missing" in lines["2024-01-03"]
    # the chain refuses to skip the failed partition
    rc, _, err = rewindow("backfill", "--config", config, "--input", landing, "--output", root, "--from", DAYS[2])
    assert rc == 1 and "state of partition 2024-01-02 is missing" in err
    # (--resume after a killed backfill: tests/windowing/test_chain.py)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--from", "2024-01-03", "--to", "2024-01-01"], "is before --from"),
        (["--from", "2024-01-01T05"], "use --grain hour"),
        (["--from", "2024-01-01", "--to", "2024-01-02", "--rerun-from", "2024-01-05"], "outside --from"),
    ],
)
def test_usage_errors_name_the_option(spark, history, pipelines_dir, tmp_path, argv, message):
    rc, _, err = rewindow(
        "backfill",
        "--config",
        pipelines_dir / "clicks-hourly.yaml",
        "--input",
        history,
        "--output",
        tmp_path / "out",
        *argv,
    )
    assert rc == 2 and message in err, err
    assert not (tmp_path / "out").exists()


def test_without_from_it_replays_the_landed_days_and_says_when_a_range_holds_none(
    spark, history, pipelines_dir, tmp_path
):
    config = pipelines_dir / "clicks-hourly.yaml"
    rc, out, err = rewindow("backfill", "--config", config, "--input", history, "--output", tmp_path / "all")
    assert rc == 0, err
    assert f"replaying the landed days {DAYS[0]}..{DAYS[-1]}" in err
    assert [line.split()[0] for line in out.splitlines() if line.strip().startswith("2024-")] == list(DAYS)
    rc, out, err = rewindow(
        "backfill", "--config", config, "--input", history, "--output", tmp_path / "none", "--from", "2023-06-01"
    )
    assert rc == 0, err
    assert (
        f"holds no events for 2023-06-01..2023-06-01 (it holds {DAYS[0]}..{DAYS[-1]}): these partitions will be empty"
    ) in err


# --------------------------------------------------------------------------- trust nothing on disk (issue 26)


def _status_lines(root, config) -> tuple[dict[str, str], str]:
    rc, out, err = rewindow("status", "--config", config, "--output", root)
    assert rc == 0 and "Traceback" not in err, err
    return {line.split()[0]: line for line in out.splitlines() if line.strip().startswith("2024-")}, out


def test_damaged_records_and_states_of_a_history_are_named_and_resume_reruns_them(
    spark, history, pipelines_dir, tmp_path
):
    """Findings 3, 4 and 5 on a backfill: a truncated record (status, --resume and
    --rerun-from ended in a TypeError), a run folder deleted under its record (status said
    "committed", --resume "nothing to do"), a state part deleted (--rerun-from lost events)."""
    import shutil

    from tests.support.outputs import current, run_dir

    config = pipelines_dir / "clicks-hourly.yaml"
    root = tmp_path / "out"
    backfill = (
        "backfill",
        "--config",
        config,
        "--input",
        history,
        "--output",
        root,
        "--from",
        DAYS[0],
        "--to",
        DAYS[1],
    )
    rc, _, err = rewindow(*backfill)
    assert rc == 0, err
    first, second = (root / "clicks-hourly" / d for d in DAYS[:2])

    # A truncated newest record of the second day.
    seq = current(second)["seq"]
    [record] = (second / "_commits").glob(f"{seq:010d}-*/part-*.json")
    record.write_text(record.read_text()[:40])
    record.with_name(f".{record.name}.crc").unlink()
    lines, _ = _status_lines(root, config)
    assert "committed" in lines[DAYS[0]]
    assert "damaged" in lines[DAYS[1]] and f"{record}: the newest commit record" in lines[DAYS[1]], lines
    assert f"--rerun-from {DAYS[1]}" in lines[DAYS[1]]
    rc, _, err = rewindow(*backfill, "--resume")
    assert rc == 0 and f"resuming at {DAYS[1]}" in err, err
    lines, _ = _status_lines(root, config)
    assert "committed" in lines[DAYS[1]], lines

    # The first day's current run folder deleted: its record names a run that is gone.
    gone = run_dir(first)
    shutil.rmtree(gone)
    lines, _ = _status_lines(root, config)
    assert "damaged" in lines[DAYS[0]] and "is gone or incomplete" in lines[DAYS[0]], lines
    rc, _, err = rewindow(*backfill, "--rerun-from", DAYS[1])
    assert rc == 1 and f"partition {DAYS[0]}: " in err and f"--rerun-from {DAYS[0]}" in err, err
    rc, _, err = rewindow(*backfill, "--resume")
    assert rc == 0 and "nothing to do" not in err, err
    lines, _ = _status_lines(root, config)
    assert all("committed" in lines[d] for d in DAYS[:2]), lines

    # A state part of the first day deleted: the second day is not replayed from it.
    parts = sorted((run_dir(first) / "state").glob("part-*.parquet"))
    parts[0].unlink()
    rc, _, err = rewindow(*backfill, "--rerun-from", DAYS[1])
    assert rc == 1 and f"damaged state of run {current(first)['run_id']}" in err, err
    assert f"state part {parts[0].name} (" in err and "Traceback" not in err, err


def test_a_pipeline_name_that_leaves_the_output_root_is_refused_before_spark(history, pipelines_dir, tmp_path):
    """Finding 2: ``name: ../../escaped`` wrote ``escaped/<day>/`` beside the output root."""
    config = tmp_path / "escaping.yaml"
    config.write_text(
        (pipelines_dir / "clicks-hourly.yaml").read_text().replace("name: clicks-hourly", 'name: "../../escaped"')
    )
    root = tmp_path / "root" / "out"
    rc, _, err = rewindow("backfill", "--config", config, "--input", history, "--output", root, "--from", DAYS[0])
    assert rc == 2 and "name: '../../escaped' is not allowed" in err and "Traceback" not in err, err
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["backfill", "--from", "2024-13-45"], "--from '2024-13-45': not a day (YYYY-MM-DD) or an hour"),
        (["backfill", "--from", "yesterday"], "--from 'yesterday': not a day"),
        (["backfill", "--from", "2024-01-01", "--to", "2024-02-30"], "--to '2024-02-30': not a day"),
        (["backfill", "--from", "2024-01-01T25", "--grain", "hour"], "--from '2024-01-01T25': not a day"),
        (["backfill", "--from", "2024-01-01", "--rerun-from", "01/02/2024"], "--rerun-from '01/02/2024': not a day"),
        (["status", "--to", "2024-1-2"], "--to '2024-1-2': not a day"),
        # Hostile run (issue 47), finding 6: was echoed as "1-01-01" ("partition '1-01-01' is not a day
        # key", after Spark started). Spark's date literals cannot hold a year before 1000.
        (["backfill", "--from", "0001-01-01"], "--from 0001-01-01: partitions before the year 1000"),
    ],
    ids=["month-13", "word", "feb-30", "hour-25", "rerun-from", "status", "year-1"],
)
def test_a_bad_from_or_to_is_refused_before_spark(history, pipelines_dir, tmp_path, monkeypatch, argv, message):
    """Held in the hostile run (issue 47): a bad --from or --to was refused only after Spark
    started and the landing zone was listed."""
    from windowing import command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: pytest.fail("Spark started"))
    command, *rest = argv
    where = ["--input", history] if command == "backfill" else []
    rc, _, err = rewindow(
        command, "--config", pipelines_dir / "clicks-hourly.yaml", *where, "--output", tmp_path / "out", *rest
    )
    assert rc == 2 and f"rewindow: error: {message}" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["replay", "--input", "{missing}", "--output", "{out}"], "{missing}: input does not exist"),
        (["verify", "{missing}"], "{missing}: no such folder"),
        (["verify", "{here}", "--input", "{missing}"], "{missing}: input does not exist"),
        (["reconcile", "--replay", "{missing}", "--live", "{here}", "--output", "{out}"], "{missing}: no such folder"),
        (
            ["reconcile", "--replay", "{here}", "--live", "{missing}", "--output", "{out}"],
            "{missing}: the live aggregates do not exist",
        ),
        (["lateness", "--input", "{missing}", "--output", "{out}"], "{missing}: input does not exist"),
        (["backfill", "--input", "{missing}", "--output", "{out}"], "{missing}: the landing zone does not exist"),
        (
            ["backfill", "--input", "{here}", "--output", "{out}", "--from", "2024-01-03", "--to", "2024-01-01"],
            "--to 2024-01-01 is before --from 2024-01-03",
        ),
        (
            ["backfill", "--input", "{here}", "--output", "{out}", "--from", "2024-01-01T05", "--to", "2024-01-01T04"],
            "--to 2024-01-01T04 is before --from 2024-01-01T05",
        ),
        (
            ["status", "--output", "{out}", "--from", "2024-01-02", "--to", "2024-01-01"],
            "--to 2024-01-01 is before --from 2024-01-02",
        ),
    ],
    ids=[
        "replay-input",
        "verify",
        "verify-input",
        "reconcile-replay",
        "reconcile-live",
        "lateness",
        "backfill",
        "backfill-range",
        "backfill-hours",
        "status-range",
    ],
)
def test_a_missing_local_path_or_a_backwards_range_is_refused_before_spark(
    pipelines_dir, tmp_path, monkeypatch, argv, message
):
    """First hour of this session's fresh clone: a typo in a local folder, or ``--to`` before
    ``--from``, was refused only once Spark had started (seconds, and its log lines)."""
    from windowing import command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: pytest.fail("Spark started"))
    names = {"missing": tmp_path / "typo", "here": tmp_path, "out": tmp_path / "out"}
    command, *rest = (a.format(**names) for a in argv)
    rc, out, err = rewindow(command, "--config", pipelines_dir / "clicks-hourly.yaml", *rest)
    assert rc == 2 and err.strip().splitlines()[-1] == f"rewindow: error: {message.format(**names)}", err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_landing_zone_with_no_events_is_one_line_naming_the_options(spark, pipelines_dir, tmp_path):
    """Fresh-clone trial: ``backfill --resume`` without ``--input`` read the YAML's
    ``source.path``, which held no events, and ended in a ``LandingZoneError`` traceback."""
    (tmp_path / "empty").mkdir()
    rc, out, err = rewindow(
        "backfill", "--config", pipelines_dir / "clicks-hourly.yaml", "--input", tmp_path / "empty",
        "--output", tmp_path / "out",
    )  # fmt: skip
    assert rc == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"rewindow: error: landing zone {tmp_path / 'empty'} holds no events in date=YYYY-MM-DD folders: point "
        "--input, the pipeline's source.path or (Dagster) REWINDOW_LANDING_ZONE at your events, or write sample "
        "ones with `rewindow generate`"
    )


def test_status_of_a_folder_that_is_not_there_says_so(tmp_path, monkeypatch):
    """``rewindow status --output TYPO`` said "no rewindow history" and exited 0, as for an
    empty folder; with ``--config``, a history not started yet is a status, not an error."""
    from windowing import command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: pytest.fail("Spark started"))
    rc, out, err = rewindow("status", "--output", tmp_path / "typo")
    assert (rc, out, err.strip()) == (2, "", f"rewindow: error: {tmp_path / 'typo'}: no such folder")
    rc, out, err = rewindow("status", "--output", tmp_path)
    assert (rc, out.strip()) == (0, f"no rewindow history under {tmp_path}"), err


def test_a_column_whose_type_changed_between_days_is_named_with_both_types(spark, history, pipelines_dir, tmp_path):
    """``amount`` int on the first day, bigint on the second: Spark's
    SchemaColumnConvertNotSupportedException, naming neither the change nor its source."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    landing = shutil.copytree(history, tmp_path / "landing")
    for day, dtype in ((DAYS[0], pa.int32()), (DAYS[1], pa.int64())):
        for f in (landing / f"date={day}").glob("*.parquet"):
            t = pq.read_table(f)
            amount = t["amount"].cast(pa.int64(), safe=False).cast(dtype, safe=False)
            pq.write_table(t.set_column(t.column_names.index("amount"), "amount", amount), f)
    rc, _, err = rewindow(
        "backfill",
        "--config",
        pipelines_dir / "clicks-hourly.yaml",
        "--input",
        landing,
        "--output",
        tmp_path / "out",
        "--from",
        DAYS[0],
        "--to",
        DAYS[1],
    )
    assert rc == 1 and "Traceback" not in err and "SchemaColumnConvert" not in err, err
    assert (
        f"Cannot replay partition {DAYS[1]} of pipeline clicks-hourly: {landing}/date={DAYS[1]}: column 'amount' "
        "is bigint in this day's files but int in the landing zone's schema"
    ) in err, err
    assert "the state carried from the days before holds int too" in err


def test_two_concurrent_backfills_of_one_range_lose_nothing(spark, history, pipelines_dir, tmp_path):
    """Held in the second hostile run (issue 26): both commit every partition; the current
    outputs form one chain, each partition from its predecessor's current state, and equal
    a backfill run alone."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.dagster_harness import START
    from windowing.chain import COMMITTED, Chain
    from windowing.config import load_pipeline
    from windowing.partitions import Partitions
    from windowing.storage.outputs import read_outputs

    pipeline = load_pipeline(pipelines_dir / "clicks-hourly.yaml")

    def chain(root):
        return Chain(spark, pipeline, str(history), str(root), Partitions("day", START))

    both = chain(tmp_path / "both")
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(lambda: list(both.replay(DAYS[:2], checks=False))) for _ in range(2)]
        results = [r.result() for r in runs]
    assert all(p.committed for parts in results for p in parts)
    assert [s.status for s in both.status(DAYS[:2])] == [COMMITTED, COMMITTED]
    alone = chain(tmp_path / "alone")
    list(alone.replay(DAYS[:2], checks=False))
    for day in DAYS[:2]:
        got, want = read_outputs(spark, both.folder(day)), read_outputs(spark, alone.folder(day))
        for name in ("aggregates", "late_events", "rejected", "state"):
            assert sorted(map(tuple, getattr(got, name).collect()), key=repr) == sorted(
                map(tuple, getattr(want, name).collect()), key=repr
            ), (day, name)


def test_rerun_from_alone_goes_through_the_newest_committed_and_a_shorter_rerun_says_what_is_left(
    spark, history, pipelines_dir, tmp_path
):
    """``--rerun-from D`` replayed only D, and said nothing of the later partitions it left
    out of date (issue 48); it now replays D through the newest committed partition, and a
    run that still leaves later ones out of date ends with the command that fixes them."""
    import shutil

    import pyarrow.parquet as pq

    landing = tmp_path / "landing"
    shutil.copytree(history, landing)
    config = pipelines_dir / "clicks-hourly.yaml"
    root = tmp_path / "out"
    base = ("backfill", "--config", config, "--input", landing, "--output", root)
    rc, _, err = rewindow(*base, "--from", DAYS[0], "--to", DAYS[-1])
    assert rc == 0, err
    folder = landing / f"date={DAYS[1]}"
    pq.write_table(pq.read_table(sorted(folder.glob("*.parquet"))[0]).slice(0, 7), folder / "late.parquet")

    rc, _, err = rewindow(*base, "--rerun-from", DAYS[1], "--to", DAYS[1])
    assert rc == 0, err
    assert f"after {DAYS[1]} are out of date from {DAYS[2]}" in err and "--resume" in err, err
    rc, _, err = rewindow(*base, "--rerun-from", DAYS[1])
    assert rc == 0 and f"backfilling 2 partition(s) {DAYS[1]}..{DAYS[2]}" in err, err
    assert "are out of date" not in err, err
    lines, _ = _status_lines(root, config)
    assert all("committed" in lines[d] for d in DAYS), lines
