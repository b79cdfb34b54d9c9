"""Produce and consume through the local Tansu broker with kwire (blocking
and asyncio), confluent-kafka (librdkafka), aiokafka and kafka-python, on
the same records, in one run: messages/s, client CPU seconds, ratios to
confluent-kafka, and kwire.aio's ratios to aiokafka and to blocking kwire.

Workload: N records (default 1,000,000) of a 16-byte key and a 100-byte
value into a 4-partition topic, per codec (none, lz4, zstd); with ``--shape
mixed``, values of 50 to 1,000 bytes (at random, 525 on average), and
kwire.aio's producers with their defaults (``buffer_memory`` 32 MiB,
``batch_size`` 16 KiB, against 256 MiB and 256 KiB for the standard
shape), so that they run into a full buffer for most of the run, a batch
at a time: the backpressure case. Each client
produces its own topic, then each client consumes the topic kwire wrote
(every client reads the same bytes). kwire consumes twice: into Python
records (``poll``) and into Arrow (``poll_columnar``).

``kwire-aio`` is :mod:`kwire.aio` on one event loop: its producer queues
every record with ``send_nowait`` (``await enqueue`` when that raises
``WouldBlockError``: docs/guide/asyncio.md's fast pattern), then ``await flush()``;
``kwire-aio-enqueue`` awaits ``enqueue`` for every record instead (the
coroutine path, which the fast one must not trail); its consumers ``await
getmany`` (Python records) and ``await poll_columnar`` (``kwire-aio-columnar``).
aiokafka runs on one event loop as well: its producer awaits ``send`` per
record and gathers the futures (its documented fast way), its consumer
``await getmany``. ``--loop uvloop`` runs both on uvloop instead of
asyncio's default loop. After the table come kwire-aio's ratios to
aiokafka (target: 3x or more), to blocking kwire (target: no more than
1.3x slower) and to kwire-aio-enqueue (target: no slower), each marked met
or missed.

The ``broker-ceiling`` producer is no client: it encodes the records into
the same 256 KiB batches and Produce requests before its clock starts,
then only writes them down one socket, 5 requests in flight (kwire's
idempotent limit), and reads the answers. Its rate is what the broker
takes in at most on this machine, the bound on every client's produce.

    python -m benchmarks.compare_clients [--records 1000000] [--codecs none,lz4,zstd] [--skip kafka-python]
                                         [--repeat 3] [--loop asyncio|uvloop] [--shape standard|mixed]
                                         [--produce-only] [--json out.json]

With ``--repeat N`` every client runs N rounds, taking turns (so noise on
this shared machine hits all of them alike), and each one's best round
counts; CPU seconds are those of that round. ``--pin-broker`` keeps the
broker on a CPU of its own, as if it ran on another machine (every client
then has one CPU fewer).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import socket
import struct
import sys
import time
import uuid
import warnings
from typing import Any, Callable, Dict, List, Tuple

from benchmarks import history

PARTITIONS = 4
LOOPS = ("asyncio", "uvloop")
_loop = "asyncio"            # the event loop the asyncio clients run on (--loop)
SHAPES = {"standard": "16-byte key, 100-byte value", "mixed": "16-byte key, 50-1,000-byte value"}
# kwire.aio's producer options by shape: mixed, its defaults, so that the buffer is full for most of the run
AIO_PRODUCER = {"standard": {"batch_size": 262144, "buffer_memory": 256 << 20}, "mixed": {}}
_aio_producer = AIO_PRODUCER["standard"]      # (--shape)

# kwire.aio's ratios printed after the table: (client, peer, least ratio the target asks for), the ratio
# being how many times faster the client is than its peer on the same codec and operation
AIO_TARGETS: List[Tuple[str, str, float]] = [("kwire-aio", "aiokafka", 3.0), ("kwire-aio-columnar", "aiokafka", 3.0),
                                             ("kwire-aio", "kwire", 1 / 1.3),
                                             ("kwire-aio-columnar", "kwire-columnar", 1 / 1.3),
                                             ("kwire-aio", "kwire-aio-enqueue", 1.0)]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _pin(broker_pid: int) -> None:
    """The broker's threads on the last CPU this process may use, this
    process (the clients and their threads) on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin-broker needs at least 2 CPUs")
    for tid in os.listdir(f"/proc/{broker_pid}/task"):
        os.sched_setaffinity(int(tid), {cpus[-1]})
    os.sched_setaffinity(0, set(cpus[:-1]))


