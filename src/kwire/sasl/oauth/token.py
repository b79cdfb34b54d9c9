"""An OAUTHBEARER token, and the client's message that carries it (RFC 7628).

:class:`OAuthToken` is what every token source gives: the token, when it
expires (epoch seconds), the principal it names and the SASL extensions
(KIP-342) to send with it. Its repr never shows the token.
:func:`as_token` turns what a caller's callback returns into one.

:class:`OAuthBearer` is the exchange: the client's first message is
``n,,\\x01auth=Bearer <token>\\x01<key>=<value>\\x01...\\x01\\x01``; a broker
that accepts answers with nothing; one that refuses answers with a JSON
error status, which the client acknowledges with a single ``\\x01`` before
the broker fails the exchange (the status is then named in the error).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from kwire.sasl.base import Mechanism, SaslAuthenticationError

__all__ = ["OAuthToken", "OAuthBearer", "as_token", "jwt_claims", "check_extensions"]

_KEY = re.compile(r"[A-Za-z]+\Z")
_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+\Z")


@dataclass(frozen=True)
class OAuthToken:
    """A bearer token, its expiry (epoch seconds), the principal it names
    and its SASL extensions; ``repr`` hides the token."""

    value: str = field(repr=False)
    expires_at: float
    principal: Optional[str] = None
    extensions: Mapping[str, str] = field(default_factory=dict)

    def lifetime_left(self, now: Optional[float] = None) -> float:
        return self.expires_at - (time.time() if now is None else now)


def check_extensions(ext: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """SASL extensions as RFC 7628 allows them: keys of letters, not
    ``auth``; values of printable ASCII, space and tab, CR, LF."""
    out = {}
    for key, value in (ext or {}).items():
        if not _KEY.match(key) or key == "auth":
            raise SaslAuthenticationError(f"OAUTHBEARER: invalid SASL extension name {key!r} (letters only, not 'auth')")
        if not _VALUE.match(value):
            raise SaslAuthenticationError(f"OAUTHBEARER: SASL extension {key!r} has an invalid value")
        out[key] = value
    return out


def jwt_claims(token: str) -> Dict[str, Any]:
    """The claims of a JWT, unverified (the broker verifies it): for its
    ``exp`` and principal. Needs PyJWT (``kwire[oauth]``)."""
    try:
        import jwt
    except ImportError:
        raise SaslAuthenticationError(
            "OAUTHBEARER: a token without an expiry needs PyJWT to read its exp claim: pip install 'kwire[oauth]', "
            "or return (token, expiry in epoch seconds) from the callback") from None
    try:
        return jwt.decode(token, options={"verify_signature": False, "verify_exp": False, "verify_aud": False})
    except jwt.PyJWTError as e:
        raise SaslAuthenticationError(f"OAUTHBEARER: the token is not a JWT kwire can read ({type(e).__name__})") \
            from None


def as_token(result: Any, extensions: Optional[Mapping[str, str]] = None) -> OAuthToken:
    """What a token callback returned, as an :class:`OAuthToken`: one, a
    tuple ``(token, expiry epoch seconds[, principal[, extensions]])``, or a
    JWT string (its ``exp`` and ``sub`` claims read). ``extensions`` are
    added where the result names none."""
    if isinstance(result, OAuthToken):
        tok = result
    elif isinstance(result, str):
        claims = jwt_claims(result)
        if "exp" not in claims:
            raise SaslAuthenticationError("OAUTHBEARER: the token has no exp claim: return (token, expiry) instead")
        tok = OAuthToken(result, float(claims["exp"]), claims.get("sub"))
    elif isinstance(result, (tuple, list)) and 2 <= len(result) <= 4:
        value, expiry = result[0], result[1]
        if not isinstance(value, str) or isinstance(expiry, bool) or not isinstance(expiry, (int, float)):
            raise SaslAuthenticationError("OAUTHBEARER: the callback must return (str token, expiry in epoch seconds"
                                          "[, principal[, extensions]])")
        principal = result[2] if len(result) > 2 else None
        ext = dict(result[3]) if len(result) > 3 and result[3] else {}
        tok = OAuthToken(value, float(expiry), principal, ext)
    else:
        raise SaslAuthenticationError(f"OAUTHBEARER: the token callback returned a {type(result).__name__}, not a "
                                      "token (str JWT, (token, expiry) or OAuthToken)")
    if not tok.value:
        raise SaslAuthenticationError("OAUTHBEARER: the token callback returned an empty token")
    ext = dict(tok.extensions) or dict(extensions or {})
    return OAuthToken(tok.value, tok.expires_at, tok.principal, check_extensions(ext))


class OAuthBearer(Mechanism):
    """The OAUTHBEARER exchange with one token (see the module doc)."""

    name = "OAUTHBEARER"
    expiring = True
    credential = "token"

    def __init__(self, token: OAuthToken) -> None:
        self._token = token
        self._refused = ""

    def first(self) -> bytes:
        ext = "".join(f"{k}={v}\x01" for k, v in self._token.extensions.items())
        return f"n,,\x01auth=Bearer {self._token.value}\x01{ext}\x01".encode("utf-8")

    def step(self, server: bytes) -> Optional[bytes]:
        if not server:
            return None
        self._refused = _status(server)
        return b"\x01"

    def refusal(self) -> str:
        return self._refused


def _status(server: bytes) -> str:
    """The broker's error (RFC 7628 section 3.2.2: JSON with status, scope,
    openid-configuration), as words for the error."""
    try:
        msg = json.loads(server.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "the broker's refusal was not JSON"
    if not isinstance(msg, dict):
        return "the broker's refusal was not a JSON object"
    parts = [f"status {msg.get('status', '?')}"]
    if msg.get("scope"):
        parts.append(f"scope {msg['scope']}")
    return ", ".join(parts)
