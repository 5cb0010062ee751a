"""Catch traffic that would leave the machine: a command run in a namespace full of traps.

Nothing leaves the machine unless the crawl fetches it (docs/invariants.md #18). A test of
that cannot watch the real network, so this runs a command in a fresh network and mount
namespace (``unshare -n -m``) built like a machine on a network, and records who called:

- a network card, ``eth0`` (:data:`MACHINE`, a default route for IPv4 and IPv6), whose
  wire ends in this process: every packet sent off the machine to any address is seen
  there (:class:`Wire`), as Ray and the crawl would see a real one;
- ``169.254.169.254:80``, where AWS, Azure and others serve instance metadata;
- a stand-in for every name in :data:`TRAPPED_NAMES` (Ray's usage-stats host, GCP's
  metadata host): a private ``/etc/hosts`` resolves them to :data:`STAND_IN`, which
  listens on 80 and 443;
- a private ``/etc/resolv.conf`` whose name server is :data:`DNS_TRAP`, which records
  every name looked up (and answers NXDOMAIN at once, so nothing waits on a timeout).

    python -m crawler.testing.egress [--canary] [--timeout S] -- COMMAND ...

prints one JSON line: ``{"returncode", "contacts": [{"kind", "address", "port",
"detail"}...], "listening": [...], "wire": bool, "output"}``. ``contacts`` holds trap
calls (kind ``tcp`` or ``dns``) and packets on the wire (kind ``wire``); ``listening``
the TCP sockets that listened on anything but loopback while the command ran (a port
other machines could reach); ``wire`` says whether the network card could be made.
``--canary`` first makes one call of each kind itself, so that a report of nothing is
worth something. Needs root, or unprivileged user namespaces (``unshare -r``); it
refuses to touch ``/etc`` unless it runs in a mount namespace of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

__all__ = ["Contact", "Trap", "TRAPPED_NAMES", "Wire", "namespace_prefix", "run_trapped"]

METADATA = "169.254.169.254"
#: Documentation addresses (RFC 5737, RFC 3849): never a real host, so nothing is shadowed.
STAND_IN = "203.0.113.80"
DNS_TRAP = "203.0.113.53"
#: This namespace's "machine": its address on eth0, and the gateway its default routes use.
MACHINE = ("198.51.100.9", "2001:db8::9")
GATEWAY = ("198.51.100.1", "2001:db8::1")
_GATEWAY_MAC = "02:00:00:00:00:01"
#: Names that must resolve to the stand-in, not to the world.
TRAPPED_NAMES = ("usage-stats.ray.io", "metadata.google.internal")
TCP_TRAPS = ((METADATA, 80), (STAND_IN, 80), (STAND_IN, 443), (DNS_TRAP, 53))
DNS_TRAPS = ((DNS_TRAP, 53),)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class Contact:
    """One call that reached a trap: a TCP connection, a DNS question, or a packet on the wire."""

    kind: str  # "tcp", "dns" or "wire"
    address: str
    port: int
    detail: str  # the request line or "tls"; the name asked for; the protocol or "arp"


def _request_line(data: bytes) -> str:
    if data[:1] == b"\x16":  # a TLS handshake record: HTTPS to the stand-in
        return "tls"
    return data.split(b"\r\n", 1)[0].decode("latin-1")[:200]


def _dns_name(query: bytes) -> str:
    """The first question's name of a DNS query (RFC 1035 4.1.2), or "?" if malformed."""
    labels, i = [], 12
    while i < len(query) and query[i]:
        n = query[i]
        labels.append(query[i + 1:i + 1 + n].decode("latin-1"))
        i += 1 + n
    return ".".join(labels) or "?"


def _nxdomain(query: bytes) -> bytes:
    """The answer to ``query``: same id and question, NXDOMAIN (RCODE 3), no records."""
    if len(query) < 12:
        return b""
    qid, _flags, qd = struct.unpack("!HHH", query[:6])
    return struct.pack("!HHHHHH", qid, 0x8183, qd, 0, 0, 0) + query[12:]


