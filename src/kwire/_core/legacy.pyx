# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=True
"""Legacy formats, read and write: the message sets of magic 0 and 1
(:class:`LegacyMessageSetBuilder`; the decoders of records.pyx read them,
mixed with v2 batches, in their batch walk) and Kafka 0.7 messages
(:func:`decode_v07`, :func:`encode_v07`)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport INT32_MAX, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free

from kwire._core.buffers cimport (Bytes, GBuf, add_wrap, borrow, gbuf_reserve, load_be32, put_be32, put_be64,
                                  put_raw, store_be32, unborrow)
from kwire._core.build cimport _Builder, timestamp_arg
from kwire._core.consts cimport *
from kwire._core.records cimport BatchInfo, DecodeResult, Record, _Pinned

from kwire import compression as _compression
from kwire._core.records import _ERROR_MESSAGES
from kwire.errors import CorruptRecordError, CrcMismatchError, UnsupportedCodecError

cdef extern from "zlib.h" nogil:
    unsigned long _zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf, unsigned int n)

cdef object _decompress = _compression.decompress
cdef object _compress = _compression.compress
cdef object _codec_id = _compression.codec_id
cdef dict _MESSAGES = _ERROR_MESSAGES


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
        if m.codec == CODEC_NONE:
            bi.record_count = 1
            res.records.append(record_v07(bi, buf + m.payload_pos, m.payload_len))
        else:
            if m.codec > CODEC_MAX_V07:
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
        if self.codec == CODEC_ZSTD:
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
    if codec > CODEC_MAX_V07:
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
