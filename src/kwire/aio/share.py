"""The asyncio share group member: :class:`AsyncShareConsumer`,
:class:`kwire.share.ShareConsumer`'s logic on an event loop.

The methods that wait (:meth:`~AsyncShareConsumer.poll`,
:meth:`~AsyncShareConsumer.commit_sync`, :meth:`~AsyncShareConsumer.close`,
:meth:`~AsyncShareConsumer.unsubscribe`) are coroutines awaiting the steps
the blocking consumer runs; the others never wait. Options and names are
the blocking consumer's.

Cancellation: a cancelled :meth:`~AsyncShareConsumer.poll` returns nothing
and loses nothing: records are taken from the buffer only after its last
wait, so the next poll returns them; acknowledgements made before it (and,
in implicit mode, the acceptance of the poll before) are sent all the same.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from kwire._core.acquired import ShareRecord
from kwire.aio.client import AioClient
from kwire.share.acks import AcknowledgeType
from kwire.share.consumer import AcknowledgementCallback, ShareConsumer
from kwire.types import TopicPartition

__all__ = ["AsyncShareConsumer"]


class _LoopShareConsumer(ShareConsumer):
    """:class:`kwire.share.ShareConsumer` whose client is the event loop's."""

    _client_class = AioClient


class AsyncShareConsumer:
    """A share group member for asyncio, made inside a running event loop
    (it belongs to that loop); use it as ``async with``, or ``await``
    :meth:`close`."""

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self._c = _LoopShareConsumer(config, **kwargs)
        self._client: AioClient = self._c._client
        self.cfg = self._c.cfg

    @property
    def acquisition_lock_timeout_ms(self) -> Optional[int]:
        return self._c.acquisition_lock_timeout_ms

    def metrics(self) -> Dict[str, Dict[str, float]]:
        return self._c.metrics()

    def subscribe(self, topics: Iterable[str]) -> None:
        topics = list(topics)
        if topics:
            self._c.subscribe(topics)

    def subscription(self) -> Set[str]:
        return self._c.subscription()

    async def unsubscribe(self) -> None:
        self._c._check_open()
        await self._client.arun(self._c._unsubscribe_steps())

    def set_acknowledgement_commit_callback(self, callback: Optional[AcknowledgementCallback]) -> None:
        self._c.set_acknowledgement_commit_callback(callback)

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        self._c.acknowledge(record, type)

    def acknowledge_offsets(self, tp: Tuple[str, int], offsets: Iterable[int],
                            type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        self._c.acknowledge_offsets(tp, offsets, type)

    async def poll(self, timeout_ms: int = 0) -> Dict[TopicPartition, List[ShareRecord]]:
        self._c._check_open()
        return await self._client.arun(self._c._poll_steps(timeout_ms))

    async def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms") -> Dict[TopicPartition, Any]:
        self._c._check_open()
        return await self._client.arun(self._c._poll_steps(timeout_ms, self._c._columns(timestamp_unit)))

    async def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[BaseException]]:
        self._c._check_open()
        return await self._client.arun(self._c._commit_steps(timeout))

    def commit_async(self) -> None:
        self._c._check_open()
        self._c._take_acks()
        self._c._turn(fetch=False)

    async def close(self, timeout: Optional[float] = None) -> None:
        await self._client.arun(self._c._close_steps(timeout))

    async def __aenter__(self) -> "AsyncShareConsumer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
