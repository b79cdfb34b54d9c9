"""What the release's virtualenv holds: kwire from its site-packages (the
wheel, never the source tree), the release's PySpark, and the features
``kwire.spark`` finds and logs at import."""

from __future__ import annotations

import os
import subprocess
import sys

#: What kwire.spark.compat must find on each release.
EXPECTED = {
    "3.5": (),
    "4.0": ("data_source",),
    "4.1": ("data_source", "filter_pushdown", "stream_arrow_writer"),
    "4.2": ("data_source", "filter_pushdown", "stream_arrow_writer", "admission_control"),
    "4.3": ("data_source", "filter_pushdown", "stream_arrow_writer", "admission_control"),
}


def test_kwire_comes_from_the_venvs_site_packages():
    import kwire
    import kwire._codec
    import kwire.spark

    tree = os.path.realpath(os.environ["KWIRE_COMPAT_SOURCE_TREE"])
    assert sys.prefix != sys.base_prefix, "not run in a virtualenv"
    for module in (kwire, kwire._codec, kwire.spark):
        path = os.path.realpath(module.__file__)
        assert "site-packages" in path and path.startswith(os.path.realpath(sys.prefix)), path
        assert not path.startswith(tree + os.sep), path
    assert not any(os.path.realpath(p or ".").startswith(os.path.join(tree, "src")) for p in sys.path), sys.path


def test_the_releases_pyspark_and_its_features(release):
    import pyspark

    import kwire.spark

    assert pyspark.__version__ == release["pyspark"]
    assert kwire.spark.FEATURES.version == release["pyspark"]
    assert kwire.spark.FEATURES.has() == EXPECTED[release["line"]]


def test_features_logged_at_import(release):
    import kwire.spark

    code = "import logging; logging.basicConfig(level=logging.INFO); import kwire.spark"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"INFO:kwire.spark:kwire.spark: {kwire.spark.FEATURES.describe()}" in done.stderr.splitlines()
    assert f"PySpark {release['pyspark']}: has " in done.stderr
