"""The codec benchmark workload and the per-client adapters, shared by
``test_codec_bench.py`` (pytest-benchmark) and ``compare_codecs.py``.

Two shapes of ``n_batches`` v2 record batches of 500 records, concatenated
as a Fetch response carries them:

- ``standard``: each record a 16-byte key, a 100-byte JSON-like value that
  varies per record and one header;
- ``mixed``: a fifth of the keys null, the others 6 to 12 bytes; zero, one
  or three headers (one with a null value); values of 0 to 4,000 bytes
  (0, 8, 40, 100, 100, 300, 1000, 4000 chosen at random: about 690 bytes
  on average). ``benchmarks/icount.py``'s mixed paths use the same records.

The buffer of a codec and shape is built once per process with kwire's
builder and cached; its first batch is checked against kafka-python's
decoder.

Adapters: ``DECODERS[name](bufs)`` (a list of fetch buffers, see
``fetches``; by default the one whole buffer) and
``ENCODERS[name](batches, codec)`` return a zero-argument callable that does
the timed work (set-up such as making decoders or splitting the buffer stays
outside). A decode callable returns the number of records it produced; an encode callable returns the list
of encoded batches. Every decoder checks CRCs and, except the columnar one
(whose point is to do no per-record Python work), touches offset, timestamp,
key, value and headers of every record with the same loop (``touch``).
"""

from __future__ import annotations

import functools
import random
import threading
from typing import Callable, Dict, List, Optional, Tuple

import kwire

RECORDS_PER_BATCH = 500
KEY_SIZE = 16
VALUE_SIZE = 100
HEADERS = [("content-type", b"application/json")]
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PEER_BATCH_SIZE = 1 << 24  # builder size limit for the peers: never hit

SHAPES = ("standard", "mixed")

Headers = List[Tuple[str, Optional[bytes]]]
# (offset delta, timestamp, key, value, headers): the order every encode loop unpacks.
Rec = Tuple[int, int, Optional[bytes], bytes, Headers]

_EVENTS = (b"click", b"view", b"purchase", b"signup", b"logout", b"search")


def _text(rng: random.Random, n: int) -> bytes:
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz     ") for _ in range(n))


@functools.lru_cache(maxsize=None)
def records(n_batches: int, shape: str = "standard") -> List[List[Rec]]:
    """The records of a shape, one list per batch (deterministic)."""
    if shape == "mixed":
        flat = mixed_records(n_batches * RECORDS_PER_BATCH)
        return [[(d, ts, key, value, headers) for d, (ts, key, value, headers) in enumerate(flat[s:s + RECORDS_PER_BATCH])]
                for s in range(0, len(flat), RECORDS_PER_BATCH)]
    if shape != "standard":
        raise ValueError(f"shape {shape!r}: not one of {SHAPES}")
    rng = random.Random(42)
    filler = _text(rng, 4096)
    out = []
    for b in range(n_batches):
        batch = []
        for d in range(RECORDS_PER_BATCH):
            i = b * RECORDS_PER_BATCH + d
            r = rng.getrandbits(32)
            key = b"k-%014d" % i
            head = b'{"id": %d, "user": "user_%05d", "event": "%s", "amount": %d.%02d, "note": "' % (
                i, r % 100000, _EVENTS[r % 6], r % 1000, r % 100)
            pos = r % 3000
            value = (head + filler[pos:pos + VALUE_SIZE])[:VALUE_SIZE - 2] + b'"}'
            batch.append((d, BASE_TIMESTAMP + i, key, value, HEADERS))
        out.append(batch)
    assert len(out[0][0][2]) == KEY_SIZE and len(out[0][0][3]) == VALUE_SIZE
    return out


_HEADER_SETS = ([], [("content-type", b"application/json")],
                [("content-type", b"text/plain"), ("trace-id", b"0123456789abcdef"), ("retry", None)])
_SIZES = (0, 8, 40, 100, 100, 300, 1000, 4000)


def mixed_records(n: int, seed: int = 15) -> List[Tuple[int, Optional[bytes], bytes, Headers]]:
    """The mixed shape as (timestamp, key or None, value, headers): null keys
    (a fifth), zero/one/three headers, values of 0 to 4000 bytes."""
    rng = random.Random(seed)
    text = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz {}:,\"0123456789") for _ in range(8192))
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else b"user-%d" % rng.randrange(10 ** rng.randrange(1, 8))
        size = rng.choice(_SIZES)
        pos = rng.randrange(len(text) - size + 1)
        headers = [(k, v) for k, v in rng.choice(_HEADER_SETS)]   # new pairs: no reuse of encoded headers
        out.append((BASE_TIMESTAMP + i * 7, key, text[pos:pos + size], headers))
    return out


