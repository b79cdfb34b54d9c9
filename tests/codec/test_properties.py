"""Property tests: random records survive encode/decode with every codec, and
both decoders agree. Hostile-input properties run in a subprocess
(test_corruption.py), since a crash there must fail a test, not the run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import kwire

from .helpers import CODECS, LEGACY_CODECS, as_tuples, columnar_tuples

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=20), maybe_bytes), max_size=4)
timestamps = st.integers(min_value=-(2**63), max_value=2**63 - 1)
record = st.tuples(maybe_bytes, maybe_bytes, headers, timestamps)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record, min_size=0, max_size=30),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=2**62),
    producer=st.tuples(st.integers(-1, 2**40), st.integers(-1, 32767), st.integers(-1, 2**31 - 1)),
    transactional=st.booleans(),
)
def test_v2_round_trip(records, codec, base_offset, producer, transactional):
    pid, epoch, seq = producer
    b = kwire.RecordBatchBuilder(codec, base_offset=base_offset, producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, transactional=transactional)
    for key, value, hs, ts in records:
        b.append(value, key=key, headers=hs, timestamp=ts)
    data = b.build()
    res = kwire.decode(data)
    want = [(base_offset + i, ts, 0, k, v, tuple(hs)) for i, (k, v, hs, ts) in enumerate(records)]
    assert as_tuples(res.records) == want
    assert res.next_offset == base_offset + len(records)   # an empty batch has last_offset_delta -1
    bi = res.batches[0]
    assert (bi.producer_id, bi.producer_epoch, bi.base_sequence, bi.is_transactional) == (pid, epoch, seq, transactional)
    assert columnar_tuples(kwire.decode_columnar(data).record_batch) == want


@settings(max_examples=100, deadline=None)
@given(
    records=st.lists(st.tuples(maybe_bytes, maybe_bytes, st.just([]), st.integers(0, 2**50)), min_size=1, max_size=20),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(LEGACY_CODECS),
    base_offset=st.integers(min_value=0, max_value=2**40),
)
def test_legacy_round_trip(records, magic, codec, base_offset):
    b = kwire.LegacyMessageSetBuilder(magic, codec, base_offset=base_offset)
    for key, value, _h, ts in records:
        b.append(value, key=key, timestamp=ts)
    res = kwire.decode(b.build())
    assert as_tuples(res.records) == [
        (base_offset + i, ts if magic else -1, 0 if magic else -1, k, v, ()) for i, (k, v, _h, ts) in enumerate(records)
    ]
    assert res.next_offset == base_offset + len(records)


def _batches(batches) -> bytes:
    """Consecutive v2 batches, one per (records, codec)."""
    buf = b""
    offset = 0
    for records, codec in batches:
        b = kwire.RecordBatchBuilder(codec, base_offset=offset)
        for key, value, hs, ts in records:
            b.append(value, key=key, headers=hs, timestamp=ts)
        buf += b.build()
        offset += max(len(records), 1)
    return buf


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(record.filter(lambda r: abs(r[3]) < 2**52), max_size=8), st.sampled_from(CODECS)), max_size=6))
def test_columnar_agrees_with_objects(batches):
    buf = _batches(batches)
    objs = kwire.decode(buf)
    cols = kwire.decode_columnar(buf)
    cols.record_batch.validate(full=True)
    assert columnar_tuples(cols.record_batch) == as_tuples(objs.records)
    assert (cols.consumed, cols.next_offset) == (objs.consumed, objs.next_offset)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(record.filter(lambda r: abs(r[3]) < 2**52), max_size=8), st.sampled_from(CODECS)),
                max_size=6),
       st.integers(-1, 3000))
def test_max_bytes_chunks_add_up(batches, max_bytes):
    """Decoding in ``max_bytes`` chunks (each going on at ``consumed``, with
    the ``resume`` of the call before when it stopped inside a batch) gives
    exactly the records of one call, one record or one batch at least per
    chunk."""
    buf = _batches(batches)
    whole = as_tuples(kwire.decode(buf).records)
    for decoder, rows in ((kwire.Decoder(), lambda r: as_tuples(r.records)),
                          (kwire.ColumnarDecoder(), lambda r: columnar_tuples(r.record_batch))):
        got, pos, calls, resume, position = [], 0, 0, None, -1
        while pos < len(buf) or resume is not None:
            res = decoder.decode(memoryview(buf)[pos:], max_bytes=max_bytes, min_offset=position, resume=resume)
            chunk = rows(res)
            assert res.consumed > 0 or chunk
            got += chunk
            pos += res.consumed
            resume = res.resume
            if res.next_offset is not None:
                position = res.next_offset
            calls += 1
        assert got == whole
        assert calls <= len(batches) + len(whole)
        if max_bytes < 0:
            assert calls <= 1
