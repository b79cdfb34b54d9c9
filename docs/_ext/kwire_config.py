"""The ``kwire-config`` directive: the table of every client option, read
from :mod:`kwire.config` when the docs are built (so it cannot drift from
the code): its name; the Java client's name it matches (its dotted form,
where Kafka's Java client of the version the tests run has it:
``java_config_names.json``, written by ``scripts/gen_config_names.py``),
else "kwire's"; librdkafka's and kafka-python's other names (``ALIASES``);
what it accepts, its default, the clients that take it, and its meaning.
Every option is also accepted by its dotted name."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Dict, List

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

TABLES = ("COMMON", "SASL", "PRODUCER", "CONSUMER", "SHARE_CONSUMER", "ADMIN")
CLIENTS = (("PRODUCER", "producer"), ("CONSUMER", "consumer"), ("SHARE_CONSUMER", "share consumer"),
           ("ADMIN", "admin"))
NAMED = {"_bool": "true or false", "_str": "string", "_opt_str": "string", "_opt_assignor": "assignor name",
         "_servers": "host:port list", "_ssl_context": "ssl.SSLContext", "_callable": "callable",
         "_acks": "all, -1, 0 or 1", "_compression": "none, gzip, snappy, lz4 or zstd",
         "_partitioner": "name or callable", "_store_type": "JKS, PKCS12 or PEM", "_any": "any",
         "_interceptors": "class names or objects", "_tracer_provider": "TracerProvider",
         "_extensions": "key=value pairs", "_level": "int (per codec)",
         "_opt_timeout_ms": "int >= 0 or None", "_tls_protocols": "TLS versions (a list)",
         "_callback": "callable or module:function"}


def accepts(convert: Any) -> str:
    """What an option's converter takes, in words."""
    name = convert.__qualname__.split(".")[0]
    free = inspect.getclosurevars(convert).nonlocals if convert.__closure__ else {}
    if name == "_int":
        lo, hi = free.get("lo"), free.get("hi")
        return "int" + (f" >= {lo}" if lo is not None and hi is None else "") + \
            (f" in {lo}..{hi}" if lo is not None and hi is not None else "")
    if name == "_opt_int":
        return f"int >= {free.get('lo')} or None"
    if name == "_float":
        return f"float in {free.get('lo')}..{free.get('hi')}"
    if name == "_offset_reset":
        from kwire.config import _RESET
        return accepts(_RESET) + "; or by_duration:<ISO 8601 duration>"
    if name == "_choice":
        aliases = free.get("aliases") or {}
        return ", ".join(free.get("names", ())) + (f" (also {', '.join(aliases)})" if aliases else "")
    return NAMED.get(name, name.strip("_").replace("_", " "))


def java_names() -> set:
    names = json.loads((Path(__file__).with_name("java_config_names.json")).read_text())
    return set(names["producer"]) | set(names["consumer"]) | set(names["admin"])


def rows() -> List[Dict[str, str]]:
    from kwire import config

    java = java_names()
    aliases: Dict[str, List[str]] = {}
    for other, name in config.ALIASES.items():
        aliases.setdefault(name, []).append(other.replace("_", "."))
    seen: Dict[str, Dict[str, str]] = {}
    for table in TABLES:
        for name, opt in getattr(config, table).items():
            if name in seen:
                continue
            clients = [label for t, label in CLIENTS if name in getattr(config, t)]
            secret = name in config.SECRET_OPTIONS
            seen[name] = {
                "option": name,
                "java": name.replace("_", ".") if name.replace("_", ".") in java else "kwire's",
                "also": ", ".join(aliases.get(name, [])) or "-",
                "accepts": accepts(opt.convert),
                "default": "(secret)" if secret and opt.default else repr(opt.default) if opt.default is not None else "-",
                "clients": ", ".join(clients),
                "meaning": opt.doc or "-",
            }
    return sorted(seen.values(), key=lambda r: r["option"])


class ConfigTable(SphinxDirective):
    has_content = False

    def run(self) -> List[nodes.Node]:
        heads = ("option", "java", "also", "accepts", "default", "clients", "meaning")
        widths = (14, 14, 10, 12, 8, 10, 36)
        table = nodes.table(classes=["kwire-config"])
        group = nodes.tgroup(cols=len(heads))
        table += group
        for w in widths:
            group += nodes.colspec(colwidth=w)
        head = nodes.thead()
        group += head
        head += self._row(["option", "Java client's name", "librdkafka's or kafka-python's", "accepts", "default",
                           "clients", "meaning"])
        body = nodes.tbody()
        group += body
        for r in rows():
            body += self._row([r[h] for h in heads], literal=(0, 1, 2, 4))
        return [table]

    @staticmethod
    def _row(cells: List[str], literal=()) -> nodes.row:
        row = nodes.row()
        for i, text in enumerate(cells):
            entry = nodes.entry()
            para = nodes.paragraph()
            plain = text in ("-", "kwire's") or i not in literal
            para += nodes.Text(text) if plain else nodes.literal(text=text)
            entry += para
            row += entry
        return row


def setup(app: Any) -> Dict[str, Any]:
    app.add_directive("kwire-config", ConfigTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
