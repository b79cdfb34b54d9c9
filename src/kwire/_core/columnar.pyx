# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The columnar decoder: records of v2 batches parsed, with the GIL
released, straight into Arrow column buffers, on the driver of records.pyx."""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.stdint cimport INT32_MAX, INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset

from kwire._core.buffers cimport GBuf, Reader, gbuf_grow, gbuf_reserve, rd_init
from kwire._core.consts cimport *
from kwire._core.native cimport crc32c
from kwire._core.utf8 cimport utf8_invalid_at
from kwire._core.records cimport (KIND_COLUMNS, ROW_COST, ST_BEFORE, ST_INSIDE, ST_NEXT, Aborter, Batch, PartialBatch,
                                  Rec, _Driver, end_record, header_key_str, parse_record_fields, rd_header, read_batch)

from kwire import compression as _compression
from kwire.errors import KwireError


# -------------------------------------------------------- columns
cdef enum:
    C_OFFSET, C_TS, C_TS_TYPE
    C_KEY_OFF, C_KEY_DATA, C_KEY_VALID
    C_VAL_OFF, C_VAL_DATA, C_VAL_VALID
    C_HDR_OFF, C_HDR_VALID
    C_HK_OFF, C_HK_DATA
    C_HV_OFF, C_HV_DATA, C_HV_VALID
    NCOLS

cdef object _record_batch_from_c = None   # kwire._arrow's, once imported

cdef enum:
    NULLS_KEY, NULLS_VAL, NULLS_HDR, NULLS_HV, NNULLS

# Column memory lent to Arrow comes back to the decoder that made it when Arrow
# frees it, and that decoder's next call reuses it: no copy, and no fresh
# (zeroed) pages from the kernel for every result. Each block goes back to its
# own column's list, so a column gets a block sized by that column's earlier
# results (taking another column's block made the wrong one grow and the
# other be trimmed, remapping pages on every call). Bounded per decoder: at
# most SPARE_PER_COL blocks a column and SPARE_BYTES bytes in all. The GIL
# guards it (blocks come back in a deallocator and are taken in start()).
cdef enum:
    SPARE_PER_COL = 4
cdef Py_ssize_t SPARE_BYTES = 256 * 1024 * 1024


cdef struct Spare:
    char* data[NCOLS * SPARE_PER_COL]     # column i's blocks at i * SPARE_PER_COL ...
    Py_ssize_t cap[NCOLS * SPARE_PER_COL]
    int n[NCOLS]
    Py_ssize_t total


# The benchmark gate's self-test builds with KWIRE_BENCH_NO_RECYCLE=1 (setup.py):
# then no block is kept, so every call maps fresh column memory (the memory
# regression its page-fault companion must catch). Normally the constant is 1.
cdef extern from *:
    """
    #ifdef KWIRE_BENCH_NO_RECYCLE
    #define KWIRE_RECYCLE 0
    #else
    #define KWIRE_RECYCLE 1
    #endif
    """
    const bint KWIRE_RECYCLE


cdef void spare_put(Spare* sp, int col, char* data, Py_ssize_t cap) noexcept:
    cdef int at
    if data == NULL:
        return
    if KWIRE_RECYCLE and sp.n[col] < SPARE_PER_COL and sp.total + cap <= SPARE_BYTES:
        at = col * SPARE_PER_COL + sp.n[col]
        sp.data[at] = data
        sp.cap[at] = cap
        sp.n[col] += 1
        sp.total += cap
    else:
        free(data)


cdef void spare_take(Spare* sp, int col, GBuf* g, Py_ssize_t want) noexcept:
    """Give ``g`` (column ``col``'s, empty, no memory) the smallest of that
    column's spare blocks of at least ``want`` bytes, or else its largest."""
    cdef int i, best = -1
    cdef int base = col * SPARE_PER_COL
    cdef int last
    for i in range(base, base + sp.n[col]):
        if best < 0:
            best = i
        elif sp.cap[best] < want:
            if sp.cap[i] > sp.cap[best]:
                best = i
        elif want <= sp.cap[i] < sp.cap[best]:
            best = i
    if best < 0:
        return
    g.data = sp.data[best]
    g.cap = sp.cap[best]
    g.len = 0
    sp.total -= g.cap
    sp.n[col] -= 1
    last = base + sp.n[col]
    sp.data[best] = sp.data[last]
    sp.cap[best] = sp.cap[last]


cdef void spare_clear(Spare* sp) noexcept:
    cdef int col, i
    for col in range(NCOLS):
        for i in range(col * SPARE_PER_COL, col * SPARE_PER_COL + sp.n[col]):
            free(sp.data[i])
        sp.n[col] = 0
    sp.total = 0


# ---------------------------------------------- the result, lent to Arrow
# A call's columns go to pyarrow through the Arrow C Data Interface
# (https://arrow.apache.org/docs/format/CDataInterface.html): one block holds
# the ArrowArray of the record batch (a struct array) and of each column, and
# pyarrow imports it in one call (about 4 us, against 35 for building the
# arrays one by one from Python buffers). When pyarrow lets the last of it go
# it calls the root's release, which gives the column memory back to the
# decoder's spare list (with the GIL: see release_root).
cdef extern from "Python.h":
    int Py_IsInitialized() nogil

cdef struct ArrowArray:
    int64_t length
    int64_t null_count
    int64_t offset
    int64_t n_buffers
    int64_t n_children
    const void** buffers
    ArrowArray** children
    ArrowArray* dictionary
    void (*release)(ArrowArray*) noexcept nogil
    void* private_data

cdef enum:        # the arrays of a result: the batch, its six columns, the headers' entries and their fields
    A_ROOT, A_OFFSET, A_TS, A_TS_TYPE, A_KEY, A_VAL, A_HDR, A_ENTRIES, A_HK, A_HV, NARRAYS
    NKIDS = 9                   # the batch's six columns, the list's entries, the entries' key and value
    NBUFFERS = 22

cdef struct Export:
    ArrowArray arr[NARRAYS]
    ArrowArray* kids[NKIDS]
    const void* bufs[NBUFFERS]
    char* data[NCOLS]           # the column memory (what Arrow's buffers point into) ...
    Py_ssize_t cap[NCOLS]       # ... and its size, for the spare list
    PyObject* home              # the decoder whose spare list takes the memory back (a reference)
    Spare* spare
    int used                    # buffer slots given out (describe)


cdef void release_child(ArrowArray* a) noexcept nogil:
    a.release = NULL            # a child's memory is its parent's: the root's release frees it


cdef void give_back(Export* e) noexcept with gil:
    cdef int i
    for i in range(NCOLS):
        spare_put(e.spare, i, e.data[i], e.cap[i])
    Py_XDECREF(e.home)
    free(e)


cdef void release_root(ArrowArray* a) noexcept nogil:
    """The batch's release (called by pyarrow, on any thread): its memory
    back to the decoder that made it, or freed once Python has shut down."""
    cdef Export* e = <Export*>a.private_data
    cdef int i
    a.release = NULL            # (pyarrow's copy of the root: it moved it out of the block)
    for i in range(NARRAYS):
        e.arr[i].release = NULL
    if Py_IsInitialized():
        give_back(e)
        return
    for i in range(NCOLS):
        free(e.data[i])
    free(e)


cdef int set_array(Export* e, int a, int64_t length, int64_t nulls, int nbuf, int nkids, int kid) noexcept nogil:
    """Array ``a`` of ``e``: ``nbuf`` buffers from the next free slot (filled
    by the caller), ``nkids`` children from ``e.kids[kid]``. Returns the index
    of its first buffer slot."""
    cdef ArrowArray* x = &e.arr[a]
    cdef int b0 = e.used
    e.used += nbuf
    x.length = length
    x.null_count = nulls
    x.offset = 0
    x.n_buffers = nbuf
    x.buffers = &e.bufs[b0]
    x.n_children = nkids
    x.children = &e.kids[kid] if nkids else NULL
    x.dictionary = NULL
    x.release = release_child
    x.private_data = e
    return b0


cdef void set_binary(Export* e, int a, int64_t length, int64_t nulls, int valid, int offs, int data) noexcept nogil:
    cdef int b = set_array(e, a, length, nulls, 3, 0, 0)
    e.bufs[b] = e.data[valid] if nulls else NULL
    e.bufs[b + 1] = e.data[offs]
    e.bufs[b + 2] = e.data[data]


cdef void set_fixed(Export* e, int a, int64_t length, int col) noexcept nogil:
    cdef int b = set_array(e, a, length, 0, 2, 0, 0)
    e.bufs[b] = NULL
    e.bufs[b + 1] = e.data[col]


cdef void describe(Export* e, Cols* c) noexcept nogil:
    """The ArrowArrays of a result whose column memory ``e.data`` holds:
    a struct of offset, timestamp, timestamp_type, key, value and headers
    (a list of struct<key string, value binary>), as kwire._arrow.record_schema."""
    cdef int i, b
    b = set_array(e, A_ROOT, c.rows, 0, 1, 6, 0)
    e.bufs[b] = NULL
    for i in range(6):
        e.kids[i] = &e.arr[A_OFFSET + i]
    set_fixed(e, A_OFFSET, c.rows, C_OFFSET)
    set_fixed(e, A_TS, c.rows, C_TS)
    set_fixed(e, A_TS_TYPE, c.rows, C_TS_TYPE)
    set_binary(e, A_KEY, c.rows, c.nulls[NULLS_KEY], C_KEY_VALID, C_KEY_OFF, C_KEY_DATA)
    set_binary(e, A_VAL, c.rows, c.nulls[NULLS_VAL], C_VAL_VALID, C_VAL_OFF, C_VAL_DATA)
    b = set_array(e, A_HDR, c.rows, c.nulls[NULLS_HDR], 2, 1, 6)
    e.bufs[b] = e.data[C_HDR_VALID] if c.nulls[NULLS_HDR] else NULL
    e.bufs[b + 1] = e.data[C_HDR_OFF]
    e.kids[6] = &e.arr[A_ENTRIES]
    b = set_array(e, A_ENTRIES, c.header_rows, 0, 1, 2, 7)
    e.bufs[b] = NULL
    e.kids[7] = &e.arr[A_HK]
    e.kids[8] = &e.arr[A_HV]
    set_binary(e, A_HK, c.header_rows, 0, 0, C_HK_OFF, C_HK_DATA)
    set_binary(e, A_HV, c.header_rows, c.nulls[NULLS_HV], C_HV_VALID, C_HV_OFF, C_HV_DATA)
    e.arr[A_ROOT].release = release_root


cdef struct Cols:
    GBuf b[NCOLS]
    int64_t rows
    int64_t header_rows
    int64_t nulls[NNULLS]


cdef struct ColsMark:          # enough to roll a batch back
    Py_ssize_t lens[NCOLS]
    int64_t rows
    int64_t header_rows
    int64_t nulls[NNULLS]
    Py_ssize_t nbatches
    int64_t last                # the driver's counts
    Py_ssize_t skipped
    Py_ssize_t decoded
    Py_ssize_t returned


cdef class ColumnarResult:
    """What :meth:`ColumnarDecoder.decode` found: ``record_batch`` (a
    ``pyarrow.RecordBatch``), and ``consumed``, ``next_offset``,
    ``incomplete_size``, ``resume`` and ``skipped`` as in
    :class:`DecodeResult`; ``batch_count`` is the number of batches the call
    began (as ``DecodeResult.batches``)."""
    cdef readonly object record_batch
    cdef readonly Py_ssize_t consumed
    cdef readonly object next_offset
    cdef readonly Py_ssize_t incomplete_size
    cdef readonly Py_ssize_t batch_count
    cdef readonly PartialBatch resume
    cdef readonly Py_ssize_t skipped

    @property
    def num_records(self):
        return self.record_batch.num_rows

    def __repr__(self):
        return (f"ColumnarResult(records={self.record_batch.num_rows}, batches={self.batch_count}, "
                f"consumed={self.consumed}, next_offset={self.next_offset}, "
                f"incomplete_size={self.incomplete_size}, resume={self.resume!r}, skipped={self.skipped})")


cdef class ColumnarDecoder(_Driver):
    """Decodes buffers of record batches straight into Arrow columns.

    No Python object is made per record: the records of each batch are
    parsed with the GIL released into C buffers that become the Arrow arrays
    without a copy, so threads decoding different buffers run in parallel.
    The result is a ``pyarrow.RecordBatch`` with columns ``offset`` int64,
    ``timestamp`` timestamp[ms or us, UTC], ``timestamp_type`` int32, ``key``
    and ``value`` binary, ``headers`` list<struct<key string, value binary>>
    (null for a record without headers).

    ``max_column_bytes`` caps the bytes of keys, of values, of header keys
    and of header values in one result (at most 2**31 - 1, what Arrow's int32
    offsets allow): a call stops at the batch boundary before the cap.
    A decoder serves any number of partitions (a call stopped inside a batch
    hands its rest back as ``resume``); a call while another is under way
    (another thread's) raises RuntimeError.

    The column buffers are lent to pyarrow without a copy; when pyarrow frees
    them they come back to this decoder (which keeps at most 256 MiB of them)
    and its later calls reuse them, so steady decoding neither copies nor
    faults in fresh memory. One decoder per thread.
    """
    cdef Cols c
    cdef ColsMark mark
    cdef Py_ssize_t hint[NCOLS]   # each column's size in the last result
    cdef Py_ssize_t cap0[NCOLS]   # each column's room at the start of the call (0: the decoder's first)
    cdef Spare spare              # column memory Arrow gave back
    cdef uint8_t valid_key[64]    # a copy of the last header key found valid UTF-8 ...
    cdef int32_t valid_key_len    # ... and its length (-1: none): equal keys skip validation
    cdef bint micros
    cdef Py_ssize_t nbatches
    cdef object ts_unit
    cdef Py_ssize_t max_column
    cdef const uint8_t* limit     # the end of the records being appended: their bytes may be read up to it

    def __cinit__(self, *args, **kwargs):
        self.kind = KIND_COLUMNS
        self.row_cost = ROW_COST

    def __init__(self, *, bint check_crcs=True, bint include_control=False,
                 Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
                 timestamp_unit="ms", Py_ssize_t max_column_bytes=INT32_MAX):
        super().__init__(check_crcs=check_crcs, include_control=include_control,
                         max_decompressed_bytes=max_decompressed_bytes)
        if timestamp_unit not in ("ms", "us"):
            raise ValueError("timestamp_unit must be 'ms' or 'us'")
        if not 0 < max_column_bytes <= INT32_MAX:
            raise ValueError("max_column_bytes must be between 1 and 2**31 - 1 (Arrow binary offsets are int32)")
        self.max_column = max_column_bytes
        self.ts_unit = timestamp_unit
        self.micros = timestamp_unit == "us"

    def __dealloc__(self):
        cdef int i
        for i in range(NCOLS):
            free(self.c.b[i].data)
        spare_clear(&self.spare)

    cdef int start(self, Py_ssize_t data_len) except -1:
        """Empty columns for a call on ``data_len`` bytes: each given a block
        a quarter larger than its recent results (``hint``, a peak that
        decays), from the spare list where one fits; on a decoder's first
        call, the key and value bytes as large as the input (uncompressed,
        what they can take at most; pages never written cost no memory, and
        finish() gives back the slack), so they do not grow by doubling."""
        cdef int i
        cdef Py_ssize_t want
        cdef char* grown
        self.valid_key_len = -1
        self.c.rows = self.c.header_rows = 0
        for i in range(NNULLS):
            self.c.nulls[i] = 0
        for i in range(NCOLS):
            want = self.hint[i] + self.hint[i] // 4 + 64    # headroom: a somewhat larger result still fits
            if self.c.b[i].data == NULL:
                spare_take(&self.spare, i, &self.c.b[i], want)
            self.c.b[i].len = 0
            if self.hint[i] == 0 and (i == C_KEY_DATA or i == C_VAL_DATA):
                want = max(want, min(data_len, self.max_column))
            if self.c.b[i].cap < want:                       # to the size wanted, not doubled
                grown = <char*>realloc(self.c.b[i].data, want)
                if grown == NULL:
                    raise MemoryError()
                self.c.b[i].data, self.c.b[i].cap = grown, want
            self.cap0[i] = self.c.b[i].cap if self.hint[i] else 0    # a first call's room is trimmed to fit
        for i in (C_KEY_OFF, C_VAL_OFF, C_HDR_OFF, C_HK_OFF, C_HV_OFF):
            (<int32_t*>self.c.b[i].data)[0] = 0
        self.sync_lens()
        return 0

    def decode(self, data, *, topic=None, partition=None, int64_t min_offset=-1,
               Py_ssize_t max_bytes=-1, Py_ssize_t max_records=-1, PartialBatch resume=None,
               Aborter aborter=None):
        """Decode the complete batches in ``data`` into one Arrow record batch.

        Arguments and the cut-buffer rules are those of :meth:`Decoder.decode`
        (``max_records``, ``resume``, ``aborter`` too); against ``max_bytes`` a row costs
        its bytes in the decompressed batch (which bound its key, value and
        header bytes) plus 32 bytes (its offset, timestamp, timestamp type
        and end offsets). A call also stops early, at a batch boundary,
        rather than let a binary column pass ``max_column_bytes``
        (``consumed`` tells where).
        """
        cdef ColumnarResult res = ColumnarResult.__new__(ColumnarResult)
        cdef bint ok = False
        self.enter(resume, aborter)
        try:
            self.start(len(data))
            self.nbatches = 0
            self.run(data, topic, partition, min_offset, max_bytes, max_records, resume)
            res.record_batch = self.finish()
            res.resume = self.resume_out
            ok = True
        finally:
            self.leave(ok)
        res.consumed = self.consumed
        res.next_offset = self.next_offset if self.any_batch else None
        res.incomplete_size = self.incomplete_size
        res.batch_count = self.nbatches
        res.skipped = self.skipped
        return res

    cdef object finish(self):
        global _record_batch_from_c
        if _record_batch_from_c is None:       # imported on first use: pyarrow only when columns are asked for
            from kwire._arrow import record_batch_from_c as _record_batch_from_c
        cdef Export* e = <Export*>calloc(1, sizeof(Export))
        cdef GBuf* g
        cdef int i
        cdef char* fit
        cdef Py_ssize_t keep
        if e == NULL:
            raise MemoryError()
        self.sync_lens()
        for i in range(NCOLS):
            g = &self.c.b[i]
            # results of alternating sizes (a fetch's first poll, then its rest) each fit the same blocks
            self.hint[i] = max(g.len, self.hint[i] - self.hint[i] // 8)
            keep = self.hint[i] + self.hint[i] // 4 + 64     # what start() wants next
            # trim the slack of a column that grew by doubling in this call, or
            # of a first call's room (in place), so recycled blocks fit the
            # spare cap; a block as large as
            # an earlier, larger call's is kept for the next such call (calls
            # alternating between a whole fetch and 1 MB pieces would
            # otherwise shrink it and regrow it, faulting its pages in again)
            if g.cap > self.cap0[i] and g.cap > 2 * keep + 65536:
                fit = <char*>realloc(g.data, keep)
                if fit != NULL:
                    g.data, g.cap = fit, keep
            e.data[i], e.cap[i] = g.data, g.cap
            g.data = NULL
            g.len = g.cap = 0
        Py_INCREF(self)
        e.home = <PyObject*>self
        e.spare = &self.spare
        describe(e, &self.c)
        try:
            return _record_batch_from_c(<size_t>&e.arr[A_ROOT], self.ts_unit)
        finally:
            if e.arr[A_ROOT].release != NULL:     # not imported (pyarrow releases what it imported, even on failure)
                release_root(&e.arr[A_ROOT])

    cdef Py_ssize_t fast_path(self, Py_ssize_t pos, Py_ssize_t n) except -1:
        with nogil:
            pos = self.fill_run(pos, n)
        if self.held_pending:       # fill_run stopped inside that batch
            self.held_pending = False
            self.keep_partial(&self.held, self.buf + self.held.pos + V2_HEADER, self.held.total - V2_HEADER,
                              None, 0, None)
        return pos

    cdef Py_ssize_t fill_run(self, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
        """Parse consecutive uncompressed v2 batches in one GIL-free run.
        Stops at the first batch that needs Python (compressed, legacy, cut)
        or that fails in any way, or that read_committed's aborter must see
        with the GIL (Aborter.advance, a batch of an aborting producer):
        the regular walk then takes it over and raises or stops as it would.
        A batch it stops inside is left in ``held`` for fast_path."""
        cdef Batch b
        cdef int err = 0, st
        cdef bint committed = self.aborter is not None
        while pos < n and not self.stopping():
            if read_batch(self.buf, pos, n, &b, &err) != 1 or b.magic != 2 or (b.attributes & ATTR_CODEC):
                break
            if committed and not self.abort_quiet(&b):
                break
            if self.check_crcs and crc32c(self.buf + pos + V2_CRC_START, b.total - V2_CRC_START) != b.crc:
                break
            self.mark_batch(True)
            st = ST_NEXT
            if (b.attributes & ATTR_CONTROL) and (committed or not self.include_control):
                pass
            elif b.count == 0:
                if b.total != V2_HEADER:
                    st = -E_TRAILING
            else:
                st = self.fill_v2(&b, self.buf + pos + V2_HEADER, 0, b.total - V2_HEADER, 0)
            if st != ST_NEXT and st != ST_INSIDE:
                self.rollback()
                break
            pos += b.total
            self.consumed = pos
            if st == ST_INSIDE:
                self.held = b
                self.held_pending = True
                break
            self.batch_done(&b)
        return pos

    cdef int begin_batch(self, Batch* b) except -1:
        self.mark_batch(True)
        return 0

    cdef int go_on_batch(self, PartialBatch pb) except -1:
        self.mark_batch(False)
        return 0

    cdef void mark_batch(self, bint new) noexcept nogil:
        """Mark where a batch's rows begin (``new``: a batch this call began)."""
        cdef int i
        self.mark.nbatches = self.nbatches
        self.nbatches += new
        for i in range(NCOLS):
            self.mark.lens[i] = self.c.b[i].len
        self.mark.rows = self.c.rows
        self.mark.header_rows = self.c.header_rows
        for i in range(NNULLS):
            self.mark.nulls[i] = self.c.nulls[i]
        self.mark.last = self.last
        self.mark.skipped = self.skipped
        self.mark.decoded = self.decoded
        self.mark.returned = self.returned

    cdef void rollback(self) noexcept nogil:
        """Forget the current batch (a column would pass max_column_bytes)."""
        cdef int i
        self.nbatches = self.mark.nbatches
        for i in range(NCOLS):
            self.c.b[i].len = self.mark.lens[i]
        self.c.rows = self.mark.rows
        self.c.header_rows = self.mark.header_rows
        for i in range(NNULLS):
            self.c.nulls[i] = self.mark.nulls[i]
        self.last = self.mark.last
        self.skipped = self.mark.skipped
        self.decoded = self.mark.decoded
        self.returned = self.mark.returned

    cdef int check(self, int st, Batch* b) except -1:
        """Turn a fill status into: ST_NEXT, ST_INSIDE, ST_BEFORE (rolled
        back: stop before this batch), or raise."""
        if st == ST_NEXT or st == ST_INSIDE:
            return st
        if st == -E_NOMEM:
            raise MemoryError()
        if st < 0:
            self.raise_code(-st, b.base_offset)
        self.rollback()               # st == 1: a column would pass max_column_bytes
        if self.c.rows == 0:
            raise KwireError(f"the batch at offset {b.base_offset} of {self.topic!r} partition "
                             f"{self.partition} holds more than max_column_bytes={self.max_column} bytes "
                             "in one column, so it cannot be returned as one Arrow record batch")
        return ST_BEFORE

    cdef int on_v2_records(self, Batch* b, const uint8_t* p, Py_ssize_t start, Py_ssize_t n,
                           int32_t first) except -1:
        cdef int st
        with nogil:
            st = self.fill_v2(b, p, start, n, first)
        return self.check(st, b)

    cdef int on_message(self, Batch* b, int64_t offset, int64_t ts, int ts_type,
                        const uint8_t* key, int32_t key_len,
                        const uint8_t* value, int32_t value_len) except -1:
        cdef int st = self.reserve_rows(1)
        # a legacy message: its bytes end with its value (after its key), or its key
        self.limit = value + value_len if value != NULL else (key + key_len if key != NULL else NULL)
        if st == 0:
            st = self.add_row(offset, ts, ts_type, key, key_len, value, value_len, 0)
        return self.check(st, b)

    cdef int fill_v2(self, Batch* b, const uint8_t* p, Py_ssize_t start, Py_ssize_t n,
                     int32_t first) noexcept nogil:
        """Append the records of a v2 batch from ``p[start:n]`` on (its record
        number ``first``), parsing and validating each record and its headers
        in a single walk. Returns ST_NEXT, ST_INSIDE (``at_pos``, ``at_index``),
        1 (a column is full: roll back) or -error."""
        cdef Reader r
        cdef Rec rec
        cdef int32_t i, j, kn, vn
        cdef const uint8_t* k
        cdef const uint8_t* v
        cdef int st
        cdef bint log_append = b.attributes & ATTR_LOG_APPEND_TIME
        cdef int ts_type = 1 if log_append else 0
        cdef int64_t rows0 = self.c.rows
        cdef bint bounded = self.bounded
        cdef Py_ssize_t budget = self.budget - self.decoded
        # a record takes at least 7 bytes, so at most n // 7 rows can come; a
        # bounded call stops once it has ``room`` rows of this batch, or once
        # they cost ``budget`` (budget // ROW_COST + 1 rows do)
        cdef Py_ssize_t room = min(<Py_ssize_t>b.count - first, (n - start) // 7 + 1)
        if bounded:
            room = min(room, self.records_room(), max(budget, 0) // ROW_COST + 1)
        st = self.reserve_rows(room)
        if st:
            return st
        rd_init(&r, p, start, n)
        self.limit = p + n
        # (self.last is read and written in place: a local copy measured 4
        # more instructions per header, the register it takes spilling)
        for i in range(first, b.count):
            if parse_record_fields(&r, b.base_offset, b.first_ts, &rec) < 0:
                return -r.err
            if rec.offset <= self.last:
                if rec.offset >= self.min_offset:
                    self.skipped += 1
                for j in range(rec.header_count):
                    if rd_header(&r, &k, &kn, &v, &vn) < 0:
                        return -r.err
            else:
                st = self.add_row(rec.offset, b.max_ts if log_append else rec.timestamp, ts_type,
                                  rec.key, rec.key_len, rec.value, rec.value_len, rec.header_count)
                if st:
                    return st
                for j in range(rec.header_count):
                    if rd_header(&r, &k, &kn, &v, &vn) < 0:
                        return -r.err
                    st = self.add_header(k, kn, v, vn)
                    if st:
                        return st
                self.last = rec.offset
            if end_record(&r, &rec) < 0:
                return -r.err
            # stop after a row of this call (this record's, or one before it was skipped)
            if bounded and self.c.rows and i + 1 < b.count and (
                    self.c.rows - rows0 >= room or r.pos - start + (self.c.rows - rows0) * ROW_COST >= budget):
                self.walked(r.pos - start, self.c.rows - rows0, self.last)
                self.at_pos, self.at_index = r.pos, i + 1
                return ST_INSIDE
        if r.pos != n:
            return -E_TRAILING
        self.walked(n - start, self.c.rows - rows0, self.last)
        return ST_NEXT

    cdef void sync_lens(self) noexcept nogil:
        """Set the lengths of the fixed-width and offset columns (written by
        index) from the row counts."""
        cdef Cols* c = &self.c
        c.b[C_OFFSET].len = c.b[C_TS].len = c.rows * 8
        c.b[C_TS_TYPE].len = c.rows * 4
        c.b[C_KEY_OFF].len = c.b[C_VAL_OFF].len = c.b[C_HDR_OFF].len = (c.rows + 1) * 4
        c.b[C_HK_OFF].len = c.b[C_HV_OFF].len = (c.header_rows + 1) * 4

    cdef int reserve_rows(self, Py_ssize_t k) noexcept nogil:
        """Room in the fixed-width and offset columns for ``k`` more rows;
        1 (stop before this batch) past Arrow's int32 row limit."""
        cdef Cols* c = &self.c
        if c.rows + k >= INT32_MAX:
            return 1
        self.sync_lens()
        if (gbuf_reserve(&c.b[C_OFFSET], 8 * k) < 0 or gbuf_reserve(&c.b[C_TS], 8 * k) < 0
                or gbuf_reserve(&c.b[C_TS_TYPE], 4 * k) < 0 or gbuf_reserve(&c.b[C_KEY_OFF], 4 * k) < 0
                or gbuf_reserve(&c.b[C_VAL_OFF], 4 * k) < 0 or gbuf_reserve(&c.b[C_HDR_OFF], 4 * k) < 0
                or reserve_bits(&c.b[C_KEY_VALID], c.rows + k) < 0 or reserve_bits(&c.b[C_VAL_VALID], c.rows + k) < 0
                or reserve_bits(&c.b[C_HDR_VALID], c.rows + k) < 0):
            return -E_NOMEM
        return 0

    cdef inline int add_row(self, int64_t offset, int64_t ts, int ts_type,
                            const uint8_t* key, int32_t key_len,
                            const uint8_t* value, int32_t value_len, int32_t header_count) noexcept nogil:
        """Append one row (room reserved by reserve_rows); its ``header_count``
        headers follow through add_header."""
        cdef Cols* c = &self.c
        cdef int64_t row = c.rows
        cdef int st
        if self.micros:
            if ts > INT64_MAX // 1000 or ts < INT64_MIN // 1000:
                return -E_TIMESTAMP
            ts *= 1000
        if header_count and c.header_rows + header_count >= INT32_MAX:
            return 1
        (<int64_t*>c.b[C_OFFSET].data)[row] = offset
        (<int64_t*>c.b[C_TS].data)[row] = ts
        (<int32_t*>c.b[C_TS_TYPE].data)[row] = ts_type
        note_valid(&c.b[C_KEY_VALID], &c.nulls[NULLS_KEY], row, key_len >= 0)
        note_valid(&c.b[C_VAL_VALID], &c.nulls[NULLS_VAL], row, value_len >= 0)
        note_valid(&c.b[C_HDR_VALID], &c.nulls[NULLS_HDR], row, header_count > 0)
        st = append_binary(&c.b[C_KEY_OFF], &c.b[C_KEY_DATA], row, key, key_len, self.max_column, self.limit)
        if st == 0:
            st = append_binary(&c.b[C_VAL_OFF], &c.b[C_VAL_DATA], row, value, value_len, self.max_column, self.limit)
        if st == 0 and header_count:
            c.b[C_HK_OFF].len = c.b[C_HV_OFF].len = (c.header_rows + 1) * 4
            if (gbuf_reserve(&c.b[C_HK_OFF], 4 * header_count) < 0
                    or gbuf_reserve(&c.b[C_HV_OFF], 4 * header_count) < 0
                    or reserve_bits(&c.b[C_HV_VALID], c.header_rows + header_count) < 0):
                st = -E_NOMEM
        (<int32_t*>c.b[C_HDR_OFF].data)[row + 1] = <int32_t>(c.header_rows + header_count)
        c.rows = row + 1
        return st

    cdef inline int add_header(self, const uint8_t* k, int32_t kn, const uint8_t* v, int32_t vn) noexcept nogil:
        """Append one header of the last row (room reserved by add_row)."""
        cdef Cols* c = &self.c
        cdef int64_t i = c.header_rows
        cdef int st
        if (kn <= 16 and self.limit - k >= 16 and short_ascii(k, kn)) or (
                kn == self.valid_key_len and memcmp(k, self.valid_key, kn) == 0):
            st = append_binary(&c.b[C_HK_OFF], &c.b[C_HK_DATA], i, k, kn, self.max_column, self.limit)
        elif utf8_invalid_at(k, kn) >= 0:
            st = self.add_replaced_key(k, kn)
        else:
            if kn <= 64:
                memcpy(self.valid_key, k, kn)
                self.valid_key_len = kn
            st = append_binary(&c.b[C_HK_OFF], &c.b[C_HK_DATA], i, k, kn, self.max_column, self.limit)
        if st == 0:
            st = append_binary(&c.b[C_HV_OFF], &c.b[C_HV_DATA], i, v, vn, self.max_column, self.limit)
        note_valid(&c.b[C_HV_VALID], &c.nulls[NULLS_HV], i, vn >= 0)
        c.header_rows = i + 1
        return st

    cdef int add_replaced_key(self, const uint8_t* k, int32_t kn) noexcept with gil:
        # rare: decode with U+FFFD replacement exactly as the object path does
        cdef bytes enc = header_key_str(k, kn).encode("utf-8")
        return append_binary(&self.c.b[C_HK_OFF], &self.c.b[C_HK_DATA], self.c.header_rows,
                             <const uint8_t*>PyBytes_AS_STRING(enc), <int32_t>PyBytes_GET_SIZE(enc),
                             self.max_column, <const uint8_t*>PyBytes_AS_STRING(enc) + PyBytes_GET_SIZE(enc))


cdef extern from *:
    """
    /* n > 0 bytes from src to dst. Up to 32 bytes (keys, header keys and
       values mostly) as two fixed 16-byte moves, no call, where src may be
       read 32 bytes on (limit: the end of its batch's records); dst has 32
       bytes of room past n (append_binary reserves them). */
    static inline void kwire_copy(char* dst, const unsigned char* src, Py_ssize_t n, const unsigned char* limit) {
        if (n <= 32 && limit - src >= 32) {
            memcpy(dst, src, 16);
            memcpy(dst + 16, src + 16, 16);
        } else {
            memcpy(dst, src, (size_t)n);
        }
    }

    /* Whether s[0:n] (n <= 16; s may be read 16 bytes on) is ASCII: a header
       key's check for valid UTF-8 in two masked words. */
    static inline int kwire_short_ascii(const unsigned char* s, Py_ssize_t n) {
        uint64_t a, b;
        uint64_t ma = n >= 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * n)) - 1;
        uint64_t mb = n >= 16 ? ~(uint64_t)0 : n <= 8 ? 0 : ((uint64_t)1 << (8 * (n - 8))) - 1;
        memcpy(&a, s, 8);
        memcpy(&b, s + 8, 8);
        return (((a & ma) | (b & mb)) & 0x8080808080808080ULL) == 0;
    }
    """
    void copy_bytes "kwire_copy"(char* dst, const uint8_t* src, Py_ssize_t n, const uint8_t* limit) noexcept nogil
    bint short_ascii "kwire_short_ascii"(const uint8_t* s, Py_ssize_t n) noexcept nogil


cdef inline int append_binary(GBuf* offs, GBuf* data, int64_t i, const uint8_t* p, int32_t n,
                              Py_ssize_t max_column, const uint8_t* limit) noexcept nogil:
    """Element ``i`` of a binary column: its bytes (none when null, n < 0) and
    its end offset (room for it reserved). 1 when the data would pass
    ``max_column`` bytes. ``p`` may be read up to ``limit`` (at least its
    ``n`` bytes: ``p + n`` where nothing follows them)."""
    if n > 0:
        if data.len + n > max_column:
            return 1
        if gbuf_reserve(data, n + 32) < 0:
            return -E_NOMEM
        copy_bytes(data.data + data.len, p, n, limit)
        data.len += n
    (<int32_t*>offs.data)[i + 1] = <int32_t>data.len
    return 0


cdef inline int reserve_bits(GBuf* bits, int64_t n) noexcept nogil:
    """Room in a validity bitmap for ``n`` bits (its length is that of the
    bits written: see note_valid); -1 if out of memory."""
    cdef Py_ssize_t need = (n + 7) >> 3
    if need <= bits.cap:
        return 0
    return gbuf_grow(bits, need - bits.len)


cdef inline void note_valid(GBuf* bits, int64_t* nulls, int64_t i, bint valid) noexcept nogil:
    """Element ``i``'s validity bit (room reserved by reserve_bits). The
    bitmap is only written once the column has a null (until then every
    element is valid and Arrow gets no bitmap): the first null fills the bits
    of the elements before it."""
    cdef uint8_t* byte
    if nulls[0] == 0:
        if valid:
            return
        memset(bits.data, 0xFF, (i >> 3) + 1)
    byte = <uint8_t*>bits.data + (i >> 3)
    byte[0] = (byte[0] & ~(1 << (i & 7))) | (valid << (i & 7))
    bits.len = (i >> 3) + 1
    nulls[0] += not valid


def decode_columnar(data, *, topic=None, partition=None, int64_t min_offset=-1,
                    bint check_crcs=True, bint include_control=False,
                    Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
                    timestamp_unit="ms", Py_ssize_t max_column_bytes=INT32_MAX):
    """Decode ``data`` into a ``pyarrow.RecordBatch`` (see :class:`ColumnarDecoder`)."""
    return ColumnarDecoder(check_crcs=check_crcs, include_control=include_control,
                           max_decompressed_bytes=max_decompressed_bytes,
                           timestamp_unit=timestamp_unit, max_column_bytes=max_column_bytes).decode(
                               data, topic=topic, partition=partition, min_offset=min_offset)
