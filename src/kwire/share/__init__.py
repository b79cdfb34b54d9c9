"""Share groups (KIP-932, "queues for Kafka"): records of a topic handed to
whichever member is free, each acknowledged on its own.

- :mod:`kwire.share.acks`: the acknowledgement types and their batches;
- :mod:`kwire.share.session`: one broker's share session (epochs, the
  partitions it holds);
- :class:`kwire._core.acquired.ShareRecord`: a record with its delivery
  count (:func:`kwire._core.acquired.take_acquired` sorts a ShareFetch
  answer's records by the ranges acquired for the member).
"""

from kwire._core.acquired import ShareRecord
from kwire.share.acks import AcknowledgeType

__all__ = ["AcknowledgeType", "ShareRecord"]