def n_records(n_batches: int) -> int:
    return n_batches * RECORDS_PER_BATCH


def _kwire_codec(codec: str):
    return None if codec == "none" else codec


# ----------------------------------------------------------------- encoders
def encode_kwire(batches: List[List[Rec]], codec: str) -> Callable[[], List[bytes]]:
    comp = _kwire_codec(codec)
    Builder = kwire.RecordBatchBuilder

    def run():
        out = []
        for i, recs in enumerate(batches):
            b = Builder(comp, base_offset=i * RECORDS_PER_BATCH)
            for _, ts, key, value, headers in recs:
                b.append(value, key, headers, ts)
            out.append(b.build())
        return out

    return run


def encode_aiokafka(batches: List[List[Rec]], codec: str) -> Callable[[], List[bytes]]:
    # What aiokafka's producer (message_accumulator.BatchBuilder) does.
    from aiokafka.record._crecords import DefaultRecordBatchBuilder as Builder

    cid = CODEC_IDS[codec]

    def run():
        out = []
        for recs in batches:
            b = Builder(2, cid, 0, -1, -1, 0, PEER_BATCH_SIZE)
            for off, ts, key, value, headers in recs:
                b.append(off, ts, key, value, headers)
            out.append(b.build())
        return out

    return run


def encode_kafka_python(batches: List[List[Rec]], codec: str) -> Callable[[], List[bytes]]:
    # What kafka-python's producer (MemoryRecordsBuilder) does.
    from kafka.record.default_records import DefaultRecordBatchBuilder as Builder

    cid = CODEC_IDS[codec]

    def run():
        out = []
        for recs in batches:
            b = Builder(2, cid, False, -1, -1, -1, PEER_BATCH_SIZE)
            for off, ts, key, value, headers in recs:
                b.append(off, ts, key, value, headers)
            out.append(b.build())
        return out

    return run


ENCODERS: Dict[str, Callable] = {
    "kwire": encode_kwire,
    "aiokafka": encode_aiokafka,
    "kafka-python": encode_kafka_python,
}


# -------------------------------------------------------------- the buffers
@functools.lru_cache(maxsize=2)
def buffer(codec: str, n_batches: int, shape: str = "standard") -> bytes:
    """The Fetch-response-like buffer of a codec and shape (built once, then
    cached: the last two, since a mixed buffer of 2,000 batches is 700 MB)."""
    batches = records(n_batches, shape)
    buf = b"".join(encode_kwire(batches, codec)())
    _check_with_kafka_python(buf, batches[0])
    return buf


def _check_with_kafka_python(buf: bytes, first: List[Rec]) -> None:
    from kafka.record import MemoryRecords

    batch = MemoryRecords(buf).next_batch()
    assert batch.validate_crc(), "kafka-python: bad CRC on kwire's first batch"
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert got == [(d, ts, key, value, headers) for d, ts, key, value, headers in first], \
        "kafka-python decodes kwire's first batch differently"


def halves(buf: bytes) -> Tuple[memoryview, memoryview]:
    """The buffer cut in two at the batch boundary nearest its middle."""
    cut = 0
    for mv in kwire.split_batches(buf).batches:
        if cut + len(mv) > len(buf) // 2:
            break
        cut += len(mv)
    view = memoryview(buf)
    return view[:cut], view[cut:]


def check_encoded(encoded: List[bytes], batches: List[List[Rec]]) -> None:
    """Whatever a client encoded must decode (with kwire) to the workload."""
    assert len(encoded) == len(batches)
    for i in (0, len(batches) - 1):
        recs = kwire.Decoder().decode(encoded[i]).records
        got = [(r.timestamp, r.key, r.value, list(r.headers)) for r in recs]
        assert got == [(ts, key, value, headers) for _, ts, key, value, headers in batches[i]]


