"""``rewindow verify``: the checks on a replay's output folder, from the shell."""

from __future__ import annotations

import json

from tests.quality.conftest import copy_tree
from tests.support.outputs import run_dir
from windowing import validation as V


def test_verify_passes_on_a_good_output(verify, replayed):
    r = replayed("clicks")
    code, out, err = verify(r.out2, "--config", r.config, "--input", r.day2, "--state-in", r.out1 / "state")
    assert code == 0, out + err
    for name in (*V.CHECK_NAMES, "state_manifest"):  # the state against its manifest: verify's own (issue 26)
        assert f"\n{name} " in out
    assert "FAIL" not in out and "SKIP" not in out  # replay_reproduces included: --input recomputes
    checks = len(V.CHECK_NAMES) + 1
    assert f"{checks} of {checks} checks passed (0 skipped)" in out


def test_verify_fails_on_an_output_that_lost_rows(verify, replayed, tmp_path):
    r = replayed("clicks")
    out_dir = copy_tree(r.out2, tmp_path / "out")
    import pyarrow.parquet as pq

    part = sorted((run_dir(out_dir) / "aggregates").glob("part-*.parquet"))[0]
    table = pq.read_table(part)
    pq.write_table(table.slice(0, table.num_rows // 2), part)  # a damaged file: half its windows are gone
    (part.parent / f".{part.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the old bytes
    code, out, err = verify(
        out_dir,
        "--config",
        r.config,
        "--input",
        r.day2,
        "--state-in",
        r.out1 / "state",
        "--check",
        "conservation",
        "--check",
        "metrics_consistent",
        "--check",
        "state_unique",
    )
    assert code == 1
    lines = {ln.split()[0]: ln.split()[1] for ln in out.splitlines() if ln and ln.split()[0] in V.CHECK_NAMES}
    assert lines == {"conservation": "FAIL", "metrics_consistent": "FAIL", "state_unique": "PASS"}
    assert "2 check(s) failed: conservation, metrics_consistent" in err


def test_verify_json_and_skips_without_input(verify, replayed):
    """Without --input the input, conservation and recompute checks cannot run: skipped
    in a full run, an error (exit 2, saying why) when asked for by name."""
    r = replayed("sessions")
    code, out, err = verify(
        r.out2, "--config", r.config, "--json", "--check", "conservation", "--check", "state_fingerprint"
    )
    assert code == 2, out + err
    doc = {d["name"]: d for d in json.loads(out)}
    assert doc["conservation"]["status"] == "SKIP" and doc["state_fingerprint"]["status"] == "PASS"
    assert doc["state_fingerprint"]["failure_count"] == 0
    assert err.strip() == "rewindow: error: check conservation cannot run: no input given"
    code, out, err = verify(r.out2, "--config", r.config, "--json", "--check", "state_fingerprint")
    assert code == 0 and [d["name"] for d in json.loads(out)] == ["state_fingerprint"], out + err


def test_verify_usage_errors_exit_2(verify, replayed, tmp_path):
    r = replayed("clicks")
    code, _, err = verify(tmp_path / "nothing", "--config", r.config)
    assert code == 2 and f"{tmp_path / 'nothing'}: no such folder" in err  # before Spark starts
    code, _, err = verify(r.out2, "--config", r.config, "--check", "no_such_check")
    assert code == 2 and "unknown check" in err
    code, _, err = verify(r.out2, "--config", r.config, "--max-skew", "soon")
    assert code == 2 and "--max-skew" in err
