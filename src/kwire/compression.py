"""Compression codecs for Kafka record data: one place for all of them.

The compiled codec calls :func:`compress` and :func:`decompress` once per
batch (never per record). Libraries: :mod:`zlib` for gzip, python-snappy for
snappy, python-lz4 for lz4 and zstandard for zstd. Every decompression is
bounded by a byte limit, so a decompression bomb raises
:class:`~kwire.errors.DecompressionBombError` instead of exhausting memory,
and the error keeps none of the partial output alive (see :func:`decompress`).

Kafka specifics handled here:

* snappy: Kafka's Java client writes xerial-framed snappy (``\\x82SNAPPY\\x00``
  header, then length-prefixed raw blocks); librdkafka and others may write
  raw snappy. Reading tells the two apart by the 8-byte xerial magic only.
  Writing uses xerial framing with 32 KiB blocks, as the Java client does, which
  librdkafka, the Java client, kafka-python and aiokafka all read.
* lz4: LZ4 frame format. Kafka's magic 0 writers computed the frame header
  checksum over the frame magic too (KAFKA-3160); reading legacy messages
  tolerates that checksum, and writing magic 0 reproduces it so 0.8/0.9-era
  readers accept the data.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Union

import lz4.frame as _lz4f
import snappy as _snappy
import zstandard as _zstd

from .errors import DecompressionBombError, DecompressionError, UnsupportedCodecError, without_traceback

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "codec_id",
    "compress",
    "decompress",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_IDS = {name: cid for cid, name in CODEC_NAMES.items()}

#: Default cap on the decompressed size of one batch (or one legacy wrapper).
DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

Buffer = Union[bytes, bytearray, memoryview]


def codec_id(codec: Union[str, int, None]) -> int:
    """Kafka's codec id for a name (``"gzip"``), an id, or ``None`` (none)."""
    if codec is None:
        return NONE
    if isinstance(codec, str):
        try:
            return _IDS[codec.lower()]
        except KeyError:
            raise ValueError(f"unknown compression type {codec!r}; use one of {sorted(_IDS)}") from None
    if codec in CODEC_NAMES:
        return int(codec)
    raise ValueError(f"unknown compression codec id {codec!r}")


