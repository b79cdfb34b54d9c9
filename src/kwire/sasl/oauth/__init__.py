"""OAUTHBEARER (RFC 7628, KIP-255): where tokens come from, and keeping them fresh.

``sasl_oauthbearer_method`` chooses the source:

==============  ===================================================  ==================
method          source                                               module
==============  ===================================================  ==================
``default``     ``oauth_cb``, the caller's callback (a coroutine     :mod:`.callback`
                function for :mod:`kwire.aio`), or with
                ``enable_sasl_oauthbearer_unsecure_jwt`` unsigned
                development JWTs                                     :mod:`.unsecured`
``oidc``        an identity provider's token endpoint (KIP-768,      :mod:`.oidc`
                KIP-1139)
``aws_msk_iam`` AWS's MSK IAM signer (``kwire[aws]``)                :mod:`.aws`
==============  ===================================================  ==================

Each source is a callable that returns an :class:`OAuthToken`;
:class:`~kwire.sasl.oauth.refresh.TokenAuthenticator` fetches the first
token when the client starts and refreshes it in the background
(:mod:`.refresh`); the exchange itself is :class:`OAuthBearer`
(:mod:`.token`).
"""

from __future__ import annotations

from typing import Any, Mapping

from kwire.config import ConfigError
from kwire.sasl.oauth.callback import callback_source
from kwire.sasl.oauth.refresh import TokenAuthenticator, refresh_delay
from kwire.sasl.oauth.token import OAuthBearer, OAuthToken, as_token

__all__ = ["OAuthToken", "OAuthBearer", "TokenAuthenticator", "oauth_authenticator", "as_token", "refresh_delay"]


def oauth_authenticator(cfg: Mapping[str, Any]) -> TokenAuthenticator:
    """The OAUTHBEARER authenticator ``cfg`` asks for (see the module doc)."""
    method = cfg.get("sasl_oauthbearer_method", "default")
    if method == "oidc":
        from kwire.sasl.oauth.oidc import OidcTokens

        source = OidcTokens(cfg)
        return TokenAuthenticator(source, cfg, f"the OIDC token endpoint {source.url}")
    if method == "aws_msk_iam":
        from kwire.sasl.oauth.aws import MskIamToken

        msk = MskIamToken(cfg)
        return TokenAuthenticator(msk, cfg, f"AWS MSK IAM signing ({msk.region})")
    if cfg.get("oauth_cb") is not None:
        fetch, is_async = callback_source(cfg["oauth_cb"], cfg)
        return TokenAuthenticator(fetch, cfg, "the token callback (oauth_cb)", is_async)
    if cfg.get("enable_sasl_oauthbearer_unsecure_jwt"):
        from kwire.sasl.oauth.unsecured import UnsecuredJwt, parse_config

        jwts = UnsecuredJwt(parse_config(cfg.get("sasl_oauthbearer_config")), cfg.get("sasl_oauthbearer_extensions"))
        return TokenAuthenticator(jwts, cfg, f"unsecured JWTs for {jwts.principal}")
    raise ConfigError("SASL OAUTHBEARER needs a token source: oauth_cb, sasl_oauthbearer_method=oidc (with "
                      "sasl_oauthbearer_token_endpoint_url), sasl_oauthbearer_method=aws_msk_iam, or for development "
                      "enable_sasl_oauthbearer_unsecure_jwt")
