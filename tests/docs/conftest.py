"""The documentation site, built once for tests/docs: Sphinx with warnings as
errors, as scripts/docs builds it, into a temporary directory.

The fixture is session-scoped, so test_docs.py and test_screenshot.py share
one build (about 20 s). Under pytest-xdist (scripts/test) each file is a unit
of its own and may land on another worker: the workers of one run then share
the build through a directory beside their own temporary ones, the first to
get the lock building it and the others waiting for it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _build(out: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS),
                           str(out), "-d", str(out / ".doctrees")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return out


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _build(tmp_path_factory.mktemp("site"))
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent      # pytest-N/: this run's, above each worker's popen-gwK/
    out, built = shared / "docs-site", shared / "docs-site.built"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)                # released when the file closes
        if not built.is_file():
            shutil.rmtree(out, ignore_errors=True)      # a failed build's remains
            _build(out)
            built.touch()
    return out