def run_loop(main: Callable[[], Any], loop: str = "") -> Any:
    """``asyncio.run(main())`` on the event loop ``--loop`` chose (or ``loop``)."""
    factory = None
    if (loop or _loop) == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


def _records(n: int, shape: str = "standard") -> List[Tuple[bytes, bytes]]:
    if shape == "mixed":
        rng = random.Random(32)
        return [(b"%016d" % i, (b"%d-" % i).ljust(rng.randrange(50, 1001), b"v")) for i in range(n)]
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

    run_loop(run)


async def aio_produce(p, topic, recs, every: int = 0) -> None:
    """Queue ``recs`` on the AsyncProducer ``p``: ``send_nowait`` per record,
    ``await enqueue`` when it would block; ``every``: also give the loop a
    turn after that many records (0: never)."""
    from kwire.aio import WouldBlockError

    send, enqueue = p.send_nowait, p.enqueue
    for i, (k, v) in enumerate(recs, 1):
        try:
            send(topic, v, key=k)
        except WouldBlockError:
            await enqueue(topic, v, key=k)
        if every and i % every == 0:
            await asyncio.sleep(0)


async def aio_enqueue(p, topic, recs) -> None:
    """Queue ``recs`` on the AsyncProducer ``p``: ``await enqueue`` per record."""
    enqueue = p.enqueue
    for k, v in recs:
        await enqueue(topic, v, key=k)


def produce_kwire_aio(bootstrap, topic, recs, codec, queue=aio_produce):
    from kwire.aio import AsyncProducer

    async def run():
        async with AsyncProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=5,
                                 **_aio_producer) as p:
            await queue(p, topic, recs)
            await p.flush()

    run_loop(run)


def produce_kwire_aio_enqueue(bootstrap, topic, recs, codec):
    produce_kwire_aio(bootstrap, topic, recs, codec, aio_enqueue)


def prepare_ceiling(bootstrap, topic, recs, codec):
    """The Produce requests of the broker ceiling, encoded (untimed): the
    records in 256 KiB batches per partition (keys placed as Kafka's
    partitioner places them), one batch per partition per request, at the
    Produce version kwire and the broker agree on."""
    from kwire import protocol
    from kwire._codec import RecordBatchBuilder, partition_for_key
    from kwire.admin import Admin

    with Admin(bootstrap_servers=bootstrap) as a:
        client = a._client
        client.refresh_metadata(timeout=10)
        version = client.wait_ready(next(iter(client.cluster.brokers)), time.monotonic() + 10).versions[0]
    codec_arg = None if codec == "none" else codec
    now = int(time.time() * 1000)
    batches: List[List[bytes]] = [[] for _ in range(PARTITIONS)]
    open_ = [RecordBatchBuilder(codec_arg) for _ in range(PARTITIONS)]
    for k, v in recs:
        p = partition_for_key(k, PARTITIONS)
        b = open_[p]
        b.append(v, key=k, timestamp=now)
        if b.size_in_bytes >= 262144:
            batches[p].append(b.build())
            open_[p] = RecordBatchBuilder(codec_arg)
    for p, b in enumerate(open_):
        if len(b):
            batches[p].append(b.build())
    cls = protocol.message("ProduceRequest")
    frames = []
    for i in range(max(len(q) for q in batches)):
        parts = [cls.PartitionProduceData(index=p, records=q[i]) for p, q in enumerate(batches) if i < len(q)]
        req = cls(transactional_id=None, acks=-1, timeout_ms=30000,
                  topic_data=[cls.TopicProduceData(name=topic, partition_data=parts)])
        frames.append(b"".join(bytes(c) for c in protocol.encode_request(req, version, i + 1, "ceiling")))
    return frames, version


