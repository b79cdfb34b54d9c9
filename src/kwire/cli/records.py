"""Records on the command line, as kcat says them: the escapes of
delimiters and format strings, ``kwire consume``'s ``-f`` format string and
``-o`` offset specs, and the records a ``kwire produce`` run reads
(delimited, split into key and value, or whole files).

Format string tokens (kcat's): ``%s`` value, ``%S`` value length (-1 for
null), ``%R`` value length as a big-endian 32-bit int (binary framing),
``%k`` key, ``%K`` key length, ``%T`` timestamp (ms), ``%h`` headers
(``name=value`` comma-separated), ``%t`` topic, ``%p`` partition, ``%o``
offset, ``%%`` a percent sign; escapes ``\\n``, ``\\r``, ``\\t``, ``\\\\``
and ``\\xNN``. A null key or value prints as nothing, or as ``NULL`` with
``-Z``.

Offset specs (``-o``, kcat's): ``beginning``/``earliest``, ``end``/
``latest``, ``stored`` (the group's committed offsets, with ``-G``), ``N``
(an offset), ``-N`` (N before the end of each partition, not before its
start), ``s@MS`` (the first record at or after a timestamp), and
``e@MS`` (stop each partition before its first record at or after a
timestamp; given besides a start).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

__all__ = ["unescape", "compile_format", "OffsetSpec", "parse_offsets", "split_stream", "RecordReader"]

_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\", "0": b"\0"}

#: One part of a compiled format: the bytes it adds for (topic, partition, record).
Part = Callable[[str, int, Any], bytes]


def unescape(text: str) -> bytes:
    """``text`` as bytes (UTF-8) with kcat's escapes replaced: ``\\n``,
    ``\\r``, ``\\t``, ``\\\\``, ``\\0`` and ``\\xNN``. An unknown escape
    raises ValueError."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\":
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = text[i + 1:i + 2]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            i += 2
        elif nxt == "x" and len(text[i + 2:i + 4]) == 2:
            try:
                out.append(int(text[i + 2:i + 4], 16))
            except ValueError:
                raise ValueError(f"bad escape {text[i:i + 4]!r}: \\x takes two hex digits") from None
            i += 4
        else:
            raise ValueError(f"bad escape {text[i:i + 2]!r} (\\n, \\r, \\t, \\\\, \\0 or \\xNN)")
    return bytes(out)


def _length(b: Optional[bytes]) -> int:
    return -1 if b is None else len(b)


def compile_format(fmt: str, null: bytes = b"") -> Callable[[str, int, Any], bytes]:
    """kcat's ``-f`` format string as a function of (topic, partition,
    record) to the bytes printed; ``null`` stands for a null key or value
    (``-Z``: ``NULL``). An unknown token raises ValueError."""
    data = unescape(fmt)

    def blob(get: Callable[[Any], Optional[bytes]]) -> Part:
        return lambda t, p, r: null if get(r) is None else bytes(get(r))

    tokens = {
        ord("s"): blob(lambda r: r.value),
        ord("k"): blob(lambda r: r.key),
        ord("S"): lambda t, p, r: b"%d" % _length(r.value),
        ord("K"): lambda t, p, r: b"%d" % _length(r.key),
        ord("R"): lambda t, p, r: struct.pack(">i", _length(r.value)),
        ord("T"): lambda t, p, r: b"%d" % r.timestamp,
        ord("h"): lambda t, p, r: _headers(r.headers, null),
        ord("t"): lambda t, p, r: t.encode("utf-8"),
        ord("p"): lambda t, p, r: b"%d" % p,
        ord("o"): lambda t, p, r: b"%d" % r.offset,
    }
    parts: List[Part] = []
    literal = bytearray()
    i = 0
    while i < len(data):
        if data[i] != ord("%"):
            literal.append(data[i])
            i += 1
            continue
        token = data[i + 1] if i + 1 < len(data) else None
        if token == ord("%"):
            literal.append(token)
        elif token in tokens:
            if literal:
                parts.append(_constant(bytes(literal)))
                literal = bytearray()
            parts.append(tokens[token])
        else:
            shown = "%" + (chr(token) if token is not None else "")
            raise ValueError(f"unknown format token {shown!r} (%s %S %R %k %K %T %h %t %p %o %%)")
        i += 2
    if literal:
        parts.append(_constant(bytes(literal)))
    return lambda topic, partition, record: b"".join(part(topic, partition, record) for part in parts)


