# cython: language_level=3
"""Constants of kwire's compiled core: sizes of the record formats, attribute
bits and the error codes carried through code that runs without the GIL."""

cdef enum:
    LOG_OVERHEAD = 12      # offset int64 + size int32 before every batch/message
    V2_HEADER = 61         # whole v2 batch header, LOG_OVERHEAD included
    V2_CRC_START = 21      # CRC32C covers attributes .. end of batch (V2_ATTRIBUTES on)
    MAGIC_POS = 16         # the magic byte is at the same place in v0, v1, v2
    V0_MIN_SIZE = 14       # crc + magic + attributes + key len + value len
    V1_MIN_SIZE = 22       # v0 + timestamp
    V2_MIN_SIZE = 49       # V2_HEADER - LOG_OVERHEAD

# The v2 batch header: where each field starts, from the batch's first byte.
cdef enum:
    V2_BASE_OFFSET = 0          # int64
    V2_LENGTH = 8               # int32: the size of the rest of the batch
    V2_LEADER_EPOCH = 12        # int32: partition leader epoch
    V2_MAGIC = 16               # int8: 2 (MAGIC_POS)
    V2_CRC = 17                 # uint32: CRC32C from V2_ATTRIBUTES to the batch's end
    V2_ATTRIBUTES = 21          # int16 (ATTR_* bits)
    V2_LAST_OFFSET_DELTA = 23   # int32
    V2_FIRST_TIMESTAMP = 27     # int64
    V2_MAX_TIMESTAMP = 35       # int64
    V2_PRODUCER_ID = 43         # int64
    V2_PRODUCER_EPOCH = 51      # int16
    V2_BASE_SEQUENCE = 53       # int32
    V2_RECORD_COUNT = 57        # int32; the records follow, at V2_HEADER

cdef enum:
    ATTR_CODEC = 0x07
    ATTR_LOG_APPEND_TIME = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20

# Compression codec ids (the ATTR_CODEC bits; kwire.compression names them).
cdef enum:
    CODEC_NONE = 0
    CODEC_GZIP = 1
    CODEC_SNAPPY = 2
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4
    CODEC_MAX = CODEC_ZSTD          # the highest id Kafka defines
    CODEC_MAX_V07 = CODEC_SNAPPY    # Kafka 0.7 knows gzip and snappy only

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
