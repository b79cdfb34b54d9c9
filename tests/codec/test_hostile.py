"""Malformed input: every case raises a located kwire error or, for a cut
buffer, returns exactly the complete batches before the cut."""

from __future__ import annotations

import pickle
import struct

import pytest

import kwire
from kwire import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionBombError,
    DecompressionError,
    UnsupportedCodecError,
)
from kwire import compression as comp
from support.varint import zigzag as zz

from .helpers import (
    CODECS,
    LEGACY_CODECS,
    as_tuples,
    build_legacy,
    build_v2,
    fix_legacy_crc,
    fix_v2_crc,
    patch,
    sample_records,
)

DECODERS = [
    pytest.param(lambda d, **kw: kwire.decode(d, **kw), id="objects"),
    pytest.param(lambda d, **kw: kwire.decode_columnar(d, **kw), id="columnar"),
]


def v2_batch(records: bytes, count: int, attributes: int = 0, base_offset: int = 0) -> bytes:
    """A v2 batch around hand-made record bytes, with a right CRC."""
    head = struct.pack(">qiibIhiqqqhii", base_offset, 49 + len(records), -1, 2, 0, attributes,
                       max(count - 1, 0), 0, 0, -1, -1, -1, count)
    return bytes(fix_v2_crc(bytearray(head + records)))


def record(body: bytes) -> bytes:
    return zz(len(body)) + body


GOOD_BODY = b"\x00" + zz(0) + zz(0) + zz(1) + b"k" + zz(1) + b"v" + zz(0)


def test_hand_made_batch_is_valid():
    (r,) = kwire.decode(v2_batch(record(GOOD_BODY), 1)).records
    assert (r.key, r.value) == (b"k", b"v")


BAD_RECORDS = {
    "varint too long": (b"\x80\x80\x80\x80\x80\x01" + GOOD_BODY, 1, "invalid varint"),
    "varint past 32 bits": (b"\xff\xff\xff\xff\x1f" + GOOD_BODY, 1, "invalid varint"),
    "varlong past 64 bits": (record(b"\x00" + b"\xff" * 9 + b"\x03" + GOOD_BODY[2:]), 1, "invalid varint"),
    "negative record length": (zz(-5) + GOOD_BODY, 1, "negative length"),
    "record length past batch": (zz(len(GOOD_BODY) + 50) + GOOD_BODY, 1, "truncated"),
    "record length too long for fields": (record(GOOD_BODY + b"\x00"), 1, "declared length"),
    "key length below -1": (record(b"\x00" + zz(0) + zz(0) + zz(-2) + zz(1) + b"v" + zz(0)), 1, "negative length"),
    "key past the record": (record(b"\x00" + zz(0) + zz(0) + zz(1000) + b"k"), 1, "truncated"),
    "negative header count": (record(GOOD_BODY[:-1] + zz(-1)), 1, "invalid count"),
    "huge header count": (record(GOOD_BODY[:-1] + zz(2**30)), 1, "invalid count"),
    "negative header key length": (record(GOOD_BODY[:-1] + zz(1) + zz(-1) + zz(-1)), 1, "negative length"),
    "header value length below -1": (record(GOOD_BODY[:-1] + zz(1) + zz(1) + b"h" + zz(-3)), 1, "negative length"),
    "more records declared than present": (record(GOOD_BODY), 2, "truncated"),
    "huge record count": (record(GOOD_BODY), 2**31 - 1, "truncated"),
    "bytes after last record": (record(GOOD_BODY) + b"\x00\x00", 1, "left over"),
}


@pytest.mark.parametrize("decode", DECODERS)
@pytest.mark.parametrize("case", list(BAD_RECORDS), ids=list(BAD_RECORDS))
def test_malformed_v2_records(case, decode):
    records, count, message = BAD_RECORDS[case]
    with pytest.raises(CorruptRecordError, match=message) as err:
        decode(v2_batch(records, count, base_offset=42), topic="t", partition=3)
    assert (err.value.topic, err.value.partition, err.value.offset) == ("t", 3, 42)
    assert "topic 't'" in str(err.value) and "partition 3" in str(err.value) and "offset 42" in str(err.value)


@pytest.mark.parametrize("decode", DECODERS)
def test_malformed_compressed_v2_records(decode):
    payload = comp.compress(comp.ZSTD, record(GOOD_BODY) + b"junk")
    with pytest.raises(CorruptRecordError, match="left over"):
        decode(v2_batch(payload, 1, attributes=comp.ZSTD))


