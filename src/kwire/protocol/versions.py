"""Version negotiation: per API, the highest version both kwire and a broker
speak, from the broker's ApiVersions ranges.

Pure functions over plain data, ``{api_key: (min_version, max_version)}``,
so they work and are tested apart from the generated message classes:

- :func:`client_ranges` turns message classes into kwire's ranges;
- :func:`choose_versions` picks the version of every API;
- :func:`require_version` gives the version of one API, or refuses with a
  :class:`NoCommonVersionError` that names the API and both ranges;
- :func:`capped_version` is the version to send an API at, the negotiated
  one capped at :data:`MAX_VERSIONS` (the APIs whose newer versions mean
  something kwire does not speak, or, for transaction protocol v2,
  :data:`TRANSACTION_V2_MAX_VERSIONS`);
- :func:`apiversions_retry_version` is the ApiVersions fallback of KIP-511.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

from kwire.errors import KwireError, UnsupportedVersionError
from kwire.protocol.api_keys import API_NAMES, ApiKey

__all__ = [
    "API_NAMES",
    "API_VERSIONS_KEY",
    "MAX_VERSIONS",
    "TRANSACTION_V2_MAX_VERSIONS",
    "Ranges",
    "NoCommonVersionError",
    "api_name",
    "client_ranges",
    "choose_versions",
    "require_version",
    "capped_version",
    "apiversions_retry_version",
]

#: ``{api_key: (min_version, max_version)}``, both ends included.
Ranges = Mapping[int, Tuple[int, int]]

#: The highest version kwire sends of APIs whose newer versions change what
#: they mean rather than how they are laid out (the only table of such caps;
#: every other API goes at the highest version both sides speak):
MAX_VERSIONS: Dict[int, int] = {
    # v10 names topics by id
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    # v4+ is the brokers' own form
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    # KIP-890's transaction protocol v2 (EndTxn v5: the epoch bumped at every
    # end; TxnOffsetCommit v5: the group added by the commit itself; Produce
    # v12+: partitions added by the write) is spoken only by a transactional
    # producer on a cluster that finalized transaction.version 2 (kwire.
    # transactions, with TRANSACTION_V2_MAX_VERSIONS); protocol v1, with
    # explicit AddPartitionsToTxn and AddOffsetsToTxn, stays below these
    ApiKey.END_TXN: 4,
    ApiKey.TXN_OFFSET_COMMIT: 4,
    # (a transactional producer's Produce; other producers send the negotiated version)
    ApiKey.PRODUCE: 11,
}

#: The caps of a transactional producer speaking transaction protocol v2:
#: :data:`MAX_VERSIONS` without those of EndTxn, TxnOffsetCommit and Produce.
TRANSACTION_V2_MAX_VERSIONS: Dict[int, int] = {
    k: v for k, v in MAX_VERSIONS.items()
    if k not in (ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT, ApiKey.PRODUCE)}

#: ApiVersions' api key (ApiKey.API_VERSIONS).
API_VERSIONS_KEY = ApiKey.API_VERSIONS


def api_name(api_key: int) -> str:
    """Kafka's name of ``api_key`` (``"Fetch"``), or ``"API <key>"``."""
    return API_NAMES.get(api_key, f"API {api_key}")


def _show(versions: Optional[Tuple[int, int]]) -> str:
    return "none" if versions is None else f"{versions[0]}-{versions[1]}"


class NoCommonVersionError(KwireError):
    """kwire and the broker share no version of an API. Never retriable: the
    same broker will refuse again.

    ``api_key``, ``api_name``, ``client_range`` and ``broker_range`` (each
    ``(min, max)``, or None for a side that lacks the API) say which API and
    why, when known; :meth:`for_api` builds the error from them.
    """

    def __init__(
        self,
        reason: str,
        *,
        api_key: Optional[int] = None,
        client_range: Optional[Tuple[int, int]] = None,
        broker_range: Optional[Tuple[int, int]] = None,
    ) -> None:
        self.reason = reason
        self.api_key = None if api_key is None else int(api_key)     # a plain int, even given an ApiKey
        self.api_name = None if api_key is None else api_name(api_key)
        self.client_range = client_range
        self.broker_range = broker_range
        super().__init__(reason)

    @classmethod
    def for_api(
        cls,
        api_key: int,
        client_range: Optional[Tuple[int, int]],
        broker_range: Optional[Tuple[int, int]],
    ) -> "NoCommonVersionError":
        """The error for ``api_key``, naming it and both sides' ranges."""
        ours = "does not speak it" if client_range is None else f"speaks versions {_show(client_range)}"
        theirs = "does not offer it" if broker_range is None else f"offers versions {_show(broker_range)}"
        reason = f"no common version of {api_name(api_key)} (API key {api_key}): kwire {ours}, the broker {theirs}"
        return cls(reason, api_key=api_key, client_range=client_range, broker_range=broker_range)

    def __reduce__(self) -> Tuple[Any, ...]:
        kwargs = {"api_key": self.api_key, "client_range": self.client_range, "broker_range": self.broker_range}
        return (_rebuild_no_common_version, (self.reason, kwargs))


