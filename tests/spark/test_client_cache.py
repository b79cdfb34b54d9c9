"""The Python workers' client cache (``kwire.spark._cache``): reuse, the
ignored keys, and its bounds (idle clients and capacity). Plain objects stand
in for clients: the cache only makes, hands out and closes them."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from kwire.spark import _cache
from kwire.spark._cache import ClientCache


class Made:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = config
        self.closed = False


def cache(closed: List[Made], **kw: Any) -> ClientCache:
    def close(c: Made) -> None:
        c.closed = True
        closed.append(c)
    return ClientCache(Made, close, **kw)


def test_equal_configs_share_a_client_and_ignored_keys_do_not_count() -> None:
    closed: List[Made] = []
    c = cache(closed, ignore=("group.id",))
    a = c.get({"bootstrap.servers": "h:1", "group.id": "q1-executor"})
    assert c.get({"group.id": "q2-executor", "bootstrap.servers": "h:1"}) is a     # another query's id
    b = c.get({"bootstrap.servers": "h:2", "group.id": "q1-executor"})
    assert b is not a and len(c) == 2 and not closed
    c.close_all()
    assert {id(x) for x in closed} == {id(a), id(b)} and len(c) == 0


def test_past_capacity_the_least_recently_used_is_closed() -> None:
    closed: List[Made] = []
    c = cache(closed, capacity=2)
    a, b = c.get({"n": 1}), c.get({"n": 2})
    assert c.get({"n": 1}) is a                 # a used last: b is the least recently used
    d = c.get({"n": 3})
    assert closed == [b] and len(c) == 2
    assert c.get({"n": 1}) is a and c.get({"n": 3}) is d


def test_idle_clients_are_closed_at_the_next_get(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(_cache.time, "monotonic", lambda: now[0])
    closed: List[Made] = []
    c = cache(closed, idle_s=60.0)
    a = c.get({"n": 1})
    b = c.get({"n": 2})
    now[0] += 59.0
    assert c.get({"n": 2}) is b and not closed
    now[0] += 30.0                             # a idle 89 s, b 30 s
    assert c.get({"n": 2}) is b
    assert closed == [a] and len(c) == 1
    now[0] += 61.0                             # the one asked for is never closed for idling
    assert c.get({"n": 2}) is b and not b.closed


def test_drop_closes_and_forgets() -> None:
    closed: List[Made] = []
    c = cache(closed, ignore=("group.id",))
    a = c.get({"n": 1, "group.id": "x"})
    c.drop({"n": 1, "group.id": "y"})
    assert closed == [a] and c.get({"n": 1}) is not a


def test_a_failing_close_does_not_stop_the_others() -> None:
    closed: List[Any] = []

    def close(m: Made) -> None:
        closed.append(m)
        raise RuntimeError("broken")
    c = ClientCache(Made, close, capacity=1)
    c.get({"n": 1})
    c.get({"n": 2})                             # evicts the first; its close raising is only logged
    c.close_all()
    assert len(closed) == 2


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ClientCache(Made, lambda c: None, capacity=0)
