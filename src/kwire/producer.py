"""The producer: records batched per partition and sent by a background
thread.

``send()`` puts a record into the open batch of its partition (a compiled
:class:`kwire.RecordBatchBuilder`) and returns a :class:`RecordFuture` at
once. The sender thread sends a batch when it is full (``batch_size``), when
it has waited ``linger_ms``, or on ``flush()``; the batches of all
partitions led by one broker go in one Produce request (of at most
``max_request_size`` bytes of batches: a batch never grows past it, and a
record that alone would is refused by ``send()``), and requests to
different brokers are in flight together. Retriable errors are retried
(after ``retry_backoff_ms``); stale-metadata errors refresh the metadata
first, unless the answer named the partition's new leader (a leader hint,
KIP-951: the batch goes to it at once; see :mod:`kwire.client`). A batch not acknowledged ``delivery_timeout_ms`` after it was made
fails with :class:`KafkaTimeoutError`, whether it was never sent, is
waiting to be retried or is in flight (KIP-91); a response that comes for
it later changes nothing.

Partitioning follows Kafka's default partitioner: a keyed record goes to
``murmur2(key) % partitions`` (what Java and librdkafka's murmur2_random
choose); a record without key to the topic's sticky partition, which changes
each time a batch of it is sealed (KIP-480; :class:`kwire._codec.Accumulator`).

Idempotence (on by default, as in Kafka 3+): the producer gets a producer id
(InitProducerId) and stamps each batch with its partition's next sequence
number when the batch is first sent; a retry re-sends the same bytes, so the
broker drops duplicates. When a partition's sequence state is lost (the
broker answers OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID) or
unknown (a batch given a sequence number expired: it may be in the log,
or leave a gap in the sequence), the producer bumps its epoch
(or gets a new id) instead of stalling, as Kafka's client does. After an
error, the partition's unacknowledged batches are renumbered from 0 under
the new epoch once none of them is in flight; after an expiry, nothing new
is sent to the partition until every batch sent to it before is
acknowledged or failed, and it then starts again at sequence 0 under the
new epoch. Every other partition moves to the new epoch when none of its
batches under the old one is unacknowledged, so their batches are never
sent under two epochs (which the broker could not recognise as duplicates).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import math
import threading
import time
from typing import Any, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from kwire import protocol
from kwire._codec import (Accumulator, ProducerBatch, RecordBatchBuilder, RecordFuture, SendLock,
                          SendingProducer, build_batches, restamp_batch)
from kwire.client import STALLED, Client, Offload, Sleep, Steps, StepsOf, Wait, run_blocking
from kwire.config import PRODUCER, ConfigError, resolve
from kwire.errors import InvalidPartitionError, KwireError, ProducerClosedError, RecordTooLargeError, error_for_code
from kwire.future import Future, KafkaTimeoutError
from kwire.interceptors import ProducerInterceptors
from kwire.metrics.clients import ProduceMetrics
from kwire.metrics.names import Metric, client_network_metrics, fold, produce_metrics
from kwire.metrics.events import ClientEvents
from kwire.metrics.report import brokers_doc, header_doc, stats_reporter
from kwire.metrics.telemetry import TelemetryReporter
from kwire.net import Connection
from kwire.partitioners import resolve_partitioner
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.types import ProducerRecord, RecordMetadata

__all__ = ["Producer", "RecordMetadata", "RecordFuture", "BufferFullError", "ProducerClosedError",
           "InvalidPartitionError", "RecordTooLargeError"]

log = logging.getLogger(__name__)


#: How long ``close()`` waits past its timeout for the sender thread to end
#: (it ends at its next turn, a few milliseconds away, unless a turn is
#: busy encoding batches).
CLOSE_GRACE = 1.0


_NO_STAMP = (-1, -1)


class BufferFullError(KafkaTimeoutError):
    """``send()`` waited ``max_block_ms`` for room in ``buffer_memory``."""


class _Batch(ProducerBatch):
    """A partition's batch: while open, the compiled builder takes records
    (see :class:`kwire._codec.ProducerBatch`); then its send state."""

    __slots__ = ("created", "payload", "attempts", "sequence", "next_try", "deadline", "future", "stamp", "refused")

    def __init__(self, topic: str, partition: int, builder: RecordBatchBuilder, now: float, deadline: float):
        self.created = now
        self.payload: Optional[bytes] = None             # the encoded batch, once sealed
        self.attempts = 0
        self.sequence = -1
        self.next_try = 0.0
        self.deadline = deadline
        self.future: Future = Future()                   # -> (base_offset, log_append_time)
        self.stamp: Tuple[int, int] = _NO_STAMP          # producer id and epoch the payload carries
        self.refused = False      # its last attempt was refused unwritten (the broker was not the leader)

    def metadata(self, index: int) -> "RecordMetadata":
        """Where record ``index`` landed (the batch is acknowledged)."""
        base, log_append = self.future.value
        ts, ks, vs = self.record_meta(index)
        offset = -1 if base < 0 else base + index
        return RecordMetadata(self.topic, self.partition, offset, log_append if log_append >= 0 else ts, ks, vs)


def _acknowledged(interceptors: ProducerInterceptors, batch: _Batch, future: Future) -> None:
    interceptors.batch_done(batch)


_INTERCEPTING: Dict[type, type] = {}


def _intercepting(cls: type) -> type:
    """``cls`` with ``send`` calling the interceptors first (one subclass per
    class, made once): a producer with interceptors becomes one, so that
    the compiled ``send`` of every other producer is looked up as before
    (an instance attribute would add ``send`` to the keys every instance of
    ``cls`` shares, and unspecialise the lookup for all of them)."""
    sub = _INTERCEPTING.get(cls)
    if sub is None:
        sub = _INTERCEPTING[cls] = type(cls.__name__, (cls,), {
            "send": cls._intercepted_send, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__})
    return sub


def compression_level(cfg: Mapping[str, Any]) -> Optional[int]:
    """The level the batches of ``cfg["compression_type"]`` are compressed
    at (None: the codec's default): librdkafka's ``compression_level``
    when set (not -1), else Java's option of that codec (KIP-390): gzip -1
    is zlib's default; lz4 9, Java's default, is lz4's fast mode (as Java's
    ``Lz4BlockOutputStream``: its high-compression mode at any other
    level). Snappy has no level (Java has no option for it; librdkafka
    takes only 0): a level given with it is refused."""
    codec, level = cfg["compression_type"], cfg["compression_level"]
    if codec in ("none", "snappy"):
        if level not in (-1, 0):
            raise ConfigError(f"compression_level {level}: {codec} has no levels")
        return None
    if level != -1:
        if codec == "gzip" and level > 9:
            raise ConfigError(f"compression_level {level}: gzip takes 0 to 9")
        return level
    level = cfg[f"compression_{codec}_level"]
    return None if (codec, level) in (("gzip", -1), ("lz4", 9)) else level


def _check_two_phase(cfg: Mapping[str, Any], given: Set[str]) -> None:
    """``transaction_two_phase_commit_enable`` (KIP-939) as Java's producer
    takes it: for a transactional producer, without a
    ``transaction_timeout_ms`` (its transactions never time out)."""
    if not cfg["transaction_two_phase_commit_enable"]:
        return
    if not cfg["transactional_id"]:
        raise ConfigError("transaction_two_phase_commit_enable needs a transactional_id")
    if "transaction_timeout_ms" in given:
        raise ConfigError("transaction_timeout_ms cannot be set with transaction_two_phase_commit_enable: "
                          "two-phase commit transactions do not time out")



def _abort_quietly(abort: Any, timeout: Optional[float]) -> None:
    """Abort a transaction whose block raised: the block's exception is the
    one to see, so an abort that fails as well is logged, not raised."""
    try:
        abort(timeout)
    except Exception as e:          # noqa: BLE001 - the block's own exception is raised instead
        log.error("the transaction's block raised, and its abort failed too: %s", e)

class Producer(SendingProducer):
    """A Kafka producer.

    ``Producer({"bootstrap.servers": "host:9092"}, linger_ms=10)`` or
    ``Producer(bootstrap_servers="host:9092", acks="all")``; see
    :data:`kwire.config.PRODUCER` for every option. Use as a context
    manager, or call :meth:`close`.
    """

    _client_class = Client     # kwire.aio's producer drives the same logic on an event loop's client
    #: From how many bytes of records a turn's encoding (and compression)
    #: runs off the sender's thread (an :class:`~kwire.client.Offload`
    #: step; the Produce answers that come meanwhile wait for it); None:
    #: never (the blocking sender thread encodes without the GIL already).
    #: kwire.aio sets it, so the event loop it shares goes on meanwhile.
    _offload_build_bytes: Optional[int] = None

    def __init__(self, config: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        self.cfg = resolve(PRODUCER, config, kwargs, what="producer", check=_check_two_phase)
        cfg = self.cfg
        if cfg["enable_idempotence"] and cfg["acks"] != -1:
            if kwargs.get("enable_idempotence") or (config or {}).get("enable.idempotence") not in (None,):
                raise KwireError("enable_idempotence needs acks=all")
            cfg["enable_idempotence"] = False      # implicit default yields to an explicit acks
        if cfg["enable_idempotence"] and cfg["max_in_flight_requests_per_connection"] > 5:
            raise KwireError("enable_idempotence allows at most 5 requests in flight per connection")
        self._level = compression_level(cfg)
        self._client = self._client_class(cfg, auto_create_topics=True)
        self._lock = SendLock()
        self._room = threading.Condition(self._lock)
        partitioner, ignore_keys = resolve_partitioner(cfg["partitioner"])
        # the send state's one owner: partitioning, the open batches, the bytes buffered, sealing
        self._acc = Accumulator(lock=self._lock, generation=self._client.cluster.generation,
                                check=self._check_send, wait_partitions=self._wait_partitions,
                                wait_room=self._wait_room, new_batch=self._new_batch, sealed=self._sealed,
                                batch_size=cfg["batch_size"], max_request_size=cfg["max_request_size"],
                                buffer_memory=cfg["buffer_memory"], max_block_ms=cfg["max_block_ms"],
                                compressed=cfg["compression_type"] != "none", partitioner=partitioner,
                                ignore_keys=ignore_keys or cfg["partitioner_ignore_keys"])
        # KIP-794's adaptive partitioning: when each leader last had a batch ready, and last could take one
        self._node_ready_at: Dict[int, float] = {}
        self._node_drained_at: Dict[int, float] = {}
        self._ready: Dict[Tuple[str, int], Deque[_Batch]] = collections.defaultdict(collections.deque)
        self._sealed_batches: Set[_Batch] = set()      # sealed, not yet acknowledged or failed: what flush() waits for
        self._sealed_count: Dict[Tuple[str, int], int] = {}    # records in each partition's last sealed batch
        self._in_flight_tp: Dict[Tuple[str, int], int] = {}
        self._next_expiry = float("inf")       # no sealed batch expires before this
        self._flushing = 0
        self._closing = False
        self._close_deadline: Optional[float] = None     # close(timeout): when what is left fails
        self._closed = False
        self._formats: Any = None     # the kwire.formats.FormatCache of send_arrow's key and value formats
        self._fatal: Optional[BaseException] = None
        self._linger = cfg["linger_ms"] / 1000.0
        self._codec = None if cfg["compression_type"] == "none" else cfg["compression_type"]
        self._producer_id = -1
        self._producer_epoch = -1
        self._pid_future: Optional[Future] = None
        self._pid_next_try = 0.0    # a failed InitProducerId is sent again after retry_backoff_ms
        # Produce requests in flight: serial -> (node, sent at, leader epoch of each partition when sent)
        self._flights: Dict[int, Tuple[int, float, Dict[Tuple[str, int], int]]] = {}
        self._flight_serial = 0
        self._bump_from: Tuple[int, int] = _NO_STAMP      # the id/epoch an InitProducerId should bump
        # idempotence, per partition: the producer id and epoch its sequence numbers count under,
        # the next sequence number, and its batches given one and not yet acknowledged or failed
        self._tp_stamp: Dict[Tuple[str, int], Tuple[int, int]] = {}
        self._next_seq: Dict[Tuple[str, int], int] = {}
        self._unacked: Dict[Tuple[str, int], List[_Batch]] = collections.defaultdict(list)
        self._rewrite: Set[Tuple[str, int]] = set()      # sequence state lost: renumber under the next epoch
        self._unresolved: Set[Tuple[str, int]] = set()   # a batch given a sequence expired: state unknown
        self._acked: Set[Tuple[str, int]] = set()        # a batch acknowledged under the partition's stamp
        self._txn: Any = None       # kwire.transactions.TransactionManager with a transactional_id
        if cfg["transactional_id"]:
            from kwire.transactions import TransactionManager

            self._txn = TransactionManager(self)
            self._acc.enabled = False   # every send checks the transaction state (the Python path)
        self._error_context = {"transactional_id": cfg["transactional_id"]} if self._txn is not None else {}
        self._need_pid = cfg["enable_idempotence"] and self._txn is None   # transactions: init_transactions()
        self._node_in_flight: Dict[int, int] = {}
        self._building = False        # a turn's batches are being encoded off the sender's thread
        self._deferred: List[Tuple[int, List[_Batch], Future, int]] = []   # Produce answers that came meanwhile
        self._interceptors: Optional[ProducerInterceptors] = None
        if cfg["interceptor_classes"]:
            self._interceptors = ProducerInterceptors(cfg["interceptor_classes"], cfg)
        self._tracing: Any = None
        if cfg["tracer_provider"]:
            from kwire.tracing import tracing_for       # only when asked for: it needs kwire[otel]

            self._tracing = tracing_for(cfg, "producer")
        if self._interceptors is not None or self._tracing is not None:
            self.__class__ = _intercepting(type(self))     # send() calls them: a subclass, so the class's stays compiled
        self._started = time.monotonic()
        self._produce_metrics = ProduceMetrics(cfg["metrics_sample_window_ms"] / 1000.0)
        self._client.reporter = stats_reporter(cfg, self._stats_doc)
        self._client.events = ClientEvents.from_config(cfg)
        self._client.telemetry = TelemetryReporter(self._client, self._metric_list, dict)
        self._start_sender()

    def client_instance_id(self) -> Optional[Any]:
        """The client instance id (a ``uuid.UUID``) the brokers assigned for
        client telemetry (KIP-714; Java's ``clientInstanceId``), once a
        broker answered; None before, or with ``enable_metrics_push`` off."""
        return self._client.telemetry.instance_id if self._client.telemetry is not None else None

    # ------------------------------------------------------- metrics
    def metrics(self) -> Dict[str, Dict[str, float]]:
        """The producer's metrics, named as Java's producer names them
        (:mod:`kwire.metrics`): ``{"producer-metrics": {"record-send-rate": ...,
        "buffer-available-bytes": ...}, "producer-topic-metrics,topic=t": {...},
        "producer-node-metrics,node-id=node-1": {...}, ...}``. Any thread."""
        return fold(self._metric_list(time.monotonic()))

    _metrics_kind = "producer"

    def _metric_list(self, now: float) -> List[Metric]:
        out = client_network_metrics("producer", [self._client], now)
        total = self.cfg["buffer_memory"]
        out += produce_metrics(self._produce_metrics, self._client.metrics, total, max(0, total - self._acc.buffered),
                               now)
        return out

    def _stats_doc(self) -> Dict[str, Any]:
        """``stats_cb``'s document (:mod:`kwire.metrics.report`)."""
        now = time.monotonic()
        doc = header_doc("producer", self.cfg, self._started, now)
        doc["brokers"] = brokers_doc([self._client], now)
        pm = self._produce_metrics
        topics: Dict[str, Any] = {}
        for (topic, partition), p in dict(pm.parts).items():
            topics.setdefault(topic, {"topic": topic, "partitions": {}})["partitions"][str(partition)] = {
                "partition": partition, "txmsgs": p.records}
        doc["topics"] = topics
        doc["txmsgs"] = int(pm.records.total)
        doc["msg_size"] = self._acc.buffered
        doc["msg_size_max"] = self.cfg["buffer_memory"]
        doc["metrics"] = fold(self._metric_list(now))
        return doc

    def _start_sender(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kwire-producer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ public
    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Producer {self.cfg['client_id']} {'closed' if self._closed else 'open'}>"

    def partitions_for(self, topic: str, timeout: Optional[float] = None) -> List[int]:
        """The partitions of ``topic`` (waits for metadata)."""
        wait = timeout if timeout is not None else self.cfg["max_block_ms"] / 1000.0
        return list(self._wait_partitions(topic, time.monotonic() + wait))

    # ------------------------------------------- send()'s calls into Python
    def _check_send(self) -> None:
        """Whether a record may be sent now (while the compiled path is
        disabled: failed, or transactional)."""
        if self._fatal is not None:
            raise self._fatal
        if self._txn is not None:
            self._txn.check_send()

    def _new_batch(self, topic: str, partition: int, encoded: bool = False) -> _Batch:
        """A new open batch for the partition (lock held); ``encoded``: for
        ``send_arrow``'s rows, which are encoded as they come, not held."""
        now = time.monotonic()
        builder = RecordBatchBuilder(self._codec, transactional=self._txn is not None, compression_level=self._level)
        batch = _Batch(topic, partition, builder, now, now + self.cfg["delivery_timeout_ms"] / 1000.0)
        if not encoded:
            batch.reserve(self._sealed_count.get((topic, partition), 0))   # room for as many as the last one took
            if self._interceptors is not None:       # on_acknowledgement for each record, before its callbacks
                batch.future.add_done_callback(functools.partial(_acknowledged, self._interceptors, batch))
        # the sender may be waiting out a turn that knew of no open batch (up to 0.1 s): it is to wait this
        # batch's linger_ms instead (Java's producer wakes its sender on a new batch too)
        self._client.wakeup()
        return batch

    def _intercepted_send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                          partition: Optional[int] = None, timestamp_ms: Optional[int] = None) -> RecordFuture:
        """``send`` with interceptors or tracing (the ``send`` of a producer
        that has either: :func:`_intercepting`): ``on_send``, then the
        compiled send, inside the record's send span when tracing
        (kwire.tracing); a record it refuses is acknowledged with its error."""
        record = ProducerRecord(topic, value, key, headers, partition, timestamp_ms)
        if self._interceptors is not None:
            record = self._interceptors.on_send(record)
        with self._refusal_acknowledged(record):
            if self._tracing is not None:
                return self._tracing.send(record, lambda r: SendingProducer.send(self, *r))
            return SendingProducer.send(self, *record)

    @contextlib.contextmanager
    def _refusal_acknowledged(self, record: ProducerRecord) -> Iterator[None]:
        """An error raised inside (the record not queued) goes to the
        interceptors' ``on_acknowledgement``, then on to the caller."""
        try:
            yield
        except BaseException as e:
            if self._interceptors is not None:
                self._interceptors.send_failed(record, e)
            raise

    def send_arrow(self, topic: str, data: Any, *, key: Optional[str] = "key", value: str = "value",
                   headers: Optional[str] = "headers", partition: Optional[str] = "partition",
                   timestamp: Optional[str] = "timestamp", key_format: Any = None,
                   value_format: Any = None) -> Future:
        """Queue every row of ``data`` (a ``pyarrow.RecordBatch`` or
        ``Table``) as a record of ``topic``: the compiled core encodes the
        rows straight from the Arrow buffers into the partitions' batches,
        with no Python object per row. Returns a future done once every
        batch holding its rows is acknowledged (its value: the number of
        rows), or failed with the first batch's error.

        Columns, by name (None, or a name ``data`` lacks: not used; only
        ``value`` is required): ``key`` and ``value`` binary or string
        (UTF-8), null for a null key or value; ``headers``
        ``list<struct<key: string, value: binary>>`` (Spark's Kafka
        schema); ``partition`` integers, null to let the producer choose
        (murmur2 of the key, or the sticky partition); ``timestamp``
        timestamps (any unit) or integers in ms, null for now (the
        default: the time of the call).

        Every row is checked first (sizes against ``max_request_size`` and
        ``buffer_memory``, partitions, the buffers' offsets), so a bad row
        queues nothing. It blocks as :meth:`send` does, for metadata or
        room in ``buffer_memory``, at most ``max_block_ms``; if that runs
        out midway, or the producer is closed meanwhile, the error's
        ``rows_queued`` is the number of rows queued before it (they are
        sent). Records sent this way have no per-record metadata; mixed
        with :meth:`send` they keep each call's order within a partition.

        ``key_format`` / ``value_format`` encode a typed ``key`` / ``value``
        column (a struct, for Avro and Protobuf) first: a
        :class:`kwire.formats.base.Format`, a kind ("avro", "protobuf",
        "json") or ``(kind, options)`` (:mod:`kwire.formats`; each spec's
        format made once per topic and kept by the producer), framed with
        the registry's schema id as confluent-kafka's serializers frame it."""
        from kwire._arrow import send_columns

        batches: List[_Batch] = []
        data = self._encoded(topic, data, key, value, key_format, value_format)
        rows, k, v, h, p, ts = send_columns(data, key, value, headers, partition, timestamp)
        count = self._acc.send_arrow(topic, rows, k, v, h, p, ts, batches)
        return Future.all_of([b.future for b in batches], count)

    def _encoded(self, topic: str, data: Any, key: Optional[str], value: str, key_format: Any,
                 value_format: Any) -> Any:
        """``data`` with its key and value columns encoded by their formats (if any)."""
        if key_format is None and value_format is None:
            return data
        from kwire.formats import FormatCache
        from kwire.formats.base import encode_columns

        if self._formats is None:
            self._formats = FormatCache()
        return encode_columns(data, topic=topic, key=key, value=value,
                              key_format=self._formats.get(key_format, topic=topic, is_key=True),
                              value_format=self._formats.get(value_format, topic=topic, is_key=False))

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send everything queued now and wait until it is acknowledged (or
        failed: a record's error is on its own future). Raises
        :class:`KafkaTimeoutError` if that takes longer than ``timeout`` s."""
        run_blocking(self._flush_steps(timeout))

    def _flush_steps(self, timeout: Optional[float]) -> Steps:
        """:meth:`flush` as steps (the sender does the I/O)."""
        futures = self._flush_start()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            for f in futures:       # Wait: result(), not done(): it returns once the records' callbacks have run
                yield Wait(f, None if deadline is None else max(0.0, deadline - time.monotonic()))
                if not f.done():        # the wait ended, not the batch
                    pending = sum(not f.done() for f in futures)
                    raise KafkaTimeoutError(f"flush(): {pending} batch(es) not acknowledged within {timeout} s")
        finally:
            with self._lock:
                self._flushing -= 1

    def _flush_start(self) -> List[Future]:
        """Seal every open batch and send at once (until the flush ends:
        ``_flushing -= 1``); the futures of every batch not yet done."""
        with self._lock:
            self._acc.seal_all()
            futures = [b.future for b in self._sealed_batches]
            self._flushing += 1
        self._client.wakeup()
        return futures

    def close(self, timeout: Optional[float] = None) -> None:
        """Send what is queued and wait up to ``timeout`` s (None: until
        every record is acknowledged or failed, which ``delivery_timeout_ms``
        bounds) for it; records not acknowledged by then fail with
        :class:`ProducerClosedError`. The sender thread has ended when
        this returns (it is given :data:`CLOSE_GRACE` s past ``timeout`` to
        finish its turn)."""
        if self._closed:
            return
        deadline = self._close_start(timeout)
        if threading.current_thread() is self._thread:      # from a callback: the thread ends after this turn
            with self._lock:
                self._close_deadline = time.monotonic()
            return
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()) + CLOSE_GRACE)
        if self._thread.is_alive():
            log.warning("kwire producer: the sender thread did not end within %.1f s of close()'s timeout; "
                        "it ends after its current turn", CLOSE_GRACE)
        self._set_closed()

    def _set_closed(self) -> None:
        """The sender has ended: the producer is closed, and so are its interceptors."""
        self._closed = True
        if self._interceptors is not None:
            self._interceptors.close()

    def _close_start(self, timeout: Optional[float]) -> Optional[float]:
        """Refuse new sends, and have the sender end once what is queued is
        done or at ``timeout`` s from now (the deadline returned)."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._lock:
            self._closing = True
            if deadline is not None and (self._close_deadline is None or deadline < self._close_deadline):
                self._close_deadline = deadline
            self._acc.closed = True
            self._acc.enabled = False
            self._room.notify_all()            # sends waiting for room give up
        self._client.wakeup()
        return deadline

    # ----------------------------------------------------- transactions
    def _transactions(self) -> Any:
        if self._txn is None:
            raise KwireError("transactions need a transactional_id")
        return self._txn

    @property
    def transaction_version(self) -> Optional[int]:
        """The transaction protocol this producer speaks: 1, or 2 (KIP-890)
        when the cluster finalized ``transaction.version`` 2 (read at
        ``init_transactions()`` and as each transaction ends); None without
        a ``transactional_id``. See :mod:`kwire.transactions`."""
        return None if self._txn is None else self._txn.transaction_version

    @property
    def producer_identity(self) -> Tuple[int, int]:
        """The producer id and epoch this producer writes with ((-1, -1)
        before it has one): with the transactional id, what another process
        needs to end this producer's open transaction
        (:meth:`kwire.admin.Admin.end_transaction`, as
        :mod:`kwire.spark.exactly_once` does)."""
        with self._lock:
            return self._producer_id, self._producer_epoch

    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Register ``transactional_id`` with its coordinator (fencing older
        producers with the same id); once, before the first transaction.
        See :mod:`kwire.transactions`."""
        self._transactions().init_transactions(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until its commit or abort belong to it."""
        self._transactions().begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[Tuple[str, int], Any], group_metadata: Any,
                                    timeout: Optional[float] = None) -> None:
        """Commit a consumer group's offsets with the transaction;
        ``group_metadata``: ``consumer.group_metadata()`` or a group id."""
        self._transactions().send_offsets_to_transaction(offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Flush the transaction's records and, if every one was written, commit it
        (EndTxn). If a record failed, raise :class:`~kwire.transactions.TransactionStateError` chained to
        its error: abort then. A commit that timed out may be called again."""
        self._transactions().commit_transaction(timeout)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort the transaction: unsent records fail with
        :class:`~kwire.transactions.TransactionAbortedError`, records in flight are waited for, then
        EndTxn(abort)."""
        self._transactions().abort_transaction(timeout)

    @contextlib.contextmanager
    def transaction(self, timeout: Optional[float] = None) -> Iterator["Producer"]:
        """``with producer.transaction():`` begins a transaction, commits it
        when the block ends and aborts it when the block raises (the block's
        exception goes on; an abort that fails too is logged), as aiokafka's
        ``transaction()``. ``timeout``: for the commit or the abort."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            _abort_quietly(self.abort_transaction, timeout)
            raise
        self.commit_transaction(timeout)

    # ----------------------------------------------------- partitioning
    def _known_partitions(self, topic: str) -> Optional[Sequence[int]]:
        """The topic's partitions from the current metadata (cached until it changes)."""
        cluster = self._client.cluster
        version = cluster.generation.value
        parts = self._acc.known_partitions(topic, version)
        if parts is None:
            parts = cluster.partitions_for(topic) or None
            if parts:
                self._acc.set_partitions(topic, version, parts, cluster.partition_count(topic) or -1)
        return parts

    def _wait_partitions(self, topic: str, deadline: float, need: int = 1) -> Sequence[int]:
        """The topic's partitions, set in the Accumulator; waits for
        metadata until ``deadline``. ``need`` > 1: a send named partition
        ``need - 1``, which the metadata lacks (added since?): refresh, and
        return once the topic has that many partitions, or once an answer to
        a request sent after this call says it has not, or at ``deadline``;
        the caller then refuses the partition. A topic the broker refuses for good
        (TOPIC_AUTHORIZATION_FAILED, an invalid name) raises that error at
        once, and its metadata is no longer asked for (a later send asks
        afresh); a topic that does not exist, and that the broker does not
        create (its ``auto.create.topics.enable`` is off), raises
        :class:`KafkaTimeoutError` saying so at ``deadline``."""
        return run_blocking(self._wait_partitions_steps(topic, deadline, need))

    def _wait_partitions_steps(self, topic: str, deadline: float, need: int = 1) -> Steps:
        """:meth:`_wait_partitions` as steps: they only sleep (the sender
        thread or task does the I/O)."""
        client = self._client
        client.add_topics([topic])
        fresh = client.request_metadata_update() if need > 1 else 0
        client.wakeup()
        while True:
            parts = self._known_partitions(topic)
            if parts and ((client.cluster.partition_count(topic) or 0) >= need
                          or client.cluster.generation.value >= fresh or time.monotonic() >= deadline):
                return parts
            self._check_waiting_metadata(topic)
            if time.monotonic() >= deadline:
                err = client.cluster.topic_errors.get(topic)
                if err == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise KafkaTimeoutError(
                        f"topic {topic!r} does not exist and was not created within max_block_ms "
                        f"({self.cfg['max_block_ms']} ms): the broker's auto.create.topics.enable may be off; "
                        "create the topic first (Admin.create_topics)")
                why = client.last_errors()
                raise KafkaTimeoutError(f"no metadata for topic {topic!r} within max_block_ms"
                                        + (f" (broker error {protocol.error_for(err).__class__.__name__})" if err else "")
                                        + (f"; the brokers could not be reached: {why}" if why else ""))
            yield Sleep(0.005)

    def _check_waiting_metadata(self, topic: str) -> None:
        """Raise what ends a wait for ``topic``'s metadata: the producer
        closed, or the broker refuses the topic for good (then its metadata
        is no longer asked for; a later send asks afresh)."""
        if self._closing:
            raise ProducerClosedError("the producer was closed while waiting for metadata")
        refused = self._client.cluster.refused(topic)
        if refused is not None:
            self._client.discard_topics([topic])
            raise refused

    # -------------------------------------------------------- buffering
    def _wait_room(self, deadline: float) -> None:
        """Wait (lock held, let go while waiting) until ``buffer_memory``
        has room, at most until ``deadline`` (send()'s ``max_block_ms``)."""
        limit = self.cfg["buffer_memory"]
        self._client.wakeup()
        while self._acc.buffered >= limit:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._no_room()
            self._room.wait(left)
            self._check_waiting_room()

    def _no_room(self) -> BufferFullError:
        return BufferFullError(f"buffer_memory ({self.cfg['buffer_memory']} bytes) full for max_block_ms; the "
                               "brokers are not keeping up or cannot be reached")

    def _check_waiting_room(self) -> None:
        """Raise what ends a wait for room: the producer failed or closed."""
        if self._fatal is not None:
            raise self._fatal
        if self._closing:
            raise ProducerClosedError("the producer was closed while send() waited for room")

    def _sealed(self, tp: Tuple[str, int], batch: _Batch) -> None:
        """The Accumulator sealed ``batch`` (lock held): it waits to be sent."""
        self._sealed_count[tp] = batch.record_count
        self._ready[tp].append(batch)
        self._sealed_batches.add(batch)
        if batch.deadline < self._next_expiry:
            self._next_expiry = batch.deadline
        self._client.wakeup()

    def _release(self, batch: _Batch) -> None:
        if self._txn is not None:
            self._txn.track(batch.future)     # every batch passes here before its future completes
        with self._lock:
            self._acc.release(batch)
            self._sealed_batches.discard(batch)
            self._room.notify_all()

    # ----------------------------------------------------- sender thread
    def _run(self) -> None:
        """The sender thread: turns until closed (and done, or past the
        close deadline); then it fails what is left and closes the client,
        which only this thread uses."""
        self._client.run(self._sender_steps())

    def _sender_steps(self) -> Steps:
        """The sender's turns (:meth:`_run`, or ``kwire.aio``'s sender task)."""
        client = self._client
        try:
            while not (self._closing and (self._idle() or self._close_due())):
                wait = yield from self._sender_turn()
                yield wait
            if client.telemetry is not None:         # KIP-714's last push, within close()'s time
                now = time.monotonic()
                deadline = min(self._close_deadline or math.inf, now + self.cfg["request_timeout_ms"] / 1000.0)
                yield from client.telemetry.terminate_steps(deadline)
        except Exception as e:  # a bug here must not leave senders waiting for ever
            log.exception("kwire producer sender thread failed")
            self._fail_all(KwireError(f"producer sender thread failed: {e!r}"))
        finally:
            self._fail_all(ProducerClosedError("producer closed before the record was acknowledged"))
            try:
                client.close()
            except Exception as e:  # closing sockets: nothing left to do about it
                log.debug("closing the producer's client: %r", e)

    def _close_due(self) -> bool:
        deadline = self._close_deadline
        return deadline is not None and time.monotonic() >= deadline

    def _idle(self) -> bool:
        with self._lock:
            return not self._acc.open and not self._sealed_batches

    def _fail_all(self, error: BaseException) -> None:
        """Fail every batch not acknowledged yet with ``error`` (kept for
        later sends, unless one is kept already)."""
        if self._fatal is None:
            self._fatal = error
        self._acc.enabled = False
        with self._lock:
            pending = list(self._sealed_batches) + self._acc.clear()
            self._sealed_batches.clear()
            self._ready.clear()
            self._unacked.clear()
            self._room.notify_all()
        for b in pending:
            if not b.future.done():
                b.future.set_exception(error)

    def _sender_turn(self) -> StepsOf[float]:
        """Seal lingering batches, expire overdue ones, send what is ready;
        the poll timeout. Steps: an encoding run off the thread, at most."""
        now = time.monotonic()
        wait = 0.1
        with self._lock:
            for tp, batch in list(self._acc.open.items()):
                age = now - batch.created
                if self._flushing or self._closing or age >= self._linger or batch.deadline <= now:
                    self._acc.seal(tp)          # (one past its deadline, to expire below)
                else:
                    wait = min(wait, self._linger - age)
        if self._txn is not None:
            self._txn.run()       # transactional requests, partitions to add
        self._expire(now)
        if self._flights:
            self._check_stalled(now)
        if self._unresolved:
            self._resolve_sequences()
        if self._need_pid and self._producer_id < 0:
            self._init_producer_id()
        if not self._need_pid or self._producer_id >= 0:
            yield from self._send_ready(now)
        else:
            wait = min(wait, 0.05)
        wait = min(wait, self._next_expiry - now)
        if self._close_deadline is not None:
            wait = min(wait, self._close_deadline - now)
        return max(0.0, wait)

    def _expire(self, now: float) -> None:
        """Fail the batches ``delivery_timeout_ms`` old: never sent, waiting
        to be retried, or in flight (whose response, if it comes, changes
        nothing). A partition whose expired batch had been sent may have it
        written or not: its sequence state is unknown (see
        :meth:`_resolve_sequences`)."""
        if now < self._next_expiry:
            return
        expired = []
        with self._lock:
            nearest = float("inf")
            for b in self._sealed_batches:
                if b.deadline <= now:
                    expired.append(b)
                elif b.deadline < nearest:
                    nearest = b.deadline
            self._next_expiry = nearest
            gone = set(expired)
            for tp in {(b.topic, b.partition) for b in expired}:
                q = self._ready.get(tp)
                if q:
                    kept = [b for b in q if b not in gone]
                    q.clear()
                    q.extend(kept)
            if self._txn is None and self.cfg["enable_idempotence"]:
                self._unresolved.update((b.topic, b.partition) for b in expired if b.sequence >= 0)
        for b in expired:
            sent = " (sent, perhaps written)" if b.attempts else ""
            err = KafkaTimeoutError(
                f"Expiring {b.record_count} record(s) for {b.topic}-{b.partition}{sent}: "
                f"{(now - b.created) * 1000:.0f} ms has passed since batch creation "
                f"(delivery_timeout_ms {self.cfg['delivery_timeout_ms']})")
            if self._txn is not None and b.sequence >= 0:
                self._txn.sequence_unknown(err)
            self._fail(b, err)

    def _resolve_sequences(self) -> None:
        """A partition of :attr:`_unresolved` is resolved when none of its
        batches is unacknowledged or in flight any more: then, unless the
        epoch changed meanwhile, bump it, and the partition starts again at
        sequence 0 under the new one (see :meth:`_may_send`)."""
        current = (self._producer_id, self._producer_epoch)
        with self._lock:
            for tp in list(self._unresolved):
                if self._unacked.get(tp) or self._in_flight_tp.get(tp, 0):
                    continue
                self._unresolved.discard(tp)
                if self._tp_stamp.get(tp) == current and self._producer_id >= 0:
                    log.info("producer %s epoch %s: a batch sent to %s expired, its sequence state is unknown; "
                             "bumping the epoch", self._producer_id, self._producer_epoch, tp)
                    self._request_bump()

    def _request_bump(self) -> None:
        """Get a new epoch (or id) for the producer (lock held). Nothing is
        sent until it comes."""
        self._bump_from = (self._producer_id, self._producer_epoch)
        self._producer_id, self._producer_epoch = _NO_STAMP
        self._pid_future = None

    def _init_producer_id(self) -> None:
        if self._pid_future is not None:
            if not self._pid_future.done():
                return
            fut, self._pid_future = self._pid_future, None
            if fut.failed():
                log.info("InitProducerId failed: %s; retrying", fut.exception())
                self._pid_next_try = time.monotonic() + self.cfg["retry_backoff_ms"] / 1000.0
                return
            resp = fut.value
            if resp.error_code:
                err = protocol.error_for(resp.error_code, api="InitProducerId")
                if self._bump_from != _NO_STAMP:
                    # a broker that cannot bump this producer's epoch (some do not implement
                    # KIP-360 for idempotent producers): a new producer id does as well
                    log.info("producer %s: the broker did not bump epoch %s (%s); getting a new producer id",
                             self._bump_from[0], self._bump_from[1], err)
                    self._bump_from = _NO_STAMP
                elif not getattr(err, "retriable", False):
                    self._fail_all(err)
                else:
                    self._pid_next_try = time.monotonic() + self.cfg["retry_backoff_ms"] / 1000.0
                return
            self._producer_id, self._producer_epoch = resp.producer_id, resp.producer_epoch
            self._bump_from = _NO_STAMP
            log.debug("producer id %s epoch %s", self._producer_id, self._producer_epoch)
            return
        if time.monotonic() < self._pid_next_try:
            return
        node = self._client.least_loaded_node()
        if node is None:
            return
        conn = self._client.connection(node)
        if conn is None or not conn.ready:
            return
        version = conn.versions.get(ApiKey.INIT_PRODUCER_ID)
        if version is None:
            self._fail_all(protocol.no_common_version(ApiKey.INIT_PRODUCER_ID,
                                                      conn.broker_ranges.get(ApiKey.INIT_PRODUCER_ID)))
            return
        req = protocol.message("InitProducerIdRequest")(
            transactional_id=None, transaction_timeout_ms=self.cfg["transaction_timeout_ms"],
            producer_id=self._bump_from[0] if version >= 3 else -1,
            producer_epoch=self._bump_from[1] if version >= 3 else -1)
        self._pid_future = self._client.send(node, req, version)

    def _may_send(self, tp: Tuple[str, int], b: _Batch, current: Tuple[int, int]) -> bool:
        """May ``b``, the next batch of ``tp``, be sent now (idempotent,
        lock held)? A partition counting sequences under an older producer
        id or epoch (or none yet) moves to ``current`` once no batch of it
        is in flight and none is unacknowledged (or its sequence state was
        lost: they are renumbered); until then only its batches already
        numbered go, under the old one. Nothing new goes to a partition
        whose sequence state is unknown."""
        if self._tp_stamp.get(tp) != current:
            if not self._in_flight_tp.get(tp, 0) and (tp in self._rewrite or not self._unacked.get(tp)):
                self._renumber(tp, current)
            elif b.sequence < 0 or tp in self._rewrite:
                return False
        return b.sequence >= 0 or tp not in self._unresolved

    def _partition_in_flight(self, tp: Tuple[str, int], b: _Batch, max_in_flight: int) -> int:
        """How many batches of ``tp`` may be in flight when ``b`` is its
        next (idempotent, lock held): one while the broker may hold no
        sequence state of ours for it (nothing acknowledged under its
        stamp yet: a broker takes any sequence from a producer it does not
        know there, so a later batch arriving before a first one that
        failed would be written ahead of it) and while a batch is retried
        whose last attempt may have been written (a timeout, a lost
        connection: as Java's producer does, the retry goes alone, then the
        batches after it); otherwise ``max_in_flight``. Batches a broker
        refused because it was not the leader were not written, and go to
        the new leader together, in order, as librdkafka sends them (one
        at a time, each waiting for the last, a leader's controlled
        shutdown held every partition it led for seconds); should the first
        fail again, the ones after it fail as out of order and are retried
        behind it (see :meth:`_on_partition_error`)."""
        if tp not in self._acked or (b.attempts and not b.refused):
            return 1
        return max_in_flight

    def _renumber(self, tp: Tuple[str, int], stamp: Tuple[int, int]) -> None:
        """Count ``tp``'s sequences under ``stamp`` from 0, its
        unacknowledged batches first (restamped when sent; lock held)."""
        self._tp_stamp[tp] = stamp
        self._rewrite.discard(tp)
        self._acked.discard(tp)
        seq = 0
        for b in self._unacked.get(tp, ()):
            b.sequence = seq
            seq = (seq + b.record_count) & 0x7FFFFFFF
        self._next_seq[tp] = seq

    def _send_ready(self, now: float) -> Steps:
        """Send what is ready. A partition's batches may not share a Produce
        request, so each leader gets one request per round with the next
        batch of each partition (up to ``max_request_size`` bytes of
        batches), for as many rounds as the in-flight limits allow: a turn
        of this thread sends everything that can go."""
        client = self._client
        max_in_flight = self.cfg["max_in_flight_requests_per_connection"]
        max_request = self.cfg["max_request_size"]
        idempotent = self.cfg["enable_idempotence"]
        current = (self._producer_id, self._producer_epoch)
        requests: List[Tuple[int, List[_Batch]]] = []
        with self._lock:
            if self.cfg["partitioner_adaptive_partitioning_enable"]:
                self._measure_load(now)
            node_planned: Dict[int, int] = collections.Counter()
            tp_planned: Dict[Tuple[str, int], int] = collections.Counter()
            while True:
                by_node: Dict[int, List[_Batch]] = {}
                size_by_node: Dict[int, int] = collections.Counter()
                for tp, q in self._ready.items():
                    if not q or q[0].next_try > now:
                        continue
                    if idempotent and (self._in_flight_tp.get(tp, 0) + tp_planned[tp]
                                       >= self._partition_in_flight(tp, q[0], max_in_flight)):
                        self._mark_ready(client.cluster.leader_for(*tp), now)   # waiting for its answers
                        continue
                    if idempotent and not self._may_send(tp, q[0], current):
                        continue
                    if self._txn is not None and not self._txn.partition_ready(tp):
                        continue      # waits for AddPartitionsToTxn
                    leader = client.cluster.leader_for(*tp)
                    if leader is None:
                        client.add_topics([tp[0]])
                        client.request_metadata_update()
                        continue
                    self._mark_ready(leader, now)
                    if self._node_in_flight.get(leader, 0) + node_planned[leader] >= max_in_flight:
                        continue
                    size = len(q[0].payload) if q[0].payload is not None else q[0].bytes
                    if leader in by_node and size_by_node[leader] + size > max_request:
                        continue      # in the next request
                    conn = client.connection(leader)
                    if conn is None:
                        client.refresh_leaders(now)     # in its reconnect backoff: it may be dead
                        continue
                    if not conn.ready:
                        continue
                    self._node_drained_at[leader] = now
                    by_node.setdefault(leader, []).append(q.popleft())
                    size_by_node[leader] += size
                    tp_planned[tp] += 1
                if not by_node:
                    break
                for node, batches in by_node.items():
                    node_planned[node] += 1
                    requests.append((node, batches))
        # every batch of the turn encoded at once: one GIL release, not one per request
        fresh = yield from self._payloads([b for _, batches in requests for b in batches])
        if idempotent:
            with self._lock:
                for b in fresh:
                    self._unacked[(b.topic, b.partition)].append(b)
        unsent = []
        for node, batches in requests:
            conn = client.connection(node)
            if conn is None or not conn.ready:      # an earlier request of this turn found it dead
                unsent.append(batches)
            else:
                self._send_produce(conn, batches)
        for node in {node for node, _ in requests}:
            client.flush(node)                      # each leader's requests in one write
        self._requeue([b for batches in unsent for b in batches])

    def _mark_ready(self, leader: Optional[int], now: float) -> None:
        """``leader`` has a batch ready now (KIP-794's node latency: it is
        unavailable once it has had one ready, and taken none, for
        ``partitioner_availability_timeout_ms``). A partition held at its
        in-flight limit counts, as Java's node held at
        ``max.in.flight.requests.per.connection`` does: a stalled leader
        holds its partitions there."""
        if leader is not None:
            self._node_ready_at[leader] = now
            self._node_drained_at.setdefault(leader, now)

    def _measure_load(self, now: float) -> None:
        """KIP-794's adaptive partitioning, as Java's ``RecordAccumulator.ready``
        measures it (lock held): once each partition of a topic has had a
        batch, the number of batches each one's queue holds (its open one
        included) goes to the Accumulator, which weighs the next sticky
        partition against them; partitions without a leader are left out,
        and so, with ``partitioner_availability_timeout_ms``, are those
        whose leader has had batches ready but taken none for that long."""
        queues: Dict[str, Dict[int, int]] = {}
        for (topic, p), q in self._ready.items():
            queues.setdefault(topic, {})[p] = len(q)
        for topic, p in self._acc.open:
            sizes = queues.setdefault(topic, {})
            sizes[p] = sizes.get(p, 0) + 1
        cluster = self._client.cluster
        timeout = self.cfg["partitioner_availability_timeout_ms"] / 1000.0
        for topic, sizes in queues.items():
            if len(sizes) < (cluster.partition_count(topic) or 0):
                self._acc.set_load(topic, None, None)      # not before every partition had a batch, as Java
                continue
            parts = [p for p in sorted(sizes) if self._available(cluster.leader_for(topic, p), timeout)]
            self._acc.set_load(topic, parts, [sizes[p] for p in parts])

    def _available(self, leader: Optional[int], timeout: float) -> bool:
        """Whether keyless records may go to a partition led by ``leader``:
        it is known and, with an availability ``timeout``, has taken a batch
        within that time of last having one ready (Java's node latency stats)."""
        if leader is None:
            return False
        if timeout <= 0:
            return True
        ready = self._node_ready_at.get(leader)
        return ready is None or ready - self._node_drained_at[leader] <= timeout

    def _check_stalled(self, now: float) -> None:
        """Produce requests waiting :data:`kwire.client.STALLED` seconds or more: when the
        metadata says a partition of one has a new leader (a higher leader
        epoch) elsewhere, the node it went to was replaced, as a hung or cut
        off leader is once the controller fences it. Its connection is
        closed, so its batches fail as if it had died and go to the new
        leader now, with the same sequence numbers, not after
        ``request_timeout_ms``: the old leader cannot make them committed
        (the new epoch fences it), and the new one takes a batch it already
        has as a duplicate. Otherwise metadata is refreshed to find out."""
        self._client.drop_replaced_leaders(list(self._flights.values()), now, STALLED, "Produce")

    def _payloads(self, batches: List[_Batch]) -> StepsOf[List[_Batch]]:
        """Encode (compress, stamp) the batches not encoded yet, all in one
        :func:`build_batches` call, and restamp those encoded under another
        producer id or epoch than their partition now counts under (see
        :meth:`_renumber`); returns the ones encoded now. Sender thread
        only, without the lock, so send() goes on while they compress."""
        idempotent = self.cfg["enable_idempotence"]
        fresh = [b for b in batches if b.payload is None]
        stamps: List[Optional[Tuple[int, int, int]]] = []
        for b in fresh:
            if idempotent:
                tp = (b.topic, b.partition)
                if b.sequence < 0:
                    b.sequence = self._next_seq.get(tp, 0)
                    self._next_seq[tp] = (b.sequence + b.record_count) & 0x7FFFFFFF
                b.stamp = self._tp_stamp[tp]
                stamps.append((b.stamp[0], b.stamp[1], b.sequence))
            else:
                stamps.append(None)
        limit = self._offload_build_bytes
        if limit is not None and fresh and sum(b.bytes for b in fresh) >= limit:
            self._building = True         # Produce answers wait: the state they change is this turn's
            try:
                payloads = yield Offload(functools.partial(build_batches, fresh, stamps))
            finally:
                self._building = False
                deferred, self._deferred = self._deferred, []
                for args in deferred:
                    self._on_produce(*args)
        else:
            payloads = build_batches(fresh, stamps)
        observe = self._acc.observe if self._codec is not None else None
        built = self._produce_metrics.built
        now = time.monotonic()
        for b, payload in zip(fresh, payloads):
            b.payload = payload
            if observe is not None:
                observe(b.topic, b.bytes, len(payload))      # batch_size counts estimated compressed bytes
            built(b.topic, b.partition, b.record_count, b.bytes, len(payload), now - b.created)
        if idempotent:
            for b in batches:
                stamp = self._tp_stamp[(b.topic, b.partition)]
                if b.stamp != stamp:
                    b.payload = restamp_batch(b.payload, stamp[0], stamp[1], b.sequence)
                    b.stamp = stamp
        return fresh

    def _send_produce(self, conn: Connection, batches: List[_Batch]) -> None:
        client = self._client
        node = conn.node_id
        version = conn.versions.get(ApiKey.PRODUCE)
        if version is not None and self._txn is not None:
            version = self._txn.produce_version(version)
        if version is None:
            err = protocol.no_common_version(ApiKey.PRODUCE, conn.broker_ranges.get(ApiKey.PRODUCE))
            for b in batches:
                self._fail(b, err)
            return
        cls = protocol.message("ProduceRequest")
        topics: Dict[str, List[Any]] = collections.defaultdict(list)
        with self._lock:
            for b in batches:
                b.attempts += 1
                topics[b.topic].append(cls.PartitionProduceData(index=b.partition, records=b.payload))
                tp = (b.topic, b.partition)
                self._in_flight_tp[tp] = self._in_flight_tp.get(tp, 0) + 1
        topic_data = []
        for name, parts in topics.items():
            td = cls.TopicProduceData(partition_data=parts)
            if version >= 13:
                td.topic_id = client.cluster.topic_ids.get(name)
            else:
                td.name = name
            topic_data.append(td)
        acks = self.cfg["acks"]
        req = cls(transactional_id=self.cfg["transactional_id"], acks=acks, timeout_ms=self.cfg["request_timeout_ms"], topic_data=topic_data)
        self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
        self._flight_serial += 1
        serial = self._flight_serial
        parts_md = client.cluster.partitions
        self._flights[serial] = (node, time.monotonic(), {
            (b.topic, b.partition): getattr(parts_md.get(b.topic, {}).get(b.partition), "leader_epoch", -1)
            for b in batches})
        fut = client.send(node, req, version, expect_response=acks != 0, flush=False)
        fut.add_done_callback(lambda f: self._on_produce(node, batches, f, serial))

    def _on_produce(self, node: int, batches: List[_Batch], fut: Future, serial: int) -> None:
        if self._building:                # kwire.aio: after this turn's encoding (see _payloads)
            self._deferred.append((node, batches, fut, serial))
            return
        flight = self._flights.pop(serial, None)
        self._node_in_flight[node] = self._node_in_flight.get(node, 1) - 1
        with self._lock:
            for b in batches:
                tp = (b.topic, b.partition)
                self._in_flight_tp[tp] = self._in_flight_tp.get(tp, 1) - 1
        live = [b for b in batches if not b.future.done()]     # an expired one's answer changes nothing
        for b in batches:
            if b.future.done():
                self._settle(b)
        if fut.failed():
            for b in live:
                b.refused = False         # perhaps written: the retry goes alone
                self._retry_or_fail(b, fut.exception())
            return
        resp = fut.value
        if resp is None:      # acks=0: no response, no offsets
            for b in live:
                self._complete(b, -1, -1)
            return
        results: Dict[Tuple[str, int], Any] = {}
        names = {v: k for k, v in self._client.cluster.topic_ids.items()}
        for t in resp.responses:
            name = t.name if t.name else names.get(getattr(t, "topic_id", None))
            for p in t.partition_responses:
                results[(name, p.index)] = p
        failed = []
        for b in live:
            p = results.get((b.topic, b.partition))
            if p is None:
                self._retry_or_fail(b, KwireError(f"Produce response lacks {b.topic}[{b.partition}]"))
            elif p.error_code == ErrorCode.NONE or p.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self._complete(b, p.base_offset, getattr(p, "log_append_time_ms", -1))
            else:
                failed.append((b, p))
        if failed:
            self._on_partition_errors(failed, getattr(resp, "node_endpoints", None) or (),
                                      flight[2] if flight is not None else {})

    def _on_partition_errors(self, failed: List[Tuple[_Batch, Any]], endpoints: Sequence[Any],
                             epochs: Mapping[Tuple[str, int], int]) -> None:
        """The batches a Produce answer refused, with their partitions'
        answers (``epochs``: each partition's leader epoch when it was
        sent): leader hints (KIP-951) first, so that a batch whose
        partition has a new leader goes to it at once, then each error."""
        moved = self._client.follow_leader_hints(
            (((b.topic, b.partition), p, epochs.get((b.topic, b.partition), -1)) for b, p in failed), endpoints,
            "Produce")
        for b, p in failed:
            # a transactional producer's errors name its id (which producer was fenced)
            err = error_for_code(p.error_code)(getattr(p, "error_message", None), api="Produce", topic=b.topic,
                                               partition=b.partition, **self._error_context)
            self._on_partition_error(b, p.error_code, err, (b.topic, b.partition) in moved)

    def _on_partition_error(self, b: _Batch, code: int, err: BaseException, moved: bool = False) -> None:
        """``b`` refused with ``code``; ``moved``: a leader hint named its
        partition's new leader (taken in), where it is retried at once,
        without a metadata refresh (Java's ``hasLeaderChangedForTheOngoingRetry``)."""
        b.refused = bool(getattr(err, "invalid_metadata", False))     # refused before it was appended
        if b.refused and not moved:
            self._client.request_metadata_update()
        if self._txn is not None and self._txn.produce_error(code, err):
            self._fail(b, err)    # fenced or abortable: the transaction decides what comes next
            return
        if code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID,
                    ErrorCode.INVALID_PRODUCER_EPOCH) and self.cfg["enable_idempotence"]:
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and not self._first_unacked(b):
                # a batch before it failed (and goes again first): its sequence is not the next the broker
                # expects, so this is no lost state (Java's producer retries it too)
                self._retry_or_fail(b, err, force_retry=True)
                return
            self._bump_epoch(b, err)
            return
        self._retry_or_fail(b, err, at_once=moved)

    def _first_unacked(self, b: _Batch) -> bool:
        """Whether ``b`` is its partition's first unacknowledged batch
        (the one whose sequence the broker expects next)."""
        with self._lock:
            pending = [x for x in self._unacked.get((b.topic, b.partition), ()) if x.stamp == b.stamp]
        return not pending or min(pending, key=lambda x: x.sequence) is b

    def _bump_epoch(self, failed: _Batch, err: BaseException) -> None:
        """Recover the idempotent producer when the broker lost (or never
        had) the sequence state of ``failed``'s partition: a new epoch (or
        id), and the partition's unacknowledged batches renumbered from 0
        under it once none is in flight (see :meth:`_may_send`), so their
        re-sends are accepted."""
        tp = (failed.topic, failed.partition)
        with self._lock:
            if failed.stamp == self._tp_stamp.get(tp):       # not an answer to a stamp already left behind
                log.info("producer %s epoch %s: %s; bumping the epoch", self._producer_id, self._producer_epoch, err)
                self._rewrite.add(tp)
                if failed.stamp == (self._producer_id, self._producer_epoch) and self._producer_id >= 0:
                    # InitProducerId v3+ with the current id and epoch bumps the epoch (KIP-360);
                    # older versions hand out a new id. Either way sequences restart at 0.
                    self._request_bump()
        self._retry_or_fail(failed, err, force_retry=True)

    def _retry_or_fail(self, b: _Batch, err: BaseException, force_retry: bool = False, at_once: bool = False) -> None:
        """Queue ``b`` again after ``retry_backoff_ms`` (``at_once``: now, to
        a new leader), or fail it: not retriable, out of retries or time."""
        if b.future.done():           # expired meanwhile
            self._settle(b)
            return
        now = time.monotonic()
        retriable = force_retry or getattr(err, "retriable", False)
        if retriable and b.attempts <= self.cfg["retries"] and now < b.deadline:
            b.next_try = now if at_once else now + self.cfg["retry_backoff_ms"] / 1000.0
            self._produce_metrics.retried(b.topic, b.record_count)
            self._requeue([b])
            return
        self._fail(b, err)

    def _requeue(self, batches: List[_Batch]) -> None:
        """Put batches back to be sent, each partition's in sequence order:
        those given sequences first, then the rest as they were made."""
        with self._lock:
            for tp in {(b.topic, b.partition) for b in batches}:
                q = self._ready[tp]
                items = sorted(list(q) + [b for b in batches if (b.topic, b.partition) == tp],
                               key=lambda x: (x.sequence < 0, x.sequence, x.created))
                q.clear()
                q.extend(items)

    def _settle(self, b: _Batch, acked: bool = False) -> None:
        """``b`` is no longer in flight nor awaiting acknowledgement
        (``acked``: the broker acknowledged it)."""
        tp = (b.topic, b.partition)
        with self._lock:
            if b in self._unacked.get(tp, ()):
                self._unacked[tp].remove(b)
            if acked and b.stamp == self._tp_stamp.get(tp) and b.sequence >= 0:
                self._acked.add(tp)
        self._release(b)

    def _fail(self, b: _Batch, err: BaseException) -> None:
        self._settle(b)
        if not b.future.done():
            self._produce_metrics.failed(b.topic, b.record_count)
            b.future.set_exception(err)

    def _complete(self, b: _Batch, base_offset: int, log_append_time: int) -> None:
        self._settle(b, acked=True)
        if not b.future.done():
            b.future.set_result((base_offset, log_append_time if log_append_time is not None else -1))
