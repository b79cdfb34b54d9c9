"""Protobuf keys and values as typed Arrow columns, decoded (and encoded)
by the compiled core (``kwire._core.protobuf``): :class:`ProtobufFormat`.

* ``schema``: ``.proto`` text or serialized descriptors parsed into a
  descriptor pool (:func:`parse_schema`; protoc from grpcio-tools);
* ``plan``: a message's Arrow type (the mapping is documented there) and
  the plan the compiled core follows for it;
* ``format``: :class:`ProtobufFormat`, the :class:`kwire.formats.Format` of
  Protobuf, with or without a schema registry.

Needs the ``protobuf`` extra: ``pip install 'kwire[protobuf]'``.
"""

from kwire.formats.protobuf.format import ProtobufFormat, make
from kwire.formats.protobuf.plan import arrow_type
from kwire.formats.protobuf.schema import ProtobufSchemaError, Schema, parse_schema

__all__ = ["ProtobufFormat", "ProtobufSchemaError", "Schema", "arrow_type", "make", "parse_schema"]
