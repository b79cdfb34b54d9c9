"""Where ``compare_spark --spark-version`` runs the benchmark of one Spark
release line: a Python with that PySpark and kwire, and the jars of Spark's
own Kafka connector of that release (``tests/support/spark_releases.py``).

The release installed here (the main venv's PySpark, 4.2) runs on this
interpreter, kwire as installed in this venv (the tree's ``src/``, built in
place). Every other release runs in its cached venv
(:func:`support.spark_releases.release_venv`, made once; another run making
it holds its lock), kwire installed there from the wheel of this tree
(:func:`support.dist.built_dists`, built once per tree). A release whose
connector Maven Central does not serve (4.3) gets no jars.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Callable, Dict, List, Optional

from support.dist import built_dists
from support.spark_releases import NO_CONNECTOR, RELEASES, install_kwire, release_jars, release_venv

__all__ = ["ReleaseEnv", "prepare", "RELEASES", "NO_CONNECTOR"]

Progress = Optional[Callable[[str], None]]
_wheels: Dict[str, Path] = {}


@dataclass(frozen=True)
class ReleaseEnv:
    """A release line's Python, its connector's jars, and where kwire comes from."""

    line: str            # "4.0"
    pyspark: str         # "4.0.4"
    python: Path
    jars: List[str]      # empty: no connector for this release
    where: str           # said in the output


def _wheel(progress: Progress) -> Path:
    """kwire's wheel of this tree (built once per run, and once per tree)."""
    if "wheel" not in _wheels:
        _wheels["wheel"] = built_dists(progress).wheel
    return _wheels["wheel"]


def prepare(line: str, progress: Progress = None) -> ReleaseEnv:
    """The Python and connector jars of Spark ``line`` (see the module doc)."""
    release = RELEASES[line]
    if version("pyspark") == release.pyspark:
        python = Path(sys.executable)
        where = f"this venv ({sys.prefix}), kwire as installed in it"
    else:
        python = release_venv(release, progress)
        install_kwire(python, _wheel(progress), progress)
        where = f"{python.parent.parent}, kwire from the wheel of this tree"
    return ReleaseEnv(line, release.pyspark, python, release_jars(release, python, progress), where)
