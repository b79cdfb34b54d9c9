"""Incremental fetch sessions (KIP-227): what they save a broker. A consumer
of one topic of ``--partitions`` partitions (2,000), caught up, long-polls
for ``--seconds`` while a producer trickles ``--rate`` records a second into
random partitions; once with fetch sessions (kwire's default) and once with
``enable_fetch_sessions=False``, rounds interleaved. Measured per mode:

- the Fetch requests the consumer sent: how many, their bytes in all and
  per request (each request as kwire frames it, counted as it is sent);
- the bytes of the answers (what the consumer's connection to the broker
  read in the window);
- the broker JVM's CPU time in the window (user + system, from
  ``/proc/<pid>/stat``), in all and per Fetch, and the same for an idle
  window without a consumer, to show what the broker spends anyway.

The number of Fetches differs between the modes with a trickle (each new
record ends a long poll; without sessions the consumer takes longer to
build each request and read each answer, so more records come per
answer); ``--rate 0`` (long polls that time out, ``fetch_max_wait_ms``
each) gives both modes the same number.

The broker is Apache Kafka 4.4 started here (tests/support/kafka.py; Java
and Maven needed), alone on the machine's cores with this process.

    python -m benchmarks.fetch_sessions [--partitions 2000] [--seconds 20] [--rate 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

from benchmarks.procstat import process_cpu


class _FetchCounter:
    """Counts the Fetch requests a consumer's client sends and their framed bytes."""

    def __init__(self, consumer: Any) -> None:
        from kwire import protocol
        from kwire.protocol.api_keys import ApiKey

        self.requests: List[int] = []
        self.on = False
        client = consumer._client
        send = client.send
        fetch_cls = protocol.message("FetchRequest")

        def counting(node: int, request: Any, *args: Any, **kw: Any) -> Any:
            if self.on and type(request) is fetch_cls:
                version = client.connection(node).versions[ApiKey.FETCH]
                frame = protocol.encode_request(request, version, 0, client.cfg["client_id"])
                self.requests.append(sum(len(b) for b in frame))
            return send(node, request, *args, **kw)

        client.send = counting
        self.read = 0
        for conn in client._conns.values():      # the bytes its connections read (the answers)
            self._count_reads(conn.channel)

    def _count_reads(self, channel: Any) -> None:
        received = channel.received

        def counting(n: int) -> Any:
            if self.on:
                self.read += n
            return received(n)

        channel.received = counting


def _trickle(bootstrap: str, topic: str, partitions: int, rate: float, stop: threading.Event) -> None:
    from kwire import Producer

    with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
        while not stop.wait(1.0 / rate):
            p.send(topic, b"x" * 100, partition=random.randrange(partitions))


def _catch_up(c: Any, tps: List[Any], timeout: float = 120.0) -> None:
    """Poll until every partition's position is at its end."""
    deadline = time.monotonic() + timeout
    ends = c.end_offsets(tps)
    while True:
        c.poll(200)
        if all(c._states[tp].position == ends[tp] for tp in tps):
            return
        if time.monotonic() > deadline:
            raise SystemExit("the consumer did not catch up in time")


def _run(bootstrap: str, topic: str, partitions: int, seconds: float, rate: float, sessions: bool,
         pid: int) -> Dict[str, float]:
    from kwire import Consumer, TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_fetch_sessions=sessions) as c:
        c.assign(tps)
        _catch_up(c, tps)
        counter = _FetchCounter(c)
        stop = threading.Event()
        producer = threading.Thread(target=_trickle, args=(bootstrap, topic, partitions, rate, stop), daemon=True)
        if rate > 0:
            producer.start()
            time.sleep(1.0)                 # the producer connected
        counter.on = True
        cpu0, t0 = process_cpu(pid), time.monotonic()
        records = 0
        while time.monotonic() - t0 < seconds:
            records += sum(len(v) for v in c.poll(500).values())
        cpu, wall, read = process_cpu(pid) - cpu0, time.monotonic() - t0, counter.read
        counter.on = False
        stop.set()
        if rate > 0:
            producer.join()
    sent = counter.requests
    return {"requests": len(sent), "bytes": sum(sent), "per_request": statistics.mean(sent) if sent else 0.0,
            "max_request": max(sent, default=0), "response_bytes": read, "cpu": cpu, "wall": wall,
            "cpu_per_fetch": cpu / max(1, len(sent)),
            "records": records}


def _idle_cpu(pid: int, seconds: float) -> float:
    cpu0 = process_cpu(pid)
    time.sleep(seconds)
    return process_cpu(pid) - cpu0


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=20.0, help="records a second, into random partitions (0: none, "
                    "only long polls that time out)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.kafka import start_kafka

    from kwire import Producer
    from kwire.admin import Admin, NewTopic

    broker = start_kafka(progress=lambda m: print(f"[kafka] {m}", file=sys.stderr))
    try:
        bootstrap = broker.bootstrap("plaintext")
        topic = f"sessions-{uuid.uuid4().hex[:8]}"
        with Admin(bootstrap_servers=bootstrap) as a:
            a.create_topics([NewTopic(topic, args.partitions)])
        with Producer(bootstrap_servers=bootstrap, linger_ms=20) as p:
            for part in range(args.partitions):
                p.send(topic, b"first", partition=part)
        time.sleep(2.0)
        idle = _idle_cpu(broker.pid, args.seconds)
        results: Dict[str, List[Dict[str, float]]] = {"sessions": [], "no sessions": []}
        for r in range(args.rounds):
            for name in results:
                res = _run(bootstrap, topic, args.partitions, args.seconds, args.rate, name == "sessions",
                           broker.pid)
                results[name].append(res)
                print(f"round {r + 1}/{args.rounds} {name}: {res}", file=sys.stderr)
        print(f"{args.partitions} partitions, caught up, {args.seconds:g} s of long polls "
              f"(fetch_max_wait_ms 500), a trickle of {args.rate:g} records/s; {args.rounds} rounds each, medians")
        print(f"{'mode':<13}{'Fetches':>9}{'request B':>12}{'B/request':>11}{'max B':>9}{'response B':>12}"
              f"{'broker CPU s':>14}{'CPU ms/Fetch':>14}{'records':>9}")
        for name, runs in results.items():
            med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
            print(f"{name:<13}{med['requests']:>9.0f}{med['bytes']:>12,.0f}{med['per_request']:>11,.0f}"
                  f"{med['max_request']:>9,.0f}{med['response_bytes']:>12,.0f}{med['cpu']:>14.2f}"
                  f"{med['cpu_per_fetch'] * 1000:>14.1f}{med['records']:>9.0f}")
        print(f"{'idle broker':<13}{'':>9}{'':>12}{'':>11}{'':>9}{'':>12}{idle:>14.2f}")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
