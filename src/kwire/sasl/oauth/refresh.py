"""Keeping one OAUTHBEARER token fresh for a client's connections.

:class:`TokenAuthenticator` fetches the first token as soon as the client
starts (handshakes that come first wait for it), then refreshes it in the
background before it expires, so no handshake or send waits for a fetch:

- **When.** At ``sasl_login_refresh_window_factor`` (0.8) of the token's
  lifetime, plus up to ``sasl_login_refresh_window_jitter`` (0.05) of it at
  random, so a fleet of clients does not refresh at once. When the lifetime
  leaves room for them, also no sooner than
  ``sasl_login_refresh_min_period_seconds`` and at least
  ``sasl_login_refresh_buffer_seconds`` before expiry (Kafka's rules).
- **Failures.** A failed fetch is retried after ``sasl_login_retry_backoff_ms``,
  doubling up to ``sasl_login_retry_backoff_max_ms``, while the current token
  is still valid. Once there is no valid token, handshakes fail at once with
  a :class:`~kwire.sasl.SaslAuthenticationError` naming what failed, and
  fetching stops until a handshake asks again (after the backoff): nothing
  retries forever on its own. A failed refresh is logged once, as a
  warning, until a fetch succeeds again; once no valid token is left, the
  client's failing connections say it instead (once per broker).
- **Where.** A thread of its own (``kwire-oauth``) for a plain callable,
  which may block (an HTTP request); the event loop, as a task, for a
  coroutine function (:mod:`kwire.aio` clients only).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from typing import Any, Callable, List, Mapping, Optional

from kwire.config import ConfigError
from kwire.sasl.base import Authenticator, SaslAuthenticationError
from kwire.sasl.oauth.token import OAuthBearer, OAuthToken

__all__ = ["TokenAuthenticator", "refresh_delay"]

log = logging.getLogger("kwire.sasl.oauth")


def refresh_delay(token: OAuthToken, cfg: Mapping[str, Any], now: Optional[float] = None) -> float:
    """Seconds from now until ``token`` is to be refreshed (see the module doc)."""
    life = token.lifetime_left(now)
    if life <= 0:
        return 0.0
    frac = cfg.get("sasl_login_refresh_window_factor", 0.8) + \
        random.uniform(0.0, cfg.get("sasl_login_refresh_window_jitter", 0.05))
    delay = life * min(frac, 1.0)
    min_period = cfg.get("sasl_login_refresh_min_period_seconds", 60)
    buffer = cfg.get("sasl_login_refresh_buffer_seconds", 300)
    if life > min_period + buffer:
        delay = max(float(min_period), min(delay, life - buffer))
    return delay


class TokenAuthenticator(Authenticator):
    """OAUTHBEARER with tokens from ``fetch`` (a callable returning an
    :class:`OAuthToken`, or with ``is_async`` a coroutine function);
    ``what`` names the source in errors ("the token callback")."""

    name = "OAUTHBEARER"

    def __init__(self, fetch: Callable[[], Any], cfg: Mapping[str, Any], what: str, is_async: bool = False) -> None:
        self._fetch = fetch
        self._cfg = cfg
        self.what = what
        self._is_async = is_async
        self._lock = threading.Lock()
        self._token: Optional[OAuthToken] = None
        self._error: Optional[SaslAuthenticationError] = None
        self._failures = 0
        self._retry_at = 0.0                    # monotonic: no fetch before this after a failure
        self._fetch_at: Optional[float] = None   # monotonic: the next fetch; None: when a handshake asks
        self._wakes: List[Callable[[], None]] = []
        self._event = threading.Event()
        self._aevent: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self._closed = False
        self.fetches = 0                         # tokens fetched, for tests and metrics

    def __repr__(self) -> str:
        return f"<TokenAuthenticator OAUTHBEARER from {self.what}>"

    # ------------------------------------------------------------ public
    def start(self, wake: Callable[[], None], loop: Any = None) -> None:
        self._wakes.append(wake)
        if self._is_async:
            if loop is None:
                raise ConfigError("a coroutine oauth_cb needs a kwire.aio client (a blocking client calls a "
                                  "plain function)")
            self._loop = loop
            self._aevent = asyncio.Event()
            self._fetch_at = time.monotonic()
            self._task = loop.create_task(self._run_async())
        else:
            self._fetch_at = time.monotonic()
            threading.Thread(target=self._run_thread, name="kwire-oauth", daemon=True).start()

    def mechanism(self, host: str) -> Optional[OAuthBearer]:
        tok = self._token
        if tok is not None and tok.lifetime_left() > 0:
            return OAuthBearer(tok)
        error = self._error
        self._ask()
        if error is not None:
            raise error
        return None

    def token(self) -> Optional[OAuthToken]:
        """The current token, if any (valid or not)."""
        return self._token

    def close(self) -> None:
        self._closed = True
        self._signal()
        if self._task is not None:
            self._task.cancel()

    # ------------------------------------------------------------ scheduling
    def _ask(self) -> None:
        """A handshake wants a token and there is none valid: fetch one, as
        soon as the backoff after a failure allows."""
        with self._lock:
            if self._fetch_at is None:
                self._fetch_at = max(time.monotonic(), self._retry_at)
        self._signal()

    def _signal(self) -> None:
        if self._aevent is not None and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._aevent.set)
            except RuntimeError:      # the loop is closed
                pass
        else:
            self._event.set()

    def _wait_for(self) -> Optional[float]:
        """Seconds until the next fetch is due (0: now); None: none is."""
        with self._lock:
            at = self._fetch_at
        return None if at is None else max(0.0, at - time.monotonic())

    def _succeeded(self, token: OAuthToken) -> None:
        left = token.lifetime_left()
        if left <= 0:          # refused here: it would be fetched again at once, and again
            self._failed(SaslAuthenticationError(f"OAUTHBEARER: {self.what} gave a token that expired "
                                                 f"{-left:.0f} s ago"))
            return
        delay = refresh_delay(token, self._cfg)
        with self._lock:
            self._token, self._error = token, None
            self._fetch_at = time.monotonic() + delay
            recovered, self._failures = self._failures, 0
        self.fetches += 1
        if recovered:
            log.info("OAUTHBEARER: %s gave a token again", self.what)
        log.debug("OAUTHBEARER: token from %s, expires in %.0f s, refresh in %.1f s", self.what,
                  token.lifetime_left(), delay)
        self._wake()

    def _failed(self, e: BaseException) -> None:
        error = e if isinstance(e, SaslAuthenticationError) else \
            SaslAuthenticationError(f"OAUTHBEARER: {self.what} failed: {type(e).__name__}: {e}")
        base = self._cfg.get("sasl_login_retry_backoff_ms", 100) / 1000.0
        top = self._cfg.get("sasl_login_retry_backoff_max_ms", 10000) / 1000.0
        now = time.monotonic()
        with self._lock:
            self._failures += 1
            backoff = min(top, base * 2 ** (self._failures - 1)) * random.uniform(0.8, 1.2)
            self._retry_at = now + backoff
            tok = self._token
            valid_for = tok.lifetime_left() if tok is not None else 0.0
            self._fetch_at = self._retry_at if backoff < valid_for else None
            self._error = error
            first = self._failures == 1
        if valid_for > 0:      # only here: without a valid token, the failing handshakes say it (kwire.client)
            (log.warning if first else log.debug)("%s; the current token expires in %.0f s", error, valid_for)
        else:
            log.debug("%s; no valid token: handshakes fail until a fetch succeeds", error)
        self._wake()

    def _wake(self) -> None:
        for wake in self._wakes:
            wake()

    # ------------------------------------------------------------ drivers
    def _run_thread(self) -> None:
        while not self._closed:
            wait = self._wait_for()
            if wait is None or wait > 0:
                self._event.wait(wait)
                self._event.clear()
                continue
            try:
                token = self._fetch()
            except BaseException as e:      # noqa: BLE001 - a callback's failure is the caller's error
                if not self._closed:
                    self._failed(e)
            else:
                if not self._closed:
                    self._succeeded(token)

    async def _run_async(self) -> None:
        assert self._aevent is not None
        while not self._closed:
            wait = self._wait_for()
            if wait is None or wait > 0:
                try:
                    await asyncio.wait_for(self._aevent.wait(), wait)
                except asyncio.TimeoutError:
                    pass
                self._aevent.clear()
                continue
            try:
                token = await self._fetch()
            except asyncio.CancelledError:
                raise
            except BaseException as e:      # noqa: BLE001
                self._failed(e)
            else:
                self._succeeded(token)
