"""A small thread-safe future: the result of a request or a produced record.

Completed by the thread doing the network I/O and waited on by any other;
callbacks run in the completing thread (or at once, when added to a future
that is already done). Cheaper than ``concurrent.futures.Future``: no lock or
event of its own until someone actually waits.

A callback that raises is logged, never propagated: it runs in the I/O
thread, which must go on. A failing callback usually fails again for every
response that follows (a bug meets the same input, or a broker keeps sending
the same bad answer), so the log says each failure once with its traceback
and then, at most once a minute, how often it repeated: a flood of identical
tracebacks would hide everything else in the log and cost the I/O thread
more than the failure itself.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Generic, List, Optional, Sequence, Tuple, TypeVar

from kwire.errors import KwireError

__all__ = ["Future", "KafkaTimeoutError"]

T = TypeVar("T")
log = logging.getLogger(__name__)
_lock = threading.Lock()   # guards the done transition and waiter creation of every future


class KafkaTimeoutError(KwireError):
    """An operation did not complete in the time it was given."""

    retriable = True


_PENDING = object()

#: A callback failure that repeats is summarised at most this often (seconds).
REPEAT_REPORT_INTERVAL = 60.0
#: How many distinct callback failures are remembered (the oldest is forgotten first).
_MAX_FAILURES = 256
# (callback, exception type, where raised) -> [repeats not yet reported, when last reported]
_failures: "collections.OrderedDict[Tuple[str, str, str], List[Any]]" = collections.OrderedDict()
_failures_lock = threading.Lock()


def _callback_failed(cb: Any, error: BaseException) -> None:
    """Log a callback's exception: the first time with its traceback; the
    same failure again (same callback, exception type and raising line) only
    as a count, at most once per :data:`REPEAT_REPORT_INTERVAL`."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "?"
    name = getattr(cb, "__qualname__", None) or type(cb).__qualname__
    key = (name, type(error).__qualname__, where)
    now = time.monotonic()
    with _failures_lock:
        seen = _failures.get(key)
        if seen is None:
            _failures[key] = [0, now]
            if len(_failures) > _MAX_FAILURES:
                _failures.popitem(last=False)
        else:
            _failures.move_to_end(key)
            seen[0] += 1
            if now - seen[1] < REPEAT_REPORT_INTERVAL:
                return
            repeats, seen[0], seen[1] = seen[0], 0, now
    if seen is None:
        log.error("future callback %s raised %r (repeats are counted, not logged)", name, error, exc_info=error)
    else:
        log.error("future callback %s raised %r again: %d times since it was last logged", name, error, repeats)


class Future(Generic[T]):
    """Pending until :meth:`set_result` or :meth:`set_exception`."""

    __slots__ = ("_value", "_error", "_callbacks", "_event", "_runner")

    def __init__(self) -> None:
        self._value: Any = _PENDING
        self._error: Optional[BaseException] = None
        self._callbacks: Optional[List[Callable[["Future[T]"], None]]] = None
        self._event: Optional[threading.Event] = None
        self._runner = 0          # the thread running the callbacks (0: none is)

    def done(self) -> bool:
        """True once the future has a result or an error."""
        return self._value is not _PENDING or self._error is not None

    def succeeded(self) -> bool:
        """True once the future has a result."""
        return self._value is not _PENDING

    def failed(self) -> bool:
        """True once the future has an error."""
        return self._error is not None

    def set_result(self, value: T) -> None:
        """Complete the future with ``value``; its callbacks run now (RuntimeError if already done)."""
        self._finish(value, None)

    def set_exception(self, error: BaseException) -> None:
        """Fail the future with ``error``; its callbacks run now (RuntimeError if already done)."""
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
            if callbacks:
                self._runner = threading.get_ident()
            event = self._event
        if callbacks:
            # the callbacks run before a waiter wakes (as Java's): what waits for a future (result(),
            # the producer's flush()) then sees what its callbacks did, such as a record's delivery
            # callback having run
            try:
                for cb in callbacks:
                    self._run(cb)
            finally:
                with _lock:
                    self._runner = 0
                    event = self._event
        if event is not None:
            event.set()

    def _run(self, cb: Callable[["Future[T]"], None]) -> None:
        try:
            cb(self)
        except Exception as e:  # a callback must not break the I/O thread
            _callback_failed(cb, e)

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
        """The error the future failed with, or None (without waiting)."""
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
        if not self.done() or self._runner:
            with _lock:
                # pending, or its callbacks still running on another thread (one of them may wait for it)
                waiting = not self.done() or self._runner not in (0, threading.get_ident())
                if waiting and self._event is None:
                    self._event = threading.Event()
                event = self._event if waiting else None
            if event is not None and not event.wait(timeout):
                raise KafkaTimeoutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    # kafka-python and Java call it get()
    get = result

    @classmethod
    def all_of(cls, futures: Sequence["Future[Any]"], value: T) -> "Future[T]":
        """A future done once every one of ``futures`` is: with ``value`` if
        all succeeded, else with the first failure's error (the rest are
        still waited for, so that once it is done none is pending)."""
        out: "Future[T]" = cls()
        pending = [len(futures)]
        first: List[BaseException] = []

        def one(f: "Future[Any]") -> None:
            with _lock:
                if f.failed() and not first:
                    first.append(f._error)            # type: ignore[arg-type]
                pending[0] -= 1
                last = pending[0] == 0
            if last:
                out._finish(_PENDING if first else value, first[0] if first else None)

        if not futures:
            out.set_result(value)
        for f in futures:
            f.add_done_callback(one)
        return out

    def __repr__(self) -> str:
        if self._error is not None:
            return f"<Future failed: {self._error!r}>"
        if self._value is not _PENDING:
            return f"<Future done: {self._value!r}>"
        return "<Future pending>"
