"""One virtualenv per PySpark release kwire supports (``kwire[spark]``:
3.5 to 4.3), for the compatibility subset (``tests/spark_compat``) that
``tests/spark/test_releases.py`` runs in each of them.

:func:`release_python` returns the Python of the release's virtualenv,
``~/.cache/kwire/pyspark-<version>-py<major.minor>`` (or under
``$KWIRE_SPARK_RELEASES_HOME``), made once with the interpreter the suite
runs on (the base interpreter of ``sys.executable``'s venv): ``pyspark``
of that release, a pyarrow, pandas and numpy that release accepts (pinned
in :data:`RELEASES`), pytest, and kwire's runtime dependencies (from
``pyproject.toml``). A lock file serialises concurrent runs; the marker,
written last, names everything installed, so a half-made or outdated venv
is made anew.

kwire itself comes from the wheel :func:`support.dist.built_dists` builds
from the tree (``pip install --no-deps --force-reinstall``), never from
the source tree: ``import kwire`` in the venv finds its site-packages. A
changed tree reinstalls only kwire (a stamp in the venv names the wheel).

Spark's own Kafka connector of each release (the peer of the equivalence
tests) is assembled by :func:`support.spark_connector.connector_jars`
(:func:`release_jars`). Maven Central as this project reaches it lacks
``spark-token-provider-kafka-0-10`` 4.0.4 and 4.1.3 (the connector itself is
there): those connectors take the token provider of 4.0.0 and 4.1.1, a patch
release of the same line (:attr:`Release.token_provider`).
Maven Central serves no ``spark-sql-kafka-0-10`` for 4.3 (nor 4.2.1): 4.3's
subset runs kwire's own behaviour tests, and the comparison with the
connector is made on 4.2 (the main suite's ``tests/spark``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from support.dist import ROOT, built_dists
from support.maven import Progress, say

INSTALL_TIMEOUT = 1800.0        # seconds: a cold pyspark sdist (~430 MB) downloaded and built into a wheel
LOG_TAIL = 6000


@dataclass(frozen=True)
class Release:
    """A Spark release line as kwire tests it."""

    line: str                     # "4.0"
    pyspark: str                  # the PyPI version installed
    scala: str                    # the Scala suffix of its Maven artifacts
    connector: Optional[str]      # the spark-sql-kafka-0-10 version Maven Central serves; None: none
    pins: Tuple[str, ...]         # pyarrow, pandas, numpy that this release accepts
    token_provider: Optional[str] = None   # the connector's token provider where Maven Central lacks its own
    connect: bool = False         # tests Spark Connect: its client's packages, and (3.5) the server's jar

    @property
    def requirements(self) -> List[str]:
        client = CONNECT_CLIENT if self.connect else ()
        return [f"pyspark=={self.pyspark}", *self.pins, *client, "pytest>=8", *runtime_dependencies()]


#: pyspark[connect]'s client packages beyond pandas and pyarrow (3.5's minimums).
CONNECT_CLIENT = ("grpcio>=1.56", "grpcio-status>=1.56", "googleapis-common-protos>=1.56.4")


#: The releases and the pins that work with each (checked on Python 3.11).
RELEASES = {
    "3.5": Release("3.5", "3.5.7", "2.12", "3.5.7", ("pyarrow==17.0.0", "pandas==2.2.3", "numpy==1.26.4"),
                   connect=True),
    "4.0": Release("4.0", "4.0.4", "2.13", "4.0.4", ("pyarrow==26.0.1", "pandas==2.3.3", "numpy==2.4.6"), "4.0.0"),
    "4.1": Release("4.1", "4.1.3", "2.13", "4.1.3", ("pyarrow==26.0.1", "pandas==2.3.3", "numpy==2.4.6"), "4.1.1"),
    "4.2": Release("4.2", "4.2.0", "2.13", "4.2.0", ("pyarrow==26.0.1", "pandas==2.3.3", "numpy==2.4.6")),
    "4.3": Release("4.3", "4.3.0", "2.13", None, ("pyarrow==26.0.1", "pandas==2.3.3", "numpy==2.4.6")),
}

NO_CONNECTOR = ("Maven Central serves no spark-sql-kafka-0-10 for this release: kwire's own behaviour is tested "
                "here, the comparison with Spark's connector is made on 4.2")


class ReleaseUnavailable(RuntimeError):
    """The release's virtualenv could not be made; the message ends with pip's output."""


def runtime_dependencies() -> List[str]:
    """kwire's ``dependencies`` and its ``spark`` extra but pyspark, from pyproject.toml."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = [r for r in project["optional-dependencies"]["spark"] if not r.replace(" ", "").startswith("pyspark")]
    return [*project["dependencies"], *extra]


