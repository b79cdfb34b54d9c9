"""TLS and SASL through terminating proxies in front of the real broker
(Tansu 0.6.0 has no working TLS listener and its SASL cannot authenticate
anyone), with the broker advertising the proxy's port so every connection
the client makes goes through it.

Tansu only: Apache Kafka's own TLS, mTLS and SASL listeners are tested
without proxies in tests/kafka/test_security.py.

The round trips and refusals run with kwire's blocking clients and with
kwire.aio's (the ``kw`` fixture): a refusal raises the same error from
both (a consumer's call that waits for a broker raises it at once, not
retriable; a producer's send gives up at ``max.block.ms`` naming it). So do
a TLS handshake the server ends (EOF) and one it never answers, without a
broker."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
import uuid

import pytest

from kwire.admin import Admin, NewTopic
from kwire.client import NoBrokersAvailableError
from kwire.future import KafkaTimeoutError
from kwire.net import TlsError
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


def _round_trip(kw, cfg):
    topic = f"s-{uuid.uuid4().hex[:8]}"
    with Admin(cfg) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with kw.Producer(cfg) as p:
        meta = p.send(topic, b"secret-value", partition=0).get(20)
    with kw.Consumer(cfg, auto_offset_reset="earliest") as c:
        c.assign([(topic, 0)])
        for _ in range(40):
            recs = c.poll(500).get((topic, 0))
            if recs:
                return meta, recs[0].value
    raise AssertionError("nothing consumed")


def _clients_refused(kw, cfg, error, match, *, fast=5.0):
    """kwire's consumer raises ``error`` (not retriable) at once from a call
    that needs a broker; its producer's send gives up at ``max.block.ms``
    with a KafkaTimeoutError naming the refusal. Returns the consumer's error."""
    t0 = time.monotonic()
    with kw.Consumer({**cfg, "request.timeout.ms": 10000}) as c:
        with pytest.raises(error, match=match) as info:
            c.end_offsets([("refused", 0)], timeout=10)
    assert time.monotonic() - t0 < fast, f"took {time.monotonic() - t0:.1f} s"
    assert info.value.retriable is False
    with kw.Producer({**cfg, "max.block.ms": 1500}) as p:
        with pytest.raises(KafkaTimeoutError, match=f"could not be reached: .*{match or ''}"):
            p.send("refused", b"x", partition=0)
    return info.value


def _internals(kw, producer):
    """The producer to show (repr) and the one holding the connections: the
    blocking producer itself, or kwire.aio's and the producer inside it."""
    if not kw.is_aio:
        return producer, producer
    return producer.aio, producer.aio._p


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


