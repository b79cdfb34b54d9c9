"""The producer's compiled send path (kwire._codec.Accumulator): which
records it takes without running Python, when it calls into Python (the
producer's waits and new batches), partitioning, sealing, and that errors
leave its lock free. The producer around it is tested against the
broker in tests/client."""

from __future__ import annotations

import threading
import time

import pytest

import kwire
from kwire._codec import Accumulator, Generation, ProducerBatch, RecordBatchBuilder, RecordFuture, SendLock
from kwire.errors import InvalidPartitionError, KwireError, ProducerClosedError, RecordTooLargeError
from kwire.future import KafkaTimeoutError
from kwire.producer import BufferFullError


class _Harness:
    """An Accumulator whose calls into Python (the producer's, in
    kwire/producer.py) are recorded: ``calls`` lists them by name."""

    def __init__(self, batch_size=1 << 20, **limits):
        self.calls = []
        self.sealed = []
        self.metadata = {}                 # what wait_partitions finds: topic -> partitions
        self.refuse = None                 # what check() raises
        self.lock = SendLock()
        self.generation = Generation()
        self.generation.bump()
        self.acc = Accumulator(lock=self.lock, generation=self.generation, check=self.check,
                               wait_partitions=self.wait_partitions, wait_room=self.wait_room,
                               new_batch=self.new_batch, sealed=self.on_sealed, batch_size=batch_size, **limits)

    def check(self):
        self.calls.append("check")
        if self.refuse is not None:
            raise self.refuse

    def wait_partitions(self, topic, deadline, need=1):
        self.calls.append("wait_partitions" if need == 1 else f"wait_partitions need={need}")
        assert deadline > time.monotonic()
        if topic not in self.metadata:
            raise KafkaTimeoutError(f"no metadata for {topic!r}")
        self.acc.set_partitions(topic, self.generation.value, self.metadata[topic])

    def wait_room(self, deadline):
        self.calls.append("wait_room")
        assert self.lock.locked()
        raise BufferFullError("full")

    def new_batch(self, topic, partition):
        self.calls.append("new_batch")
        assert self.lock.locked()
        return ProducerBatch(topic, partition, RecordBatchBuilder(None))

    def on_sealed(self, tp, batch):
        assert self.lock.locked()
        self.sealed.append((tp, batch))

    def open(self, topic, partitions):
        self.metadata[topic] = list(partitions)
        self.acc.set_partitions(topic, self.generation.value, list(partitions))
        with self.lock:
            for p in partitions:
                self.acc.put((topic, p), ProducerBatch(topic, p, RecordBatchBuilder(None)))


def test_keyed_records_go_where_murmur2_says_and_futures_count_up():
    h = _Harness()
    h.open("t", range(5))
    futs = [h.acc.send("t", b"v%d" % i, b"key-%d" % i, None, None, 1000 + i) for i in range(50)]
    assert not h.calls                                                # no Python ran
    per_partition = {}
    for i, f in enumerate(futs):
        assert isinstance(f, RecordFuture)
        p = f._batch.partition
        assert p == kwire.partition_for_key(b"key-%d" % i, 5)
        assert f._index == per_partition.get(p, 0)
        per_partition[p] = f._index + 1
        assert f._batch.record_meta(f._index) == (1000 + i, len(b"key-%d" % i), len(b"v%d" % i))
    for p, n in per_partition.items():
        assert h.acc.open[("t", p)].record_count == n
    assert h.acc.buffered == sum(b.bytes for b in h.acc.open.values())


def test_what_calls_into_python():
    h = _Harness()
    h.metadata["t"] = [0, 1]
    keyed = kwire.partition_for_key(b"k", 2)
    f = h.acc.send("t", b"v", b"k")                                    # no partitions known yet, no batch
    assert h.calls == ["wait_partitions", "new_batch"]
    assert f._batch.partition == keyed
    h.calls.clear()
    assert h.acc.sticky_partition("t") is None
    f = h.acc.send("t", b"v")                                          # keyless: a sticky partition chosen
    sticky = h.acc.sticky_partition("t")
    assert sticky in (0, 1) and f._batch.partition == sticky
    assert h.calls == ([] if sticky == keyed else ["new_batch"])
    h.calls.clear()
    assert h.acc.send("t", b"v")._batch.partition == sticky and not h.calls
    h.generation.bump()                                                # metadata changed since
    h.acc.send("t", b"v", b"k")
    assert h.calls == ["wait_partitions"]
    with pytest.raises(KafkaTimeoutError):
        h.acc.send("unknown", b"v")
    assert not h.lock.locked()


