"""The security tests' servers are real and wired together (tests/support/keycloak.py,
kdc.py, secure_kafka.py): Keycloak's tokens verify against its JWKS, its JWT client
assertions and JWT-bearer grant work, the KDC issues tickets (short-lived ones for
carol), Kafka's Java client produces and consumes on the OAUTHBEARER (OIDC), GSSAPI
and SCRAM listeners, confluent-kafka's OIDC authenticates on the OAUTHBEARER
listener, and the ``_reauth`` listeners announce their session lifetime in the
SASL exchange while the others do not.

The servers are the session's (one Keycloak, one KDC, one broker); each test
is bounded by a few seconds, the Java peer's JVMs being the bulk of it.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
import uuid

import pytest

from kwire.protocol import decode_response, encode_request
from kwire.protocol.messages import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                     SaslHandshakeResponse)
from support.java_peer import java_consume, java_produce, send_op
from support.wire import recv_exact

pytestmark = pytest.mark.kafka

SASL_AUTHENTICATION_FAILED = 58


# ---- Keycloak ----

def _verified(keycloak, token: str, audience: str = "kafka") -> dict:
    import jwt

    key = jwt.PyJWKClient(keycloak.jwks_url).get_signing_key_from_jwt(token)
    return jwt.decode(token, key.key, algorithms=["RS256"], audience=audience, issuer=keycloak.issuer)


def test_client_credentials_tokens_verify_against_the_jwks(keycloak):
    import jwt
    import requests

    claims = _verified(keycloak, keycloak.token(keycloak.client)["access_token"])
    assert claims["azp"] == "kwire-client" and "kafka" in claims["aud"]
    short = keycloak.token(keycloak.short_client)
    claims = _verified(keycloak, short["access_token"])
    assert short["expires_in"] == keycloak.short_client.lifespan and claims["exp"] - claims["iat"] <= 20
    other = keycloak.token(keycloak.other_client)["access_token"]
    with pytest.raises(jwt.InvalidAudienceError):
        _verified(keycloak, other)
    assert _verified(keycloak, other, audience=keycloak.other_audience)["azp"] == "kwire-other"
    assert _verified(keycloak, keycloak.token(keycloak.jwt_client)["access_token"])["azp"] == "kwire-jwt"
    wrong = requests.post(keycloak.token_endpoint, timeout=10, data={
        "grant_type": "client_credentials", "client_id": "kwire-client", "client_secret": "not-the-secret"})
    assert wrong.status_code == 401


def test_jwt_bearer_grant_needs_the_clients_own_credentials(keycloak):
    import requests

    claims = _verified(keycloak, keycloak.bearer_token()["access_token"])
    assert (claims["azp"], claims["preferred_username"]) == ("kwire-bearer", keycloak.assertion_subject)
    # as Kafka's Java JwtBearerJwtRetriever sends it (KIP-1139): no client authentication; Keycloak refuses
    bare = requests.post(keycloak.token_endpoint, timeout=10, data={
        "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": keycloak.grant_assertion()})
    assert bare.status_code == 401 and bare.json()["error"] == "invalid_client"
    with pytest.raises(requests.HTTPError):
        keycloak.bearer_token(keycloak.grant_assertion(subject="nobody"))


# ---- the KDC ----

def test_kdc_issues_tickets_short_ones_for_carol(kdc, tmp_path, monkeypatch):
    import gssapi

    monkeypatch.setenv("KRB5_CONFIG", kdc.krb5_conf)
    bob = kdc.kinit("bob", str(tmp_path / "bob.cc"))
    creds = gssapi.Credentials(usage="initiate", store={"ccache": f"FILE:{bob}"})
    assert str(creds.name) == kdc.principals["bob"]
    service = gssapi.Name(f"{kdc.service}@{kdc.host}", gssapi.NameType.hostbased_service)
    assert gssapi.SecurityContext(name=service, creds=creds, usage="initiate").step()   # a service ticket
    carol = kdc.kinit("carol", str(tmp_path / "carol.cc"))
    assert 0 < gssapi.Credentials(usage="initiate", store={"ccache": f"FILE:{carol}"}).lifetime <= kdc.short_life
    with pytest.raises(Exception, match="not found in Kerberos database"):
        kdc.kinit("nobody", str(tmp_path / "nobody.cc"), password="x")


# ---- the broker, through Kafka's Java client and confluent-kafka ----

@pytest.mark.parametrize("listener, client", [
    pytest.param("oauth", "client", id="oauth-secret"), pytest.param("oauth", "jwt_client", id="oauth-assertion"),
    pytest.param("gssapi", None, id="gssapi"), pytest.param("scram", None, id="scram")])
def test_java_client_produces_and_consumes(secure_kafka, listener, client):
    """OIDC with a secret and with a client assertion (KIP-1139), alice's keytab, SCRAM-SHA-512."""
    topic = f"servers-java-{listener}-{uuid.uuid4().hex[:6]}"
    oidc = {"client": getattr(secure_kafka.keycloak, client)} if client else {}
    config, jvm = secure_kafka.java_config(listener, **oidc), secure_kafka.java_options()
    sent = java_produce(config, [send_op(topic, f"v{i}".encode()) for i in range(3)], timeout=60, jvm_options=jvm)
    assert [e.get("error") for e in sent] == [None] * 3
    got = java_consume(config, assign=[(topic, 0)], until_end=True, timeout=60, jvm_options=jvm)
    assert [r.value for r in got] == [b"v0", b"v1", b"v2"]


