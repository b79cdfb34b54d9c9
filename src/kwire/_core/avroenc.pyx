# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The Avro encoder of the compiled core: the rows of Arrow columns written
as Avro binary values, each behind an optional header (a registry's frame),
with the GIL released and no Python object per row. What each part of the
writer schema reads from which Arrow array is planned by
``kwire.formats.avro.encode`` (an :class:`Enc` tree, bound to one call's
arrays). The bytes are those fastavro (and so confluent-kafka's
AvroSerializer) writes for the same values: arrays and maps as one block,
decimals in as many bytes as fastavro takes.
"""

from libc.stdint cimport INT32_MAX, INT32_MIN, INT64_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

from kwire._core.buffers cimport GBuf, gbuf_reserve, put_varint
from kwire._core.typedcols cimport Col, Columns, col_fail, col_mark, col_null, col_offset, TC_NOMEM, TC_TOO_BIG

__all__ = ["encode", "CODES", "SOURCES", "ERRORS"]

# what is written (the writer schema's type, logical types folded in)
CODES = {name: i for i, name in enumerate((
    "null", "boolean", "int", "long", "float", "double", "bytes", "fixed", "enum", "record", "array", "map",
    "members", "dec_bytes", "dec_fixed", "uuid_string", "duration", "default"))}
cdef enum:
    E_NULL, E_BOOLEAN, E_INT, E_LONG, E_FLOAT, E_DOUBLE, E_BYTES, E_FIXED, E_ENUM, E_RECORD, E_ARRAY, E_MAP
    E_MEMBERS, E_DEC_BYTES, E_DEC_FIXED, E_UUID_STRING, E_DURATION, E_DEFAULT

# what is read: an Arrow array's layout
SOURCES = {name: i for i, name in enumerate((
    "none", "bool", "int", "uint", "float", "binary", "large_binary", "fixed", "list", "large_list", "struct",
    "decimal", "interval"))}
cdef enum:
    SR_NONE, SR_BOOL, SR_INT, SR_UINT, SR_FLOAT, SR_BINARY, SR_LARGE_BINARY, SR_FIXED, SR_LIST, SR_LARGE_LIST
    SR_STRUCT, SR_DECIMAL, SR_INTERVAL

cdef enum:
    X_NULL = 1, X_RANGE, X_SIZE, X_ENUM, X_MEMBER, X_PRECISION, X_MEMORY, X_TOO_BIG

ERRORS = {
    X_NULL: "a null where the schema has no null",
    X_RANGE: "a number out of the range of its Avro type",
    X_SIZE: "a value whose size is not the fixed's",
    X_ENUM: "a value that is not one of the enum's symbols",
    X_MEMBER: "a union row with no member set (and no null in the union)",
    X_PRECISION: "a decimal with more digits than the schema's precision",
    X_MEMORY: "out of memory",
    X_TOO_BIG: "encoded values past 2 GiB in one call",
}


cdef struct Enc:
    int code
    int src
    int width                   # bytes a value of the source (int, uint, float, fixed, decimal)
    int size                    # fixed and dec_fixed: the fixed's size
    const uint8_t* valid        # validity bitmap (NULL: all valid)
    const uint8_t* data         # values
    const uint8_t* offs         # offsets (binary, list sources)
    int64_t base                # the array's offset
    int64_t mul                 # numbers: value * mul // div (units)
    int64_t div
    int null_branch             # union index of null (-1: no union, or no null)
    int value_branch            # union index of the value (-1: no union)
    int nkids
    Enc* kids
    int nmap
    const int32_t* map          # enum: dictionary index -> symbol index; members: member -> branch
    const uint8_t* dflt         # default: its bytes
    Py_ssize_t dlen
    const uint8_t* limit        # decimals: 10**precision, little-endian, ``width`` bytes
    int path


cdef struct Ctx:
    GBuf* out
    int err
    Enc* at


cdef class _Bound:
    """One call's Enc tree and the Python objects its pointers borrow."""
    cdef Enc* root
    cdef list keep
    cdef list paths
    cdef list views

    def __cinit__(self):
        self.keep = []
        self.paths = []
        self.views = []

    def __dealloc__(self):
        if self.root != NULL:
            enc_free(self.root)
            free(self.root)


cdef void enc_free(Enc* e) noexcept:
    cdef int i
    if e.kids != NULL:
        for i in range(e.nkids):
            enc_free(&e.kids[i])
        free(e.kids)
        e.kids = NULL


cdef const uint8_t* _ptr(_Bound b, object buf) except? NULL:
    """A pointer into ``buf`` (a pyarrow buffer, bytes, or None)."""
    if buf is None:
        return NULL
    cdef const uint8_t[::1] view = memoryview(buf).cast("B")
    b.views.append(view)
    if view.shape[0] == 0:
        return <const uint8_t*>""
    return &view[0]


cdef int bind(_Bound b, Enc* e, object spec) except -1:
    """``e`` from ``spec`` (kwire.formats.avro.encode's EncSpec)."""
    e.code = CODES[spec.code]
    e.src = SOURCES[spec.src]
    e.width = spec.width
    e.size = spec.size
    e.valid = _ptr(b, spec.validity)
    e.data = _ptr(b, spec.data)
    e.offs = _ptr(b, spec.offsets)
    e.base = spec.base
    e.mul = spec.mul
    e.div = spec.div
    e.null_branch = spec.null_branch
    e.value_branch = spec.value_branch
    e.path = len(b.paths)
    b.paths.append(spec.path)
    if spec.map is not None:
        m = spec.map
        b.keep.append(m)
        e.map = <const int32_t*>_ptr(b, m)
        e.nmap = len(m) // 4
    if spec.default is not None:
        b.keep.append(spec.default)
        e.dflt = _ptr(b, spec.default)
        e.dlen = len(spec.default)
    if spec.limit is not None:
        b.keep.append(spec.limit)
        e.limit = _ptr(b, spec.limit)
    e.nkids = len(spec.kids)
    if e.nkids:
        e.kids = <Enc*>calloc(e.nkids, sizeof(Enc))
        if e.kids == NULL:
            raise MemoryError()
        for i, kid in enumerate(spec.kids):
            bind(b, &e.kids[i], kid)
    return 0


# ------------------------------------------------------------------ reading Arrow
cdef inline bint is_null(Enc* e, int64_t row) noexcept nogil:
    cdef int64_t i
    if e.valid == NULL:
        return False
    i = e.base + row
    return not (e.valid[i >> 3] >> (i & 7)) & 1


cdef inline int64_t read_int(Enc* e, int64_t row, bint* overflow) noexcept nogil:
    cdef int64_t i = e.base + row
    cdef const uint8_t* p = e.data + i * e.width
    cdef uint64_t u
    if e.src == SR_INT:
        if e.width == 8:
            return (<const int64_t*>p)[0]
        if e.width == 4:
            return (<const int32_t*>p)[0]
        if e.width == 2:
            return (<const int16_t*>p)[0]
        return (<const int8_t*>p)[0]
    if e.src == SR_BOOL:
        return (e.data[i >> 3] >> (i & 7)) & 1
    if e.width == 8:
        u = (<const uint64_t*>p)[0]
        if u > <uint64_t>INT64_MAX:
            overflow[0] = True
        return <int64_t>u
    if e.width == 4:
        return (<const uint32_t*>p)[0]
    if e.width == 2:
        return (<const uint16_t*>p)[0]
    return p[0]


cdef inline double read_float(Enc* e, int64_t row) noexcept nogil:
    cdef bint ignored = False
    if e.src != SR_FLOAT:
        return <double>read_int(e, row, &ignored)
    if e.width == 4:
        return (<const float*>e.data)[e.base + row]
    return (<const double*>e.data)[e.base + row]


cdef inline int64_t read_offset(Enc* e, int64_t i) noexcept nogil:
    if e.src == SR_LARGE_BINARY or e.src == SR_LARGE_LIST:
        return (<const int64_t*>e.offs)[i]
    return (<const int32_t*>e.offs)[i]


cdef inline const uint8_t* read_bytes(Enc* e, int64_t row, int64_t* n) noexcept nogil:
    cdef int64_t i = e.base + row
    cdef int64_t s
    if e.src == SR_FIXED:
        n[0] = e.width
        return e.data + i * e.width
    s = read_offset(e, i)
    n[0] = read_offset(e, i + 1) - s
    return e.data + s


# ------------------------------------------------------------------ writing
cdef inline int room(Ctx* x, Py_ssize_t n) noexcept nogil:
    if gbuf_reserve(x.out, n) < 0:
        x.err = X_MEMORY
        return -1
    return 0


cdef inline int put_long(Ctx* x, int64_t v) noexcept nogil:
    if room(x, 10) < 0:
        return -1
    put_varint(x.out, v)
    return 0


cdef inline int put_raw(Ctx* x, const void* p, Py_ssize_t n) noexcept nogil:
    if room(x, n) < 0:
        return -1
    if n > 0:
        memcpy(x.out.data + x.out.len, p, n)
        x.out.len += n
    return 0


cdef inline int failed(Ctx* x, Enc* e, int code) noexcept nogil:
    if x.err == 0:
        x.err = code
        x.at = e
    return -1


cdef inline int64_t floor_div(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t q = a / b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef int write(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    """Row ``row`` of ``e``'s array as ``e``'s Avro type (with its union index)."""
    cdef bint null = is_null(e, row)
    if e.value_branch >= 0:
        if null:
            if e.null_branch < 0:
                return failed(x, e, X_NULL)
            return put_long(x, e.null_branch)
        if put_long(x, e.value_branch) < 0:
            return -1
    elif null and e.code != E_NULL and e.code != E_MEMBERS and e.code != E_DEFAULT:
        return failed(x, e, X_NULL)
    return write_value(x, e, row)


cdef int write_value(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    cdef int code = e.code
    cdef int64_t v
    cdef int64_t n
    cdef double d
    cdef float f
    cdef bint overflow = False
    cdef const uint8_t* p
    if code == E_NULL:
        return 0
    if code == E_BOOLEAN:
        if room(x, 1) < 0:
            return -1
        x.out.data[x.out.len] = <char>read_int(e, row, &overflow)
        x.out.len += 1
        return 0
    if code == E_INT or code == E_LONG:
        v = read_int(e, row, &overflow)
        if e.mul != 1:
            if v > INT64_MAX / e.mul or v < -INT64_MAX / e.mul:
                return failed(x, e, X_RANGE)
            v *= e.mul
        if e.div != 1:
            v = floor_div(v, e.div)
        if overflow or (code == E_INT and (v > INT32_MAX or v < INT32_MIN)):
            return failed(x, e, X_RANGE)
        return put_long(x, v)
    if code == E_FLOAT:
        f = <float>read_float(e, row)
        return put_raw(x, &f, 4)
    if code == E_DOUBLE:
        d = read_float(e, row)
        return put_raw(x, &d, 8)
    if code == E_BYTES or code == E_FIXED:
        p = read_bytes(e, row, &n)
        if code == E_FIXED:
            if n != e.size:
                return failed(x, e, X_SIZE)
        elif put_long(x, n) < 0:
            return -1
        return put_raw(x, p, n)
    if code == E_ENUM:
        v = read_int(e, row, &overflow)
        if v < 0 or v >= e.nmap or e.map[v] < 0:
            return failed(x, e, X_ENUM)
        return put_long(x, e.map[v])
    if code == E_RECORD:
        return write_fields(x, e, row)
    if code == E_ARRAY or code == E_MAP:
        return write_items(x, e, row)
    if code == E_MEMBERS:
        return write_members(x, e, row)
    if code == E_DEFAULT:
        return put_raw(x, e.dflt, e.dlen)
    if code == E_DEC_BYTES or code == E_DEC_FIXED:
        return write_decimal(x, e, row)
    if code == E_UUID_STRING:
        return write_uuid(x, e, row)
    return write_duration(x, e, row)


cdef int write_fields(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    cdef int i
    for i in range(e.nkids):
        if write(x, &e.kids[i], row) < 0:
            return -1
    return 0


cdef int write_items(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    """One block of all the items (none: just the 0 that ends the blocks)."""
    cdef int64_t i = e.base + row
    cdef int64_t s = read_offset(e, i)
    cdef int64_t n = read_offset(e, i + 1) - s
    cdef int64_t k
    if n > 0:
        if put_long(x, n) < 0:
            return -1
        for k in range(s, s + n):
            if write(x, &e.kids[0], k) < 0:
                return -1
            if e.code == E_MAP and write(x, &e.kids[1], k) < 0:
                return -1
    return put_long(x, 0)


cdef int write_members(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    """A union from a struct of members: the first member set is the value."""
    cdef int j
    if not is_null(e, row):
        for j in range(e.nkids):
            if not is_null(&e.kids[j], row):
                if put_long(x, e.map[j]) < 0:
                    return -1
                return write_value(x, &e.kids[j], row)
    if e.null_branch < 0:
        return failed(x, e, X_MEMBER)
    return put_long(x, e.null_branch)


cdef int write_decimal(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    """Arrow's little-endian two's complement as Avro's big-endian: for bytes,
    in fastavro's length (bits of the magnitude, plus 8, over 8); for a
    fixed, its size."""
    cdef const uint8_t* p = e.data + (e.base + row) * e.width
    cdef uint8_t mag[32]
    cdef int i, carry = 1, bits = 0, n
    cdef bint negative = (p[e.width - 1] & 0x80) != 0
    for i in range(e.width):
        if negative:
            carry += <uint8_t>~p[i]
            mag[i] = <uint8_t>carry
            carry >>= 8
        else:
            mag[i] = p[i]
    for i in range(e.width - 1, -1, -1):
        if mag[i] != e.limit[i]:
            if mag[i] > e.limit[i]:
                return failed(x, e, X_PRECISION)
            break
        if i == 0:
            return failed(x, e, X_PRECISION)
    for i in range(e.width - 1, -1, -1):
        if mag[i]:
            bits = 8 * i + 8
            while not (mag[i] >> ((bits - 1) & 7)) & 1:
                bits -= 1
            break
    if e.code == E_DEC_BYTES:
        n = (bits + 8) // 8
        if put_long(x, n) < 0:
            return -1
    else:
        n = e.size
        if bits + 1 > 8 * n:
            return failed(x, e, X_PRECISION)
    if room(x, n) < 0:
        return -1
    for i in range(n):
        x.out.data[x.out.len + n - 1 - i] = <char>(p[i] if i < e.width else (0xFF if negative else 0))
    x.out.len += n
    return 0


cdef int write_uuid(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    cdef const char* hexd = b"0123456789abcdef"
    cdef const uint8_t* p = e.data + (e.base + row) * 16
    cdef int i, j = 0
    if put_long(x, 36) < 0 or room(x, 36) < 0:
        return -1
    cdef char* q = x.out.data + x.out.len
    for i in range(16):
        if i == 4 or i == 6 or i == 8 or i == 10:
            q[j] = 45
            j += 1
        q[j] = hexd[p[i] >> 4]
        q[j + 1] = hexd[p[i] & 15]
        j += 2
    x.out.len += 36
    return 0


cdef int write_duration(Ctx* x, Enc* e, int64_t row) noexcept nogil:
    """Arrow's month_day_nano interval as Avro's duration (three
    little-endian uint32: months, days, milliseconds)."""
    cdef const uint8_t* p = e.data + (e.base + row) * 16
    cdef int32_t months, days
    cdef int64_t nanos
    cdef uint32_t out[3]
    memcpy(&months, p, 4)
    memcpy(&days, p + 4, 4)
    memcpy(&nanos, p + 8, 8)
    if months < 0 or days < 0 or nanos < 0 or nanos % 1000000 or nanos / 1000000 > <int64_t>0xFFFFFFFF:
        return failed(x, e, X_RANGE)
    out[0] = months
    out[1] = days
    out[2] = <uint32_t>(nanos / 1000000)
    return put_raw(x, out, 12)


# ------------------------------------------------------------------ a column
def encode(object spec not None, int64_t rows, bytes header not None, Columns out not None):
    """Rows 0..``rows`` of ``spec``'s arrays as Avro values, each behind
    ``header``, appended to ``out`` (a binary ``Columns``); a row whose top
    array is null (and that is no union) becomes a null value. Returns
    ``None``, or ``(row, error, path)`` for a row that cannot be written
    (``out`` then holds the rows before it and part of it: reset it)."""
    cdef _Bound b = _Bound()
    cdef Ctx x
    cdef Col* col = out.root
    cdef int64_t row
    cdef const uint8_t* h = header
    cdef Py_ssize_t hn = len(header)
    cdef int status = 0
    b.root = <Enc*>calloc(1, sizeof(Enc))
    if b.root == NULL:
        raise MemoryError()
    bind(b, b.root, spec)
    x.out = &col.data
    x.err = 0
    x.at = NULL
    with nogil:
        for row in range(rows):
            if is_null(b.root, row):           # a null row: a null value (as confluent-kafka's None)
                col_null(col)
            elif put_raw(&x, h, hn) < 0 or write(&x, b.root, row) < 0:
                status = 1
            elif col.data.len > INT32_MAX:
                x.err = X_TOO_BIG
                status = 1
            else:
                col_offset(col, col.data.len)
                col_mark(col, True)
            if status or out.err:
                break
    if out.err:
        return (row, X_MEMORY if out.err == TC_NOMEM else X_TOO_BIG, "")
    if status:
        return (row, x.err, b.paths[x.at.path] if x.at != NULL else "")
    return None
