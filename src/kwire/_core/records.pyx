# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Reading record batches: the batch walk, the v2 record parser, the
objects a decode returns and the driver every decoder runs on.

A single driver (:class:`_Driver`) walks batch boundaries, handles a cut at the
end of the buffer, checks CRCs, decompresses and unwraps legacy wrappers
(magic 0 and 1). It hands each batch to a sink: Python :class:`Record`
objects (:class:`Decoder`, here) or Arrow column buffers
(:class:`~kwire._core.columnar.ColumnarDecoder`). All reads of input go
through the bounds-checked :c:type:`Reader` (buffers.pxd); errors are codes
(consts.pxd) that become Python exceptions only at the driver level, which
is what lets the columnar decoder parse records with the GIL released.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport INT32_MAX, INT64_MAX, INT64_MIN, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memcmp

from kwire._core.buffers cimport (Reader, add_wrap, rd_bytes, rd_i8, rd_i16, rd_i32, rd_i64, rd_init, rd_u32,
                                  rd_varint)
from kwire._core.consts cimport *
from kwire._core.native cimport (LZ4_BOMB, LZ4_NOMEM, LZ4F_VERSION, _lz4f_decompress, _lz4f_dctx_create, _lz4f_dctx_free,
                                 _lz4f_dctx_reset, _lz4f_is_error, crc32c, lz4_frame_decompress)

from operator import itemgetter

from kwire import compression as _compression
from kwire.errors import (CorruptRecordError, CrcMismatchError, DecompressionBombError, DecompressionError, KwireError,
                          UnsupportedCodecError)

cdef extern from "zlib.h" nogil:
    unsigned long _zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf, unsigned int n)

cdef object _decompress = _compression.decompress

cdef object _first_offset = itemgetter(1)

cdef enum:
    CONTROL_ABORT = 0           # a control record's type (its key: version int16, type int16)
    CONTROL_COMMIT = 1

NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

cdef dict _MESSAGES = {
    E_TRUNC: "truncated record data: a field runs past the end of its batch",
    E_VARINT: "invalid varint: longer than its type allows",
    E_NEG_LENGTH: "invalid negative length",
    E_SIZE: "invalid batch size",
    E_MAGIC: "unknown magic byte",
    E_COUNT: "invalid count",
    E_RECORD_SIZE: "record fields do not match the record's declared length",
    E_TRAILING: "bytes left over after the last record",
    E_NESTED: "compressed message nested inside a compressed wrapper",
    E_EMPTY_WRAPPER: "compressed wrapper message holds no inner messages",
    E_INNER_MAGIC: "inner message magic differs from its wrapper's",
    E_NULL_PAYLOAD: "compressed wrapper message has a null value",
    E_TIMESTAMP: "timestamp out of range for the microsecond unit",
}

_ERROR_MESSAGES = _MESSAGES     # for the other modules of the core (legacy.pyx)


# --------------------------------------------------------------- batch walk
cdef int parse_legacy_message(Reader* r, Batch* b) noexcept nogil:
    """Parse crc .. value of one legacy message filling [r.pos, r.end)."""
    cdef const uint8_t* q
    b.crc = rd_u32(r)
    b.magic = rd_i8(r)
    b.attributes = <uint8_t>rd_i8(r)
    if r.err:
        return -1
    if b.magic != 0 and b.magic != 1:
        r.err = E_MAGIC
        return -1
    b.timestamp = rd_i64(r) if b.magic == 1 else -1
    b.key_len = rd_i32(r)
    b.key_pos = r.pos
    rd_bytes(r, b.key_len)
    b.value_len = rd_i32(r)
    b.value_pos = r.pos
    rd_bytes(r, b.value_len)
    if r.err:
        return -1
    if r.pos != r.end:
        r.err = E_SIZE
        return -1
    return 0


cdef int read_batch(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, Batch* b, int* err) noexcept nogil:
    """Read the batch (or legacy message) header at ``pos``.

    Returns 1 with ``b`` filled when the whole batch lies in the buffer, 0 when
    the buffer ends inside it (``b.total`` is its size, or LOG_OVERHEAD when
    even the size is cut), -1 with ``err`` set when the bytes cannot be a
    batch.
    """
    cdef Reader r
    cdef int32_t size
    cdef int magic = -1
    b.pos = pos
    b.total = LOG_OVERHEAD
    b.base_offset = -1
    if end - pos < LOG_OVERHEAD:
        return 0
    rd_init(&r, buf, pos, end)
    b.base_offset = rd_i64(&r)
    size = rd_i32(&r)
    if size < V0_MIN_SIZE:
        err[0] = E_SIZE
        return -1
    b.total = LOG_OVERHEAD + <Py_ssize_t>size
    if end - pos > MAGIC_POS:
        magic = buf[pos + MAGIC_POS]
        if magic > 2 or magic < 0:
            err[0] = E_MAGIC
            return -1
        if (magic == 2 and size < V2_MIN_SIZE) or (magic == 1 and size < V1_MIN_SIZE):
            err[0] = E_SIZE
            return -1
    if b.total > end - pos:
        return 0
    r.end = pos + b.total
    b.magic = magic
    if magic == 2:
        b.leader_epoch = rd_i32(&r)
        rd_i8(&r)
        b.crc = rd_u32(&r)
        b.attributes = <uint16_t>rd_i16(&r)
        b.last_offset_delta = rd_i32(&r)
        b.first_ts = rd_i64(&r)
        b.max_ts = rd_i64(&r)
        b.producer_id = rd_i64(&r)
        b.producer_epoch = rd_i16(&r)
        b.base_sequence = rd_i32(&r)
        b.count = rd_i32(&r)
        if b.count < 0:
            err[0] = E_COUNT
            return -1
        b.last_offset = add_wrap(b.base_offset, b.last_offset_delta)
        return 1
    b.leader_epoch = -1
    b.producer_id = -1
    b.producer_epoch = -1
    b.base_sequence = -1
    b.count = 1
    b.last_offset = b.base_offset
    if parse_legacy_message(&r, b) < 0:
        err[0] = r.err
        return -1
    b.first_ts = b.max_ts = b.timestamp
    return 1


