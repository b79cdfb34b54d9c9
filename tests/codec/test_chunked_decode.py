"""Bounded decoding (``max_records``, ``max_bytes`` inside a batch, ``resume``),
offsets that go backwards, a corrupt second batch header, and careless
arguments to the decoders.

A chain of bounded calls, each going on at ``consumed`` with the ``resume``
of the call before, must return exactly what one unbounded call returns,
record for record, for every codec, both decoders and legacy message sets.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from typing import List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kwire
from kwire import CorruptRecordError, CrcMismatchError
from kwire._codec import PartialBatch
from support.varint import zigzag as zz

from .helpers import CODECS, LEGACY_CODECS, as_tuples, columnar_tuples, fix_v2_crc

SRC = os.path.dirname(os.path.dirname(kwire.__file__))   # the kwire under test (a build, a wheel), for children


# ------------------------------------------------------------------ helpers
def rec(delta: int, value: bytes = b"v") -> bytes:
    """One hand-made v2 record at ``delta`` (key b"k", no headers)."""
    body = b"\x00" + zz(0) + zz(delta) + zz(1) + b"k" + zz(len(value)) + value + zz(0)
    return zz(len(body)) + body


def v2_batch(records: bytes, count: int, base_offset: int = 0, last_offset_delta: Optional[int] = None,
             attributes: int = 0) -> bytes:
    """A v2 batch around hand-made record bytes, with a right CRC."""
    lod = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    head = struct.pack(">qiibIhiqqqhii", base_offset, 49 + len(records), -1, 2, 0, attributes, lod,
                       0, 0, -1, -1, -1, count)
    return bytes(fix_v2_crc(bytearray(head + records)))


def batch(codec, n: int, base: int, *, control: bool = False, pid: int = -1, transactional: bool = False,
          magic: int = 2) -> bytes:
    if magic < 2:
        b = kwire.LegacyMessageSetBuilder(magic, codec, base_offset=base)
        for i in range(max(n, 1)):
            b.append(b"value-%d" % (base + i), key=None if i % 3 == 1 else b"k%d" % i, timestamp=1_000 + i)
        return b.build()
    b = kwire.RecordBatchBuilder(None if control else codec, base_offset=base, producer_id=pid, producer_epoch=0,
                                 base_sequence=0 if pid >= 0 else -1, transactional=transactional,
                                 is_control=control)
    if control:
        b.append(b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01", timestamp=5)
    for i in range(0 if control else n):
        b.append(None if i % 5 == 2 else b"value-%d" % (base + i), key=b"k%d" % i,
                 headers=[("h", b"x" * (i % 3))] if i % 2 else None, timestamp=1_000 + i)
    return b.build()


def rows_of(res) -> list:
    return as_tuples(res.records) if isinstance(res, kwire.DecodeResult) else columnar_tuples(res.record_batch)


def chain(decoders, data: bytes, *, max_records: int = -1, max_bytes: int = -1, cuts=(), min_offset: int = -1):
    """Decode ``data`` through bounded calls as a consumer would: each call on
    what has arrived after what was consumed (``cuts``: where the bytes that
    arrived so far end), with the ``resume`` and ``next_offset`` of the call
    before; ``decoders`` are used in turn. Returns (rows, batches, skipped,
    next_offset, calls)."""
    limits = sorted({c for c in cuts if 0 < c < len(data)}) + [len(data)]
    seen, pos, resume, position = 0, 0, None, min_offset
    rows: list = []
    infos: list = []
    skipped = calls = 0
    next_offset = None
    while True:
        if pos >= limits[seen] and resume is None:
            if seen + 1 == len(limits):
                break
            seen += 1
            continue
        res = decoders[calls % len(decoders)].decode(memoryview(data)[pos:limits[seen]], topic="t", partition=1,
                                                      min_offset=position, max_records=max_records,
                                                      max_bytes=max_bytes, resume=resume)
        calls += 1
        had_resume = resume is not None
        got = rows_of(res)
        if max_records >= 0:
            assert len(got) <= max(max_records, 1)
        rows += got
        infos += res.batches if isinstance(res, kwire.DecodeResult) else [None] * res.batch_count
        skipped += res.skipped
        pos += res.consumed
        if res.resume is not None:
            assert res.next_offset is not None
        resume = res.resume
        if res.next_offset is not None:
            assert res.next_offset >= position
            position = next_offset = res.next_offset
        if not got and not res.consumed and resume is None and not had_resume:   # a cut batch: wait for more
            assert res.incomplete_size
            assert seen + 1 < len(limits)
            seen += 1
        assert calls < 10_000
    return rows, infos, skipped, next_offset, calls


def info_key(bi) -> tuple:
    return (bi.base_offset, bi.last_offset, bi.magic, bi.producer_id, bi.is_control, bi.is_transactional,
            bi.record_count)


# ------------------------------------------------------------ Defect 6
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("kind", ["objects", "columns"])
def test_max_records_stops_inside_a_batch_and_resume_goes_on(codec, kind):
    data = batch(codec, 10, 100, pid=7, transactional=True) + batch(None, 1, 110)
    make = kwire.Decoder if kind == "objects" else kwire.ColumnarDecoder
    dec = make()
    r1 = dec.decode(data, max_records=3)
    assert [row[0] for row in rows_of(r1)] == [100, 101, 102]
    assert r1.consumed == len(data) - len(batch(None, 1, 110))          # the whole first batch
    assert r1.next_offset == 103 and r1.incomplete_size == 0
    assert isinstance(r1.resume, PartialBatch)
    assert (r1.resume.base_offset, r1.resume.next_offset, r1.resume.records_left) == (100, 103, 7)
    rest = data[r1.consumed:]
    r2 = make().decode(rest[:5], max_records=3, resume=r1.resume, min_offset=r1.next_offset)   # another decoder
    assert [row[0] for row in rows_of(r2)] == [103, 104, 105]
    assert (r2.consumed, r2.next_offset) == (0, 106)
    again = dec.decode(rest, max_records=3, resume=r1.resume)          # a call leaves its resume as it was
    assert rows_of(again) == rows_of(r2)
    r3 = dec.decode(rest, max_records=5, resume=r2.resume, min_offset=106)
    assert [row[0] for row in rows_of(r3)] == [106, 107, 108, 109, 110]
    assert (r3.consumed, r3.next_offset, r3.resume) == (len(rest), 111, None)
    whole = make().decode(data)
    assert rows_of(r1) + rows_of(r2) + rows_of(r3) == rows_of(whole)
    if kind == "objects":
        # the batch is listed by the call that began it; its records share its BatchInfo
        assert [len(r.batches) for r in (r1, r2, r3)] == [1, 0, 1]
        assert {id(r.batch) for r in r1.records + r2.records + r3.records[:4]} == {id(r1.batches[0])}
        assert (r2.records[0].batch.producer_id, r2.records[0].batch.is_transactional) == (7, True)
    else:
        assert [r.batch_count for r in (r1, r2, r3)] == [1, 0, 1]


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in LEGACY_CODECS if c])
def test_legacy_wrappers_stop_inside_too(magic, codec):
    data = batch(codec, 6, 40, magic=magic) + batch(None, 1, 46, magic=magic)
    for make in (kwire.Decoder, kwire.ColumnarDecoder):
        rows, _, _, nxt, calls = chain([make(), make()], data, max_records=2)
        assert rows == rows_of(make().decode(data))
        assert [row[0] for row in rows] == list(range(40, 47))
        assert (nxt, calls) == (47, 4)


def test_a_resume_fits_only_its_kind_of_decoder():
    data = batch("zstd", 5, 0)
    r = kwire.Decoder().decode(data, max_records=1)
    with pytest.raises(TypeError):
        kwire.ColumnarDecoder().decode(b"", resume=r.resume)
    with pytest.raises(TypeError):
        kwire.Decoder().decode(b"", resume=kwire.ColumnarDecoder().decode(data, max_records=1).resume)
    with pytest.raises(TypeError):
        kwire.Decoder().decode(b"", resume=PartialBatch())          # not made by a decoder
    with pytest.raises(TypeError):
        kwire.Decoder().decode(b"", resume="not a resume")
    assert [x.offset for x in kwire.Decoder().decode(b"", resume=r.resume).records] == [1, 2, 3, 4]


@pytest.mark.parametrize("kind", ["objects", "columns"])
def test_max_bytes_counts_each_record_and_stops_inside_a_batch(kind):
    b = kwire.RecordBatchBuilder(None)
    for i in range(10_000):
        b.append(None, timestamp=0)          # minimal records: 7 or 8 bytes each
    data = b.build()
    dec = kwire.Decoder() if kind == "objects" else kwire.ColumnarDecoder()
    res = dec.decode(data, max_bytes=100_000)
    cost, want = 0, 0
    while cost < 100_000:                    # each record: its bytes, and 200 (objects) or 32 (columns)
        cost += 1 + 5 + len(zz(want)) + (200 if kind == "objects" else 32)
        want += 1
    assert len(rows_of(res)) == want
    assert res.resume is not None and res.consumed == len(data)
    rows, _, _, nxt, calls = chain([dec], data, max_bytes=100_000)
    assert len(rows) == 10_000 and nxt == 10_000 and calls <= -(-10_000 // want) + 1


def test_crc_is_checked_before_any_record_of_a_batch():
    data = bytearray(batch(None, 5, 0))
    data[-3] ^= 0xFF
    for make in (kwire.Decoder, kwire.ColumnarDecoder):
        with pytest.raises(CrcMismatchError):
            make().decode(bytes(data), max_records=1)


@pytest.mark.parametrize("make", [kwire.Decoder, kwire.ColumnarDecoder])
def test_a_corrupt_record_later_in_a_partial_batch_raises_where_it_is_reached(make):
    bad = rec(3)[:-1] + b"\x05"                        # a header count past the record's end
    data = v2_batch(rec(0) + rec(1) + rec(2) + bad + rec(4), 5, base_offset=50)
    with pytest.raises(CorruptRecordError) as err:
        make().decode(data)
    first = make().decode(data, topic="t", partition=4, max_records=2)
    assert [row[0] for row in rows_of(first)] == [50, 51]
    more = make().decode(b"", topic="t", partition=4, max_records=1, resume=first.resume)
    assert [row[0] for row in rows_of(more)] == [52]
    with pytest.raises(CorruptRecordError) as err:
        make().decode(b"", topic="t", partition=4, max_records=5, resume=more.resume)
    assert (err.value.topic, err.value.partition, err.value.offset) == ("t", 4, 50)


def test_control_batches_and_min_offset_across_a_resume():
    data = (batch("lz4", 4, 0, pid=3, transactional=True) + batch(None, 0, 4, control=True, pid=3)
            + batch("snappy", 4, 5))
    for include_control in (False, True):
        for make in (kwire.Decoder, kwire.ColumnarDecoder):
            args = {"include_control": include_control}
            whole = make(**args).decode(data, min_offset=2)
            rows, _, _, nxt, _ = chain([make(**args)], data, max_records=1, min_offset=2)
            assert rows == rows_of(whole) and nxt == 9
            offsets = [row[0] for row in rows]
            assert offsets == ([2, 3, 4, 5, 6, 7, 8] if include_control else [2, 3, 5, 6, 7, 8])


SHAPE = st.tuples(st.sampled_from(["v2", "v2", "v2", "control", "legacy0", "legacy1"]), st.sampled_from(CODECS),
                  st.integers(0, 12), st.booleans())


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(shapes=st.lists(SHAPE, min_size=1, max_size=6), max_records=st.integers(-1, 7),
       max_bytes=st.one_of(st.just(-1), st.integers(0, 3000)), include_control=st.booleans(),
       min_offset=st.integers(-1, 10), cut_fractions=st.lists(st.floats(0, 1), max_size=3),
       two_decoders=st.booleans())
def test_bounded_chains_equal_one_unbounded_call(shapes, max_records, max_bytes, include_control, min_offset,
                                                 cut_fractions, two_decoders):
    parts, base = [], 0
    for fmt, codec, n, transactional in shapes:
        if fmt == "control":
            parts.append(batch(None, 0, base, control=True, pid=9))
            base += 1
        elif fmt.startswith("legacy"):
            parts.append(batch(codec if codec != "zstd" else None, n, base, magic=int(fmt[-1])))
            base += max(n, 1)
        else:
            parts.append(batch(codec, n, base, pid=9 if transactional else -1, transactional=transactional))
            base += max(n, 1)
    data = b"".join(parts)
    cuts = [int(f * len(data)) for f in cut_fractions]
    for make in (kwire.Decoder, kwire.ColumnarDecoder):
        whole = make(include_control=include_control).decode(data, min_offset=min_offset)
        decoders = [make(include_control=include_control) for _ in range(2 if two_decoders else 1)]
        rows, infos, skipped, nxt, calls = chain(decoders, data, max_records=max_records, max_bytes=max_bytes,
                                                 cuts=cuts, min_offset=min_offset)
        assert rows == rows_of(whole)
        assert skipped == whole.skipped == 0
        assert nxt == whole.next_offset
        if make is kwire.Decoder:
            assert [info_key(b) for b in infos] == [info_key(b) for b in whole.batches]
        else:
            assert len(infos) == whole.batch_count
        if max_records < 0 and max_bytes < 0 and not cuts:
            assert calls == 1


# ------------------------------------------------------------ Defect 11
@pytest.mark.parametrize("codec", [None, "zstd"])
@pytest.mark.parametrize("make", [kwire.Decoder, kwire.ColumnarDecoder])
def test_offsets_that_go_backwards_are_dropped_and_counted(make, codec):
    from kwire import compression as comp

    body = rec(0, b"a") + rec(1, b"b") + rec(2, b"c") + rec(1, b"d") + rec(0, b"e")
    attrs = 0 if codec is None else comp.ZSTD
    data = v2_batch(body if codec is None else comp.compress(comp.ZSTD, body), 5, base_offset=10,
                    last_offset_delta=4, attributes=attrs)
    res = make().decode(data)
    assert [(row[0], row[4]) for row in rows_of(res)] == [(10, b"a"), (11, b"b"), (12, b"c")]
    assert (res.skipped, res.next_offset) == (2, 15)
    for limits in ({"max_records": 1}, {"max_bytes": 0}, {"max_bytes": 250}):
        rows, _, skipped, nxt, _ = chain([make()], data, **limits)
        assert [row[0] for row in rows] == [10, 11, 12] and (skipped, nxt) == (2, 15)
    # records below min_offset are not counted as dropped
    res = make().decode(data, min_offset=12)
    assert ([row[0] for row in rows_of(res)], res.skipped) == ([12], 0)


@pytest.mark.parametrize("make", [kwire.Decoder, kwire.ColumnarDecoder])
def test_a_batch_below_one_already_passed_is_dropped(make):
    first = v2_batch(rec(0) + rec(1) + rec(2), 3, base_offset=10)
    second = v2_batch(rec(0) + rec(1) + rec(2), 3, base_offset=11)       # 11, 12 again, then 13
    res = make().decode(first + second)
    assert ([row[0] for row in rows_of(res)], res.skipped, res.next_offset) == ([10, 11, 12, 13], 2, 14)
    # a batch whose last offset delta is below its records' offsets: next_offset still passes them
    short = v2_batch(rec(0) + rec(1) + rec(2), 3, base_offset=0, last_offset_delta=0)
    res = make().decode(short)
    assert ([row[0] for row in rows_of(res)], res.next_offset) == ([0, 1, 2], 3)


# ------------------------------------------------------------ Defect 3
def _bad_magic_buffer():
    good = batch(None, 3, 0)
    bad = bytearray(batch(None, 2, 3))
    bad[16] = 7                                   # magic: the CRC does not cover it
    tail = batch(None, 2, 5)
    return good, bytes(bad), tail


def test_split_batches_names_an_unknown_magic_in_the_second_batch_and_can_give_the_batches_before():
    good, bad, tail = _bad_magic_buffer()
    data = good + bad + tail
    with pytest.raises(CorruptRecordError, match="unknown magic") as err:
        kwire.split_batches(data, topic="t", partition=2)
    assert (err.value.topic, err.value.partition, err.value.offset) == ("t", 2, 3)
    res = kwire.split_batches(data, topic="t", partition=2, raise_errors=False)
    assert [bytes(v) for v in res.batches] == [good]
    assert (res.consumed, res.next_offset, res.incomplete_size) == (len(good), 3, 0)
    assert isinstance(res.error, CorruptRecordError) and res.error.offset == 3 and res.error.partition == 2
    assert kwire.split_batches(good + tail, raise_errors=False).error is None


@pytest.mark.parametrize("make", [kwire.Decoder, kwire.ColumnarDecoder])
def test_decoders_raise_the_located_error_and_a_bounded_call_returns_the_good_records_first(make):
    good, bad, tail = _bad_magic_buffer()
    data = good + bad + tail
    with pytest.raises(CorruptRecordError) as err:
        make().decode(data, topic="t", partition=2)
    assert (err.value.topic, err.value.partition, err.value.offset) == ("t", 2, 3)
    res = make().decode(data, topic="t", partition=2, max_records=3)
    assert [row[0] for row in rows_of(res)] == [0, 1, 2] and res.consumed == len(good)
    with pytest.raises(CorruptRecordError):
        make().decode(data[res.consumed:], topic="t", partition=2, max_records=3)


# ------------------------------------------------------------ 20M records
MINIMAL_BATCH = textwrap.dedent("""
    import json, resource, struct, sys, time
    sys.path.insert(0, {src!r})
    import google_crc32c, zstandard
    import kwire

    N = 20_000_000

    def varint(u):
        out = bytearray()
        while u >= 0x80:
            out.append((u & 0x7F) | 0x80)
            u >>= 7
        out.append(u)
        return bytes(out)

    def minimal_records(n, distinct):
        # record i: length, attributes, timestamp delta 0, offset delta (i, or 0),
        # null key, null value, no headers
        if not distinct:
            for _ in range(n // 1_000_000):
                yield bytes([12, 0, 0, 0, 1, 1, 0]) * 1_000_000
            return
        # blocks of 64 records share the varint of i // 64
        yield b"".join(bytes([12, 0, 0, 2 * i, 1, 1, 0]) for i in range(64))
        # the pieces between the 64 copies of i // 64's varint depend only on its length
        pieces = {{}}
        for width in (1, 2, 3, 4):
            ln = 2 * (6 + width)
            pieces[width] = ([bytes([ln, 0, 0, 0x80])] + [bytes([1, 1, 0, ln, 0, 0, 0x80 | (2 * k)]) for k in range(1, 64)]
                             + [bytes([1, 1, 0])])
        for h in range(1, n // 64):
            vh = varint(h)
            yield vh.join(pieces[len(vh)])

    z = zstandard.ZstdCompressor(level=3).compressobj()
    chunks, plain = [], 0
    for block in minimal_records(N, {distinct}):
        plain += len(block)
        chunks.append(z.compress(block))
    chunks.append(z.flush())
    payload = b"".join(chunks)
    head = struct.pack(">qiibIhiqqqhii", 0, 49 + len(payload), -1, 2, 0, 4, N - 1, 0, 0, -1, -1, -1, N)
    data = bytearray(head + payload)
    struct.pack_into(">I", data, 17, google_crc32c.value(bytes(data[21:])))
    data = bytes(data)

    def rss_mib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    before = rss_mib()
    dec = kwire.{decoder}()
    times, counts, resume, rest, nxt, skipped = [], [], None, data, 0, 0
    for call in range(7):
        t = time.perf_counter()
        res = dec.decode(rest, max_records=-1 if call == 6 else 500, max_bytes=1 << 20 if call == 6 else -1,
                         resume=resume, min_offset=nxt)
        times.append(time.perf_counter() - t)
        counts.append(len(res.records) if hasattr(res, "records") else res.num_records)
        skipped += res.skipped
        rest, resume, nxt = rest[res.consumed:], res.resume, res.next_offset
        if resume is None:
            break
    print(json.dumps(dict(size=len(data), plain=plain, before=before, after=rss_mib(), next_offset=nxt,
                          skipped=skipped, left=resume and resume.records_left, counts=counts, times=times)))
""")


@pytest.mark.parametrize("decoder", ["Decoder", "ColumnarDecoder"])
@pytest.mark.parametrize("distinct", [True, False], ids=["offsets-0-to-20M", "all-at-one-offset"])
def test_20_million_minimal_records_in_one_zstd_batch_take_bounded_work_per_call(decoder, distinct):
    """A zstd batch of 20M minimal records (about 200 MB decompressed). At
    distinct offsets, each call returns its share (500 records, or 1 MiB of
    cost) in milliseconds; memory stays at the decompressed batch (held once,
    by the resume), not 20M records. All at one offset (the 13 KB batch of
    the issue): one record, 19,999,999 dropped and counted, in one call."""
    script = MINIMAL_BATCH.format(src=SRC, decoder=decoder, distinct=distinct)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    counts, times = out["counts"], out["times"]
    assert out["plain"] > 130_000_000
    assert out["after"] - out["before"] < 500, out             # MiB: the batch once, not 20M records
    assert times[0] < 5                                        # CRC, decompression (once) and the first records
    if not distinct:
        assert out["size"] < 20_000
        assert (counts, out["skipped"], out["next_offset"], out["left"]) == ([1], N_MINIMAL - 1, N_MINIMAL, None)
        return
    cost, want = 0, 0
    while cost < 1 << 20:                   # each record: its bytes in the batch, and 200 or 32
        cost += 1 + 5 + len(zz(3000 + want)) + (200 if decoder == "Decoder" else 32)
        want += 1
    assert counts == [500] * 6 + [want], out
    assert out["next_offset"] == 3000 + counts[-1] and out["left"] == N_MINIMAL - out["next_offset"]
    assert out["skipped"] == 0
    assert max(times[1:]) < 0.05, times                        # milliseconds per call, not seconds


N_MINIMAL = 20_000_000


# ------------------------------------------------------------ Defect 1
CARELESS_CALLS = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, {src!r})
    import kwire
    from kwire import _codec

    good = kwire.RecordBatchBuilder("zstd")
    for i in range(3):
        good.append(b"v", key=b"k", headers=[("", None), ("h", b"x")])
    good = good.build()
    outcomes = []

    def attempt(name, fn):
        try:
            fn()
            outcomes.append((name, "ok"))
        except (TypeError, ValueError, AttributeError, kwire.KwireError, RuntimeError) as e:
            outcomes.append((name, type(e).__name__))

    for make in (kwire.Decoder, kwire.ColumnarDecoder):
        d = make()
        attempt("data None", lambda: d.decode(None))
        attempt("topic None", lambda: d.decode(good, topic=None, partition=None))
        attempt("min_offset None", lambda: d.decode(good, min_offset=None))
        attempt("max_bytes None", lambda: d.decode(good, max_bytes=None))
        attempt("max_records None", lambda: d.decode(good, max_records=None))
        attempt("resume None", lambda: d.decode(good, resume=None))
        attempt("resume new", lambda: d.decode(good, resume=_codec.PartialBatch.__new__(_codec.PartialBatch)))
        attempt("init None", lambda: make(check_crcs=None, include_control=None))
        attempt("max_decompressed None", lambda: make(max_decompressed_bytes=None))
        attempt("no __init__", lambda: make.__new__(make).decode(good))
        # a first call's header caches: an empty key and a null value come back as such
        attempt("first call", lambda: d.decode(good))
    attempt("ts unit None", lambda: kwire.ColumnarDecoder(timestamp_unit=None))
    attempt("split None", lambda: kwire.split_batches(None))
    attempt("split raise None", lambda: kwire.split_batches(good, raise_errors=None))
    attempt("decode None", lambda: kwire.decode(None))
    attempt("decode_columnar None", lambda: kwire.decode_columnar(None))
    attempt("v07 None", lambda: kwire.decode_v07(None, 0))
    attempt("v07 offset None", lambda: kwire.decode_v07(b"", None))
    attempt("control key None", lambda: kwire.parse_control_key(None))
    for cls in (_codec.Record, _codec.BatchInfo, _codec.DecodeResult, _codec.ColumnarResult, _codec.SplitResult,
                _codec.PartialBatch):
        obj = cls.__new__(cls)
        attempt(cls.__name__ + " repr", lambda: repr(obj))
        for name in dir(obj):
            if not name.startswith("_"):
                attempt(cls.__name__ + "." + name, lambda: getattr(obj, name))
    assert kwire.Decoder().decode(good).records[0].headers == (("", None), ("h", b"x"))
    assert kwire.ColumnarDecoder().decode(good).record_batch.column("headers").to_pylist()[0] == [
        {{"key": "", "value": None}}, {{"key": "h", "value": b"x"}}]

    # one decoder shared by two threads: a second call while one is under way is refused, never a crash
    big = kwire.RecordBatchBuilder("gzip")
    for i in range(100_000):
        big.append(b"value %d" % i)
    big = big.build()
    for make in (kwire.Decoder, kwire.ColumnarDecoder):
        shared, errors, counts = make(), [], []

        def work():
            for _ in range(5):
                try:
                    res = shared.decode(big)
                    counts.append(len(res.records) if hasattr(res, "records") else res.num_records)
                except RuntimeError as e:
                    errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert counts and set(counts) == {{100_000}}, counts
        assert len(counts) + len(errors) == 15
    print(sorted(set(outcomes)))
""")


def test_careless_arguments_raise_and_never_crash():
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", CARELESS_CALLS.format(src=SRC)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, (
        f"child exited with {proc.returncode} (negative = killed by a signal)\n{proc.stdout[-3000:]}\n"
        f"{proc.stderr[-3000:]}")
    out = proc.stdout
    for expect in ("('data None', 'TypeError')", "('resume new', 'TypeError')", "('split None', 'TypeError')",
                   "('max_records None', 'TypeError')", "('first call', 'ok')", "('ts unit None', 'ValueError')"):
        assert expect in out, out
