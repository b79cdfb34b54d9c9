# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Writing v2 record batches (build.pyx): the builders, the producer's
batch that holds records until they are encoded, and the job a batch is
encoded from without the GIL."""

from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t

from kwire._core.buffers cimport GBuf

cdef extern from *:
    """
    #include <sys/time.h>
    static long long kwire_now_ms(void) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    }
    """
    long long kwire_now_ms() nogil


cdef inline int64_t timestamp_arg(object ts) except? -1:
    return kwire_now_ms() if ts is None else <int64_t>ts


cdef extern from "pythread.h":
    ctypedef void* PyThread_type_lock
    PyThread_type_lock PyThread_allocate_lock() nogil
    void PyThread_free_lock(PyThread_type_lock) nogil
    int PyThread_acquire_lock_timed(PyThread_type_lock, long long microseconds, int intr_flag) nogil
    void PyThread_release_lock(PyThread_type_lock) nogil
    unsigned long PyThread_start_new_thread(void (*func)(void*) noexcept nogil, void* arg) nogil
    unsigned long PYTHREAD_INVALID_THREAD_ID


cdef struct Held:                  # the records a ProducerBatch holds until its batch is built
    PyObject** refs                # per record: key, value, encoded headers (references to bytes, or NULL)
    int64_t* ts
    int32_t* sizes                 # per record: key size, value size (-1: null), header count
    Py_ssize_t n, cap
    Py_ssize_t bytes               # their size once encoded


cdef struct EncodeJob:             # one batch for build_batches
    GBuf* records                  # the builder's records (and what it counts of them)
    int32_t* count
    int64_t* first_ts
    int64_t* max_ts
    Held* held                     # records to append to the builder first (a ProducerBatch's), or NULL
    GBuf direct                    # uncompressed, they are encoded straight into the batch: its payload
    int mode                       # how the payload is made: CODEC_NONE copied from src, CODEC_LZ4, CODEC_ZSTD
    int level
    const char* src                # the records (or the payload, already compressed in Python)
    Py_ssize_t src_len
    int64_t base_offset            # the header's fields
    int32_t leader_epoch
    int attributes
    bint has_last_offset_delta
    int32_t last_offset_delta
    bint has_log_append_ts
    int64_t log_append_ts
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    char* batch                    # the batch ...
    char* dst                      # ... and where its payload goes (batch + V2_HEADER) ...
    Py_ssize_t cap                 # ... with room for this much
    Py_ssize_t size                # the whole batch's size once encoded; -1: the codec failed; -2: no memory


cdef class _Builder:
    cdef GBuf buf
    cdef int codec
    cdef int32_t count
    cdef int64_t first_ts
    cdef int64_t max_ts
    cdef object level

    cdef bytes take(self)
    cdef int reserve(self, Py_ssize_t n) except -1


cdef class RecordBatchBuilder(_Builder):
    cdef int64_t base_offset
    cdef int64_t producer_id
    cdef int16_t producer_epoch
    cdef int32_t base_sequence
    cdef int32_t leader_epoch
    cdef int attributes
    cdef object log_append_max_ts
    cdef GBuf hbuf                # encoded headers of the last append
    cdef int32_t hcount           # how many headers hbuf holds
    cdef tuple hitems             # the (immutable) pairs hbuf was made from, or None
    cdef bytes staged             # the payload while encode_batch copies it (compressed in Python)

    cdef bint same_headers(self, object headers)
    cdef int encode_headers(self, object headers) except -1
    cdef int add(self, value, key, headers, int64_t ts) except -1
    cdef bytes plan(self, EncodeJob* job, Held* held, object last_offset_delta, object producer_id,
                    object producer_epoch, object base_sequence)


cdef class ProducerBatch:
    cdef readonly str topic
    cdef readonly int partition
    cdef public RecordBatchBuilder builder
    cdef public Py_ssize_t bytes
    cdef readonly Py_ssize_t refused_size
    cdef Held held
    cdef bytes hbytes               # the last headers encoded, reused while the same pairs come again
    cdef int32_t hcount
    cdef public bint encoded        # its records are encoded as they come (send_arrow), not held
    cdef readonly Py_ssize_t limit  # encoded (uncompressed) bytes at which it is full: the Accumulator's
                                    # batch_size through its topic's compression estimate, set by put()

    cdef int add(self, value, key, headers, int64_t ts, Py_ssize_t limit) except -1
    cdef int add_raw(self, const char* k, Py_ssize_t kn, const char* v, Py_ssize_t vn, int32_t hcount,
                     const char* h, Py_ssize_t hlen, int64_t ts, Py_ssize_t limit) except -1
