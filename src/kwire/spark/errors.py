"""Exceptions of kwire's Spark data source."""

from __future__ import annotations

from kwire.config import ConfigError
from kwire.errors import KwireError

__all__ = ["SparkOptionError", "DataLossError", "OffsetRangeError"]


class SparkOptionError(ConfigError):
    """A data source option that is missing, unknown in its value, or
    refused (where Spark's Kafka source raises IllegalArgumentException)."""


class DataLossError(KwireError):
    """Offsets the query must read are gone (deleted by retention or
    DeleteRecords, or their topic or partition vanished) and
    ``failOnDataLoss`` is true."""


class OffsetRangeError(KwireError):
    """Resolved offsets that make no range: a starting offset past its
    ending offset, or no offset matching a starting timestamp."""
