"""``kwire.spark.read`` and ``kwire.spark.write`` through Spark Connect
(``SparkSession.builder.remote(...)``), in a release's virtualenv: a
Spark Connect server of the release (``spark-submit`` of its PySpark;
``local[2]``, its Python workers this interpreter) and a client in a
subprocess (a Connect client cannot share a process with the run's classic
session). The client reads a topic with ``read`` and with
``format("kafka")`` (or ``format("kwire")`` where the release has no
connector), writes it with ``write``, reads that back, and writes a
stream's micro-batches with ``foreachBatch`` + ``write`` (run by the
server's own Python process for Connect's ``foreachBatch``); on Apache
Kafka only (test_jobs.py covers both brokers).

Needs, or skips naming what is missing: the Connect client's modules
(``pyspark[connect]``: grpcio, grpcio-status, googleapis-common-protos,
pandas) and, for 3.5, whose PySpark does not ship the server, the
``org.apache.spark:spark-connect_2.12`` jar of the release: the release's
``connect_jars`` (``KWIRE_COMPAT_RELEASE``) or ``KWIRE_COMPAT_CONNECT_JARS``
(paths, comma-separated). Spark Connect 3.5 binds every interface (its
``spark.connect.grpc.binding.address`` comes in 4.0); the test connects on
loopback only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

HERE = Path(__file__).resolve().parent
#: pyspark[connect]'s client modules -> their distributions.
CLIENT = {"grpc": "grpcio", "grpc_status": "grpcio-status", "google.rpc.status_pb2": "googleapis-common-protos",
          "pandas": "pandas"}
START_TIMEOUT_S = 120.0


def _missing_client() -> List[str]:
    missing = []
    for module, dist in CLIENT.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            missing.append(dist)
    return missing


def _pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _server_jars(release: Dict[str, Any]) -> List[str]:
    """The connector's jars, and the Connect server's where PySpark lacks it (3.5)."""
    if any(j.startswith("spark-connect_") for j in os.listdir(_pyspark_home() / "jars")):
        return list(release["jars"])
    given = release.get("connect_jars") or [p for p in os.environ.get("KWIRE_COMPAT_CONNECT_JARS", "").split(",") if p]
    if not given:
        pytest.skip(f"PySpark {release['pyspark']} ships no Spark Connect server: pass the "
                    "org.apache.spark:spark-connect_2.12 jar of the release (connect_jars or KWIRE_COMPAT_CONNECT_JARS)")
    return [*given, *release["jars"]]


def _env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE",
                        "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS", "MASTER")}
    env.update(SPARK_HOME=str(_pyspark_home()), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, **extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its Python workers too), SIGKILL after 15 s."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class Server:
    url: str
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.fixture(scope="module")
def server(release) -> Iterator[Server]:
    missing = _missing_client()
    if missing:
        pytest.skip(f"no Spark Connect client in this venv: pyspark[connect]'s {', '.join(missing)} missing")
    jars, port = _server_jars(release), _free_port()
    logdir = tempfile.mkdtemp(prefix="kwire-jobs-connect-")
    log = Path(logdir) / "server.log"
    argv = [str(_pyspark_home() / "bin" / "spark-submit"), "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[2]",
            "--driver-memory", "1g", "--driver-java-options", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            *(["--jars", ",".join(jars)] if jars else []),
            "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC",
            "--conf", "spark.sql.shuffle.partitions=2", "--conf", f"spark.local.dir={logdir}", "spark-internal"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=_env(),
                                start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            assert proc.poll() is None, f"the Connect server exited ({proc.returncode}):\n{log.read_text()[-6000:]}"
            assert time.monotonic() < deadline, f"no Connect server in {START_TIMEOUT_S} s:\n{log.read_text()[-6000:]}"
            time.sleep(0.2)
        yield Server(f"sc://127.0.0.1:{port}", log)
    finally:
        _stop(proc)
        shutil.rmtree(logdir, ignore_errors=True)


def _client(server: Server, **job: Any) -> Dict[str, Any]:
    """:func:`client_job` run in a subprocess with a remote session."""
    env = _env(PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, __file__, json.dumps({"url": server.url, **job})], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (f"the Connect client failed:\n{done.stderr[-6000:]}\n"
                                  f"the server's log ends:\n{server.tail()}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_read_write_and_foreach_batch_through_connect(server, release, kafka_bootstrap, tmp_path):
    """On Apache Kafka only: what differs between the brokers is tested by test_jobs.py."""
    from compat_util import new_topic, produce

    topic, copy, stream = (new_topic(kafka_bootstrap, n, prefix="jobs-connect") for n in (3, 3, 2))
    produce(kafka_bootstrap, topic, 150, 3)
    got = _client(server, bootstrap=kafka_bootstrap, topic=topic, copy=copy, stream=stream,
                  connector=bool(release["jars"]), files=str(tmp_path / "in"))
    assert got == {"session": "pyspark.sql.connect.session", "rows": 150, "same_as": "kafka" if release["jars"]
                   else "kwire", "same": True, "written": 150, "back": True, "batches": [0, 1, 2], "streamed": True}


# ------------------------------------------------------------ the client side
def client_job(url: str, bootstrap: str, topic: str, copy: str, stream: str, connector: bool,
               files: str) -> Dict[str, Any]:
    from compat_util import rows
    from pyspark.sql import SparkSession

    import kwire.spark

    spark = SparkSession.builder.remote(url).getOrCreate()
    kafka = {"kafka.bootstrap.servers": bootstrap}
    df = kwire.spark.read(spark, **kafka, subscribe=topic, includeHeaders="true")
    if connector:
        ref = spark.read.format("kafka").options(**kafka, subscribe=topic, includeHeaders="true").load()
    else:
        kwire.spark.register(spark)
        ref = spark.read.format("kwire").options(**kafka, subscribe=topic, includeHeaders="true").load()
    mine = rows(df)
    out: Dict[str, Any] = {"session": type(spark).__module__, "rows": len(mine), "same_as": "kafka" if connector
                           else "kwire", "same": df.schema == ref.schema and mine == rows(ref)}
    out["written"] = kwire.spark.write(df.select("key", "value", "headers", "partition"), **kafka, topic=copy)
    back = rows(kwire.spark.read(spark, **kafka, subscribe=copy, includeHeaders="true"))
    out["back"] = [r[1:2] + r[3:5] + r[7:] for r in back] == [r[1:2] + r[3:5] + r[7:] for r in mine]
    out["batches"] = _foreach_batch(spark, kafka, stream, Path(files))
    streamed = kwire.spark.read(spark, **kafka, subscribe=stream).collect()
    out["streamed"] = sorted(bytes(r.value) for r in streamed) == sorted(b"v%d" % i for i in range(30))
    spark.stop()
    return out


def _foreach_batch(spark, kafka: Dict[str, str], topic: str, files: Path) -> List[int]:
    """Three files, one a micro-batch, each written by foreachBatch + write; the batches' ids."""
    files.mkdir()
    for f in range(3):
        (files / f"{f}.json").write_text("".join(json.dumps({"value": f"v{f * 10 + i}"}) + "\n" for i in range(10)))
    sink = {**kafka, "topic": topic}

    def each(batch, batch_id):
        import kwire.spark

        kwire.spark.write(batch, **sink)

    from compat_util import start_foreach_batch

    q = start_foreach_batch(spark.readStream.schema("value string").option("maxFilesPerTrigger", 1).json(str(files))
                            .writeStream.foreachBatch(each).option("checkpointLocation", str(files.parent / "ckpt"))
                            .trigger(availableNow=True))
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return sorted({int(p["batchId"]) for p in q.recentProgress})


if __name__ == "__main__":
    print(json.dumps(client_job(**json.loads(sys.argv[1]))))
