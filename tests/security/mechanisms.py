"""kwire's options for each way into the secure broker (tests/support/secure_kafka.py),
one name per way, shared by the security tests:

=================  ================  ===============================================
way                listener          credentials
=================  ================  ===============================================
``oidc``           oauth             Keycloak client credentials (``kwire-client``)
``oidc_jwt``       oauth             a signed client assertion (``kwire-jwt``'s key)
``jwt_bearer``     oauth             KIP-1139's JWT bearer grant (``kwire-bearer``)
``callback``       oauth             ``oauth_cb`` fetching from Keycloak (an ``async
                                     def`` on kwire.aio's clients)
``unsecured``      unsecured         unsigned JWTs naming ``admin``
``gssapi``         gssapi            alice's keytab
``gssapi_cache``   gssapi            bob's ticket cache (kinit with his password)
``token``          scram             a delegation token of admin's (SCRAM tokenauth)
=================  ================  ===============================================

:func:`options` adds ``_reauth`` to the listener when asked.
"""

from __future__ import annotations

import time
from typing import Any, Dict

WAYS = ("oidc", "oidc_jwt", "jwt_bearer", "callback", "unsecured", "gssapi", "gssapi_cache", "token")
LISTENER = {"oidc": "oauth", "oidc_jwt": "oauth", "jwt_bearer": "oauth", "callback": "oauth",
            "unsecured": "unsecured", "gssapi": "gssapi", "gssapi_cache": "gssapi", "token": "scram"}
#: the principal each way authenticates as (User:...)
PRINCIPAL = {"oidc": "kwire-client", "oidc_jwt": "kwire-jwt", "jwt_bearer": "kwire-bearer",
             "callback": "kwire-client", "unsecured": "admin", "gssapi": "alice", "gssapi_cache": "bob",
             "token": "admin"}


def keycloak_callback(keycloak: Any, client: Any, is_async: bool = False) -> Any:
    """A token callback that asks Keycloak for ``client``'s token, as a user's would."""
    def fetch():
        answer = keycloak.token(client)
        return answer["access_token"], time.time() + answer["expires_in"]

    if not is_async:
        return fetch

    async def afetch():
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, fetch)

    return afetch


def oidc(sk: Any, client: Any) -> Dict[str, Any]:
    return {"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": sk.token_endpoint,
            "sasl.oauthbearer.client.id": client.client_id, "sasl.oauthbearer.client.secret": client.secret}


def options(sk: Any, way: str, *, reauth: bool = False, aio: bool = False, tmp: Any = None,
            token: Any = None) -> Dict[str, Any]:
    """kwire options for ``way`` on the secure broker ``sk`` (see the module doc);
    ``tmp`` a directory for bob's ticket cache; ``token`` a DelegationToken for ``token``."""
    listener = LISTENER[way] + ("_reauth" if reauth else "")
    base = sk.client_config(listener) if LISTENER[way] != "scram" else \
        {"bootstrap.servers": sk.bootstrap(listener), "security.protocol": "SASL_PLAINTEXT"}
    kc = sk.keycloak
    if way == "oidc":
        return {**base, **oidc(sk, kc.client)}
    if way == "oidc_jwt":
        return {**base, "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.token.endpoint.url": sk.token_endpoint,
                "sasl.oauthbearer.client.id": kc.jwt_client.client_id,
                "sasl.oauthbearer.assertion.private.key.file": kc.jwt_private_key,
                "sasl.oauthbearer.assertion.claim.aud": kc.issuer}
    if way == "jwt_bearer":
        return {**base, **oidc(sk, kc.bearer_client),
                "sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "sasl.oauthbearer.assertion.private.key.file": kc.assertion_private_key,
                "sasl.oauthbearer.assertion.claim.iss": kc.assertion_issuer,
                "sasl.oauthbearer.assertion.claim.sub": kc.assertion_subject,
                "sasl.oauthbearer.assertion.claim.aud": kc.issuer}
    if way == "callback":
        return {**base, "sasl.mechanism": "OAUTHBEARER", "oauth_cb": keycloak_callback(kc, kc.client, aio)}
    if way == "unsecured":
        return {**base, "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=admin lifeSeconds=3600"}
    if way == "gssapi":
        return {**base, "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": sk.service_name,
                "sasl.kerberos.keytab": sk.keytabs["alice"], "sasl.kerberos.principal": sk.principals["alice"]}
    if way == "gssapi_cache":
        cache = sk.kdc.kinit("bob", str(tmp / f"bob-{time.monotonic_ns()}.cc"))
        return {**base, "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": sk.service_name,
                "sasl.kerberos.ccache": f"FILE:{cache}"}
    if way == "token":
        return {**base, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": token.token_id,
                "sasl.password": token.password, "sasl.scram.tokenauth": True}
    raise ValueError(way)
