"""A safety net for tests that crawl hostile webs: only loopback may be reached.

While :func:`loopback_only` is active, a socket connect to anything but loopback, or a
DNS lookup of a name, fails the test at the attempt and is recorded, so a test can
assert that none happened even if the crawler swallowed the error into a row.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["loopback_only"]


@contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Refuse, for the duration, any socket connect to a non-loopback address and any real
    DNS lookup of a name, in this process (asyncio's selector loop and ``getaddrinfo``).

    Loopback includes IPv4-mapped loopback and the unspecified addresses ``0.0.0.0`` and
    ``::`` (Linux delivers a connect to those to the local host).

    Yields the list of violations (also raised as ``AssertionError`` at the attempt), so a
    test can assert it stayed empty even if the crawler swallowed the error into a row.
    """
    import ipaddress
    from asyncio import selector_events

    violations: list[str] = []
    real_connect = selector_events.BaseSelectorEventLoop.sock_connect
    real_getaddrinfo = socket.getaddrinfo

    async def sock_connect(self: Any, sock: socket.socket, address: Any) -> Any:
        host = str(address[0]).split("%")[0]
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ok = False
        else:
            mapped = getattr(ip, "ipv4_mapped", None)
            ip = mapped if mapped is not None else ip
            ok = ip.is_loopback or ip.is_unspecified
        if not ok:
            violations.append(f"connect to {address!r}")
            raise AssertionError(f"test tried to connect to non-loopback {address!r}")
        return await real_connect(self, sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None:
            text = host.decode() if isinstance(host, bytes) else str(host)
            try:
                ipaddress.ip_address(text.split("%")[0])
            except ValueError:
                violations.append(f"dns lookup of {text!r}")
                raise AssertionError(f"test tried a real DNS lookup of {text!r}") from None
        return real_getaddrinfo(host, *args, **kwargs)

    selector_events.BaseSelectorEventLoop.sock_connect = sock_connect  # type: ignore[method-assign]  # the guard is a patch of asyncio
    socket.getaddrinfo = getaddrinfo
    try:
        yield violations
    finally:
        selector_events.BaseSelectorEventLoop.sock_connect = real_connect  # type: ignore[method-assign]  # the patch undone
        socket.getaddrinfo = real_getaddrinfo