# ---------------------------------------------------------------- v2 record
cdef inline int parse_record(Reader* r, int64_t base_offset, int64_t base_ts, Rec* rec) noexcept nogil:
    """Parse and validate one v2 record; its headers are checked, not kept."""
    cdef int32_t i, kn, vn
    cdef const uint8_t* k
    cdef const uint8_t* v
    if parse_record_fields(r, base_offset, base_ts, rec) < 0:
        return -1
    for i in range(rec.header_count):
        if rd_header(r, &k, &kn, &v, &vn) < 0:
            return -1
    return end_record(r, rec)


# ------------------------------------------------------------ record objects
cdef inline object bytes_or_none(const uint8_t* p, int32_t n):
    if n < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>p, n)


@cython.final
@cython.auto_pickle(False)
cdef class _Pinned:
    """A buffer export of a bytes-like object, held for as long as records
    point into it (a bytearray cannot be resized under them meanwhile)."""

    def __cinit__(self, obj):
        PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
        self.held = True

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)


@cython.final
@cython.auto_pickle(False)
cdef class BatchInfo:
    """Metadata of the batch (or legacy message / wrapper) a record came from."""

    @property
    def compression(self):
        """Kafka codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & ATTR_CODEC

    @property
    def timestamp_type(self):
        """-1 (magic 0 or Kafka 0.7: none), 0 CreateTime, 1 LogAppendTime."""
        if self.magic == 0 or self.kafka07:
            return -1
        return 1 if self.attributes & ATTR_LOG_APPEND_TIME else 0

    @property
    def is_transactional(self):
        return self.magic == 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return self.magic == 2 and bool(self.attributes & ATTR_CONTROL)

    @property
    def next_offset(self):
        return self.last_offset + 1

    def __repr__(self):
        return (f"BatchInfo(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"magic={self.magic}, compression={self.compression}, records={self.record_count}, "
                f"producer_id={self.producer_id}, transactional={self.is_transactional}, "
                f"control={self.is_control})")


cdef BatchInfo make_batch_info(Batch* b):
    cdef BatchInfo bi = BatchInfo.__new__(BatchInfo)
    bi.base_offset = b.base_offset
    bi.last_offset = b.last_offset
    bi.magic = b.magic
    bi.attributes = b.attributes
    bi.crc = b.crc
    bi.partition_leader_epoch = b.leader_epoch
    bi.first_timestamp = b.first_ts
    bi.max_timestamp = b.max_ts
    bi.producer_id = b.producer_id
    bi.producer_epoch = b.producer_epoch
    bi.base_sequence = b.base_sequence
    bi.record_count = b.count
    bi.size_in_bytes = b.total
    return bi


@cython.final
@cython.freelist(512)
@cython.no_gc   # holds only bytes, None, tuples of str/bytes and a BatchInfo: no cycle can pass through it
cdef class Record:
    """One Kafka record.

    ``key`` and ``value`` are bytes or None; ``headers`` is a tuple of
    ``(str, bytes | None)`` pairs (empty when the record has none);
    ``timestamp_type`` is -1 (none), 0 (CreateTime) or 1 (LogAppendTime);
    ``batch`` is the :class:`BatchInfo` of the batch it came from.

    ``offset``, ``timestamp``, ``key``, ``value``, ``headers`` and ``batch``
    are plain slots (made when the record is decoded), so reading them costs
    what reading a ``__slots__`` attribute of a Python class costs.
    """
    # Read-only member descriptors for these are installed at import
    # (_install_record_slots): Cython would make them properties, which
    # CPython's attribute cache cannot specialise.

    @property
    def timestamp_type(self):
        """-1 (none), 0 (CreateTime) or 1 (LogAppendTime): its batch's."""
        return self.batch.timestamp_type

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp
                and self.timestamp_type == o.timestamp_type and self.key == o.key
                and self.value == o.value and self.headers == o.headers)

    __hash__ = None


cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
        const char* doc
    enum:
        T_OBJECT_EX
        READONLY

cdef extern from "Python.h":
    object PyDescr_NewMember(type t, PyMemberDef* m)
    void PyType_Modified(type t)
    ctypedef struct PyTypeObject_ "PyTypeObject":
        PyObject* tp_dict

cdef PyMemberDef _record_slots[6]


cdef void _install_record_slots() except *:
    """Give Record read-only member descriptors over its object fields: the
    slot kind CPython's specialising interpreter reads without a call."""
    cdef Record probe = Record.__new__(Record)
    cdef char* at = <char*><PyObject*>probe
    cdef PyObject** fields[6]
    cdef const char* names[6]
    cdef const char* docs[6]
    cdef int i
    fields[:] = [<PyObject**>&probe.offset, <PyObject**>&probe.timestamp, <PyObject**>&probe.key,
                 <PyObject**>&probe.value, <PyObject**>&probe.headers, <PyObject**>&probe.batch]
    names[:] = [b"offset", b"timestamp", b"key", b"value", b"headers", b"batch"]
    docs[:] = [b"The record's offset.", b"Its timestamp (ms since the epoch; -1 when none).",
               b"The key as bytes, or None.", b"The value as bytes, or None.",
               b"Its headers: a tuple of (str, bytes or None) pairs.",
               b"The BatchInfo of the batch it came from."]
    for i in range(6):
        _record_slots[i].name = names[i]
        _record_slots[i].type = T_OBJECT_EX
        _record_slots[i].offset = <char*>fields[i] - at
        _record_slots[i].flags = READONLY
        _record_slots[i].doc = docs[i]
        (<dict><object>(<PyTypeObject_*>Record).tp_dict)[names[i].decode()] = PyDescr_NewMember(Record, &_record_slots[i])
    PyType_Modified(Record)


_install_record_slots()


