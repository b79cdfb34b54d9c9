"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/).

    python tests/fuzz/make_corpus.py            # rewrite every seed
    python tests/fuzz/make_corpus.py --check    # exit 1 if a seed file is missing

Seeds are real inputs, each prefixed with its target's parameter bytes
(targets.py documents the layouts):

* ``records``: batches of every format kwire reads, made by kwire's
  builders (v2 with every codec, control and transactional batches, legacy
  v0/v1 message sets with every codec they allow), by an independent writer
  (kafka-python's pure Python builders), and captured from the Tansu broker
  (the record sets inside tests/protocol/captured's Fetch responses);
* ``v07``: Kafka 0.7 message sets, plain and compressed;
* ``compression``: the payload of every codec and framing;
* ``protocol``: the response frames captured from Tansu, and frames of the
  responses kwire reads most (Fetch, Metadata, Produce, ListOffsets,
  ApiVersions, FindCoordinator, JoinGroup, SyncGroup, OffsetFetch,
  OffsetCommit, InitProducerId...) filled with values and records, at their
  oldest, first flexible and newest versions; the consumer protocol's
  subscription and assignment.

Seeds are deterministic except where a codec library's output changes with
its version; the files in the repository are what the fuzzers start from.
Names say what a seed is. Each is small (the whole corpus stays well under
1 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import uuid
from typing import Any, Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
CORPUS = os.path.join(HERE, "corpus")
CAPTURED = os.path.join(TESTS, "protocol", "captured")
sys.path.insert(0, HERE)

import kwire  # noqa: E402
from kwire import compression  # noqa: E402
from kwire.protocol import APIS, MESSAGES, decode_response, response_header_version  # noqa: E402

import targets  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
HEADERS = [("trace", b"abc"), ("empty", b""), ("null", None)]


# ---------------------------------------------------------------- records
def _v2(codec: str, base_offset: int = 0, n: int = 3, **kw: Any) -> bytes:
    b = kwire.RecordBatchBuilder(codec, base_offset=base_offset, **kw)
    for i in range(n):
        b.append(b"value-%d" % i * (1 + i), key=None if i == 1 else b"key-%d" % i,
                 headers=HEADERS[: i + 1] if i else None, timestamp=1_700_000_000_000 + i)
    return b.build()


def _control(commit: bool) -> bytes:
    b = kwire.RecordBatchBuilder(None, base_offset=9, producer_id=42, producer_epoch=1, transactional=True,
                                 is_control=True)
    b.append(struct.pack(">hi", 0, 3), key=struct.pack(">hh", 0, 1 if commit else 0), timestamp=1_700_000_000_009)
    return b.build()


def _legacy(magic: int, codec: str, base_offset: int = 0) -> bytes:
    b = kwire.LegacyMessageSetBuilder(magic, codec, base_offset=base_offset)
    for i in range(3):
        b.append(b"legacy-%d" % i, key=None if i == 1 else b"k%d" % i, timestamp=1_600_000_000_000 + i)
    return b.build()


def _kafka_python(magic: int, codec: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    if magic == 2:
        b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
        for i in range(3):
            b.append(i, 1_700_000_000_000 + i, b"kp-%d" % i, b"kafka-python-%d" % i, [("h", b"%d" % i)])
    else:
        b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
        for i in range(3):
            b.append(i, 1_600_000_000_000 + i if magic else None, b"kp-%d" % i, b"kafka-python-%d" % i)
    return bytes(b.build())


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _captured_records(name: str) -> bytes:
    meta = json.loads(_read(os.path.join(CAPTURED, "index.json")))[name]
    frame = _read(os.path.join(CAPTURED, name + ".bin"))
    _, resp = decode_response(frame, MESSAGES[meta["response"]], meta["version"])
    return bytes(resp.responses[0].partitions[0].records)


def _rec(flags: int = 1, min_offset: int = 0, max_bytes: int = 0, limit: int = 0) -> bytes:
    return bytes([flags, min_offset, max_bytes, limit])


def records_seeds() -> Dict[str, bytes]:
    out: Dict[str, bytes] = {}
    for codec in CODECS:
        out[f"v2-{codec}"] = _rec() + _v2(codec)
    out["v2-none-crc-off-bytearray"] = _rec(flags=0 | 4) + _v2("none", base_offset=100)
    out["v2-zstd-memoryview-min-offset"] = _rec(flags=1 | 8, min_offset=4) + _v2("zstd", n=6)
    out["v2-lz4-max-bytes-micros"] = _rec(flags=1 | 16, max_bytes=4) + _v2("lz4") + _v2("lz4", base_offset=3)
    out["v2-gzip-small-limit"] = _rec(limit=3) + _v2("gzip", n=8)
    out["v2-idempotent-snappy"] = _rec() + _v2("snappy", base_offset=5, producer_id=7, producer_epoch=2,
                                              base_sequence=11, partition_leader_epoch=4)
    out["v2-log-append-time"] = _rec() + _v2("none", log_append_time=True, max_timestamp=1_800_000_000_000)
    out["v2-control-commit-included"] = _rec(flags=1 | 2 | 32) + _control(True)
    out["v2-control-abort-skipped"] = _rec() + _v2("none", producer_id=42, transactional=True) + _control(False)
    out["v2-read-committed-interleaved"] = _rec(max_bytes=2 << 4) + (   # max_records 1
        _v2("none", producer_id=42, transactional=True) + _v2("lz4", base_offset=3, producer_id=43, transactional=True)
        + _v2("zstd", base_offset=6, producer_id=42, transactional=True) + _control(False)
        + _v2("none", base_offset=10, producer_id=43, transactional=True))
    out["v2-two-batches-and-a-cut-one"] = _rec() + _v2("none") + _v2("gzip", base_offset=3) + _v2("none", 6)[:40]
    for magic in (0, 1):
        for codec in ("none", "gzip", "snappy", "lz4"):
            out[f"v{magic}-{codec}"] = _rec() + _legacy(magic, codec, base_offset=10)
    out["v1-then-v2"] = _rec() + _legacy(1, "none") + _v2("none", base_offset=3)
    for magic, codec, name in ((2, 0, "none"), (2, 1, "gzip"), (2, 2, "snappy"), (2, 3, "lz4"), (2, 4, "zstd"),
                               (1, 2, "snappy"), (0, 1, "gzip")):
        out[f"kafka-python-v{magic}-{name}"] = _rec() + _kafka_python(magic, codec)
    for name in ("fetch_v4", "fetch_v12"):
        out[f"tansu-{name}-records"] = _rec() + _captured_records(name)
    return out


# -------------------------------------------------------------------- v07
def v07_seeds() -> Dict[str, bytes]:
    payloads = [b"hello", b"", b"0.7 message " * 4]
    out = {
        "plain-magic1": bytes([1, 0, 0]) + kwire.encode_v07(payloads),
        "plain-magic0": bytes([1, 2, 0]) + kwire.encode_v07(payloads, magic=0),
        "gzip": bytes([1, 1, 0]) + kwire.encode_v07(payloads, "gzip"),
        "snappy": bytes([1 | 8, 3, 0]) + kwire.encode_v07(payloads, "snappy"),
        "gzip-then-plain-small-limit": bytes([1 | 4, 0, 2]) + kwire.encode_v07(payloads, "gzip")
        + kwire.encode_v07([b"tail"]),
        "near-int64-max-cut": bytes([0, 5, 0]) + kwire.encode_v07(payloads) + kwire.encode_v07([b"cut"])[:7],
    }
    return out


# ------------------------------------------------------------ compression
def compression_seeds() -> Dict[str, bytes]:
    data = b"".join(b'{"id": %d, "name": "record-%d"}\n' % (i, i) for i in range(40))
    out = {}
    for i, codec in enumerate(targets.CODECS):
        magics = (0, 1, 2) if codec == 3 else ((2,) if codec == 4 else (1, 2))
        for magic in magics:
            try:
                payload = compression.compress(codec, data, magic)
            except kwire.KwireError:   # 0 (none) and 5 (unknown) compress nothing
                payload = data
            out[f"codec{codec}-magic{magic}"] = bytes([i, magic, 0]) + payload
    out["zstd-bomb-small-limit"] = bytes([3, 2, 4]) + compression.compress(4, b"\0" * 200_000, 2)
    out["snappy-raw-block"] = bytes([1, 2, 0]) + _snappy_raw(data)
    return out


def _snappy_raw(data: bytes) -> bytes:
    import snappy

    return snappy.compress(data)


# --------------------------------------------------------------- protocol
def _model(name: str) -> Any:
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import gen_protocol

    return gen_protocol, gen_protocol.Message(gen_protocol.load(name))


_RECORDS = None


def _value(gp: Any, f: Any, version: int, depth: int) -> Any:
    global _RECORDS
    t = f.elem
    if f.struct is not None:
        return _fill(gp, f.struct, version, depth + 1)
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return 1 + depth
    if t == "bool":
        return True
    if t == "float64":
        return 0.5
    if t == "string":
        return f"{f.attr[:6]}-{depth}"
    if t == "uuid":
        return uuid.UUID(int=0x1234 + depth)
    if t == "records":
        if _RECORDS is None:
            _RECORDS = _v2("lz4", n=2) + _v2("none", base_offset=2, n=1)
        return _RECORDS
    if t == "bytes":
        return b"bytes-%d" % depth
    raise ValueError(t)


def _fill(gp: Any, struct_: Any, version: int, depth: int = 0) -> Dict[str, Any]:
    values: Dict[str, Any] = {}
    for f in struct_.fields:
        if not gp.within(version, f.versions):
            continue
        v = _value(gp, f, version, depth)
        values[f.attr] = ([v, v] if depth < 2 else [v]) if f.is_array else v
    return {"__struct__": struct_.name, **values}


def _build(msg_name: str, values: Dict[str, Any]) -> Any:
    root = MESSAGES[msg_name]
    name = values["__struct__"]
    cls = root if name == msg_name else getattr(root, name)
    obj = cls()
    for k, v in values.items():
        if k == "__struct__":
            continue
        if isinstance(v, dict):
            v = _build(msg_name, v)
        elif isinstance(v, list):
            v = [_build(msg_name, x) if isinstance(x, dict) else x for x in v]
        setattr(obj, k, v)
    return obj


def response_frame(api_key: int, version: int) -> bytes:
    """A filled response of ``api_key`` at ``version`` as a connection hands
    it over: correlation id, response header, body."""
    cls = APIS[api_key][1]
    gp, msg = _model(cls.__name__)
    obj = _build(cls.__name__, _fill(gp, msg.root, version))
    head = struct.pack(">i", 1) + (b"\0" if response_header_version(api_key, version) >= 1 else b"")
    return head + cls.encode_bytes(obj, version)


PROTOCOL_CASES: List[Tuple[str, Tuple[int, ...]]] = [
    ("Fetch", (4, 12, 18)),
    ("Metadata", (1, 9, 13)),
    ("Produce", (3, 9, 13)),
    ("ListOffsets", (1, 6)),
    ("ApiVersions", (0, 3)),
    ("FindCoordinator", (0, 4)),
    ("JoinGroup", (0, 9)),
    ("SyncGroup", (5,)),
    ("OffsetFetch", (1, 8)),
    ("OffsetCommit", (8,)),
    ("InitProducerId", (2,)),
    ("Heartbeat", (4,)),
    ("DescribeGroups", (6,)),
    ("AddPartitionsToTxn", (4,)),
    ("EndTxn", (5,)),
    ("OffsetForLeaderEpoch", (4,)),
]


def protocol_seeds() -> Dict[str, bytes]:
    from kwire import classic

    out: Dict[str, bytes] = {}
    keys = {cls.__name__: key for key, (_, cls) in APIS.items()}
    index = json.loads(_read(os.path.join(CAPTURED, "index.json")))
    for name, meta in sorted(index.items()):
        frame = _read(os.path.join(CAPTURED, name + ".bin"))
        out[f"tansu-{name}"] = bytes([keys[meta["response"]], meta["version"]]) + frame
    for api, versions in PROTOCOL_CASES:
        key = keys[api + "Response"]
        for v in versions:
            out[f"{api}-v{v}"] = bytes([key, v]) + response_frame(key, v)
    out["consumer-subscription"] = bytes([targets.EMBEDDED_SUBSCRIPTION, 0]) + classic.encode_subscription(
        ["t1", "t2"], owned=[("t1", 0), ("t1", 2)], generation=3, rack_id="rack", user_data=b"ud")
    assign = MESSAGES["ConsumerProtocolAssignment"]
    out["consumer-assignment"] = bytes([targets.EMBEDDED_ASSIGNMENT, 0]) + struct.pack(">h", assign.MAX_VERSION) + \
        assign.encode_bytes(assign(assigned_partitions=[assign.TopicPartition(topic="t1", partitions=[0, 2])],
                                   user_data=b"ud"), assign.MAX_VERSION)
    return out


def avro_seeds() -> Dict[str, bytes]:
    """Valid values of each of the target's schemas, bare and framed, one to
    three a seed (written with kwire's encoder of defaults), and a few cut."""
    from kwire.formats.avro.program import encode_value
    from kwire.formats.avro.schema import parse_schema

    samples = {
        0: {"n": None, "b": True, "i": -5, "l": 2**40, "f": 1.5, "db": -0.25, "by": b"\x00\xff", "s": "h\u00e9",
            "e": "C", "fx": b"abc", "arr": ["x", None], "nulls": [None, None],
            "m": {"k": {"x": 1, "y": "z"}, "j": {"x": -1, "y": None}},
            "logical": {"dec": b"\x01\x00", "fdec": b"\xff" * 5, "u": "0123abcd-0000-4000-8000-00000000ffff",
                        "dur": b"\x01\x00\x00\x00" * 3, "d": 19000, "ts": 1700000000000000}},
        1: {"i": 7, "s": b"old", "e": "D", "gone": {"a": [1.0, 2.5]}},
        2: [1, -2, 2**62],
        3: {"t": True, "f": False},
    }
    seeds: Dict[str, bytes] = {}
    for i, value in samples.items():
        reader, writer = targets.AVRO_SCHEMAS[i]
        data = encode_value(parse_schema(writer or reader), value)
        for n in (1, 3):
            for framed in (0, 0x80):
                body = (b"\x00\x00\x00\x00\x01" + data if framed else data) * n
                seeds[f"schema{i}-{n}{'-framed' if framed else ''}"] = bytes([i | framed, n - 1]) + body
        seeds[f"schema{i}-cut"] = bytes([i, 0]) + data[:-1]
    return seeds


def protobuf_seeds() -> Dict[str, bytes]:
    """A value of each of the target's schemas (random, from the tests'
    seeded generator), bare and framed, once or three times a seed; and cut,
    and after an unknown group."""
    import random

    seeds: Dict[str, bytes] = {}
    for i, (_, _, cls, proto2, schemas) in enumerate(targets._protobuf_schemas()):
        msg = schemas.fill(random.Random(i), cls())
        if proto2:
            msg.key = 1                                   # its required field
        data = msg.SerializeToString()[:200]
        for n in (1, 3):
            for framed in (0, 0x80):
                value = (b"\x00\x00\x00\x00\x01\x00" if framed else b"") + data
                seeds[f"schema{i}-{n}{'-framed' if framed else ''}"] = bytes([i | framed, n - 1]) + value * n
        seeds[f"schema{i}-cut"] = bytes([i, 0]) + data[:-1]
        seeds[f"schema{i}-unknown-group"] = bytes([i, 0]) + bytes([0x9B, 0x06, 0x08, 0x01, 0x9C, 0x06]) + data
    return seeds


SEEDS: Dict[str, Callable[[], Dict[str, bytes]]] = {
    "records": records_seeds,
    "v07": v07_seeds,
    "compression": compression_seeds,
    "protocol": protocol_seeds,
    "avro": avro_seeds,
    "protobuf": protobuf_seeds,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare with the files in the repository")
    args = ap.parse_args()
    bad = 0
    for tname, make in SEEDS.items():
        seeds = make()
        d = os.path.join(CORPUS, tname)
        os.makedirs(d, exist_ok=True)
        fn = targets.TARGETS[tname]
        for name, data in seeds.items():
            fn(data)   # every seed is valid input for its target
            path = os.path.join(d, name)
            if args.check:
                if not os.path.exists(path):
                    print(f"missing: {path}")
                    bad += 1
                continue
            with open(path, "wb") as f:
                f.write(data)
        print(f"{tname}: {len(seeds)} seeds, {sum(map(len, seeds.values()))} bytes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
