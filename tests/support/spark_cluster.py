"""Spark outside the test process, started from the pip PySpark: a
standalone cluster (a master and workers, each worker launching its
executors in JVMs of their own), a Spark Connect server, and PySpark
drivers in subprocesses that run jobs for the tests.

Why subprocesses: a Python process holds one JVM gateway, and the test
process already has the session-wide ``local[2]`` one; and a Spark Connect
client sets ``SPARK_CONNECT_MODE_ENABLED`` in ``os.environ``, which turns
``pyspark.sql.functions`` and friends into their Connect versions for the
whole process (and ``SparkSession.builder.remote(...).getOrCreate()``
refuses to run beside an active classic session: SESSION_ALREADY_EXIST).

* :func:`start_standalone`: ``org.apache.spark.deploy.master.Master`` and
  ``...worker.Worker`` run straight with ``java -cp <pyspark>/jars/*`` on
  loopback, ports chosen by the JVMs themselves (port 0, read back from
  their logs), the master's REST submission server off. Ready when the
  master has logged every worker's registration.
* :func:`start_connect`: ``org.apache.spark.sql.connect.service.SparkConnectServer``
  through PySpark's ``bin/spark-submit`` (which adds the JVM module options
  a Spark driver needs), ``local[2]``, on a free loopback port.
* :func:`start_driver`: ``python -m support.spark_cluster`` with a
  SparkSession (``master("spark://...")`` or ``remote("sc://...")``);
  :meth:`Driver.call` runs ``module:function(spark, **kwargs)`` in it and
  returns its JSON result.

Every process is started in a session of its own and stopped by its PID
(SIGTERM, then SIGKILL, each wait bounded); what is left of its process
group afterwards (a worker's executors) is killed by that group's id.
Logs go to a temporary directory, removed at the end; their tails are in
every error.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

__all__ = ["QUICK_JVM", "SparkProcessError", "Daemon", "StandaloneCluster", "ConnectServer", "Driver", "spark_home",
           "start_standalone", "start_connect", "start_driver"]

#: How long a process gets to go after SIGTERM, and again after SIGKILL.
STOP_TIMEOUT_S = 15.0
KILL_TIMEOUT_S = 5.0
#: The daemons' heap: the master and workers only keep books.
DAEMON_HEAP = "256m"
#: JVM options for the tests' short-lived JVMs: the client compiler only and
#: the serial collector spend less of CI's two cores on start-up and
#: compilation than the defaults (tiered C2, G1), for jobs of seconds.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

Progress = Optional[Callable[[str], None]]


class SparkProcessError(RuntimeError):
    """A Spark process did not start, died, or did not answer in time."""


def spark_home() -> Path:
    """The pip PySpark's directory: its ``jars/``, ``bin/`` and Python package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise SparkProcessError("no java: set JAVA_HOME or put java on PATH (Spark needs Java 17 or later)")
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scala_version() -> str:
    """The Scala version PySpark's jars were built for (``spark-core_2.13-4.2.0.jar`` -> "2.13")."""
    for jar in os.listdir(spark_home() / "jars"):
        found = re.fullmatch(r"spark-core_(\d+\.\d+)-.*\.jar", jar)
        if found:
            return found.group(1)
    raise SparkProcessError(f"no spark-core jar in {spark_home() / 'jars'}")


