"""The fuzz targets on their seed corpus and on every saved finding, without
atheris: proves in the normal test run that the targets and the corpus stay
valid, and that fixed findings stay fixed.

* Every seed in corpus/<target>/ must pass its target (a seed that kwire
  refuses is a valid input too: the target knows which errors are documented).
* Every reproducer in crashes/<target>/ must pass as well, except those
  listed in crashes/open.txt (findings not fixed yet), which must still fail:
  once one is fixed the test says so, and its line comes out of open.txt.
  Reproducers run in a child interpreter, so one that crashes it is a failed
  test, not a dead test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

from .targets import TARGETS

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
CRASHES = os.path.join(HERE, "crashes")


def _files(root: str) -> List[Tuple[str, str]]:
    out = []
    for target in sorted(TARGETS):
        d = os.path.join(root, target)
        if os.path.isdir(d):
            out += [(target, name) for name in sorted(os.listdir(d)) if not name.startswith(".")]
    return out


def _open_findings() -> Dict[str, str]:
    """``target/name`` -> diagnosis, from crashes/open.txt."""
    path = os.path.join(CRASHES, "open.txt")
    out: Dict[str, str] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for line in lines:
            line = line.strip()
            if line and not line.startswith("#"):
                key, _, why = line.partition(" ")
                out[key] = why.strip()
    return out


SEEDS = _files(CORPUS)


def test_every_target_has_seeds():
    assert {t for t, _ in SEEDS} == set(TARGETS)
    total = sum(os.path.getsize(os.path.join(CORPUS, t, n)) for t, n in SEEDS)
    assert total < 256 * 1024, f"the seed corpus has grown to {total} bytes: keep it small"


@pytest.mark.parametrize("target,name", SEEDS, ids=[f"{t}/{n}" for t, n in SEEDS])
def test_seed(target, name):
    with open(os.path.join(CORPUS, target, name), "rb") as f:
        TARGETS[target](f.read())


_CHILD = r"""
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
from targets import TARGETS
for target, path in json.loads(sys.argv[2]):
    print("BEGIN", path, flush=True)
    try:
        with open(path, "rb") as f:
            data = f.read()
        TARGETS[target](data)
        print("PASS", path, flush=True)
    except BaseException as e:
        print("FAIL", path, json.dumps(f"{type(e).__name__}: {e}"[:300]), flush=True)
"""


def test_saved_findings():
    files = _files(CRASHES)
    open_ = _open_findings()
    listed = {f"{t}/{n}" for t, n in files}
    assert set(open_) <= listed, f"crashes/open.txt names missing files: {sorted(set(open_) - listed)}"
    if not files:
        pytest.skip("no saved findings")
    every = todo = [(t, os.path.join(CRASHES, t, n)) for t, n in files]
    seen: Dict[str, str] = {}
    while todo:   # one child for all; after a crash, a new one for the rest
        proc = subprocess.run([sys.executable, "-c", _CHILD, HERE, json.dumps(todo)], capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, PYTHONFAULTHANDLER="1"))
        for line in proc.stdout.splitlines():
            verdict, _, rest = line.partition(" ")
            path, _, detail = rest.partition(" ")
            seen[path] = verdict if verdict != "FAIL" else f"FAIL {json.loads(detail)}"
            if verdict == "BEGIN" and proc.returncode != 0:
                seen[path] = f"CRASH (child exited with {proc.returncode}: {proc.stderr.strip()[-500:]})"
        left = [(t, p) for t, p in todo if p not in seen]
        if len(left) == len(todo):
            pytest.fail(f"the child interpreter ran nothing (exit {proc.returncode}): {proc.stderr[-2000:]}")
        todo = left
    problems = []
    for target, path in every:
        key = f"{target}/{os.path.basename(path)}"
        got = seen[path]
        if key in open_:
            if got == "PASS":
                problems.append(f"{key} passes now: the finding is fixed, take its line out of crashes/open.txt")
        elif got != "PASS":
            problems.append(f"{key}: {got}")
    assert not problems, "\n".join(problems)