def produce_ceiling(bootstrap, topic, prepared, codec):
    """Write the prepared requests, 5 in flight, and read every answer."""
    from kwire import protocol

    frames, version = prepared
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    answers = sock.makefile("rb")
    resp_cls = protocol.response_class(0)

    def answer() -> None:
        (size,) = struct.unpack(">i", answers.read(4))
        _, resp = protocol.decode_response(answers.read(size), resp_cls, version)
        codes = {p.error_code for t in resp.responses for p in t.partition_responses}
        assert codes == {0}, codes

    try:
        for i, frame in enumerate(frames):
            if i >= 5:
                answer()
            sock.sendall(frame)
        for _ in range(min(5, len(frames))):
            answer()
    finally:
        sock.close()


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

    return run_loop(run)


async def aio_consume(c, n: int, columnar: bool = False, turn: bool = False) -> int:
    """Take ``n`` records from the assigned AsyncConsumer ``c``: ``getmany``
    (touching each value), or ``poll_columnar``; ``turn``: give the loop a
    turn after each call (one that returns buffered records does not)."""
    got = 0
    while got < n:
        if turn:
            await asyncio.sleep(0)
        if columnar:
            got += sum(rb.num_rows for rb in (await c.poll_columnar(1000)).values())
            continue
        for records in (await c.getmany(1000)).values():
            for r in records:
                r.value
            got += len(records)
    return got


def consume_kwire_aio(bootstrap, topic, n, columnar=False):
    from kwire.aio import AsyncConsumer

    async def run():
        async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 max_poll_records=100000) as c:
            c.assign([(topic, p) for p in range(PARTITIONS)])
            return await aio_consume(c, n, columnar)

    return run_loop(run)


def consume_kwire_aio_columnar(bootstrap, topic, n):
    return consume_kwire_aio(bootstrap, topic, n, columnar=True)


PRODUCERS: Dict[str, Callable] = {"kwire": produce_kwire, "kwire-aio": produce_kwire_aio,
                                  "kwire-aio-enqueue": produce_kwire_aio_enqueue,
                                  "confluent-kafka": produce_confluent,
                                  "aiokafka": produce_aiokafka, "kafka-python": produce_kafka_python,
                                  "broker-ceiling": produce_ceiling}
PREPARE: Dict[str, Callable] = {"broker-ceiling": prepare_ceiling}     # untimed setup: what the clock skips
CONSUMERS: Dict[str, Callable] = {"kwire": consume_kwire, "kwire-columnar": consume_kwire_columnar,
                                  "kwire-aio": consume_kwire_aio, "kwire-aio-columnar": consume_kwire_aio_columnar,
                                  "confluent-kafka": consume_confluent, "aiokafka": consume_aiokafka,
                                  "kafka-python": consume_kafka_python}


