"""TLS, mutual TLS and SASL against Apache Kafka's own listeners (no proxies):
hostname verification, client certificates, PLAIN and SCRAM-SHA-256/512 over
SASL_PLAINTEXT and SASL_SSL, and the refusals (wrong password, unknown user,
a mechanism the listener does not offer), each fast, non-retriable and
without the password in logs or reprs.

The round trips and refusals run with kwire's blocking clients and with
kwire.aio's (the ``kw`` fixture): each refusal raises the same error from
both (client.test_security._clients_refused), as well as from Admin."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.config import redact
from kwire.net import TlsError
from kwire.sasl import SaslAuthenticationError
from client.test_security import _clients_refused, _internals
from support.proxies import make_crl

pytestmark = pytest.mark.kafka

TIMEOUT_MS = 15000     # each refused call must fail well within this
FAST = 5.0             # seconds


def _round_trip(kw, cfg):
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with kw.Producer(cfg) as p:
        meta = p.send(topic, b"secret-value", key=b"k", partition=0).get(20)
    with kw.Consumer(cfg, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            recs = c.poll(500).get((topic, 0))
            if recs:
                return meta, recs[0].value
    raise AssertionError("nothing consumed")


def _refused(kw, cfg, error, match):
    """The call fails with ``error`` well within its timeout, from Admin and
    from kwire's consumer and producer (``kw``)."""
    t0 = time.monotonic()
    with pytest.raises(error, match=match) as info:
        with Admin({**cfg, "request.timeout.ms": TIMEOUT_MS}) as a:
            a.list_topics(timeout=TIMEOUT_MS / 1000)
    assert time.monotonic() - t0 < FAST, f"took {time.monotonic() - t0:.1f} s"
    assert getattr(info.value, "retriable", False) is False
    _clients_refused(kw, cfg, error, match, fast=FAST)
    return info.value


def test_tls_with_hostname_verification(kw, kafka):
    # SASL_SSL: TLS without a client certificate, the broker's certificate names only localhost
    meta, value = _round_trip(kw, kafka.client_config("sasl_ssl"))
    assert value == b"secret-value" and meta.offset == 0


def test_tls_refuses_a_certificate_for_another_name(kw, kafka):
    # the same listener reached as 127.0.0.1, which the certificate does not name
    port = kafka.bootstrap("sasl_ssl").rsplit(":", 1)[1]
    _refused(kw, kafka.client_config("sasl_ssl", **{"bootstrap.servers": f"127.0.0.1:{port}"}), TlsError,
             "certificate")


def test_tls_refuses_an_untrusted_ca(kw, kafka):
    _refused(kw, kafka.client_config("sasl_ssl", **{"ssl.ca.location": kafka.pki.other_ca}), TlsError, "certificate")


def test_mutual_tls(kw, kafka):
    meta, value = _round_trip(kw, kafka.client_config("ssl"))
    assert value == b"secret-value"
    err = _refused(kw, kafka.client_config("ssl", client_cert=False), TlsError, "client certificate")
    print(f"no client certificate: {err!r}")


def test_a_revocation_list_and_the_tls_versions(kw, kafka, tmp_path):
    """ssl_crlfile (librdkafka's ssl.crl.location): a list revoking nothing
    lets the broker in, one revoking its certificate refuses it;
    ssl.enabled.protocols: each version the listener speaks works alone."""
    cfg = kafka.client_config("sasl_ssl")
    clean = make_crl(kafka.pki, str(tmp_path / "clean.crl"))
    assert _round_trip(kw, {**cfg, "ssl.crl.location": clean})[1] == b"secret-value"
    revoked = make_crl(kafka.pki, str(tmp_path / "revoked.crl"), revoke=(kafka.pki.server_cert,))
    _refused(kw, {**cfg, "ssl_crlfile": revoked}, TlsError, "revoked")
    for versions in ("TLSv1.2", "TLSv1.3"):
        with Admin({**cfg, "ssl.enabled.protocols": versions}) as a:
            assert a.list_topics(timeout=15) is not None


@pytest.mark.parametrize("listener", ["sasl_plaintext", "sasl_ssl"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_round_trip(kw, kafka, listener, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    user = ("alice", kafka.users["alice"])
    cfg = kafka.client_config(listener, user=user, mechanism=mechanism)
    _, value = _round_trip(kw, cfg)
    assert value == b"secret-value"
    with kw.Producer(cfg) as p:
        shown, inner = _internals(kw, p)
        assert user[1] not in repr(shown) and user[1] not in repr(inner._client._conns)
        assert user[1] not in repr(redact(p.cfg))     # the resolved config, as kwire shows it
    assert user[1] not in caplog.text


@pytest.mark.parametrize("listener", ["sasl_plaintext", "sasl_ssl"])
@pytest.mark.parametrize("user,password,mechanism", [
    ("alice", "wrong-password", "PLAIN"),
    ("alice", "wrong-password", "SCRAM-SHA-256"),
    ("alice", "wrong-password", "SCRAM-SHA-512"),
    ("mallory", "mallory-password", "PLAIN"),
    ("mallory", "mallory-password", "SCRAM-SHA-256"),
    ("mallory", "mallory-password", "SCRAM-SHA-512"),
])
def test_sasl_refusals_fail_fast(kw, kafka, listener, user, password, mechanism, caplog):
    caplog.set_level(logging.DEBUG)
    err = _refused(kw, kafka.client_config(listener, user=(user, password), mechanism=mechanism),
                   SaslAuthenticationError, f"refused SASL {mechanism}")
    assert password not in str(err) and password not in repr(err)
    assert password not in caplog.text


def test_sasl_unsupported_mechanism_fails_fast(kw, kafka, caplog):
    caplog.set_level(logging.DEBUG)
    password = kafka.users["alice"]
    err = _refused(kw, kafka.client_config("plain_only", user=("alice", password), mechanism="SCRAM-SHA-256"),
                   SaslAuthenticationError, "does not offer SASL mechanism SCRAM-SHA-256.*PLAIN")
    assert password not in caplog.text and password not in repr(err)
    # PLAIN on the same listener works
    with Admin(kafka.client_config("plain_only", user=("alice", password))) as a:
        assert a.describe_cluster(timeout=10).cluster_id == kafka.cluster_id
