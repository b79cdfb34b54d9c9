"""Exceptions raised by kwire.

Every error kwire raises derives from :class:`KwireError`. Errors about the
bytes of a record batch derive from :class:`CorruptRecordError` and name the
topic, partition and offset where the problem was found, so a consumer can
report exactly which record it could not return. Frames that break the
protocol raise :class:`ProtocolError`.

Error codes returned by brokers raise :class:`KafkaError` subclasses, one per
code of Kafka's table (``kwire.errors.NotLeaderOrFollowerError`` for 6, ...;
see :func:`error_for_code`), with the code's ``retriable`` and
``invalid_metadata`` flags; Kafka 0.7's own codes raise :class:`Kafka07Error`
subclasses. The tables themselves are data in :mod:`kwire.error_codes`.
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional, Tuple, Type, TypeVar

from kwire.error_codes import ERROR_CODES, INVALID_METADATA, RETRIABLE, V07_ERROR_CODES

__all__: List[str] = [
    "KwireError",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionError",
    "DecompressionBombError",
    "UnsupportedCodecError",
    "ProtocolError",
    "IllegalStateError",
    "without_traceback",
]


class KwireError(Exception):
    """Base class of every kwire exception.

    ``retriable`` tells whether repeating the same operation may succeed.
    """

    retriable: bool = False


class IllegalStateError(KwireError):
    """A call the client's state does not allow, such as pausing or seeking
    a partition that is not assigned (Java's ``IllegalStateException``)."""


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

    def __reduce__(self) -> Tuple[Any, ...]:  # keep the fields across pickling (Spark workers)
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

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.reason, self.api, self.version))


E = TypeVar("E", bound=BaseException)


def without_traceback(error: E, *, chained: bool = True) -> E:
    """``error`` with its traceback dropped, and those of its cause and
    context (or, with ``chained`` false, without cause and context at all):
    an error that is kept (on a closed connection, in a future, held for a
    consumer's next poll) must not keep the frames that raised it alive,
    and through their locals the objects and buffers they used, in a
    reference cycle only the cyclic GC would break. Returns ``error``."""
    if not chained:
        error.__cause__ = error.__context__ = None
    e: Optional[BaseException] = error
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = None
        e = e.__cause__ or e.__context__
    return error


# ------------------------------------------------------------ error codes
def _describe(error: "_CodedError") -> str:
    """The text of a coded error: what the code means, what the broker
    added, and where it happened."""
    text = f"{error._family}{error.name} ({error.code}): {error.message}"
    if error.error_message and error.error_message != error.message:
        text += f" Broker says: {error.error_message}"
    where: List[str] = []
    if error.api:
        where.append(error.api)
    if error.topic is not None:
        where.append(f"topic {error.topic!r}")
    if error.partition is not None and error.partition >= 0:
        where.append(f"partition {error.partition}")
    if error.offset is not None:
        where.append(f"offset {error.offset}")
    where.extend(f"{key} {value!r}" for key, value in sorted(error.context.items()))
    return f"{text} ({', '.join(where)})" if where else text


class _CodedError(KwireError):
    """What the two families of numbered errors (Kafka's since 0.8, and
    Kafka 0.7's) share: class attributes ``code``, ``name`` and ``message``;
    per instance the broker's text (``error_message``, or any detail the
    caller has) and where the error happened (``api``, ``topic``,
    ``partition``, ``offset`` and any other keyword, kept in ``context``)."""

    code: int = -1
    name: str = ""
    message: str = ""
    _family: str = ""

    def __init__(
        self,
        error_message: Optional[str] = None,
        *,
        api: Optional[str] = None,
        topic: Optional[str] = None,
        partition: Optional[int] = None,
        offset: Optional[int] = None,
        **context: Any,
    ) -> None:
        self.error_message = error_message
        self.api = api
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.context: Dict[str, Any] = context
        super().__init__(_describe(self))

    def __reduce__(self) -> Tuple[Any, ...]:
        # Picklable with its context (Spark ships exceptions between
        # processes). Classes made for unknown codes are not module
        # attributes, so those travel as their number.
        cls = type(self)
        ref: Any = (isinstance(self, Kafka07Error), cls.code) if cls.__dict__.get("_made_for_unknown_code") else cls
        return (_rebuild_coded_error, (ref, self.error_message, self.api, self.topic, self.partition,
                                       self.offset, self.context))


