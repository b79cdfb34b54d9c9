"""Kafka's murmur2 key hash: the vectors of Apache Kafka's own UtilsTest, and
agreement with kafka-python's independent pure-Python implementation."""

from __future__ import annotations

import random

import pytest

from kwire._codec import murmur2, partition_for_key

JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}


@pytest.mark.parametrize("data,want", sorted(JAVA_VECTORS.items()))
def test_java_vectors(data, want):
    assert murmur2(data) == want
    assert murmur2(bytearray(data)) == want
    assert murmur2(memoryview(data)) == want


def test_agrees_with_kafka_python_on_every_tail_length():
    from kafka.partitioner.default import murmur2 as kp_murmur2

    rng = random.Random(7)
    for n in range(70):
        for _ in range(20):
            data = bytes(rng.getrandbits(8) for _ in range(n))
            assert murmur2(data) & 0xFFFFFFFF == kp_murmur2(data) & 0xFFFFFFFF


def test_partition_for_key():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= partition_for_key(bytes([i]), 3) < 3 for i in range(256))
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)
