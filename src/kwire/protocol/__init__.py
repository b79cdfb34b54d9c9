"""The Kafka wire protocol: request and response messages of every client
API kwire speaks (generated from Apache Kafka's JSON definitions into
:mod:`kwire.protocol.messages`), API keys and error codes by name
(:mod:`kwire.protocol.api_keys`, generated too), the request and response
headers, version negotiation and the version caps
(:mod:`kwire.protocol.versions`), and the Kafka 0.7 requests
(:mod:`kwire.protocol.v07`).

Framing, as FORMAT.md has it: every frame is an int32 size and that many
bytes. A request carries header v1 (api key, version, correlation id,
client id as a classic nullable string), or v2 for flexible versions (v1 and
an empty tagged-field section); a response carries header v0 (correlation
id), or v1 for flexible versions, except ApiVersions, whose response always
has header v0 so a client can read it before it knows the broker's versions.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple, Type

from kwire.errors import KwireError, ProtocolError
from kwire.protocol import messages, versions
from kwire.protocol.api_keys import ApiKey
from kwire.protocol.versions import api_name
from kwire.protocol._wire import _Bad, _Short, _tags
from kwire.protocol.messages import APIS, MESSAGES

__all__ = [
    "APIS",
    "MESSAGES",
    "messages",
    "message",
    "api_name",
    "max_version",
    "request_class",
    "response_class",
    "encode_request",
    "decode_response",
    "request_header_version",
    "response_header_version",
    "negotiate",
    "client_ranges",
    "no_common_version",
    "error_for",
]

_head = struct.Struct(">hhih")
_i32 = struct.Struct(">i")


def message(name: str) -> Type[Any]:
    """The generated class called ``name`` (``"FetchRequest"``)."""
    try:
        return MESSAGES[name]
    except KeyError:
        raise KeyError(f"kwire has no message {name!r}") from None


def request_class(api_key: int) -> Type[Any]:
    return APIS[api_key][0]


def response_class(api_key: int) -> Type[Any]:
    return APIS[api_key][1]


def max_version(api_key: int) -> int:
    return APIS[api_key][0].MAX_VERSION


def client_ranges() -> Dict[int, Tuple[int, int]]:
    """The versions kwire can encode and decode, per API key."""
    return versions.client_ranges(APIS)


def _flexible(cls: Type[Any], version: int) -> bool:
    return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN


def request_header_version(api_key: int, version: int) -> int:
    return 2 if _flexible(APIS[api_key][0], version) else 1


def response_header_version(api_key: int, version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if _flexible(APIS[api_key][1], version) else 0


def encode_request(request: Any, version: int, correlation_id: int, client_id: Optional[str]) -> List[Any]:
    """The frame of ``request`` at ``version``: size, header, body, as a list
    of buffers (record data stays the caller's buffers, uncopied)."""
    cls = type(request)
    api_key = cls.API_KEY
    body = cls.encode(request, version)
    head = bytearray()
    if client_id is None:
        head += _head.pack(api_key, version, correlation_id, -1)
    else:
        cid = client_id.encode("utf-8")
        head += _head.pack(api_key, version, correlation_id, len(cid))
        head += cid
    if request_header_version(api_key, version) >= 2:
        head.append(0)           # no tagged fields
    size = len(head) + sum(len(c) for c in body)
    return [_i32.pack(size) + bytes(head), *body]


def decode_response(frame: Any, response_cls: Type[Any], version: int) -> Tuple[int, Any]:
    """``(correlation_id, response)`` from one frame (without its size)."""
    buf = frame if isinstance(frame, memoryview) else memoryview(frame)
    name = response_cls.__name__.replace("Response", "")
    if len(buf) < 4:
        raise ProtocolError("response frame shorter than its header", name, version)
    (corr,) = _i32.unpack_from(buf, 0)
    pos = 4
    if response_header_version(response_cls.API_KEY, version) >= 1:
        try:
            _, pos = _tags(buf, pos, len(buf))
        except (_Short, _Bad, IndexError) as e:
            raise ProtocolError(f"bad response header: {e}", name, version) from None
    if (response_cls.API_KEY == ApiKey.API_VERSIONS and version > 0 and len(buf) >= pos + 2
            and buf[pos:pos + 2] != b"\0\0"):
        # a broker that does not know the version asked for answers with a v0
        # body (error UNSUPPORTED_VERSION and the versions it does know)
        try:
            return corr, response_cls.decode(buf, 0, pos)
        except ProtocolError:
            pass
    return corr, response_cls.decode(buf, version, pos)


def negotiate(broker_ranges: Dict[int, Tuple[int, int]]) -> Dict[int, int]:
    """Per API, the highest version kwire and the broker both speak."""
    return versions.choose_versions(broker_ranges, client_ranges())


def no_common_version(api_key: int, broker_range: Optional[Tuple[int, int]]) -> KwireError:
    """The error for an API the broker and kwire share no version of."""
    return versions.NoCommonVersionError.for_api(api_key, client_ranges().get(api_key), broker_range)


def error_for(code: int, api: Optional[str] = None, *, topic: Optional[str] = None,
              partition: Optional[int] = None, message: Optional[str] = None, **context: Any) -> BaseException:
    """The exception for a Kafka error code, located (API, topic, partition,
    and ``context``: the ACL or quota entity a request was about) and
    carrying the broker's own message when it sent one."""
    from kwire.errors import error_for_code

    return error_for_code(code)(message, api=api, topic=topic, partition=partition, **context)