def test_negative_record_count():
    with pytest.raises(CorruptRecordError, match="invalid count"):
        kwire.decode(v2_batch(b"", -1))


def test_corrupt_record_in_a_later_batch_returns_nothing_partial():
    good = build_v2(sample_records(3))
    bad = v2_batch(record(GOOD_BODY) + record(GOOD_BODY[:-1] + zz(-1)), 2, base_offset=3)
    with pytest.raises(CorruptRecordError) as err:
        kwire.decode(good + bad)
    assert err.value.offset == 3


@pytest.mark.parametrize(
    "offset_field, value, message",
    [
        (8, -1, "invalid batch size"),
        (8, 13, "invalid batch size"),
        (8, 30, "invalid batch size"),        # v2 needs at least 49
    ],
)
def test_invalid_batch_size(offset_field, value, message):
    data = patch(build_v2(sample_records(2)), offset_field, ">i", value)
    with pytest.raises(CorruptRecordError, match=message):
        kwire.decode(data)
    with pytest.raises(CorruptRecordError, match=message):
        kwire.split_batches(data)


def test_hostile_size_at_the_end_is_a_cut_not_a_read_past_the_buffer():
    good = build_v2(sample_records(2))
    data = good + patch(good, 8, ">i", 2**31 - 1)
    res = kwire.decode(data)
    assert len(res.records) == 2 and res.consumed == len(good)
    assert res.incomplete_size == 12 + 2**31 - 1


@pytest.mark.parametrize("magic", [3, 127, -1])
def test_unknown_magic(magic):
    with pytest.raises(CorruptRecordError, match="unknown magic"):
        kwire.decode(patch(build_v2(sample_records(2)), 16, ">b", magic))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec):
    data = build_v2(sample_records(2))
    with pytest.raises(UnsupportedCodecError, match=f"codec id {codec}"):
        kwire.decode(patch(data, 21, ">h", codec, fix=fix_v2_crc))
    legacy = build_legacy(sample_records(2), 1, "gzip")
    with pytest.raises(UnsupportedCodecError):
        kwire.decode(patch(legacy, 17, ">b", codec, fix=fix_legacy_crc))


@pytest.mark.parametrize("decode", DECODERS)
def test_crc_mismatch_names_offset_and_can_be_disabled(decode):
    good = build_v2(sample_records(3), base_offset=0)
    data = bytearray(good + build_v2(sample_records(3), base_offset=3))
    data[len(good) + 70] ^= 0x01                   # a byte inside the second batch's records
    with pytest.raises(CrcMismatchError) as err:
        decode(bytes(data), topic="orders", partition=1)
    assert err.value.offset == 3 and "orders" in str(err.value)
    decode(bytes(data), check_crcs=False)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_crc_mismatch(magic):
    data = bytearray(build_legacy(sample_records(2), magic, base_offset=9))
    data[-1] ^= 0xFF
    with pytest.raises(CrcMismatchError) as err:
        kwire.decode(bytes(data))
    assert err.value.offset == 10
    assert kwire.decode(bytes(data), check_crcs=False).records[1].value[-1] == data[-1]


def test_legacy_inner_crc_mismatch_is_caught_inside_a_wrapper():
    inner = bytearray(build_legacy(sample_records(2), 1))
    inner[-1] ^= 0xFF
    wrapper = kwire.LegacyMessageSetBuilder(1)
    wrapper.append(comp.compress(comp.GZIP, bytes(inner)))
    data = patch(wrapper.build(), 17, ">b", 1, fix=fix_legacy_crc)
    with pytest.raises(CrcMismatchError, match="CRC32"):
        kwire.decode(data)
    with pytest.raises(CrcMismatchError):
        kwire.decode_columnar(data)


def legacy_wrapper(inner: bytes, magic: int = 1, codec: int = comp.GZIP) -> bytes:
    b = kwire.LegacyMessageSetBuilder(magic)
    b.append(comp.compress(codec, inner, magic))
    return patch(b.build(), 17, ">b", codec, fix=fix_legacy_crc)


@pytest.mark.parametrize("decode", DECODERS)
def test_nested_compression_is_rejected(decode):
    inner = build_legacy(sample_records(2), 1, "gzip")
    with pytest.raises(CorruptRecordError, match="nested"):
        decode(legacy_wrapper(inner))


