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
:class:`ShareRecord` objects, and :func:`acquired_rows` for a columnar
decode, into the indices of the rows to take and their delivery counts
(used by :mod:`kwire.share`).
"""

from libc.stdint cimport int16_t, int32_t, int64_t

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


cdef Py_ssize_t _walk(const int64_t* offs, Py_ssize_t n, list ranges, int32_t* rows, int16_t* counts,
                     list gaps) except -1:
    """The one pass both takes make: the indices of the ``n`` ascending
    offsets at ``offs`` inside ``ranges`` (into ``rows``, with the range's
    delivery count into ``counts``; room for ``n`` each), and the acquired
    offsets without one appended to ``gaps``. Returns how many were taken."""
    cdef Py_ssize_t i = 0, taken = 0
    cdef int64_t first, last, at, off, upto
    cdef int count
    for rng in ranges:
        first, last, count = rng
        if last < first:
            raise ValueError(f"acquired range {first}..{last} ends before it begins")
        at = first
        while at <= last:
            while i < n and offs[i] < at:
                i += 1                      # before the range, or an offset already passed
            if i == n:
                gaps.append((at, last))
                break
            off = offs[i]
            if off > at:                    # acquired offsets without a record, up to this one
                upto = off - 1 if off - 1 < last else last
                gaps.append((at, upto))
                at = upto + 1
                continue
            rows[taken] = <int32_t>i
            counts[taken] = <int16_t>count
            taken += 1
            i += 1
            at += 1
    return taken


def take_acquired(list records not None, list ranges not None, str topic=None, int partition=-1):
    """Sort one partition's decoded ``records`` (of ``topic`` and ``partition``) (ascending offsets, as a
    decoder returns them) by the ``ranges`` acquired for the member: a list
    of ``(first, last, delivery_count)``, ascending and not overlapping
    (:func:`kwire.share.acks.merge_ranges` makes them so).

    Returns ``(taken, gaps)``: the records inside a range as
    :class:`ShareRecord` with that range's delivery count, in offset order,
    and the acquired offsets that had no record, as ``(first, last)``
    ranges. Records outside every range are left out."""
    cdef Py_ssize_t i, n = len(records), taken
    cdef list out = []
    cdef list gaps = []
    cdef bytearray work = bytearray(14 * n + 1)     # offsets int64, rows int32, counts int16
    cdef char* w = <char*>work
    cdef int64_t* offs = <int64_t*>w
    cdef int32_t* rows = <int32_t*>(w + 8 * n)
    cdef int16_t* counts = <int16_t*>(w + 12 * n)
    for i in range(n):
        offs[i] = (<Record?>records[i]).offset
    taken = _walk(offs, n, ranges, rows, counts, gaps)
    for i in range(taken):
        out.append(_share(<Record>records[rows[i]], counts[i], topic, partition))
    return out, gaps


def acquired_rows(const int64_t[::1] offsets not None, list ranges not None):
    """:func:`take_acquired` for a columnar decode: ``offsets`` is the
    ``offset`` column of one partition's decoded rows (ascending), ``ranges``
    as there.

    Returns ``(rows, counts, gaps)``: ``rows`` the indices (int32, native
    order, as bytes) of the rows inside a range, in order, or None when
    every row is (the decoded batch is taken whole); ``counts`` each taken
    row's delivery count (int16, native order, as bytes); ``gaps`` as
    :func:`take_acquired`'s."""
    cdef Py_ssize_t n = offsets.shape[0], taken
    cdef bytearray rows = bytearray(4 * n + 1)
    cdef bytearray counts = bytearray(2 * n + 1)
    cdef list gaps = []
    taken = _walk(&offsets[0] if n else NULL, n, ranges, <int32_t*>(<char*>rows), <int16_t*>(<char*>counts), gaps)
    del counts[2 * taken:]
    if taken == n:                  # every row, in order
        return None, bytes(counts), gaps
    del rows[4 * taken:]
    return bytes(rows), bytes(counts), gaps
