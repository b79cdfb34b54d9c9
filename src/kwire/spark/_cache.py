"""Clients a Python worker keeps across Spark tasks (Spark reuses its
Python workers), one per configuration, closed when the worker exits."""

from __future__ import annotations

import atexit
import json
import logging
from typing import Any, Callable, Dict, Generic, TypeVar

__all__ = ["ClientCache"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class ClientCache(Generic[T]):
    """``get(config)`` returns the client made for an equal configuration
    earlier in this process, or makes one with ``factory(config)``."""

    def __init__(self, factory: Callable[[Dict[str, Any]], T], close: Callable[[T], None]) -> None:
        self._factory = factory
        self._close = close
        self._clients: Dict[str, T] = {}
        atexit.register(self.close_all)

    @staticmethod
    def _key(config: Dict[str, Any]) -> str:
        return json.dumps(config, sort_keys=True, default=str)

    def get(self, config: Dict[str, Any]) -> T:
        key = self._key(config)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = self._factory(config)
        return client

    def drop(self, config: Dict[str, Any]) -> None:
        """Close and forget the client of ``config`` (after a failure left it in an unknown state)."""
        client = self._clients.pop(self._key(config), None)
        if client is not None:
            self._quietly_close(client)

    def close_all(self) -> None:
        while self._clients:
            self._quietly_close(self._clients.popitem()[1])

    def _quietly_close(self, client: T) -> None:
        try:
            self._close(client)
        except Exception:          # closing after a failure or at exit: the first error is what matters
            log.debug("closing %r failed", client, exc_info=True)
