# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Byte-level helpers of kwire's compiled core, ``cdef inline`` so the
modules that cimport them compile them in place (no call across modules),
but for two rare paths kept out of line: growing a buffer (a static C
function, below) and borrowing anything but None or bytes (buffers.pyx).
Inlined, they made their callers' per-record code bigger and slower.

* :c:type:`Reader`, a cursor over a byte range whose every read is bounds
  checked and whose first error sticks (later reads return zero and leave
  the error in place), so parsing code checks ``r.err`` once per record
  rather than after every field;
* :c:type:`GBuf`, a growable buffer, and the ``put_*`` writers (big-endian
  for the Kafka formats, native order for Arrow columns, zigzag varints);
* :c:type:`Bytes`, a borrowed view of a bytes-like argument.
"""

from cpython.buffer cimport PyBuffer_Release
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from libc.stdint cimport INT32_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kwire._core.consts cimport E_NEG_LENGTH, E_OK, E_TRUNC, E_VARINT


# ------------------------------------------------------------------- reader
cdef struct Reader:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end
    int err


cdef inline void rd_init(Reader* r, const uint8_t* p, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    r.p = p
    r.pos = pos
    r.end = end
    r.err = E_OK


cdef inline bint rd_need(Reader* r, Py_ssize_t n) noexcept nogil:
    """True if ``n`` more bytes can be read; otherwise sets E_TRUNC."""
    if r.err:
        return False
    if n < 0 or r.end - r.pos < n:
        r.err = E_TRUNC
        return False
    return True


cdef inline uint32_t load_be32(const uint8_t* q) noexcept nogil:
    return (<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3]


cdef inline uint64_t load_be64(const uint8_t* q) noexcept nogil:
    return (<uint64_t>load_be32(q) << 32) | load_be32(q + 4)


cdef inline int8_t rd_i8(Reader* r) noexcept nogil:
    if not rd_need(r, 1):
        return 0
    r.pos += 1
    return <int8_t>r.p[r.pos - 1]


cdef inline int16_t rd_i16(Reader* r) noexcept nogil:
    if not rd_need(r, 2):
        return 0
    r.pos += 2
    return <int16_t>((<uint32_t>r.p[r.pos - 2] << 8) | r.p[r.pos - 1])


cdef inline uint32_t rd_u32(Reader* r) noexcept nogil:
    if not rd_need(r, 4):
        return 0
    r.pos += 4
    return load_be32(r.p + r.pos - 4)


cdef inline int32_t rd_i32(Reader* r) noexcept nogil:
    return <int32_t>rd_u32(r)


cdef inline int64_t rd_i64(Reader* r) noexcept nogil:
    if not rd_need(r, 8):
        return 0
    r.pos += 8
    return <int64_t>load_be64(r.p + r.pos - 8)


cdef inline uint64_t rd_uvarint(Reader* r, int max_bytes, uint8_t last_max) noexcept nogil:
    """An unsigned varint of at most ``max_bytes`` (>= 3) bytes whose last
    byte is at most ``last_max`` (so the value fits its type); sets E_VARINT
    otherwise. One- and two-byte varints (most lengths and deltas) take the
    inlined fast path."""
    cdef const uint8_t* q
    if r.err == E_OK and r.end - r.pos >= 2:
        q = r.p + r.pos
        if q[0] < 0x80:
            r.pos += 1
            return q[0]
        if q[1] < 0x80:
            r.pos += 2
            return (q[0] & 0x7F) | (<uint64_t>q[1] << 7)
    return rd_uvarint_long(r, max_bytes, last_max)


cdef inline uint64_t rd_uvarint_long(Reader* r, int max_bytes, uint8_t last_max) noexcept nogil:
    """:c:func:`rd_uvarint` of a varint that is not one or two bytes long
    (or that the buffer may cut)."""
    cdef uint64_t v = 0
    cdef uint8_t b
    cdef int i
    if r.err:
        return 0
    for i in range(max_bytes):
        if r.pos >= r.end:
            r.err = E_TRUNC
            return 0
        b = r.p[r.pos]
        r.pos += 1
        if b < 0x80:
            if i == max_bytes - 1 and b > last_max:
                break
            return v | (<uint64_t>b << (7 * i))
        v |= <uint64_t>(b & 0x7F) << (7 * i)
    r.err = E_VARINT
    return 0


cdef inline int32_t rd_varint(Reader* r) noexcept nogil:
    """A zigzag varint of at most 5 bytes whose value fits 32 bits."""
    cdef uint32_t v = <uint32_t>rd_uvarint(r, 5, 0x0F)
    return <int32_t>(v >> 1) ^ -<int32_t>(v & 1)


cdef inline int64_t rd_varlong(Reader* r) noexcept nogil:
    """A zigzag varint of at most 10 bytes whose value fits 64 bits."""
    cdef uint64_t v = rd_uvarint(r, 10, 0x01)
    return <int64_t>(v >> 1) ^ -<int64_t>(v & 1)


cdef inline const uint8_t* rd_bytes(Reader* r, int32_t n) noexcept nogil:
    """``n`` bytes (a length already read; -1 means null and returns NULL)."""
    if n < 0:
        if n < -1 and not r.err:
            r.err = E_NEG_LENGTH
        return NULL
    if not rd_need(r, n):
        return NULL
    r.pos += n
    return r.p + r.pos - n


cdef inline int64_t add_wrap(int64_t a, int64_t b) noexcept nogil:
    # hostile offsets/timestamps must not be signed-overflow UB
    return <int64_t>(<uint64_t>a + <uint64_t>b)


# ----------------------------------------------------------- growable buffer
# GBuf and gbuf_grow are C, so that gbuf_grow is a static function kept out
# of line (noinline) in every module that cimports this, as the compiler kept
# it when the core was one module: the callers' per-record code stays small.
# Inlined into them (which a module smaller than the old one invites), it
# slowed them; called through another module, the calls were opaque to the
# compiler, and slowed them too.
cdef extern from *:
    """
    typedef struct {               /* a growable buffer (malloc'd unless said otherwise) */
        char* data;
        Py_ssize_t len;
        Py_ssize_t cap;
    } kwire_GBuf;

    /* Room for extra more bytes in g (doubling, from 4 KiB); -1 if out of memory (g unchanged). */
    #if defined(__GNUC__) || defined(__clang__)
    __attribute__((unused, noinline))
    #elif defined(_MSC_VER)
    __declspec(noinline)
    #endif
    static int kwire_gbuf_grow(kwire_GBuf* g, Py_ssize_t extra) {
        Py_ssize_t want = g->len + extra;
        Py_ssize_t cap = g->cap ? g->cap : 4096;
        char* p;
        while (cap < want)
            cap *= 2;
        p = (char*)realloc(g->data, (size_t)cap);
        if (p == NULL)
            return -1;
        g->data = p;
        g->cap = cap;
        return 0;
    }
    """
    ctypedef struct GBuf "kwire_GBuf":
        char* data
        Py_ssize_t len
        Py_ssize_t cap
    int gbuf_grow "kwire_gbuf_grow"(GBuf* g, Py_ssize_t extra) noexcept nogil


cdef inline int gbuf_reserve(GBuf* g, Py_ssize_t extra) noexcept nogil:
    if g.len + extra <= g.cap:
        return 0
    return gbuf_grow(g, extra)


cdef inline void put_i32(GBuf* g, int32_t v) noexcept nogil:   # native order (Arrow)
    memcpy(g.data + g.len, &v, 4)
    g.len += 4


cdef inline void put_i64(GBuf* g, int64_t v) noexcept nogil:
    memcpy(g.data + g.len, &v, 8)
    g.len += 8


cdef inline int put_bit(GBuf* g, int64_t i, bint v) noexcept nogil:
    cdef Py_ssize_t need = (i >> 3) + 1
    if need > g.len:
        if gbuf_reserve(g, need - g.len) < 0:
            return -1
        g.len = need
    if v:
        g.data[i >> 3] |= <char>(1 << (i & 7))
    else:
        g.data[i >> 3] &= <char>~(1 << (i & 7))
    return 0


# ------------------------------------------------------------------ writing
cdef inline void put_be16(GBuf* g, int16_t v) noexcept nogil:
    cdef uint8_t* q = <uint8_t*>g.data + g.len
    q[0] = <uint8_t>(<uint16_t>v >> 8)
    q[1] = <uint8_t>v
    g.len += 2


cdef inline void store_be32(char* dst, uint32_t v) noexcept nogil:
    cdef uint8_t* q = <uint8_t*>dst
    q[0] = <uint8_t>(v >> 24)
    q[1] = <uint8_t>(v >> 16)
    q[2] = <uint8_t>(v >> 8)
    q[3] = <uint8_t>v


cdef inline void put_be32(GBuf* g, int32_t v) noexcept nogil:
    store_be32(g.data + g.len, <uint32_t>v)
    g.len += 4


cdef inline void put_be64(GBuf* g, int64_t v) noexcept nogil:
    store_be32(g.data + g.len, <uint32_t>(<uint64_t>v >> 32))
    store_be32(g.data + g.len + 4, <uint32_t>v)
    g.len += 8


cdef inline uint64_t zigzag(int64_t v) noexcept nogil:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline Py_ssize_t uvarint_size(uint64_t u) noexcept nogil:
    cdef Py_ssize_t n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n


cdef inline Py_ssize_t varint_size(int64_t v) noexcept nogil:
    return uvarint_size(zigzag(v))


cdef inline void put_uvarint(GBuf* g, uint64_t u) noexcept nogil:
    """An unsigned varint (Protobuf's); room for ten bytes is the caller's to reserve."""
    cdef uint8_t* q = <uint8_t*>g.data + g.len
    while u >= 0x80:
        q[0] = <uint8_t>(u | 0x80)
        q += 1
        u >>= 7
    q[0] = <uint8_t>u
    g.len = <char*>q + 1 - g.data


cdef inline void put_varint(GBuf* g, int64_t v) noexcept nogil:
    put_uvarint(g, zigzag(v))


cdef inline void put_raw(GBuf* g, const char* p, Py_ssize_t n) noexcept nogil:
    if n > 0:
        memcpy(g.data + g.len, p, n)
        g.len += n


cdef struct Bytes:           # a borrowed view of a bytes-like argument
    const char* p
    Py_ssize_t n             # -1 for None
    bint release
    Py_buffer view


cdef int borrow_other(object o, Bytes* b, str what) except -1     # buffers.pyx


cdef inline int borrow(object o, Bytes* b, str what) except -1:
    """Borrow ``o`` (None, or bytes-like and at most INT32_MAX bytes) into
    ``b``; release it with ``unborrow``. None and bytes take the inlined
    path, anything else (and every error) ``borrow_other``."""
    b.release = False
    if o is None:
        b.p = NULL
        b.n = -1
        return 0
    if PyBytes_Check(o) and PyBytes_GET_SIZE(o) <= INT32_MAX:
        b.p = PyBytes_AS_STRING(o)
        b.n = PyBytes_GET_SIZE(o)
        return 0
    return borrow_other(o, b, what)


cdef inline void unborrow(Bytes* b) noexcept:
    if b.release:
        PyBuffer_Release(&b.view)
        b.release = False
