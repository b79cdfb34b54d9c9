# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Reading Arrow columns that a caller hands to ``Producer.send_arrow``
(send.pyx), at C level and bounds checked: the caller's arrays are not
trusted (``pa.Array.from_buffers`` builds arrays nobody validated), so every
offset is checked against its buffer before a byte is read.

A column arrives as its Arrow buffers (objects with the buffer protocol,
validity None for "no nulls"), the array's offset and length; the Python
side (``producer.py``) has already turned strings into binary views and
large types into these. ``open_*`` take a view of each buffer (released by
``close_*``) and check the buffers' sizes against offset + length; the
getters then only check the value offsets they read."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memset


cdef extern from *:
    """
    /* past any real column: offsets and lengths above it are refused, so no size computed from them overflows */
    #define KWIRE_MAX_ELEMENTS (((Py_ssize_t)1) << 56)
    """
    const Py_ssize_t MAX_ELEMENTS "KWIRE_MAX_ELEMENTS"


cdef struct BinCol:               # a binary (or utf8) column: int32 offsets
    Py_buffer vbuf, obuf, dbuf
    bint has_valid, opened
    const uint8_t* valid          # validity bitmap (bit offset + i), or NULL: none null
    const int32_t* off            # offsets[offset + i], offsets[offset + i + 1]
    const char* data
    Py_ssize_t data_len
    Py_ssize_t offset
    Py_ssize_t length


cdef struct IntCol:               # an int32 or int64 column (partitions, timestamps)
    Py_buffer vbuf, dbuf
    bint has_valid, opened, wide
    const uint8_t* valid
    const int32_t* i32
    const int64_t* i64
    Py_ssize_t offset
    Py_ssize_t length


cdef inline int _view(Py_buffer* view, object o, Py_ssize_t need, str what) except -1:
    PyObject_GetBuffer(o, view, PyBUF_SIMPLE)
    if view.len < need:
        PyBuffer_Release(view)
        raise ValueError(f"Arrow column {what}: a buffer of {view.len} bytes, {need} needed for its length")
    return 0


cdef inline int _view_offsets(Py_buffer* view, object offsets, Py_ssize_t offset, Py_ssize_t length,
                              str what) except -1:
    """The view of an offsets buffer: ``offset + length + 1`` int32 values,
    or none at all for an array of no values (Arrow lets a zero-length
    array's offsets buffer be empty or absent, as Spark 4.0's writer sends
    the empty key and value arrays of a headers column without a header);
    no value of such an array is ever read."""
    if length == 0:
        return _view(view, offsets if offsets is not None else b"", 0, what)
    return _view(view, offsets, (offset + length + 1) * 4, what)


cdef inline Py_ssize_t _bitmap_bytes(Py_ssize_t bits) noexcept nogil:
    return (bits + 7) // 8


cdef inline int _open_valid(Py_buffer* view, bint* has, const uint8_t** valid, object validity, Py_ssize_t offset,
                            Py_ssize_t length, str what) except -1:
    """The validity bitmap's view (none for None), checked, after checking
    ``offset`` and ``length``."""
    if offset < 0 or length < 0:
        raise ValueError(f"Arrow column {what}: negative offset or length")
    if offset > MAX_ELEMENTS or length > MAX_ELEMENTS:      # no (offset + length + 1) * 8 can overflow
        raise ValueError(f"Arrow column {what}: offset {offset} or length {length} past any buffer")
    if validity is not None:
        _view(view, validity, _bitmap_bytes(offset + length), what)
        has[0] = True
        valid[0] = <const uint8_t*>view.buf
    return 0


cdef inline void _close_valid(Py_buffer* view, bint* has) noexcept:
    if has[0]:
        has[0] = False
        PyBuffer_Release(view)


cdef inline int open_bin(BinCol* c, object validity, object offsets, object data, Py_ssize_t offset,
                         Py_ssize_t length, str what) except -1:
    """Views of a binary column's buffers, checked against ``offset`` + ``length``."""
    memset(c, 0, sizeof(BinCol))
    _open_valid(&c.vbuf, &c.has_valid, &c.valid, validity, offset, length, what)
    c.offset = offset
    c.length = length
    try:
        _view_offsets(&c.obuf, offsets, offset, length, what)
        try:
            _view(&c.dbuf, data if data is not None else b"", 0, what)
        except BaseException:
            PyBuffer_Release(&c.obuf)
            raise
    except BaseException:
        _close_valid(&c.vbuf, &c.has_valid)
        raise
    c.off = <const int32_t*>c.obuf.buf
    c.data = <const char*>c.dbuf.buf
    c.data_len = c.dbuf.len
    c.opened = True
    return 0


