"""Which network addresses a tenant's URL may reach: the verdict on one resolved IP address (docs/security.md
"Webhooks"). Pure: the caller resolves the name and hands the addresses in, then connects only to an address
this module let through.

A tenant's webhook may reach only global unicast addresses. Refused, with the reason as a short code:
``unspecified`` (0.0.0.0, ::), ``loopback`` (127/8, ::1), ``link_local`` (169.254/16 with the cloud metadata
address 169.254.169.254, fe80::/10), ``private`` (10/8, 172.16/12, 192.168/16, fc00::/7 and the other ranges
Python's ``ipaddress`` calls private), ``shared`` (100.64/10, carrier-grade NAT), ``multicast``, ``reserved``
(240/4, 255.255.255.255) and ``not_global`` (any other range IANA does not mark global, 192.0.2/24 and the
other documentation ranges among them). An IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``,
IPv4-compatible, 6to4 ``2002::/16``, NAT64 ``64:ff9b::/96``) is judged by that IPv4 address alone, so
``::ffff:127.0.0.1`` is loopback and ``::ffff:8.8.8.8`` global.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address, ip_network

from docstream.errors import InputError

__all__ = ["address_refusal", "check_addresses", "is_loopback_name", "refused_address"]

_SHARED = ip_network("100.64.0.0/10")
_NAT64 = IPv6Network("64:ff9b::/96")
_CHECKS: tuple[tuple[str, Callable[[IPv4Address | IPv6Address], bool]], ...] = (
    ("unspecified", lambda ip: ip.is_unspecified),
    ("loopback", lambda ip: ip.is_loopback),
    ("link_local", lambda ip: ip.is_link_local),
    ("multicast", lambda ip: ip.is_multicast),
    ("shared", lambda ip: ip in _SHARED),
    ("private", lambda ip: ip.is_private),
    ("reserved", lambda ip: ip.is_reserved),
    ("not_global", lambda ip: not ip.is_global),
)


def _embedded_ipv4(ip: IPv6Address) -> IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # NAT64 or IPv4-compatible (::a.b.c.d)
        return IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(address: str) -> str | None:
    """Why a tenant's URL may not reach ``address``, or None when it may (a global unicast address).

    Args:
        address: an IP address as ``getaddrinfo`` gives it (an IPv6 zone ``%eth0`` is ignored).

    Returns:
        ``unspecified``, ``loopback``, ``link_local``, ``multicast``, ``shared``, ``private``, ``reserved``,
        ``not_global``, or ``invalid`` when ``address`` is not an IP address; None for a global address.
    """
    try:
        ip: IPv4Address | IPv6Address = ip_address(address.split("%", 1)[0])
    except ValueError:
        return "invalid"
    if isinstance(ip, IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            return address_refusal(str(inner))
    for reason, check in _CHECKS:
        if check(ip):
            return reason
    return None


def refused_address(addresses: Iterable[str]) -> tuple[str, str] | None:
    """The first of ``addresses`` a tenant's URL may not reach, with the reason; None when it may reach them all.

    A name is refused when any one of its addresses is: the connection could go to that one.
    """
    for address in addresses:
        reason = address_refusal(address)
        if reason is not None:
            return address, reason
    return None


def is_loopback_name(host: str) -> bool:
    """``localhost`` or a name under ``.localhost``: loopback by definition (RFC 6761), whatever a resolver says."""
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def check_addresses(host: str, addresses: Iterable[str]) -> None:
    """Refuse ``host`` when any of its ``addresses`` is one a tenant's URL may not reach.

    Raises:
        InputError: ``webhook_address_refused``, naming the host, the address and why (never the URL's path or
            query: they may hold a secret).
    """
    refused = refused_address(addresses)
    if refused is not None:
        address, reason = refused
        raise InputError(f"webhook host {host} is at {address} ({reason}): webhooks reach only global addresses "
                         "(reducer.webhook_allow_private allows the others, for local development)",
                         code="webhook_address_refused")
