"""kwire as users get it: the sdist and the wheel built from a copy of the
tree (tests/support/dist.py), their contents derived from src/kwire, and the
wheel installed into a fresh virtualenv with each extra (none, ``arrow``,
``tls``, ``spark``, ``oauth``, ``aws``, ``kerberos``: gssapi builds against the
system's Kerberos; ``protobuf``; ``registry``; ``otel`` and ``prometheus``, kwire.metrics'
exporters), where the smoke suite (``smoke/``) runs with the source tree off the path against the session's Tansu broker (and, for ``registry``, the
session's Apicurio Registry)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from support.dist import built_dists, package_files, sdist_problems, wheel_problems

pytestmark = pytest.mark.installed

SMOKE = Path(__file__).with_name("smoke")
INSTALL_TIMEOUT = 900      # a cold pip cache downloads (and builds) PySpark
SMOKE_TIMEOUT = 600


def _progress(msg: str) -> None:
    sys.stderr.write(f"[installed] {msg}\n")


@pytest.fixture(scope="module")
def dists():
    return built_dists(progress=_progress)


def test_wheel_holds_every_module_stub_marker_and_extension(dists):
    assert wheel_problems(dists.wheel, dists.files) == []
    names = zipfile.ZipFile(dists.wheel).namelist()
    assert "kwire/aio/__init__.py" in names and "kwire/py.typed" in names


def test_sdist_holds_what_the_build_needs(dists):
    assert sdist_problems(dists.sdist, dists.files) == []


def test_a_module_missing_from_the_wheel_is_caught(dists, tmp_path):
    """The check is derived from the tree: drop any one file and it says so."""
    victims = [f for f in package_files(dists.files) if f.endswith((".py", ".pyi", ".pyx")) or f.endswith("py.typed")]
    assert "kwire/aio/producer.py" in victims
    for victim in ("kwire/aio/producer.py", "kwire/_codec.pyx", "kwire/py.typed"):
        stem = victim.rsplit(".", 1)[0]
        cut = tmp_path / f"cut-{len(stem)}.whl"
        with zipfile.ZipFile(dists.wheel) as src, zipfile.ZipFile(cut, "w") as dst:
            for item in src.infolist():
                if item.filename != victim and not (victim.endswith(".pyx") and item.filename.startswith(stem + ".")):
                    dst.writestr(item, src.read(item))
        assert any(victim in p for p in wheel_problems(cut, dists.files)), victim


def _venv(where: Path, wheel: Path, extra: str) -> Path:
    """A fresh virtualenv (no system site-packages) with ``wheel[extra]`` and pytest."""
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    python = where / "bin" / "python"
    spec = f"{wheel}[{extra}]" if extra else str(wheel)
    t0 = time.monotonic()
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", spec,
                           "pytest"], capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    assert done.returncode == 0, f"pip install {spec} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    _progress(f"kwire[{extra}] installed in a fresh virtualenv in {time.monotonic() - t0:.0f} s")
    return python


@pytest.mark.parametrize("extra", ["", "arrow", "tls", "spark", "oauth", "aws", "kerberos", "protobuf", "registry",
                                   "otel", "prometheus"])
def test_smoke_suite_in_a_fresh_virtualenv(dists, extra, tansu, tmp_path, request):
    python = _venv(tmp_path / "venv", dists.wheel, extra)
    suite = shutil.copytree(SMOKE, tmp_path / "smoke")      # outside the source tree: no conftest of ours above it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(KWIRE_SMOKE_BOOTSTRAP=tansu.bootstrap, KWIRE_SMOKE_EXTRA=extra, PYSPARK_PYTHON=str(python),
               PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}")
    if extra == "registry":                  # the session's Apicurio Registry, for the registry client
        env["KWIRE_SMOKE_REGISTRY"] = request.getfixturevalue("apicurio").url
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--rootdir", str(suite), str(suite)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=SMOKE_TIMEOUT)
    assert done.returncode == 0, f"smoke suite with kwire[{extra}]:\n{done.stdout[-8000:]}{done.stderr[-3000:]}"
    _progress(f"kwire[{extra}]: {done.stdout.strip().splitlines()[-1]}")
