"""KIP-219 in kwire.channel.Channel, offline: a response's throttle_time_ms
mutes the connection (at the versions where the client waits); requests
sent meanwhile wait in order and go once it ends. Live against Apache
Kafka's quotas: tests/kafka/test_quotas.py."""

from __future__ import annotations

import time
import types

from kwire import channel, net, protocol
from kwire.channel import Channel


def _ready(monkeypatch):
    conn = Channel(0, "localhost", 1, {}, on_ready=lambda: None, on_output=lambda: None, on_fail=lambda e: None)
    conn.state = "ready"
    sent = []
    monkeypatch.setattr(conn, "_send_now", lambda request, *args, **kwargs: sent.append(request))
    return conn, sent


def test_requests_wait_for_the_throttle_in_order(monkeypatch):
    conn, sent = _ready(monkeypatch)
    conn.send("first")
    conn._throttle(200)
    conn.send("second")
    conn.send("third")
    now = time.monotonic()
    assert sent == ["first"] and 0.1 < conn.throttle_left(now) <= 0.2
    conn.check_timeouts(now)
    assert sent == ["first"]
    time.sleep(0.22)
    conn.send("fourth")                        # after the throttle, behind those that waited
    assert sent == ["first", "second", "third", "fourth"]
    assert conn.throttle_left(time.monotonic()) is None


def test_check_timeouts_releases_when_the_throttle_ends(monkeypatch):
    conn, sent = _ready(monkeypatch)
    conn._throttle(50)
    conn.send("held")
    time.sleep(0.06)
    conn.check_timeouts(time.monotonic())
    assert sent == ["held"]


def test_throttle_only_from_the_kip_219_versions(monkeypatch):
    seen = []
    resp = types.SimpleNamespace(throttle_time_ms=300)
    monkeypatch.setattr(protocol, "decode_response", lambda frame, cls, version: (1, resp))
    produce = protocol.message("ProduceResponse")
    for version in (5, 6):                      # before v6 the broker delayed the answer itself
        assert channel._decode(memoryview(b""), produce, version, None, seen.append) is resp
    assert seen == [300]
    resp.throttle_time_ms = 0
    channel._decode(memoryview(b""), produce, 9, None, seen.append)
    assert seen == [300]


def test_a_request_held_by_a_throttle_keeps_its_timeout(monkeypatch):
    conn, sent = _ready(monkeypatch)
    conn._throttle(10_000)
    request = types.SimpleNamespace(API_KEY=3)
    fut = conn.send(request, timeout=0.05)
    assert 0 < conn.throttle_left(time.monotonic()) <= 0.05     # the client wakes up for its timeout
    time.sleep(0.06)
    assert conn.check_timeouts(time.monotonic()) is None       # the connection goes on
    assert sent == [] and fut.done() and isinstance(fut.exception(), net.RequestTimedOutError)
    assert conn.state == "ready" and conn.throttle_left(time.monotonic()) is None
