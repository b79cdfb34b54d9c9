"""A bootstrap list whose first addresses are dead still connects, within a
connection attempt per dead address, not the whole deadline (found on the
three-node cluster: with the first broker killed, every new client's first
request waited on it until its timeout and failed, though two brokers were up).

``Client.request_any`` (metadata, DescribeCluster, every Admin request that
any broker may answer) sends the request to another broker as soon as a
connection attempt fails (refused, or no answer to its setup within
``socket_connection_setup_timeout_ms``), without counting that as one of its
retries. The broker is :class:`support.hostile_broker.HostileBroker`; the dead
addresses are a closed port (refused) and a socket that accepts and never
answers (a hung or partitioned broker)."""

from __future__ import annotations

import socket
import time

import pytest

from kwire.admin import Admin
from kwire.consumer import Consumer
from kwire.devbroker import free_port
from kwire.future import KafkaTimeoutError
from kwire.producer import Producer
from support.hostile_broker import HostileBroker


def _silent() -> socket.socket:
    """A listening socket that never accepts: connects succeed (the backlog), nothing is answered."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def test_admin_skips_dead_bootstrap_addresses():
    silent = _silent()
    with silent, HostileBroker({"t": 1}) as broker:
        dead = f"127.0.0.1:{free_port()}"
        hung = "127.0.0.1:%d" % silent.getsockname()[1]
        t0 = time.monotonic()
        with Admin({"bootstrap.servers": f"{dead},{hung},{broker.bootstrap}", "request.timeout.ms": 8000,
                    "socket.connection.setup.timeout.ms": 1000, "reconnect.backoff.ms": 50}) as a:
            assert "t" in a.list_topics(timeout=8)
        took = time.monotonic() - t0
    assert took < 5, f"{took:.1f} s: the dead addresses held the request past one attempt each"


def test_producer_metadata_skips_a_dead_first_address():
    with HostileBroker({"t": 1}) as broker:
        dead = f"127.0.0.1:{free_port()}"
        t0 = time.monotonic()
        with Producer(bootstrap_servers=f"{dead},{broker.bootstrap}", request_timeout_ms=8000,
                      socket_connection_setup_timeout_ms=1000, linger_ms=0) as p:
            md = p.send("t", b"v", partition=0).get(8)
        assert md.offset == 0
    assert time.monotonic() - t0 < 5


def test_consumer_skips_dead_bootstrap_addresses():
    silent = _silent()
    with silent, HostileBroker({"t": 1}) as broker:
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
            p.send("t", b"v", partition=0).get(8)
        dead = f"127.0.0.1:{free_port()}"
        hung = "127.0.0.1:%d" % silent.getsockname()[1]
        t0 = time.monotonic()
        with Consumer(bootstrap_servers=f"{dead},{hung},{broker.bootstrap}", auto_offset_reset="earliest",
                      request_timeout_ms=8000, socket_connection_setup_timeout_ms=1000, reconnect_backoff_ms=50) as c:
            c.assign([("t", 0)])
            got = []
            while not got and time.monotonic() - t0 < 8:
                got = [r.value for recs in c.poll(100).values() for r in recs]
        assert got == [b"v"]
    assert time.monotonic() - t0 < 5, f"{time.monotonic() - t0:.1f} s"


def test_send_timeout_says_why_no_broker_answered():
    """With no broker reachable, send()'s metadata wait times out at
    max_block_ms, and the error says why (each different failure once),
    not only that no metadata came."""
    port = free_port()
    with Producer(bootstrap_servers=f"127.0.0.1:{port}", max_block_ms=700, reconnect_backoff_max_ms=100) as p:
        t0 = time.monotonic()
        with pytest.raises(KafkaTimeoutError) as err:
            p.send("t", b"v")
        assert time.monotonic() - t0 < 3
        text = str(err.value)
        assert "no metadata for topic 't'" in text and "could not be reached" in text and str(port) in text, text
        assert "ECONNREFUSED" in text, text


def test_alternating_connection_failures_are_said_once_each(caplog):
    """A dead broker's reconnects may fail in turns with different errors
    (behind a proxy: accepted then reset, or refused): each is logged once
    until the node connects again, not every other retry."""
    import logging

    from kwire.client import Client
    from kwire.config import PRODUCER, resolve
    from kwire.net import ConnectionLostError

    client = Client(resolve(PRODUCER, None, {"bootstrap_servers": f"127.0.0.1:{free_port()}"}, what="producer"))
    try:
        with caplog.at_level(logging.INFO, logger="kwire.client"):
            for i in range(10):
                conn = client.connection(-1)
                if conn is None:            # in its backoff: the test does not wait it out
                    client._backoff.pop(-1, None)
                    conn = client.connection(-1)
                conn.close(ConnectionLostError("reset by peer" if i % 2 else "closed the connection"))
        said = [r.getMessage() for r in caplog.records if r.name == "kwire.client"]
        assert sum("reset by peer" in m for m in said) == 1, said
        assert sum("closed the connection" in m for m in said) == 1, said
    finally:
        client.close()
