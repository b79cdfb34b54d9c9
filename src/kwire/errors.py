"""Exceptions raised by kwire.

Every error kwire raises derives from :class:`KwireError`. Errors about the
bytes of a record batch derive from :class:`CorruptRecordError` and name the
topic, partition and offset where the problem was found, so a consumer can
report exactly which record it could not return.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "KwireError",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionError",
    "DecompressionBombError",
    "UnsupportedCodecError",
    "ProtocolError",
]


class KwireError(Exception):
    """Base class of every kwire exception.

    ``retriable`` tells whether repeating the same operation may succeed.
    """

    retriable: bool = False


class CorruptRecordError(KwireError):
    """Record data that cannot be decoded: truncated inside a batch, a length
    or count that does not fit, an invalid varint, an unknown magic byte.

    Attributes ``topic``, ``partition`` and ``offset`` say where (``None`` when
    the caller did not name the topic or partition); ``reason`` is the bare
    description without location.
    """

    def __init__(
        self,
        reason: str,
        topic: Optional[str] = None,
        partition: Optional[int] = None,
        offset: Optional[int] = None,
    ) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        super().__init__(self._format())

    def _format(self) -> str:
        where = []
        if self.topic is not None:
            where.append(f"topic {self.topic!r}")
        if self.partition is not None and self.partition >= 0:
            where.append(f"partition {self.partition}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if not where:
            return self.reason
        return f"{self.reason} ({', '.join(where)})"

    def __reduce__(self):  # keep the fields across pickling (Spark workers)
        return (type(self), (self.reason, self.topic, self.partition, self.offset))

    def at(self, topic: Optional[str], partition: Optional[int], offset: Optional[int]) -> "CorruptRecordError":
        """The same error, located at ``topic``/``partition``/``offset``."""
        return type(self)(self.reason, topic, partition, offset)


class CrcMismatchError(CorruptRecordError):
    """A batch or message whose stored checksum does not match its bytes."""


class DecompressionError(CorruptRecordError):
    """A compressed payload the codec library could not decompress."""


class DecompressionBombError(DecompressionError):
    """A compressed payload that expands past the configured limit
    (``max_decompressed_bytes``)."""


class UnsupportedCodecError(CorruptRecordError):
    """A compression codec id kwire does not know (Kafka knows 0 to 4)."""


class ProtocolError(KwireError):
    """A request or response frame that does not follow the Kafka protocol:
    truncated, a length or array count past the end of the frame, a negative
    length where none is allowed, an unexpected correlation id. Raised while
    decoding untrusted bytes; never retriable (the connection is unusable).

    ``api`` names the API (``"Fetch"``) and ``version`` its version when
    known."""

    def __init__(self, reason: str, api: Optional[str] = None, version: Optional[int] = None) -> None:
        self.reason = reason
        self.api = api
        self.version = version
        where = f" ({api} v{version})" if api is not None and version is not None else (f" ({api})" if api else "")
        super().__init__(reason + where)

    def __reduce__(self):
        return (type(self), (self.reason, self.api, self.version))
