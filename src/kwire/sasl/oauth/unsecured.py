"""Unsecured JWTs, for development against a broker that accepts them
(Kafka's default OAUTHBEARER validator): unsigned (``alg: none``), made by
the client itself. Kafka spells this ``unsecuredLoginStringClaim_sub`` in a
JAAS file, librdkafka ``enable.sasl.oauthbearer.unsecure.jwt`` with
``sasl.oauthbearer.config``, whose words kwire reads:

``principal=<sub>`` (required), ``principalClaimName=<claim>`` (default
``sub``), ``scope=<a,b>``, ``scopeClaimName=<claim>`` (default ``scope``),
``lifeSeconds=<n>`` (default 3600), ``extension_<name>=<value>``.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Mapping, Optional

from kwire.sasl.base import SaslAuthenticationError
from kwire.sasl.oauth.token import OAuthToken, check_extensions

__all__ = ["UnsecuredJwt", "parse_config"]


def parse_config(text: Optional[str]) -> Dict[str, str]:
    """librdkafka's ``sasl.oauthbearer.config``: space-separated ``name=value``."""
    out = {}
    for word in (text or "").split():
        name, sep, value = word.partition("=")
        if not sep or not name:
            raise SaslAuthenticationError(f"sasl_oauthbearer_config: expected name=value, got {name!r}")
        out[name] = value
    return out


class UnsecuredJwt:
    """Makes an unsigned JWT for ``principal`` at each call (see the module doc)."""

    def __init__(self, words: Mapping[str, str], extensions: Optional[Mapping[str, str]] = None) -> None:
        if not words.get("principal"):
            raise SaslAuthenticationError("unsecured OAUTHBEARER JWTs need principal=<name> in "
                                          "sasl_oauthbearer_config (Kafka: unsecuredLoginStringClaim_sub)")
        self.principal = words["principal"]
        self._sub = words.get("principalClaimName", "sub")
        self._scope_claim = words.get("scopeClaimName", "scope")
        self._scope = [s for s in words.get("scope", "").split(",") if s]
        try:
            self._life = int(words.get("lifeSeconds", "3600"))
        except ValueError:
            raise SaslAuthenticationError("sasl_oauthbearer_config: lifeSeconds must be a number") from None
        ext = {k[len("extension_"):]: v for k, v in words.items() if k.startswith("extension_")}
        self._extensions = check_extensions({**ext, **(extensions or {})})

    def __call__(self) -> OAuthToken:
        try:
            import jwt
        except ImportError:
            raise SaslAuthenticationError("unsecured OAUTHBEARER JWTs need PyJWT: pip install 'kwire[oauth]'") from None
        now = int(time.time())
        claims: Dict[str, Any] = {self._sub: self.principal, "iat": now, "exp": now + self._life}
        if self._scope:
            claims[self._scope_claim] = self._scope
        value = jwt.encode(claims, None, algorithm="none")
        return OAuthToken(value, float(now + self._life), self.principal, self._extensions)
