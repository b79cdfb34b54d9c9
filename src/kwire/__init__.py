"""kwire: a Kafka wire-protocol client for Python with a compiled Cython core.

The record codec is compiled: the extension modules of :mod:`kwire._core`,
whose public names :mod:`kwire._codec` re-exports. There is no pure-Python
fallback, so importing kwire fails loudly if any of them cannot load.

The clients and their vocabulary are here too (``kwire.Producer``,
``kwire.Consumer``, ``kwire.Admin``, ``kwire.NewTopic``,
``kwire.TopicPartition``..., and ``kwire.scan``: a bounded read of a topic
as Arrow), imported on first use (PEP 562), so that
``import kwire`` loads the codec alone; type checkers see them through the
``TYPE_CHECKING`` imports below.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, Dict, List

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

#: The public classes of the clients, by the module that defines them:
#: imported when first asked for (``kwire.Producer``), never by ``import kwire``.
_LAZY: Dict[str, str] = {
    **dict.fromkeys(("Producer", "RecordFuture", "BufferFullError", "RecordTooLargeError"), "kwire.producer"),
    **dict.fromkeys(("Consumer", "NoOffsetForPartitionError", "PositionOutOfRangeError", "LogTruncationError"),
                    "kwire.consumer"),
    **dict.fromkeys(("Admin", "NewTopic", "TopicDescription", "ClusterDescription", "ConfigEntry", "GroupListing",
                     "GroupDescription", "MemberDescription", "DelegationToken"), "kwire.admin"),
    **dict.fromkeys(("TopicPartition", "OffsetAndTimestamp", "OffsetAndMetadata", "ConsumerGroupMetadata",
                     "RecordMetadata", "ProducerRecord", "ConsumerRecord", "EARLIEST", "LATEST"), "kwire.types"),
    "AclBinding": "kwire.acl",
    "RebalanceListener": "kwire.group",
    "CommitFailedError": "kwire.commit",
    **dict.fromkeys(("RangeAssignor", "RoundRobinAssignor", "CooperativeStickyAssignor"), "kwire.assignors"),
    **dict.fromkeys(("Future", "KafkaTimeoutError"), "kwire.future"),
    **dict.fromkeys(("TransactionAbortedError", "TransactionStateError"), "kwire.transactions"),
    **dict.fromkeys(("ProducerClosedError", "InvalidPartitionError", "IllegalStateError"), "kwire.errors"),
    "SaslAuthenticationError": "kwire.sasl",
    "TlsError": "kwire.net",
    "ConfigError": "kwire.config",
    "NoBrokersAvailableError": "kwire.client",
    "scan": "kwire.scanning",
}

if TYPE_CHECKING:
    from kwire.acl import AclBinding
    from kwire.admin import (Admin, ClusterDescription, ConfigEntry, DelegationToken, GroupDescription,
                             GroupListing, MemberDescription, NewTopic, TopicDescription)
    from kwire.assignors import CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor
    from kwire.client import NoBrokersAvailableError
    from kwire.commit import CommitFailedError
    from kwire.config import ConfigError
    from kwire.consumer import Consumer, LogTruncationError, NoOffsetForPartitionError, PositionOutOfRangeError
    from kwire.errors import IllegalStateError, InvalidPartitionError, ProducerClosedError
    from kwire.future import Future, KafkaTimeoutError
    from kwire.group import RebalanceListener
    from kwire.net import TlsError
    from kwire.producer import BufferFullError, Producer, RecordFuture, RecordTooLargeError
    from kwire.sasl import SaslAuthenticationError
    from kwire.scanning import scan
    from kwire.transactions import TransactionAbortedError, TransactionStateError
    from kwire.types import (EARLIEST, LATEST, ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata,
                             OffsetAndTimestamp, ProducerRecord, RecordMetadata, TopicPartition)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kwire' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value         # once: later lookups do not come here
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    # the clients and their vocabulary (imported on first use: _LAZY)
    "Producer", "RecordFuture", "BufferFullError", "RecordTooLargeError", "Consumer",
    "NoOffsetForPartitionError", "PositionOutOfRangeError", "LogTruncationError", "Admin", "NewTopic",
    "TopicDescription", "ClusterDescription", "ConfigEntry", "GroupListing", "GroupDescription",
    "MemberDescription", "DelegationToken", "TopicPartition", "OffsetAndTimestamp", "OffsetAndMetadata",
    "ConsumerGroupMetadata", "RecordMetadata", "ProducerRecord", "ConsumerRecord", "EARLIEST", "LATEST", "AclBinding", "RebalanceListener",
    "CommitFailedError", "RangeAssignor", "RoundRobinAssignor", "CooperativeStickyAssignor", "Future",
    "KafkaTimeoutError", "TransactionAbortedError", "TransactionStateError", "ProducerClosedError",
    "InvalidPartitionError", "IllegalStateError", "SaslAuthenticationError", "TlsError", "ConfigError", "NoBrokersAvailableError",
    "scan",
]
