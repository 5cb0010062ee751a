"""The SSRF address guard: which IP addresses the crawler may connect to.

A crawler follows links written by strangers, so without a guard a page can make it
fetch ``http://169.254.169.254/`` (cloud credentials), ``http://10.0.0.5/admin`` or
``http://localhost:6379/``. :class:`AddressGuard` refuses loopback, private, link-local,
multicast, unspecified and reserved addresses unless the user said otherwise (a
``fetch.resolve`` override, ``fetch.allow_networks``). It is applied twice: to every DNS
answer (crawler.fetch.dns) and, by :class:`GuardedSocketFactory`, to the exact address each
connection is made to (the last line of defence, and the test seam: a fake factory can
record the address and refuse, so no packet ever leaves). Why DNS rebinding cannot get
past it is explained in crawler.fetch.dns.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

from crawler.errors import ConfigError

__all__ = ["AddressGuard", "AddressRefused", "GuardedSocketFactory", "IPAddress", "address_category"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 6598 shared address space (carrier-grade NAT); Python's is_private misses it.
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
# RFC 1122 "this network": connecting to 0.0.0.0 reaches the local host on Linux.
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
# RFC 6052 well-known NAT64 prefix: the last 32 bits are an IPv4 address reached via
# the NAT64 gateway, so 64:ff9b::a9fe:a9fe is the metadata service in disguise.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


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


class GuardedSocketFactory:
    """``socket_factory`` for aiohttp's TCPConnector that re-checks each address.

    aiohappyeyeballs calls it with the ``addr_info`` it is about to connect to, so this
    sees the address actually connected to whatever path produced it. Addresses that an
    override can answer with are treated as ``via_override``: names reach this point only
    through :class:`DnsCache`, which already refused non-override answers, and IP
    literals are checked by the transport before sending.
    """

    __slots__ = ("guard", "override_ips", "refusals", "_canonical")

    def __init__(self, guard: AddressGuard, override_ips: Iterable[str] = ()) -> None:
        self.guard = guard
        self.override_ips = frozenset(str(ipaddress.ip_address(ip)) for ip in override_ips)
        self.refusals = 0
        # Address string -> its canonical form: ipaddress parsing showed in crawl profiles,
        # every new connection asks, and a crawl connects to few distinct addresses.
        self._canonical: dict[str, str] = {}

    def check(self, addr_info: tuple[Any, ...]) -> None:
        """Raise AddressRefused if the guard forbids the address in ``addr_info``."""
        ip = str(addr_info[4][0])
        if not self.guard.enabled:
            return
        norm = self._canonical.get(ip)
        if norm is None:
            try:
                norm = str(ipaddress.ip_address(ip))
            except ValueError:
                norm = ip
            if len(self._canonical) >= 4096:  # bounded: a crawl of many hosts on many addresses
                self._canonical.clear()
            self._canonical[ip] = norm
        reason = self.guard.check(norm, norm in self.override_ips)
        if reason is not None:
            self.refusals += 1
            raise AddressRefused(ip, reason)

    def __call__(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """Check, then create the (unconnected) socket the connector will connect."""
        self.check(addr_info)
        family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
        return socket.socket(family=family, type=type_, proto=proto)
