"""Finding and talking to a coordinator: the broker that manages a
consumer group (key type ``GROUP_KEY``, the group id) or a transactional
producer (``TRANSACTION_KEY``, the transactional id).

- :func:`find_coordinator_request` and :func:`coordinator_from_response`:
  FindCoordinator, in the layout of any version;
- :class:`RequestPump`: requests handed from any thread to the one thread
  that drives a :class:`kwire.client.Client`, sent at the version
  :func:`kwire.protocol.versions.capped_version` gives;
- :class:`CoordinatorLink`: the coordinator of one key, looked up (one
  lookup at a time) and looked up again after it moved or could not be
  reached, for requests sent through a pump.

Used by the group coordinator (:mod:`kwire.group`) and its membership
protocol (:mod:`kwire.classic`), the transaction manager
(:mod:`kwire.transactions`) and the admin client (:mod:`kwire.admin`).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, Mapping, Optional, Tuple

from kwire import protocol
from kwire.client import Broker, Client, NoBrokersAvailableError, Sleep, Steps, Wait, run_blocking
from kwire.errors import error_for_code
from kwire.future import Future, KafkaTimeoutError
from kwire.net import ConnectionLostError, RequestTimedOutError
from kwire.protocol.api_keys import ApiKey, ErrorCode
from kwire.protocol.versions import MAX_VERSIONS, capped_version

__all__ = [
    "GROUP_KEY",
    "TRANSACTION_KEY",
    "COORDINATOR_ERRORS",
    "RequestPump",
    "CoordinatorLink",
    "find_coordinator_request",
    "coordinator_from_response",
    "remember_broker",
]

log = logging.getLogger("kwire.group")     # the logger these said their lines with before this module

# FindCoordinator key types
GROUP_KEY = 0
TRANSACTION_KEY = 1

#: The errors that say the coordinator moved (or is not there yet): look it up again.
COORDINATOR_ERRORS = (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)


def find_coordinator_request(versions: Mapping[int, int], key: str, key_type: int) -> Any:
    cls = protocol.message("FindCoordinatorRequest")
    if versions.get(ApiKey.FIND_COORDINATOR, 0) >= 4:
        return cls(key_type=key_type, coordinator_keys=[key])
    return cls(key=key, key_type=key_type)


def coordinator_from_response(resp: Any, key: str, key_type: int = GROUP_KEY) -> Broker:
    """The coordinator a FindCoordinator response names (any version), or
    its error (a :class:`kwire.errors.KafkaError` naming the group or
    transactional id) raised."""
    entries = getattr(resp, "coordinators", None) or []
    for c in entries:
        if c.key == key:
            code, node, host, port, msg = c.error_code, c.node_id, c.host, c.port, c.error_message
            break
    else:
        code, node, host, port, msg = resp.error_code, resp.node_id, resp.host, resp.port, resp.error_message
    if code:
        raise error_for_code(code)(msg, api="FindCoordinator",
                                   **{"transactional_id" if key_type == TRANSACTION_KEY else "group": key})
    return Broker(node, host, port)


def remember_broker(client: Client, broker: Broker) -> None:
    """Make ``client`` able to connect to ``broker`` even before its
    metadata names it."""
    known = client.cluster.brokers.get(broker.node_id)
    if known is None or (known.host, known.port) != (broker.host, broker.port):
        client.cluster.brokers[broker.node_id] = broker


class RequestPump:
    """Requests handed to the one thread that drives a :class:`Client`.

    :meth:`submit` (any thread) queues ``make(versions) -> request`` for a
    node (None: the least loaded broker) and returns a future of the
    response; :meth:`pump` (the I/O thread) sends what can go now, at the
    version :func:`kwire.protocol.versions.capped_version` gives. A node
    that cannot be reached fails its requests with a retriable error rather
    than holding them."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._queue: Deque[Tuple[Optional[int], Callable[[Mapping[int, int]], Any], Future, float,
                                 Optional[float], Mapping[int, int]]] = collections.deque()

    def submit(self, node: Optional[int], make: Callable[[Mapping[int, int]], Any],
               timeout: Optional[float] = None, response_timeout: Optional[float] = None,
               caps: Mapping[int, int] = MAX_VERSIONS) -> Future:
        """``timeout``: how long it may wait for a connection to ``node``;
        ``response_timeout``: how long its response may take once sent (both
        default ``request_timeout_ms``); ``caps``: the version caps
        (:func:`kwire.protocol.versions.capped_version`)."""
        fut: Future = Future()
        deadline = time.monotonic() + (timeout if timeout is not None else
                                       self._client.cfg.get("request_timeout_ms", 30000) / 1000.0)
        with self._lock:
            self._queue.append((node, make, fut, deadline, response_timeout, caps))
        self._client.wakeup()
        return fut

    def fail_all(self, error: BaseException) -> None:
        with self._lock:
            items, self._queue = list(self._queue), collections.deque()
        for _, _, fut, _, _, _ in items:
            if not fut.done():
                fut.set_exception(error)

    def pump(self) -> None:
        client = self._client
        with self._lock:
            items, self._queue = list(self._queue), collections.deque()
        keep = []
        now = time.monotonic()
        for item in items:
            node, make, fut, deadline, response_timeout, caps = item
            target = client.least_loaded_node() if node is None else node
            conn = None if target is None else client.connection(target)
            if conn is None or not conn.ready:
                if node is not None and client.broker(node) is None:
                    # forgotten (a rebootstrap, a broker gone from the metadata): no wait can bring it back
                    fut.set_exception(NoBrokersAvailableError(f"node {node} is not a broker the client knows now"))
                elif now >= deadline:
                    fut.set_exception(NoBrokersAvailableError(
                        f"node {target} could not be reached in time" if target is not None else "no broker reachable"))
                elif conn is None and node is not None:
                    fut.set_exception(NoBrokersAvailableError(f"node {node} is not reachable now"))
                else:
                    keep.append(item)
                continue
            try:
                request = make(conn.versions)
            except Exception as e:   # a request that cannot be built fails alone
                fut.set_exception(e)
                continue
            api_key = type(request).API_KEY
            version = capped_version(conn.versions, api_key, caps)
            if version is None:
                fut.set_exception(protocol.no_common_version(api_key, conn.broker_ranges.get(api_key)))
                continue
            sent = client.send(target, request, version, timeout=response_timeout)
            sent.add_done_callback(lambda f, fut=fut: _relay(f, fut))
        if keep:
            with self._lock:
                self._queue.extendleft(reversed(keep))

    def pending(self) -> bool:
        with self._lock:
            return bool(self._queue)


