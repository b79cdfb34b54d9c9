"""A registry call as steps: the one place the clients' I/O meets their logic.

Every call (its caches, requests, retries, token refreshes, answers) is
written once, as a generator that yields what it waits for and returns its
result, as kwire's Kafka clients are (:mod:`kwire.client`):

- :class:`Send`: an HTTP request; the driver sends back an :class:`Answer`,
  or the :class:`httpx.TransportError` that stopped it (connection refused,
  TLS refused, timed out...);
- :class:`Pause`: a backoff; the driver sends back None.

:class:`~kwire.registry.client.SchemaRegistryClient` drives them with
``httpx.Client``, :class:`~kwire.registry.aio.AsyncSchemaRegistryClient`
with ``httpx.AsyncClient`` on the event loop. Both read an answer through
:class:`Body`, which holds the call to its deadline and to
:data:`MAX_ANSWER_BYTES`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Generator, List, TypeVar

try:
    import httpx
except ImportError as e:  # pragma: no cover - exercised only without httpx
    raise ImportError("kwire's schema registry client needs httpx: pip install 'kwire[registry]'") from e

__all__ = ["httpx", "Send", "Pause", "Answer", "Body", "StepsOf", "MAX_ANSWER_BYTES"]

T = TypeVar("T")
#: Steps whose value is a ``T``.
StepsOf = Generator[Any, Any, T]

#: An answer larger than this (after content decoding) is refused: no
#: registry answer comes near it, a broken or hostile server's might.
MAX_ANSWER_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Send:
    """Send ``request``, reading its answer by ``deadline`` (``time.monotonic()``);
    ``token``: to the OAuth token endpoint, not the registry (its own TLS settings)."""

    request: httpx.Request
    deadline: float
    token: bool = False

    def left(self) -> float:
        """Seconds until the deadline (at least a millisecond: httpx takes no zero)."""
        return max(self.deadline - time.monotonic(), 0.001)


@dataclass(frozen=True)
class Pause:
    """Wait ``seconds`` (a backoff between attempts)."""

    seconds: float


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: its status and its body."""

    status: int
    content: bytes

    def json(self) -> Any:
        """The body as JSON; None when it is empty or not JSON."""
        try:
            return json.loads(self.content) if self.content else None
        except ValueError:
            return None


class Body:
    """An answer's body as its chunks arrive: past the deadline or
    :data:`MAX_ANSWER_BYTES` it raises :class:`httpx.ReadTimeout` /
    :class:`httpx.ReadError` (a transport failure like any other)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._chunks: List[bytes] = []
        self._size = 0

    def add(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > MAX_ANSWER_BYTES:
            raise httpx.ReadError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
        if time.monotonic() > self._send.deadline:
            raise httpx.ReadTimeout("the answer did not arrive in time")
        self._chunks.append(chunk)

    def answer(self, status: int) -> Answer:
        return Answer(status, b"".join(self._chunks))

