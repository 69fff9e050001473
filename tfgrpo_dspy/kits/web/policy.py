"""The network policy of a browsing session: which URLs of one site it may request, which addresses it may reach.

Every URL (the first and each redirect target) is checked before any byte is sent: http/https only, a host
inside the site, a permitted port, and every address the host name resolves to must be public (or explicitly
allowed). An IPv6 address that carries an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) is judged by
the IPv4 address it leads to. `SiteGuard.check_url` returns the checked address, so that the fetcher
(`tfgrpo_dspy.kits.web.fetch`) connects to it and not to a second DNS answer.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tfgrpo_dspy.kits.web.addresses import embedded_ipv4, is_public, normalize_ip
from tfgrpo_dspy.kits.web.errors import FetchError, FetchRefused

DEFAULT_PORTS = {"http": 80, "https": 443}

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class FetchPolicy:
    """Limits for one browsing session.

    Attributes:
        allowed_addresses: IP addresses permitted even though they are not public
            (e.g. ``{"127.0.0.1"}`` for a local test site). Empty by default.
        allow_subdomains: also accept hosts under the site's host (``docs.example.org``
            for ``example.org``; a leading ``www.`` is ignored on both sides).
        max_bytes: stop reading a body after this many bytes (the page is kept, marked truncated).
        max_redirects: redirects followed per fetch; each target is checked again.
        timeout_s: deadline for one fetch, redirects and body included.
    """

    allowed_addresses: frozenset[str] = field(default_factory=frozenset)
    allow_subdomains: bool = True
    max_bytes: int = 2_000_000
    max_redirects: int = 5
    timeout_s: float = 20.0
    user_agent: str = "tfgrpo-dspy-webwalker/0.1 (+research browsing agent)"

    def __post_init__(self) -> None:
        if isinstance(self.allowed_addresses, str):
            raise TypeError("allowed_addresses must be a collection of IP strings, not one string")
        try:
            normalized = frozenset(str(normalize_ip(a)) for a in self.allowed_addresses)
        except ValueError as err:
            raise ValueError(f"allowed_addresses holds something that is not an IP address: {err}") from err
        object.__setattr__(self, "allowed_addresses", normalized)
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")
        if self.max_redirects < 0:
            raise ValueError(f"max_redirects must be >= 0, got {self.max_redirects}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")


def resolve_host(host: str, port: int) -> list[str]:
    """All addresses ``host`` resolves to (the system resolver)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:  # UnicodeError: a name IDNA cannot encode
        raise FetchError(f"cannot resolve host {host!r}: {err}") from err
    return list(dict.fromkeys(info[4][0] for info in infos))


def _site_key(host: str) -> str:
    host = host.lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


class SiteGuard:
    """The checks of one site under a `FetchPolicy`; `tfgrpo_dspy.kits.web.fetch.SafeFetcher` fetches through them."""

    def __init__(self, site_url: str, policy: FetchPolicy | None = None, resolver: Resolver | None = None):
        self.policy = policy or FetchPolicy()
        self._resolve = resolver or resolve_host
        try:
            site = httpx.URL(site_url)
        except httpx.InvalidURL as err:
            raise ValueError(f"site_url is not a valid URL: {site_url!r}") from err
        if site.scheme not in DEFAULT_PORTS or not site.host:
            raise ValueError(f"site_url must be an absolute http(s) URL, got {site_url!r}")
        self.site_host = site.host.lower()
        self._site_ports = {site.port or DEFAULT_PORTS[site.scheme], *DEFAULT_PORTS.values()}

    def check_url(self, url: str) -> tuple[httpx.URL, str]:
        """Check ``url`` against the policy; return it parsed and the address to connect to.

        Raises:
            FetchRefused: the scheme, host, port or an address the host resolves to is not allowed.
        """
        parsed = self._check_static(url)
        port = parsed.port or DEFAULT_PORTS[parsed.scheme]
        addresses = self._resolve(parsed.host, port)
        if not addresses:
            raise FetchError(f"host {parsed.host!r} resolved to no address")
        for address in addresses:  # every answer must pass, or a later connect could pick a bad one
            self._check_address(parsed.host, address)
        return parsed, addresses[0]

    def is_site_url(self, url: str) -> bool:
        """Whether ``url`` passes the checks that need no DNS (scheme, host, port)."""
        try:
            self._check_static(url)
        except FetchRefused:
            return False
        return True

    def _check_static(self, url: str) -> httpx.URL:
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as err:
            raise FetchRefused(f"not a valid URL: {url!r}") from err
        if parsed.scheme not in DEFAULT_PORTS:
            raise FetchRefused(f"only http and https URLs are allowed, got {url!r}")
        if not parsed.host:
            raise FetchRefused(f"URL has no host: {url!r}")
        if parsed.userinfo:
            raise FetchRefused(f"URLs with credentials are not allowed: {url!r}")
        if not self._is_site_host(parsed.host):
            raise FetchRefused(f"host {parsed.host!r} is outside the site {self.site_host!r}")
        port = parsed.port or DEFAULT_PORTS[parsed.scheme]
        if port not in self._site_ports:
            raise FetchRefused(f"port {port} is not allowed for this site")
        return parsed

    def _is_site_host(self, host: str) -> bool:
        host_key, site_key = _site_key(host), _site_key(self.site_host)
        if host_key == site_key:
            return True
        return self.policy.allow_subdomains and host_key.endswith("." + site_key)

    def _check_address(self, host: str, address: str) -> None:
        try:
            ip = normalize_ip(address)
        except ValueError as err:
            raise FetchRefused(f"host {host!r} resolved to an invalid address {address!r}") from err
        if str(ip) in self.policy.allowed_addresses:
            return
        embedded = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else []
        # An IPv6 address that carries IPv4 is judged by where it leads (its prefix alone says nothing).
        if not all(map(is_public, embedded or [ip])):
            carrying = f" (carrying {', '.join(map(str, embedded))})" if embedded else ""
            raise FetchRefused(
                f"host {host!r} resolves to {ip}{carrying}, a private, loopback, link-local or reserved address"
            )
