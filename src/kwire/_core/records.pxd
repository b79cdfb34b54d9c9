# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Reading v2 record batches (records.pyx): the batch walk, the record
parser, the result types and the driver that ColumnarDecoder (columnar.pyx)
extends. The per-record parser and the driver's per-batch accounting are
``cdef inline`` here, so a decoder in another module compiles them in place."""

cimport cython
from cpython.buffer cimport Py_buffer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t

from kwire._core.buffers cimport (GBuf, Reader, add_wrap, rd_bytes, rd_i8, rd_init, rd_varint, rd_varlong)
from kwire._core.consts cimport (ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, E_COUNT, E_NEG_LENGTH,
                                 E_RECORD_SIZE, E_TRUNC)


# --------------------------------------------------------------- batch walk
cdef struct Batch:
    Py_ssize_t pos            # start of the batch in the buffer
    Py_ssize_t total          # whole size, LOG_OVERHEAD included
    int64_t base_offset
    int64_t last_offset
    int magic
    uint32_t crc
    int attributes
    int32_t leader_epoch
    int32_t last_offset_delta
    int64_t first_ts
    int64_t max_ts
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t count
    # legacy message fields
    int64_t timestamp
    Py_ssize_t key_pos
    int32_t key_len
    Py_ssize_t value_pos
    int32_t value_len


cdef int read_batch(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, Batch* b, int* err) noexcept nogil


# ---------------------------------------------------------------- v2 record
cdef struct Rec:
    int64_t offset
    int64_t timestamp
    const uint8_t* key
    int32_t key_len
    const uint8_t* value
    int32_t value_len
    Py_ssize_t headers_pos
    Py_ssize_t end
    Py_ssize_t outer_end      # the enclosing bound, restored by end_record
    int32_t header_count


# The benchmark gate's self-test (scripts/bench --self-test) builds kwire with
# KWIRE_BENCH_SLOWDOWN=1 (setup.py), which defines the macro below: then every
# record parsed burns a few hundred instructions. In a normal build the call is
# an empty macro, so the compiled code is what it would be without it.
cdef extern from *:
    """
    #ifdef KWIRE_BENCH_SLOWDOWN
    static volatile unsigned kwire_bench_sink;
    static inline void kwire_bench_slowdown(void) {
        unsigned i;
        for (i = 0; i < 100; i++) kwire_bench_sink += i;
    }
    #else
    #define kwire_bench_slowdown() ((void)0)
    #endif
    """
    void kwire_bench_slowdown() noexcept nogil


cdef inline int parse_record_fields(Reader* r, int64_t base_offset, int64_t base_ts, Rec* rec) noexcept nogil:
    """Parse one v2 record up to its header count, leaving ``r`` at its first
    header and bounded by the record's end (``rec.end``); ``end_record``
    completes it once the headers are read."""
    cdef int32_t length = rd_varint(r)
    cdef int64_t ts_delta
    cdef int32_t off_delta
    if r.err:
        return -1
    if length < 0:
        r.err = E_NEG_LENGTH
        return -1
    if length > r.end - r.pos:
        r.err = E_TRUNC
        return -1
    kwire_bench_slowdown()         # nothing, except in a benchmark build with the slowdown
    rec.end = r.pos + length
    rec.outer_end = r.end
    r.end = rec.end
    rd_i8(r)                        # record attributes: unused
    ts_delta = rd_varlong(r)
    off_delta = rd_varint(r)
    rec.key_len = rd_varint(r)
    rec.key = rd_bytes(r, rec.key_len)
    rec.value_len = rd_varint(r)
    rec.value = rd_bytes(r, rec.value_len)
    rec.header_count = rd_varint(r)
    if r.err:
        return -1
    if rec.header_count < 0 or rec.header_count > (r.end - r.pos) // 2:
        r.err = E_COUNT
        return -1
    rec.headers_pos = r.pos
    rec.offset = add_wrap(base_offset, off_delta)
    rec.timestamp = add_wrap(base_ts, ts_delta)
    return 0


cdef inline int rd_header(Reader* r, const uint8_t** k, int32_t* kn, const uint8_t** v, int32_t* vn) noexcept nogil:
    """One record header: a key (never null) and a value (may be null)."""
    kn[0] = rd_varint(r)
    if kn[0] < 0 and not r.err:
        r.err = E_NEG_LENGTH
    k[0] = rd_bytes(r, kn[0])
    vn[0] = rd_varint(r)
    v[0] = rd_bytes(r, vn[0])
    return -1 if r.err else 0


cdef inline int end_record(Reader* r, Rec* rec) noexcept nogil:
    """Check the record's fields filled its length; restore the outer bound."""
    if r.err:
        return -1
    if r.pos != rec.end:
        r.err = E_RECORD_SIZE
        return -1
    r.end = rec.outer_end
    return 0


cdef inline object header_key_str(const uint8_t* p, int32_t n):
    # Invalid UTF-8 is replaced (U+FFFD), like Java's String decoding does.
    return PyUnicode_DecodeUTF8(<const char*>p, n, "replace")