def test_confluent_kafka_oidc_on_the_oauth_listener(secure_kafka):
    from confluent_kafka import Consumer, Producer, TopicPartition

    client = secure_kafka.keycloak.client
    config = {"bootstrap.servers": secure_kafka.bootstrap("oauth"), "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
              "sasl.oauthbearer.token.endpoint.url": secure_kafka.token_endpoint,
              "sasl.oauthbearer.client.id": client.client_id, "sasl.oauthbearer.client.secret": client.secret}
    topic = f"servers-confluent-{uuid.uuid4().hex[:6]}"
    errors = []
    producer = Producer(config)
    producer.produce(topic, b"oidc", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(20) == 0 and errors == [None]
    consumer = Consumer({**config, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(20)
        assert msg is not None and msg.error() is None and msg.value() == b"oidc"
    finally:
        consumer.close()


# ---- the SASL exchange itself: tokens accepted or refused, session lifetimes ----

def _sasl(address: str, mechanism: str, auth_bytes: bytes, *, then: bytes = b"") -> SaslAuthenticateResponse:
    """SaslHandshake v1 and SaslAuthenticate v1 (``auth_bytes``, then ``then`` if the
    first answer succeeds with a challenge to acknowledge) on one connection."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        def ask(request, response_cls, corr):
            sock.sendall(b"".join(bytes(c) for c in encode_request(request, 1, corr, "kwire-test")))
            (size,) = struct.unpack(">i", recv_exact(sock, 4))
            return decode_response(recv_exact(sock, size), response_cls, 1)[1]

        assert ask(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, 1).error_code == 0
        answer = ask(SaslAuthenticateRequest(auth_bytes=auth_bytes), SaslAuthenticateResponse, 2)
        if then and answer.error_code == 0:
            answer = ask(SaslAuthenticateRequest(auth_bytes=then), SaslAuthenticateResponse, 3)
        return answer


def _oauthbearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def _unsecured_jwt(sub: str, lifetime: int = 60) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': sub, 'iat': now, 'exp': now + lifetime})}."


def test_reauth_listeners_announce_their_session_lifetime(secure_kafka):
    plain = b"\x00admin\x00admin-secret"
    assert _sasl(secure_kafka.bootstrap("scram"), "PLAIN", plain).session_lifetime_ms == 0
    assert 0 < _sasl(secure_kafka.bootstrap("scram_reauth"), "PLAIN", plain).session_lifetime_ms \
        <= secure_kafka.reauth_ms
    unsecured = _oauthbearer(_unsecured_jwt("admin"))
    assert _sasl(secure_kafka.bootstrap("unsecured"), "OAUTHBEARER", unsecured).error_code == 0
    assert 0 < _sasl(secure_kafka.bootstrap("unsecured_reauth"), "OAUTHBEARER", unsecured).session_lifetime_ms \
        <= secure_kafka.reauth_ms


def test_oauth_listener_validates_keycloak_tokens(secure_kafka):
    keycloak = secure_kafka.keycloak
    token = keycloak.token(keycloak.client)["access_token"]
    ok = _sasl(secure_kafka.bootstrap("oauth"), "OAUTHBEARER", _oauthbearer(token))
    # without connections.max.reauth.ms, Kafka still announces the token's remaining life
    assert ok.error_code == 0 and secure_kafka.reauth_ms < ok.session_lifetime_ms <= keycloak.client.lifespan * 1000
    reauth = _sasl(secure_kafka.bootstrap("oauth_reauth"), "OAUTHBEARER", _oauthbearer(token))
    assert reauth.error_code == 0 and 0 < reauth.session_lifetime_ms <= secure_kafka.reauth_ms
    for refused in (keycloak.token(keycloak.other_client)["access_token"],     # the wrong audience
                    _unsecured_jwt("admin")):                                     # not signed
        answer = _sasl(secure_kafka.bootstrap("oauth"), "OAUTHBEARER", _oauthbearer(refused), then=b"\x01")
        assert answer.error_code == SASL_AUTHENTICATION_FAILED, answer
