"""Incremental fetch sessions (KIP-227): the consumer's view of what one
broker's fetch session holds, and what the next Fetch of it sends.

A Fetch with session id 0 and epoch 0 (a *full* fetch) names every
partition and asks the broker to cache them as a session; its answer gives
the session's id (0: the broker keeps none, e.g. its cache is full, or it
does not do sessions, as Tansu). Each later Fetch of the session carries its
id and the next epoch (1, 2, ... wrapping to 1), names only the partitions
added or whose fetch offset, leader epoch or max bytes changed, and lists
those that left in ``forgotten_topics_data``; the broker fetches every
partition the session holds and answers only those with something new (data,
a new high watermark, log start or last stable offset, an error). A
partition the answer leaves out has nothing new.

:class:`FetchSession` is that bookkeeping alone, without I/O: the fetcher
(:mod:`kwire.fetcher`) decides which partitions go in a session's Fetch,
sends it and reports the outcome. One request of a session is in flight at
a time (its epochs are a sequence). Any failure of it (a session error:
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
FETCH_SESSION_TOPIC_ID_ERROR; another error of the whole Fetch; a failed or
timed-out request; a new connection; a topic id that changed) makes the
next one a full fetch, as Java's ``FetchSessionHandler`` does: with the old
id (epoch 0 closes that session and opens a new one) or, when the broker
no longer knows the id, with id 0. No position depends on the session:
the fetcher's positions decide every fetch offset, so a reset refetches
from the same offsets and no record is lost, repeated or skipped.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from kwire.protocol.api_keys import ErrorCode
from kwire.types import TopicPartition

__all__ = ["FetchSession", "Part", "SESSION_ERRORS", "INITIAL_EPOCH", "FINAL_EPOCH"]

INITIAL_EPOCH = 0        # a full fetch: opens a session (closing the one named, if any)
FINAL_EPOCH = -1         # no session: a sessionless full fetch (session id 0), or closing the id named
_MAX_EPOCH = 2**31 - 1

#: The errors of a whole Fetch that end a session: fetched again at once, in full.
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                            ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR})

#: What a session holds of a partition: (topic id, fetch offset, current leader epoch, max bytes).
Part = Tuple[Any, Optional[int], int, int]


class FetchSession:
    """One broker's fetch session as the consumer sees it: its id, the epoch
    of the next request, the partitions the broker holds for it, whether a
    request of it is in flight, and the connection it lives on."""

    __slots__ = ("node", "id", "epoch", "parts", "busy", "conn")

    def __init__(self, node: int) -> None:
        self.node = node
        self.id = 0                                    # 0: none yet
        self.epoch = INITIAL_EPOCH                     # of the next request
        self.parts: Dict[TopicPartition, Part] = {}    # what the broker holds (as of the request in flight)
        self.busy = False                              # a request of it is in flight
        self.conn: Optional[Any] = None                # the connection it was used on

    @property
    def full(self) -> bool:
        """Whether the next request is a full fetch."""
        return self.epoch == INITIAL_EPOCH

    def reset(self, *, known: bool = True) -> None:
        """The next request is a full fetch: one that closes this session and
        opens a new one, or (``known`` false: the broker has no such
        session any more) one that only opens a new one."""
        if not known:
            self.id = 0
        self.epoch, self.parts = INITIAL_EPOCH, {}

    def use_on(self, conn: Any) -> None:
        """The session's requests go on ``conn``; a connection other than the
        last one (a reconnect) starts again with a full fetch, as Java's
        client does after a disconnect."""
        if conn is not self.conn:
            if self.conn is not None:
                self.reset()
            self.conn = conn

    def next_request(self, want: Dict[TopicPartition, Part]) -> Tuple[int, int, Dict[TopicPartition, Part],
                                                                        List[Tuple[TopicPartition, Any]]]:
        """The next request of the session, fetching exactly ``want``:
        (session id, epoch, the partitions to send, the (partition, topic id)
        pairs to forget). The session then holds ``want`` and is busy until
        :meth:`answered` or :meth:`failed`."""
        old = self.parts
        if not self.full and any(tp in want and want[tp][0] != p[0] for tp, p in old.items()):
            self.reset()              # a topic recreated under the same name: a new session names it anew
        if self.full:
            send, forget = want, []
        else:
            send = {tp: p for tp, p in want.items() if old.get(tp) != p}
            forget = [(tp, p[0]) for tp, p in old.items() if tp not in want]
        self.parts, self.busy = dict(want), True
        return self.id, self.epoch, send, forget

    def answered(self, error_code: int, session_id: int) -> None:
        """The broker answered the request in flight (``error_code``: the
        whole Fetch's error; ``session_id``: the answer's)."""
        self.busy = False
        if error_code:
            self.reset(known=error_code != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        elif self.full or session_id == 0:
            # a full fetch's answer opens the session named (0: none); an incremental one answered with id 0:
            # the broker closed the session
            self.id, self.parts = session_id, self.parts if session_id else {}
            self.epoch = 1 if session_id else INITIAL_EPOCH
        else:
            self.epoch = self.epoch + 1 if self.epoch < _MAX_EPOCH else 1

    def failed(self) -> None:
        """The request in flight failed (no answer): a full fetch next, closing this session."""
        self.busy = False
        self.reset()
