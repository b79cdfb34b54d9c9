"""What the exporters (:mod:`kwire.metrics.otel`, :mod:`kwire.metrics.prometheus`) share:
the clients they read and one snapshot per collection."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Sequence, Tuple

from kwire.metrics.names import Metric, catalogue, granular

__all__ = ["Sources"]


def _source(client: Any) -> Any:
    """The client whose figures are read (a kwire.aio client's blocking core)."""
    src = getattr(client, "_metrics_source", client)
    if not hasattr(src, "_metric_list") or not hasattr(src, "_metrics_kind"):
        raise TypeError(f"{type(client).__name__} has no kwire metrics: pass kwire's Producer, Consumer or Admin "
                        "(or their kwire.aio counterparts)")
    return src


class Sources:
    """Several clients' metrics, most granular series only
    (:func:`kwire.metrics.names.granular`), each with its ``client-id``.
    A snapshot is computed at most every ``max_age`` seconds: a collection
    reads every instrument in turn, and each reads the same snapshot."""

    def __init__(self, clients: Sequence[Any], max_age: float = 0.5) -> None:
        if not clients:
            raise ValueError("no client to export the metrics of")
        self._clients = [_source(c) for c in clients]
        self._ids = self._client_ids()
        self._max_age = max_age
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._snapshot: List[Tuple[str, Metric]] = []
        self._grouped: Dict[Tuple[str, str], List[Tuple[str, Metric]]] = {}

    def _client_ids(self) -> List[str]:
        """Each client's ``client_id``; clients sharing one are told apart as ``id``, ``id-2``..."""
        seen: Dict[str, int] = {}
        out = []
        for c in self._clients:
            cid = c.cfg.get("client_id", "kwire")
            seen[cid] = seen.get(cid, 0) + 1
            out.append(cid if seen[cid] == 1 else f"{cid}-{seen[cid]}")
        return out

    def kinds(self) -> List[str]:
        return sorted({c._metrics_kind for c in self._clients})

    def declared(self) -> List[Metric]:
        """Every metric these clients can report (names and tag keys)."""
        return granular(m for kind in self.kinds() for m in catalogue(kind))

    def snapshot(self) -> List[Tuple[str, Metric]]:
        """(client id, metric) of every client, at most ``max_age`` old."""
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self._max_age:
                self._snapshot = [(cid, m) for cid, c in zip(self._ids, self._clients)
                                  for m in granular(c._metric_list(now))]
                grouped: Dict[Tuple[str, str], List[Tuple[str, Metric]]] = {}
                for cid, m in self._snapshot:
                    grouped.setdefault((m.group, m.name), []).append((cid, m))
                self._grouped = grouped
                self._at = now
            return self._snapshot

    def series(self, group: str, name: str) -> List[Tuple[str, Metric]]:
        """The snapshot's series of one metric (an instrument's callback asks for its own)."""
        self.snapshot()
        return self._grouped.get((group, name), [])
