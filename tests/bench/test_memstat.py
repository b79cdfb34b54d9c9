"""The gate's memory and system-call companions (benchmarks/memstat.py):
reading strace's log, the figures, the allowances, the table beside the
instruction counts and scripts/bench --compare's verdict on them. No build
and no valgrind; one test runs a real child under strace (a second or two)
where strace is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import icount, memstat  # noqa: E402

ARROW = "decode-arrow/none/mixed"
INSTR = {ARROW: 2000.0, "send": 1200.0}
COMP = {ARROW: {"faults": 0.0, "first_faults": 171.4, "peak": 0.0, "syscalls": 0.0},
        "send": {"faults": 0.0, "first_faults": 2.6, "peak": 1.0, "syscalls": 0.0}}
# What KWIRE_BENCH_NO_RECYCLE did to the Arrow path on this machine: the same
# instructions within a fraction of a percent, every call faulting fresh pages.
UNRECYCLED = dict(COMP, **{ARROW: {"faults": 33.4, "first_faults": 171.4, "peak": 684.2, "syscalls": 0.2}})

STRACE_LOG = """\
4100 execve("/usr/bin/python", ["python"], 0x7ffd /* 5 vars */) = 0
4100 mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000
4100 getppid()                         = 4099
4100 mmap(NULL, 1052672, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000100000
4101 futex(0x7f0000200000, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>
4100 mremap(0x7f0000100000, 1052672, 2101248, MREMAP_MAYMOVE) = 0x7f0000400000
4101 <... futex resumed>)               = 0
4100 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---
4100 getppid()                         = 4099
4100 brk(0x55d000000000)                = 0x55d000000000
4100 getppid()                         = 4099
4100 brk(0x55d000021000)                = 0x55d000021000
4100 brk(0x55d000000000)                = 0x55d000000000
4100 getppid()                         = 4099
4100 exit_group(0)                      = ?
4100 +++ exited with 0 +++
"""


def test_strace_log_counts_each_marked_stretch_by_name():
    first, steady = memstat.syscalls_between_markers(STRACE_LOG.splitlines())
    assert first == Counter({"mmap": 1, "futex": 1, "mremap": 1})       # another thread's, resumed once
    assert steady == Counter({"brk": 2})                                # the brk between stretches is outside


def test_strace_log_without_pid_prefix_and_unclosed_stretch():
    lines = ["getppid() = 1", "munmap(0x7f, 4096) = 0", "getppid() = 1", "getppid() = 1", "brk(NULL) = 0x5"]
    assert memstat.syscalls_between_markers(lines) == [Counter({"munmap": 1})]


def test_figures_are_per_thousand_records_per_record_and_per_call():
    child = {"records": 20000, "iterations": 5, "first_faults": 3428, "first_peak_kib": 14860,
             "faults": 3340, "peak_kib": 13360}
    f = memstat.figures(child, steady=Counter({"brk": 1, "munmap": 4}), first=Counter({"mmap": 2}))
    assert f["faults"] == pytest.approx(33.4)               # 3340 faults / 5 calls / 20 thousand records
    assert f["first_faults"] == pytest.approx(171.4)
    assert f["peak"] == pytest.approx(13360 * 1024 / 20000)
    assert f["syscalls"] == 1.0 and f["first_syscalls"] == 2
    assert f["syscalls_by_name"] == {"brk": 0.2, "munmap": 0.8}


@pytest.mark.parametrize("metric,base,head,verdict", [
    ("faults", 0.0, 1.0, "ok"),            # within the absolute slack (1 per 1,000 records)
    ("faults", 0.0, 1.01, "FAIL"),
    ("faults", 100.0, 105.0, "ok"),        # within 5%
    ("faults", 100.0, 105.1, "FAIL"),
    ("faults", 100.0, 90.0, "better"),
    ("syscalls", 0.0, 1.5, "FAIL"),
    ("syscalls", 43.8, 48.1, "ok"),        # within 10%
    ("peak", 0.0, 16.0, "ok"),
    ("peak", 0.0, 684.2, "FAIL"),
    ("first_faults", 171.4, 171.4, "ok"),
])
def test_each_companion_has_its_own_allowance(metric, base, head, verdict):
    m = next(m for m in memstat.METRICS if m.key == metric)
    assert memstat.judge(m, base, head).verdict == verdict


def test_unrecycled_memory_fails_on_faults_and_peak_only():
    cells, failed = memstat.compare(COMP, UNRECYCLED)
    assert failed
    assert {k: c.verdict for k, c in cells[ARROW].items()} == \
        {"faults": "FAIL", "first_faults": "ok", "peak": "FAIL", "syscalls": "ok"}
    assert {c.verdict for c in cells["send"].values()} == {"ok"}
    assert memstat.compare(COMP, COMP) == ({p: {m.key: memstat.Cell(COMP[p][m.key], COMP[p][m.key], "ok")
                                                for m in memstat.METRICS} for p in COMP}, False)


def test_paths_measured_on_one_side_only_do_not_fail():
    cells, failed = memstat.compare(COMP, {ARROW: COMP[ARROW], "fetch-response": COMP["send"]})
    assert not failed
    assert {c.verdict for c in cells["fetch-response"].values()} == {""}
    assert {c.verdict for c in cells["send"].values()} == {""}


def test_table_shows_companions_beside_instructions_and_names_what_failed():
    rows, _ = icount.compare(INSTR, dict(INSTR, **{ARROW: 2002.0}))
    cells, _ = memstat.compare(COMP, UNRECYCLED)
    lines = memstat.format_table(rows, cells, 3.0, "normal", "unrecycled").splitlines()
    assert "+3%" in lines[0] and "faults/1k rec +5% or +1" in lines[0]
    assert lines[1].split()[:4] == ["path", "normal", "instr/record", "unrecycled"]
    assert lines[0].endswith("companions shown as normal -> unrecycled")
    assert "faults/1k rec" in lines[1] and "syscalls/call" in lines[1]
    arrow = next(line for line in lines if line.startswith(ARROW))
    assert arrow.split()[1:4] == ["2,000.0", "2,002.0", "+0.10%"]
    assert "0.0 -> 33.4 !" in arrow and "171.4 -> 171.4  " in arrow and "0 -> 684 !" in arrow
    assert arrow.endswith("FAIL: faults, peak")
    send = next(line for line in lines if line.startswith("send"))
    assert "!" not in send and send.endswith("ok")
    assert lines[-1] == "verdict: FAIL (1 of 2 paths failed)"


def test_table_of_instructions_alone_has_no_companion_columns():
    head = dict(INSTR, send=1260.0)                                     # +5%
    rows, _ = icount.compare(INSTR, head, 3.0)
    lines = memstat.format_table(rows, {}, 3.0, "base abc", "head def").splitlines()
    assert lines[0] == "Benchmark gate: a path fails above +3% instructions per record"
    assert lines[1].split() == ["path", "base", "abc", "instr/record", "head", "def", "instr/record", "change",
                                "verdict"]
    send = next(line for line in lines if line.startswith("send"))
    assert send.split() == ["send", "1,200.0", "1,260.0", "+5.00%", "FAIL:", "instr"]
    assert lines[-1] == "verdict: FAIL (1 of 2 paths failed)"


def test_split_figures_reads_both_forms():
    instr, comp = memstat.split_figures({"send": 1200, ARROW: dict(UNRECYCLED[ARROW], instructions=2000,
                                                                   syscalls_by_name={"brk": 0.2})})
    assert instr == {"send": 1200.0, ARROW: 2000.0}
    assert comp == {ARROW: UNRECYCLED[ARROW]}


def _compare(tmp_path, base, head):
    files = []
    for name, data in (("base", base), ("head", head)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(data))
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench"), "--compare", *map(str, files)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, KWIRE_VENV=sys.prefix))


def _with_instr(comp):
    return {p: dict(v, instructions=INSTR[p]) for p, v in comp.items()}


def test_script_fails_a_memory_regression_the_instructions_miss(tmp_path):
    proc = _compare(tmp_path, _with_instr(COMP), _with_instr(UNRECYCLED))
    assert proc.returncode == 1, proc.stderr
    assert "FAIL: faults, peak" in proc.stdout and "+0.00%" in proc.stdout
    proc = _compare(tmp_path, _with_instr(COMP), _with_instr(COMP))
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1].startswith("verdict: pass")


@pytest.mark.skipif(memstat.missing_tools() != [], reason="needs strace, setarch and /proc/self/clear_refs")
def test_real_child_under_strace_gives_identical_figures_twice():
    import kwire._codec
    lib = os.path.dirname(os.path.dirname(os.path.abspath(kwire._codec.__file__)))
    runs = [memstat.measure_one("send", lib, ROOT) for _ in range(2)]
    # The gated figures are identical; so are the first call's system calls,
    # but for a futex: a lock's wake-up depends on scheduling, not on the
    # path's work (CI once saw one in one run of two, under load).
    assert {k: runs[0][k] for k in memstat.METRIC_KEYS} == {k: runs[1][k] for k in memstat.METRIC_KEYS}
    first = [{s: c for s, c in r["first_syscalls_by_name"].items() if s != "futex"} for r in runs]
    assert first[0] == first[1]
    assert set(memstat.METRIC_KEYS) <= set(runs[0]) and runs[0]["first_faults"] > 0


def _bench_script():
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("kwire_bench_script", os.path.join(ROOT, "scripts", "bench"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_self_test_verdict_wants_faults_failed_and_instructions_kept():
    bench = _bench_script()
    paths = ["decode-records/none/mixed", ARROW, "send", "decode-arrow/lz4/mixed"]
    normal = {p: 1000.0 for p in paths}
    slowed = dict(normal, **{"decode-records/none/mixed": 1200.0, ARROW: 1600.0})
    comp = {p: dict(COMP["send"]) for p in paths}
    unrec = dict(comp, **{ARROW: UNRECYCLED[ARROW]})

    def problems(slowed_fig, unrec_instr, unrec_comp):
        return bench.self_test_problems(icount.compare(normal, slowed_fig)[0], icount.compare(normal, unrec_instr)[0],
                                        memstat.compare(comp, unrec_comp)[0], 3.0)

    assert problems(slowed, normal, unrec) == []
    assert problems(normal, normal, unrec) == [f"slowed {p}: ok, expected FAIL" for p in bench.SELF_TEST_SLOWED]
    assert problems(slowed, normal, comp) == [f"unrecycled {ARROW}: steady page faults ok, expected FAIL"]
    assert problems(slowed, dict(normal, **{ARROW: 1100.0}), unrec) == \
        [f"unrecycled {ARROW}: instructions +10.00%, expected within +3%"]
    assert problems(slowed, normal, dict(unrec, send=dict(COMP["send"], faults=5.0, syscalls=3.0))) == \
        ["unrecycled send: faults, syscalls FAIL, expected ok (nothing to recycle)"]