class Trap:
    """Listeners that record every :class:`Contact`: TCP on ``tcp`` (answering an HTTP
    request with 404), DNS over UDP on ``dns`` (answering NXDOMAIN)."""

    def __init__(self, tcp: tuple[tuple[str, int], ...] = TCP_TRAPS,
                 dns: tuple[tuple[str, int], ...] = DNS_TRAPS) -> None:
        self._tcp, self._dns = tcp, dns
        self._lock = threading.Lock()
        self._contacts: list[Contact] = []
        self._socks: list[socket.socket] = []

    def start(self) -> "Trap":
        for address, port in self._tcp:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((address, port))
            tcp.listen(64)
            self._spawn(self._accept, tcp)
        for address, port in self._dns:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.bind((address, port))
            self._spawn(self._answer, udp)
        return self

    def bound(self) -> list[tuple[str, int, int]]:
        """(address, port, socket type) of each listener, ports as bound (0 picks one)."""
        return [(*sock.getsockname()[:2], sock.type) for sock in self._socks]

    def _spawn(self, target: Callable[[socket.socket], None], sock: socket.socket) -> None:
        self._socks.append(sock)
        threading.Thread(target=target, args=(sock,), daemon=True, name="egress-trap").start()

    def _record(self, contact: Contact) -> None:
        with self._lock:
            self._contacts.append(contact)

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _peer = sock.accept()
            except OSError:
                return  # closed by stop()
            address, port = conn.getsockname()[:2]
            with conn:
                conn.settimeout(2.0)
                try:
                    data = conn.recv(4096)
                except OSError:
                    data = b""  # the caller gave up first: the connection still counts
                # Recorded before the answer, so a caller that has its answer is on record.
                self._record(Contact("tcp", address, port, _request_line(data)))
                if data and data[:1] != b"\x16":
                    try:
                        conn.sendall(_NOT_FOUND)
                    except OSError:
                        continue  # the caller is gone; its call is recorded

    def _answer(self, sock: socket.socket) -> None:
        while True:
            try:
                query, peer = sock.recvfrom(4096)
            except OSError:
                return
            if peer is None:
                return  # shut down by stop()
            address, port = sock.getsockname()[:2]
            self._record(Contact("dns", address, port, _dns_name(query)))
            try:
                sock.sendto(_nxdomain(query), peer)
            except OSError:
                continue  # the asker is gone; its question is recorded

    def contacts(self) -> list[Contact]:
        with self._lock:
            return list(self._contacts)

    def stop(self) -> None:
        for sock in self._socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # a listening or datagram socket that was never connected
            sock.close()


class Wire:
    """The far end of the namespace's network card: records every packet sent off the
    machine, by destination, protocol and port. The kernel's own link chatter (IPv6
    neighbour discovery, router solicitation, MLD) is not a call by anyone, and is left out."""

    def __init__(self, interface: str) -> None:
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))  # ETH_P_ALL
        self._sock.bind((interface, 0))
        self._lock = threading.Lock()
        self._contacts: list[Contact] = []
        threading.Thread(target=self._listen, daemon=True, name="egress-wire").start()

    def _listen(self) -> None:
        while True:
            try:
                frame = self._sock.recv(65535)
            except OSError:
                return  # closed by stop()
            contact = _packet(frame)
            if contact is not None:
                with self._lock:
                    self._contacts.append(contact)

    def contacts(self) -> list[Contact]:
        with self._lock:
            return list(self._contacts)

    def stop(self) -> None:
        self._sock.close()


