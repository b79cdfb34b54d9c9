"""Protobuf schemas as descriptors: ``.proto`` text (as a schema registry
stores it, its imports resolved through the registry's references) or the
base64 serialized ``FileDescriptorProto`` confluent-kafka registers and asks
for (``format=serialized``), parsed into a ``google.protobuf`` descriptor
pool of their own.

``.proto`` text is compiled by the Protobuf compiler that grpcio-tools ships
(``python -m grpc_tools.protoc``, in a child process: its errors come back as
text, and its import hooks stay out of this one) into a
``FileDescriptorSet``. The well-known types (``google/protobuf/*.proto``)
come with it, so references need not name them.

A message of a file is named by its Confluent message indexes: the path of
indexes from the file's top-level messages down through nested ones
(``[0]`` is the file's first message; :func:`message_indexes`,
:func:`message_at`).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Mapping, Optional, Sequence

try:
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.descriptor import Descriptor, FileDescriptor
    from google.protobuf.message import DecodeError
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("kwire's Protobuf format needs protobuf and grpcio-tools: pip install 'kwire[protobuf]'") from e

from kwire.errors import KwireError

__all__ = ["ProtobufSchemaError", "Schema", "parse_schema", "message_indexes", "message_at", "PROTOC_TIMEOUT"]

#: Seconds one run of the Protobuf compiler may take.
PROTOC_TIMEOUT = 60.0
#: The name the schema itself gets among its references when compiled.
MAIN_NAME = "kwire_schema.proto"
WELL_KNOWN = "google/protobuf/"
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


class ProtobufSchemaError(KwireError):
    """A Protobuf schema that cannot be used: it does not compile, a
    reference is missing, a message index points nowhere, or its type has no
    Arrow form (a recursive message)."""


class Schema:
    """One parsed schema: its file descriptor (``file``) in a pool of its own
    (``pool``), holding its references and the well-known types."""

    def __init__(self, pool: "descriptor_pool.DescriptorPool", file: FileDescriptor) -> None:
        self.pool = pool
        self.file = file

    def message(self, indexes: Sequence[int] = (0,)) -> Descriptor:
        """The message at Confluent's ``indexes`` (see :func:`message_at`)."""
        return message_at(self.file, indexes)

    def find_message(self, full_name: str) -> Descriptor:
        try:
            return self.pool.FindMessageTypeByName(full_name)
        except KeyError:
            raise ProtobufSchemaError(f"no message {full_name!r} in {self.file.name}") from None


def is_serialized(text: str) -> bool:
    """Whether ``text`` is a base64 serialized ``FileDescriptorProto`` (the
    registry's ``format=serialized``) rather than ``.proto`` text (which
    always holds a ``;`` or ``{``, never in base64)."""
    return bool(_BASE64.fullmatch(text)) and not text.isspace()


def parse_schema(text: str, references: Optional[Mapping[str, str]] = None) -> Schema:
    """``text`` (``.proto`` text, or a base64 serialized
    ``FileDescriptorProto``) with ``references`` (import name -> schema
    text or serialized form, every file it imports, directly or not, but for
    the well-known types) as a :class:`Schema`."""
    protos: Dict[str, descriptor_pb2.FileDescriptorProto] = {}
    texts: Dict[str, str] = {}
    for name, t in list((references or {}).items()) + [(MAIN_NAME, text)]:
        if is_serialized(t):
            protos[name] = _deserialize(name, t)
        else:
            texts[name] = t
    if texts:
        protos.update(_compile(texts, list(protos.values())))
    pool = descriptor_pool.DescriptorPool()
    _add(pool, protos, MAIN_NAME, set(), [])
    return Schema(pool, pool.FindFileByName(MAIN_NAME))


def _deserialize(name: str, text: str) -> "descriptor_pb2.FileDescriptorProto":
    fd = descriptor_pb2.FileDescriptorProto()
    try:
        fd.ParseFromString(base64.b64decode("".join(text.split()), validate=True))
    except (binascii.Error, DecodeError, ValueError) as e:
        raise ProtobufSchemaError(f"{name}: not a base64 serialized FileDescriptorProto ({e})") from None
    fd.name = name
    return fd


