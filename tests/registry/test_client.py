"""kwire's SchemaRegistryClient against a real Apicurio Registry (its
Confluent-compatible API): schemas, subjects and versions, references,
compatibility, caches, errors and options."""

from __future__ import annotations

import json
import threading
import time

import fastavro
import pytest

from kwire.config import ConfigError
from kwire.registry import RegisteredSchema, Schema, SchemaReference, SchemaRegistryClient, SchemaRegistryError
from kwire.registry.errors import MalformedAnswer
from kwire.registry.steps import Answer, Send
from support.http_proxy import HttpProxy

from .conftest import USER_V1, USER_V2_COMPATIBLE, USER_V2_INCOMPATIBLE, avro_record

PROTO = 'syntax = "proto3";\npackage kwire.test;\n\nmessage Event {\n  int64 id = 1;\n  string name = 2;\n}\n'
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})


# ------------------------------------------------------------ schemas, subjects, versions
def test_register_lookup_get_versions_latest_delete(client, subject):
    schema_id = client.register_schema(subject, USER_V1)
    assert client.register_schema(subject, USER_V1) == schema_id                 # the same schema: the same id
    assert client.get_schema(schema_id) == USER_V1 or json.loads(client.get_schema(schema_id).schema_str) == \
        json.loads(USER_V1.schema_str)
    looked_up = client.lookup_schema(subject, USER_V1)
    assert (looked_up.schema_id, looked_up.subject, looked_up.version) == (schema_id, subject, 1)
    second = client.register_schema_full_response(subject, USER_V2_COMPATIBLE)
    assert second.schema_id != schema_id and second.subject == subject
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert (latest.schema_id, latest.version, latest.subject) == (second.schema_id, 2, subject)
    assert json.loads(latest.schema.schema_str) == json.loads(USER_V2_COMPATIBLE.schema_str)
    v1 = client.get_version(subject, 1)
    assert isinstance(v1, RegisteredSchema) and (v1.schema_id, v1.version) == (schema_id, 1)
    assert client.get_version(subject, "latest").version == 2
    assert subject in client.get_subjects()
    assert subject in client.get_subjects_by_schema_id(schema_id)

    assert client.delete_version(subject, 2) == 2
    assert client.get_versions(subject) == [1]
    assert client.get_latest_version(subject).version == 1          # the delete forgot the cached latest
    assert client.delete_version(subject, 2, permanent=True) == 2
    client.register_schema(subject, USER_V2_COMPATIBLE)    # no soft-deleted version left (see the deviations)
    versions = client.get_versions(subject)
    assert len(versions) == 2 and versions[0] == 1
    assert client.delete_subject(subject) == versions
    assert subject not in client.get_subjects()
    assert subject in client.get_subjects(deleted=True)
    assert client.delete_subject(subject, permanent=True) == versions
    assert subject not in client.get_subjects(deleted=True)


def test_schema_types_round_trip(client, subject):
    assert set(client.get_schema_types()) >= {"AVRO", "PROTOBUF", "JSON"}
    for kind, text in (("PROTOBUF", PROTO), ("JSON", JSON_SCHEMA)):
        name = f"{subject}-{kind.lower()}"
        schema_id = client.register_schema(name, Schema(text, kind))
        got = client.get_schema(schema_id)
        assert got.schema_type == kind
        assert client.get_latest_version(name).schema.schema_type == kind


def test_unknown_ids_and_subjects_are_not_retriable(client, subject):
    with pytest.raises(SchemaRegistryError) as e:
        client.get_schema(2_000_000_000)
    assert (e.value.status, e.value.error_code, e.value.retriable) == (404, 40403, False)
    with pytest.raises(SchemaRegistryError) as e:
        client.get_latest_version(subject)
    assert (e.value.status, e.value.error_code) == (404, 40401)
    client.register_schema(subject, USER_V1)
    with pytest.raises(SchemaRegistryError) as e:
        client.get_version(subject, 7)
    assert (e.value.status, e.value.error_code) == (404, 40402)
    with pytest.raises(SchemaRegistryError) as e:
        client.lookup_schema(subject, USER_V2_COMPATIBLE)
    assert (e.value.status, e.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject, Schema('{"type": "record", "name": '))
    assert e.value.status == 422 and e.value.error_code == 42201 and not e.value.retriable


def test_subject_names_are_escaped(client):
    odd = "kw odd/name?&%#-value"
    schema_id = client.register_schema(odd, USER_V1)
    assert client.get_latest_version(odd).schema_id == schema_id
    assert odd in client.get_subjects()


