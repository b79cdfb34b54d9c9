"""The network client on an asyncio event loop: :class:`kwire.client.Client`
with its connections as asyncio transports instead of one selector.

Every decision stays :class:`~kwire.client.Client`'s (which broker a request
goes to, metadata and its refreshes, reconnect backoff, giving up on
replaced leaders, the helper thread for large decodes); this module only
drives it:

- connections are :class:`kwire.aio.net.AioConnection`: the loop reads and
  writes them, and each event asks for a :meth:`~kwire.client.Client.tick`
  (deadlines, idle connections, metadata, finished decodes), run once per
  loop turn however many events came;
- a timer runs the tick when nothing happens: at the next metadata refresh
  or throttle's end, and at least every :data:`TICK` seconds while a
  request or a connection setup is under way (to find what is overdue);
- what waits (the steps of :meth:`kwire.client.Client.run`) is awaited by
  :meth:`AioClient.arun` (the blocking :meth:`~AioClient.run` and
  :meth:`~AioClient.poll` raise, so a wait left blocking is a loud bug); a step of I/O resolves at the next tick, or after
  its seconds.

It must be made and used on its loop's thread; :meth:`wakeup` may be called
from any thread (the helper thread calls it when a decode is done).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Optional, Set

from kwire.aio.net import AioConnection
from kwire.client import Await, Broker, Client, Offload, Sleep, Steps, Wait
from kwire.errors import KwireError
from kwire.future import Future
from kwire.net import Connection

__all__ = ["AioClient", "Observed", "TICK"]

#: Seconds between ticks while requests are in flight or connections being
#: set up (deadlines are checked this often); 1 s when all is quiet.
TICK = 0.1
_QUIET_TICK = 1.0


class AioClient(Client):
    """:class:`kwire.client.Client` driven by the running asyncio loop."""

    def _init_io(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread_id = threading.get_ident()
        self._waiters: List[asyncio.Future] = []     # steps of I/O waiting for the next tick
        self._soon: Optional[asyncio.Handle] = None      # a tick asked for this loop turn
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = float("inf")
        self._background: Set[asyncio.Task] = set()
        self._event = False       # something happened since the last tick: the tick releases the waiters
        self._kick()          # the first tick: from then on each one sets the timer for the next

    def _new_connection(self, node_id: int, broker: Broker) -> Connection:
        return AioConnection(node_id, broker.host, broker.port, self.cfg, loop=self._loop, on_event=self._kick,
                             **self._connection_options(node_id, broker))

    def _update_mask(self, conn: Connection) -> None:
        pass          # the loop watches each connection's transport itself

    def _unregister(self, conn: Connection) -> None:
        pass

    # ------------------------------------------------------------ ticks
    def wakeup(self) -> None:
        """Run a tick soon (callable from any thread)."""
        if threading.get_ident() == self._thread_id:
            self._kick()
            return
        try:
            self._loop.call_soon_threadsafe(self._kick)
        except RuntimeError:          # the loop is closed: so is this client, or it will be
            pass

    def _kick(self) -> None:
        """Something happened (bytes read, a state changed, a wakeup): a
        tick this loop turn, which releases the steps waiting for I/O."""
        self._event = True
        self._housekeep()

    def _housekeep(self) -> None:
        """A tick this loop turn, for what follows I/O only: the waiters
        stay (a wait that asked for it must not end by its own asking)."""
        if self._soon is None and not self._closed:
            self._soon = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self._soon = None
        if self._closed:
            return
        try:
            self.tick()
        finally:
            if self._event:
                self._event = False
                waiters, self._waiters = self._waiters, []
                for w in waiters:
                    if not w.done():
                        w.set_result(None)
            self._arm()

    def _arm(self) -> None:
        """Set the timer for the next tick nothing else would start."""
        if self._closed:
            return
        now = time.monotonic()
        busy = any(not c.idle() for c in self._conns.values())     # setting up, or requests under way
        at = now + min(self._next_due(now), TICK if busy or self._waiters else _QUIET_TICK)
        if self._timer is not None:
            if self._timer_at <= at and self._timer_at > now:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(self._loop.time() + (at - now), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        self._event = True        # deadlines may have passed: the waiters look again
        self._tick()

    def poll(self, timeout: float = 0.0) -> None:
        """Not here: the loop does the I/O. Waiting code awaits :meth:`arun`."""
        raise KwireError("a blocking wait on an asyncio client (a bug in kwire.aio: it must await arun)")

    # ---------------------------------------------------------- waiting
    async def io(self, timeout: float) -> None:
        """Wait until the next tick (something happened), at most
        ``timeout`` seconds; 0: one turn of the loop."""
        if self._closed:
            raise KwireError("client is closed")
        self._housekeep()     # what a poll starts with: a metadata refresh asked for meanwhile goes now
        if timeout <= 0:
            await asyncio.sleep(0)
            return
        fut = self._loop.create_future()
        self._waiters.append(fut)
        handle = self._loop.call_later(timeout, _finish, fut)
        if self._timer is None:
            self._arm()
        try:
            await fut
        finally:
            handle.cancel()

    async def wait_future(self, fut: Future, timeout: Optional[float]) -> None:
        """Wait until ``fut`` is done, at most ``timeout`` s (None: no
        limit). Its callback may come from another thread."""
        if fut.done():
            return
        af = self._loop.create_future()
        fut.add_done_callback(lambda _f: self._settle(af))
        try:
            await asyncio.wait_for(asyncio.shield(af), timeout)
        except asyncio.TimeoutError:
            pass

    def _settle(self, af: asyncio.Future) -> None:
        if threading.get_ident() == self._thread_id:
            _finish(af)
        else:
            try:
                self._loop.call_soon_threadsafe(_finish, af)
            except RuntimeError:       # the loop is closed
                pass

    def start_background(self, steps: Steps, name: str) -> Future:
        ended: Future = Future()

        async def run() -> None:
            try:
                await self.arun(steps)
            finally:
                ended.set_result(None)

        task = self._loop.create_task(run(), name=name)
        self._background.add(task)                  # the loop keeps only a weak reference
        task.add_done_callback(self._background.discard)
        return ended

    def run(self, steps: Steps) -> Any:
        """Not here: blocking. :meth:`arun` awaits the same steps."""
        steps.close()
        raise KwireError("a blocking wait on an asyncio client (a bug in kwire.aio: it must await arun)")

    async def arun(self, steps: Steps) -> Any:
        """Await ``steps`` (see :meth:`kwire.client.Client.run`): seconds of
        I/O are :meth:`io`, a :class:`~kwire.client.Sleep` an
        ``asyncio.sleep``. What a step raises (a cancellation too) is raised
        into the generator at its ``yield``."""
        try:
            want = next(steps)
            while True:
                got = None
                try:
                    if type(want) is Sleep:
                        await asyncio.sleep(want.seconds)
                    elif type(want) is Wait:
                        await self.wait_future(want.future, want.timeout)
                    elif type(want) is Await:
                        await want.awaitable
                    elif type(want) is Offload:
                        got = await self._loop.run_in_executor(None, want.fn)
                    else:
                        await self.io(want)
                except BaseException as e:   # noqa: BLE001 - cancellation included: the generator's finally runs
                    want = steps.throw(e)
                    continue
                want = steps.send(got)
        except StopIteration as done:
            return done.value
        finally:
            steps.close()

    # ------------------------------------------------------------ close
    def _close_io(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


def _finish(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class Observed:
    """What a kwire.aio client shows of the blocking client it drives (the
    attribute ``_core_name`` names it): :meth:`metrics` and
    :meth:`client_instance_id`; the exporters of :mod:`kwire.metrics` read
    that client (``_metrics_source``)."""

    _core_name = ""

    @property
    def _metrics_source(self) -> Any:
        return getattr(self, self._core_name)

    def metrics(self) -> Dict[str, Dict[str, float]]:
        """As the blocking client's ``metrics()`` (:mod:`kwire.metrics`), without ``io-wait`` figures
        (the event loop waits, not kwire)."""
        return self._metrics_source.metrics()

    def client_instance_id(self) -> Optional[Any]:
        """As the blocking client's: the id the brokers assigned for client telemetry (KIP-714), or None."""
        return self._metrics_source.client_instance_id()
