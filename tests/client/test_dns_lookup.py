"""``client_dns_lookup`` (Kafka's ``client.dns.lookup``) on both brokers.

Here ``localhost`` resolves to 127.0.0.1 only (``getent ahosts localhost``),
so no real name has an address with nothing behind it: ``fake_dns`` stands
in for the resolver (``socket.getaddrinfo``, for the names it knows; every
other name goes to the real one). The brokers are real, and so are the dead
addresses: a closed port (refused), a socket that listens and never accepts
(the TCP connect succeeds, nothing answers: a hung host), a FaultProxy in
front of the real broker, black-holed.

- use_all_dns_ips (the default): a name whose first address refuses, or
  does not answer, connects through its next address, within
  ``socket_connection_setup_timeout_ms``; every address failing is one
  error naming what each did;
- a name that resolves to nothing is a retriable error that says so, said
  once in the log however often the client tries again, and once the name
  resolves the same client connects;
- resolve_canonical_bootstrap_servers_only: a bootstrap alias becomes the
  canonical names of its addresses.
"""

from __future__ import annotations

import logging
import socket
import time

import pytest

from kwire.admin import Admin
from kwire.client import NoBrokersAvailableError
from kwire.config import COMMON, ConfigError, resolve
from kwire.devbroker import free_port
from kwire.producer import Producer
from support.proxies import FaultProxy

NAME = "multi.kwire.test"


class FakeDns:
    """``socket.getaddrinfo`` for the names in ``table`` (name -> [(ip, port)], in order;
    an empty list: the name does not resolve); ``asked`` counts the look-ups per name."""

    def __init__(self, real):
        self.real = real
        self.table = {}
        self.asked = {}

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        if host not in self.table:
            return self.real(host, port, family, type, proto, flags)
        self.asked[host] = self.asked.get(host, 0) + 1
        if not self.table[host]:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (ip, p)) for ip, p in self.table[host]]


@pytest.fixture
def fake_dns(monkeypatch):
    dns = FakeDns(socket.getaddrinfo)
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    return dns


