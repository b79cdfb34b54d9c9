"""Typed formats of keys and values: ``avro``, ``protobuf`` and ``json``.

Each kind lives in its own subpackage (:mod:`kwire.formats.avro`,
:mod:`kwire.formats.protobuf`, :mod:`kwire.formats.json_schema`), imported
only when a format of that kind is made. The rest of kwire sees formats
through :class:`kwire.formats.base.Format` and this module:

- :func:`make_format`: a format from its kind and options (Confluent's
  names: ``schema.registry.url``, ``basic.auth.user.info``,
  ``auto.register.schemas``...; ``schema``: the schema the caller gives, for
  a format without a registry). Each subpackage has a ``make(options, *,
  topic, is_key)`` that this calls: ``topic`` and ``is_key`` name the
  subject a registry's reader schema is looked up under.
- a *format spec*, as ``poll_columnar``, :func:`kwire.scan` and the ``kwire``
  command take one: ``None`` or ``"raw"`` (the bytes as they are), a
  :class:`Format`, a kind (``"json"``), or a kind with its options
  (``("json", {"schema": ...})``). :func:`check_spec` checks one,
  :class:`FormatCache` makes each spec's format once per topic and column.
- :func:`split_options`: a mixed configuration's format options apart from
  the client's (for callers given both in one mapping: ``kwire.scan``'s
  keywords, the command's ``-X``).

Nothing here imports pyarrow; the formats do.
"""

from __future__ import annotations

import collections
from importlib import import_module
from typing import TYPE_CHECKING, Any, Dict, Hashable, Mapping, Optional, Tuple

if TYPE_CHECKING:
    from kwire.formats.base import Format

__all__ = ["KINDS", "make_format", "check_spec", "FormatCache", "split_options", "is_format_option"]

#: The module of each kind, imported when a format of that kind is made.
KINDS: Dict[str, str] = {
    "avro": "kwire.formats.avro",
    "protobuf": "kwire.formats.protobuf",
    "json": "kwire.formats.json_schema",
}


#: Option names (and prefixes) of the formats and the registry, apart from a client's.
FORMAT_OPTIONS = frozenset({
    "schema", "subject", "key.subject", "value.subject", "registry", "auto.register.schemas", "use.latest.version",
    "use.schema.id", "use.latest.with.metadata", "framing",
    "normalize.schemas", "subject.name.strategy", "key.subject.name.strategy", "value.subject.name.strategy",
    "latest.compatibility.strict",
})
FORMAT_OPTION_PREFIXES = ("schema.registry.", "basic.auth.", "bearer.auth.")

#: Formats a :class:`FormatCache` keeps by default (each spec, topic and column is one).
DEFAULT_CACHE_CAPACITY = 256


def _option_name(name: str) -> str:
    return name.strip().lower().replace("_", ".").replace("-", ".")


def is_format_option(name: str) -> bool:
    """Whether ``name`` (dotted or snake case) is a format's or the registry's option."""
    dotted = _option_name(name)
    return dotted in FORMAT_OPTIONS or dotted.startswith(FORMAT_OPTION_PREFIXES)


def split_options(config: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(format options, the rest)`` of ``config``; format options by their
    dotted names (``schema_registry_url`` -> ``schema.registry.url``), the
    rest as given."""
    formats: Dict[str, Any] = {}
    rest: Dict[str, Any] = {}
    for name, value in config.items():
        if is_format_option(name):
            formats[_option_name(name)] = value
        else:
            rest[name] = value
    return formats, rest


def _module(kind: str) -> Any:
    if not isinstance(kind, str) or kind.lower() not in KINDS:
        raise ValueError(f"unknown format {kind!r}: one of {', '.join(sorted(KINDS))} (or 'raw': the bytes as they are)")
    name = KINDS[kind.lower()]
    try:
        return import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise                  # a dependency of the format is missing: its own error names it
        raise ImportError(f"the {kind} format ({name}) is not part of this kwire installation") from None


def make_format(kind: str, options: Optional[Mapping[str, Any]] = None, /, *, topic: Optional[str] = None,
                is_key: bool = False, **more: Any) -> "Format":
    """A :class:`Format` of ``kind`` ("avro", "protobuf" or "json") with
    ``options`` (a mapping of Confluent's dotted names) and ``more``
    (keywords, snake or dotted: ``schema_registry_url=...``). ``topic`` and
    ``is_key`` say which subject a registry's schema is looked up under
    (its subject name strategy)."""
    merged = {_option_name(k): v for k, v in {**(options or {}), **more}.items()}
    module = _module(kind)
    make = getattr(module, "make", None)
    if make is None:
        raise ImportError(f"the {kind} format ({module.__name__}) has no make(options, *, topic, is_key): "
                          "it cannot be made by name in this kwire")
    return make(merged, topic=topic, is_key=is_key)


def check_spec(spec: Any) -> None:
    """Raise ``ValueError`` (``TypeError``) now for a spec that names no
    format, rather than when the first records come."""
    from kwire.formats.base import Format

    if _is_raw(spec) or isinstance(spec, Format):
        return
    if isinstance(spec, str):
        _module(spec)
        return
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], Mapping):
        _module(spec[0])
        return
    raise TypeError(f"a format is a Format, a kind ('avro', 'protobuf', 'json', 'raw') or (kind, options), "
                    f"not {spec!r}")


def _is_raw(spec: Any) -> bool:
    """``None`` or "raw": the bytes as they are."""
    return spec is None or (isinstance(spec, str) and spec.lower() == "raw")


def _freeze(value: Any) -> Hashable:
    """A hashable stand-in for an option value (a JSON Schema is a dict)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return ("unhashable", type(value).__name__, repr(value))
    return value


class FormatCache:
    """The formats one client made from specs: one per spec, topic and
    column (``is_key``), the least recently used dropped past ``capacity``.
    ``defaults`` are options every spec's format gets (a registry's URL and
    credentials), under the spec's own."""

    def __init__(self, defaults: Optional[Mapping[str, Any]] = None, capacity: int = DEFAULT_CACHE_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a format cache needs room for one format at least")
        self._defaults = dict(defaults or {})
        self._capacity = capacity
        self._made: "collections.OrderedDict[Hashable, Format]" = collections.OrderedDict()

    def get(self, spec: Any, *, topic: str, is_key: bool) -> Optional["Format"]:
        """The format of ``spec`` for ``topic``'s keys or values; None for raw."""
        from kwire.formats.base import Format

        if _is_raw(spec):
            return None
        if isinstance(spec, Format):
            return spec
        kind, options = (spec, {}) if isinstance(spec, str) else spec
        key = (kind, _freeze(options), topic, is_key)
        fmt = self._made.get(key)
        if fmt is None:
            fmt = make_format(kind, {**self._defaults, **options}, topic=topic, is_key=is_key)
            self._made[key] = fmt
            while len(self._made) > self._capacity:
                self._made.popitem(last=False)
        else:
            self._made.move_to_end(key)
        return fmt
