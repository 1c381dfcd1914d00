"""Checks for provider URLs chosen by the caller of ``POST /ai/chat``
(docs/api.md "Caller-supplied provider (`X-Api-Base-URL`)"; docs/security.md, threat 5 "SSRF").

Framework-free (no Django import). A caller-supplied base URL (``X-Api-Base-URL``) is only
used when the deployment allows it, and then only after:

1. the URL is ``http``/``https`` with a host, no credentials, no fragment;
2. the host is not a name that means "this machine" or "the cloud metadata service"
   (``localhost``, ``*.localhost``, ``metadata.google.internal`` …);
3. the host is resolved (an IP literal — including the legacy decimal, octal and hex IPv4
   forms ``2130706433``, ``0177.0.0.1``, ``0x7f.1`` that ``inet_aton`` accepts — resolves to
   itself) and **every** address is public: any private, loopback, link-local, multicast,
   reserved, unspecified, shared (CGNAT) or metadata address refuses the URL. IPv6 addresses
   that embed an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4,
   Teredo) are judged by the embedded address too.

The connection is then **pinned** to the checked address (:class:`PinnedTransport`), so a
DNS answer that changes between the check and the connect (DNS rebinding) cannot move the
request; TLS still verifies the certificate against the original host name (SNI). Redirects
are never followed: the streaming clients build their ``httpx`` client with
``follow_redirects=False``, and the pinned transport refuses any other host anyway.

The resolver is injectable (:data:`Resolver`), so tests control what a name resolves to.
Every refusal is :class:`BlockedURLError`; its message says why without echoing secrets.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from typing import Awaitable, Callable, Final, Sequence
from urllib.parse import urlsplit

import httpx

from jxai_app.core.errors import JxaiError

__all__ = [
    "BlockedURLError",
    "CheckedURL",
    "IPAddress",
    "METADATA_ADDRESSES",
    "PinnedTransport",
    "Resolver",
    "check_base_url",
    "is_blocked_address",
    "parse_ip_literal",
    "system_resolver",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``await resolver(host, port)`` → the IP address strings the host resolves to (may raise
``OSError`` when it does not resolve)."""

METADATA_ADDRESSES: Final[frozenset[IPAddress]] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (legacy)
        "fd00:ec2::254",  # AWS IMDS over IPv6
    )
)
"""Cloud instance-metadata addresses, refused by name even where another rule would not."""

BLOCKED_HOST_NAMES: Final[frozenset[str]] = frozenset(
    {"localhost", "metadata", "metadata.google.internal", "metadata.goog", "instance-data",
     "instance-data.ec2.internal"}
)
"""Host names refused before any lookup (defence in depth; the address check still runs)."""

_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPAT: Final = ipaddress.IPv6Network("::/96")
_NUMERIC_V4: Final = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)

HOST_NOT_PERMITTED: Final[str] = "Base URL host is not permitted."
"""The start of every host refusal's message (the original package's sentence, kept for its clients)."""


class BlockedURLError(JxaiError):
    """A caller-supplied URL may not be used; ``str(error)`` says why (safe to show)."""


