"""The producer's ``partitioner`` option: a custom partitioner, or a name
of one of Kafka's (Java's class names) or librdkafka's.

A partitioner is a callable ``partitioner(topic, key, value,
num_partitions) -> int``: ``key`` and ``value`` as sent (bytes-like or
None), ``num_partitions`` the topic's partition count; it returns the
partition (0 to ``num_partitions - 1``; a larger one waits for metadata
that has it, as Java's producer does, then fails; a negative one is a
``ValueError``, as Java's ``IllegalArgumentException``). This is Java's
``Partitioner.partition(topic, key, keyBytes, value, valueBytes, cluster)``
for a client without serializers, with the partition count instead of the
``Cluster``. It may also return None: no choice, the record goes where the
built-in partitioner puts a keyless record (the sticky partition), which is
what librdkafka's ``*_random`` partitioners do with a null key. It is only
consulted for records sent without a partition, and only when configured:
the default path (Java's built-in partitioner, compiled in
``kwire._core.send``) calls no Python.

Names (:data:`NAMES`), each mapped onto what the compiled path computes
exactly:

- Java's built-in partitioner (``partitioner.class`` unset, or the classes
  Java 3.x named for it: ``DefaultPartitioner``), librdkafka's
  ``murmur2_random``: murmur2 of the key, the sticky partition without one
  (KIP-794).
- Java's ``UniformStickyPartitioner``: every record sticky, as
  ``partitioner_ignore_keys``.
- Java's ``RoundRobinPartitioner``: each record the next partition, per
  topic.
- librdkafka's ``murmur2`` (a null key hashed as empty), ``consistent``
  (CRC32; a null key to partition 0), ``consistent_random`` (CRC32, a null
  or empty key sticky), ``fnv1a`` (FNV-1a; a null key hashed as empty), ``fnv1a_random``,
  ``random`` (a keyed record to a random partition, a null key sticky, as
  librdkafka's sticky partitioning does).
"""

from __future__ import annotations

import itertools
import random
import zlib
from typing import Any, Callable, Dict, Optional, Tuple

from kwire._codec import murmur2

__all__ = ["Partitioner", "NAMES", "resolve_partitioner", "RoundRobinPartitioner", "HashPartitioner",
           "RandomPartitioner", "fnv1a"]

#: ``partitioner(topic, key, value, num_partitions)``: the partition, or None for the built-in choice.
Partitioner = Callable[[str, Any, Any, int], Optional[int]]

_JAVA = "org.apache.kafka.clients.producer."


def fnv1a(data: Any) -> int:
    """librdkafka's ``rd_fnv1a`` of ``data``: the 32-bit FNV-1a hash, as a
    signed int made positive (Sarama's ``NewHashPartitioner``; -2**31
    stays 2**31)."""
    h = 0x811C9DC5
    for b in bytes(data):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return (-h) & 0xFFFFFFFF if h & 0x80000000 else h


def _murmur2_positive(data: Any) -> int:
    return murmur2(data) & 0x7FFFFFFF


class HashPartitioner:
    """librdkafka's hashing partitioners: ``hash(key) % num_partitions``;
    a null key hashed as empty (``random=None``) or left to the built-in
    sticky choice (the ``*_random`` ones: ``random="null"``, or
    ``"empty"`` for ``consistent_random``, which takes an empty key as
    librdkafka does a null one)."""

    def __init__(self, name: str, hash: Callable[[Any], int], random: Optional[str]) -> None:
        self.name = name
        self.hash = hash
        self.random = random

    def __call__(self, topic: str, key: Any, value: Any, num_partitions: int) -> Optional[int]:
        if key is None or (self.random == "empty" and not len(key)):
            if self.random is not None:
                return None
            key = b""
        return self.hash(key) % num_partitions

    def __repr__(self) -> str:
        return f"<HashPartitioner {self.name}>"


class RandomPartitioner:
    """librdkafka's ``random``: a keyed record to a partition at random; a
    null key to the sticky partition (librdkafka's sticky partitioning)."""

    def __call__(self, topic: str, key: Any, value: Any, num_partitions: int) -> Optional[int]:
        return None if key is None else random.randrange(num_partitions)

    def __repr__(self) -> str:
        return "<RandomPartitioner>"


class RoundRobinPartitioner:
    """Java's ``RoundRobinPartitioner``: each record of a topic to the next
    partition, whatever its key, from a counter per topic (the first record
    of a topic to partition 0)."""

    def __init__(self) -> None:
        self._next: Dict[str, Any] = {}

    def __call__(self, topic: str, key: Any, value: Any, num_partitions: int) -> int:
        counter = self._next.get(topic)
        if counter is None:
            counter = self._next[topic] = itertools.count()
        return next(counter) % num_partitions       # next() on a count is atomic under the GIL

    def __repr__(self) -> str:
        return "<RoundRobinPartitioner>"


#: The built-in partitioner (None) and whether it ignores keys.
_BUILT_IN = (None, False)
_STICKY = (None, True)

#: Every name the ``partitioner`` option takes: a factory of (partitioner or None, ignore keys).
NAMES: Dict[str, Callable[[], Tuple[Optional[Partitioner], bool]]] = {
    "default": lambda: _BUILT_IN,
    "murmur2_random": lambda: _BUILT_IN,
    _JAVA + "internals.DefaultPartitioner": lambda: _BUILT_IN,
    _JAVA + "internals.BuiltInPartitioner": lambda: _BUILT_IN,
    _JAVA + "UniformStickyPartitioner": lambda: _STICKY,
    _JAVA + "RoundRobinPartitioner": lambda: (RoundRobinPartitioner(), False),
    "murmur2": lambda: (HashPartitioner("murmur2", _murmur2_positive, None), False),
    "consistent": lambda: (HashPartitioner("consistent", zlib.crc32, None), False),
    "consistent_random": lambda: (HashPartitioner("consistent_random", zlib.crc32, "empty"), False),
    "fnv1a": lambda: (HashPartitioner("fnv1a", fnv1a, None), False),
    "fnv1a_random": lambda: (HashPartitioner("fnv1a_random", fnv1a, "null"), False),
    "random": lambda: (RandomPartitioner(), False),
}


def resolve_partitioner(value: Any) -> Tuple[Optional[Partitioner], bool]:
    """The ``partitioner`` option's value as (the callable the producer
    consults, or None for the compiled built-in one; whether keys are
    ignored): None or a name of :data:`NAMES` or a callable. Anything else
    raises ``ValueError`` naming what is accepted."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return _BUILT_IN
    if isinstance(value, str):
        name = value.strip()
        make = NAMES.get(name) or NAMES.get(name.lower())
        if make is None:
            raise ValueError(f"unknown partitioner {name!r}: kwire has Java's built-in one (unset, "
                             f"{_JAVA}internals.DefaultPartitioner), {_JAVA}RoundRobinPartitioner, "
                             f"{_JAVA}UniformStickyPartitioner and librdkafka's "
                             "murmur2_random, murmur2, consistent, consistent_random, fnv1a, fnv1a_random, "
                             "random; any other is a Python callable partitioner(topic, key, value, "
                             "num_partitions), given as the option's value or named as module:function")
        return make()
    if callable(value):
        return value, False
    raise ValueError("expected a callable partitioner(topic, key, value, num_partitions) or a partitioner's name")
