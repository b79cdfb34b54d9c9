# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The producer's compiled send path: Kafka's murmur2 partitioner, the
record futures, the producer's lock and the :class:`Accumulator` whose
``send`` appends a record to its partition's open batch without running
Python."""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t, uint32_t

from libc.stdlib cimport free
from libc.string cimport memset

from kwire._core.arrowcols cimport (MAX_ELEMENTS, BinCol, IntCol, ListCol, bin_get, close_bin, close_int, close_list, int_get,
                                    is_valid, list_get, open_bin, open_int, open_list)
from kwire._core.buffers cimport GBuf, gbuf_reserve, put_raw, put_varint, varint_size
from kwire._core.build cimport (ProducerBatch, RecordBatchBuilder, PyThread_acquire_lock_timed, PyThread_allocate_lock,
                                PyThread_free_lock, PyThread_release_lock, PyThread_type_lock, kwire_now_ms)
from kwire._core.consts cimport V2_HEADER

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.number cimport PyNumber_Index

from random import choice as _random_choice, getrandbits as _getrandbits
from time import monotonic as _monotonic

from kwire.errors import InvalidPartitionError, KwireError, ProducerClosedError, RecordTooLargeError


# --------------------------------------------------------------- partitioning
cdef uint32_t murmur2_raw(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    # MurmurHash2 (32 bit) as Kafka's Java client computes it: seed 0x9747b28c,
    # little-endian 4-byte blocks, the tail mixed in before the final mix.
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = 0x9747B28C
    cdef uint32_t k
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t blocks = n & ~3
    h ^= <uint32_t>n
    while i < blocks:
        k = (<uint32_t>p[i]) | (<uint32_t>p[i + 1] << 8) | (<uint32_t>p[i + 2] << 16) | (<uint32_t>p[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
        i += 4
    if n & 3:
        if (n & 3) == 3:
            h ^= <uint32_t>p[blocks + 2] << 16
        if (n & 3) >= 2:
            h ^= <uint32_t>p[blocks + 1] << 8
        h ^= p[blocks]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(data) -> int:
    """Kafka's murmur2 hash of ``data`` (a bytes-like), as the Java client's
    ``Utils.murmur2`` returns it: a signed 32-bit int."""
    cdef Py_buffer view
    cdef uint32_t h
    if PyBytes_CheckExact(data):
        return <int32_t>murmur2_raw(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        h = murmur2_raw(<const uint8_t*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return <int32_t>h


def partition_for_key(key, int num_partitions) -> int:
    """The partition Kafka's default partitioner (and librdkafka's
    ``murmur2_random``) gives a non-null ``key``:
    ``(murmur2(key) & 0x7fffffff) % num_partitions``."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


