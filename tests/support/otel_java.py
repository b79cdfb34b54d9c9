"""OpenTelemetry's instrumentation of Kafka's Java client, for the tracing
interop tests: its jars assembled from Maven Central once
(``otel_java/pom.xml``, into ``~/.cache/kwire/otel-java-<version>``), and
the ``TracingPeer`` tool (``java/TracingPeer.java``) run with them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

from support.java_peer import JavaPeerError, _command
from support.kafka import KafkaUnavailable
from support.maven import assemble

HERE = Path(__file__).parent
POM = HERE / "otel_java" / "pom.xml"
SOURCE = HERE / "java" / "TracingPeer.java"
VERSION = "2.31.1-alpha"          # opentelemetry-kafka-clients-2.6 (the pom's otel.instrumentation.version)
RUN_TIMEOUT = 120.0


def otel_java_home() -> Path:
    return Path.home() / ".cache" / "kwire" / f"otel-java-{VERSION}"


def ensure_otel_java() -> Path:
    """The jar directory of OpenTelemetry's Kafka instrumentation and SDK (assembled once)."""
    return assemble(POM, {"otel.instrumentation.version": VERSION}, otel_java_home(),
                    f"opentelemetry-kafka-clients-2.6-{VERSION}.jar",
                    "OpenTelemetry's Kafka instrumentation", KafkaUnavailable)


def java_traced(mode: str, config: Dict[str, str], topic: str, count: int,
                timeout: float = RUN_TIMEOUT) -> List[Dict[str, Any]]:
    """Run Java's instrumented producer (``produce``: ``count`` records to
    partition 0) or consumer (``consume``: read ``count`` records of
    partition 0); returns the spans it finished (name, kind, trace, span,
    parent, links, attributes)."""
    cmd = _command(source=SOURCE, extra=(str(ensure_otel_java()),))
    stdin = json.dumps({"mode": mode, "config": config, "topic": topic, "count": count}) + "\n"
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise JavaPeerError(f"TracingPeer ({mode}) did not finish within {timeout:g} s: "
                            f"{(e.stderr or b'')[-3000:]!r}") from None
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not events or events[-1]["event"] != "done":
        raise JavaPeerError(f"TracingPeer ({mode}) failed (exit {done.returncode}): {events[-2:]}; "
                            f"stderr tail:\n{done.stderr[-4000:]}")
    return [e for e in events if e["event"] == "span"]
