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
        """The group's record lock in ms, as the broker last said (None before the first ShareFetch answer)."""
        return self._c.acquisition_lock_timeout_ms

    def metrics(self) -> Dict[str, Dict[str, float]]:
        """The member's metrics, as :meth:`kwire.share.ShareConsumer.metrics`."""
        return self._c.metrics()

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to ``topics`` (replacing the subscription); the next poll joins the group. No I/O here,
        so an empty list changes nothing: ``await unsubscribe()`` leaves."""
        topics = list(topics)
        if topics:
            self._c.subscribe(topics)

    def subscription(self) -> Set[str]:
        """The topics subscribed to."""
        return self._c.subscription()

    async def unsubscribe(self) -> None:
        """Leave the group: acknowledgements made are sent, the rest of the records are released."""
        self._c._check_open()
        await self._client.arun(self._c._unsubscribe_steps())

    def set_acknowledgement_commit_callback(self, callback: Optional[AcknowledgementCallback]) -> None:
        """``callback(offsets, error)`` for every partition's acknowledgements once answered (in the loop)."""
        self._c.set_acknowledgement_commit_callback(callback)

    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge ``record`` (ACCEPT, RELEASE, REJECT or RENEW); sent with the next poll or commit."""
        self._c.acknowledge(record, type)

    def acknowledge_offsets(self, tp: Tuple[str, int], offsets: Iterable[int],
                            type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge rows of ``tp`` by offset (columnar polls), as :meth:`acknowledge` does a record."""
        self._c.acknowledge_offsets(tp, offsets, type)

    async def poll(self, timeout_ms: int = 0) -> Dict[TopicPartition, List[ShareRecord]]:
        """Records acquired for this member, as :meth:`kwire.share.ShareConsumer.poll`; cancelling it loses nothing."""
        self._c._check_open()
        return await self._client.arun(self._c._poll_steps(timeout_ms))

    async def poll_columnar(self, timeout_ms: int = 0, *, timestamp_unit: str = "ms") -> Dict[TopicPartition, Any]:
        """One ``pyarrow.RecordBatch`` per partition, with a ``delivery_count`` column, as
        :meth:`kwire.share.ShareConsumer.poll_columnar`."""
        self._c._check_open()
        return await self._client.arun(self._c._poll_steps(timeout_ms, self._c._columns(timestamp_unit)))

    async def commit_sync(self, timeout: Optional[float] = None) -> Dict[TopicPartition, Optional[BaseException]]:
        """Send the acknowledgements made and wait for their outcome per partition (None: committed)."""
        self._c._check_open()
        return await self._client.arun(self._c._commit_steps(timeout))

    def commit_async(self) -> None:
        """Send the acknowledgements made without waiting; the outcome goes to the commit callback."""
        self._c._check_open()
        self._c._take_acks()
        self._c._turn(fetch=False)

    async def close(self, timeout: Optional[float] = None) -> None:
        """Send the acknowledgements made, close each share session (the broker releases the rest) and leave
        the group."""
        await self._client.arun(self._c._close_steps(timeout))

    async def __aenter__(self) -> "AsyncShareConsumer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