def _relay(source: Future, target: Future) -> None:
    if source.failed():
        target.set_exception(source.exception())   # type: ignore[arg-type]
    else:
        target.set_result(source.value)


class CoordinatorLink:
    """The coordinator of one key (a group id, or a transactional id), for
    requests sent through a :class:`RequestPump`: found with
    FindCoordinator, one lookup at a time, and found again after the
    coordinator moved or could not be reached. ``on_found(node)`` runs in
    the I/O thread when a lookup succeeds."""

    def __init__(self, pump: RequestPump, client: Client, key: str, key_type: int, backoff_ms: int,
                 on_found: Optional[Callable[[int], None]] = None) -> None:
        self._pump = pump
        self._client = client
        self.key = key
        self.key_type = key_type
        self._backoff = backoff_ms / 1000.0
        self._on_found = on_found
        self._lock = threading.Lock()
        self.node: Optional[int] = None
        self._future: Optional[Future] = None
        # the node last said found, and last said lost: a coordinator that keeps moving back and forth
        # (NOT_COORDINATOR over and over) is said at INFO once, then at DEBUG
        self._said_found: Optional[int] = None
        self._said_lost: Optional[int] = None

    def lookup(self) -> Future:
        """The future of the coordinator's node id."""
        with self._lock:
            fut = self._future
            if fut is not None and not fut.done():
                return fut
            result: Future = Future()
            self._future = result
        sent = self._pump.submit(None, lambda v: find_coordinator_request(v, self.key, self.key_type))

        def done(f: Future) -> None:   # runs in the I/O thread
            try:
                if f.failed():
                    raise f.exception()   # type: ignore[misc]
                broker = coordinator_from_response(f.value, self.key, self.key_type)
            except BaseException as e:
                log.debug("%r: FindCoordinator failed: %s", self.key, e)
                result.set_exception(e)
                return
            remember_broker(self._client, broker)
            self.node = broker.node_id
            level = logging.DEBUG if broker.node_id == self._said_found else logging.INFO
            if level == logging.INFO:
                self._said_found, self._said_lost = broker.node_id, None
            log.log(level, "coordinator of %r is node %s (%s:%s)", self.key, broker.node_id, broker.host, broker.port)
            if self._on_found is not None:
                self._on_found(broker.node_id)
            result.set_result(broker.node_id)

        sent.add_done_callback(done)
        return result

    def forget(self, node: Optional[int]) -> bool:
        """The coordinator ``node`` failed (or moved): look it up again next
        time. True when it was the current one."""
        with self._lock:
            if node is None or self.node != node:
                return False
            level = logging.DEBUG if node == self._said_lost else logging.INFO
            self._said_lost = node
            log.log(level, "coordinator node %s of %r is unavailable; looking it up again", node, self.key)
            self.node = None
            return True

    def ensure(self, deadline: float) -> int:
        """The coordinator's node id, looked up if needed (blocking)."""
        return run_blocking(self.ensure_steps(deadline))

    def ensure_steps(self, deadline: float) -> Steps:
        """:meth:`ensure` as steps (another thread, or the loop, drives the pump's client)."""
        while True:
            node = self.node
            if node is not None:
                return node
            fut = self.lookup()
            yield Wait(fut, max(0.0, deadline - time.monotonic()))
            if not fut.done():
                raise KafkaTimeoutError(f"no coordinator found for {self.key!r} in time")
            e = fut.exception()
            if e is None:
                return fut.value
            if not getattr(e, "retriable", False) or time.monotonic() >= deadline:
                raise e
            yield self.backoff(deadline)

    def request(self, make: Callable[[Mapping[int, int]], Any], deadline: float) -> Any:
        """Send to the coordinator and wait (blocking): :meth:`request_steps`."""
        return run_blocking(self.request_steps(make, deadline))

    def request_steps(self, make: Callable[[Mapping[int, int]], Any], deadline: float,
                      caps: Mapping[int, int] = MAX_VERSIONS) -> Steps:
        """Send to the coordinator and wait for the answer: the coordinator is
        found first, and again after a connection failure or a request it
        left unanswered for ``request_timeout_ms`` (killed, hung or cut
        off: another broker may coordinate the key by now), until
        ``deadline``. ``caps``: as :meth:`RequestPump.submit`'s."""
        while True:
            node = yield from self.ensure_steps(deadline)
            left = max(0.0, deadline - time.monotonic())
            fut = self._pump.submit(node, make, left, caps=caps)
            yield Wait(fut, left)
            if not fut.done():
                raise KafkaTimeoutError(f"no answer from the coordinator of {self.key!r} within {left:.1f} s")
            e = fut.exception()
            if e is None:
                return fut.value
            if not isinstance(e, (ConnectionLostError, NoBrokersAvailableError, RequestTimedOutError)):
                raise e
            self.forget(node)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"request to the coordinator of {self.key!r} failed: {e}") from e
            yield self.backoff(deadline)

    def backoff(self, deadline: float) -> Sleep:
        """The step that waits ``retry_backoff_ms`` (at most until ``deadline``)."""
        return Sleep(max(0.0, min(self._backoff, deadline - time.monotonic())))

    def sleep(self, deadline: float) -> None:
        time.sleep(self.backoff(deadline).seconds)
