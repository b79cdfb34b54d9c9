"""OIDC: OAUTHBEARER tokens from an identity provider's token endpoint,
with Kafka's and librdkafka's option names.

Grants (``sasl_oauthbearer_grant_type``):

- ``client_credentials`` (KIP-768): the client authenticates with its id
  and secret (HTTP Basic, as Kafka's client does), or, without a secret,
  with a JWT it signs with its private key (RFC 7523 section 2.2,
  ``client_assertion``; Keycloak's "Signed JWT").
- ``urn:ietf:params:oauth:grant-type:jwt-bearer`` (KIP-1139, RFC 7523
  section 2.1): a JWT assertion is exchanged for a token: read from
  ``sasl_oauthbearer_assertion_file`` at each fetch, or made and signed by
  kwire from the ``sasl_oauthbearer_assertion_*`` options.

HTTP is ``requests``; JWTs are PyJWT's (``pip install 'kwire[oauth]'``).
The token's claims are read, not verified (the broker verifies them), for
its expiry and principal. Errors name the endpoint, the HTTP status and the
provider's ``error`` and ``error_description``; never the secret, the key
or the assertion.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, Mapping, Optional, Tuple

from kwire.config import ConfigError
from kwire.sasl.base import SaslAuthenticationError
from kwire.sasl.oauth.token import OAuthToken, check_extensions, jwt_claims

__all__ = ["OidcTokens", "JWT_BEARER", "CLIENT_ASSERTION_TYPE"]

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def _libraries() -> Tuple[Any, Any]:
    try:
        import jwt
        import requests
    except ImportError:
        raise ConfigError("sasl_oauthbearer_method=oidc needs requests and PyJWT: pip install 'kwire[oauth]'") \
            from None
    return requests, jwt


class OidcTokens:
    """Fetches a token from the endpoint at each call (see the module doc)."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self._requests, self._jwt = _libraries()
        self.url = cfg.get("sasl_oauthbearer_token_endpoint_url")
        if not self.url:
            raise ConfigError("sasl_oauthbearer_method=oidc needs sasl_oauthbearer_token_endpoint_url")
        self.client_id = cfg.get("sasl_oauthbearer_client_id")
        self._secret = cfg.get("sasl_oauthbearer_client_secret")
        self._grant = cfg.get("sasl_oauthbearer_grant_type", "client_credentials")
        self._scope = cfg.get("sasl_oauthbearer_scope")
        self._extensions = check_extensions(cfg.get("sasl_oauthbearer_extensions"))
        self._cfg = cfg
        self._key = self._private_key(cfg)
        self._assertion_file = cfg.get("sasl_oauthbearer_assertion_file")
        self._timeout = (cfg.get("sasl_login_connect_timeout_ms", 10000) / 1000.0,
                         cfg.get("sasl_login_read_timeout_ms", 10000) / 1000.0)
        self._verify = cfg.get("https_ca_location") or True
        self._check_grant()

    def __repr__(self) -> str:
        return f"<OidcTokens {self.url} client {self.client_id}>"

    def _check_grant(self) -> None:
        if self._grant == "client_credentials":
            if not self.client_id or (self._secret is None and self._key is None):
                raise ConfigError("OIDC client credentials need sasl_oauthbearer_client_id and either "
                                  "sasl_oauthbearer_client_secret or a private key "
                                  "(sasl_oauthbearer_assertion_private_key_file)")
        elif self._assertion_file is None and self._key is None:
            raise ConfigError("the OIDC JWT bearer grant needs sasl_oauthbearer_assertion_file or a private key "
                              "to sign an assertion (sasl_oauthbearer_assertion_private_key_file)")

    def _private_key(self, cfg: Mapping[str, Any]) -> Optional[Any]:
        """The assertion's signing key, loaded once (PEM, maybe encrypted)."""
        pem = cfg.get("sasl_oauthbearer_assertion_private_key_pem")
        path = cfg.get("sasl_oauthbearer_assertion_private_key_file")
        if pem is None and path is None:
            return None
        try:
            from cryptography.hazmat.primitives.serialization import load_pem_private_key
        except ImportError:
            raise ConfigError("OIDC assertions need cryptography: pip install 'kwire[oauth]'") from None
        try:
            data = pem.encode() if pem is not None else open(path, "rb").read()
        except OSError as e:
            raise ConfigError(f"cannot read sasl_oauthbearer_assertion_private_key_file ({e.strerror})") from None
        passphrase = cfg.get("sasl_oauthbearer_assertion_private_key_passphrase")
        try:
            return load_pem_private_key(data, passphrase.encode() if passphrase else None)
        except (ValueError, TypeError):
            raise ConfigError("the OIDC assertion's private key is not a PEM key kwire can read (or its "
                              "passphrase is wrong)") from None

    # ------------------------------------------------------------ a fetch
    def __call__(self) -> OAuthToken:
        form, auth = self.token_request()
        try:
            resp = self._requests.post(self.url, data=form, auth=auth, timeout=self._timeout, verify=self._verify,
                                       headers={"Accept": "application/json"})
        except self._requests.RequestException as e:
            raise SaslAuthenticationError(f"OIDC token endpoint {self.url} could not be reached "
                                          f"({type(e).__name__})") from None
        return self.token_from(resp.status_code, _json(resp))

    def token_from(self, status: int, body: Dict[str, Any]) -> OAuthToken:
        """The token in the endpoint's answer (HTTP ``status``, its JSON
        ``body``), or :class:`SaslAuthenticationError` naming its error.
        With :meth:`token_request`, for a caller that does its own HTTP
        (the schema registry client, on httpx)."""
        if status != 200 or "access_token" not in body:
            detail = ": ".join(str(body[k]) for k in ("error", "error_description") if body.get(k))
            raise SaslAuthenticationError(f"OIDC token endpoint {self.url} refused client {self.client_id} "
                                          f"(HTTP {status}{': ' + detail if detail else ''})")
        return self._token(str(body["access_token"]), body.get("expires_in"))

    def token_request(self) -> Tuple[Dict[str, str], Optional[Tuple[str, str]]]:
        """The token request's form (POSTed to :attr:`url`) and its HTTP Basic credentials."""
        form: Dict[str, str] = {"grant_type": self._grant}
        if self._scope:
            form["scope"] = self._scope
        if self._grant == JWT_BEARER:
            form["assertion"] = self._read_assertion() if self._assertion_file else self._sign(self.client_id)
        auth = None
        if self.client_id and self._secret is not None:
            auth = (self.client_id, self._secret)
        elif self.client_id and self._key is not None and self._grant == "client_credentials":
            form.update(client_id=self.client_id, client_assertion_type=CLIENT_ASSERTION_TYPE,
                        client_assertion=self._sign(self.client_id, self.url))
        elif self.client_id:
            form["client_id"] = self.client_id
        return form, auth

    def _read_assertion(self) -> str:
        try:
            with open(self._assertion_file, encoding="utf-8") as f:
                return f.read().strip()
        except OSError as e:
            raise SaslAuthenticationError(f"cannot read sasl_oauthbearer_assertion_file ({e.strerror})") from None

    def _sign(self, default_subject: Optional[str], audience: Optional[str] = None) -> str:
        """A JWT assertion signed with the private key: iss and sub the
        client (or the claim options), aud the endpoint, a short life."""
        cfg, now = self._cfg, int(time.time())
        claims: Dict[str, Any] = {
            "iss": cfg.get("sasl_oauthbearer_assertion_claim_iss") or default_subject,
            "sub": cfg.get("sasl_oauthbearer_assertion_claim_sub") or default_subject,
            "aud": cfg.get("sasl_oauthbearer_assertion_claim_aud") or audience or self.url,
            "iat": now,
            "nbf": now - cfg.get("sasl_oauthbearer_assertion_claim_nbf_seconds", 60),
            "exp": now + cfg.get("sasl_oauthbearer_assertion_claim_exp_seconds", 300),
        }
        if cfg.get("sasl_oauthbearer_assertion_claim_jti_include", True):
            claims["jti"] = uuid.uuid4().hex
        if not claims["iss"] or not claims["sub"]:
            raise ConfigError("an OIDC assertion needs an issuer and subject: sasl_oauthbearer_client_id, or "
                              "sasl_oauthbearer_assertion_claim_iss and _sub")
        return self._jwt.encode(claims, self._key, algorithm=cfg.get("sasl_oauthbearer_assertion_algorithm", "RS256"))

    def _token(self, value: str, expires_in: Any) -> OAuthToken:
        claims = jwt_claims(value)
        if "exp" in claims:
            expiry = float(claims["exp"])
        elif isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool):
            expiry = time.time() + float(expires_in)
        else:
            raise SaslAuthenticationError(f"OIDC token endpoint {self.url} gave a token without an expiry")
        return OAuthToken(value, expiry, claims.get("sub"), self._extensions)


def _json(resp: Any) -> Dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
