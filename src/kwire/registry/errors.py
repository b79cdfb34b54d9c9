"""What a schema registry call raises: :class:`SchemaRegistryError`.

The REST API answers an error with an HTTP status and a body
``{"error_code": 40401, "message": "Subject 'x' not found."}``; both are
kept (``status``, ``error_code``), the message cut to :data:`MESSAGE_LIMIT`
characters (a hostile or broken server cannot flood a log). A call that got
no answer (the registry unreachable, the call's ``timeout`` spent) has
``status`` None and ``error_code`` :data:`UNKNOWN`. ``retriable`` says
whether the same call may succeed later: 429, 5xx and no answer at all.

Nothing secret is ever part of the text: the registry's URLs are named
without their user info, and no request header (credentials, tokens) is
quoted.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from kwire.errors import KwireError

__all__ = ["SchemaRegistryError", "MalformedAnswer", "UNKNOWN", "MESSAGE_LIMIT", "is_retriable_status"]

#: ``error_code`` when the registry gave none (no answer, or a body that is not its JSON).
UNKNOWN = -1
#: At most this many characters of a registry's message are kept.
MESSAGE_LIMIT = 500


def is_retriable_status(status: Optional[int]) -> bool:
    """Whether an answer with HTTP ``status`` (None: no answer) may change on a retry."""
    return status is None or status == 429 or 500 <= status <= 599


class SchemaRegistryError(KwireError):
    """A schema registry call that failed (see the module doc).

    ``status``: the HTTP status, None without an answer; ``error_code``: the
    registry's own code (40401 subject not found, 40403 schema not found,
    409 incompatible, 42201 invalid schema...) or :data:`UNKNOWN`;
    ``message``: what the registry said, or what went wrong on the way.
    """

    def __init__(self, status: Optional[int], error_code: int, message: str) -> None:
        self.status = status
        self.error_code = error_code
        self.message = message[:MESSAGE_LIMIT]
        self.retriable = is_retriable_status(status)
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{self.message} ({where}, error code {self.error_code})"

    def __reduce__(self) -> Tuple[Any, ...]:     # keep the fields across pickling (Spark workers)
        return (type(self), (self.status, self.error_code, self.message))


class MalformedAnswer(SchemaRegistryError):
    """A successful answer that lacks what the API promises (a schema
    without its text, an id that is not a number): not retriable."""

    def __init__(self, message: str, status: int = 200) -> None:
        super().__init__(status, UNKNOWN, message)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.message, self.status))
