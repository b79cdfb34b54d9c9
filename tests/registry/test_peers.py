"""kwire's SchemaRegistryClient and confluent-kafka's own, against the same
Apicurio Registry: what one registers the other finds, and every call both
have answers the same (ids, versions, subjects, schemas with their
references, compatibility, errors' status and code); kwire's subject name
strategies name what confluent-kafka's do."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema as ConfluentSchema
from confluent_kafka.schema_registry import SchemaReference as ConfluentReference
from confluent_kafka.schema_registry import record_subject_name_strategy as c_record
from confluent_kafka.schema_registry import topic_record_subject_name_strategy as c_topic_record
from confluent_kafka.schema_registry import topic_subject_name_strategy as c_topic
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentError
from confluent_kafka.serialization import MessageField
from confluent_kafka.serialization import SerializationContext as ConfluentContext

from kwire.registry import Schema, SchemaReference, SchemaRegistryError, naming

from .conftest import USER_V1, USER_V2_COMPATIBLE, USER_V2_INCOMPATIBLE, avro_record


@pytest.fixture(scope="module")
def confluent(apicurio):
    return apicurio.confluent_client()


def _theirs(schema: Schema) -> ConfluentSchema:
    return ConfluentSchema(schema.schema_str, schema.schema_type,
                           [ConfluentReference(r.name, r.subject, r.version) for r in schema.references])


def _same_schema(ours: Schema, theirs: ConfluentSchema) -> None:
    """The same schema (confluent-kafka's cache answers the text it was given: Avro compared as JSON)."""
    assert ours.schema_type == theirs.schema_type
    if ours.schema_type == "PROTOBUF":
        assert ours.schema_str == theirs.schema_str
    else:
        assert json.loads(ours.schema_str) == json.loads(theirs.schema_str)
    assert [(r.name, r.subject, r.version) for r in ours.references] == \
        [(r.name, r.subject, r.version) for r in theirs.references or []]


def test_what_one_registers_the_other_finds(client, confluent, subject):
    ours = client.register_schema(subject, USER_V1)
    theirs = confluent.register_schema(subject, _theirs(USER_V1))
    assert ours == theirs
    second = confluent.register_schema(subject, _theirs(USER_V2_COMPATIBLE))
    assert client.lookup_schema(subject, USER_V2_COMPATIBLE).schema_id == second
    found = confluent.lookup_schema(subject, _theirs(USER_V1))
    looked = client.lookup_schema(subject, USER_V1)
    assert (looked.schema_id, looked.version, looked.subject) == (found.schema_id, found.version, found.subject)

    _same_schema(client.get_schema(second), confluent.get_schema(second))
    assert client.get_versions(subject) == confluent.get_versions(subject)
    for version in (1, 2):
        a, b = client.get_version(subject, version), confluent.get_version(subject, version)
        assert (a.schema_id, a.version, a.subject) == (b.schema_id, b.version, b.subject)
        _same_schema(a.schema, b.schema)
    a, b = client.get_latest_version(subject), confluent.get_latest_version(subject)
    assert (a.schema_id, a.version, a.subject) == (b.schema_id, b.version, b.subject)
    assert sorted(client.get_subjects()) == sorted(confluent.get_subjects())
    assert client.get_subjects_by_schema_id(second) == confluent.get_subjects_by_schema_id(second)
    assert sorted(client.get_schema_types()) == sorted(confluent.get_schema_types())


def test_references_as_both_see_them(client, confluent, subject):
    inner = avro_record("Part", [{"name": "sku", "type": "string"}])
    confluent.register_schema(f"{subject}-part", _theirs(inner))
    outer = Schema(json.dumps({"type": "record", "name": "Order", "namespace": "kwire.test",
                               "fields": [{"name": "part", "type": "kwire.test.Part"}]}),
                   references=[SchemaReference("kwire.test.Part", f"{subject}-part", 1)])
    schema_id = confluent.register_schema(subject, _theirs(outer))
    assert client.register_schema(subject, outer) == schema_id
    _same_schema(client.get_schema(schema_id), confluent.get_schema(schema_id))
    assert client.resolve_references(client.get_schema(schema_id)) == \
        {"kwire.test.Part": confluent.get_version(f"{subject}-part", 1).schema.schema_str}


def test_compatibility_as_both_see_it(client, confluent, subject):
    client.register_schema(subject, USER_V1)
    assert client.set_compatibility(subject, "FORWARD") == confluent.get_compatibility(subject) == "FORWARD"
    assert confluent.set_compatibility(subject, "BACKWARD")["compatibility"] == client.get_compatibility(subject)
    for candidate in (USER_V2_COMPATIBLE, USER_V2_INCOMPATIBLE):
        assert client.test_compatibility(subject, candidate) == confluent.test_compatibility(subject, _theirs(candidate))
    assert client.get_compatibility() == confluent.get_compatibility()


def test_errors_as_both_see_them(client, confluent, subject):
    client.register_schema(subject, USER_V1)
    calls = [("get_schema", (1_900_000_000,)), ("get_latest_version", (subject + "-none",)),
             ("get_version", (subject, 9)), ("get_versions", (subject + "-none",))]
    for name, args in calls:
        with pytest.raises(SchemaRegistryError) as ours:
            getattr(client, name)(*args)
        with pytest.raises(ConfluentError) as theirs:
            getattr(confluent, name)(*args)
        assert (ours.value.status, ours.value.error_code) == \
            (theirs.value.http_status_code, theirs.value.error_code), name
        assert ours.value.message == theirs.value.error_message
    with pytest.raises(SchemaRegistryError) as ours:
        client.lookup_schema(subject, USER_V2_COMPATIBLE)
    with pytest.raises(ConfluentError) as theirs:
        confluent.lookup_schema(subject, _theirs(USER_V2_COMPATIBLE))
    assert (ours.value.status, ours.value.error_code) == (theirs.value.http_status_code, theirs.value.error_code)


def test_deletes_as_both_see_them(client, confluent, subject):
    for s in (subject, subject + "-2"):
        client.register_schema(s, USER_V1)
        client.register_schema(s, USER_V2_COMPATIBLE)
    assert client.delete_version(subject, 2) == confluent.delete_version(subject + "-2", 2)
    assert client.delete_subject(subject) == confluent.delete_subject(subject + "-2")
    assert client.delete_subject(subject, permanent=True) == confluent.delete_subject(subject + "-2", permanent=True)


def test_subject_name_strategies_name_what_confluents_do():
    for field, our_field in ((MessageField.VALUE, "value"), (MessageField.KEY, "key")):
        theirs, ours = ConfluentContext("orders", field), naming.SerializationContext("orders", our_field)
        for mine, their in ((naming.topic_subject_name_strategy, c_topic),
                            (naming.record_subject_name_strategy, c_record),
                            (naming.topic_record_subject_name_strategy, c_topic_record)):
            assert mine(ours, "kwire.test.Order") == their(theirs, "kwire.test.Order")
            assert mine(theirs, "kwire.test.Order") == their(theirs, "kwire.test.Order")   # their context too
    for name in ("TopicNameStrategy", "io.confluent.kafka.serializers.subject.TopicNameStrategy",
                 "topic_subject_name_strategy"):
        assert naming.strategy(name) is naming.topic_subject_name_strategy
    assert naming.strategy("io.confluent.kafka.serializers.subject.RecordNameStrategy") is \
        naming.record_subject_name_strategy
    assert naming.strategy(" TopicRecordNameStrategy ") is naming.topic_record_subject_name_strategy
    with pytest.raises(ValueError, match="unknown subject name strategy"):
        naming.strategy("io.apicurio.registry.serde.strategy.TopicIdStrategy")
    with pytest.raises(ValueError, match="record's full name"):
        naming.record_subject_name_strategy(naming.SerializationContext("t"), None)
    with pytest.raises(ValueError, match="key or value"):
        naming.topic_subject_name_strategy(naming.SerializationContext("t", "headers"), None)