def test_a_disabled_path_checks_every_send_and_closed_refuses():
    h = _Harness()
    h.open("t", [0])
    h.acc.enabled = False                                              # failed, or transactional
    assert isinstance(h.acc.send("t", b"v", None, None, 0), RecordFuture)
    assert h.calls == ["check"]
    h.refuse = KwireError("not in a transaction")
    with pytest.raises(KwireError, match="not in a transaction"):
        h.acc.send("t", b"v", None, None, 0)
    h.acc.closed = True
    with pytest.raises(ProducerClosedError):
        h.acc.send("t", b"v", None, None, 0)
    assert not h.lock.locked()


def test_a_send_waits_for_a_lock_held_elsewhere():
    h = _Harness()
    h.open("t", [0])
    h.lock.acquire()
    done = []
    t = threading.Thread(target=lambda: done.append(h.acc.send("t", b"v", None, None, 0)))
    t.start()
    time.sleep(0.05)
    assert not done                                                    # the sender holds the lock
    h.lock.release()
    t.join(5)
    assert isinstance(done[0], RecordFuture) and not h.lock.locked()


def test_partitions_the_topic_lacks_and_bad_types_raise():
    """A partition past the topic's count is looked up again (it may have
    been added since) and refused when fresh metadata lacks it too; a
    negative one, or a wrong type, is refused at once."""
    h = _Harness()
    h.open("t", [0, 1])
    for p in (2, 2**63, 2**100):
        h.calls.clear()
        with pytest.raises(InvalidPartitionError, match=f"partition {p} does not exist"):
            h.acc.send("t", b"v", None, None, p)
        assert h.calls == [f"wait_partitions need={p + 1}"]
    h.calls.clear()
    for p in (-1, -2**63 - 1):
        with pytest.raises(InvalidPartitionError, match=f"partition {p} does not exist"):
            h.acc.send("t", b"v", None, None, p)
    with pytest.raises(TypeError):
        h.acc.send("t", b"v", None, None, True)
    with pytest.raises(TypeError):
        h.acc.send("t", b"v", None, None, "0")
    assert h.acc.send("t", b"v", None, None, numpy_like_int(1))._batch.partition == 1
    assert not h.lock.locked() and not h.calls
    h.metadata["t"] = [0, 1, 2]                      # partition 2 added: the fresh look finds it
    assert h.acc.send("t", b"v", None, None, 2)._batch.partition == 2


class numpy_like_int:
    """An int-like that is not an int (as numpy's integers): taken through __index__."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


def test_a_full_batch_is_sealed_once_and_the_sticky_partition_moves_on_after_batch_size_bytes():
    h = _Harness(batch_size=500)
    h.open("t", [0, 1, 2])
    first = h.acc.send("t", b"x" * 100)._batch.partition
    partitions = [first]
    while not h.sealed:
        partitions.append(h.acc.send("t", b"x" * 100)._batch.partition)
    # 61-byte header + 4 records of 109: a fifth would pass batch_size (as in Java, a batch takes
    # a record only within batch_size), so the fourth seals it
    assert partitions == [first] * 4
    assert len(h.sealed) == 1 and h.sealed[0][0] == ("t", first)
    assert 500 - 109 < h.sealed[0][1].bytes <= 500 and ("t", first) not in h.acc.open
    # KIP-794: 497 bytes went to it, fewer than batch_size: it stays sticky, the next batch there
    assert h.acc.sticky_partition("t") == first
    other = (first + 1) % 3
    h.acc.set_load("t", [other], [0])                 # the only partition the next choice may take
    h.calls.clear()
    assert h.acc.send("t", b"x" * 100)._batch.partition == first
    assert h.calls == ["new_batch"]                                    # the next record opens a new batch
    while len(h.sealed) < 2:
        assert h.acc.send("t", b"x" * 100)._batch.partition == first
    assert h.acc.sticky_partition("t") == other       # batch_size bytes and a full batch: the switch
    assert h.acc.send("t", b"x" * 100)._batch.partition == other


def test_the_sticky_partition_moves_on_after_twice_batch_size_whatever_its_batch():
    """Java's switch without a full batch: twice ``batch_size`` bytes."""
    h = _Harness(batch_size=1000)
    h.open("t", [0, 1])
    first = h.acc.send("t", b"x" * 300)._batch.partition           # ~370 bytes: its batch not full
    other = 1 - first
    h.acc.set_load("t", [other], [0])
    sticky = []
    for _ in range(5):
        with h.lock:
            h.acc.seal_all()                          # each batch sent by linger, one record in it
        sticky.append(h.acc.sticky_partition("t"))
        h.acc.send("t", b"x" * 300)
    # ~740, ~1110 (batch_size, but its batch is not full), ~1480, ~1850: no switch; ~2220: the switch
    assert sticky == [first] * 5 and h.acc.sticky_partition("t") == other