cdef inline Py_ssize_t key_slot(key, Py_ssize_t n) except -1:
    """:func:`partition_for_key` for the send path (compiled inline)."""
    cdef int32_t h
    if PyBytes_CheckExact(key):
        h = <int32_t>murmur2_raw(<const uint8_t*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
    else:
        h = murmur2(key)
    return (h & 0x7FFFFFFF) % n


# ------------------------------------------------- producer accumulation
# The producer's send() runs here: choosing the partition, appending to the
# partition's open batch and making the record's future are one compiled
# call. Everything else (sealing, sending, retries) is Python, in
# kwire/producer.py, under the same lock.

@cython.auto_pickle(False)
@cython.freelist(256)
@cython.no_gc
cdef class RecordFuture:
    """The future of one sent record (record ``index`` of the producer's
    ``batch``): :meth:`get` returns its ``RecordMetadata`` (partition,
    offset, timestamp, sizes) once the broker acknowledged the batch, or
    raises the batch's error. The producer's batch supplies ``future`` (a
    :class:`kwire.future.Future`) and ``metadata(index)``.

    One is made per send(), so it is kept out of the cyclic GC. It can be
    in a cycle only through a callback that refers to it, on the batch's
    future, and a future drops its callbacks when it completes, which every
    batch's does (acknowledged, failed, or failed at close)."""
    cdef readonly ProducerBatch _batch
    cdef readonly Py_ssize_t _index

    def __init__(self, ProducerBatch batch not None, Py_ssize_t index):
        self._batch = batch
        self._index = index

    def done(self):
        return self._batch.future.done()

    def get(self, timeout=None):
        """Wait up to ``timeout`` s (None: for ever) and return the record's metadata."""
        self._batch.future.result(timeout)
        return self._batch.metadata(self._index)

    def result(self, timeout=None):
        """The same as :meth:`get`."""
        return self.get(timeout)

    def exception(self):
        """The error the record failed with, or None."""
        return self._batch.future.exception()

    def add_callback(self, fn):
        """Call ``fn(metadata, None)`` or ``fn(None, error)`` when done."""
        batch, index = self._batch, self._index

        def cb(f):
            if f.failed():
                fn(None, f.exception())
            else:
                fn(batch.metadata(index), None)

        self._batch.future.add_done_callback(cb)

    def __repr__(self):
        b = self._batch
        if b is None:                 # made with __new__ and never initialised
            return "<RecordFuture unbound>"
        return f"<RecordFuture {b.topic}[{b.partition}] #{self._index} {'done' if self.done() else 'pending'}>"


@cython.auto_pickle(False)
cdef class SendLock:
    """The producer's lock, usable like ``threading.Lock`` (``with``,
    ``acquire(blocking, timeout)``, ``release``, and so by
    ``threading.Condition``), whose compiled users take it without a
    Python call.

    Every acquire and release runs with the GIL held, so the GIL guards
    the lock's state (the extension does not declare itself free-threading
    compatible, so a free-threaded Python keeps its GIL while kwire is
    loaded): taking a free lock is a flag test, with no atomic
    instruction and no clock read (``PyThread_acquire_lock_timed`` reads
    the monotonic clock even when it does not wait, a tenth of a
    ``send()``). A thread that finds the lock taken waits without the GIL
    on ``gate``, a lock kept taken that a release opens while anyone
    waits; a woken waiter tries again, and waits again if another thread
    took the lock first. ``gate_open`` is true exactly while ``gate`` is
    released."""
    cdef PyThread_type_lock gate
    cdef bint held
    cdef bint gate_open
    cdef Py_ssize_t waiters

    def __cinit__(self):
        self.gate = PyThread_allocate_lock()
        if self.gate == NULL:
            raise MemoryError()
        PyThread_acquire_lock_timed(self.gate, 0, 0)      # closed: a new lock is free, so this cannot fail

    def __dealloc__(self):
        if self.gate != NULL:
            if not self.gate_open:
                PyThread_release_lock(self.gate)           # as CPython does: a lock is freed released
            PyThread_free_lock(self.gate)

    cdef inline bint try_acquire(self) noexcept:
        if self.held:
            return False
        self.held = True
        return True

    cdef inline void unlock(self) noexcept:
        self.held = False
        if self.waiters and not self.gate_open:
            self.gate_open = True
            PyThread_release_lock(self.gate)

    def acquire(self, bint blocking=True, double timeout=-1):
        cdef long long us = -1
        cdef int got
        cdef double deadline = 0
        if not blocking:
            if timeout != -1:
                raise ValueError("can't specify a timeout for a non-blocking call")
            return self.try_acquire()
        if timeout != -1 and not timeout >= 0:          # NaN too
            raise ValueError("timeout value must be a non-negative number")
        if self.try_acquire():
            return True
        if timeout >= 0:
            deadline = _monotonic() + timeout
        while True:
            if timeout >= 0:
                us = <long long>((deadline - _monotonic()) * 1e6)
                if us < 0:
                    us = 0
            self.waiters += 1
            with nogil:
                got = PyThread_acquire_lock_timed(self.gate, us, 0)
            self.waiters -= 1
            if got == 1:
                self.gate_open = False
            if self.try_acquire():
                return True
            if got != 1:
                return False                                # timed out

    def release(self):
        if not self.held:
            raise RuntimeError("release unlocked lock")
        self.unlock()

    def locked(self):
        return self.held

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


@cython.final
@cython.auto_pickle(False)
cdef class Generation:
    """A counter that compiled code reads without an attribute lookup.
    The cluster metadata bumps its own each time it takes in a Metadata
    response; the producer's compiled send compares it with the generation
    a topic's partitions were taken at."""
    cdef readonly int64_t value

    def bump(self):
        self.value += 1


@cython.final
cdef class _Topic:
    """What the Accumulator knows of one topic: its partitions as of
    metadata generation ``version`` (-1: none yet; a tuple, which no caller
    can empty under the send path's feet), ``count`` (how many it has: put()
    takes 0 to count - 1), ``sticky`` (the partition keyless records go to,
    or None) and, by partition, the open batch or None (at most ``count``
    slots when put() made them), and ``ratio``: the compressed size its
    batches are estimated to take, per byte of records (Java's
    ``CompressionRatioEstimator``). ``produced``: the bytes keyless records
    added to the sticky partition since it was chosen (KIP-794: it changes
    once they reach ``batch_size``); ``load_parts``/``load_cft``: the
    partitions keyless records may go to next and the cumulative frequency
    table of their weights (Java's ``PartitionLoadStats``, set by
    :meth:`Accumulator.set_load`; None: uniform over ``parts``)."""
    cdef int64_t version
    cdef tuple parts
    cdef Py_ssize_t count
    cdef object sticky
    cdef list slots
    cdef double ratio
    cdef double produced
    cdef tuple load_parts
    cdef tuple load_cft

    def __cinit__(self):
        self.version = -1
        self.slots = []
        self.ratio = 1.0


cdef extern from "Python.h":
    # without Cython's error check: an int too large for Py_ssize_t is -1 with an error set
    Py_ssize_t long_as_ssize "PyLong_AsSsize_t"(object o) noexcept
    PyObject* PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object o) noexcept
    bint PyUnicode_CheckExact(object o) noexcept
    Py_ssize_t PyUnicode_GET_LENGTH(object o) noexcept
    bint PyTuple_CheckExact(object o) noexcept
    bint PyList_CheckExact(object o) noexcept


cdef inline Py_ssize_t field_bound(x) noexcept:
    """Bytes a key, value or header value takes in a record at most (its
    length's varint and itself); -1: neither bytes nor None."""
    cdef Py_ssize_t n
    if x is None:
        return 1
    if not PyBytes_CheckExact(x):
        return -1
    n = PyBytes_GET_SIZE(x)
    return varint_size(n) + n


cdef Py_ssize_t alone_bound(value, key, headers):
    """An upper bound of the size of a v2 batch holding this record alone,
    without encoding it; -1 when only encoding can tell what it is (a key or
    value not bytes or None; headers not a list or tuple of 2-tuples of a
    bytes or ASCII str key and a bytes or None value)."""
    cdef Py_ssize_t n, body = 1 + 10 + 5 + 5    # attributes, timestamp and offset deltas, header count
    cdef Py_ssize_t kb = field_bound(key), vb = field_bound(value)
    if kb < 0 or vb < 0:
        return -1
    body += kb + vb
    if headers:
        if not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
            return -1
        for pair in headers:
            if not PyTuple_CheckExact(pair) or len(<tuple>pair) != 2:
                return -1
            hk = (<tuple>pair)[0]
            if PyBytes_CheckExact(hk):
                n = PyBytes_GET_SIZE(hk)
            elif PyUnicode_CheckExact(hk) and PyUnicode_IS_ASCII(hk):
                n = PyUnicode_GET_LENGTH(hk)
            else:
                return -1
            vb = field_bound((<tuple>pair)[1])
            if vb < 0:
                return -1
            body += varint_size(n) + n + vb
    return V2_HEADER + varint_size(body) + body


# Java's compression estimate (CompressionRatioEstimator, MemoryRecordsBuilder):
# the estimate times this is a batch's expected share once compressed; it
# moves up by at least the first step, down by the second. The floor only
# keeps a freak batch (all zeros) from making the next ones huge: max_batch
# bounds them anyway.
cdef double COMPRESSION_MARGIN = 1.05
cdef double RATIO_WORSE_STEP = 0.05
cdef double RATIO_BETTER_STEP = 0.005
cdef double RATIO_FLOOR = 0.01

# The Accumulator's cache of the previous send's topic starts with this,
# which no caller can pass (send() takes a str), so a first call cannot
# match it.
cdef object _NO_TOPIC = object()


