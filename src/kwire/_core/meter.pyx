# cython: language_level=3
"""The measure kwire's metrics are made of (:mod:`kwire.metrics.stats`), compiled.

:class:`Sampled` is Java's ``SampledStat`` with two samples of ``window``
seconds (Java's defaults: 2 samples of ``metrics.sample.window.ms``, 30 s):
its average, maximum and rate cover the samples still live, so that a
``-max`` or ``-avg`` follows what the client does now; its ``count`` and
``total`` are cumulative (Java's ``-total``). A value is recorded per
request, per decode call or per batch, never per record; recording is a
few C operations, so that metrics cost the hot paths nothing measurable.
"""

cimport cython
from libc.math cimport INFINITY, NAN


@cython.final
cdef class Sampled:
    """Values recorded at monotonic times (seconds), read as the count,
    sum, average, maximum and per-second rate of the last two windows."""
    cdef readonly double window
    cdef double start[2]
    cdef double sums[2]
    cdef double maxs[2]
    cdef long long counts[2]
    cdef int cur
    cdef readonly long long count     # cumulative
    cdef readonly double total

    def __cinit__(self, double window=30.0):
        if not window > 0:
            raise ValueError("window must be positive")
        self.window = window
        self.start[0] = self.start[1] = -INFINITY
        self.maxs[0] = self.maxs[1] = -INFINITY
        self.sums[0] = self.sums[1] = 0.0
        self.counts[0] = self.counts[1] = 0
        self.cur = 0
        self.count = 0
        self.total = 0.0

    cpdef void record(self, double value, double now):
        cdef int i = self.cur
        if now - self.start[i] >= self.window:
            i = self.cur = 1 - i
            self.start[i] = now
            self.counts[i] = 0
            self.sums[i] = 0.0
            self.maxs[i] = -INFINITY
        self.counts[i] += 1
        self.sums[i] += value
        if value > self.maxs[i]:
            self.maxs[i] = value
        self.count += 1
        self.total += value

    cdef inline bint live(self, int i, double now):
        return now - self.start[i] < 2 * self.window

    def live_sums(self, double now):
        """(count, sum, max) of the live samples (max -inf with none): for merging several."""
        cdef long long n = 0
        cdef double s = 0.0, m = -INFINITY
        cdef int i
        for i in range(2):
            if self.live(i, now) and self.counts[i]:
                n += self.counts[i]
                s += self.sums[i]
                if self.maxs[i] > m:
                    m = self.maxs[i]
        return n, s, m

    def avg(self, double now):
        """The average of the live values (NaN with none, as Java's)."""
        n, s, _ = self.live_sums(now)
        return s / n if n else NAN

    def max(self, double now):
        """The largest live value (NaN with none)."""
        n, _, m = self.live_sums(now)
        return m if n else NAN

    cdef double elapsed(self, double now):
        cdef double oldest = now
        cdef int i
        for i in range(2):
            if self.live(i, now) and self.start[i] < oldest:
                oldest = self.start[i]
        return max(now - oldest, self.window)      # Java's Rate: at least (samples - 1) windows

    def rate(self, double now):
        """The live values' sum per second."""
        _, s, _ = self.live_sums(now)
        return s / self.elapsed(now)

    def count_rate(self, double now):
        """How many values were recorded, per second, in the live samples."""
        n, _, _ = self.live_sums(now)
        return n / self.elapsed(now)