def test_adaptive_weights_favour_short_queues_as_java_does():
    """Java's ``updatePartitionLoadStats``: each partition weighs ``max + 1
    - queue``; a partition with the longest queue of 3 weighs 1, an empty
    one 4; equal queues on every partition are uniform (no table)."""
    h = _Harness(batch_size=100)
    h.open("t", [0, 1, 2, 3])
    h.acc.set_load("t", [0, 1, 2, 3], [3, 0, 3, 3])   # weights 1, 4, 1, 1 of 7
    assert h.acc.partition_load("t") == ((0, 1, 2, 3), (1, 5, 6, 7))
    counts = {p: 0 for p in range(4)}
    for _ in range(7000):
        counts[h.acc.send("t", b"x" * 100)._batch.partition] += 1   # each record alone fills batch_size
    assert 0.50 < counts[1] / 7000 < 0.64 and all(0.10 < counts[p] / 7000 < 0.19 for p in (0, 2, 3)), counts
    h.acc.set_load("t", [0, 1, 2, 3], [2, 2, 2, 2])
    counts = {p: 0 for p in range(4)}
    for _ in range(4000):
        counts[h.acc.send("t", b"x" * 100)._batch.partition] += 1
    assert all(0.19 < counts[p] / 4000 < 0.31 for p in range(4)), counts


def test_ignore_keys_and_a_custom_partitioner():
    h = _Harness()
    h.open("t", range(4))
    with h.lock:
        h.acc.seal_all()
    seen = []

    def mine(topic, key, value, n):
        seen.append((topic, key, value, n))
        return None if key == b"none" else int(key)

    acc = Accumulator(lock=h.lock, generation=h.generation, check=h.check, wait_partitions=h.wait_partitions,
                      wait_room=h.wait_room, new_batch=h.new_batch, sealed=h.on_sealed, batch_size=1 << 20,
                      partitioner=mine)
    acc.set_partitions("t", h.generation.value, range(4))
    assert acc.send("t", b"v", b"3")._batch.partition == 3 and seen == [("t", b"3", b"v", 4)]
    assert acc.send("t", b"v", b"none")._batch.partition == acc.sticky_partition("t")
    assert acc.send("t", b"v", b"1", None, 2)._batch.partition == 2 and len(seen) == 2   # a partition given
    with pytest.raises(ValueError, match="invalid partition number: -1"):
        acc.send("t", b"v", b"-1")
    keyless = Accumulator(lock=h.lock, generation=h.generation, check=h.check, wait_partitions=h.wait_partitions,
                          wait_room=h.wait_room, new_batch=h.new_batch, sealed=h.on_sealed, batch_size=1 << 20,
                          ignore_keys=True)
    keyless.set_partitions("t", h.generation.value, range(4))
    assert {keyless.send("t", b"v", b"k%d" % i)._batch.partition for i in range(50)} == {keyless.sticky_partition("t")}


def test_seal_and_clear():
    h = _Harness()
    h.open("t", [0, 1])
    h.acc.send("t", b"v", None, None, 0)
    with h.lock:
        h.acc.seal_all()
    assert [tp for tp, _ in h.sealed] == [("t", 0)]                    # the empty batch of 1 is dropped
    assert not h.acc.open
    h.acc.send("t", b"v", None, None, 1)
    with h.lock:
        left = h.acc.clear()
    assert [b.partition for b in left] == [1] and not h.acc.open
    assert h.acc.buffered == h.sealed[0][1].bytes + left[0].bytes
    with h.lock:
        h.acc.release(left[0])
    assert h.acc.buffered == h.sealed[0][1].bytes and left[0].bytes == 0


