"""Kafka's API keys and error codes by name (kwire.protocol.api_keys, written
by scripts/gen_protocol.py): they agree with the message classes and with
kwire's error table, and no module declares a key or a code as a bare
integer of its own."""

from __future__ import annotations

import ast
from pathlib import Path

from kwire import protocol
from kwire.error_codes import ERROR_CODES
from kwire.protocol.api_keys import API_NAMES, ApiKey, ErrorCode
from kwire.protocol.versions import MAX_VERSIONS

SRC = Path(__file__).resolve().parents[2] / "src" / "kwire"
GENERATED = {SRC / "protocol" / "api_keys.py", SRC / "protocol" / "messages.py"}
# Other tables whose names happen to be a key's or a code's: the codec ids of the
# record batch attributes, and the Kafka 0.7 request types.
OTHER_TABLES = {("compression.py", "NONE"), ("protocol/v07.py", "PRODUCE"), ("protocol/v07.py", "FETCH")}


def test_api_keys_name_every_api():
    assert sorted(API_NAMES) == [int(k) for k in ApiKey]
    assert ApiKey.FETCH == 1 and ApiKey.API_VERSIONS == 18 and ApiKey.DESCRIBE_TOPIC_PARTITIONS == 75
    assert API_NAMES[ApiKey.OFFSET_FOR_LEADER_EPOCH] == "OffsetForLeaderEpoch"


def test_api_keys_agree_with_the_message_classes():
    for key, (request, response) in protocol.APIS.items():
        assert request.API_KEY == response.API_KEY == key
        assert request.__name__ == API_NAMES[key] + "Request"
        assert ApiKey(key) == key


def test_error_code_is_the_error_table():
    assert [(int(c), c.name) for c in ErrorCode] == [(code, name) for code, name, _, _ in ERROR_CODES]
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1 and ErrorCode.NOT_COORDINATOR == 16


def test_version_caps_are_for_apis_kwire_speaks():
    for key, cap in MAX_VERSIONS.items():
        assert isinstance(key, ApiKey)
        assert protocol.request_class(key).MIN_VERSION <= cap < protocol.max_version(key)


def _int_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _named_integers(node: ast.Assign):
    """(name, value) pairs an assignment binds, ``A = 1`` and ``A, B = 1, 2`` alike."""
    for target in node.targets:
        if isinstance(target, ast.Name):
            yield target.id, node.value
        elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            for name, value in zip(target.elts, node.value.elts):
                if isinstance(name, ast.Name):
                    yield name.id, value


def test_no_module_declares_a_key_or_code_as_an_integer():
    names = set(ApiKey.__members__) | set(ErrorCode.__members__)
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path in GENERATED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign):
                for name, value in _named_integers(node):
                    other = (str(path.relative_to(SRC)), name) in OTHER_TABLES
                    if _int_constant(value) and name.lstrip("_") in names and not other:
                        found.append(f"{path.relative_to(SRC)}:{node.lineno}: {name}")
    assert not found, found
