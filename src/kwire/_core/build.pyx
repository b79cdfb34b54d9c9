# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Writing v2 record batches: :class:`RecordBatchBuilder`, the producer's
:class:`ProducerBatch`, :func:`build_batches` (which encodes and compresses
batches without the GIL, on helper threads) and :func:`restamp_batch`."""

cimport cython
from cpython.bytes cimport (PyBytes_AS_STRING, PyBytes_Check, PyBytes_CheckExact, PyBytes_FromStringAndSize,
                            PyBytes_GET_SIZE)
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.list cimport PyList_CheckExact
from cpython.object cimport PyObject
from cpython.tuple cimport PyTuple_CheckExact
from cpython.unicode cimport PyUnicode_Check, PyUnicode_CheckExact
from libc.stdint cimport INT32_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memset

from kwire._core.buffers cimport (Bytes, GBuf, borrow, gbuf_reserve, put_be16, put_be32, put_be64, put_raw,
                                  put_varint, store_be32, unborrow, varint_size)
from kwire._core.consts cimport *
from kwire._core.native cimport (LZ4_DEFAULT_LEVEL, ZSTD_DEFAULT_LEVEL, _lz4f_compress, _zstd_compress, _zstd_create,
                                 _zstd_free, crc32c, native_bound, native_compress)
from kwire._core.records cimport Batch, read_batch

import os as _os

from kwire import compression as _compression
from kwire.errors import KwireError

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    const char* bytes_data "PyBytes_AS_STRING"(PyObject* o) nogil     # for bytes held by reference
    Py_ssize_t bytes_size "PyBytes_GET_SIZE"(PyObject* o) nogil
    void Py_XDECREF_ "Py_XDECREF"(PyObject* o)
    void Py_INCREF_ptr "Py_INCREF"(PyObject* o)

cdef object _compress = _compression.compress
cdef object _codec_id = _compression.codec_id

cdef char EMPTY_SRC[1]


cdef inline Py_ssize_t record_body_size(int64_t ts_delta, int32_t offset_delta, Py_ssize_t kn, Py_ssize_t vn,
                                         int32_t hcount, Py_ssize_t hlen) noexcept nogil:
    """Size of a v2 record after its length varint (``kn``/``vn`` -1: null)."""
    return (1 + varint_size(ts_delta) + varint_size(offset_delta) + varint_size(kn) + max(kn, 0)
            + varint_size(vn) + max(vn, 0) + varint_size(hcount) + hlen)


cdef int add_record(GBuf* buf, int32_t* count, int64_t* first_ts, int64_t* max_ts,
                    const char* k, Py_ssize_t kn, const char* v, Py_ssize_t vn, int32_t hcount,
                    const char* h, Py_ssize_t hlen, int64_t ts, bint fixed=False) noexcept nogil:
    """Append one v2 record whose sizes were checked (``kn``/``vn`` -1:
    null; ``h``: its ``hcount`` headers encoded) to a builder's ``buf``,
    counting it; -1 if out of memory, or out of room in a ``fixed`` buffer
    (one that is not malloc'd: it must not grow)."""
    cdef int64_t ts_delta
    cdef Py_ssize_t body
    if count[0] == 0:
        first_ts[0] = max_ts[0] = ts
    elif ts > max_ts[0]:
        max_ts[0] = ts
    ts_delta = <int64_t>(<uint64_t>ts - <uint64_t>first_ts[0])
    body = record_body_size(ts_delta, count[0], kn, vn, hcount, hlen)
    if fixed and buf.len + varint_size(body) + body > buf.cap:
        return -1
    if gbuf_reserve(buf, varint_size(body) + body) < 0:
        return -1
    put_varint(buf, body)
    buf.data[buf.len] = 0
    buf.len += 1
    put_varint(buf, ts_delta)
    put_varint(buf, count[0])
    put_varint(buf, kn)
    put_raw(buf, k, kn)
    put_varint(buf, vn)
    put_raw(buf, v, vn)
    put_varint(buf, hcount)
    put_raw(buf, h, hlen)
    count[0] += 1
    return 0


@cython.auto_pickle(False)
cdef class _Builder:

    def __dealloc__(self):
        free(self.buf.data)

    def __len__(self):
        return self.count

    cdef bytes take(self):
        return PyBytes_FromStringAndSize(self.buf.data, self.buf.len)

    cdef int reserve(self, Py_ssize_t n) except -1:
        if gbuf_reserve(&self.buf, n) < 0:
            raise MemoryError()
        return 0


cdef class RecordBatchBuilder(_Builder):
    """Builds one RecordBatch v2 (magic 2).

    ``compression``: None/"none", "gzip", "snappy", "lz4", "zstd" or a codec id.
    ``base_offset``, ``producer_id``, ``producer_epoch``, ``base_sequence``,
    ``partition_leader_epoch``: the batch header fields (producers leave the
    defaults unless idempotent). ``transactional`` and ``is_control`` set the
    attribute bits; ``log_append_time`` marks the batch LogAppendTime with
    ``max_timestamp`` as every record's time (what a broker writes).
    """

    def __init__(self, compression=None, *, int64_t base_offset=0, int64_t producer_id=-1,
                 int producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False,
                 bint is_control=False, int32_t partition_leader_epoch=-1,
                 bint log_append_time=False, max_timestamp=None, compression_level=None):
        self.codec = _codec_id(compression)
        self.level = compression_level
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.leader_epoch = partition_leader_epoch
        self.attributes = (self.codec | (ATTR_TRANSACTIONAL if transactional else 0)
                           | (ATTR_CONTROL if is_control else 0)
                           | (ATTR_LOG_APPEND_TIME if log_append_time else 0))
        if log_append_time and max_timestamp is None:
            raise ValueError("a LogAppendTime batch needs max_timestamp")
        self.log_append_max_ts = max_timestamp

    def __dealloc__(self):
        free(self.hbuf.data)

    @property
    def size_in_bytes(self):
        """Size of the batch so far, before compression."""
        return V2_HEADER + self.buf.len

    cdef bint same_headers(self, object headers):
        """True if ``headers`` holds the very pair objects hbuf was encoded
        from (producers usually pass the same headers again)."""
        cdef tuple items = self.hitems
        cdef Py_ssize_t i
        if items is None or not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
            return False
        if len(headers) != len(items):
            return False
        for i in range(len(items)):
            if headers[i] is not items[i]:
                return False
        return True

    cdef int encode_headers(self, object headers) except -1:
        cdef Bytes v
        cdef const char* k
        cdef Py_ssize_t kn
        cdef bint cacheable = PyList_CheckExact(headers) or PyTuple_CheckExact(headers)
        if self.same_headers(headers):
            return 0
        self.hbuf.len = 0
        self.hcount = 0
        self.hitems = None
        if isinstance(headers, dict):
            headers = headers.items()
            cacheable = False
        for pair in headers:
            # the encoding may be reused only if nothing in it can change
            cacheable = cacheable and PyTuple_CheckExact(pair)
            hk, hv = pair
            cacheable = cacheable and (PyUnicode_CheckExact(hk) or PyBytes_CheckExact(hk)) and (
                hv is None or PyBytes_CheckExact(hv))
            if PyUnicode_Check(hk):
                k = PyUnicode_AsUTF8AndSize(hk, &kn)
            elif PyBytes_Check(hk):
                k = PyBytes_AS_STRING(hk)
                kn = PyBytes_GET_SIZE(hk)
            else:
                raise TypeError(f"header key must be str, not {type(hk).__name__}")
            borrow(hv, &v, "header value")
            try:
                if gbuf_reserve(&self.hbuf, 20 + kn + max(v.n, 0)) < 0:
                    raise MemoryError()
                put_varint(&self.hbuf, kn)
                put_raw(&self.hbuf, k, kn)
                put_varint(&self.hbuf, v.n)
                put_raw(&self.hbuf, v.p, v.n)
            finally:
                unborrow(&v)
            self.hcount += 1
        if cacheable:
            self.hitems = tuple(headers)
        return 0

    def append(self, value, key=None, headers=None, timestamp=None):
        """Add a record; returns its offset delta in the batch. ``timestamp``
        is milliseconds since the epoch (now if None); ``headers`` is a
        sequence of ``(str, bytes | None)`` pairs or a dict."""
        return self.add(value, key, headers, timestamp_arg(timestamp))

    cdef int add(self, value, key, headers, int64_t ts) except -1:
        cdef Bytes k, v
        cdef int32_t hcount = 0
        cdef Py_ssize_t hlen = 0
        if self.count == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31 - 1 records")
        if headers:
            self.encode_headers(headers)
            hcount = self.hcount
            hlen = self.hbuf.len
        borrow(key, &k, "key")
        try:
            borrow(value, &v, "value")
            try:
                if record_body_size(<int64_t>(<uint64_t>ts - <uint64_t>(self.first_ts if self.count else ts)),
                                    self.count, k.n, v.n, hcount, hlen) > INT32_MAX:
                    raise ValueError("record is larger than Kafka allows (2 GiB)")
                if add_record(&self.buf, &self.count, &self.first_ts, &self.max_ts, k.p, k.n, v.p, v.n, hcount,
                              self.hbuf.data, hlen, ts) < 0:
                    raise MemoryError()
            finally:
                unborrow(&v)
        finally:
            unborrow(&k)
        return self.count - 1

    def build(self, *, last_offset_delta=None, producer_id=None, producer_epoch=None, base_sequence=None):
        """The encoded batch as bytes. ``last_offset_delta`` overrides the
        default (record count - 1), e.g. to write what compaction leaves;
        ``producer_id``, ``producer_epoch`` and ``base_sequence`` override the
        constructor's (a producer assigns sequences when a batch is sent)."""
        return _build_batches([self], [(producer_id, producer_epoch, base_sequence)], last_offset_delta)[0]

    cdef bytes plan(self, EncodeJob* job, Held* held, object last_offset_delta, object producer_id,
                    object producer_epoch, object base_sequence):
        """Plan encoding the batch (GIL held), with the ``held`` records (or
        NULL) appended first: fill in ``job`` for :func:`encode_batch` and
        return the bytes the batch will be written into, sized for the
        worst case. gzip and snappy (and lz4 or zstd without their C entry
        points) are compressed here, through the Python API."""
        cdef bytes result
        memset(job, 0, sizeof(EncodeJob))
        job.records = &self.buf
        job.count = &self.count
        job.first_ts = &self.first_ts
        job.max_ts = &self.max_ts
        job.held = held
        if held != NULL and self.count:
            raise ValueError("records held for a builder that has records of its own")
        job.src_len = held.bytes if held != NULL else self.buf.len
        job.base_offset = self.base_offset
        job.leader_epoch = self.leader_epoch
        job.attributes = self.attributes
        job.has_last_offset_delta = last_offset_delta is not None
        if job.has_last_offset_delta:
            job.last_offset_delta = last_offset_delta
        job.has_log_append_ts = self.log_append_max_ts is not None
        if job.has_log_append_ts:
            job.log_append_ts = self.log_append_max_ts
        job.producer_id = self.producer_id if producer_id is None else <int64_t>producer_id
        job.producer_epoch = self.producer_epoch if producer_epoch is None else <int16_t>producer_epoch
        job.base_sequence = self.base_sequence if base_sequence is None else <int32_t>base_sequence
        if self.codec == CODEC_LZ4 and _lz4f_compress != NULL:
            job.mode = CODEC_LZ4
            job.level = LZ4_DEFAULT_LEVEL if self.level is None else self.level
        elif self.codec == CODEC_ZSTD and _zstd_compress != NULL:
            job.mode = CODEC_ZSTD
            job.level = ZSTD_DEFAULT_LEVEL if self.level is None else self.level
        elif self.codec:
            if held != NULL and held_encode(held, &self.buf, job) < 0:
                raise MemoryError()
            self.staged = _compress(self.codec, memoryview(self.take()), 2, self.level)
            job.src = PyBytes_AS_STRING(self.staged)
            job.src_len = PyBytes_GET_SIZE(self.staged)
        job.cap = native_bound(job.mode, job.level, job.src_len)
        result = PyBytes_FromStringAndSize(NULL, V2_HEADER + job.cap)
        job.batch = PyBytes_AS_STRING(result)
        job.dst = job.batch + V2_HEADER
        return result


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define kwire_prefetch(p) __builtin_prefetch((const void*)(p))
    #else
    #define kwire_prefetch(p) ((void)(p))
    #endif
    """
    void prefetch "kwire_prefetch"(const void* p) nogil

cdef enum:
    PREFETCH_AHEAD = 8      # records: enough to cover a cache miss while encoding the ones between


cdef int held_encode(Held* held, GBuf* records, EncodeJob* job, bint fixed=False) noexcept nogil:
    """Append the held records to ``records`` (counted by
    the builder's fields in ``job``; ``fixed``: a buffer that must not
    grow); -1 if out of memory or room. No GIL needed: they are bytes
    (immutable) the batch holds references to."""
    cdef Py_ssize_t i
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* h
    if not fixed and gbuf_reserve(records, held.bytes - records.len) < 0:
        return -1
    for i in range(held.n):
        if i + PREFETCH_AHEAD < held.n:     # the objects lie anywhere on the heap: ask for them early
            prefetch(held.refs[3 * (i + PREFETCH_AHEAD)])
            prefetch(held.refs[3 * (i + PREFETCH_AHEAD) + 1])
        k = held.refs[3 * i]
        v = held.refs[3 * i + 1]
        h = held.refs[3 * i + 2]
        if add_record(records, job.count, job.first_ts, job.max_ts,
                      bytes_data(k) if k != NULL else NULL, held.sizes[3 * i],
                      bytes_data(v) if v != NULL else NULL, held.sizes[3 * i + 1],
                      held.sizes[3 * i + 2], bytes_data(h) if h != NULL else NULL,
                      bytes_size(h) if h != NULL else 0, held.ts[i], fixed) < 0:
            return -1
    return 0


cdef void encode_batch(EncodeJob* job, void* zctx, GBuf* scratch) noexcept nogil:
    """Encode the held records (straight into the batch when uncompressed,
    else into ``scratch``), make the payload, then the header and its CRC
    (no GIL needed)."""
    cdef GBuf out
    cdef GBuf* records
    cdef Py_ssize_t n
    cdef int32_t count
    if job.held != NULL and job.src == NULL:
        if job.mode == CODEC_NONE:
            job.direct.data = job.dst     # sized exactly (plan): never reallocated
            job.direct.len = 0
            job.direct.cap = job.cap
            records = &job.direct
        else:
            scratch.len = 0
            records = scratch
        if held_encode(job.held, records, job, records == &job.direct) < 0:
            job.size = -2
            return
        job.src = records.data if records.len else EMPTY_SRC
        job.src_len = records.len
    elif job.src == NULL:
        job.src = job.records.data if job.records.len else EMPTY_SRC    # never NULL for the codecs
        job.src_len = job.records.len
    n = native_compress(job.mode, job.level, job.dst, job.cap, job.src, job.src_len, zctx)
    if n < 0:
        job.size = -1
        return
    job.size = V2_HEADER + n
    count = job.count[0]
    out.data = job.batch
    out.len = 0
    out.cap = V2_HEADER
    put_be64(&out, job.base_offset)
    put_be32(&out, <int32_t>(job.size - LOG_OVERHEAD))
    put_be32(&out, job.leader_epoch)
    out.data[out.len] = 2
    out.len += 5                  # magic, then the CRC
    put_be16(&out, <int16_t>job.attributes)
    put_be32(&out, job.last_offset_delta if job.has_last_offset_delta else count - 1)
    put_be64(&out, job.first_ts[0] if count else -1)
    put_be64(&out, job.log_append_ts if job.has_log_append_ts else (job.max_ts[0] if count else -1))
    put_be64(&out, job.producer_id)
    put_be16(&out, job.producer_epoch)
    put_be32(&out, job.base_sequence)
    put_be32(&out, count)
    store_be32(job.batch + V2_CRC, crc32c(job.batch + V2_CRC_START, job.size - V2_CRC_START))


# Compressing is most of a compressed batch's cost, and one thread doing it
# leaves the other cores idle once send() stops. So build_batches shares the
# jobs of a call between its caller and up to _BUILD_HELPERS native threads
# (started per call: a thread kept between calls would not survive a fork,
# which Spark's Python workers are made by). The threads run no Python:
# encode_batch needs no GIL, and each thread has its own scratch buffer and
# zstd context. Jobs are taken one at a time from a shared counter, so a
# large batch does not hold up the rest.
cdef extern from *:
    """
    #if defined(_MSC_VER)
    #include <windows.h>
    static Py_ssize_t kwire_fetch_add(Py_ssize_t* p, Py_ssize_t v) {
        return (Py_ssize_t)InterlockedExchangeAdd64((volatile LONG64*)p, (LONG64)v);
    }
    #else
    static Py_ssize_t kwire_fetch_add(Py_ssize_t* p, Py_ssize_t v) {
        return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
    }
    #endif
    """
    Py_ssize_t fetch_add "kwire_fetch_add"(Py_ssize_t* p, Py_ssize_t v) noexcept nogil


cdef int _cpus():
    try:
        return len(_os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return _os.cpu_count() or 1


cdef Py_ssize_t _BUILD_HELPERS = max(0, min(_cpus() - 1, 3))


def build_threads(n=None):
    """How many threads one :func:`build_batches` call may encode
    compressed batches on, its caller's included (default: the CPUs this
    process may use, at most 4); with ``n``, set it (1: the caller alone)
    and return the previous value."""
    global _BUILD_HELPERS
    previous = _BUILD_HELPERS + 1
    if n is not None:
        if n < 1:
            raise ValueError("build_threads needs at least 1")
        _BUILD_HELPERS = n - 1
    return previous


cdef struct BuildShare:            # the jobs of one build_batches call, shared with its helper threads
    EncodeJob* jobs
    Py_ssize_t n
    Py_ssize_t next                # the next job to take (atomic)
    Py_ssize_t running             # helpers not finished (atomic): the last one releases done
    Py_ssize_t refs                # holders of this struct (atomic): the last one frees it
    PyThread_type_lock done


cdef void take_jobs(BuildShare* share) noexcept nogil:
    """Encode jobs until none is left, with this thread's own scratch
    buffer and zstd context."""
    cdef GBuf scratch
    cdef void* zctx = NULL
    cdef Py_ssize_t i
    cdef EncodeJob* job
    memset(&scratch, 0, sizeof(GBuf))
    while True:
        i = fetch_add(&share.next, 1)
        if i >= share.n:
            break
        job = &share.jobs[i]
        if job.mode == CODEC_ZSTD and zctx == NULL:
            zctx = _zstd_create()
            if zctx == NULL:
                job.size = -2
                continue
        encode_batch(job, zctx, &scratch)
    free(scratch.data)
    if zctx != NULL:
        _zstd_free(zctx)


cdef void share_unref(BuildShare* share) noexcept nogil:
    if fetch_add(&share.refs, -1) == 1:
        PyThread_free_lock(share.done)
        free(share)


cdef void build_helper(void* arg) noexcept nogil:
    cdef BuildShare* share = <BuildShare*>arg
    take_jobs(share)
    if fetch_add(&share.running, -1) == 1:
        PyThread_release_lock(share.done)
    share_unref(share)


cdef int encode_all(EncodeJob* jobs, Py_ssize_t n, Py_ssize_t helpers) except -1:
    """Encode ``jobs`` on this thread and up to ``helpers`` others (fewer
    if threads cannot be started), without the GIL; returns when all are done."""
    cdef BuildShare* share = <BuildShare*>calloc(1, sizeof(BuildShare))
    cdef Py_ssize_t h, started = 0
    if share == NULL:
        raise MemoryError()
    share.jobs = jobs
    share.n = n
    share.done = PyThread_allocate_lock()
    if share.done == NULL:
        free(share)
        raise MemoryError()
    PyThread_acquire_lock_timed(share.done, 0, 0)        # taken: the last helper releases it
    share.running = helpers
    share.refs = 1 + helpers
    with nogil:
        for h in range(helpers):
            if PyThread_start_new_thread(build_helper, share) == PYTHREAD_INVALID_THREAD_ID:
                break
            started += 1
        if started < helpers:                            # the ones not started neither run nor hold it
            fetch_add(&share.refs, started - helpers)
            if fetch_add(&share.running, started - helpers) == helpers - started:
                PyThread_release_lock(share.done)        # every started one finished already, or none started
        take_jobs(share)
        if helpers:
            PyThread_acquire_lock_timed(share.done, -1, 0)
            PyThread_release_lock(share.done)
        share_unref(share)
    return 0


cdef list _build_batches(list items, list stamps, object last_offset_delta):
    cdef Py_ssize_t i, n
    cdef EncodeJob* jobs
    cdef EncodeJob* job
    cdef RecordBatchBuilder b
    cdef ProducerBatch pb
    cdef Held* held
    cdef list builders = []
    cdef list outs = []
    cdef list built = []
    cdef set seen = set()
    cdef Py_ssize_t compressed = 0
    items = list(items)             # copies no other thread can change while Python code runs (compressing)
    stamps = list(stamps)
    n = len(items)
    if len(stamps) != n:
        raise ValueError("one stamp per builder")
    jobs = <EncodeJob*>calloc(max(n, 1), sizeof(EncodeJob))
    if jobs == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            item = items[i]
            if isinstance(item, ProducerBatch):
                pb = item
                b = pb.builder
                if b is None:
                    raise KwireError("the batch was built already")
                held = NULL if pb.encoded else &pb.held
            elif isinstance(item, RecordBatchBuilder):
                b = item
                held = NULL
            else:
                raise TypeError(f"build_batches takes RecordBatchBuilder or ProducerBatch, not {type(item).__name__}")
            if id(b) in seen:           # two jobs would encode into one builder
                raise ValueError("a batch is given twice")
            seen.add(id(b))
            builders.append(b)
            stamp = stamps[i]
            if stamp is None:
                outs.append(b.plan(&jobs[i], held, last_offset_delta, None, None, None))
            else:
                pid, epoch, seq = stamp          # unpacked: a short tuple is a ValueError, not a read past it
                outs.append(b.plan(&jobs[i], held, last_offset_delta, pid, epoch, seq))
            if jobs[i].mode == CODEC_LZ4 or jobs[i].mode == CODEC_ZSTD:
                compressed += 1
        encode_all(jobs, n, max(0, min(compressed - 1, _BUILD_HELPERS)))
        for i in range(n):
            job = &jobs[i]
            if job.size == -2:
                raise MemoryError()
            if job.size < 0:
                raise KwireError(f"{_compression.CODEC_NAMES[job.mode]} compression of a batch failed")
            if job.size - LOG_OVERHEAD > INT32_MAX:
                raise ValueError("batch is larger than Kafka allows (2 GiB)")
            result = outs[i]
            built.append(result if job.size == PyBytes_GET_SIZE(result)
                         else PyBytes_FromStringAndSize(job.batch, job.size))
        return built
    finally:
        for b in builders:
            b.staged = None
        for item in items:
            if isinstance(item, ProducerBatch):       # built (or failed): it takes no more records
                held_release(&(<ProducerBatch>item).held)
                (<ProducerBatch>item).builder = None
        free(jobs)


def build_batches(list batches not None, list stamps not None):
    """Encode several batches at once, each a :class:`RecordBatchBuilder` or
    a :class:`ProducerBatch`, as ``build`` would one by one: the batches as
    bytes, in order. ``stamps`` holds per batch None or ``(producer_id,
    producer_epoch, base_sequence)`` (each None keeps the builder's). The
    records a ProducerBatch holds are encoded, and uncompressed, lz4 and
    zstd batches made, all in one stretch without the GIL, which is what a
    producer's sender thread needs while another thread is busy sending:
    retaking the GIL per batch would wait out a switch interval each time.
    The batches must not change meanwhile."""
    return _build_batches(batches, stamps, None)


def restamp_batch(batch, int64_t producer_id, int producer_epoch, int32_t base_sequence):
    """A copy of the v2 batch ``batch`` with new producer id, epoch and base
    sequence and its CRC recomputed (a producer re-sending a batch after its
    epoch was bumped). The batch must be one whole, well-formed v2 batch."""
    cdef Py_buffer view
    cdef Batch b
    cdef int err = 0
    cdef bytes out
    cdef char* q
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        if read_batch(<const uint8_t*>view.buf, 0, view.len, &b, &err) != 1 or b.magic != 2 or b.total != view.len:
            raise ValueError("restamp_batch needs exactly one whole v2 record batch")
        out = PyBytes_FromStringAndSize(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    q = PyBytes_AS_STRING(out)
    store_be32(q + V2_PRODUCER_ID, <uint32_t>(<uint64_t>producer_id >> 32))
    store_be32(q + V2_PRODUCER_ID + 4, <uint32_t>(<uint64_t>producer_id & 0xFFFFFFFF))
    q[V2_PRODUCER_EPOCH] = <char>((producer_epoch >> 8) & 0xFF)
    q[V2_PRODUCER_EPOCH + 1] = <char>(producer_epoch & 0xFF)
    store_be32(q + V2_BASE_SEQUENCE, <uint32_t>base_sequence)
    store_be32(q + V2_CRC, crc32c(<const uint8_t*>q + V2_CRC_START, PyBytes_GET_SIZE(out) - V2_CRC_START))
    return out


# ------------------------------------------------- the producer's batches
cdef int held_grow(Held* h, Py_ssize_t cap) noexcept:
    """Room for ``cap`` records in ``h``'s arrays; -1 if out of memory
    (what they held is kept)."""
    cdef void* p = realloc(h.refs, 3 * cap * sizeof(PyObject*))
    if p == NULL:
        return -1
    h.refs = <PyObject**>p
    p = realloc(h.ts, cap * sizeof(int64_t))
    if p == NULL:
        return -1
    h.ts = <int64_t*>p
    p = realloc(h.sizes, 3 * cap * sizeof(int32_t))
    if p == NULL:
        return -1
    h.sizes = <int32_t*>p
    h.cap = cap
    return 0


@cython.auto_pickle(False)
cdef class ProducerBatch:
    """The producer's batch of one partition while it takes records. It
    holds each record by reference (key and value as bytes, a copy made of
    other buffers, headers encoded) with what its future reports
    (timestamp, key and value sizes); :func:`build_batches` encodes the
    records into ``builder`` (which starts empty) and builds the batch, on
    the sender thread without the GIL, so ``send()`` does not encode.
    An ``encoded`` batch takes records from ``send_arrow`` instead, encoded
    into ``builder`` as they come from the Arrow buffers (:meth:`add_raw`:
    nothing to hold, no Python object per record); it refuses ``send()``'s
    records, which then start a batch of their own.
    ``bytes`` is what the batch counts against ``buffer_memory``;
    ``refused_size`` the size a batch of the last record it refused (for
    want of room, see :meth:`Accumulator.append`) alone would have;
    ``limit`` the encoded size at which it is full (the Accumulator sets
    it from ``batch_size`` when it opens the batch).
    Subclassed by the producer for its send state."""

    def __cinit__(self, str topic not None, int partition, RecordBatchBuilder builder not None, *args, **kwargs):
        if len(builder):
            raise ValueError("a ProducerBatch's builder must start empty")
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.limit = INT32_MAX

    def __dealloc__(self):
        held_release(&self.held)
        free(self.held.ts)
        free(self.held.sizes)

    def reserve(self, Py_ssize_t records):
        """Make room for ``records`` records at once (the producer passes the
        count of the partition's previous batch), so a batch's arrays are
        not grown and copied while send() fills it."""
        if self.builder is None:
            raise KwireError("the batch was already sealed")
        if records > self.held.cap and held_grow(&self.held, min(records, 1 << 20)) < 0:
            raise MemoryError()

    cdef int add(self, value, key, headers, int64_t ts, Py_ssize_t limit) except -1:
        """Hold one record (the producer's lock held); returns its index, or
        -2 (holding nothing) if the batch would then pass ``limit`` bytes
        encoded (uncompressed, header included; at most INT32_MAX, what a
        batch can be): the record does not fit. ``refused_size`` is then
        the size of a batch of it alone when the batch is empty."""
        cdef Held* h = &self.held
        cdef Py_ssize_t index = h.n, body, size, kn, vn, hlen = 0
        cdef int32_t hcount = 0
        cdef PyObject* k = NULL
        cdef PyObject* v = NULL
        if self.builder is None:
            raise KwireError("the batch was already sealed")
        if self.encoded:                                # send_arrow's: no room for a held record
            self.refused_size = 0
            return -2
        if index == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31 - 1 records")
        if index >= h.cap and held_grow(h, max(h.cap * 2, 64)) < 0:
            raise MemoryError()
        if headers:
            if self.hbytes is None or not self.builder.same_headers(headers):
                self.builder.encode_headers(headers)
                self.hbytes = PyBytes_FromStringAndSize(self.builder.hbuf.data, self.builder.hbuf.len)
                self.hcount = self.builder.hcount
            hcount = self.hcount
            hlen = PyBytes_GET_SIZE(self.hbytes)
        hold(key, &k, "key")
        try:
            hold(value, &v, "value")
        except BaseException:
            Py_XDECREF_(k)
            raise
        kn = bytes_size(k) if k != NULL else -1
        vn = bytes_size(v) if v != NULL else -1
        body = record_body_size(<int64_t>(<uint64_t>ts - <uint64_t>(h.ts[0] if index else ts)), <int32_t>index,
                                kn, vn, hcount, hlen)
        size = varint_size(body) + body
        if V2_HEADER + h.bytes + size > limit:          # limit <= INT32_MAX: body too, as Kafka needs
            Py_XDECREF_(k)
            Py_XDECREF_(v)
            self.refused_size = V2_HEADER + size
            return -2
        h.refs[3 * index] = k
        h.refs[3 * index + 1] = v
        h.refs[3 * index + 2] = NULL
        if hcount:
            h.refs[3 * index + 2] = <PyObject*>self.hbytes
            Py_INCREF_ptr(h.refs[3 * index + 2])
        h.ts[index] = ts
        h.sizes[3 * index] = <int32_t>kn
        h.sizes[3 * index + 1] = <int32_t>vn
        h.sizes[3 * index + 2] = hcount
        h.bytes += size
        h.n = index + 1
        return <int>index

    cdef int add_raw(self, const char* k, Py_ssize_t kn, const char* v, Py_ssize_t vn, int32_t hcount,
                     const char* h, Py_ssize_t hlen, int64_t ts, Py_ssize_t limit) except -1:
        """Encode one record into an ``encoded`` batch's builder (the
        producer's lock held; ``kn``/``vn`` -1: null; ``h``: its ``hcount``
        headers encoded); returns its index, or -2 (nothing added) if the
        batch would then pass ``limit`` bytes (``refused_size`` as for
        :meth:`add`). Only the count and the encoded size are kept: such
        records have no per-record futures."""
        cdef RecordBatchBuilder b = self.builder
        cdef Py_ssize_t index = self.held.n, body, size
        if b is None:
            raise KwireError("the batch was already sealed")
        if not self.encoded:
            raise KwireError("add_raw on a batch that holds send()'s records")
        if index == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31 - 1 records")
        if kn > INT32_MAX or vn > INT32_MAX:
            raise ValueError("a key or value is larger than Kafka allows (2 GiB)")
        body = record_body_size(<int64_t>(<uint64_t>ts - <uint64_t>(b.first_ts if index else ts)), <int32_t>index,
                                kn, vn, hcount, hlen)
        size = varint_size(body) + body
        if V2_HEADER + self.held.bytes + size > limit:
            self.refused_size = V2_HEADER + size
            return -2
        if add_record(&b.buf, &b.count, &b.first_ts, &b.max_ts, k, kn, v, vn, hcount, h, hlen, ts) < 0:
            raise MemoryError()
        self.held.n = index + 1
        self.held.bytes += size
        return <int>index

    def append(self, value, key, headers, int64_t timestamp):
        """Hold one record (the producer's lock held); returns its index."""
        cdef int index = self.add(value, key, headers, timestamp, INT32_MAX)
        if index < 0:
            raise ValueError(f"a batch with this record would be {self.refused_size} bytes, larger than Kafka "
                             "allows (2 GiB)")
        return index

    @property
    def record_count(self):
        return self.held.n

    @property
    def encoded_size(self):
        """The size of its records once encoded (uncompressed)."""
        return self.held.bytes

    def record_meta(self, Py_ssize_t index):
        """``(timestamp, key size, value size)`` of record ``index``."""
        if not 0 <= index < self.held.n:
            raise IndexError(index)
        if self.encoded:
            raise KwireError("records sent with send_arrow have no per-record metadata")
        return self.held.ts[index], self.held.sizes[3 * index], self.held.sizes[3 * index + 1]


cdef inline int hold(object o, PyObject** out, str what) except -1:
    """A reference to ``o`` as bytes in ``out`` (NULL for None): bytes
    themselves, a copy of any other buffer (which could change after
    ``send()`` returns)."""
    cdef Bytes b
    cdef bytes copy
    if o is None:
        out[0] = NULL
        return 0
    if PyBytes_CheckExact(o) and PyBytes_GET_SIZE(o) <= INT32_MAX:    # the usual case, in short
        out[0] = <PyObject*>o
        Py_INCREF_ptr(out[0])
        return 0
    borrow(o, &b, what)          # checks the type and the size
    try:
        if PyBytes_Check(o):
            out[0] = <PyObject*>o
        else:
            copy = PyBytes_FromStringAndSize(b.p, b.n)
            out[0] = <PyObject*>copy
        Py_INCREF_ptr(out[0])
    finally:
        unborrow(&b)
    return 0


cdef void held_release(Held* h) noexcept:
    """Drop the references to the held records (GIL held); their
    timestamps and sizes stay for the futures."""
    cdef Py_ssize_t i
    if h.refs == NULL:
        return
    for i in range(3 * h.n):
        Py_XDECREF_(h.refs[i])
    free(h.refs)
    h.refs = NULL
