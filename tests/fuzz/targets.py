"""Fuzz targets: kwire's decoders of untrusted bytes, with their oracles.

Each target is a function ``target(data: bytes) -> None``. It feeds ``data``
to kwire as a hostile broker would and returns normally when kwire behaved:
it decoded the input, or refused it with the error kwire documents for bad
input of that kind. Anything else escapes as an exception, and that is a
finding:

* any exception that is not the documented one (``TypeError``,
  ``IndexError``, ``OverflowError``, ``MemoryError``, ``SystemError``, a
  codec library's own error, ``ProtocolError`` out of a record decoder...);
* the documented error without its location (a record decoder's
  ``CorruptRecordError`` must carry the topic and partition it was given and
  an offset; a protocol decoder's ``ProtocolError`` the API and version);
* :class:`Finding`: a result that breaks a documented property (two decoders
  that disagree, output past a limit, ``consumed`` past the input...).

The runner (``run.py``, under atheris) also counts a crash, a hang
(``-timeout``) and runaway memory (``-rss_limit_mb``) as findings;
``test_corpus.py`` replays the corpus and the saved reproducers through these
same functions without atheris.

The documented errors, per target:

* ``records`` (:class:`kwire.Decoder`, :class:`kwire.ColumnarDecoder`,
  :func:`kwire.split_batches`, :func:`kwire.parse_control_key`),
  ``v07`` (:func:`kwire.decode_v07`) and ``compression``
  (:func:`kwire.compression.decompress`): :class:`kwire.CorruptRecordError`
  and its subclasses (``CrcMismatchError``, ``DecompressionError``,
  ``DecompressionBombError``, ``UnsupportedCodecError``);
* ``protocol`` (:func:`kwire.protocol.decode_response` for every response
  kwire reads, at every version it speaks; the consumer-protocol
  subscription and assignment of :mod:`kwire.classic`):
  :class:`kwire.ProtocolError`.

A target's input starts with a few parameter bytes (which decoder options,
which API and version), then the bytes to decode; the corpus files
(``corpus/<target>/``) are laid out the same way (``make_corpus.py`` writes
them). The layouts are documented on each target below and must stay stable,
or the corpus loses its meaning.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import kwire
from kwire import compression
from kwire.errors import CorruptRecordError, ProtocolError

__all__ = ["Finding", "TARGETS", "records", "v07", "protocol", "compression_target", "avro", "protobuf"]

TOPIC = "fuzz"
PARTITION = 7


class Finding(AssertionError):
    """kwire's result breaks a documented property."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise Finding(what)


def _located_record_error(e: CorruptRecordError, where: str) -> None:
    """A record decoder's error names where: the topic and partition it was
    given, and an offset."""
    if e.topic != TOPIC or e.partition != PARTITION or e.offset is None:
        raise Finding(f"{where}: {type(e).__name__} without its location "
                      f"(topic={e.topic!r}, partition={e.partition!r}, offset={e.offset!r}): {e}") from e


def _pick(choices: Tuple[Any, ...], byte: int) -> Any:
    return choices[byte % len(choices)]


# ------------------------------------------------------------------ records
MIN_OFFSETS = (-1, 0, 1, 2, 3, 5, 10, 100, 2**31, 2**63 - 1, -(2**63))
MAX_BYTES = (-1, 0, 1, 16, 100, 1000, 10_000, 1 << 20)
MAX_RECORDS = (-1, 0, 1, 2, 3, 7, 100)
# Not the default limit (256 MiB): the code that enforces a limit is the same at
# any size, and under AddressSanitizer every allocation of a limit's size (a
# zstd frame without a declared size gets one) costs milliseconds.
MAX_DECOMPRESSED = (1 << 20, 1, 100, 1024, 65536, 4 << 20)

RECORDS_HEADER = 4
"""``records`` input: ``flags, min_offset, max_bytes, max_decompressed``, then the batches.

Both decoders are also run with an :class:`kwire.Aborter` (read_committed)
that aborts every transactional producer found in the batch headers.

``flags``: bit 0 verify CRCs, bit 1 include control batches, bit 2 pass a
``bytearray`` (not ``bytes``), bit 3 pass a ``memoryview`` slice that does not
start at 0 of its buffer, bit 4 columnar timestamps in microseconds, bits 5-7
the length past 4 of the key also given to ``parse_control_key``. The other
bytes index ``MIN_OFFSETS``; ``MAX_BYTES`` (low 4 bits) and ``MAX_RECORDS``
(high 4 bits; decoders that resume inside a batch only); ``MAX_DECOMPRESSED``."""