def _add(pool: "descriptor_pool.DescriptorPool", protos: Mapping[str, "descriptor_pb2.FileDescriptorProto"],
         name: str, done: set, path: List[str]) -> None:
    """``name`` into ``pool`` after everything it imports."""
    if name in done:
        return
    if name in path:
        raise ProtobufSchemaError(f"import cycle: {' -> '.join(path + [name])}")
    fd = protos.get(name)
    if fd is None:
        fd = _well_known(name)
        if fd is None:
            raise ProtobufSchemaError(f"{path[-1] if path else name} imports {name!r}, which no reference gives")
    for dep in fd.dependency:
        _add(pool, protos, dep, done, path + [name])
    try:
        pool.Add(fd)
    except (TypeError, ValueError) as e:
        raise ProtobufSchemaError(f"{name}: {e}") from None
    done.add(name)


def _well_known(name: str) -> Optional["descriptor_pb2.FileDescriptorProto"]:
    """A well-known type's file (``google/protobuf/timestamp.proto``...), from
    the protobuf package's own descriptors."""
    if not name.startswith(WELL_KNOWN):
        return None
    from google.protobuf import descriptor_pool as dp
    import google.protobuf.any_pb2, google.protobuf.api_pb2, google.protobuf.duration_pb2  # noqa: E401,F401
    import google.protobuf.empty_pb2, google.protobuf.field_mask_pb2, google.protobuf.struct_pb2  # noqa: E401,F401
    import google.protobuf.timestamp_pb2, google.protobuf.type_pb2, google.protobuf.wrappers_pb2  # noqa: E401,F401

    try:
        file = dp.Default().FindFileByName(name)
    except KeyError:
        return None
    fd = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(fd)
    return fd


def _compile(texts: Mapping[str, str],
             given: Sequence["descriptor_pb2.FileDescriptorProto"]) -> Dict[str, "descriptor_pb2.FileDescriptorProto"]:
    """Every file of ``texts`` (name -> ``.proto`` text) and what they import,
    compiled by protoc (the ``given`` files read as they are): name -> file."""
    with tempfile.TemporaryDirectory(prefix="kwire-proto-") as tmp:
        src = os.path.join(tmp, "src")
        for name, text in texts.items():
            path = os.path.normpath(os.path.join(src, name))
            if os.path.isabs(name) or not path.startswith(src + os.sep):
                raise ProtobufSchemaError(f"reference name {name!r} is not a relative path")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        extra = []
        if given:
            given_path = os.path.join(tmp, "given.pb")
            with open(given_path, "wb") as f:
                f.write(descriptor_pb2.FileDescriptorSet(file=list(given)).SerializeToString())
            extra = [f"--descriptor_set_in={given_path}"]
        out = os.path.join(tmp, "set.pb")
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--descriptor_set_out={out}",
               "--include_imports", *extra, *sorted(texts)]
        env = dict(os.environ, GRPC_PYTHON_DISABLE_DYNAMIC_STUBS="1")
        try:
            done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=PROTOC_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ProtobufSchemaError(f"protoc took more than {PROTOC_TIMEOUT:g} s") from None
        if done.returncode != 0:
            if "No module named grpc_tools" in done.stderr:
                raise ImportError("kwire's Protobuf format needs grpcio-tools: pip install 'kwire[protobuf]'")
            msg = done.stderr.replace(src + os.sep, "").strip()
            raise ProtobufSchemaError(f"the schema does not compile: {msg[:2000]}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return {fd.name: fd for fd in fds.file}


def message_at(file: FileDescriptor, indexes: Sequence[int]) -> Descriptor:
    """The message of ``file`` at Confluent's message ``indexes``: the
    ``indexes[0]``-th top-level message, then its ``indexes[1]``-th nested
    message, and so on (an empty list means ``[0]``)."""
    indexes = list(indexes) or [0]
    msgs = list(file.message_types_by_name.values())
    desc: Optional[Descriptor] = None
    for depth, i in enumerate(indexes):
        if not 0 <= i < len(msgs):
            where = file.name if desc is None else desc.full_name
            raise ProtobufSchemaError(f"message index {indexes[:depth + 1]} is past the {len(msgs)} "
                                      f"message(s) of {where}")
        desc = msgs[i]
        msgs = list(desc.nested_types)
    assert desc is not None
    return desc


def message_indexes(desc: Descriptor) -> List[int]:
    """Confluent's message indexes of ``desc`` in its file (inverse of
    :func:`message_at`)."""
    out: List[int] = []
    while desc.containing_type is not None:
        parent = desc.containing_type
        out.append(list(parent.nested_types).index(desc))
        desc = parent
    out.append(list(desc.file.message_types_by_name.values()).index(desc))
    return out[::-1]