def base_python() -> str:
    """The interpreter the suite's venv was made from (the venv's own if it is not one)."""
    base = getattr(sys, "_base_executable", None)
    if base and Path(base).is_file() and sys.prefix != sys.base_prefix:
        return base
    return sys.executable


def releases_home() -> Path:
    env = os.environ.get("KWIRE_SPARK_RELEASES_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kwire"


def venv_dir(release: Release) -> Path:
    return releases_home() / f"pyspark-{release.pyspark}-py{sys.version_info[0]}.{sys.version_info[1]}"


def _stamp(release: Release, python: str) -> str:
    return json.dumps({"python": python, "requirements": release.requirements})


def _run(cmd: List[str], what: str) -> None:
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    if done.returncode != 0:
        raise ReleaseUnavailable(f"{what} failed (exit {done.returncode}); command {cmd}:\n"
                                 f"{(done.stdout + done.stderr)[-LOG_TAIL:]}")


def venv_python(home: Path) -> Path:
    return home / "venv" / "bin" / "python"


def _make_venv(release: Release, home: Path, python: str, progress: Progress) -> None:
    venv = home / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    say(progress, f"making the PySpark {release.pyspark} venv in {venv} (once): {' '.join(release.requirements)}")
    t0 = time.monotonic()
    _run([python, "-m", "venv", str(venv)], "python -m venv")
    _run([str(venv_python(home)), "-m", "pip", "install", "-q", *release.requirements],
         f"installing PySpark {release.pyspark}'s venv")
    say(progress, f"PySpark {release.pyspark} venv made in {time.monotonic() - t0:.0f} s")


def release_venv(release: Release, progress: Progress = None) -> Path:
    """The Python of ``release``'s venv, without kwire (made unless finished; see the module doc)."""
    home, python = venv_dir(release), base_python()
    marker, stamp = home / "COMPLETE", _stamp(release, python)
    if marker.is_file() and marker.read_text() == stamp and venv_python(home).is_file():
        return venv_python(home)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(progress, f"waiting for another run making {home} (lock {home / '.lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes
        if not (marker.is_file() and marker.read_text() == stamp):
            marker.unlink(missing_ok=True)
            _make_venv(release, home, python, progress)
            (home / "COMPLETE.tmp").write_text(stamp)
            (home / "COMPLETE.tmp").rename(marker)    # last: only now is the venv finished
    return venv_python(home)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_kwire(python: Path, wheel: Path, progress: Progress = None) -> None:
    """kwire from ``wheel`` into the venv of ``python`` unless that wheel is there already."""
    stamp_file = python.parent.parent / "kwire-wheel"
    stamp = f"{wheel.name} {_sha256(wheel)}"
    if stamp_file.is_file() and stamp_file.read_text() == stamp:
        return
    with open(python.parent.parent / ".kwire-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp_file.is_file() and stamp_file.read_text() == stamp:
            return
        stamp_file.unlink(missing_ok=True)
        t0 = time.monotonic()
        _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
             f"installing {wheel.name}")
        stamp_file.write_text(stamp)
        say(progress, f"installed {wheel.name} into {python.parent.parent} in {time.monotonic() - t0:.1f} s")


def site_packages(python: Path) -> Path:
    return python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def release_jars(release: Release, python: Path, progress: Progress = None) -> List[str]:
    """Spark's Kafka connector of ``release`` for a session of its venv (``python``); none for 4.3."""
    from support.spark_connector import connector_jars

    if release.connector is None:
        return []
    return connector_jars(progress, release.connector, release.scala, site_packages(python) / "pyspark",
                          release.token_provider)


def release_connect_jars(release: Release, python: Path, progress: Progress = None) -> List[str]:
    """The Spark Connect server's jar for ``release`` where its PySpark lacks it
    (3.5); none where it ships one or the release does not test Connect."""
    from support.spark_connector import connect_server_jars

    shipped = any(j.startswith("spark-connect_") for j in os.listdir(site_packages(python) / "pyspark" / "jars"))
    if not release.connect or shipped:
        return []
    return connect_server_jars(release.pyspark, release.scala, progress)


def release_python(line: str, progress: Progress = None) -> Path:
    """The Python of the venv of Spark ``line`` ("4.0"), with kwire's wheel of this tree installed."""
    release = RELEASES[line]
    wheel = built_dists(progress).wheel
    python = release_venv(release, progress)
    install_kwire(python, wheel, progress)
    return python


if __name__ == "__main__":      # cd tests && python -m support.spark_releases 4.0 4.1 ...: make the venvs (timed)
    for name in sys.argv[1:] or list(RELEASES):
        start = time.monotonic()
        print(release_venv(RELEASES[name], lambda m: print(m, file=sys.stderr, flush=True)))
        print(f"{name}: {time.monotonic() - start:.0f} s", file=sys.stderr)
