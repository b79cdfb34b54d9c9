"""kwire.aio's clients behind the blocking clients' interface, so that one
behaviour test runs on both (the ``kw`` fixture): each call is run on an
event loop in a thread of its own (one per client), and the test thread
waits for it.

Only the interface is bridged: every record still goes through
``AsyncProducer`` / ``AsyncConsumer`` on their loop, which does all of the
I/O. ``send`` queues with ``AsyncProducer.enqueue`` and returns the
record's future, as ``kwire.Producer.send`` does.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable, Optional

from kwire.aio import AsyncAdmin, AsyncConsumer, AsyncProducer


class _Loop:
    """An event loop running in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the loop (awaiting it if it returns a coroutine) and return its result."""
        async def run() -> Any:
            out = fn(*args, **kwargs)
            if asyncio.iscoroutine(out):
                out = await out
            return out

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class _Bridged:
    """An asyncio client made and used on a loop thread of its own."""

    def __init__(self, make: Callable[..., Any], name: str, config: Optional[dict], kwargs: dict) -> None:
        self._loop: Optional[_Loop] = _Loop(name)
        try:
            self.aio = self._loop.call(make, config, **kwargs)
        except BaseException:
            self._loop.stop()
            raise
        self.cfg = self.aio.cfg

    def __getattr__(self, name: str) -> Any:
        # the rest of the interface: each call run (and awaited) on the loop
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self.aio, name)
        if not callable(method):
            return method
        return lambda *args, **kwargs: self._call(method, *args, **kwargs)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        assert self._loop is not None, "closed"
        return self._loop.call(fn, *args, **kwargs)

    def close(self, timeout: Optional[float] = None) -> None:
        if self._loop is None:
            return
        try:
            self._loop.call(self.aio.close, *(() if timeout is None else (timeout,)))
        finally:
            self._loop.stop()
            self._loop = None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class BridgedProducer(_Bridged):
    """``kwire.Producer``'s interface over an :class:`AsyncProducer`."""

    aio: AsyncProducer

    def __init__(self, config: Optional[dict] = None, **kwargs: Any) -> None:
        super().__init__(AsyncProducer, "aio-producer", config, kwargs)

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> Any:
        return self._call(self.aio.enqueue, topic, value, key, headers, partition, timestamp_ms)

    def send_arrow(self, topic: str, data: Any, **kwargs: Any) -> Any:
        return self._call(self.aio.send_arrow, topic, data, **kwargs)

    def partitions_for(self, topic: str, timeout: Optional[float] = None) -> Any:
        return self._call(self.aio.partitions_for, topic, timeout)

    def flush(self, timeout: Optional[float] = None) -> None:
        self._call(self.aio.flush, timeout)


class BridgedConsumer(_Bridged):
    """``kwire.Consumer``'s interface over an :class:`AsyncConsumer`."""

    aio: AsyncConsumer

    def __init__(self, config: Optional[dict] = None, **kwargs: Any) -> None:
        super().__init__(AsyncConsumer, "aio-consumer", config, kwargs)

    def poll(self, timeout_ms: int = 0, max_records: Optional[int] = None) -> Any:
        return self._call(self.aio.getmany, timeout_ms, max_records)

    def commit(self, offsets: Any = None, asynchronous: bool = False, callback: Any = None,
               timeout: Optional[float] = None) -> Any:
        if asynchronous:
            return self.commit_async(offsets, callback)
        return self._call(self.aio.commit, offsets, timeout)

    def commit_async(self, offsets: Any = None, callback: Any = None) -> Any:
        """The commit's future as a ``concurrent.futures.Future`` (``result(timeout)``)."""
        assert self._loop is not None, "closed"

        async def commit() -> Any:
            return await self.aio.commit_async(offsets, callback)

        return asyncio.run_coroutine_threadsafe(commit(), self._loop.loop)


class BridgedAdmin(_Bridged):
    """``kwire.admin.Admin``'s interface over an :class:`AsyncAdmin`."""

    aio: AsyncAdmin

    def __init__(self, config: Optional[dict] = None, **kwargs: Any) -> None:
        super().__init__(AsyncAdmin, "aio-admin", config, kwargs)
