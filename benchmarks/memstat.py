"""The instruction-count gate's companions: page faults, peak RSS and system
calls of each gated path (``benchmarks/icount.py``'s workloads), which the
instruction counts cannot see (the kernel's work on a fault or an ``mmap`` is
not the process's instructions).

Each path runs once more outside valgrind, under ``strace -f``, in a
process started like callgrind's child (``icount.callgrind_env``) and with
address-space randomisation off (``setarch -R``), so that the same binary
and input give the same figures run after run. The child measures its minor
page faults (``getrusage(RUSAGE_SELF)`` deltas) and its peak RSS above the
RSS the work started at (the peak reset through ``/proc/self/clear_refs``,
then read as ``VmHWM``), for the path's first call and for ``ITERATIONS``
calls after one more warm-up call, where memory a decoder recycles shows as
no faults at all; strace counts the system calls of every thread between the
marker calls to ``getppid`` that frame the same two stretches. (Tracing
changes neither figure: a plain run gives the same ones.)

The figures (see ``METRICS``): steady faults per 1,000 records, first-call
faults per 1,000 records, peak RSS growth over the steady calls in bytes per
record of one call, and steady system calls per call (a "call" is one run
of the path's work: one decode of its 20,000 records, one encode of them,
50,000 sends). Each has its own allowance, a percentage of the base figure
or an absolute amount, whichever is larger; ``compare`` fails a path that
passes it and ``format_table`` shows them beside the instruction counts.

    python -m benchmarks.memstat measure [--path P ...] [--jobs 2]   # the kwire on PYTHONPATH, as JSON
    python -m benchmarks.memstat run P                                # one child (JSON of its rusage figures)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks import icount

ITERATIONS = 5                   # steady calls measured, after the first call and one warm-up call
MARKER = icount.MARKER           # getppid: frames the calls in the strace log


@dataclass(frozen=True)
class Metric:
    key: str                     # in a path's figures
    label: str                   # the table's column
    pct: float                   # allowance: this percentage of the base figure ...
    slack: float                 # ... or this much, whichever is larger
    digits: int                  # decimals shown


METRICS = (
    Metric("faults", "faults/1k rec", 5.0, 1.0, 1),
    Metric("first_faults", "1st-call faults/1k", 5.0, 2.0, 1),
    Metric("peak", "peak RSS B/rec", 10.0, 16.0, 0),
    Metric("syscalls", "syscalls/call", 10.0, 1.0, 1),
)
METRIC_KEYS = tuple(m.key for m in METRICS)


# ------------------------------------------------------------------ the child
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


class _Window:
    """Minor faults and the peak RSS above the starting RSS, from now to
    :meth:`close`."""

    def __init__(self):
        with open("/proc/self/clear_refs", "w") as f:       # resets VmHWM to the current RSS
            f.write("5")
        self.rss = _status_kib("VmRSS")
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def close(self) -> Tuple[int, int]:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.faults
        return faults, max(0, _status_kib("VmHWM") - self.rss)


def run_workload(name: str, iterations: int = ITERATIONS) -> Dict[str, int]:
    """The child: the path's inputs, its first call, one warm-up call, then
    ``iterations`` calls; each measured stretch framed by marker calls."""
    path = icount.PATHS[name]
    work = path.setup(path.records)
    w = _Window()
    os.getppid()
    work()
    os.getppid()
    first_faults, first_peak = w.close()
    work()
    w = _Window()
    os.getppid()
    for _ in range(iterations):
        work()
    os.getppid()
    faults, peak = w.close()
    return {"records": path.records, "iterations": iterations, "first_faults": first_faults,
            "first_peak_kib": first_peak, "faults": faults, "peak_kib": peak}


# ----------------------------------------------------------- the strace log
_LINE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(?:<\.\.\. )?([a-z_0-9]+)(\(| resumed>)")


def syscalls_between_markers(lines: Sequence[str], marker: str = MARKER) -> List[Counter]:
    """System calls by name in each stretch between two marker calls of an
    ``strace -f`` log (any thread's, the markers excluded; a call cut by
    another thread's line counts once, at its start)."""
    stretches, current, inside = [], Counter(), False
    for line in lines:
        m = _LINE.match(line)
        if not m or m.group(2) != "(":              # signals, exits, "<... resumed>" halves
            continue
        name = m.group(1)
        if name == marker:
            if inside:
                stretches.append(current)
                current = Counter()
            inside = not inside
        elif inside:
            current[name] += 1
    return stretches


# --------------------------------------------------------------- measurement
def _child_cmd(name: str, pythonpath: Optional[str], python: str) -> List[str]:
    cmd = ["setarch", "-R", python, "-m", "benchmarks.memstat", "run", name]
    return cmd + (["--expect", pythonpath] if pythonpath else [])


def _run(cmd: List[str], name: str, pythonpath: Optional[str], harness: Optional[str]) -> str:
    proc = subprocess.run(cmd, env=icount.callgrind_env(pythonpath, harness), cwd=harness or icount.HERE_ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {cmd[0]} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout


def figures(child: Dict[str, int], steady: Counter, first: Counter) -> Dict[str, object]:
    """A path's figures (``METRICS``' keys, and the system calls by name)
    from its child's rusage figures and the system calls of its stretches."""
    n, k = child["records"], child["iterations"]
    return {"faults": child["faults"] / k / n * 1000, "first_faults": child["first_faults"] / n * 1000,
            "peak": child["peak_kib"] * 1024 / n, "syscalls": sum(steady.values()) / k,
            "first_syscalls": sum(first.values()),
            "syscalls_by_name": {s: c / k for s, c in sorted(steady.items())},
            "first_syscalls_by_name": dict(sorted(first.items()))}


def measure_one(name: str, pythonpath: Optional[str] = None, harness: Optional[str] = None,
                python: str = sys.executable, strace: str = "strace") -> Dict[str, object]:
    """The companions of one path, for the kwire ``pythonpath`` resolves to."""
    with tempfile.TemporaryDirectory(prefix="kwire-memstat-") as tmp:
        log = os.path.join(tmp, "strace.log")
        child = json.loads(_run([strace, "-f", "-qq", "-e", "signal=none", "-o", log,
                                 *_child_cmd(name, pythonpath, python)], name, pythonpath, harness))
        with open(log) as f:
            stretches = syscalls_between_markers(f)
    if len(stretches) != 2:
        raise RuntimeError(f"{name}: expected two marked stretches in the strace log, got {len(stretches)}")
    return figures(child, steady=stretches[1], first=stretches[0])


def missing_tools() -> List[str]:
    """What the measurement needs and this machine lacks."""
    out = [t for t in ("strace", "setarch") if shutil.which(t) is None]
    if "setarch" not in out and subprocess.run(["setarch", "-R", "true"], stderr=subprocess.DEVNULL).returncode:
        out.append("setarch -R (address-space randomisation cannot be turned off here)")
    return out + ([] if os.path.exists("/proc/self/clear_refs") else ["/proc/self/clear_refs (Linux)"])


def measure(names: Sequence[str], pythonpath: Optional[str] = None, jobs: int = 2, label: str = "",
            log=None, harness: Optional[str] = None) -> Dict[str, Dict[str, object]]:
    """Every path of ``names``, ``jobs`` at a time (see icount.measure)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def one(name):
        t = time.monotonic()
        v = measure_one(name, pythonpath, harness)
        log(f"  {label}{name}: {v['faults']:,.1f} faults/1k records, {v['first_faults']:,.1f} first call, "
            f"peak +{v['peak']:,.0f} B/record, {v['syscalls']:,.1f} syscalls/call ({time.monotonic() - t:.1f} s)")
        return name, v

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        return dict(ex.map(one, names))


# ---------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Cell:
    base: Optional[float]
    head: Optional[float]
    verdict: str                 # "ok", "FAIL", "better", or "" (not in both)


def limit(metric: Metric, base: float) -> float:
    """The largest head figure that passes against ``base``."""
    return base + max(metric.slack, abs(base) * metric.pct / 100.0)


def judge(metric: Metric, base: Optional[float], head: Optional[float]) -> Cell:
    if base is None or head is None:
        return Cell(base, head, "")
    if head > limit(metric, base):
        return Cell(base, head, "FAIL")
    if base > limit(metric, head):
        return Cell(base, head, "better")
    return Cell(base, head, "ok")


def compare(base: Dict[str, Dict[str, float]], head: Dict[str, Dict[str, float]]) \
        -> Tuple[Dict[str, Dict[str, Cell]], bool]:
    """Each path's cells (metric key -> Cell) and whether any fails."""
    out, failed = {}, False
    for name in list(head) + [n for n in base if n not in head]:
        b, h = base.get(name, {}), head.get(name, {})
        out[name] = {m.key: judge(m, b.get(m.key), h.get(m.key)) for m in METRICS}
        failed |= any(c.verdict == "FAIL" for c in out[name].values())
    return out, failed


def split_figures(data: Dict[str, object]) -> Tuple[Dict[str, float], Dict[str, Dict[str, float]]]:
    """Figures as ``scripts/bench --compare`` reads them: a path's value is
    its instructions per record, or an object of ``instructions`` and any
    of ``METRICS``' keys. Returns (instructions, companions)."""
    instr, comp = {}, {}
    for name, v in data.items():
        if isinstance(v, dict):
            if v.get("instructions") is not None:
                instr[name] = float(v["instructions"])
            c = {k: float(v[k]) for k in METRIC_KEYS if v.get(k) is not None}
            if c:
                comp[name] = c
        else:
            instr[name] = float(v)
    return instr, comp


def allowances() -> str:
    return "; ".join(f"{m.label} +{m.pct:g}% or +{m.slack:g}" for m in METRICS)


def format_table(rows: Sequence[icount.Row], cells: Dict[str, Dict[str, Cell]], threshold: float,
                 base_label: str = "base", head_label: str = "head") -> str:
    """The gate's table: each path's instructions per record (base, head,
    change) and, where measured, each companion as ``base -> head`` (``!``:
    past its allowance); the verdict names what failed."""
    def num(v, digits=1):
        return "-" if v is None else f"{v:,.{digits}f}"

    companions = [m for m in METRICS if any(c[m.key].verdict for c in cells.values())]
    header = ["path", f"{base_label} instr/record", f"{head_label} instr/record", "change"]
    header += [m.label for m in companions] + ["verdict"]
    body = []
    by_path = {r.path: r for r in rows}
    for name in list(by_path) + [n for n in cells if n not in by_path]:
        r = by_path.get(name) or icount.Row(name, None, None, None, "")
        c = cells.get(name, {})
        line = [name, num(r.base), num(r.head), "-" if r.change is None else f"{r.change:+.2f}%"]
        for m in companions:
            cell = c.get(m.key, Cell(None, None, ""))
            line.append(f"{num(cell.base, m.digits)} -> {num(cell.head, m.digits)}"
                        + (" !" if cell.verdict == "FAIL" else ""))
        failing = (["instr"] if r.verdict == "FAIL" else []) + \
            [m.key for m in companions if c.get(m.key, Cell(None, None, "")).verdict == "FAIL"]
        line.append("FAIL: " + ", ".join(failing) if failing else r.verdict or "ok")
        body.append(line)
    widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]
    fmt = "  ".join(("{:<%d}" if i in (0, len(header) - 1) else "{:>%d}") % w for i, w in enumerate(widths))
    lines = [f"Benchmark gate: a path fails above +{threshold:g}% instructions per record"
             + (f", or past a companion's allowance ({allowances()}); companions shown as "
                f"{base_label.split()[0]} -> {head_label.split()[0]}" if companions else "")]
    lines += [fmt.format(*line).rstrip() for line in [header, ["-" * w for w in widths]] + body]
    n_fail = sum(line[-1].startswith("FAIL") for line in body)
    lines.append(f"verdict: {'FAIL' if n_fail else 'pass'} ({n_fail} of {len(body)} paths failed)")
    return "\n".join(lines)


# ------------------------------------------------------------------------ CLI
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one workload (the measured child), its rusage figures as JSON")
    r.add_argument("path", choices=sorted(icount.PATHS))
    r.add_argument("--expect", help="refuse to run unless kwire comes from this directory")
    r.add_argument("--iterations", type=int, default=ITERATIONS)
    m = sub.add_parser("measure", help="the companions of the kwire on PYTHONPATH, as JSON")
    m.add_argument("--path", action="append", choices=sorted(icount.PATHS))
    m.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        if args.expect:
            icount.check_origin(args.expect)
        print(json.dumps(run_workload(args.path, args.iterations)))
        return 0
    missing = missing_tools()
    if missing:
        raise SystemExit(f"benchmarks.memstat needs {', '.join(missing)} (apt-get install strace util-linux)")
    import kwire._codec
    pp = os.path.dirname(os.path.dirname(os.path.abspath(kwire._codec.__file__)))
    print(json.dumps(measure(args.path or list(icount.PATHS), pp, args.jobs), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
