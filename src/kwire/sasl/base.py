"""What every SASL mechanism and authenticator of kwire's is.

A :class:`Mechanism` is one handshake's small state machine: :meth:`first`
gives the first message to send; :meth:`step` takes each server message and
gives the next client message, or ``None`` once the exchange is complete. It
raises :class:`SaslAuthenticationError` when the server's answer cannot be
right (a bad nonce, a signature that does not verify).

An :class:`Authenticator` is what one client's connections authenticate
with: it makes a fresh mechanism for each handshake (and re-authentication,
KIP-368) and owns what outlives them: a token refreshed in the background,
Kerberos credentials. :meth:`Authenticator.start` gives it the client's
``wake`` (called, from any thread, when something a handshake waits for
arrived); :meth:`Authenticator.close` stops its background work.

Secrets (passwords, tokens, keytab paths) live only inside these objects and
never appear in a repr, an error or a log line.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from kwire.errors import KwireError

__all__ = ["SaslAuthenticationError", "Mechanism", "Authenticator"]


class SaslAuthenticationError(KwireError):
    """The broker refused our credentials, its SASL answers did not verify,
    or the credentials could not be had (a token endpoint or a KDC refused,
    a keytab is missing). Not retriable: the same credentials fail again."""


class Mechanism:
    """One SASL exchange (see the module doc)."""

    name = ""
    #: Whether the credential expires (a token): the broker then names a
    #: session lifetime (KIP-368), and a lifetime of 0 means it expired.
    expiring = False
    credential = "credential"     # what it is, in errors

    def first(self) -> bytes:
        raise NotImplementedError

    def step(self, server: bytes) -> Optional[bytes]:
        raise NotImplementedError

    def refusal(self) -> str:
        """What the server said of its refusal inside the exchange (an
        OAUTHBEARER error status), for the error that names it; "" if nothing."""
        return ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Authenticator:
    """A client's SASL credentials (see the module doc). ``name`` is the
    mechanism the SaslHandshake asks for."""

    name = ""

    def start(self, wake: Callable[[], None], loop: Any = None) -> None:
        """Begin background work (a token's refresh); ``wake()`` is called,
        from any thread, when a handshake that waited may go on. ``loop``:
        the asyncio loop of a :mod:`kwire.aio` client, None for a blocking one."""

    def mechanism(self, host: str) -> Optional[Mechanism]:
        """A fresh mechanism for a handshake with the broker at ``host``;
        None while the credentials are not there yet (the first token still
        being fetched: the handshake waits, and is woken). Raises
        :class:`SaslAuthenticationError` when they cannot be had."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work; idempotent."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
