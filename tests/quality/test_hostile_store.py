"""Trust nothing on disk (issue 26): what a damaged, edited or oddly named output gets.

Commit records steer what is read and deleted, and a state's part files decide which
windows a replay continues: each is checked as data before it is used. The cases are
copies of the quality suite's clicks replay (``replayed``), edited with plain file I/O as
a careless (or malicious) user would.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.quality.conftest import copy_tree, rows
from tests.support.outputs import commits, current, run_dir
from windowing.storage import commits as commit_records
from windowing.storage.commits import prune
from windowing.storage.errors import StateError
from windowing.storage.outputs import read_outputs, read_state, write_outputs
from windowing.storage.records import DamagedCommitError


def _record_file(out: Path) -> Path:
    """The current commit record's JSON file."""
    folder = out / "_commits" / f"{current(out)['seq']:010d}-{current(out)['run_id']}"
    [part] = folder.glob("part-*.json")
    return part


def _rewrite(file: Path, text: str) -> None:
    """Replace a file Spark wrote, and drop its checksum (Hadoop would refuse the edit)."""
    file.write_text(text)
    file.with_name(f".{file.name}.crc").unlink(missing_ok=True)


def _cli(spark, monkeypatch, capsys, *argv) -> tuple[int, str, str]:
    from windowing import cli, command_line

    monkeypatch.setattr(command_line, "spark_for", lambda args: spark)
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --------------------------------------------------------------------------- commit records


def test_a_record_pointing_outside_runs_is_damaged_and_prune_deletes_nothing_outside(
    spark, replayed, tmp_path, monkeypatch, capsys
):
    """Finding 1: ``"run": "../../victim"`` made the prune step delete a folder outside the output."""
    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "root" / "out")
    victim = tmp_path / "victim"
    (victim / "aggregates").mkdir(parents=True)
    (victim / "precious.txt").write_text("keep me")
    record = _record_file(out)
    doc = json.loads(record.read_text())
    doc["run"] = "../../victim"
    _rewrite(record, json.dumps(doc) + "\n")

    code, _, err = _cli(spark, monkeypatch, capsys, "verify", out, "--config", r.config)
    assert code == 2 and "Traceback" not in err
    assert f"{record}: the newest commit record of {out} is damaged" in err, err
    assert "'../../victim' is not its own run folder" in err and "Replay into this output again" in err, err
    with pytest.raises(DamagedCommitError):
        read_state(spark, out)

    # Replays go on into the output (each supersedes the damaged record); pruning keeps one run.
    monkeypatch.setattr(commit_records, "KEEP_RUNS", 1)
    day1 = read_outputs(spark, r.out1)
    for _ in range(3):
        write_outputs(day1, str(out))
    assert (victim / "precious.txt").read_text() == "keep me" and (victim / "aggregates").is_dir()
    assert [c["seq"] for c in commits(out)] == [4]  # the damaged record, superseded, was swept too
    assert rows(read_outputs(spark, out).aggregates) == rows(day1.aggregates)