# --------------------------------------------------------------------- xxhash32
# Only for the 2 to 15 bytes of an lz4 frame descriptor.
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _xxh32(data: bytes, seed: int = 0) -> int:
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 16 <= n:
            for k in range(4):
                lane = int.from_bytes(data[i + 4 * k : i + 4 * k + 4], "little")
                v[k] = (_rotl((v[k] + lane * _P2) & _M, 13) * _P1) & _M
            i += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        h = (h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M
        h = (_rotl(h, 17) * _P4) & _M
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M
        h = (_rotl(h, 11) * _P1) & _M
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M
    h ^= h >> 13
    h = (h * _P3) & _M
    h ^= h >> 16
    return h


_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4_header_checksum_index(frame: Buffer) -> int:
    """Index of the frame header checksum byte, or -1 if the header is short."""
    if len(frame) < 7 or bytes(frame[:4]) != _LZ4_MAGIC:
        return -1
    flg = frame[4]
    idx = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    return idx if idx < len(frame) else -1


def _lz4_fix_legacy_checksum(frame: Buffer) -> Buffer:
    """Accept the header checksum Kafka's magic 0 writers got wrong: if the
    stored byte is the broken one (hash including the frame magic), return a
    copy carrying the correct one; otherwise return the frame unchanged."""
    idx = _lz4_header_checksum_index(frame)
    if idx < 0:
        return frame
    stored = frame[idx]
    if stored == (_xxh32(bytes(frame[4:idx])) >> 8) & 0xFF:
        return frame
    if stored == (_xxh32(bytes(frame[:idx])) >> 8) & 0xFF:
        fixed = bytearray(frame)
        fixed[idx] = (_xxh32(bytes(frame[4:idx])) >> 8) & 0xFF
        return fixed
    return frame


def _lz4_break_checksum(frame: bytes) -> bytes:
    """Rewrite a frame's header checksum the way Kafka's magic 0 writers did."""
    idx = _lz4_header_checksum_index(frame)
    out = bytearray(frame)
    out[idx] = (_xxh32(frame[:idx]) >> 8) & 0xFF
    return bytes(out)


# ------------------------------------------------------------------ snappy
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024


def _snappy_raw_length(block: Buffer) -> int:
    """The uncompressed length a raw snappy block declares (a uvarint)."""
    result = 0
    for i in range(min(5, len(block))):
        b = block[i]
        result |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            return result
    raise DecompressionError("snappy: invalid uncompressed-length prefix")


def _snappy_raw(block: Buffer, budget: int) -> bytes:
    if _snappy_raw_length(block) > budget:
        raise DecompressionBombError("snappy payload expands past max_decompressed_bytes")
    try:
        return _snappy.uncompress(block)
    except Exception as e:  # python-snappy raises its own UncompressError
        raise DecompressionError(f"snappy: {e or type(e).__name__}") from None


def _snappy_decompress(data: Buffer, limit: int) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) != _XERIAL_MAGIC:
        return _snappy_raw(mv, limit)
    if len(mv) < 16:
        raise DecompressionError("xerial snappy: truncated stream header")
    pos, end = 16, len(mv)
    parts = []
    total = 0
    while pos < end:
        if end - pos < 4:
            raise DecompressionError("xerial snappy: truncated block length")
        (blen,) = struct.unpack_from(">i", mv, pos)
        pos += 4
        if blen < 0 or blen > end - pos:
            raise DecompressionError(f"xerial snappy: block length {blen} past the end of the payload")
        part = _snappy_raw(mv[pos : pos + blen], limit - total)
        total += len(part)
        parts.append(part)
        pos += blen
    return b"".join(parts)


def _snappy_compress(data: Buffer) -> bytes:
    mv = memoryview(data)
    out = [_XERIAL_HEADER]
    for i in range(0, len(mv), _XERIAL_BLOCK):
        block = _snappy.compress(mv[i : i + _XERIAL_BLOCK])
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


# -------------------------------------------------------------------- gzip
def _gzip_decompress(data: Buffer, limit: int) -> bytes:
    parts = []
    total = 0
    rest: Buffer = data
    while True:
        d = zlib.decompressobj(32 + 15)  # gzip or zlib header, detected
        try:
            part = d.decompress(rest, limit - total + 1)
        except zlib.error as e:
            raise DecompressionError(f"gzip: {e}") from None
        total += len(part)
        if total > limit:
            raise DecompressionBombError("gzip payload expands past max_decompressed_bytes")
        parts.append(part)
        if not d.eof:
            raise DecompressionError("gzip: truncated stream")
        rest = d.unused_data
        # Concatenated gzip members are legal (GZIPInputStream reads them);
        # trailing zero padding is tolerated like Java's reader does.
        if not rest or not rest.strip(b"\x00"):
            return b"".join(parts)


def _gzip_compress(data: Buffer, level: int) -> bytes:
    c = zlib.compressobj(6 if level is None else level, zlib.DEFLATED, 16 + 15)
    return c.compress(data) + c.flush()


# --------------------------------------------------------------------- lz4
def _lz4_decompress(data: Buffer, limit: int, magic: int) -> bytes:
    if magic < 2:
        data = _lz4_fix_legacy_checksum(data)
    d = _lz4f.LZ4FrameDecompressor()
    try:
        out = d.decompress(data, max_length=limit + 1)
    except RuntimeError as e:
        raise DecompressionError(f"lz4: {e}") from None
    if len(out) > limit:
        raise DecompressionBombError("lz4 payload expands past max_decompressed_bytes")
    if not d.eof:
        raise DecompressionError("lz4: truncated frame")
    if d.unused_data:
        raise DecompressionError("lz4: data after the end of the frame")
    return out


