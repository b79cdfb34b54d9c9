"""Assembling a set of jars from Maven Central into a cache outside the
repository, once: the one place the test support runs Maven.

:func:`assemble` runs ``mvn -q dependency:copy-dependencies`` on a checked-in
pom (packaging ``pom``: nothing is built) into a scratch directory renamed
into place; a marker naming the properties and the pom's hash is written
last, so a half-finished copy is never taken for a finished one, and a
changed pom is assembled anew. A lock file serialises concurrent runs.
Without ``mvn`` it raises the caller's error class, naming what is missing.
Used by :mod:`support.kafka` (the broker), :mod:`support.spark_connector`
(Spark's own Kafka connector) and :mod:`support.keycloak` (which also takes
:func:`cache_lock`, :func:`finished` and :func:`mark_finished` for its own
preparation step).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Type

ASSEMBLE_TIMEOUT = 900.0  # seconds for Maven's first copy
LOG_TAIL = 6000           # characters of Maven's output quoted in errors

Progress = Optional[Callable[[str], None]]


def say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def require(error: Type[Exception], what: str, *tools: str) -> Dict[str, str]:
    """The paths of ``tools`` on PATH; ``error`` naming those missing."""
    found = {t: shutil.which(t) for t in tools}
    missing = [t for t, p in found.items() if p is None]
    if missing:
        raise error(
            f"{what} needs {' and '.join(missing)} on PATH ({', '.join(missing)} not found): "
            f"install a JDK 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven)")
    return found   # type: ignore[return-value]


def stamp(pom: Path, props: Dict[str, str]) -> str:
    """What a finished copy's marker holds: the properties and the pom's hash."""
    return json.dumps({**props, "pom_sha256": hashlib.sha256(pom.read_bytes()).hexdigest()})


def finished(home: Path, done_stamp: str) -> bool:
    """Whether ``home`` holds a finished copy: its marker ``COMPLETE`` says ``done_stamp``."""
    marker = home / "COMPLETE"
    return marker.is_file() and marker.read_text() == done_stamp


@contextmanager
def cache_lock(home: Path, progress: Progress = None) -> Iterator[None]:
    """Holds ``home/.lock`` (waiting, and saying so, while another run holds it)."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(progress, f"waiting for another run's copy (lock {home / '.lock'})")
            fcntl.flock(lock, fcntl.LOCK_EX)      # released when the file closes
        yield


def mark_finished(home: Path, done_stamp: str) -> None:
    """Writes the marker, last: only now is the copy finished."""
    tmp = home / "COMPLETE.tmp"
    tmp.write_text(done_stamp)
    tmp.rename(home / "COMPLETE")


def assemble(pom: Path, props: Dict[str, str], home: Path, expect: str, what: str,
             error: Type[Exception], progress: Progress = None) -> Path:
    """``home/libs``, the runtime dependencies of ``pom`` (with ``-Dk=v`` for
    each of ``props``), copied there by Maven unless a finished copy is
    there already; ``expect`` is a file name that must be among them."""
    libs = home / "libs"
    done_stamp = stamp(pom, props)
    if finished(home, done_stamp) and libs.is_dir():
        return libs
    tools = require(error, what, "mvn")
    with cache_lock(home, progress):
        if finished(home, done_stamp) and libs.is_dir():
            return libs                            # another run finished it meanwhile
        (home / "COMPLETE").unlink(missing_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="libs.partial-", dir=home))
        cmd = [tools["mvn"], "-q", "-B", "-f", str(pom), *(f"-D{k}={v}" for k, v in props.items()),
               "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={scratch}"]
        say(progress, f"assembling {what} from Maven Central into {home} (once)")
        t0 = time.monotonic()
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=ASSEMBLE_TIMEOUT)
            if done.returncode != 0 or not (scratch / expect).is_file():
                raise error(f"Maven could not assemble {what} (exit {done.returncode}); "
                            f"command {cmd}:\n{(done.stdout + done.stderr)[-LOG_TAIL:]}")
            if libs.exists():
                shutil.rmtree(libs)
            scratch.rename(libs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        mark_finished(home, done_stamp)
        say(progress, f"assembled in {time.monotonic() - t0:.1f} s")
    return libs
