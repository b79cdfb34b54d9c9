"""Interceptors: Kafka's ``interceptor.classes`` as Python objects.

The option ``interceptor_classes`` (Java's ``interceptor.classes``) takes
a list of interceptors, each an object, a class (made with no arguments,
one per client) or a ``"module:Class"`` name (a string may list several,
separated by commas, as Java's option and Spark's ``kafka.*`` options give
them). Every method is optional; a client calls those an interceptor has,
in the list's order:

Producer (Java's ``ProducerInterceptor``):

- ``on_send(record)``: a :class:`kwire.types.ProducerRecord` (topic,
  value, key, headers, partition, timestamp_ms), before the record is
  partitioned and queued, in the caller's thread; returns the record to
  send (``record._replace(...)``), which the next interceptor gets.
- ``on_acknowledgement(metadata, exception)``: once for every record
  ``on_send`` saw, whether it was acknowledged (``exception`` None) or
  failed (``metadata``: its topic and partition, offset -1; the partition
  -1 when it failed before one was chosen): on the producer's sender
  thread (kwire.aio: the event loop), before the record's own callbacks.
  It should be quick: it holds up the acknowledgements behind it.

Consumer (Java's ``ConsumerInterceptor``):

- ``on_consume(records)``: what ``poll`` / ``getmany`` returns
  (``{TopicPartition: [Record, ...]}``), before it is returned; returns
  what the caller gets (records may be dropped or replaced by objects of
  its own: kwire's ``Record`` is read-only). Positions are already past
  these records, whatever it returns, as in Java.
- ``on_consume_columnar(batches)``: what ``poll_columnar`` returns
  (``{TopicPartition: pyarrow.RecordBatch}``); returns what the caller
  gets. ``on_consume`` is not called for columnar polls: an interceptor
  written for records would be handed Arrow batches, and making a record
  per row would undo what columnar polling is for.
- ``on_commit(offsets)``: the offsets a commit (synchronous, asynchronous
  or automatic) stored, ``{TopicPartition: OffsetAndMetadata}``, in the
  thread that polls (an asynchronous one: at the next poll or commit).

Both: ``close()``, when the client closes; ``configure(options)`` (Java's
``Configurable``) when the client made the interceptor from a class or a
name, with the client's resolved options.

An exception an interceptor raises is logged (rate-limited: one warning
per interceptor and method every :data:`LOG_INTERVAL` seconds, with the
count of those not shown) and ignored, as Java's client does: the record is
sent, acknowledged or returned as the previous interceptor left it.
``send_arrow`` rows (and Spark's sink, which sends them) are not
intercepted: they are encoded from Arrow buffers with no record object.

Without interceptors nothing here runs: the clients check once per client,
per poll or per batch, never per record.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from kwire.errors import KwireError
from kwire.types import ProducerRecord, RecordMetadata

__all__ = ["ProducerInterceptors", "ConsumerInterceptors", "LOG_INTERVAL"]

log = logging.getLogger(__name__)

#: Seconds between two warnings about the same interceptor method raising.
LOG_INTERVAL = 10.0


class _Hook(NamedTuple):
    """One interceptor's method."""

    interceptor: Any
    method: str
    fn: Any


