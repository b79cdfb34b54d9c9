"""The headers that authenticate a registry request: HTTP Basic, a static
bearer token, or a bearer token fetched from an OAuth token endpoint
(client credentials, :class:`kwire.sasl.oauth.oidc.OidcTokens`' request
and answer, sent on httpx as a step of the call: the asyncio client never
blocks its loop for it).

A fetched token is kept until 80% of its life has passed (Confluent's
client refreshes at the same point), then fetched again by the next call,
within that call's deadline. Token endpoint failures raise
:class:`~kwire.registry.errors.SchemaRegistryError` naming the endpoint and
its error, never the client secret or the token.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Optional, Tuple


from kwire.registry.errors import UNKNOWN, SchemaRegistryError
from kwire.registry.options import Options, basic_header
from kwire.registry.steps import Answer, Send, StepsOf, httpx
from kwire.sasl.base import SaslAuthenticationError

__all__ = ["Credentials", "REFRESH_AT"]

#: The share of a fetched token's life after which it is fetched again.
REFRESH_AT = 0.8


class Credentials:
    """What one client sends to authenticate (see the module doc); ``repr`` names no secret."""

    def __init__(self, options: Options) -> None:
        self._fixed: Dict[str, str] = {}
        self._tokens: Optional[Any] = None
        self._token: Optional[Tuple[str, float]] = None       # (value, when to fetch anew)
        self._lock = threading.Lock()
        if options.basic is not None:
            self._fixed["Authorization"] = options.basic
        bearer = options.bearer
        if bearer is None:
            return
        if bearer.logical_cluster:
            self._fixed["target-sr-cluster"] = bearer.logical_cluster
        if bearer.identity_pool:
            self._fixed["Confluent-Identity-Pool-Id"] = bearer.identity_pool
        if bearer.token is not None:
            self._fixed["Authorization"] = f"Bearer {bearer.token}"
        else:
            from kwire.sasl.oauth.oidc import OidcTokens

            self._tokens = OidcTokens(bearer.oidc or {})

    def __repr__(self) -> str:
        kind = "OAuth client credentials" if self._tokens is not None else \
            self._fixed.get("Authorization", "none").partition(" ")[0]
        return f"<Credentials {kind}>"

    def headers(self, deadline: float) -> StepsOf[Dict[str, str]]:
        """The request headers that authenticate, fetching a token first when one is due."""
        if self._tokens is None:
            return dict(self._fixed)
        token = yield from self._bearer_token(deadline)
        return {**self._fixed, "Authorization": f"Bearer {token}"}

    def _bearer_token(self, deadline: float) -> StepsOf[str]:
        with self._lock:
            kept = self._token
        if kept is not None and time.time() < kept[1]:
            return kept[0]
        form, auth = self._tokens.token_request()
        headers = {"Accept": "application/json"}
        if auth is not None:
            headers["Authorization"] = basic_header(*auth)
        request = httpx.Request("POST", self._tokens.url, data=form, headers=headers,
                                extensions={"timeout": httpx.Timeout(max(deadline - time.monotonic(), 0.001)).as_dict()})
        got = yield Send(request, deadline, token=True)
        if not isinstance(got, Answer):
            raise SchemaRegistryError(None, UNKNOWN, f"the OAuth token endpoint {self._tokens.url} could not be "
                                                     f"reached ({type(got).__name__})")
        body = got.json()
        try:
            token = self._tokens.token_from(got.status, body if isinstance(body, dict) else {})
        except SaslAuthenticationError as e:      # names the endpoint, the status and its error only
            raise SchemaRegistryError(got.status, UNKNOWN, str(e)) from None
        now = time.time()
        with self._lock:
            self._token = (token.value, now + REFRESH_AT * max(token.expires_at - now, 0.0))
        return token.value
