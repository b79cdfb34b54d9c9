"""The asyncio consumer: :class:`AsyncConsumer`, :class:`kwire.Consumer`'s
logic (fetch scheduling, read-ahead, positions, decoding in the compiled
core) on an event loop.

The methods that wait are coroutines that await the same steps the blocking
consumer runs (:meth:`kwire.client.Client.run`); the others (``assign``,
``seek``, ``assignment``, ``highwater``, ``lag``, ``current_lag``, ``pause``,
``resume``, ``paused``, ``enforce_rebalance``) are plain methods, as they
never wait. Options and names are :class:`kwire.Consumer`'s.

Cancellation: a cancelled :meth:`AsyncConsumer.getmany` (or ``poll``,
``getone``, ``poll_columnar``) returns nothing and loses nothing. The wait
is the only place it can be cancelled, and records are taken from the
buffer only after the last wait, so the next call returns them.

``async for record in consumer`` and :meth:`AsyncConsumer.getone` take
records a poll at a time and hand them out one by one; those not handed out
yet (the loop left with ``break``) are held, and come first from the next
call. :meth:`AsyncConsumer.position` counts them as not returned, and
``seek`` drops them for its partition; ``pause`` gives them back (the
partition's position goes back to the first), to come after ``resume``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any, AsyncIterator, Deque, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kwire._codec import Record
from kwire.aio.client import AioClient, Observed
from kwire.consumer import Consumer
from kwire.errors import KwireError
from kwire.types import EARLIEST, LATEST, ConsumerRecord, OffsetAndTimestamp, TopicPartition

__all__ = ["AsyncConsumer"]


#: Bytes of records one ``poll_columnar`` decodes at most on the loop's
#: thread (``max_poll_bytes`` when lower): about a millisecond of its time.
COLUMNAR_TURN_BYTES = 1 << 20


class _LoopConsumer(Consumer):
    """:class:`kwire.Consumer` whose client is the event loop's."""

    _client_class = AioClient

    def _take_columnar(self, unit: str, max_records: Optional[int]) -> Dict[TopicPartition, Any]:
        full = self._poll_bytes
        self._poll_bytes = min(full, COLUMNAR_TURN_BYTES)
        try:
            return super()._take_columnar(unit, max_records)
        finally:
            self._poll_bytes = full


