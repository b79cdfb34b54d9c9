"""Share groups (KIP-932, "queues for Kafka"): records of a topic handed to
whichever member is free, each acknowledged on its own.

- :class:`ShareConsumer` (:mod:`kwire.share.consumer`): a member; its
  records are :class:`ShareRecord` objects, with their delivery count;
- :mod:`kwire.share.membership`: ShareGroupHeartbeat;
- :mod:`kwire.share.session`: one broker's share session (epochs, the
  partitions it holds), without I/O;
- :mod:`kwire.share.acks`: the acknowledgement types and their batches;
- :func:`kwire._core.acquired.take_acquired` (compiled): a ShareFetch
  answer's records sorted by the ranges acquired for the member.
"""

from kwire._core.acquired import ShareRecord
from kwire.share.acks import AcknowledgeType
from kwire.share.consumer import AcknowledgementCallback, ShareConsumer

__all__ = ["ShareConsumer", "ShareRecord", "AcknowledgeType", "AcknowledgementCallback"]
