"""The benchmark gate's comparison (benchmarks/icount.py, scripts/bench
--compare) on given figures: the table, the threshold, the exit status. No
build and no valgrind; the gate's measurement and its self-test run in the
bench-gate workflow (scripts/bench, scripts/bench --self-test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import icount, memstat  # noqa: E402

BASE = {"decode-records/none/mixed": 3000.0, "encode/none/mixed": 1000.0, "send": 1200.0}


def verdicts(base, head, threshold=3.0):
    rows, failed = icount.compare(base, head, threshold)
    return {r.path: r.verdict for r in rows}, failed


def test_identical_figures_pass():
    v, failed = verdicts(BASE, dict(BASE))
    assert not failed and set(v.values()) == {"ok"}


def test_threshold_is_exclusive_and_relative_to_base():
    head = dict(BASE, **{"decode-records/none/mixed": 3090.0})          # exactly +3%
    v, failed = verdicts(BASE, head)
    assert not failed and v["decode-records/none/mixed"] == "ok"
    head["decode-records/none/mixed"] = 3090.5                          # just above
    v, failed = verdicts(BASE, head)
    assert failed and v["decode-records/none/mixed"] == "FAIL"
    assert v["send"] == "ok"
    v, failed = verdicts(BASE, head, threshold=5.0)
    assert not failed


def test_one_regression_fails_among_improvements():
    head = {"decode-records/none/mixed": 2000.0, "encode/none/mixed": 1031.0, "send": 1100.0}
    v, failed = verdicts(BASE, head)
    assert failed
    assert v == {"decode-records/none/mixed": "better", "encode/none/mixed": "FAIL", "send": "better"}


def test_new_and_gone_paths_do_not_fail():
    head = {"decode-records/none/mixed": 3000.0, "fetch-response": 5000.0}
    rows, failed = icount.compare(BASE, head)
    assert not failed
    assert [(r.path, r.verdict) for r in rows] == [
        ("decode-records/none/mixed", "ok"), ("fetch-response", "new"),
        ("encode/none/mixed", "gone"), ("send", "gone")]
    assert rows[1].base is None and rows[1].change is None


def test_table_shows_threshold_figures_change_and_verdict():
    head = dict(BASE, send=1260.0)                                      # +5%
    rows, failed = icount.compare(BASE, head, 3.0)
    table = memstat.format_table(rows, {}, 3.0, "base abc", "head def")
    lines = table.splitlines()
    assert "+3%" in lines[0]
    assert lines[1].split()[:2] == ["path", "base"] and "head def instr/record" in lines[1]
    send = next(line for line in lines if line.startswith("send"))
    assert send.split() == ["send", "1,200.0", "1,260.0", "+5.00%", "FAIL:", "instr"]
    assert lines[-1].startswith("verdict: FAIL (1 of 3 paths failed)")
    ok = memstat.format_table(icount.compare(BASE, BASE)[0], {}, 3.0)
    assert ok.splitlines()[-1].startswith("verdict: pass")


def test_every_path_is_defined_and_listed():
    assert len(icount.PATHS) == len(set(icount.PATHS))
    for kind in ("records", "arrow"):
        for codec in ("none", "lz4"):
            for shape in ("standard", "mixed"):
                assert f"decode-{kind}/{codec}/{shape}" in icount.PATHS
    assert {"encode/none/mixed", "send", "fetch-response", "decode-arrow/none/alternating"} <= set(icount.PATHS)


def test_mixed_workload_is_mixed_and_deterministic():
    from benchmarks import workload
    recs = workload.mixed_records(2000)
    assert recs == workload.mixed_records(2000)
    assert any(k is None for _, k, _, _ in recs) and any(k is not None for _, k, _, _ in recs)
    assert {len(h) for _, _, _, h in recs} == {0, 1, 3}
    assert len({len(v) for _, _, v, _ in recs}) >= 5


@pytest.mark.parametrize("head_send,status", [(1200.0, 0), (1236.0, 0), (1237.0, 1)])
def test_script_exit_status(tmp_path, head_send, status):
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    base.write_text(json.dumps(BASE))
    head.write_text(json.dumps(dict(BASE, send=head_send)))
    table = tmp_path / "table.txt"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench"), "--compare", str(base), str(head),
                           "--threshold", "3", "--table", str(table)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, KWIRE_VENV=sys.prefix))
    assert proc.returncode == status, proc.stderr
    assert proc.stdout.strip() == table.read_text().strip()
    assert ("verdict: FAIL" if status else "verdict: pass") in proc.stdout
