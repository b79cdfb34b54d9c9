"""Kafka's varints, for tests that hand-make record bytes: one definition
for the codec tests and the hostile broker."""

from __future__ import annotations


def uvarint(n: int) -> bytes:
    """An unsigned varint (7 bits a byte, least significant first)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def zigzag(n: int) -> bytes:
    """A signed varint (Kafka's zig-zag encoding)."""
    return uvarint((n << 1) ^ (n >> 63))
