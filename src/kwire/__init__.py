"""kwire: a Kafka wire-protocol client for Python with a compiled Cython core.

The record codec is compiled: the extension modules of :mod:`kwire._core`,
whose public names :mod:`kwire._codec` re-exports. There is no pure-Python
fallback, so importing kwire fails loudly if any of them cannot load.
"""

from __future__ import annotations

__version__ = "0.1.0"

try:
    from kwire import _codec
except ImportError as _e:  # pragma: no cover - only on a broken install
    raise ImportError(
        "kwire's compiled codec (the extension modules of kwire._core, re-exported by kwire._codec) "
        f"could not be loaded: {_e}. kwire has no slow pure-Python fallback; install a kwire wheel "
        "for this platform, or build from source with a C compiler "
        "(pip install kwire --no-binary kwire)."
    ) from _e

from kwire._codec import (
    Aborter,
    BatchInfo,
    ColumnarDecoder,
    ColumnarResult,
    Decoder,
    DecodeResult,
    LegacyMessageSetBuilder,
    PartialBatch,
    Record,
    RecordBatchBuilder,
    SplitResult,
    decode,
    decode_columnar,
    decode_v07,
    encode_v07,
    murmur2,
    parse_control_key,
    partition_for_key,
    restamp_batch,
    split_batches,
)
from kwire.compression import CODEC_NAMES, DEFAULT_MAX_DECOMPRESSED_BYTES
from kwire.errors import (
    CorruptRecordError,
    CrcMismatchError,
    DecompressionBombError,
    DecompressionError,
    KafkaError,
    KwireError,
    ProtocolError,
    UnsupportedCodecError,
)

__all__ = [
    "__version__",
    "Aborter",
    "BatchInfo",
    "ColumnarDecoder",
    "ColumnarResult",
    "Decoder",
    "DecodeResult",
    "LegacyMessageSetBuilder",
    "PartialBatch",
    "Record",
    "RecordBatchBuilder",
    "SplitResult",
    "decode",
    "decode_columnar",
    "decode_v07",
    "encode_v07",
    "murmur2",
    "parse_control_key",
    "partition_for_key",
    "restamp_batch",
    "split_batches",
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionBombError",
    "DecompressionError",
    "KafkaError",
    "KwireError",
    "ProtocolError",
    "UnsupportedCodecError",
]