# ------------------------------------------------------------------ results
@cython.final
@cython.auto_pickle(False)
cdef class PartialBatch:
    """The rest of a batch that a decode call stopped inside (its ``resume``).

    It holds that batch's records, decompressed once (at most
    ``max_decompressed_bytes``; for an uncompressed batch, a copy of its
    records not yet returned), its header and the cursor. Pass it as
    ``resume=`` to the next call on the same partition, with the bytes after
    the batch (``data[consumed:]``): that call first returns the batch's next
    records, then goes on into its buffer. Any decoder of the kind that made
    it takes it (a :class:`Decoder`'s or a :class:`ColumnarDecoder`'s); a call
    never changes the one it is given. The CRC was checked before the batch's
    first record was returned; a corrupt record later in it raises when a call
    reaches it.
    """

    @property
    def base_offset(self):
        """The base offset of the batch."""
        return self.b.base_offset

    @property
    def next_offset(self):
        """The offset after the last record returned from it."""
        return add_wrap(self.last, 1)

    @property
    def records_left(self):
        """Records of the batch not walked yet (some may be skipped)."""
        return self.b.count - self.index

    @property
    def size_in_bytes(self):
        """The bytes of records it holds."""
        return PyBytes_GET_SIZE(self.payload) if self.payload is not None else 0

    @property
    def batch_bytes(self):
        """The batch's size in the buffer it came from, its header included:
        the call that stopped inside it consumed it whole, so it begins
        ``batch_bytes`` before that call's ``consumed``."""
        return self.b.total

    def __repr__(self):
        return (f"PartialBatch(base_offset={self.b.base_offset}, next_offset={self.next_offset}, "
                f"records_left={self.records_left}, size_in_bytes={self.size_in_bytes})")


cdef class DecodeResult:
    """What :meth:`Decoder.decode` found in a buffer.

    ``records``: the records, in offset order. ``batches``: :class:`BatchInfo`
    of each batch this call began (control batches included; a batch a call
    stopped inside is listed by that call only). ``consumed``: bytes of whole
    batches read (a batch the call stopped inside counts whole); the rest of
    the buffer is for the next call. ``next_offset``: the offset to fetch
    next, after the last complete batch or, when the call stopped inside a
    batch, after its last record returned (None if no batch was complete and
    no record returned). ``incomplete_size``: the size of the cut batch at the
    end of the buffer (0 if the buffer ends on a batch boundary; 12 if even
    its length is cut). When ``consumed`` is 0 and ``incomplete_size`` exceeds
    the buffer, the first batch is bigger than the fetch returned: fetch more
    bytes. ``resume``: a :class:`PartialBatch` when the call stopped inside a
    batch (pass it to the next call with ``data[consumed:]``), else None.
    ``skipped``: records dropped because their offset was not above one
    already passed (a batch whose offsets go backwards).
    """

    def __repr__(self):
        return (f"DecodeResult(records={len(self.records)}, batches={len(self.batches)}, "
                f"consumed={self.consumed}, next_offset={self.next_offset}, "
                f"incomplete_size={self.incomplete_size}, resume={self.resume!r}, skipped={self.skipped})")


# ------------------------------------------------------- aborted transactions
@cython.final
@cython.auto_pickle(False)
cdef class Aborter:
    """read_committed's aborted transactions of one partition, which a
    decode call given it (``aborter=``) drops as it walks the batches.

    Made from a Fetch response's aborted-transaction list: ``(producer_id,
    first_offset)`` pairs, in any order. At each v2 batch header, every
    pending entry whose first offset is at or below the batch's last offset
    makes its producer id *aborting*; then a transactional batch of an
    aborting producer is dropped whole (its CRC checked, its records not
    decompressed), and a control batch with that producer's ABORT marker
    ends the aborted transaction. A call given an aborter returns no control
    record (whatever ``include_control`` says); the offsets of every batch it
    drops still move ``next_offset`` past them.

    Use one per partition, across its fetches (an aborted transaction can
    span them): :meth:`extend` takes the next response's list in and keeps
    the producers aborting. A decode call that raises leaves the aborter as
    it found it, so decoding the same bytes again (batch by batch, say) drops
    the same records. Not thread-safe: one call at a time uses it.
    """

    def __init__(self, aborted=()):
        self.pending = []
        self.aborting = set()
        self.extend(aborted)

    def extend(self, aborted):
        """Add ``(producer_id, first_offset)`` pairs (the next Fetch
        response's aborted transactions of the partition); the entries
        pending and the producers aborting stay."""
        cdef list entries = self.pending[self.index:]
        cdef int64_t producer_id, first_offset
        for producer_id, first_offset in aborted:
            entries.append((producer_id, first_offset))
        entries.sort(key=_first_offset)
        self.pending = entries
        self.index = 0
        self.sync()

    @property
    def pending(self):
        """The ``(producer_id, first_offset)`` entries no batch reached yet, by first offset."""
        return self.pending[self.index:]

    @property
    def aborting(self):
        """The producer ids inside an aborted transaction (no ABORT marker of theirs seen yet)."""
        return frozenset(self.aborting)

    def __repr__(self):
        return f"Aborter(pending={self.pending[self.index:]!r}, aborting={sorted(self.aborting)!r})"

    cdef int sync(self) except -1:
        self.next_first = (<tuple>self.pending[self.index])[1] if self.index < len(self.pending) else INT64_MAX
        self.naborting = len(self.aborting)
        return 0

    cdef int advance(self, int64_t last_offset) except -1:
        """Make the producers of the entries up to ``last_offset`` aborting."""
        cdef tuple e
        while self.index < len(self.pending):
            e = <tuple>self.pending[self.index]
            if <int64_t>e[1] > last_offset:
                break
            self.aborting.add(e[0])
            self.index += 1
        return self.sync()

    cdef int save(self) except -1:
        """A call begins: what ``restore`` goes back to if it raises."""
        self.saved_index = self.index
        self.saved_aborting = set(self.aborting)
        return 0

    cdef void restore(self):
        self.index = self.saved_index
        self.aborting = self.saved_aborting
        self.saved_aborting = None
        self.sync()                 # next_first and naborting follow from index and aborting


# ------------------------------------------------------------------- driver
cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX


