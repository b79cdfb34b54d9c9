"""A small thread-safe future: the result of a request or a produced record.

Completed by the thread doing the network I/O and waited on by any other;
callbacks run in the completing thread (or at once, when added to a future
that is already done). Cheaper than ``concurrent.futures.Future``: no lock or
event of its own until someone actually waits.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Generic, List, Optional, TypeVar

from kwire.errors import KwireError

__all__ = ["Future", "KafkaTimeoutError"]

T = TypeVar("T")
log = logging.getLogger(__name__)
_lock = threading.Lock()   # guards the done transition and waiter creation of every future


class KafkaTimeoutError(KwireError):
    """An operation did not complete in the time it was given."""

    retriable = True


_PENDING = object()


class Future(Generic[T]):
    """Pending until :meth:`set_result` or :meth:`set_exception`."""

    __slots__ = ("_value", "_error", "_callbacks", "_event")

    def __init__(self) -> None:
        self._value: Any = _PENDING
        self._error: Optional[BaseException] = None
        self._callbacks: Optional[List[Callable[["Future[T]"], None]]] = None
        self._event: Optional[threading.Event] = None

    def done(self) -> bool:
        return self._value is not _PENDING or self._error is not None

    def succeeded(self) -> bool:
        return self._value is not _PENDING

    def failed(self) -> bool:
        return self._error is not None

    def set_result(self, value: T) -> None:
        self._finish(value, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(_PENDING, error)

    def _finish(self, value: Any, error: Optional[BaseException]) -> None:
        with _lock:
            if self.done():
                raise RuntimeError("future already completed")
            if error is None:
                self._value = value
            else:
                self._error = error
            callbacks, self._callbacks = self._callbacks, None
            event = self._event
        if event is not None:
            event.set()
        if callbacks:
            for cb in callbacks:
                self._run(cb)

    def _run(self, cb: Callable[["Future[T]"], None]) -> None:
        try:
            cb(self)
        except Exception:  # a user's callback must not break the I/O thread
            log.exception("future callback %r raised", cb)

    def add_done_callback(self, cb: Callable[["Future[T]"], None]) -> None:
        """Call ``cb(future)`` when done (now, if it already is)."""
        with _lock:
            if not self.done():
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(cb)
                return
        self._run(cb)

    def exception(self) -> Optional[BaseException]:
        return self._error

    @property
    def value(self) -> T:
        """The result of a future that succeeded (no waiting)."""
        if self._value is _PENDING:
            raise RuntimeError("future has no result") if self._error is None else self._error
        return self._value

    def result(self, timeout: Optional[float] = None) -> T:
        """Wait for the result (seconds; None waits for ever) and return it,
        or raise the future's exception, or :class:`KafkaTimeoutError`."""
        if not self.done():
            with _lock:
                if not self.done() and self._event is None:
                    self._event = threading.Event()
                event = self._event
            if event is not None and not event.wait(timeout):
                raise KafkaTimeoutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    # kafka-python and Java call it get()
    get = result

    def __repr__(self) -> str:
        if self._error is not None:
            return f"<Future failed: {self._error!r}>"
        if self._value is not _PENDING:
            return f"<Future done: {self._value!r}>"
        return "<Future pending>"
