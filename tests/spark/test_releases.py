"""kwire on the Spark releases ``kwire[spark]`` supports besides the
suite's own (4.2): for each, ``tests/spark_compat`` runs in that release's
virtualenv (``support.spark_releases``: the release's PySpark, kwire from
the wheel of this tree), as a subprocess started outside the repository
(the source tree is never on its path: its ``test_installed`` proves kwire
comes from the venv's site-packages), against this session's Apache Kafka
(Tansu is tested with the suite's own release, by ``tests/spark``), with
Spark's own Kafka connector of that release where Maven Central has it
(3.5, 4.0, 4.1; 4.3 has none there, so 4.3 runs kwire's own behaviour
tests and the comparison with the connector is made on 4.2, by
``tests/spark``).

The first run makes each venv (PySpark's sdist, ~430 MB, built into a
wheel: 1.5 to 4 minutes each, mostly download) and builds kwire's wheel;
later runs reuse them. The venvs of the releases selected are made one
after another on a background thread from the module's start, so a cold
run makes the next while a subset runs. Deselect with
``-m "not spark_releases"``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Dict

import pytest

from support.dist import ROOT, built_dists
from support.spark_releases import (INSTALL_TIMEOUT, NO_CONNECTOR, RELEASES, install_kwire, release_connect_jars,
                                    release_jars, release_venv)

pytestmark = pytest.mark.spark_releases

COMPAT = ROOT / "tests" / "spark_compat"
RUN_TIMEOUT = 900.0      # seconds for one release's subset (about a minute when warm)
TAIL = 8000              # characters of the subset's output quoted in a failure


def _progress(line: str):
    return lambda msg: sys.stderr.write(f"[spark {line}] {msg}\n")


@pytest.fixture(scope="module")
def venvs(request) -> Dict[str, "Future[Path]"]:
    """The venv (its Python, without kwire) of each release this session
    selected, made in order on one background thread."""
    lines = [item.callspec.params["line"] for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")]
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-venvs")
    futures = {line: pool.submit(release_venv, RELEASES[line], _progress(line)) for line in dict.fromkeys(lines)}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def _environment(line: str, python: Path, brokers, jars, connect_jars) -> dict:
    release = RELEASES[line]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON", "SPARK_", "PYSPARK_"))}
    env.update(KWIRE_COMPAT_BROKERS=json.dumps(brokers), KWIRE_COMPAT_SOURCE_TREE=str(ROOT),
               KWIRE_COMPAT_RELEASE=json.dumps({"line": line, "pyspark": release.pyspark, "jars": jars,
                                                "connect_jars": connect_jars,
                                                "no_connector": None if jars else NO_CONNECTOR}),
               PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


@pytest.mark.parametrize("line", ["3.5", "4.0", "4.1", "4.3"])
def test_compat_subset(line, venvs, kafka, tmp_path):
    progress = _progress(line)
    wheel = built_dists(progress).wheel
    python = venvs[line].result(timeout=4 * INSTALL_TIMEOUT)
    install_kwire(python, wheel, progress)
    jars = release_jars(RELEASES[line], python, progress)
    connect_jars = release_connect_jars(RELEASES[line], python, progress)
    brokers = [{"name": "kafka", "bootstrap": kafka.bootstrap("plaintext")}]      # Tansu: tests/spark, on 4.2
    cmd = [str(python), "-m", "pytest", "-c", str(COMPAT / "pytest.ini"), "--rootdir", str(COMPAT), str(COMPAT),
           "-q", "--durations=5", "--basetemp", str(tmp_path / "basetemp")]
    if line != "3.5":       # kwire.spark.jobs's tests (test_jobs*) run on 3.5, the release they are for
        cmd.append(f"--ignore-glob={COMPAT}/test_jobs*")
    progress(f"running the compatibility subset: {' '.join(cmd)}")
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=tmp_path, env=_environment(line, python, brokers, jars, connect_jars),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    out = done.stdout + done.stderr
    progress(f"the subset ran in {time.monotonic() - t0:.0f} s: {out.strip().splitlines()[-1] if out.strip() else ''}")
    for slow in re.findall(r"^\d+\.\d+s (?:setup|call|teardown) .*$", out, re.M):     # its --durations=5
        progress(f"  {slow}")
    assert done.returncode == 0, f"the Spark {line} subset failed (exit {done.returncode}):\n{out[-TAIL:]}"
    skipped = "".join(line_ for line_ in out.splitlines() if "SKIPPED" in line_)
    assert " passed" in out and "test_installed" not in skipped, out[-TAIL:]
    if RELEASES[line].connect:       # Spark Connect is part of this release's subset: it must have run
        assert "test_jobs_connect" not in skipped, out[-TAIL:]
    if not jars:        # 4.3: say plainly that the connector comparison is made on 4.2
        assert NO_CONNECTOR in out, out[-TAIL:]
        sys.stderr.write(f"[spark {line}] Spark's connector: {NO_CONNECTOR}\n")
