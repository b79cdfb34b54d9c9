# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The native entry points of kwire's compiled core: CRC32C, lz4 and zstd,
called through the C functions of the libraries the Python packages link
(found at import), taking plain buffers."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t
from libc.stdlib cimport free
from libc.string cimport memcpy, memset

from kwire._core.buffers cimport GBuf, gbuf_reserve
from kwire._core.consts cimport CODEC_LZ4, CODEC_ZSTD

import google_crc32c as _google_crc32c

from kwire import compression as _compression

# CRC32C: kwire's own on x86-64 CPUs with SSE4.2 (crc32c.h: three streams of
# the crc32 instruction; google-crc32c's widest loop ran at a third of the
# speed on inputs of 16 KiB and more), checked against google-crc32c here;
# elsewhere google-crc32c's C library (hardware CRC instructions where the
# CPU has them). Its Python functions take only ``bytes`` and keep the GIL
# for inputs under 1 MiB, so kwire calls the library's C function directly,
# found through the extension module that links it: no copy, no GIL.
cdef extern from "crc32c.h":
    ctypedef uint32_t (*kw_crc32c_fn)(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil
    kw_crc32c_fn kw_crc32c_hw() noexcept nogil


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


cdef crc32c_extend_t _google_extend = <crc32c_extend_t><size_t>_crc32c_address()
if _google_extend(0, <const uint8_t*>b"123456789", 9) != 0xE3069283:
    raise ImportError("google-crc32c's crc32c_extend gave a wrong check value")


cdef crc32c_extend_t _own_crc32c():
    """kwire's CRC32C for this CPU, if it has one and it agrees with
    google-crc32c on inputs that take every one of its loops; else NULL."""
    cdef kw_crc32c_fn own = kw_crc32c_hw()
    cdef bytes probe
    cdef const uint8_t* p
    cdef size_t n, start
    if own == NULL:
        return NULL
    probe = bytes((i * 131 + (i >> 7) * 17) & 0xFF for i in range(40_000))
    p = <const uint8_t*>PyBytes_AS_STRING(probe)
    for start in (0, 1, 5):
        for n in (0, 1, 7, 8, 9, 335, 1008, 1009, 3 * 336, 3 * 1360 + 13, 3 * 5440, 3 * 5440 + 4111, 39_000):
            if own(0x12345678, p + start, n) != _google_extend(0x12345678, p + start, n):
                raise ImportError(f"kwire's CRC32C disagrees with google-crc32c's on {n} bytes")
    return <crc32c_extend_t>own


_crc32c_extend = _own_crc32c()
#: which CRC32C the core runs
CRC32C_IMPLEMENTATION = "kwire (SSE4.2, 3 streams)" if _crc32c_extend != NULL else "google-crc32c"
if _crc32c_extend == NULL:
    _crc32c_extend = _google_extend


cdef object _compress = _compression.compress

# Producers compress many batches per turn of their sender thread. Through
# the codec packages' Python functions each batch would release and retake
# the GIL, and a busy sending thread makes every retake wait out a GIL switch
# interval (5 ms). So lz4 and zstd are called through the C entry points of
# the libraries those packages link (found like CRC32C above), and
# :func:`build_batches` compresses every batch of a turn without the GIL.
# Where an entry point cannot be found, or its output differs from the
# package's, the Python functions are used and a warning says so.

cdef inline void lz4f_prefs(LZ4FPrefs* prefs, int level) noexcept nogil:
    # like Kafka's Java writer and compression.py: independent 64 KiB blocks, no checksums, no size
    memset(prefs, 0, sizeof(LZ4FPrefs))
    prefs.frameInfo.blockSizeID = 4          # LZ4F_max64KB
    prefs.frameInfo.blockMode = 1            # LZ4F_blockIndependent
    prefs.compressionLevel = level


cdef Py_ssize_t native_bound(int codec, int level, Py_ssize_t n) noexcept nogil:
    """The most bytes ``native_compress`` can make of ``n`` bytes with
    ``codec`` (0: copied)."""
    cdef LZ4FPrefs prefs
    if codec == CODEC_LZ4:
        lz4f_prefs(&prefs, level)
        return <Py_ssize_t>_lz4f_bound(<size_t>n, &prefs)
    if codec == CODEC_ZSTD:
        return <Py_ssize_t>_zstd_bound(<size_t>n)
    return n


cdef Py_ssize_t native_compress(int codec, int level, char* dst, Py_ssize_t cap, const char* src,
                                Py_ssize_t n, void* zctx) noexcept nogil:
    """Compress ``src[:n]`` with ``codec`` at ``level`` into ``dst`` (room
    for ``cap`` bytes; ``zctx``: a zstd context for zstd), or copy it there
    when ``codec`` is 0; its size, or -1 if the codec failed."""
    cdef LZ4FPrefs prefs
    cdef size_t size
    if codec == CODEC_LZ4:
        lz4f_prefs(&prefs, level)
        size = _lz4f_compress(dst, <size_t>cap, src, <size_t>n, &prefs)
        return -1 if _lz4f_is_error(size) else <Py_ssize_t>size
    if codec == CODEC_ZSTD:
        size = _zstd_compress(zctx, dst, <size_t>cap, src, <size_t>n, level)
        return -1 if _zstd_is_error(size) else <Py_ssize_t>size
    if dst != src:
        memcpy(dst, src, n)
    return n


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
    if not _native_usable("lz4", "compress", _native_compression_check(CODEC_LZ4, "lz4", why)):
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
    if not _native_usable("zstd", "compress", _native_compression_check(CODEC_ZSTD, "zstd", why)):
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
    if why is None and _native_compress(codec, sample, ZSTD_DEFAULT_LEVEL if codec == CODEC_ZSTD else LZ4_DEFAULT_LEVEL) != _compress(codec, sample, 2, None):
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
    frame = _compress(CODEC_LZ4, sample, 2, None)
    memset(&out, 0, sizeof(GBuf))
    try:
        if _lz4f_is_error(_lz4f_dctx_create(&dctx, LZ4F_VERSION)):
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


def _native_compress(int codec, bytes data not None, int level):
    """``data`` compressed through the C entry points (the import-time check)."""
    cdef bytes out
    cdef void* zctx = NULL
    cdef Py_ssize_t cap = native_bound(codec, level, PyBytes_GET_SIZE(data))
    out = PyBytes_FromStringAndSize(NULL, cap)
    if codec == CODEC_ZSTD:
        zctx = _zstd_create()
        if zctx == NULL:
            raise MemoryError()
    n = native_compress(codec, level, PyBytes_AS_STRING(out), cap, PyBytes_AS_STRING(data),
                        PyBytes_GET_SIZE(data), zctx)
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


def crc32c_extend(uint32_t crc, data not None):
    """``crc`` extended over ``data`` (any buffer) by the core's CRC32C, as
    google-crc32c's ``extend`` does (:data:`CRC32C_IMPLEMENTATION` says
    which runs). For tests and tools: the core calls it in C."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B")
    if view.shape[0] == 0:
        return crc
    return _crc32c_extend(crc, &view[0], <size_t>view.shape[0])