def test_a_bad_record_raises_and_leaves_the_lock_free():
    h = _Harness()
    h.open("t", [0])
    with pytest.raises(TypeError):
        h.acc.send("t", 12345, None, None, 0)
    assert not h.lock.locked()
    assert isinstance(h.acc.send("t", b"fine", None, None, 0), RecordFuture)


def test_a_record_joins_a_batch_only_within_batch_size():
    h = _Harness(batch_size=1000, max_request_size=100_000)
    h.open("t", [0, 1])
    small = h.acc.send("t", b"s" * 100, None, None, 0)
    large = h.acc.send("t", b"x" * 5000, None, None, 0)               # larger than batch_size: a batch of its own
    assert large._batch is not small._batch and [b for _, b in h.sealed] == [small._batch, large._batch]
    assert small._batch.bytes < 1000 < large._batch.bytes < 5200
    after = h.acc.send("t", b"s" * 100, None, None, 0)                 # and the next one a new batch
    assert after._batch not in (small._batch, large._batch) and ("t", 0) in h.acc.open
    keyless = [h.acc.send("t", b"k" * 300) for _ in range(7)]           # keyless ones fill a sticky partition's
    batches = {id(f._batch): f._batch for f in keyless}                # batches up to batch_size, each sealed
    assert all(b.bytes <= 1000 for b in batches.values())              # before the record that would pass it


def test_a_record_too_large_for_a_batch_of_its_own_is_refused():
    h = _Harness(max_request_size=1000, buffer_memory=5000)
    h.open("t", [0])
    with pytest.raises(RecordTooLargeError, match="larger than 1000, which is the value of the max_request_size"):
        h.acc.send("t", b"x" * 2000, b"k", None, 0)
    assert not h.lock.locked() and not h.acc.open                      # the empty batch was dropped
    h = _Harness(max_request_size=10000, buffer_memory=1000)
    h.open("t", [0])
    with pytest.raises(RecordTooLargeError, match=r"buffer_memory configuration \(1000\)"):
        h.acc.send("t", b"x" * 2000, b"k", None, 0)
    assert not h.lock.locked()


def test_a_full_buffer_waits_for_room_unless_the_record_could_never_fit():
    h = _Harness(batch_size=100, max_request_size=10000, buffer_memory=300)
    h.open("t", [0, 1, 2])
    for p in (0, 1, 2):
        h.acc.send("t", b"x" * 200, None, None, p)                     # each seals its batch: 3 x 267 bytes
    assert h.acc.buffered >= 300
    h.calls.clear()
    with pytest.raises(BufferFullError):
        h.acc.send("t", b"x", None, None, 0)
    assert h.calls == ["wait_room"]
    with pytest.raises(RecordTooLargeError):                           # refused at once, no wait
        h.acc.send("t", b"x" * 400, None, None, 0)
    assert h.calls == ["wait_room"] and not h.lock.locked()



class _Full(Exception):
    """A ``room_full`` class, as kwire.aio's producer sets one: raised as ``_Full(buffer_memory)``."""


class _Index(int):
    """A partition that is an int, not exactly: the send path's slow half takes it."""


def test_room_full_refuses_at_once_what_it_can_tell_fits():
    """With ``room_full`` set, a full buffer refuses a record that bytes or
    None key and value and headers of bytes or ASCII keys show valid and
    fitting by raising it, from the fast half (no open batch) and the slow
    half of the send path alike, without calling into Python; what only
    encoding can tell about goes the way it goes without it; with room, the
    record is taken."""
    h = _Harness(batch_size=100, max_request_size=10000, buffer_memory=300)
    h.acc.room_full = _Full
    h.open("t", [0, 1, 2])
    for p in (0, 1, 2):
        h.acc.send("t", b"x" * 200, None, None, p)                     # each seals its batch: 3 x 267 bytes
    h.calls.clear()
    for headers in (None, [("a", b"1"), (b"b", None)], (("c", b""),)):
        with pytest.raises(_Full) as e:
            h.acc.send("t", b"x", b"k", headers, 0)
        assert e.value.args == (300,)
    with pytest.raises(_Full):
        h.acc.send("t", b"x", None, None, _Index(1))                   # through send_slow, then make_room
    assert h.calls == [] and not h.lock.locked()
    for value, headers in ((bytearray(b"x"), None), (b"x", [("\u00e9", b"1")]), (b"x", [["a", b"1"]])):
        with pytest.raises(BufferFullError):                           # encoded to tell: then wait_room
            h.acc.send("t", value, None, headers, 0)
    assert h.calls == ["wait_room"] * 3
    with pytest.raises(RecordTooLargeError):                           # never fits: refused for that
        h.acc.send("t", b"x" * 400, None, None, 0)
    with pytest.raises(TypeError):
        h.acc.send("t", "text", None, None, 0)
    with h.lock:
        for _, batch in h.sealed:
            h.acc.release(batch)
    assert isinstance(h.acc.send("t", b"x", b"k", None, 0), RecordFuture)
    assert h.calls == ["wait_room"] * 3 + ["new_batch"] and not h.lock.locked()

