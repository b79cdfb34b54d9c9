"""The measure kwire's metrics are made of: :class:`Sampled`, compiled
(``kwire._core.meter``; see its docstring), so that recording a value on a
hot path costs a few C operations.

It is Java's ``SampledStat`` with two samples of
``metrics_sample_window_ms`` each: ``avg(now)``, ``max(now)``,
``rate(now)`` (the sum per second) and ``count_rate(now)`` cover the
samples still live; ``count`` and ``total`` are cumulative. NaN where
nothing was recorded, as Java's.
"""

from __future__ import annotations

from kwire._core.meter import Sampled

__all__ = ["Sampled", "DEFAULT_WINDOW"]

DEFAULT_WINDOW = 30.0          # seconds: Java's metrics.sample.window.ms default
