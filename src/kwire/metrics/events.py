"""librdkafka's ``error_cb`` and ``throttle_cb``: a client's events, told
to the application as they happen rather than sampled by ``stats_cb``.

``throttle_cb(event)`` gets a :class:`ThrottleEvent` (confluent-kafka's
names: ``broker_name``, ``broker_id``, ``throttle_time`` in seconds) for
each response in which a broker's quota asked the client to wait
(KIP-219). ``error_cb(error)`` gets a kwire exception for what no call
raises, because no call is waiting for it: every broker the client knows
unreachable (a :class:`kwire.client.NoBrokersAvailableError`, said once
until one connects again, as librdkafka's ``_ALL_BROKERS_DOWN``), and a
broker refusing the client for good (authentication, TLS: each failure
once until the broker connects again). Retriable failures of one broker
among others are logged, not told.

The events are collected on the I/O thread and the callbacks run in
:meth:`ClientEvents.deliver`, from ``Client.tick``: where ``stats_cb``
runs (a blocking consumer's ``poll()``, a producer's I/O thread, kwire.aio's
event loop; a consumer group's coordinator has a client of its own, on the
group's thread). At most :data:`KEPT` events wait; older ones are dropped
and counted. A callback that raises is logged once.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Deque, Optional, Tuple

__all__ = ["ThrottleEvent", "ClientEvents", "KEPT"]

log = logging.getLogger(__name__)

#: How many events wait for delivery at most (a callback that never runs cannot grow memory).
KEPT = 1024


@dataclass(frozen=True)
class ThrottleEvent:
    """A broker asked the client to wait (KIP-219), as confluent-kafka's."""

    broker_name: str        # host:port/node id, as librdkafka names brokers
    broker_id: int
    throttle_time: float    # seconds

    def __str__(self) -> str:
        return f"{self.broker_name} throttled for {self.throttle_time * 1000:.0f} ms"


class ClientEvents:
    """The ``error_cb`` and ``throttle_cb`` of one client (see the module doc)."""

    def __init__(self, error_cb: Optional[Callable[[BaseException], Any]],
                 throttle_cb: Optional[Callable[[ThrottleEvent], Any]]) -> None:
        self.error_cb = error_cb
        self.throttle_cb = throttle_cb
        self.dropped = 0
        self._queue: Deque[Tuple[Callable[[Any], Any], Any]] = collections.deque()
        self._lock = threading.Lock()
        self._failed: set = set()

    @classmethod
    def from_config(cls, cfg: Any) -> Optional["ClientEvents"]:
        error_cb, throttle_cb = cfg.get("error_cb"), cfg.get("throttle_cb")
        return None if error_cb is None and throttle_cb is None else cls(error_cb, throttle_cb)

    def throttled(self, name: str, node_id: int, ms: int) -> None:
        if self.throttle_cb is not None:
            self._put(self.throttle_cb, ThrottleEvent(name, node_id, ms / 1000.0))

    def error(self, error: BaseException) -> None:
        if self.error_cb is not None:
            self._put(self.error_cb, error)

    def _put(self, callback: Callable[[Any], Any], arg: Any) -> None:
        with self._lock:
            if len(self._queue) >= KEPT:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append((callback, arg))

    def deliver(self) -> None:
        """Call the callbacks with what happened since the last call."""
        while True:
            with self._lock:
                if not self._queue:
                    return
                callback, arg = self._queue.popleft()
            try:
                callback(arg)
            except Exception as e:        # noqa: BLE001 - the application's callback: said, never raised here
                name = getattr(callback, "__qualname__", repr(callback))
                if name not in self._failed:
                    self._failed.add(name)
                    log.error("%s raised %s: %s (said once)", name, type(e).__name__, e)
