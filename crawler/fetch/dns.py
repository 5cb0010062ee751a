"""DNS for the fetcher: a TTL cache with negative caching and user ``resolve`` overrides,
whose every answer passes the SSRF address guard (crawler.fetch.addrguard).

Plugged into aiohttp's ``TCPConnector`` with the guard's socket factory:

* :class:`DnsCache` is an ``aiohttp.abc.AbstractResolver``: the connector asks it for the
  addresses of every *name* it connects to. It answers from ``resolve`` overrides (like
  ``curl --resolve``), from its cache, or from a base resolver, and it filters every
  answer through the guard.
* :class:`~crawler.fetch.addrguard.GuardedSocketFactory` is the connector's ``socket_factory``:
  it re-checks the exact address each connection is made to.

Why the guard cannot be bypassed by DNS rebinding
-------------------------------------------------
Rebinding attacks exploit a gap between *checking* an address and *using* it: a name
answers with a public address when checked and a private one when the socket connects.
Here there is no gap. aiohttp's own DNS cache is disabled (``use_dns_cache=False``), so
for every new connection the connector calls :meth:`DnsCache.resolve` and connects to
exactly the list it returns; that list has already been filtered by the guard. A later
re-resolution (after the TTL) is filtered again. Pooled keep-alive connections stay on
the peer that was checked when they were opened. IP-literal URLs skip the resolver in
aiohttp, so the transport (:mod:`crawler.fetch.aiohttp_transport`) checks them itself before
sending (a literal is never "via override"); the socket factory re-checks both paths.
Redirects are not followed by the fetcher: each target is fetched anew through the same
checks. ``localhost`` is just a name: it resolves to loopback and is refused unless a
``resolve`` override names it.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from aiohttp.abc import AbstractResolver, ResolveResult

from crawler.fetch.addrguard import AddressGuard, AddressRefused
from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["DnsCache", "DnsLookupError", "parse_resolve"]


_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class DnsLookupError(OSError):
    """A name did not resolve (raised fresh or from the negative cache).

    An ``OSError`` so aiohttp's connector wraps it in ``ClientConnectorDNSError``.
    """

    def __init__(self, host: str, detail: str) -> None:
        super().__init__(errno.ENOENT, f"dns: name not resolved: {host} ({detail})")
        self.host = host
        self.detail = detail

    def __str__(self) -> str:  # without OSError's "[Errno N]" prefix
        return str(self.strerror)


def _norm_host(host: str) -> str:
    # DNS names are case-insensitive and "example.com." is the same FQDN (RFC 1034 3.1).
    return host.strip().rstrip(".").lower()


def parse_resolve(resolve: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Validate a ``resolve`` mapping into (exact, wildcard-suffix) dicts of normalized IPs.

    Keys are host names, optionally ``*.suffix`` (any subdomain depth below ``suffix``,
    not ``suffix`` itself); values are IPv4 or IPv6 literals. Raises ConfigError naming
    the bad key.
    """
    if not isinstance(resolve, Mapping):
        raise ConfigError(f"resolve must be a mapping of host -> IP address, not {type(resolve).__name__}")
    exact: dict[str, str] = {}
    wild: dict[str, str] = {}
    for key, value in resolve.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"resolve: key {key!r} must be a non-empty host name")
        name = _norm_host(key)
        is_wild = name.startswith("*.")
        bare = name[2:] if is_wild else name
        if not bare or "*" in bare or "/" in bare or ":" in bare or " " in bare:
            raise ConfigError(
                f"resolve: key {key!r} is not a host name; use 'example.com' or '*.example.com'"
            )
        try:
            ipaddress.ip_address(bare)
        except ValueError:
            pass
        else:
            raise ConfigError(
                f"resolve: key {key!r} is an IP address; keys are host names "
                f"(to allow connecting to an address, add it to allow_networks)"
            )
        if not isinstance(value, str):
            raise ConfigError(f"resolve[{key!r}]: value {value!r} must be an IPv4 or IPv6 address string")
        try:
            ip = str(ipaddress.ip_address(value.strip().strip("[]")))
        except ValueError as exc:
            raise ConfigError(
                f"resolve[{key!r}]: {value!r} is not an IPv4 or IPv6 address"
            ) from exc
        (wild if is_wild else exact)[bare] = ip
    return exact, wild


# --------------------------------------------------------------------------- resolver


@dataclass(slots=True, frozen=True)
class Answer:
    """One address of a name, and whether a user override supplied it (for the guard)."""

    ip: str
    family: int
    via_override: bool


