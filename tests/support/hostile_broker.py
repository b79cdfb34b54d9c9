"""A hostile broker for tests: a small Kafka server on loopback, scripted per
test, that leads kwire's real clients (:class:`kwire.Producer`,
:class:`kwire.Consumer`, the ``kwire`` command) into a chosen fault.

This is the allowed kind of fake. It exists to inject what a real broker
cannot be made to send: a batch with an unknown magic byte, offsets that go
backwards, a decompression bomb, a 1 GiB size prefix, a leader missing from
the broker list, a request never answered. It never stands in for a real
broker where one would do: behaviour a real broker shows is tested against
the bundled Tansu (the ``tansu`` fixture).

It speaks ApiVersions, Metadata, Fetch, Produce, ListOffsets and
InitProducerId (the producer is idempotent by default) with kwire's own
generated messages, at versions it announces in ApiVersions. Defaults: one
broker, node 0, topics with N partitions all led by node 0, Fetch serving a
scripted log per partition (:class:`PartitionLog`), Produce appending to it.

Several nodes: ``HostileBroker(node_id=1, replica_of=leader)`` is a second
node of ``leader``'s cluster, a follower of every partition, serving the
same logs; every node's Metadata lists them all (with their ``rack``), the
first as the leader. The leader's ``preferred_read_replica`` (a node id)
makes it answer a Fetch that names a rack (v11+) as a leader whose replica
selector prefers that node does (KIP-392): no records, that node named.
A log's ``aborted`` transactions are listed in read_committed answers.

Scripting: ``broker.on("Fetch", handler)``; the handler gets the decoded
:class:`Request` and returns one of

* ``None``: the default answer (``request.default()`` builds it, to edit);
* a response object (a generated ``...Response``), encoded at the request's
  version;
* :class:`Raw` (response body bytes: the header is added) or
  :class:`RawFrame` (bytes written as they are: any size prefix, any bytes);
* :data:`NEVER` (no answer; later requests on the connection are still
  answered), :class:`Delay` (an answer after a delay), :data:`CLOSE` (close
  the connection);
* a list of these, carried out in order.

Requests on one connection are answered in order, one at a time, as Kafka
does. Every request is recorded in ``broker.requests``. The server runs in
threads (one accepting, one per connection) and :meth:`HostileBroker.stop`
closes every socket and joins every thread.

Hand-made batches: :func:`v2_record`, :func:`v2_batch`, :func:`set_magic`,
:func:`compressed_batch` and :func:`bomb_batch` (a payload compressed as a
stream, so a bomb that expands to a GiB never exists uncompressed here).
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import google_crc32c

import kwire
from kwire import protocol
from kwire.protocol import messages as m
from kwire.protocol._wire import _tags
from kwire.protocol.api_keys import ApiKey, ErrorCode
from support.varint import zigzag

__all__ = [
    "HostileBroker", "Request", "PartitionLog", "Raw", "RawFrame", "Delay", "NEVER", "CLOSE",
    "records_batch", "v2_record", "v2_batch", "set_magic", "batch_header", "compressed_batch", "bomb_batch",
]

log = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, INIT_PRODUCER_ID = (
    ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.METADATA, ApiKey.API_VERSIONS, ApiKey.INIT_PRODUCER_ID)
OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER

#: The versions announced by default: each the highest kwire speaks that still
#: names topics (Fetch 13 and Produce 13 name them by id only).
DEFAULT_VERSIONS: Dict[int, Tuple[int, int]] = {
    API_VERSIONS: (0, 4),
    METADATA: (0, 12),
    FETCH: (4, 12),
    PRODUCE: (3, 9),
    LIST_OFFSETS: (1, 7),
    INIT_PRODUCER_ID: (0, 4),
}


# ------------------------------------------------------------------ replies
@dataclass(frozen=True)
class Raw:
    """A response body as bytes; the broker adds the size and the header."""
    body: bytes


@dataclass(frozen=True)
class RawFrame:
    """Bytes written to the socket exactly as given (size prefix included)."""
    data: bytes


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (the connection answers nothing meanwhile, as a
    broker busy with it would), then carry out ``then`` (None: the default
    answer)."""
    seconds: float
    then: Any = None