@dataclass(frozen=True, slots=True)
class CheckedURL:
    """A base URL that passed :func:`check_base_url`.

    Attributes:
        url: the URL as given (trailing ``/`` removed).
        host: its host name or IP literal, lower-cased, without brackets.
        port: the TCP port (default 80/443 by scheme).
        address: the checked address the connection is pinned to (the first resolved one).
        addresses: every address the host resolved to (all of them passed).
    """

    url: str
    host: str
    port: int
    address: IPAddress
    addresses: tuple[IPAddress, ...]


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address a host string denotes literally, or ``None`` for a name.

    Accepts IPv4 dotted quads, IPv6 (with or without brackets, with a zone id), and the
    legacy IPv4 forms ``inet_aton`` accepts (``2130706433``, ``0x7f000001``, ``0177.0.0.1``,
    ``127.1``), since resolvers built on it connect to them.
    """
    text = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _NUMERIC_V4.match(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def _embedded_v4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if address in _NAT64 or (address in _IPV4_COMPAT and int(address) > 1):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _not_public(address: IPAddress) -> bool:
    return (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
    )


def is_blocked_address(address: IPAddress) -> bool:
    """True when a provider request must not go to ``address``.

    Blocked: private, loopback, link-local, multicast, reserved, unspecified, shared
    (100.64/10) and other non-global ranges, cloud metadata addresses, and IPv6 addresses
    embedding a blocked IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo, IPv4-compatible).
    A NAT64 address is judged by its embedded IPv4 address alone.
    """
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(address.packed)  # drop any zone id
        embedded = _embedded_v4(address)
        if any(is_blocked_address(v4) for v4 in embedded):
            return True
        if address in _NAT64:
            return False
    if address in METADATA_ADDRESSES:
        return True
    return _not_public(address)


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the operating system (``getaddrinfo``, TCP), every address."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _refuse(reason: str) -> BlockedURLError:
    return BlockedURLError(f"{HOST_NOT_PERMITTED} {reason}")


async def check_base_url(url: str, *, resolver: Resolver = system_resolver,
                         blocked: Callable[[IPAddress], bool] = is_blocked_address) -> CheckedURL:
    """Validate a caller-supplied provider base URL and resolve its host (module docstring).

    Args:
        url: the base URL, e.g. ``https://llm.example.com/v1``.
        resolver: ``await resolver(host, port)`` → address strings (default: the system's).
        blocked: the address policy (default :func:`is_blocked_address`).

    Returns:
        The :class:`CheckedURL` with every resolved address and the one to connect to.

    Raises:
        BlockedURLError: not an http(s) URL with a host, credentials or a fragment in it, a
            forbidden host name, a host that does not resolve, or any blocked address.
    """
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
        host = (parts.hostname or "").lower().rstrip(".")
    except ValueError:
        raise _refuse("The URL cannot be parsed.") from None
    if parts.scheme not in ("http", "https") or not host:
        raise _refuse("Only http and https URLs with a host are accepted.")
    if parts.username is not None or parts.password is not None:
        raise _refuse("The URL must not carry credentials.")
    if parts.fragment or any(ch.isspace() for ch in text):
        raise _refuse("The URL must not carry a fragment or spaces.")
    if host in BLOCKED_HOST_NAMES or host.endswith(".localhost"):
        raise _refuse(f"The host {host!r} is a local or metadata name.")
    port = port or (443 if parts.scheme == "https" else 80)
    literal = parse_ip_literal(host)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            resolved = await resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise _refuse(f"The host {host!r} does not resolve ({type(exc).__name__}).") from None
        addresses = []
        for item in resolved:
            parsed = parse_ip_literal(str(item))
            if parsed is None:
                raise _refuse(f"The host {host!r} resolved to something that is not an address.")
            addresses.append(parsed)
        if not addresses:
            raise _refuse(f"The host {host!r} does not resolve.")
    bad = [a for a in addresses if blocked(a)]
    if bad:
        raise _refuse(f"The host {host!r} resolves to a private, loopback, link-local, multicast, "
                      "reserved or metadata address.")
    return CheckedURL(url=text.rstrip("/"), host=host.strip("[]"), port=port, address=addresses[0],
                      addresses=tuple(addresses))


class PinnedTransport(httpx.AsyncBaseTransport):
    """An ``httpx`` transport that sends every request to one checked address.

    The URL's host is replaced by the pinned address for the connection, while the
    ``Host`` header and the TLS server name (SNI, certificate check) stay the original
    host. A request for any other host or port (a redirect someone tried to follow) is
    refused with ``httpx.ConnectError``.

    Args:
        checked: the result of :func:`check_base_url`.
        inner: the transport that really connects (default ``httpx.AsyncHTTPTransport()``);
            closed with this one.
    """

    def __init__(self, checked: CheckedURL, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.checked = checked
        self._inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        if url.host.lower().rstrip(".") != self.checked.host or port != self.checked.port:
            raise httpx.ConnectError("the request left the checked provider host", request=request)
        if url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": self.checked.host}
        request.url = url.copy_with(host=str(self.checked.address))
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()
