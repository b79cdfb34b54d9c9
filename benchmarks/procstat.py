"""A process's CPU seconds from Linux's /proc, for the benchmarks that count
what a broker, a Spark JVM or a member process spent (compare_share,
compare_spark, fetch_sessions)."""

from __future__ import annotations

import os

__all__ = ["process_cpu"]


def process_cpu(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (fields 14 and 15 of /proc/PID/stat; 0 when it
    cannot be read: gone, or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
