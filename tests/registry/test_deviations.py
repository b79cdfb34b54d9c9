"""Where Apicurio Registry's Confluent-compatible API answers otherwise than
Confluent's documented API. kwire's client is written to Confluent's API and
passes the server's answer on; each test here shows one difference as
Apicurio 3.3.3 answers it, so a change in either is seen (the test then
fails and says which). The raw answers come through the client's own
request step (``_request``), as the client gets them."""

from __future__ import annotations

import base64

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from kwire.registry import Schema
from kwire.registry.client import _path

from .conftest import USER_V1, USER_V2_COMPATIBLE, USER_V2_INCOMPATIBLE

PROTO = 'syntax = "proto3";\npackage kwire.dev;\n\nmessage Thing {\n  int32 a = 1;\n}\n'


def _raw(client, method: str, path: str, query=None, body=None):
    return client._run(client._request(method, path, query, body))


def test_apicurio_deviation_compatibility_under_none(client, subject):
    """Confluent: level NONE disables compatibility checks, so every schema
    tests compatible. Apicurio, at its default level NONE (no level set for
    the subject), still checks: a change that is not backward compatible tests
    incompatible, though registering it succeeds. (With NONE set on the
    subject itself it answers compatible, as Confluent does.)"""
    assert client.get_compatibility() == "NONE"
    client.register_schema(subject, USER_V1)
    assert client.test_compatibility(subject, USER_V2_INCOMPATIBLE) is False      # Confluent: True
    assert client.test_compatibility(subject, USER_V2_COMPATIBLE) is True
    assert client.register_schema(subject, USER_V2_INCOMPATIBLE) > 0             # not enforced: NONE
    other = subject + "-explicit"
    client.register_schema(other, USER_V1)
    client.set_compatibility(other, "NONE")
    assert client.test_compatibility(other, USER_V2_INCOMPATIBLE) is True


def test_apicurio_deviation_verbose_compatibility_has_no_messages(client, subject):
    """Confluent: with ``verbose=true`` an incompatible answer carries
    ``messages``, the reasons. Apicurio answers ``is_compatible`` alone."""
    client.register_schema(subject, USER_V1)
    client.set_compatibility(subject, "BACKWARD")
    answer = _raw(client, "POST", _path("compatibility", "subjects", subject, "versions", "latest"),
                  {"verbose": True}, USER_V2_INCOMPATIBLE.to_dict())
    assert answer == {"is_compatible": False}                                   # Confluent: + "messages": [...]
    assert client.test_compatibility(subject, USER_V2_INCOMPATIBLE, verbose=True) is False


def test_apicurio_deviation_soft_delete_subject_lists_deleted_versions(client, subject):
    """Confluent: deleting a subject (soft) answers the versions it deleted,
    those not soft-deleted already. Apicurio lists the soft-deleted ones too."""
    client.register_schema(subject, USER_V1)
    client.register_schema(subject, USER_V2_COMPATIBLE)
    assert client.delete_version(subject, 2) == 2
    assert client.get_versions(subject) == [1]
    assert client.delete_subject(subject) == [1, 2]                             # Confluent: [1]


def test_apicurio_deviation_serialized_protobuf_is_not_base64(client, subject):
    """Confluent: ``format=serialized`` answers a Protobuf schema as a
    base64-encoded FileDescriptorProto. Apicurio puts the descriptor's raw
    bytes into the JSON string (not base64: bytes that are not UTF-8 do not
    survive)."""
    schema_id = client.register_schema(subject, Schema(PROTO, "PROTOBUF"))
    text = client.get_schema(schema_id, fmt="serialized").schema_str
    with pytest.raises(ValueError):
        base64.b64decode(text, validate=True)                                   # Confluent: base64
    descriptor = descriptor_pb2.FileDescriptorProto()
    descriptor.ParseFromString(text.encode("latin-1"))                          # this one happens to be ASCII
    assert [m.name for m in descriptor.message_type] == ["Thing"]
    assert client.get_schema(schema_id).schema_str == PROTO                     # the default format: the text


def test_apicurio_deviation_protobuf_registered_as_a_descriptor_stays_one(apicurio, client, subject):
    """confluent-kafka's ProtobufSerializer registers its schema as a
    base64-encoded FileDescriptorProto. Confluent's registry parses it and
    answers the ``.proto`` text from then on; Apicurio answers the base64 as
    registered (a Protobuf format reading schemas by id must take both)."""
    from .test_framing import _protobuf_classes

    first = _protobuf_classes()["First"]
    serialize = ProtobufSerializer(first, apicurio.confluent_client(), {"use.deprecated.format": False})
    value = serialize(first(id=1), SerializationContext(subject[:-len("-value")], MessageField.VALUE))
    schema = client.get_schema(int.from_bytes(value[1:5], "big"))
    descriptor = descriptor_pb2.FileDescriptorProto()
    descriptor.ParseFromString(base64.b64decode(schema.schema_str, validate=True))   # Confluent: .proto text
    assert descriptor.package == "kwire.framing" and "message" not in schema.schema_str


def test_apicurio_deviation_subject_config_defaults_to_global(client, subject):
    """Confluent: ``GET /config/{subject}`` of a subject without a level of
    its own is 404 (error 40408) unless ``defaultToGlobal=true``. Apicurio
    answers the global level."""
    client.register_schema(subject, USER_V1)
    global_level = {"compatibilityLevel": client.get_compatibility()}
    assert _raw(client, "GET", _path("config", subject)) == global_level                   # Confluent: 40408
    assert _raw(client, "GET", _path("config", subject), {"defaultToGlobal": False}) == global_level