def test_send_lock_behaves_like_threading_lock():
    lock = SendLock()
    assert lock.acquire() and lock.locked()
    assert not lock.acquire(False)
    assert not lock.acquire(timeout=0.01)
    lock.release()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.locked()
    # a Condition over it waits and wakes
    cond = threading.Condition(lock)
    woke = []

    def waiter():
        with cond:
            woke.append(cond.wait(5))

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.05)
    with cond:
        cond.notify_all()
    t.join(5)
    assert woke == [True]
    with cond:
        assert cond.wait(0.01) is False


def test_send_lock_excludes_and_wakes_under_contention():
    """The lock's state is guarded by the GIL and waiters sleep on a gate:
    threads that take it blocking, with timeouts and through a Condition
    must never overlap, and every waiter must be woken by a release."""
    lock = SendLock()
    cond = threading.Condition(lock)
    inside = []
    counts = [0] * 4
    timeouts = [0]

    def work(i):
        for n in range(3000):
            if n % 3 == 0:
                if not lock.acquire(timeout=0.0005):
                    timeouts[0] += 1
                    continue
            else:
                lock.acquire()
            try:
                if n % 500 == 0:
                    cond.wait(0.001)        # releases and retakes through the gate
                    assert lock.locked()
                inside.append(i)
                assert len(inside) == 1
                counts[i] += 1
                inside.pop()
            finally:
                lock.release()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert sum(counts) + timeouts[0] == 4 * 3000 and not lock.locked()
    # a blocked acquire wakes when the holder releases, long before its timeout
    lock.acquire()
    got = []
    t = threading.Thread(target=lambda: got.append((lock.acquire(timeout=30), time.monotonic())))
    t.start()
    time.sleep(0.05)
    released = time.monotonic()
    lock.release()
    t.join(30)
    assert got and got[0][0] and got[0][1] - released < 5
    lock.release()


