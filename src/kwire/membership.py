"""The seam between a consumer group member's own work and its membership
protocol.

:class:`kwire.group.GroupCoordinator` does what every group member does,
whatever the protocol: the subscription, commits, committed positions, the
rebalance listener and the handover of revoked, assigned and lost
partitions, leaving on close and unsubscribe, the background thread and its
request pump. How the member gets into a group and learns its assignment
(the classic JoinGroup / SyncGroup / Heartbeat, :mod:`kwire.classic`;
KIP-848's ConsumerGroupHeartbeat, :mod:`kwire.consumer_membership`) is a
:class:`Membership`'s, which the
coordinator drives through the methods below and which calls back into the
coordinator only through :class:`MembershipHost`.

Threads: the coordinator's background thread calls :meth:`Membership.drive`
and :meth:`Membership.wait_time`, and runs the callbacks of the requests a
membership sends; the application's thread (inside ``poll()``, ``commit()``,
``close()``...) calls the rest. Both sides share one re-entrant lock (the
coordinator's, given to the membership when it is made): "lock held" below
means that lock.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Pattern, Protocol, Set

from kwire import protocol
from kwire.future import Future
from kwire.types import TopicPartition

log = logging.getLogger("kwire.group")

__all__ = ["UNJOINED", "JOINING", "STABLE", "AssignmentChange", "Membership", "MembershipHost", "HostedMembership"]

#: A membership's states: not in a group; on its way in (or to a new
#: assignment); in the group with an assignment.
UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"


class AssignmentChange(NamedTuple):
    """A step of a rebalance the coordinator carries out in ``poll()``:
    hand ``revoked`` back (auto commit first, then
    ``on_partitions_revoked``), then take ``added`` in
    (``on_partitions_assigned``, committed positions). ``added`` None:
    nothing to take in; the membership goes on (joins) once ``revoked`` is
    handed back."""

    revoked: Set[TopicPartition]
    added: Optional[Set[TopicPartition]]


class Membership(Protocol):
    """A consumer group membership protocol, as the coordinator drives it."""

    #: (read under the lock) the generation (classic) or member epoch of
    #: the member's assignment; negative while it has none. Commits carry it.
    generation: int
    #: (read under the lock) the member id the coordinator gave; "" while
    #: it has none. Commits carry it.
    member_id: str
    #: (read under the lock) UNJOINED, JOINING or STABLE.
    state: str

    def drive(self, now: float) -> None:
        """(background thread, lock not held) One turn of the protocol at
        monotonic time ``now``: send what is due (joining, heartbeats,
        metadata checks) through the host's request pump, without waiting
        for answers."""

    def wait_time(self, now: float) -> float:
        """(background thread) How long, in seconds, the background thread
        may wait before the next :meth:`drive` (``math.inf``: nothing is
        due; the coordinator waits 0.1 s at the most anyway)."""

    def on_poll(self) -> None:
        """(application thread) The application called ``poll()``: note it
        for the liveness check of ``max_poll_interval_ms``."""

    def next_change(self) -> Optional[AssignmentChange]:
        """(application thread, lock not held) The next rebalance step,
        asked for only while no handover is in progress: an assignment
        received, to take in, or the revocation to make before (re)joining;
        None when there is none. The coordinator carries the change out
        (maybe over several polls) and then calls :meth:`handed_back`; it
        asks again at once, until None. An assignment is returned once; a
        step that waits for :meth:`handed_back` (the revocation before a
        join) is returned again if asked for before it (the handover was
        dropped: the partitions were lost meanwhile)."""

    def handed_back(self, change: AssignmentChange) -> None:
        """(application thread, lock not held) The partitions of a change
        from :meth:`next_change` were handed back; its ``added`` are taken
        in right after this returns. With ``added`` None, go on: join."""

    def subscription_changed(self) -> None:
        """(application thread, lock held) The application subscribed anew
        (the host's topics, pattern and listener are set already): rejoin
        with the new subscription."""

    def rejoin(self, reason: str) -> None:
        """(lock held) Rejoin the group, from the next ``poll()`` on (what
        to revoke first, if anything, :meth:`next_change` says); ``reason``
        is logged once."""

    def enforce_rebalance(self, reason: str) -> None:
        """(application thread, lock held) The application asks for a
        rebalance (``Consumer.enforce_rebalance``), for ``reason``."""

    def reset(self, reason: str, member_unknown: bool = False) -> None:
        """(lock held) The coordinator no longer knows the member's
        generation (``member_unknown``: nor its member id): forget it, report
        the member's partitions lost (:meth:`MembershipHost.lose_partitions`)
        and rejoin."""

    def leave(self, reason: str, deadline: float) -> Optional[Future]:
        """(application thread, lock not held) Leave the group, for close()
        and unsubscribe(): the partitions are handed back (or lost) already.
        Forget the generation, stop joining, and tell the coordinator (by
        monotonic ``deadline``) where the protocol says so: the future of
        that request (None when none is sent), which the caller waits for."""

    def coordinator_changed(self, node: Optional[int]) -> None:
        """(any thread) The coordinator was found at ``node``, or (None)
        forgotten after it failed or moved."""

    def halt(self) -> None:
        """(lock held) The group failed for good (its background thread
        died): the member is in no group; :meth:`drive` is not called
        again."""


class MembershipHost(Protocol):
    """What a :class:`Membership` may use of the coordinator
    (:class:`kwire.group.GroupCoordinator`)."""

    cfg: Mapping[str, Any]
    group_id: str
    group_instance_id: Optional[str]

    @property
    def coordinator(self) -> Optional[int]:
        """The coordinator's node id; None while unknown."""

    @property
    def owned(self) -> Set[TopicPartition]:
        """The partitions the member owns now (the live set: do not change
        it). Read it in the application thread, which alone changes it, or
        with the lock held."""

    @property
    def pattern(self) -> Optional[Pattern[str]]:
        """The subscription's pattern (None: a list of topics)."""

    def subscription(self) -> Set[str]:
        """The subscribed topics (for a pattern: those it matched last)."""

    def match_topics(self, topics: Iterable[str]) -> bool:
        """(lock held) A pattern subscription's topics become those of the
        cluster's ``topics`` it matches; True when that changed them."""

    def submit(self, node: Optional[int], make: Callable[[Mapping[int, int]], Any],
               timeout: Optional[float] = None, response_timeout: Optional[float] = None) -> Future:
        """Send ``make(versions)`` to ``node`` (None: any broker) through the
        request pump: the future of its response."""

    def metadata(self, topics: Optional[List[str]]) -> Future:
        """A Metadata request for ``topics`` (None: every topic)."""

    def lookup_coordinator(self) -> Future:
        """The future of the coordinator's node id (one lookup at a time)."""

    def coordinator_dead(self, node: Optional[int]) -> None:
        """The coordinator ``node`` failed or moved: look it up again."""

    def lose_partitions(self) -> None:
        """(lock held) The member's partitions are lost (they may belong to
        another member already): the next ``poll()`` calls
        ``on_partitions_lost`` and drops them, committing nothing."""

    def set_fatal(self, error: BaseException) -> None:
        """(lock held) Every later ``poll()`` raises ``error``."""

    def wake_consumer(self, _done: Any = None) -> None:
        """(any thread) Something a ``poll()`` takes in came: wake the
        consumer (usable as a future's done callback)."""


class HostedMembership:
    """The start of every :class:`Membership`: what it keeps of its host
    (the options, the group and instance ids, the host itself), the lock
    it shares with it, and what every protocol does alike (the time of the
    last ``poll()`` and its check, halting, saying a retried failure once)."""

    state: str

    def __init__(self, host: MembershipHost, lock: Any) -> None:
        self.cfg = host.cfg
        self.group_id: str = host.group_id
        self.group_instance_id: Optional[str] = host.group_instance_id
        self._host = host
        self._lock = lock
        self._failures: Dict[str, str] = {}     # what last failed, by step: said once while it repeats
        self._last_poll = time.monotonic()      # the application's last poll() (max_poll_interval_ms)

    def on_poll(self) -> None:
        self._last_poll = time.monotonic()

    def halt(self) -> None:
        self.state = UNJOINED

    def _send_leave_request(self, node: int, make: Callable[[Mapping[int, int]], Any], timeout: float, api: str,
                            left: str, *args: Any) -> Future:
        """(application thread, lock not held) Send the request that
        leaves the group, its answer due within ``timeout``; its outcome is
        logged when it comes (``left % args`` when it worked). Returns its
        future (the caller waits for it, or not)."""
        fut = self._host.submit(node, make, timeout, timeout)

        def answered(f: Future) -> None:
            if f.failed():
                log.info("group %s: leaving (%s) failed: %s", self.group_id, api, f.exception())
            elif f.value.error_code:
                log.info("group %s: leaving: %s", self.group_id, protocol.error_for(f.value.error_code, api=api))
            else:
                log.info(left, *args)

        fut.add_done_callback(answered)
        return fut

    def _poll_overdue(self, now: float) -> bool:
        """(I/O thread) The application has not called ``poll()`` within
        ``max_poll_interval_ms``: say so (the membership then leaves)."""
        if now - self._last_poll <= self.cfg["max_poll_interval_ms"] / 1000.0:
            return False
        log.warning("group %s: no poll() for more than max_poll_interval_ms (%s ms); leaving the group. Process "
                    "less per poll (max_poll_records) or raise max_poll_interval_ms.",
                    self.group_id, self.cfg["max_poll_interval_ms"])
        return True

    def _say_failure(self, step: str, error: BaseException, message: str, *args: Any) -> None:
        """Log a failure of ``step`` that is retried: at INFO the first
        time (or when the error changes), at DEBUG while it repeats, so that
        a retry loop does not flood the log."""
        text = f"{type(error).__name__}: {error}"
        level = logging.DEBUG if self._failures.get(step) == text else logging.INFO
        self._failures[step] = text
        log.log(level, message, *args)

    def _step_succeeded(self, step: str) -> None:
        """``step`` worked: its next failure is said again."""
        self._failures.pop(step, None)
