"""Avro keys and values as typed Arrow columns, decoded by the compiled
core (``kwire._core.avro``): :class:`AvroFormat`.

* ``schema``: the Avro schema parsed (:func:`parse_schema`, :class:`Node`);
* ``arrow``: its Arrow type, and which column each part fills;
* ``program``: a writer schema resolved against the reader's, compiled
  into the program the core runs;
* ``format``: :class:`AvroFormat`, the :class:`kwire.formats.Format` of
  Avro, with or without a schema registry.
"""

from kwire.formats.avro.format import AvroFormat, make
from kwire.formats.avro.schema import AvroSchemaError, Node, parse_schema

__all__ = ["AvroFormat", "AvroSchemaError", "Node", "make", "parse_schema"]
