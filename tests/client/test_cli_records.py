"""kcat's record syntax (kwire.cli.records): escapes, format strings, offset
specs, delimited input and key splitting, without a broker."""

from __future__ import annotations

import io
import struct
from types import SimpleNamespace

import pytest

from kwire.cli.records import OffsetSpec, RecordReader, compile_format, parse_headers, parse_offsets, split_stream, unescape


def _rec(key=b"k", value=b"v", offset=7, timestamp=1700000000000, headers=()):
    return SimpleNamespace(key=key, value=value, offset=offset, timestamp=timestamp, headers=list(headers))


def test_escapes():
    assert unescape(r"a\nb\tc\\d\x00\x41\r") == b"a\nb\tc\\d\x00A\r"
    assert unescape("é") == "é".encode()
    for bad in (r"\q", r"\x4", r"\xzz", "\\"):
        with pytest.raises(ValueError):
            unescape(bad)


def test_format_string_tokens_as_kcat():
    fmt = compile_format(r"%t [%p] @%o %T: %k=%s (%K/%S) {%h} 100%%\n")
    r = _rec(headers=[("a", b"1"), ("b", None)])
    assert fmt("orders", 3, r) == b"orders [3] @7 1700000000000: k=v (1/1) {a=1,b=} 100%\n"
    nulls = _rec(key=None, value=None)
    assert compile_format("%k|%s|%K|%S")("t", 0, nulls) == b"||-1|-1"
    assert compile_format("%k|%s", null=b"NULL")("t", 0, nulls) == b"NULL|NULL"
    framed = compile_format("%R%s")("t", 0, _rec(value=b"abc"))
    assert framed == struct.pack(">i", 3) + b"abc"
    assert compile_format("%R")("t", 0, _rec(value=None)) == struct.pack(">i", -1)
    for bad in ("%x", "50%"):
        with pytest.raises(ValueError, match="format token"):
            compile_format(bad)


def test_offset_specs():
    assert parse_offsets([]) == OffsetSpec("beginning", 0, None)
    assert parse_offsets([], default="stored").kind == "stored"
    assert parse_offsets(["end"]) == OffsetSpec("end", 0, None)
    assert parse_offsets(["latest"]).kind == "end" and parse_offsets(["earliest"]).kind == "beginning"
    assert parse_offsets(["-100"]) == OffsetSpec("relative", 100, None)
    assert parse_offsets(["42"]) == OffsetSpec("offset", 42, None)
    assert parse_offsets(["s@1700000000000", "e@1700000001000"]) == OffsetSpec("timestamp", 1700000000000,
                                                                               1700000001000)
    assert parse_offsets(["e@5"]) == OffsetSpec("beginning", 0, 5)
    for bad in (["x"], ["s@"], ["1", "2"], ["e@1", "e@2"], ["-"], ["s@-1"]):
        with pytest.raises(ValueError):
            parse_offsets(bad)


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 16])
def test_split_stream_with_any_delimiter_and_chunking(chunk):
    data = b"a||b||||c||"
    assert list(split_stream(io.BytesIO(data), b"||", chunk)) == [b"a", b"b", b"", b"c"]
    assert list(split_stream(io.BytesIO(b"x\ny"), b"\n", chunk)) == [b"x", b"y"]
    assert list(split_stream(io.BytesIO(b""), b"\n", chunk)) == []


def test_record_reader_keys_headers_and_nulls():
    r = RecordReader(b":", parse_headers(["h=1", r"t=a\tb"]))
    assert r.record(b"k:v:w") == (b"k", b"v:w")
    assert r.record(b"novalue") == (None, b"novalue")
    assert r.headers == [("h", b"1"), ("t", b"a\tb")]
    z = RecordReader(b":", None, null_empty=True)
    assert z.record(b"k:") == (b"k", None)          # a tombstone
    assert z.record(b":v") == (None, b"v")
    with pytest.raises(ValueError):
        parse_headers(["noequals"])
