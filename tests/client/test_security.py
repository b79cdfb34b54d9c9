"""TLS and SASL through terminating proxies in front of the real broker
(Tansu 0.6.0 has no working TLS listener and its SASL cannot authenticate
anyone), with the broker advertising the proxy's port so every connection
the client makes goes through it.

Tansu only: Apache Kafka's own TLS, mTLS and SASL listeners are tested
without proxies in tests/kafka/test_security.py."""

from __future__ import annotations

import logging
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.consumer import Consumer
from kwire.net import TlsError
from kwire.producer import Producer
from kwire.sasl import SaslAuthenticationError
from support.proxies import SaslProxy, TlsProxy, make_pki
from support.tansu import free_port, start_tansu

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


def _behind(proxy_factory):
    """A broker whose metadata points at a proxy in front of it."""
    port = free_port()
    proxy = proxy_factory(("127.0.0.1", port))
    broker = start_tansu(port=port, advertised=proxy.address)
    return proxy, broker


def _round_trip(cfg):
    topic = f"s-{uuid.uuid4().hex[:8]}"
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with Producer(cfg) as p:
        meta = p.send(topic, b"secret-value", partition=0).get(20)
    with Consumer(cfg, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        for _ in range(40):
            recs = c.poll(500).get((topic, 0))
            if recs:
                return meta, recs[0].value
    raise AssertionError("nothing consumed")


@pytest.fixture(scope="module")
def tls_broker(pki):
    proxy, broker = _behind(lambda target: TlsProxy(target, pki))
    yield proxy, broker
    broker.stop()
    proxy.stop()


@pytest.fixture(scope="module")
def mtls_broker(pki):
    proxy, broker = _behind(lambda target: TlsProxy(target, pki, require_client_cert=True))
    yield proxy, broker
    broker.stop()
    proxy.stop()


def test_tls_round_trip(tls_broker, pki):
    proxy, _ = tls_broker
    cfg = {"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "SSL", "ssl.ca.location": pki.ca}
    meta, value = _round_trip(cfg)
    assert value == b"secret-value" and meta.offset == 0
    assert proxy.accepted >= 1 and not proxy.errors


def test_tls_refuses_an_untrusted_ca_and_a_wrong_name(tls_broker, pki, tmp_path):
    proxy, broker = tls_broker
    with pytest.raises(TlsError, match="certificate"):
        with Admin({"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "SSL",
                    "ssl.ca.location": pki.other_ca, "request.timeout.ms": 5000}) as a:
            a.list_topics()
    # a certificate for another name, signed by a CA we trust
    other = make_pki(str(tmp_path), server_names=("kafka.example",))
    with TlsProxy((broker.host, broker.port), other) as wrong_name:
        with pytest.raises(TlsError, match="certificate"):
            with Admin({"bootstrap.servers": f"localhost:{wrong_name.port}", "security.protocol": "SSL",
                        "ssl.ca.location": other.ca, "request.timeout.ms": 5000}) as a:
                a.list_topics()
        # and the same connection with hostname checks off (ssl.endpoint.identification.algorithm="") works
        with Admin({"bootstrap.servers": f"localhost:{wrong_name.port}", "security.protocol": "SSL",
                    "ssl.ca.location": other.ca, "ssl.endpoint.identification.algorithm": "",
                    "request.timeout.ms": 5000}) as a:
            assert a.describe_cluster().cluster_id == broker.cluster_id


def test_mutual_tls(mtls_broker, pki):
    proxy, _ = mtls_broker
    base = {"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "SSL", "ssl.ca.location": pki.ca,
            "request.timeout.ms": 5000}
    meta, value = _round_trip({**base, "ssl.certificate.location": pki.client_cert, "ssl.key.location": pki.client_key})
    assert value == b"secret-value"
    with pytest.raises(TlsError, match="client certificate"):   # none given: refused after the handshake
        with Admin(base) as a:
            a.list_topics(timeout=5)


USERS = {"alice": "wonderland", "bob": "builder=,x"}


@pytest.fixture(scope="module")
def sasl_broker():
    proxy, broker = _behind(lambda target: SaslProxy(target, USERS, mechanisms=("PLAIN", "SCRAM-SHA-256",
                                                                               "SCRAM-SHA-512")))
    yield proxy, broker
    broker.stop()
    proxy.stop()


@pytest.mark.parametrize("mechanism,user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "alice")])
def test_sasl_round_trip(sasl_broker, mechanism, user, caplog):
    proxy, _ = sasl_broker
    caplog.set_level(logging.DEBUG)
    cfg = {"bootstrap.servers": proxy.address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
           "sasl.username": user, "sasl.password": USERS[user]}
    _, value = _round_trip(cfg)
    assert value == b"secret-value" and user in proxy.authenticated
    with Producer(cfg) as p:
        assert USERS[user] not in repr(p) and USERS[user] not in repr(p._client._conns)
    assert USERS[user] not in caplog.text


@pytest.mark.parametrize("user,password,mechanism,match", [
    ("alice", "wrong", "PLAIN", "refused SASL PLAIN"),
    ("alice", "wrong", "SCRAM-SHA-256", "refused SASL SCRAM-SHA-256"),
    ("mallory", "x", "SCRAM-SHA-512", "refused SASL SCRAM-SHA-512"),
    ("mallory", "x", "PLAIN", "refused SASL PLAIN"),
])
def test_sasl_refusals(sasl_broker, user, password, mechanism, match, caplog):
    proxy, _ = sasl_broker
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SaslAuthenticationError, match=match):
        with Admin({"bootstrap.servers": proxy.address, "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                    "request.timeout.ms": 5000}) as a:
            a.list_topics()
    assert password not in caplog.text


def test_sasl_unsupported_mechanism():
    port = free_port()
    proxy = SaslProxy(("127.0.0.1", port), USERS, mechanisms=("PLAIN",))
    broker = start_tansu(port=port, advertised=proxy.address)
    try:
        with pytest.raises(SaslAuthenticationError, match="does not offer SASL mechanism SCRAM-SHA-256.*PLAIN"):
            with Admin({"bootstrap.servers": proxy.address, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "wonderland",
                        "request.timeout.ms": 5000}) as a:
                a.list_topics()
    finally:
        broker.stop()
        proxy.stop()
