"""Produce and consume through the local Tansu broker with kwire,
confluent-kafka (librdkafka), aiokafka and kafka-python, on the same
records, in one run: messages/s, client CPU seconds, ratios to
confluent-kafka.

Workload: N records (default 1,000,000) of a 16-byte key and a 100-byte
value into a 4-partition topic, per codec (none, lz4, zstd). Each client
produces its own topic, then each client consumes the topic kwire wrote
(every client reads the same bytes). kwire consumes twice: into Python
records (``poll``) and into Arrow (``poll_columnar``).

    python -m benchmarks.compare_clients [--records 1000000] [--codecs none,lz4,zstd] [--skip kafka-python]
                                         [--repeat 3]

With ``--repeat N`` every client runs N rounds, taking turns (so noise on
this shared machine hits all of them alike), and each one's best round
counts; CPU seconds are those of that round.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
import uuid
import warnings
from typing import Callable, Dict, List, Tuple

PARTITIONS = 4


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _records(n: int) -> List[Tuple[bytes, bytes]]:
    return [(b"%016d" % i, (b"%d-" % i).ljust(100, b"v")) for i in range(n)]


# ------------------------------------------------------------------ produce
def produce_kwire(bootstrap, topic, recs, codec):
    from kwire.producer import Producer

    with Producer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5, batch_size=262144,
                  buffer_memory=256 << 20) as p:
        send = p.send
        for k, v in recs:
            send(topic, v, key=k)
        p.flush()


def produce_confluent(bootstrap, topic, recs, codec):
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                                  "batch.size": 262144, "queue.buffering.max.messages": 2_000_000,
                                  "partitioner": "murmur2_random"})
    produce = p.produce
    for k, v in recs:
        while True:
            try:
                produce(topic, v, k)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)


def produce_kafka_python(bootstrap, topic, recs, codec):
    from kafka import KafkaProducer

    # kafka-python 3 has no buffer_memory: its accumulator is unbounded
    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                      linger_ms=5, batch_size=262144)
    for k, v in recs:
        p.send(topic, v, key=k)
    p.flush()
    p.close()


def produce_aiokafka(bootstrap, topic, recs, codec):
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=5, max_batch_size=262144)
        await p.start()
        try:
            batch = []
            for k, v in recs:
                batch.append(await p.send(topic, v, key=k))
            await asyncio.gather(*batch)
        finally:
            await p.stop()

    asyncio.run(run())


# ------------------------------------------------------------------ consume
def consume_kwire(bootstrap, topic, n):
    from kwire.consumer import Consumer

    got = 0
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=100000) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        while got < n:
            for records in c.poll(1000).values():
                for r in records:
                    r.value
                got += len(records)
    return got


def consume_kwire_columnar(bootstrap, topic, n):
    from kwire.consumer import Consumer

    got = 0
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        while got < n:
            for rb in c.poll_columnar(1000).values():
                got += rb.num_rows
    return got


def consume_confluent(bootstrap, topic, n):
    import confluent_kafka

    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.queue.backoff.ms": 0, "queued.min.messages": 2_000_000})
    c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    while got < n:
        for m in c.consume(100000, 1.0):
            if m.error() is None:
                m.value()
                got += 1
    c.close()
    return got


def consume_kafka_python(bootstrap, topic, n):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                      max_poll_records=100000)
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    got = 0
    while got < n:
        for records in c.poll(1000).values():
            for r in records:
                r.value
            got += len(records)
    c.close()
    return got


def consume_aiokafka(bootstrap, topic, n):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            await c.seek_to_beginning()
            got = 0
            while got < n:
                batch = await c.getmany(timeout_ms=1000, max_records=100000)
                for records in batch.values():
                    for r in records:
                        r.value
                    got += len(records)
            return got
        finally:
            await c.stop()

    return asyncio.run(run())


PRODUCERS: Dict[str, Callable] = {"kwire": produce_kwire, "confluent-kafka": produce_confluent,
                                  "aiokafka": produce_aiokafka, "kafka-python": produce_kafka_python}
CONSUMERS: Dict[str, Callable] = {"kwire": consume_kwire, "kwire-columnar": consume_kwire_columnar,
                                  "confluent-kafka": consume_confluent, "aiokafka": consume_aiokafka,
                                  "kafka-python": consume_kafka_python}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--codecs", default="none,lz4,zstd")
    p.add_argument("--skip", default="", help="comma-separated clients to leave out")
    p.add_argument("--repeat", type=int, default=1, help="rounds per client; the best counts")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kwire.admin import Admin, NewTopic
    from kwire.devbroker import start_tansu

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    recs = _records(args.records)
    best: Dict[Tuple[str, str, str], Tuple[float, float]] = {}

    def record(codec: str, op: str, name: str, wall: float, cpu: float) -> None:
        if (codec, op, name) not in best or wall < best[(codec, op, name)][0]:
            best[(codec, op, name)] = (wall, cpu)
        print(f"{codec:5} {op:7} {name:16} {args.records / wall:12,.0f} msg/s  cpu {cpu:6.2f} s",
              file=sys.stderr, flush=True)

    with start_tansu() as broker:
        for codec in [c.strip() for c in args.codecs.split(",") if c.strip()]:
            for _ in range(args.repeat):
                topics = {}
                for name, fn in PRODUCERS.items():
                    if name in skip:
                        continue
                    topic = f"bench-{codec}-{name}-{uuid.uuid4().hex[:6]}"
                    with Admin(bootstrap_servers=broker.bootstrap) as a:
                        a.create_topics([NewTopic(topic, PARTITIONS)])
                    c0, t0 = _cpu(), time.perf_counter()
                    fn(broker.bootstrap, topic, recs, codec)
                    record(codec, "produce", name, time.perf_counter() - t0, _cpu() - c0)
                    topics[name] = topic
                source = topics.get("kwire") or next(iter(topics.values()))
                for name, fn in CONSUMERS.items():
                    if name in skip or (name == "kwire-columnar" and "kwire" in skip):
                        continue
                    c0, t0 = _cpu(), time.perf_counter()
                    got = fn(broker.bootstrap, source, args.records)
                    wall, cpu = time.perf_counter() - t0, _cpu() - c0
                    assert got == args.records, (name, got)
                    record(codec, "consume", name, wall, cpu)
                with Admin(bootstrap_servers=broker.bootstrap) as a:
                    a.delete_topics(list(topics.values()))      # keep the in-memory broker small
    rows = [(codec, op, name, wall, cpu) for (codec, op, name), (wall, cpu) in best.items()]
    base = {(c, op): wall for c, op, name, wall, _ in rows if name == "confluent-kafka"}
    print(f"\n{args.records:,} records (16-byte key, 100-byte value), {PARTITIONS} partitions, local Tansu, "
          f"best of {args.repeat}\n")
    print("| codec | op | client | msg/s | client CPU s | vs confluent-kafka |")
    print("|---|---|---|---:|---:|---:|")
    for codec, op, name, wall, cpu in rows:
        ratio = base.get((codec, op))
        print(f"| {codec} | {op} | {name} | {args.records / wall:,.0f} | {cpu:.2f} | "
              f"{(ratio / wall) if ratio else float('nan'):.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
