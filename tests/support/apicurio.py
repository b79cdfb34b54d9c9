"""Apicurio Registry as the tests' schema registry: a real server with
Confluent's REST API at ``/apis/ccompat/v7``.

:func:`ensure_apicurio` prepares it once, in a cache outside the repository
(``~/.cache/kwire/apicurio-<version>`` or ``$KWIRE_APICURIO_HOME``):
:func:`support.maven.assemble` fetches ``tests/support/apicurio/pom.xml``'s
artifact from Maven Central (``io.apicurio:apicurio-registry-app``,
classifier ``all``, a tar.gz of the whole Quarkus application: the pom
excludes its dependencies, which do not resolve and are all inside), and it
is unpacked into ``app/``; on JDK 25, one training start (a schema
registered and read, then a clean exit) leaves ``apicurio.aot`` beside it, a
JDK AOT cache that halves every later start's JVM work. The marker
``COMPLETE`` is written last; a lock file serialises concurrent runs; a
changed pom, version or JDK prepares it anew.

:func:`start_apicurio` runs ``java -jar quarkus-run.jar`` from ``app/`` on
the Temurin 25 JDK (:func:`support.jdk.find_jdk`; ``$KWIRE_APICURIO_JAVA_HOME``
chooses another, Apicurio needs Java 21+) with a small heap, in-memory H2
storage (Apicurio's default), its HTTP port and its management port
(Quarkus' default 9000 otherwise) on free loopback ports, and its temporary
files in a directory of its own, deleted at stop. Optionally secured:

- ``users``: HTTP Basic against Quarkus' embedded users (plain-text
  passwords);
- ``oidc_issuer``: bearer tokens of that OpenID Connect issuer (Keycloak's
  realm, :mod:`support.keycloak`), verified against its JWKS.

Either makes every API call need credentials (401 without). The server
counts as started when its log says it listens on the port and the API
answers there (within ``timeout``; the log tail is quoted if not).
``stop()`` sends SIGTERM to the JVM, SIGKILL after a bound, and deletes the
directory; on Linux the JVM dies with the test process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from kwire.devbroker import _tie_to_parent, free_port
from support.jdk import find_jdk, java_version, major
from support.kafka import _rss
from support.kafka import _stop as _stop_and_remove
from support.maven import Progress, assemble, cache_lock, finished, mark_finished, say, stamp

APICURIO_VERSION = "3.3.3"
POM = Path(__file__).with_name("apicurio") / "pom.xml"
HOST = "127.0.0.1"
HEAP = ("-Xms64m", "-Xmx384m")
CCOMPAT = "/apis/ccompat/v7"
READY_TIMEOUT = 120.0    # seconds for a started server to answer
TRAIN_TIMEOUT = 300.0    # seconds for the training start's JVM to write its AOT cache and exit
AOT_CACHE = "apicurio.aot"
STOP_TIMEOUT = 20.0      # seconds between SIGTERM and SIGKILL
LOG_TAIL = 6000          # characters of the server's output quoted in errors
CONFLUENT_TIMEOUT = 20    # seconds: confluent-kafka's schema registry client waits forever without one


class ApicurioUnavailable(RuntimeError):
    """No Java 21+, Maven, or an application that could not be prepared."""


class ApicurioStartError(RuntimeError):
    """Apicurio was prepared but did not come up."""


def apicurio_home(version: str = APICURIO_VERSION) -> Path:
    """Where the prepared application is cached: ``$KWIRE_APICURIO_HOME`` or ``~/.cache/kwire/apicurio-<version>``."""
    env = os.environ.get("KWIRE_APICURIO_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kwire" / f"apicurio-{version}"


def java_home() -> Path:
    """The JDK that runs Apicurio (see the module doc)."""
    return find_jdk("KWIRE_APICURIO_JAVA_HOME", 21, ApicurioUnavailable, "Apicurio Registry")


def _unpack(archive: Path, target: Path) -> None:
    """The tar.gz (``quarkus-run.jar``, ``lib/``, ``app/``, ``quarkus/`` at its top) becomes ``target``."""
    scratch = Path(tempfile.mkdtemp(prefix="unpack-", dir=target.parent))
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        if not (scratch / "quarkus-run.jar").is_file():
            raise ApicurioUnavailable(f"{archive.name} holds no quarkus-run.jar at its top")
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ensure_apicurio(version: str = APICURIO_VERSION, progress: Progress = None) -> Path:
    """The unpacked application's directory (``app/`` of the cache), made on first use."""
    home = apicurio_home(version)
    app = home / "app"
    jdk = java_home()
    done_stamp = stamp(POM, {"apicurio.version": version, "java": java_version(jdk)})
    if finished(home, done_stamp) and (app / "quarkus-run.jar").is_file():
        return app
    with cache_lock(home, progress):
        if not (finished(home, done_stamp) and (app / "quarkus-run.jar").is_file()):
            (home / "COMPLETE").unlink(missing_ok=True)
            download = home / "download"
            libs = assemble(POM, {"apicurio.version": version}, download,
                            f"apicurio-registry-app-{version}-all.tar.gz", f"Apicurio Registry {version}",
                            ApicurioUnavailable, progress)
            t0 = time.monotonic()
            _unpack(libs / f"apicurio-registry-app-{version}-all.tar.gz", app)
            shutil.rmtree(download, ignore_errors=True)      # Maven's own repository (~/.m2) keeps the archive
            (home / AOT_CACHE).unlink(missing_ok=True)
            if major(jdk) >= 25:
                say(progress, "a training start: the AOT cache")
                _train(app, jdk, version)
            say(progress, f"Apicurio Registry {version} unpacked (and trained) in {time.monotonic() - t0:.1f} s")
            mark_finished(home, done_stamp)
    return app


