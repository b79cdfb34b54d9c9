"""kwire.metrics.stats.Sampled: Java's SampledStat (two windows), offline."""

import math

from kwire.metrics.stats import Sampled


def test_avg_max_rate_follow_the_last_two_windows():
    s = Sampled(window=10.0)
    assert math.isnan(s.avg(0.0)) and math.isnan(s.max(0.0)) and s.rate(0.0) == 0
    s.record(4.0, 0.0)
    s.record(2.0, 5.0)
    assert s.avg(5.0) == 3.0 and s.max(5.0) == 4.0
    assert s.rate(5.0) == 6.0 / 10.0                # at least one window of elapsed time, as Java's Rate
    s.record(1.0, 12.0)                            # a second window
    assert s.avg(12.0) == 7.0 / 3 and s.max(12.0) == 4.0
    s.record(1.0, 25.0)                            # a third: the first is gone
    assert s.max(25.0) == 1.0 and s.avg(25.0) == 1.0
    assert s.count == 4 and s.total == 8.0         # cumulative all the same
    assert math.isnan(s.max(60.0)) and s.rate(60.0) == 0     # nothing recorded for two windows


def test_count_rate():
    s = Sampled(window=1.0)
    for i in range(10):
        s.record(100.0, i * 0.1)
    assert s.count_rate(0.9) == 10.0
    assert s.rate(0.9) == 1000.0
