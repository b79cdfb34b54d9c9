"""Runs the hostile-input properties (corruption_props.py) in a child
interpreter: a crash there is a failed test, not a dead test run."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_hostile_properties_in_a_subprocess():
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.join(HERE, "corruption_props.py"), "-q",
         "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", HERE],
        capture_output=True, text=True, timeout=900, env=env, cwd=HERE,
    )
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode} (negative = killed by a signal)\n"
        f"{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    )
    assert "3 passed" in proc.stdout, proc.stdout[-2000:]
