"""The caller's token callback (``oauth_cb``) as a token source.

It may be a plain callable (called on the refresh thread; it may block), a
coroutine function (awaited on the event loop: :mod:`kwire.aio` only), or
an object with a ``token()`` method and optionally ``extensions()``
(kafka-python's and aiokafka's ``sasl_oauth_token_provider``). A callable
that takes one argument gets ``sasl_oauthbearer_config`` (as
confluent-kafka's ``oauth_cb`` does). What it returns is read by
:func:`~kwire.sasl.oauth.token.as_token`.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Optional, Tuple

from kwire.sasl.oauth.token import OAuthToken, as_token

__all__ = ["callback_source"]


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def callback_source(cb: Any, cfg: Mapping[str, Any]) -> Tuple[Callable[[], Any], bool]:
    """``(fetch, is_async)`` for ``cb`` (see the module doc)."""
    extensions = cfg.get("sasl_oauthbearer_extensions")
    if not callable(cb):       # a provider object
        provider = cb
        if inspect.iscoroutinefunction(provider.token):
            async def fetch_provider_async() -> OAuthToken:
                return as_token(await provider.token(), _provider_extensions(provider, extensions))

            return fetch_provider_async, True
        return (lambda: as_token(provider.token(), _provider_extensions(provider, extensions))), False
    args = (cfg.get("sasl_oauthbearer_config"),) if _takes_argument(cb) else ()
    if inspect.iscoroutinefunction(cb):
        async def fetch_async() -> OAuthToken:
            return as_token(await cb(*args), extensions)

        return fetch_async, True
    return (lambda: as_token(cb(*args), extensions)), False


def _provider_extensions(provider: Any, default: Optional[Mapping[str, str]]) -> Optional[Mapping[str, str]]:
    ext = getattr(provider, "extensions", None)
    return ext() if callable(ext) else default