class _Action:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEVER = _Action("NEVER")     #: no answer to this request; the connection goes on
CLOSE = _Action("CLOSE")     #: close the connection now

Reply = Union[None, Any, Raw, RawFrame, Delay, _Action, List[Any]]
Handler = Callable[["Request"], Reply]


@dataclass
class Request:
    """One request the broker read, decoded."""
    api_key: int
    version: int
    correlation_id: int
    client_id: Optional[str]
    body: Any
    connection: int                 # index of the connection (in accept order)
    at: float                       # time.monotonic() when it was read
    broker: "HostileBroker" = field(repr=False)

    @property
    def api(self) -> str:
        return protocol.api_name(self.api_key)

    def default(self) -> Any:
        """The answer the broker gives when no handler intervenes."""
        return self.broker._default(self)


# --------------------------------------------------------------------- logs
def batch_header(data: Union[bytes, bytearray, memoryview], pos: int = 0) -> Dict[str, int]:
    """The fields of the v2 batch header at ``pos`` (no check beyond the size)."""
    (base_offset, length, leader_epoch, magic, crc, attributes, last_delta, first_ts, max_ts, producer_id,
     producer_epoch, base_sequence, count) = struct.unpack_from(">qiibIhiqqqhii", data, pos)
    return dict(base_offset=base_offset, length=length, partition_leader_epoch=leader_epoch, magic=magic, crc=crc,
                attributes=attributes, last_offset_delta=last_delta, first_timestamp=first_ts, max_timestamp=max_ts,
                producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                record_count=count, total=12 + length)


def _split(data: bytes) -> Iterator[bytes]:
    """The batches of ``data`` by their length fields (the hostile ones too)."""
    pos = 0
    while len(data) - pos >= 12:
        (length,) = struct.unpack_from(">i", data, pos + 8)
        total = 12 + max(length, 0)
        yield data[pos:pos + total]
        pos += total


class PartitionLog:
    """The log of one partition: batches in order, each with the offsets it
    claims (base offset .. base + last offset delta)."""

    def __init__(self, cond: threading.Condition) -> None:
        self._cond = cond
        self.entries: List[Tuple[int, int, bytes]] = []    # (base offset, next offset, bytes)
        self.start_offset = 0
        self.aborted: List[Tuple[int, int, int]] = []      # (producer id, first offset, marker offset)

    def aborted_within(self, start: int, end: int) -> List[Tuple[int, int]]:
        """The aborted transactions (producer id, first offset) a Fetch of
        offsets ``start`` to ``end`` lists, as Kafka does: those not ended
        before ``start`` that began before ``end``."""
        return [(pid, first) for pid, first, marker in self.aborted if marker >= start and first < end]

    @property
    def end_offset(self) -> int:
        """The high watermark: past the last batch."""
        return self.entries[-1][1] if self.entries else self.start_offset

    def append(self, data: bytes, *, keep_offsets: bool = False) -> int:
        """Append the batch ``data`` (several batches also do) and return its
        base offset. Unless ``keep_offsets``, a batch's base offset is
        rewritten to the end of the log (the CRC does not cover it), as a
        broker assigns offsets; a batch with an unknown magic byte is read as
        v2 for that. A legacy message set (magic 0 or 1) keeps its offsets
        and claims one (a compressed wrapper's is its last inner offset)."""
        with self._cond:
            first = None
            for batch in _split(bytes(data)):
                if len(batch) < 17:
                    raise ValueError("not a record batch")
                if batch[16] in (0, 1):
                    base = struct.unpack_from(">q", batch, 0)[0]
                    nxt = base + 1
                else:
                    if not keep_offsets:
                        batch = struct.pack(">q", self.end_offset) + batch[8:]
                    base = struct.unpack_from(">q", batch, 0)[0]
                    last_delta = struct.unpack_from(">i", batch, 23)[0] if len(batch) >= 27 else 0
                    nxt = base + max(last_delta, 0) + 1
                self.entries.append((base, nxt, batch))
                first = base if first is None else first
            self._cond.notify_all()
            return self.end_offset if first is None else first

    def read(self, offset: int, max_bytes: int) -> bytes:
        """The batches from the one holding ``offset`` on, up to ``max_bytes``
        (at least one batch, as Kafka answers)."""
        out: List[bytes] = []
        size = 0
        for base, nxt, data in self.entries:
            if nxt <= offset:
                continue
            if out and size + len(data) > max_bytes:
                break
            out.append(data)
            size += len(data)
        return b"".join(out)


