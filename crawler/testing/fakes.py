"""Test doubles for the network seams (like trio.testing): nothing here opens a socket."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp.abc import AbstractResolver


class FakeResolver(AbstractResolver):
    """A base DNS resolver that answers from a table and counts calls.

    Unknown names raise ``OSError`` (like NXDOMAIN), so a crawl under test that meets a
    name nobody mapped fails that name instead of sending a query off the machine.
    """

    def __init__(self, table: dict[str, list[str]] | None = None, gate: asyncio.Event | None = None) -> None:
        self.table = dict(table or {})
        self.calls: list[str] = []
        self.gate = gate  # when set, every lookup waits for it (to test concurrent lookups)

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict[str, Any]]:
        self.calls.append(host)
        if self.gate is not None:
            await self.gate.wait()
        ips = self.table.get(host)
        if ips is None:
            raise OSError(f"fake resolver: no such name {host} (NXDOMAIN)")
        return [
            {
                "hostname": host,
                "host": ip,
                "port": port,
                "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
            for ip in ips
        ]

    async def close(self) -> None:
        return None