def _rebuild_no_common_version(reason: str, kwargs: Dict[str, Any]) -> NoCommonVersionError:
    return NoCommonVersionError(reason, **kwargs)


def client_ranges(apis: Mapping[int, Sequence[Any]]) -> Dict[int, Tuple[int, int]]:
    """kwire's version range of each API, from its message classes.

    ``apis`` maps each api key to the classes that must all handle a version
    (normally the request class and the response class); each class has the
    attributes ``MIN_VERSION`` and ``MAX_VERSION`` (and ``MAX_STABLE_VERSION``
    where Kafka's definition marks the newest version unstable: that one is
    decoded, never sent). The range of an API is
    where all its classes overlap; an API whose classes do not overlap is
    left out. The classes are an argument, not imported here, so that this
    module stays free of the generated message classes (:mod:`kwire.protocol`
    passes its own table, ``client_ranges(APIS)``).
    """
    out: Dict[int, Tuple[int, int]] = {}
    for key, classes in apis.items():
        lo = max(cls.MIN_VERSION for cls in classes)
        hi = min(getattr(cls, "MAX_STABLE_VERSION", cls.MAX_VERSION) for cls in classes)
        if lo <= hi:
            out[key] = (lo, hi)
    return out


def choose_versions(broker_ranges: Ranges, client_ranges: Ranges,
                    apis: Optional[Iterable[int]] = None) -> Dict[int, int]:
    """Per API, the highest version in both ranges.

    ``apis`` limits the choice to those api keys (default: every API of
    ``client_ranges``). An API either side lacks, or whose ranges do not
    overlap, is absent from the result: :func:`require_version` turns that
    absence into a clear error when the API is needed. A broker's range
    with its ends reversed overlaps nothing.
    """
    out: Dict[int, int] = {}
    for key in (client_ranges if apis is None else apis):
        ours = client_ranges.get(key)
        theirs = broker_ranges.get(key)
        if ours is None or theirs is None:
            continue
        hi = min(ours[1], theirs[1])
        if hi >= max(ours[0], theirs[0]):
            out[key] = hi
    return out


def require_version(chosen: Mapping[int, int], api_key: int, broker_ranges: Ranges, client_ranges: Ranges) -> int:
    """The version of ``api_key`` in ``chosen`` (as :func:`choose_versions`
    made it), or :class:`NoCommonVersionError` naming the API and both
    ranges."""
    version = chosen.get(api_key)
    if version is None:
        raise NoCommonVersionError.for_api(api_key, client_ranges.get(api_key), broker_ranges.get(api_key))
    return version


def capped_version(versions: Mapping[int, int], api_key: int,
                   caps: Mapping[int, int] = MAX_VERSIONS) -> Optional[int]:
    """The version to send ``api_key`` at: the negotiated one, capped at
    ``caps`` (:data:`MAX_VERSIONS`, or :data:`TRANSACTION_V2_MAX_VERSIONS`);
    None when the broker does not speak it."""
    v = versions.get(api_key)
    if v is None:
        return None
    return min(v, caps.get(api_key, v))


def apiversions_retry_version(error_code: int, broker_ranges: Ranges, tried_version: int) -> Optional[int]:
    """After an ApiVersions response with ``error_code`` to a request at
    ``tried_version``: the version to ask again with, or None (give up).

    Only UNSUPPORTED_VERSION (35) is worth a retry. A broker that does not
    know the ApiVersions version asked for answers with version 0, error 35
    and, since Kafka 2.4 (KIP-511), the ApiVersions range it speaks in
    ``broker_ranges``; older brokers list nothing, and version 0 is then the
    one to try. The version returned is the broker's highest, but always
    below ``tried_version``, so that repeated calls end (at worst after
    version 0) even with a broker that claims the version it refused; None
    when no such version is left, or it is below the broker's minimum.
    """
    if error_code != UnsupportedVersionError.code or tried_version <= 0:
        return None
    lo, hi = broker_ranges.get(API_VERSIONS_KEY, (0, 0))
    retry = min(hi, tried_version - 1)
    return retry if retry >= max(lo, 0) else None