@pytest.mark.parametrize("decode", DECODERS)
def test_inner_magic_must_match_wrapper(decode):
    with pytest.raises(CorruptRecordError, match="inner message magic"):
        decode(legacy_wrapper(build_legacy(sample_records(2), 0)))


@pytest.mark.parametrize("decode", DECODERS)
def test_empty_and_truncated_wrappers(decode):
    with pytest.raises(CorruptRecordError, match="no inner messages"):
        decode(legacy_wrapper(b""))
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode(legacy_wrapper(build_legacy(sample_records(2), 1)[:-3]))
    b = kwire.LegacyMessageSetBuilder(1)
    b.append(None)
    with pytest.raises(CorruptRecordError, match="null value"):
        decode(patch(b.build(), 17, ">b", 1, fix=fix_legacy_crc))


@pytest.mark.parametrize("codec", [c for c in CODECS if c])
def test_decompression_bomb_v2(codec):
    data = build_v2([(None, b"\x00" * 1_000_000, [], 0)] * 4, codec)
    with pytest.raises(DecompressionBombError) as err:
        kwire.decode(data, max_decompressed_bytes=1_000_000, topic="t", partition=0)
    assert err.value.offset == 0 and "max_decompressed_bytes" in str(err.value)
    with pytest.raises(DecompressionBombError):
        kwire.decode_columnar(data, max_decompressed_bytes=1_000_000)
    assert len(kwire.decode(data, max_decompressed_bytes=5_000_000).records) == 4


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c])
def test_decompression_bomb_legacy(codec):
    data = build_legacy([(None, b"\x00" * 2_000_000, [], 0)], 1, codec)
    with pytest.raises(DecompressionBombError):
        kwire.decode(data, max_decompressed_bytes=1_000_000)


def test_zstd_frame_declaring_a_huge_size_is_refused_before_allocating():
    import zstandard

    # frame magic, descriptor 0xE0 (single segment, 8-byte content size), size 2**40
    hostile = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 2**40) + b"\x00" * 16
    assert zstandard.frame_content_size(hostile) == 2**40
    with pytest.raises(DecompressionBombError, match="declares"):
        comp.decompress(comp.ZSTD, hostile, 1 << 20)


@pytest.mark.parametrize("codec", [c for c in CODECS if c])
def test_garbage_payload_is_a_decompression_error(codec):
    cid = CODECS.index(codec)
    data = v2_batch(b"\x00\x01\x02garbage-garbage-garbage", 1, attributes=cid)
    with pytest.raises(DecompressionError) as err:
        kwire.decode(data, topic="t", partition=2)
    assert err.value.partition == 2


def test_lz4_frames_cut_or_followed_by_bytes_are_decompression_errors():
    """lz4 payloads are decompressed through the library's C entry points
    into a reused buffer; a frame cut short, one with bytes after its end,
    or one whose blocks are corrupt must fail like the Python path does,
    naming where, and a good frame after a bad one must still decode."""
    import lz4.frame

    from kwire._codec import compiled_codecs

    assert "lz4" in compiled_codecs(decompress=True)
    # 50 good records at offsets 7..56 (equal offsets would be dropped as going backwards)
    records = b"".join(record(b"\x00" + zz(0) + zz(i) + zz(1) + b"k" + zz(1) + b"v" + zz(0)) for i in range(50))
    frame = comp.compress(comp.LZ4, records)
    good = v2_batch(frame, 50, attributes=3, base_offset=7)
    for bad in (frame[:-5], frame + b"\x00\x00\x00\x00junk", frame[:20] + bytes(len(frame) - 20)):
        data = v2_batch(bad, 50, attributes=3, base_offset=7)
        for decode in (kwire.decode, kwire.decode_columnar):
            with pytest.raises(DecompressionError) as err:
                decode(data, topic="t", partition=3)
            assert (err.value.topic, err.value.partition, err.value.offset) == ("t", 3, 7)
    dec = kwire.Decoder()
    with pytest.raises(DecompressionError):
        dec.decode(v2_batch(frame[:-5], 50, attributes=3))
    assert [r.value for r in dec.decode(good).records] == [b"v"] * 50
    # a frame that stores its content size and checksums (other writers do) decodes too
    full = lz4.frame.compress(records, store_size=True, content_checksum=True, block_checksum=True)
    assert [r.key for r in kwire.decode(v2_batch(full, 50, attributes=3)).records] == [b"k"] * 50


