"""kwire's compiled record codec: the public face of the compiled core.

The core is the Cython package :mod:`kwire._core`, one extension module per
concern (see its modules' docstrings):

* ``buffers``: the byte-level helpers (mostly inline, in buffers.pxd);
* ``native``: CRC32C, lz4 and zstd through their libraries' C entry points;
* ``records``: the batch walk, the v2 record parser, :class:`Decoder` and
  the result types, :func:`split_batches`, read_committed's
  :class:`Aborter`;
* ``columnar``: :class:`ColumnarDecoder` (Arrow columns);
* ``legacy``: magic 0/1 message sets and Kafka 0.7 messages, read and write;
* ``build``: :class:`RecordBatchBuilder`, :class:`ProducerBatch`,
  :func:`build_batches`, :func:`restamp_batch`;
* ``send``: the producer's compiled send path (:class:`Accumulator`) and
  murmur2 partitioning.

This module is itself compiled (a thin Cython module over the extensions of
``_core``, so ``kwire._codec.__file__`` is an extension): it re-exports their
public names (the stub ``_codec.pyi`` types them), and importing it fails if
any extension of the core cannot be loaded. It defines nothing of its own.
"""

from kwire._core.native import (CRC32C_IMPLEMENTATION, _native_compress, _native_compression_check, _native_usable,
                                compiled_codecs, crc32c_extend)
from kwire._core.records import (CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE, Aborter, BatchInfo, Decoder,
                                 DecodeResult, PartialBatch, Record, SplitResult, decode, parse_control_key,
                                 resize_frame, split_batches)
from kwire._core.columnar import ColumnarDecoder, ColumnarResult, decode_columnar
from kwire._core.build import ProducerBatch, RecordBatchBuilder, build_batches, build_threads, restamp_batch
from kwire._core.legacy import LegacyMessageSetBuilder, decode_v07, encode_v07
from kwire._core.send import (Accumulator, Generation, RecordFuture, SendingProducer, SendLock, murmur2,
                              partition_for_key)

__all__ = [
    "NO_TIMESTAMP_TYPE", "CREATE_TIME", "LOG_APPEND_TIME",
    "BatchInfo", "Record", "DecodeResult", "PartialBatch", "SplitResult", "Decoder", "decode", "Aborter",
    "split_batches", "parse_control_key", "resize_frame",
    "ColumnarDecoder", "ColumnarResult", "decode_columnar",
    "LegacyMessageSetBuilder", "decode_v07", "encode_v07",
    "RecordBatchBuilder", "ProducerBatch", "build_batches", "build_threads", "restamp_batch",
    "Accumulator", "Generation", "RecordFuture", "SendingProducer", "SendLock", "murmur2", "partition_for_key",
    "compiled_codecs", "crc32c_extend", "CRC32C_IMPLEMENTATION",
]