# ----------------------------------------------------------------- decoders
def fetches(buf: bytes, max_bytes=None) -> List[bytes]:
    """The buffer as the Fetch responses that would carry it: whole (the
    issue's workload) or cut at batch boundaries into pieces of at most
    ``max_bytes`` (at least one batch each)."""
    if not max_bytes:
        return [buf]
    out, start, size = [], 0, 0
    for mv in kwire.split_batches(buf).batches:
        if size and size + len(mv) > max_bytes:
            out.append(buf[start:start + size])
            start, size = start + size, 0
        size += len(mv)
    out.append(buf[start:start + size])
    return out


def touch(records) -> int:
    """What a consumer does with each record: read its fields."""
    n = 0
    for r in records:
        t = (r.offset, r.timestamp, r.key, r.value, r.headers)  # noqa: F841
        n += 1
    return n


def _over(one: Callable[[object], int], bufs) -> Callable[[], int]:
    """The timed callable: ``one`` on every fetch buffer, records summed."""
    return lambda: sum(map(one, bufs))


def decode_kwire(bufs: List[bytes]) -> Callable[[], int]:
    # Batch by batch, as the aiokafka and kafka-python adapters walk a buffer
    # (and as a consumer handing out max_poll_records at a time would): only
    # one batch's records are alive at once.
    dec = kwire.Decoder(check_crcs=True)

    def one(buf):
        return sum(touch(dec.decode(mv).records) for mv in kwire.split_batches(buf).batches)

    return _over(one, bufs)


def decode_kwire_columnar(bufs: List[bytes]) -> Callable[[], int]:
    dec = kwire.ColumnarDecoder(check_crcs=True)
    return _over(lambda buf: dec.decode(buf).record_batch.num_rows, bufs)


def decode_kwire_columnar_2threads(bufs: List[bytes]) -> Callable[[], int]:
    # Two halves (of the one buffer, or of the list of fetches), one thread
    # and one decoder each: the calling thread takes the first.
    if len(bufs) == 1:
        parts = [[h] for h in halves(bufs[0])]
    else:
        parts = [bufs[:len(bufs) // 2], bufs[len(bufs) // 2:]]
    runs = [decode_kwire_columnar(part) for part in parts]
    rows = [0, 0]

    def one(i):
        rows[i] = runs[i]()

    def run():
        t = threading.Thread(target=one, args=(1,))
        t.start()
        one(0)
        t.join()
        return rows[0] + rows[1]

    return run


def decode_aiokafka(bufs: List[bytes]) -> Callable[[], int]:
    # aiokafka.consumer.fetcher.PartitionRecords._unpack_records, check_crcs=True.
    from aiokafka.record._crecords import MemoryRecords

    def one(buf):
        n = 0
        records = MemoryRecords(buf)
        while records.has_next():
            batch = records.next_batch()
            if not batch.validate_crc():
                raise ValueError("aiokafka: invalid CRC")
            n += touch(batch)
        return n

    return _over(one, bufs)


def decode_kafka_python(bufs: List[bytes]) -> Callable[[], int]:
    # kafka.consumer.fetcher (PartitionRecords._unpack_records), check_crcs=True.
    from kafka.record import MemoryRecords

    def one(buf):
        n = 0
        records = MemoryRecords(buf)
        batch = records.next_batch()
        while batch is not None:
            if not batch.validate_crc():
                raise ValueError("kafka-python: invalid CRC")
            n += touch(batch)
            batch = records.next_batch()
        return n

    return _over(one, bufs)


DECODERS: Dict[str, Callable] = {
    "kwire": decode_kwire,
    "kwire-columnar": decode_kwire_columnar,
    "kwire-columnar-2t": decode_kwire_columnar_2threads,
    "aiokafka": decode_aiokafka,
    "kafka-python": decode_kafka_python,
}


def client_of(adapter: str) -> str:
    """The installable client an adapter belongs to (for ``--skip``)."""
    return "kwire" if adapter.startswith("kwire") else adapter


def check_peers_compiled() -> None:
    """Fail loudly if aiokafka's compiled record code is not what we run."""
    from aiokafka.record import _crecords, default_records, memory_records

    assert _crecords.__file__.endswith("__init__.py")
    assert default_records.DefaultRecordBatchBuilder is _crecords.DefaultRecordBatchBuilder
    assert memory_records.MemoryRecords is _crecords.MemoryRecords
    mod = _crecords.default_records.__file__
    assert mod.endswith(".so"), f"aiokafka record code is not compiled: {mod}"