def _rebuild_coded_error(ref: Any, error_message: Optional[str], api: Optional[str], topic: Optional[str],
                         partition: Optional[int], offset: Optional[int], context: Dict[str, Any]) -> "_CodedError":
    cls: Type[_CodedError]
    if isinstance(ref, tuple):
        v07, code = ref
        cls = error_for_v07_code(code) if v07 else error_for_code(code)
    else:
        cls = ref
    return cls(error_message, api=api, topic=topic, partition=partition, offset=offset, **context)


# ---------------------------------------------------------------- broker errors
class KafkaError(_CodedError):
    """An error code a broker returned (Kafka 0.8 and later). One subclass
    per code of Kafka's table (:mod:`kwire.error_codes`), each named after
    Kafka's name (``NOT_LEADER_OR_FOLLOWER`` -> :class:`NotLeaderOrFollowerError`)
    and carrying, as class attributes:

    - ``code``: the number on the wire;
    - ``name``: Kafka's name;
    - ``message``: Kafka's description;
    - ``retriable``: the same request may succeed later;
    - ``invalid_metadata``: the client's view of the cluster is stale: refresh
      metadata before retrying (these errors are retriable too).

    Instances carry the broker's own ``error_message`` (when the response
    has one) and where the error happened: ``api``, ``topic``,
    ``partition``, ``offset``, and any other keyword in ``context``. Use
    :func:`error_for_code` or :func:`raise_for_code` to go from a code to its
    class.
    """

    code: int = -1
    name: str = "KAFKA_ERROR"
    message: str = "An error code returned by a broker."
    invalid_metadata: bool = False