def _packet(frame: bytes) -> Contact | None:
    """What an Ethernet frame sent off the machine asks for, or None for link chatter."""
    ethertype = int.from_bytes(frame[12:14], "big")
    ip = frame[14:]
    if ethertype == 0x0800 and len(ip) >= 20:  # IPv4 (RFC 791)
        proto, payload = ip[9], ip[(ip[0] & 0x0F) * 4:]
        port = int.from_bytes(payload[2:4], "big") if proto in (6, 17) else 0
        return Contact("wire", socket.inet_ntop(socket.AF_INET, ip[16:20]), port, _PROTOCOLS.get(proto, str(proto)))
    if ethertype == 0x86DD and len(ip) >= 40:  # IPv6 (RFC 8200)
        proto, payload = ip[6], ip[40:]
        if proto in (0, 58):  # hop-by-hop (MLD) and ICMPv6 (neighbour discovery): the kernel's
            return None
        port = int.from_bytes(payload[2:4], "big") if proto in (6, 17) else 0
        return Contact("wire", socket.inet_ntop(socket.AF_INET6, ip[24:40]), port, _PROTOCOLS.get(proto, str(proto)))
    if ethertype == 0x0806 and len(ip) >= 28:  # ARP: someone wants an address on the link
        target = socket.inet_ntop(socket.AF_INET, ip[24:28])
        return None if target in GATEWAY else Contact("wire", target, 0, "arp")
    return None


_PROTOCOLS = {1: "icmp", 6: "tcp", 17: "udp"}


def namespace_prefix() -> list[str] | None:
    """The ``unshare`` command that gives a child its own network and mount namespace, or
    None (with no way to make one: unshare missing, or not root and no user namespaces)."""
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("ip") is None:
        return None
    # As root a namespace is a plain unshare; otherwise one in a user namespace of its own.
    prefix = [unshare, "-n", "-m"] if os.geteuid() == 0 else [unshare, "-r", "-n", "-m"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
        return prefix
    return None


def _mount_namespace() -> str:
    return os.readlink("/proc/self/ns/mnt")


def _ip(*args: str) -> bool:
    return subprocess.run(["ip", *args], capture_output=True).returncode == 0


def _isolate(workdir: Path, outer_mount_ns: str) -> Wire | None:
    """Inside a fresh namespace: loopback up, the trap addresses on it, a network card
    whose wire ends in a :class:`Wire` (None if this kernel cannot make one), and
    private ``/etc/hosts`` and ``/etc/resolv.conf`` (bind mounts seen by this namespace
    only: refused unless this mount namespace is not ``outer_mount_ns``, the starter's)."""
    if not outer_mount_ns or _mount_namespace() == outer_mount_ns:
        raise SystemExit("egress: not in a mount namespace of its own; refusing to touch /etc")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in (METADATA, STAND_IN, DNS_TRAP):
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)
    wire = None
    if _ip("link", "add", "eth0", "type", "veth", "peer", "name", "wire"):
        # Static gateway neighbours: a packet goes out whole (destination, port) instead
        # of waiting on an ARP answer that never comes.
        steps = [("addr", "add", f"{MACHINE[0]}/24", "dev", "eth0"),
                 ("-6", "addr", "add", f"{MACHINE[1]}/64", "dev", "eth0", "nodad"),
                 ("link", "set", "wire", "up"), ("link", "set", "eth0", "up"),
                 ("neigh", "add", GATEWAY[0], "lladdr", _GATEWAY_MAC, "dev", "eth0", "nud", "permanent"),
                 ("-6", "neigh", "add", GATEWAY[1], "lladdr", _GATEWAY_MAC, "dev", "eth0", "nud", "permanent"),
                 ("route", "add", "default", "via", GATEWAY[0]), ("-6", "route", "add", "default", "via", GATEWAY[1])]
        for step in steps:
            subprocess.run(["ip", *step], check=True)
        wire = Wire("wire")
    hosts = workdir / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n{STAND_IN} {' '.join(TRAPPED_NAMES)}\n")
    resolv = workdir / "resolv.conf"
    resolv.write_text(f"nameserver {DNS_TRAP}\noptions timeout:1 attempts:1\n")
    for private, public in ((hosts, "/etc/hosts"), (resolv, "/etc/resolv.conf")):
        subprocess.run(["mount", "--bind", str(private), public], check=True)
    return wire


