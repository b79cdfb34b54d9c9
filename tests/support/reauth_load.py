"""A steady produce-and-consume run for re-authentication tests (KIP-368):
what a client does while its connections re-authenticate under it.

:func:`run` sends numbered records to one partition at a steady rate for a
while and reads them back with a consumer, both kwire's blocking clients
on one configuration, and returns a :class:`RunStats`: records sent,
acknowledged, lost (acknowledged, never read), repeated (read twice), the
acknowledgement latencies, the re-authentications the connections did and
the connections that were dropped (any close of a connection the client
did not ask for, as ``kwire.client`` logs them). :func:`run_side_by_side`
runs two configurations at once (say, the same mechanism on a listener
with and one without ``connections.max.reauth.ms``), so both see the same
machine load and their latencies compare.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Tuple

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.errors import KwireError
from kwire.producer import Producer

INTERVAL = 0.004          # seconds between two sends: 250 records a second


class _Drops(logging.Handler):
    """Counts the connection failures ``kwire.client`` logs (one line per
    node and kind of failure; a dropped connection always says one)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@dataclass
class RunStats:
    sent: int = 0
    acked: int = 0
    lost: int = 0
    repeated: int = 0
    latencies_ms: List[float] = field(default_factory=list)
    reauthentications: int = 0
    drops: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)

    def p(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    def summary(self) -> str:
        return (f"sent {self.sent}, acked {self.acked}, lost {self.lost}, repeated {self.repeated}, "
                f"p50 {self.p(0.5):.1f} ms, p99 {self.p(0.99):.1f} ms, max {self.p(1.0):.1f} ms, "
                f"re-authentications {self.reauthentications}, dropped {len(self.drops)}")


def _reauths(*clients: Any) -> int:
    return sum(conn.channel.reauthentications for c in clients for conn in list(c._client._conns.values()))


def run(cfg: Mapping[str, Any], seconds: float, label: str = "run") -> RunStats:
    """One run (see the module doc); ``cfg`` a kwire client config."""
    topic = f"reauth-{re.sub(r'[^A-Za-z0-9_.-]+', '-', label)}-{uuid.uuid4().hex[:8]}"
    stats = RunStats()
    drops = _Drops()
    client_log = logging.getLogger("kwire.client")
    client_log.addHandler(drops)
    try:
        with Admin(cfg) as admin:
            admin.create_topics([NewTopic(topic, 1)])
        with Producer(cfg, linger_ms=0) as producer, Consumer(cfg, auto_offset_reset="earliest") as consumer:
            consumer.assign([(topic, 0)])
            seen: Dict[int, int] = {}
            done = threading.Event()
            reader = threading.Thread(target=_read, args=(consumer, topic, seen, done), daemon=True)
            reader.start()
            _produce(producer, topic, seconds, stats)
            deadline = time.monotonic() + 30
            while len(seen) < stats.acked and time.monotonic() < deadline:
                time.sleep(0.05)
            done.set()
            reader.join(10)
            stats.reauthentications = _reauths(producer, consumer)
        stats.lost = stats.acked - sum(1 for _ in seen)
        stats.repeated = sum(n - 1 for n in seen.values() if n > 1)
    finally:
        client_log.removeHandler(drops)
    stats.drops = [line for line in drops.lines if "closed" in line or "lost" in line or "failed" in line]
    return stats


def _produce(producer: Producer, topic: str, seconds: float, stats: RunStats) -> None:
    lock = threading.Lock()

    def acked(sent_at: float, meta: Any, error: Any) -> None:
        with lock:
            if error is not None:
                stats.errors.append(repr(error))
            else:
                stats.acked += 1
                stats.latencies_ms.append((time.monotonic() - sent_at) * 1000)

    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while next_at < end:
        now = time.monotonic()
        if now < next_at:
            time.sleep(next_at - now)
        sent_at = time.monotonic()
        fut = producer.send(topic, b"%d" % stats.sent, partition=0)
        fut.add_callback(lambda meta, error, t=sent_at: acked(t, meta, error))
        stats.sent += 1
        next_at += INTERVAL
    producer.flush(60)


def _read(consumer: Consumer, topic: str, seen: Dict[int, int], done: threading.Event) -> None:
    while not done.is_set():
        try:
            batch = consumer.poll(100)
        except KwireError:          # closed under it: the run failed, and says why
            return
        for recs in batch.values():
            for r in recs:
                n = int(r.value)
                seen[n] = seen.get(n, 0) + 1


def run_together(cfgs: Mapping[str, Mapping[str, Any]], seconds: float) -> Dict[str, RunStats]:
    """:func:`run` of each of ``cfgs`` (name -> config) at the same time."""
    out: Dict[str, RunStats] = {}

    def go(name: str, cfg: Mapping[str, Any]) -> None:
        try:
            out[name] = run(cfg, seconds, name)
        except Exception as e:       # reported by the caller, with the others' results
            out[name] = RunStats(errors=[f"the run failed: {e!r}"])

    threads = [threading.Thread(target=go, args=item) for item in cfgs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def run_side_by_side(a: Mapping[str, Any], b: Mapping[str, Any], seconds: float) -> Tuple[RunStats, RunStats]:
    """:func:`run` of ``a`` and ``b`` at the same time."""
    out = run_together({"a": a, "b": b}, seconds)
    return out["a"], out["b"]
