"""librdkafka's ``error_cb`` (:mod:`kwire.metrics.events`): every broker
unreachable is told once until one connects again (a private Tansu behind
a relay that is stopped, started again on the same port, and stopped once
more), and a broker refusing the client for good (Apache Kafka's SASL
listener, a wrong password) is told with the error the calls raise.
``throttle_cb`` is checked where a broker throttles: tests/kafka/test_quotas.py."""

from __future__ import annotations

import time
import uuid

import pytest

from kwire.client import NoBrokersAvailableError
from kwire.producer import Producer
from kwire.sasl import SaslAuthenticationError
from support.proxied_broker import proxied_broker
from support.proxies import _Relay


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.05)


@pytest.mark.broker
def test_every_broker_down_is_told_once_until_one_connects():
    told: list = []
    topic = f"events-{uuid.uuid4().hex[:8]}"
    with proxied_broker("tansu", _Relay) as proxy:
        with Producer(bootstrap_servers=proxy.address, error_cb=told.append, linger_ms=0,
                      reconnect_backoff_max_ms=200) as p:
            p.send(topic, b"first").get(20)
            assert told == []
            proxy.stop()                        # refused from now on, the live connection cut
            _until(lambda: told, 20, "all brokers down")
            time.sleep(1.5)                     # reconnect attempts go on, every 200 ms: not told again
            assert len(told) == 1 and isinstance(told[0], NoBrokersAvailableError), told
            assert "all brokers are down" in str(told[0]) and told[0].retriable
            relay = _Relay(proxy.target, port=proxy.port)
            try:
                p.send(topic, b"second").get(30)    # back: the next time is told again
                relay.stop()
                _until(lambda: len(told) == 2, 20, "all brokers down again")
            finally:
                relay.stop()
            p.close(0)


@pytest.mark.kafka
def test_a_broker_refusing_the_client_is_told(kafka):
    told: list = []
    cfg = kafka.client_config("sasl_plaintext", user=("alice", "not-her-password"))
    with Producer(cfg, error_cb=told.append, max_block_ms=2000) as p:
        _until(lambda: any(isinstance(e, SaslAuthenticationError) for e in told), 20, "the refusal")
        assert "not-her-password" not in " ".join(map(str, told))
        p.close(0)
