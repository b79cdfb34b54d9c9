"""One broker's share session (KIP-932) as a share group member sees it,
without I/O.

A member's ShareFetch and ShareAcknowledge requests to one broker form a
session, keyed by the group and the member id, whose epoch both advance:

- epoch 0 opens it (closing any the broker still has for the member) and
  names every partition the member fetches there; it carries no
  acknowledgements (the broker refuses them);
- each later request names only the partitions added since, and forgets
  the ones dropped (``ForgottenTopicsData``); a partition named only to
  carry acknowledgements (no longer fetched) is named and forgotten at once;
- epoch -1 closes it: the broker takes the last acknowledgements, then
  releases every record still acquired by the member there.

After any answer without a session error the epoch advances (wrapping to 1);
SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH and
SHARE_SESSION_LIMIT_REACHED, a failed request or a new connection start
again at 0. One request of a session is in flight at a time.

:class:`ShareSession` keeps the epoch and the partitions the broker holds;
:meth:`ShareSession.plan` says what the next request names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Set, Tuple

from kwire.protocol.api_keys import ErrorCode
from kwire.share.acks import AckBatch

__all__ = ["ShareSession", "Plan", "SESSION_ERRORS", "INITIAL_EPOCH", "FINAL_EPOCH", "next_epoch"]

INITIAL_EPOCH, FINAL_EPOCH = 0, -1

#: The errors that end a session: the next request opens a new one.
SESSION_ERRORS = frozenset({ErrorCode.SHARE_SESSION_NOT_FOUND, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                            ErrorCode.SHARE_SESSION_LIMIT_REACHED})

#: A partition of a session: (topic id, partition).
Part = Tuple[object, int]

_MAX_EPOCH = 2 ** 31 - 1


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass
class Plan:
    """What one request of the session names: its epoch; the partitions
    named (added, or carrying acknowledgements) with their batches; the
    ones forgotten; whether a batch renews a lock (``IsRenewAck``)."""

    epoch: int
    named: Dict[Part, List[AckBatch]] = field(default_factory=dict)
    forgotten: List[Part] = field(default_factory=list)
    renew: bool = False
    fetched: Set[Part] = field(default_factory=set)       # the session's partitions once the request is answered

    def empty(self) -> bool:
        return not self.named and not self.forgotten


class ShareSession:
    """The session with one broker (``node``)."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.epoch = INITIAL_EPOCH
        self.partitions: Set[Part] = set()      # what the broker holds for the member (after the last answer)
        self.in_flight: Optional[Plan] = None
        self.generation = 0                     # counts resets: records fetched in an earlier one are not ours now

    @property
    def is_new(self) -> bool:
        return self.epoch == INITIAL_EPOCH

    def plan(self, wanted: Set[Part], acks: Mapping[Part, List[AckBatch]], close: bool = False) -> Plan:
        """The next request: fetching ``wanted`` (none when closing) and
        carrying ``acks``. A new session's request carries none: the caller
        keeps them for the next one. Closing needs a session (not
        :attr:`is_new`)."""
        epoch = FINAL_EPOCH if close else self.epoch
        plan = Plan(epoch=epoch, fetched=set() if close else set(wanted))
        if epoch == INITIAL_EPOCH:
            plan.named = {p: [] for p in sorted(wanted, key=_order)}
            return plan
        if not close:
            for p in sorted(wanted - self.partitions, key=_order):
                plan.named[p] = []
            plan.forgotten = sorted(self.partitions - wanted, key=_order)
        for p, batches in acks.items():
            if not batches:
                continue
            plan.named[p] = list(batches)
            if not close and p not in wanted and p not in self.partitions:
                plan.forgotten.append(p)        # named for its acknowledgements only: not added
        plan.renew = any(4 in types for batches in plan.named.values() for _, _, types in batches)
        return plan

    def sent(self, plan: Plan) -> None:
        self.in_flight = plan

    def answered(self, error: int) -> None:
        """The in-flight request's answer: its top-level error code (0 for none)."""
        plan, self.in_flight = self.in_flight, None
        if error in SESSION_ERRORS or (plan is not None and plan.epoch == FINAL_EPOCH):
            self.reset()                        # gone, or closed
            return
        if plan is not None:
            self.partitions = plan.fetched
        self.epoch = next_epoch(self.epoch)

    def failed(self) -> None:
        """The in-flight request failed (the connection, a timeout): the
        broker's session may be gone; the next request opens a new one."""
        self.in_flight = None
        self.reset()

    def reset(self) -> None:
        """The session is gone (or closed): the records acquired in it are the broker's to release, and
        acknowledgements of them cannot go in a new one (:attr:`generation` moves on)."""
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self.generation += 1


def _order(p: Part) -> Tuple[str, int]:
    return (str(p[0]), p[1])
