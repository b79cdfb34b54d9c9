"""Clients a Python worker keeps across Spark tasks (Spark reuses its
Python workers), one per configuration, closed when the worker exits.

Bounded as the connector bounds its consumer pool
(``spark.kafka.consumer.cache.capacity`` 64 and ``...timeout`` 5m): a client
unused for ``idle_s`` is closed at the next ``get()``, and past
``capacity`` clients the least recently used is closed. Configuration keys
listed in ``ignore`` are left out of the match (the source's per-query group
id, which its consumers never send), so that one query after another reuses
the same connections and warm decoder instead of piling up clients."""

from __future__ import annotations

import atexit
import json
import logging
import time
from collections import OrderedDict
from typing import Any, Callable, Dict, Generic, Iterable, Tuple, TypeVar

__all__ = ["ClientCache"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ClientCache(Generic[T]):
    """``get(config)`` returns the client made for an equal configuration
    (but for the ``ignore`` keys) earlier in this process, or makes one with
    ``factory(config)``."""

    def __init__(self, factory: Callable[[Dict[str, Any]], T], close: Callable[[T], None], *,
                 ignore: Iterable[str] = (), capacity: int = 16, idle_s: float = 300.0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._factory = factory
        self._close = close
        self._ignore = frozenset(ignore)
        self._capacity = capacity
        self._idle_s = idle_s
        self._clients: "OrderedDict[str, Tuple[T, float]]" = OrderedDict()   # least recently used first
        atexit.register(self.close_all)

    def _key(self, config: Dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in config.items() if k not in self._ignore}, sort_keys=True, default=str)

    def get(self, config: Dict[str, Any]) -> T:
        key = self._key(config)
        now = time.monotonic()
        self._evict(now, keep=key)
        entry = self._clients.pop(key, None)
        client = self._factory(config) if entry is None else entry[0]
        self._clients[key] = (client, now)
        while len(self._clients) > self._capacity:
            self._quietly_close(self._clients.popitem(last=False)[1][0])
        return client

    def _evict(self, now: float, keep: str) -> None:
        """Close the clients unused for ``idle_s`` (but ``keep``'s)."""
        for key, (client, used) in list(self._clients.items()):
            if key != keep and now - used >= self._idle_s:
                del self._clients[key]
                self._quietly_close(client)

    def __len__(self) -> int:
        return len(self._clients)

    def drop(self, config: Dict[str, Any]) -> None:
        """Close and forget the client of ``config`` (after a failure left it in an unknown state)."""
        entry = self._clients.pop(self._key(config), None)
        if entry is not None:
            self._quietly_close(entry[0])

    def close_all(self) -> None:
        while self._clients:
            self._quietly_close(self._clients.popitem()[1][0])

    def _quietly_close(self, client: T) -> None:
        try:
            self._close(client)
        except Exception:          # closing after a failure or at exit: the first error is what matters
            log.debug("closing %r failed", client, exc_info=True)
