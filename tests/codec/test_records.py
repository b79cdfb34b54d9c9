"""Decoding and encoding of every record format, checked field by field."""

from __future__ import annotations

import struct

import pytest

import kwire
from kwire import CorruptRecordError

from .helpers import (
    CODECS,
    LEGACY_CODECS,
    as_tuples,
    build_legacy,
    build_v2,
    columnar_tuples,
    fix_legacy_crc,
    fix_v2_crc,
    patch,
    sample_records,
)


def expected_v2(records, base_offset=0):
    return [
        (base_offset + i, ts, 0, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(records)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_v2_round_trip_every_codec(codec):
    recs = sample_records(40)
    data = build_v2(recs, codec, base_offset=1000)
    res = kwire.decode(data)
    assert as_tuples(res.records) == expected_v2(recs, 1000)
    assert res.consumed == len(data) and res.next_offset == 1040 and res.incomplete_size == 0
    assert columnar_tuples(kwire.decode_columnar(data).record_batch) == expected_v2(recs, 1000)
    (bi,) = res.batches
    assert bi.compression == CODECS.index(codec)


def test_v2_every_header_field():
    b = kwire.RecordBatchBuilder(
        "lz4",
        base_offset=5,
        producer_id=77,
        producer_epoch=3,
        base_sequence=12,
        transactional=True,
        partition_leader_epoch=9,
    )
    b.append(b"a", timestamp=100)
    b.append(b"b", timestamp=90)
    b.append(b"c", timestamp=140)
    data = b.build()
    res = kwire.decode(data)
    bi = res.batches[0]
    assert (bi.base_offset, bi.last_offset, bi.magic) == (5, 7, 2)
    assert (bi.producer_id, bi.producer_epoch, bi.base_sequence) == (77, 3, 12)
    assert bi.is_transactional and not bi.is_control
    assert bi.partition_leader_epoch == 9
    assert (bi.first_timestamp, bi.max_timestamp) == (100, 140)
    assert bi.record_count == 3 and bi.size_in_bytes == len(data) and bi.timestamp_type == 0
    assert [r.timestamp for r in res.records] == [100, 90, 140]
    assert all(r.batch is bi for r in res.records)


def test_v2_log_append_time_gives_max_timestamp_to_every_record():
    data = build_v2(sample_records(3), log_append_time=True, max_timestamp=999)
    for rows in (as_tuples(kwire.decode(data).records), columnar_tuples(kwire.decode_columnar(data).record_batch)):
        assert [(r[1], r[2]) for r in rows] == [(999, 1)] * 3


def test_null_key_value_and_headers():
    b = kwire.RecordBatchBuilder()
    b.append(None, key=None, headers=[("k", None), ("", b""), ("é", b"\x00\xff")])
    b.append(b"", key=b"", headers={"dict": b"v"})
    r1, r2 = kwire.decode(b.build()).records
    assert (r1.key, r1.value, r1.headers) == (None, None, (("k", None), ("", b""), ("é", b"\x00\xff")))
    assert (r2.key, r2.value, r2.headers) == (b"", b"", (("dict", b"v"),))
    rb = kwire.decode_columnar(b.build()).record_batch
    assert rb.column("key").to_pylist() == [None, b""]
    assert rb.column("headers").to_pylist()[1] == [{"key": "dict", "value": b"v"}]


def test_headers_null_in_columnar_when_record_has_none():
    b = kwire.RecordBatchBuilder()
    b.append(b"x")
    b.append(b"y", headers=[("a", b"1")])
    rb = kwire.decode_columnar(b.build()).record_batch
    assert rb.column("headers").to_pylist() == [None, [{"key": "a", "value": b"1"}]]
    assert rb.column("headers").null_count == 1


def test_invalid_utf8_header_key_is_replaced_identically_in_both_outputs():
    b = kwire.RecordBatchBuilder()
    b.append(b"x", headers=[(b"ok\xff\xc3(", b"v"), (b"\xed\xa0\x80", None)])
    data = b.build()
    (rec,) = kwire.decode(data).records
    assert rec.headers[0][0] == "ok\ufffd\ufffd("
    assert [h["key"] for h in kwire.decode_columnar(data).record_batch.column("headers")[0].as_py()] == [
        k for k, _ in rec.headers
    ]


def test_control_batches_skipped_by_default_and_available_on_request():
    data = build_v2(sample_records(2), transactional=True, producer_id=5)
    marker = kwire.RecordBatchBuilder(
        base_offset=2, producer_id=5, transactional=True, is_control=True
    )
    marker.append(struct.pack(">hi", 0, 7), key=struct.pack(">hh", 0, 1), timestamp=1)
    buf = data + marker.build()
    res = kwire.decode(buf)
    assert [r.offset for r in res.records] == [0, 1]
    assert res.next_offset == 3 and len(res.batches) == 2 and res.batches[1].is_control
    assert kwire.decode_columnar(buf).record_batch.num_rows == 2
    res = kwire.decode(buf, include_control=True)
    assert [r.offset for r in res.records] == [0, 1, 2]
    assert kwire.parse_control_key(res.records[2].key) == (0, 1)
    assert res.records[2].batch.is_control and res.records[2].batch.is_transactional


def test_empty_batch_advances_next_offset():
    # what compaction leaves: no records, but the offsets stay consumed
    empty = kwire.RecordBatchBuilder(base_offset=10).build(last_offset_delta=4)
    res = kwire.decode(empty + build_v2(sample_records(1), base_offset=15))
    assert [r.offset for r in res.records] == [15]
    assert res.batches[0].record_count == 0 and res.batches[0].last_offset == 14
    assert res.next_offset == 16


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_legacy_round_trip(magic, codec):
    recs = sample_records(9)
    data = build_legacy(recs, magic, codec, base_offset=300)
    res = kwire.decode(data)
    ts_type = -1 if magic == 0 else 0
    want = [(300 + i, ts if magic else -1, ts_type, k, v, ()) for i, (k, v, _h, ts) in enumerate(recs)]
    assert as_tuples(res.records) == want
    assert res.next_offset == 309 and res.consumed == len(data)
    assert len(res.batches) == (1 if codec else 9)
    got = columnar_tuples(kwire.decode_columnar(data).record_batch)
    assert [r[:1] + r[2:] for r in got] == [r[:1] + r[2:] for r in want]


def test_legacy_v1_wrapper_with_log_append_time_gives_its_timestamp_to_inner_messages():
    data = bytearray(build_legacy(sample_records(3), 1, "gzip"))
    data[17] |= 0x08                        # wrapper attributes: LogAppendTime
    struct.pack_into(">q", data, 18, 4242)  # wrapper timestamp
    res = kwire.decode(bytes(fix_legacy_crc(data)))
    assert [(r.timestamp, r.timestamp_type) for r in res.records] == [(4242, 1)] * 3


def test_legacy_v1_inner_offsets_are_relative_to_the_wrapper():
    data = build_legacy(sample_records(4), 1, "snappy", base_offset=0)
    # a broker rewrites only the wrapper offset to the absolute offset of the last inner message
    moved = patch(data, 0, ">q", 1003)
    assert [r.offset for r in kwire.decode(moved).records] == [1000, 1001, 1002, 1003]
    assert kwire.decode(moved).next_offset == 1004


def test_mixed_magic_buffer_reads_each_batch_by_its_own_magic():
    recs = sample_records(3)
    buf = (
        build_legacy(recs, 0, None, base_offset=0)
        + build_legacy(recs, 1, "gzip", base_offset=3)
        + build_v2(recs, "zstd", base_offset=6)
        + build_legacy(recs, 1, None, base_offset=9)
        + build_v2(recs, None, base_offset=12)
    )
    res = kwire.decode(buf)
    assert [r.offset for r in res.records] == list(range(15))
    assert [r.batch.magic for r in res.records] == [0] * 3 + [1] * 3 + [2] * 3 + [1] * 3 + [2] * 3
    assert [r.headers for r in res.records[6:9]] == [tuple(h) for _k, _v, h, _t in recs]
    assert columnar_tuples(kwire.decode_columnar(buf).record_batch) == as_tuples(res.records)


def test_min_offset_skips_earlier_records_of_a_batch():
    data = build_v2(sample_records(10), "gzip", base_offset=100)
    assert [r.offset for r in kwire.decode(data, min_offset=105).records] == list(range(105, 110))
    rb = kwire.decode_columnar(data, min_offset=105).record_batch
    assert rb.column("offset").to_pylist() == list(range(105, 110))
    assert kwire.decode(data, min_offset=105).next_offset == 110


def test_split_batches_gives_zero_copy_views():
    batches = [build_v2(sample_records(3), c, base_offset=3 * i) for i, c in enumerate(CODECS)]
    buf = b"".join(batches) + batches[0][:20]
    res = kwire.split_batches(buf)
    assert [bytes(v) for v in res.batches] == batches
    assert all(isinstance(v, memoryview) and v.obj is buf for v in res.batches)
    assert res.consumed == len(buf) - 20 and res.next_offset == 15 and res.incomplete_size == len(batches[0])
    assert sum(len(kwire.decode(v).records) for v in res.batches) == 15


def test_first_batch_bigger_than_buffer_says_so():
    data = build_v2(sample_records(50))
    for cut in (0, 5, 12, 40, len(data) - 1):
        res = kwire.decode(data[:cut])
        assert res.records == [] and res.consumed == 0 and res.next_offset is None
        assert res.incomplete_size == (0 if cut == 0 else 12 if cut < 12 else len(data))


def test_decoders_accept_any_buffer():
    data = build_v2(sample_records(5))
    for buf in (data, bytearray(data), memoryview(data), memoryview(b"xx" + data)[2:]):
        assert len(kwire.decode(buf).records) == 5
        assert kwire.decode_columnar(buf).record_batch.num_rows == 5


def test_columnar_microseconds_and_schema():
    data = build_v2(sample_records(3))
    rb = kwire.decode_columnar(data, timestamp_unit="us").record_batch
    assert str(rb.schema.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert rb.column("timestamp").cast("int64").to_pylist() == [t * 1000 for *_x, t in sample_records(3)]
    assert [f.name for f in rb.schema] == ["offset", "timestamp", "timestamp_type", "key", "value", "headers"]
    rb.validate(full=True)


def test_columnar_microsecond_overflow_is_an_error():
    data = build_v2([(b"k", b"v", [], 2**62)])
    with pytest.raises(CorruptRecordError, match="timestamp out of range"):
        kwire.decode_columnar(data, timestamp_unit="us")
    assert kwire.decode_columnar(data).record_batch.num_rows == 1


def test_columnar_decoder_is_reusable_and_threads_run_in_parallel():
    import threading

    bufs = [build_v2(sample_records(200, seed=s), c) for s, c in enumerate(CODECS)]
    want = [columnar_tuples(kwire.decode_columnar(b).record_batch) for b in bufs]
    got = {}

    def work(idx):
        dec = kwire.ColumnarDecoder()
        for _ in range(20):
            for j, b in enumerate(bufs):
                got[(idx, j)] = dec.decode(b).record_batch

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (_i, j), rb in got.items():
        rb.validate(full=True)
        assert columnar_tuples(rb) == want[j]


def test_columnar_memory_recycled_per_column_leaves_live_results_intact():
    """Column memory comes back to the decoder when pyarrow frees a result
    and is reused, each block by the column it came from: results of
    alternating sizes and shapes (headers or none, null keys, large values),
    some kept alive and some dropped, each read back exactly."""
    import random

    rnd = random.Random(7)
    shapes = []
    for i in range(40):
        n = rnd.choice((1, 30, 400, 2000))
        big = rnd.random() < 0.3
        recs = [(None if rnd.random() < 0.2 else b"k%d" % j,
                 (b"v" * rnd.randrange(2000, 9000)) if big else b"%d" % j,
                 [(f"h{j % 3}", b"x" * (j % 5))] if (i % 3 == 0 and j % 2) else [],
                 1_700_000_000_000 + j) for j in range(n)]
        shapes.append(build_v2(recs, CODECS[i % len(CODECS)], base_offset=i * 10_000))
    want = [columnar_tuples(kwire.decode_columnar(b).record_batch) for b in shapes]
    dec = kwire.ColumnarDecoder()
    kept = {}
    for rnd_pass in range(3):
        for i, b in enumerate(shapes):
            rb = dec.decode(b).record_batch
            if (i + rnd_pass) % 4 == 0:
                kept[(rnd_pass, i)] = rb          # alive while later results reuse freed memory
            else:
                assert columnar_tuples(rb) == want[i]
            del rb
            if len(kept) > 12:
                kept.pop(next(iter(kept)))        # freed: its blocks go back to their columns
    for (_p, i), rb in kept.items():
        rb.validate(full=True)
        assert columnar_tuples(rb) == want[i]


def test_columnar_results_are_arrow_c_data_imports_that_outlive_their_decoder():
    """A result is handed to pyarrow through the Arrow C Data Interface: its
    columns (and slices of them) stay valid after the batch, and the decoder
    that made them, are gone; the memory goes back when the last reference
    does, from whatever thread drops it, also while pyarrow's own threads use
    it; and live results at interpreter exit release cleanly."""
    import gc
    import subprocess
    import sys
    import threading

    import pyarrow.compute as pc

    recs = [(b"k%d" % j if j % 3 else None, b"value-%d" % j, [("h", b"x")] if j % 2 else [],
             1_700_000_000_000 + j) for j in range(500)]
    buf = build_v2(recs, None)
    want = columnar_tuples(kwire.decode_columnar(buf).record_batch)
    dec = kwire.ColumnarDecoder()
    rb = dec.decode(buf).record_batch
    headers, values = rb.column("headers").slice(10, 50), rb.column("value")
    del dec, rb
    gc.collect()
    assert headers.to_pylist()[1] == [{"key": "h", "value": b"x"}]
    assert values.to_pylist() == [r[1] for r in recs]

    dec = kwire.ColumnarDecoder()
    held = [dec.decode(buf).record_batch for _ in range(8)]
    sums = []

    def drop_elsewhere():
        while held:
            rb = held.pop()
            sums.append(pc.sum(pc.binary_length(rb.column("value"))).as_py())   # pyarrow's threads read it
            del rb

    t = threading.Thread(target=drop_elsewhere)
    t.start()
    t.join(30)
    assert not t.is_alive() and len(set(sums)) == 1
    assert columnar_tuples(dec.decode(buf).record_batch) == want      # memory that came back, reused

    code = ("import kwire\n"
            "b = kwire.RecordBatchBuilder(None)\n"
            "for i in range(100):\n"
            "    b.append(b'v%d' % i, b'k', [('h', b'x')], 1)\n"
            "buf = b.build()\n"
            "KEEP = [kwire.ColumnarDecoder().decode(buf).record_batch for _ in range(3)]\n"
            "KEEP.append(KEEP[0].column('headers'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_kafka_07_messages():
    plain = kwire.encode_v07([b"one", b"two"], magic=1)
    packed = kwire.encode_v07([b"three", b"four"], "gzip")
    old = kwire.encode_v07([b"five"], magic=0)
    snap = kwire.encode_v07([b"six"], "snappy")
    buf = plain + packed + old + snap
    res = kwire.decode_v07(buf + snap[:7], 5000)
    vals = [(r.offset, r.value) for r in res.records]
    o2 = 5000 + len(plain)
    o3 = o2 + len(packed)
    assert vals == [
        (5000, b"one"),
        (5000 + 4 + 1 + 1 + 4 + 3, b"two"),
        (o2, b"three"),
        (o2, b"four"),
        (o3, b"five"),
        (o3 + len(old), b"six"),
    ]
    assert res.consumed == len(buf) and res.next_offset == 5000 + len(buf)
    assert res.incomplete_size == len(snap)
    assert all(r.timestamp_type == -1 and r.key is None for r in res.records)
    assert res.batches[2].compression == 1 and res.batches[2].record_count == 2


def test_kafka_07_layout_worked_out_by_hand():
    # LENGTH=1+1+4+5, MAGIC=1, COMPRESSION=0, CRC32("hello"), "hello"
    import zlib

    want = struct.pack(">ibbI", 11, 1, 0, zlib.crc32(b"hello")) + b"hello"
    assert kwire.encode_v07([b"hello"]) == want
    # MAGIC 0 (<= 0.6): LENGTH=1+4+5, no compression byte
    want0 = struct.pack(">ibI", 10, 0, zlib.crc32(b"hello")) + b"hello"
    assert kwire.encode_v07([b"hello"], magic=0) == want0
    assert kwire.decode_v07(want + want0, 0).next_offset == 15 + 14


def test_v2_layout_worked_out_by_hand():
    b = kwire.RecordBatchBuilder(base_offset=7)
    b.append(b"v", key=b"k", timestamp=1000)
    data = b.build()
    rec = bytes([0, 0, 0, 2, ord("k"), 2, ord("v"), 0])   # attrs, tsΔ, offΔ, klen=1, k, vlen=1, v, 0 headers
    body = bytes([len(rec) * 2]) + rec                     # zigzag length
    assert data[61:] == body
    head = struct.unpack(">qiibIhiqqqhii", data[:61])
    assert head[0:4] == (7, len(data) - 12, -1, 2)
    assert head[5:] == (0, 0, 1000, 1000, -1, -1, -1, 1)


@pytest.mark.parametrize("magic", [1, 2])
def test_columnar_stops_at_a_batch_boundary_before_a_column_overflows(magic):
    def batch(i):
        recs = [(b"k", b"v" * 100, [("h", b"x" * 50)], i)] * 10
        return build_v2(recs, "gzip", base_offset=10 * i) if magic == 2 else build_legacy(recs, 1, "gzip", base_offset=10 * i)

    batches = [batch(i) for i in range(5)]
    buf = b"".join(batches)
    dec = kwire.ColumnarDecoder(max_column_bytes=2500)      # values: 1000 bytes a batch
    rows, pos, done = [], 0, 0
    while pos < len(buf):
        res = dec.decode(memoryview(buf)[pos:])
        assert res.consumed == sum(len(b) for b in batches[done:done + 2])    # two batches fit
        done += 2
        res.record_batch.validate(full=True)
        rows += res.record_batch.column("offset").to_pylist()
        pos += res.consumed
    assert rows == list(range(50))
    with pytest.raises(kwire.KwireError, match="max_column_bytes=500"):
        kwire.decode_columnar(buf, max_column_bytes=500, topic="t", partition=0)


def test_batch_count_is_the_same_on_every_path():
    plain = build_v2(sample_records(2), base_offset=0)
    marker = kwire.RecordBatchBuilder(base_offset=2, transactional=True, is_control=True)
    marker.append(b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01")
    packed = build_v2(sample_records(2), "gzip", base_offset=3)
    for buf, want in ((plain + marker.build() + plain, 3), (packed + marker.build() + plain, 3)):
        assert kwire.decode_columnar(buf).batch_count == want == len(kwire.decode(buf).batches)


def test_records_own_their_bytes_and_pin_nothing():
    recs = sample_records(20)
    buf = bytearray(build_v2(recs, None) + build_v2(recs, "snappy", base_offset=20))
    records = kwire.decode(buf).records
    buf.extend(b"more")                     # the input is not pinned once decode returns
    buf[:] = b"\0" * len(buf)                # and records do not read from it
    want = [(k, v) for k, v, _h, _t in recs] * 2
    assert [(r.key, r.value) for r in records] == want
    assert all(type(x) in (bytes, type(None)) for r in records for x in (r.key, r.value))


def test_record_fields_are_read_only_slots():
    r = kwire.decode(build_v2(sample_records(1), None)).records[0]
    for name in ("offset", "timestamp", "key", "value", "headers", "batch"):
        assert type(type(r).__dict__[name]).__name__ == "member_descriptor"
        with pytest.raises(AttributeError):
            setattr(r, name, None)
    assert isinstance(r.offset, int) and isinstance(r.timestamp, int)


def test_reused_headers_are_re_encoded_when_they_change():
    hs = [("a", b"1")]
    b = kwire.RecordBatchBuilder()
    b.append(b"x", headers=hs)
    b.append(b"y", headers=hs)                       # same objects: cached encoding
    hs.append(("b", None))                           # the list changed: re-encoded
    b.append(b"z", headers=hs)
    value = bytearray(b"m")
    mutable = [("c", value)]
    b.append(b"w", headers=mutable)
    value[0] = ord("n")                              # a mutable value is never cached
    b.append(b"v", headers=mutable)
    b.append(b"u", headers={"d": b"4"})
    got = [r.headers for r in kwire.decode(b.build()).records]
    assert got == [(("a", b"1"),), (("a", b"1"),), (("a", b"1"), ("b", None)), (("c", b"m"),), (("c", b"n"),),
                   (("d", b"4"),)]


def test_header_key_validation_is_not_skipped_for_a_different_key():
    b = kwire.RecordBatchBuilder("zstd")
    b.append(b"1", headers=[("k", b"v")])
    b.append(b"2", headers=[(b"k\xff", b"v")])        # same prefix, invalid byte
    b.append(b"3", headers=[("k", b"v")])
    data = b.build()
    b2 = kwire.RecordBatchBuilder("gzip", base_offset=3)
    b2.append(b"4", headers=[(b"\xc3", None)])
    data += b2.build()
    want = [k for r in kwire.decode(data).records for k, _v in r.headers]
    assert want == ["k", "k\ufffd", "k", "\ufffd"]
    cols = kwire.decode_columnar(data).record_batch.column("headers").to_pylist()
    assert [h["key"] for hs in cols for h in hs] == want


@pytest.mark.parametrize("codec", [None, "gzip"])
def test_columnar_validity_when_the_first_null_comes_late_or_is_rolled_back(codec):
    # The validity bitmaps are written only once a column has a null: the
    # first null (row 13, not byte aligned) fills the bits before it, and a
    # batch rolled back at max_column_bytes takes its nulls with it.
    full = [(b"k%d" % i, b"v" * 40, [("h", b"x")], i) for i in range(13)]
    nulls = [(None, None, [], 13), (b"k", None, [("h", None)], 14), (None, b"w", [], 15)]
    first = build_v2(full + nulls, codec, base_offset=0)
    second = build_v2([(None, b"v" * 600, [("h", None)], 16)], codec, base_offset=16)
    third = build_v2([(b"k", b"v", [("h", b"y")], 17)], codec, base_offset=17)
    buf = first + second + third
    dec = kwire.ColumnarDecoder(max_column_bytes=1000)
    got = []
    pos = 0
    while pos < len(buf):
        res = dec.decode(memoryview(buf)[pos:])
        res.record_batch.validate(full=True)
        got += res.record_batch.to_pylist()
        pos += res.consumed
    want = [r for r in kwire.decode(buf).records]
    assert [g["offset"] for g in got] == [r.offset for r in want] == list(range(18))
    assert [g["key"] for g in got] == [r.key for r in want]
    assert [g["value"] for g in got] == [r.value for r in want]
    assert [g["headers"] for g in got] == [[{"key": k, "value": v} for k, v in r.headers] or None for r in want]
    # the third batch alone: no nulls anywhere, so no bitmaps
    rb = kwire.decode_columnar(third).record_batch
    assert [rb.column(i).null_count for i in range(rb.num_columns)] == [0] * rb.num_columns
    assert rb.column("key").buffers()[0] is None
    # a rolled-back batch held the only nulls: the result has none, and the
    # next call (which starts with that batch) has them right
    # (offsets increase: a batch below one already passed would be skipped)
    big = build_v2([(b"k", b"v" * 500, [("h", b"y")], 15)], codec, base_offset=15)
    res = kwire.ColumnarDecoder(max_column_bytes=1000).decode(big + second)
    assert res.consumed == len(big)
    assert [res.record_batch.column(i).null_count for i in range(6)] == [0] * 6
    dec = kwire.ColumnarDecoder(max_column_bytes=1000)
    dec.decode(big + second)
    rb = dec.decode(second + third).record_batch
    rb.validate(full=True)
    assert rb.column("key").to_pylist() == [None, b"k"]
    assert rb.column("headers").to_pylist() == [[{"key": "h", "value": None}], [{"key": "h", "value": b"y"}]]


def test_build_with_producer_state_and_restamp():
    b = kwire.RecordBatchBuilder("lz4")
    for i in range(3):
        b.append(b"v%d" % i, key=b"k")
    stamped = b.build(producer_id=77, producer_epoch=3, base_sequence=10)
    info = kwire.decode(stamped).batches[0]
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (77, 3, 10)
    again = kwire.restamp_batch(stamped, 2**40 + 5, 4, 2**31 - 2)
    info = kwire.decode(again).batches[0]           # CRC checked on decode
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (2**40 + 5, 4, 2**31 - 2)
    assert [r.value for r in kwire.decode(again).records] == [b"v0", b"v1", b"v2"]
    with pytest.raises(ValueError):
        kwire.restamp_batch(stamped[:-1], 1, 1, 1)
    with pytest.raises(ValueError):
        kwire.restamp_batch(stamped + stamped, 1, 1, 1)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_build_batches_equals_building_one_by_one(codec):
    from kwire._codec import build_batches

    builders = []
    for n in (0, 1, 700):          # an empty batch too
        b = kwire.RecordBatchBuilder(codec)
        for i in range(n):
            b.append(b"value %d " % i * 3, key=b"%016d" % i, headers=[("h", b"x")] if i % 7 == 0 else None,
                     timestamp=1_700_000_000_000 + i)
        builders.append(b)
    stamps = [None, (9, 2, 100), (9, 2, 101)]
    one_by_one = [builders[0].build()] + [b.build(producer_id=p, producer_epoch=e, base_sequence=s)
                                          for b, (p, e, s) in zip(builders[1:], stamps[1:])]
    assert build_batches(builders, stamps) == one_by_one
    assert [len(list(kwire.decode(x).records)) for x in one_by_one] == [0, 1, 700]
    with pytest.raises(ValueError):
        build_batches(builders, stamps[:2])


@pytest.mark.parametrize("codec,levels", [("lz4", [None, 0, 1, 9]), ("zstd", [None, 1, 3, 10])])
def test_compiled_compression_gives_the_packages_bytes(codec, levels):
    """Batches are compressed through the C entry points of the lz4 and
    zstandard packages' libraries; their payloads must be byte for byte
    what the packages' Python functions give, at every level."""
    from kwire._codec import compiled_codecs
    from kwire.compression import codec_id, compress

    assert codec in compiled_codecs()     # not the Python fallback

    for level in levels:
        b = kwire.RecordBatchBuilder(codec, compression_level=level)
        for i in range(3000):
            b.append(b"%d-" % i + b"v" * (i % 300), key=b"%016d" % i, timestamp=1_700_000_000_000)
        batch = b.build()
        plain = kwire.RecordBatchBuilder("none")
        for i in range(3000):
            plain.append(b"%d-" % i + b"v" * (i % 300), key=b"%016d" % i, timestamp=1_700_000_000_000)
        records = plain.build()[61:]
        assert batch[61:] == compress(codec_id(codec), records, 2, level)


def test_codec_library_that_cannot_be_used_is_said_so(caplog):
    """Where a codec library's C entry points are missing or wrong, kwire
    falls back to the Python API, never silently: a warning names the codec,
    the direction and the reason."""
    from kwire._codec import _native_compression_check, _native_usable

    assert _native_compression_check(3, "lz4", None) is None          # the ones found here are right
    assert _native_compression_check(4, "zstd", "not found") == "not found"
    with caplog.at_level("WARNING", logger="kwire"):
        assert not _native_usable("zstd", "compress", "not found")
    assert "zstd" in caplog.text and "not found" in caplog.text and "Python API" in caplog.text
