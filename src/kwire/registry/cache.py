"""The registry client's caches: bounded, thread-safe, optionally expiring.

:class:`Caches` holds what a client remembers (Confluent's client keeps the
same): schemas by id (an id's schema never changes), registrations by
subject and schema and by subject and version, and each subject's latest
version, which expires after ``cache.latest.ttl.sec`` (never without it,
as in Confluent's client). Each map keeps at most ``cache.capacity``
entries, the least recently used dropped first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Generic, Hashable, Optional, Tuple, TypeVar

from kwire.registry.schema import RegisteredSchema, Schema

__all__ = ["BoundedCache", "Caches"]

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A least-recently-used map of at most ``capacity`` entries, each
    living ``ttl`` seconds (None: until dropped). Thread-safe."""

    def __init__(self, capacity: int, ttl: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if capacity < 1:
            raise ValueError("a cache's capacity must be at least 1")
        self.capacity = capacity
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._items: "OrderedDict[Hashable, Tuple[float, V]]" = OrderedDict()

    def get(self, key: Hashable) -> Optional[V]:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if item[0] <= self._clock():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key: Hashable, value: V) -> None:
        expires = self._clock() + self.ttl if self.ttl is not None else float("inf")
        with self._lock:
            self._items[key] = (expires, value)
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def drop(self, keep: Callable[[Any], bool]) -> None:
        """Forget every entry whose key ``keep`` refuses."""
        with self._lock:
            for key in [k for k in self._items if not keep(k)]:
                del self._items[key]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class Caches:
    """Everything one client caches (see the module doc)."""

    def __init__(self, capacity: int, latest_ttl: Optional[float]) -> None:
        self.by_id: BoundedCache[Schema] = BoundedCache(capacity)                     # (id, fmt)
        self.by_schema: BoundedCache[RegisteredSchema] = BoundedCache(capacity)       # (subject, schema, kind)
        self.by_version: BoundedCache[RegisteredSchema] = BoundedCache(capacity)      # (subject, version, fmt)
        self.latest: BoundedCache[RegisteredSchema] = BoundedCache(capacity, latest_ttl)  # (subject, fmt)

    def forget_subject(self, subject: str, version: Optional[int] = None) -> None:
        """After a delete: what was cached of ``subject`` (of that ``version`` only, if given)."""
        def keep(key: Any) -> bool:
            return not (key[0] == subject and (version is None or key[1] == version))

        self.by_version.drop(keep)
        self.latest.drop(lambda key: key[0] != subject)
        self.by_schema.drop(lambda key: key[0] != subject)

    def clear(self) -> None:
        for cache in (self.by_id, self.by_schema, self.by_version, self.latest):
            cache.clear()
