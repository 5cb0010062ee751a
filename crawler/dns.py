"""DNS for the fetcher: a TTL cache with negative caching, user ``resolve`` overrides and
an SSRF address guard.

Three pieces, all plugged into aiohttp's ``TCPConnector``:

* :class:`AddressGuard` decides whether an IP address may be connected to. A crawler
  follows links written by strangers, so without a guard a page can make it fetch
  ``http://169.254.169.254/`` (cloud credentials), ``http://10.0.0.5/admin`` or
  ``http://localhost:6379/``. Loopback, private, link-local, multicast, unspecified and
  reserved addresses are refused unless the user said otherwise.
* :class:`DnsCache` is an ``aiohttp.abc.AbstractResolver``: the connector asks it for the
  addresses of every *name* it connects to. It answers from ``resolve`` overrides (like
  ``curl --resolve``), from its cache, or from a base resolver, and it filters every
  answer through the guard.
* :class:`GuardedSocketFactory` is the connector's ``socket_factory``: it runs once per
  connection attempt with the exact address about to be connected to and re-checks it.
  It is the last line of defence and the test seam (a fake factory can record the
  address and refuse, so no packet ever leaves).

Why the guard cannot be bypassed by DNS rebinding
-------------------------------------------------
Rebinding attacks exploit a gap between *checking* an address and *using* it: a name
answers with a public address when checked and a private one when the socket connects.
Here there is no gap. aiohttp's own DNS cache is disabled (``use_dns_cache=False``), so
for every new connection the connector calls :meth:`DnsCache.resolve` and connects to
exactly the list it returns; that list has already been filtered by the guard. A later
re-resolution (after the TTL) is filtered again. Pooled keep-alive connections stay on
the peer that was checked when they were opened. IP-literal URLs skip the resolver in
aiohttp, so the transport (:mod:`crawler.aiohttp_transport`) checks them itself before
sending (a literal is never "via override"); the socket factory re-checks both paths.
Redirects are not followed by the fetcher: each target is fetched anew through the same
checks. ``localhost`` is just a name: it resolves to loopback and is refused unless a
``resolve`` override names it.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "AddressGuard",
    "address_category",
    "AddressRefused",
    "DnsCache",
    "DnsLookupError",
    "GuardedSocketFactory",
    "parse_resolve",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 6598 shared address space (carrier-grade NAT); Python's is_private misses it.
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
# RFC 1122 "this network": connecting to 0.0.0.0 reaches the local host on Linux.
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
# RFC 6052 well-known NAT64 prefix: the last 32 bits are an IPv4 address reached via
# the NAT64 gateway, so 64:ff9b::a9fe:a9fe is the metadata service in disguise.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

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


class AddressRefused(OSError):
    """The address guard refused every address of a name, or a literal address.

    An ``OSError`` so it travels through aiohttp's connector (which wraps it in a
    ``ClientConnectorError``); the transport unwraps it and the fetcher reports ``error_kind="guard"``.
    """

    def __init__(self, ip: str, reason: str) -> None:
        super().__init__(errno.EACCES, f"refused by address guard: {reason}")
        self.ip = ip
        self.reason = reason

    def __str__(self) -> str:  # without OSError's "[Errno N]" prefix
        return str(self.strerror)


# ---------------------------------------------------------------------------- guard


def _v4_category(addr: ipaddress.IPv4Address) -> str | None:
    if addr in _THIS_NETWORK:
        return "unspecified"
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:  # 169.254/16, incl. the cloud metadata address
        return "link-local"
    if addr.is_multicast:
        return "multicast"
    if addr in _CGNAT:
        return "shared address space (CGNAT)"
    if addr.is_reserved:  # 240/4 incl. broadcast (Python also counts it as private)
        return "reserved"
    if addr.is_private:  # RFC 1918 and the other IANA special-purpose blocks
        return "private"
    if not addr.is_global:
        return "not globally routable"
    return None


def _v6_category(addr: ipaddress.IPv6Address) -> str | None:
    # Addresses embedding an IPv4 address are judged by that address: the kernel
    # (mapped), a NAT64 gateway or a 6to4 relay delivers the packet to it.
    mapped = addr.ipv4_mapped
    if mapped is not None:
        cat = _v4_category(mapped)
        return None if cat is None else f"{cat} (IPv4-mapped)"
    if addr in _NAT64:
        cat = _v4_category(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
        return None if cat is None else f"{cat} (NAT64)"
    sixtofour = addr.sixtofour
    if sixtofour is not None:
        cat = _v4_category(sixtofour)
        return None if cat is None else f"{cat} (6to4)"
    if addr.is_unspecified:
        return "unspecified"
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:  # fe80::/10
        return "link-local"
    if addr.is_multicast:
        return "multicast"
    if addr.is_site_local:  # fec0::/10, deprecated but still routed internally
        return "site-local"
    if addr.is_private:  # fc00::/7 unique-local and the IANA special blocks
        return "private"
    if addr.is_reserved:  # ::/8 incl. IPv4-compatible ::a.b.c.d
        return "reserved"
    if not addr.is_global:
        return "not globally routable"
    return None


def address_category(addr: IPAddress) -> str | None:
    """Why ``addr`` is not a public unicast address ("loopback", "private", ...), or None."""
    if isinstance(addr, ipaddress.IPv4Address):
        return _v4_category(addr)
    return _v6_category(addr)


class AddressGuard:
    """SSRF guard: refuses non-public destination addresses.

    ``check(ip, via_override)`` returns a human-readable refusal reason, or None when the
    address may be connected to. Allowed are public unicast addresses, any address that
    came from a user ``resolve`` override (the user named it on purpose), and addresses
    inside ``allow_networks`` (CIDR strings or single addresses).
    """

    __slots__ = ("enabled", "_allow", "refusals")

    def __init__(self, enabled: bool = True, allow_networks: Iterable[str] = ()) -> None:
        self.enabled = bool(enabled)
        if isinstance(allow_networks, str):  # a lone string would iterate per character
            allow_networks = [allow_networks]
        allow: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for net in allow_networks:
            try:
                allow.append(ipaddress.ip_network(str(net).strip(), strict=False))
            except ValueError as exc:
                raise ConfigError(
                    f"allow_networks: {net!r} is not an IP network; write CIDR like "
                    f"'10.0.0.0/8' or 'fd00::/8', or a single address ({exc})"
                ) from exc
        self._allow = tuple(allow)
        self.refusals = 0

    def allows_network(self, addr: IPAddress) -> bool:
        """True if ``addr`` (or the IPv4 address it maps) is inside ``allow_networks``."""
        if not self._allow:
            return False
        candidates: list[IPAddress] = [addr]
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            candidates.append(addr.ipv4_mapped)
        for cand in candidates:
            for net in self._allow:
                if cand.version == net.version and cand in net:
                    return True
        return False

    def check(self, ip: str, via_override: bool = False) -> str | None:
        """Return why connecting to ``ip`` is refused, or None if it is allowed."""
        if not self.enabled or via_override:
            return None
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            self.refusals += 1
            return f"{ip!r} is not an IP address"
        cat = address_category(addr)
        if cat is None or self.allows_network(addr):
            return None
        self.refusals += 1
        return f"{ip} is {cat}"


# ------------------------------------------------------------------------- overrides


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
            task.add_done_callback(lambda t, k=key: self._query_done(k, t))
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
        except Exception as exc:  # any resolution failure is negatively cached
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


# -------------------------------------------------------------------- socket factory


class GuardedSocketFactory:
    """``socket_factory`` for aiohttp's TCPConnector that re-checks each address.

    aiohappyeyeballs calls it with the ``addr_info`` it is about to connect to, so this
    sees the address actually connected to whatever path produced it. Addresses that an
    override can answer with are treated as ``via_override``: names reach this point only
    through :class:`DnsCache`, which already refused non-override answers, and IP
    literals are checked by the transport before sending.
    """

    __slots__ = ("guard", "override_ips", "refusals")

    def __init__(self, guard: AddressGuard, override_ips: Iterable[str] = ()) -> None:
        self.guard = guard
        self.override_ips = frozenset(str(ipaddress.ip_address(ip)) for ip in override_ips)
        self.refusals = 0

    def check(self, addr_info: tuple[Any, ...]) -> None:
        """Raise AddressRefused if the guard forbids the address in ``addr_info``."""
        ip = str(addr_info[4][0])
        if not self.guard.enabled:
            return
        try:
            norm = str(ipaddress.ip_address(ip))
        except ValueError:
            norm = ip
        reason = self.guard.check(norm, norm in self.override_ips)
        if reason is not None:
            self.refusals += 1
            raise AddressRefused(ip, reason)

    def __call__(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """Check, then create the (unconnected) socket the connector will connect."""
        self.check(addr_info)
        family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
        return socket.socket(family=family, type=type_, proto=proto)
