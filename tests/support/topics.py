"""A fresh topic for a test: a unique name, created through kwire's Admin."""

from __future__ import annotations

import uuid

from kwire.admin import Admin, NewTopic


def fresh_topic(bootstrap: str, partitions: int = 1, prefix: str = "t") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    with Admin(bootstrap_servers=bootstrap) as a:
        a.create_topics([NewTopic(name, partitions)])
    return name