# ------------------------------------------------------------ record objects
@cython.final
cdef class _Pinned:
    cdef Py_buffer view
    cdef bint held


@cython.final
cdef class BatchInfo:
    """Metadata of the batch (or legacy message / wrapper) a record came from."""
    cdef readonly int64_t base_offset
    cdef readonly int64_t last_offset
    cdef readonly int magic
    cdef readonly int attributes
    cdef readonly uint32_t crc
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int64_t first_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t record_count
    cdef readonly Py_ssize_t size_in_bytes
    cdef readonly bint kafka07      # a Kafka 0.7 message (byte offsets)


cdef BatchInfo make_batch_info(Batch* b)


@cython.final
cdef class Record:
    cdef object offset
    cdef object timestamp
    cdef object key
    cdef object value
    cdef tuple headers
    cdef BatchInfo batch


# ------------------------------------------------------------------ results
@cython.final
cdef class PartialBatch:
    cdef int kind                # the decoder kind that made it (KIND_*)
    cdef Batch b                 # the batch's header (legacy wrapper: its message)
    cdef bytes payload           # its records, from ``pos`` on
    cdef Py_ssize_t pos          # the next record's position in ``payload``
    cdef int32_t index           # records (legacy: inner messages) of the batch walked
    cdef int64_t last            # the offset passed last (returned, or skipped past)
    cdef int64_t rel_base        # a legacy wrapper's base for its inner offsets
    cdef BatchInfo info          # the object decoder's BatchInfo of the batch (its records share it)


cdef class DecodeResult:
    cdef readonly list records
    cdef readonly list batches
    cdef readonly Py_ssize_t consumed
    cdef readonly object next_offset
    cdef readonly Py_ssize_t incomplete_size
    cdef readonly PartialBatch resume
    cdef readonly Py_ssize_t skipped


# ------------------------------------------------------- aborted transactions
@cython.final
cdef class Aborter:
    cdef list pending             # (producer id, first offset) pairs, sorted by first offset
    cdef Py_ssize_t index         # pending[index:] are still to come
    cdef set aborting             # producer ids inside an aborted transaction
    cdef int64_t next_first       # first offset of pending[index] (INT64_MAX: none left)
    cdef Py_ssize_t naborting     # len(aborting), read without the GIL
    cdef Py_ssize_t saved_index   # the state at the start of the call under way (undone if it raises)
    cdef set saved_aborting
    cdef int sync(self) except -1
    cdef int save(self) except -1
    cdef void restore(self)
    cdef int advance(self, int64_t last_offset) except -1


# ------------------------------------------------------------------- driver
cdef enum:
    # what a batch (or the records of one) walk returns
    ST_NEXT = 0             # the batch is done: go on
    ST_BEFORE = 1           # stop before this batch (the sink rolled it back)
    ST_INSIDE = 2           # stop inside this batch, after a record (``at_pos``, ``at_index``)
    ST_RETURNED = 3         # (one legacy message) it was returned
    # decoder kinds, each with its PartialBatch
    KIND_OBJECTS = 1
    KIND_COLUMNS = 2
    # What one returned record costs against ``max_bytes`` beyond its bytes in
    # the (decompressed) batch. Objects: a Record is 64 bytes, its offset and
    # timestamp ints 32 each, its list slot 8 (136: tracemalloc measures 136 per
    # record with a null key and value), its key and value bytes objects 33 each
    # beyond their bytes (tracemalloc: 226 with an 8-byte key and a 16-byte
    # value, 24 of them counted as batch bytes): about 200.
    RECORD_COST = 200
    # Columns: a row's offset, timestamp (8 each), timestamp type and key, value
    # and headers end offsets (4 each) = 32 bytes; its key, value and header bytes
    # are counted as its bytes in the batch (which hold them).
    ROW_COST = 32