def _listening_off_loopback() -> list[str]:
    """TCP sockets in LISTEN state bound to anything but 127.0.0.0/8 or ::1 (a trap
    address aside): a port other machines could reach."""
    found = []
    traps = {METADATA, STAND_IN, DNS_TRAP}
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue  # no IPv6 in this kernel (or sandbox)
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A: LISTEN
                continue
            hexaddr, hexport = fields[1].split(":")
            raw = bytes.fromhex(hexaddr)
            # /proc/net/tcp prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            address = socket.inet_ntop(family, raw)
            if address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1") or address in traps:
                continue
            found.append(f"{address}:{int(hexport, 16)}")
    return sorted(set(found))


#: Where the canary's packet goes out on the wire (TEST-NET-1: nobody answers).
CANARY_OUT = ("192.0.2.7", 443)


def _canary() -> None:
    """One call of each kind the traps must catch, made the way Ray's probes make them."""
    import urllib.request
    from urllib.error import URLError

    for url in (f"http://{METADATA}/latest/meta-data/", f"http://{TRAPPED_NAMES[0]}/"):
        try:
            urllib.request.urlopen(url, timeout=2).close()
        except (URLError, OSError):
            pass  # 404 from the trap: what matters is that it was called
    try:
        socket.getaddrinfo("canary.example", 80)
    except socket.gaierror:
        pass  # NXDOMAIN from the trap
    with socket.socket() as out:
        out.settimeout(0.3)
        try:
            out.connect(CANARY_OUT)
        except OSError:
            pass  # nobody on the wire answers: the SYN went out, which is what counts


def run_trapped(command: list[str], *, outer_mount_ns: str, canary: bool = False, timeout: float = 600.0) -> dict[str, Any]:
    """Inside the namespace: set the traps, run ``command``, return the report."""
    workdir = Path(tempfile.mkdtemp(prefix="egress-"))
    wire = _isolate(workdir, outer_mount_ns)
    trap = Trap().start()
    listening: set[str] = set()

    def contacts() -> list[Contact]:
        return trap.contacts() + (wire.contacts() if wire is not None else [])

    try:
        seen_before: list[Contact] = []
        if canary:
            _canary()
            time.sleep(0.5)  # the trap threads record what they accepted
            seen_before = contacts()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output: list[str] = []
        stdout = proc.stdout
        assert stdout is not None  # stdout=PIPE
        reader = threading.Thread(target=lambda: output.extend(stdout), daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            listening.update(_listening_off_loopback())
            if time.monotonic() > deadline:
                proc.kill()
            time.sleep(0.25)
        reader.join(timeout=10)
        time.sleep(0.5)  # as above, for the command's last calls
        after = contacts()
        return {"returncode": proc.returncode, "canary": [asdict(c) for c in seen_before],
                "contacts": [asdict(c) for c in _minus(after, seen_before)], "listening": sorted(listening),
                "wire": wire is not None, "output": "".join(output)[-4000:]}
    finally:
        trap.stop()
        if wire is not None:
            wire.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _minus(after: list[Contact], before: list[Contact]) -> list[Contact]:
    """``after`` without one occurrence of each contact in ``before``."""
    rest = list(after)
    for contact in before:
        rest.remove(contact)
    return rest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m crawler.testing.egress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--canary", action="store_true", help="call each trap once first")
    parser.add_argument("--timeout", type=float, default=600.0, help="kill COMMAND after this many seconds")
    parser.add_argument("--inside", metavar="OUTER_MOUNT_NS", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no COMMAND")
    if args.inside:
        report = run_trapped(command, outer_mount_ns=args.inside, canary=args.canary, timeout=args.timeout)
        print(json.dumps(report), flush=True)
        return 0
    prefix = namespace_prefix()
    if prefix is None:
        print("egress: cannot create a network namespace (needs unshare and ip, and root or user namespaces)",
              file=sys.stderr)
        return 2
    flags = ["--canary"] if args.canary else []
    inner = [sys.executable, "-m", "crawler.testing.egress", "--inside", _mount_namespace(), "--timeout", str(args.timeout),
             *flags, "--", *command]
    return subprocess.run([*prefix, *inner]).returncode


if __name__ == "__main__":
    sys.exit(main())