def test_held_records_build_the_same_batch_as_the_builder():
    """A ProducerBatch holds its records by reference and encodes them only
    when built (on the sender thread); the batch must be byte for byte what
    appending to a builder gives, its size known exactly beforehand, and
    its buffers copied at send (they could change after send returns)."""
    from kwire._codec import build_batches

    with pytest.raises(ValueError):                                     # its builder starts empty
        ProducerBatch("t", 0, _one_record_builder())
    for codec in ("none", "lz4", "zstd", "gzip"):
        pb = ProducerBatch("t", 0, RecordBatchBuilder(codec))
        direct = RecordBatchBuilder(codec)
        mutable = bytearray(b"changes later")
        headers = [("h", b"1"), ("k", None)]
        for i in range(300):
            value = mutable if i == 5 else (None if i == 7 else b"v%d" % i * (i % 9))
            key = None if i % 4 == 0 else b"%016d" % i
            hs = headers if i % 3 == 0 else ([("other", b"x")] if i % 5 == 0 else None)
            ts = 1_700_000_000_000 + (i * 37) % 1000       # not in order
            assert pb.append(value, key, hs, ts) == i
            direct.append(bytes(value) if isinstance(value, bytearray) else value, key=key, headers=hs,
                          timestamp=ts)
        mutable[:] = b"XXXXXXXX"
        assert pb.encoded_size == direct.size_in_bytes - 61
        assert pb.record_meta(5) == (1_700_000_000_000 + 185, 16, len(b"changes later"))
        assert pb.record_meta(7) == (1_700_000_000_000 + 259, 16, -1)
        assert build_batches([pb], [(3, 1, 40)]) == [direct.build(producer_id=3, producer_epoch=1,
                                                                  base_sequence=40)]
        assert pb.builder is None and pb.record_count == 300          # built: sealed, metadata kept
        with pytest.raises(kwire.KwireError):
            pb.append(b"late", None, None, 0)
        with pytest.raises(kwire.KwireError):
            pb.reserve(1000)
    reserved = ProducerBatch("t", 0, RecordBatchBuilder(None))             # room made first: the same batch
    reserved.reserve(5000)
    plain = RecordBatchBuilder(None)
    for i in range(300):
        reserved.append(b"v%d" % i, None, None, 1000 + i)
        plain.append(b"v%d" % i, timestamp=1000 + i)
    reserved.reserve(10)                                                # less than held: nothing changes
    assert build_batches([reserved], [None]) == [plain.build()]
    with pytest.raises(TypeError):
        ProducerBatch("t", 0, RecordBatchBuilder(None)).append("text", None, None, 0)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_batches_built_on_several_threads_are_the_ones_built_alone(threads):
    """build_batches shares a call's compressed batches between its caller
    and native helper threads: every batch must come out byte for byte as
    a builder makes it alone, whatever thread took it, call after call."""
    from kwire._codec import build_batches, build_threads

    previous = build_threads(threads)
    try:
        assert build_threads() == threads
        for round_ in range(20):
            pbs, expected, stamps = [], [], []
            for j in range(9):
                codec = ("lz4", "zstd", "none")[j % 3]
                pb = ProducerBatch("t", j, RecordBatchBuilder(codec))
                direct = RecordBatchBuilder(codec)
                for i in range(50 + 97 * j + round_):
                    value = b"%d-%d-" % (round_, i) * (1 + (i * j) % 13)
                    key = None if i % 7 == 0 else b"%016d" % i
                    pb.append(value, key, None, 1_700_000_000_000 + i)
                    direct.append(value, key=key, timestamp=1_700_000_000_000 + i)
                pbs.append(pb)
                stamps.append((5, 2, 100 * j))
                expected.append(direct.build(producer_id=5, producer_epoch=2, base_sequence=100 * j))
            assert build_batches(pbs, stamps) == expected
            assert all(pb.builder is None for pb in pbs)
    finally:
        build_threads(previous)
    with pytest.raises(ValueError):
        build_threads(0)
    pb = ProducerBatch("t", 0, RecordBatchBuilder("lz4"))
    with pytest.raises(ValueError):                                     # one batch twice: refused
        build_batches([pb, pb], [None, None])


def _one_record_builder():
    b = RecordBatchBuilder(None)
    b.append(b"x")
    return b


