# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The Protobuf decoder and encoder of the compiled core.

A message's plan (``kwire.formats.protobuf.plan``: one node per place a
message takes in the Arrow type, each with its fields' column numbers) is
compiled once into a :class:`Program` bound to the reader's columns
(:class:`kwire._core.typedcols.Columns`). Values, bare or framed as
Confluent's serializers frame them, are then decoded with the GIL released
and no Python object per value, tag-driven as Protobuf's own readers do:

* fields come in any order; for a scalar the last one wins; repeated
  scalars packed or not; a field whose wire type is not its type's is an
  unknown field; unknown fields (groups too) are skipped by wire type;
* a singular message that comes more than once is merged (its fields'
  occurrences read as one message: Protobuf's merge), a oneof member that
  comes after another clears it;
* absent fields get their default, or null (see the plan's module);
* every read is bounds checked, nesting (messages, groups) is at most
  ``MAX_DEPTH`` deep, strings must be UTF-8, and an error stops the column
  at its row with a code (``ERRORS``) and the field it was in.

Decoding has two phases per message: its fields are read into one slot each
(last wins) and its singular messages' byte ranges noted (repeated items
go to their columns at once); then each field's value, default or null is
appended, a noted message decoded from its ranges. So each column gets one
value per row in order, whatever order the fields came in.

:class:`Writer` encodes Arrow rows of the same type back into Protobuf
bytes, as ``SerializeToString`` of Protobuf's own runtime writes them.
"""

from libc.stdint cimport INT32_MAX, INT64_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memcpy, memmove, memset

from kwire._core.buffers cimport (Bytes, GBuf, Reader, borrow, gbuf_reserve, load_be32, put_uvarint, rd_init,
                                  rd_need, rd_uvarint, unborrow, uvarint_size)
from kwire._core.consts cimport E_OK, E_TRUNC, E_VARINT
from kwire._core.typedcols cimport (Col, Columns, TC_OK, col_bool, col_bytes, col_end_items, col_f32, col_f64,
                                    col_i32, col_i64, col_mark, col_null, col_offset)
from kwire._core.utf8 cimport utf8_invalid_at

__all__ = ["Program", "decode", "encode", "ERRORS", "FRAMES", "MAX_DEPTH", "ENUM_UNKNOWN"]

#: nesting of messages and groups a value may have, at most (Protobuf's default)
MAX_DEPTH = 100
cdef int _MAX_DEPTH = MAX_DEPTH

# FieldDescriptor.TYPE_*
cdef enum:
    T_DOUBLE = 1, T_FLOAT, T_INT64, T_UINT64, T_INT32, T_FIXED64, T_FIXED32, T_BOOL, T_STRING, T_GROUP
    T_MESSAGE, T_BYTES, T_UINT32, T_ENUM, T_SFIXED32, T_SFIXED64, T_SINT32, T_SINT64

# wire types
cdef enum:
    W_VARINT = 0, W_I64 = 1, W_LEN = 2, W_SGROUP = 3, W_EGROUP = 4, W_I32 = 5

# node kinds and field flags (kwire.formats.protobuf.plan)
cdef enum:
    NK_MESSAGE = 0, NK_WRAPPER, NK_TIMESTAMP, NK_DURATION
cdef enum:
    FL_REPEATED = 1, FL_PRESENCE = 2, FL_DEFAULT = 4, FL_CLOSED_ENUM = 8, FL_EMPTY = 16, FL_PACKED = 32, FL_MAP = 64

# errors (beyond buffers.Reader's E_TRUNC, E_VARINT)
cdef enum:
    P_WIRE = 100, P_FIELD_ZERO, P_END_GROUP, P_GROUP_OPEN, P_UTF8, P_DEPTH, P_PACKED, P_RANGE, P_FRAME
    P_MEMORY, P_TOO_BIG

ERRORS = {
    E_TRUNC: "a field runs past the end of its message",
    E_VARINT: "a varint longer than ten bytes (or a tag or length longer than five)",
    P_WIRE: "an invalid wire type (6 or 7)",
    P_FIELD_ZERO: "field number 0",
    P_END_GROUP: "an end-group tag without its start-group",
    P_GROUP_OPEN: "a group without its end-group tag",
    P_UTF8: "a string field that is not valid UTF-8",
    P_DEPTH: f"messages and groups nested more than {MAX_DEPTH} deep",
    P_PACKED: "a packed fixed-size field whose length is not a multiple of its size",
    P_RANGE: "a Timestamp or Duration past the range of int64 microseconds",
    P_FRAME: "a value too short for its frame, or without the registry's magic byte 0, or with a bad "
             "message-index array",
    P_MEMORY: "out of memory",
    P_TOO_BIG: "a column past 2 GiB in one batch",
}

#: framings of a value: none (bare Protobuf); Confluent's (magic 0, 4-byte
#: schema id, the message-index array)
FRAMES = {"none": 0, "confluent": 1}
cdef enum:
    F_NONE, F_CONFLUENT


cdef struct PField:
    int32_t number
    int type
    int wire                    # the wire type of one value
    int store                   # how a value goes into its column (ST_*)
    int fast                    # a singular scalar outside oneofs: how parse reads it at once (FP_*), or 0
    int flags
    int oneof                   # its oneof in the node (-1)
    int child                   # a message field's node (-1)
    Col* col                    # its column (a repeated field's: the list or map), or NULL
    Col* item                   # a repeated field's items' column
    int col_no                  # their numbers (pre-order), or -1
    int item_no
    uint64_t def_bits           # an absent scalar's value (floats as their bits; enums: the dictionary index)
    const uint8_t* def_p        # an absent string's or bytes' value
    Py_ssize_t def_n
    int32_t* enum_nums          # the enum's numbers, sorted
    int32_t* enum_idx           # and their dictionary indexes
    int nenum


cdef struct Slot:
    int64_t seen                # occurrences since the message began (0: absent)
    uint64_t bits               # the last scalar (enum: its dictionary index, -1 for an unknown number)
    const uint8_t* p            # the last string or bytes
    Py_ssize_t n
    Py_ssize_t first_span       # a message field's spans are those from here on


cdef struct Span:
    int field
    const uint8_t* p
    Py_ssize_t n


cdef struct PNode:
    int kind
    Col* col
    int col_no
    PField* fields
    int nfields
    int* order                  # its fields by number (the order they are written in)
    int32_t* bynum              # field number -> field index + 1 (0: none), numbers below nbynum
    int32_t nbynum
    Slot* slots
    int* oneof_cur              # per oneof: the field set (-1)
    int noneofs
    GBuf spans                  # the singular message fields' occurrences (Span)


cdef struct Ctx:
    PNode* nodes
    int err
    int err_node
    int err_field


# how a scalar goes into its column; how parse reads a plain singular scalar at once
cdef enum:
    ST_I32 = 0, ST_I64, ST_F32, ST_F64, ST_BOOL, ST_ENUM, ST_BYTES
cdef enum:
    FP_NONE = 0, FP_VARINT, FP_I64, FP_I32, FP_BYTES, FP_STRING


cdef int store_of(int t) noexcept nogil:
    if t == T_DOUBLE:
        return ST_F64
    if t == T_FLOAT:
        return ST_F32
    if t == T_BOOL:
        return ST_BOOL
    if t == T_ENUM:
        return ST_ENUM
    if t == T_STRING or t == T_BYTES:
        return ST_BYTES
    if t == T_INT64 or t == T_UINT64 or t == T_SINT64 or t == T_FIXED64 or t == T_SFIXED64:
        return ST_I64
    return ST_I32


cdef int fast_of(int t, int flags, int oneof, int child) noexcept nogil:
    cdef int w = wire_of(t)
    if flags & FL_REPEATED or oneof >= 0 or child >= 0 or t == T_ENUM or t == T_GROUP or t == T_MESSAGE:
        return FP_NONE
    if w == W_VARINT:
        return FP_VARINT
    if w == W_I64:
        return FP_I64
    if w == W_I32:
        return FP_I32
    return FP_STRING if t == T_STRING else FP_BYTES


cdef inline int wire_of(int t) noexcept nogil:
    if t == T_DOUBLE or t == T_FIXED64 or t == T_SFIXED64:
        return W_I64
    if t == T_FLOAT or t == T_FIXED32 or t == T_SFIXED32:
        return W_I32
    if t == T_STRING or t == T_BYTES or t == T_MESSAGE:
        return W_LEN
    if t == T_GROUP:
        return W_SGROUP
    return W_VARINT


cdef class Program:
    """A message's plan bound to the reader's columns: decodes values into
    them (:func:`decode`). One decode at a time."""
    cdef PNode* nodes
    cdef int nnodes
    cdef readonly Columns cols
    cdef list keep                     # default strings' bytes, alive as long as the nodes
    cdef bint busy

    def __cinit__(self, tuple plan not None, Columns cols not None):
        """``plan``: ``Plan.as_tuples()`` (kwire.formats.protobuf.plan), root
        first; ``cols``: the columns of its Arrow type."""
        self.cols = cols
        self.keep = []
        self.nnodes = len(plan)
        self.nodes = <PNode*>calloc(max(1, self.nnodes), sizeof(PNode))
        if self.nodes == NULL:
            raise MemoryError()
        for i, node in enumerate(plan):
            self._bind_node(&self.nodes[i], node)

    cdef int _bind_node(self, PNode* nd, tuple node) except -1:
        kind, col, noneofs, fields = node
        nd.kind = kind
        nd.col = self.cols.column(col)
        nd.col_no = col
        nd.nfields = len(fields)
        nd.noneofs = noneofs
        nd.fields = <PField*>calloc(max(1, nd.nfields), sizeof(PField))
        nd.slots = <Slot*>calloc(max(1, nd.nfields), sizeof(Slot))
        nd.oneof_cur = <int*>calloc(max(1, noneofs), sizeof(int))
        top = max([f[0] for f in fields] + [0])
        nd.nbynum = min(top, 4096) + 1
        nd.bynum = <int32_t*>calloc(nd.nbynum, sizeof(int32_t))
        nd.order = <int*>calloc(max(1, nd.nfields), sizeof(int))
        if nd.fields == NULL or nd.slots == NULL or nd.oneof_cur == NULL or nd.bynum == NULL or nd.order == NULL:
            raise MemoryError()
        for j, f in enumerate(fields):
            self._bind_field(&nd.fields[j], f)
            if f[0] < nd.nbynum:
                nd.bynum[f[0]] = j + 1
        for j, (_, k) in enumerate(sorted((f[0], k) for k, f in enumerate(fields))):
            nd.order[j] = k
        return 0

    cdef int _bind_field(self, PField* pf, tuple f) except -1:
        number, type_, flags, oneof, child, col, item, default, enum = f
        pf.number = number
        pf.type = type_
        pf.wire = wire_of(type_)
        pf.flags = flags
        pf.oneof = oneof
        pf.child = child
        pf.store = store_of(type_)
        pf.fast = fast_of(type_, flags, oneof, child)
        pf.col = self.cols.column(col) if col >= 0 else NULL
        pf.item = self.cols.column(item) if item >= 0 else NULL
        pf.col_no = col
        pf.item_no = item
        if isinstance(default, bytes):
            self.keep.append(default)
            pf.def_p = <const uint8_t*><bytes>default
            pf.def_n = len(<bytes>default)
        elif default is not None:
            pf.def_bits = _bits(type_, default)
        pf.nenum = len(enum)
        if pf.nenum:
            pf.enum_nums = <int32_t*>calloc(pf.nenum, sizeof(int32_t))
            pf.enum_idx = <int32_t*>calloc(pf.nenum, sizeof(int32_t))
            if pf.enum_nums == NULL or pf.enum_idx == NULL:
                raise MemoryError()
            for k, (num, idx) in enumerate(enum):
                pf.enum_nums[k] = num
                pf.enum_idx[k] = idx
        return 0

    def __dealloc__(self):
        cdef int i, j
        if self.nodes == NULL:
            return
        for i in range(self.nnodes):
            for j in range(self.nodes[i].nfields):
                free(self.nodes[i].fields[j].enum_nums)
                free(self.nodes[i].fields[j].enum_idx)
            free(self.nodes[i].fields)
            free(self.nodes[i].slots)
            free(self.nodes[i].oneof_cur)
            free(self.nodes[i].bynum)
            free(self.nodes[i].order)
            free(self.nodes[i].spans.data)
        free(self.nodes)


cdef uint64_t _bits(int type_, object v) except? 0:
    """A default scalar as a slot holds it."""
    cdef double d
    cdef float f
    cdef uint32_t u32 = 0
    cdef uint64_t u64 = 0
    if type_ == T_DOUBLE:
        d = v
        memcpy(&u64, &d, 8)
        return u64
    if type_ == T_FLOAT:
        f = v
        memcpy(&u32, &f, 4)
        return u32
    if v < 0:
        return <uint64_t><int64_t>v
    return <uint64_t>v


# ------------------------------------------------------------------ decoding
cdef inline int fail(Ctx* x, PNode* nd, int field, int code) noexcept nogil:
    if x.err == E_OK:
        x.err = code
        x.err_node = <int>(nd - x.nodes)
        x.err_field = field
    return -1


cdef inline int reader_fail(Ctx* x, PNode* nd, int field, Reader* r) noexcept nogil:
    return fail(x, nd, field, r.err if r.err else E_TRUNC)


cdef inline uint32_t load_le32(const uint8_t* q) noexcept nogil:
    return (<uint32_t>q[0]) | (<uint32_t>q[1] << 8) | (<uint32_t>q[2] << 16) | (<uint32_t>q[3] << 24)


cdef inline uint64_t load_le64(const uint8_t* q) noexcept nogil:
    return load_le32(q) | (<uint64_t>load_le32(q + 4) << 32)


cdef inline int32_t enum_index(PField* f, int32_t number) noexcept nogil:
    """The dictionary index of an enum number; -1 if the enum lacks it."""
    cdef int lo = 0, hi = f.nenum - 1, mid
    while lo <= hi:
        mid = (lo + hi) >> 1
        if f.enum_nums[mid] == number:
            return f.enum_idx[mid]
        if f.enum_nums[mid] < number:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


cdef inline int field_of(PNode* nd, uint32_t number) noexcept nogil:
    """The index of the node's field ``number``, or -1."""
    cdef int i
    if number < <uint32_t>nd.nbynum:
        return nd.bynum[number] - 1
    for i in range(nd.nfields):
        if <uint32_t>nd.fields[i].number == number:
            return i
    return -1


cdef inline uint64_t scalar_bits(int type_, uint64_t v) noexcept nogil:
    """A varint's or fixed value's bits as the field's type has them (32-bit
    types truncated, zigzag undone, bools 0 or 1)."""
    cdef uint32_t u
    if type_ == T_INT32 or type_ == T_UINT32 or type_ == T_ENUM:
        return <uint32_t>v
    if type_ == T_SINT32:
        u = <uint32_t>v
        return <uint32_t>((u >> 1) ^ (0 - (u & 1)))
    if type_ == T_SINT64:
        return (v >> 1) ^ (0 - (v & 1))
    if type_ == T_BOOL:
        return v != 0
    return v


cdef inline void put_scalar(int store, Col* c, uint64_t v) noexcept nogil:
    """One scalar (as :func:`scalar_bits` has it) into its column, as ``store`` (ST_*) says."""
    cdef double d
    cdef float f
    cdef uint32_t u
    if store == ST_I64:
        col_i64(c, <int64_t>v)
    elif store == ST_I32:
        col_i32(c, <int32_t><uint32_t>v)
    elif store == ST_F64:
        memcpy(&d, &v, 8)
        col_f64(c, d)
    elif store == ST_F32:
        u = <uint32_t>v
        memcpy(&f, &u, 4)
        col_f32(c, f)
    elif store == ST_BOOL:
        col_bool(c, v != 0)
    elif <int64_t>v < 0:                      # ST_ENUM: an unknown number
        col_null(c)
    else:
        col_i32(c, <int32_t>v)


cdef inline int read_scalar(Ctx* x, PNode* nd, int fi, PField* f, Reader* r, int wire, uint64_t* out) noexcept nogil:
    """One scalar of wire type ``wire`` as ``f``'s type has it; 1 if it is to
    be dropped (a closed enum's unknown number), -1 on error."""
    cdef uint64_t v
    cdef int32_t idx
    if wire == W_VARINT:
        v = rd_uvarint(r, 10, 0x7F)
    elif wire == W_I64:
        if not rd_need(r, 8):
            return reader_fail(x, nd, fi, r)
        v = load_le64(r.p + r.pos)
        r.pos += 8
    else:
        if not rd_need(r, 4):
            return reader_fail(x, nd, fi, r)
        v = load_le32(r.p + r.pos)
        r.pos += 4
    if r.err:
        return reader_fail(x, nd, fi, r)
    v = scalar_bits(f.type, v)
    if f.type == T_ENUM:
        idx = enum_index(f, <int32_t>v)
        if idx < 0 and f.flags & FL_CLOSED_ENUM:
            return 1
        v = <uint64_t><int64_t>idx
    out[0] = v
    return 0


cdef inline int read_len(Ctx* x, PNode* nd, int fi, Reader* r, const uint8_t** p, Py_ssize_t* n) noexcept nogil:
    """A length-delimited value's bytes."""
    cdef uint64_t size = rd_uvarint(r, 5, 0x0F)
    if r.err or not rd_need(r, <Py_ssize_t>size):
        return reader_fail(x, nd, fi, r)
    p[0] = r.p + r.pos
    n[0] = <Py_ssize_t>size
    r.pos += <Py_ssize_t>size
    return 0


cdef int skip_group(Ctx* x, PNode* nd, Reader* r, uint32_t number, int depth, Py_ssize_t* body_end) noexcept nogil:
    """Past the fields of a group and its end-group tag (for ``number``);
    ``body_end``: where that tag starts."""
    cdef uint64_t tag
    cdef Py_ssize_t at
    if depth > _MAX_DEPTH:
        return fail(x, nd, -1, P_DEPTH)
    while True:
        if r.pos >= r.end:
            return fail(x, nd, -1, P_GROUP_OPEN)
        at = r.pos
        tag = rd_uvarint(r, 5, 0x0F)
        if r.err:
            return reader_fail(x, nd, -1, r)
        if (tag & 7) == W_EGROUP:
            if (tag >> 3) != number:
                return fail(x, nd, -1, P_END_GROUP)
            body_end[0] = at
            return 0
        if skip_field(x, nd, r, <uint32_t>tag, depth) < 0:
            return -1


cdef int skip_field(Ctx* x, PNode* nd, Reader* r, uint32_t tag, int depth) noexcept nogil:
    """Past one field's value (its tag read)."""
    cdef int wire = tag & 7
    cdef const uint8_t* p
    cdef Py_ssize_t n
    if (tag >> 3) == 0:
        return fail(x, nd, -1, P_FIELD_ZERO)
    if wire == W_VARINT:
        rd_uvarint(r, 10, 0x7F)
    elif wire == W_I64:
        rd_need(r, 8)
        if not r.err:
            r.pos += 8
    elif wire == W_I32:
        rd_need(r, 4)
        if not r.err:
            r.pos += 4
    elif wire == W_LEN:
        return read_len(x, nd, -1, r, &p, &n)
    elif wire == W_SGROUP:
        return skip_group(x, nd, r, tag >> 3, depth + 1, &n)
    elif wire == W_EGROUP:
        return fail(x, nd, -1, P_END_GROUP)
    else:
        return fail(x, nd, -1, P_WIRE)
    if r.err:
        return reader_fail(x, nd, -1, r)
    return 0


cdef int add_span(Ctx* x, PNode* nd, int fi, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef Span s
    if gbuf_reserve(&nd.spans, sizeof(Span)) < 0:
        return fail(x, nd, fi, P_MEMORY)
    s.field = fi
    s.p = p
    s.n = n
    memcpy(nd.spans.data + nd.spans.len, &s, sizeof(Span))
    nd.spans.len += sizeof(Span)
    return 0


cdef int read_field(Ctx* x, PNode* nd, int fi, Reader* r, int depth) noexcept nogil:
    """One occurrence of field ``fi`` (its tag read, its wire type its type's)."""
    cdef PField* f = &nd.fields[fi]
    cdef Slot* s = &nd.slots[fi]
    cdef const uint8_t* p = NULL
    cdef Py_ssize_t n = 0, start, end = 0
    cdef uint64_t v = 0
    cdef int got
    if f.wire == W_LEN or f.wire == W_SGROUP:
        if f.wire == W_LEN:
            if read_len(x, nd, fi, r, &p, &n) < 0:
                return -1
        else:
            start = r.pos
            if skip_group(x, nd, r, <uint32_t>f.number, depth + 1, &end) < 0:
                return -1
            p = r.p + start
            n = end - start
        if f.type == T_STRING and utf8_invalid_at(p, n) >= 0:
            return fail(x, nd, fi, P_UTF8)
        if f.flags & FL_REPEATED:
            if f.child >= 0:
                return decode_one(x, &x.nodes[f.child], p, n, depth + 1)
            col_bytes(f.item, p, n)
            return 0
        set_member(nd, fi)
        if f.child >= 0:
            s.seen += 1
            return add_span(x, nd, fi, p, n)
        s.seen = 1
        s.p = p
        s.n = n
        return 0
    got = read_scalar(x, nd, fi, f, r, f.wire, &v)
    if got != 0:
        return -1 if got < 0 else 0
    if f.flags & FL_REPEATED:
        put_scalar(f.store, f.item, v)
        return 0
    set_member(nd, fi)
    s.seen = 1
    s.bits = v
    return 0


cdef inline void set_member(PNode* nd, int fi) noexcept nogil:
    """A oneof member is set: another member's value is cleared, and so is
    this one's if another came between."""
    cdef int o = nd.fields[fi].oneof
    if o >= 0 and nd.oneof_cur[o] != fi:
        nd.oneof_cur[o] = fi
        nd.slots[fi].seen = 0
        nd.slots[fi].first_span = nd.spans.len


cdef int read_packed(Ctx* x, PNode* nd, int fi, Reader* r) noexcept nogil:
    """A packed repeated scalar field's values."""
    cdef PField* f = &nd.fields[fi]
    cdef const uint8_t* p
    cdef Py_ssize_t n
    cdef Reader sub
    cdef uint64_t v
    cdef int got
    if read_len(x, nd, fi, r, &p, &n) < 0:
        return -1
    if (f.wire == W_I64 and n % 8) or (f.wire == W_I32 and n % 4):
        return fail(x, nd, fi, P_PACKED)
    rd_init(&sub, p, 0, n)
    while sub.pos < sub.end:
        got = read_scalar(x, nd, fi, f, &sub, f.wire, &v)
        if got < 0:
            return -1
        if got == 0:
            put_scalar(f.store, f.item, v)
    return 0


cdef int parse(Ctx* x, PNode* nd, const uint8_t* p, Py_ssize_t n, int depth) noexcept nogil:
    """Reads the fields of one of the message's byte ranges into its slots."""
    cdef Reader r
    cdef uint64_t tag
    cdef int fi, wire
    cdef PField* f
    cdef Slot* s
    rd_init(&r, p, 0, n)
    while r.pos < r.end:
        tag = rd_uvarint(&r, 5, 0x0F)
        if r.err:
            return reader_fail(x, nd, -1, &r)
        wire = tag & 7
        fi = field_of(nd, <uint32_t>(tag >> 3))
        if fi >= 0:
            f = &nd.fields[fi]
            if wire == f.wire:
                if f.fast == FP_NONE:
                    if read_field(x, nd, fi, &r, depth) < 0:
                        return -1
                    continue
                s = &nd.slots[fi]          # a plain singular scalar: read here, the last one wins
                if f.fast == FP_VARINT:
                    s.bits = scalar_bits(f.type, rd_uvarint(&r, 10, 0x7F))
                elif f.fast == FP_I64:
                    if rd_need(&r, 8):
                        s.bits = load_le64(r.p + r.pos)
                        r.pos += 8
                elif f.fast == FP_I32:
                    if rd_need(&r, 4):
                        s.bits = load_le32(r.p + r.pos)
                        r.pos += 4
                else:
                    if read_len(x, nd, fi, &r, &s.p, &s.n) < 0:
                        return -1
                    if f.fast == FP_STRING and utf8_invalid_at(s.p, s.n) >= 0:
                        return fail(x, nd, fi, P_UTF8)
                if r.err:
                    return reader_fail(x, nd, fi, &r)
                s.seen = 1
                continue
            if wire == W_LEN and f.flags & FL_REPEATED and f.wire != W_LEN and f.wire != W_SGROUP:
                if read_packed(x, nd, fi, &r) < 0:
                    return -1
                continue
        if skip_field(x, nd, &r, <uint32_t>tag, depth) < 0:
            return -1
    return 0


cdef inline void begin(PNode* nd) noexcept nogil:
    cdef int i
    for i in range(nd.nfields):
        nd.slots[i].seen = 0
        nd.slots[i].first_span = 0
    for i in range(nd.noneofs):
        nd.oneof_cur[i] = -1
    nd.spans.len = 0


cdef int decode_one(Ctx* x, PNode* nd, const uint8_t* p, Py_ssize_t n, int depth) noexcept nogil:
    """One message from one byte range, appended to the node's column."""
    if depth > _MAX_DEPTH:
        return fail(x, nd, -1, P_DEPTH)
    begin(nd)
    if parse(x, nd, p, n, depth) < 0:
        return -1
    return emit(x, nd, depth)


cdef int decode_spans(Ctx* x, PNode* parent, int fi, PNode* nd, int depth) noexcept nogil:
    """A singular message field from its occurrences in ``parent`` (merged)."""
    cdef Span* spans = <Span*>parent.spans.data
    cdef Py_ssize_t i, count = parent.spans.len // sizeof(Span)
    if depth > _MAX_DEPTH:
        return fail(x, nd, -1, P_DEPTH)
    begin(nd)
    for i in range(parent.slots[fi].first_span // sizeof(Span), count):
        if spans[i].field == fi and parse(x, nd, spans[i].p, spans[i].n, depth) < 0:
            return -1
    return emit(x, nd, depth)


cdef int emit(Ctx* x, PNode* nd, int depth) noexcept nogil:
    """Appends the message's row: each field's value, default or null."""
    cdef int i
    cdef PField* f
    cdef Slot* s
    if nd.kind == NK_TIMESTAMP or nd.kind == NK_DURATION:
        return emit_time(x, nd)
    for i in range(nd.nfields):
        f = &nd.fields[i]
        s = &nd.slots[i]
        if f.flags & FL_REPEATED:
            col_end_items(f.col)
        elif f.oneof >= 0 and nd.oneof_cur[f.oneof] != i:
            col_null(f.col)
        elif f.child >= 0:
            if s.seen or f.flags & FL_EMPTY:
                if decode_spans(x, nd, i, &x.nodes[f.child], depth + 1) < 0:
                    return -1
            else:
                col_null(f.col)
        elif s.seen:
            if f.store == ST_BYTES:
                col_bytes(f.col, s.p, s.n)
            else:
                put_scalar(f.store, f.col, s.bits)
        elif f.flags & FL_PRESENCE and not f.flags & FL_DEFAULT:
            col_null(f.col)
        elif f.store == ST_BYTES:
            col_bytes(f.col, f.def_p, f.def_n)
        else:
            put_scalar(f.store, f.col, f.def_bits)
    if nd.kind == NK_MESSAGE:
        col_mark(nd.col, True)
    return 0


cdef int emit_time(Ctx* x, PNode* nd) noexcept nogil:
    """A Timestamp's or Duration's microseconds (Spark's: a Timestamp's
    nanoseconds truncated toward zero, a Duration's floored)."""
    cdef int64_t secs = <int64_t>nd.slots[0].bits if nd.slots[0].seen else 0
    cdef int64_t nanos = <int32_t>nd.slots[1].bits if nd.slots[1].seen else 0
    cdef int64_t micros = nanos // 1000
    if nd.kind == NK_DURATION and nanos % 1000 < 0:
        micros -= 1
    if secs > (INT64_MAX - 1000000) // 1000000 or secs < (INT64_MIN + 1000000) // 1000000:
        return fail(x, nd, 0, P_RANGE)
    col_i64(nd.col, secs * 1000000 + micros)
    return 0


# ------------------------------------------------------------ a column of values
cdef struct Keys:
    # the (schema id, message-index bytes) frames the reader accepts
    int n
    uint32_t* ids
    const uint8_t** raw
    Py_ssize_t* raw_n
    int last


cdef inline bint keys_has(Keys* k, uint32_t sid, const uint8_t* raw, Py_ssize_t n) noexcept nogil:
    cdef int i, j
    for j in range(k.n):
        i = (k.last + j) % k.n
        if k.ids[i] == sid and k.raw_n[i] == n and memcmp(k.raw[i], raw, n) == 0:
            k.last = i
            return True
    return False


cdef inline Py_ssize_t frame_end(const uint8_t* p, Py_ssize_t s, Py_ssize_t e) noexcept nogil:
    """Where the Protobuf bytes of a Confluent-framed value start (after the
    magic byte, the schema id and the message-index array: a zigzag varint
    count, then as many zigzag varints, a count of 0 meaning [0]), or -1."""
    cdef Reader r
    cdef uint64_t count, i
    if e - s < 6 or p[s] != 0:
        return -1
    rd_init(&r, p, s + 5, e)
    count = rd_uvarint(&r, 5, 0x0F)
    if count & 1 or (count >> 1) > <uint64_t>(e - s):
        return -1
    for i in range(count >> 1):
        rd_uvarint(&r, 5, 0x0F)
    return -1 if r.err else r.pos


def decode(Program rd not None, object values not None, int frame, list keys not None, Py_ssize_t start=0):
    """Appends rows ``start``... of ``values`` (a ``pyarrow.BinaryArray``;
    a null row becomes a null) to ``rd``'s columns. ``frame``: one of
    ``FRAMES``; with "confluent", ``keys`` lists the frames ``rd`` reads:
    ``(schema id, message-index array bytes)``.

    Returns ``(status, row, detail)``: ``(0, n, None)`` when every row is
    in; ``(1, row, (id, index bytes))`` when ``row``'s frame is not among
    ``keys`` (check it, add it and call again from ``row``); ``(2, row,
    (error, node, field))`` when ``row`` cannot be decoded (the rows before
    it are in the columns, that row partly: reset them)."""
    cdef Py_ssize_t n = len(values)
    cdef Py_ssize_t base = values.offset
    cdef Bytes vb, ob, db
    cdef Keys k
    cdef Ctx x
    cdef Py_ssize_t row = start
    cdef int status = 0
    cdef Py_ssize_t need_s = 0, need_e = 0
    if rd.busy:
        raise RuntimeError("a protobuf Program decodes one column at a time")
    import pyarrow as pa             # present: typedcols, cimported above, needs it

    bufs = values.buffers()
    if len(bufs) != 3 or not pa.types.is_binary(values.type):
        raise TypeError(f"decode needs a binary array, not {values.type}")
    k.n = len(keys)
    k.last = 0
    k.ids = <uint32_t*>calloc(max(1, k.n), sizeof(uint32_t))
    k.raw = <const uint8_t**>calloc(max(1, k.n), sizeof(uint8_t*))
    k.raw_n = <Py_ssize_t*>calloc(max(1, k.n), sizeof(Py_ssize_t))
    if k.ids == NULL or k.raw == NULL or k.raw_n == NULL:
        free(k.ids)
        free(k.raw)
        free(k.raw_n)
        raise MemoryError()
    cdef bytes raw
    for i, key in enumerate(keys):
        k.ids[i] = key[0]
        raw = key[1]            # kept alive by ``keys``
        k.raw[i] = <const uint8_t*>raw
        k.raw_n[i] = len(raw)
    x.nodes = rd.nodes
    x.err = E_OK
    x.err_node = 0
    x.err_field = -1
    vb.release = ob.release = db.release = False
    rd.busy = True
    try:
        borrow(bufs[0], &vb, "validity")
        borrow(bufs[1], &ob, "offsets")
        borrow(bufs[2], &db, "data")
        with nogil:
            status = decode_rows(&x, &k, rd.cols.root, &vb, <const int32_t*>ob.p + base, <const uint8_t*>db.p,
                                 db.n if db.n > 0 else 0, base, n, frame, &rd.cols.err, &row, &need_s, &need_e)
    finally:
        rd.busy = False
        unborrow(&vb)
        unborrow(&ob)
        unborrow(&db)
        free(k.ids)
        free(k.raw)
        free(k.raw_n)
    if status == 0:
        return (0, row, None)
    if status == 1:
        v = values[row].as_py()
        return (1, row, (int.from_bytes(v[1:5], "big"), v[5:need_e - need_s]))
    return (2, row, (x.err, x.err_node, x.err_field))


cdef int decode_rows(Ctx* x, Keys* k, Col* root, Bytes* valid, const int32_t* offs, const uint8_t* data,
                     Py_ssize_t data_len, Py_ssize_t base, Py_ssize_t n, int frame, int* cols_err,
                     Py_ssize_t* at, Py_ssize_t* need_s, Py_ssize_t* need_e) noexcept nogil:
    """Rows ``at[0]``..n; 0 when all are in, 1 for a frame not in ``k``
    (its value at ``need_s`` .. its Protobuf bytes at ``need_e``), 2 for an
    error (in ``x``). ``at[0]``: the row."""
    cdef Py_ssize_t row, s, e, body
    cdef const uint8_t* vbits = <const uint8_t*>valid.p
    for row in range(at[0], n):
        at[0] = row
        if vbits != NULL and not (vbits[(base + row) >> 3] >> ((base + row) & 7)) & 1:
            col_null(root)
            continue
        s = offs[row]
        e = offs[row + 1]
        if s < 0 or e < s or e > data_len:
            fail(x, x.nodes, -1, P_FRAME)
            return 2
        body = s
        if frame == F_CONFLUENT:
            body = frame_end(data, s, e)
            if body < 0:
                fail(x, x.nodes, -1, P_FRAME)
                return 2
            if not keys_has(k, load_be32(data + s + 1), data + s + 5, body - s - 5):
                need_s[0] = s
                need_e[0] = body
                return 1
        if decode_one(x, x.nodes, data + body, e - body, 0) < 0:
            return 2
        if cols_err[0] != TC_OK:
            fail(x, x.nodes, -1, P_MEMORY if cols_err[0] == 1 else P_TOO_BIG)
            return 2
    at[0] = n
    return 0


# ------------------------------------------------------------------ encoding
cdef enum:
    P_NULL_ITEM = 200, P_ENUM_NAME

ERRORS[P_NULL_ITEM] = "a null item in a repeated field (Protobuf has no null items)"
ERRORS[P_ENUM_NAME] = "an enum name the enum does not declare"


cdef struct AView:
    # one Arrow array of the rows to encode (a column of the plan's type)
    const uint8_t* valid        # its validity bitmap, or NULL
    Py_ssize_t offset           # its offset into its buffers
    const uint8_t* data         # values (bits for bool; dictionary indices)
    const int32_t* offs         # a binary's, list's or map's offsets
    const int64_t* enum_numbers # a dictionary's: each name's enum number (ENUM_UNKNOWN: none)
    Py_ssize_t nenum


cdef struct Enc:
    Ctx x                       # the nodes, the error
    AView* views


#: the enum number of a dictionary name the enum does not declare
ENUM_UNKNOWN = -(1 << 63)
cdef int64_t _ENUM_UNKNOWN = INT64_MIN


cdef inline bint av_valid(AView* v, Py_ssize_t i) noexcept nogil:
    i += v.offset
    return v.valid == NULL or (v.valid[i >> 3] >> (i & 7)) & 1


cdef inline int put_uv(Enc* e, GBuf* g, uint64_t v) noexcept nogil:
    """An unsigned varint."""
    if gbuf_reserve(g, 10) < 0:
        return fail(&e.x, e.x.nodes, -1, P_MEMORY)
    put_uvarint(g, v)
    return 0


cdef inline int put_le(Enc* e, GBuf* g, uint64_t v, int width) noexcept nogil:
    cdef int i
    if gbuf_reserve(g, width) < 0:
        return fail(&e.x, e.x.nodes, -1, P_MEMORY)
    for i in range(width):
        g.data[g.len + i] = <char>(v >> (8 * i))
    g.len += width
    return 0


cdef inline int put_bytes(Enc* e, GBuf* g, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    if put_uv(e, g, <uint64_t>n) < 0 or gbuf_reserve(g, n) < 0:
        return fail(&e.x, e.x.nodes, -1, P_MEMORY)
    if n:
        memcpy(g.data + g.len, p, n)
        g.len += n
    return 0


cdef inline uint64_t wire_value(int type_, uint64_t bits) noexcept nogil:
    """A scalar's bits (as a slot holds them) as its varint or fixed value."""
    cdef int32_t i32
    cdef int64_t i64
    if type_ == T_INT32 or type_ == T_ENUM:
        return <uint64_t><int64_t><int32_t><uint32_t>bits       # sign-extended to 64 bits
    if type_ == T_SINT32:
        i32 = <int32_t><uint32_t>bits
        return <uint32_t>((<uint32_t>i32 << 1) ^ <uint32_t>(i32 >> 31))
    if type_ == T_SINT64:
        i64 = <int64_t>bits
        return (<uint64_t>i64 << 1) ^ <uint64_t>(i64 >> 63)
    return bits


cdef inline int put_scalar_value(Enc* e, GBuf* g, int type_, uint64_t bits) noexcept nogil:
    cdef int w = wire_of(type_)
    if w == W_VARINT:
        return put_uv(e, g, wire_value(type_, bits))
    return put_le(e, g, bits, 8 if w == W_I64 else 4)


cdef inline Py_ssize_t scalar_size(int type_, uint64_t bits) noexcept nogil:
    cdef int w = wire_of(type_)
    if w == W_VARINT:
        return uvarint_size(wire_value(type_, bits))
    return 8 if w == W_I64 else 4


cdef inline int read_bits(Enc* e, PNode* nd, int fi, int type_, AView* v, Py_ssize_t i, uint64_t* out) noexcept nogil:
    """The value of row ``i`` of ``v`` as a slot holds it (enums: their number)."""
    cdef Py_ssize_t at = v.offset + i
    cdef int32_t idx
    cdef uint32_t u32
    cdef uint64_t u64
    if type_ == T_BOOL:
        out[0] = (v.data[at >> 3] >> (at & 7)) & 1
    elif type_ == T_ENUM:
        memcpy(&idx, v.data + 4 * at, 4)
        if idx < 0 or idx >= v.nenum or v.enum_numbers[idx] == _ENUM_UNKNOWN:
            return fail(&e.x, nd, fi, P_ENUM_NAME)
        out[0] = <uint32_t><int32_t>v.enum_numbers[idx]
    elif wire_of(type_) == W_I64 or type_ == T_INT64 or type_ == T_UINT64 or type_ == T_SINT64:
        memcpy(&u64, v.data + 8 * at, 8)
        out[0] = u64
    else:
        memcpy(&u32, v.data + 4 * at, 4)
        out[0] = u32
    return 0


cdef inline int put_tag(Enc* e, GBuf* g, int32_t number, int wire) noexcept nogil:
    return put_uv(e, g, (<uint64_t><uint32_t>number << 3) | <uint64_t>wire)


cdef int enc_nested(Enc* e, PNode* nd, int fi, PNode* child, Py_ssize_t row, GBuf* g, bint entry) noexcept nogil:
    """A message field's value: tag, length and body (a group: start tag, body, end tag)."""
    cdef PField* f = &nd.fields[fi]
    cdef Py_ssize_t start, n, k
    if f.type == T_GROUP:
        if put_tag(e, g, f.number, W_SGROUP) < 0 or enc_body(e, child, row, g, entry) < 0:
            return -1
        return put_tag(e, g, f.number, W_EGROUP)
    if put_tag(e, g, f.number, W_LEN) < 0 or gbuf_reserve(g, 1) < 0:
        return fail(&e.x, nd, fi, P_MEMORY)
    start = g.len
    g.len += 1                               # the length, if it takes one byte
    if row >= 0 and enc_body(e, child, row, g, entry) < 0:
        return -1
    n = g.len - start - 1
    k = uvarint_size(<uint64_t>n)
    if k > 1:
        if gbuf_reserve(g, k - 1) < 0:
            return fail(&e.x, nd, fi, P_MEMORY)
        memmove(g.data + start + k, g.data + start + 1, n)
    g.len = start
    put_uv(e, g, <uint64_t>n)
    g.len = start + k + n
    return 0


cdef int enc_body(Enc* e, PNode* nd, Py_ssize_t row, GBuf* g, bint entry) noexcept nogil:
    """The fields of row ``row`` of a node, by field number. ``entry``: a
    map entry's, whose key and value are always written."""
    cdef int j
    cdef AView* v = &e.views[nd.col_no]
    cdef int64_t micros, secs, nanos
    if nd.kind == NK_TIMESTAMP or nd.kind == NK_DURATION:
        memcpy(&micros, v.data + 8 * (v.offset + row), 8)
        secs = micros // 1000000
        nanos = micros % 1000000
        if nd.kind == NK_TIMESTAMP and nanos < 0:           # a Timestamp's nanos are never negative
            secs -= 1
            nanos += 1000000
        nanos *= 1000
        if secs != 0 and (put_tag(e, g, 1, W_VARINT) < 0 or put_uv(e, g, <uint64_t>secs) < 0):
            return -1
        if nanos != 0 and (put_tag(e, g, 2, W_VARINT) < 0 or put_uv(e, g, <uint64_t>nanos) < 0):
            return -1
        return 0
    for j in range(nd.nfields):
        if enc_field(e, nd, nd.order[j], row, g, entry) < 0:
            return -1
    return 0


cdef int enc_field(Enc* e, PNode* nd, int fi, Py_ssize_t row, GBuf* g, bint always) noexcept nogil:
    """One field of row ``row``: nothing if null (or an implicit field's zero), else its tag and value."""
    cdef PField* f = &nd.fields[fi]
    cdef AView* v = &e.views[f.col_no]
    cdef Py_ssize_t s, end, j, n, size
    cdef uint64_t bits = 0
    cdef bint implicit = not (f.flags & FL_PRESENCE) and not always
    if f.flags & FL_REPEATED:
        return enc_repeated(e, nd, fi, row, g)
    if not av_valid(v, row):
        if not always:
            return 0
        if f.child >= 0:                      # a map entry's null message value: an empty one
            return enc_nested(e, nd, fi, &e.x.nodes[f.child], -1, g, False)
        if put_tag(e, g, f.number, f.wire) < 0:
            return -1
        return put_uv(e, g, 0) if f.wire == W_LEN else put_scalar_value(e, g, f.type, 0)
    if f.child >= 0:
        return enc_nested(e, nd, fi, &e.x.nodes[f.child], row, g, False)
    if f.type == T_STRING or f.type == T_BYTES:
        s = v.offs[v.offset + row]
        n = v.offs[v.offset + row + 1] - s
        if n == 0 and implicit:
            return 0
        if put_tag(e, g, f.number, W_LEN) < 0:
            return -1
        return put_bytes(e, g, v.data + s, n)
    if read_bits(e, nd, fi, f.type, v, row, &bits) < 0:
        return -1
    if bits == 0 and implicit:
        return 0
    if put_tag(e, g, f.number, f.wire) < 0:
        return -1
    return put_scalar_value(e, g, f.type, bits)


cdef int enc_repeated(Enc* e, PNode* nd, int fi, Py_ssize_t row, GBuf* g) noexcept nogil:
    """A repeated field's items (packed or one tag each) or a map's entries."""
    cdef PField* f = &nd.fields[fi]
    cdef AView* v = &e.views[f.col_no]
    cdef AView* iv = &e.views[f.item_no]
    cdef Py_ssize_t s, end, j, size = 0, a
    cdef uint64_t bits = 0
    if not av_valid(v, row):
        return 0
    s = v.offs[v.offset + row]
    end = v.offs[v.offset + row + 1]
    for j in range(s, end):
        if not av_valid(iv, j):
            return fail(&e.x, nd, fi, P_NULL_ITEM)
    if s == end:
        return 0
    if f.child >= 0:
        for j in range(s, end):
            if enc_nested(e, nd, fi, &e.x.nodes[f.child], j, g, (f.flags & FL_MAP) != 0) < 0:
                return -1
        return 0
    if f.type == T_STRING or f.type == T_BYTES:
        for j in range(s, end):
            a = iv.offs[iv.offset + j]
            if put_tag(e, g, f.number, W_LEN) < 0 or put_bytes(e, g, iv.data + a, iv.offs[iv.offset + j + 1] - a) < 0:
                return -1
        return 0
    if f.flags & FL_PACKED:
        for j in range(s, end):
            if read_bits(e, nd, fi, f.type, iv, j, &bits) < 0:
                return -1
            size += scalar_size(f.type, bits)
        if put_tag(e, g, f.number, W_LEN) < 0 or put_uv(e, g, <uint64_t>size) < 0:
            return -1
        for j in range(s, end):
            read_bits(e, nd, fi, f.type, iv, j, &bits)
            if put_scalar_value(e, g, f.type, bits) < 0:
                return -1
        return 0
    for j in range(s, end):
        if read_bits(e, nd, fi, f.type, iv, j, &bits) < 0 or put_tag(e, g, f.number, f.wire) < 0 \
                or put_scalar_value(e, g, f.type, bits) < 0:
            return -1
    return 0


def encode(Program rd not None, list views not None, bytes prefix not None, Py_ssize_t n, Columns out not None):
    """Rows 0..n of the plan's columns, given as ``views`` (one tuple per
    column, in the plan's pre-order numbering: ``(validity, offset, data,
    offsets, enum numbers, their count)``, buffer addresses or 0: a
    dictionary's names' enum numbers as int64, ``ENUM_UNKNOWN`` for a name
    the enum lacks; the caller keeps the arrays alive), each encoded after ``prefix`` (a frame) into
    ``out`` (columns of ``pyarrow.binary()``); a null root row stays null.

    Returns ``(0, n, None)``, or ``(2, row, (error, node, field))`` for a row
    that cannot be encoded (``out`` then holds the rows before it, and part
    of it: reset it)."""
    cdef Enc e
    cdef Py_ssize_t row = 0, i
    cdef Col* c = out.root
    cdef const uint8_t* pre = <const uint8_t*>prefix
    cdef Py_ssize_t npre = len(prefix)
    cdef int status = 0
    if len(views) != rd.cols.ncols:
        raise ValueError(f"{len(views)} column views for a plan of {rd.cols.ncols} columns")
    e.views = <AView*>calloc(max(1, len(views)), sizeof(AView))
    if e.views == NULL:
        raise MemoryError()
    e.x.nodes = rd.nodes
    e.x.err = E_OK
    e.x.err_node = 0
    e.x.err_field = -1
    try:
        for i, (valid, offset, data, offs, numbers, nenum) in enumerate(views):
            e.views[i].valid = <const uint8_t*><size_t>valid
            e.views[i].offset = offset
            e.views[i].data = <const uint8_t*><size_t>data
            e.views[i].offs = <const int32_t*><size_t>offs
            e.views[i].enum_numbers = <const int64_t*><size_t>numbers
            e.views[i].nenum = nenum
        with nogil:
            status = encode_rows(&e, c, pre, npre, n, &row)
    finally:
        free(e.views)
    if status == 0:
        return (0, n, None)
    return (2, row, (e.x.err, e.x.err_node, e.x.err_field))


cdef int encode_rows(Enc* e, Col* c, const uint8_t* pre, Py_ssize_t npre, Py_ssize_t n,
                     Py_ssize_t* at) noexcept nogil:
    cdef Py_ssize_t row
    cdef AView* root = &e.views[0]
    for row in range(n):
        at[0] = row
        if not av_valid(root, row):
            col_null(c)
            continue
        if gbuf_reserve(&c.data, npre) < 0:
            fail(&e.x, e.x.nodes, -1, P_MEMORY)
            return 2
        memcpy(c.data.data + c.data.len, pre, npre)
        c.data.len += npre
        if enc_body(e, e.x.nodes, row, &c.data, False) < 0:
            return 2
        if col_offset(c, c.data.len) < 0:
            fail(&e.x, e.x.nodes, -1, P_TOO_BIG if c.err[0] == 2 else P_MEMORY)
            return 2
        col_mark(c, True)
    at[0] = n
    return 0