# ------------------------------------------------------------ references
def test_references_resolve_recursively_dependencies_first(client, subject):
    country = avro_record("Country", [{"name": "code", "type": "string"}])
    client.register_schema(f"{subject}-country", country)
    address = Schema(json.dumps({"type": "record", "name": "Address", "namespace": "kwire.test", "fields": [
        {"name": "city", "type": "string"}, {"name": "country", "type": "kwire.test.Country"}]}),
        references=[SchemaReference("kwire.test.Country", f"{subject}-country", 1)])
    client.register_schema(f"{subject}-address", address)
    person = Schema(json.dumps({"type": "record", "name": "Person", "namespace": "kwire.test", "fields": [
        {"name": "home", "type": "kwire.test.Address"},
        {"name": "nationality", "type": "kwire.test.Country"}]}),      # a diamond: Country twice
        references=[SchemaReference("kwire.test.Address", f"{subject}-address", 1),
                    SchemaReference("kwire.test.Country", f"{subject}-country", 1)])
    person_id = client.register_schema(subject, person)

    fetched = client.get_schema(person_id)
    assert fetched.references == person.references                       # kept as the registry has them
    resolved = client.resolve_references(fetched)
    assert list(resolved) == ["kwire.test.Country", "kwire.test.Address"]   # each after what it imports
    named: dict = {}
    for text in resolved.values():                                     # the order a parser needs
        fastavro.parse_schema(json.loads(text), named_schemas=named)
    parsed = fastavro.parse_schema(json.loads(fetched.schema_str), named_schemas=named)
    record = {"home": {"city": "Oslo", "country": {"code": "NO"}}, "nationality": {"code": "SE"}}
    import io

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, parsed) == record
    assert client.resolve_references(USER_V1) == {}


# ------------------------------------------------------------ compatibility
def test_compatibility_levels_and_checks(client, subject):
    client.register_schema(subject, USER_V1)
    assert client.set_compatibility(subject, "backward") == "BACKWARD"
    assert client.get_compatibility(subject) == "BACKWARD"
    assert client.test_compatibility(subject, USER_V2_COMPATIBLE) is True
    assert client.test_compatibility(subject, USER_V2_INCOMPATIBLE) is False
    assert client.test_compatibility(subject, USER_V2_INCOMPATIBLE, version=1) is False
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject, USER_V2_INCOMPATIBLE)
    assert e.value.status == 409 and not e.value.retriable
    assert client.register_schema(subject, USER_V2_COMPATIBLE) > 0
    with pytest.raises(SchemaRegistryError) as e:
        client.set_compatibility(subject, "SIDEWAYS")
    assert e.value.status == 422 and e.value.error_code == 42203
    assert client.get_compatibility() in ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                                          "FULL", "FULL_TRANSITIVE")
    with pytest.raises(ValueError):
        client.set_compatibility(subject)


# ------------------------------------------------------------ caches
def test_caches_spare_the_server(apicurio, subject):
    with HttpProxy(apicurio.url) as proxy, SchemaRegistryClient({"url": proxy.url}) as c:
        schema_id = c.register_schema(subject, USER_V1)
        c.register_schema(subject, USER_V1)
        assert len(proxy.requests("POST")) == 1
        sent = proxy.requests("POST")[0].headers
        assert sent["User-Agent"].startswith("kwire/") and "application/vnd.schemaregistry.v1+json" in sent["Accept"]
        assert sent["Content-Type"] == "application/vnd.schemaregistry.v1+json"
        proxy.reset()
        c.get_schema(schema_id)                      # registering told it the id's schema
        assert proxy.requests() == []
        c.clear_caches()
        for _ in range(3):
            c.get_schema(schema_id)
            c.get_version(subject, 1)
            c.get_latest_version(subject)
            c.lookup_schema(subject, USER_V1)
        paths = [s.path.split("?")[0] for s in proxy.requests()]
        assert len(paths) == 4 and len(set(paths)) == 4, paths       # each once


def test_latest_version_ttl_and_capacity(apicurio, subject):
    with HttpProxy(apicurio.url) as proxy, \
            SchemaRegistryClient({"url": proxy.url, "cache.latest.ttl.sec": 0.3, "cache.capacity": 2}) as c:
        ids = [c.register_schema(f"{subject}-{i}", avro_record(f"R{i}", [{"name": "f", "type": "int"}]))
               for i in range(3)]
        c.get_latest_version(subject + "-0")
        c.get_latest_version(subject + "-0")
        assert len(proxy.requests("GET")) == 1
        time.sleep(0.4)
        c.get_latest_version(subject + "-0")
        assert len(proxy.requests("GET")) == 2                  # expired: fetched again
        c.clear_caches()
        proxy.reset()
        for schema_id in ids + ids[:1]:                          # capacity 2: the first was dropped
            c.get_schema(schema_id)
        assert len(proxy.requests("GET")) == 4
        assert len(c._caches.by_id) == 2


