"""Acknowledgement latency of a lone record: kwire's producer against
confluent-kafka (librdkafka) and kafka-python on the same broker, in
one run, rounds interleaved.

Each round sends ``--records`` records one at a time, each waited for
before the next (``send().get()``, librdkafka's delivery report), with
``linger.ms=0`` and ``acks=all``: the latency a request/response service
sees. Prints p50, p99 and max per client and each one's ratio to
confluent-kafka. The broker is Apache Kafka 4.4 (tests/support/kafka.py;
Java and Maven needed) or, with ``--bootstrap``, one you run.

    python -m benchmarks.produce_latency [--records 300] [--rounds 3] [--bootstrap host:port]

Before kwire's producer woke its sender on a new batch, a lone record
waited out the sender's idle turn (up to 0.1 s): p50 103 ms against
confluent-kafka's 0.7 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Dict, List


def _timed(n: int, send_and_wait: Callable[[bytes], object]) -> List[float]:
    """Milliseconds of each of ``n`` sends waited for, after one to warm up."""
    send_and_wait(b"warm")
    out = []
    for _ in range(n):
        t = time.perf_counter()
        send_and_wait(b"x" * 100)
        out.append((time.perf_counter() - t) * 1000)
    return out


def _kwire(bootstrap: str, topic: str, n: int) -> List[float]:
    from kwire import Producer

    with Producer(bootstrap_servers=bootstrap, linger_ms=0, acks="all") as p:
        return _timed(n, lambda value: p.send(topic, value, partition=0).get(30))


def _confluent(bootstrap: str, topic: str, n: int) -> List[float]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "log_level": 0})
    out = []
    for i in range(n + 1):
        done: List[int] = []
        t = time.perf_counter()
        p.produce(topic, b"x" * 100, partition=0, on_delivery=lambda err, msg: done.append(1))
        while not done:
            p.poll(0.0002)
        if i:
            out.append((time.perf_counter() - t) * 1000)
    p.flush(10)
    return out


def _kafka_python(bootstrap: str, topic: str, n: int) -> List[float]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all")
    try:
        return _timed(n, lambda value: p.send(topic, value, partition=0).get(30))
    finally:
        p.close()


CLIENTS: Dict[str, Callable[[str, str, int], List[float]]] = {
    "kwire": _kwire, "confluent-kafka": _confluent, "kafka-python": _kafka_python}


def _pct(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bootstrap", help="a running broker (default: start Apache Kafka 4.4)")
    args = ap.parse_args(argv)
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from support.kafka import start_kafka

        broker = start_kafka(progress=lambda m: print(f"[kafka] {m}", file=sys.stderr))
        bootstrap = broker.bootstrap("plaintext")
    try:
        topic = f"latency-{uuid.uuid4().hex[:8]}"
        lat: Dict[str, List[float]] = {name: [] for name in CLIENTS}
        for r in range(args.rounds):
            for name, run in CLIENTS.items():
                lat[name] += run(bootstrap, topic, args.records)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        ref = statistics.median(lat["confluent-kafka"])
        print(f"{'client':<16}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'p50 / confluent':>17}")
        for name, xs in lat.items():
            print(f"{name:<16}{_pct(xs, 0.5):>9.2f}{_pct(xs, 0.99):>9.2f}{max(xs):>9.2f}"
                  f"{statistics.median(xs) / ref:>17.2f}")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
