"""A cluster's finalized ``transaction.version`` set for a test and put back
after it: the transaction protocol (KIP-890) kwire's transactional producer
speaks follows it (:mod:`kwire.transactions`).

Apache Kafka 4.4 formats its clusters at ``transaction.version`` 2; a test of
protocol v1 (as on an older cluster) downgrades it to 1 with kwire's own
``update_features`` ("safe_downgrade") and upgrades it again at the end, so
the tests after it, on the same session broker, find the cluster as it was.
:func:`transaction_version` waits until every broker's ApiVersions answer (a
fresh connection's) says the new level, so a producer made inside sees it
whatever broker it asks.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from kwire.admin import Admin
from kwire.admin_ops.cluster import FeatureUpdate
from kwire.client import Client
from kwire.config import ADMIN, resolve

FEATURE = "transaction.version"
WAIT = 30.0


def finalized_level(bootstrap: str) -> int:
    """The cluster's finalized ``transaction.version`` (0 when not finalized)."""
    with Admin(bootstrap_servers=bootstrap) as a:
        return a.describe_features(timeout=10).finalized_features.get(FEATURE, (0, 0))[1]


def _every_broker_says(bootstrap: str, level: int) -> bool:
    client = Client(resolve(ADMIN, {"bootstrap.servers": bootstrap}))
    try:
        nodes = list(client.refresh_metadata(timeout=10).brokers)
        for node in nodes:
            conn = client.wait_ready(node, time.monotonic() + 10)
            if conn.channel.finalized_features.get(FEATURE, 0) != level:
                return False
        return bool(nodes)
    finally:
        client.close()


def _set(bootstrap: str, level: int, before: int) -> None:
    kind = "upgrade" if level > before else "safe_downgrade"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.update_features({FEATURE: FeatureUpdate(level, kind)}, timeout=20)
    deadline = time.monotonic() + WAIT
    while not _every_broker_says(bootstrap, level):
        assert time.monotonic() < deadline, f"the brokers do not say {FEATURE} {level} after {WAIT:g} s"
        time.sleep(0.2)


@contextlib.contextmanager
def transaction_version(bootstrap: str, level: int) -> Iterator[int]:
    """The cluster at ``transaction.version`` ``level`` inside, as it was after."""
    before = finalized_level(bootstrap)
    if before == level:
        yield level
        return
    _set(bootstrap, level, before)
    try:
        yield level
    finally:
        _set(bootstrap, before, level)
