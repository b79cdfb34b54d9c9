"""JSON keys and values as typed Arrow columns: :class:`JsonFormat`.

* ``schema``: a JSON Schema's Arrow type (:func:`arrow_type`), and a JSON
  Schema of an Arrow type (:func:`json_schema`: what kwire registers);
* ``decode``: JSON values into a column of that type, through pyarrow's
  JSON reader;
* ``format``: :class:`JsonFormat`, the :class:`kwire.formats.base.Format`
  of JSON, with or without a schema registry; :func:`make`, what
  :func:`kwire.formats.make_format` calls.
"""

from kwire.formats.json_schema.format import JsonFormat, make
from kwire.formats.json_schema.schema import JsonSchemaError, arrow_type, json_schema

__all__ = ["JsonFormat", "JsonSchemaError", "arrow_type", "json_schema", "make"]