@pytest.mark.parametrize("damage", ["truncated", "empty object", "not json"])
def test_a_damaged_newest_record_is_named_with_the_way_out_and_a_replay_supersedes_it(
    spark, replayed, tmp_path, monkeypatch, capsys, damage
):
    """Finding 4: a truncated record crashed status (TypeError) and stopped replay/verify naming no file."""
    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "out")
    day1 = read_outputs(spark, r.out1)
    write_outputs(day1, str(out))  # two records: the older one stays trusted
    record = _record_file(out)
    text = record.read_text()
    _rewrite(record, {"truncated": text[: len(text) // 2], "empty object": "{}\n", "not json": "garbage\n"}[damage])

    code, _, err = _cli(spark, monkeypatch, capsys, "verify", out, "--config", r.config)
    assert code == 2 and "Traceback" not in err
    assert f"{record}: the newest commit record of {out} is damaged (truncated or unparseable" in err, err
    assert f"delete the record's folder {record.parent}" in err, err
    # The way out it names: a replay into the output commits after the damaged record.
    code, _, err = _cli(spark, monkeypatch, capsys, "replay", "--config", r.config, "--input", r.day1, "--output", out)
    assert code == 0, err
    assert current(out)["seq"] == 3
    assert rows(read_outputs(spark, out).aggregates) == rows(day1.aggregates)


def test_a_record_whose_run_is_gone_is_damaged_not_current(spark, replayed, tmp_path, monkeypatch, capsys):
    """Finding 5 on one output: the current run folder deleted."""
    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "out")
    shutil.rmtree(run_dir(out) / "state")
    code, _, err = _cli(spark, monkeypatch, capsys, "verify", out, "--config", r.config)
    assert code == 2 and "Traceback" not in err
    assert f"{record_folder(out)}: the current commit record names run {current(out)['run']}" in err, err
    assert "is gone or incomplete" in err and "Replay into it again" in err, err


def record_folder(out: Path) -> Path:
    return _record_file(out).parent


def test_prune_deletes_only_rewindows_run_folders_and_sweeps_interrupted_commits(spark, replayed, tmp_path):
    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "out")
    not_ours = out / "runs" / "20200101T000000000000Z-my-notes"  # a timestamp prefix, not a run id
    not_ours.mkdir()
    (not_ours / "notes.txt").write_text("mine")
    interrupted = out / "_commits" / "0000000009-20200101T000000000000Z-deadbeef" / "_temporary" / "0"
    interrupted.mkdir(parents=True)  # a commit killed while its record was written
    deleted = prune(spark, str(out))
    assert [Path(p.removeprefix("file:")).name for p in deleted] == ["0000000009-20200101T000000000000Z-deadbeef"]
    assert not interrupted.parent.parent.exists()
    assert (not_ours / "notes.txt").read_text() == "mine"
    assert read_outputs(spark, out).commit.run_id == current(out)["run_id"]


# --------------------------------------------------------------------------- the state manifest


def _window_part(out: Path) -> Path:
    """The state part file holding the most window rows."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parts = sorted((run_dir(out) / "state").glob("part-*.parquet"))
    return max(parts, key=lambda f: pc.sum(pc.equal(pq.read_table(f)["state_kind"], "window")).as_py() or 0)


def test_every_state_carries_a_manifest_of_its_parts(spark, replayed):
    import pyarrow.parquet as pq

    r = replayed("clicks")
    written = json.loads((run_dir(r.out1) / "state" / "_manifest.json").read_text())
    parts = sorted((run_dir(r.out1) / "state").glob("part-*.parquet"))
    assert written["parts"] == [{"file": p.name, "rows": pq.read_metadata(p).num_rows} for p in parts]
    assert written["total_rows"] == spark.read.parquet(str(run_dir(r.out1) / "state")).count()
    assert current(r.out1)["extra"]["state_manifest"] == written  # the record keeps it too


@pytest.mark.parametrize("how", ["deleted", "extra part", "manifest deleted too"])
def test_a_state_missing_a_part_is_refused_by_every_reader_naming_run_and_part(
    spark, replayed, tmp_path, monkeypatch, capsys, how
):
    """Finding 3: a deleted part lost its open windows silently (2,086 emitted instead of 2,126)."""
    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "out")
    part = _window_part(out)
    if how == "extra part":
        shutil.copy(part, part.with_name("part-99999-extra.snappy.parquet"))
        expected = "state part part-99999-extra.snappy.parquet is not in its manifest"
    else:
        part.unlink()
        if how == "manifest deleted too":
            (part.parent / "_manifest.json").unlink()  # the commit record still has it
        expected = f"state part {part.name} ("
    run = f"run {current(out)['run_id']} of {out}"
    with pytest.raises(StateError) as err:
        read_state(spark, out)
    assert f"damaged state of {run}: {expected}" in str(err.value), err.value
    # --state-in: refused before any work, one line, nothing written.
    target = tmp_path / "next"
    code, _, err_text = _cli(
        spark,
        monkeypatch,
        capsys,
        "replay",
        "--config",
        r.config,
        "--input",
        r.day2,
        "--output",
        target,
        "--state-in",
        out,
    )
    assert code == 2 and expected in err_text and "Traceback" not in err_text, err_text
    assert not (target / "_commits").exists()
    # verify flags it without --input.
    code, table, err_text = _cli(spark, monkeypatch, capsys, "verify", out, "--config", r.config)
    assert code == 1 and "state_manifest" in err_text, err_text
    assert expected in table, table


def test_a_plain_state_folder_is_checked_against_its_own_manifest_file(spark, replayed, tmp_path):
    """``--state-in OUT/runs/<id>/state`` (or a copy of it): no commit record, the folder's manifest."""
    r = replayed("clicks")
    folder = copy_tree(run_dir(r.out1) / "state", tmp_path / "state")
    assert rows(read_state(spark, folder)) == rows(read_state(spark, r.out1))
    part = _window_part(r.out1)
    (folder / part.name).unlink()
    with pytest.raises(StateError, match=rf"damaged state of {folder}: state part {part.name} \(\d+ rows\) is missing"):
        read_state(spark, folder)


def test_verify_recomputes_the_window_rows_hash(spark, replayed, tmp_path, monkeypatch, capsys):
    """A window row edited in place (same parts, same counts) is caught by the content hash."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "out")
    part = _window_part(out)
    t = pq.read_table(part)
    events = t["events"]
    t = t.set_column(t.column_names.index("events"), "events", pc.add(events, pc.cast(1, events.type)))
    pq.write_table(t, part)
    part.with_name(f".{part.name}.crc").unlink(missing_ok=True)
    code, table, err = _cli(
        spark, monkeypatch, capsys, "verify", out, "--config", r.config, "--check", "metrics_consistent"
    )
    assert "state_manifest" not in table  # only when all checks run
    code, table, err = _cli(spark, monkeypatch, capsys, "verify", out, "--config", r.config)
    assert code == 1 and "state_manifest" in err
    assert "the window rows' content hash is" in table, table


def test_state_in_at_a_lateness_output_says_what_it_is(spark, replayed, tmp_path, monkeypatch, capsys):
    r = replayed("clicks")
    out = copy_tree(r.out1, tmp_path / "out")
    record = _record_file(out)
    doc = json.loads(record.read_text())
    doc["extra"] = json.dumps({"kind": "lateness", "tables": []})
    _rewrite(record, json.dumps(doc) + "\n")
    with pytest.raises(StateError, match=r"this is a `rewindow lateness` output, not a replay's: it holds no state"):
        read_state(spark, out)


# --------------------------------------------------------------------------- glob characters


@pytest.mark.parametrize("name", ["br[1]", "cu{a,b}", "odd n\u00e4me %20#,;"])  # the last held already
def test_folders_with_glob_characters_are_read_as_named(spark, replayed, tmp_path, monkeypatch, capsys, name):
    """An output ``br[1]`` was committed, then verify said "nothing committed" and --state-in
    "missing _SUCCESS"; an input ``br[1]`` that exists was "input does not exist"."""
    r = replayed("clicks")
    events = copy_tree(r.day1, tmp_path / f"in-{name}")
    out = tmp_path / name
    code, _, err = _cli(spark, monkeypatch, capsys, "replay", "--config", r.config, "--input", events, "--output", out)
    assert code == 0, err
    code, table, err = _cli(spark, monkeypatch, capsys, "verify", out, "--config", r.config)
    assert code == 0, table + err
    assert rows(read_outputs(spark, out).aggregates) == rows(read_outputs(spark, r.out1).aggregates)
    assert rows(read_state(spark, out)) == rows(read_state(spark, r.out1))
