"""A share group member's membership (KIP-932): ShareGroupHeartbeat.

The coordinator assigns; the member only says who it is and what it
subscribes to, as Java's ``ShareMembershipManager`` does:

- **member id**: generated here (a random UUID, Kafka's base64 form) and kept
  for the consumer's life, across rejoins; ShareFetch and ShareAcknowledge
  carry it too;
- **joining**: member epoch 0 with the subscribed topic names (and
  ``client_rack``); later heartbeats send the names only when they changed;
- **heartbeats** every ``HeartbeatIntervalMs`` the coordinator gives; the
  answer's assignment (topic ids and partitions, when it changed) is the
  member's at once: there is nothing to hand back first, records are
  acknowledged one by one wherever they came from;
- **errors**: FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID drop the assignment
  and rejoin at once with the same id; NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE and a lost connection look the coordinator up
  again; COORDINATOR_LOAD_IN_PROGRESS and other retriable errors are retried
  after ``retry_backoff_ms``; the rest (GROUP_AUTHORIZATION_FAILED,
  GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, ...) is fatal: every later poll
  raises it;
- **leaving** (close, unsubscribe): member epoch -1;
- **liveness**: a member that does not poll within ``max_poll_interval_ms``
  leaves, and rejoins at its next poll.

Single-threaded: :meth:`ShareMembership.drive` runs in the consumer's poll,
the answers' callbacks in the same thread's I/O.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from typing import Any, Dict, FrozenSet, Iterable, List, Optional

from kwire import protocol
from kwire.client import Client, NoBrokersAvailableError
from kwire.consumer_membership import new_member_id
from kwire.coordinator import COORDINATOR_ERRORS, CoordinatorLink
from kwire.future import Future, KafkaTimeoutError
from kwire.net import ConnectionLostError, RequestTimedOutError
from kwire.protocol.api_keys import ErrorCode

__all__ = ["ShareMembership", "LEAVE_EPOCH"]

log = logging.getLogger("kwire.share")

LEAVE_EPOCH = -1
UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"

_REJOIN = (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID)


class ShareMembership:
    """One member of ``group_id``, its heartbeats sent through ``link``."""

    def __init__(self, client: Client, link: CoordinatorLink, pump: Any, group_id: str, cfg: Dict[str, Any]) -> None:
        self._client = client
        self._link = link
        self._pump = pump
        self.group_id = group_id
        self.cfg = cfg
        self.member_id = new_member_id()
        self.epoch = 0
        self.state = UNJOINED
        self.topics: List[str] = []                   # the subscription, sorted
        self.assignment: Dict[uuid.UUID, FrozenSet[int]] = {}
        self.fatal: Optional[BaseException] = None
        self._sent_topics: Optional[List[str]] = None  # what the coordinator has (None: send everything)
        self._sent_rack = False
        self._next = 0.0
        self._in_flight = False
        self._last_poll = time.monotonic()

    # ----------------------------------------------------------- the consumer's side
    def subscribe(self, topics: Iterable[str]) -> None:
        self.topics = sorted(set(topics))
        if not self.topics:
            return
        if self.state == UNJOINED:
            self._join("subscribed")
        else:
            self._next = 0.0                          # tell the coordinator now

    def polled(self, now: float) -> None:
        if self.state == UNJOINED and self.topics and self.fatal is None:
            self._join("polled again after max_poll_interval_ms passed")
        self._last_poll = now

    def wait_time(self, now: float) -> float:
        if self.state == UNJOINED or self._in_flight:
            return math.inf
        return max(0.0, self._next - now)

    def drive(self, now: float) -> None:
        if self.state == UNJOINED or self._in_flight or now < self._next:
            return
        if now - self._last_poll > self.cfg["max_poll_interval_ms"] / 1000.0:
            log.warning("share group %s: member %s did not poll within max_poll_interval_ms (%s ms): leaving the "
                        "group; it rejoins at its next poll", self.group_id, self.member_id,
                        self.cfg["max_poll_interval_ms"])
            self._send_leave()
            self._forget()
            return
        node = self._link.node
        if node is None:
            self._link.lookup()
            self._next = now + self.cfg["retry_backoff_ms"] / 1000.0
            return
        epoch, topics = self.epoch, self.topics
        send_topics = topics if self._sent_topics != topics else None
        rack = self.cfg.get("client_rack") if not self._sent_rack else None
        self._in_flight = True
        fut = self._pump.submit(node, lambda v: protocol.message("ShareGroupHeartbeatRequest")(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, rack_id=rack,
            subscribed_topic_names=send_topics))
        self._sent_topics, self._sent_rack = topics, True
        fut.add_done_callback(lambda f: self._answered(node, epoch, now, f))

    def leave_steps(self, deadline: float) -> Any:
        """Leave the group (epoch -1), waiting for the answer until ``deadline``."""
        if self.state == UNJOINED or self._link.node is None:
            self._forget()
            return
        fut = self._send_leave()
        self._forget()
        while not fut.done() and time.monotonic() < deadline:
            yield min(0.05, max(0.0, deadline - time.monotonic()))
            self._pump.pump()

    # ----------------------------------------------------------- internal
    def _join(self, reason: str) -> None:
        log.info("share group %s: member %s joining: %s", self.group_id, self.member_id, reason)
        self.state = JOINING
        self.epoch = 0
        self._sent_topics, self._sent_rack = None, False
        self._next = 0.0

    def _forget(self) -> None:
        self.state = UNJOINED
        self.epoch = 0
        self.assignment = {}
        self._sent_topics, self._sent_rack = None, False

    def _send_leave(self) -> Future:
        node = self._link.node
        return self._pump.submit(node, lambda v: protocol.message("ShareGroupHeartbeatRequest")(
            group_id=self.group_id, member_id=self.member_id, member_epoch=LEAVE_EPOCH))

    def _retry(self, now: float) -> None:
        self._sent_topics, self._sent_rack = None, False
        self._next = now + self.cfg["retry_backoff_ms"] / 1000.0

    def _answered(self, node: int, epoch: int, sent_at: float, fut: Future) -> None:
        self._in_flight = False
        now = time.monotonic()
        if self.state == UNJOINED or epoch != self.epoch:
            return                                    # left or rejoined meanwhile
        error = fut.exception()
        if error is not None:
            log.debug("share group %s: heartbeat failed: %s", self.group_id, error)
            self._retry(now)
            if isinstance(error, (ConnectionLostError, NoBrokersAvailableError, RequestTimedOutError)):
                self._link.forget(node)
            elif not getattr(error, "retriable", False) and not isinstance(error, KafkaTimeoutError):
                self._fail(error)
            return
        resp = fut.value
        if resp.error_code:
            self._refused(node, resp, now)
            return
        joined = self.epoch == 0
        if resp.member_epoch >= 0:
            self.epoch = resp.member_epoch
        self.state = STABLE
        self._next = sent_at + max(0, resp.heartbeat_interval_ms) / 1000.0
        if joined:
            log.info("share group %s: member %s joined with epoch %s", self.group_id, self.member_id, self.epoch)
        if resp.assignment is not None:
            target: Dict[uuid.UUID, FrozenSet[int]] = {}
            for t in resp.assignment.topic_partitions or ():
                target[t.topic_id] = frozenset(target.get(t.topic_id, frozenset()) | set(t.partitions))
            if target != self.assignment:
                log.info("share group %s: member %s assigned %s", self.group_id, self.member_id,
                         {str(k): sorted(v) for k, v in target.items()})
                self.assignment = target

    def _refused(self, node: int, resp: Any, now: float) -> None:
        code = resp.error_code
        err = protocol.error_for(code, api="ShareGroupHeartbeat", message=resp.error_message or None)
        self._retry(now)
        if code in _REJOIN:
            log.info("share group %s: member %s: %s; rejoining", self.group_id, self.member_id, err)
            self.assignment = {}
            self._join(str(err))
        elif code in COORDINATOR_ERRORS:
            self._link.forget(node)
            self._next = now
        elif getattr(err, "retriable", False):
            log.debug("share group %s: heartbeat: %s; retrying", self.group_id, err)
        else:
            self._fail(err)

    def _fail(self, error: BaseException) -> None:
        log.error("share group %s: member %s cannot stay in the group: %s", self.group_id, self.member_id, error)
        self._forget()
        self.fatal = error