cdef class _Driver:
    cdef bint check_crcs
    cdef bint include_control
    cdef Py_ssize_t max_decompressed
    cdef int kind                # KIND_*: which PartialBatch it makes and takes
    cdef Py_ssize_t row_cost     # a returned record's cost against max_bytes (beyond its bytes)
    cdef bint busy               # a call is under way: another one (another thread's) is refused
    # per call
    cdef object topic
    cdef object partition
    cdef int64_t min_offset
    cdef int64_t last            # the offset passed last: records at or below it are dropped
    cdef Py_ssize_t skipped      # records dropped for it (at or above min_offset)
    cdef Py_ssize_t consumed
    cdef int64_t next_offset
    cdef bint any_batch
    cdef Py_ssize_t incomplete_size
    cdef bint bounded           # max_bytes or max_records given
    cdef Py_ssize_t budget      # max_bytes (PY_SSIZE_T_MAX: none)
    cdef Py_ssize_t max_records # (PY_SSIZE_T_MAX: none)
    cdef Py_ssize_t decoded     # the cost so far: record bytes walked, and row_cost per record returned
    cdef Py_ssize_t returned    # records returned so far
    cdef Py_ssize_t at_pos      # where a record walk stopped inside its batch: the next record's
    cdef int32_t at_index       # position in the records, and its index in the batch
    cdef PartialBatch resume_out
    cdef Batch held             # the batch fill_run stopped inside (made a PartialBatch with the GIL)
    cdef bint held_pending
    cdef const uint8_t* buf
    cdef object view            # memoryview over the input, for per-batch slices
    cdef object input_owner     # keeps ``buf`` valid: the input bytes, or a _Pinned export
    cdef GBuf plain             # lz4 payloads decompressed natively, one batch at a time (sinks copy out)
    cdef void* lz4_dctx
    cdef Aborter aborter        # read_committed's aborted transactions of the call's partition (None: keep all)
    # cumulative over the decoder's life (kwire.metrics reads them; counted per call and per batch, never per record)
    cdef readonly int64_t records_total      # records returned
    cdef readonly int64_t bytes_total        # input bytes consumed (whole batches, as fetched)
    cdef readonly int64_t batches_total      # batches walked to their end
    cdef readonly int64_t compressed_total   # compressed payload bytes of the compressed batches walked
    cdef readonly int64_t decompressed_total # ... and what they decompressed to

    # --- hooks for sinks
    cdef int begin_batch(self, Batch* b) except -1
    cdef int go_on_batch(self, PartialBatch pb) except -1
    cdef int on_v2_records(self, Batch* b, const uint8_t* p, Py_ssize_t start, Py_ssize_t n,
                           int32_t first) except -1
    cdef int on_message(self, Batch* b, int64_t offset, int64_t ts, int ts_type,
                        const uint8_t* key, int32_t key_len,
                        const uint8_t* value, int32_t value_len) except -1
    cdef Py_ssize_t fast_path(self, Py_ssize_t pos, Py_ssize_t n) except -1

    # --- limits ------------------------------------------------------------
    cdef inline bint stopping(self) noexcept nogil:
        """The call has done its share (checked between batches and legacy
        messages): ``max_records`` returned, or ``max_bytes`` reached after at
        least one record or batch."""
        if self.returned >= self.max_records and self.returned > 0:
            return True
        return self.decoded >= self.budget and (self.any_batch or self.returned > 0)

    cdef inline Py_ssize_t records_room(self) noexcept nogil:
        """Records the call may still return (1 at least: a call returns one)."""
        cdef Py_ssize_t left = self.max_records - self.returned
        return left if left > 1 else 1

    cdef inline void walked(self, Py_ssize_t nbytes, Py_ssize_t k, int64_t last) noexcept nogil:
        """Account a record walk: ``nbytes`` of records walked, ``k`` returned."""
        self.decoded += nbytes + k * self.row_cost
        self.returned += k
        self.last = last

    cdef inline void batch_done(self, Batch* b) noexcept nogil:
        self.batches_total += 1
        if b.last_offset > self.last:
            self.last = b.last_offset
        self.next_offset = add_wrap(self.last, 1)
        self.any_batch = True


    cdef int keep_partial(self, Batch* b, const uint8_t* p, Py_ssize_t n, bytes owner,
                          int64_t rel_base, BatchInfo info) except -1
    cdef BatchInfo partial_info(self)
    # --- errors
    cdef raise_code(self, int code, int64_t offset)
    cdef object payload(self, Batch* b, Py_ssize_t start, Py_ssize_t length, int codec)
    cdef Py_ssize_t lz4_payload(self, Batch* b, Py_ssize_t start, Py_ssize_t length) except -1
    # --- read_committed
    cdef inline bint abort_quiet(self, Batch* b) noexcept nogil:
        """With an aborter: ``b`` neither changes it nor is dropped for it,
        but for being a control batch (what fill_run can do without the GIL)."""
        if self.aborter.next_first <= b.last_offset:
            return False
        return self.aborter.naborting == 0 or not (b.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL))

    cdef int aborted(self, Batch* b) except -1
    cdef int control_type(self, Batch* b) except -2
    cdef object batch_records(self, Batch* b, const uint8_t** p, Py_ssize_t* n)
    # --- the walk
    cdef int enter(self, PartialBatch resume, Aborter aborter) except -1
    cdef void leave(self, bint ok)
    cdef int run(self, object data, object topic, object partition, int64_t min_offset,
                 Py_ssize_t max_bytes, Py_ssize_t max_records, PartialBatch resume) except -1
    cdef int go_on(self, PartialBatch pb) except -1
    cdef int run_v2(self, Batch* b) except -1
    cdef int check_legacy_crc(self, const uint8_t* msg, Py_ssize_t n, Batch* b, int64_t offset) except -1
    cdef int legacy_message(self, Batch* b, int64_t offset, int64_t ts, int ts_type,
                            const uint8_t* key, int32_t key_len,
                            const uint8_t* value, int32_t value_len) except -1

    cdef inline int legacy_ts_type(self, Batch* b) noexcept:
        if b.magic == 0:
            return -1
        return 1 if b.attributes & ATTR_LOG_APPEND_TIME else 0


    cdef int run_legacy(self, Batch* b) except -1
    cdef int legacy_messages(self, Batch* b, const uint8_t* p, Py_ssize_t pos, Py_ssize_t n, int32_t index,
                             int64_t rel_base, bytes owner, BatchInfo info) except -1
