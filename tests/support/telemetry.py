"""KIP-714's broker side for kwire's client telemetry tests: Apache Kafka
with ``TelemetrySink`` (``telemetry_sink/TelemetrySink.java``, compiled
here against Kafka's jars and OpenTelemetry's protobuf classes, which are
assembled from Maven Central once) as a metrics reporter, which writes
every client's push, decoded, to a JSON-lines file; and client metrics
subscriptions made with kwire's Admin (IncrementalAlterConfigs on a
``client_metrics`` resource)."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from kwire.admin import Admin, AlterConfigOp, ConfigResource
from support.kafka import KafkaBroker, KafkaUnavailable, _require, ensure_kafka, start_kafka
from support.maven import assemble

HERE = Path(__file__).parent
POM = HERE / "telemetry_sink" / "pom.xml"
SOURCE = HERE / "telemetry_sink" / "TelemetrySink.java"
PROTO_VERSION = "1.11.0-alpha"       # opentelemetry-proto (the pom's otel.proto.version)


def ensure_proto() -> Path:
    home = Path.home() / ".cache" / "kwire" / f"otel-proto-{PROTO_VERSION}"
    return assemble(POM, {"otel.proto.version": PROTO_VERSION}, home, f"opentelemetry-proto-{PROTO_VERSION}.jar",
                    "OpenTelemetry's protobuf classes", KafkaUnavailable)


@functools.lru_cache(maxsize=None)
def compile_sink() -> List[str]:
    """The broker's extra class path: the compiled sink and OpenTelemetry's protobuf jars."""
    libs, proto = ensure_kafka(), ensure_proto()
    out = tempfile.mkdtemp(prefix="kwire-telemetry-sink-")
    atexit.register(shutil.rmtree, out, True)
    done = subprocess.run([_require("javac")["javac"], "-nowarn", "-encoding", "UTF-8", "-cp",
                           f"{libs}/*:{proto}/*", "-d", out, str(SOURCE)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise KafkaUnavailable(f"javac failed on {SOURCE}: {done.stdout}{done.stderr}")
    return [out, f"{proto}/*"]


class TelemetryBroker:
    """A Kafka node whose TelemetrySink writes the pushes it receives to :attr:`pushes_file`."""

    def __init__(self, broker: KafkaBroker, pushes_file: Path) -> None:
        self.broker = broker
        self.pushes_file = pushes_file

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap("plaintext")

    def pushes(self) -> List[Dict[str, Any]]:
        if not self.pushes_file.exists():
            return []
        return [json.loads(line) for line in self.pushes_file.read_text().splitlines() if line.strip()]

    def wait_for(self, check: Callable[[List[Dict[str, Any]]], Any], timeout: float = 30.0) -> Any:
        """Poll the pushes until ``check(pushes)`` is truthy (returned), or fail with what came."""
        deadline = time.monotonic() + timeout
        while True:
            got = check(self.pushes())
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"no push satisfied the check within {timeout:g} s; pushes: "
                                     f"{json.dumps(self.pushes())[-3000:]}")
            time.sleep(0.2)

    def subscribe(self, name: str, metrics: str, interval_ms: int = 1000, match: Optional[str] = None) -> None:
        """A client metrics subscription (KIP-714): ``metrics`` prefixes (comma-separated; ``*`` all)."""
        ops = [AlterConfigOp("metrics", metrics), AlterConfigOp("interval.ms", str(interval_ms))]
        if match is not None:
            ops.append(AlterConfigOp("match", match))
        with Admin(bootstrap_servers=self.bootstrap) as a:
            a.incremental_alter_configs({ConfigResource("client_metrics", name): ops})

    def unsubscribe(self, name: str) -> None:
        with Admin(bootstrap_servers=self.bootstrap) as a:
            a.incremental_alter_configs({ConfigResource("client_metrics", name): [
                AlterConfigOp("metrics", op_type="delete"), AlterConfigOp("interval.ms", op_type="delete")]})

    def stop(self) -> None:
        self.broker.stop()


def start_telemetry_broker(workdir: Path) -> TelemetryBroker:
    pushes = workdir / "pushes.jsonl"
    broker = start_kafka(overrides={"metric.reporters": "TelemetrySink", "kwire.telemetry.file": str(pushes)},
                         classpath=compile_sink())
    return TelemetryBroker(broker, pushes)
