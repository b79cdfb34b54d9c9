"""The asyncio producer: :class:`AsyncProducer`, :class:`kwire.Producer`'s
logic (the compiled ``send``, batching, idempotence, retries) on an event
loop, its sender a task of that loop instead of a thread.

Two ways to send:

- ``await producer.send(topic, value, key=...)`` returns the record's
  :class:`kwire.RecordMetadata` once the broker acknowledged it (waiting
  first, if need be, for the topic's metadata or room in
  ``buffer_memory``, at most ``max_block_ms``);
- ``producer.send_nowait(...)`` queues the record and returns its
  :class:`kwire.RecordFuture` at once, with no coroutine per record: the
  fast way for many records, followed by ``await producer.flush()``. It
  never waits: when the record cannot be queued now (the topic's metadata
  not known yet, or ``buffer_memory`` full) it raises
  :class:`WouldBlockError`; ``await producer.enqueue(...)`` or ``send``
  (or :meth:`AsyncProducer.partitions_for` once per topic, or ``flush``)
  then waits for what is missing. A refusal for room is cheap (raised
  before any encoding, with no Python frame), and a wait for room lasts
  until a share of the buffer is free (:func:`resume_at`), so the
  ``send_nowait`` calls after an ``await enqueue(...)`` succeed in a run.

Cancellation: a ``send`` cancelled while it waits for metadata or room has
queued nothing; once its record is queued (the call never waits between
queuing and returning or awaiting delivery) a cancellation only stops the
wait for the acknowledgement: the record is sent once, like any other. So a
send is never half done, and nothing queued is lost.

Options and names are :class:`kwire.Producer`'s, transactions included
(``transactional_id``; ``await init_transactions()``, ``begin_transaction()``,
``await commit_transaction()`` ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Tuple

from kwire._codec import RecordFuture, SendingProducer
from kwire.aio.client import AioClient, Observed
from kwire.client import Steps
from kwire.errors import KwireError
from kwire.future import Future
from kwire.producer import CLOSE_GRACE, Producer, _Batch
from kwire.types import ProducerRecord, RecordMetadata

__all__ = ["AsyncProducer", "WouldBlockError"]


#: From how many bytes of records a sender turn's encoding and compression
#: run on a worker thread (without the GIL), while the loop goes on; below,
#: on the loop's thread (a tenth of a millisecond or so: less than the hop).
OFFLOAD_BUILD_BYTES = 128 << 10


def resume_at(buffer_memory: int, batch_size: int) -> int:
    """Down to how many buffered bytes a wait for room in a full
    ``buffer_memory`` lasts: an eighth of it free (at least a batch, at
    most half of it)."""
    return buffer_memory - min(buffer_memory // 2, max(batch_size, buffer_memory // 8))


log = logging.getLogger("kwire.producer")


class WouldBlockError(KwireError):
    """``send_nowait`` cannot queue the record without waiting: ``reason``
    is ``"metadata"`` (the topic's partitions are not known yet; they are
    being fetched) or ``"room"`` (``buffer_memory`` is full until batches
    are acknowledged). ``await producer.send(...)`` waits for either."""

    retriable = True

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Blocked(WouldBlockError):
    """Raised from the compiled send's calls into Python where the blocking
    producer would wait for metadata: ``send_nowait`` (the compiled send
    itself) raises it to its caller; a coroutine that queues waits instead."""

    def __init__(self, topic: str, need: int = 1) -> None:
        super().__init__(f"the partitions of topic {topic!r} are not known yet (being fetched): await send(), "
                         "enqueue() or partitions_for() first", "metadata")
        self.topic = topic
        self.need = need


class _NoRoom(_Blocked):
    """``buffer_memory`` is full: ``_NoRoom(buffer_memory)``, raised where
    the blocking producer would wait for room, mostly by the compiled send
    itself (its Accumulator's ``room_full``). Made cheaply, as a full
    buffer makes many: no Python ``__init__``, the message made only when
    shown."""

    __init__ = Exception.__init__       # C: no Python frame per refusal
    reason = "room"
    topic = None
    need = 1

    def __str__(self) -> str:
        return f"buffer_memory ({self.args[0]} bytes) is full: await send(), enqueue() or flush()"


class _LoopProducer(Producer):
    """:class:`kwire.Producer` on the event loop's client, its sender a task."""

    _client_class = AioClient

    def _start_sender(self) -> None:
        # a turn's encoding and compression off the loop's thread when it is more than about 0.1 ms of work
        self._offload_build_bytes = OFFLOAD_BUILD_BYTES
        self._thread = None
        self._loop = self._client._loop
        self._room_event = asyncio.Event()
        self._resume_at = resume_at(self.cfg["buffer_memory"], self.cfg["batch_size"])
        self._acc.room_full = _NoRoom          # refused in the compiled send: no wait_room call
        self._settled: Dict[Tuple[str, int], int] = {}     # (topic, need): metadata as final as it gets
        self._sender = self._loop.create_task(self._client.arun(self._sender_steps()), name="kwire-producer")

    # the compiled send's calls: never wait on the loop's thread
    def _wait_partitions(self, topic: str, deadline: float, need: int = 1) -> Sequence[int]:
        client = self._client
        client.add_topics([topic])
        parts = self._known_partitions(topic)
        if parts and ((client.cluster.partition_count(topic) or 0) >= need
                      or self._settled.pop((topic, need), None) is not None):
            return parts
        self._check_waiting_metadata(topic)
        client.wakeup()
        raise _Blocked(topic, need)

    def _wait_room(self, deadline: float) -> None:
        if self._acc.buffered >= self.cfg["buffer_memory"]:
            raise _NoRoom(self.cfg["buffer_memory"])

    def _release(self, batch: _Batch) -> None:
        super()._release(batch)
        if self._acc.buffered <= self._resume_at:
            self._room_event.set()

    def _fail_all(self, error: BaseException) -> None:
        super()._fail_all(error)
        self._room_event.set()

    async def wait_partitions(self, topic: str, deadline: float, need: int) -> Sequence[int]:
        parts = await self._client.arun(self._wait_partitions_steps(topic, deadline, need))
        self._settled[(topic, need)] = 1
        return parts

    async def wait_room(self, deadline: float) -> None:
        """Wait for room in a full ``buffer_memory``: until it is down to
        :func:`resume_at`, so that the sends that follow queue in a run
        (rather than each new batch waiting for the next acknowledgement),
        or until ``deadline``, then returning if there is any room at all."""
        limit = self.cfg["buffer_memory"]
        if self._acc.buffered < limit:
            return
        self._client.wakeup()           # what is queued goes out now
        while self._acc.buffered > self._resume_at:
            self._check_waiting_room()
            left = deadline - time.monotonic()
            if left <= 0:
                if self._acc.buffered < limit:
                    return
                raise self._no_room()
            self._room_event.clear()
            try:
                await asyncio.wait_for(self._room_event.wait(), left)
            except asyncio.TimeoutError:
                pass


class AsyncProducer(Observed):
    """A Kafka producer for asyncio.

    ``AsyncProducer({"bootstrap.servers": ...}, linger_ms=5)``, made inside a
    running event loop (it belongs to that loop); use it as ``async with``,
    or ``await`` :meth:`close`. See :data:`kwire.config.PRODUCER` for every
    option."""

    _core_name = "_p"      # the blocking client driven (Observed)

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self._p = _LoopProducer(config, **kwargs)
        self.send_nowait = self._p.send       # the compiled send itself (without interceptors): no Python frame
        self.cfg = self._p.cfg
        self._loop = self._p._loop
        self._acks: Dict[Any, asyncio.Future] = {}    # batch future -> its asyncio future (await send())

    def __repr__(self) -> str:
        return f"<AsyncProducer {self.cfg['client_id']} {'closed' if self._p._closed else 'open'}>"

    # ------------------------------------------------------------- send
    def send_nowait(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                    partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> RecordFuture:
        """Queue one record without waiting and return its future
        (``done()``, ``exception()``, ``add_callback``; its metadata once
        done). Arguments and errors as :meth:`kwire.Producer.send`;
        :class:`WouldBlockError` when it would have to wait. (Each instance
        binds this name to the compiled send itself: this method is what it
        does, for the documentation.)"""
        return self._p.send(topic, value, key, headers, partition, timestamp_ms)

    async def enqueue(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                      partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> RecordFuture:
        """Queue one record, waiting if need be (for the topic's metadata, or
        room in ``buffer_memory``; at most ``max_block_ms`` in all, then
        :class:`kwire.errors.KafkaTimeoutError` or
        :class:`kwire.producer.BufferFullError`), and return its future
        without waiting for the acknowledgement."""
        p = self._p
        if p._interceptors is None and p._tracing is None:
            return await self._enqueue(p.send, topic, value, key, headers, partition, timestamp_ms)
        record = ProducerRecord(topic, value, key, headers, partition, timestamp_ms)
        if p._interceptors is not None:
            record = p._interceptors.on_send(record)
        with p._refusal_acknowledged(record):       # on_send once, however long the record waits to be queued
            if p._tracing is None:
                return await self._enqueue(functools.partial(SendingProducer.send, p), *record)
            span, record = p._tracing.begin(record)        # one send span, however long it waits
            try:
                fut = await self._enqueue(functools.partial(SendingProducer.send, p), *record)
            except BaseException as e:
                p._tracing.failed(span, e)
                raise
            p._tracing.queued(span, fut)
            return fut

    async def _enqueue(self, send: Any, *record: Any) -> RecordFuture:
        p = self._p
        deadline = time.monotonic() + self.cfg["max_block_ms"] / 1000.0
        while True:
            try:
                return send(*record)
            except _Blocked as b:
                if b.topic is None:
                    await p.wait_room(deadline)
                else:
                    await p.wait_partitions(b.topic, deadline, b.need)

    async def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                   partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> RecordMetadata:
        """Send one record and return its :class:`kwire.RecordMetadata` once
        acknowledged (or raise its error): :meth:`enqueue`, then the wait."""
        fut = await self.enqueue(topic, value, key, headers, partition, timestamp_ms)
        return await self.delivered(fut)

    async def delivered(self, fut: RecordFuture) -> RecordMetadata:
        """Wait for a queued record's acknowledgement: its metadata, or its
        error. Cancelling this wait leaves the record queued."""
        if not fut.done():
            await asyncio.shield(self._ack(fut._batch.future))
        return fut.get(0)

    def _ack(self, batch_future: Future) -> "asyncio.Future[None]":
        """One asyncio future per batch, done when the batch is."""
        af = self._acks.get(batch_future)
        if af is None:
            af = self._acks[batch_future] = self._loop.create_future()
            batch_future.add_done_callback(self._acked)
        return af

    def _acked(self, batch_future: Future) -> None:
        af = self._acks.pop(batch_future, None)
        if af is None:
            return
        if threading.get_ident() == self._p._client._thread_id:
            _done(af)
        else:
            self._loop.call_soon_threadsafe(_done, af)

    async def send_arrow(self, topic: str, data: Any, *, key: Optional[str] = "key", value: str = "value",
                         headers: Optional[str] = "headers", partition: Optional[str] = "partition",
                         timestamp: Optional[str] = "timestamp", key_format: Any = None,
                         value_format: Any = None) -> int:
        """Queue every row of ``data`` as :meth:`kwire.Producer.send_arrow`
        does (its key and value formats too), waiting for metadata or room as
        needed, and wait until every row is acknowledged; returns the number
        of rows."""
        from kwire._arrow import send_columns

        p = self._p
        data = p._encoded(topic, data, key, value, key_format, value_format)
        deadline = time.monotonic() + self.cfg["max_block_ms"] / 1000.0
        batches: List[_Batch] = []
        done = 0
        total = data.num_rows
        while True:
            part = data if done == 0 else data.slice(done)
            rows, k, v, h, pc, ts = send_columns(part, key, value, headers, partition, timestamp)
            try:
                done += p._acc.send_arrow(topic, rows, k, v, h, pc, ts, batches)
                break
            except _Blocked as b:
                done += getattr(b, "rows_queued", 0)
                if b.topic is None:
                    await p.wait_room(deadline)
                else:
                    await p.wait_partitions(b.topic, deadline, b.need)
        assert done == total
        await self._all_acked([b.future for b in batches])
        for b in batches:
            if b.future.failed():
                raise b.future.exception()       # type: ignore[misc]
        return total

    async def _all_acked(self, futures: List[Future], timeout: Optional[float] = None) -> bool:
        pending = [self._ack(f) for f in futures if not f.done()]
        if not pending:
            return True
        _, left = await asyncio.wait([asyncio.shield(a) for a in pending], timeout=timeout)
        return not left

    async def partitions_for(self, topic: str, timeout: Optional[float] = None) -> List[int]:
        """The partitions of ``topic`` (waits for metadata); after it,
        ``send_nowait`` to the topic does not raise for metadata."""
        wait = timeout if timeout is not None else self.cfg["max_block_ms"] / 1000.0
        return list(await self._p.wait_partitions(topic, time.monotonic() + wait, 1))

    # ------------------------------------------------- flush and close
    async def flush(self, timeout: Optional[float] = None) -> None:
        """Send everything queued now and wait until it is acknowledged (or
        failed: a record's error is on its own future). Raises
        :class:`KafkaTimeoutError` after ``timeout`` s."""
        await self._run(self._p._flush_steps(timeout))

    async def _run(self, steps: Steps) -> Any:
        return await self._p._client.arun(steps)

    # ----------------------------------------------------- transactions
    @property
    def transaction_version(self) -> Optional[int]:
        """:attr:`kwire.Producer.transaction_version`."""
        return self._p.transaction_version

    async def init_transactions(self, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.Producer.init_transactions`."""
        await self._run(self._p._transactions().init_transactions_steps(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until its commit or abort belong to it."""
        self._p.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Any], group_metadata: Any,
                                          timeout: Optional[float] = None) -> None:
        """:meth:`kwire.Producer.send_offsets_to_transaction`
        (``group_metadata``: an AsyncConsumer's ``group_metadata()``, or a group id)."""
        await self._run(self._p._transactions().send_offsets_to_transaction_steps(offsets, group_metadata, timeout))

    async def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.Producer.commit_transaction`."""
        await self._run(self._p._transactions().commit_transaction_steps(timeout))

    async def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """:meth:`kwire.Producer.abort_transaction`."""
        await self._run(self._p._transactions().abort_transaction_steps(timeout))

    @contextlib.asynccontextmanager
    async def transaction(self, timeout: Optional[float] = None) -> AsyncIterator["AsyncProducer"]:
        """``async with producer.transaction():`` as aiokafka's (and
        :meth:`kwire.Producer.transaction`): begin, commit when the block
        ends, abort when it raises (an abort that fails too is logged)."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            try:
                await self.abort_transaction(timeout)
            except Exception as e:       # noqa: BLE001 - the block's own exception is raised instead
                log.error("the transaction's block raised, and its abort failed too: %s", e)
            raise
        await self.commit_transaction(timeout)

    async def close(self, timeout: Optional[float] = None) -> None:
        """Send what is queued and wait up to ``timeout`` s (None: until
        every record is acknowledged or failed, which
        ``delivery_timeout_ms`` bounds); records not acknowledged by then
        fail with :class:`ProducerClosedError`. The sender task has ended
        when this returns."""
        p = self._p
        if p._closed:
            return
        deadline = p._close_start(timeout)
        wait = None if deadline is None else max(0.0, deadline - time.monotonic()) + CLOSE_GRACE
        try:
            await asyncio.wait_for(asyncio.shield(p._sender), wait)
        except asyncio.TimeoutError:
            p._sender.cancel()        # its finally fails what is left and closes the client
        finally:
            p._set_closed()

    async def __aenter__(self) -> "AsyncProducer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


def _done(af: asyncio.Future) -> None:
    if not af.done():
        af.set_result(None)
