"""Fetching web pages under a network policy: one site, public addresses, bounded size and time.

Every URL (the first and each redirect target) is checked before any byte is sent:
http/https only, a host inside the site, a permitted port, and every address the host
name resolves to must be public (or explicitly allowed). The connection then goes to
the checked address itself, with the original name in the Host header and TLS SNI, so a
second DNS answer (DNS rebinding) cannot redirect it. Bodies are streamed and cut at a
byte budget; the whole fetch, redirects included, has one deadline.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

logger = logging.getLogger(__name__)

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
ALLOWED_CONTENT_TYPES = frozenset({"text/html", "application/xhtml+xml", "text/plain"})
DEFAULT_PORTS = {"http": 80, "https": 443}

Resolver = Callable[[str, int], list[str]]


class FetchError(Exception):
    """A page could not be fetched (network error, HTTP error, unsupported content, time out)."""


class FetchRefused(FetchError):
    """The network policy forbids the request; nothing was sent."""


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
            normalized = frozenset(str(_normalize_ip(a)) for a in self.allowed_addresses)
        except ValueError as err:
            raise ValueError(f"allowed_addresses holds something that is not an IP address: {err}") from err
        object.__setattr__(self, "allowed_addresses", normalized)
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")
        if self.max_redirects < 0:
            raise ValueError(f"max_redirects must be >= 0, got {self.max_redirects}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")


@dataclass(frozen=True)
class FetchedPage:
    """A fetched body. ``url`` is the final URL after redirects."""

    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool


def resolve_host(host: str, port: int) -> list[str]:
    """All addresses ``host`` resolves to (the system resolver)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise FetchError(f"cannot resolve host {host!r}: {err}") from err
    return list(dict.fromkeys(info[4][0] for info in infos))


def _normalize_ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip


def _site_key(host: str) -> str:
    host = host.lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


class SafeFetcher:
    """Fetches pages of one site under a `FetchPolicy`. Not shared between threads: one per browser."""

    def __init__(self, site_url: str, policy: FetchPolicy | None = None, resolver: Resolver | None = None):
        self.policy = policy or FetchPolicy()
        self._resolve = resolver or resolve_host
        site = httpx.URL(site_url)
        if site.scheme not in DEFAULT_PORTS or not site.host:
            raise ValueError(f"site_url must be an absolute http(s) URL, got {site_url!r}")
        self.site_host = site.host.lower()
        self._site_ports = {site.port or DEFAULT_PORTS[site.scheme], *DEFAULT_PORTS.values()}
        self._client: httpx.Client | None = None  # opened on the first fetch, so an idle fetcher copies cleanly

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            # Redirects are followed by hand so that every hop is checked; no proxies from the environment.
            self._client = httpx.Client(follow_redirects=False, trust_env=False)
        return self._client

    def __enter__(self) -> SafeFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
            ip = _normalize_ip(address)
        except ValueError as err:
            raise FetchRefused(f"host {host!r} resolved to an invalid address {address!r}") from err
        if str(ip) in self.policy.allowed_addresses:
            return
        if not ip.is_global or ip.is_multicast:
            raise FetchRefused(
                f"host {host!r} resolves to {ip}, a private, loopback, link-local or reserved address"
            )

    def fetch(self, url: str) -> FetchedPage:
        """GET ``url`` under the policy, following checked redirects.

        Raises:
            FetchRefused: the policy forbids the URL or a redirect target.
            FetchError: network failure, time out, HTTP error status, or a non-text content type.
        """
        deadline = time.monotonic() + self.policy.timeout_s
        current = url
        for _hop in range(self.policy.max_redirects + 1):
            parsed, address = self.check_url(current)
            outcome = self._get_once(parsed, address, deadline)
            if isinstance(outcome, FetchedPage):
                return outcome
            current = str(parsed.join(outcome))  # a redirect: check and follow its Location
            logger.debug("redirect %s -> %s", parsed, current)
        raise FetchError(f"more than {self.policy.max_redirects} redirects starting at {url!r}")

    def _get_once(self, url: httpx.URL, address: str, deadline: float) -> FetchedPage | str:
        """One request to the checked address; a page, or the Location of a redirect."""
        pinned = url.copy_with(host=address)  # connect to the address we checked, not a new DNS answer
        default_port = DEFAULT_PORTS[url.scheme]
        host_header = url.host if (url.port or default_port) == default_port else f"{url.host}:{url.port}"
        headers = {"Host": host_header, "User-Agent": self.policy.user_agent, "Accept": "text/html"}
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(f"timed out after {self.policy.timeout_s:g}s fetching {url}")
        try:
            request = self.client.build_request(
                "GET", pinned, headers=headers, timeout=remaining, extensions=extensions
            )
            response = self.client.send(request, stream=True)
        except httpx.TimeoutException as err:
            raise FetchError(f"timed out after {self.policy.timeout_s:g}s fetching {url}") from err
        except httpx.HTTPError as err:
            raise FetchError(f"could not fetch {url}: {type(err).__name__}: {err}") from err
        try:
            if response.status_code in REDIRECT_CODES:
                location = response.headers.get("location")
                if not location:
                    raise FetchError(f"redirect without a Location header from {url}")
                return location
            if response.status_code >= 400:
                raise FetchError(f"HTTP {response.status_code} {response.reason_phrase} for {url}")
            content_type, charset = _parse_content_type(response.headers.get("content-type", ""))
            if content_type not in ALLOWED_CONTENT_TYPES:
                raise FetchError(f"unsupported content type {content_type or 'unknown'!r} at {url}")
            body, truncated = self._read_bounded(response.iter_bytes(), url, deadline)
        except httpx.TimeoutException as err:
            raise FetchError(f"timed out after {self.policy.timeout_s:g}s fetching {url}") from err
        except httpx.HTTPError as err:
            raise FetchError(f"could not read {url}: {type(err).__name__}: {err}") from err
        finally:
            response.close()
        return FetchedPage(str(url), response.status_code, content_type, charset, body, truncated)

    def _read_bounded(self, chunks: Iterable[bytes], url: httpx.URL, deadline: float) -> tuple[bytes, bool]:
        buffer = bytearray()
        for chunk in chunks:
            buffer.extend(chunk)
            if len(buffer) > self.policy.max_bytes:
                logger.info("page %s exceeds %d bytes; truncated", url, self.policy.max_bytes)
                return bytes(buffer[: self.policy.max_bytes]), True
            if time.monotonic() > deadline:  # a slow drip never trips the per-read timeout
                raise FetchError(f"timed out after {self.policy.timeout_s:g}s reading {url}")
        return bytes(buffer), False


def _parse_content_type(header: str) -> tuple[str, str | None]:
    media_type, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media_type.strip().lower(), charset
