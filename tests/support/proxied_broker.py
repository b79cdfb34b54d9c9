"""A private broker (Tansu or Apache Kafka) behind a proxy it advertises, so
that every connection a client makes goes through the proxy: for the tests
that cut, silence or stall a client's connections (module-scoped fixtures
parametrized "tansu" / "kafka")."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Tuple

from support.tansu import free_port


@contextlib.contextmanager
def proxied_broker(name: str, make_proxy: Callable[[Tuple[str, int]], object]) -> Iterator[object]:
    """``make_proxy((host, port))`` in front of a new broker ``name``
    ("tansu" or "kafka") listening on that port and advertising the proxy;
    yields the proxy; stops both after."""
    port = free_port()
    proxy = make_proxy(("127.0.0.1", port))
    try:
        if name == "tansu":
            from support.tansu import start_tansu

            broker = start_tansu(port=port, advertised=proxy.address)
        else:
            from support.kafka import start_kafka

            broker = start_kafka(ports={"plaintext": port}, advertised={"plaintext": proxy.address})
        try:
            yield proxy
        finally:
            broker.stop()          # Kafka: by its PID (SIGTERM, then SIGKILL)
    finally:
        proxy.stop()