def test_snappy_xerial_detected_by_magic_only():
    raw = comp._snappy.compress(b"hello" * 10)
    assert comp.decompress(comp.SNAPPY, raw) == b"hello" * 10
    framed = comp.compress(comp.SNAPPY, b"hello" * 10)
    assert framed.startswith(b"\x82SNAPPY\x00")
    odd_version = framed[:8] + struct.pack(">ii", 7, 9) + framed[16:]
    assert comp.decompress(comp.SNAPPY, odd_version) == b"hello" * 10
    with pytest.raises(DecompressionError, match="past the end"):
        comp.decompress(comp.SNAPPY, framed[:-2])
    with pytest.raises(DecompressionError, match="truncated"):
        comp.decompress(comp.SNAPPY, framed[:12])


def test_lz4_legacy_broken_header_checksum_is_tolerated_only_for_old_magic():
    import lz4.frame

    good = lz4.frame.compress(b"data" * 100)
    broken = comp._lz4_break_checksum(good)
    assert broken != good
    assert comp.decompress(comp.LZ4, broken, magic=0) == b"data" * 100
    assert comp.decompress(comp.LZ4, good, magic=0) == b"data" * 100
    with pytest.raises(DecompressionError):
        comp.decompress(comp.LZ4, broken, magic=2)
    assert comp._xxh32(b"") == 0x02CC5D05 and comp._xxh32(b"a" * 20) == __import__("xxhash").xxh32(b"a" * 20).intdigest()


def test_kafka_07_hostile_input():
    good = kwire.encode_v07([b"abc"])
    with pytest.raises(CorruptRecordError, match="invalid batch size"):
        kwire.decode_v07(struct.pack(">i", 3) + b"\x01\x00\x00", 0)
    with pytest.raises(CorruptRecordError, match="unknown magic"):
        kwire.decode_v07(good[:4] + b"\x07" + good[5:], 0)
    with pytest.raises(CrcMismatchError):
        kwire.decode_v07(good[:-1] + b"x", 100, topic="t")
    assert kwire.decode_v07(good[:-1] + b"x", 100, check_crcs=False).records[0].value == b"abx"
    with pytest.raises(UnsupportedCodecError):
        kwire.decode_v07(good[:5] + b"\x03" + good[6:], 0)
    res = kwire.decode_v07(good + good[:6], 0)
    assert len(res.records) == 1 and res.incomplete_size == len(good)


def multi_batch_buffers():
    recs = sample_records(6)
    yield "v2", b"".join(build_v2(recs, c, base_offset=6 * i) for i, c in enumerate(CODECS))
    yield "legacy", b"".join(
        build_legacy(recs, m, c, base_offset=6 * (4 * m + i)) for m in (0, 1) for i, c in enumerate(LEGACY_CODECS)
    )
    yield "mixed", build_legacy(recs, 1, "lz4") + build_v2(recs, "snappy", base_offset=6) + build_legacy(recs, 0, None, base_offset=12)


@pytest.mark.parametrize("name, buf", list(multi_batch_buffers()), ids=[n for n, _ in multi_batch_buffers()])
def test_truncation_at_every_byte(name, buf):
    assert kwire.decode(buf).consumed == len(buf)
    ends = [0]
    for v in kwire.split_batches(buf).batches:
        ends.append(ends[-1] + len(v))
    dec = kwire.Decoder()
    cdec = kwire.ColumnarDecoder()
    for cut in range(len(buf) + 1):
        res = dec.decode(buf[:cut])
        done = max(e for e in ends if e <= cut)
        assert res.consumed == done
        whole = kwire.decode(buf[:done])
        assert as_tuples(res.records) == as_tuples(whole.records)
        assert res.next_offset == whole.next_offset
        if cut == done:
            assert res.incomplete_size == 0
        elif cut - done < 12:          # even the cut batch's length is missing
            assert res.incomplete_size == 12
        else:
            assert res.incomplete_size == min(e for e in ends if e > done) - done
        if cut % 7 == 0:
            assert cdec.decode(buf[:cut]).record_batch.num_rows == len(res.records)


def test_errors_pickle_with_their_location():
    e = CrcMismatchError("bad", "t", 1, 99)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is CrcMismatchError and (e2.topic, e2.partition, e2.offset) == ("t", 1, 99)
    assert str(e2) == str(e)