# ----------------------------------------------------------------- Arrow
cdef struct ArrowRows:            # the columns of one send_arrow call
    Py_ssize_t n
    BinCol key, value, hkey, hvalue
    ListCol hlist
    IntCol part, ts
    const uint8_t* hvalid         # the headers' struct validity (bit hoffset + j), or NULL
    Py_ssize_t hoffset
    Py_buffer hvbuf


cdef int open_rows(ArrowRows* r, Py_ssize_t n, tuple key, tuple value, tuple headers, tuple partition,
                   tuple timestamp) except -1:
    """Views of the columns (see ``Accumulator.send_arrow``); close_rows releases them."""
    memset(r, 0, sizeof(ArrowRows))
    r.n = n
    if key is not None:
        open_bin(&r.key, key[0], key[1], key[2], key[3], n, "key")
    if value is not None:
        open_bin(&r.value, value[0], value[1], value[2], value[3], n, "value")
    if partition is not None:
        open_int(&r.part, partition[0], partition[1], partition[2], n, partition[3], "partition")
    if timestamp is not None:
        open_int(&r.ts, timestamp[0], timestamp[1], timestamp[2], n, True, "timestamp")
    if headers is not None:
        # (list validity, list offsets, list offset, entries, struct validity, struct offset, key col, value col)
        hk, hv = headers[6], headers[7]
        open_list(&r.hlist, headers[0], headers[1], headers[2], n, headers[3], "headers")
        open_bin(&r.hkey, hk[0], hk[1], hk[2], hk[3], headers[3], "headers.key")
        open_bin(&r.hvalue, hv[0], hv[1], hv[2], hv[3], headers[3], "headers.value")
        if headers[4] is not None:
            if not 0 <= headers[5] <= MAX_ELEMENTS:
                raise ValueError(f"Arrow column headers: struct offset {headers[5]} out of range")
            PyObject_GetBuffer(headers[4], &r.hvbuf, PyBUF_SIMPLE)
            if r.hvbuf.len < (headers[5] + headers[3] + 7) // 8:
                PyBuffer_Release(&r.hvbuf)
                raise ValueError("Arrow column headers: its validity buffer is too short")
            r.hvalid = <const uint8_t*>r.hvbuf.buf
            r.hoffset = headers[5]
    return 0


cdef void close_rows(ArrowRows* r) noexcept:
    close_bin(&r.key)
    close_bin(&r.value)
    close_int(&r.part)
    close_int(&r.ts)
    close_list(&r.hlist)
    close_bin(&r.hkey)
    close_bin(&r.hvalue)
    if r.hvalid != NULL:
        PyBuffer_Release(&r.hvbuf)
        r.hvalid = NULL


cdef Py_ssize_t row_headers(ArrowRows* r, Py_ssize_t i, GBuf* out, int32_t* count) except -1:
    """Row ``i``'s headers encoded as a v2 record carries them, in ``out``;
    with ``out`` NULL only checked and measured (the pass that checks every
    row before any is queued). Returns the encoded size."""
    cdef Py_ssize_t lo, hi, j, kn, vn
    cdef Py_ssize_t size = 0
    cdef const char* k
    cdef const char* v
    if out != NULL:
        out.len = 0
    count[0] = 0
    if not r.hlist.opened:
        return 0
    if list_get(&r.hlist, i, &lo, &hi) < 0:
        raise ValueError(f"Arrow column headers: row {i}'s offsets point outside its entries")
    for j in range(lo, hi):
        if not is_valid(r.hvalid, r.hoffset + j):
            raise ValueError(f"Arrow column headers: row {i} has a null header")
        if bin_get(&r.hkey, j, &k, &kn) < 0 or bin_get(&r.hvalue, j, &v, &vn) < 0:
            raise ValueError(f"Arrow column headers: row {i}'s offsets point outside its data")
        if kn < 0:
            raise ValueError(f"Arrow column headers: row {i} has a header with a null key")
        if kn > INT32_MAX or vn > INT32_MAX:
            raise MemoryError()
        size += varint_size(kn) + kn + varint_size(vn) + max(vn, 0)
        count[0] += 1
        if out == NULL:
            continue
        if gbuf_reserve(out, 20 + kn + max(vn, 0)) < 0:
            raise MemoryError()
        put_varint(out, kn)
        put_raw(out, k, kn)
        put_varint(out, vn)
        put_raw(out, v, vn)
    return size


cdef int row_field(BinCol* c, Py_ssize_t i, const char** p, Py_ssize_t* n, str what) except -1:
    """Row ``i`` of a binary column (null, ``n`` -1, if the column is absent)."""
    if not c.opened:
        p[0] = NULL
        n[0] = -1
        return 0
    if bin_get(c, i, p, n) < 0:
        raise ValueError(f"Arrow column {what}: row {i}'s offsets point outside its data")
    return 0