def _spark_env(extra: Mapping[str, str]) -> Dict[str, str]:
    """This process's environment for a Spark JVM: loopback only, PySpark's
    directory as SPARK_HOME and its Scala version as SPARK_SCALA_VERSION (a
    worker builds its executors' class path from both, as ``spark-class``
    would have set them; without the version it looks for a source build's
    directories and fails every executor with "Cannot find any build
    directories"), none of the caller's Spark Connect, gateway (a driver
    would join that JVM instead of starting its own) or conf settings leaking in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE",
                        "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS",
                        "MASTER")}
    env.update(SPARK_HOME=str(spark_home()), SPARK_SCALA_VERSION=_scala_version(), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOCAL_HOSTNAME="localhost")
    env.update(extra)
    return env


class Daemon:
    """One process this module started, in a session (and process group) of
    its own, its stdout and stderr in ``log``."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str],
                 stdin: Any = subprocess.DEVNULL, stdout: Any = None) -> None:
        self.name = name
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(list(argv), stdin=stdin, stdout=out if stdout is None else stdout,
                                         stderr=out, env=dict(env), start_new_session=True)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"({self.log}: {e})"
        return "\n".join(text[-lines:])

    def wait_for(self, pattern: str, timeout: float, count: int = 1) -> List["re.Match[str]"]:
        """The first ``count`` matches of ``pattern`` in the log, once there
        are that many; raises if the process exits first or ``timeout`` passes."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = list(rx.finditer(self.log.read_text(errors="replace")))
            if len(found) >= count:
                return found[:count]
            if not self.alive():
                raise SparkProcessError(f"{self.name} (pid {self.pid}) exited with {self.proc.returncode} before "
                                        f"logging {pattern!r}; its log {self.log} ends:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise SparkProcessError(f"{self.name} (pid {self.pid}) logged {len(found)} of {count} "
                                        f"{pattern!r} in {timeout:.0f} s; its log {self.log} ends:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, SIGKILL after :data:`STOP_TIMEOUT_S`; then whatever is
        left in its process group (children it spawned) is killed by the
        group's id. Raises if anything outlives that."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(KILL_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise SparkProcessError(f"{self.name} (pid {self.pid}) survived SIGKILL for "
                                            f"{KILL_TIMEOUT_S:.0f} s") from None
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._reap_group()

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:     # a process of another user took over the id: not ours
            return False
        return True

    def _reap_group(self) -> None:
        for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, KILL_TIMEOUT_S)):
            if not self._group_alive():
                return
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
        if self._group_alive():
            raise SparkProcessError(f"{self.name}: processes of its group {self.pid} survived SIGKILL")


def _stop_all(daemons: Sequence[Daemon]) -> None:
    """Stop every daemon (in reverse order of start), then raise the first error, if any."""
    errors = []
    for d in reversed(daemons):
        try:
            d.stop()
        except SparkProcessError as e:
            errors.append(e)
    if errors:
        raise errors[0]


class StandaloneCluster:
    """A Spark standalone master and its workers (see :func:`start_standalone`)."""

    def __init__(self, directory: Path, master: Daemon, url: str, workers: List[Daemon]) -> None:
        self.directory = directory
        self.master = master
        self.url = url               # spark://127.0.0.1:<port>
        self.workers = workers

    @property
    def worker_pids(self) -> List[int]:
        return [w.pid for w in self.workers]

    def log_tail(self) -> str:
        return "\n".join(f"--- {d.name} ({d.log}):\n{d.log_tail(20)}" for d in [self.master, *self.workers])

    def stop(self) -> None:
        try:
            _stop_all([self.master, *self.workers])
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_standalone(workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 60.0,
                     progress: Progress = None) -> StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory``
    each, on loopback; returns once every worker has registered."""
    say = progress or (lambda _msg: None)
    directory = Path(tempfile.mkdtemp(prefix="kwire-spark-standalone-"))
    java, jars = _java(), f"{spark_home() / 'jars'}{os.sep}*"
    env = _spark_env({})
    daemons: List[Daemon] = []
    started = time.monotonic()
    try:
        master = Daemon("spark master", [java, f"-Xmx{DAEMON_HEAP}", *QUICK_JVM.split(),
                                         "-Dspark.master.rest.enabled=false",
                                         "-cp", jars, "org.apache.spark.deploy.master.Master",
                                         "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                        directory / "master.log", env)
        daemons.append(master)
        url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", timeout)[0].group(1)
        master.wait_for(r"New state: ALIVE", timeout)
        say(f"master {url} (pid {master.pid}) up after {time.monotonic() - started:.1f} s")
        for i in range(workers):
            work = directory / f"worker-{i}"
            work.mkdir()
            daemons.append(Daemon(f"spark worker {i}", [
                java, f"-Xmx{DAEMON_HEAP}", *QUICK_JVM.split(), "-cp", jars, "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", str(cores),
                "--memory", memory, "--work-dir", str(work), url], directory / f"worker-{i}.log", env))
        for w in daemons[1:]:
            w.wait_for(r"Successfully registered with master", timeout)
        master.wait_for(r"Registering worker 127\.0\.0\.1:\d+", timeout, count=workers)
        say(f"{workers} workers registered after {time.monotonic() - started:.1f} s")
        return StandaloneCluster(directory, master, url, daemons[1:])
    except BaseException:
        try:
            _stop_all(daemons)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        raise


class ConnectServer:
    """A Spark Connect server (see :func:`start_connect`)."""

    def __init__(self, directory: Path, daemon: Daemon, url: str) -> None:
        self.directory = directory
        self.daemon = daemon
        self.url = url               # sc://127.0.0.1:<port>

    def log_tail(self) -> str:
        return self.daemon.log_tail()

    def stop(self) -> None:
        try:
            self.daemon.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_connect(python: str, pythonpath: Sequence[str], master: str = "local[2]", timeout: float = 90.0,
                  progress: Progress = None) -> ConnectServer:
    """A Spark Connect server on a free loopback port whose Python workers
    (the data source's planning and its tasks) run ``python`` with
    ``pythonpath`` on PYTHONPATH."""
    say = progress or (lambda _msg: None)
    directory = Path(tempfile.mkdtemp(prefix="kwire-spark-connect-"))
    port = _free_port()
    env = _spark_env({"PYSPARK_PYTHON": python, "PYTHONPATH": os.pathsep.join(pythonpath)})
    started = time.monotonic()
    try:
        daemon = Daemon("spark connect server", [
            str(spark_home() / "bin" / "spark-submit"), "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer", "--name", "kwire-connect-tests",
            "--master", master, "--driver-memory", "1g", "--driver-java-options", QUICK_JVM,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
            "--conf", "spark.sql.session.timeZone=UTC",
            "--conf", f"spark.local.dir={directory}", "spark-internal"], directory / "connect.log", env)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    try:
        daemon.wait_for(r"Spark Connect server started", timeout)
    except BaseException:
        try:
            daemon.stop()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    say(f"Spark Connect server sc://127.0.0.1:{port} (pid {daemon.pid}) up after {time.monotonic() - started:.1f} s")
    return ConnectServer(directory, daemon, f"sc://127.0.0.1:{port}")


# ---------------------------------------------------------------- drivers
class Driver:
    """A PySpark driver in a subprocess (see :func:`start_driver`)."""

    def __init__(self, directory: Path, daemon: Daemon) -> None:
        self.directory = directory
        self.daemon = daemon
        self._pending = b""
        self._broken: Optional[str] = None     # why the driver can take no more calls

    @property
    def pid(self) -> int:
        return self.daemon.pid

    def _reply(self, timeout: float, what: str) -> Dict[str, Any]:
        assert self.daemon.proc.stdout is not None
        fd = self.daemon.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    # its answer may still come, and would be taken for the next call's
                    self._broken = f"no answer to {what} in {timeout:.0f} s"
                    raise SparkProcessError(f"driver (pid {self.pid}): {self._broken}; "
                                            f"its log {self.daemon.log} ends:\n{self.daemon.log_tail()}")
                if sel.select(min(left, 1.0)):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        raise SparkProcessError(f"driver (pid {self.pid}) exited during {what}; its log "
                                                f"{self.daemon.log} ends:\n{self.daemon.log_tail()}")
                    self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return json.loads(line)

    def call(self, function: str, timeout: float = 120.0, **kwargs: Any) -> Any:
        """``function`` ("module:name") called as ``name(spark, **kwargs)`` in
        the driver; its JSON result, or :class:`SparkProcessError` with the
        driver's traceback."""
        assert self.daemon.proc.stdin is not None
        if self._broken is not None:
            raise SparkProcessError(f"driver (pid {self.pid}) takes no more calls: {self._broken}")
        if not self.daemon.alive():
            raise SparkProcessError(f"driver (pid {self.pid}) is gone (exit {self.daemon.proc.returncode}); its "
                                    f"log ends:\n{self.daemon.log_tail()}")
        self.daemon.proc.stdin.write(json.dumps({"function": function, "kwargs": kwargs}).encode() + b"\n")
        self.daemon.proc.stdin.flush()
        reply = self._reply(timeout, function)
        if "error" in reply:
            raise SparkProcessError(f"{function} failed in the driver (pid {self.pid}):\n{reply['error']}")
        return reply["result"]

    def log_tail(self) -> str:
        return self.daemon.log_tail()

    def stop(self) -> None:
        """Closing its stdin ends the driver's loop, which stops its session;
        then it is stopped by PID as any daemon (bounded). A driver that did
        not answer a call is still in it: that one gets SIGTERM at once."""
        try:
            if self._broken is None and self.daemon.alive() and self.daemon.proc.stdin is not None:
                try:
                    self.daemon.proc.stdin.close()
                    self.daemon.proc.wait(STOP_TIMEOUT_S)
                except (BrokenPipeError, subprocess.TimeoutExpired):
                    pass                    # Daemon.stop goes on with SIGTERM / SIGKILL
            self.daemon.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_driver(session: Mapping[str, Any], python: str, pythonpath: Sequence[str], timeout: float = 120.0,
                 progress: Progress = None) -> Driver:
    """A driver subprocess running ``python -m support.spark_cluster``, with
    ``pythonpath`` (which must hold this package's ``support`` and kwire)
    on PYTHONPATH. ``session`` is ``{"master": "spark://...", "conf":
    {...}, "executors": n}`` (a classic session that waits for ``n``
    executors) or ``{"remote": "sc://..."}``. Returns once the session is
    up with ``format("kwire")`` registered."""
    say = progress or (lambda _msg: None)
    directory = Path(tempfile.mkdtemp(prefix="kwire-spark-driver-"))
    env = _spark_env({"PYSPARK_PYTHON": python, "PYTHONPATH": os.pathsep.join(pythonpath),
                      "PYTHONUNBUFFERED": "1"})
    started = time.monotonic()
    try:
        daemon = Daemon("spark driver", [python, "-m", "support.spark_cluster", json.dumps(dict(session))],
                        directory / "driver.log", env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    driver = Driver(directory, daemon)
    try:
        ready = driver._reply(timeout, "the session's start")
        if "error" in ready:
            raise SparkProcessError(f"the driver's session did not start:\n{ready['error']}\n"
                                    f"its log {daemon.log} ends:\n{daemon.log_tail()}")
    except BaseException:
        driver.stop()
        raise
    say(f"driver (pid {daemon.pid}) with {ready['result']} up after {time.monotonic() - started:.1f} s")
    return driver


def _session(spec: Mapping[str, Any]) -> Any:
    """The driver's SparkSession of ``spec`` (see :func:`start_driver`)."""
    from pyspark.sql import SparkSession

    import kwire.spark

    if "remote" in spec:
        spark = SparkSession.builder.remote(spec["remote"]).getOrCreate()
    else:
        builder = SparkSession.builder.master(spec["master"]).appName("kwire-cluster-tests")
        for k, v in spec.get("conf", {}).items():
            builder = builder.config(k, v)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        want = int(spec.get("executors", 0))
        deadline = time.monotonic() + float(spec.get("executor_timeout", 60))
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
        while status.size() - 1 < want:      # the driver's block manager is in it too
            if time.monotonic() > deadline:
                raise SparkProcessError(f"{status.size() - 1} of {want} executors registered in time")
            time.sleep(0.1)
            status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
    kwire.spark.register(spark)
    return spark


def _serve(spec: Mapping[str, Any]) -> None:
    """The driver's loop: one JSON request a line on stdin, one JSON reply a
    line on the original stdout; everything else printed (Spark's JVM, py4j,
    warnings) goes to stderr, the log."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    try:
        spark = _session(spec)
    except BaseException:
        replies.write(json.dumps({"error": traceback.format_exc()}) + "\n")
        return
    try:
        replies.write(json.dumps({"result": "remote" if "remote" in spec else spark.sparkContext.master}) + "\n")
        for line in sys.stdin:
            request = json.loads(line)
            try:
                module, name = request["function"].split(":")
                result = getattr(importlib.import_module(module), name)(spark, **request["kwargs"])
                replies.write(json.dumps({"result": result}) + "\n")
            except Exception:
                replies.write(json.dumps({"error": traceback.format_exc()}) + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