def test_tls_round_trip(kw, tls_broker, pki):
    proxy, _ = tls_broker
    cfg = {"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "SSL", "ssl.ca.location": pki.ca}
    meta, value = _round_trip(kw, cfg)
    assert value == b"secret-value" and meta.offset == 0
    assert proxy.accepted >= 1 and not proxy.errors


def test_tls_refuses_an_untrusted_ca_and_a_wrong_name(kw, tls_broker, pki, tmp_path):
    proxy, broker = tls_broker
    untrusted = {"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "SSL",
                 "ssl.ca.location": pki.other_ca, "request.timeout.ms": 5000}
    with pytest.raises(TlsError, match="certificate"):
        with Admin(untrusted) as a:
            a.list_topics()
    _clients_refused(kw, untrusted, TlsError, "certificate was refused: .*unable to get local issuer")
    # a certificate for another name, signed by a CA we trust
    other = make_pki(str(tmp_path), server_names=("kafka.example",))
    with TlsProxy((broker.host, broker.port), other) as wrong_name:
        wrong = {"bootstrap.servers": f"localhost:{wrong_name.port}", "security.protocol": "SSL",
                 "ssl.ca.location": other.ca, "request.timeout.ms": 5000}
        with pytest.raises(TlsError, match="certificate"):
            with Admin(wrong) as a:
                a.list_topics()
        _clients_refused(kw, wrong, TlsError, "certificate was refused: .*Hostname mismatch")
        # and the same connection with hostname checks off (ssl.endpoint.identification.algorithm="") works
        unchecked = {**wrong, "ssl.endpoint.identification.algorithm": ""}
        topic = f"s-{uuid.uuid4().hex[:8]}"
        with Admin(unchecked) as a:
            assert a.describe_cluster().cluster_id == broker.cluster_id
        with Admin({**untrusted, "ssl.ca.location": pki.ca}) as a:
            a.create_topics([NewTopic(topic, 2)])
        with kw.Producer(unchecked) as p:          # metadata through it (the broker advertises the other proxy)
            assert p.partitions_for(topic, 10) == [0, 1]


def test_mutual_tls(kw, mtls_broker, pki):
    proxy, _ = mtls_broker
    base = {"bootstrap.servers": f"localhost:{proxy.port}", "security.protocol": "SSL", "ssl.ca.location": pki.ca,
            "request.timeout.ms": 5000}
    meta, value = _round_trip(kw, {**base, "ssl.certificate.location": pki.client_cert,
                                   "ssl.key.location": pki.client_key})
    assert value == b"secret-value"
    with pytest.raises(TlsError, match="client certificate"):   # none given: refused after the handshake
        with Admin(base) as a:
            a.list_topics(timeout=5)
    _clients_refused(kw, base, TlsError, "client certificate")


USERS = {"alice": "wonderland", "bob": "builder=,x"}


@pytest.fixture(scope="module")
def sasl_broker():
    proxy, broker = _behind(lambda target: SaslProxy(target, USERS, mechanisms=("PLAIN", "SCRAM-SHA-256",
                                                                               "SCRAM-SHA-512")))
    yield proxy, broker
    broker.stop()
    proxy.stop()


@pytest.mark.parametrize("mechanism,user", [("PLAIN", "alice"), ("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "alice")])
def test_sasl_round_trip(kw, sasl_broker, mechanism, user, caplog):
    proxy, _ = sasl_broker
    caplog.set_level(logging.DEBUG)
    cfg = {"bootstrap.servers": proxy.address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
           "sasl.username": user, "sasl.password": USERS[user]}
    _, value = _round_trip(kw, cfg)
    assert value == b"secret-value" and user in proxy.authenticated
    with kw.Producer(cfg) as p:
        shown, inner = _internals(kw, p)
        assert USERS[user] not in repr(shown) and USERS[user] not in repr(inner._client._conns)
    assert USERS[user] not in caplog.text


@pytest.mark.parametrize("user,password,mechanism,match", [
    ("alice", "wrong", "PLAIN", "refused SASL PLAIN"),
    ("alice", "wrong", "SCRAM-SHA-256", "refused SASL SCRAM-SHA-256"),
    ("mallory", "m4llory-pw", "SCRAM-SHA-512", "refused SASL SCRAM-SHA-512"),
    ("mallory", "m4llory-pw", "PLAIN", "refused SASL PLAIN"),
])
def test_sasl_refusals(kw, sasl_broker, user, password, mechanism, match, caplog):
    proxy, _ = sasl_broker
    caplog.set_level(logging.DEBUG)
    cfg = {"bootstrap.servers": proxy.address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
           "sasl.username": user, "sasl.password": password, "request.timeout.ms": 5000}
    with pytest.raises(SaslAuthenticationError, match=match):
        with Admin(cfg) as a:
            a.list_topics()
    err = _clients_refused(kw, cfg, SaslAuthenticationError, match)
    assert password not in str(err) and password not in caplog.text


def test_sasl_unsupported_mechanism(kw):
    port = free_port()
    proxy = SaslProxy(("127.0.0.1", port), USERS, mechanisms=("PLAIN",))
    broker = start_tansu(port=port, advertised=proxy.address)
    cfg = {"bootstrap.servers": proxy.address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
           "sasl.username": "alice", "sasl.password": "wonderland", "request.timeout.ms": 5000}
    try:
        with pytest.raises(SaslAuthenticationError, match="does not offer SASL mechanism SCRAM-SHA-256.*PLAIN"):
            with Admin(cfg) as a:
                a.list_topics()
        _clients_refused(kw, cfg, SaslAuthenticationError, "does not offer SASL mechanism SCRAM-SHA-256.*PLAIN")
    finally:
        broker.stop()
        proxy.stop()


# ------------------------------------------------------ without a broker
class _TlsServer:
    """A loopback TLS server that misbehaves during setup: ``"eof"`` reads
    the ClientHello and closes (an EOF mid-handshake, as a plaintext
    listener does); ``"silent"`` accepts and never answers."""

    def __init__(self, pki, mode: str) -> None:
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._mode = mode
        self._held = []
        self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._ctx.load_cert_chain(pki.server_cert, pki.server_key)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            if self._mode == "silent":
                self._held.append(conn)
                continue
            try:
                conn.recv(65536)
                conn.shutdown(socket.SHUT_WR)      # FIN, not RST: an EOF
                conn.recv(65536)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._srv.close()
        for conn in self._held:
            conn.close()


def test_tls_eof_during_the_handshake_is_a_tls_error(kw, pki):
    """The blocking client's do_handshake raises SSLEOFError; asyncio (and
    uvloop) say ConnectionResetError: both are the same TlsError."""
    server = _TlsServer(pki, "eof")
    try:
        cfg = {"bootstrap.servers": f"localhost:{server.port}", "security.protocol": "SSL", "ssl.ca.location": pki.ca}
        _clients_refused(kw, cfg, TlsError, f"TLS handshake with localhost:{server.port} failed: .*EOF occurred in "
                                            "violation of protocol")
    finally:
        server.close()


def test_tls_handshake_never_answered_times_out_in_state_tls(kw, pki):
    server = _TlsServer(pki, "silent")
    try:
        cfg = {"bootstrap.servers": f"localhost:{server.port}", "security.protocol": "SSL", "ssl.ca.location": pki.ca,
               "socket.connection.setup.timeout.ms": 1000, "request.timeout.ms": 2500}
        t0 = time.monotonic()
        with kw.Consumer(cfg) as c:
            with pytest.raises(NoBrokersAvailableError, match=rf"connection setup to localhost:{server.port} "
                                                              r"\(node -1\) timed out in state tls"):
                c.end_offsets([("t", 0)], timeout=2.5)
        assert time.monotonic() - t0 < 6
    finally:
        server.close()
