"""Shared builders for the codec tests (kwire's own builders plus byte surgery)."""

from __future__ import annotations

import struct
import zlib
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import kwire

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
LEGACY_CODECS = [None, "gzip", "snappy", "lz4"]

RecordTuple = Tuple[Optional[bytes], Optional[bytes], Sequence[Tuple[str, Optional[bytes]]], int]


def sample_records(n: int, seed: int = 0) -> List[RecordTuple]:
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d-%d" % (seed, i)
        value = None if i % 11 == 5 else (b"value-%d " % i) * (1 + i % 4)
        headers = [] if i % 3 == 0 else [("h%d" % (i % 2), b"x" * (i % 5)), ("null", None)]
        out.append((key, value, headers, 1_600_000_000_000 + 17 * i))
    return out


def build_v2(records: Iterable[RecordTuple], compression=None, **kw) -> bytes:
    b = kwire.RecordBatchBuilder(compression, **kw)
    for key, value, headers, ts in records:
        b.append(value, key=key, headers=headers, timestamp=ts)
    return b.build()


def build_legacy(records: Iterable[RecordTuple], magic: int, compression=None, **kw) -> bytes:
    b = kwire.LegacyMessageSetBuilder(magic, compression, **kw)
    for key, value, _headers, ts in records:
        b.append(value, key=key, timestamp=ts)
    return b.build()


def as_tuples(records) -> list:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers)) for r in records]


def columnar_tuples(rb) -> list:
    rows = rb.drop_columns(["timestamp"]).to_pydict()   # datetimes cannot hold every int64
    unit = rb.schema.field("timestamp").type.unit
    stamps = rb.column("timestamp").cast("int64").to_pylist()
    out = []
    for i in range(rb.num_rows):
        hs = rows["headers"][i]
        out.append(
            (
                rows["offset"][i],
                stamps[i] // 1000 if unit == "us" else stamps[i],
                rows["timestamp_type"][i],
                rows["key"][i],
                rows["value"][i],
                tuple((h["key"], h["value"]) for h in hs) if hs is not None else (),
            )
        )
    return out


def fix_v2_crc(batch: bytearray) -> bytearray:
    """Recompute the CRC32C of a v2 batch after byte surgery."""
    import google_crc32c

    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return batch


def fix_legacy_crc(msg: bytearray) -> bytearray:
    """Recompute the CRC32 of a legacy message (offset+size+message)."""
    struct.pack_into(">I", msg, 12, zlib.crc32(bytes(msg[16:])))
    return msg


def patch(data: bytes, pos: int, fmt: str, value, fix: Optional[Callable] = None) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, pos, value)
    return bytes(fix(b) if fix else b)
