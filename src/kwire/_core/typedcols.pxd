# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Typed Arrow columns built by the compiled format decoders (Avro,
Protobuf): a tree of :c:type:`Col`, one per Arrow array of the reader's
type (a struct's fields, a list's items, a map's entries are its children),
each holding its validity bitmap, offsets and values in growable buffers
that :class:`Columns` (typedcols.pyx) hands to Arrow without a copy.

Appending is ``cdef inline`` and takes no GIL. An append that cannot get
memory or would overflow Arrow's 32-bit offsets sets the column tree's
``err`` (see :c:func:`col_fail`); decoders check ``tc.err`` once per row.

A column's validity bitmap exists only from its first null: until then
``valid.len`` is 0 and every row is valid (most columns never pay for one).
"""

from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t
from libc.string cimport memcpy, memset

from kwire._core.buffers cimport GBuf, gbuf_reserve, put_bit, put_i32


cdef enum ColKind:
    TC_NULL        # no buffers (Arrow null type)
    TC_BOOL        # values as bits
    TC_FIXED       # ``width`` bytes a value: ints, floats, dates, times, timestamps, decimals, fixed binary
    TC_BINARY      # int32 offsets + data: binary, string
    TC_LIST        # int32 offsets + one child
    TC_MAP         # int32 offsets + one child: the entries struct (key, value)
    TC_STRUCT      # its children, one row each per row
    TC_DICT        # int32 indices into a dictionary the format gives when finishing (enums)

cdef enum:
    TC_OK = 0
    TC_NOMEM = 1       # out of memory
    TC_TOO_BIG = 2     # past Arrow's 32-bit offsets (2 GiB of one column's data in one batch)


cdef struct Col:
    int kind
    int width              # TC_FIXED: bytes a value (TC_DICT: 4)
    int64_t length
    int64_t nulls
    GBuf valid             # empty until the first null
    GBuf offs              # TC_BINARY, TC_LIST, TC_MAP: int32 offsets, starting with 0
    GBuf data              # values (bits for TC_BOOL)
    Py_ssize_t hint[3]     # the sizes valid, offs and data last reached: the next rows' first allocation
    Col* child             # nchild children
    int nchild
    bint nullable          # its field may hold nulls (a non-nullable one gets a placeholder under a null parent)
    int* err               # the tree's error (one int, shared)


cdef inline void col_fail(Col* c, int code) noexcept nogil:
    if c.err[0] == TC_OK:
        c.err[0] = code


cdef inline int col_mark(Col* c, bint valid) noexcept nogil:
    """Row ``c.length`` is (not) null; the row count moves on. -1 on no memory."""
    if valid and c.nulls == 0:
        c.length += 1
        return 0
    return col_mark_bitmap(c, valid)


cdef int col_mark_bitmap(Col* c, bint valid) noexcept nogil     # typedcols.pyx: a column with nulls


cdef inline char* col_slot(Col* c) noexcept nogil:
    """Room for one TC_FIXED value (``width`` bytes), marked valid; NULL on no memory."""
    cdef char* p
    if gbuf_reserve(&c.data, c.width) < 0:
        col_fail(c, TC_NOMEM)
        return NULL
    p = c.data.data + c.data.len
    c.data.len += c.width
    col_mark(c, True)
    return p


cdef inline void col_i32(Col* c, int32_t v) noexcept nogil:
    cdef char* p = col_slot(c)
    if p != NULL:
        memcpy(p, &v, 4)


cdef inline void col_i64(Col* c, int64_t v) noexcept nogil:
    cdef char* p = col_slot(c)
    if p != NULL:
        memcpy(p, &v, 8)


cdef inline void col_f32(Col* c, float v) noexcept nogil:
    cdef char* p = col_slot(c)
    if p != NULL:
        memcpy(p, &v, 4)


cdef inline void col_f64(Col* c, double v) noexcept nogil:
    cdef char* p = col_slot(c)
    if p != NULL:
        memcpy(p, &v, 8)


cdef inline void col_bool(Col* c, bint v) noexcept nogil:
    if put_bit(&c.data, c.length, v) < 0:
        col_fail(c, TC_NOMEM)
        return
    col_mark(c, True)


cdef inline int col_offset(Col* c, int64_t end) noexcept nogil:
    """Appends ``end`` to ``c``'s offsets (room reserved here); -1 past 32 bits or on no memory."""
    if end > INT32_MAX:
        col_fail(c, TC_TOO_BIG)
        return -1
    if gbuf_reserve(&c.offs, 4) < 0:
        col_fail(c, TC_NOMEM)
        return -1
    put_i32(&c.offs, <int32_t>end)
    return 0


cdef inline void col_bytes(Col* c, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """One TC_BINARY value of ``n`` bytes at ``p``."""
    if n > INT32_MAX - c.data.len:
        col_fail(c, TC_TOO_BIG)
        return
    if gbuf_reserve(&c.data, n) < 0:
        col_fail(c, TC_NOMEM)
        return
    if n > 0:
        memcpy(c.data.data + c.data.len, p, n)
        c.data.len += n
    if col_offset(c, c.data.len) == 0:
        col_mark(c, True)


cdef inline void col_end_items(Col* c) noexcept nogil:
    """Ends a TC_LIST or TC_MAP row whose items were appended to its child."""
    if col_offset(c, c.child[0].length) == 0:
        col_mark(c, True)


cdef inline void col_null(Col* c) noexcept nogil:
    """A null row: no value (zeros, an empty range). A struct's children
    get a row each, so they stay as long as it: a null, or for a field that
    may not hold one (Parquet refuses them even under a null struct) a
    placeholder (:c:func:`col_placeholder`)."""
    col_blank(c)
    col_mark(c, False)


cdef void col_blank(Col* c) noexcept nogil           # typedcols.pyx: a row's zero value, not yet marked
cdef void col_placeholder(Col* c) noexcept nogil     # typedcols.pyx: a valid row of zero values


cdef class Columns:
    """The column tree of one Arrow type (typedcols.pyx): filled by a
    decoder, then :meth:`finish`-ed into a ``pyarrow.Array`` whose buffers
    are this tree's memory (no copy); the tree starts empty again."""
    cdef Col* root
    cdef int err
    cdef object arrow_type            # the pyarrow type of root
    cdef list dictionaries            # TC_DICT columns' dictionaries, in tree order
    cdef list types                   # the pyarrow type of each column, in tree order
    cdef Py_ssize_t ncols

    cdef int reset(self) except -1
    cpdef object finish(self)
    cdef Col* column(self, Py_ssize_t index) except NULL
    cdef object _finish(self, Col* c, list at)