@cython.final
@cython.auto_pickle(False)
cdef class Accumulator:
    """The producer's send state and ``Producer.send`` itself: the one
    owner of partitioning (keyed records by murmur2, keyless ones to the
    topic's sticky partition, which moves on each time its batch is
    sealed), of the open batch of each partition, of the bytes buffered
    and of sealing, all guarded by ``lock`` (a :class:`SendLock`).

    :meth:`send` appends a record to its partition's open batch and returns
    its future. When the partition is known, its batch is open and has
    room and the lock is free, no Python runs; otherwise the rest of the
    path is compiled too, and calls the producer (Python) only for what
    needs it:

    - ``check()``: while :attr:`enabled` is false, before each send: raise
      if the producer has failed or its transaction state refuses a send;
    - ``wait_partitions(topic, deadline, need=1)``: the topic's partitions
      are not known for the current metadata: fetch them and
      :meth:`set_partitions` (or raise, by ``deadline``, a
      ``time.monotonic()`` value); with ``need``, the caller asked for a
      partition the metadata lacks: refresh it and return once it has
      ``need`` partitions or a fresh answer says it has not;
    - ``wait_room(deadline)``: ``buffer_memory`` is full: wait (the lock
      held, and let go while waiting, through a Condition on it) until
      :attr:`buffered` is below it, or raise;
    - ``room_full`` (an attribute; None: ``wait_room`` is called): an
      exception class, raised as ``room_full(buffer_memory)`` instead of
      calling ``wait_room`` for a record that is valid and fits (bytes or
      None key and value, headers of bytes or ASCII str keys and bytes or
      None values): a producer that never waits in ``send`` (kwire.aio's)
      gets its refusal cheaply;
    - ``new_batch(topic, partition)``: a new, empty batch (a
      :class:`ProducerBatch`) for the partition;
    - ``sealed(tp, batch)``: ``batch`` was sealed (lock held): it takes no
      more records and waits to be sent.

    ``generation`` is the cluster metadata's :class:`Generation`. As in
    Java's producer, a batch takes a record only while it stays within
    ``batch_size``, and is sealed once it reaches it or the next record
    does not fit. Uncompressed (``compressed`` false) that is its encoded
    size; compressed, as in Java, its estimated size once compressed: the
    encoded records times the topic's compression estimate times 1.05
    (:meth:`observe` keeps the estimate, from each batch built), so that
    a batch of records that compress well holds more of them; a record larger than that alone
    gets a batch of its own, which never grows past ``max_request_size``
    or ``buffer_memory`` (at most 2**31 - 1, what the format allows): a
    record that alone would is refused with :class:`RecordTooLargeError`.
    So every record a broker takes alone is sent in a batch it takes, even
    when ``max_request_size`` is above the broker's ``message.max.bytes``.
    ``max_block_ms`` bounds the waits of one send."""
    cdef readonly dict open
    cdef dict topics            # topic -> _Topic
    cdef object last_name       # the previous send's topic (_NO_TOPIC before the first), and its _Topic
    cdef _Topic last
    cdef readonly Py_ssize_t buffered
    cdef public bint enabled
    cdef public bint closed
    cdef Py_ssize_t batch_size
    cdef Py_ssize_t max_request_size
    cdef Py_ssize_t buffer_memory
    cdef Py_ssize_t max_batch
    cdef double max_block
    cdef bint compressed
    cdef Generation generation
    cdef SendLock lock
    cdef object check, wait_partitions, wait_room, new_batch, sealed
    cdef public object room_full
    cdef readonly object partitioner
    cdef readonly bint ignore_keys
    cdef bint chose_sticky      # the last choose() gave the sticky partition
    cdef bint hash_keys         # keyed records by murmur2: no partitioner, keys not ignored

    def __init__(self, *, SendLock lock not None, Generation generation not None, check, wait_partitions,
                 wait_room, new_batch, sealed, Py_ssize_t batch_size, Py_ssize_t max_request_size=INT32_MAX,
                 Py_ssize_t buffer_memory=INT32_MAX, double max_block_ms=60000, bint compressed=False,
                 partitioner=None, bint ignore_keys=False):
        self.open = {}
        self.topics = {}
        self.last_name = _NO_TOPIC
        self.last = None
        self.buffered = 0
        self.enabled = True
        self.closed = False
        self.lock = lock
        self.generation = generation
        self.check = check
        self.wait_partitions = wait_partitions
        self.wait_room = wait_room
        self.new_batch = new_batch
        self.sealed = sealed
        self.room_full = None
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.max_batch = min(max_request_size, buffer_memory, INT32_MAX)
        self.max_block = max_block_ms / 1000.0
        self.compressed = compressed
        self.partitioner = partitioner
        self.ignore_keys = ignore_keys
        self.hash_keys = partitioner is None and not ignore_keys

    # ------------------------------------------------------------ partitions
    cdef _Topic topic(self, str name):
        cdef _Topic t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = _Topic()
        return t

    def set_partitions(self, str topic not None, int64_t version, parts, Py_ssize_t count=-1):
        """``topic`` has partitions ``parts`` (a sequence of ints: those a
        record may go to) as of metadata generation ``version``, out of
        ``count`` (the number of partitions the metadata lists, when it
        dropped malformed entries; default: as many as ``parts``). put()
        takes partitions 0 to count - 1 only, whatever ``parts`` holds."""
        cdef _Topic t
        cdef tuple kept = tuple(parts)
        cdef Py_ssize_t n = len(kept) if count < 0 else count
        if not kept:
            raise ValueError("a topic has at least one partition")
        t = self.topic(topic)
        t.version = version
        t.parts = kept
        t.count = n

    cdef Py_ssize_t limit_of(self, _Topic t):
        """The encoded size at which a new batch of ``t`` is full:
        ``batch_size``, or compressed the encoded size whose estimate
        reaches it (Java's ``estimatedBytesWritten``). A batch takes records
        up to this, and never past ``max_batch``."""
        cdef double est
        if not self.compressed:
            return self.batch_size
        est = V2_HEADER + (self.batch_size - V2_HEADER) / (t.ratio * COMPRESSION_MARGIN)
        return <Py_ssize_t>min(est, <double>INT32_MAX)

    def observe(self, str topic not None, Py_ssize_t encoded, Py_ssize_t written):
        """A batch of ``topic`` of ``encoded`` bytes (uncompressed) was
        built as ``written`` bytes: the topic's compression estimate moves
        as Java's does (``CompressionRatioEstimator``): up at once to a
        worse ratio (by at least 0.05), down by 0.005 per better batch.
        Returns the estimate (None: the topic is unknown)."""
        cdef _Topic t = self.topics.get(topic)
        cdef double seen
        if t is None or encoded <= 0:
            return None
        seen = <double>written / encoded
        if seen > t.ratio:
            t.ratio = max(t.ratio + RATIO_WORSE_STEP, seen)
        elif seen < t.ratio:
            t.ratio = max(t.ratio - RATIO_BETTER_STEP, RATIO_FLOOR)
        return t.ratio

    def known_partitions(self, str topic not None, int64_t version):
        """The partitions set for ``topic`` (a tuple) if they are of
        metadata generation ``version``, else None."""
        cdef _Topic t = self.topics.get(topic)
        return t.parts if t is not None and t.version == version else None

    def sticky_partition(self, str topic not None):
        """The partition ``topic``'s keyless records go to now (None: not
        chosen yet)."""
        cdef _Topic t = self.topics.get(topic)
        return None if t is None else t.sticky

    cdef object choose(self, _Topic t, key, str topic=None, value=None):
        """The partition of a record sent without one: the custom
        ``partitioner``'s answer when there is one (None from it: the
        sticky partition); else murmur2 of ``key`` over the topic's partitions
        (unless ``ignore_keys``), or the sticky partition (chosen when
        there is none, or it is not one of the partitions now). The send
        path's common case does the same inline."""
        self.chose_sticky = False
        if self.partitioner is not None:
            p = self.partitioner(topic, key, value, t.count)
            if p is not None:
                p = PyNumber_Index(p)
                if p < 0:
                    raise ValueError(f"The partitioner generated an invalid partition number: {p}. Partition "
                                     "number should always be non-negative.")
                return p
        elif key is not None and not self.ignore_keys:
            return t.parts[partition_for_key(key, len(t.parts))]
        self.chose_sticky = True
        p = t.sticky
        if p is None or not 0 <= p < t.count:
            p = t.sticky = self.next_partition(t)
            t.produced = 0
        return p

    cdef object next_partition(self, _Topic t):
        """The next sticky partition, as Java's ``BuiltInPartitioner``
        chooses it: at random over the partitions, or, with load figures
        (:meth:`set_load`), at random weighted by each partition's share of
        the cumulative frequency table (the shorter its queue, the likelier)."""
        cdef tuple cft = t.load_cft
        cdef Py_ssize_t lo, hi, mid
        cdef int64_t r
        if cft is None:
            return _random_choice(t.parts)
        r = _getrandbits(31) % <int64_t>cft[len(cft) - 1]
        lo, hi = 0, len(cft)
        while lo < hi:                       # the first entry above r
            mid = (lo + hi) >> 1
            if <int64_t>cft[mid] <= r:
                lo = mid + 1
            else:
                hi = mid
        return t.load_parts[lo]

    cdef void sticky_grew(self, _Topic t, Py_ssize_t growth, bint full):
        """``growth`` bytes went to ``t``'s sticky partition (its batch
        ``full``: sealed by them). As Java's ``BuiltInPartitioner`` (KIP-794),
        the sticky partition changes once ``batch_size`` bytes went to it
        and its last batch is full, or once twice that went to it whatever
        its batch. Compressed, the bytes are their estimated compressed size."""
        t.produced += growth * (t.ratio * COMPRESSION_MARGIN if self.compressed else 1.0)
        if (full and t.produced >= self.batch_size) or t.produced >= 2.0 * self.batch_size:
            t.sticky = self.next_partition(t)
            t.produced = 0

    def partition_load(self, str topic not None):
        """What :meth:`set_load` made of ``topic``'s queues: (the
        partitions keyless records may go to next, the cumulative frequency
        table of their weights), or None (uniform)."""
        cdef _Topic t = self.topics.get(topic)
        return None if t is None or t.load_cft is None else (t.load_parts, t.load_cft)

    def set_load(self, str topic not None, parts, queue_sizes):
        """The queue (batches waiting, the open one included) of each of
        ``topic``'s partitions ``parts`` that keyless records may go to
        (those with a leader, and with ``partitioner_availability_timeout_ms``
        not overdue), as Java's ``RecordAccumulator.ready`` measures them
        for adaptive partitioning (KIP-794); None: no figures (the next
        sticky partition is chosen uniformly). As Java's
        ``updatePartitionLoadStats``: each partition weighs ``max + 1 -
        its queue``, and equal queues over every partition mean uniform."""
        cdef _Topic t = self.topics.get(topic)
        cdef Py_ssize_t i, n, top, total
        if t is None:
            return
        if parts is None or len(parts) < 1 or t.count < 2:
            t.load_parts = t.load_cft = None
            return
        sizes = list(queue_sizes)
        n = len(sizes)
        top = max(sizes)
        if n >= t.count and min(sizes) == top:
            t.load_parts = t.load_cft = None
            return
        cft = []
        total = 0
        for i in range(n):
            total += top + 1 - sizes[i]
            cft.append(total)
        t.load_parts = tuple(parts)
        t.load_cft = tuple(cft)

    # ---------------------------------------------------------- open batches
    def put(self, tuple tp not None, ProducerBatch batch not None):
        """Make ``batch`` the open batch of ``tp`` (lock held). The
        partition must be one of the topic's (set with
        :meth:`set_partitions`): 0 to the partition count - 1, so what is
        kept per partition is bounded by what the topic has."""
        cdef str name
        cdef _Topic t
        cdef list slots
        cdef Py_ssize_t p
        name, p = tp                     # unpacked: a short tuple is a ValueError, not a read past it
        t = self.topics.get(name)
        if t is None or t.parts is None:
            raise ValueError(f"no partitions known for topic {name!r}: set_partitions first")
        if not 0 <= p < t.count:
            raise ValueError(f"partition {p} is not one of topic {name!r}'s {t.count} partitions")
        slots = t.slots
        if len(slots) <= p:
            slots.extend([None] * (p + 1 - len(slots)))
        slots[p] = batch
        self.open[tp] = batch
        batch.limit = self.limit_of(t)

    cdef ProducerBatch take(self, tuple tp):
        """Remove and return the open batch of ``tp`` (lock held; None if it has none)."""
        cdef list slots
        cdef Py_ssize_t p
        batch = self.open.pop(tp, None)
        if batch is None:
            return None
        name, p = tp
        slots = (<_Topic>self.topics[name]).slots
        if 0 <= p < len(slots):          # put() made its slot
            slots[p] = None
        return batch

    def seal(self, tuple tp not None):
        """Seal the open batch of ``tp`` (lock held): it takes no more
        records; a batch with records goes to ``sealed`` (and the topic's
        sticky partition moves on, if it was this one), an empty one is
        dropped. Returns the batch (None: ``tp`` has no open batch)."""
        return self.seal_batch(tp)

    def seal_all(self):
        """Seal every open batch (lock held), as :meth:`seal`."""
        for tp in list(self.open):
            self.seal_batch(tp)

    cdef ProducerBatch seal_batch(self, tuple tp):
        cdef ProducerBatch batch = self.take(tp)
        if batch is not None and batch.held.n:
            self.sealed(tp, batch)
        return batch

    def release(self, ProducerBatch batch not None):
        """``batch`` left the buffer (acknowledged or failed; lock held):
        its bytes no longer count against ``buffer_memory``."""
        self.buffered -= batch.bytes
        batch.bytes = 0

    def clear(self):
        """Forget every open batch (lock held); returns them."""
        batches = list(self.open.values())
        self.open.clear()
        for t in self.topics.values():
            (<_Topic>t).slots = []
        return batches

    def record_too_large(self, Py_ssize_t size, str topic, partition):
        """The error of a record that makes a batch of ``size`` bytes alone."""
        if size > self.max_request_size:
            text = (f"The message is {size} bytes when serialized which is larger than {self.max_request_size}, "
                    "which is the value of the max_request_size configuration.")
        else:
            text = (f"The message is {size} bytes when serialized which is larger than the total memory buffer "
                    f"you have configured with the buffer_memory configuration ({self.buffer_memory}).")
        return RecordTooLargeError(text, api="Produce", topic=topic, partition=partition)

    # ------------------------------------------------------------------ send
    def send(self, str topic not None, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """``Producer.send``'s arguments; returns the record's future."""
        return self.send_record(topic, value, key, headers, partition, timestamp_ms)

    cdef inline object send_record(self, str topic, value, key, headers, partition, timestamp_ms):
        cdef _Topic t
        cdef tuple parts
        cdef list slots
        cdef PyObject* batch
        cdef RecordFuture fut
        cdef Py_ssize_t p
        cdef bint sticky = False
        cdef int64_t ts = kwire_now_ms() if timestamp_ms is None else <int64_t>timestamp_ms
        if not self.enabled:
            return self.send_slow(topic, value, key, headers, partition, ts)
        if topic is self.last_name:
            t = self.last
        else:
            t = self.topics.get(topic)
            if t is None:
                return self.send_slow(topic, value, key, headers, partition, ts)
            self.last_name = topic
            self.last = t
        if partition is None:
            if t.version != self.generation.value:             # partitions of other metadata, or none
                return self.send_slow(topic, value, key, headers, partition, ts)
            if key is not None and self.hash_keys:              # choose(), inline
                parts = t.parts
                partition = parts[key_slot(key, len(parts))]
            elif self.partitioner is not None:                  # a custom partitioner: choose() calls it
                return self.send_slow(topic, value, key, headers, partition, ts)
            else:
                partition = t.sticky
                sticky = True
            if not PyLong_CheckExact(partition):                # no sticky partition yet (None), or odd metadata
                return self.send_slow(topic, value, key, headers, partition, ts)
            p = partition                                       # one of the topic's: small
        else:                                                   # the caller's: any int, or not one
            if not PyLong_CheckExact(partition):
                return self.send_slow(topic, value, key, headers, partition, ts)
            p = long_as_ssize(partition)
            if p == -1 and PyErr_Occurred() != NULL:            # too large for any partition
                PyErr_Clear()
        if not self.lock.try_acquire():
            return self.send_slow(topic, value, key, headers, partition, ts)
        try:
            slots = t.slots
            if 0 <= p < PyList_GET_SIZE(slots):
                batch = PyList_GET_ITEM(slots, p)              # borrowed: the lock keeps it there
                if batch != <PyObject*>None:
                    if sticky:
                        fut = self.add_sticky(t, topic, partition, <ProducerBatch>batch, value, key, headers, ts)
                    else:
                        fut = self.add_to(topic, partition, <ProducerBatch>batch, value, key, headers, ts)
                    if fut is not None:
                        return fut
                elif self.refuses(value, key, headers):     # a new batch needed, no room: refused before any work
                    raise self.room_full(self.buffer_memory)
        finally:
            self.lock.unlock()
        return self.send_slow(topic, value, key, headers, partition, ts, sticky)

    cdef object send_slow(self, str topic, value, key, headers, partition, int64_t ts, bint sticky=False):
        """The rest of :meth:`send`: wait for metadata or room, open and
        seal batches, raise what is wrong with the record. ``sticky``: the
        partition given is the topic's sticky partition (a record without
        key or partition), to choose again when its batch is full."""
        cdef _Topic t
        cdef ProducerBatch batch
        cdef RecordFuture fut
        cdef double deadline
        cdef Py_ssize_t n
        if self.closed:
            raise ProducerClosedError("send() after close()")
        if not self.enabled:
            self.check()
        if partition is not None:
            if isinstance(partition, bool):
                raise TypeError("partition must be an int, not bool")
            partition = PyNumber_Index(partition)
        deadline = _monotonic() + self.max_block                # metadata and room share it
        t = self.topics.get(topic)
        if t is None or t.version != self.generation.value:
            self.wait_partitions(topic, deadline)
            t = self.topics.get(topic)
            if t is None or t.parts is None:
                raise KwireError(f"no partitions known for topic {topic!r}")
        if partition is None:
            partition = self.choose(t, key, topic, value)
            sticky = self.chose_sticky
            if partition >= t.count:
                self.wait_partitions(topic, deadline, partition + 1)   # a custom partitioner's, maybe new
                t = self.topics.get(topic)
                if t is None or t.parts is None:
                    raise KwireError(f"no partitions known for topic {topic!r}")
        elif partition >= t.count:
            # maybe added (CreatePartitions) since this metadata was taken: look again before refusing
            # (Java's producer waits for metadata that has it; a fresh answer without it is final here)
            self.wait_partitions(topic, deadline, partition + 1)
            t = self.topics.get(topic)
            if t is None or t.parts is None:
                raise KwireError(f"no partitions known for topic {topic!r}")
        n = t.count
        if not 0 <= partition < n:
            raise InvalidPartitionError(f"partition {partition} does not exist (topic {topic!r} has {n} "
                                        f"partition{'s: 0 to ' + str(n - 1) if n > 1 else ': 0'})")
        tp = (topic, partition)
        self.lock.acquire()
        try:
            while True:
                if self.closed:           # again under the lock: close() fails what it finds there
                    raise ProducerClosedError("send() after close()")
                batch = self.open.get(tp)
                if batch is None:
                    if self.buffered >= self.buffer_memory:
                        self.make_room(topic, partition, value, key, headers, ts, deadline)  # may let the lock go
                        batch = self.open.get(tp)                                   # ... and one opened meanwhile
                    if batch is None:
                        batch = self.new_batch(topic, partition)
                        self.put(tp, batch)
                if sticky:
                    fut = self.add_sticky(t, topic, partition, batch, value, key, headers, ts)
                else:
                    fut = self.add_to(topic, partition, batch, value, key, headers, ts)
                if fut is not None:
                    return fut
                if not batch.held.n:           # the record alone is too large for a batch
                    self.take(tp)
                    raise self.record_too_large(batch.refused_size, topic, partition)
                self.seal_batch(tp)            # no room left for it: it goes in the partition's next batch
        finally:
            self.lock.release()

    cdef make_room(self, str topic, partition, value, key, headers, int64_t ts, double deadline):
        """``buffer_memory`` is full (lock held): refuse at once a record
        that could never fit, else wait for room (or raise :attr:`room_full`,
        see :meth:`refuses`)."""
        if self.refuses(value, key, headers):
            raise self.room_full(self.buffer_memory)
        cdef ProducerBatch probe = ProducerBatch(topic, partition, RecordBatchBuilder(None))
        probe.add(value, key, headers, ts, INT32_MAX)
        cdef Py_ssize_t size = V2_HEADER + probe.held.bytes
        if size > self.max_batch:
            raise self.record_too_large(size, topic, partition)
        self.wait_room(deadline)

    cdef inline bint refuses(self, value, key, headers) except -1:
        """Whether to raise :attr:`room_full` for this record now: it is
        set, ``buffer_memory`` is full, and the record's bounds show it
        valid and fitting (so no probe encoding, no Python frame: raised
        where this is asked, a refusal costs about what a send does)."""
        return (self.room_full is not None and self.buffered >= self.buffer_memory
                and 0 <= alone_bound(value, key, headers) <= self.max_batch)

    cdef RecordFuture add_sticky(self, _Topic t, str topic, object partition, ProducerBatch batch, value, key,
                                 headers, int64_t ts):
        """:meth:`add_to` for a record of ``t``'s sticky partition: its
        bytes count towards the switch to the next (:meth:`sticky_grew`)."""
        cdef Py_ssize_t before = batch.bytes
        cdef list slots
        cdef RecordFuture fut = self.add_to(topic, partition, batch, value, key, headers, ts)
        if fut is not None:
            slots = t.slots
            self.sticky_grew(t, batch.bytes - before, not (partition < len(slots) and slots[partition] is batch))
        return fut

    cdef RecordFuture add_to(self, str topic, object partition, ProducerBatch batch, value, key, headers,
                             int64_t ts):
        """Append to ``batch`` (lock held): count its growth against the
        buffer, seal it once another record like this one would take it
        past ``batch_size`` (so that the next record starts a new batch at
        once, not after failing to fit), and return the record's future;
        None (nothing added) if the batch has no room for the record
        (``batch_size``, or ``max_batch`` for the first record)."""
        cdef Py_ssize_t size, growth
        cdef int index = batch.add(value, key, headers, ts,
                                   self.max_batch if not batch.held.n else min(batch.limit, self.max_batch))
        cdef RecordFuture fut
        if index < 0:
            return None
        fut = RecordFuture.__new__(RecordFuture)
        fut._index = index
        fut._batch = batch
        size = V2_HEADER + batch.held.bytes
        growth = size - batch.bytes
        self.buffered += growth
        batch.bytes = size
        if size + growth > batch.limit:
            self.seal_batch((topic, partition))
        return fut

    # ----------------------------------------------------------------- Arrow
    cdef Py_ssize_t custom_row(self, _Topic t, str topic, const char* k, Py_ssize_t kn, const char* v,
                               Py_ssize_t vn, Py_ssize_t row) except -1:
        """The partition of Arrow row ``row`` as the custom partitioner
        gives it (its key and value as bytes, None for a null); one the
        topic does not have is refused."""
        key = PyBytes_FromStringAndSize(k, kn) if kn >= 0 else None
        value = PyBytes_FromStringAndSize(v, vn) if vn >= 0 else None
        p = self.choose(t, key, topic, value)
        if p >= t.count:
            raise InvalidPartitionError(f"the partitioner gave partition {p} for row {row}, which topic {topic!r} "
                                        f"does not have ({t.count} partitions)")
        return p

    def send_arrow(self, str topic not None, Py_ssize_t n, tuple key, tuple value, tuple headers, tuple partition,
                   tuple timestamp, list batches not None):
        """``Producer.send_arrow``'s compiled part: ``n`` rows, each column
        given as its Arrow buffers (None: the column is absent), are
        encoded straight into ``topic``'s partitions' open batches, with
        no Python object per row. ``key``/``value``: (validity, offsets,
        data, offset) of a binary column; ``partition``: (validity, data,
        offset, 64-bit?); ``timestamp``: (validity, int64 ms data, offset);
        ``headers``: (list validity, list offsets, list offset, entries,
        struct validity, struct offset, key column, value column). Every
        batch that took rows is appended to ``batches`` once. Checks every
        row (offsets, sizes, partitions) before it queues any; an error
        while waiting for room (or a close meanwhile) leaves the rows
        before it queued: the error's ``rows_queued`` says how many.
        Returns the number of rows queued."""
        cdef ArrowRows r
        cdef GBuf hbuf
        cdef int32_t hcount, h
        cdef Py_ssize_t i, kn, vn, body, worst, size, growth, p, count, hsize
        cdef Py_ssize_t max_part = -1
        cdef const char* k
        cdef const char* v
        cdef int64_t ts, now = kwire_now_ms(), given
        cdef _Topic t
        cdef ProducerBatch batch
        cdef list slots
        cdef set seen = set()
        cdef int index
        cdef bint sticky
        cdef double deadline
        if self.closed:
            raise ProducerClosedError("send_arrow() after close()")
        if not self.enabled:
            self.check()
        if n < 0:
            raise ValueError("negative row count")
        if value is None:
            raise ValueError("send_arrow needs a value column")
        hbuf.data = NULL
        hbuf.len = hbuf.cap = 0
        open_rows(&r, n, key, value, headers, partition, timestamp)
        try:
            # every row checked before any is queued: sizes, offsets, partitions
            for i in range(n):
                row_field(&r.key, i, &k, &kn, "key")
                row_field(&r.value, i, &v, &vn, "value")
                hsize = row_headers(&r, i, NULL, &hcount)      # measured; encoded when queued
                if kn > INT32_MAX or vn > INT32_MAX:
                    raise self.record_too_large(max(kn, vn), topic, None)
                body = 1 + 10 + 5 + varint_size(kn) + max(kn, 0) + varint_size(vn) + max(vn, 0) \
                    + varint_size(hcount) + hsize
                worst = V2_HEADER + varint_size(body) + body
                if worst > self.max_batch:
                    raise self.record_too_large(worst, topic, None)
                if r.part.opened and int_get(&r.part, i, &given):
                    if given < 0:
                        raise InvalidPartitionError(f"partition {given} (row {i}) does not exist")
                    if given > max_part:
                        max_part = given
            deadline = _monotonic() + self.max_block
            t = self.topics.get(topic)
            if t is None or t.version != self.generation.value:
                self.wait_partitions(topic, deadline)
                t = self.topics.get(topic)
            if max_part >= 0 and (t is None or max_part >= t.count):
                self.wait_partitions(topic, deadline, max_part + 1)
                t = self.topics.get(topic)
            if t is None or not t.parts:                  # none: no key hash or sticky choice could be made
                raise KwireError(f"no partitions known for topic {topic!r}")
            if max_part >= t.count:
                raise InvalidPartitionError(f"partition {max_part} does not exist (topic {topic!r} has {t.count} "
                                            "partitions)")
            count = 0
            self.lock.acquire()
            try:
                for i in range(n):
                    row_field(&r.key, i, &k, &kn, "key")
                    row_field(&r.value, i, &v, &vn, "value")
                    row_headers(&r, i, &hbuf, &hcount)
                    ts = now
                    if r.ts.opened:
                        int_get(&r.ts, i, &ts)
                    sticky = False
                    if r.part.opened and int_get(&r.part, i, &given):
                        p = <Py_ssize_t>given
                    elif self.partitioner is not None:
                        p = self.custom_row(t, topic, k, kn, v, vn, i)
                        sticky = self.chose_sticky
                    elif kn >= 0 and not self.ignore_keys:
                        h = <int32_t>murmur2_raw(<const uint8_t*>k, kn)
                        p = t.parts[(h & 0x7FFFFFFF) % len(t.parts)]
                    else:
                        sticky = True
                        p = self.choose(t, None)
                    while True:
                        if self.closed:
                            e = ProducerClosedError("send_arrow() after close()")
                            e.rows_queued = count
                            raise e
                        slots = t.slots
                        batch = <ProducerBatch>slots[p] if p < len(slots) and slots[p] is not None else None
                        if batch is not None and not batch.encoded:
                            self.seal_batch((topic, p))            # send()'s batch: rows start their own
                            batch = None
                        if batch is None:
                            if self.buffered >= self.buffer_memory:
                                try:
                                    self.wait_room(deadline)           # lets the lock go meanwhile
                                except BaseException as e:
                                    e.rows_queued = count              # the rows before it went into batches
                                    raise
                                continue                               # look again: the slot may have changed
                            batch = self.new_batch(topic, p, True)
                            batch.encoded = True
                            self.put((topic, p), batch)
                            batch.builder.reserve(min(batch.limit, 2 * self.batch_size, self.max_batch))   # grown once, not per record
                        index = batch.add_raw(k, kn, v, vn, hcount, hbuf.data, hbuf.len, ts,
                                              self.max_batch if not batch.held.n else min(batch.limit, self.max_batch))
                        if index >= 0:
                            break
                        if not batch.held.n:                   # cannot happen: sizes were checked
                            raise self.record_too_large(batch.refused_size, topic, p)
                        self.seal_batch((topic, p))
                    if batch not in seen:
                        seen.add(batch)
                        batches.append(batch)
                    size = V2_HEADER + batch.held.bytes
                    growth = size - batch.bytes
                    self.buffered += growth
                    batch.bytes = size
                    count += 1
                    if size + growth > batch.limit:
                        self.seal_batch((topic, p))
                        if sticky:
                            self.sticky_grew(t, growth, True)
                    elif sticky:
                        self.sticky_grew(t, growth, False)
            finally:
                self.lock.release()
        finally:
            close_rows(&r)
            free(hbuf.data)
        return count


@cython.auto_pickle(False)
cdef class SendingProducer:
    """The base class of :class:`kwire.Producer`: its compiled ``send``,
    which the producer's :class:`Accumulator` (``_acc``, set once by the
    producer's ``__init__``) runs."""
    cdef public Accumulator _acc

    def send(self, str topic not None, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """Queue one record; returns its future (a :class:`RecordFuture`) at
        once. Blocks only while the topic's metadata is fetched or
        ``buffer_memory`` is full, at most ``max_block_ms``.

        ``value`` and ``key``: bytes-like or None; ``headers``: a sequence
        of (str, bytes-like or None) pairs; ``partition``: the partition,
        or None to let the producer choose (murmur2 of the key, or the
        topic's sticky partition for a record without key);
        ``timestamp_ms``: the record's timestamp, or None for now.

        Raises :class:`~kwire.errors.InvalidPartitionError` for a
        ``partition`` the topic does not have (past the known count: once a
        fresh metadata answer lacks it too, as Java's producer waits for one
        that has it),
        :class:`~kwire.errors.RecordTooLargeError` for a record larger than
        ``max_request_size`` or ``buffer_memory`` serialized,
        :class:`~kwire.producer.BufferFullError` when there was no room
        within ``max_block_ms``, :class:`~kwire.errors.ProducerClosedError`
        after ``close()``, ``TypeError`` for arguments of the wrong type.
        It runs compiled (:class:`Accumulator`), calling Python only to wait
        for metadata or room, to check a transactional producer's state and
        to make a new batch."""
        if self._acc is None:
            raise ProducerClosedError("the producer was not initialised")
        return self._acc.send_record(topic, value, key, headers, partition, timestamp_ms)