# ------------------------------------------------- bad arguments, bounds
_BAD_CALLS = r'''
import sys
from kwire._codec import (Accumulator, Generation, LegacyMessageSetBuilder, ProducerBatch, RecordBatchBuilder,
                          RecordFuture, SendLock, build_batches, encode_v07, murmur2, partition_for_key,
                          restamp_batch)

def acc(**kw):
    hooks = dict(check=None, wait_partitions=None, wait_room=None, new_batch=None, sealed=None)
    return Accumulator(**dict(hooks, lock=SendLock(), generation=Generation(), batch_size=1 << 20, **kw))

def batch():
    return ProducerBatch("t", 0, RecordBatchBuilder(None))

def ready():
    a = acc()
    a.set_partitions("t", 0, [0])
    a.put(("t", 0), batch())
    return a

CALLS = {
    # a fresh accumulator's cache of the last topic must not take None for it (it segfaulted)
    "send(None) first": lambda: acc().send(None, b"v", None, None, 0),
    "send(None) after a topic": lambda: (lambda a: (a.send("t", b"v", None, None, 0), a.send(None, b"v")))(ready()),
    "Accumulator(lock=None)": lambda: acc(lock=None),
    "Accumulator(generation=None)": lambda: acc(generation=None),
    "set_partitions(None)": lambda: acc().set_partitions(None, 0, [0]),
    "set_partitions(parts=None)": lambda: acc().set_partitions("t", 0, None),
    "known_partitions(None)": lambda: acc().known_partitions(None, 0),
    "put(None)": lambda: acc().put(None, batch()),
    "put(batch=None)": lambda: acc().put(("t", 0), None),
    "put((None, 0))": lambda: acc().put((None, 0), batch()),
    "put(())": lambda: acc().put((), batch()),                   # a short tuple was read past its end
    "put(('t',))": lambda: acc().put(("t",), batch()),
    "seal(None)": lambda: acc().seal(None),
    "release(None)": lambda: acc().release(None),
    "sticky_partition(None)": lambda: acc().sticky_partition(None),
    "ProducerBatch(None)": lambda: ProducerBatch(None, 0, RecordBatchBuilder(None)),
    "ProducerBatch(builder=None)": lambda: ProducerBatch("t", 0, None),
    "RecordFuture(None)": lambda: RecordFuture(None, 0),
    "build_batches(None)": lambda: build_batches(None, []),
    "build_batches(stamps=None)": lambda: build_batches([], None),
    "build_batches([None])": lambda: build_batches([None], [None]),
    "build_batches([1])": lambda: build_batches([1], [None]),
    "build_batches(stamp=())": lambda: build_batches([RecordBatchBuilder(None)], [()]),
    "restamp_batch(None)": lambda: restamp_batch(None, 1, 1, 1),
    "murmur2(None)": lambda: murmur2(None),
    "partition_for_key(None)": lambda: partition_for_key(None, 3),
    "encode_v07(None)": lambda: encode_v07(None),
    "RecordBatchBuilder.append(headers=5)": lambda: RecordBatchBuilder(None).append(b"v", None, 5),
    "LegacyMessageSetBuilder.append(value=1)": lambda: LegacyMessageSetBuilder(1).append(1),
}
for name, call in CALLS.items():
    try:
        call()
    except (TypeError, ValueError) as e:
        print(f"{name}: {type(e).__name__}: {e}", flush=True)
    else:
        print(f"{name}: NO ERROR", flush=True)
        sys.exit(3)
print(repr(RecordFuture.__new__(RecordFuture)))      # never initialised: no batch to read
# the caller's list emptied after set_partitions: the send path divided by its length (zero)
a, parts = acc(), [0, 1]
a.set_partitions("t", 0, parts)
parts.clear()
a.put(("t", 0), batch())
a.put(("t", 1), batch())
assert type(a.send("t", b"v", b"k")).__name__ == "RecordFuture"
# an entry put into ``open`` by hand: seal() must not write past the partition table
a.open[("t", 1000)] = batch()
assert a.seal(("t", 1000)) is not None
assert a.seal(()) is None and a.seal(("t", 5)) is None        # no open batch there
print("done")
'''


def test_bad_arguments_raise_and_never_crash():
    """Every compiled entry point of the send path given None (or a wrong
    type) where it needs an object raises TypeError (or ValueError); none
    reads None as the object (which crashed the interpreter). Run in a
    child interpreter: a crash is a failure, not a dead test run."""
    import os
    import subprocess
    import sys

    src = os.path.dirname(os.path.dirname(kwire.__file__))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", _BAD_CALLS], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"child exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stdout.splitlines()
    assert lines[-2:] == ["<RecordFuture unbound>", "done"]
    assert all(": TypeError: " in line or ": ValueError: " in line for line in lines[:-2]), proc.stdout
    assert "send(None) first: TypeError: " in proc.stdout


def test_put_takes_only_the_partitions_the_topic_has():
    """A partition index from a hostile Metadata (50,000,000, or 2**31 - 1)
    must not size the per-partition table (it took 400 MB, and would take
    16 GiB): put() takes only partitions 0 to count - 1 of a topic whose
    partitions are set, and a keyed send that picks such an index raises
    InvalidPartitionError without allocating."""
    h = _Harness()
    h.acc.set_partitions("t", h.generation.value, [0, 50_000_000])
    for p in (50_000_000, 2**31 - 1, 2, -1):
        with pytest.raises(ValueError, match="not one of topic 't'"):
            h.acc.put(("t", p), ProducerBatch("t", p, RecordBatchBuilder(None)))
    h.acc.put(("t", 1), ProducerBatch("t", 1, RecordBatchBuilder(None)))
    # metadata that dropped a malformed entry: partitions [0, 2] of 3 listed; put() takes 2, not 3
    h.acc.set_partitions("g", h.generation.value, [0, 2], 3)
    h.acc.put(("g", 2), ProducerBatch("g", 2, RecordBatchBuilder(None)))
    with pytest.raises(ValueError, match="not one of topic 'g'"):
        h.acc.put(("g", 3), ProducerBatch("g", 3, RecordBatchBuilder(None)))
    with pytest.raises(ValueError, match="no partitions known"):
        h.acc.put(("u", 0), ProducerBatch("u", 0, RecordBatchBuilder(None)))
    assert set(h.acc.open) == {("t", 1), ("g", 2)}
    key = next(b"k%d" % i for i in range(1000) if kwire.partition_for_key(b"k%d" % i, 2) == 1)
    h.metadata["t"] = [0, 50_000_000]                       # and the look again finds the same
    with pytest.raises(InvalidPartitionError):              # picks partition 50,000,000: no batch, no table
        h.acc.send("t", b"v", key)
    assert set(h.acc.open) == {("t", 1), ("g", 2)} and h.calls == ["wait_partitions need=50000001"]


