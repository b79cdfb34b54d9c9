"""A streaming query's progress as a consumer group's committed offsets,
so that the lag tools operators already run see it
(``kafka-consumer-groups.sh --describe``, ``kwire groups describe``,
Burrow, cloud consoles): ``commitOffsetsToGroup=true`` on
``format("kwire")``'s streaming source.

Spark's checkpoint stays the source of truth: the offsets are written
once a micro-batch is done and never read back. The reader learns it at
the next trigger (``latestOffset``, which Spark calls once the batch
before is in its commit log: from 4.2 with where the query stands, on 4.0
and 4.1 for the batch the reader planned last) and from Spark's own
``commit(end)``; so an idle query's last batch is committed at its next
trigger. On 4.0 and 4.1 a ``Trigger.AvailableNow`` query's last batch is
not (Spark asks those readers nothing after it). Kafka's connector has no
such option: its queries are invisible to lag tools.

* **The group**: ``kafka.group.id`` when given, else derived from what
  the query reads (:func:`derived_group`: ``groupIdPrefix``, default
  ``kwire-spark``, and a digest of the bootstrap servers and the
  subscription), the same across restarts of the query. Two queries that
  read the same subscription of the same cluster would share it: give
  them a ``kafka.group.id`` each.
* **The commit**: OffsetCommit as an admin client makes it (no member,
  generation -1: Java's ``Admin.alterConsumerGroupOffsets``), which the
  group's coordinator takes while the group has no active member, as
  Spark's group has none: its executors assign partitions. Each
  partition's offset is the batch's end, the next record to read.
* **Never in the query's way**: a commit that fails (no coordinator, no
  ACL, a group with members) is logged, once when the commits start
  failing and once when they work again, and the query goes on; each
  commit waits :data:`COMMIT_TIMEOUT` s at most, and after a failure none
  is tried for :data:`RETRY_BACKOFF` s (an idle query's reader is asked for
  offsets every few milliseconds: no request, and no wait, at each).
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any, Dict, Mapping, Optional

from kwire.admin import Admin
from kwire.errors import KwireError
from kwire.types import OffsetAndMetadata

__all__ = ["LagCommitter", "derived_group", "COMMIT_TIMEOUT", "RETRY_BACKOFF", "DEFAULT_PREFIX"]

log = logging.getLogger(__name__)

#: Seconds a micro-batch's commit may take before it is given up (the query goes on).
COMMIT_TIMEOUT = 10.0
#: Seconds after a failed commit before the next is tried (the triggers between commit nothing).
RETRY_BACKOFF = 30.0
#: The derived group's prefix unless ``groupIdPrefix`` is given.
DEFAULT_PREFIX = "kwire-spark"


def derived_group(prefix: Optional[str], bootstrap: str, subscription: str) -> str:
    """The group of a query without ``kafka.group.id``: ``<prefix>-<12 hex
    digits>``, a digest of the cluster's bootstrap servers and the
    subscription (``subscribe=a,b``, ``assign={...}``, ...)."""
    digest = hashlib.sha256(f"{bootstrap}\0{subscription}".encode()).hexdigest()[:12]
    return f"{prefix or DEFAULT_PREFIX}-{digest}"


class LagCommitter:
    """Commits each finished micro-batch's end offsets to ``group`` through
    ``admin`` (the reader's own, made when first needed)."""

    def __init__(self, group: str, retry_backoff: float = RETRY_BACKOFF) -> None:
        self.group = group
        self.retry_backoff = retry_backoff
        self._retry_at = 0.0                        # monotonic: no commit is tried before it (after a failure)
        self.skipped = 0                           # commits not tried, within a backoff
        self._failing = False
        self._last: Optional[Dict[Any, int]] = None   # the offsets last committed
        self.commits = 0                           # commits that succeeded
        log.info("kwire source: each micro-batch's end offsets are committed to group %r (commitOffsetsToGroup): "
                 "lag tools show the query's lag there", group)

    def commit(self, admin: Admin, end: Mapping[Any, int]) -> bool:
        """``end`` ({TopicPartition: offset}) committed, unless it is what
        the last commit that worked committed; False (logged) when that
        failed, and, without trying, within the backoff after a failure."""
        if not end or dict(end) == self._last:
            return True
        if time.monotonic() < self._retry_at:
            self.skipped += 1
            return False
        offsets: Dict[Any, OffsetAndMetadata] = {
            (tp.topic, tp.partition): OffsetAndMetadata(off, "kwire spark query") for tp, off in end.items()}
        started = time.monotonic()
        try:
            admin.alter_group_offsets(self.group, offsets, timeout=COMMIT_TIMEOUT)
        except KwireError as e:
            if not self._failing:
                log.warning("kwire source: committing the micro-batch's end offsets to group %r failed (%s: %s); "
                            "the query goes on, lag tools show the last commit that worked (logged again when "
                            "commits work again)", self.group, type(e).__name__, e)
            self._failing = True
            self._retry_at = time.monotonic() + self.retry_backoff
            return False
        if self._failing:
            log.warning("kwire source: committing to group %r works again", self.group)
        self._failing = False
        self._last = dict(end)
        self.commits += 1
        log.debug("kwire source: committed %d partitions to group %r in %.0f ms", len(offsets), self.group,
                  (time.monotonic() - started) * 1000)
        return True