@cython.auto_pickle(False)
cdef class _Driver:
    """Walks a buffer batch by batch; subclasses receive the records.

    Every call also keeps the offsets it returns increasing: a record whose
    offset is not above the last one passed (returned, or the end of a batch
    walked; ``min_offset - 1`` at first) is dropped and counted (``skipped``)
    unless it lies below ``min_offset``, as Kafka's consumer skips records
    below its fetch position.
    """

    def __cinit__(self, *args, **kwargs):
        self.budget = self.max_records = PY_SSIZE_T_MAX

    def __dealloc__(self):
        free(self.plain.data)
        if self.lz4_dctx != NULL:
            _lz4f_dctx_free(self.lz4_dctx)

    def __init__(self, *, bint check_crcs=True, bint include_control=False,
                 Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES):
        if not 0 < max_decompressed_bytes <= INT32_MAX:
            raise ValueError("max_decompressed_bytes must be between 1 and 2**31 - 1")
        self.check_crcs = check_crcs
        self.include_control = include_control
        self.max_decompressed = max_decompressed_bytes

    # --- hooks for sinks ---------------------------------------------------
    cdef int begin_batch(self, Batch* b) except -1:
        return 0

    cdef int go_on_batch(self, PartialBatch pb) except -1:
        """A call goes on with the batch of ``pb`` (begun by an earlier call)."""
        return 0

    cdef int on_v2_records(self, Batch* b, const uint8_t* p, Py_ssize_t start, Py_ssize_t n,
                           int32_t first) except -1:
        """Walk the records of ``b`` in ``p[start:n]``, the first of them its
        record number ``first``; returns ST_NEXT, ST_BEFORE or ST_INSIDE."""
        return ST_NEXT

    cdef int on_message(self, Batch* b, int64_t offset, int64_t ts, int ts_type,
                        const uint8_t* key, int32_t key_len,
                        const uint8_t* value, int32_t value_len) except -1:
        """Take one legacy message (returns ST_BEFORE if the sink rolled its batch back)."""
        return ST_NEXT

    cdef Py_ssize_t fast_path(self, Py_ssize_t pos, Py_ssize_t n) except -1:
        """Optionally consume batches from ``pos`` without Python; returns
        where the regular walk resumes."""
        return pos


    cdef int keep_partial(self, Batch* b, const uint8_t* p, Py_ssize_t n, bytes owner,
                          int64_t rel_base, BatchInfo info) except -1:
        """The call stopped inside ``b`` at ``at_pos`` of its records ``p[:n]``:
        keep the rest for the next call (``owner`` holds ``p`` if it is a bytes
        object; otherwise the rest is copied)."""
        cdef PartialBatch pb = PartialBatch.__new__(PartialBatch)
        pb.kind = self.kind
        pb.b = b[0]
        pb.index = self.at_index
        pb.last = self.last
        pb.rel_base = rel_base
        pb.info = info
        if owner is None:
            pb.payload = PyBytes_FromStringAndSize(<const char*>(p + self.at_pos), n - self.at_pos)
            pb.pos = 0
        else:
            pb.payload = owner
            pb.pos = self.at_pos
        self.resume_out = pb
        self.next_offset = add_wrap(self.last, 1)
        self.any_batch = True
        return 0

    cdef BatchInfo partial_info(self):
        return None

    # --- errors ------------------------------------------------------------
    cdef raise_code(self, int code, int64_t offset):
        raise CorruptRecordError(_MESSAGES.get(code, "corrupt record data"),
                                 self.topic, self.partition, offset)

    cdef object payload(self, Batch* b, Py_ssize_t start, Py_ssize_t length, int codec):
        """Decompressed bytes of ``length`` bytes at ``start`` of the input."""
        try:
            return _decompress(codec, self.view[start:start + length], self.max_decompressed, b.magic)
        except CorruptRecordError as e:
            raise e.at(self.topic, self.partition, b.base_offset) from None
        except KwireError:
            raise
        except Exception as e:  # a codec library's own exception type
            raise DecompressionError(f"codec {codec}: {e}", self.topic, self.partition,
                                     b.base_offset) from e

    cdef Py_ssize_t lz4_payload(self, Batch* b, Py_ssize_t start, Py_ssize_t length) except -1:
        """Decompress the lz4 payload of ``length`` bytes at ``start`` into
        ``plain`` (reused batch after batch); its size."""
        cdef int err = 0
        cdef Py_ssize_t n
        if self.lz4_dctx == NULL:
            if _lz4f_is_error(_lz4f_dctx_create(&self.lz4_dctx, LZ4F_VERSION)):
                self.lz4_dctx = NULL
                raise MemoryError()
        else:
            _lz4f_dctx_reset(self.lz4_dctx)
        n = lz4_frame_decompress(self.lz4_dctx, self.buf + start, length, &self.plain, self.max_decompressed, &err)
        if n >= 0:
            return n
        if err == LZ4_NOMEM:
            raise MemoryError()
        if err == LZ4_BOMB:
            raise DecompressionBombError("lz4 payload expands past max_decompressed_bytes", self.topic,
                                         self.partition, b.base_offset)
        raise DecompressionError("lz4: corrupt or truncated frame, or bytes after its end", self.topic,
                                 self.partition, b.base_offset)

    # --- the walk ----------------------------------------------------------
    cdef int enter(self, PartialBatch resume, Aborter aborter) except -1:
        """Claim the decoder for one call (a decoder is not thread-safe: a
        second call while one is under way would clobber its state); the
        call's ``leave`` releases it."""
        if self.busy:
            raise RuntimeError("this decoder is already decoding (another thread?): use one decoder per thread")
        if resume is not None and resume.kind != self.kind:
            raise TypeError(f"resume= takes a PartialBatch that a {type(self).__name__} made")
        if aborter is not None:
            aborter.save()
        self.aborter = aborter
        self.busy = True
        return 0

    cdef void leave(self, bint ok):
        """The call is over: ``ok``, or it raised and the aborter's changes are undone."""
        if ok:
            self.records_total += self.returned
            self.bytes_total += self.consumed
        elif self.aborter is not None:
            self.aborter.restore()
        self.aborter = None
        self.resume_out = None
        self.busy = False

    cdef int run(self, object data, object topic, object partition, int64_t min_offset,
                 Py_ssize_t max_bytes, Py_ssize_t max_records, PartialBatch resume) except -1:
        """One call (claimed by ``enter``; the caller releases ``busy``)."""
        cdef _Pinned pin
        cdef Batch b
        cdef int st, err = 0
        cdef Py_ssize_t pos = 0, n
        self.topic = topic
        self.partition = partition
        self.min_offset = min_offset
        self.last = min_offset - 1 if min_offset != INT64_MIN else INT64_MIN
        self.skipped = 0
        self.bounded = max_bytes >= 0 or max_records >= 0
        self.budget = max_bytes if max_bytes >= 0 else PY_SSIZE_T_MAX
        self.max_records = max_records if max_records >= 0 else PY_SSIZE_T_MAX
        self.decoded = self.returned = 0
        self.consumed = 0
        self.any_batch = False
        self.next_offset = -1
        self.incomplete_size = 0
        self.resume_out = None
        self.held_pending = False
        if PyBytes_CheckExact(data):
            self.input_owner = data
            self.buf = <const uint8_t*>PyBytes_AS_STRING(data)
            n = PyBytes_GET_SIZE(data)
        else:
            pin = _Pinned(data)
            self.input_owner = pin
            self.buf = <const uint8_t*>pin.view.buf
            n = pin.view.len
        try:
            self.view = memoryview(data).cast("B")
            if resume is not None and self.go_on(resume) != ST_NEXT:
                return 0
            while pos < n:
                pos = self.fast_path(pos, n)
                if pos >= n or self.resume_out is not None or self.stopping():
                    break
                st = read_batch(self.buf, pos, n, &b, &err)
                if st < 0:
                    self.raise_code(err, b.base_offset)
                if st == 0:
                    self.incomplete_size = b.total
                    break
                if b.magic == 2:
                    st = self.run_v2(&b)
                else:
                    st = self.run_legacy(&b)
                if st == ST_BEFORE:
                    break
                pos += b.total
                self.consumed = pos
                if st == ST_INSIDE:
                    break
                self.batch_done(&b)
                if self.stopping():
                    break
        finally:
            self.view = self.input_owner = None
            self.buf = NULL
        return 0

    cdef int go_on(self, PartialBatch pb) except -1:
        """Go on with the batch an earlier call stopped inside."""
        cdef Batch b = pb.b
        cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(pb.payload)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(pb.payload)
        cdef int st
        cdef int64_t min_offset = self.min_offset
        if pb.last > self.last:
            self.last = pb.last
        if min_offset <= pb.last or min_offset - 1 == pb.last:
            # min_offset is where the earlier calls stopped: a record of this
            # batch dropped now went backwards (counted), it was not before the fetch offset
            self.min_offset = INT64_MIN
        self.go_on_batch(pb)
        try:
            if b.magic == 2:
                st = self.on_v2_records(&b, p, pb.pos, n, pb.index)
                if st == ST_INSIDE:
                    self.keep_partial(&b, p, n, pb.payload, 0, pb.info)
            else:
                st = self.legacy_messages(&b, p, pb.pos, n, pb.index, pb.rel_base, pb.payload, pb.info)
        finally:
            self.min_offset = min_offset
        if st == ST_BEFORE:        # nothing of it fits this call: it stays as it was
            self.resume_out = pb
            self.next_offset = add_wrap(pb.last, 1)
            self.any_batch = True
        elif st == ST_NEXT:
            self.batch_done(&b)
        return st

    cdef object batch_records(self, Batch* b, const uint8_t** p, Py_ssize_t* n):
        """The records of v2 batch ``b``, decompressed: ``p[0][:n[0]]``.
        Returns the bytes object holding them (None: the input or ``plain``)."""
        cdef int codec = b.attributes & ATTR_CODEC
        cdef Py_ssize_t body = b.pos + V2_HEADER
        cdef Py_ssize_t body_len = b.total - V2_HEADER
        cdef bytes plain
        if codec == CODEC_NONE:
            p[0], n[0] = self.buf + body, body_len
            return None
        self.compressed_total += body_len
        if codec == CODEC_LZ4 and _lz4f_decompress != NULL:
            n[0] = self.lz4_payload(b, body, body_len)
            p[0] = <const uint8_t*>self.plain.data
            self.decompressed_total += n[0]
            return None
        plain = self.payload(b, body, body_len, codec)
        p[0], n[0] = <const uint8_t*>PyBytes_AS_STRING(plain), PyBytes_GET_SIZE(plain)
        self.decompressed_total += n[0]
        return plain

    cdef int aborted(self, Batch* b) except -1:
        """read_committed (``aborter`` given), at the header of v2 batch
        ``b``: 1 when it is not returned (a control batch, whose ABORT marker
        ends its producer's aborted transaction; a transactional batch of a
        producer inside one), else 0. Decided once per batch: a call going on
        inside a batch does not ask again."""
        cdef Aborter a = self.aborter
        if a.next_first <= b.last_offset:
            a.advance(b.last_offset)
        if b.attributes & ATTR_CONTROL:
            if a.naborting and b.producer_id in a.aborting and self.control_type(b) == CONTROL_ABORT:
                a.aborting.discard(b.producer_id)
                a.naborting = len(a.aborting)
            return 1
        return (b.attributes & ATTR_TRANSACTIONAL) != 0 and a.naborting != 0 and b.producer_id in a.aborting

    cdef int control_type(self, Batch* b) except -2:
        """The type of control batch ``b``'s record (CONTROL_ABORT,
        CONTROL_COMMIT, or another; -1 when it has no record). Its key is
        version int16, type int16; a key shorter than that is corrupt."""
        cdef const uint8_t* p
        cdef Py_ssize_t n
        cdef Reader r
        cdef Rec rec
        cdef object owner
        if b.count == 0:
            return -1
        owner = self.batch_records(b, &p, &n)     # held while ``rec`` points into it
        rec.key_len = -1
        rd_init(&r, p, 0, n)
        if parse_record(&r, b.base_offset, b.first_ts, &rec) < 0:
            self.raise_code(r.err, b.base_offset)
        if rec.key_len < 4:
            raise CorruptRecordError("control record key is shorter than 4 bytes", self.topic, self.partition,
                                     b.base_offset)
        return <int16_t>((<uint16_t>rec.key[2] << 8) | rec.key[3])

    cdef int run_v2(self, Batch* b) except -1:
        cdef int codec = b.attributes & ATTR_CODEC
        cdef Py_ssize_t body_len = b.total - V2_HEADER
        cdef uint32_t crc
        cdef bytes plain = None
        cdef const uint8_t* p
        cdef Py_ssize_t n
        cdef int st
        if self.check_crcs:
            with nogil:
                crc = crc32c(self.buf + b.pos + V2_CRC_START, b.total - V2_CRC_START)
            if crc != b.crc:
                raise CrcMismatchError(
                    f"record batch CRC32C mismatch (stored {b.crc:#010x}, computed {crc:#010x})",
                    self.topic, self.partition, b.base_offset)
        if codec > CODEC_MAX:
            raise UnsupportedCodecError(f"unknown compression codec id {codec}",
                                        self.topic, self.partition, b.base_offset)
        self.begin_batch(b)
        if self.aborter is not None:
            if self.aborted(b):
                return ST_NEXT
        elif (b.attributes & ATTR_CONTROL) and not self.include_control:
            return ST_NEXT
        if b.count == 0 and codec == CODEC_NONE:
            if body_len:
                self.raise_code(E_TRAILING, b.base_offset)
            return ST_NEXT
        plain = self.batch_records(b, &p, &n)
        st = self.on_v2_records(b, p, 0, n, 0)
        if st == ST_INSIDE:
            self.keep_partial(b, p, n, plain, 0, self.partial_info())
        return st

    cdef int check_legacy_crc(self, const uint8_t* msg, Py_ssize_t n, Batch* b, int64_t offset) except -1:
        # ``msg`` starts at the crc field; the CRC32 covers magic .. end.
        cdef uint32_t crc
        if not self.check_crcs:
            return 0
        crc = _zlib_crc32(0, msg + 4, <unsigned int>(n - 4)) & 0xFFFFFFFF
        if crc != b.crc:
            raise CrcMismatchError(
                f"message CRC32 mismatch (stored {b.crc:#010x}, computed {crc:#010x})",
                self.topic, self.partition, offset)
        return 0

    cdef int legacy_message(self, Batch* b, int64_t offset, int64_t ts, int ts_type,
                            const uint8_t* key, int32_t key_len,
                            const uint8_t* value, int32_t value_len) except -1:
        """One legacy message: ST_NEXT (dropped), ST_BEFORE (the sink rolled
        its batch back) or ST_RETURNED."""
        if offset <= self.last:
            if offset >= self.min_offset:
                self.skipped += 1
            return ST_NEXT
        if self.on_message(b, offset, ts, ts_type, key, key_len, value, value_len) == ST_BEFORE:
            return ST_BEFORE
        self.walked(0, 1, offset)
        return ST_RETURNED


    cdef int run_legacy(self, Batch* b) except -1:
        cdef int codec = b.attributes & ATTR_CODEC
        cdef bytes plain
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos
        cdef Batch inner
        cdef int err = 0, st, count = 0
        cdef int64_t last_rel = 0, rel_base
        self.check_legacy_crc(self.buf + b.pos + LOG_OVERHEAD, b.total - LOG_OVERHEAD, b, b.base_offset)
        if codec == CODEC_NONE:
            self.begin_batch(b)
            self.decoded += b.total
            st = self.legacy_message(b, b.base_offset, b.timestamp, self.legacy_ts_type(b),
                                     self.buf + b.key_pos, b.key_len, self.buf + b.value_pos, b.value_len)
            return ST_BEFORE if st == ST_BEFORE else ST_NEXT
        if codec > CODEC_MAX:
            raise UnsupportedCodecError(f"unknown compression codec id {codec}",
                                        self.topic, self.partition, b.base_offset)
        if b.value_len < 0:
            self.raise_code(E_NULL_PAYLOAD, b.base_offset)
        plain = self.payload(b, b.value_pos, b.value_len, codec)
        p = <const uint8_t*>PyBytes_AS_STRING(plain)
        n = PyBytes_GET_SIZE(plain)
        self.compressed_total += b.value_len
        self.decompressed_total += n
        # pass 1: frame the inner messages, find the last (relative) offset
        pos = 0
        while pos < n:
            st = read_batch(p, pos, n, &inner, &err)
            if st == 0:
                err = E_TRUNC
            if st <= 0:
                self.raise_code(err, b.base_offset)
            last_rel = inner.base_offset
            count += 1
            pos += inner.total
        if count == 0:
            self.raise_code(E_EMPTY_WRAPPER, b.base_offset)
        b.count = count
        # v1 inner offsets are relative: absolute = wrapper - last inner + inner.
        # Like Java's reader, only when that base is not negative: a wrapper as
        # a producer builds it (offset 0, inner 0..n-1) keeps its inner offsets.
        rel_base = <int64_t>(<uint64_t>b.base_offset - <uint64_t>last_rel)
        if b.magic == 0 or rel_base < 0:
            rel_base = 0
        last_rel = <int64_t>(<uint64_t>rel_base + <uint64_t>last_rel)
        b.last_offset = last_rel if last_rel > b.base_offset else b.base_offset
        self.begin_batch(b)
        # pass 2: the messages themselves
        return self.legacy_messages(b, p, 0, n, 0, rel_base, plain, self.partial_info())

    cdef int legacy_messages(self, Batch* b, const uint8_t* p, Py_ssize_t pos, Py_ssize_t n, int32_t index,
                             int64_t rel_base, bytes owner, BatchInfo info) except -1:
        """The inner messages of a compressed legacy wrapper ``b`` (framed by
        run_legacy) from ``p[pos:n]`` on; ST_INSIDE keeps the rest."""
        cdef Batch inner
        cdef int err = 0, st
        cdef int ts_type = self.legacy_ts_type(b)
        cdef int64_t offset, ts
        while pos < n:
            read_batch(p, pos, n, &inner, &err)
            if inner.magic != b.magic:
                self.raise_code(E_INNER_MAGIC, b.base_offset)
            if inner.attributes & ATTR_CODEC:
                self.raise_code(E_NESTED, b.base_offset)
            offset = <int64_t>(<uint64_t>rel_base + <uint64_t>inner.base_offset)
            self.check_legacy_crc(p + pos + LOG_OVERHEAD, inner.total - LOG_OVERHEAD, &inner, offset)
            if b.magic == 1 and (b.attributes & ATTR_LOG_APPEND_TIME):
                ts = b.timestamp
            else:
                ts = inner.timestamp
            st = self.legacy_message(b, offset, ts, ts_type, p + inner.key_pos, inner.key_len,
                                     p + inner.value_pos, inner.value_len)
            if st == ST_BEFORE:
                return ST_BEFORE
            pos += inner.total
            index += 1
            self.decoded += inner.total
            if st == ST_RETURNED and pos < n and self.stopping():
                self.at_pos, self.at_index = pos, index
                self.keep_partial(b, p, n, owner, rel_base, info)
                return ST_INSIDE
        return ST_NEXT


