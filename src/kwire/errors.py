"""Exceptions raised by kwire.

Every error kwire raises derives from :class:`KwireError`. Errors about the
bytes of a record batch derive from :class:`CorruptRecordError` and name the
topic, partition and offset where the problem was found, so a consumer can
report exactly which record it could not return.
"""

from __future__ import annotations

from typing import List, Optional

__all__: List[str] = [
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


# ---------------------------------------------------------------- broker errors
class KafkaError(KwireError):
    """An error code a broker returned. Subclasses, one per code, carry
    ``code``, ``name`` (Kafka's), ``message`` (Kafka's description),
    ``retriable`` and ``invalid_metadata`` (refresh metadata before retrying).

    Instances carry what is known of the context: ``api``, ``topic``,
    ``partition`` and the broker's own ``error_message``.
    """

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    message: str = ""
    invalid_metadata: bool = False

    def __init__(self, error_message: Optional[str] = None, *, api: Optional[str] = None,
                 topic: Optional[str] = None, partition: Optional[int] = None) -> None:
        self.error_message = error_message
        self.api = api
        self.topic = topic
        self.partition = partition
        super().__init__(self._format())

    def _format(self) -> str:
        text = f"{self.name} ({self.code}): {self.message}"
        if self.error_message and self.error_message != self.message:
            text += f" Broker says: {self.error_message}"
        where = []
        if self.api:
            where.append(self.api)
        if self.topic is not None:
            where.append(f"topic {self.topic!r}")
        if self.partition is not None and self.partition >= 0:
            where.append(f"partition {self.partition}")
        return f"{text} ({', '.join(where)})" if where else text

    def __reduce__(self):  # picklable with its context (Spark ships exceptions between processes)
        return (_rebuild_kafka_error, (self.code, self.error_message, self.api, self.topic, self.partition))


def _rebuild_kafka_error(code, error_message, api, topic, partition):
    return error_for_code(code)(error_message, api=api, topic=topic, partition=partition)


def _class_name(name: str) -> str:
    base = "".join(part.capitalize() for part in name.lower().split("_"))
    for suffix in ("Exception", "Error"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base + "Error"


_BY_CODE: dict = {}


def _make_error_classes() -> None:
    from kwire.error_codes import ERROR_CODES

    for code, name, kind, message in ERROR_CODES:
        cls_name = _class_name(name)
        cls = type(cls_name, (KafkaError,), {
            "__doc__": f"Kafka error {code} {name}: {message}",
            "__module__": __name__,
            "code": code, "name": name, "message": message,
            "retriable": kind in ("R", "M"), "invalid_metadata": kind == "M",
        })
        globals()[cls_name] = cls
        __all__.append(cls_name)
        _BY_CODE[code] = cls


_make_error_classes()


class UnknownErrorCodeError(KafkaError):
    """A code this version of kwire does not know (a newer broker's)."""

    code = -1
    name = "UNKNOWN_ERROR_CODE"
    message = "an error code kwire does not know"


def error_for_code(code: int) -> type:
    """The :class:`KafkaError` subclass of ``code`` (a class that keeps the
    number and says it is unknown for codes not in Kafka 4.3's table)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = type(f"KafkaError{code}", (UnknownErrorCodeError,), {
            "code": code, "name": f"UNKNOWN_ERROR_CODE_{code}",
            "message": f"error code {code}, which kwire does not know", "__module__": __name__})
        _BY_CODE[code] = cls
    return cls


def raise_for_code(code: int, error_message: Optional[str] = None, **context) -> None:
    """Raise the error of ``code`` with ``context`` (nothing for 0)."""
    if code:
        raise error_for_code(code)(error_message, **context)


__all__ += ["KafkaError", "UnknownErrorCodeError", "error_for_code", "raise_for_code"]


# ------------------------------------------------------------ Kafka 0.7 errors
class Kafka07Error(KwireError):
    """An error code of a Kafka 0.7 response header (its own table: the
    numbers mean other things than in 0.8+)."""

    code = -1
    name = "Unknown"
    message = "Unknown Error"

    def __init__(self, detail: Optional[str] = None) -> None:
        text = f"Kafka 0.7 {self.name} ({self.code}): {self.message}"
        super().__init__(text + (f" ({detail})" if detail else ""))


_V07 = (
    (-1, "Unknown", "Unknown Error"),
    (1, "OffsetOutOfRange", "Offset requested is no longer available on the server"),
    (2, "InvalidMessage", "A message you sent failed its checksum and is corrupt."),
    (3, "WrongPartition", "You tried to access a partition that doesn't exist (was not between 0 and (num_partitions - 1))."),
    (4, "InvalidFetchSize", "The size you requested for fetching is smaller than the message you're trying to fetch."),
)
_V07_BY_CODE = {}
for _code, _name, _msg in _V07:
    _cls = type(f"Kafka07{_name}Error", (Kafka07Error,), {"code": _code, "name": _name, "message": _msg,
                                                         "__module__": __name__})
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)
    _V07_BY_CODE[_code] = _cls


def error_for_v07_code(code: int) -> type:
    """The 0.7 error class of ``code`` (unknown codes give Kafka07UnknownError)."""
    return _V07_BY_CODE.get(code, _V07_BY_CODE[-1])


__all__ += ["Kafka07Error", "error_for_v07_code"]