US_RANGE = "timestamp out of range for the microsecond unit"


def _as_input(body: bytes, flags: int) -> Any:
    if flags & 8:
        return memoryview(b"\xa5" * 3 + body + b"\x5a" * 3)[3:3 + len(body)]
    if flags & 4:
        return bytearray(body)
    return body


def _record_rows(res: Any) -> List[Tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers)) for r in res.records]


def _columnar_rows(res: Any, micros: bool) -> List[Tuple[Any, ...]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    rb = res.record_batch
    try:
        rb.validate(full=True)
    except pa.ArrowInvalid as e:
        raise Finding(f"ColumnarDecoder built an invalid Arrow record batch: {e}") from e
    ts = rb.column("timestamp").cast(pa.int64())
    if micros:   # as the Decoder has them: milliseconds
        ts = pc.divide(ts, 1000)
    columns = [rb.column("offset").to_pylist(), ts.to_pylist(), rb.column("timestamp_type").to_pylist(),
               rb.column("key").to_pylist(), rb.column("value").to_pylist(), rb.column("headers").to_pylist()]
    return [(o, t, tt, k, v, tuple((h["key"], h["value"]) for h in (hs or ())))
            for o, t, tt, k, v, hs in zip(*columns)]


# Decoders since issue 13 stop inside a batch (max_records, max_bytes) and
# resume it on the next call; older ones only stop between batches.
RESUMABLE = hasattr(kwire.DecodeResult, "resume")


def _decoder(columnar: bool, flags: int, limit: int) -> Any:
    opts = dict(check_crcs=bool(flags & 1), include_control=bool(flags & 2), max_decompressed_bytes=limit)
    if columnar:
        return kwire.ColumnarDecoder(timestamp_unit="us" if flags & 16 else "ms", **opts)
    return kwire.Decoder(**opts)


def _rows(res: Any, columnar: bool, flags: int) -> List[Tuple[Any, ...]]:
    return _columnar_rows(res, bool(flags & 16)) if columnar else _record_rows(res)


def _count(res: Any) -> int:
    return res.num_records if hasattr(res, "num_records") else len(res.records)


def _decode_all(columnar: bool, body: bytes, flags: int, min_offset: int, limit: int) -> Tuple[Any, Any]:
    """``(result, error)`` of one decoder on all of ``body``, no budget."""
    kind = "ColumnarDecoder" if columnar else "Decoder"
    try:
        return _decoder(columnar, flags, limit).decode(_as_input(body, flags), topic=TOPIC, partition=PARTITION,
                                                       min_offset=min_offset), None
    except CorruptRecordError as e:
        _located_record_error(e, f"{kind}.decode")
        return None, e


def _decode_bounded(columnar: bool, body: bytes, flags: int, min_offset: int, limit: int, max_bytes: int,
                    max_records: int) -> Tuple[List[Tuple[Any, ...]], Any, int]:
    """Decode ``body`` call after call under ``max_bytes``/``max_records`` as a
    consumer does (the rest of the buffer, the batch to resume, the next
    offset as the new ``min_offset``): ``(rows, error, consumed)``."""
    kind = "ColumnarDecoder" if columnar else "Decoder"
    dec = _decoder(columnar, flags, limit)
    rows: List[Tuple[Any, ...]] = []
    pos, resume = 0, None
    for _ in range(len(body) + 1000):   # every call makes progress, or the walk ends
        opts: Dict[str, Any] = dict(topic=TOPIC, partition=PARTITION, min_offset=min_offset, max_bytes=max_bytes)
        if RESUMABLE:
            opts.update(max_records=max_records, resume=resume)
        try:
            res = dec.decode(_as_input(body[pos:], flags), **opts)
        except CorruptRecordError as e:
            _located_record_error(e, f"{kind}.decode")
            return rows, e, pos
        got = _rows(res, columnar, flags)
        _check(0 <= res.consumed <= len(body) - pos, f"{kind}: consumed {res.consumed} of {len(body) - pos}")
        if RESUMABLE and max_records >= 0:
            _check(len(got) <= max(max_records, 1), f"{kind}: {len(got)} records returned, max_records {max_records}")
        rows += got
        resumed, resume = resume, getattr(res, "resume", None)
        pos += res.consumed
        if res.next_offset is not None:
            min_offset = max(min_offset, res.next_offset)
        if resume is None and (pos == len(body) or (res.consumed == 0 and not got and resumed is None)):
            return rows, None, pos   # the end, or a cut batch: the next fetch brings the rest
    raise Finding(f"{kind}: more calls than bytes and records to walk ({len(body)} bytes)")


def check_records(body: bytes, flags: int = 1, min_offset: int = -1, max_bytes: int = -1,
                  limit: int = compression.DEFAULT_MAX_DECOMPRESSED_BYTES, max_records: int = -1) -> None:
    """The record decoders on ``body``, checked against each other."""
    res, err = _decode_all(False, body, flags, min_offset, limit)
    cres, cerr = _decode_all(True, body, flags, min_offset, limit)
    rows: List[Tuple[Any, ...]] = []
    # The two decoders share one walk of the batches: same verdict, same records
    # (in microseconds a timestamp can be out of range for the columnar one only).
    us_only = cerr is not None and bool(flags & 16) and cerr.reason == US_RANGE
    if us_only:   # the columnar walk stopped there; the other may fail later, or not
        cres, cerr = None, None
    elif (err is None) != (cerr is None):
        raise Finding(f"Decoder and ColumnarDecoder disagree: Decoder {'raised ' + repr(err) if err else 'decoded'}, "
                      f"ColumnarDecoder {'raised ' + repr(cerr) if cerr else 'decoded'}")
    if err is not None:
        if not us_only:
            _check(type(err) is type(cerr), f"Decoder raised {err!r}, ColumnarDecoder {cerr!r}")
    else:
        _check(0 <= res.consumed <= len(body), f"consumed {res.consumed} outside 0..{len(body)}")
        _check(res.incomplete_size >= 0, f"incomplete_size {res.incomplete_size} is negative")
        _check(res.next_offset is None or res.consumed > 0, "next_offset without a batch consumed")
        _check(getattr(res, "resume", None) is None, "a call without limits stopped inside a batch")
        rows = _record_rows(res)
        if min_offset >= 0:
            low = [r[0] for r in rows if r[0] < min_offset]
            _check(not low, f"records before min_offset {min_offset} returned: {low[:5]}")
        if RESUMABLE:   # offsets only go up (issue 13, defect 11)
            offsets = [r[0] for r in rows]
            _check(all(a < b for a, b in zip(offsets, offsets[1:])), f"offsets not increasing: {offsets[:20]}")
        for r in res.records:
            if r.batch.is_control:
                try:
                    version, kind = kwire.parse_control_key(r.key)
                except CorruptRecordError:
                    continue
                _check(-(2**15) <= version < 2**15 and -(2**15) <= kind < 2**15,
                       f"parse_control_key({r.key!r}) = {(version, kind)!r}")
    if err is None and cres is not None:
        for name in ("consumed", "next_offset", "incomplete_size"):
            _check(getattr(res, name) == getattr(cres, name),
                   f"{name}: Decoder {getattr(res, name)!r}, ColumnarDecoder {getattr(cres, name)!r}")
        _check(cres.batch_count == len(res.batches),
               f"batch_count: Decoder {len(res.batches)}, ColumnarDecoder {cres.batch_count}")
        crows = _columnar_rows(cres, bool(flags & 16))
        _check(len(rows) == cres.num_records == len(crows),
               f"records: Decoder {len(rows)}, ColumnarDecoder {cres.num_records}")
        for i, (a, b) in enumerate(zip(rows, crows)):
            _check(a == b, f"record {i}: Decoder {a!r}, ColumnarDecoder {b!r}")
    # Under a budget, call after call, each decoder returns the same records as
    # in one call (none dropped, none repeated) and fails where that one failed.
    if max_bytes >= 0 or (RESUMABLE and max_records >= 0):
        for columnar, whole, whole_err in ((False, res, err), (True, cres, cerr)):
            if us_only and columnar:
                continue
            kind = "ColumnarDecoder" if columnar else "Decoder"
            got, got_err, pos = _decode_bounded(columnar, body, flags, min_offset, limit, max_bytes, max_records)
            if whole_err is None:
                _check(got_err is None, f"{kind}: raised {got_err!r} under max_bytes={max_bytes} "
                                        f"max_records={max_records}, not in one call")
                _check(got == rows, f"{kind}: {len(got)} records in calls under max_bytes={max_bytes} "
                                    f"max_records={max_records}, {len(rows)} in one call "
                                    f"(first difference at {_first_difference(got, rows)})")
                _check(pos == whole.consumed, f"{kind}: consumed {pos} in calls, {whole.consumed} in one")
            else:
                _check(got_err is not None and type(got_err) is type(whole_err),
                       f"{kind}: in one call {whole_err!r}, in calls under max_bytes={max_bytes} "
                       f"max_records={max_records} {got_err!r}")
    # split_batches validates the same batch headers, not the records.
    try:
        split = kwire.split_batches(_as_input(body, flags), topic=TOPIC, partition=PARTITION)
    except CorruptRecordError as e:
        _located_record_error(e, "split_batches")
        _check(err is not None, f"split_batches raised {e!r} on bytes the decoders decoded")
        return
    if err is None and not us_only and hasattr(kwire, "Aborter"):
        _check_read_committed(body, flags, min_offset, limit, split, rows)
    total = sum(len(b) for b in split.batches)
    _check(total == split.consumed <= len(body), f"split_batches: {total} bytes in batches, consumed {split.consumed}")
    if err is None:
        _check(split.consumed == res.consumed and split.incomplete_size == res.incomplete_size,
               f"split_batches consumed {split.consumed} (incomplete {split.incomplete_size}), "
               f"Decoder {res.consumed} (incomplete {res.incomplete_size})")


def _check_read_committed(body: bytes, flags: int, min_offset: int, limit: int, split: Any,
                          rows: List[Tuple[Any, ...]]) -> None:
    """read_committed: the two decoders, each given an Aborter that aborts
    every transactional producer of ``body`` from its first batch on, agree
    (records, next_offset, the aborter after, or the error) and return a
    subsequence of ``rows``, without control records."""
    entries, seen = [], set()
    for b in split.batches:
        if len(b) >= 61 and b[16] == 2 and int.from_bytes(b[21:23], "big") & 0x10:
            pid = int.from_bytes(b[43:51], "big", signed=True)
            if pid not in seen:
                seen.add(pid)
                entries.append((pid, int.from_bytes(b[0:8], "big", signed=True)))
    out = []
    for columnar in (False, True):
        aborter = kwire.Aborter(entries)
        try:
            res = _decoder(columnar, flags, limit).decode(_as_input(body, flags), topic=TOPIC, partition=PARTITION,
                                                          min_offset=min_offset, aborter=aborter)
            out.append((_rows(res, columnar, flags), res.next_offset, res.consumed, aborter.aborting))
        except CorruptRecordError as e:
            _located_record_error(e, "decode(aborter=)")
            _check(aborter.pending == sorted(entries, key=lambda e: e[1]) and not aborter.aborting,
                   "a decode call that raised changed its Aborter")
            out.append((type(e), e.offset))
    _check(out[0] == out[1], f"with an Aborter: Decoder {out[0]!r:.300}, ColumnarDecoder {out[1]!r:.300}")
    if len(out[0]) == 4:
        kept, it = out[0][0], iter(rows)
        _check(all(any(r == x for x in it) for r in kept), "with an Aborter: records that are not in the log")


def _first_difference(a: List[Any], b: List[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"record {i}: {x!r} vs {y!r}"
    return f"record {min(len(a), len(b))}: one list ends"


def records(data: bytes) -> None:
    """Target ``records``: :class:`kwire.Decoder` and :class:`kwire.ColumnarDecoder`
    (which must agree), :func:`kwire.split_batches` and
    :func:`kwire.parse_control_key` on record batches of every format
    (v2, legacy v0/v1, every codec). Layout: :data:`RECORDS_HEADER`."""
    if len(data) < RECORDS_HEADER:
        return
    flags = data[0]
    check_records(data[RECORDS_HEADER:], flags, _pick(MIN_OFFSETS, data[1]), _pick(MAX_BYTES, data[2] & 15),
                  _pick(MAX_DECOMPRESSED, data[3]), _pick(MAX_RECORDS, data[2] >> 4))
    # parse_control_key on raw bytes too (it is public)
    key = data[RECORDS_HEADER:RECORDS_HEADER + 4 + (flags >> 5)]
    try:
        kwire.parse_control_key(key)
    except CorruptRecordError:
        _check(len(key) < 4, f"parse_control_key refused a {len(key)}-byte key")


# ---------------------------------------------------------------------- v07
START_OFFSETS = (0, 1, 1000, 2**31, 2**62, 2**63 - 1)
V07_HEADER = 3
"""``v07`` input: ``flags, start_offset, max_decompressed``, then 0.7 messages.

``flags`` bit 0 verifies CRCs, bits 2 and 3 as for ``records``; the two
other bytes index ``START_OFFSETS`` and ``MAX_DECOMPRESSED``."""


def v07(data: bytes) -> None:
    """Target ``v07``: :func:`kwire.decode_v07` (Kafka 0.7 message sets)."""
    if len(data) < V07_HEADER:
        return
    flags = data[0]
    start = _pick(START_OFFSETS, data[1])
    limit = _pick(MAX_DECOMPRESSED, data[2])
    body = data[V07_HEADER:]
    try:
        res = kwire.decode_v07(_as_input(body, flags), start, check_crcs=bool(flags & 1),
                               max_decompressed_bytes=limit, topic=TOPIC, partition=PARTITION)
    except CorruptRecordError as e:
        _located_record_error(e, "decode_v07")
        return
    _check(0 <= res.consumed <= len(body), f"consumed {res.consumed} outside 0..{len(body)}")
    if res.consumed and start + res.consumed < 2**63:
        _check(res.next_offset == start + res.consumed,
               f"next_offset {res.next_offset} is not start_offset + consumed ({start} + {res.consumed})")
    for r in res.records:
        _check(start <= r.offset < start + max(res.consumed, 1) or r.offset < 0,
               f"record offset {r.offset} outside the bytes consumed from {start}")
        _check(r.value is not None and len(r.value) <= max(len(body), limit), "record value larger than possible")


# --------------------------------------------------------------- compression
CODECS = (1, 2, 3, 4, 0, 5)
"""``compression`` input: ``codec, magic, max_decompressed``, then the payload:
``codec`` indexes ``CODECS`` (gzip, snappy, lz4, zstd, none, an unknown id),
``magic`` is ``byte % 3``, the last byte indexes ``MAX_DECOMPRESSED``."""
COMPRESSION_HEADER = 3


def compression_target(data: bytes) -> None:
    """Target ``compression``: :func:`kwire.compression.decompress`, every
    codec and framing (xerial snappy, lz4's legacy Kafka framing for magic 0
    and 1), under every limit."""
    if len(data) < COMPRESSION_HEADER:
        return
    codec = _pick(CODECS, data[0])
    magic = data[1] % 3
    limit = _pick(MAX_DECOMPRESSED, data[2])
    payload = data[COMPRESSION_HEADER:]
    try:
        out = compression.decompress(codec, payload, limit, magic)
    except CorruptRecordError:
        return
    _check(isinstance(out, (bytes, bytearray, memoryview)), f"decompress returned {type(out).__name__}")
    _check(len(out) <= max(limit, len(payload) if codec == 0 else 0),
           f"codec {codec}: {len(out)} bytes out, limit {limit}")


# ---------------------------------------------------------------------- avro
AVRO_LOGICAL = [
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "fdec", "type": {"type": "fixed", "name": "FD", "size": 5, "logicalType": "decimal", "precision": 11}},
    {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "dur", "type": {"type": "fixed", "name": "DU", "size": 12, "logicalType": "duration"}},
    {"name": "d", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
]
AVRO_EVERYTHING = {"type": "record", "name": "Every", "fields": [
    {"name": "n", "type": "null"}, {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"},
    {"name": "l", "type": "long"}, {"name": "f", "type": "float"}, {"name": "db", "type": "double"},
    {"name": "by", "type": "bytes"}, {"name": "s", "type": "string"},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    {"name": "fx", "type": {"type": "fixed", "name": "FX", "size": 3}},
    {"name": "arr", "type": {"type": "array", "items": ["null", "string"]}},
    {"name": "nulls", "type": {"type": "array", "items": "null"}},
    {"name": "m", "type": {"type": "map", "values": {"type": "record", "name": "In", "fields": [
        {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "int", "string"]}]}}},
    {"name": "logical", "type": {"type": "record", "name": "Logical", "fields": AVRO_LOGICAL}},
]}
AVRO_OLD = {"type": "record", "name": "Every", "fields": [
    {"name": "i", "type": "int"}, {"name": "s", "type": ["null", "bytes", "int"]},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["C", "D", "A"]}},
    {"name": "gone", "type": {"type": "map", "values": {"type": "array", "items": "float"}}}]}
AVRO_NEW = {"type": "record", "name": "Every", "fields": [
    {"name": "i", "type": "double"}, {"name": "s", "type": ["null", "string"]},
    {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"], "default": "B"}},
    {"name": "added", "type": {"type": "array", "items": "long"}, "default": [1, 2]}]}
#: (reader schema, writer schema: None for the reader's)
AVRO_SCHEMAS = ((AVRO_EVERYTHING, None), (AVRO_NEW, AVRO_OLD), ({"type": "array", "items": "long"}, None),
                (["null", "string", {"type": "map", "values": "boolean"}], None))
AVRO_HEADER = 2
"""``avro`` input: ``schema, lengths`` then the values' bytes: ``schema``
indexes ``AVRO_SCHEMAS`` (its low bits) and says whether values are framed
(bit 7: Confluent's magic byte 0 and the schema id 1 before each value, with
a registry that knows id 1; a frame with another id is refused);
``lengths``' low 3 bits are the number of values less one: the bytes after
the header are cut into that many values, the first ones of ``len // n``
bytes, the last of the rest."""


def _avro_format(schema_byte: int) -> Any:
    from kwire.formats.avro import AvroFormat

    reader, writer = _pick(AVRO_SCHEMAS, schema_byte & 0x7F)
    if not schema_byte & 0x80:
        return AvroFormat(reader, writer_schema=writer)
    return AvroFormat(reader, registry=_OneSchemaRegistry(writer or reader))


class _OneSchemaRegistry:
    """The one writer schema, as id 1 (other ids: not found, LookupError as a
    registry's 404). Not a stand-in for a registry server: the fuzz target
    needs a schema lookup in process, and tests/registry runs the real one."""

    def __init__(self, schema: Any) -> None:
        import json

        self.schema = type("Registered", (), {"schema_str": json.dumps(schema), "schema_type": "AVRO",
                                              "references": []})()

    def get_schema(self, schema_id: int) -> Any:
        if schema_id != 1:
            raise LookupError(f"schema {schema_id} not found")
        return self.schema


def avro(data: bytes) -> None:
    """Target ``avro``: :class:`kwire.formats.avro.AvroFormat`'s compiled
    decoder on hostile values, bare or framed, with and without schema
    evolution. Decoded rows must be valid Arrow, one a value, and the same
    whether decoded together or one by one."""
    import pyarrow as pa

    from kwire.formats.base import UndecodableValueError

    if len(data) < AVRO_HEADER:
        return
    fmt = _avro_format(data[0])
    n = (data[1] & 7) + 1
    body = data[AVRO_HEADER:]
    size = len(body) // n
    values = [body[i * size:(i + 1) * size] for i in range(n - 1)] + [body[(n - 1) * size:]]
    offsets = pa.array(range(500, 500 + n), pa.int64())
    try:
        out = fmt.decode(pa.array(values, pa.binary()), topic=TOPIC, partition=PARTITION, offsets=offsets)
    except UndecodableValueError as e:
        _located_record_error(e, "avro")
        _check(0 <= e.row < n and e.offset == 500 + e.row, f"avro: error at row {e.row}, offset {e.offset}")
        return
    out.validate(full=True)
    _check(len(out) == n, f"avro: {len(out)} rows for {n} values")
    one_by_one = pa.concat_arrays([fmt.decode(pa.array([v], pa.binary()), topic=TOPIC, partition=PARTITION,
                                              offsets=offsets.slice(i, 1)) for i, v in enumerate(values)])
    # equal as Arrow data (not as Python values: a date32 may lie past Python's dates); NaN as NaN
    _check(one_by_one.equals(out) or _shown(one_by_one) == _shown(out),
           "avro: rows decoded together differ from one by one")


def _shown(arr: Any) -> str:
    return arr.to_string(window=1 << 20, container_window=1 << 20)


# ------------------------------------------------------------------ protobuf
PROTOBUF_SCHEMAS = ("NESTED", "SCALARS", "PROTO2")
"""The schemas of tests/formats/protobuf/schemas.py the ``protobuf`` target
reads values as (their first message)."""
PROTOBUF_HEADER = 2
"""``protobuf`` input: ``schema, lengths`` then the values' bytes, as for
``avro``: ``schema`` indexes ``PROTOBUF_SCHEMAS`` (its low bits) and says
whether values are framed (bit 7: each value starts with Confluent's frame,
magic byte 0, a schema id and the message-index array, read without a
registry: every frame is the schema's message); ``lengths``' low 3 bits
are the number of values less one, cut as for ``avro``."""
_PROTOBUF: List[Any] = []


def _protobuf_schemas() -> List[Any]:
    """``(bare format, framed format, message class, is proto2)`` per schema, made once."""
    if not _PROTOBUF:
        import importlib.util
        import os

        from kwire.formats.protobuf import ProtobufFormat

        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "formats", "protobuf",
                            "schemas.py")
        spec = importlib.util.spec_from_file_location("kwire_fuzz_protobuf_schemas", path)
        schemas = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(schemas)
        for name in PROTOBUF_SCHEMAS:
            text = getattr(schemas, name)
            desc = schemas.schema(text).message([0])
            _PROTOBUF.append((ProtobufFormat(desc), ProtobufFormat(desc, framed=True), schemas.message_class(desc),
                              'syntax = "proto2"' in text, schemas))
    return _PROTOBUF


def protobuf(data: bytes) -> None:
    """Target ``protobuf``: :class:`kwire.formats.protobuf.ProtobufFormat`'s
    compiled decoder on hostile values, bare and framed, against the
    protobuf package (upb): kwire refuses a bare value exactly when protobuf
    does (but for a proto2 string that is not UTF-8, which Arrow cannot
    hold), and reads the same values when both read it. Decoded rows must
    be valid Arrow, one a value, and the same together and one by one."""
    import pyarrow as pa
    from google.protobuf.message import DecodeError

    from kwire.formats.base import UndecodableValueError

    if len(data) < PROTOBUF_HEADER:
        return
    bare, framed, cls, proto2, schemas = _pick(_protobuf_schemas(), data[0] & 0x7F)
    fmt = framed if data[0] & 0x80 else bare
    n = (data[1] & 7) + 1
    body = data[PROTOBUF_HEADER:]
    size = len(body) // n
    values = [body[i * size:(i + 1) * size] for i in range(n - 1)] + [body[(n - 1) * size:]]
    offsets = pa.array(range(500, 500 + n), pa.int64())
    one_by_one = []
    for i, v in enumerate(values):
        try:
            one_by_one.append(fmt.decode(pa.array([v], pa.binary()), topic=TOPIC, partition=PARTITION,
                                         offsets=offsets.slice(i, 1)))
            refused = None
        except UndecodableValueError as e:
            _located_record_error(e, "protobuf")
            _check(e.row == 0 and e.offset == 500 + i, f"protobuf: error at row {e.row}, offset {e.offset}")
            refused = e
        if fmt is bare:
            try:
                theirs = cls.FromString(v)
            except DecodeError:
                theirs = None
            if refused is not None:
                _check(theirs is None or (proto2 and "UTF-8" in str(refused)),
                       f"protobuf: kwire refused {v.hex()} ({refused}); protobuf reads it")
            else:
                _check(theirs is not None, f"protobuf: protobuf refuses {v.hex()}; kwire read it")
                t = fmt.arrow_type()
                got = one_by_one[-1].to_pylist()[0]
                _check(schemas.normalize(got, t) == schemas.normalize(schemas.expected(theirs), t),
                       f"protobuf: {v.hex()} read as {got}, protobuf reads {theirs}")
    try:
        out = fmt.decode(pa.array(values, pa.binary()), topic=TOPIC, partition=PARTITION, offsets=offsets)
    except UndecodableValueError as e:
        _located_record_error(e, "protobuf")
        _check(0 <= e.row < n and e.offset == 500 + e.row and len(one_by_one) < n,
               f"protobuf: error at row {e.row}, offset {e.offset}; one by one {len(one_by_one)} of {n} read")
        return
    out.validate(full=True)
    _check(len(out) == n and len(one_by_one) == n, f"protobuf: {len(out)} rows for {n} values")
    together = pa.concat_arrays(one_by_one)
    _check(together.equals(out) or _shown(together) == _shown(out),
           "protobuf: rows decoded together differ from one by one")


# ------------------------------------------------------------------ protocol
def _protocol_cases() -> Dict[int, Any]:
    from kwire.protocol import APIS

    return {key: APIS[key][1] for key in sorted(APIS)}


EMBEDDED_SUBSCRIPTION = 0xFE
EMBEDDED_ASSIGNMENT = 0xFF
PROTOCOL_HEADER = 2
"""``protocol`` input: ``api_key, version``, then one response frame (without
its size: correlation id, header, body), as a connection hands it to
:func:`kwire.protocol.decode_response`. ``api_key`` names the response class
when kwire knows that key, else indexes the known keys in order; ``version``
is used as it is when the response has that version, else taken modulo the
range kwire speaks. ``api_key`` 0xFE and 0xFF select the consumer protocol's
subscription and assignment (:mod:`kwire.classic`, raw bytes as JoinGroup and
SyncGroup carry them; ``version`` is then unused)."""


def protocol_case(api_key: int, version: int) -> Tuple[Any, int]:
    cases = _protocol_cases()
    cls = cases.get(api_key)
    if cls is None:
        cls = list(cases.values())[api_key % len(cases)]
    lo, hi = cls.MIN_VERSION, cls.MAX_VERSION
    if not lo <= version <= hi:
        version = lo + version % (hi - lo + 1)
    return cls, version


def protocol(data: bytes) -> None:
    """Target ``protocol``: every response kwire reads, at every version it
    speaks; the records of a Fetch response go on to the record decoders."""
    from kwire import classic
    from kwire.protocol import decode_response

    if len(data) < PROTOCOL_HEADER:
        return
    frame = data[PROTOCOL_HEADER:]
    if data[0] in (EMBEDDED_SUBSCRIPTION, EMBEDDED_ASSIGNMENT):
        try:
            if data[0] == EMBEDDED_SUBSCRIPTION:
                classic.decode_subscription("member", None, frame)
            else:
                classic.decode_assignment(frame)
        except ProtocolError:
            pass
        return
    cls, version = protocol_case(data[0], data[1])
    name = cls.__name__.replace("Response", "")
    try:
        _, resp = decode_response(frame, cls, version)
    except ProtocolError as e:
        if e.api != name or e.version not in (version, 0):
            raise Finding(f"ProtocolError without its location (api={e.api!r}, version={e.version!r}; "
                          f"decoding {name} v{version}): {e}") from e
        return
    # What decoded must encode again at that version and decode to the same.
    if not _round_trips(cls, resp, version) and not (name == "ApiVersions" and _round_trips(cls, resp, 0)):
        raise Finding(f"{name} v{version}: decode(encode(response)) differs from the response")
    if name == "Fetch":
        for topic in resp.responses:
            for part in topic.partitions:
                if part.records is not None and len(part.records):
                    check_records(bytes(part.records))


def _round_trips(cls: Any, resp: Any, version: int) -> bool:
    """What decoded encodes again at ``version`` and decodes to the same
    (ApiVersions may have been read as v0: a broker's answer to a version it
    does not know)."""
    try:
        wire = cls.encode_bytes(resp, version)
    except Exception:   # e.g. a v0 ApiVersions body that the asked version cannot carry
        if cls.__name__ == "ApiVersionsResponse":
            return False
        raise
    return _equal(cls.decode(wire, version), resp)


def _equal(a: Any, b: Any) -> bool:
    """Equality of decoded messages (floats: NaN equals NaN; buffers by content)."""
    if isinstance(a, (bytes, bytearray, memoryview)) and isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(a) == bytes(b)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    slots = getattr(type(a), "__slots__", None)
    if slots is not None and type(a) is type(b):
        return all(_equal(getattr(a, s, None), getattr(b, s, None)) for s in slots)
    return bool(a == b)


TARGETS: Dict[str, Callable[[bytes], None]] = {
    "records": records,
    "v07": v07,
    "compression": compression_target,
    "protocol": protocol,
    "avro": avro,
    "protobuf": protobuf,
}
"""Every target, by the name ``scripts/fuzz`` and the corpus directories use."""


def target(name: str) -> Callable[[bytes], None]:
    try:
        return TARGETS[name]
    except KeyError:
        raise SystemExit(f"unknown fuzz target {name!r}; targets: {', '.join(TARGETS)}") from None


def describe(name: Optional[str] = None) -> str:
    return "\n".join(f"{n}: {(f.__doc__ or '').strip().splitlines()[0]}" for n, f in TARGETS.items()
                     if name in (None, n))
