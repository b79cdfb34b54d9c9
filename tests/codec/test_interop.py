"""kwire's record codec against independent Kafka implementations, both ways.

Peers (real libraries, never mocks):

* kafka-python 3.0.12: pure Python records, python-snappy / lz4 / zstandard;
* aiokafka 0.14.0: its compiled ``_crecords``, cramjam for snappy / lz4 / zstd;
* librdkafka (confluent-kafka), through a live Tansu broker: the batches it
  produced are read straight off the socket with a raw Fetch request encoded
  by kafka-python's protocol classes (Tansu stores and serves produced
  batches byte for byte).

Every buffer is read by kwire (``decode`` and ``decode_columnar``) and by the
peers; all must report the same records (offset, timestamp, timestamp type,
key, value, headers), the same batch fields wherever a peer exposes them, and
exactly what was written.
"""

from __future__ import annotations

import functools
import socket
import struct
import time
import uuid
import warnings
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import pytest

import kwire

try:  # aiokafka has no wheels for some wheel-test targets (musllinux): kafka-python still runs there
    import aiokafka.record._crecords as aio
    import aiokafka.record._crecords.default_records as aio_default
    import aiokafka.record._crecords.legacy_records as aio_legacy
except ImportError:
    aio = None

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas with deprecated importlib.resources calls
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.record.default_records as kp_default
    import kafka.record.legacy_records as kp_legacy
    import kafka.record.memory_records as kp_memory
    from kafka.protocol.consumer import FetchRequest, FetchResponse

from support.wire import recv_exact

from .helpers import CODECS, LEGACY_CODECS, as_tuples, columnar_tuples

