"""librdkafka's ``statistics.interval.ms`` and ``stats_cb``: a JSON
document of a client's figures, handed to a callback every interval.

The document keeps librdkafka's top-level names where kwire has the same
figure (``name``, ``client_id``, ``type``, ``ts``, ``time``, ``age``,
``brokers`` with ``nodeid``, ``nodename``, ``state``, ``waitresp_cnt``,
``tx``, ``txbytes``, ``rx``, ``rxbytes``, ``rtt`` and ``throttle`` in
microseconds and milliseconds as librdkafka's; ``topics`` with
``partitions`` and their ``consumer_lag``, ``hi_offset``, ``ls_offset``,
``app_offset``, ``rxmsgs``, ``rxbytes``, ``txmsgs``), so that a dashboard
reading librdkafka's statistics reads kwire's; and it adds ``metrics``,
:meth:`metrics` of the client in Java's names. NaN (nothing recorded) is
``null``.

The callback runs where the client's I/O is driven (Client.tick): a
blocking consumer's ``poll()``, a producer's I/O thread, kwire.aio's event
loop; keep it short. One that raises is logged once, and called again at
the next interval.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any, Callable, Dict, Optional

__all__ = ["StatsReporter", "StatsFile", "to_json"]

log = logging.getLogger(__name__)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def to_json(doc: Dict[str, Any]) -> str:
    """``doc`` as strict JSON (NaN and infinities as null)."""
    return json.dumps(_clean(doc), separators=(",", ":"))


class StatsReporter:
    """Calls ``callback(json_text)`` every ``interval_ms`` with what ``collect()`` returns."""

    def __init__(self, interval_ms: int, callback: Callable[[str], Any], collect: Callable[[], Dict[str, Any]]) -> None:
        self.interval = interval_ms / 1000.0
        self.callback = callback
        self.collect = collect
        self.due = time.monotonic() + self.interval
        self._failed = False

    def wait_time(self, now: float) -> float:
        """Seconds until the next report."""
        return max(0.0, self.due - now)

    def maybe_report(self, now: float) -> None:
        """Call the callback with the statistics document if a report is due at ``now``."""
        if now < self.due:
            return
        self.due = now + self.interval
        try:
            self.callback(to_json(self.collect()))
            self._failed = False
        except Exception as e:  # noqa: BLE001 - the application's callback: said once, never fatal
            if not self._failed:
                log.warning("stats_cb raised %s: %s (said once; it is called again every %.0f ms)",
                            type(e).__name__, e, self.interval * 1000)
            self._failed = True


class StatsFile:
    """A ``stats_cb`` that keeps the latest statistics in ``path`` (written
    whole, then renamed into place: a reader never sees half a document),
    for ``kwire top --stats PATH``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, text: str) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.path)


def stats_reporter(cfg: Dict[str, Any], collect: Callable[[], Dict[str, Any]]) -> Optional[StatsReporter]:
    """The reporter ``cfg`` asks for (``statistics_interval_ms`` > 0 and a ``stats_cb``), or None."""
    interval = cfg.get("statistics_interval_ms", 0) or 0
    cb = cfg.get("stats_cb")
    if interval <= 0 or cb is None:
        return None
    return StatsReporter(interval, cb, collect)


def brokers_doc(clients: Any, now: float) -> Dict[str, Any]:
    """librdkafka's ``brokers`` of the statistics: per node of ``clients``
    (kwire.client.Client), its connection and figures."""
    out: Dict[str, Any] = {}
    for client in clients:
        states = client.connection_states()
        for node_id, m in dict(client.metrics.nodes).items():
            address, state, in_flight = states.get(node_id, ("", "closed", 0))
            key = f"{address}/{node_id}" if address else f"node-{node_id}"
            out[key] = {
                "name": key, "nodeid": node_id, "nodename": address,
                "state": "UP" if state == "ready" else ("INIT" if state != "closed" else "DOWN"),
                "waitresp_cnt": in_flight, "tx": m.requests, "txbytes": m.bytes_out,
                "rx": m.responses, "rxbytes": m.bytes_in, "connects": m.connects, "disconnects": m.disconnects,
                "rtt": {"avg": m.latency.avg(now) * 1e6, "max": m.latency.max(now) * 1e6, "cnt": m.latency.count},
                "throttle": {"avg": m.throttle.avg(now), "max": m.throttle.max(now), "cnt": m.throttle.count},
            }
    return out


def header_doc(kind: str, cfg: Dict[str, Any], started: float, now: float) -> Dict[str, Any]:
    """librdkafka's top-level fields: ``name``, ``client_id``, ``type``, ``ts`` (monotonic µs),
    ``time`` (Unix seconds), ``age`` (µs since the client was made)."""
    client_id = cfg.get("client_id", "kwire")
    return {"name": f"{client_id}#{kind}", "client_id": client_id, "type": kind, "ts": int(now * 1e6),
            "time": int(time.time()), "age": int((now - started) * 1e6)}
