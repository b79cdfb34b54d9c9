# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The C entry points kwire's compiled core calls natively (see native.pyx):
CRC32C from google-crc32c's library, lz4 frame compression and
decompression and zstd compression from the libraries the lz4 and
zstandard packages link. The entry points are found when the module is
imported; a pointer left NULL means the Python API is used instead."""

from libc.stdint cimport uint8_t, uint32_t

from kwire._core.buffers cimport GBuf

ctypedef uint32_t (*crc32c_extend_t)(uint32_t crc, const uint8_t* data, size_t n) noexcept nogil
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

cdef crc32c_extend_t _crc32c_extend
cdef lz4f_dctx_create_t _lz4f_dctx_create
cdef lz4f_dctx_free_t _lz4f_dctx_free
cdef lz4f_dctx_reset_t _lz4f_dctx_reset
cdef lz4f_decompress_t _lz4f_decompress
cdef lz4f_bound_t _lz4f_bound
cdef lz4f_compress_t _lz4f_compress
cdef is_error_t _lz4f_is_error
cdef zstd_create_t _zstd_create
cdef zstd_free_t _zstd_free
cdef zstd_bound_t _zstd_bound
cdef zstd_compress_t _zstd_compress
cdef is_error_t _zstd_is_error


cdef inline uint32_t crc32c(const void* p, Py_ssize_t n) noexcept nogil:
    return _crc32c_extend(0, <const uint8_t*>p, <size_t>n)


cdef enum:                # lz4_frame_decompress's errors
    LZ4_CORRUPT = 1
    LZ4_BOMB = 2
    LZ4_NOMEM = 3


cdef enum:
    # the compression levels the lz4 and zstandard packages default to
    # (kwire.compression's too): what a batch gets when none is given
    LZ4_DEFAULT_LEVEL = 0
    ZSTD_DEFAULT_LEVEL = 3
    LZ4F_VERSION = 100          # lz4frame.h's LZ4F_VERSION, for LZ4F_createDecompressionContext

cdef Py_ssize_t native_bound(int codec, int level, Py_ssize_t n) noexcept nogil
cdef Py_ssize_t native_compress(int codec, int level, char* dst, Py_ssize_t cap, const char* src,
                                Py_ssize_t n, void* zctx) noexcept nogil
cdef Py_ssize_t lz4_frame_decompress(void* dctx, const uint8_t* src, Py_ssize_t n, GBuf* out, Py_ssize_t limit,
                                     int* err) noexcept nogil
