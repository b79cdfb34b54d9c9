"""Finding the JDK a Java server of the tests runs on (Keycloak, Apicurio
Registry: both need Java 21+): the one an environment variable names, else
the Temurin 25 JDK the machine has (:data:`PREFERRED`), else the newest
JDK of at least the version asked for in ``/usr/lib/jvm``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Type

PREFERRED = "/usr/lib/jvm/temurin-25-jdk-amd64"


def java_version(jdk: Path) -> str:
    """The JDK's ``JAVA_VERSION`` from its ``release`` file ("" without one)."""
    try:
        for line in (jdk / "release").read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return ""


def major(jdk: Path) -> int:
    """``25`` of ``25.0.1`` (0 when unknown)."""
    head = java_version(jdk).split(".")[0]
    return int(head) if head.isdigit() else 0


def find_jdk(env_var: str, minimum: int, error: Type[Exception], what: str) -> Path:
    """``$env_var``'s JDK, else :data:`PREFERRED`, else the newest JDK ``minimum``+ in
    ``/usr/lib/jvm``; ``error`` naming what is missing."""
    given = os.environ.get(env_var)
    found = [Path(given)] if given else [Path(PREFERRED), *sorted(Path("/usr/lib/jvm").glob("*"), key=major,
                                                                   reverse=True)]
    for jdk in found:
        if (jdk / "bin" / "java").is_file() and major(jdk) >= minimum:
            return jdk
    raise error(f"{what} needs a Java {minimum}+ JDK: none at {given or PREFERRED} or in /usr/lib/jvm "
                f"(set {env_var})")
