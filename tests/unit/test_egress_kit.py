"""The egress traps (crawler.testing.egress) catch what they are there for: a test of
"nothing leaves the machine" is only as good as its traps. The whole namespace runs in
tests/integration/test_no_egress.py; here its parts, on loopback."""

from __future__ import annotations

import socket
import struct
import urllib.request
from urllib.error import HTTPError

from crawler.testing import egress
from crawler.testing.egress import Contact, Trap


def _dns_query(name: str, qid: int = 0x1234) -> bytes:
    """A one-question A query (RFC 1035 4.1), as a stub resolver sends it."""
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + struct.pack("!HH", 1, 1)


def _ethernet(ethertype: int, payload: bytes) -> bytes:
    return b"\x02" * 6 + b"\x04" * 6 + ethertype.to_bytes(2, "big") + payload


def _ipv4(dst: str, proto: int, dport: int) -> bytes:
    header = bytes([0x45, 0]) + (40).to_bytes(2, "big") + bytes(5) + bytes([proto]) + bytes(2)
    header += socket.inet_aton("198.51.100.9") + socket.inet_aton(dst)
    return header + (40000).to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(16)


def _ipv6(dst: str, next_header: int, dport: int = 0) -> bytes:
    header = bytes([0x60, 0, 0, 0]) + (8).to_bytes(2, "big") + bytes([next_header, 64])
    header += socket.inet_pton(socket.AF_INET6, "2001:db8::9") + socket.inet_pton(socket.AF_INET6, dst)
    return header + (40000).to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(4)


def _arp_who_has(target: str) -> bytes:
    return bytes(24) + socket.inet_aton(target)


def test_a_packet_on_the_wire_is_read_as_destination_port_and_protocol():
    assert egress._packet(_ethernet(0x0800, _ipv4("8.8.8.8", 17, 53))) == Contact("wire", "8.8.8.8", 53, "udp")
    assert egress._packet(_ethernet(0x0800, _ipv4("203.0.113.7", 6, 443))) == Contact("wire", "203.0.113.7", 443, "tcp")
    assert egress._packet(_ethernet(0x86DD, _ipv6("2001:4860:4860::8888", 6, 443))) == \
        Contact("wire", "2001:4860:4860::8888", 443, "tcp")
    assert egress._packet(_ethernet(0x0806, _arp_who_has("192.0.2.7"))) == Contact("wire", "192.0.2.7", 0, "arp")


def test_the_kernels_own_link_chatter_is_not_a_call():
    assert egress._packet(_ethernet(0x86DD, _ipv6("ff02::2", 58))) is None  # router solicitation
    assert egress._packet(_ethernet(0x86DD, _ipv6("ff02::16", 0))) is None  # MLD report
    assert egress._packet(_ethernet(0x0806, _arp_who_has(egress.GATEWAY[0]))) is None
    assert egress._packet(b"\x00" * 10) is None


def test_the_dns_trap_reads_the_name_and_answers_nxdomain_to_the_same_question():
    query = _dns_query("usage-stats.ray.io")
    assert egress._dns_name(query) == "usage-stats.ray.io"
    answer = egress._nxdomain(query)
    qid, flags, qd, an = struct.unpack("!HHHH", answer[:8])
    assert (qid, flags & 0x800F, qd, an) == (0x1234, 0x8003, 1, 0)  # a response, NXDOMAIN, no answers
    assert answer[12:] == query[12:]


def test_the_trap_records_an_http_call_and_a_name_lookup():
    trap = Trap(tcp=(("127.0.0.1", 0),), dns=(("127.0.0.1", 0),)).start()
    try:
        (tcp_addr, tcp_port, _), (dns_addr, dns_port, _) = trap.bound()
        try:
            urllib.request.urlopen(f"http://{tcp_addr}:{tcp_port}/latest/meta-data/", timeout=5)
        except HTTPError as exc:
            assert exc.code == 404
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.settimeout(5)
            udp.sendto(_dns_query("metadata.google.internal"), (dns_addr, dns_port))
            answer, _ = udp.recvfrom(512)
        assert struct.unpack("!H", answer[2:4])[0] & 0x000F == 3
        got = sorted(trap.contacts(), key=lambda c: c.kind)
    finally:
        trap.stop()
    assert got == [Contact("dns", "127.0.0.1", dns_port, "metadata.google.internal"),
                   Contact("tcp", "127.0.0.1", tcp_port, "GET /latest/meta-data/ HTTP/1.1")]


def test_minus_removes_one_occurrence_per_earlier_contact():
    a, b = Contact("dns", "x", 53, "n"), Contact("tcp", "y", 80, "GET / HTTP/1.1")
    assert egress._minus([a, a, b], [a]) == [a, b]
