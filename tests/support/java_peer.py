"""Kafka's own Java client as a peer of kwire in tests: ``java/KafkaPeer.java``.

:func:`compile_peer` compiles the tool once per process (``javac``, bounded
by :data:`COMPILE_TIMEOUT`) into a temporary directory, against the jars of
the Apache Kafka assembly :func:`support.kafka.ensure_kafka` made
(``kafka-clients`` and its dependencies, Jackson for JSON). Without ``javac``
or ``java`` it raises :class:`support.kafka.KafkaUnavailable` naming what is
missing: the tests fail, they do not skip.

The tool speaks JSON lines (see the Java file's header): the first line on
its stdin names the mode (``produce``, ``consume``, ``group-member``) with
Java client properties, keys, values and header values travel as base64.
:func:`java_produce` and :func:`java_consume` run one batch each;
:class:`JavaGroupMember` stays in a consumer group until :meth:`~JavaGroupMember.stop`.
Records come back as :class:`PeerRecord`. Each takes ``jvm_options`` for its
JVM (system properties: a ``krb5.conf``, Kafka 4's allowed OAuth URLs).
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from support.kafka import KafkaUnavailable, _require, ensure_kafka

SOURCE = Path(__file__).with_name("java") / "KafkaPeer.java"
COMPILE_TIMEOUT = 180.0
RUN_TIMEOUT = 120.0

_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [java-peer] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""

Headers = Tuple[Tuple[str, Optional[bytes]], ...]


class PeerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Headers


class JavaPeerError(RuntimeError):
    """The Java tool failed (its stderr tail is in the message)."""


class _Peer(NamedTuple):
    classes: str
    libs: Path
    log4j: str
    java: str
    extra: Tuple[str, ...] = ()          # more jar directories on the class path (a tool's own libraries)

    def classpath(self) -> str:
        return os.pathsep.join([self.classes, f"{self.libs}/*", *(f"{d}/*" for d in self.extra)])


@functools.lru_cache(maxsize=None)
def compile_peer() -> _Peer:
    """Compile KafkaPeer.java once; the classes' directory is removed at exit."""
    return _compile(SOURCE)


@functools.lru_cache(maxsize=None)
def compile_java(source: Path, extra: Tuple[str, ...] = ()) -> _Peer:
    """Compile a Java tool of ``java/`` once (KafkaPeer.java: :func:`compile_peer`),
    against the Kafka jars and the jar directories ``extra``."""
    return compile_peer() if source == SOURCE and not extra else _compile(source, extra)


def _compile(source: Path, extra: Tuple[str, ...] = ()) -> _Peer:
    """javac ``source`` against the Kafka jars (and ``extra``'s) into a directory removed at exit."""
    libs = ensure_kafka()
    tools = _require("javac", "java")
    out = tempfile.mkdtemp(prefix="kwire-java-peer-")
    atexit.register(shutil.rmtree, out, True)
    classpath = os.pathsep.join([f"{libs}/*", *(f"{d}/*" for d in extra)])
    cmd = [tools["javac"], "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", out, str(source)]
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise KafkaUnavailable(f"javac did not compile {source.name} within {COMPILE_TIMEOUT:g} s") from None
    if done.returncode != 0:
        raise KafkaUnavailable(f"javac failed on {source} (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    log4j = os.path.join(out, "log4j2.properties")
    Path(log4j).write_text(_LOG4J2)
    sys.stderr.write(f"[java-peer] compiled in {time.monotonic() - t0:.1f} s\n")
    return _Peer(out, libs, log4j, tools["java"], extra)


def _command(jvm_options: Sequence[str] = (), source: Path = SOURCE, extra: Tuple[str, ...] = ()) -> List[str]:
    peer = compile_java(source, extra)
    return [peer.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_options,
            f"-Dlog4j2.configurationFile={peer.log4j}", "-cp", peer.classpath(), source.stem]


def b64(data: Optional[bytes]) -> Optional[str]:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: Optional[str]) -> Optional[bytes]:
    return None if text is None else base64.b64decode(text)


def record_of(event: Dict[str, Any]) -> PeerRecord:
    return PeerRecord(event["topic"], event["partition"], event["offset"], event["timestamp"],
                      unb64(event["key"]), unb64(event["value"]),
                      tuple((k, unb64(v)) for k, v in event["headers"]))