@dataclass(slots=True)
class _Entry:
    expires_at: float
    answers: tuple[Answer, ...]  # allowed answers (after the guard); empty when failed
    error: OSError | None  # DnsLookupError (negative entry) or AddressRefused


class DnsCache(AbstractResolver):
    """Caching resolver for aiohttp with ``resolve`` overrides and the address guard.

    * Override names answer at once, never touch the base resolver, and are marked
      ``via_override`` so the guard lets them through (that is how tests and private
      crawls reach loopback or intranet servers on purpose).
    * Other names go to ``base`` (aiohttp's ``ThreadedResolver`` by default, created
      lazily inside the running loop). Answers are cached ``ttl_s`` seconds; failures of
      any kind are cached ``negative_ttl_s`` seconds and fail again at once without asking
      ``base``, so a dead domain with thousands of links costs one lookup per minute.
    * Concurrent lookups of one name share one in-flight query; a waiter cancelled by its
      own timeout does not cancel the query for the others.
    * Every answer is filtered through ``guard``; if nothing is left the lookup raises
      :class:`AddressRefused` (cached like the answer it came from).

    The cache holds at most ``max_entries`` names; the oldest inserted are evicted first,
    so memory is bounded by configuration, not by the web.
    """

    def __init__(
        self,
        resolve: Mapping[str, str] = MappingProxyType({}),
        *,
        ttl_s: float = 300.0,
        negative_ttl_s: float = 60.0,
        clock: Clock | None = None,
        base: AbstractResolver | None = None,
        guard: AddressGuard | None = None,
        max_entries: int = 100_000,
    ) -> None:
        if ttl_s < 0 or negative_ttl_s < 0:
            raise ConfigError(f"dns ttl must be >= 0 (got ttl_s={ttl_s}, negative_ttl_s={negative_ttl_s})")
        if max_entries < 1:
            raise ConfigError(f"dns max_entries must be >= 1 (got {max_entries})")
        self._exact, self._wild = parse_resolve(resolve)
        self._ttl = float(ttl_s)
        self._neg_ttl = float(negative_ttl_s)
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._base = base
        self._owns_base = base is None
        self.guard = guard
        self._max_entries = max_entries
        self._cache: dict[tuple[str, int], _Entry] = {}
        self._inflight: dict[tuple[str, int], asyncio.Task[_Entry]] = {}
        self._stats = {
            "lookups": 0,
            "override_hits": 0,
            "hits": 0,
            "negative_hits": 0,
            "misses": 0,
            "inflight_joins": 0,
            "base_errors": 0,
            "guard_refusals": 0,
            "guard_dropped_addresses": 0,
            "evictions": 0,
        }

    # -- overrides ------------------------------------------------------------------

    def override_for(self, host: str) -> str | None:
        """The override IP for ``host`` (exact entry first, then the longest wildcard)."""
        name = _norm_host(host)
        ip = self._exact.get(name)
        if ip is not None or not self._wild:
            return ip
        pos = name.find(".")
        while pos != -1:  # "a.b.test" tries "b.test", then "test": most specific first
            ip = self._wild.get(name[pos + 1 :])
            if ip is not None:
                return ip
            pos = name.find(".", pos + 1)
        return None

    def override_addresses(self) -> frozenset[str]:
        """Every IP an override can answer with (normalized text form)."""
        return frozenset(self._exact.values()) | frozenset(self._wild.values())

    # -- AbstractResolver -----------------------------------------------------------

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Addresses of ``host`` allowed by the guard; raises DnsLookupError / AddressRefused."""
        self._stats["lookups"] += 1
        override = self.override_for(host)
        if override is not None:
            self._stats["override_hits"] += 1
            ofam = socket.AF_INET6 if ":" in override else socket.AF_INET
            if family not in (socket.AF_UNSPEC, ofam):
                raise DnsLookupError(host, f"override {override} is not of the requested family")
            return [_result(host, Answer(override, ofam, True), port)]
        entry = await self._lookup(host, family)
        if entry.error is not None:
            raise _fresh(entry.error)
        return [_result(host, a, port) for a in entry.answers]

    async def close(self) -> None:
        """Cancel in-flight lookups and close the base resolver if this cache created it."""
        for task in list(self._inflight.values()):
            task.cancel()
        self._inflight.clear()
        if self._base is not None and self._owns_base:
            await self._base.close()

    # -- cache ----------------------------------------------------------------------

    async def _lookup(self, host: str, family: int) -> _Entry:
        # The cache entry for a non-override name, querying ``base`` when needed.
        key = (_norm_host(host), int(family))
        entry = self._cache.get(key)
        if entry is not None:
            if self._clock.now() < entry.expires_at:
                if isinstance(entry.error, DnsLookupError):
                    self._stats["negative_hits"] += 1
                else:
                    self._stats["hits"] += 1
                if isinstance(entry.error, AddressRefused):
                    self._stats["guard_refusals"] += 1
                return entry
            del self._cache[key]
        task = self._inflight.get(key)
        if task is None:
            self._stats["misses"] += 1
            task = asyncio.ensure_future(self._query(key, host, family))
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._query_done, key))
        else:
            self._stats["inflight_joins"] += 1
        # shield: one waiter's timeout must not cancel the query the others wait for
        return await asyncio.shield(task)

    def _query_done(self, key: tuple[str, int], task: asyncio.Task[_Entry]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if task.cancelled():
            return
        exc = task.exception()  # retrieve, so an orphaned failure is never "unretrieved"
        if exc is not None:
            log.warning("dns: lookup task for %s failed unexpectedly: %r", key[0], exc)

    async def _query(self, key: tuple[str, int], host: str, family: int) -> _Entry:
        base = self._base
        if base is None:
            from aiohttp.resolver import ThreadedResolver  # needs the running loop

            base = self._base = ThreadedResolver()
        try:
            results = await base.resolve(key[0], 0, family=socket.AddressFamily(family))
            if not results:
                raise DnsLookupError(host, "no addresses")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any resolution failure is negatively cached
            self._stats["base_errors"] += 1
            # Store a fresh exception, not ``exc``: its traceback would pin frames.
            detail = exc.detail if isinstance(exc, DnsLookupError) else _describe(exc)
            err = DnsLookupError(host, detail)
            entry = _Entry(self._clock.now() + self._neg_ttl, (), err)
        else:
            entry = self._judge(host, results)
        self._store(key, entry)
        return entry

    def _judge(self, host: str, results: list[ResolveResult]) -> _Entry:
        answers: list[Answer] = []
        first_refusal: AddressRefused | None = None
        seen: set[str] = set()
        for res in results:
            ip = str(res["host"])
            if ip in seen:
                continue
            seen.add(ip)
            fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
            answer = Answer(ip, fam, False)
            reason = self.guard.check(ip, False) if self.guard is not None else None
            if reason is None:
                answers.append(answer)
            else:
                # Drop forbidden addresses but keep the public ones: a rebinding answer
                # mixing 127.0.0.1 with a public address still only reaches the public one.
                self._stats["guard_dropped_addresses"] += 1
                if first_refusal is None:
                    first_refusal = AddressRefused(ip, f"{host} -> {reason}")
        now = self._clock.now()
        if answers:
            return _Entry(now + self._ttl, tuple(answers), None)
        assert first_refusal is not None
        self._stats["guard_refusals"] += 1
        return _Entry(now + self._ttl, (), first_refusal)

    def _store(self, key: tuple[str, int], entry: _Entry) -> None:
        cache = self._cache
        cache.pop(key, None)
        cache[key] = entry
        while len(cache) > self._max_entries:
            del cache[next(iter(cache))]  # dicts keep insertion order: oldest first
            self._stats["evictions"] += 1

    def stats(self) -> dict[str, int]:
        """Counters: lookups, hits, negative_hits, misses, inflight_joins, ... and entries."""
        out = dict(self._stats)
        out["entries"] = len(self._cache)
        out["inflight"] = len(self._inflight)
        return out


def _result(host: str, answer: Answer, port: int) -> ResolveResult:
    # The connector connects to (host, port) of each result, so the requested port must
    # be put back: entries are cached per name, not per port.
    return {
        "hostname": host,
        "host": answer.ip,
        "port": port,
        "family": answer.family,
        "proto": 0,
        "flags": _NUMERIC_FLAGS,
    }


def _fresh(err: OSError) -> OSError:
    # A cached failure is re-raised as a new object: raising one instance again and
    # again would grow its __traceback__ with every raise.
    if isinstance(err, AddressRefused):
        return AddressRefused(err.ip, err.reason)
    if isinstance(err, DnsLookupError):
        return DnsLookupError(err.host, err.detail)
    return OSError(*err.args)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror) and exc.args:
        return str(exc.args[-1])
    text = str(exc)
    return text if text else type(exc).__name__
