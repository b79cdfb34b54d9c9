# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""UTF-8 validation of the compiled core: Arrow's string columns must hold
valid UTF-8 (the columnar decoder's header keys, the typed decoders' strings)."""

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy


cdef inline Py_ssize_t utf8_invalid_at(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Index of the first byte that makes ``s`` invalid UTF-8, or -1."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    cdef int need
    cdef uint64_t w
    while i < n:
        if n - i >= 8:                       # ASCII, eight bytes at a time
            memcpy(&w, s + i, 8)
            if (w & 0x8080808080808080ULL) == 0:
                i += 8
                continue
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
