"""The Avro benchmark workload: the shapes' schemas and seeded values,
shared by ``compare_avro.py`` (kwire against fastavro) and ``icount.py``'s
Avro paths (which write the values with kwire's own encoder: no fastavro
in the gate's environment)."""

from __future__ import annotations

import random
import string
from typing import Any, Dict, List

SEED = 31

EVENT12 = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"}, {"name": "session", "type": "string"},
    {"name": "count", "type": "long"}, {"name": "amount", "type": "long"}, {"name": "country", "type": "string"},
    {"name": "score", "type": ["null", "double"], "default": None},
    {"name": "device", "type": {"type": "record", "name": "Device", "fields": [
        {"name": "os", "type": "string"}, {"name": "version", "type": "int"}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "flag", "type": "boolean"}, {"name": "page", "type": "string"}]}
EVENT12_V2 = {"type": "record", "name": "Event", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "user_name", "type": "string", "aliases": ["user"]},
    {"name": "count", "type": "long"}, {"name": "amount", "type": "long"}, {"name": "country", "type": "string"},
    {"name": "score", "type": ["null", "double"], "default": None},
    {"name": "device", "type": {"type": "record", "name": "Device", "fields": [
        {"name": "os", "type": "string"}, {"name": "version", "type": "long"}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "flag", "type": "boolean"}, {"name": "page", "type": "string"},
    {"name": "region", "type": "string", "default": "eu"},
    {"name": "retries", "type": ["null", "int"], "default": None}]}
NARROW4 = {"type": "record", "name": "Narrow", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": "int"}, {"name": "c", "type": "double"},
    {"name": "d", "type": "string"}]}
WIDE40 = {"type": "record", "name": "Wide", "fields": [
    {"name": f"f{i}", "type": ["long", "double", "string", ["null", "string"]][i % 4]} for i in range(40)]}


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(lo, hi)))


def _event(rng: random.Random, i: int) -> Dict[str, Any]:
    return {"id": i, "user": f"user-{rng.randrange(10**6)}", "session": _text(rng, 8, 16),
            "count": rng.randrange(100), "amount": rng.randrange(10**9), "country": rng.choice(["DE", "FR", "US", "JP"]),
            "score": None if i % 3 == 0 else rng.random(),
            "device": {"os": rng.choice(["ios", "android", "web"]), "version": rng.randrange(20)},
            "tags": [_text(rng, 3, 8) for _ in range(rng.randrange(4))], "ts": 1_700_000_000_000 + i,
            "flag": bool(i & 1), "page": "/" + _text(rng, 5, 20)}


def _narrow(rng: random.Random, i: int) -> Dict[str, Any]:
    return {"a": rng.randrange(-(2**40), 2**40), "b": rng.randrange(-(2**20), 2**20), "c": rng.random(),
            "d": _text(rng, 6, 14)}


def _wide(rng: random.Random, i: int) -> Dict[str, Any]:
    makers = [lambda: rng.randrange(2**50), rng.random, lambda: _text(rng, 4, 12),
              lambda: None if rng.random() < 0.3 else _text(rng, 4, 12)]
    return {f"f{k}": makers[k % 4]() for k in range(40)}


#: shape -> (writer schema, reader schema, value maker)
SHAPES: Dict[str, Any] = {
    "event12": (EVENT12, EVENT12, _event),
    "narrow4": (NARROW4, NARROW4, _narrow),
    "wide40": (WIDE40, WIDE40, _wide),
    "evolved": (EVENT12, EVENT12_V2, _event),
}


def rows(shape: str, n: int, seed: int = SEED) -> List[Dict[str, Any]]:
    """``n`` values of ``shape`` as Python dicts (the writer schema's form)."""
    maker = SHAPES[shape][2]
    rng = random.Random(seed)
    return [maker(rng, i) for i in range(n)]
