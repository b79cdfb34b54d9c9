"""Primitives of the generated message code (kwire.protocol.messages).

Decoders take ``(buf, pos, end)`` and return ``(value, new_pos)``; every read
is checked against ``end`` and a violation raises :class:`_Short` or
:class:`_Bad`, which the message's ``decode`` turns into a
:class:`kwire.errors.ProtocolError` naming the API and version. Array counts
are checked against the bytes left before anything is allocated. Encoders
append to a bytearray ``out``; a ``records`` value is not copied: it goes
into ``chunks`` (the list of buffers a request is sent as) as it is.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

from kwire.errors import ProtocolError

__all__ = ["ZERO_UUID"]

ZERO_UUID = uuid.UUID(int=0)
_UNSET: Any = object()

_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_u16 = struct.Struct(">H")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_f64 = struct.Struct(">d")
_bool = struct.Struct(">?")


class _Short(Exception):
    pass


class _Bad(Exception):
    pass


def _short() -> None:
    raise _Short("truncated: a field runs past the end of the frame")


def _bad(reason: str) -> None:
    raise _Bad(reason)


def _absent(struct_name: str, attr: str, version: int) -> None:
    raise ValueError(f"{struct_name}.{attr} is set but version {version} has no such field")


class _Message:
    """Base of every generated message and struct class."""

    __slots__ = ()
    _FIELDS: Tuple[str, ...] = ()
    _DECODERS: Dict[int, Callable[..., Any]] = {}
    _ENCODERS: Dict[int, Callable[..., Any]] = {}
    API_KEY: Optional[int] = None
    MIN_VERSION = 0
    MAX_VERSION = 0
    FLEXIBLE_MIN: Optional[int] = None

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._FIELDS) and \
            (self.unknown_tags or None) == (other.unknown_tags or None)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = []
        for f in self._FIELDS:
            v = getattr(self, f)
            if isinstance(v, memoryview):
                v = f"<{len(v)} bytes>"
            elif isinstance(v, (bytes, bytearray)) and len(v) > 64:
                v = f"<{len(v)} bytes>"
            parts.append(f"{f}={v!r}" if not isinstance(v, str) or not v.startswith("<") else f"{f}={v}")
        return f"{type(self).__qualname__}({', '.join(parts)})"

    @classmethod
    def _check_version(cls, version: int) -> None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise ValueError(f"{cls.__name__} has versions {cls.MIN_VERSION} to {cls.MAX_VERSION}, not {version}")

    @classmethod
    def encode(cls, obj: Any, version: int) -> List[Any]:
        """The body of ``obj`` at ``version`` as a list of buffers."""
        cls._check_version(version)
        out = bytearray()
        chunks: List[Any] = []
        cls._ENCODERS[version](obj, out, chunks)
        if out:
            chunks.append(out)
        return chunks

    @classmethod
    def encode_bytes(cls, obj: Any, version: int) -> bytes:
        return b"".join(bytes(c) for c in cls.encode(obj, version))

    @classmethod
    def decode(cls, buf: Any, version: int, pos: int = 0, end: Optional[int] = None) -> Any:
        """Decode exactly ``buf[pos:end]`` (all of ``buf`` by default) as a
        ``version`` body; ``records`` and ``bytes`` fields are memoryviews
        into ``buf``."""
        cls._check_version(version)
        if not isinstance(buf, memoryview):
            buf = memoryview(buf)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        if end is None:
            end = len(buf)
        name = cls.__name__.replace("Request", "").replace("Response", "")
        try:
            obj, pos = cls._DECODERS[version](buf, pos, end)
        except _Short as e:
            raise ProtocolError(str(e), name, version) from None
        except _Bad as e:
            raise ProtocolError(str(e), name, version) from None
        except (struct.error, IndexError):
            raise ProtocolError("truncated: a field runs past the end of the frame", name, version) from None
        except UnicodeDecodeError:
            raise ProtocolError("a string is not valid UTF-8", name, version) from None
        if pos != end:
            raise ProtocolError(f"{end - pos} bytes left over after the message", name, version)
        return obj


# ------------------------------------------------------------------ reading
def _uvarint(buf: memoryview, pos: int, end: int) -> Tuple[int, int]:
    v = 0
    shift = 0
    while True:
        if pos >= end:
            _short()
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 28:
            _bad("unsigned varint longer than 5 bytes")


def _fx_int8(buf, pos, end):
    if pos + 1 > end:
        _short()
    return _i8.unpack_from(buf, pos)[0], pos + 1


def _fx_int16(buf, pos, end):
    if pos + 2 > end:
        _short()
    return _i16.unpack_from(buf, pos)[0], pos + 2


def _fx_uint16(buf, pos, end):
    if pos + 2 > end:
        _short()
    return _u16.unpack_from(buf, pos)[0], pos + 2


def _fx_int32(buf, pos, end):
    if pos + 4 > end:
        _short()
    return _i32.unpack_from(buf, pos)[0], pos + 4


def _fx_uint32(buf, pos, end):
    if pos + 4 > end:
        _short()
    return _u32.unpack_from(buf, pos)[0], pos + 4


def _fx_int64(buf, pos, end):
    if pos + 8 > end:
        _short()
    return _i64.unpack_from(buf, pos)[0], pos + 8


def _fx_float64(buf, pos, end):
    if pos + 8 > end:
        _short()
    return _f64.unpack_from(buf, pos)[0], pos + 8


def _fx_bool(buf, pos, end):
    if pos + 1 > end:
        _short()
    return buf[pos] != 0, pos + 1


def _len_k16(buf, pos, end):
    if pos + 2 > end:
        _short()
    return _i16.unpack_from(buf, pos)[0], pos + 2


def _len_k32(buf, pos, end):
    if pos + 4 > end:
        _short()
    return _i32.unpack_from(buf, pos)[0], pos + 4


def _len_c(buf, pos, end):
    n, pos = _uvarint(buf, pos, end)
    return n - 1, pos


def _take_str(buf, pos, end, n, nullable):
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        _bad("invalid string length" if n < -1 else "null string where none is allowed")
    stop = pos + n
    if stop > end:
        _short()
    return str(buf[pos:stop], "utf-8"), stop


def _take_bytes(buf, pos, end, n, nullable):
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        _bad("invalid bytes length" if n < -1 else "null bytes where none are allowed")
    stop = pos + n
    if stop > end:
        _short()
    return buf[pos:stop], stop


def _str_k(buf, pos, end):
    n, pos = _len_k16(buf, pos, end)
    return _take_str(buf, pos, end, n, False)


def _str_kn(buf, pos, end):
    n, pos = _len_k16(buf, pos, end)
    return _take_str(buf, pos, end, n, True)


def _str_c(buf, pos, end):
    n, pos = _len_c(buf, pos, end)
    return _take_str(buf, pos, end, n, False)


def _str_cn(buf, pos, end):
    n, pos = _len_c(buf, pos, end)
    return _take_str(buf, pos, end, n, True)


def _bytes_k(buf, pos, end):
    n, pos = _len_k32(buf, pos, end)
    return _take_bytes(buf, pos, end, n, False)


def _bytes_kn(buf, pos, end):
    n, pos = _len_k32(buf, pos, end)
    return _take_bytes(buf, pos, end, n, True)


def _bytes_c(buf, pos, end):
    n, pos = _len_c(buf, pos, end)
    return _take_bytes(buf, pos, end, n, False)


def _bytes_cn(buf, pos, end):
    n, pos = _len_c(buf, pos, end)
    return _take_bytes(buf, pos, end, n, True)


def _uuid(buf, pos, end):
    if pos + 16 > end:
        _short()
    return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16


def _array(buf, pos, end, elem, flex, nullable, min_size):
    if flex:
        n, pos = _len_c(buf, pos, end)
    else:
        n, pos = _len_k32(buf, pos, end)
    if n > 0:
        return _array_n(buf, pos, end, elem, n, min_size)
    return ([] if n == 0 else _null(n, nullable)), pos


def _array_n(buf, pos, end, elem, n, min_size):
    """``n`` (> 0) elements, after the count was read."""
    if n * min_size > end - pos:
        _bad(f"array of {n} elements cannot fit in the {end - pos} bytes left")
    out = []
    append = out.append
    for _ in range(n):
        v, pos = elem(buf, pos, end)
        append(v)
    return out, pos


def _null(n, nullable):
    """The value of an array whose count is negative: None, if allowed."""
    if n == -1 and nullable:
        return None
    _bad("invalid array length" if n < -1 else "null array where none is allowed")


def _tags(buf, pos, end):
    """Skip a tagged-field section of a struct with no known tags, keeping
    what it holds."""
    n, pos = _uvarint(buf, pos, end)
    if not n:
        return None, pos
    if n > end - pos:
        _bad("more tagged fields than bytes left")
    unknown = {}
    for _ in range(n):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        stop = pos + size
        if stop > end:
            _short()
        unknown[tag] = bytes(buf[pos:stop])
        pos = stop
    return unknown, pos


# ------------------------------------------------------------------ writing
def _put_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _pfx_int8(x, out, chunks):
    out += _i8.pack(x)


def _pfx_int16(x, out, chunks):
    out += _i16.pack(x)


def _pfx_uint16(x, out, chunks):
    out += _u16.pack(x)


def _pfx_int32(x, out, chunks):
    out += _i32.pack(x)


def _pfx_uint32(x, out, chunks):
    out += _u32.pack(x)


def _pfx_int64(x, out, chunks):
    out += _i64.pack(x)


def _pfx_float64(x, out, chunks):
    out += _f64.pack(x)


def _pfx_bool(x, out, chunks):
    out.append(1 if x else 0)


def _null_error(what: str) -> None:
    raise ValueError(f"{what} is null where the version allows none")


def _put_str_k(x, out, chunks):
    if x is None:
        _null_error("a string")
    b = x.encode("utf-8")
    out += _i16.pack(len(b))
    out += b


def _put_str_kn(x, out, chunks):
    if x is None:
        out += b"\xff\xff"
        return
    _put_str_k(x, out, chunks)


def _put_str_c(x, out, chunks):
    if x is None:
        _null_error("a string")
    b = x.encode("utf-8")
    _put_uvarint(out, len(b) + 1)
    out += b


def _put_str_cn(x, out, chunks):
    if x is None:
        out.append(0)
        return
    _put_str_c(x, out, chunks)


def _put_bytes_k(x, out, chunks):
    if x is None:
        _null_error("a bytes field")
    out += _i32.pack(len(x))
    out += x


def _put_bytes_kn(x, out, chunks):
    if x is None:
        out += b"\xff\xff\xff\xff"
        return
    _put_bytes_k(x, out, chunks)


def _put_bytes_c(x, out, chunks):
    if x is None:
        _null_error("a bytes field")
    _put_uvarint(out, len(x) + 1)
    out += x


def _put_bytes_cn(x, out, chunks):
    if x is None:
        out.append(0)
        return
    _put_bytes_c(x, out, chunks)


def _records_parts(x):
    if isinstance(x, (list, tuple)):
        parts = [memoryview(p).cast("B") if not isinstance(p, bytes) else p for p in x]
    else:
        parts = [x if isinstance(x, bytes) else memoryview(x).cast("B")]
    return parts, sum(len(p) for p in parts)


def _emit(parts, out, chunks):
    if chunks is None:            # inside a tagged field: no zero-copy there
        for p in parts:
            out += p
        return
    for p in parts:
        if len(p) < 4096:
            out += p
        else:
            chunks.append(bytes(out))
            out.clear()
            chunks.append(p)


def _put_records_k(x, out, chunks):
    if x is None:
        out += b"\xff\xff\xff\xff"
        return
    parts, n = _records_parts(x)
    out += _i32.pack(n)
    _emit(parts, out, chunks)


def _put_records_c(x, out, chunks):
    if x is None:
        out.append(0)
        return
    parts, n = _records_parts(x)
    _put_uvarint(out, n + 1)
    _emit(parts, out, chunks)


def _put_uuid(x, out, chunks):
    out += (ZERO_UUID if x is None else x).bytes


def _put_array(x, out, chunks, elem, flex, nullable):
    if x is None:
        if not nullable:
            _null_error("an array")
        if flex:
            out.append(0)
        else:
            out += b"\xff\xff\xff\xff"
        return
    if flex:
        _put_uvarint(out, len(x) + 1)
    else:
        out += _i32.pack(len(x))
    for v in x:
        elem(v, out, chunks)


def _put_tags(out, known, unknown):
    items = list(known or ())
    if unknown:
        items += [(t, b) for t, b in unknown.items()]
    if not items:
        out.append(0)
        return
    items.sort(key=lambda kv: kv[0])
    _put_uvarint(out, len(items))
    for tag, b in items:
        _put_uvarint(out, tag)
        _put_uvarint(out, len(b))
        out += b