def test_threads_share_one_client(client, subject):
    schema_id = client.register_schema(subject, USER_V1)
    client.clear_caches()
    results, errors = [], []

    def work() -> None:
        try:
            for _ in range(20):
                results.append(client.get_schema(schema_id).schema_type)
                results.append(client.get_latest_version(subject).schema.schema_type)
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and results == ["AVRO"] * 320


# ------------------------------------------------------------ options and answers
def test_options_are_checked_without_quoting_secrets():
    for conf, words in [
        ({}, "'url' is required"),
        ({"url": "ftp://registry"}, "http:// or https://"),
        ({"url": "http://r", "max.retries": -1}, "max.retries"),
        ({"url": "http://r", "timeout": "soon"}, "timeout"),
        ({"url": "http://r", "no.such.option": 1}, "no.such.option"),
        ({"url": "http://u:pw-secret@r", "basic.auth.user.info": "u:other-secret"}, "given twice"),
        ({"url": "http://r", "basic.auth.credentials.source": "USER_INFO", "basic.auth.user.info": "no-colon-secret"},
         "user:password"),
        ({"url": "http://r", "basic.auth.credentials.source": "SASL_INHERIT", "sasl.mechanism": "GSSAPI"}, "GSSAPI"),
        ({"url": "http://r", "bearer.auth.credentials.source": "STATIC_TOKEN"}, "bearer.auth.token"),
        ({"url": "http://r", "bearer.auth.credentials.source": "OAUTHBEARER", "bearer.auth.client.secret": "cs-secret"},
         "bearer.auth.issuer.endpoint.url"),
        ({"url": "http://r", "bearer.auth.token": "tok-secret", "basic.auth.user.info": "u:pw-secret"}, "exclude"),
        ({"url": "http://r", "ssl.key.location": "/k.pem", "ssl.key.password": "kp-secret"},
         "ssl.certificate.location"),
        ({"url": "http://r", "ssl.ca.location": "/no/such/ca.pem"}, "ssl.ca.location"),
    ]:
        with pytest.raises(ConfigError) as e:
            SchemaRegistryClient(conf)
        assert words in str(e.value) and "secret" not in str(e.value), (conf, str(e.value))


def test_url_user_info_is_kept_out_of_urls_and_repr():
    c = SchemaRegistryClient({"url": "http://alice:pw%40secret@registry.invalid:8081/apis/ccompat/v7/,"
                                     "http://registry2.invalid"})
    assert c.options.urls == ("http://registry.invalid:8081/apis/ccompat/v7", "http://registry2.invalid")
    assert "secret" not in repr(c) and "secret" not in repr(c.options) and "secret" not in repr(c._credentials)
    import base64

    assert base64.b64decode(c.options.basic.split()[1]) == b"alice:pw@secret"
    inherited = SchemaRegistryClient({
        "schema.registry.url": "http://r", "basic.auth.credentials.source": "SASL_INHERIT",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
                            'password="bob-secret";'})
    assert base64.b64decode(inherited.options.basic.split()[1]) == b"bob:bob-secret"
    assert "secret" not in repr(inherited.options)


def test_malformed_answers_raise_registry_errors(client):
    """Answers no registry gives (a fake answer, fed to the call's steps: a
    real server cannot be made to send them)."""
    for body in (b'{"nope": 1}', b'{"schema": 7}', b"[]", b"not json", b'{"schema": "{}", "references": 3}'):
        steps = SchemaRegistryClient.get_schema.steps(client, 1)
        step = next(steps)
        assert isinstance(step, Send)
        with pytest.raises(MalformedAnswer) as e:
            steps.send(Answer(200, body))
        assert not e.value.retriable and e.value.error_code == -1
    steps = SchemaRegistryClient.get_versions.steps(client, "s")
    next(steps)
    with pytest.raises(MalformedAnswer):
        steps.send(Answer(200, b'[1, "two"]'))
    steps = SchemaRegistryClient.get_versions.steps(client, "s")
    next(steps)
    with pytest.raises(SchemaRegistryError) as e:
        steps.send(Answer(418, b"<html>" + b"x" * 10_000))
    assert e.value.status == 418 and len(str(e.value)) < 700