def aio_ratios(best: Dict[Tuple[str, str, str], Tuple[float, float]]
               ) -> Dict[Tuple[str, str, str, str], Tuple[float, float]]:
    """(codec, op, client, peer) -> (times faster than the peer, the least
    the target asks for), for :data:`AIO_TARGETS` both ran."""
    out = {}
    for codec, op in dict.fromkeys((c, op) for c, op, _ in best):       # in the order they ran
        for name, peer, least in AIO_TARGETS:
            if (codec, op, name) in best and (codec, op, peer) in best:
                out[(codec, op, name, peer)] = (best[(codec, op, peer)][0] / best[(codec, op, name)][0], least)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--codecs", default="none,lz4,zstd")
    p.add_argument("--skip", default="", help="comma-separated clients to leave out")
    p.add_argument("--produce-only", action="store_true", help="measure the producers only")
    p.add_argument("--repeat", type=int, default=1, help="rounds per client; the best counts")
    p.add_argument("--pin-broker", action="store_true",
                   help="run the broker on the last CPU and the clients on the others (Linux), as if the "
                        "broker were another machine; every client then has one CPU fewer")
    p.add_argument("--loop", choices=LOOPS, default="asyncio",
                   help="the event loop of the asyncio clients (kwire-aio, aiokafka)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="standard",
                   help="mixed: values of 50-1,000 bytes, kwire.aio's producers with their default "
                        "buffer_memory and batch_size (backpressure)")
    p.add_argument("--json", metavar="PATH", help="also write the results and ratios as JSON (benchmarks/history.py)")
    args = p.parse_args(argv)
    global _loop, _aio_producer
    _loop = args.loop
    _aio_producer = AIO_PRODUCER[args.shape]
    warnings.simplefilter("ignore", DeprecationWarning)
    from kwire.admin import Admin, NewTopic
    from kwire.devbroker import start_tansu

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    best: Dict[Tuple[str, str, str], Tuple[float, float]] = {}

    def record(codec: str, op: str, name: str, wall: float, cpu: float) -> None:
        if (codec, op, name) not in best or wall < best[(codec, op, name)][0]:
            best[(codec, op, name)] = (wall, cpu)
        print(f"{codec:5} {op:7} {name:16} {args.records / wall:12,.0f} msg/s  cpu {cpu:6.2f} s",
              file=sys.stderr, flush=True)

    with start_tansu() as broker:
        if args.pin_broker:
            _pin(broker.pid)
        # made after the broker's fork: made before it, their pages would be copy-on-write
        # and the first client to touch them (kwire, in round 1) would pay a fault per page
        recs = _records(args.records, args.shape)
        for codec in [c.strip() for c in args.codecs.split(",") if c.strip()]:
            for _ in range(args.repeat):
                topics = {}
                for name, fn in PRODUCERS.items():
                    if name in skip:
                        continue
                    topic = f"bench-{codec}-{name}-{uuid.uuid4().hex[:6]}"
                    with Admin(bootstrap_servers=broker.bootstrap) as a:
                        a.create_topics([NewTopic(topic, PARTITIONS)])
                    data: Any = PREPARE[name](broker.bootstrap, topic, recs, codec) if name in PREPARE else recs
                    c0, t0 = _cpu(), time.perf_counter()
                    fn(broker.bootstrap, topic, data, codec)
                    record(codec, "produce", name, time.perf_counter() - t0, _cpu() - c0)
                    topics[name] = topic
                source = topics.get("kwire") or next(t for n, t in topics.items() if n != "broker-ceiling")
                for name, fn in () if args.produce_only else CONSUMERS.items():
                    if name in skip or (name.endswith("-columnar") and name[:-len("-columnar")] in skip):
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
    print(f"\n{args.records:,} records ({SHAPES[args.shape]}), {PARTITIONS} partitions, local Tansu, "
          f"best of {args.repeat}, asyncio clients on {args.loop}, kwire.aio's producers with "
          f"{_aio_producer or 'their defaults'}\n")
    print("| codec | op | client | msg/s | client CPU s | vs confluent-kafka |")
    print("|---|---|---|---:|---:|---:|")
    for codec, op, name, wall, cpu in rows:
        ratio = base.get((codec, op))
        print(f"| {codec} | {op} | {name} | {args.records / wall:,.0f} | {cpu:.2f} | "
              f"{(ratio / wall) if ratio else float('nan'):.2f}x |")
    aio = aio_ratios(best)
    if aio:
        print("\n| codec | op | client | vs | ratio | target | |")
        print("|---|---|---|---|---:|---:|---|")
        for (codec, op, name, peer), (ratio, least) in aio.items():
            print(f"| {codec} | {op} | {name} | {peer} | {ratio:.2f}x | >= {least:.2f}x | "
                  f"{'met' if ratio >= least else 'MISSED'} |")
    if args.json:
        env = dict(records=args.records, repeat=args.repeat, pin_broker=args.pin_broker, loop=args.loop,
                   shape=args.shape)
        results = [{"codec": c, "op": op, "client": name, "seconds": wall, "cpu_s": cpu}
                   for c, op, name, wall, cpu in rows]
        ratios = {f"{c}/{op}/{name} vs confluent-kafka": base[(c, op)] / wall
                  for c, op, name, wall, _ in rows if name.startswith("kwire") and (c, op) in base}
        ratios.update({f"{c}/{op}/{name} vs {peer}": ratio for (c, op, name, peer), (ratio, _) in aio.items()})
        history.write_results(args.json, "compare_clients", env, results, ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