# ----------------------------------------------------------- object decoder
cdef class Decoder(_Driver):
    """Decodes buffers of record batches into :class:`Record` objects.

    ``check_crcs`` verifies CRC32C (v2) and CRC32 (v0/v1) checksums;
    ``include_control`` also returns the records of control batches (commit
    and abort markers), which are skipped by default (and always by a call
    given an :class:`Aborter`);
    ``max_decompressed_bytes`` caps the decompressed size of one batch.
    A decoder holds no state between calls (a call stopped inside a batch
    hands its rest back as ``resume``) and may be reused, for any number of
    partitions; it is not thread-safe (use one per thread: a call while
    another is under way raises RuntimeError).
    """
    cdef list records
    cdef list batches
    cdef BatchInfo cur
    cdef object last_hkey          # last header key str, reused when bytes match
    cdef bytes last_hkey_raw       # ... its bytes (None: no key yet)
    cdef tuple last_headers        # last headers tuple, reused when bytes match
    cdef bytes last_headers_raw    # ... its bytes (None: none yet)

    def __cinit__(self, *args, **kwargs):
        self.kind = KIND_OBJECTS
        self.row_cost = RECORD_COST

    def decode(self, data, *, topic=None, partition=None, int64_t min_offset=-1,
               Py_ssize_t max_bytes=-1, Py_ssize_t max_records=-1, PartialBatch resume=None,
               Aborter aborter=None):
        """Decode the complete batches in ``data`` (any bytes-like object).

        Records before ``min_offset`` are validated but not returned (a
        fetch returns whole batches, which may start before the fetch offset).
        ``topic`` and ``partition`` only label errors. ``aborter``
        (read_committed: the partition's :class:`Aborter`) drops the
        records of aborted transactions and every control record.

        A call does a bounded share of the work when asked: it stops once it
        returned ``max_records`` records, or once the cost of what it walked
        reaches ``max_bytes`` (the batches' decompressed record bytes, plus
        about 200 bytes per record returned: a Record object and its list
        slot), after one record at least, between batches or inside one. Then
        ``consumed`` says where the next call goes on and, if the call stopped
        inside a batch, ``resume`` holds the rest of that batch: pass it to the
        next call, ``decode(data[consumed:], resume=result.resume, ...)``
        (``min_offset`` the previous ``next_offset``), which returns those
        records first. -1 means no limit. Returns a :class:`DecodeResult`.
        """
        cdef DecodeResult res = DecodeResult.__new__(DecodeResult)
        cdef bint ok = False
        self.enter(resume, aborter)
        try:
            self.records = []
            self.batches = []
            self.run(data, topic, partition, min_offset, max_bytes, max_records, resume)
            res.records = self.records
            res.batches = self.batches
            res.resume = self.resume_out
            ok = True
        finally:
            self.records = self.batches = None
            self.cur = None
            self.leave(ok)
        res.consumed = self.consumed
        res.next_offset = self.next_offset if self.any_batch else None
        res.incomplete_size = self.incomplete_size
        res.skipped = self.skipped
        return res

    cdef int begin_batch(self, Batch* b) except -1:
        self.cur = make_batch_info(b)
        self.batches.append(self.cur)
        return 0

    cdef int go_on_batch(self, PartialBatch pb) except -1:
        self.cur = pb.info
        return 0

    cdef BatchInfo partial_info(self):
        return self.cur

    cdef object header_key(self, const uint8_t* p, int32_t n):
        cdef bytes raw = self.last_hkey_raw
        cdef object key
        if raw is not None and PyBytes_GET_SIZE(raw) == n and memcmp(PyBytes_AS_STRING(raw), p, n) == 0:
            return self.last_hkey
        key = header_key_str(p, n)
        raw = PyBytes_FromStringAndSize(<const char*>p, n)
        self.last_hkey, self.last_hkey_raw = key, raw     # together: one never outlives the other
        return key

    cdef tuple headers(self, Rec* rec, const uint8_t* base):
        cdef Reader r
        cdef int32_t i, kn, vn
        cdef const uint8_t* k
        cdef const uint8_t* v
        cdef tuple out
        cdef bytes raw = self.last_headers_raw
        cdef Py_ssize_t nbytes = rec.end - rec.headers_pos
        if rec.header_count == 0:
            return ()
        if (raw is not None and PyBytes_GET_SIZE(raw) == nbytes
                and memcmp(PyBytes_AS_STRING(raw), base + rec.headers_pos, nbytes) == 0):
            return self.last_headers
        rd_init(&r, base, rec.headers_pos, rec.end)
        out = PyTuple_New_(rec.header_count)
        for i in range(rec.header_count):
            if rd_header(&r, &k, &kn, &v, &vn) < 0:   # cannot happen after parse_record; never read from NULL
                raise CorruptRecordError(_MESSAGES[r.err], self.topic, self.partition, None)
            set_tuple_item(out, i, (self.header_key(k, kn), bytes_or_none(v, vn)))
        raw = PyBytes_FromStringAndSize(<const char*>(base + rec.headers_pos), nbytes)
        self.last_headers, self.last_headers_raw = out, raw
        return out

    cdef int on_v2_records(self, Batch* b, const uint8_t* p, Py_ssize_t start, Py_ssize_t n,
                           int32_t first) except -1:
        cdef Reader r
        cdef Rec rec
        cdef Record o
        cdef int32_t i
        cdef bint log_append = b.attributes & ATTR_LOG_APPEND_TIME
        cdef list out = self.records
        cdef BatchInfo bi = self.cur
        cdef int64_t last = self.last
        cdef bint bounded = self.bounded
        cdef Py_ssize_t k = 0
        cdef Py_ssize_t room = self.records_room()
        cdef Py_ssize_t budget = self.budget - self.decoded
        rd_init(&r, p, start, n)
        for i in range(first, b.count):
            if parse_record(&r, b.base_offset, b.first_ts, &rec) < 0:
                self.raise_code(r.err, b.base_offset)
            if rec.offset <= last:
                if rec.offset >= self.min_offset:
                    self.skipped += 1
                if bounded and (k or self.returned) and i + 1 < b.count and r.pos - start + k * RECORD_COST >= budget:
                    break                   # the call returned a record: stop inside (below)
                continue
            o = Record.__new__(Record)
            o.offset = rec.offset
            o.timestamp = b.max_ts if log_append else rec.timestamp
            o.key = bytes_or_none(rec.key, rec.key_len)
            o.value = bytes_or_none(rec.value, rec.value_len)
            o.headers = self.headers(&rec, p)
            o.batch = bi
            out.append(o)
            last = rec.offset
            k += 1
            if bounded and (k >= room or r.pos - start + k * RECORD_COST >= budget) and i + 1 < b.count:
                break
        else:
            if r.pos != n:
                self.raise_code(E_TRAILING, b.base_offset)
            self.walked(n - start, k, last)
            return ST_NEXT
        self.walked(r.pos - start, k, last)     # stopped inside the batch, after record i
        self.at_pos, self.at_index = r.pos, i + 1
        return ST_INSIDE

    cdef int on_message(self, Batch* b, int64_t offset, int64_t ts, int ts_type,
                        const uint8_t* key, int32_t key_len,
                        const uint8_t* value, int32_t value_len) except -1:
        cdef Record o = Record.__new__(Record)
        o.offset = offset
        o.timestamp = ts
        o.key = bytes_or_none(key, key_len)
        o.value = bytes_or_none(value, value_len)
        o.headers = ()
        o.batch = self.cur
        self.records.append(o)
        return ST_NEXT


