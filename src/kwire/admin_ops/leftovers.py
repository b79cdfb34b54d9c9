"""What a Spark query's or job's exactly-once sink
(:mod:`kwire.spark.exactly_once`) leaves behind, found, aborted and
deleted: transactions left open by a query never run again or a job that
failed (their coordinators would abort them after
``transaction.timeout.ms``; until then they hold back read_committed
readers of the partitions they wrote), and a query's marker groups. Used
by ``kwire transactions abort|forget --query ID`` (or ``--prefix P``) and
by ``kwire.spark.write`` after a failed job.

The names are the sink's: transactional ids ``<prefix>-<Spark partition>``
for a streaming query (prefix ``kwire-<query id>`` unless
``transactionalIdPrefix`` was given) and ``<prefix>-<job id>-<partition>``
for a batch write; each streaming id's marker group has the id's name, and
a failed batch write leaves a group named ``<prefix>-<job id>`` (its
tasks' sign that the job was aborted).
tests/spark/test_exactly_once.py checks that :func:`id_pattern` matches the
ids the sink makes.

Stop the query first: fencing its ids fails the batch it is writing.
The admin client is the caller's (this module imports none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from kwire.errors import UnsupportedVersionError

__all__ = ["query_prefix", "id_pattern", "Leftovers", "find", "abort", "forget"]

#: The states in which a transaction is still open (the coordinator's names).
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def query_prefix(query_id: str) -> str:
    """The sink's default prefix for the streaming query ``query_id``."""
    return f"kwire-{query_id}"


def id_pattern(prefix: str) -> str:
    """The regular expression (Java's syntax and Python's) of the
    transactional ids and groups the sink makes with ``prefix``."""
    return f"{re.escape(prefix)}-(?:[0-9a-f]{{12}}(?:-[0-9]+)?|[0-9]+)"


@dataclass(frozen=True)
class Leftovers:
    """A prefix's transactional ids ((id, state) from ListTransactions) and marker groups."""

    transactions: List[Tuple[str, str]]
    groups: List[str]

    @property
    def open(self) -> List[str]:
        return [tid for tid, state in self.transactions if state in OPEN_STATES]


def find(admin: Any, prefix: str, timeout: Optional[float] = None) -> Leftovers:
    """The prefix's transactional ids (filtered by the brokers where
    ListTransactions v2 can, Kafka 4.1+; here otherwise) and groups."""
    pattern = id_pattern(prefix)
    try:
        listed = admin.list_transactions(filter_on_transactional_id_pattern=pattern, timeout=timeout)
    except UnsupportedVersionError:
        listed = admin.list_transactions(timeout=timeout)
    match = re.compile(pattern).fullmatch
    txns = sorted((t.transactional_id, t.state) for t in listed if match(t.transactional_id))
    groups = sorted(g.group_id for g in admin.list_groups(timeout=timeout) if match(g.group_id))
    return Leftovers(txns, groups)


def abort(admin: Any, prefix: str, timeout: Optional[float] = None,
          every: bool = False) -> Tuple[Leftovers, List[str]]:
    """Fence each of the prefix's ids with an open transaction (InitProducerId:
    the coordinator aborts the transaction), or (``every``) each id the
    coordinators know, whatever its state (a producer that has its epoch
    but has not begun yet is fenced too); returns what was found and the
    ids fenced."""
    found = find(admin, prefix, timeout)
    todo = [tid for tid, _ in found.transactions] if every else found.open
    if todo:
        admin.fence_producers(todo, timeout=timeout)
    return found, todo


def forget(admin: Any, prefix: str, timeout: Optional[float] = None) -> Tuple[Leftovers, List[str]]:
    """:func:`abort`, then delete the marker groups: the query cannot be
    restarted from its checkpoint exactly once after this (a re-run batch
    would find no marker)."""
    found, fenced = abort(admin, prefix, timeout)
    if found.groups:
        admin.delete_groups(found.groups, timeout=timeout)
    return found, fenced
