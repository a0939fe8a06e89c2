"""Several endpoints serving one model: base-URL lists, a least-busy choice, a cool-down.

Contract:
- `split_base_urls(text)` reads a comma-separated list of base URLs (`VLLM_BASE_URL=a,b`):
  each entry stripped of blanks and a trailing "/", empty entries dropped, order kept,
  repeats dropped.
- `redact_url(url)` drops a user:password part and the query string (what records may keep).
- `EndpointPool(urls)` picks the endpoint for each request: `acquire()` returns the live
  endpoint with the fewest requests in flight (ties: the one sent fewest requests, then list
  order) and counts the request in flight until `release(endpoint, verdict)`.
  `acquire(avoid=e)` prefers any other live endpoint (a retry moves away from the one that
  just failed). A verdict says how the request went: `OK` (the server answered: a reply, or
  a refusal such as a 400) clears the endpoint's strikes and cool-downs; `DOWN` (connection
  refused or cut) starts a cool-down at once; `STRIKE` (a 5xx, 408/409/429 or a timeout) counts
  one strike, and `strikes` in a row start a cool-down. An endpoint in its cool-down is
  skipped until it ends, then tried again ("retried later"); each cool-down in a row doubles,
  from `cooldown_s` up to `cooldown_max_s`. When every endpoint is cooling down, the one whose
  cool-down ends first is used anyway: the caller's retries and errors then run as with one
  endpoint. `None` as the verdict (a cancelled request) changes nothing but the count.
- `check_each(urls, check)` runs `check(url)` for every URL at once and returns the failures
  (url -> exception) in list order.
- Used from one event loop (no locks): `acquire` and `release` never await.
- `EndpointError`: an endpoint or model that is unusable (`lcb.agents.check` raises it; also
  importable from `lcb.agents.failures`). Defined here, in a module of the standard library
  alone, so that a command can name it without loading the HTTP clients.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit, urlunsplit

COOLDOWN_S = 5.0
COOLDOWN_MAX_S = 60.0
STRIKES = 2


class EndpointError(RuntimeError):
    """The endpoint or model is unusable. The message is meant for users, not a stack trace;
    `problem` is its first line's reason alone."""

    problem: str = ""


def split_base_urls(text: str) -> tuple[str, ...]:
    """The base URLs of a comma-separated list, normalized (module docstring).

    >>> split_base_urls(" http://a:1/v1/ ,http://b:2/v1,, http://a:1/v1")
    ('http://a:1/v1', 'http://b:2/v1')
    """
    urls = (part.strip().rstrip("/") for part in text.split(","))
    return tuple(dict.fromkeys(url for url in urls if url))


def redact_url(url: str) -> str:
    """`url` without a user:password part or a query string.

    >>> redact_url("https://user:pw@h.example:8443/v1?key=s")
    'https://h.example:8443/v1'
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Verdict(Enum):
    """How one request went, as far as its endpoint's health goes."""

    OK = "ok"
    STRIKE = "strike"
    DOWN = "down"


@dataclass
class Endpoint:
    """One base URL and what the pool knows of it."""

    url: str
    index: int
    in_flight: int = 0
    sent: int = 0
    strikes: int = 0
    cooldowns: int = 0  # cool-downs in a row (reset by an answer)
    down_until: float = 0.0

    def live(self, now: float) -> bool:
        return now >= self.down_until


class EndpointPool:
    """The endpoints of one gateway (see the module docstring)."""

    def __init__(self, urls: Iterable[str], *, cooldown_s: float = COOLDOWN_S,
                 cooldown_max_s: float = COOLDOWN_MAX_S, strikes: int = STRIKES,
                 clock: Callable[[], float] = time.monotonic):
        self.endpoints = [Endpoint(url, i) for i, url in enumerate(urls)]
        if not self.endpoints:
            raise ValueError("an endpoint pool needs at least one base URL")
        self.cooldown_s, self.cooldown_max_s, self.strikes = cooldown_s, cooldown_max_s, strikes
        self._clock = clock

    def acquire(self, *, avoid: Endpoint | None = None) -> Endpoint:
        """The endpoint for the next request, now counted in flight."""
        now = self._clock()
        live = [e for e in self.endpoints if e.live(now)]
        elsewhere = [e for e in live if e is not avoid]
        if elsewhere:
            chosen = min(elsewhere, key=lambda e: (e.in_flight, e.sent, e.index))
        elif live:
            chosen = live[0]
        else:
            chosen = min(self.endpoints, key=lambda e: (e.down_until, e.index))
        chosen.in_flight += 1
        chosen.sent += 1
        return chosen

    def release(self, endpoint: Endpoint, verdict: Verdict | None) -> None:
        """The request sent to `endpoint` is over; `verdict` updates its health."""
        endpoint.in_flight -= 1
        if verdict is Verdict.OK:  # it answered: healthy again, whatever came before
            endpoint.strikes = endpoint.cooldowns = 0
            endpoint.down_until = 0.0
        elif verdict is Verdict.DOWN:
            self._cool_down(endpoint)
        elif verdict is Verdict.STRIKE:
            endpoint.strikes += 1
            if endpoint.strikes >= self.strikes:
                self._cool_down(endpoint)

    def _cool_down(self, endpoint: Endpoint) -> None:
        if not endpoint.live(self._clock()):
            return  # already cooling down: the other requests of one outage add nothing
        delay = min(self.cooldown_max_s, self.cooldown_s * 2 ** endpoint.cooldowns)
        endpoint.down_until = self._clock() + delay
        endpoint.cooldowns += 1
        endpoint.strikes = 0

    def other_live(self, endpoint: Endpoint) -> bool:
        """True when another endpoint than `endpoint` is live now (a retry can move there)."""
        now = self._clock()
        return any(e is not endpoint and e.live(now) for e in self.endpoints)

    def other_healthy(self, endpoint: Endpoint) -> bool:
        """True when another endpoint is live and has no strike against it."""
        now = self._clock()
        return any(e is not endpoint and e.live(now) and e.strikes == 0
                   for e in self.endpoints)

    def is_live(self, endpoint: Endpoint) -> bool:
        return endpoint.live(self._clock())


async def check_each(urls: Sequence[str], check: Callable[[str], Awaitable[object]]
                     ) -> dict[str, BaseException]:
    """Run `check(url)` for every URL concurrently; the ones that raised, in list order."""
    results = await asyncio.gather(*(check(url) for url in urls), return_exceptions=True)
    failed = {}
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, asyncio.CancelledError):
            raise result
        if isinstance(result, BaseException):
            failed[url] = result
    return failed