# ------------------------------------------------------------------- broker
class HostileBroker:
    """A scripted Kafka broker on a free loopback port (see the module doc).

    ``topics`` maps topic name to partition count. Use as a context manager
    or call :meth:`start` and :meth:`stop`.
    """

    def __init__(self, topics: Optional[Dict[str, int]] = None, *, node_id: int = 0,
                 versions: Optional[Dict[int, Tuple[int, int]]] = None, fetch_wait_cap: float = 0.5,
                 rack: Optional[str] = None, replica_of: Optional["HostileBroker"] = None) -> None:
        self.node_id = node_id
        self.rack = rack
        self.versions = dict(DEFAULT_VERSIONS if versions is None else versions)
        self.fetch_wait_cap = fetch_wait_cap      # longest wait of a Fetch that finds nothing
        self.host = "127.0.0.1"
        self.port = 0
        self.requests: List[Request] = []
        self.errors: List[str] = []               # what the broker could not parse or answer
        self.connections = 0
        self.preferred_read_replica = -1          # KIP-392: the node the leader names to a Fetch with a rack
        self.bytes_served = 0                     # record bytes its Fetch answers carried
        self.cluster: List[HostileBroker] = [self]   # the nodes Metadata lists, the first one leading
        self._cond = threading.Condition()
        self.topics: Dict[str, int] = {}
        self.topic_ids: Dict[str, uuid.UUID] = {}
        self.logs: Dict[Tuple[str, int], PartitionLog] = {}
        if replica_of is not None:                # one more node of that cluster, with the same logs
            self.cluster = replica_of.cluster
            self.cluster.append(self)
            self._cond, self.topics, self.topic_ids, self.logs = (
                replica_of._cond, replica_of.topics, replica_of.topic_ids, replica_of.logs)
        for name, n in (topics or {}).items():
            self.add_topic(name, n)
        self._handlers: Dict[int, Handler] = {}
        self._next_producer_id = 1000
        self._stop = threading.Event()
        self._listener: Optional[socket.socket] = None
        self._socks: List[socket.socket] = []
        self._threads: List[threading.Thread] = []

    # -------------------------------------------------------- scripting
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def add_topic(self, name: str, partitions: int) -> None:
        with self._cond:
            self.topics[name] = partitions
            self.topic_ids.setdefault(name, uuid.uuid4())
            for p in range(partitions):
                self.logs.setdefault((name, p), PartitionLog(self._cond))

    def log(self, topic: str, partition: int) -> PartitionLog:
        return self.logs[(topic, partition)]

    def on(self, api: Union[int, str], handler: Union[Handler, Reply]) -> None:
        """Answer ``api`` (a key or a name: "Fetch") with ``handler(request)``,
        or always with ``handler`` itself when it is not callable."""
        key = api if isinstance(api, int) else _api_key(api)
        self._handlers[key] = handler if callable(handler) else (lambda _req, reply=handler: reply)

    def received(self, api: Union[int, str]) -> List[Request]:
        key = api if isinstance(api, int) else _api_key(api)
        with self._cond:
            return [r for r in self.requests if r.api_key == key]

    # -------------------------------------------------------- lifecycle
    def start(self) -> "HostileBroker":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))
        sock.listen(16)
        sock.settimeout(0.2)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._spawn(self._accept_loop, "hostile-broker-accept")
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            socks, self._socks = self._socks, []
        if self._listener is not None:
            self._listener.close()
        for s in socks:
            _close(s)
        for t in self._threads:
            t.join(timeout=5)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise RuntimeError(f"hostile broker threads still running: {alive}")

    def close_connections(self) -> None:
        """Cut every open connection (the clients reconnect)."""
        with self._cond:
            socks, self._socks = self._socks, []
        for s in socks:
            _close(s)

    def __enter__(self) -> "HostileBroker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(None)
            with self._cond:
                if self._stop.is_set():
                    _close(conn)
                    return
                index = self.connections
                self.connections += 1
                self._socks.append(conn)
            self._spawn(self._serve, f"hostile-broker-conn-{index}", conn, index)

    # ------------------------------------------------------------ serve
    def _serve(self, conn: socket.socket, index: int) -> None:
        try:
            while not self._stop.is_set():
                frame = _read_frame(conn)
                if frame is None:
                    return
                req = self._parse(frame, index)
                if req is None:
                    return
                with self._cond:
                    self.requests.append(req)
                handler = self._handlers.get(req.api_key)
                reply = handler(req) if handler is not None else None
                if not self._carry_out(conn, req, reply):
                    return
        except OSError:
            return
        except Exception as e:  # noqa: BLE001 - a scripting error is reported, not raised in a thread
            self.errors.append(f"connection {index}: {type(e).__name__}: {e}")
            log.exception("hostile broker: connection %s failed", index)
        finally:
            with self._cond:
                if conn in self._socks:
                    self._socks.remove(conn)
            _close(conn)

    def _parse(self, frame: bytes, index: int) -> Optional[Request]:
        try:
            api_key, version, corr, cid_len = struct.unpack_from(">hhih", frame, 0)
            pos = 10 + max(cid_len, 0)
            client_id = frame[10:pos].decode() if cid_len >= 0 else None
            if protocol.request_header_version(api_key, version) >= 2:
                _, pos = _tags(memoryview(frame), pos, len(frame))
            body = protocol.request_class(api_key).decode(frame, version, pos)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"connection {index}: unparsable request: {type(e).__name__}: {e}")
            return None
        return Request(api_key, version, corr, client_id, body, index, time.monotonic(), self)

    def _carry_out(self, conn: socket.socket, req: Request, reply: Reply) -> bool:
        """Do what ``reply`` says; False once the connection is to close."""
        if isinstance(reply, list):
            return all(self._carry_out(conn, req, r) for r in reply)
        if reply is NEVER:
            return True
        if reply is CLOSE:
            return False
        if isinstance(reply, Delay):
            if self._stop.wait(reply.seconds):
                return False
            return self._carry_out(conn, req, reply.then)
        if isinstance(reply, RawFrame):
            conn.sendall(reply.data)
            return True
        if reply is None:
            reply = self._default(req)
            if reply is NEVER:                    # e.g. a Produce with acks=0
                return True
        body = reply.body if isinstance(reply, Raw) else protocol.response_class(req.api_key).encode_bytes(
            reply, req.version)
        head = struct.pack(">i", req.correlation_id)
        if protocol.response_header_version(req.api_key, req.version) >= 1:
            head += b"\x00"
        conn.sendall(struct.pack(">i", len(head) + len(body)) + head + body)
        return True

    # --------------------------------------------------------- defaults
    def _default(self, req: Request) -> Any:
        make = {API_VERSIONS: self._api_versions, METADATA: self._metadata, FETCH: self._fetch,
                PRODUCE: self._produce, LIST_OFFSETS: self._list_offsets,
                INIT_PRODUCER_ID: self._init_producer_id}.get(req.api_key)
        if make is None:
            self.errors.append(f"no default answer to {req.api} v{req.version}")
            return CLOSE
        return make(req)

    def _api_versions(self, req: Request) -> Any:
        r = m.ApiVersionsResponse
        return r(error_code=0, api_keys=[r.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                         for k, (lo, hi) in sorted(self.versions.items())])

    def metadata_response(self, names: Optional[Iterable[str]] = None, *, leader: Optional[int] = None,
                          partitions: Optional[Dict[str, Sequence[int]]] = None) -> Any:
        """A Metadata answer naming this broker and ``names`` (default: every
        topic); ``leader`` overrides the partitions' leader, ``partitions``
        the partition indexes of some topics."""
        r = m.MetadataResponse
        node = self.cluster[0].node_id if leader is None else leader
        replicas = [node] if len(self.cluster) == 1 else [b.node_id for b in self.cluster]
        topics = []
        with self._cond:
            for name in (sorted(self.topics) if names is None else names):
                if name not in self.topics:
                    topics.append(r.MetadataResponseTopic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name))
                    continue
                indexes = (partitions or {}).get(name, range(self.topics[name]))
                topics.append(r.MetadataResponseTopic(
                    error_code=0, name=name, topic_id=self.topic_ids[name], partitions=[
                        r.MetadataResponsePartition(error_code=0, partition_index=i, leader_id=node, leader_epoch=0,
                                                    replica_nodes=replicas, isr_nodes=replicas, offline_replicas=[])
                        for i in indexes]))
        return r(brokers=[r.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                          for b in self.cluster],
                 cluster_id="hostile", controller_id=self.cluster[0].node_id, topics=topics)

    def _metadata(self, req: Request) -> Any:
        asked = None if req.body.topics is None else [t.name for t in req.body.topics]
        if asked == [] and req.version == 0:
            asked = None              # v0: an empty list means every topic
        return self.metadata_response(asked)

    def _fetch(self, req: Request) -> Any:
        r = m.FetchResponse
        body = req.body
        deadline = time.monotonic() + min(body.max_wait_ms / 1000.0, self.fetch_wait_cap)
        leading = self is self.cluster[0]
        # KIP-392: the leader prefers another replica for a client that names its rack (v11+); a follower
        # serves consumers from v11 on only
        redirect = leading and self.preferred_read_replica >= 0 and req.version >= 11 and bool(body.rack_id)
        refused = not leading and req.version < 11
        committed = getattr(body, "isolation_level", 0) == 1

        def answer() -> Tuple[List[Any], bool]:
            topics, any_data = [], redirect          # a preferred replica is named at once
            for t in body.topics:
                parts = []
                for p in t.partitions:
                    plog = self.logs.get((t.topic, p.partition))
                    if plog is None or refused:
                        code = NOT_LEADER_OR_FOLLOWER if refused else UNKNOWN_TOPIC_OR_PARTITION
                        parts.append(r.PartitionData(partition_index=p.partition, error_code=code, high_watermark=-1))
                        continue
                    end = plog.end_offset
                    if not plog.start_offset <= p.fetch_offset <= end:
                        parts.append(r.PartitionData(partition_index=p.partition, error_code=OFFSET_OUT_OF_RANGE,
                                                     high_watermark=end, log_start_offset=plog.start_offset))
                        continue
                    if redirect:
                        parts.append(r.PartitionData(partition_index=p.partition, high_watermark=end,
                                                     last_stable_offset=end, log_start_offset=plog.start_offset,
                                                     preferred_read_replica=self.preferred_read_replica, records=b""))
                        continue
                    data = plog.read(p.fetch_offset, p.partition_max_bytes)
                    any_data = any_data or bool(data)
                    aborted = None
                    if committed:
                        upto = (kwire.split_batches(data).next_offset if data else None) or p.fetch_offset
                        aborted = [r.AbortedTransaction(producer_id=pid, first_offset=first)
                                   for pid, first in plog.aborted_within(p.fetch_offset, upto)]
                    parts.append(r.PartitionData(partition_index=p.partition, high_watermark=end,
                                                 last_stable_offset=end, log_start_offset=plog.start_offset,
                                                 aborted_transactions=aborted, records=data))
                topics.append(r.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=parts))
            return topics, any_data

        with self._cond:
            while True:
                topics, any_data = answer()
                left = deadline - time.monotonic()
                if any_data or left <= 0 or self._stop.is_set():
                    break
                self._cond.wait(left)
            self.bytes_served += sum(len(p.records or b"") for t in topics for p in t.partitions)
        return r(responses=topics)

    def _produce(self, req: Request) -> Any:
        r = m.ProduceResponse
        out = []
        for t in req.body.topic_data:
            parts = []
            for p in t.partition_data:
                plog = self.logs.get((t.name, p.index))
                if plog is None:
                    parts.append(r.PartitionProduceResponse(index=p.index, error_code=UNKNOWN_TOPIC_OR_PARTITION,
                                                            base_offset=-1))
                    continue
                base = plog.append(bytes(p.records or b""))
                parts.append(r.PartitionProduceResponse(index=p.index, error_code=0, base_offset=base,
                                                        log_append_time_ms=-1, log_start_offset=plog.start_offset))
            out.append(r.TopicProduceResponse(name=t.name, partition_responses=parts))
        if req.body.acks == 0:
            return NEVER
        return r(responses=out)

    def _list_offsets(self, req: Request) -> Any:
        r = m.ListOffsetsResponse
        topics = []
        for t in req.body.topics:
            parts = []
            for p in t.partitions:
                plog = self.logs.get((t.name, p.partition_index))
                if plog is None:
                    parts.append(r.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                                error_code=UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                if p.timestamp == -2:
                    offset = plog.start_offset
                elif p.timestamp == -1:
                    offset = plog.end_offset
                else:
                    offset = next((base for base, _, data in plog.entries
                                   if data[16:17] == b"\x02" and batch_header(data)["max_timestamp"] >= p.timestamp),
                                  -1)
                parts.append(r.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0,
                                                            timestamp=-1, offset=offset, leader_epoch=0))
            topics.append(r.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return r(topics=topics)

    def _init_producer_id(self, req: Request) -> Any:
        body = req.body
        with self._cond:
            if getattr(body, "producer_id", -1) >= 0 and getattr(body, "producer_epoch", -1) >= 0:
                pid, epoch = body.producer_id, body.producer_epoch + 1      # a bump (KIP-360)
            else:
                pid, epoch = self._next_producer_id, 0
                self._next_producer_id += 1
        return m.InitProducerIdResponse(error_code=0, producer_id=pid, producer_epoch=epoch)


def _api_key(name: str) -> int:
    for key in protocol.APIS:
        if protocol.api_name(key) == name:
            return key
    raise KeyError(f"no API called {name!r}")


def _read_exact(conn: socket.socket, n: int) -> Optional[bytes]:
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _read_frame(conn: socket.socket) -> Optional[bytes]:
    head = _read_exact(conn, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    if not 0 <= size <= 64 << 20:
        return None
    return _read_exact(conn, size)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


# ---------------------------------------------------------------- batches
def records_batch(values: Sequence[Optional[bytes]], *, base_offset: int = 0, compression: Optional[str] = None,
                  keys: Optional[Sequence[Optional[bytes]]] = None, timestamp: int = 1_700_000_000_000) -> bytes:
    """A well-formed v2 batch of ``values``, built by kwire's own builder."""
    b = kwire.RecordBatchBuilder(compression, base_offset=base_offset)
    for i, v in enumerate(values):
        b.append(v, key=None if keys is None else keys[i], timestamp=timestamp + i)
    return b.build()


def v2_record(offset_delta: int, value: Optional[bytes] = b"", key: Optional[bytes] = None,
              timestamp_delta: int = 0, headers: Sequence[Tuple[str, Optional[bytes]]] = ()) -> bytes:
    """One v2 record, by hand (any offset delta, even a repeated one)."""
    body = bytearray(b"\x00")
    body += zigzag(timestamp_delta) + zigzag(offset_delta)
    for part in (key, value):
        body += zigzag(-1) if part is None else zigzag(len(part)) + part
    body += zigzag(len(headers))
    for hk, hv in headers:
        hkb = hk.encode()
        body += zigzag(len(hkb)) + hkb + (zigzag(-1) if hv is None else zigzag(len(hv)) + hv)
    return zigzag(len(body)) + bytes(body)


def v2_batch(records: bytes, count: int, *, base_offset: int = 0, attributes: int = 0,
             last_offset_delta: Optional[int] = None, first_timestamp: int = 1_700_000_000_000,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A v2 batch around ``records`` (the payload, compressed or not, as
    ``attributes`` say) with a right CRC32C; the header claims ``count``
    records and offsets up to ``last_offset_delta`` (default ``count - 1``)."""
    last = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, last, first_timestamp, first_timestamp, producer_id,
                            producer_epoch, base_sequence, count) + records
    crc = google_crc32c.value(after_crc)
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), -1, 2, crc) + after_crc


def set_magic(batch: bytes, magic: int) -> bytes:
    """``batch`` with another magic byte (the CRC does not cover it)."""
    return batch[:16] + bytes([magic & 0xFF]) + batch[17:]


_CHUNK = 1 << 20


def _stream(parts: Iterable[Union[bytes, int]]) -> Iterator[bytes]:
    """The bytes of ``parts`` in chunks of at most 1 MiB; an int is that many zero bytes."""
    zeros = bytes(_CHUNK)
    for part in parts:
        if isinstance(part, int):
            left = part
            while left > 0:
                n = min(left, _CHUNK)
                yield zeros[:n]
                left -= n
        elif part:
            for i in range(0, len(part), _CHUNK):
                yield part[i:i + _CHUNK]


def _compress_stream(codec: str, parts: Iterable[Union[bytes, int]]) -> bytes:
    """``parts`` compressed with ``codec`` as Kafka frames it, streamed (the
    whole plain text never exists at once). lz4 and zstd frames declare no
    content size, so a reader learns the size only by decompressing."""
    out = bytearray()
    if codec == "gzip":
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + 15)
        for chunk in _stream(parts):
            out += c.compress(chunk)
        out += c.flush()
    elif codec == "zstd":
        import zstandard

        z = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
        for chunk in _stream(parts):
            out += z.compress(chunk)
        out += z.flush()
    elif codec == "lz4":
        import lz4.frame

        with lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, content_checksum=False) as c:
            out += c.begin()
            for chunk in _stream(parts):
                out += c.compress(chunk)
            out += c.flush()
    elif codec == "snappy":   # xerial framing: 32 KiB blocks, each raw snappy with its length
        import snappy

        out += b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        pending = bytearray()
        for chunk in _stream(parts):
            pending += chunk
            while len(pending) >= 32768:
                block = snappy.compress(bytes(pending[:32768]))
                out += struct.pack(">i", len(block)) + block
                del pending[:32768]
        if pending:
            block = snappy.compress(bytes(pending))
            out += struct.pack(">i", len(block)) + block
    else:
        raise ValueError(f"unknown codec {codec!r}")
    return bytes(out)


_CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compressed_batch(codec: str, parts: Iterable[Union[bytes, int]], count: int, *, base_offset: int = 0,
                     last_offset_delta: Optional[int] = None) -> bytes:
    """A v2 batch whose payload is ``parts`` (record bytes; an int is that
    many zero bytes) compressed with ``codec``."""
    return v2_batch(_compress_stream(codec, parts), count, base_offset=base_offset, attributes=_CODEC_IDS[codec],
                    last_offset_delta=last_offset_delta)


def bomb_batch(codec: str, expands_to: int, *, base_offset: int = 0) -> bytes:
    """A v2 batch of one record whose value is ``expands_to`` zero bytes,
    compressed with ``codec``: small on the wire, huge once decompressed."""
    head = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(expands_to)
    body_len = len(head) + expands_to + 1
    return compressed_batch(codec, [zigzag(body_len), head, expands_to, zigzag(0)], 1, base_offset=base_offset)
