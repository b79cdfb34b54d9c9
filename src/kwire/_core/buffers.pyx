# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""The out-of-line part of buffers.pxd: :c:func:`borrow` of anything but
None or bytes (another buffer, or an error), compiled once here and called
as a C function from the other modules of the core."""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport INT32_MAX


cdef int borrow_other(object o, Bytes* b, str what) except -1:
    """:c:func:`borrow` of anything but None or bytes of at most INT32_MAX
    bytes: another buffer (held until ``unborrow``), or an error."""
    b.release = False
    if PyBytes_Check(o):
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
