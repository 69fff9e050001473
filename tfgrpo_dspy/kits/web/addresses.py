"""Which IP addresses a fetch may reach: public ones, judged by where an IPv6 address that carries IPv4 leads.

An IPv4-mapped IPv6 address is its IPv4 address (`normalize_ip`); one that embeds an IPv4 address otherwise
(compatible, NAT64, 6to4, Teredo) is judged by the IPv4 address it leads to (`embedded_ipv4`); `is_public` refuses
private, loopback, link-local, reserved, multicast and unspecified addresses and a few blocks whose status this
Python's `ipaddress` tables may not know. `tfgrpo_dspy.kits.web.policy` applies them to every address a host
resolves to.
"""

from __future__ import annotations

import ipaddress

# Not public, whatever this Python's `ipaddress` says (its tables changed between versions): the IETF protocol
# assignments block (192.0.0.8 and its neighbours), deprecated site-local IPv6, local-use NAT64 (RFC 8215).
NOT_PUBLIC_NETWORKS = tuple(ipaddress.ip_network(net) for net in ("192.0.0.0/24", "fec0::/10", "64:ff9b:1::/48"))
NAT64_NETWORK = ipaddress.ip_network("64:ff9b::/96")


def normalize_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to (IPv4-mapped ones are unwrapped earlier, by `normalize_ip`)."""
    value = int(ip)
    if ip.sixtofour is not None:  # 2002:aabb:ccdd::/48
        return [ip.sixtofour]
    if ip.teredo is not None:  # 2001::/32: (server, client)
        return list(ip.teredo)
    compatible = value >> 32 == 0 and value > 1  # ::a.b.c.d (deprecated), but not :: or ::1
    translated = value >> 32 == 0xFFFF0000  # ::ffff:0:a.b.c.d (SIIT)
    if compatible or translated or ip in NAT64_NETWORK:  # NAT64: 64:ff9b::a.b.c.d
        return [ipaddress.IPv4Address(value & 0xFFFFFFFF)]
    return []


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if any(ip.version == net.version and ip in net for net in NOT_PUBLIC_NETWORKS):
        return False
    special = ip.is_private or ip.is_reserved or ip.is_loopback or ip.is_link_local or ip.is_multicast
    return ip.is_global and not special and not ip.is_unspecified
