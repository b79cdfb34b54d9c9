# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""kwire's compiled record codec.

Reads and writes every Kafka record format from untrusted bytes:

* RecordBatch v2 (magic 2), the format of Kafka 0.11 and later;
* the legacy message sets, magic 0 and 1, including compressed wrappers;
* Kafka 0.7 messages (byte offsets, optional compression byte).

Design
------
All reads of input go through :c:type:`Reader`, a cursor over a byte range
whose every read is bounds checked and whose first error sticks (later reads
return zero and leave the error in place), so parsing code checks ``r.err``
once per record rather than after every field. Errors are codes; they become
Python exceptions only at the driver level, which is what lets the columnar
decoder parse records with the GIL released.

A single driver (:class:`_Driver`) walks batch boundaries, handles a cut at the
end of the buffer, checks CRCs, decompresses and unwraps legacy wrappers. It
hands each batch to a sink: Python :class:`Record` objects
(:class:`Decoder`) or Arrow column buffers (:class:`ColumnarDecoder`).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_Resize
from cpython.bytes cimport (PyBytes_AS_STRING, PyBytes_Check, PyBytes_CheckExact, PyBytes_FromStringAndSize,
                            PyBytes_GET_SIZE)
from cpython.object cimport PyObject
from cpython.list cimport PyList_CheckExact
from cpython.long cimport PyLong_CheckExact
from cpython.tuple cimport PyTuple_CheckExact
from cpython.unicode cimport PyUnicode_Check, PyUnicode_CheckExact, PyUnicode_DecodeUTF8
from libc.stdint cimport (INT32_MAX, INT64_MAX, INT64_MIN, int8_t, int16_t, int32_t, int64_t,
                          uint8_t, uint16_t, uint32_t, uint64_t)
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp, memcpy, memset

import os as _os

import google_crc32c as _google_crc32c
from time import monotonic as _monotonic

from kwire import compression as _compression
from kwire.errors import (CorruptRecordError, CrcMismatchError, DecompressionBombError, DecompressionError, KwireError,
                          UnsupportedCodecError)

cdef extern from "zlib.h" nogil:
    unsigned long _zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf, unsigned int n)

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    const char* bytes_data "PyBytes_AS_STRING"(PyObject* o) nogil     # for bytes held by reference
    Py_ssize_t bytes_size "PyBytes_GET_SIZE"(PyObject* o) nogil
    void Py_XDECREF_ "Py_XDECREF"(PyObject* o)
    void Py_INCREF_ptr "Py_INCREF"(PyObject* o)

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

# CRC32C comes from google-crc32c's C library (hardware CRC instructions where
# the CPU has them). Its Python functions take only ``bytes`` and keep the GIL
# for inputs under 1 MiB, so kwire calls the library's C function directly,
# found through the extension module that links it: no copy, no GIL.
ctypedef uint32_t (*crc32c_extend_t)(uint32_t crc, const uint8_t* data, size_t n) noexcept nogil
cdef crc32c_extend_t _crc32c_extend = NULL


def _native_entry_points(module, names):
    """Addresses of ``names`` in the shared library of extension ``module``
    (which need not be imported), or None with the reason."""
    import ctypes
    import importlib.util
    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin:
            return None, f"{module} not found"
        lib = ctypes.CDLL(spec.origin)
        return [ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names], None
    except (ImportError, OSError, AttributeError) as e:
        return None, repr(e)


def _crc32c_address():
    if _google_crc32c.implementation != "c":
        raise ImportError(
            "kwire needs google-crc32c's compiled extension for CRC32C at hardware "
            "speed, but it loaded its pure-Python fallback; reinstall google-crc32c "
            "from a wheel for this platform")
    found, why = _native_entry_points("google_crc32c._crc32c", ("crc32c_extend",))
    if found is None:
        raise ImportError(f"kwire could not find crc32c_extend in google-crc32c's library: {why}")
    return found[0]


_crc32c_extend = <crc32c_extend_t><size_t>_crc32c_address()
if _crc32c_extend(0, <const uint8_t*>b"123456789", 9) != 0xE3069283:
    raise ImportError("google-crc32c's crc32c_extend gave a wrong check value")


cdef inline uint32_t crc32c(const void* p, Py_ssize_t n) noexcept nogil:
    return _crc32c_extend(0, <const uint8_t*>p, <size_t>n)


cdef object _decompress = _compression.decompress
cdef object _compress = _compression.compress
cdef object _codec_id = _compression.codec_id

# Producers compress many batches per turn of their sender thread. Through
# the codec packages' Python functions each batch would release and retake
# the GIL, and a busy sending thread makes every retake wait out a GIL switch
# interval (5 ms). So lz4 and zstd are called through the C entry points of
# the libraries those packages link (found like CRC32C above), and
# :func:`build_batches` compresses every batch of a turn without the GIL.
# Where an entry point cannot be found, or its output differs from the
# package's, the Python functions are used and a warning says so.
cdef struct LZ4FFrameInfo:          # lz4frame.h's LZ4F_frameInfo_t (v1.8 and later)
    int blockSizeID                 # enums are ints
    int blockMode
    int contentChecksumFlag
    int frameType
    unsigned long long contentSize
    unsigned dictID
    int blockChecksumFlag

cdef struct LZ4FPrefs:              # lz4frame.h's LZ4F_preferences_t
    LZ4FFrameInfo frameInfo
    int compressionLevel
    unsigned autoFlush
    unsigned favorDecSpeed
    unsigned reserved[3]

ctypedef size_t (*lz4f_bound_t)(size_t n, const LZ4FPrefs* prefs) noexcept nogil
ctypedef size_t (*lz4f_compress_t)(void* dst, size_t cap, const void* src, size_t n,
                                   const LZ4FPrefs* prefs) noexcept nogil
ctypedef unsigned (*is_error_t)(size_t code) noexcept nogil
ctypedef void* (*zstd_create_t)() noexcept nogil
ctypedef size_t (*zstd_free_t)(void* cctx) noexcept nogil
ctypedef size_t (*zstd_bound_t)(size_t n) noexcept nogil
ctypedef size_t (*zstd_compress_t)(void* cctx, void* dst, size_t cap, const void* src, size_t n,
                                   int level) noexcept nogil

ctypedef size_t (*lz4f_dctx_create_t)(void** dctx, unsigned version) noexcept nogil
ctypedef size_t (*lz4f_dctx_free_t)(void* dctx) noexcept nogil
ctypedef void (*lz4f_dctx_reset_t)(void* dctx) noexcept nogil
ctypedef size_t (*lz4f_decompress_t)(void* dctx, void* dst, size_t* dst_size, const void* src, size_t* src_size,
                                     const void* options) noexcept nogil

cdef lz4f_dctx_create_t _lz4f_dctx_create = NULL
cdef lz4f_dctx_free_t _lz4f_dctx_free = NULL
cdef lz4f_dctx_reset_t _lz4f_dctx_reset = NULL
cdef lz4f_decompress_t _lz4f_decompress = NULL
cdef lz4f_bound_t _lz4f_bound = NULL
cdef lz4f_compress_t _lz4f_compress = NULL
cdef is_error_t _lz4f_is_error = NULL
cdef zstd_create_t _zstd_create = NULL
cdef zstd_free_t _zstd_free = NULL
cdef zstd_bound_t _zstd_bound = NULL
cdef zstd_compress_t _zstd_compress = NULL
cdef is_error_t _zstd_is_error = NULL


cdef inline void lz4f_prefs(LZ4FPrefs* prefs, int level) noexcept nogil:
    # like Kafka's Java writer and compression.py: independent 64 KiB blocks, no checksums, no size
    memset(prefs, 0, sizeof(LZ4FPrefs))
    prefs.frameInfo.blockSizeID = 4          # LZ4F_max64KB
    prefs.frameInfo.blockMode = 1            # LZ4F_blockIndependent
    prefs.compressionLevel = level


cdef char EMPTY_SRC[1]

cdef struct GBuf:                  # a growable buffer (malloc'd unless said otherwise)
    char* data
    Py_ssize_t len
    Py_ssize_t cap


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
    int mode                       # how the payload is made: 0 copied from src, 3 lz4, 4 zstd (codec ids)
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


cdef Py_ssize_t native_bound(EncodeJob* job) noexcept nogil:
    cdef LZ4FPrefs prefs
    if job.mode == 3:
        lz4f_prefs(&prefs, job.level)
        return <Py_ssize_t>_lz4f_bound(<size_t>job.src_len, &prefs)
    if job.mode == 4:
        return <Py_ssize_t>_zstd_bound(<size_t>job.src_len)
    return job.src_len


cdef Py_ssize_t native_compress(EncodeJob* job, void* zctx) noexcept nogil:
    """Write the payload at ``job.dst``; its size, or -1 if the codec failed."""
    cdef LZ4FPrefs prefs
    cdef size_t n
    if job.mode == 3:
        lz4f_prefs(&prefs, job.level)
        n = _lz4f_compress(job.dst, <size_t>job.cap, job.src, <size_t>job.src_len, &prefs)
        return -1 if _lz4f_is_error(n) else <Py_ssize_t>n
    if job.mode == 4:
        n = _zstd_compress(zctx, job.dst, <size_t>job.cap, job.src, <size_t>job.src_len, job.level)
        return -1 if _zstd_is_error(n) else <Py_ssize_t>n
    if job.dst != job.src:
        memcpy(job.dst, job.src, job.src_len)
    return job.src_len


def _load_native_codecs():
    global _lz4f_is_error, _lz4f_bound, _lz4f_compress
    global _lz4f_dctx_create, _lz4f_dctx_free, _lz4f_dctx_reset, _lz4f_decompress
    global _zstd_create, _zstd_free, _zstd_bound, _zstd_compress, _zstd_is_error
    found, why = _native_entry_points("lz4.frame._frame", (
        "LZ4F_isError", "LZ4F_compressFrameBound", "LZ4F_compressFrame", "LZ4F_createDecompressionContext",
        "LZ4F_freeDecompressionContext", "LZ4F_resetDecompressionContext", "LZ4F_decompress"))
    if found is not None:
        _lz4f_is_error = <is_error_t><size_t>found[0]
        _lz4f_bound = <lz4f_bound_t><size_t>found[1]
        _lz4f_compress = <lz4f_compress_t><size_t>found[2]
        _lz4f_dctx_create = <lz4f_dctx_create_t><size_t>found[3]
        _lz4f_dctx_free = <lz4f_dctx_free_t><size_t>found[4]
        _lz4f_dctx_reset = <lz4f_dctx_reset_t><size_t>found[5]
        _lz4f_decompress = <lz4f_decompress_t><size_t>found[6]
    if not _native_usable("lz4", "compress", _native_compression_check(3, "lz4", why)):
        _lz4f_compress = NULL
    if not _native_usable("lz4", "decompress", _native_lz4_decompression_check(why)):
        _lz4f_decompress = NULL
    found, why = _native_entry_points("zstandard._cffi", ("ZSTD_createCCtx", "ZSTD_freeCCtx",
                                                          "ZSTD_compressBound", "ZSTD_compressCCtx",
                                                          "ZSTD_isError"))
    if found is not None:
        _zstd_create, _zstd_free, _zstd_bound, _zstd_compress, _zstd_is_error = (
            <zstd_create_t><size_t>found[0], <zstd_free_t><size_t>found[1], <zstd_bound_t><size_t>found[2],
            <zstd_compress_t><size_t>found[3], <is_error_t><size_t>found[4])
    if not _native_usable("zstd", "compress", _native_compression_check(4, "zstd", why)):
        _zstd_compress = NULL


def _native_usable(str name, str verb, why):
    """True if ``why`` is None; else a warning says that kwire will
    ``verb`` ``name`` through the Python API, and why."""
    if why is None:
        return True
    import logging
    logging.getLogger("kwire").warning("kwire: %s's C library cannot be used (%s); kwire will %s %s through "
                                       "the Python API, which is slower", name, why, verb, name)
    return False


def _native_compression_check(int codec, str name, why):
    """Why the entry points found for ``codec`` cannot be used (``why`` if
    they were not found), or None: they give the package's bytes at its
    default level."""
    sample = b"kwire native codec check " * 200
    if why is None and _native_compress(codec, sample, 3 if codec == 4 else 0) != _compress(codec, sample, 2, None):
        why = f"its output differs from the {name} package's"
    return why


