# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The Avro decoder of the compiled core: Avro binary values, framed or
bare, read by their writer schema's :class:`Program` (compiled by
``kwire.formats.avro.program``) straight into the reader schema's Arrow
columns (:class:`kwire._core.typedcols.Columns`), with the GIL released and
no Python object per value.

Every read is bounds checked (``buffers.Reader``). Array and map block
counts are checked against the bytes left (an item takes at least its
type's smallest size); items that take no bytes (null, an empty record) are
limited to ``MAX_EMPTY_ITEMS`` a value. Strings must be valid UTF-8.
"""

from libc.stdint cimport INT32_MAX, INT64_MIN, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset

from kwire._core.buffers cimport (Bytes, GBuf, Reader, borrow, gbuf_reserve, load_be32, load_be64, rd_init, rd_need, rd_varint,
                                  rd_varlong, unborrow)
from kwire._core.consts cimport E_NEG_LENGTH, E_OK, E_TRUNC, E_VARINT
from kwire._core.typedcols cimport (Col, Columns, TC_OK, col_bool, col_bytes, col_end_items, col_f32, col_f64, col_i32,
                                    col_i64, col_mark, col_null, col_offset, col_slot)
from kwire._core.utf8 cimport utf8_invalid_at

__all__ = ["Program", "decode", "ERRORS", "FRAMES", "MAX_EMPTY_ITEMS"]

cdef enum:
    O_NULL, O_BOOLEAN, O_INT, O_LONG, O_FLOAT, O_DOUBLE, O_BYTES, O_STRING, O_FIXED, O_ENUM
    O_RECORD, O_ARRAY, O_MAP, O_UNION, O_AS_UNION, O_ERROR

cdef enum:
    S_NONE, S_NULL_ROW, S_BOOL, S_I32, S_I64, S_F32, S_F64, S_BIN, S_STR, S_FIXED, S_DEC, S_UUID, S_DURATION
    S_ENUM, S_STRUCT, S_LIST, S_MAP

_CODES = {name: i for i, name in enumerate(
    ("null", "boolean", "int", "long", "float", "double", "bytes", "string", "fixed", "enum",
     "record", "array", "map", "union", "as_union", "error"))}
_STORES = {name: i for i, name in enumerate(
    ("none", "null_row", "bool", "i32", "i64", "f32", "f64", "bin", "str", "fixed", "dec", "uuid", "duration",
     "enum", "struct", "list", "map"))}

_FAST = {("long", "i64"): FAST_LONG, ("int", "i32"): FAST_INT, ("double", "f64"): FAST_DOUBLE,
         ("string", "str"): FAST_STR, ("bytes", "bin"): FAST_BIN, ("boolean", "bool"): FAST_BOOL}

# the decoder's errors (beyond buffers.Reader's E_TRUNC, E_VARINT, E_NEG_LENGTH)
cdef enum:
    A_BOOL = 100, A_UNION, A_ENUM, A_SYMBOL, A_UNRESOLVED, A_UTF8, A_DECIMAL, A_UUID, A_COUNT, A_RANGE
    A_TRAILING, A_FRAME, A_MEMORY, A_TOO_BIG, A_PRECISION

ERRORS = {
    E_TRUNC: "the value ends inside a field",
    E_VARINT: "a varint longer than its type allows",
    E_NEG_LENGTH: "a negative length",
    A_BOOL: "a boolean that is neither 0 nor 1",
    A_UNION: "a union branch index out of range",
    A_ENUM: "an enum index out of range",
    A_SYMBOL: "an enum symbol the reader's schema lacks (and it has no default)",
    A_UNRESOLVED: "a union branch the reader's schema cannot read",
    A_UTF8: "a string that is not valid UTF-8",
    A_DECIMAL: "a decimal too wide for the reader's decimal",
    A_UUID: "a uuid that is not 36 characters of hex digits and dashes",
    A_COUNT: "an array or map block count that the value cannot hold",
    A_RANGE: "a duration field past 2**31-1",
    A_TRAILING: "bytes left after the value",
    A_FRAME: "a value too short for its frame, or without the registry's magic byte 0",
    A_MEMORY: "out of memory",
    A_TOO_BIG: "a column past 2 GiB in one batch",
    A_PRECISION: "a decimal with more digits than the reader's precision",
}

#: framings of a value: none (bare Avro); Confluent's (magic 0, 4-byte schema
#: id); magic 0 and an 8-byte id (Apicurio's globalId); ids given per row
FRAMES = {"none": 0, "confluent": 1, "id8": 2, "ids": 3}
cdef enum:
    F_NONE, F_CONFLUENT, F_ID8, F_IDS

#: items that take no bytes (null, an empty record), at most, in one value
MAX_EMPTY_ITEMS = 1 << 20
cdef int64_t _MAX_EMPTY = MAX_EMPTY_ITEMS


# the commonest ops, read in place by a record's loop (FAST_NONE: run())
cdef enum:
    FAST_NONE, FAST_LONG, FAST_INT, FAST_DOUBLE, FAST_STR, FAST_BIN, FAST_BOOL


cdef struct Op:
    int fast
    int code
    int store
    Col* col
    Col* aux                    # a map's entries struct
    int size                    # fixed: bytes
    int nkids
    int* kids
    int nenum
    int* enum_map
    int member                  # as_union: the member the value goes to
    int ndefaults
    int* default_ops
    const uint8_t** default_data
    Py_ssize_t* default_len
    Py_ssize_t min_size
    const uint8_t* dec_limit    # decimals: 10**precision, little-endian, the column's width


cdef struct Ctx:
    Op* ops
    const uint8_t* data_end     # the end of the column's data: bytes before it may be read past a value's end
    int* cols_err
    int err
    int err_op
    int64_t empty_items


cdef class Program:
    """A writer schema's decoding program, bound to the reader's columns."""
    cdef Op* ops
    cdef int nops
    cdef readonly list paths           # each op's field path, for errors
    cdef readonly list messages        # each op's message (error ops)
    cdef list keep                     # the default values' bytes, alive as long as the program
    cdef Columns cols

    def __cinit__(self, list ops not None, Columns cols not None):
        """``ops``: kwire.formats.avro.program's ``Op`` list, root first;
        ``cols``: the reader's columns they write."""
        self.cols = cols
        self.keep = []
        self.paths = [op.path for op in ops]
        self.messages = [op.message for op in ops]
        self.nops = len(ops)
        self.ops = <Op*>calloc(max(1, self.nops), sizeof(Op))
        if self.ops == NULL:
            raise MemoryError()
        for i, op in enumerate(ops):
            self._bind(&self.ops[i], op)

    cdef int _bind(self, Op* o, object op) except -1:
        o.code = _CODES[op.code]
        o.store = _STORES[op.store]
        o.fast = _FAST.get((op.code, op.store), FAST_NONE)
        o.col = self.cols.column(op.col) if op.col >= 0 else NULL
        o.aux = self.cols.column(op.aux) if op.aux >= 0 else NULL
        o.member = op.member
        o.size = op.size
        o.min_size = op.min_size
        o.nkids = len(op.kids)
        o.kids = _ints(op.kids)
        o.nenum = len(op.enum_map)
        o.enum_map = _ints(op.enum_map)
        if op.store == "dec":
            limit = (10 ** op.precision).to_bytes(o.col.width + 1, "little")[:o.col.width]
            self.keep.append(limit)
            o.dec_limit = <const uint8_t*><bytes>limit
        o.ndefaults = len(op.defaults)
        if o.ndefaults:
            o.default_ops = _ints([d[0] for d in op.defaults])
            o.default_data = <const uint8_t**>calloc(o.ndefaults, sizeof(uint8_t*))
            o.default_len = <Py_ssize_t*>calloc(o.ndefaults, sizeof(Py_ssize_t))
            if o.default_data == NULL or o.default_len == NULL:
                raise MemoryError()
            for j, (_, data) in enumerate(op.defaults):
                self.keep.append(data)
                o.default_data[j] = <const uint8_t*><bytes>data
                o.default_len[j] = len(data)
        return 0

    def __dealloc__(self):
        cdef int i
        if self.ops == NULL:
            return
        for i in range(self.nops):
            free(self.ops[i].kids)
            free(self.ops[i].enum_map)
            free(self.ops[i].default_ops)
            free(self.ops[i].default_data)
            free(self.ops[i].default_len)
        free(self.ops)


cdef int* _ints(list values) except? NULL:
    cdef int* out
    if not values:
        return NULL
    out = <int*>calloc(len(values), sizeof(int))
    if out == NULL:
        raise MemoryError()
    for i, v in enumerate(values):
        out[i] = v
    return out


# ------------------------------------------------------------------ decoding
cdef inline int fail(Ctx* x, Op* op, int code) noexcept nogil:
    if x.err == E_OK:
        x.err = code
        x.err_op = <int>(op - x.ops)
    return -1


cdef int run(Ctx* x, Op* op, Reader* r) noexcept nogil:
    """Reads one value of ``op``'s writer type, storing it as ``op`` says; -1 on error (in ``x``)."""
    cdef int code = op.code
    if code <= O_DOUBLE:
        return run_number(x, op, r)
    if code == O_BYTES or code == O_STRING:
        return run_bytes(x, op, r)
    if code == O_FIXED:
        if not rd_need(r, op.size):
            return fail(x, op, E_TRUNC)
        r.pos += op.size
        return store_bytes(x, op, r.p + r.pos - op.size, op.size)
    if code == O_ENUM:
        return run_enum(x, op, r)
    if code == O_RECORD:
        return run_record(x, op, r)
    if code == O_ARRAY or code == O_MAP:
        return run_blocks(x, op, r)
    if code == O_UNION:
        return run_union(x, op, r)
    if code == O_AS_UNION:
        return run_as_union(x, op, r)
    return fail(x, op, A_UNRESOLVED)


cdef inline bint short_ascii(const uint8_t* p, int64_t n, const uint8_t* end) noexcept nogil:
    """Whether ``n`` (at most 16) bytes at ``p`` are ASCII, read as two words
    (the bytes past ``n`` masked off) when 16 bytes before ``end`` can be read;
    False otherwise (the caller checks the long way)."""
    cdef uint64_t w1, w2, m1, m2
    if n > 16 or end == NULL or end - p < 16:
        return False
    memcpy(&w1, p, 8)
    memcpy(&w2, p + 8, 8)
    m1 = <uint64_t>-1 if n >= 8 else (((<uint64_t>1) << (8 * n)) - 1)
    m2 = <uint64_t>-1 if n >= 16 else (0 if n <= 8 else (((<uint64_t>1) << (8 * (n - 8))) - 1))
    return ((w1 & m1) | (w2 & m2)) & 0x8080808080808080ULL == 0


cdef inline void col_short_bytes(Col* c, const uint8_t* p, int64_t n, const uint8_t* end) noexcept nogil:
    """:c:func:`col_bytes`, copying a value of at most 16 bytes as 16 (two
    moves, no call) when 16 bytes before ``end`` can be read: the column
    keeps room for 16 more bytes than it holds."""
    if n > INT32_MAX - c.data.len or gbuf_reserve(&c.data, n + 16) < 0:
        col_bytes(c, p, n)             # its errors
        return
    if n <= 16 and end != NULL and end - p >= 16:
        memcpy(c.data.data + c.data.len, p, 16)
    else:
        memcpy(c.data.data + c.data.len, p, n)
    c.data.len += n
    if col_offset(c, c.data.len) == 0:
        col_mark(c, True)


cdef inline int run_fast(Ctx* x, Op* op, Reader* r) noexcept nogil:
    """The commonest ops, in the caller's loop: 0 when read, -1 to take
    :c:func:`run` (which finds the same error again, and reports it)."""
    cdef int kind = op.fast
    cdef int64_t v
    cdef double d
    cdef const uint8_t* p
    cdef Py_ssize_t pos = r.pos
    if kind == FAST_LONG:
        v = rd_varlong(r)
        if r.err:
            return -1
        col_i64(op.col, v)
    elif kind == FAST_STR or kind == FAST_BIN:
        v = rd_varlong(r)
        if r.err or v < 0 or v > r.end - r.pos:
            r.pos = pos
            return -1
        p = r.p + r.pos
        if kind == FAST_STR and not short_ascii(p, v, x.data_end) and utf8_invalid_at(p, v) >= 0:
            r.pos = pos
            return -1
        r.pos += v
        col_short_bytes(op.col, p, v, x.data_end)
    elif kind == FAST_INT:
        v = rd_varint(r)
        if r.err:
            return -1
        col_i32(op.col, <int32_t>v)
    elif kind == FAST_DOUBLE:
        if r.end - r.pos < 8:
            return -1
        memcpy(&d, r.p + r.pos, 8)
        r.pos += 8
        col_f64(op.col, d)
    else:
        if r.pos >= r.end or r.p[r.pos] > 1:
            return -1
        col_bool(op.col, r.p[r.pos])
        r.pos += 1
    return 0


cdef int run_number(Ctx* x, Op* op, Reader* r) noexcept nogil:
    cdef int64_t v = 0
    cdef double d = 0
    cdef float f
    cdef int code = op.code
    if code == O_NULL:
        if op.store == S_NULL_ROW:
            col_null(op.col)
        return 0
    if code == O_BOOLEAN:
        if not rd_need(r, 1):
            return fail(x, op, E_TRUNC)
        v = r.p[r.pos]
        r.pos += 1
        if v > 1:
            return fail(x, op, A_BOOL)
        if op.store == S_BOOL:
            col_bool(op.col, v)
        return 0
    if code == O_INT:
        v = rd_varint(r)
        d = <double>v
    elif code == O_LONG:
        v = rd_varlong(r)
        d = <double>v
    elif code == O_FLOAT:
        if not rd_need(r, 4):
            return fail(x, op, E_TRUNC)
        memcpy(&f, r.p + r.pos, 4)         # little-endian, as Avro's
        r.pos += 4
        d = f
    else:
        if not rd_need(r, 8):
            return fail(x, op, E_TRUNC)
        memcpy(&d, r.p + r.pos, 8)
        r.pos += 8
    if r.err:
        return fail(x, op, r.err)
    store_number(op, v, d)
    return 0


cdef inline void store_number(Op* op, int64_t v, double d) noexcept nogil:
    cdef int s = op.store
    if s == S_I64:
        col_i64(op.col, v)
    elif s == S_I32:
        col_i32(op.col, <int32_t>v)
    elif s == S_F64:
        col_f64(op.col, d)
    elif s == S_F32:
        col_f32(op.col, <float>d)


cdef int run_bytes(Ctx* x, Op* op, Reader* r) noexcept nogil:
    cdef int64_t n = rd_varlong(r)
    if r.err:
        return fail(x, op, r.err)
    if n < 0:
        return fail(x, op, E_NEG_LENGTH)
    if n > r.end - r.pos:
        return fail(x, op, E_TRUNC)
    r.pos += n
    return store_bytes(x, op, r.p + r.pos - n, n)


cdef int store_bytes(Ctx* x, Op* op, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef int s = op.store
    cdef char* slot
    if s == S_STR:
        if utf8_invalid_at(p, n) >= 0:
            return fail(x, op, A_UTF8)
        col_bytes(op.col, p, n)
    elif s == S_BIN:
        col_bytes(op.col, p, n)
    elif s == S_FIXED:
        slot = col_slot(op.col)
        if slot != NULL:
            memcpy(slot, p, n)
    elif s == S_DEC:
        return store_decimal(x, op, p, n)
    elif s == S_UUID:
        return store_uuid(x, op, p, n)
    elif s == S_DURATION:
        return store_duration(x, op, p)
    return 0


cdef int store_decimal(Ctx* x, Op* op, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Big-endian two's complement of any length -> the column's little-endian width."""
    cdef int w = op.col.width
    cdef uint8_t fill = 0xFF if n > 0 and p[0] & 0x80 else 0
    cdef Py_ssize_t i
    cdef char* slot
    while n > w:                            # leading sign bytes may go
        if p[0] != fill or (p[1] & 0x80) != (fill & 0x80):
            return fail(x, op, A_DECIMAL)
        p += 1
        n -= 1
    cdef uint8_t mag[32]
    memset(mag, fill, w)
    for i in range(n):
        mag[i] = p[n - 1 - i]
    if not below_limit(mag, w, op.dec_limit):
        return fail(x, op, A_PRECISION)
    slot = col_slot(op.col)
    if slot != NULL:
        memcpy(slot, mag, w)
    return 0


cdef bint below_limit(const uint8_t* value, int w, const uint8_t* limit) noexcept nogil:
    """Whether the magnitude of ``value`` (``w`` bytes, little-endian two's
    complement) is below ``limit`` (``w`` bytes, little-endian)."""
    cdef uint8_t mag[32]
    cdef int i, carry = 1
    if value[w - 1] & 0x80:                 # negative: its magnitude is ~value + 1
        for i in range(w):
            carry += <uint8_t>~value[i]
            mag[i] = <uint8_t>carry
            carry >>= 8
    else:
        memcpy(mag, value, w)
    for i in range(w - 1, -1, -1):
        if mag[i] != limit[i]:
            return mag[i] < limit[i]
    return False


cdef inline int hexval(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    c |= 0x20
    if 97 <= c <= 102:
        return c - 87
    return -1


cdef int store_uuid(Ctx* x, Op* op, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    cdef uint8_t out[16]
    cdef int i = 0, j = 0, hi, lo
    if n != 36:
        return fail(x, op, A_UUID)
    while i < 36:
        if i == 8 or i == 13 or i == 18 or i == 23:
            if p[i] != 45:                  # '-'
                return fail(x, op, A_UUID)
            i += 1
            continue
        hi = hexval(p[i])
        lo = hexval(p[i + 1])
        if hi < 0 or lo < 0:
            return fail(x, op, A_UUID)
        out[j] = <uint8_t>(hi * 16 + lo)
        j += 1
        i += 2
    cdef char* slot = col_slot(op.col)
    if slot != NULL:
        memcpy(slot, out, 16)
    return 0


cdef int store_duration(Ctx* x, Op* op, const uint8_t* p) noexcept nogil:
    """Avro's duration (three little-endian uint32: months, days, milliseconds)
    as Arrow's month_day_nano interval (int32, int32, int64 nanoseconds)."""
    cdef uint32_t months, days, millis
    cdef int64_t nanos
    memcpy(&months, p, 4)
    memcpy(&days, p + 4, 4)
    memcpy(&millis, p + 8, 4)
    if months > INT32_MAX or days > INT32_MAX:
        return fail(x, op, A_RANGE)
    nanos = <int64_t>millis * 1000000
    cdef char* slot = col_slot(op.col)
    if slot != NULL:
        memcpy(slot, &months, 4)
        memcpy(slot + 4, &days, 4)
        memcpy(slot + 8, &nanos, 8)
    return 0


cdef int run_enum(Ctx* x, Op* op, Reader* r) noexcept nogil:
    cdef int32_t i = rd_varint(r)
    cdef int m
    if r.err:
        return fail(x, op, r.err)
    if i < 0 or i >= op.nenum:
        return fail(x, op, A_ENUM)
    if op.store == S_ENUM:
        m = op.enum_map[i]
        if m < 0:
            return fail(x, op, A_SYMBOL)
        col_i32(op.col, m)
    return 0


cdef int run_record(Ctx* x, Op* op, Reader* r) noexcept nogil:
    cdef int i
    cdef Reader d
    cdef Op* k
    for i in range(op.nkids):
        k = &x.ops[op.kids[i]]
        if k.fast == FAST_NONE or run_fast(x, k, r) < 0:
            if run(x, k, r) < 0:
                return -1
    cdef const uint8_t* data_end = x.data_end
    x.data_end = NULL                  # a default's bytes are not the column's: none read past them
    for i in range(op.ndefaults):
        rd_init(&d, op.default_data[i], 0, op.default_len[i])
        if run(x, &x.ops[op.default_ops[i]], &d) < 0:
            x.data_end = data_end
            return -1
    x.data_end = data_end
    if op.store == S_STRUCT:
        col_mark(op.col, True)
    return 0


cdef int run_blocks(Ctx* x, Op* op, Reader* r) noexcept nogil:
    """An array's or a map's blocks: a count (negative: its absolute value,
    then the block's size in bytes), its items; a count of 0 ends them."""
    cdef int64_t count, size, i
    cdef Op* item = &x.ops[op.kids[0]]
    cdef Op* value = &x.ops[op.kids[op.nkids - 1]]
    cdef Py_ssize_t min_size = item.min_size if op.code == O_ARRAY else 1 + value.min_size
    while True:
        count = rd_varlong(r)
        if r.err:
            return fail(x, op, r.err)
        if count == 0:
            break
        if count < 0:
            if count == INT64_MIN:
                return fail(x, op, A_COUNT)
            count = -count
            size = rd_varlong(r)
            if r.err:
                return fail(x, op, r.err)
            if size < 0:
                return fail(x, op, A_COUNT)
        if min_size > 0:
            if count > (r.end - r.pos) / min_size:
                return fail(x, op, A_COUNT)
        else:
            x.empty_items += count
            if x.empty_items > _MAX_EMPTY:
                return fail(x, op, A_COUNT)
        for i in range(count):
            if op.code == O_ARRAY:
                if item.fast == FAST_NONE or run_fast(x, item, r) < 0:
                    if run(x, item, r) < 0:
                        return -1
            elif run_entry(x, op, item, value, r) < 0:
                return -1
    if op.store == S_LIST or op.store == S_MAP:
        col_end_items(op.col)
    return 0


cdef inline int run_entry(Ctx* x, Op* op, Op* key, Op* value, Reader* r) noexcept nogil:
    if run(x, key, r) < 0 or run(x, value, r) < 0:
        return -1
    if op.aux != NULL:
        col_mark(op.aux, True)
    return 0


cdef int run_union(Ctx* x, Op* op, Reader* r) noexcept nogil:
    cdef int64_t b = rd_varlong(r)
    if r.err:
        return fail(x, op, r.err)
    if b < 0 or b >= op.nkids:
        return fail(x, op, A_UNION)
    cdef Op* k = &x.ops[op.kids[b]]
    if k.fast != FAST_NONE and run_fast(x, k, r) == 0:
        return 0
    return run(x, k, r)


cdef int run_as_union(Ctx* x, Op* op, Reader* r) noexcept nogil:
    """A value into one member of the reader's union struct; the others null."""
    cdef int j
    if run(x, &x.ops[op.kids[0]], r) < 0:
        return -1
    for j in range(op.col.nchild):
        if j != op.member:
            col_null(&op.col.child[j])
    col_mark(op.col, True)
    return 0


# ------------------------------------------------------------ a column of values
cdef struct Table:
    int n
    int64_t* ids
    Op** roots
    int64_t last_id
    Op* last


cdef inline Op* table_find(Table* t, int64_t id) noexcept nogil:
    cdef int i
    if t.last != NULL and t.last_id == id:
        return t.last
    for i in range(t.n):
        if t.ids[i] == id:
            t.last_id = id
            t.last = t.roots[i]
            return t.last
    return NULL


def decode(Columns cols not None, list table not None, object values not None, int frame, Py_ssize_t start=0,
           object ids=None):
    """Appends rows ``start``... of ``values`` (a ``pyarrow.BinaryArray``;
    a null row becomes a null) to ``cols``, each read by the program its
    schema id selects in ``table`` (a list of ``(id, Program)``; with frame
    "none", one entry whose id is ignored). ``frame``: one of ``FRAMES``;
    ``ids`` (frame "ids"): a ``pyarrow.Int64Array``, each row's schema id.

    Returns ``(status, row, detail)``: ``(0, n, None)`` when every row is
    in; ``(1, row, id)`` when ``row``'s schema id has no program yet (add
    it and call again from ``row``); ``(2, row, (error, op path, message))``
    when ``row`` cannot be decoded (the rows before it are in ``cols``,
    that row partly: reset them)."""
    cdef Py_ssize_t n = len(values)
    cdef Py_ssize_t base = values.offset
    cdef Bytes vb, ob, db, ib
    cdef Table t
    cdef Ctx x
    cdef Py_ssize_t row = start
    cdef int status = 0
    cdef int64_t need_id = 0
    cdef Py_ssize_t ids_base = ids.offset if ids is not None else 0
    bufs = values.buffers()
    if len(bufs) != 3:
        raise TypeError(f"decode needs a binary array, not {values.type}")
    if (frame == F_IDS) != (ids is not None) or (ids is not None and len(ids) != n):
        raise ValueError("ids: one schema id a row, with frame 'ids' only")
    t.n = len(table)
    t.ids = <int64_t*>calloc(max(1, t.n), sizeof(int64_t))
    t.roots = <Op**>calloc(max(1, t.n), sizeof(Op*))
    t.last = NULL
    if t.ids == NULL or t.roots == NULL:
        free(t.ids)
        free(t.roots)
        raise MemoryError()
    keep = []
    for i, (sid, prog) in enumerate(table):
        if (<Program?>prog).cols is not cols:
            raise ValueError("a program bound to other columns")
        t.ids[i] = sid
        t.roots[i] = (<Program>prog).ops
    x.cols_err = &cols.err
    x.data_end = NULL
    x.err = E_OK
    vb.release = ob.release = db.release = ib.release = False
    ib.p = NULL
    try:
        borrow(bufs[0], &vb, "validity")
        borrow(bufs[1], &ob, "offsets")
        borrow(bufs[2], &db, "data")
        if ids is not None:
            borrow(ids.buffers()[1], &ib, "ids")
        with nogil:
            status = decode_rows(&x, &t, cols.root, &vb, <const int32_t*>ob.p + base, <const uint8_t*>db.p,
                                 db.n if db.n > 0 else 0, base, n, frame,
                                 <const int64_t*>ib.p + ids_base if ib.p != NULL else NULL, &row, &need_id)
    finally:
        unborrow(&vb)
        unborrow(&ob)
        unborrow(&db)
        unborrow(&ib)
        free(t.ids)
        free(t.roots)
    if status == 0:
        return (0, row, None)
    if status == 1:
        return (1, row, need_id)
    prog = _program_of(table, x.ops)
    return (2, row, (x.err, prog.paths[x.err_op] if prog is not None else "",
                     prog.messages[x.err_op] if prog is not None else ""))


cdef object _program_of(list table, Op* ops):
    for _, prog in table:
        if (<Program>prog).ops == ops:
            return prog
    return None


cdef int decode_rows(Ctx* x, Table* t, Col* root, Bytes* valid, const int32_t* offs, const uint8_t* data,
                     Py_ssize_t data_len, Py_ssize_t base, Py_ssize_t n, int frame, const int64_t* ids,
                     Py_ssize_t* at, int64_t* need_id) noexcept nogil:
    """Rows ``at[0]``..n; 0 when all are in, 1 for a schema id without a
    program (``need_id``), 2 for an error (in ``x``). ``at[0]``: the row."""
    cdef Py_ssize_t row, s, e, hdr
    cdef int64_t sid = 0
    cdef Op* root_op = t.roots[0] if t.n else NULL
    cdef Reader r
    cdef const uint8_t* vbits = <const uint8_t*>valid.p
    hdr = 5 if frame == F_CONFLUENT else (9 if frame == F_ID8 else 0)
    x.data_end = data + data_len if data != NULL else NULL
    for row in range(at[0], n):
        at[0] = row
        if vbits != NULL and not (vbits[(base + row) >> 3] >> ((base + row) & 7)) & 1:
            col_null(root)
            continue
        s = offs[row]
        e = offs[row + 1]
        if s < 0 or e < s or e > data_len:
            x.err = A_FRAME
            x.err_op = 0
            x.ops = root_op
            return 2
        if frame != F_NONE:
            if e - s < hdr or (hdr and data[s] != 0):
                x.err = A_FRAME
                x.err_op = 0
                x.ops = root_op
                return 2
            sid = load_be32(data + s + 1) if frame == F_CONFLUENT else (
                <int64_t>load_be64(data + s + 1) if frame == F_ID8 else ids[row])
            root_op = table_find(t, sid)
            if root_op == NULL:
                need_id[0] = sid
                return 1
        elif root_op == NULL:
            need_id[0] = 0
            return 1
        x.ops = root_op
        x.empty_items = 0
        rd_init(&r, data, s + hdr, e)
        if run(x, root_op, &r) < 0:
            return 2
        if r.pos != e:
            fail(x, root_op, A_TRAILING)
            return 2
        if x.cols_err[0] != TC_OK:
            fail(x, root_op, A_MEMORY if x.cols_err[0] == 1 else A_TOO_BIG)
            return 2
    at[0] = n
    return 0