def _class_name(name: str) -> str:
    """Kafka's name in CamelCase with the suffix ``Error``
    (``INVALID_TOPIC_EXCEPTION`` -> ``InvalidTopicError``)."""
    if name == "NONE":
        return "NoError"
    base = "".join(part.capitalize() for part in name.split("_"))
    for suffix in ("Exception", "Error"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base + "Error"


_BY_CODE: Dict[int, Type[KafkaError]] = {}


def _define_error_classes() -> None:
    for code, name, kind, message in ERROR_CODES:
        cls_name = _class_name(name)
        cls = type(cls_name, (KafkaError,), {
            "__doc__": f"Kafka error {code}, {name}: {message}",
            "__module__": __name__,
            "code": code,
            "name": name,
            "message": message,
            "retriable": kind in (RETRIABLE, INVALID_METADATA),
            "invalid_metadata": kind == INVALID_METADATA,
        })
        globals()[cls_name] = cls
        __all__.append(cls_name)
        _BY_CODE[code] = cls


_define_error_classes()


class UnknownErrorCodeError(KafkaError):
    """A code missing from kwire's table (a newer broker's). Not retriable;
    :func:`error_for_code` gives a subclass per code whose ``code`` is the
    number received."""

    name = "UNKNOWN_ERROR_CODE"
    message = "An error code kwire does not know."


@functools.lru_cache(maxsize=256)
def _unknown_code_class(code: int) -> Type[KafkaError]:
    return type(f"UnknownErrorCode{code}Error", (UnknownErrorCodeError,), {
        "__doc__": f"Error code {code}, which kwire does not know.",
        "__module__": __name__,
        "_made_for_unknown_code": True,
        "code": code,
        "name": f"UNKNOWN_ERROR_CODE_{code}",
        "message": f"Error code {code}, which kwire does not know.",
    })


def error_for_code(code: int) -> Type[KafkaError]:
    """The :class:`KafkaError` subclass of ``code``: :class:`NoError` for 0,
    a subclass of :class:`UnknownErrorCodeError` keeping the number for codes
    not in the table."""
    cls = _BY_CODE.get(code)
    return cls if cls is not None else _unknown_code_class(code)


def raise_for_code(code: int, error_message: Optional[str] = None, **context: Any) -> None:
    """Raise the error of ``code`` with the broker's ``error_message`` and
    ``context`` (``api``, ``topic``, ``partition``, ``offset``, any other
    keyword); does nothing for 0 (no error)."""
    if code:
        raise error_for_code(code)(error_message, **context)


__all__ += ["KafkaError", "UnknownErrorCodeError", "error_for_code", "raise_for_code"]


# ------------------------------------------------------------ Kafka 0.7 errors
class Kafka07Error(_CodedError):
    """An error code of a Kafka 0.7 response header. 0.7 has its own table
    (:data:`kwire.error_codes.V07_ERROR_CODES`): its numbers mean other
    things than since 0.8. One subclass per code: ``Kafka07OffsetOutOfRangeError``,
    ``Kafka07InvalidMessageError``, ``Kafka07WrongPartitionError``,
    ``Kafka07InvalidFetchSizeError``, ``Kafka07UnknownError`` (and
    ``Kafka07NoError`` for 0, never raised); same attributes as
    :class:`KafkaError` except the retry flags (0.7 defines none)."""

    name = "Kafka07Error"
    message = "An error code returned by a Kafka 0.7 broker."
    _family = "Kafka 0.7 "


_V07_BY_CODE: Dict[int, Type[Kafka07Error]] = {}


def _define_v07_classes() -> None:
    for code, name, message in V07_ERROR_CODES:
        cls_name = "Kafka07NoError" if name == "NoError" else f"Kafka07{name}Error"
        cls = type(cls_name, (Kafka07Error,), {
            "__doc__": f"Kafka 0.7 error {code}, {name}: {message}",
            "__module__": __name__,
            "code": code,
            "name": name,
            "message": message,
        })
        globals()[cls_name] = cls
        __all__.append(cls_name)
        _V07_BY_CODE[code] = cls


_define_v07_classes()


@functools.lru_cache(maxsize=64)
def _unknown_v07_class(code: int) -> Type[Kafka07Error]:
    return type(f"Kafka07UnknownCode{code}Error", (_V07_BY_CODE[-1],), {
        "__doc__": f"Kafka 0.7 error code {code}, which the 0.7 table does not have.",
        "__module__": __name__,
        "_made_for_unknown_code": True,
        "code": code,
        "name": f"Unknown{code}",
        "message": f"Error code {code}, which the 0.7 wire format does not define.",
    })


def error_for_v07_code(code: int) -> Type[Kafka07Error]:
    """The 0.7 error class of ``code`` (a subclass of ``Kafka07UnknownError``
    keeping the number for codes the 0.7 table lacks)."""
    cls = _V07_BY_CODE.get(code)
    return cls if cls is not None else _unknown_v07_class(code)


def raise_for_v07_code(code: int, error_message: Optional[str] = None, **context: Any) -> None:
    """Raise the 0.7 error of ``code`` with ``context``; nothing for 0."""
    if code:
        raise error_for_v07_code(code)(error_message, **context)


__all__ += ["Kafka07Error", "error_for_v07_code", "raise_for_v07_code"]


# ------------------------------------------------------ the producer's own
class ProducerClosedError(KwireError):
    """The producer was closed."""


class InvalidPartitionError(KwireError, ValueError):
    """``send()`` named a partition its topic does not have (Kafka's
    client: IllegalArgumentException "Invalid partition given with
    record")."""


class RecordTooLargeError(globals()["MessageTooLargeError"]):  # type: ignore[misc]
    """``send()`` refused a record that, serialized in a batch of its own,
    is larger than ``max_request_size`` or than ``buffer_memory`` (Kafka's
    client: RecordTooLargeException). The error of code 10,
    MESSAGE_TOO_LARGE, a broker answers for such a record; not retriable."""

    def __init__(self, error_message: Optional[str] = None, **where: Any) -> None:
        super().__init__(error_message, **where)
        # the producer's own words, not a broker's
        self.args = (f"{error_message} (topic {self.topic!r}, partition {self.partition})",)


__all__ += ["ProducerClosedError", "InvalidPartitionError", "RecordTooLargeError"]


def __getattr__(name: str) -> Type[KafkaError]:
    """Module attributes not found otherwise (PEP 562). The error classes
    above are made from the tables at import time, so type checkers cannot
    see them; this declaration tells them ``kwire.errors.<Name>`` is an error
    class. At run time every class is already a module attribute, so this
    only ever reports a missing name."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