def _native_lz4_decompression_check(why):
    """Why lz4's decompression entry points cannot be used (``why`` if they
    were not found), or None: they give back what the package compressed.
    Consumers decompress through them into a buffer each decoder reuses;
    the Python API allocates (and maps, and unmaps) room for
    ``max_decompressed_bytes`` for every batch."""
    cdef GBuf out
    cdef int err = 0
    cdef void* dctx = NULL
    cdef bytes frame
    if why is not None:
        return why
    sample = b"kwire native codec check " * 5000
    frame = _compress(3, sample, 2, None)
    memset(&out, 0, sizeof(GBuf))
    try:
        if _lz4f_is_error(_lz4f_dctx_create(&dctx, 100)):
            dctx = NULL
            return "no decompression context"
        if lz4_frame_decompress(dctx, <const uint8_t*>PyBytes_AS_STRING(frame), len(frame), &out, 1 << 20,
                                &err) != len(sample) or out.data[:out.len] != sample:
            return "it does not give back what the lz4 package compressed"
        return None
    finally:
        free(out.data)
        if dctx != NULL:
            _lz4f_dctx_free(dctx)


cdef enum:                # lz4_frame_decompress's errors
    LZ4_CORRUPT = 1
    LZ4_BOMB = 2
    LZ4_NOMEM = 3


cdef inline Py_ssize_t lz4_failed(GBuf* out, int* err, int code) noexcept nogil:
    """Free the partial output of a failed :func:`lz4_frame_decompress`; -1 with ``err`` set to ``code``."""
    free(out.data)
    out.data = NULL
    out.len = out.cap = 0
    err[0] = code
    return -1


cdef Py_ssize_t lz4_frame_decompress(void* dctx, const uint8_t* src, Py_ssize_t n, GBuf* out, Py_ssize_t limit,
                                     int* err) noexcept nogil:
    """Decompress the lz4 frame ``src[:n]`` (all of it: nothing may follow)
    into ``out`` (from its start, growing it up to ``limit`` + 1 bytes);
    its size, or -1 with ``err`` set: LZ4_BOMB past ``limit``, LZ4_CORRUPT for a
    corrupt or cut frame or bytes after it, LZ4_NOMEM. On an error ``out`` is
    freed: the caller keeps it for the next batch, and a bomb has grown it
    to the limit."""
    cdef size_t dst_size, src_size, hint
    cdef Py_ssize_t pos = 0, room, grow
    out.len = 0
    while True:
        room = out.cap - out.len
        if room < 65536 and out.len + room <= limit:
            grow = max(out.cap, 1 << 20)
            if out.len + grow > limit + 1:
                grow = limit + 1 - out.len
            if grow > room:
                if gbuf_reserve(out, grow) < 0:
                    return lz4_failed(out, err, LZ4_NOMEM)
            room = out.cap - out.len
        dst_size = <size_t>room
        src_size = <size_t>(n - pos)
        hint = _lz4f_decompress(dctx, out.data + out.len, &dst_size, src + pos, &src_size, NULL)
        if _lz4f_is_error(hint):
            return lz4_failed(out, err, LZ4_CORRUPT)
        out.len += <Py_ssize_t>dst_size
        pos += <Py_ssize_t>src_size
        if out.len > limit:
            return lz4_failed(out, err, LZ4_BOMB)
        if hint == 0:                         # the frame is complete
            if pos != n:
                return lz4_failed(out, err, LZ4_CORRUPT)
            return out.len
        if dst_size == 0 and src_size == 0:   # no input left, no output to give: the frame is cut
            return lz4_failed(out, err, LZ4_CORRUPT)



def _native_compress(int codec, bytes data, int level):
    """``data`` compressed through the C entry points (the import-time check)."""
    cdef EncodeJob job
    cdef bytes out
    cdef void* zctx = NULL
    memset(&job, 0, sizeof(EncodeJob))
    job.mode = codec
    job.level = level
    job.src = PyBytes_AS_STRING(data)
    job.src_len = PyBytes_GET_SIZE(data)
    job.cap = native_bound(&job)
    out = PyBytes_FromStringAndSize(NULL, job.cap)
    job.dst = PyBytes_AS_STRING(out)
    if codec == 4:
        zctx = _zstd_create()
        if zctx == NULL:
            raise MemoryError()
    n = native_compress(&job, zctx)
    if zctx != NULL:
        _zstd_free(zctx)
    return None if n < 0 else out[:n]



def compiled_codecs(bint decompress=False):
    """The codecs :func:`build_batches` compresses without the GIL (through
    the libraries' C entry points), besides no compression; with
    ``decompress``, those the decoders decompress through them."""
    if decompress:
        return ("lz4",) if _lz4f_decompress != NULL else ()
    return tuple(name for name, ok in (("lz4", _lz4f_compress != NULL), ("zstd", _zstd_compress != NULL)) if ok)


_load_native_codecs()

# ----------------------------------------------------------------- constants
cdef enum:
    LOG_OVERHEAD = 12      # offset int64 + size int32 before every batch/message
    V2_HEADER = 61         # whole v2 batch header, LOG_OVERHEAD included
    V2_CRC_START = 21      # CRC32C covers attributes .. end of batch
    MAGIC_POS = 16         # the magic byte is at the same place in v0, v1, v2
    V0_MIN_SIZE = 14       # crc + magic + attributes + key len + value len
    V1_MIN_SIZE = 22       # v0 + timestamp
    V2_MIN_SIZE = 49       # V2_HEADER - LOG_OVERHEAD

cdef enum:
    ATTR_CODEC = 0x07
    ATTR_LOG_APPEND_TIME = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20

NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

# error codes carried through nogil code
cdef enum:
    E_OK = 0
    E_TRUNC           # a field runs past the end of its batch / record
    E_VARINT          # a varint longer than its type allows
    E_NEG_LENGTH      # a length below -1 (or below 0 where null is not allowed)
    E_SIZE            # a batch / message size field that cannot be right
    E_MAGIC           # unknown magic byte
    E_COUNT           # a negative or impossible count
    E_RECORD_SIZE     # a v2 record whose fields do not fill its length
    E_TRAILING        # bytes left after the last record of a batch
    E_NESTED          # a compressed message inside a compressed wrapper
    E_EMPTY_WRAPPER   # a compressed wrapper with no inner messages
    E_INNER_MAGIC     # inner message magic differs from its wrapper
    E_NULL_PAYLOAD    # compressed wrapper without a value
    E_TIMESTAMP       # a timestamp out of range for the requested unit
    E_NOMEM

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


cdef uint64_t rd_uvarint_long(Reader* r, int max_bytes, uint8_t last_max) noexcept nogil:
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