def _events(stdout: str) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _run(first: Dict[str, Any], lines: Iterable[Dict[str, Any]], timeout: float,
         jvm_options: Sequence[str] = ()) -> List[Dict[str, Any]]:
    stdin = "".join(json.dumps(x) + "\n" for x in [first, *lines])
    try:
        done = subprocess.run(_command(jvm_options), input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise JavaPeerError(f"the Java peer ({first['mode']}) did not finish within {timeout:g} s; stderr tail:\n"
                            f"{(e.stderr or b'')[-4000:]!r}") from None
    events = _events(done.stdout)
    errors = [e["error"] for e in events if e.get("event") == "error"]
    if done.returncode != 0 or errors:
        raise JavaPeerError(f"the Java peer ({first['mode']}) failed (exit {done.returncode}): {errors}; "
                            f"stderr tail:\n{done.stderr[-4000:]}")
    return events


def send_op(topic: str, value: Optional[bytes], key: Optional[bytes] = None, headers: Sequence = (),
            partition: Optional[int] = None, timestamp: Optional[int] = None) -> Dict[str, Any]:
    """One ``send`` line of the ``produce`` mode."""
    return {"op": "send", "topic": topic, "partition": partition, "key": b64(key), "value": b64(value),
            "headers": [[k, b64(v)] for k, v in headers], "timestamp": timestamp}


def java_produce(config: Dict[str, str], ops: Sequence[Dict[str, Any]],
                 timeout: float = RUN_TIMEOUT, *, jvm_options: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Run the Java producer over ``ops`` (:func:`send_op` lines and
    ``{"op": "begin"|"commit"|"abort"|"flush"}``); returns one ``sent``
    event per send, in order: ``partition``, ``offset``, ``timestamp``, or ``error``.
    ``jvm_options`` go to its JVM (``-Dname=value`` system properties)."""
    events = _run({"mode": "produce", "config": config}, ops, timeout, jvm_options)
    sent = [e for e in events if e["event"] == "sent"]
    if not events or events[-1]["event"] != "closed":
        raise JavaPeerError(f"the Java producer did not close: {events[-3:]}")
    assert [e["id"] for e in sent] == list(range(len(sent)))
    return sent


def java_consume(config: Dict[str, str], *, assign: Optional[Sequence[Tuple[str, int]]] = None,
                 subscribe: Optional[Sequence[str]] = None, max_records: Optional[int] = None,
                 until_end: bool = False, idle_ms: int = 5000, timeout: float = RUN_TIMEOUT,
                 jvm_options: Sequence[str] = ()) -> List[PeerRecord]:
    """Run the Java consumer (from the beginning of ``assign``, or subscribed
    with a group) until ``max_records``, ``until_end`` (every assigned
    partition's end offset at the start) or ``idle_ms`` without records;
    returns every record it read, in order. ``jvm_options`` go to its JVM."""
    first: Dict[str, Any] = {"mode": "consume", "config": config, "max_records": max_records, "idle_ms": idle_ms,
                             "timeout_ms": int(timeout * 1000) - 5000, "until_end": until_end}
    if assign is not None:
        first["assign"] = [list(tp) for tp in assign]
    else:
        first["subscribe"] = list(subscribe or ())
    events = _run(first, (), timeout, jvm_options)
    done = [e for e in events if e["event"] == "done"]
    if not done or (until_end and done[0]["reason"] != "end"):
        raise JavaPeerError(f"the Java consumer stopped early: {done}")
    return [record_of(e) for e in events if e["event"] == "record"]


def java_share_consume(config: Dict[str, str], topics: Sequence[str], *, max_records: Optional[int] = None,
                       idle_ms: int = 5000, timeout_ms: int = 60000, release_below: int = 0,
                       timeout: float = RUN_TIMEOUT) -> List[Tuple[PeerRecord, int]]:
    """Java's KafkaShareConsumer in ``config``'s group (``share-consume`` mode): each record it got, with
    its delivery count (explicit acknowledgement: those delivered fewer than ``release_below`` times
    released, the rest accepted)."""
    events = _run({"mode": "share-consume", "config": config, "subscribe": list(topics), "max_records": max_records,
                   "idle_ms": idle_ms, "timeout_ms": timeout_ms, "release_below": release_below}, (), timeout)
    return [(record_of(e), e["delivery_count"]) for e in events if e.get("event") == "record"]


def java_share_command(config: Dict[str, str], topics: Sequence[str], idle_ms: int,
                       timeout_ms: int) -> Tuple[List[str], str]:
    """A quiet ``share-consume`` run for a caller to start itself (benchmarks/compare_share.py): the
    command and its stdin; its one output line is the done event, with the first and last record's
    wall clock and the JVM's CPU time."""
    first = {"mode": "share-consume", "config": config, "subscribe": list(topics), "idle_ms": idle_ms,
             "timeout_ms": timeout_ms, "quiet": True}
    return _command(), json.dumps(first) + "\n"


def java_describe_configs(config: Dict[str, str], resources: Sequence[Tuple[str, str]],
                          timeout: float = RUN_TIMEOUT) -> Dict[Tuple[str, str], Dict[str, Optional[str]]]:
    """Java's ``Admin.describeConfigs`` of ``resources`` ((type, name): "topic",
    "broker", "group", "client_metrics", ...): {(type, name): {config: value}}."""
    events = _run({"mode": "describe-configs", "config": config, "resources": [list(r) for r in resources]}, (),
                  timeout)
    return {(e["type"], e["name"]): e["configs"] for e in events if e["event"] == "configs"}


def java_group_offsets(config: Dict[str, str], group: str,
                       timeout: float = RUN_TIMEOUT) -> Dict[Tuple[str, int], Tuple[int, Optional[str]]]:
    """Java's ``Admin.listConsumerGroupOffsets(group)``: {(topic, partition): (offset, metadata)}."""
    events = _run({"mode": "group-offsets", "config": config, "group": group}, (), timeout)
    return {(e["topic"], e["partition"]): (e["offset"], e["metadata"]) for e in events if e["event"] == "offset"}


def java_metric_names(config: Dict[str, str], topic: str, group: str,
                      timeout: float = RUN_TIMEOUT) -> Dict[str, Dict[Tuple[str, str], set]]:
    """The metrics Java's producer, consumer (a group member that read ``topic``
    and committed) and admin client register: {kind: {(group, name): {tag keys, ...}}}
    (a metric may be registered with several tag sets: the client's, a topic's)."""
    events = _run({"mode": "metric-names", "config": config, "topic": topic, "group": group}, (), timeout)
    out: Dict[str, Dict[Tuple[str, str], set]] = {}
    for e in events:
        if e["event"] == "metric":
            out.setdefault(e["kind"], {}).setdefault((e["group"], e["name"]), set()).add(tuple(sorted(e["tags"])))
    return out


class JavaGroupMember:
    """A Java consumer in a group (``group-member`` mode) in a subprocess;
    a thread reads its events: ``records`` (every record it returned),
    ``assignment`` (what it owns now) and ``events`` (everything)."""

    def __init__(self, config: Dict[str, str], topics: Sequence[str], name: str = "java",
                 jvm_options: Sequence[str] = ()) -> None:
        self.name = name
        self.events: List[Dict[str, Any]] = []
        self.records: List[PeerRecord] = []
        self.assignment: set = set()
        self._lock = threading.Lock()
        self._queue: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(_command(jvm_options), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"mode": "group-member", "config": config, "subscribe": list(topics)}) + "\n")
        self.proc.stdin.flush()
        self._reader = threading.Thread(target=self._read, name=f"java-peer-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            e = json.loads(line)
            with self._lock:
                self.events.append(e)
                kind = e["event"]
                if kind == "record":
                    self.records.append(record_of(e))
                elif kind == "assigned":
                    self.assignment |= {tuple(tp) for tp in e["partitions"]}
                elif kind in ("revoked", "lost"):
                    self.assignment -= {tuple(tp) for tp in e["partitions"]}
            self._queue.put(e)

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-4000:].decode("utf-8", "replace")

    def wait_for(self, kind: str, timeout: float = 60.0) -> Dict[str, Any]:
        """The next event of ``kind`` (earlier ones of other kinds are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JavaPeerError(f"{self.name}: no {kind!r} event within {timeout:g} s; "
                                    f"stderr tail:\n{self.stderr_tail()}")
            try:
                e = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if e["event"] == "error":
                raise JavaPeerError(f"{self.name}: {e['error']}; stderr tail:\n{self.stderr_tail()}")
            if e["event"] == kind:
                return e

    def snapshot(self) -> Tuple[List[PeerRecord], set]:
        with self._lock:
            return list(self.records), set(self.assignment)

    def pause(self) -> set:
        """Have it pause its whole assignment; the partitions it says are paused."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("pause\n")
        self.proc.stdin.flush()
        return {tuple(tp) for tp in self.wait_for("paused")["partitions"]}

    def stop(self, timeout: float = 60.0) -> None:
        """Ask it to commit and leave the group; waits until it has closed."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise JavaPeerError(f"{self.name} did not stop within {timeout:g} s; stderr tail:\n{self.stderr_tail()}")
        self._reader.join(10)
        if self.proc.returncode != 0 or not any(e["event"] == "closed" for e in self.events):
            raise JavaPeerError(f"{self.name} ended with status {self.proc.returncode} without closing; "
                                f"stderr tail:\n{self.stderr_tail()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


ASSIGNOR_SOURCE = Path(__file__).with_name("java") / "AssignorPeer.java"


def java_assign(cases: Sequence[Dict[str, Any]], timeout: float = RUN_TIMEOUT) -> List[Dict[str, List[Tuple[str, int]]]]:
    """Java's own client-side assignors on each of ``cases`` in one JVM,
    through ``java/AssignorPeer.java``: a case names the ``assignor``
    (``range``, ``roundrobin``, ``cooperative-sticky``), the cluster
    (``brokers``: node id to rack; ``topics``: each partition's replica ids)
    and the ``members`` (member id to ``topics``, ``rack``, ``instance_id``,
    ``owned``, ``generation``). For each: {member id: sorted partitions}."""
    lines = [json.dumps({**c, "brokers": {str(b): r for b, r in c["brokers"].items()}}) for c in cases]
    done = subprocess.run(_command(source=ASSIGNOR_SOURCE), input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise JavaPeerError(f"AssignorPeer failed (exit {done.returncode}): {done.stderr[-4000:]}")
    answers = [json.loads(line)["assignment"] for line in done.stdout.splitlines() if line.startswith("{")]
    return [{m: [(t, p) for t, p in tps] for m, tps in a.items()} for a in answers]
