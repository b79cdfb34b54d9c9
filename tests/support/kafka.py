"""Apache Kafka itself as a test broker: one KRaft node assembled from Maven Central.

:func:`ensure_kafka` has :func:`support.maven.assemble` copy
``tests/support/kafka/pom.xml``'s dependencies (``org.apache.kafka:kafka_2.13``
and a log4j2 binding) into a cache outside the repository,
``~/.cache/kwire/kafka-<version>`` or ``$KWIRE_KAFKA_HOME``, once: later calls
reuse it. Without ``java`` or ``mvn`` it raises :class:`KafkaUnavailable`
naming what is missing (tests fail on it, they do not skip).

:func:`start_kafka` formats storage in a temporary directory
(``kafka.tools.StorageTool format``, SCRAM users added with ``--add-scram``)
and runs ``kafka.Kafka`` (``process.roles=broker,controller``) with a small
heap on free loopback ports, one listener of each kind:

========================  ==============  =======================================
listener (``LISTENERS``)  protocol        notes
========================  ==============  =======================================
``plaintext``             PLAINTEXT       also the inter-broker listener
``ssl``                   SSL             ``ssl.client.auth=required`` (mTLS)
``sasl_plaintext``        SASL_PLAINTEXT  PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
``sasl_ssl``              SASL_SSL        the same mechanisms over TLS
``plain_only``            SASL_PLAINTEXT  PLAIN only (for "unsupported mechanism")
(controller)              PLAINTEXT       KRaft's controller listener
========================  ==============  =======================================

Certificates come from :func:`support.proxies.make_pki`: the server's names
only ``localhost`` (TLS listeners advertise ``localhost``; a client reaching
them as 127.0.0.1 must refuse the certificate), the client's is signed by the
same CA. The StandardAuthorizer runs with ``super.users=User:admin`` and
``allow.everyone.if.no.acl.found=true``; PLAIN users come from the listeners'
JAAS config, SCRAM users from the format step (the same names and passwords).

The broker counts as started when kwire's own Admin on the PLAINTEXT
listener answers DescribeCluster with this broker's cluster id (the broker's
log tail is quoted if it does not, within ``timeout``). Its logs
(``server.log``, ``kafka.out``) are in its temporary directory; ``stop()``
sends SIGTERM, then SIGKILL after a bound, and deletes the directory.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import sys
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

from kwire.devbroker import _tie_to_parent, free_ports
from support.maven import Progress, assemble, require, say, stamp
from support.proxies import Pki, make_pki

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).with_name("kafka") / "pom.xml"
HOST = "127.0.0.1"
READY_TIMEOUT = 120.0    # seconds for a started broker to answer
STOP_TIMEOUT = 20.0      # seconds between SIGTERM and SIGKILL
LOG_TAIL = 6000          # characters of the broker's log quoted in errors
HEAP = "512m"

# listener name -> (security protocol, host it is advertised as)
LISTENERS: Dict[str, Tuple[str, str]] = {
    "plaintext": ("PLAINTEXT", HOST),
    "ssl": ("SSL", "localhost"),
    "sasl_plaintext": ("SASL_PLAINTEXT", HOST),
    "sasl_ssl": ("SASL_SSL", "localhost"),
    "plain_only": ("SASL_PLAINTEXT", HOST),
}
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SUPER_USER = ("admin", "admin-secret")
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


class KafkaUnavailable(RuntimeError):
    """Java or Maven is missing (or Maven could not assemble the broker)."""


class KafkaStartError(RuntimeError):
    """The broker was assembled but did not come up."""


def _say(progress: Progress, msg: str) -> None:
    say(progress, msg)


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """Where the broker's jars are cached: ``$KWIRE_KAFKA_HOME`` or ``~/.cache/kwire/kafka-<version>``."""
    env = os.environ.get("KWIRE_KAFKA_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "kwire" / f"kafka-{version}"


def _require(*tools: str) -> Dict[str, str]:
    return require(KafkaUnavailable, "Apache Kafka's test broker", *tools)


def _stamp(version: str) -> str:
    """What a finished copy's marker holds: the version and the pom it came from."""
    return stamp(POM, {"kafka.version": version})


def ensure_kafka(version: str = KAFKA_VERSION, progress: Progress = None) -> Path:
    """The directory of the broker's jars, assembled by Maven on first use (see the module doc)."""
    return assemble(POM, {"kafka.version": version}, kafka_home(version), f"kafka_2.13-{version}.jar",
                    f"Apache Kafka {version}", KafkaUnavailable, progress)


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of 16
    bytes), never starting with "-", which the format tool's argument
    parser would take for an option (as Kafka's own Uuid.randomUuid avoids)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _jaas_plain(users: Dict[str, str]) -> str:
    entries = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"


def _server_properties(node_dir: Path, ports: Dict[str, int], controller_port: int, pki: Pki,
                       keystore: str, users: Dict[str, str], overrides: Dict[str, str],
                       kinds: Optional[Dict[str, Tuple[str, str]]] = None, node_id: int = 1) -> Dict[str, str]:
    """The server properties; ``kinds`` are the listeners (default :data:`LISTENERS`)."""
    kinds = kinds or LISTENERS
    names = {name: name.upper() for name in kinds}
    listeners = [f"{names[n]}://{HOST}:{ports[n]}" for n in kinds] + [f"CONTROLLER://{HOST}:{controller_port}"]
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": f"{node_id}@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(f"{names[n]}://{kinds[n][1]}:{ports[n]}" for n in kinds),
        "listener.security.protocol.map": ",".join(
            [f"{names[n]}:{kinds[n][0]}" for n in kinds] + ["CONTROLLER:PLAINTEXT"]),
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(node_dir / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.share.min.record.lock.duration.ms": "1000",     # (a test's group may lock records for 2 s)
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "true",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{SUPER_USER[0]}",
        "allow.everyone.if.no.acl.found": "true",
        # delegation tokens (SCRAM with tokenauth=true): a fixed test secret, Kafka's default lifetimes
        "delegation.token.secret.key": "kwire-test-delegation-token-secret",
        # TLS: PEM stores (Kafka 4); the server key and its chain in one file
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.ca,
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "listener.name.plain_only.sasl.enabled.mechanisms": "PLAIN",
    }
    for listener in (n for n in ("sasl_plaintext", "sasl_ssl", "plain_only") if n in kinds):
        props[f"listener.name.{listener}.plain.sasl.jaas.config"] = _jaas_plain(users)
        for mech in SASL_MECHANISMS[1:]:
            props[f"listener.name.{listener}.{mech.lower()}.sasl.jaas.config"] = \
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props.update(overrides)
    return props


_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _stop_pid(pid: int, timeout: float) -> None:
    """SIGTERM ``pid``, SIGKILL it after ``timeout`` s; returns once it is gone."""
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:   # a zombie child of ours: reap it
            return os.waitpid(pid, os.WNOHANG)[0] == pid
        except ChildProcessError:
            return False

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if gone():
                return
            time.sleep(0.05)


def _stop(proc: Optional[subprocess.Popen], pid: int, workdir: str, timeout: float) -> None:
    try:
        if proc is None or proc.poll() is None:
            _stop_pid(pid, timeout)
        if proc is not None:
            proc.wait(1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _rss(pid: int) -> int:
    """The resident set size of ``pid`` now (Linux; 0 elsewhere or when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _log_tail(workdir, limit: int = LOG_TAIL, label: str = "") -> str:
    """The last ``limit`` characters of a node's ``logs/server.log`` and ``logs/kafka.out``."""
    parts = []
    for name in ("logs/server.log", "logs/kafka.out"):
        try:
            with open(os.path.join(workdir, name), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                parts.append(f"--- {label}{name}:\n" + f.read().decode("utf-8", "replace"))
        except OSError:
            pass
    return "\n".join(parts)


@dataclass
class KafkaBroker:
    """A running single-node Apache Kafka.

    ``addresses`` maps each name of :data:`LISTENERS` to its bootstrap address
    ("host:port", the advertised host); ``super_user`` and ``users`` hold
    (name, password) pairs valid for PLAIN and SCRAM-SHA-256/512; ``pki`` the
    CA, server and client certificate and key paths.
    """

    pid: int
    workdir: str
    version: str
    cluster_id: str
    addresses: Dict[str, str]
    pki: Pki
    super_user: Tuple[str, str] = SUPER_USER
    users: Dict[str, str] = field(default_factory=lambda: dict(USERS))
    startup_seconds: float = 0.0
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    listeners: Dict[str, Tuple[str, str]] = field(default_factory=lambda: dict(LISTENERS))

    def __post_init__(self) -> None:
        # Runs once: from stop(), when collected, or at interpreter exit (unless detach()ed).
        self._finalizer = weakref.finalize(self, _stop, self.process, self.pid, self.workdir, STOP_TIMEOUT)

    def bootstrap(self, listener: str = "plaintext") -> str:
        return self.addresses[listener]

    @property
    def log_path(self) -> str:
        return os.path.join(self.workdir, "logs", "server.log")

    @property
    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return self.process is None or self.process.poll() is None

    def rss_bytes(self) -> int:
        """The broker JVM's resident set size now (Linux; 0 elsewhere)."""
        return _rss(self.pid)

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        return _log_tail(self.workdir, limit)

    def client_config(self, listener: str = "plaintext", *, user: Optional[Tuple[str, str]] = None,
                      mechanism: str = "PLAIN", client_cert: bool = True, **extra) -> dict:
        """kwire options (Kafka's names) for ``listener``: CA, client certificate for
        mTLS, SASL credentials (the super user unless ``user`` is given)."""
        protocol = self.listeners[listener][0]
        cfg = {"bootstrap.servers": self.addresses[listener], "security.protocol": protocol}
        if "SSL" in protocol:
            cfg["ssl.ca.location"] = self.pki.ca
            if listener == "ssl" and client_cert:
                cfg["ssl.certificate.location"] = self.pki.client_cert
                cfg["ssl.key.location"] = self.pki.client_key
        if protocol.startswith("SASL"):
            name, password = user or self.super_user
            cfg.update({"sasl.mechanism": mechanism, "sasl.username": name, "sasl.password": password})
        cfg.update(extra)
        return cfg

    def state(self) -> dict:
        """What ``scripts/kafka-broker`` keeps to find (and stop) the broker later."""
        return {"pid": self.pid, "workdir": self.workdir, "version": self.version, "cluster_id": self.cluster_id,
                "addresses": self.addresses, "super_user": list(self.super_user), "users": self.users,
                "pki": vars(self.pki), "log": self.log_path}

    def detach(self) -> None:
        """Leave the broker running past this process (the CLI's ``start``)."""
        self._finalizer.detach()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the broker (SIGKILL after ``timeout`` s) and delete its directory. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop(self.process, self.pid, self.workdir, timeout)

    def restart(self, timeout: float = READY_TIMEOUT, stop_timeout: float = STOP_TIMEOUT) -> float:
        """Stop the broker (SIGTERM: a controlled shutdown; SIGKILL after ``stop_timeout`` s)
        and start it again on the same data, configuration and ports, as a node
        restarted in place. Returns once it answers again (see :func:`start_kafka`),
        with the seconds that took. Only for a broker this process started."""
        launch = getattr(self, "_launch", None)
        if launch is None or not self._finalizer.alive:
            raise RuntimeError("restart(): not a broker this process started, or stopped already")
        t0 = time.monotonic()
        self._finalizer.detach()               # the old process is stopped here, the directory kept
        if self.process.poll() is None:
            _stop_pid(self.pid, stop_timeout)
        self.process.wait(1)
        self.process = launch()
        self.pid = self.process.pid
        self.__post_init__()                   # a new finalizer, for the new process
        _ready(self, self.process, timeout)
        return time.monotonic() - t0

    def __enter__(self) -> "KafkaBroker":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _java(libs: Path, main: str, args, *, heap: str, log4j: Optional[Path] = None, jvm_options: Sequence[str] = (),
          classpath: Sequence[str] = ()):
    cmd = [_require("java")["java"], f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Djava.awt.headless=true", *jvm_options]
    if log4j is not None:
        cmd.append(f"-Dlog4j2.configurationFile={log4j}")
    return cmd + ["-cp", os.pathsep.join([f"{libs}/*", *classpath]), main, *args]


def _ready(broker: KafkaBroker, proc: subprocess.Popen, timeout: float) -> None:
    """Returns once kwire's Admin on the PLAINTEXT listener sees this cluster with its broker."""
    import socket

    from kwire.admin import Admin

    host, port = broker.addresses["plaintext"].rsplit(":", 1)
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if proc.poll() is not None:
            raise KafkaStartError(f"Apache Kafka exited with status {proc.returncode} before it answered; "
                                  f"log tail:\n{broker.log_tail()}")
        if time.monotonic() > deadline:
            raise KafkaStartError(f"Apache Kafka (pid {proc.pid}) did not answer on {broker.addresses['plaintext']} "
                                  f"within {timeout:g} s (last: {last!r}); log tail:\n{broker.log_tail()}")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError as e:
            last = e
            time.sleep(0.1)
            continue
        try:
            with Admin({"bootstrap.servers": broker.addresses["plaintext"], "request.timeout.ms": 3000}) as admin:
                c = admin.describe_cluster(timeout=3)
            if c.cluster_id == broker.cluster_id and c.brokers:
                return
            last = c
        except Exception as e:  # noqa: BLE001 - not ready yet: anything may fail, retried until the deadline
            last = e
        time.sleep(0.2)


def _launch(libs: Path, workdir: Path, heap: str, tie_to_parent: bool,
            jvm_options: Sequence[str] = (), classpath: Sequence[str] = ()) -> subprocess.Popen:
    """Run ``kafka.Kafka`` on the configuration and data of ``workdir`` (its output appended to
    ``logs/kafka.out``); with ``tie_to_parent`` (Linux) it dies with this process; ``jvm_options``
    go to its JVM (system properties)."""
    tie = (functools.partial(_tie_to_parent, os.getpid())
           if tie_to_parent and sys.platform.startswith("linux") else None)
    log4j = workdir / "log4j2.properties"
    with open(workdir / "logs" / "kafka.out", "ab") as out:
        return subprocess.Popen(_java(libs, "kafka.Kafka", [str(workdir / "server.properties")], heap=heap,
                                      log4j=log4j, jvm_options=jvm_options, classpath=classpath),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                start_new_session=True, preexec_fn=tie)


def start_kafka(*, version: str = KAFKA_VERSION, heap: str = HEAP, timeout: float = READY_TIMEOUT,
                overrides: Optional[Dict[str, str]] = None, tie_to_parent: bool = True,
                progress: Progress = None, ports: Optional[Dict[str, int]] = None,
                advertised: Optional[Dict[str, str]] = None, listeners: Optional[Dict[str, Tuple[str, str]]] = None,
                jvm_options: Sequence[str] = (), node_id: int = 1, classpath: Sequence[str] = ()) -> KafkaBroker:
    """Assemble (once) and start one KRaft node; see the module doc. ``overrides``
    are extra server properties; with ``tie_to_parent`` (Linux) the broker dies
    with the process that started it. ``ports`` fixes the ports of some
    listeners (by name; the others get free ones); ``advertised`` makes some
    listeners advertise another "host:port" (a proxy in front of the broker):
    the broker's ``addresses`` are then those. ``listeners`` replaces :data:`LISTENERS`
    (name -> (security protocol, advertised host); ``plaintext`` must be among them, the
    inter-broker listener); ``jvm_options`` go to the broker's JVM; ``node_id`` is its
    node id (a cluster that replaces another, with new ids); ``classpath``: more class path
    entries of the broker (a plugin's classes and jars). A broker that could not bind a
    port it was given (another process took it after :func:`free_ports`) starts again on
    fresh ports, up to :data:`BIND_RETRIES` times."""
    for attempt in range(BIND_RETRIES + 1):
        try:
            return _start_kafka(version, heap, timeout, overrides, tie_to_parent, progress, ports, advertised,
                                listeners, jvm_options, node_id, classpath)
        except KafkaStartError as e:
            if not lost_a_port(e) or attempt == BIND_RETRIES:
                raise
            _say(progress, "the broker lost a port to another process; starting again on fresh ports")
    raise AssertionError("unreachable")


BIND_RETRIES = 2           # fresh ports when a server lost the race for one (free_ports are only probably free)


def lost_a_port(e: BaseException) -> bool:
    """``e`` says a server could not bind a port it was given."""
    return isinstance(e, KafkaStartError) and "Address already in use" in str(e)


def _start_kafka(version: str, heap: str, timeout: float, overrides: Optional[Dict[str, str]], tie_to_parent: bool,
                 progress: Progress, ports: Optional[Dict[str, int]], advertised: Optional[Dict[str, str]],
                 listeners: Optional[Dict[str, Tuple[str, str]]], jvm_options: Sequence[str],
                 node_id: int, classpath: Sequence[str] = ()) -> KafkaBroker:
    kinds = listeners or LISTENERS
    libs = ensure_kafka(version, progress)
    _require("java")
    t0 = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kwire-kafka-"))
    try:
        (workdir / "logs").mkdir()
        pki = make_pki(str(workdir), server_names=("localhost",))
        keystore = workdir / "server-keystore.pem"
        keystore.write_bytes(Path(pki.server_key).read_bytes() + Path(pki.server_cert).read_bytes())
        fresh = iter(free_ports(len(kinds) + 1, HOST))    # distinct: two listeners on one port fail
        ports = {name: (ports or {}).get(name) or next(fresh) for name in kinds}
        controller_port = next(fresh)
        users = {SUPER_USER[0]: SUPER_USER[1], **USERS}
        addresses = {n: f"{kinds[n][1]}:{p}" for n, p in ports.items()}
        addresses.update(advertised or {})
        props = _server_properties(workdir, ports, controller_port, pki, str(keystore), users, {
            "advertised.listeners": ",".join(f"{n.upper()}://{a}" for n, a in addresses.items()), **(overrides or {})}
            if advertised else overrides or {}, kinds, node_id)
        config = workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(log=workdir / "logs" / "server.log"))
        cluster_id = _cluster_id()
        scram = [a for mech in SASL_MECHANISMS[1:] for u, p in users.items()
                 for a in ("--add-scram", f"{mech}=[name={u},password={p}]")]
        _say(progress, f"formatting storage in {workdir}")
        fmt = subprocess.run(_java(libs, "kafka.tools.StorageTool",
                                   # --cluster-id=: an id may begin with "-", which argparse takes for an option
                                   ["format", f"--cluster-id={cluster_id}", "-c", str(config), *scram],
                                   heap="256m", log4j=log4j),
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if fmt.returncode != 0:
            raise KafkaStartError(f"kafka.tools.StorageTool format failed (exit {fmt.returncode}):\n"
                                  f"{(fmt.stdout + fmt.stderr)[-LOG_TAIL:]}")
        _say(progress, "starting the broker")
        launch = functools.partial(_launch, libs, workdir, heap, tie_to_parent, jvm_options, classpath)
        proc = launch()
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    broker = KafkaBroker(pid=proc.pid, workdir=str(workdir), version=version, cluster_id=cluster_id,
                         addresses=addresses, pki=pki, process=proc, listeners=dict(kinds))
    broker._launch = launch
    try:
        _ready(broker, proc, timeout)
    except BaseException:
        broker.stop()
        raise
    broker.startup_seconds = time.monotonic() - t0
    _say(progress, f"Apache Kafka {version} (pid {proc.pid}) up in {broker.startup_seconds:.1f} s, "
                   f"RSS {broker.rss_bytes() / 2**20:.0f} MiB")
    return broker


# ---- scripts/kafka-broker: start and stop a broker by hand ----

def _state_path(given: Optional[str]) -> Path:
    return Path(given or os.environ.get("KWIRE_KAFKA_STATE") or Path.home() / ".cache" / "kwire" / "kafka-broker.json")


def _is_our_broker(pid: int, workdir: str) -> bool:
    """The PID is still the broker started in ``workdir`` (not a reused PID)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().decode("utf-8", "replace")
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True            # no /proc (macOS): trust the PID
    return "kafka.Kafka" in cmdline and workdir in cmdline


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="scripts/kafka-broker", description=(
        "Run Apache Kafka (one KRaft node, every listener kind kwire's tests use) in the background. "
        "start prints the addresses, credentials and certificate paths as JSON; stop stops it."))
    ap.add_argument("command", choices=("start", "stop", "status"))
    ap.add_argument("--state", help="where start records the broker (default $KWIRE_KAFKA_STATE or "
                                    "~/.cache/kwire/kafka-broker.json)")
    ap.add_argument("--version", default=KAFKA_VERSION)
    ap.add_argument("--heap", default=HEAP)
    args = ap.parse_args(argv)
    path = _state_path(args.state)

    def say(msg: str) -> None:
        sys.stderr.write(f"[kafka-broker] {msg}\n")

    old = json.loads(path.read_text()) if path.is_file() else None
    running = old is not None and _is_our_broker(old["pid"], old["workdir"])
    if args.command == "status":
        if not running:
            say("no broker running")
            return 1
        print(json.dumps(old, indent=2))
        return 0
    if args.command == "stop":
        if running:
            say(f"stopping pid {old['pid']} (SIGTERM, SIGKILL after {STOP_TIMEOUT:g} s)")
            _stop(None, old["pid"], old["workdir"], STOP_TIMEOUT)
            say("stopped")
        else:
            say("no broker running")
        path.unlink(missing_ok=True)
        return 0
    if running:
        say(f"already running (pid {old['pid']}); stop it first")
        print(json.dumps(old, indent=2))
        return 1
    return _cli_start(lambda: start_kafka(version=args.version, heap=args.heap, tie_to_parent=False, progress=say),
                      path, say, "scripts/kafka-broker stop")


def _cli_start(start: Callable[[], object], path: Path, say: Callable[[str], None], stop_hint: str) -> int:
    """The CLI's ``start``: start, detach, record the state in ``path`` and print it."""
    try:
        started = start()
    except (KafkaUnavailable, KafkaStartError) as exc:
        say(str(exc))
        return 1
    started.detach()
    state = started.state()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2))
    say(f"state in {path}; stop with: {stop_hint}")
    print(json.dumps(state, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