cdef inline void close_bin(BinCol* c) noexcept:
    if not c.opened:
        return
    c.opened = False
    _close_valid(&c.vbuf, &c.has_valid)
    PyBuffer_Release(&c.obuf)
    PyBuffer_Release(&c.dbuf)


cdef inline bint is_valid(const uint8_t* valid, Py_ssize_t bit) noexcept nogil:
    return valid == NULL or (valid[bit >> 3] >> (bit & 7)) & 1


cdef inline int bin_get(BinCol* c, Py_ssize_t i, const char** p, Py_ssize_t* n) noexcept nogil:
    """Value ``i`` (0 <= i < length): ``p``/``n``, ``n`` -1 for null; -1 if
    its offsets point outside the data buffer or run backwards."""
    cdef Py_ssize_t j = c.offset + i
    cdef int64_t lo, hi
    if not is_valid(c.valid, j):
        p[0] = NULL
        n[0] = -1
        return 0
    lo = c.off[j]
    hi = c.off[j + 1]
    if lo < 0 or hi < lo or hi > c.data_len:
        return -1
    p[0] = c.data + lo
    n[0] = <Py_ssize_t>(hi - lo)
    return 0


cdef inline int open_int(IntCol* c, object validity, object data, Py_ssize_t offset, Py_ssize_t length,
                         bint wide, str what) except -1:
    memset(c, 0, sizeof(IntCol))
    _open_valid(&c.vbuf, &c.has_valid, &c.valid, validity, offset, length, what)
    c.offset = offset
    c.length = length
    c.wide = wide
    try:
        _view(&c.dbuf, data, (offset + length) * (8 if wide else 4), what)
    except BaseException:
        _close_valid(&c.vbuf, &c.has_valid)
        raise
    c.i32 = <const int32_t*>c.dbuf.buf
    c.i64 = <const int64_t*>c.dbuf.buf
    c.opened = True
    return 0


cdef inline void close_int(IntCol* c) noexcept:
    if not c.opened:
        return
    c.opened = False
    _close_valid(&c.vbuf, &c.has_valid)
    PyBuffer_Release(&c.dbuf)


cdef inline bint int_get(IntCol* c, Py_ssize_t i, int64_t* out) noexcept nogil:
    """Value ``i`` in ``out``; False if it is null."""
    cdef Py_ssize_t j = c.offset + i
    if not is_valid(c.valid, j):
        return False
    out[0] = c.i64[j] if c.wide else c.i32[j]
    return True


cdef struct ListCol:              # a list column's rows: int32 offsets into a child of ``child_len`` values
    Py_buffer vbuf, obuf
    bint has_valid, opened
    const uint8_t* valid
    const int32_t* off
    Py_ssize_t offset
    Py_ssize_t length
    Py_ssize_t child_len


cdef inline int open_list(ListCol* c, object validity, object offsets, Py_ssize_t offset, Py_ssize_t length,
                          Py_ssize_t child_len, str what) except -1:
    memset(c, 0, sizeof(ListCol))
    if child_len < 0 or child_len > MAX_ELEMENTS:
        raise ValueError(f"Arrow column {what}: {child_len} entries")
    _open_valid(&c.vbuf, &c.has_valid, &c.valid, validity, offset, length, what)
    c.offset = offset
    c.length = length
    c.child_len = child_len
    try:
        _view_offsets(&c.obuf, offsets, offset, length, what)
    except BaseException:
        _close_valid(&c.vbuf, &c.has_valid)
        raise
    c.off = <const int32_t*>c.obuf.buf
    c.opened = True
    return 0


cdef inline void close_list(ListCol* c) noexcept:
    if not c.opened:
        return
    c.opened = False
    _close_valid(&c.vbuf, &c.has_valid)
    PyBuffer_Release(&c.obuf)


cdef inline int list_get(ListCol* c, Py_ssize_t i, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Row ``i``'s entries: child values ``lo`` to ``hi`` (none for a null
    row); -1 if its offsets point outside the child or run backwards."""
    cdef Py_ssize_t j = c.offset + i
    cdef int64_t a, b
    if not is_valid(c.valid, j):
        lo[0] = hi[0] = 0
        return 0
    a = c.off[j]
    b = c.off[j + 1]
    if a < 0 or b < a or b > c.child_len:
        return -1
    lo[0] = <Py_ssize_t>a
    hi[0] = <Py_ssize_t>b
    return 0