CODEC_IDS = {None: 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASE_TS = 1_700_000_000_000
BASE_OFFSET = 1000
XERIAL_MAGIC = b"\x82SNAPPY\x00"
V2_HEADER_SIZE = 61

# What the buffers hold: v2 gets a plain batch, an idempotent one and a
# transactional one; legacy message sets get two sets. Offsets are contiguous
# from BASE_OFFSET, as a broker assigns them.
V2_PLAN = [
    dict(n=40),
    dict(n=35, producer_id=4242, producer_epoch=3, base_sequence=100),
    dict(n=30, producer_id=4243, producer_epoch=0, base_sequence=0, transactional=True),
]
LEGACY_PLAN = [dict(n=40), dict(n=35)]

Rec = Tuple[Optional[bytes], Optional[bytes], list, Optional[int]]     # key, value, headers, timestamp


def make_records(n: int, seed: int, magic: int, big: bool = False) -> List[Rec]:
    """Null and empty keys and values, headers (v2: null values, non-ASCII keys),
    timestamps that go backwards; compressible, so every codec really compresses."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"" if i % 13 == 4 else b"key-%d-%d" % (seed, i)
        value = None if i % 11 == 5 else b"" if i % 17 == 6 else b"value-%d-%d|" % (seed, i) * (3 + i % 5)
        if big and value:
            value *= 1500                                       # > 32 KiB: several xerial blocks
        headers = [] if magic < 2 or i % 3 == 0 else [("h%d" % (i % 2), b"x" * (i % 5)), ("null", None)]
        if magic == 2 and i % 5 == 1:
            headers.append(("ключ-✓", b""))
        ts = None if magic == 0 else BASE_TS + 37 * i - (500 if i % 10 == 9 else 0)
        out.append((key, value, headers, ts))
    return out


def expected_tuples(recs: List[Rec], base: int, magic: int) -> list:
    """What every reader must report for ``recs`` written at ``base``."""
    return [(base + i, -1 if magic == 0 else ts, -1 if magic == 0 else 0, key, value, tuple(map(tuple, headers)))
            for i, (key, value, headers, ts) in enumerate(recs)]


# ------------------------------------------------------------------ writers
class Peer(NamedTuple):
    default_builder: type
    legacy_builder: type
    memory_records: type
    codec_modules: tuple            # the modules whose snappy_encode the builders call


PEERS = {
    "kafka-python": Peer(kp_default.DefaultRecordBatchBuilder, kp_legacy.LegacyRecordBatchBuilder,
                         kp_memory.MemoryRecords, (kp_default, kp_legacy)),
}
if aio is not None:
    PEERS["aiokafka"] = Peer(aio.DefaultRecordBatchBuilder, aio.LegacyRecordBatchBuilder, aio.MemoryRecords,
                             (aio_default, aio_legacy))


def write_kwire(magic, codec, base, recs, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                transactional=False, **kw) -> bytes:
    if magic == 2:
        b = kwire.RecordBatchBuilder(codec, base_offset=base, producer_id=producer_id, producer_epoch=producer_epoch,
                                     base_sequence=base_sequence, transactional=transactional, **kw)
        for key, value, headers, ts in recs:
            b.append(value, key=key, headers=headers, timestamp=ts)
    else:
        b = kwire.LegacyMessageSetBuilder(magic, codec, base_offset=base)
        for key, value, _headers, ts in recs:
            b.append(value, key=key, timestamp=ts)
    return b.build()


def write_peer(peer: Peer, magic, codec, base, recs, producer_id=-1, producer_epoch=-1, base_sequence=-1,
               transactional=False, broker_offsets=True) -> bytes:
    """A batch built by the peer's own builder, as its producer builds it.

    Producers leave offsets to the broker: a v2 base offset is 0, a compressed
    legacy wrapper's offset is 0 with inner offsets 0, 1, ... With
    ``broker_offsets`` the offsets are then set as a broker stores them (v2
    base offset; legacy wrapper = last inner offset, inner offsets absolute for
    v0, relative for v1). Neither field is covered by the CRC.
    """
    cid = CODEC_IDS[codec]
    if magic == 2:
        b = peer.default_builder(2, cid, int(transactional), producer_id, producer_epoch, base_sequence, 1 << 24)
        for i, (key, value, headers, ts) in enumerate(recs):
            b.append(i, ts, key, value, headers)
        data = bytearray(b.build())
        if broker_offsets:
            struct.pack_into(">q", data, 0, base)
        return bytes(data)
    b = peer.legacy_builder(magic, cid, 1 << 24)
    for i, (key, value, _headers, ts) in enumerate(recs):
        absolute = not codec or (magic == 0 and broker_offsets)
        b.append(base + i if absolute else i, ts, key, value)
    data = bytearray(b.build())
    if codec and broker_offsets:
        struct.pack_into(">q", data, 0, base + len(recs) - 1)
    return bytes(data)


WRITERS: Dict[str, Callable[..., bytes]] = {
    "kwire": write_kwire,
    **{name: functools.partial(write_peer, peer) for name, peer in PEERS.items()},
}


def build_buffer(writer: str, magic: int, codec, plan=None, big=False) -> Tuple[bytes, list]:
    """Batches from ``plan`` written back to back by ``writer``; the records they hold."""
    data, expected, base = b"", [], BASE_OFFSET
    for seed, spec in enumerate(plan or (V2_PLAN if magic == 2 else LEGACY_PLAN)):
        spec = dict(spec)
        recs = make_records(spec.pop("n"), seed, magic, big)
        data += WRITERS[writer](magic, codec, base, recs, **spec)
        expected += expected_tuples(recs, base, magic)
        base += len(recs)
    return data, expected


# ------------------------------------------------------------------ readers
BATCH_FIELDS = ("base_offset", "last_offset", "next_offset", "magic", "crc", "attributes", "compression",
                "timestamp_type", "is_transactional", "is_control", "first_timestamp", "max_timestamp",
                "producer_id", "producer_epoch", "base_sequence", "record_count", "partition_leader_epoch",
                "size_in_bytes")


def read_kwire(data: bytes, include_control: bool = False) -> Tuple[list, List[dict]]:
    """kwire's records and batches; decode_columnar must give the same rows."""
    res = kwire.decode(data, include_control=include_control)
    assert res.consumed == len(data) and res.incomplete_size == 0
    records = as_tuples(res.records)
    table = kwire.decode_columnar(data, include_control=include_control).record_batch
    assert columnar_tuples(table) == records
    return records, [{f: getattr(b, f) for f in BATCH_FIELDS} for b in res.batches]


def _last_offset(b):
    return b.base_offset + b.last_offset_delta


# kwire BatchInfo field -> the peer's attribute (or a function of its batch),
# for every batch field each peer exposes.
PEER_BATCH_FIELDS = {
    ("kafka-python", 2): dict(
        base_offset="base_offset", last_offset="last_offset", next_offset="next_offset", magic="magic", crc="crc",
        attributes="attributes", compression="compression_type", timestamp_type="timestamp_type",
        is_transactional="is_transactional", is_control="is_control_batch", first_timestamp="first_timestamp",
        max_timestamp="max_timestamp", producer_id="producer_id", producer_epoch="producer_epoch",
        base_sequence="base_sequence", record_count="records_count", partition_leader_epoch="leader_epoch",
        size_in_bytes="size_in_bytes"),
    ("kafka-python", 1): dict(base_offset="base_offset", magic="magic", compression="compression_type",
                              timestamp_type="timestamp_type", size_in_bytes="size_in_bytes"),
    ("aiokafka", 2): dict(
        base_offset="base_offset", last_offset=_last_offset, next_offset="next_offset", magic="magic", crc="crc",
        attributes="attributes", compression="compression_type", timestamp_type="timestamp_type",
        is_transactional="is_transactional", is_control="is_control_batch", first_timestamp="first_timestamp",
        max_timestamp="max_timestamp", producer_id="producer_id", producer_epoch="producer_epoch",
        base_sequence="base_sequence"),
    ("aiokafka", 1): dict(next_offset="next_offset", is_transactional="is_transactional",
                          is_control="is_control_batch", producer_id="producer_id"),
}


def _none_is_minus_one(v):
    return -1 if v is None else v     # peers say None where kwire says -1 (no timestamp, no producer)


def read_peer(name: str, data: bytes) -> Tuple[list, List[dict]]:
    """The peer's records and the batch fields it exposes (named as kwire names them)."""
    records, batches = [], []
    mem = PEERS[name].memory_records(data)
    while mem.has_next():
        batch = mem.next_batch()
        magic = 2 if type(batch).__name__ == "DefaultRecordBatch" else 1
        assert batch.validate_crc(), f"{name} rejects the CRC of batch {len(batches)}"
        fields = PEER_BATCH_FIELDS[name, magic].items()
        batches.append({k: _none_is_minus_one(g(batch) if callable(g) else getattr(batch, g)) for k, g in fields})
        for r in batch:
            if hasattr(r, "validate_crc"):
                assert r.validate_crc(), f"{name} rejects the CRC of the record at {r.offset}"
            records.append((r.offset, _none_is_minus_one(r.timestamp), _none_is_minus_one(r.timestamp_type),
                            r.key, r.value, tuple(map(tuple, r.headers))))
    return records, batches


def assert_peer_agrees(reader: str, data: bytes, records: list, batches: List[dict]) -> None:
    peer_records, peer_batches = read_peer(reader, data)
    assert peer_records == records
    assert len(peer_batches) == len(batches)
    for i, (theirs, ours) in enumerate(zip(peer_batches, batches)):
        assert theirs == {k: ours[k] for k in theirs}, f"batch {i}"


# ------------------------------------------------- 1 + 2: records both ways
FORMATS = [(2, c) for c in CODECS] + [(m, c) for m in (0, 1) for c in LEGACY_CODECS]


def _interop_cases():
    cases = []
    for magic, codec in FORMATS:
        for writer in WRITERS:
            for reader in PEERS:
                # aiokafka neither writes nor reads LZ4 in magic 0 (KAFKA-3160's broken
                # frame checksum; it raises UnsupportedCodecError): kafka-python covers it.
                if magic == 0 and codec == "lz4" and "aiokafka" in (writer, reader):
                    continue
                cases.append(pytest.param(writer, reader, magic, codec,
                                          id=f"{writer}->{reader}-v{magic}-{codec or 'none'}"))
    return cases


@pytest.mark.parametrize("writer,reader,magic,codec", _interop_cases())
def test_records_agree(writer, reader, magic, codec):
    """kafka-python / aiokafka batches read by kwire, kwire batches read by them,
    every codec and magic: same records and batch fields everywhere."""
    data, expected = build_buffer(writer, magic, codec)
    records, batches = read_kwire(data)
    assert records == expected
    # every batch really carries the codec (peers fall back to none when it does not pay)
    assert {b["compression"] for b in batches} == {CODEC_IDS[codec]}
    if magic == 2:
        assert [(b["producer_id"], b["producer_epoch"], b["base_sequence"], b["is_transactional"]) for b in batches] == [
            (s.get("producer_id", -1), s.get("producer_epoch", -1), s.get("base_sequence", -1),
             s.get("transactional", False)) for s in V2_PLAN]
    assert_peer_agrees(reader, data, records, batches)


CONTROL_COMMIT = (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5))    # key: version 0, commit; value: coordinator epoch 5
KWIRE_V2_FEATURES = {
    "log-append-time": dict(log_append_time=True, max_timestamp=BASE_TS + 10**6),
    "leader-epoch": dict(partition_leader_epoch=7),
    "max-producer-fields": dict(producer_id=2**63 - 1, producer_epoch=2**15 - 1, base_sequence=2**31 - 10),
    "control-commit": dict(is_control=True, transactional=True, producer_id=99, producer_epoch=2, base_sequence=-1),
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
@pytest.mark.parametrize("feature", KWIRE_V2_FEATURES)
@pytest.mark.parametrize("reader", PEERS)
def test_kwire_batch_fields_read_by_peers(reader, feature, codec):
    """v2 header fields only kwire writes here: LogAppendTime, leader epoch,
    extreme producer id/epoch/sequence, a transactional commit marker."""
    kw = KWIRE_V2_FEATURES[feature]
    if feature == "control-commit":
        recs = [(CONTROL_COMMIT[0], CONTROL_COMMIT[1], [], BASE_TS)]
    else:
        recs = make_records(60, 7, 2)
    data = write_kwire(2, codec, BASE_OFFSET, recs, **kw)
    records, batches = read_kwire(data, include_control=True)
    expected = expected_tuples(recs, BASE_OFFSET, 2)
    if kw.get("log_append_time"):
        expected = [(o, kw["max_timestamp"], 1, k, v, h) for o, _t, _tt, k, v, h in expected]
    assert records == expected
    assert batches[0]["compression"] == CODEC_IDS[codec]
    for field in ("producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch", "is_control"):
        if field in kw:
            assert batches[0][field] == kw[field]
    if feature == "control-commit":
        assert kwire.decode(data).records == []             # skipped unless asked for
    assert_peer_agrees(reader, data, records, batches)


@pytest.mark.parametrize("writer", PEERS)
def test_v1_wrapper_with_producer_offsets(writer):
    """A compressed magic-1 message set as a producer builds it: wrapper offset 0,
    inner offsets 0..n-1. Java (AbstractLegacyRecordBatch.DeepRecordsIterator makes
    offsets absolute only when wrapper - last inner >= 0), kafka-python and aiokafka
    keep the inner offsets, and so must kwire (it once gave -(n-1)..0, and its
    default min_offset=-1 then dropped all but the last two records)."""
    recs = make_records(6, 0, 1)
    data = write_peer(PEERS[writer], 1, "gzip", 0, recs, broker_offsets=False)
    peer_records, _ = read_peer(writer, data)
    assert peer_records == expected_tuples(recs, 0, 1)
    assert as_tuples(kwire.decode(data).records) == peer_records


# ------------------------------------------------------- 4: snappy framing
def compressed_payload(batch: bytes, magic: int) -> bytes:
    """The compressed bytes inside the first batch (v2) or compressed wrapper (v0/v1)."""
    if magic == 2:
        (length,) = struct.unpack_from(">i", batch, 8)
        return batch[V2_HEADER_SIZE:12 + length]
    pos = 18 if magic == 0 else 26                       # offset, size, crc, magic, attributes[, timestamp]
    (key_len,) = struct.unpack_from(">i", batch, pos)
    pos += 4 + max(key_len, 0)
    (value_len,) = struct.unpack_from(">i", batch, pos)
    return batch[pos + 4:pos + 4 + value_len]


def xerial_blocks(payload: bytes) -> int:
    assert payload[:8] == XERIAL_MAGIC
    pos, blocks = 16, 0
    while pos < len(payload):
        pos += 4 + struct.unpack_from(">i", payload, pos)[0]
        blocks += 1
    assert pos == len(payload)
    return blocks


MAGICS = [0, 1, 2]
ONE_BATCH = [dict(n=12)]


@pytest.mark.parametrize("reader", PEERS)
@pytest.mark.parametrize("magic", MAGICS, ids=lambda m: f"v{m}")
def test_kwire_snappy_is_xerial_framed(reader, magic):
    """kwire writes xerial-framed snappy in 32 KiB blocks (as the Java client does);
    kafka-python (python-snappy) and aiokafka (cramjam) unframe it."""
    data, expected = build_buffer("kwire", magic, "snappy", ONE_BATCH, big=True)
    assert xerial_blocks(compressed_payload(data, magic)) > 1
    records, batches = read_kwire(data)
    assert records == expected
    assert_peer_agrees(reader, data, records, batches)


@pytest.mark.parametrize("framing", ["raw", "xerial"])
@pytest.mark.parametrize("magic", MAGICS, ids=lambda m: f"v{m}")
@pytest.mark.parametrize("writer", PEERS)
def test_peer_snappy_read_by_kwire(writer, magic, framing, monkeypatch):
    """Raw (unframed) snappy, which the peers' codecs write with xerial_compatible=False,
    and their multi-block xerial framing, both read by kwire."""
    if framing == "raw":
        for module in PEERS[writer].codec_modules:
            monkeypatch.setattr(module, "snappy_encode",
                                functools.partial(module.snappy_encode, xerial_compatible=False))
    data, expected = build_buffer(writer, magic, "snappy", ONE_BATCH, big=True)
    payload = compressed_payload(data, magic)
    if framing == "raw":
        assert payload[:8] != XERIAL_MAGIC
    else:
        assert xerial_blocks(payload) > 1
    records, batches = read_kwire(data)
    assert records == expected
    assert_peer_agrees(writer, data, records, batches)


# ------------------------------------------- 3: librdkafka through both brokers
FETCH_VERSION = 11          # the newest Fetch version without flexible encoding or topic ids
RDKAFKA_RECORDS = 2000


def kafka_call(sock: socket.socket, request, response_class, version: int, correlation_id: int):
    """One request/response over a plain socket, encoded and decoded by kafka-python."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="kwire-interop")
    sock.sendall(request.encode(header=True, framed=True))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    response = response_class.decode(recv_exact(sock, size), version=version, header=True)
    assert response.header.correlation_id == correlation_id
    return response


def fetch_raw(broker, topic: str, partition: int = 0) -> bytes:
    """Every record batch of the partition, exactly as the broker sends them: Fetch
    from offset 0 until the high watermark, keeping each response's whole batches."""
    Topic = FetchRequest.FetchTopic
    chunks, offset, high_watermark, correlation_id = [], 0, None, 0
    with socket.create_connection((broker.host, broker.port), timeout=15) as sock:
        while high_watermark is None or offset < high_watermark:
            correlation_id += 1
            request = FetchRequest(
                replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=32 << 20, isolation_level=0,
                topics=[Topic(topic=topic, partitions=[Topic.FetchPartition(
                    partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])
            response = kafka_call(sock, request, FetchResponse, FETCH_VERSION, correlation_id)
            assert response.error_code == 0
            (part,) = [p for t in response.responses if t.topic == topic for p in t.partitions]
            assert part.partition_index == partition and part.error_code == 0
            high_watermark = part.high_watermark
            data = bytes(part.records or b"")
            split = kwire.split_batches(data)
            assert split.consumed > 0 or offset >= high_watermark, f"no whole batch at offset {offset}"
            chunks.append(data[:split.consumed])
            offset = split.next_offset if split.next_offset is not None else offset
    return b"".join(chunks)


def rdkafka_messages(n: int):
    """(key, value, headers, timestamp) for librdkafka; timestamp 0 means "now"."""
    for i in range(n):
        key = None if i % 7 == 3 else b"" if i % 19 == 8 else b"key-%d" % (i % 50)
        value = None if i % 11 == 5 else b"" if i % 17 == 6 else b"librdkafka-%d|" % i + b"payload " * (4 + i % 8)
        headers = None if i % 3 == 0 else [] if i % 9 == 1 else [("trace", b"t%d" % i), ("null", None), ("ключ", b"")]
        ts = 0 if i % 4 == 0 else BASE_TS + i
        yield key, value, headers, ts


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_librdkafka_batches_from_the_broker(broker, codec, idempotent):
    """librdkafka produces with compression.type=<codec>; the batches fetched raw
    from the broker decode in kwire to what a librdkafka consumer reads, and carry
    that codec."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"interop-{codec or 'none'}-{'idem' if idempotent else 'plain'}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(15)

    # Idempotent producing works on Tansu 0.6.0 too: librdkafka negotiates
    # InitProducerId v3+, and only v0-v2 fail there.
    sent = list(rdkafka_messages(RDKAFKA_RECORDS))
    failures = []
    produce_start_ms = int(time.time() * 1000)
    with ck.Producer({
        "bootstrap.servers": broker.bootstrap, "compression.type": codec or "none",
        "enable.idempotence": idempotent, "acks": "all", "linger.ms": 20, "batch.num.messages": 300,
        "error_cb": failures.append,
    }) as producer:
        for key, value, headers, ts in sent:
            producer.produce(topic, value=value, key=key, headers=headers, timestamp=ts, partition=0,
                             on_delivery=lambda err, _msg: err and failures.append(err))
        assert producer.flush(20) == 0 and not failures, failures
    produce_end_ms = int(time.time() * 1000)

    ts_types = {ck.TIMESTAMP_NOT_AVAILABLE: -1, ck.TIMESTAMP_CREATE_TIME: 0, ck.TIMESTAMP_LOG_APPEND_TIME: 1}
    consumed = []
    with ck.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": topic, "enable.auto.commit": False,
        "check.crcs": True, "fetch.wait.max.ms": 100,
    }) as consumer:
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(consumed) < RDKAFKA_RECORDS and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                consumed.append((m.offset(), ts, ts_types[ts_type], m.key(), m.value(),
                                 tuple(m.headers() or ())))
    assert len(consumed) == RDKAFKA_RECORDS

    data = fetch_raw(broker, topic)
    records, batches = read_kwire(data)
    assert records == consumed
    # and it is what was sent, in order (librdkafka stamps timestamp 0 with its clock)
    assert [r[3:] for r in records] == [(k, v, tuple(h or ())) for k, v, h, _ts in sent]
    assert [r[1] for r, m in zip(records, sent) if m[3]] == [m[3] for m in sent if m[3]]
    assert all(produce_start_ms <= r[1] <= produce_end_ms for r, m in zip(records, sent) if not m[3])

    # librdkafka really wrote the codec, in v2 batches (several of them)
    assert len(batches) > 1
    assert {(b["magic"], b["compression"]) for b in batches} == {(2, CODEC_IDS[codec])}
    if codec == "snappy":
        # librdkafka writes raw snappy, unlike the Java client's xerial framing
        assert all(compressed_payload(v.tobytes(), 2)[:8] != XERIAL_MAGIC for v in kwire.split_batches(data).batches)
    if idempotent:
        (pid,) = {b["producer_id"] for b in batches}
        assert pid >= 0 and {b["producer_epoch"] for b in batches} == {0}
        assert [b["base_sequence"] for b in batches] == [b["base_offset"] for b in batches]
    else:
        assert {(b["producer_id"], b["producer_epoch"], b["base_sequence"]) for b in batches} == {(-1, -1, -1)}
    for reader in PEERS:
        assert_peer_agrees(reader, data, records, batches)
