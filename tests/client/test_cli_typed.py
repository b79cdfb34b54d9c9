"""``kwire consume`` with typed keys and values, on both live brokers (run
in-process through kwire.__main__.main, output captured): JSON with a JSON
Schema file and no registry; Avro and JSON through the session's Apicurio
Registry (written by confluent-kafka's serializers), typed values printed
as documented (timestamps, decimals, bytes, enums); Parquet output;
--max-messages and --timeout; the registry's options through -X."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import sys
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kwire.__main__ import main
from kwire.admin import Admin, NewTopic
from kwire.producer import Producer

SCHEMA = {"type": "object", "required": ["n"], "properties": {
    "n": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
    "color": {"enum": ["red", "green"]}, "extra": {}}}

AVRO = {"type": "record", "name": "Payment", "namespace": "kwire.test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "raw", "type": "bytes"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "CASH"]}},
    {"name": "memo", "type": ["null", "string"], "default": None},
]}


def _run(argv, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _topic(broker, partitions=1):
    name = f"cli-typed-{uuid.uuid4().hex[:8]}"
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name


def _produce(broker, topic, values, keys=None):
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        for i, v in enumerate(values):
            p.send(topic, v, key=None if keys is None else keys[i])
        p.flush(30)


def test_json_with_a_schema_file_and_parquet(broker, capsys, monkeypatch, tmp_path):
    topic = _topic(broker)
    values = [json.dumps({"n": i, "at": "2024-05-01T10:00:00Z", "color": ["red", "green"][i % 2],
                          "extra": {"i": [i]}}).encode() for i in range(5)] + [None]
    _produce(broker, topic, values, keys=[b"k%d" % i for i in range(5)] + [b"\xff"])
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    b = ["-b", broker.bootstrap]
    rc, out, _ = _run(["consume", topic, "-e", "--value-format", "json", "--value-schema", str(schema), *b],
                      capsys, monkeypatch)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(rows) == 6
    assert rows[0]["value"] == {"n": 0, "at": "2024-05-01T10:00:00.000000Z", "color": "red", "extra": {"i": [0]}}
    assert rows[0]["key"] == "k0" and rows[5]["key"] == {"base64": "/w=="} and rows[5]["value"] is None
    assert {"topic", "partition", "offset", "timestamp", "headers"} <= set(rows[0])
    assert isinstance(rows[0]["timestamp"], int)
    rc, out, _ = _run(["consume", topic, "--max-messages", "2", "--value-format", "json", "--format", "value", *b],
                      capsys, monkeypatch)
    # no schema: each value is its JSON, printed as it is (compact)
    assert rc == 0 and out.splitlines() == ['{"n":0,"at":"2024-05-01T10:00:00Z","color":"red","extra":{"i":[0]}}',
                                            '{"n":1,"at":"2024-05-01T10:00:00Z","color":"green","extra":{"i":[1]}}']
    parquet = tmp_path / "out.parquet"
    rc, _, err = _run(["consume", topic, "-e", "--value-format", "json", "--value-schema", str(schema),
                       "--output", str(parquet), "--progress", *b], capsys, monkeypatch)
    assert rc == 0 and "consumed from" in err
    table = pq.read_table(parquet)
    assert table.num_rows == 6 and table.schema.field("value").type.field("color").type == pa.dictionary(
        pa.int32(), pa.string())
    assert table.column("value").to_pylist()[1]["at"] == datetime.datetime(2024, 5, 1, 10,
                                                                           tzinfo=datetime.timezone.utc)
    assert table.column("key").to_pylist()[0] == b"k0" and table.column("topic").to_pylist()[0] == topic


def test_timeout_stops_a_run_without_records(broker, capsys, monkeypatch):
    topic = _topic(broker)
    _produce(broker, topic, [b'{"n": 1}'])
    began = time.monotonic()
    rc, out, _ = _run(["consume", topic, "--timeout", "1", "--value-format", "json", "-b", broker.bootstrap],
                      capsys, monkeypatch)
    assert rc == 0 and len(out.splitlines()) == 1 and time.monotonic() - began < 10
    rc, out, _ = _run(["consume", topic, "--timeout", "0.5", "-b", broker.bootstrap], capsys, monkeypatch)
    assert rc == 0 and json.loads(out)["value"] == '{"n": 1}'


def test_avro_and_json_through_the_registry(broker, apicurio, capsys, monkeypatch):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": apicurio.url})
    topic = _topic(broker)
    avro = AvroSerializer(registry, json.dumps(AVRO))
    json_keys = JSONSerializer(json.dumps({"type": "object", "properties": {"user": {"type": "string"}}}), registry)
    at = datetime.datetime(2024, 5, 1, 10, 0, 0, 250000, tzinfo=datetime.timezone.utc)
    records = [({"user": "ann"}, {"id": 1, "at": at, "amount": decimal.Decimal("12.30"), "raw": b"\x00\xff",
                                  "kind": "CARD", "memo": None}),
               ({"user": "bob"}, {"id": 2, "at": at, "amount": decimal.Decimal("-0.05"), "raw": b"",
                                  "kind": "CASH", "memo": "tip"})]
    _produce(broker, topic, [avro(v, SerializationContext(topic, MessageField.VALUE)) for _, v in records],
             keys=[json_keys(k, SerializationContext(topic, MessageField.KEY)) for k, _ in records])
    args = ["consume", topic, "-e", "--key-format", "json", "--value-format", "avro", "--schema-registry",
            apicurio.url, "-b", broker.bootstrap]
    rc, out, err = _run(args + ["-X", "basic.auth.user.info=reader:s3cret-pw"], capsys, monkeypatch)
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["key"] for r in rows] == [{"user": "ann"}, {"user": "bob"}]
    assert rows[0]["value"] == {"id": 1, "at": "2024-05-01T10:00:00.250000Z", "amount": "12.30", "raw": "AP8=",
                                "kind": "CARD", "memo": None}
    assert rows[1]["value"]["amount"] == "-0.05" and rows[1]["value"]["memo"] == "tip"
    # the registry's options reach its client (a wrong one is refused, in one line, without the secret)
    rc, _, err = _run(args + ["-X", "basic.auth.credentials.source=NOWHERE", "-X", "basic.auth.user.info=u:s3cret-pw"],
                      capsys, monkeypatch)
    assert rc == 1 and "basic.auth.credentials.source" in err and "s3cret" not in err and len(err.splitlines()) == 1


def test_what_is_refused(broker, capsys, monkeypatch, tmp_path):
    topic = _topic(broker)
    with pytest.raises(SystemExit):                  # argparse: not a format
        _run(["consume", topic, "--value-format", "xml", "-b", broker.bootstrap], capsys, monkeypatch)
    rc = _run(["consume", topic, "--value-format", "avro", "-b", broker.bootstrap], capsys, monkeypatch)
    assert rc[0] != 0 and "schema" in rc[2]          # avro needs a schema or a registry
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, _, err = _run(["consume", topic, "--value-format", "json", "--value-schema", str(bad), "-b",
                       broker.bootstrap], capsys, monkeypatch)
    assert rc == 1 and "not JSON" in err and len(err.splitlines()) == 1
    rc, _, err = _run(["consume", topic, "--value-format", "json", "--value-schema", str(tmp_path / "none.json"),
                       "-b", broker.bootstrap], capsys, monkeypatch)
    assert rc == 1 and "none.json" in err
