"""Retries, failover and the call's deadline, against the real Apicurio:
behind a proxy that answers 503/429 for a while (tests/support/http_proxy.py),
a network partition (support.proxies.FaultProxy), and a port nobody listens on."""

from __future__ import annotations

import time

import pytest

from kwire.devbroker import free_port
from kwire.registry import SchemaRegistryClient, SchemaRegistryError
from support.proxies import FaultProxy

from .conftest import USER_V1

FAST = {"retries.wait.ms": 20, "retries.max.wait.ms": 100}


def _timed(fn):
    t0 = time.monotonic()
    try:
        return fn(), time.monotonic() - t0
    except SchemaRegistryError as e:
        return e, time.monotonic() - t0


def test_a_registry_nobody_answers_fails_retriably_within_the_timeout():
    dead = f"http://127.0.0.1:{free_port()}"
    with SchemaRegistryClient({"url": dead, "timeout": 3, "max.retries": 4, **FAST}) as c:
        err, took = _timed(c.get_subjects)
    assert isinstance(err, SchemaRegistryError) and err.retriable and err.status is None
    assert "got no answer" in err.message and "ConnectError" in err.message
    assert took < 3


def test_a_partitioned_registry_fails_at_the_deadline(apicurio):
    host, port = apicurio.base_url.rsplit("//", 1)[1].split(":")
    with FaultProxy((host, int(port))) as hole:
        url = f"http://127.0.0.1:{hole.port}/apis/ccompat/v7"
        with SchemaRegistryClient({"url": url, "timeout": 1.5, **FAST}) as c:
            assert isinstance(c.get_subjects(), list)           # through the proxy while it relays
            hole.black_hole()
            err, took = _timed(c.get_subjects)
            assert isinstance(err, SchemaRegistryError) and err.retriable and err.status is None
            assert 1.4 < took < 2.5, took
            hole.heal()
            assert isinstance(c.get_subjects(), list)


@pytest.mark.parametrize("status", [503, 429, 500])
def test_retriable_answers_are_retried_then_pass(proxy, subject, status):
    with SchemaRegistryClient({"url": proxy.url, "max.retries": 3, **FAST}) as c:
        proxy.fail(2, status)
        assert c.register_schema(subject, USER_V1) > 0
    assert [s.failed for s in proxy.requests()] == [True, True, False]


def test_retries_end_with_the_last_answer(proxy):
    with SchemaRegistryClient({"url": proxy.url, "max.retries": 2, **FAST}) as c:
        proxy.fail(10, 503)
        err, _ = _timed(c.get_subjects)
    assert isinstance(err, SchemaRegistryError)
    assert (err.status, err.error_code, err.retriable) == (503, 50301, True)
    assert len(proxy.requests()) == 3                        # the first try and two retries


def test_a_backoff_past_the_deadline_is_not_waited(proxy):
    with SchemaRegistryClient({"url": proxy.url, "timeout": 1, "retries.wait.ms": 60_000,
                               "retries.max.wait.ms": 60_000}) as c:
        proxy.fail(100, 503)
        err, took = _timed(c.get_subjects)
    assert isinstance(err, SchemaRegistryError) and err.status == 503
    assert took < 1.2, took


def test_other_errors_are_not_retried(proxy):
    with SchemaRegistryClient({"url": proxy.url, "max.retries": 5, **FAST}) as c:
        with pytest.raises(SchemaRegistryError) as e:
            c.get_schema(1_999_999_999)
    assert e.value.status == 404 and not e.value.retriable
    assert len(proxy.requests()) == 1


def test_the_next_url_is_tried_at_once_and_kept(proxy, subject):
    dead = f"http://127.0.0.1:{free_port()}"
    conf = {"url": f"{dead},{proxy.url}", "retries.wait.ms": 30_000, "retries.max.wait.ms": 30_000}
    with SchemaRegistryClient(conf) as c:
        result, took = _timed(lambda: c.register_schema(subject, USER_V1))
        assert isinstance(result, int) and took < 2, (result, took)     # no backoff between URLs
        c.clear_caches()
        c.get_latest_version(subject)
    assert len(proxy.requests()) == 2


def test_a_failing_url_is_left_for_the_next(proxy, apicurio, subject):
    """503 from the first registry: the second answers (Confluent's client does the same)."""
    with SchemaRegistryClient({"url": f"{proxy.url},{apicurio.url}", "max.retries": 0}) as c:
        proxy.fail(1, 503)
        assert c.register_schema(subject, USER_V1) > 0
    assert [s.failed for s in proxy.requests()] == [True]
