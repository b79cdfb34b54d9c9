"""Acknowledgements of a share group's records (KIP-932), without I/O.

A member acknowledges each record it was given: ``ACCEPT`` (done),
``RELEASE`` (give it back: delivered again, its delivery count raised),
``REJECT`` (never again; to the dead-letter topic where the group has one),
``RENEW`` (keep the lock: a slow record). Acquired offsets that had no record
(control records, offsets compacted away) are acknowledged as gaps.

- :class:`AcknowledgeType`: the types, with their wire values.
- :func:`merge_ranges`: a ShareFetch answer's acquired ranges, ascending and
  without overlaps (what :func:`kwire._core.acquired.take_acquired` wants).
- :func:`ack_batches`: one partition's acknowledgements as the
  ``AcknowledgementBatches`` of ShareFetch and ShareAcknowledge: each run of
  consecutive offsets one batch, with one type when the run's are all the
  same and one per offset otherwise; a stretch of more than
  :data:`MAX_SAME` equal types inside a mixed run is a batch of its own (as
  Java's client sends them).
"""

from __future__ import annotations

import enum
from typing import Iterable, List, Mapping, Tuple

__all__ = ["AcknowledgeType", "GAP", "MAX_SAME", "merge_ranges", "ack_batches", "AckBatch"]

#: The wire type of an acquired offset without a record.
GAP = 0

#: A mixed run's stretch of equal types longer than this is sent as a batch of its own.
MAX_SAME = 10

#: (first offset, last offset, types): one type for the whole range, or one per offset.
AckBatch = Tuple[int, int, List[int]]


class AcknowledgeType(enum.IntEnum):
    """How a share group's record was processed (Java's ``AcknowledgeType``)."""

    ACCEPT = 1      #: processed: never delivered again
    RELEASE = 2     #: not processed: delivered again (to any member), its delivery count raised
    REJECT = 3      #: unprocessable: never delivered again (archived, or to the dead-letter topic)
    RENEW = 4       #: still being processed: its lock starts again (Kafka 4.2+, ShareFetch v2)


def merge_ranges(ranges: Iterable[Tuple[int, int, int]]) -> List[Tuple[int, int, int]]:
    """``(first, last, delivery_count)`` ranges sorted by first offset, each
    offset in one range only (an overlap keeps the earlier range's)."""
    out: List[Tuple[int, int, int]] = []
    for first, last, count in sorted(ranges):
        if out and first <= out[-1][1]:
            first = out[-1][1] + 1
        if first <= last:
            out.append((first, last, count))
    return out


def _split(first: int, types: List[int]) -> List[AckBatch]:
    """One run of consecutive offsets from ``first``: its long stretches of
    one type as batches of their own, the rest as per-offset batches."""
    out: List[AckBatch] = []
    mixed_from = 0          # index where the pending per-offset batch starts
    i, n = 0, len(types)
    while i < n:
        j = i
        while j < n and types[j] == types[i]:
            j += 1
        if j - i > MAX_SAME:
            if mixed_from < i:
                out.append(_batch(first + mixed_from, types[mixed_from:i]))
            out.append((first + i, first + j - 1, [types[i]]))
            mixed_from = j
        i = j
    if mixed_from < n:
        out.append(_batch(first + mixed_from, types[mixed_from:]))
    return out


def _batch(first: int, types: List[int]) -> AckBatch:
    last = first + len(types) - 1
    return (first, last, [types[0]]) if all(t == types[0] for t in types) else (first, last, list(types))


def ack_batches(acks: Mapping[int, int]) -> List[AckBatch]:
    """``{offset: type}`` of one partition as AcknowledgementBatches, in
    offset order."""
    if acks:
        low, high = min(acks), max(acks)
        if high - low + 1 == len(acks):
            kinds = set(acks.values())
            if len(kinds) == 1:                 # one run of one type (implicit mode's usual poll): one batch
                return [(low, high, [int(kinds.pop())])]
    out: List[AckBatch] = []
    run_first, run_types = None, []
    for offset in sorted(acks):
        if run_first is not None and offset == run_first + len(run_types):
            run_types.append(int(acks[offset]))
            continue
        if run_first is not None:
            out += _split(run_first, run_types)
        run_first, run_types = offset, [int(acks[offset])]
    if run_first is not None:
        out += _split(run_first, run_types)
    return out
