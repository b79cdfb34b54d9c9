"""kwire's compressed payloads against the Java libraries Kafka's Java client
uses for them (xerial snappy-java, lz4-java, zstd-jni, java.util.zip), taken
from the jars pyspark ships, run on the machine's JVM. Both directions."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from kwire import compression as comp

HERE = os.path.dirname(os.path.abspath(__file__))
CODECS = {"gzip": comp.GZIP, "snappy": comp.SNAPPY, "lz4": comp.LZ4, "zstd": comp.ZSTD}
PAYLOAD = b"".join(b'{"id": %d, "name": "record-%d", "pad": "%s"}\n' % (i, i, b"x" * (i % 50)) for i in range(20000))


def _jars():
    try:
        import pyspark
    except ImportError:
        return []
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    return [p for pat in ("snappy-java-*.jar", "lz4-java-*.jar", "zstd-jni-*.jar") for p in glob.glob(os.path.join(jars, pat))]


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    jars = _jars()
    if len(jars) != 3 or not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("needs a JDK and pyspark's snappy-java, lz4-java and zstd-jni jars")
    out = tmp_path_factory.mktemp("java")
    subprocess.run(["javac", "-cp", os.pathsep.join(jars), "-d", str(out), os.path.join(HERE, "java", "CodecCheck.java")],
                   check=True, capture_output=True)
    classpath = os.pathsep.join([str(out)] + jars)

    def run(mode: str, codec: str, data: bytes) -> bytes:
        proc = subprocess.run(["java", "-cp", classpath, "CodecCheck", mode, codec], input=data,
                              capture_output=True, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
        return proc.stdout

    return run


@pytest.mark.parametrize("codec", list(CODECS))
def test_java_reads_kwire_payloads(java, codec):
    assert java("decode", codec, comp.compress(CODECS[codec], PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", list(CODECS))
def test_kwire_reads_java_payloads(java, codec):
    assert comp.decompress(CODECS[codec], java("encode", codec, PAYLOAD)) == PAYLOAD
