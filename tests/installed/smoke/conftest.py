"""The smoke suite's fixtures. It runs in a fresh virtualenv holding kwire's
wheel with one extra (or none), from a copy of this directory outside the
source tree: test_installed.py passes the broker it shares and the extra
through the environment."""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture(scope="session")
def bootstrap() -> str:
    """The bundled Tansu broker the main test session started."""
    return os.environ["KWIRE_SMOKE_BOOTSTRAP"]


@pytest.fixture(scope="session")
def extra() -> str:
    """The extra this virtualenv installed kwire with ("" for none)."""
    return os.environ.get("KWIRE_SMOKE_EXTRA", "")


@pytest.fixture
def topic(bootstrap) -> str:
    import kwire

    name = f"smoke-{uuid.uuid4().hex[:10]}"
    with kwire.Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([kwire.NewTopic(name, num_partitions=2)])
    return name
