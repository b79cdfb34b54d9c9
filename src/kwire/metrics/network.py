"""What a client's connections do, counted where it happens.

One :class:`NetworkMetrics` per :class:`kwire.client.Client`: each
:class:`kwire.channel.Channel` counts its requests and responses into it
(per request, never per record), the client its connections and the time
its selector waited. Read by :mod:`kwire.metrics.names`, which names them
as Java's ``*-metrics`` and ``*-node-metrics`` are named.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, Optional

from kwire.metrics.stats import DEFAULT_WINDOW, Sampled

__all__ = ["NetworkMetrics", "NodeMetrics", "ApiMetrics"]


class NodeMetrics:
    """One broker's connection (``node-id``): requests, bytes, round trips, throttling."""

    __slots__ = ("requests", "responses", "bytes_out", "bytes_in", "latency", "request_size", "throttle",
                 "connects", "disconnects", "in_flight")

    def __init__(self, window: float) -> None:
        self.requests = 0
        self.responses = 0
        self.bytes_out = 0
        self.bytes_in = 0
        self.latency = Sampled(window)        # seconds from sending to the response
        self.request_size = Sampled(window)
        self.throttle = Sampled(window)       # ms the broker asked to wait (KIP-219), when it asked
        self.connects = 0
        self.disconnects = 0
        self.in_flight = 0                    # set when read: the channel's count


class ApiMetrics:
    """One API's round trips and response sizes (fetch-latency, commit-latency, join-time...)."""

    __slots__ = ("latency", "size")

    def __init__(self, window: float) -> None:
        self.latency = Sampled(window)
        self.size = Sampled(window)


class NetworkMetrics:
    """A client's network figures: per node, per API, and its I/O waits."""

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self.started = time.monotonic()
        self.nodes: Dict[int, NodeMetrics] = {}
        self.apis: Dict[int, ApiMetrics] = {}
        self.requests = Sampled(window)       # request sizes: count and rate
        self.responses = Sampled(window)      # response sizes
        self.latency = Sampled(window)
        self.io_wait = 0.0                    # seconds the selector waited (the blocking driver)
        self.selects = 0
        self.connects = Sampled(window)
        self.disconnects = Sampled(window)
        self.on_throttle: Optional[Callable[[int, int], None]] = None    # throttle_cb's (kwire.metrics.events)

    def node(self, node_id: int) -> NodeMetrics:
        m = self.nodes.get(node_id)
        if m is None:
            m = self.nodes[node_id] = NodeMetrics(self.window)
        return m

    def api(self, api_key: int) -> ApiMetrics:
        m = self.apis.get(api_key)
        if m is None:
            m = self.apis[api_key] = ApiMetrics(self.window)
        return m

    def sent(self, node_id: int, nbytes: int, now: float) -> None:
        """A request of ``nbytes`` (framing included) was queued to ``node_id``."""
        n = self.node(node_id)
        n.requests += 1
        n.bytes_out += nbytes
        n.request_size.record(nbytes, now)
        self.requests.record(nbytes, now)

    def answered(self, node_id: int, api_key: int, nbytes: int, latency: float, now: float) -> None:
        """A response of ``nbytes`` came from ``node_id`` ``latency`` seconds after its request."""
        n = self.node(node_id)
        n.responses += 1
        n.bytes_in += nbytes
        n.latency.record(latency, now)
        a = self.api(api_key)
        a.latency.record(latency, now)
        a.size.record(nbytes, now)
        self.responses.record(nbytes, now)
        self.latency.record(latency, now)

    def throttled(self, node_id: int, ms: int) -> None:
        self.node(node_id).throttle.record(ms, time.monotonic())
        if self.on_throttle is not None:
            self.on_throttle(node_id, ms)

    def connected(self, node_id: int) -> None:
        self.node(node_id).connects += 1
        self.connects.record(1, time.monotonic())

    def disconnected(self, node_id: int) -> None:
        self.node(node_id).disconnects += 1
        self.disconnects.record(1, time.monotonic())

    def selected(self, waited: float) -> None:
        """The selector waited ``waited`` seconds for I/O."""
        self.io_wait += waited
        self.selects += 1