class AsyncConsumer(Observed):
    """A Kafka consumer for asyncio.

    ``AsyncConsumer({"bootstrap.servers": ...}, auto_offset_reset="earliest")``,
    made inside a running event loop (it belongs to that loop); use it as
    ``async with``, or ``await`` :meth:`close`. :meth:`assign` the
    partitions, or :meth:`subscribe` with a ``group_id`` (classic or
    KIP-848 ``group_protocol``), then ``await`` :meth:`getmany` (records per partition),
    :meth:`poll_columnar` (a ``pyarrow.RecordBatch`` per partition), or
    iterate: ``async for record in consumer``.
    """

    _core_name = "_c"      # the blocking client driven (Observed)

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self._c = _LoopConsumer(config, **kwargs)
        self._client: AioClient = self._c._client
        self.cfg = self._c.cfg
        self._held: Deque[ConsumerRecord] = collections.deque()   # taken by a poll, not handed out yet (getone, async for)

    def _drop_held(self, keep: Any) -> None:
        if self._held:
            self._held = collections.deque(r for r in self._held if keep(TopicPartition(r.topic, r.partition)))

    def _rewind_held(self, only: Optional[Any] = None) -> None:
        """Give the held records back (of the partitions in ``only``, when
        given): each partition's position goes back to its first one (what
        is committed then counts them unread)."""
        first: Dict[TopicPartition, int] = {}
        for r in self._held:
            first.setdefault(TopicPartition(r.topic, r.partition), r.offset)
        if only is None:
            self._held.clear()
        else:
            first = {tp: o for tp, o in first.items() if tp in only}
            self._drop_held(lambda tp: tp not in only)
        for tp, offset in first.items():
            self._c.seek(tp, offset)

    def _take_held(self, most: Optional[int]) -> Dict[TopicPartition, List[Any]]:
        out: Dict[TopicPartition, List[Any]] = {}
        most = len(self._held) if most is None else most
        while self._held and most > 0:
            r = self._held.popleft()
            out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
            most -= 1
        return out

    def __repr__(self) -> str:
        return f"<AsyncConsumer {self.cfg['client_id']} {'closed' if self._c._closed else 'open'}>"

    # ------------------------------------------------------- assignment
    def assign(self, partitions: Iterable[Tuple[str, int]]) -> None:
        """Consume exactly these partitions (replacing any earlier set)."""
        tps = {TopicPartition(*tp) for tp in partitions}
        self._c.assign(tps)
        self._drop_held(tps.__contains__)

    def incremental_assign(self, partitions: Iterable[Tuple[str, int]]) -> None:
        """As :meth:`kwire.Consumer.incremental_assign`."""
        self._c.incremental_assign(partitions)

    def incremental_unassign(self, partitions: Iterable[Tuple[str, int]]) -> None:
        """As :meth:`kwire.Consumer.incremental_unassign`; records held for them are dropped."""
        gone = set(map(TopicPartition._make, partitions))
        self._c.incremental_unassign(gone)
        self._drop_held(lambda tp: tp not in gone)

    def assignment(self) -> List[TopicPartition]:
        """The partitions assigned to this consumer (by ``assign`` or by its group)."""
        return self._c.assignment()

    def seek(self, tp: Tuple[str, int], offset: int) -> None:
        """As :meth:`kwire.Consumer.seek`."""
        self._c.seek(tp, offset)
        self._drop_held(TopicPartition(*tp).__ne__)

    def seek_to_beginning(self, *tps: Tuple[str, int]) -> None:
        """Start these partitions (default: every assigned one) at their log start; records held for them
        are dropped."""
        self._c.seek_to_beginning(*tps)
        self._drop_held(self._others(tps))

    def seek_to_end(self, *tps: Tuple[str, int]) -> None:
        """Start these partitions (default: every assigned one) at their log end; records held for them
        are dropped."""
        self._c.seek_to_end(*tps)
        self._drop_held(self._others(tps))

    async def seek_to_committed(self, *tps: Tuple[str, int], timeout: Optional[float] = None
                                ) -> Dict[TopicPartition, Optional[int]]:
        """As :meth:`kwire.Consumer.seek_to_committed` (aiokafka's); records held for them are dropped."""
        moved = await self._client.arun(self._c._seek_to_committed_steps(tps, timeout))
        self._drop_held(self._others(tuple(moved)))
        return moved

    def last_stable_offset(self, tp: Tuple[str, int]) -> Optional[int]:
        """As :meth:`kwire.Consumer.last_stable_offset`."""
        return self._c.last_stable_offset(tp)

    @staticmethod
    def _others(tps: Tuple[Tuple[str, int], ...]) -> Any:
        moved = {TopicPartition(*tp) for tp in tps}
        return (lambda tp: tp not in moved) if moved else (lambda tp: False)

    def highwater(self, tp: Tuple[str, int]) -> int:
        """The partition's high watermark from the last fetch (-1: none yet)."""
        return self._c.highwater(tp)

    def lag(self, tp: Tuple[str, int]) -> Optional[int]:
        """As :meth:`kwire.Consumer.lag`."""
        return self._c.lag(tp)

    def current_lag(self, tp: Tuple[str, int]) -> Optional[int]:
        """As :meth:`kwire.Consumer.current_lag` (never waits)."""
        return self._c.current_lag(tp)

    def pause(self, *tps: Tuple[str, int]) -> None:
        """As :meth:`kwire.Consumer.pause`; records of these partitions
        taken but not handed out yet (``getone``, ``async for``) are given
        back, to come after :meth:`resume`."""
        self._c.pause(*tps)
        self._rewind_held({TopicPartition(*tp) for tp in tps})

    def resume(self, *tps: Tuple[str, int]) -> None:
        """As :meth:`kwire.Consumer.resume`."""
        self._c.resume(*tps)

    def paused(self) -> set:
        """The partitions paused."""
        return self._c.paused()

    # ----------------------------------------------------------- group
    def subscribe(self, topics: Iterable[str] = (), pattern: Any = None, listener: Any = None) -> None:
        """Join the consumer group ``group_id`` for ``topics`` (or the topics
        matching ``pattern``): :meth:`kwire.Consumer.subscribe`. The
        listener's callbacks (plain functions) run on the loop, inside
        :meth:`getmany`. Joining and heartbeats are a task of the loop."""
        self._c.subscribe(topics, pattern, listener)

    async def unsubscribe(self) -> None:
        """Leave the group (committing first with auto commit) and drop the
        subscription and assignment."""
        group = self._c._group
        if group is not None:
            self._rewind_held()
            await self._client.arun(group.unsubscribe_steps())

    def subscription(self) -> set:
        """The topics subscribed to (empty without a group subscription)."""
        return self._c.subscription()

    async def commit(self, offsets: Any = None, timeout: Optional[float] = None) -> Dict[TopicPartition, Any]:
        """Commit ``offsets`` (default: the position of every assigned
        partition) and wait for the coordinator: :meth:`kwire.Consumer.commit`."""
        group = self._c._require_group()
        if offsets is None and self._held:
            offsets = {tp: await self.position(tp) for tp in self._c.assignment()}
        return await self._client.arun(group.commit_steps(offsets, timeout))

    def commit_async(self, offsets: Any = None, callback: Any = None) -> "asyncio.Future[Any]":
        """Send a commit without waiting; ``callback(offsets, error)`` runs
        in a later :meth:`getmany`; the returned future (await it, or not)
        completes with the offsets."""
        fut = self._c.commit_async(offsets, callback)
        out: asyncio.Future = asyncio.get_running_loop().create_future()

        def done(f: Any) -> None:
            if out.done():
                return
            if f.failed():
                out.set_exception(f.exception())
            else:
                out.set_result(f.value)

        fut.add_done_callback(done)
        return out

    async def committed(self, partitions: Iterable[Tuple[str, int]],
                        timeout: Optional[float] = None) -> Dict[TopicPartition, Any]:
        """The group's committed offsets (None where nothing is committed)."""
        return await self._client.arun(self._c._require_group().committed_steps(partitions, timeout))

    def store_offsets(self, message: Any = None, offsets: Optional[Mapping[Tuple[str, int], int]] = None) -> None:
        """As :meth:`kwire.Consumer.store_offsets`."""
        self._c.store_offsets(message, offsets)

    def group_metadata(self) -> Any:
        """The group's id, generation and member, for ``AsyncProducer.send_offsets_to_transaction``."""
        return self._c.group_metadata()

    def enforce_rebalance(self, reason: Optional[str] = None) -> None:
        """As :meth:`kwire.Consumer.enforce_rebalance`: the rebalance runs
        in the next :meth:`getmany`."""
        self._c.enforce_rebalance(reason)

    # ---------------------------------------------------------- offsets
    async def position(self, tp: Tuple[str, int], timeout: Optional[float] = None) -> int:
        """The next offset :meth:`getmany` returns for ``tp`` (looked up when
        the partition has no position yet)."""
        c = self._c
        st = c._state(tp)
        for r in self._held:
            if (r.topic, r.partition) == tuple(tp):
                return r.offset
        if st.position is not None:
            return st.position
        return await self._client.arun(c._position_steps(tp, timeout))

    async def beginning_offsets(self, tps: Iterable[Tuple[str, int]],
                                timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """The log start offsets (ListOffsets at each leader)."""
        return await self._client.arun(self._c._offsets_steps(tps, EARLIEST, timeout))

    async def end_offsets(self, tps: Iterable[Tuple[str, int]],
                          timeout: Optional[float] = None) -> Dict[TopicPartition, int]:
        """The log end offsets (for read_committed: the last stable offsets)."""
        return await self._client.arun(self._c._offsets_steps(tps, LATEST, timeout))

    async def offsets_for_times(self, timestamps: Mapping[Tuple[str, int], int], timeout: Optional[float] = None
                                ) -> Dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """Per partition, the earliest offset whose timestamp is at least the
        given one (ms), or None when there is none."""
        return await self._client.arun(self._c._offsets_for_times_steps(timestamps, timeout))

    async def topics(self, timeout: Optional[float] = None) -> Set[str]:
        """The names of the cluster's topics (as :meth:`kwire.Consumer.topics`)."""
        return await self._client.arun(self._c._topics_steps(timeout))

    async def partitions_for_topic(self, topic: str, timeout: Optional[float] = None) -> Optional[Set[int]]:
        """The partition ids of ``topic``, None when there is no such topic
        (as :meth:`kwire.Consumer.partitions_for_topic`)."""
        return await self._client.arun(self._c._partitions_steps(topic, timeout))

    # ------------------------------------------------------------- poll
    async def getmany(self, timeout_ms: int = 0, max_records: Optional[int] = None
                      ) -> Dict[TopicPartition, List[Record]]:
        """Records per partition, waiting up to ``timeout_ms`` for some:
        :meth:`kwire.Consumer.poll` (the same limits, the same errors). The
        records are made on the loop's thread (Python objects need the
        GIL): about 0.2 µs each, so ``max_records`` (default
        ``max_poll_records``, 500) bounds how long a call holds the loop."""
        c = self._c
        await asyncio.sleep(0)      # a loop turn before anything is taken: buffered records never starve the loop
        if self._held:
            return self._take_held(c.cfg["max_poll_records"] if max_records is None else max_records)
        return await self._client.arun(c._poll_steps(timeout_ms, c._records_taker(max_records)))

    poll = getmany

    async def getone(self, timeout_ms: Optional[int] = None) -> ConsumerRecord:
        """The next record (of any assigned partition) with its topic and
        partition, waiting for it (``timeout_ms``: at most that long, then
        :class:`asyncio.TimeoutError`)."""
        c = self._c
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000.0
        if not self._held:
            await asyncio.sleep(0)  # as getmany
        while not self._held:
            left = 1000 if deadline is None else int(max(0.0, deadline - time.monotonic()) * 1000)
            got = await self._client.arun(c._poll_steps(left, c._records_taker(None)))
            for tp, records in got.items():
                self._held.extend(ConsumerRecord.of(tp, r) for r in records)
            if not self._held and deadline is not None and time.monotonic() >= deadline:
                raise asyncio.TimeoutError(f"no record within {timeout_ms} ms")
        return self._held.popleft()

    async def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms",
                            max_records: Optional[int] = None, key_format: Any = None,
                            value_format: Any = None) -> Dict[TopicPartition, Any]:
        """One ``pyarrow.RecordBatch`` per partition with data, its key and
        value typed by ``key_format`` / ``value_format`` when given:
        :meth:`kwire.Consumer.poll_columnar`, but at most about
        :data:`COLUMNAR_TURN_BYTES` (1 MiB) of records a call, so that a call
        holds the loop about a millisecond (the decoding runs on the loop's
        thread, where the consumer's state lives)."""
        c = self._c
        if self._held:
            raise KwireError("poll_columnar() while records taken by getone() or async for are not handed out yet")
        await asyncio.sleep(0)      # as getmany
        take = c._columnar_taker(timestamp_unit, max_records, key_format, value_format)
        return await self._client.arun(c._poll_steps(timeout_ms, take))

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._records()

    async def _records(self) -> AsyncIterator[ConsumerRecord]:
        while True:
            yield await self.getone()

    # ------------------------------------------------------------ close
    async def close(self, timeout: Optional[float] = None) -> None:
        """Close the connections; with a group, first commit (auto commit),
        revoke and leave, then close the fetch sessions (as Java's consumer
        does), within ``timeout`` seconds in all (default
        ``request_timeout_ms``)."""
        if not self._c._closed:
            self._rewind_held()
        await self._client.arun(self._c._close_steps(timeout))

    async def __aenter__(self) -> "AsyncConsumer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
