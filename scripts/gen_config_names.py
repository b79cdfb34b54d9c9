"""Writes docs/_ext/java_config_names.json: the configuration names of Kafka's Java client (the version the
tests assemble: ProducerConfig, ConsumerConfig and AdminClientConfig's ``configNames()``), which the docs'
options table uses to say which of kwire's options carry Java's name. Needs Java and Maven (the jars come
as the tests get them). tests/docs/test_config_names.py proves the file current.

    python scripts/gen_config_names.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "_ext" / "java_config_names.json"


def java_config_names() -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.java_peer import SOURCE, _command
    from support.kafka import KAFKA_VERSION

    done = subprocess.run(_command(source=SOURCE.with_name("ConfigNames.java")), capture_output=True, text=True,
                          timeout=300, check=True)
    names = json.loads(done.stdout.strip().splitlines()[-1])
    return {"kafka-clients": KAFKA_VERSION, **names}


def render(names: dict) -> str:
    return json.dumps(names, indent=1, sort_keys=True) + "\n"


def main() -> int:
    OUT.write_text(render(java_config_names()))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