def test_a_batch_never_grows_past_max_request_size():
    """A batch takes no record that would make it larger than
    max_request_size: such a record goes in the next batch; one that alone
    would is refused, naming the size of a batch of it alone."""
    h = _Harness(max_request_size=1000)
    h.open("t", [0])
    first = h.acc.open[("t", 0)]
    added = 0
    while not h.sealed:
        h.acc.send("t", b"x" * 100, None, None, 0)
        added += 1
    assert added == 9 and first.record_count == 8                      # 61 + 8 * 106 = 909; a 9th: 1015
    assert h.sealed == [(("t", 0), first)] and first.bytes <= 1000
    assert h.acc.open[("t", 0)].record_count == 1 and h.calls == ["new_batch"]
    assert h.acc.buffered == first.bytes + h.acc.open[("t", 0)].bytes
    size = _lone_batch_size(b"x" * 2000, b"k")
    with pytest.raises(RecordTooLargeError, match=f"The message is {size} bytes"):
        h.acc.send("t", b"x" * 2000, b"k", None, 0)
    assert len(h.sealed) == 2 and not h.acc.open          # the batch it did not fit in was sealed first


def _lone_batch_size(value, key):
    """The size of a batch of one record, as a builder makes it."""
    b = RecordBatchBuilder(None)
    b.append(value, key=key, timestamp=0)
    return len(b.build())


def test_compressed_batches_fill_to_batch_size_as_estimated_once_compressed():
    """With compression, batch_size counts a batch's estimated compressed
    size, as Java's producer does: the records' encoded size times the
    topic's estimate times 1.05. The estimate starts at 1.0, goes down by
    0.005 for each batch that compressed better and up at once (by at least
    0.05) for one that compressed worse; uncompressed, batch_size is the
    encoded size."""
    plain = _Harness(batch_size=16384)
    plain.open("t", [0])
    assert plain.acc.open[("t", 0)].limit == 16384
    assert plain.acc.observe("t", 10_000, 2_000) == pytest.approx(0.995)   # kept, but unused uncompressed
    h = _Harness(batch_size=16384, compressed=True)
    h.open("t", [0])
    assert h.acc.open[("t", 0)].limit == 61 + int((16384 - 61) / 1.05)
    assert h.acc.observe("unknown", 100, 50) is None
    for i in range(100):
        ratio = h.acc.observe("t", 10_000, 3_000)
    assert ratio == pytest.approx(0.5, abs=1e-9)                   # 1.0 - 100 * 0.005
    assert h.acc.open[("t", 0)].limit == 61 + int((16384 - 61) / 1.05)   # an open batch keeps its limit
    h.acc.seal(("t", 0))
    with h.lock:
        h.acc.put(("t", 0), ProducerBatch("t", 0, RecordBatchBuilder(None)))
    fresh = h.acc.open[("t", 0)]
    assert fresh.limit == 61 + int((16384 - 61) / (0.5 * 1.05))
    while fresh.record_count < 40:                                   # 31,139 bytes: twice what batch_size is
        h.acc.send("t", b"x" * 700, None, None, 0)
    assert ("t", 0) in h.acc.open and h.acc.open[("t", 0)] is fresh
    assert h.acc.observe("t", 10_000, 5_200) == pytest.approx(0.55)  # worse than 0.5: up by 0.05 at least
    assert h.acc.observe("t", 10_000, 9_000) == pytest.approx(0.9)   # ... or to what it saw
    big = _Harness(batch_size=1 << 20, compressed=True, max_request_size=100_000)
    big.open("t", [0])
    for _ in range(200):
        big.acc.observe("t", 10_000, 1)
    big.acc.seal(("t", 0))
    with big.lock:
        big.acc.put(("t", 0), ProducerBatch("t", 0, RecordBatchBuilder(None)))
    while not big.sealed:
        big.acc.send("t", b"x" * 1000, None, None, 0)
    assert big.sealed[0][1].bytes <= 100_000                          # never past max_request_size
