"""The syntax of Kafka's Java client configuration: a ``sasl.jaas.config``
value (:func:`parse_jaas`) and a properties file such as the one Kafka's
tools take with ``--command-config`` (:func:`read_properties`). What the
options mean to kwire is :mod:`kwire.sasl.login`'s.

``sasl.jaas.config`` holds one JAAS login module entry,
``<module class> <flag> key=value ...;``, with the syntax of Kafka's
``JaasConfig``: words of letters, digits and ``_ $ - .``, values in double
or single quotes with backslash escapes, ``//`` and ``/* */`` comments,
exactly one entry.

A properties file is read as ``java.util.Properties`` reads one: ``#`` and
``!`` comment lines, ``key=value``, ``key: value`` or ``key value``, a line
ending in a backslash continued on the next (whose leading blanks are
dropped), backslash escapes (``\\t \\n \\r \\f \\uXXXX``, any other character
as itself).

Errors (:class:`~kwire.config.ConfigError`) name the option or the file's
line, never a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

from kwire.config import ConfigError

__all__ = ["JaasEntry", "parse_jaas", "read_properties", "FLAGS"]

#: JAAS control flags.
FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True)
class JaasEntry:
    """One JAAS login module entry: class, control flag, options."""

    module: str
    flag: str
    options: Dict[str, str]


# ------------------------------------------------------------------ JAAS
_WORD = re.compile(r"[A-Za-z0-9_$.\-\u0080-\uffff]+")


def _tokens(text: str, name: str) -> List[Tuple[str, str]]:
    """``(kind, value)`` tokens: ``word``, ``string`` (quoted), or the
    punctuation ``=`` / ``;``; comments and white space dropped."""
    out: List[Tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise ConfigError(f"{name}: unterminated /* comment")
            i = j + 2
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c in "\"'":
            value, i = _quoted(text, i, name)
            out.append(("string", value))
        else:
            m = _WORD.match(text, i)
            if m is None:
                raise ConfigError(f"{name}: unexpected character {c!r} at position {i} "
                                  "(a value with such characters must be quoted)")
            out.append(("word", m.group()))
            i = m.end()
    return out


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _quoted(text: str, start: int, name: str) -> Tuple[str, int]:
    """The string quoted at ``start`` (Java StreamTokenizer's rules: a
    backslash escapes the next character, \\n \\t \\r \\b \\f as in Java)."""
    quote = text[start]
    out = []
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(out), i + 1
        if c == "\n":
            break
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    raise ConfigError(f"{name}: unterminated quoted value")


def _entry(toks: List[Tuple[str, str]], i: int, name: str) -> Tuple[JaasEntry, int]:
    """The entry that starts at token ``i``, and the index after its ``;``."""
    if toks[i][0] != "word" or i + 1 >= len(toks) or toks[i + 1][0] != "word":
        raise ConfigError(f"{name}: expected '<LoginModule class> <flag> key=value ...;'")
    module, flag = toks[i][1], toks[i + 1][1]
    if flag.lower() not in FLAGS:
        raise ConfigError(f"{name}: invalid control flag {flag!r} for {module} (one of {', '.join(FLAGS)})")
    i += 2
    options: Dict[str, str] = {}
    while i < len(toks) and toks[i][0] != ";":
        if (i + 2 >= len(toks) or toks[i][0] != "word" or toks[i + 1][0] != "="
                or toks[i + 2][0] not in ("word", "string")):
            raise ConfigError(f"{name}: expected key=value in the options of {module}")
        options[toks[i][1]] = toks[i + 2][1]
        i += 3
    if i >= len(toks):
        raise ConfigError(f"{name}: the entry of {module} must end with ';'")
    return JaasEntry(module, flag.lower(), options), i + 1


def parse_jaas(text: str, name: str = "sasl.jaas.config") -> JaasEntry:
    """The one login module entry of a ``sasl.jaas.config`` value; errors
    name the option as ``name``."""
    toks = _tokens(text, name)
    if not toks:
        raise ConfigError(f"{name} is empty: it must hold one login module entry, e.g. "
                          'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";')
    entries: List[JaasEntry] = []
    i = 0
    while i < len(toks):
        entry, i = _entry(toks, i, name)
        entries.append(entry)
    if len(entries) != 1:
        raise ConfigError(f"{name} must contain exactly one login module entry, found {len(entries)}")
    return entries[0]


# ------------------------------------------------------------ properties
_PROPERTY_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


def _logical_lines(text: str) -> List[Tuple[int, str]]:
    """``(first line number, logical line)``: continuations joined, comments
    and blank lines dropped."""
    out: List[Tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, line = i + 1, lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while len(line) - len(line.rstrip("\\")) & 1 and i < len(lines):    # an odd number of backslashes
            line = line[:-1] + lines[i].lstrip()
            i += 1
        out.append((start, line))
    return out


def _unescape(text: str, where: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u":
                if not _HEX4.fullmatch(text[i + 2:i + 6]):
                    raise ConfigError(f"{where}: malformed \\uXXXX escape")
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_PROPERTY_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append("" if c == "\\" else c)
        i += 1
    return "".join(out)


_KEY_END = re.compile(r"(?<!\\)(?:\\\\)*([=:\s])")


def read_properties(path: str) -> Dict[str, str]:
    """The ``key=value`` pairs of a Java properties file (see the module doc)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read the properties file {path} ({e.strerror})") from None
    out: Dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        m = _KEY_END.search(line)
        key, rest = (line, "") if m is None else (line[:m.start(1)], line[m.start(1):])
        rest = rest.lstrip()
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip()
        where = f"{path}, line {lineno}"
        out[_unescape(key, where)] = _unescape(rest, where)
    return out