def _silent():
    """Listens, never accepts: a TCP connect succeeds (the backlog) and nothing ever answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def _addr(bootstrap: str):
    host, port = bootstrap.rsplit(":", 1)
    return (socket.gethostbyname(host), int(port))


def test_option():
    assert resolve(COMMON, {"bootstrap.servers": "h:1"})["client_dns_lookup"] == "use_all_dns_ips"
    got = resolve(COMMON, {"bootstrap.servers": "h:1", "client.dns.lookup": "resolve_canonical_bootstrap_servers_only"})
    assert got["client_dns_lookup"] == "resolve_canonical_bootstrap_servers_only"
    with pytest.raises(ConfigError, match="client.dns.lookup.*use_all_dns_ips"):
        resolve(COMMON, {"bootstrap.servers": "h:1", "client.dns.lookup": "default"})   # gone in Kafka 3.0


def test_refused_first_address(broker, fake_dns):
    fake_dns.table[NAME] = [("127.0.0.1", free_port()), _addr(broker.bootstrap)]
    t0 = time.monotonic()
    with Admin({"bootstrap.servers": f"{NAME}:9092", "request.timeout.ms": 10000}) as a:
        assert len(a.describe_cluster(timeout=10).brokers) >= 1
        assert a._client._answered[(NAME, 9092)][3] == _addr(broker.bootstrap)     # remembered for next time
    with Producer(bootstrap_servers=f"{NAME}:9092", linger_ms=0, request_timeout_ms=10000) as p:
        assert p.send(f"dns-{broker.name}", b"v", partition=0).get(20).offset >= 0
    assert time.monotonic() - t0 < 15


@pytest.mark.parametrize("dead", ["silent", "black-holed"])
def test_unanswering_first_address(broker, fake_dns, dead):
    """The first address takes the connection and never answers: after its share of the
    setup timeout (half of it, two addresses) the next one is tried, in the same attempt."""
    hole = _silent() if dead == "silent" else FaultProxy(_addr(broker.bootstrap))
    try:
        if dead == "silent":
            first = hole.getsockname()[:2]
        else:
            hole.black_hole()
            first = (hole.host, hole.port)
        fake_dns.table[NAME] = [first, _addr(broker.bootstrap)]
        t0 = time.monotonic()
        with Admin({"bootstrap.servers": f"{NAME}:9092", "request.timeout.ms": 10000,
                    "socket.connection.setup.timeout.ms": 3000}) as a:
            assert len(a.describe_cluster(timeout=10).brokers) >= 1
        took = time.monotonic() - t0
        assert 1.3 < took < 3.0 + 2.0, f"{took:.1f} s: the first address should have had 1.5 s of the 3 s"
    finally:
        if dead == "silent":
            hole.close()
        else:
            hole.stop()


def test_every_address_failing_is_one_clear_error(fake_dns):
    a_port, b_port = free_port(), free_port()
    fake_dns.table[NAME] = [("127.0.0.1", a_port), ("127.0.0.1", b_port)]
    t0 = time.monotonic()
    with Admin({"bootstrap.servers": f"{NAME}:9092", "reconnect.backoff.ms": 50}) as a:
        with pytest.raises(NoBrokersAvailableError) as e:
            a.describe_cluster(timeout=1)
    assert time.monotonic() - t0 < 3
    msg = str(e.value)
    assert f"{NAME}:9092" in msg and f"127.0.0.1:{a_port}: ECONNREFUSED" in msg and f"127.0.0.1:{b_port}: ECONNREFUSED" in msg


def test_unresolvable_name_said_once_and_retried(broker, fake_dns, caplog):
    fake_dns.table[NAME] = []
    caplog.set_level(logging.DEBUG, logger="kwire")
    with Admin({"bootstrap.servers": f"{NAME}:9092", "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200}) as a:
        t0 = time.monotonic()
        with pytest.raises(NoBrokersAvailableError, match=f"cannot resolve {NAME}:9092.*not known"):
            a.describe_cluster(timeout=2)
        assert time.monotonic() - t0 < 3
        with pytest.raises(NoBrokersAvailableError):
            a.describe_cluster(timeout=1)
        assert fake_dns.asked[NAME] >= 4, fake_dns.asked            # tried again (with backoff), not given up
        said = [r for r in caplog.records if "cannot resolve" in r.getMessage() and r.levelno >= logging.INFO]
        assert len(said) == 1, [r.getMessage() for r in said]     # once, not at every attempt
        assert fake_dns.asked[NAME] < 40                             # backoff, not a tight loop
        fake_dns.table[NAME] = [_addr(broker.bootstrap)]             # the name resolves now: same client
        assert len(a.describe_cluster(timeout=10).brokers) >= 1


def test_canonical_bootstrap(broker, fake_dns):
    ip, port = _addr(broker.bootstrap)
    try:
        canonical = socket.getnameinfo((ip, 0), socket.NI_NAMEREQD)[0]
    except OSError:
        canonical = ip                                  # no reverse entry: the address itself (as Java)
    fake_dns.table["alias.kwire.test"] = [(ip, port)]
    cfg = {"bootstrap.servers": f"alias.kwire.test:{port}",
           "client.dns.lookup": "resolve_canonical_bootstrap_servers_only"}
    with Admin(cfg) as a:
        assert [(b.host, b.port) for b in a._client._bootstrap] == [(canonical, port)]
        assert len(a.describe_cluster(timeout=10).brokers) >= 1
    with Admin({"bootstrap.servers": f"alias.kwire.test:{port}"}) as a:      # the default keeps the alias
        assert [(b.host, b.port) for b in a._client._bootstrap] == [("alias.kwire.test", port)]


def test_the_address_that_answered_goes_first_next_time(broker, fake_dns):
    """A client's next connection to the name goes to the address that answered,
    not again through the one that hung (its share of the setup time each time)."""
    from kwire.client import Client
    from kwire.config import ADMIN

    with _silent() as hole:
        fake_dns.table[NAME] = [hole.getsockname()[:2], _addr(broker.bootstrap)]
        client = Client(resolve(ADMIN, {"bootstrap.servers": f"{NAME}:9092",
                                        "socket.connection.setup.timeout.ms": 3000}))
        try:
            t0 = time.monotonic()
            first = client.wait_ready(-1, time.monotonic() + 10)
            assert time.monotonic() - t0 > 1.3 and first.sockaddr == _addr(broker.bootstrap)
            first.close(quiet=True)
            t0 = time.monotonic()
            again = client.wait_ready(-1, time.monotonic() + 10)
            assert again is not first and again.sockaddr == _addr(broker.bootstrap)
            assert time.monotonic() - t0 < 1.0
        finally:
            client.close()
