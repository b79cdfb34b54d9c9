# cython: language_level=3, boundscheck=False, wraparound=False
"""A share group's records (KIP-932): what a ShareFetch answer hands a
member, taken from the partition's decoded records.

A broker answers a ShareFetch with whole record batches and, beside them,
the offset ranges it acquired for this member (``AcquiredRecords``: first,
last, delivery count). Only the records inside those ranges are the
member's; the others are someone else's, or not available. An acquired
offset without a record (a control record, an offset compacted away, the
tail of a range past the last record) is a gap the member acknowledges as
such. :func:`take_acquired` does that sorting in one pass, into
:class:`ShareRecord` objects (used by :mod:`kwire.share`).
"""

from libc.stdint cimport int64_t

from kwire._core.records cimport BatchInfo, Record


cdef class ShareRecord:
    """A record of a share group: :class:`kwire._codec.Record`'s fields,
    its ``topic`` and ``partition`` (what
    :meth:`kwire.share.ShareConsumer.acknowledge` needs), and
    ``delivery_count``, how many times it has been delivered, this delivery
    included (1 the first time)."""
    cdef readonly str topic
    cdef readonly int partition
    cdef readonly object offset
    cdef readonly object timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly tuple headers
    cdef readonly BatchInfo batch
    cdef readonly int delivery_count

    @property
    def timestamp_type(self):
        """-1 (none), 0 (CreateTime) or 1 (LogAppendTime): its batch's."""
        return self.batch.timestamp_type

    def __repr__(self):
        return (f"ShareRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, delivery_count={self.delivery_count}, "
                f"timestamp={self.timestamp}, timestamp_type={self.timestamp_type}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, ShareRecord):
            return NotImplemented
        o = <ShareRecord>other
        return (self.topic == o.topic and self.partition == o.partition
                and self.offset == o.offset and self.delivery_count == o.delivery_count
                and self.timestamp == o.timestamp and self.key == o.key and self.value == o.value
                and self.headers == o.headers)

    __hash__ = None


cdef ShareRecord _share(Record r, int count, str topic, int partition):
    cdef ShareRecord s = ShareRecord.__new__(ShareRecord)
    s.topic = topic
    s.partition = partition
    s.offset = r.offset
    s.timestamp = r.timestamp
    s.key = r.key
    s.value = r.value
    s.headers = r.headers
    s.batch = r.batch
    s.delivery_count = count
    return s


def take_acquired(list records not None, list ranges not None, str topic=None, int partition=-1):
    """Sort one partition's decoded ``records`` (of ``topic`` and ``partition``) (ascending offsets, as a
    decoder returns them) by the ``ranges`` acquired for the member: a list
    of ``(first, last, delivery_count)``, ascending and not overlapping
    (:func:`kwire.share.acks.merge_ranges` makes them so).

    Returns ``(taken, gaps)``: the records inside a range as
    :class:`ShareRecord` with that range's delivery count, in offset order,
    and the acquired offsets that had no record, as ``(first, last)``
    ranges. Records outside every range are left out."""
    cdef list taken = []
    cdef list gaps = []
    cdef Py_ssize_t i = 0, n = len(records)
    cdef int64_t first, last, at, off, upto
    cdef int count
    cdef Record r
    for rng in ranges:
        first, last, count = rng
        if last < first:
            raise ValueError(f"acquired range {first}..{last} ends before it begins")
        at = first
        while at <= last:
            while i < n and <int64_t>(<Record>records[i]).offset < at:
                i += 1                      # before the range, or a record already passed
            if i == n:
                gaps.append((at, last))
                break
            r = <Record>records[i]
            off = r.offset
            if off > at:                    # acquired offsets without a record, up to this one
                upto = off - 1 if off - 1 < last else last
                gaps.append((at, upto))
                at = upto + 1
                continue
            taken.append(_share(r, count, topic, partition))
            i += 1
            at += 1
    return taken, gaps