cdef extern from "Python.h":
    tuple PyTuple_New_ "PyTuple_New"(Py_ssize_t n)
    void PyTuple_SET_ITEM_ "PyTuple_SET_ITEM"(object t, Py_ssize_t i, object o)
    void Py_INCREF_ "Py_INCREF"(object o)


cdef inline void set_tuple_item(tuple t, Py_ssize_t i, object o):
    Py_INCREF_(o)                   # SET_ITEM steals a reference
    PyTuple_SET_ITEM_(t, i, o)


# ------------------------------------------------------------------ splitting
cdef class SplitResult:
    """Batch boundaries of a buffer: ``batches`` is a list of zero-copy
    memoryviews, one per complete batch (or legacy message); ``consumed``,
    ``next_offset`` and ``incomplete_size`` as in :class:`DecodeResult`;
    ``error``: with ``split_batches(..., raise_errors=False)``, the
    :class:`CorruptRecordError` of the batch header that ended the walk
    (None if none did)."""
    cdef readonly list batches
    cdef readonly Py_ssize_t consumed
    cdef readonly object next_offset
    cdef readonly Py_ssize_t incomplete_size
    cdef readonly object error

    def __repr__(self):
        return (f"SplitResult(batches={len(self.batches)}, consumed={self.consumed}, "
                f"next_offset={self.next_offset}, incomplete_size={self.incomplete_size}, "
                f"error={self.error!r})")


