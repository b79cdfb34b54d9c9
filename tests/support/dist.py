"""kwire's sdist and wheel, as users get them, built once per source tree.

:func:`built_dists` copies the files git knows of (tracked, and untracked
ones it does not ignore: what a clean clone of the work tree would hold;
no in-place build output) to a scratch directory, runs ``python -m
build`` there (an sdist, then a wheel built FROM that sdist, so a file the
sdist lacks fails the build), and keeps both in
``~/.cache/kwire/dist/<hash>`` (or ``$KWIRE_DIST_CACHE/<hash>``), where the
hash covers every copied file's path and bytes and the Python that built
them: a changed tree builds anew, an unchanged one (a second test session,
another xdist worker) reuses the finished build. A lock file serialises
concurrent builds; a marker written last tells a finished build from a
half-written one.

Used by the installed-package suite (``tests/installed``) and by the Spark
releases' virtualenvs (``support.spark_releases``), which install the wheel,
never the source tree.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1200.0      # seconds: cythonizing and compiling the core at -O3 on two cores

Progress = Optional[Callable[[str], None]]


class BuildFailed(RuntimeError):
    """``python -m build`` failed; the message ends with its output's tail."""


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    #: the source files they were built from (paths relative to the tree's root)
    files: Tuple[str, ...]


def source_files(root: Path = ROOT) -> List[str]:
    """The paths (relative to ``root``) a clean clone of the work tree would
    hold: git's tracked files and its untracked, unignored ones that exist."""
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout
    return sorted({p for p in out.decode().split("\0") if p and (root / p).is_file()})


def tree_hash(root: Path = ROOT, files: Optional[List[str]] = None) -> str:
    h = hashlib.sha256(f"{sys.version_info[:2]}|{sys.platform}".encode())
    for rel in files if files is not None else source_files(root):
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256((root / rel).read_bytes()).digest())
    return h.hexdigest()[:16]


def copy_tree(dest: Path, root: Path = ROOT, files: Optional[List[str]] = None) -> Path:
    """Copy the source files of ``root`` to ``dest`` (made anew)."""
    for rel in files if files is not None else source_files(root):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def _cache_home() -> Path:
    env = os.environ.get("KWIRE_DIST_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kwire" / "dist"


def _finished(home: Path) -> Optional[Dists]:
    marker = home / "COMPLETE"
    if not marker.is_file():
        return None
    sdist, wheel, *files = marker.read_text().splitlines()
    dists = Dists(home / sdist, home / wheel, tuple(files))
    return dists if dists.sdist.is_file() and dists.wheel.is_file() else None


def built_dists(progress: Progress = None, python: str = sys.executable) -> Dists:
    """The sdist and wheel of the current source tree (see the module doc)."""
    files = source_files()
    home = _cache_home() / tree_hash(files=files)
    done = _finished(home)
    if done is not None:
        return done
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes
        done = _finished(home)
        if done is not None:
            return done
        return _build(home, files, progress, python)


def _build(home: Path, files: List[str], progress: Progress, python: str) -> Dists:
    for old in home.glob("*"):
        if old.name != ".lock":
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    with tempfile.TemporaryDirectory(prefix="kwire-dist-") as scratch:
        src = copy_tree(Path(scratch) / "src-tree", files=files)
        if progress:
            progress(f"building kwire's sdist and wheel from a copy of the tree ({len(files)} files) into {home}")
        t0 = time.monotonic()
        done = subprocess.run([python, "-m", "build", "--outdir", str(home), str(src)], capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise BuildFailed(f"python -m build failed (exit {done.returncode}):\n"
                              f"{(done.stdout + done.stderr)[-6000:]}")
    sdists, wheels = sorted(home.glob("*.tar.gz")), sorted(home.glob("*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        raise BuildFailed(f"expected one sdist and one wheel in {home}, got {sdists + wheels}")
    (home / "COMPLETE").write_text("".join(f"{line}\n" for line in (sdists[0].name, wheels[0].name, *files)))
    if progress:
        progress(f"built {sdists[0].name} and {wheels[0].name} in {time.monotonic() - t0:.0f} s")
    return Dists(sdists[0], wheels[0], tuple(files))


# ------------------------------------------------------------------ contents
#: Files of src/kwire that ship in the wheel as they are.
SHIPPED_AS_IS = (".py", ".pyi")
SHIPPED_NAMES = ("py.typed",)
#: Cython sources: the sdist ships them, the wheel ships their extension instead.
CYTHON = (".pyx",)
#: Their declarations and the C headers they include: in the sdist, compiled into the extensions.
CYTHON_DECLS = (".pxd", ".h")
#: Never in either: generated or compiled.
GENERATED = (".c", ".so", ".pyd", ".html")
#: The files at the sdist's top that a build needs.
SDIST_TOP = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")


def package_files(files: Sequence[str]) -> List[str]:
    """The source files under ``src/kwire`` among ``files`` (paths relative to ``src``)."""
    return [f[len("src/"):] for f in files if f.startswith("src/kwire/")]


def wheel_problems(wheel: Path, files: Sequence[str]) -> List[str]:
    """What the wheel lacks or should not hold, derived from the files of
    ``src/kwire`` (never from a list): each ``.py``, ``.pyi`` and
    ``py.typed`` as it is, one compiled extension per ``.pyx``, no Cython
    source, generated C or stray file. ``files``: the tree's source files
    (:func:`source_files`, or :attr:`Dists.files`)."""
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if not n.split("/", 1)[0].endswith((".dist-info", ".data"))]
    problems, expected = [], set()
    for rel in package_files(files):
        stem, ext = os.path.splitext(rel)
        if ext in SHIPPED_AS_IS or os.path.basename(rel) in SHIPPED_NAMES:
            expected.add(rel)
            if rel not in names:
                problems.append(f"the wheel lacks {rel}")
        elif ext in CYTHON:
            found = [n for n in names if n.startswith(stem + ".") and n.endswith((".so", ".pyd"))]
            expected.update(found)
            if len(found) != 1:
                problems.append(f"the wheel should hold one compiled extension of {rel}, holds {found}")
        elif ext not in CYTHON_DECLS:
            problems.append(f"{rel}: a file of a kind tests/support/dist.py does not know (does it ship?)")
    problems += [f"the wheel holds {n}, which is not built from src/kwire" for n in names
                 if n not in expected and not n.endswith("/")]
    return problems


def sdist_problems(sdist: Path, files: Sequence[str]) -> List[str]:
    """What the sdist lacks to build the wheel (every file of ``src/``, the
    build files, among the tree's ``files``) or should not hold (generated
    or compiled files)."""
    import tarfile

    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    need = [f for f in files if f.startswith("src/") or f in SDIST_TOP]
    problems = [f"the sdist lacks {f}" for f in need if f not in names]
    problems += [f"the sdist ships a generated or compiled file: {n}" for n in sorted(names)
                 if n.endswith(GENERATED)]
    return problems


if __name__ == "__main__":      # scripts/check_wheel.sh: python tests/support/dist.py check SDIST WHEEL [ROOT]
    if len(sys.argv) not in (4, 5) or sys.argv[1] != "check":
        sys.exit("usage: dist.py check SDIST WHEEL [SOURCE_ROOT]")
    tree = source_files(Path(sys.argv[4]) if len(sys.argv) == 5 else ROOT)
    found = sdist_problems(Path(sys.argv[2]), tree) + wheel_problems(Path(sys.argv[3]), tree)
    for p in found:
        print(f"[check_wheel] FAIL: {p}", file=sys.stderr)
    sys.exit(1 if found else 0)