class _Chain:
    """The interceptors of one client, in order, and their failures' log."""

    def __init__(self, items: Sequence[Any], options: Mapping[str, Any]) -> None:
        self.items: List[Any] = []
        for item in items:
            if isinstance(item, type):
                item = item()
                configure = getattr(item, "configure", None)
                if callable(configure):
                    configure(dict(options))
            self.items.append(item)
        self._lock = threading.Lock()
        self._logged: Dict[Tuple[int, str], List[float]] = {}    # (interceptor, method) -> [last warned, not shown]

    def having(self, method: str) -> List[_Hook]:
        """``method`` of each interceptor that has it, in order."""
        hooks = (_Hook(i, method, getattr(i, method, None)) for i in self.items)
        return [h for h in hooks if callable(h.fn)]

    def failed(self, hook: _Hook, error: BaseException) -> None:
        """Log (rate-limited) that ``hook`` raised ``error``."""
        key = (id(hook.interceptor), hook.method)
        now = time.monotonic()
        with self._lock:
            seen = self._logged.get(key)
            if seen is not None and now - seen[0] < LOG_INTERVAL:
                seen[1] += 1
                return
            hidden = 0 if seen is None else int(seen[1])
            self._logged[key] = [now, 0]
        more = f" ({hidden} more since the last warning)" if hidden else ""
        log.warning("interceptor %r raised in %s, ignored%s: %s: %s", hook.interceptor, hook.method, more,
                    type(error).__name__, error)

    def through(self, hooks: Sequence[_Hook], value: Any, check: Any) -> Any:
        """``value`` passed through each of ``hooks`` in turn; one that
        raises (or returns what ``check`` refuses) leaves it as it was."""
        for hook in hooks:
            try:
                out = hook.fn(value)
                if not check(out):
                    raise KwireError(f"returned {type(out).__name__}, not {check.__doc__}")
                value = out
            except Exception as e:
                self.failed(hook, e)
        return value

    def each(self, hooks: Sequence[_Hook], *args: Any) -> None:
        """Call each of ``hooks`` with ``args``; what one raises is logged."""
        for hook in hooks:
            try:
                hook.fn(*args)
            except Exception as e:
                self.failed(hook, e)

    def close(self) -> None:
        self.each(self.having("close"))


def _is_record(x: Any) -> bool:
    """a ProducerRecord"""
    return isinstance(x, ProducerRecord)


def _is_mapping(x: Any) -> bool:
    """a mapping of partitions"""
    return isinstance(x, Mapping)


class ProducerInterceptors(_Chain):
    """A producer's interceptors (see the module docstring)."""

    def __init__(self, items: Sequence[Any], options: Mapping[str, Any]) -> None:
        super().__init__(items, options)
        self._on_send = self.having("on_send")
        self._on_ack = self.having("on_acknowledgement")

    def on_send(self, record: ProducerRecord) -> ProducerRecord:
        """``record`` through each interceptor's ``on_send``, in order; one that fails is skipped (logged)."""
        return self.through(self._on_send, record, _is_record) if self._on_send else record

    def acknowledged(self, metadata: RecordMetadata, error: Optional[BaseException]) -> None:
        """Each interceptor's ``on_acknowledgement(metadata, error)``; failures logged and ignored."""
        self.each(self._on_ack, metadata, error)

    def batch_done(self, batch: Any) -> None:
        """A batch's future completed: ``on_acknowledgement`` for each of its records."""
        if not self._on_ack:
            return
        future = batch.future
        error = future.exception()
        for i in range(batch.record_count):
            if error is None:
                meta = batch.metadata(i)
            else:
                ts, ks, vs = batch.record_meta(i)
                meta = RecordMetadata(batch.topic, batch.partition, -1, ts, ks, vs)
            self.acknowledged(meta, error)

    def send_failed(self, record: ProducerRecord, error: BaseException) -> None:
        """``send`` refused ``record``: its acknowledgement, with the error."""
        partition = -1 if record.partition is None else record.partition
        self.acknowledged(RecordMetadata(record.topic, partition, -1, -1, -1, -1), error)


class ConsumerInterceptors(_Chain):
    """A consumer's interceptors (see the module docstring)."""

    def __init__(self, items: Sequence[Any], options: Mapping[str, Any]) -> None:
        super().__init__(items, options)
        self._on_consume = self.having("on_consume")
        self._on_columnar = self.having("on_consume_columnar")
        self._on_commit = self.having("on_commit")

    def on_consume(self, records: Dict[Any, Any]) -> Dict[Any, Any]:
        """A poll's records through each interceptor's ``on_consume``, in order."""
        return self.through(self._on_consume, records, _is_mapping) if records and self._on_consume else records

    def on_consume_columnar(self, batches: Dict[Any, Any]) -> Dict[Any, Any]:
        """A columnar poll's batches through each interceptor's ``on_consume_columnar``, in order."""
        return self.through(self._on_columnar, batches, _is_mapping) if batches and self._on_columnar else batches

    def on_commit(self, offsets: Mapping[Any, Any]) -> None:
        """Each interceptor's ``on_commit(offsets)`` once a commit succeeded."""
        if offsets:
            self.each(self._on_commit, dict(offsets))