def split_batches(data, *, topic=None, partition=None, bint raise_errors=True):
    """Walk the batch boundaries of ``data`` without decoding records.

    Each complete batch comes back as a memoryview into ``data`` (no copy), so
    batches can be handed on or decoded in parallel. Headers are validated
    (sizes, magic); CRCs and records are checked when a batch is decoded.

    A header that cannot be right (an unknown magic byte, an impossible size
    or record count: the CRC does not cover magic and size) raises
    :class:`CorruptRecordError` naming ``topic``, ``partition`` and the bad
    batch's base offset. With ``raise_errors=False`` it ends the walk
    instead: the result has the good batches before it (``consumed`` and
    ``next_offset`` theirs) and the error, not raised, in ``error``.
    """
    cdef Py_buffer pybuf
    cdef Batch b
    cdef int st, err = 0
    cdef Py_ssize_t pos = 0
    cdef SplitResult res = SplitResult.__new__(SplitResult)
    cdef object view = memoryview(data).cast("B")
    res.batches = []
    res.next_offset = None
    PyObject_GetBuffer(data, &pybuf, PyBUF_SIMPLE)
    try:
        while pos < pybuf.len:
            st = read_batch(<const uint8_t*>pybuf.buf, pos, pybuf.len, &b, &err)
            if st < 0:
                error = CorruptRecordError(_MESSAGES.get(err, "corrupt record data"), topic, partition,
                                           b.base_offset)
                if raise_errors:
                    raise error
                res.error = error
                break
            if st == 0:
                res.incomplete_size = b.total
                break
            res.batches.append(view[pos:pos + b.total])
            pos += b.total
            res.next_offset = add_wrap(b.last_offset, 1)
    finally:
        PyBuffer_Release(&pybuf)
    res.consumed = pos
    return res


# ---------------------------------------------------------- conveniences
def decode(data, *, topic=None, partition=None, int64_t min_offset=-1, bint check_crcs=True,
           bint include_control=False,
           Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES):
    """Decode ``data`` into :class:`Record` objects (see :class:`Decoder`)."""
    return Decoder(check_crcs=check_crcs, include_control=include_control,
                   max_decompressed_bytes=max_decompressed_bytes).decode(
                       data, topic=topic, partition=partition, min_offset=min_offset)


def parse_control_key(key):
    """``(version, type)`` of a control record key: type 0 is ABORT, 1 COMMIT."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key is shorter than 4 bytes")
    return (int.from_bytes(key[0:2], "big", signed=True), int.from_bytes(key[2:4], "big", signed=True))


def resize_frame(bytearray frame not None, Py_ssize_t size):
    """Resize a response frame being read in place (kwire.net) to ``size``
    bytes without filling the new room: the socket writes it before anyone
    reads it. A large buffer grows by remapping its pages, not by copying
    them, so reading a frame as its bytes arrive costs no more than
    reading it into a buffer of its full size."""
    if size < 0:
        raise ValueError("a frame size is not negative")
    PyByteArray_Resize(frame, size)