# -------------------------------------------------------------------- UTF-8
cdef Py_ssize_t utf8_invalid_at(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Index of the first byte that makes ``s`` invalid UTF-8, or -1."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    cdef int need
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
        elif 0xF0 <= c <= 0xF4:
            need = 3
        else:
            return i
        if n - i <= need:
            return i
        c1 = s[i + 1]
        if (c1 & 0xC0) != 0x80:
            return i
        if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
            return i                 # overlong / surrogate
        if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
            return i                 # overlong / past U+10FFFF
        if need >= 2 and (s[i + 2] & 0xC0) != 0x80:
            return i
        if need == 3 and (s[i + 3] & 0xC0) != 0x80:
            return i
        i += need + 1
    return -1


cdef inline object header_key_str(const uint8_t* p, int32_t n):
    # Invalid UTF-8 is replaced (U+FFFD), like Java's String decoding does.
    return PyUnicode_DecodeUTF8(<const char*>p, n, "replace")


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
    cdef Py_buffer view
    cdef bint held

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
    cdef object offset
    cdef object timestamp
    cdef object key
    cdef object value
    cdef tuple headers
    cdef BatchInfo batch

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
    cdef int kind                # the decoder kind that made it (KIND_*)
    cdef Batch b                 # the batch's header (legacy wrapper: its message)
    cdef bytes payload           # its records, from ``pos`` on
    cdef Py_ssize_t pos          # the next record's position in ``payload``
    cdef int32_t index           # records (legacy: inner messages) of the batch walked
    cdef int64_t last            # the offset passed last (returned, or skipped past)
    cdef int64_t rel_base        # a legacy wrapper's base for its inner offsets
    cdef BatchInfo info          # the object decoder's BatchInfo of the batch (its records share it)

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
    cdef readonly list records
    cdef readonly list batches
    cdef readonly Py_ssize_t consumed
    cdef readonly object next_offset
    cdef readonly Py_ssize_t incomplete_size
    cdef readonly PartialBatch resume
    cdef readonly Py_ssize_t skipped

    def __repr__(self):
        return (f"DecodeResult(records={len(self.records)}, batches={len(self.batches)}, "
                f"consumed={self.consumed}, next_offset={self.next_offset}, "
                f"incomplete_size={self.incomplete_size}, resume={self.resume!r}, skipped={self.skipped})")


# ------------------------------------------------------------------- driver
cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

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


@cython.auto_pickle(False)
cdef class _Driver:
    """Walks a buffer batch by batch; subclasses receive the records.

    Every call also keeps the offsets it returns increasing: a record whose
    offset is not above the last one passed (returned, or the end of a batch
    walked; ``min_offset - 1`` at first) is dropped and counted (``skipped``)
    unless it lies below ``min_offset``, as Kafka's consumer skips records
    below its fetch position.
    """
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
        if b.last_offset > self.last:
            self.last = b.last_offset
        self.next_offset = add_wrap(self.last, 1)
        self.any_batch = True

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
            if _lz4f_is_error(_lz4f_dctx_create(&self.lz4_dctx, 100)):
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
    cdef int enter(self, PartialBatch resume) except -1:
        """Claim the decoder for one call (a decoder is not thread-safe: a
        second call while one is under way would clobber its state)."""
        if self.busy:
            raise RuntimeError("this decoder is already decoding (another thread?): use one decoder per thread")
        if resume is not None and resume.kind != self.kind:
            raise TypeError(f"resume= takes a PartialBatch that a {type(self).__name__} made")
        self.busy = True
        return 0

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

    cdef int run_v2(self, Batch* b) except -1:
        cdef int codec = b.attributes & ATTR_CODEC
        cdef Py_ssize_t body = b.pos + V2_HEADER
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
        if codec > 4:
            raise UnsupportedCodecError(f"unknown compression codec id {codec}",
                                        self.topic, self.partition, b.base_offset)
        self.begin_batch(b)
        if (b.attributes & ATTR_CONTROL) and not self.include_control:
            return ST_NEXT
        if b.count == 0 and codec == 0:
            if body_len:
                self.raise_code(E_TRAILING, b.base_offset)
            return ST_NEXT
        if codec == 0:
            p, n = self.buf + body, body_len
        elif codec == 3 and _lz4f_decompress != NULL:
            n = self.lz4_payload(b, body, body_len)
            p = <const uint8_t*>self.plain.data
        else:
            plain = self.payload(b, body, body_len, codec)
            p, n = <const uint8_t*>PyBytes_AS_STRING(plain), PyBytes_GET_SIZE(plain)
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

    cdef inline int legacy_ts_type(self, Batch* b) noexcept:
        if b.magic == 0:
            return -1
        return 1 if b.attributes & ATTR_LOG_APPEND_TIME else 0

    cdef int run_legacy(self, Batch* b) except -1:
        cdef int codec = b.attributes & ATTR_CODEC
        cdef bytes plain
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos
        cdef Batch inner
        cdef int err = 0, st, count = 0
        cdef int64_t last_rel = 0, rel_base
        self.check_legacy_crc(self.buf + b.pos + LOG_OVERHEAD, b.total - LOG_OVERHEAD, b, b.base_offset)
        if codec == 0:
            self.begin_batch(b)
            self.decoded += b.total
            st = self.legacy_message(b, b.base_offset, b.timestamp, self.legacy_ts_type(b),
                                     self.buf + b.key_pos, b.key_len, self.buf + b.value_pos, b.value_len)
            return ST_BEFORE if st == ST_BEFORE else ST_NEXT
        if codec > 4:
            raise UnsupportedCodecError(f"unknown compression codec id {codec}",
                                        self.topic, self.partition, b.base_offset)
        if b.value_len < 0:
            self.raise_code(E_NULL_PAYLOAD, b.base_offset)
        plain = self.payload(b, b.value_pos, b.value_len, codec)
        p = <const uint8_t*>PyBytes_AS_STRING(plain)
        n = PyBytes_GET_SIZE(plain)
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
    and abort markers), which are skipped by default;
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
               Py_ssize_t max_bytes=-1, Py_ssize_t max_records=-1, PartialBatch resume=None):
        """Decode the complete batches in ``data`` (any bytes-like object).

        Records before ``min_offset`` are validated but not returned (a
        fetch returns whole batches, which may start before the fetch offset).
        ``topic`` and ``partition`` only label errors.

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
        self.enter(resume)
        try:
            self.records = []
            self.batches = []
            self.run(data, topic, partition, min_offset, max_bytes, max_records, resume)
            res.records = self.records
            res.batches = self.batches
            res.resume = self.resume_out
        finally:
            self.records = self.batches = None
            self.cur = None
            self.resume_out = None
            self.busy = False
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


# -------------------------------------------------------- columnar decoder
cdef int gbuf_grow(GBuf* g, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t want = g.len + extra
    cdef Py_ssize_t cap = g.cap if g.cap else 4096
    cdef char* p
    while cap < want:
        cap *= 2
    p = <char*>realloc(g.data, cap)
    if p == NULL:
        return -1
    g.data = p
    g.cap = cap
    return 0


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


cdef enum:
    C_OFFSET, C_TS, C_TS_TYPE
    C_KEY_OFF, C_KEY_DATA, C_KEY_VALID
    C_VAL_OFF, C_VAL_DATA, C_VAL_VALID
    C_HDR_OFF, C_HDR_VALID
    C_HK_OFF, C_HK_DATA
    C_HV_OFF, C_HV_DATA, C_HV_VALID
    NCOLS

cdef tuple _COL_NAMES = ("offset", "timestamp", "timestamp_type",
                         "key_offsets", "key_data", "key_validity",
                         "value_offsets", "value_data", "value_validity",
                         "header_offsets", "header_validity",
                         "header_key_offsets", "header_key_data",
                         "header_value_offsets", "header_value_data", "header_value_validity")

cdef enum:
    NULLS_KEY, NULLS_VAL, NULLS_HDR, NULLS_HV, NNULLS

# Column memory lent to Arrow comes back to the decoder that made it when Arrow
# frees it, and that decoder's next call reuses it: no copy, and no fresh
# (zeroed) pages from the kernel for every result. Bounded per decoder: at most
# SPARE_BLOCKS blocks and SPARE_BYTES bytes. The GIL guards it (blocks come
# back in a deallocator and are taken in start()).
cdef enum:
    SPARE_BLOCKS = 32
cdef Py_ssize_t SPARE_BYTES = 256 * 1024 * 1024


cdef struct Spare:
    char* data[SPARE_BLOCKS]
    Py_ssize_t cap[SPARE_BLOCKS]
    int n
    Py_ssize_t total


cdef void spare_put(Spare* sp, char* data, Py_ssize_t cap) noexcept:
    if data == NULL:
        return
    if sp.n < SPARE_BLOCKS and sp.total + cap <= SPARE_BYTES:
        sp.data[sp.n] = data
        sp.cap[sp.n] = cap
        sp.n += 1
        sp.total += cap
    else:
        free(data)


cdef void spare_take(Spare* sp, GBuf* g, Py_ssize_t want) noexcept:
    """Give ``g`` (empty, no memory) the smallest spare block of at least
    ``want`` bytes, or else the largest one."""
    cdef int i, best = -1
    for i in range(sp.n):
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
    sp.n -= 1
    sp.data[best] = sp.data[sp.n]
    sp.cap[best] = sp.cap[sp.n]


cdef void spare_clear(Spare* sp) noexcept:
    cdef int i
    for i in range(sp.n):
        free(sp.data[i])
    sp.n = 0
    sp.total = 0


@cython.final
@cython.auto_pickle(False)
cdef class _Memory:
    """One column buffer, lent to pyarrow without a copy; back to its
    decoder's spare list when pyarrow lets it go."""
    cdef char* data
    cdef Py_ssize_t size
    cdef Py_ssize_t cap
    cdef Py_ssize_t shape[1]
    cdef object home              # the decoder that owns ``spare``: kept alive while lent
    cdef Spare* spare

    def __getbuffer__(self, Py_buffer* view, int flags):
        self.shape[0] = self.size
        view.buf = self.data
        view.obj = self
        view.len = self.size
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = self.shape
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dealloc__(self):
        spare_put(self.spare, self.data, self.cap)


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
    cdef Spare spare              # column memory Arrow gave back
    cdef uint8_t valid_key[64]    # a copy of the last header key found valid UTF-8 ...
    cdef int32_t valid_key_len    # ... and its length (-1: none): equal keys skip validation
    cdef bint micros
    cdef Py_ssize_t nbatches
    cdef object ts_unit
    cdef Py_ssize_t max_column

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

    cdef int start(self) except -1:
        cdef int i
        self.valid_key_len = -1
        self.c.rows = self.c.header_rows = 0
        for i in range(NNULLS):
            self.c.nulls[i] = 0
        for i in range(NCOLS):
            if self.c.b[i].data == NULL:
                spare_take(&self.spare, &self.c.b[i], self.hint[i])
            self.c.b[i].len = 0
            if gbuf_reserve(&self.c.b[i], max(self.hint[i], 64)) < 0:
                raise MemoryError()
        for i in (C_KEY_OFF, C_VAL_OFF, C_HDR_OFF, C_HK_OFF, C_HV_OFF):
            (<int32_t*>self.c.b[i].data)[0] = 0
        self.sync_lens()
        return 0

    def decode(self, data, *, topic=None, partition=None, int64_t min_offset=-1,
               Py_ssize_t max_bytes=-1, Py_ssize_t max_records=-1, PartialBatch resume=None):
        """Decode the complete batches in ``data`` into one Arrow record batch.

        Arguments and the cut-buffer rules are those of :meth:`Decoder.decode`
        (``max_records``, ``resume`` too); against ``max_bytes`` a row costs
        its bytes in the decompressed batch (which bound its key, value and
        header bytes) plus 32 bytes (its offset, timestamp, timestamp type
        and end offsets). A call also stops early, at a batch boundary,
        rather than let a binary column pass ``max_column_bytes``
        (``consumed`` tells where).
        """
        cdef ColumnarResult res = ColumnarResult.__new__(ColumnarResult)
        self.enter(resume)
        try:
            self.start()
            self.nbatches = 0
            self.run(data, topic, partition, min_offset, max_bytes, max_records, resume)
            res.record_batch = self.finish()
            res.resume = self.resume_out
        finally:
            self.resume_out = None
            self.busy = False
        res.consumed = self.consumed
        res.next_offset = self.next_offset if self.any_batch else None
        res.incomplete_size = self.incomplete_size
        res.batch_count = self.nbatches
        res.skipped = self.skipped
        return res

    cdef object finish(self):
        from kwire._arrow import record_batch_from_columns
        cdef dict cols = {}
        cdef _Memory m
        cdef GBuf* g
        cdef int i
        cdef char* fit
        self.sync_lens()
        for i in range(NCOLS):
            g = &self.c.b[i]
            self.hint[i] = g.len
            if g.cap > g.len + 65536:   # trim doubling slack (in place), so recycled blocks fit the spare cap
                fit = <char*>realloc(g.data, g.len + 64)
                if fit != NULL:
                    g.data, g.cap = fit, g.len + 64
            m = _Memory.__new__(_Memory)
            m.data, m.size, m.cap = g.data, g.len, g.cap
            m.home = self
            m.spare = &self.spare
            g.data = NULL
            g.len = g.cap = 0
            cols[_COL_NAMES[i]] = m
        return record_batch_from_columns(
            self.c.rows, self.c.header_rows, cols,
            self.c.nulls[NULLS_KEY], self.c.nulls[NULLS_VAL],
            self.c.nulls[NULLS_HDR], self.c.nulls[NULLS_HV], self.ts_unit)

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
        or that fails in any way: the regular walk then takes it over and
        raises or stops as it would. A batch it stops inside is left in
        ``held`` for fast_path."""
        cdef Batch b
        cdef int err = 0, st
        while pos < n and not self.stopping():
            if read_batch(self.buf, pos, n, &b, &err) != 1 or b.magic != 2 or (b.attributes & ATTR_CODEC):
                break
            if self.check_crcs and crc32c(self.buf + pos + V2_CRC_START, b.total - V2_CRC_START) != b.crc:
                break
            self.mark_batch(True)
            st = ST_NEXT
            if (b.attributes & ATTR_CONTROL) and not self.include_control:
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
                or gbuf_reserve(&c.b[C_VAL_OFF], 4 * k) < 0 or gbuf_reserve(&c.b[C_HDR_OFF], 4 * k) < 0):
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
        st = append_binary(&c.b[C_KEY_OFF], &c.b[C_KEY_DATA], row, key, key_len, self.max_column)
        if st == 0:
            st = note_valid(&c.b[C_KEY_VALID], &c.nulls[NULLS_KEY], row, key_len >= 0)
        if st == 0:
            st = append_binary(&c.b[C_VAL_OFF], &c.b[C_VAL_DATA], row, value, value_len, self.max_column)
        if st == 0:
            st = note_valid(&c.b[C_VAL_VALID], &c.nulls[NULLS_VAL], row, value_len >= 0)
        if st == 0:
            st = note_valid(&c.b[C_HDR_VALID], &c.nulls[NULLS_HDR], row, header_count > 0)
        if st == 0 and header_count:
            c.b[C_HK_OFF].len = c.b[C_HV_OFF].len = (c.header_rows + 1) * 4
            if (gbuf_reserve(&c.b[C_HK_OFF], 4 * header_count) < 0
                    or gbuf_reserve(&c.b[C_HV_OFF], 4 * header_count) < 0):
                st = -E_NOMEM
        (<int32_t*>c.b[C_HDR_OFF].data)[row + 1] = <int32_t>(c.header_rows + header_count)
        c.rows = row + 1
        return st

    cdef inline int add_header(self, const uint8_t* k, int32_t kn, const uint8_t* v, int32_t vn) noexcept nogil:
        """Append one header of the last row (room reserved by add_row)."""
        cdef Cols* c = &self.c
        cdef int64_t i = c.header_rows
        cdef int st
        if kn == self.valid_key_len and memcmp(k, self.valid_key, kn) == 0:
            st = append_binary(&c.b[C_HK_OFF], &c.b[C_HK_DATA], i, k, kn, self.max_column)
        elif utf8_invalid_at(k, kn) >= 0:
            st = self.add_replaced_key(k, kn)
        else:
            if kn <= 64:
                memcpy(self.valid_key, k, kn)
                self.valid_key_len = kn
            st = append_binary(&c.b[C_HK_OFF], &c.b[C_HK_DATA], i, k, kn, self.max_column)
        if st == 0:
            st = append_binary(&c.b[C_HV_OFF], &c.b[C_HV_DATA], i, v, vn, self.max_column)
        if st == 0:
            st = note_valid(&c.b[C_HV_VALID], &c.nulls[NULLS_HV], i, vn >= 0)
        c.header_rows = i + 1
        return st

    cdef int add_replaced_key(self, const uint8_t* k, int32_t kn) noexcept with gil:
        # rare: decode with U+FFFD replacement exactly as the object path does
        cdef bytes enc = header_key_str(k, kn).encode("utf-8")
        return append_binary(&self.c.b[C_HK_OFF], &self.c.b[C_HK_DATA], self.c.header_rows,
                             <const uint8_t*>PyBytes_AS_STRING(enc), <int32_t>PyBytes_GET_SIZE(enc),
                             self.max_column)


cdef inline int append_binary(GBuf* offs, GBuf* data, int64_t i, const uint8_t* p, int32_t n,
                              Py_ssize_t max_column) noexcept nogil:
    """Element ``i`` of a binary column: its bytes (none when null, n < 0) and
    its end offset (room for it reserved). 1 when the data would pass
    ``max_column`` bytes."""
    if n > 0:
        if data.len + n > max_column:
            return 1
        if gbuf_reserve(data, n) < 0:
            return -E_NOMEM
        memcpy(data.data + data.len, p, n)
        data.len += n
    (<int32_t*>offs.data)[i + 1] = <int32_t>data.len
    return 0


cdef inline int note_valid(GBuf* bits, int64_t* nulls, int64_t i, bint valid) noexcept nogil:
    """Element ``i``'s validity bit. The bitmap is only written once the
    column has a null (until then every element is valid and Arrow gets no
    bitmap): the first null fills the bits of the elements before it."""
    cdef Py_ssize_t nbytes
    if nulls[0] == 0:
        if valid:
            return 0
        nbytes = (i >> 3) + 1
        bits.len = 0
        if gbuf_reserve(bits, nbytes) < 0:
            return -E_NOMEM
        memset(bits.data, 0xFF, nbytes)
        bits.len = nbytes
    if put_bit(bits, i, valid) < 0:
        return -E_NOMEM
    if not valid:
        nulls[0] += 1
    return 0


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


# ------------------------------------------------------------ Kafka 0.7
cdef struct Msg07:
    Py_ssize_t total
    int magic
    int codec
    uint32_t crc
    Py_ssize_t payload_pos
    Py_ssize_t payload_len


cdef int read_v07(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, Msg07* m, int* err) noexcept nogil:
    """Like :c:func:`read_batch`, for one 0.7 message: LENGTH MAGIC
    [COMPRESSION if MAGIC is 1] CHECKSUM PAYLOAD."""
    cdef int32_t length
    cdef Py_ssize_t head
    m.total = 4
    if end - pos < 4:
        return 0
    length = <int32_t>load_be32(buf + pos)
    if length < 5:
        err[0] = E_SIZE
        return -1
    m.total = 4 + <Py_ssize_t>length
    if end - pos > 4:
        m.magic = buf[pos + 4]
        if m.magic > 1:
            err[0] = E_MAGIC
            return -1
        if m.magic == 1 and length < 6:
            err[0] = E_SIZE
            return -1
    if m.total > end - pos:
        return 0
    head = 5 + m.magic              # LENGTH, MAGIC and COMPRESSION if present
    m.codec = buf[pos + 5] if m.magic == 1 else 0
    m.crc = load_be32(buf + pos + head)
    m.payload_pos = pos + head + 4
    m.payload_len = m.total - head - 4
    return 1


cdef Record record_v07(BatchInfo bi, const uint8_t* p, Py_ssize_t n):
    cdef Record o = Record.__new__(Record)
    o.offset = bi.base_offset
    o.timestamp = -1
    o.key = None
    o.value = PyBytes_FromStringAndSize(<const char*>p, n)
    o.headers = ()
    o.batch = bi
    return o


def decode_v07(data, int64_t start_offset, *, bint check_crcs=True,
               Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
               topic=None, partition=None):
    """Decode Kafka 0.7 messages fetched from byte offset ``start_offset``.

    0.7 offsets are byte positions: a message at buffer position ``p`` has
    offset ``start_offset + p`` and the next one starts at offset + 4 +
    LENGTH. The messages inside a compressed message all carry the offset of
    their wrapper, since 0.7 can only resume at a wrapper boundary.
    ``next_offset`` is ``start_offset + consumed``. Returns a
    :class:`DecodeResult`.
    """
    cdef _Pinned pin = _Pinned(data)
    cdef Msg07 m, inner
    cdef int st, err = 0
    cdef Py_ssize_t pos = 0, ipos, n
    cdef const uint8_t* buf
    cdef const uint8_t* ip
    cdef object plain
    cdef BatchInfo bi
    cdef int64_t offset
    cdef DecodeResult res = DecodeResult.__new__(DecodeResult)
    cdef object view = memoryview(data).cast("B")
    res.records = []
    res.batches = []
    res.next_offset = None
    buf = <const uint8_t*>pin.view.buf
    n = pin.view.len
    while pos < n:
        offset = add_wrap(start_offset, pos)
        st = read_v07(buf, pos, n, &m, &err)
        if st < 0:
            raise CorruptRecordError(_MESSAGES[err], topic, partition, offset)
        if st == 0:
            res.incomplete_size = m.total
            break
        if check_crcs and (_zlib_crc32(0, buf + m.payload_pos, <unsigned int>m.payload_len)
                           & 0xFFFFFFFF) != m.crc:
            raise CrcMismatchError("message CRC32 mismatch", topic, partition, offset)
        bi = BatchInfo.__new__(BatchInfo)
        bi.kafka07 = True
        bi.base_offset = offset
        bi.last_offset = add_wrap(offset, m.total - 1)
        bi.magic = m.magic
        bi.attributes = m.codec
        bi.crc = m.crc
        bi.first_timestamp = bi.max_timestamp = -1
        bi.producer_id = bi.partition_leader_epoch = bi.base_sequence = -1
        bi.producer_epoch = -1
        bi.size_in_bytes = m.total
        if m.codec == 0:
            bi.record_count = 1
            res.records.append(record_v07(bi, buf + m.payload_pos, m.payload_len))
        else:
            if m.codec > 2:
                raise UnsupportedCodecError(f"unknown 0.7 compression codec {m.codec}",
                                            topic, partition, offset)
            try:
                plain = _decompress(m.codec, view[m.payload_pos:m.payload_pos + m.payload_len],
                                    max_decompressed_bytes, 0)
            except CorruptRecordError as e:
                raise e.at(topic, partition, offset) from None
            ip = <const uint8_t*>PyBytes_AS_STRING(plain)
            ipos = 0
            first = len(res.records)
            while ipos < PyBytes_GET_SIZE(plain):
                st = read_v07(ip, ipos, PyBytes_GET_SIZE(plain), &inner, &err)
                if st == 0:
                    err = E_TRUNC
                if st <= 0:
                    raise CorruptRecordError(_MESSAGES[err], topic, partition, offset)
                if inner.codec:
                    raise CorruptRecordError(_MESSAGES[E_NESTED], topic, partition, offset)
                if check_crcs and (_zlib_crc32(0, ip + inner.payload_pos, <unsigned int>inner.payload_len)
                                   & 0xFFFFFFFF) != inner.crc:
                    raise CrcMismatchError("inner message CRC32 mismatch", topic, partition, offset)
                res.records.append(record_v07(bi, ip + inner.payload_pos, inner.payload_len))
                ipos += inner.total
            bi.record_count = len(res.records) - first
            if bi.record_count == 0:
                raise CorruptRecordError(_MESSAGES[E_EMPTY_WRAPPER], topic, partition, offset)
        res.batches.append(bi)
        pos += m.total
        res.next_offset = add_wrap(start_offset, pos)
    res.consumed = pos
    return res


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


cdef inline Py_ssize_t varint_size(int64_t v) noexcept nogil:
    cdef uint64_t u = zigzag(v)
    cdef Py_ssize_t n = 1
    while u >= 0x80:
        u >>= 7
        n += 1
    return n


cdef inline void put_varint(GBuf* g, int64_t v) noexcept nogil:
    cdef uint64_t u = zigzag(v)
    cdef uint8_t* q = <uint8_t*>g.data + g.len
    while u >= 0x80:
        q[0] = <uint8_t>(u | 0x80)
        q += 1
        u >>= 7
    q[0] = <uint8_t>u
    g.len = <char*>q + 1 - g.data


cdef inline void put_raw(GBuf* g, const char* p, Py_ssize_t n) noexcept nogil:
    if n > 0:
        memcpy(g.data + g.len, p, n)
        g.len += n


cdef struct Bytes:           # a borrowed view of a bytes-like argument
    const char* p
    Py_ssize_t n             # -1 for None
    bint release
    Py_buffer view


cdef inline int borrow(object o, Bytes* b, str what) except -1:
    b.release = False
    if o is None:
        b.p = NULL
        b.n = -1
    elif PyBytes_Check(o):
        b.p = PyBytes_AS_STRING(o)
        b.n = PyBytes_GET_SIZE(o)
    elif PyUnicode_Check(o):
        raise TypeError(f"{what} must be bytes-like or None, not str")
    else:
        PyObject_GetBuffer(o, &b.view, PyBUF_SIMPLE)
        b.release = True
        b.p = <const char*>b.view.buf
        b.n = b.view.len
    if b.n > INT32_MAX:
        unborrow(b)
        raise ValueError(f"{what} is longer than Kafka allows (2 GiB)")
    return 0


cdef inline void unborrow(Bytes* b) noexcept:
    if b.release:
        PyBuffer_Release(&b.view)
        b.release = False


cdef inline int64_t timestamp_arg(object ts) except? -1:
    return kwire_now_ms() if ts is None else <int64_t>ts


cdef inline Py_ssize_t record_body_size(int64_t ts_delta, int32_t offset_delta, Py_ssize_t kn, Py_ssize_t vn,
                                         int32_t hcount, Py_ssize_t hlen) noexcept nogil:
    """Size of a v2 record after its length varint (``kn``/``vn`` -1: null)."""
    return (1 + varint_size(ts_delta) + varint_size(offset_delta) + varint_size(kn) + max(kn, 0)
            + varint_size(vn) + max(vn, 0) + varint_size(hcount) + hlen)


cdef int add_record(GBuf* buf, int32_t* count, int64_t* first_ts, int64_t* max_ts,
                    const char* k, Py_ssize_t kn, const char* v, Py_ssize_t vn, int32_t hcount,
                    const char* h, Py_ssize_t hlen, int64_t ts, bint fixed=False) noexcept nogil:
    """Append one v2 record whose sizes were checked (``kn``/``vn`` -1:
    null; ``h``: its ``hcount`` headers encoded) to a builder's ``buf``,
    counting it; -1 if out of memory, or out of room in a ``fixed`` buffer
    (one that is not malloc'd: it must not grow)."""
    cdef int64_t ts_delta
    cdef Py_ssize_t body
    if count[0] == 0:
        first_ts[0] = max_ts[0] = ts
    elif ts > max_ts[0]:
        max_ts[0] = ts
    ts_delta = <int64_t>(<uint64_t>ts - <uint64_t>first_ts[0])
    body = record_body_size(ts_delta, count[0], kn, vn, hcount, hlen)
    if fixed and buf.len + varint_size(body) + body > buf.cap:
        return -1
    if gbuf_reserve(buf, varint_size(body) + body) < 0:
        return -1
    put_varint(buf, body)
    buf.data[buf.len] = 0
    buf.len += 1
    put_varint(buf, ts_delta)
    put_varint(buf, count[0])
    put_varint(buf, kn)
    put_raw(buf, k, kn)
    put_varint(buf, vn)
    put_raw(buf, v, vn)
    put_varint(buf, hcount)
    put_raw(buf, h, hlen)
    count[0] += 1
    return 0


@cython.auto_pickle(False)
cdef class _Builder:
    cdef GBuf buf
    cdef int codec
    cdef int32_t count
    cdef int64_t first_ts
    cdef int64_t max_ts
    cdef object level

    def __dealloc__(self):
        free(self.buf.data)

    def __len__(self):
        return self.count

    cdef bytes take(self):
        return PyBytes_FromStringAndSize(self.buf.data, self.buf.len)

    cdef int reserve(self, Py_ssize_t n) except -1:
        if gbuf_reserve(&self.buf, n) < 0:
            raise MemoryError()
        return 0


cdef class RecordBatchBuilder(_Builder):
    """Builds one RecordBatch v2 (magic 2).

    ``compression``: None/"none", "gzip", "snappy", "lz4", "zstd" or a codec id.
    ``base_offset``, ``producer_id``, ``producer_epoch``, ``base_sequence``,
    ``partition_leader_epoch``: the batch header fields (producers leave the
    defaults unless idempotent). ``transactional`` and ``is_control`` set the
    attribute bits; ``log_append_time`` marks the batch LogAppendTime with
    ``max_timestamp`` as every record's time (what a broker writes).
    """
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

    def __init__(self, compression=None, *, int64_t base_offset=0, int64_t producer_id=-1,
                 int producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False,
                 bint is_control=False, int32_t partition_leader_epoch=-1,
                 bint log_append_time=False, max_timestamp=None, compression_level=None):
        self.codec = _codec_id(compression)
        self.level = compression_level
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.leader_epoch = partition_leader_epoch
        self.attributes = (self.codec | (ATTR_TRANSACTIONAL if transactional else 0)
                           | (ATTR_CONTROL if is_control else 0)
                           | (ATTR_LOG_APPEND_TIME if log_append_time else 0))
        if log_append_time and max_timestamp is None:
            raise ValueError("a LogAppendTime batch needs max_timestamp")
        self.log_append_max_ts = max_timestamp

    def __dealloc__(self):
        free(self.hbuf.data)

    @property
    def size_in_bytes(self):
        """Size of the batch so far, before compression."""
        return V2_HEADER + self.buf.len

    cdef bint same_headers(self, object headers):
        """True if ``headers`` holds the very pair objects hbuf was encoded
        from (producers usually pass the same headers again)."""
        cdef tuple items = self.hitems
        cdef Py_ssize_t i
        if items is None or not (PyList_CheckExact(headers) or PyTuple_CheckExact(headers)):
            return False
        if len(headers) != len(items):
            return False
        for i in range(len(items)):
            if headers[i] is not items[i]:
                return False
        return True

    cdef int encode_headers(self, object headers) except -1:
        cdef Bytes v
        cdef const char* k
        cdef Py_ssize_t kn
        cdef bint cacheable = PyList_CheckExact(headers) or PyTuple_CheckExact(headers)
        if self.same_headers(headers):
            return 0
        self.hbuf.len = 0
        self.hcount = 0
        self.hitems = None
        if isinstance(headers, dict):
            headers = headers.items()
            cacheable = False
        for pair in headers:
            # the encoding may be reused only if nothing in it can change
            cacheable = cacheable and PyTuple_CheckExact(pair)
            hk, hv = pair
            cacheable = cacheable and (PyUnicode_CheckExact(hk) or PyBytes_CheckExact(hk)) and (
                hv is None or PyBytes_CheckExact(hv))
            if PyUnicode_Check(hk):
                k = PyUnicode_AsUTF8AndSize(hk, &kn)
            elif PyBytes_Check(hk):
                k = PyBytes_AS_STRING(hk)
                kn = PyBytes_GET_SIZE(hk)
            else:
                raise TypeError(f"header key must be str, not {type(hk).__name__}")
            borrow(hv, &v, "header value")
            try:
                if gbuf_reserve(&self.hbuf, 20 + kn + max(v.n, 0)) < 0:
                    raise MemoryError()
                put_varint(&self.hbuf, kn)
                put_raw(&self.hbuf, k, kn)
                put_varint(&self.hbuf, v.n)
                put_raw(&self.hbuf, v.p, v.n)
            finally:
                unborrow(&v)
            self.hcount += 1
        if cacheable:
            self.hitems = tuple(headers)
        return 0

    def append(self, value, key=None, headers=None, timestamp=None):
        """Add a record; returns its offset delta in the batch. ``timestamp``
        is milliseconds since the epoch (now if None); ``headers`` is a
        sequence of ``(str, bytes | None)`` pairs or a dict."""
        return self.add(value, key, headers, timestamp_arg(timestamp))

    cdef int add(self, value, key, headers, int64_t ts) except -1:
        cdef Bytes k, v
        cdef int32_t hcount = 0
        cdef Py_ssize_t hlen = 0
        if self.count == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31 - 1 records")
        if headers:
            self.encode_headers(headers)
            hcount = self.hcount
            hlen = self.hbuf.len
        borrow(key, &k, "key")
        try:
            borrow(value, &v, "value")
            try:
                if record_body_size(<int64_t>(<uint64_t>ts - <uint64_t>(self.first_ts if self.count else ts)),
                                    self.count, k.n, v.n, hcount, hlen) > INT32_MAX:
                    raise ValueError("record is larger than Kafka allows (2 GiB)")
                if add_record(&self.buf, &self.count, &self.first_ts, &self.max_ts, k.p, k.n, v.p, v.n, hcount,
                              self.hbuf.data, hlen, ts) < 0:
                    raise MemoryError()
            finally:
                unborrow(&v)
        finally:
            unborrow(&k)
        return self.count - 1

    def build(self, *, last_offset_delta=None, producer_id=None, producer_epoch=None, base_sequence=None):
        """The encoded batch as bytes. ``last_offset_delta`` overrides the
        default (record count - 1), e.g. to write what compaction leaves;
        ``producer_id``, ``producer_epoch`` and ``base_sequence`` override the
        constructor's (a producer assigns sequences when a batch is sent)."""
        return _build_batches([self], [(producer_id, producer_epoch, base_sequence)], last_offset_delta)[0]

    cdef bytes plan(self, EncodeJob* job, Held* held, object last_offset_delta, object producer_id,
                    object producer_epoch, object base_sequence):
        """Plan encoding the batch (GIL held), with the ``held`` records (or
        NULL) appended first: fill in ``job`` for :func:`encode_batch` and
        return the bytes the batch will be written into, sized for the
        worst case. gzip and snappy (and lz4 or zstd without their C entry
        points) are compressed here, through the Python API."""
        cdef bytes result
        memset(job, 0, sizeof(EncodeJob))
        job.records = &self.buf
        job.count = &self.count
        job.first_ts = &self.first_ts
        job.max_ts = &self.max_ts
        job.held = held
        if held != NULL and self.count:
            raise ValueError("records held for a builder that has records of its own")
        job.src_len = held.bytes if held != NULL else self.buf.len
        job.base_offset = self.base_offset
        job.leader_epoch = self.leader_epoch
        job.attributes = self.attributes
        job.has_last_offset_delta = last_offset_delta is not None
        if job.has_last_offset_delta:
            job.last_offset_delta = last_offset_delta
        job.has_log_append_ts = self.log_append_max_ts is not None
        if job.has_log_append_ts:
            job.log_append_ts = self.log_append_max_ts
        job.producer_id = self.producer_id if producer_id is None else <int64_t>producer_id
        job.producer_epoch = self.producer_epoch if producer_epoch is None else <int16_t>producer_epoch
        job.base_sequence = self.base_sequence if base_sequence is None else <int32_t>base_sequence
        if self.codec == 3 and _lz4f_compress != NULL:
            job.mode = 3
            job.level = 0 if self.level is None else self.level
        elif self.codec == 4 and _zstd_compress != NULL:
            job.mode = 4
            job.level = 3 if self.level is None else self.level
        elif self.codec:
            if held != NULL and held_encode(held, &self.buf, job) < 0:
                raise MemoryError()
            self.staged = _compress(self.codec, memoryview(self.take()), 2, self.level)
            job.src = PyBytes_AS_STRING(self.staged)
            job.src_len = PyBytes_GET_SIZE(self.staged)
        job.cap = native_bound(job)
        result = PyBytes_FromStringAndSize(NULL, V2_HEADER + job.cap)
        job.batch = PyBytes_AS_STRING(result)
        job.dst = job.batch + V2_HEADER
        return result


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define kwire_prefetch(p) __builtin_prefetch((const void*)(p))
    #else
    #define kwire_prefetch(p) ((void)(p))
    #endif
    """
    void prefetch "kwire_prefetch"(const void* p) nogil

cdef enum:
    PREFETCH_AHEAD = 8      # records: enough to cover a cache miss while encoding the ones between


cdef int held_encode(Held* held, GBuf* records, EncodeJob* job, bint fixed=False) noexcept nogil:
    """Append the held records to ``records`` (counted by
    the builder's fields in ``job``; ``fixed``: a buffer that must not
    grow); -1 if out of memory or room. No GIL needed: they are bytes
    (immutable) the batch holds references to."""
    cdef Py_ssize_t i
    cdef PyObject* k
    cdef PyObject* v
    cdef PyObject* h
    if not fixed and gbuf_reserve(records, held.bytes - records.len) < 0:
        return -1
    for i in range(held.n):
        if i + PREFETCH_AHEAD < held.n:     # the objects lie anywhere on the heap: ask for them early
            prefetch(held.refs[3 * (i + PREFETCH_AHEAD)])
            prefetch(held.refs[3 * (i + PREFETCH_AHEAD) + 1])
        k = held.refs[3 * i]
        v = held.refs[3 * i + 1]
        h = held.refs[3 * i + 2]
        if add_record(records, job.count, job.first_ts, job.max_ts,
                      bytes_data(k) if k != NULL else NULL, held.sizes[3 * i],
                      bytes_data(v) if v != NULL else NULL, held.sizes[3 * i + 1],
                      held.sizes[3 * i + 2], bytes_data(h) if h != NULL else NULL,
                      bytes_size(h) if h != NULL else 0, held.ts[i], fixed) < 0:
            return -1
    return 0


cdef void encode_batch(EncodeJob* job, void* zctx, GBuf* scratch) noexcept nogil:
    """Encode the held records (straight into the batch when uncompressed,
    else into ``scratch``), make the payload, then the header and its CRC
    (no GIL needed)."""
    cdef GBuf out
    cdef GBuf* records
    cdef Py_ssize_t n
    cdef int32_t count
    if job.held != NULL and job.src == NULL:
        if job.mode == 0:
            job.direct.data = job.dst     # sized exactly (plan): never reallocated
            job.direct.len = 0
            job.direct.cap = job.cap
            records = &job.direct
        else:
            scratch.len = 0
            records = scratch
        if held_encode(job.held, records, job, records == &job.direct) < 0:
            job.size = -2
            return
        job.src = records.data if records.len else EMPTY_SRC
        job.src_len = records.len
    elif job.src == NULL:
        job.src = job.records.data if job.records.len else EMPTY_SRC    # never NULL for the codecs
        job.src_len = job.records.len
    n = native_compress(job, zctx)
    if n < 0:
        job.size = -1
        return
    job.size = V2_HEADER + n
    count = job.count[0]
    out.data = job.batch
    out.len = 0
    out.cap = V2_HEADER
    put_be64(&out, job.base_offset)
    put_be32(&out, <int32_t>(job.size - LOG_OVERHEAD))
    put_be32(&out, job.leader_epoch)
    out.data[out.len] = 2
    out.len += 5                  # magic, then the CRC
    put_be16(&out, <int16_t>job.attributes)
    put_be32(&out, job.last_offset_delta if job.has_last_offset_delta else count - 1)
    put_be64(&out, job.first_ts[0] if count else -1)
    put_be64(&out, job.log_append_ts if job.has_log_append_ts else (job.max_ts[0] if count else -1))
    put_be64(&out, job.producer_id)
    put_be16(&out, job.producer_epoch)
    put_be32(&out, job.base_sequence)
    put_be32(&out, count)
    store_be32(job.batch + 17, crc32c(job.batch + V2_CRC_START, job.size - V2_CRC_START))


# Compressing is most of a compressed batch's cost, and one thread doing it
# leaves the other cores idle once send() stops. So build_batches shares the
# jobs of a call between its caller and up to _BUILD_HELPERS native threads
# (started per call: a thread kept between calls would not survive a fork,
# which Spark's Python workers are made by). The threads run no Python:
# encode_batch needs no GIL, and each thread has its own scratch buffer and
# zstd context. Jobs are taken one at a time from a shared counter, so a
# large batch does not hold up the rest.
cdef extern from *:
    """
    #if defined(_MSC_VER)
    #include <windows.h>
    static Py_ssize_t kwire_fetch_add(Py_ssize_t* p, Py_ssize_t v) {
        return (Py_ssize_t)InterlockedExchangeAdd64((volatile LONG64*)p, (LONG64)v);
    }
    #else
    static Py_ssize_t kwire_fetch_add(Py_ssize_t* p, Py_ssize_t v) {
        return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
    }
    #endif
    """
    Py_ssize_t fetch_add "kwire_fetch_add"(Py_ssize_t* p, Py_ssize_t v) noexcept nogil

cdef extern from "pythread.h":
    ctypedef void* PyThread_type_lock
    PyThread_type_lock PyThread_allocate_lock() nogil
    void PyThread_free_lock(PyThread_type_lock) nogil
    int PyThread_acquire_lock_timed(PyThread_type_lock, long long microseconds, int intr_flag) nogil
    void PyThread_release_lock(PyThread_type_lock) nogil
    unsigned long PyThread_start_new_thread(void (*func)(void*) noexcept nogil, void* arg) nogil
    unsigned long PYTHREAD_INVALID_THREAD_ID


cdef int _cpus():
    try:
        return len(_os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return _os.cpu_count() or 1


cdef Py_ssize_t _BUILD_HELPERS = max(0, min(_cpus() - 1, 3))


def build_threads(n=None):
    """How many threads one :func:`build_batches` call may encode
    compressed batches on, its caller's included (default: the CPUs this
    process may use, at most 4); with ``n``, set it (1: the caller alone)
    and return the previous value."""
    global _BUILD_HELPERS
    previous = _BUILD_HELPERS + 1
    if n is not None:
        if n < 1:
            raise ValueError("build_threads needs at least 1")
        _BUILD_HELPERS = n - 1
    return previous


cdef struct BuildShare:            # the jobs of one build_batches call, shared with its helper threads
    EncodeJob* jobs
    Py_ssize_t n
    Py_ssize_t next                # the next job to take (atomic)
    Py_ssize_t running             # helpers not finished (atomic): the last one releases done
    Py_ssize_t refs                # holders of this struct (atomic): the last one frees it
    PyThread_type_lock done


cdef void take_jobs(BuildShare* share) noexcept nogil:
    """Encode jobs until none is left, with this thread's own scratch
    buffer and zstd context."""
    cdef GBuf scratch
    cdef void* zctx = NULL
    cdef Py_ssize_t i
    cdef EncodeJob* job
    memset(&scratch, 0, sizeof(GBuf))
    while True:
        i = fetch_add(&share.next, 1)
        if i >= share.n:
            break
        job = &share.jobs[i]
        if job.mode == 4 and zctx == NULL:
            zctx = _zstd_create()
            if zctx == NULL:
                job.size = -2
                continue
        encode_batch(job, zctx, &scratch)
    free(scratch.data)
    if zctx != NULL:
        _zstd_free(zctx)


cdef void share_unref(BuildShare* share) noexcept nogil:
    if fetch_add(&share.refs, -1) == 1:
        PyThread_free_lock(share.done)
        free(share)


cdef void build_helper(void* arg) noexcept nogil:
    cdef BuildShare* share = <BuildShare*>arg
    take_jobs(share)
    if fetch_add(&share.running, -1) == 1:
        PyThread_release_lock(share.done)
    share_unref(share)


cdef int encode_all(EncodeJob* jobs, Py_ssize_t n, Py_ssize_t helpers) except -1:
    """Encode ``jobs`` on this thread and up to ``helpers`` others (fewer
    if threads cannot be started), without the GIL; returns when all are done."""
    cdef BuildShare* share = <BuildShare*>calloc(1, sizeof(BuildShare))
    cdef Py_ssize_t h, started = 0
    if share == NULL:
        raise MemoryError()
    share.jobs = jobs
    share.n = n
    share.done = PyThread_allocate_lock()
    if share.done == NULL:
        free(share)
        raise MemoryError()
    PyThread_acquire_lock_timed(share.done, 0, 0)        # taken: the last helper releases it
    share.running = helpers
    share.refs = 1 + helpers
    with nogil:
        for h in range(helpers):
            if PyThread_start_new_thread(build_helper, share) == PYTHREAD_INVALID_THREAD_ID:
                break
            started += 1
        if started < helpers:                            # the ones not started neither run nor hold it
            fetch_add(&share.refs, started - helpers)
            if fetch_add(&share.running, started - helpers) == helpers - started:
                PyThread_release_lock(share.done)        # every started one finished already, or none started
        take_jobs(share)
        if helpers:
            PyThread_acquire_lock_timed(share.done, -1, 0)
            PyThread_release_lock(share.done)
        share_unref(share)
    return 0


cdef list _build_batches(list items, list stamps, object last_offset_delta):
    cdef Py_ssize_t i, n
    cdef EncodeJob* jobs
    cdef EncodeJob* job
    cdef RecordBatchBuilder b
    cdef ProducerBatch pb
    cdef Held* held
    cdef list builders = []
    cdef list outs = []
    cdef list built = []
    cdef set seen = set()
    cdef Py_ssize_t compressed = 0
    items = list(items)             # copies no other thread can change while Python code runs (compressing)
    stamps = list(stamps)
    n = len(items)
    if len(stamps) != n:
        raise ValueError("one stamp per builder")
    jobs = <EncodeJob*>calloc(max(n, 1), sizeof(EncodeJob))
    if jobs == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            item = items[i]
            if isinstance(item, ProducerBatch):
                pb = item
                b = pb.builder
                if b is None:
                    raise KwireError("the batch was built already")
                held = &pb.held
            elif isinstance(item, RecordBatchBuilder):
                b = item
                held = NULL
            else:
                raise TypeError(f"build_batches takes RecordBatchBuilder or ProducerBatch, not {type(item).__name__}")
            if id(b) in seen:           # two jobs would encode into one builder
                raise ValueError("a batch is given twice")
            seen.add(id(b))
            builders.append(b)
            stamp = stamps[i]
            if stamp is None:
                outs.append(b.plan(&jobs[i], held, last_offset_delta, None, None, None))
            else:
                pid, epoch, seq = stamp          # unpacked: a short tuple is a ValueError, not a read past it
                outs.append(b.plan(&jobs[i], held, last_offset_delta, pid, epoch, seq))
            if jobs[i].mode == 3 or jobs[i].mode == 4:
                compressed += 1
        encode_all(jobs, n, max(0, min(compressed - 1, _BUILD_HELPERS)))
        for i in range(n):
            job = &jobs[i]
            if job.size == -2:
                raise MemoryError()
            if job.size < 0:
                raise KwireError(f"{_compression.CODEC_NAMES[job.mode]} compression of a batch failed")
            if job.size - LOG_OVERHEAD > INT32_MAX:
                raise ValueError("batch is larger than Kafka allows (2 GiB)")
            result = outs[i]
            built.append(result if job.size == PyBytes_GET_SIZE(result)
                         else PyBytes_FromStringAndSize(job.batch, job.size))
        return built
    finally:
        for b in builders:
            b.staged = None
        for item in items:
            if isinstance(item, ProducerBatch):       # built (or failed): it takes no more records
                held_release(&(<ProducerBatch>item).held)
                (<ProducerBatch>item).builder = None
        free(jobs)


def build_batches(list batches not None, list stamps not None):
    """Encode several batches at once, each a :class:`RecordBatchBuilder` or
    a :class:`ProducerBatch`, as ``build`` would one by one: the batches as
    bytes, in order. ``stamps`` holds per batch None or ``(producer_id,
    producer_epoch, base_sequence)`` (each None keeps the builder's). The
    records a ProducerBatch holds are encoded, and uncompressed, lz4 and
    zstd batches made, all in one stretch without the GIL, which is what a
    producer's sender thread needs while another thread is busy sending:
    retaking the GIL per batch would wait out a switch interval each time.
    The batches must not change meanwhile."""
    return _build_batches(batches, stamps, None)


def restamp_batch(batch, int64_t producer_id, int producer_epoch, int32_t base_sequence):
    """A copy of the v2 batch ``batch`` with new producer id, epoch and base
    sequence and its CRC recomputed (a producer re-sending a batch after its
    epoch was bumped). The batch must be one whole, well-formed v2 batch."""
    cdef Py_buffer view
    cdef Batch b
    cdef int err = 0
    cdef bytes out
    cdef char* q
    PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
    try:
        if read_batch(<const uint8_t*>view.buf, 0, view.len, &b, &err) != 1 or b.magic != 2 or b.total != view.len:
            raise ValueError("restamp_batch needs exactly one whole v2 record batch")
        out = PyBytes_FromStringAndSize(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    q = PyBytes_AS_STRING(out)
    store_be32(q + 43, <uint32_t>(<uint64_t>producer_id >> 32))
    store_be32(q + 47, <uint32_t>(<uint64_t>producer_id & 0xFFFFFFFF))
    q[51] = <char>((producer_epoch >> 8) & 0xFF)
    q[52] = <char>(producer_epoch & 0xFF)
    store_be32(q + 53, <uint32_t>base_sequence)
    store_be32(q + 17, crc32c(<const uint8_t*>q + V2_CRC_START, PyBytes_GET_SIZE(out) - V2_CRC_START))
    return out


cdef int put_legacy_message(GBuf* g, int64_t offset, int magic, int attributes, int64_t ts,
                            Bytes* k, Bytes* v) except -1:
    cdef Py_ssize_t size = V0_MIN_SIZE + (8 if magic == 1 else 0) + max(k.n, 0) + max(v.n, 0)
    cdef Py_ssize_t start
    if size > INT32_MAX:
        raise ValueError("message is larger than Kafka allows (2 GiB)")
    if gbuf_reserve(g, LOG_OVERHEAD + size) < 0:
        raise MemoryError()
    put_be64(g, offset)
    put_be32(g, <int32_t>size)
    start = g.len
    g.len += 4                        # CRC, written below
    g.data[g.len] = magic
    g.data[g.len + 1] = attributes
    g.len += 2
    if magic == 1:
        put_be64(g, ts)
    put_be32(g, <int32_t>k.n)
    put_raw(g, k.p, k.n)
    put_be32(g, <int32_t>v.n)
    put_raw(g, v.p, v.n)
    store_be32(g.data + start, _zlib_crc32(0, <const unsigned char*>g.data + start + 4,
                                           <unsigned int>(size - 4)) & 0xFFFFFFFF)
    return 0


cdef class LegacyMessageSetBuilder(_Builder):
    """Builds a legacy message set, magic 0 or 1 (brokers before 0.11).

    Uncompressed messages get offsets ``base_offset``, ``base_offset + 1``...
    Compressed ones are wrapped in one message whose offset is the last inner
    offset; inner offsets are relative (0, 1, ...) for magic 1 and absolute
    for magic 0, as a broker stores them; a magic 1 wrapper carries the
    largest inner timestamp.
    """
    cdef int magic
    cdef int64_t base_offset

    def __init__(self, int magic=1, compression=None, *, int64_t base_offset=0, compression_level=None):
        if magic not in (0, 1):
            raise ValueError("legacy message sets have magic 0 or 1")
        self.magic = magic
        self.codec = _codec_id(compression)
        if self.codec == 4:
            raise ValueError("zstd needs message format v2 (magic 2)")
        self.level = compression_level
        self.base_offset = base_offset

    cpdef int append(self, value, key=None, timestamp=None) except -1:
        """Add a message; returns its index. ``timestamp`` (magic 1) is
        milliseconds since the epoch, now if None."""
        cdef Bytes k, v
        cdef int64_t ts = timestamp_arg(timestamp) if self.magic == 1 else -1
        cdef int64_t offset = self.count if (self.codec and self.magic == 1) else self.base_offset + self.count
        if self.count == 0 or ts > self.max_ts:
            self.max_ts = ts
        borrow(key, &k, "key")
        try:
            borrow(value, &v, "value")
            try:
                put_legacy_message(&self.buf, offset, self.magic, 0, ts, &k, &v)
            finally:
                unborrow(&v)
        finally:
            unborrow(&k)
        self.count += 1
        return self.count - 1

    def build(self):
        """The encoded message set as bytes."""
        cdef Bytes k, v
        cdef GBuf out
        cdef bytes payload
        if not self.codec:
            return self.take()
        if self.count == 0:
            raise ValueError("a compressed message set needs at least one message")
        payload = _compress(self.codec, memoryview(self.take()), self.magic, self.level)
        borrow(None, &k, "key")
        borrow(payload, &v, "value")
        out.data = NULL
        out.len = out.cap = 0
        try:
            put_legacy_message(&out, self.base_offset + self.count - 1, self.magic, self.codec,
                               self.max_ts, &k, &v)
            return PyBytes_FromStringAndSize(out.data, out.len)
        finally:
            free(out.data)


cdef int put_v07(GBuf* g, int magic, int codec, const char* p, Py_ssize_t n) except -1:
    cdef Py_ssize_t head = 5 + magic
    if n + head > INT32_MAX:
        raise ValueError("message is larger than Kafka allows (2 GiB)")
    if gbuf_reserve(g, n + head + 4) < 0:
        raise MemoryError()
    put_be32(g, <int32_t>(n + head))
    g.data[g.len] = magic
    g.len += 1
    if magic == 1:
        g.data[g.len] = codec
        g.len += 1
    store_be32(g.data + g.len, <uint32_t>_zlib_crc32(0, <const unsigned char*>p, <unsigned int>n))
    g.len += 4
    put_raw(g, p, n)
    return 0


def encode_v07(payloads, compression=None, *, int magic=1):
    """Encode Kafka 0.7 messages. ``payloads`` are bytes-like; with
    ``compression`` ("gzip" or "snappy") they are wrapped in one compressed
    message (magic 1), which the seed's 0.7 format requires."""
    cdef Bytes b
    cdef GBuf g
    cdef int codec = _codec_id(compression)
    cdef bytes inner
    if magic not in (0, 1):
        raise ValueError("0.7 messages have magic 0 or 1")
    if codec > 2:
        raise ValueError("Kafka 0.7 knows only gzip and snappy")
    if codec and magic != 1:
        raise ValueError("compressed 0.7 messages need magic 1")
    g.data = NULL
    g.len = g.cap = 0
    try:
        for payload in payloads:
            borrow(payload, &b, "payload")
            try:
                if b.n < 0:
                    raise TypeError("0.7 messages cannot be null")
                put_v07(&g, magic, 0, b.p, b.n)
            finally:
                unborrow(&b)
        inner = PyBytes_FromStringAndSize(g.data, g.len)
        if not codec:
            return inner
        inner = _compress(codec, inner, 0)
        g.len = 0
        put_v07(&g, 1, codec, PyBytes_AS_STRING(inner), PyBytes_GET_SIZE(inner))
        return PyBytes_FromStringAndSize(g.data, g.len)
    finally:
        free(g.data)


# ---------------------------------------------------------- conveniences
def decode(data, *, topic=None, partition=None, int64_t min_offset=-1, bint check_crcs=True,
           bint include_control=False,
           Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES):
    """Decode ``data`` into :class:`Record` objects (see :class:`Decoder`)."""
    return Decoder(check_crcs=check_crcs, include_control=include_control,
                   max_decompressed_bytes=max_decompressed_bytes).decode(
                       data, topic=topic, partition=partition, min_offset=min_offset)


def decode_columnar(data, *, topic=None, partition=None, int64_t min_offset=-1,
                    bint check_crcs=True, bint include_control=False,
                    Py_ssize_t max_decompressed_bytes=_compression.DEFAULT_MAX_DECOMPRESSED_BYTES,
                    timestamp_unit="ms", Py_ssize_t max_column_bytes=INT32_MAX):
    """Decode ``data`` into a ``pyarrow.RecordBatch`` (see :class:`ColumnarDecoder`)."""
    return ColumnarDecoder(check_crcs=check_crcs, include_control=include_control,
                           max_decompressed_bytes=max_decompressed_bytes,
                           timestamp_unit=timestamp_unit, max_column_bytes=max_column_bytes).decode(
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


# --------------------------------------------------------------- partitioning
cdef uint32_t murmur2_raw(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    # MurmurHash2 (32 bit) as Kafka's Java client computes it: seed 0x9747b28c,
    # little-endian 4-byte blocks, the tail mixed in before the final mix.
    cdef uint32_t m = 0x5BD1E995
    cdef uint32_t h = 0x9747B28C
    cdef uint32_t k
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t blocks = n & ~3
    h ^= <uint32_t>n
    while i < blocks:
        k = (<uint32_t>p[i]) | (<uint32_t>p[i + 1] << 8) | (<uint32_t>p[i + 2] << 16) | (<uint32_t>p[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
        i += 4
    if n & 3:
        if (n & 3) == 3:
            h ^= <uint32_t>p[blocks + 2] << 16
        if (n & 3) >= 2:
            h ^= <uint32_t>p[blocks + 1] << 8
        h ^= p[blocks]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2(data) -> int:
    """Kafka's murmur2 hash of ``data`` (a bytes-like), as the Java client's
    ``Utils.murmur2`` returns it: a signed 32-bit int."""
    cdef Py_buffer view
    cdef uint32_t h
    if PyBytes_CheckExact(data):
        return <int32_t>murmur2_raw(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        h = murmur2_raw(<const uint8_t*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return <int32_t>h


def partition_for_key(key, int num_partitions) -> int:
    """The partition Kafka's default partitioner (and librdkafka's
    ``murmur2_random``) gives a non-null ``key``:
    ``(murmur2(key) & 0x7fffffff) % num_partitions``."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# ------------------------------------------------- producer accumulation
# The producer's send() runs here: choosing the partition, appending to the
# partition's open batch and making the record's future are one compiled
# call. Everything else (sealing, sending, retries) is Python, in
# kwire/producer.py, under the same lock.

cdef int held_grow(Held* h, Py_ssize_t cap) noexcept:
    """Room for ``cap`` records in ``h``'s arrays; -1 if out of memory
    (what they held is kept)."""
    cdef void* p = realloc(h.refs, 3 * cap * sizeof(PyObject*))
    if p == NULL:
        return -1
    h.refs = <PyObject**>p
    p = realloc(h.ts, cap * sizeof(int64_t))
    if p == NULL:
        return -1
    h.ts = <int64_t*>p
    p = realloc(h.sizes, 3 * cap * sizeof(int32_t))
    if p == NULL:
        return -1
    h.sizes = <int32_t*>p
    h.cap = cap
    return 0


@cython.auto_pickle(False)
cdef class ProducerBatch:
    """The producer's batch of one partition while it takes records. It
    holds each record by reference (key and value as bytes, a copy made of
    other buffers, headers encoded) with what its future reports
    (timestamp, key and value sizes); :func:`build_batches` encodes the
    records into ``builder`` (which starts empty) and builds the batch, on
    the sender thread without the GIL, so ``send()`` does not encode.
    ``bytes`` is what the batch counts against ``buffer_memory``;
    ``refused_size`` the size a batch of the last record it refused (for
    want of room, see :meth:`Accumulator.append`) alone would have.
    Subclassed by the producer for its send state."""
    cdef readonly str topic
    cdef readonly int partition
    cdef public RecordBatchBuilder builder
    cdef public Py_ssize_t bytes
    cdef readonly Py_ssize_t refused_size
    cdef Held held
    cdef bytes hbytes               # the last headers encoded, reused while the same pairs come again
    cdef int32_t hcount

    def __cinit__(self, str topic not None, int partition, RecordBatchBuilder builder not None, *args, **kwargs):
        if len(builder):
            raise ValueError("a ProducerBatch's builder must start empty")
        self.topic = topic
        self.partition = partition
        self.builder = builder

    def __dealloc__(self):
        held_release(&self.held)
        free(self.held.ts)
        free(self.held.sizes)

    def reserve(self, Py_ssize_t records):
        """Make room for ``records`` records at once (the producer passes the
        count of the partition's previous batch), so a batch's arrays are
        not grown and copied while send() fills it."""
        if self.builder is None:
            raise KwireError("the batch was already sealed")
        if records > self.held.cap and held_grow(&self.held, min(records, 1 << 20)) < 0:
            raise MemoryError()

    cdef int add(self, value, key, headers, int64_t ts, Py_ssize_t limit) except -1:
        """Hold one record (the producer's lock held); returns its index, or
        -2 (holding nothing) if the batch would then pass ``limit`` bytes
        encoded (uncompressed, header included; at most INT32_MAX, what a
        batch can be): the record does not fit. ``refused_size`` is then
        the size of a batch of it alone when the batch is empty."""
        cdef Held* h = &self.held
        cdef Py_ssize_t index = h.n, body, size, kn, vn, hlen = 0
        cdef int32_t hcount = 0
        cdef PyObject* k = NULL
        cdef PyObject* v = NULL
        if self.builder is None:
            raise KwireError("the batch was already sealed")
        if index == INT32_MAX:
            raise OverflowError("a batch holds at most 2**31 - 1 records")
        if index >= h.cap and held_grow(h, max(h.cap * 2, 64)) < 0:
            raise MemoryError()
        if headers:
            if self.hbytes is None or not self.builder.same_headers(headers):
                self.builder.encode_headers(headers)
                self.hbytes = PyBytes_FromStringAndSize(self.builder.hbuf.data, self.builder.hbuf.len)
                self.hcount = self.builder.hcount
            hcount = self.hcount
            hlen = PyBytes_GET_SIZE(self.hbytes)
        hold(key, &k, "key")
        try:
            hold(value, &v, "value")
        except BaseException:
            Py_XDECREF_(k)
            raise
        kn = bytes_size(k) if k != NULL else -1
        vn = bytes_size(v) if v != NULL else -1
        body = record_body_size(<int64_t>(<uint64_t>ts - <uint64_t>(h.ts[0] if index else ts)), <int32_t>index,
                                kn, vn, hcount, hlen)
        size = varint_size(body) + body
        if V2_HEADER + h.bytes + size > limit:          # limit <= INT32_MAX: body too, as Kafka needs
            Py_XDECREF_(k)
            Py_XDECREF_(v)
            self.refused_size = V2_HEADER + size
            return -2
        h.refs[3 * index] = k
        h.refs[3 * index + 1] = v
        h.refs[3 * index + 2] = NULL
        if hcount:
            h.refs[3 * index + 2] = <PyObject*>self.hbytes
            Py_INCREF_ptr(h.refs[3 * index + 2])
        h.ts[index] = ts
        h.sizes[3 * index] = <int32_t>kn
        h.sizes[3 * index + 1] = <int32_t>vn
        h.sizes[3 * index + 2] = hcount
        h.bytes += size
        h.n = index + 1
        return <int>index

    def append(self, value, key, headers, int64_t timestamp):
        """Hold one record (the producer's lock held); returns its index."""
        cdef int index = self.add(value, key, headers, timestamp, INT32_MAX)
        if index < 0:
            raise ValueError(f"a batch with this record would be {self.refused_size} bytes, larger than Kafka "
                             "allows (2 GiB)")
        return index

    @property
    def record_count(self):
        return self.held.n

    @property
    def encoded_size(self):
        """The size of its records once encoded (uncompressed)."""
        return self.held.bytes

    def record_meta(self, Py_ssize_t index):
        """``(timestamp, key size, value size)`` of record ``index``."""
        if not 0 <= index < self.held.n:
            raise IndexError(index)
        return self.held.ts[index], self.held.sizes[3 * index], self.held.sizes[3 * index + 1]


cdef inline int hold(object o, PyObject** out, str what) except -1:
    """A reference to ``o`` as bytes in ``out`` (NULL for None): bytes
    themselves, a copy of any other buffer (which could change after
    ``send()`` returns)."""
    cdef Bytes b
    cdef bytes copy
    if o is None:
        out[0] = NULL
        return 0
    if PyBytes_CheckExact(o) and PyBytes_GET_SIZE(o) <= INT32_MAX:    # the usual case, in short
        out[0] = <PyObject*>o
        Py_INCREF_ptr(out[0])
        return 0
    borrow(o, &b, what)          # checks the type and the size
    try:
        if PyBytes_Check(o):
            out[0] = <PyObject*>o
        else:
            copy = PyBytes_FromStringAndSize(b.p, b.n)
            out[0] = <PyObject*>copy
        Py_INCREF_ptr(out[0])
    finally:
        unborrow(&b)
    return 0


cdef void held_release(Held* h) noexcept:
    """Drop the references to the held records (GIL held); their
    timestamps and sizes stay for the futures."""
    cdef Py_ssize_t i
    if h.refs == NULL:
        return
    for i in range(3 * h.n):
        Py_XDECREF_(h.refs[i])
    free(h.refs)
    h.refs = NULL


@cython.auto_pickle(False)
@cython.freelist(256)
@cython.no_gc
cdef class RecordFuture:
    """The future of one sent record (record ``index`` of the producer's
    ``batch``): :meth:`get` returns its ``RecordMetadata`` (partition,
    offset, timestamp, sizes) once the broker acknowledged the batch, or
    raises the batch's error. The producer's batch supplies ``future`` (a
    :class:`kwire.future.Future`) and ``metadata(index)``.

    One is made per send(), so it is kept out of the cyclic GC. It can be
    in a cycle only through a callback that refers to it, on the batch's
    future, and a future drops its callbacks when it completes, which every
    batch's does (acknowledged, failed, or failed at close)."""
    cdef readonly ProducerBatch _batch
    cdef readonly Py_ssize_t _index

    def __init__(self, ProducerBatch batch not None, Py_ssize_t index):
        self._batch = batch
        self._index = index

    def done(self):
        return self._batch.future.done()

    def get(self, timeout=None):
        """Wait up to ``timeout`` s (None: for ever) and return the record's metadata."""
        self._batch.future.result(timeout)
        return self._batch.metadata(self._index)

    def result(self, timeout=None):
        """The same as :meth:`get`."""
        return self.get(timeout)

    def exception(self):
        """The error the record failed with, or None."""
        return self._batch.future.exception()

    def add_callback(self, fn):
        """Call ``fn(metadata, None)`` or ``fn(None, error)`` when done."""
        batch, index = self._batch, self._index

        def cb(f):
            if f.failed():
                fn(None, f.exception())
            else:
                fn(batch.metadata(index), None)

        self._batch.future.add_done_callback(cb)

    def __repr__(self):
        b = self._batch
        if b is None:                 # made with __new__ and never initialised
            return "<RecordFuture unbound>"
        return f"<RecordFuture {b.topic}[{b.partition}] #{self._index} {'done' if self.done() else 'pending'}>"


@cython.auto_pickle(False)
cdef class SendLock:
    """The producer's lock, usable like ``threading.Lock`` (``with``,
    ``acquire(blocking, timeout)``, ``release``, and so by
    ``threading.Condition``), whose compiled users take it without a
    Python call.

    Every acquire and release runs with the GIL held, so the GIL guards
    the lock's state (the extension does not declare itself free-threading
    compatible, so a free-threaded Python keeps its GIL while kwire is
    loaded): taking a free lock is a flag test, with no atomic
    instruction and no clock read (``PyThread_acquire_lock_timed`` reads
    the monotonic clock even when it does not wait, a tenth of a
    ``send()``). A thread that finds the lock taken waits without the GIL
    on ``gate``, a lock kept taken that a release opens while anyone
    waits; a woken waiter tries again, and waits again if another thread
    took the lock first. ``gate_open`` is true exactly while ``gate`` is
    released."""
    cdef PyThread_type_lock gate
    cdef bint held
    cdef bint gate_open
    cdef Py_ssize_t waiters

    def __cinit__(self):
        self.gate = PyThread_allocate_lock()
        if self.gate == NULL:
            raise MemoryError()
        PyThread_acquire_lock_timed(self.gate, 0, 0)      # closed: a new lock is free, so this cannot fail

    def __dealloc__(self):
        if self.gate != NULL:
            if not self.gate_open:
                PyThread_release_lock(self.gate)           # as CPython does: a lock is freed released
            PyThread_free_lock(self.gate)

    cdef inline bint try_acquire(self) noexcept:
        if self.held:
            return False
        self.held = True
        return True

    cdef inline void unlock(self) noexcept:
        self.held = False
        if self.waiters and not self.gate_open:
            self.gate_open = True
            PyThread_release_lock(self.gate)

    def acquire(self, bint blocking=True, double timeout=-1):
        cdef long long us = -1
        cdef int got
        cdef double deadline = 0
        if not blocking:
            if timeout != -1:
                raise ValueError("can't specify a timeout for a non-blocking call")
            return self.try_acquire()
        if timeout != -1 and not timeout >= 0:          # NaN too
            raise ValueError("timeout value must be a non-negative number")
        if self.try_acquire():
            return True
        if timeout >= 0:
            deadline = _monotonic() + timeout
        while True:
            if timeout >= 0:
                us = <long long>((deadline - _monotonic()) * 1e6)
                if us < 0:
                    us = 0
            self.waiters += 1
            with nogil:
                got = PyThread_acquire_lock_timed(self.gate, us, 0)
            self.waiters -= 1
            if got == 1:
                self.gate_open = False
            if self.try_acquire():
                return True
            if got != 1:
                return False                                # timed out

    def release(self):
        if not self.held:
            raise RuntimeError("release unlocked lock")
        self.unlock()

    def locked(self):
        return self.held

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


@cython.final
@cython.auto_pickle(False)
@cython.final
@cython.auto_pickle(False)
cdef class Generation:
    """A counter that compiled code reads without an attribute lookup.
    The cluster metadata bumps its own each time it takes in a Metadata
    response; the producer's compiled send compares it with the generation
    a topic's partitions were taken at."""
    cdef readonly int64_t value

    def bump(self):
        self.value += 1


@cython.final
cdef class _Topic:
    """What the compiled send path knows of one topic: its partitions as of
    metadata generation ``version`` (-1: none yet; a tuple, which no caller
    can empty under the send path's feet), ``count`` (how many it has: put()
    takes 0 to count - 1) and, by partition, the open batch or None (at
    most ``count`` slots when put() made them)."""
    cdef int64_t version
    cdef tuple parts
    cdef Py_ssize_t count
    cdef list slots

    def __cinit__(self):
        self.version = -1
        self.slots = []


from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE

cdef extern from "Python.h":
    # without Cython's error check: an int too large for Py_ssize_t is -1 with an error set
    Py_ssize_t long_as_ssize "PyLong_AsSsize_t"(object o) noexcept
    PyObject* PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept

# The Accumulator's cache of the previous send's topic starts with this,
# which no caller can pass (send() takes a str), so a first call cannot
# match it.
cdef object _NO_TOPIC = object()


@cython.auto_pickle(False)
cdef class Accumulator:
    """The compiled half of ``Producer.send``: when the record's partition
    is known, its batch is open and has room and the lock is free, it
    appends the record and returns its future without running Python;
    otherwise it calls ``slow`` (the producer's Python path, which waits,
    refreshes metadata, opens and seals batches and raises) with the same
    arguments. Its state is the producer's, guarded by ``lock`` (a
    :class:`SendLock`): ``open`` maps (topic, partition) to the open batch
    (change it with :meth:`put`, :meth:`take` and :meth:`clear`),
    ``sticky`` a topic to its partition for keyless records, and each
    topic's partitions are set with :meth:`set_partitions` for the metadata
    version they came from. Per topic it keeps all the compiled path needs
    in one place, found with one lookup (and none when the topic is the
    previous send's). ``generation`` is the cluster metadata's
    :class:`Generation`. A batch takes records until it reaches
    ``batch_size`` (then ``on_full`` is called) and never grows past
    ``max_batch_bytes`` (encoded, uncompressed; None, or more than
    2**31 - 1: 2**31 - 1, what the format allows)."""
    cdef readonly dict open
    cdef dict topics            # topic -> _Topic
    cdef object last_name       # the previous send's topic (_NO_TOPIC before the first), and its _Topic
    cdef _Topic last
    cdef public dict sticky
    cdef public Py_ssize_t buffered
    cdef public bint enabled
    cdef Py_ssize_t batch_size
    cdef Py_ssize_t max_batch
    cdef Generation generation
    cdef SendLock lock
    cdef object slow
    cdef object on_full

    def __init__(self, *, SendLock lock not None, Generation generation not None, slow, on_full,
                 Py_ssize_t batch_size, max_batch_bytes=None):
        self.open = {}
        self.topics = {}
        self.last_name = _NO_TOPIC
        self.last = None
        self.sticky = {}
        self.buffered = 0
        self.enabled = True
        self.lock = lock
        self.generation = generation
        self.slow = slow
        self.on_full = on_full
        self.batch_size = batch_size
        self.max_batch = INT32_MAX if max_batch_bytes is None else min(max_batch_bytes, INT32_MAX)

    cdef _Topic topic(self, str name):
        cdef _Topic t = self.topics.get(name)
        if t is None:
            t = self.topics[name] = _Topic()
        return t

    def set_partitions(self, str topic not None, int64_t version, parts, Py_ssize_t count=-1):
        """``topic`` has partitions ``parts`` (a sequence of ints) as of
        metadata generation ``version``, out of ``count`` (the number of
        partitions the metadata lists, when it dropped malformed entries;
        default: as many as ``parts``). put() takes partitions 0 to count - 1
        only, whatever ``parts`` holds."""
        cdef _Topic t
        cdef tuple kept = tuple(parts)
        cdef Py_ssize_t n = len(kept) if count < 0 else count
        if not kept:
            raise ValueError("a topic has at least one partition")
        t = self.topic(topic)
        t.version = version
        t.parts = kept
        t.count = n

    def known_partitions(self, str topic not None, int64_t version):
        """The partitions set for ``topic`` (a tuple) if they are of
        metadata generation ``version``, else None."""
        cdef _Topic t = self.topics.get(topic)
        return t.parts if t is not None and t.version == version else None

    def put(self, tuple tp not None, ProducerBatch batch not None):
        """Make ``batch`` the open batch of ``tp`` (lock held). The
        partition must be one of the topic's (set with
        :meth:`set_partitions`): 0 to the partition count - 1, so what is
        kept per partition is bounded by what the topic has."""
        cdef str name
        cdef _Topic t
        cdef list slots
        cdef Py_ssize_t p
        name, p = tp                     # unpacked: a short tuple is a ValueError, not a read past it
        t = self.topics.get(name)
        if t is None or t.parts is None:
            raise ValueError(f"no partitions known for topic {name!r}: set_partitions first")
        if not 0 <= p < t.count:
            raise ValueError(f"partition {p} is not one of topic {name!r}'s {t.count} partitions")
        slots = t.slots
        if len(slots) <= p:
            slots.extend([None] * (p + 1 - len(slots)))
        slots[p] = batch
        self.open[tp] = batch

    def take(self, tuple tp not None):
        """Remove and return the open batch of ``tp`` (lock held)."""
        cdef list slots
        cdef Py_ssize_t p
        batch = self.open.pop(tp)
        name, p = tp
        slots = (<_Topic>self.topics[name]).slots
        if 0 <= p < len(slots):          # put() made its slot (unless ``open`` was changed by hand)
            slots[p] = None
        return batch

    def clear(self):
        """Forget every open batch (lock held)."""
        self.open.clear()
        for t in self.topics.values():
            (<_Topic>t).slots = []

    def send(self, str topic not None, value=None, key=None, headers=None, partition=None, timestamp_ms=None):
        """``Producer.send``'s arguments; returns the record's future."""
        cdef _Topic t
        cdef tuple parts
        cdef list slots
        cdef PyObject* batch
        cdef RecordFuture fut
        cdef Py_ssize_t n, p
        cdef int32_t h
        cdef int64_t ts
        if not self.enabled:
            return self.slow(topic, value, key, headers, partition, timestamp_ms)
        if topic is self.last_name:
            t = self.last
        else:
            t = self.topics.get(topic)
            if t is None:
                return self.slow(topic, value, key, headers, partition, timestamp_ms)
            self.last_name = topic
            self.last = t
        if partition is None:
            if t.version != self.generation.value:             # partitions of other metadata, or none
                return self.slow(topic, value, key, headers, partition, timestamp_ms)
            if key is not None:
                parts = t.parts
                n = len(parts)
                if PyBytes_CheckExact(key):
                    h = <int32_t>murmur2_raw(<const uint8_t*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
                else:
                    h = murmur2(key)
                partition = parts[(h & 0x7FFFFFFF) % n]
            else:
                partition = self.sticky.get(topic)
                if partition is None:
                    return self.slow(topic, value, key, headers, partition, timestamp_ms)
            if not PyLong_CheckExact(partition):
                return self.slow(topic, value, key, headers, partition, timestamp_ms)
            p = partition                                       # one of the topic's: small
        else:                                                   # the caller's: any int, or not one
            if not PyLong_CheckExact(partition):
                return self.slow(topic, value, key, headers, partition, timestamp_ms)
            p = long_as_ssize(partition)
            if p == -1 and PyErr_Occurred() != NULL:            # too large for any partition
                PyErr_Clear()
        ts = kwire_now_ms() if timestamp_ms is None else <int64_t>timestamp_ms
        if not self.lock.try_acquire():
            return self.slow(topic, value, key, headers, partition, ts)
        try:
            slots = t.slots
            if 0 <= p < PyList_GET_SIZE(slots):
                batch = PyList_GET_ITEM(slots, p)              # borrowed: the lock keeps it there
                if batch != <PyObject*>None:
                    fut = self.add_to(topic, partition, <ProducerBatch>batch, value, key, headers, ts)
                    if fut is not None:
                        return fut
        finally:
            self.lock.unlock()
        return self.slow(topic, value, key, headers, partition, ts)

    cdef RecordFuture add_to(self, str topic, object partition, ProducerBatch batch, value, key, headers,
                             int64_t ts):
        """Append to ``batch`` (lock held): count its growth against the
        buffer, hand it over once it reaches ``batch_size``, and return the
        record's future; None (nothing added) if the batch has no room for
        the record (``max_batch_bytes``)."""
        cdef Py_ssize_t size
        cdef int index = batch.add(value, key, headers, ts, self.max_batch)
        cdef RecordFuture fut
        if index < 0:
            return None
        fut = RecordFuture.__new__(RecordFuture)
        fut._index = index
        fut._batch = batch
        size = V2_HEADER + batch.held.bytes
        self.buffered += size - batch.bytes
        batch.bytes = size
        if size >= self.batch_size:
            self.on_full((topic, partition), batch)
        return fut

    def append(self, str topic not None, partition, ProducerBatch batch not None, value, key, headers,
               int64_t timestamp):
        """The slow path's append to ``batch`` (lock held), as :meth:`send`
        appends: the record's future, or None if the batch has no room for
        it (nothing added; if the batch is empty, the record alone is too
        large: its size is ``batch.refused_size``)."""
        return self.add_to(topic, partition, batch, value, key, headers, timestamp)