def _properties(workdir: Path, port: int, management_port: int, users: Mapping[str, str],
                oidc_issuer: Optional[str]) -> Dict[str, str]:
    """The Quarkus and Apicurio settings of one start (see the module doc)."""
    props = {
        "quarkus.http.host": HOST, "quarkus.http.port": str(port),
        "quarkus.management.host": HOST, "quarkus.management.port": str(management_port),
        "java.io.tmpdir": str(workdir), "apicurio.storage.snapshot.location": str(workdir),
        "apicurio.import.work-dir": str(workdir),
    }
    if users:
        props.update({"quarkus.http.auth.basic": "true", "quarkus.security.users.embedded.plain-text": "true"})
        props.update({f"quarkus.security.users.embedded.users.{u}": p for u, p in users.items()})
    if oidc_issuer:
        props.update({"quarkus.oidc.tenant-enabled": "true", "quarkus.oidc.auth-server-url": oidc_issuer,
                      "quarkus.oidc.client-id": "registry-api"})
    return props


@dataclass
class Apicurio:
    """A running Apicurio Registry (see the module doc). ``url`` is the
    Confluent-compatible API's base, what a client's ``url`` option takes."""

    pid: int
    workdir: str
    version: str
    port: int
    users: Dict[str, str] = field(default_factory=dict, repr=False)
    oidc_issuer: Optional[str] = None
    startup_seconds: float = 0.0
    process: Optional[subprocess.Popen] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Runs once: from stop(), when collected, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop_and_remove, self.process, self.pid, self.workdir, STOP_TIMEOUT)

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}{CCOMPAT}"

    def confluent_client(self, **conf: Any) -> Any:
        """confluent-kafka's SchemaRegistryClient on this registry, with a
        request timeout: the client's default is none, and a response lost
        on a kept-alive connection (seen once in CI, on a 404 that Apicurio
        logged as sent) then hangs the test until Quarkus closes the idle
        connection 30 minutes later. With a timeout the client retries."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient({"url": self.url, "timeout": CONFLUENT_TIMEOUT, **conf})

    @property
    def secured(self) -> bool:
        return bool(self.users or self.oidc_issuer)

    @property
    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def rss_bytes(self) -> int:
        """The JVM's resident set size now (Linux; 0 elsewhere)."""
        return _rss(self.pid)

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        try:
            with open(os.path.join(self.workdir, "apicurio.out"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM the JVM (SIGKILL after ``timeout`` s) and delete its directory. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop_and_remove(self.process, self.pid, self.workdir, timeout)


def _answers(url: str) -> bool:
    """Whether the API answers at ``url`` (401 counts: a secured server is up too)."""
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2):
            return True
    except urllib.error.HTTPError as e:
        return e.code == 401
    except OSError:
        return False


def _ready(server: Apicurio, timeout: float) -> None:
    """Returns once the server's log says it listens on its port and the API answers there."""
    deadline = time.monotonic() + timeout
    listening = f"Listening on: {server.base_url}"
    while True:
        if not server.alive:
            raise ApicurioStartError(f"Apicurio exited with status {server.process.returncode} before it "
                                     f"answered; output tail:\n{server.log_tail()}")
        if listening in server.log_tail(1 << 20) and _answers(server.url):
            return
        if time.monotonic() > deadline:
            raise ApicurioStartError(f"Apicurio (pid {server.pid}) did not answer at {server.url} within "
                                     f"{timeout:g} s; output tail:\n{server.log_tail()}")
        time.sleep(0.1)


def _launch(app: Path, jdk: Path, *, version: str, users: Mapping[str, str], oidc_issuer: Optional[str],
            aot_flag: str, tie_to_parent: bool) -> Apicurio:
    """``java -jar quarkus-run.jar`` with its own directory and free ports, not yet waited for."""
    workdir = Path(tempfile.mkdtemp(prefix="kwire-apicurio-"))
    port = free_port(HOST)
    props = _properties(workdir, port, free_port(HOST), users, oidc_issuer)
    cmd: List[str] = [str(jdk / "bin" / "java"), *HEAP, *([aot_flag] if aot_flag else []),
                      *(f"-D{k}={v}" for k, v in props.items()), "-jar", str(app / "quarkus-run.jar")]
    tie = functools.partial(_tie_to_parent, os.getpid()) if tie_to_parent and sys.platform.startswith("linux") \
        else None
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUARKUS_", "APICURIO_", "JAVA_TOOL_OPTIONS"))}
    try:
        with open(workdir / "apicurio.out", "ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=workdir, start_new_session=True, preexec_fn=tie)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return Apicurio(pid=proc.pid, workdir=str(workdir), version=version, port=port, users=dict(users),
                    oidc_issuer=oidc_issuer, process=proc)


def _train(app: Path, jdk: Path, version: str) -> None:
    """One start that registers and reads a schema, then exits cleanly: the JVM writes
    ``app/../apicurio.aot`` (a JDK 25 AOT cache: about half of every later start)."""
    aot = app.parent / AOT_CACHE
    server = _launch(app, jdk, version=version, users={}, oidc_issuer=None,
                     aot_flag=f"-XX:AOTCacheOutput={aot}", tie_to_parent=True)
    try:
        _ready(server, READY_TIMEOUT)
        body = json.dumps({"schema": json.dumps({"type": "record", "name": "Train", "fields": [
            {"name": "n", "type": "long"}]})}).encode()
        request = urllib.request.Request(f"{server.url}/subjects/train-value/versions", data=body, method="POST",
                                         headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            schema_id = json.load(r)["id"]
        for path in (f"schemas/ids/{schema_id}", "subjects/train-value/versions/latest", "config"):
            urllib.request.urlopen(f"{server.url}/{path}", timeout=30).close()
    finally:
        server.stop(TRAIN_TIMEOUT)               # SIGTERM: the JVM assembles the cache, then exits
    if not aot.is_file():
        raise ApicurioUnavailable(f"Apicurio's training start wrote no AOT cache ({aot})")


def start_apicurio(*, version: str = APICURIO_VERSION, users: Optional[Mapping[str, str]] = None,
                   oidc_issuer: Optional[str] = None, timeout: float = READY_TIMEOUT, tie_to_parent: bool = True,
                   progress: Progress = None) -> Apicurio:
    """Prepare (once) and start Apicurio Registry; see the module doc."""
    app = ensure_apicurio(version, progress)
    jdk = java_home()
    aot = app.parent / AOT_CACHE
    t0 = time.monotonic()
    server = _launch(app, jdk, version=version, users=users or {}, oidc_issuer=oidc_issuer,
                     aot_flag=f"-XX:AOTCache={aot}" if major(jdk) >= 25 and aot.is_file() else "",
                     tie_to_parent=tie_to_parent)
    try:
        _ready(server, timeout)
    except BaseException:
        server.stop()
        raise
    server.startup_seconds = time.monotonic() - t0
    say(progress, f"Apicurio Registry {version} (pid {server.pid}, Java {java_version(jdk)}) up in "
                  f"{server.startup_seconds:.1f} s at {server.url}{' (secured)' if server.secured else ''}, "
                  f"RSS {server.rss_bytes() / 2**20:.0f} MiB")
    return server
