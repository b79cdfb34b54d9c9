"""The hostile broker itself: it serves kwire's real clients when nobody
scripts a fault, and each scripted reply does what it says (so a failing
hostile test points at kwire, not at the fixture)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

import kwire
from kwire.protocol import encode_request
from kwire.protocol import messages as m
from support.hostile_broker import (CLOSE, NEVER, Delay, Raw, RawFrame, bomb_batch, records_batch, set_magic,
                                    v2_batch, v2_record)
from support.wire import exchange, recv_exact


def test_round_trip_with_the_real_clients(broker):
    from kwire.consumer import Consumer
    from kwire.producer import Producer

    b = broker({"t": 2})
    b.log("t", 0).append(records_batch([b"a", b"b", b"c"]))
    with Producer(bootstrap_servers=b.bootstrap, linger_ms=0) as p:
        futs = [p.send("t", b"p%d" % i, partition=1) for i in range(5)]
        p.flush(5)
        assert [f.result(1).offset for f in futs] == [0, 1, 2, 3, 4]
    produced = b.received("Produce")
    assert produced and produced[0].body.topic_data[0].partition_data[0].index == 1
    assert b.received("InitProducerId"), "the producer is idempotent by default"
    got = {}
    with Consumer(bootstrap_servers=b.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([("t", 0), ("t", 1)])
        deadline = time.monotonic() + 5
        while sum(map(len, got.values())) < 8 and time.monotonic() < deadline:
            for tp, rs in c.poll(200).items():
                got.setdefault(tp.partition, []).extend(r.value for r in rs)
    assert got == {0: [b"a", b"b", b"c"], 1: [b"p%d" % i for i in range(5)]}
    assert not b.errors


def _metadata(b, **kw):
    return exchange(b.host, b.port, m.MetadataRequest(topics=None), 1, timeout=5, **kw)


def test_scripted_replies(broker):
    b = broker({"t": 1})
    b.on("Metadata", Raw(b"\x01\x02"))
    assert _metadata(b, correlation_id=7) == struct.pack(">i", 7) + b"\x01\x02"
    b.on("Metadata", RawFrame(b"\x00\x00\x00\x03abc"))
    assert _metadata(b) == b"abc"
    b.on("Metadata", Delay(0.3))
    t0 = time.monotonic()
    _metadata(b)
    assert time.monotonic() - t0 >= 0.3
    b.on("Metadata", CLOSE)
    with pytest.raises(ConnectionError):
        _metadata(b)
    b.on("Metadata", NEVER)
    with socket.create_connection((b.host, b.port), timeout=0.5) as sock:
        sock.sendall(b"".join(bytes(c) for c in encode_request(m.MetadataRequest(topics=None), 1, 1, "x")))
        with pytest.raises(socket.timeout):
            recv_exact(sock, 4)
    assert len(b.received("Metadata")) == 5


def test_hand_made_batches():
    recs = b"".join(v2_record(d, b"v%d" % d) for d in (0, 1, 2))
    assert [r.offset for r in kwire.decode(v2_batch(recs, 3, base_offset=10)).records] == [10, 11, 12]
    with pytest.raises(kwire.CorruptRecordError):
        kwire.decode(set_magic(records_batch([b"x"]), 7))
    bomb = bomb_batch("zstd", 64 << 20)
    assert len(bomb) < 64 << 10
    assert kwire.decode(bomb, max_decompressed_bytes=(64 << 20) + 100).records[0].value == bytes(64 << 20)