def _constant(b: bytes) -> Part:
    return lambda t, p, r: b


def _headers(headers: Sequence[Tuple[str, Optional[bytes]]], null: bytes) -> bytes:
    return b",".join(k.encode("utf-8") + b"=" + (null if v is None else bytes(v)) for k, v in headers)


@dataclass(frozen=True)
class OffsetSpec:
    """Where a consume run starts (``kind``: beginning, end, stored,
    offset, relative or timestamp, with ``value``) and the timestamp it
    stops each partition at (``stop_ms``, or None)."""

    kind: str = "beginning"
    value: int = 0
    stop_ms: Optional[int] = None


_NAMED = {"beginning": "beginning", "earliest": "beginning", "end": "end", "latest": "end", "stored": "stored"}


def parse_offsets(specs: Iterable[str], default: str = "beginning") -> OffsetSpec:
    """The ``-o`` specs of a run (at most one start and one ``e@``) as an
    :class:`OffsetSpec`; ``default`` when none gives a start. A bad spec
    raises ValueError."""
    start: Optional[Tuple[str, int]] = None
    stop: Optional[int] = None
    for spec in specs:
        s = spec.strip()
        if s.startswith("e@"):
            if stop is not None:
                raise ValueError("-o e@MS given twice")
            stop = _number(s[2:], spec)
            continue
        if start is not None:
            raise ValueError(f"-o gives a start twice ({spec!r})")
        if s in _NAMED:
            start = (_NAMED[s], 0)
        elif s.startswith("s@"):
            start = ("timestamp", _number(s[2:], spec))
        elif s.startswith("-"):
            start = ("relative", _number(s[1:], spec))
        else:
            start = ("offset", _number(s, spec))
    kind, value = start if start is not None else (default, 0)
    return OffsetSpec(kind, value, stop)


def _number(text: str, spec: str) -> int:
    if not text.isdigit():
        raise ValueError(f"bad offset {spec!r}: beginning, end, stored, N, -N, s@MS or e@MS")
    return int(text)


def split_stream(stream: BinaryIO, delimiter: bytes, chunk: int = 1 << 16) -> Iterator[bytes]:
    """The pieces of ``stream`` between ``delimiter`` (any bytes); the last
    one even without a delimiter after it, when it is not empty."""
    rest = b""
    while True:
        data = stream.read(chunk)
        if not data:
            break
        rest += data
        pieces = rest.split(delimiter)
        rest = pieces.pop()
        yield from pieces
    if rest:
        yield rest


@dataclass
class RecordReader:
    """What each piece of a produce run's input becomes: ``key_delimiter``
    splits off a key at its first occurrence (a piece without one is a
    value alone), ``headers`` go on every record, and with ``null_empty``
    (``-Z``) an empty key or value is sent as null (a tombstone)."""

    key_delimiter: Optional[bytes] = None
    headers: Optional[List[Tuple[str, bytes]]] = None
    null_empty: bool = False

    def record(self, piece: bytes) -> Tuple[Optional[bytes], Optional[bytes]]:
        """(key, value) of one piece."""
        key: Optional[bytes] = None
        value: Optional[bytes] = piece
        if self.key_delimiter:
            k, sep, v = piece.partition(self.key_delimiter)
            if sep:
                key, value = k, v
        if self.null_empty:
            key = key or None
            value = value or None
        return key, value


def parse_headers(given: Optional[Sequence[str]]) -> Optional[List[Tuple[str, bytes]]]:
    """``-H name=value`` options (repeatable; escapes as in delimiters) as
    headers; a header without ``=`` raises ValueError."""
    if not given:
        return None
    out = []
    for h in given:
        name, sep, value = h.partition("=")
        if not sep or not name:
            raise ValueError(f"bad header {h!r}: -H NAME=VALUE")
        out.append((name, unescape(value)))
    return out