def _lz4_compress(data: Buffer, level: int, magic: int) -> bytes:
    # Like Kafka's Java writer: independent 64 KiB blocks, no checksums, no size.
    frame = _lz4f.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=_lz4f.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    return _lz4_break_checksum(frame) if magic == 0 else frame


# -------------------------------------------------------------------- zstd
_local = threading.local()  # zstandard contexts are not safe to share across threads


def _zstd_dctx() -> "_zstd.ZstdDecompressor":
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = _zstd.ZstdDecompressor()
    return d


def _zstd_decompress(data: Buffer, limit: int) -> bytes:
    try:
        declared = _zstd.frame_content_size(data)
    except _zstd.ZstdError as e:
        raise DecompressionError(f"zstd: {e}") from None
    if declared > limit:
        raise DecompressionBombError("zstd payload declares a size past max_decompressed_bytes")
    dctx = _zstd_dctx()
    try:
        if declared >= 0:
            return dctx.decompress(data)
        return dctx.decompress(data, max_output_size=limit)
    except _zstd.ZstdError as e:
        reason = f"zstd: {e}"
    if declared < 0 and _zstd_expands_past(dctx, data, limit):
        raise DecompressionBombError("zstd payload expands past max_decompressed_bytes")
    raise DecompressionError(reason)


def _zstd_expands_past(dctx: "_zstd.ZstdDecompressor", data: Buffer, limit: int) -> bool:
    """Whether a frame that declares no size decompresses to more than
    ``limit`` bytes (reading at most ``limit`` + 1 of them); False if it is
    corrupt before that."""
    try:
        return len(dctx.stream_reader(data).read(limit + 1)) > limit
    except _zstd.ZstdError:
        return False


def _zstd_compress(data: Buffer, level: int) -> bytes:
    cache = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    lvl = 3 if level is None else level
    cctx = cache.get(lvl)
    if cctx is None:
        cctx = cache[lvl] = _zstd.ZstdCompressor(level=lvl)
    return cctx.compress(data)


# ------------------------------------------------------------------ public
def decompress(codec: int, data: Buffer, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES, magic: int = 2) -> bytes:
    """Decompress ``data`` written with Kafka codec id ``codec``.

    Raises :class:`DecompressionBombError` if the output would exceed ``limit``
    bytes and :class:`DecompressionError` if the payload is not valid.

    Those errors (and a :class:`MemoryError`) leave with no traceback into
    the codec functions, no chained exception and no reference to ``data``:
    the frames of the codec
    functions hold the partial output, up to ``limit`` bytes, and an error a
    consumer keeps to raise later must not keep that alive. So the partial
    output is freed before the error leaves this function, and the error
    forms no reference cycle (it never needs the cyclic GC to be freed).
    """
    try:
        if codec == GZIP:
            return _gzip_decompress(data, limit)
        if codec == SNAPPY:
            return _snappy_decompress(data, limit)
        if codec == LZ4:
            return _lz4_decompress(data, limit, magic)
        if codec == ZSTD:
            return _zstd_decompress(data, limit)
    except (DecompressionError, MemoryError) as e:
        error = e
    else:
        if codec == NONE:
            return bytes(data)
        raise UnsupportedCodecError(f"unknown compression codec id {codec}")
    # The codec functions' frames, reachable from the traceback and from the
    # library error it was raised during, hold the partial output.
    del data
    without_traceback(error, chained=False)
    try:
        raise error
    finally:
        del error     # the frame the new traceback holds must not hold the error: no cycle


def compress(codec: int, data: Buffer, magic: int = 2, level: Union[int, None] = None) -> bytes:
    """Compress ``data`` with Kafka codec id ``codec`` the way Kafka's own
    clients frame it for message format ``magic``."""
    if codec == GZIP:
        return _gzip_compress(data, level)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return _lz4_compress(data, level, magic)
    if codec == ZSTD:
        if magic < 2:
            raise ValueError("zstd needs message format v2 (magic 2)")
        return _zstd_compress(data, level)
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCodecError(f"unknown compression codec id {codec}")
