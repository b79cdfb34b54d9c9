"""Fixtures of the hostile-broker suite.

``broker(topics)`` starts a :class:`support.hostile_broker.HostileBroker` in
the test process (stopped when the test ends). ``run_scenario(func, params)``
runs the client side, ``func(params)`` of the test module, in a child
interpreter (``_child.py``) and returns its figures: wall time, peak RSS
before and after, kwire log records, what the scenario returned. A child
that crashes, raises or outlives its timeout fails the test.

``KWIRE_HOSTILE_SRC=/path/to/src`` runs the children against another copy
of kwire (a worktree of an older commit, built in place), to measure the
figures before a fix; ``KWIRE_HOSTILE_REPORT=file.jsonl`` appends each run's
figures and the test's outcome to that file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import pytest

from support.hostile_broker import HostileBroker

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS_DIR = os.path.dirname(HERE)
MARK = "KWIRE-HOSTILE-RESULT "


def kwire_src() -> str:
    """The ``src`` directory whose kwire the children import."""
    env = os.environ.get("KWIRE_HOSTILE_SRC")
    if env:
        return os.path.abspath(env)
    import kwire

    return os.path.dirname(os.path.dirname(os.path.abspath(kwire.__file__)))


@dataclass
class ChildRun:
    """What one scenario run in a child interpreter gave."""

    returncode: Optional[int]
    timed_out: bool
    wall: float                       # seconds, from the parent (interpreter start included)
    report: Optional[Dict[str, Any]]
    stderr: str
    stdout: str
    figure: Dict[str, Any] = field(default_factory=dict)   # what the test adds for the before/after table

    @property
    def result(self) -> Any:
        return (self.report or {}).get("result")

    @property
    def seconds(self) -> float:
        """The scenario's own time (imports excluded)."""
        return (self.report or {}).get("seconds", self.wall)

    @property
    def rss_growth_mib(self) -> float:
        """How far the peak RSS rose during the scenario."""
        r = self.report or {}
        return r.get("peak_rss_mib", 0.0) - r.get("base_rss_mib", 0.0)

    @property
    def logs(self) -> int:
        return (self.report or {}).get("logs", 0)

    def describe(self) -> str:
        if self.timed_out:
            head = f"child still running after {self.wall:.1f} s (killed)"
        elif self.report is None:
            head = f"child died (exit status {self.returncode})"
        elif self.report.get("error"):
            head = "scenario raised"
        else:
            head = (f"{self.seconds:.2f} s, peak RSS +{self.rss_growth_mib:.0f} MiB "
                    f"(peak {self.report['peak_rss_mib']:.0f} MiB), {self.logs} kwire log records")
        parts = [head]
        if self.report:
            if self.report.get("error"):
                parts.append(self.report["error"])
            if self.report.get("first_logs"):
                parts.append("first logs: " + " | ".join(self.report["first_logs"][:5]))
        if self.stderr.strip() and (self.report is None or self.report.get("error") or self.timed_out):
            parts.append("stderr: " + self.stderr[-3000:])
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"<ChildRun {self.describe().splitlines()[0]}>"

    def check(self) -> "ChildRun":
        """Fail unless the scenario ran to its end."""
        if self.timed_out or self.report is None or self.report.get("error"):
            pytest.fail(self.describe(), pytrace=False)
        return self


def _run_child(func: Callable[[Dict[str, Any]], Any], params: Dict[str, Any], timeout: float,
               address_space_mib: int) -> ChildRun:
    src = kwire_src()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, TESTS_DIR])
    env["KWIRE_HOSTILE_RLIMIT_AS"] = str(address_space_mib << 20)
    env.pop("PYTHONSTARTUP", None)
    cmd = [sys.executable, os.path.join(HERE, "_child.py"), func.__module__, func.__name__, str(timeout)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=TESTS_DIR, text=True)
    timed_out = False
    try:
        out, err = proc.communicate(json.dumps(params), timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        out, err = proc.communicate()
    wall = time.monotonic() - t0
    report = None
    for line in out.splitlines():
        if line.startswith(MARK):
            report = json.loads(line[len(MARK):])
    run = ChildRun(proc.returncode, timed_out, wall, report, err, out)
    if report is not None:
        assert os.path.abspath(report["kwire_file"]).startswith(src + os.sep), \
            f"the child imported {report['kwire_file']}, not the kwire of {src}"
    return run


@pytest.fixture
def broker():
    """``broker(topics, **options)``: a started HostileBroker, stopped after the test."""
    started: List[HostileBroker] = []

    def make(topics: Optional[Dict[str, int]] = None, **kw: Any) -> HostileBroker:
        b = HostileBroker(topics, **kw).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def run_scenario(request):
    """``run_scenario(func, params, timeout=..., address_space_mib=...)``:
    ``func(params)`` in a child interpreter (see :class:`ChildRun`) whose
    address space is capped (4 GiB by default), so a runaway allocation
    fails the scenario instead of exhausting the machine."""
    runs: List[ChildRun] = []

    def run(func: Callable[[Dict[str, Any]], Any], params: Optional[Dict[str, Any]] = None, *,
            timeout: float = 30.0, address_space_mib: int = 4096) -> ChildRun:
        r = _run_child(func, params or {}, timeout, address_space_mib)
        runs.append(r)
        return r

    yield run
    path = os.environ.get("KWIRE_HOSTILE_REPORT")
    if path:
        rep = getattr(request.node, "rep_call", None)
        with open(path, "a") as f:
            for r in runs:
                f.write(json.dumps({
                    "test": request.node.nodeid,
                    "outcome": rep.outcome if rep is not None else "error",
                    "src": kwire_src(),
                    "timed_out": r.timed_out,
                    "returncode": r.returncode,
                    "died": r.report is None and not r.timed_out,
                    "wall": round(r.wall, 2),
                    "seconds": round(r.seconds, 2),
                    "rss_growth_mib": round(r.rss_growth_mib, 1),
                    "logs": r.logs,
                    "logs_with_traceback": (r.report or {}).get("logs_with_traceback"),
                    "error": ((r.report or {}).get("error") or "").strip().splitlines()[-1:] or None,
                    "figure": r.figure,
                }, default=repr) + "\n")
