"""Fetching web pages under a network policy: one site, public addresses, bounded size and time.

Every URL (the first and each redirect target) is checked before any byte is sent:
http/https only, a host inside the site, a permitted port, and every address the host
name resolves to must be public (or explicitly allowed). An IPv6 address that carries an
IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) is judged by the IPv4 address it
leads to. The connection then goes to the checked address itself, with the original name
in the Host header and TLS SNI, so a second DNS answer (DNS rebinding) cannot redirect it.

Bodies are streamed and cut at a byte budget, counted both on the wire and after
decompression (decoded here, chunk by chunk, so a small compressed bomb never expands in
memory; stacked content encodings are refused). The whole fetch, redirects, headers and body
included, has one wall-clock deadline: httpx's timeouts are per read, so a watchdog shuts the
connection when the deadline passes, however slowly the server trickles. Every failure is a `FetchError`.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

from tfgrpo_dspy.kits.web.addresses import embedded_ipv4, is_public, normalize_ip
from tfgrpo_dspy.kits.web.watchdog import Watchdog

logger = logging.getLogger(__name__)

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
ALLOWED_CONTENT_TYPES = frozenset({"text/html", "application/xhtml+xml", "text/plain"})
DEFAULT_PORTS = {"http": 80, "https": 443}
# Content encodings decoded here, with their zlib window bits (deflate: a zlib stream; +32 also accepts gzip).
DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"

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
    except (socket.gaierror, UnicodeError) as err:  # UnicodeError: a name IDNA cannot encode
        raise FetchError(f"cannot resolve host {host!r}: {err}") from err
    return list(dict.fromkeys(info[4][0] for info in infos))


def _site_key(host: str) -> str:
    host = host.lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


class SafeFetcher:
    """Fetches pages of one site under a `FetchPolicy`. Not shared between threads: one per browser."""

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
        self._client: httpx.Client | None = None  # opened on the first fetch, so an idle fetcher copies cleanly

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            # Redirects are followed by hand so that every hop is checked; no proxies from the environment.
            # No kept-alive connections: each request connects anew, so its watchdog holds its socket.
            self._client = httpx.Client(follow_redirects=False, trust_env=False,
                                        limits=httpx.Limits(max_keepalive_connections=0))
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
            current = _redirect_target(parsed, outcome)  # check and follow its Location
            logger.debug("redirect %s -> %s", parsed, current)
        raise FetchError(f"more than {self.policy.max_redirects} redirects starting at {url!r}")

    def _get_once(self, url: httpx.URL, address: str, deadline: float) -> FetchedPage | str:
        """One request to the checked address; a page, or the Location of a redirect."""
        pinned = url.copy_with(host=address)  # connect to the address we checked, not a new DNS answer
        default_port = DEFAULT_PORTS[url.scheme]
        host_header = url.host if (url.port or default_port) == default_port else f"{url.host}:{url.port}"
        headers = {
            "Host": host_header,
            "User-Agent": self.policy.user_agent,
            "Accept": "text/html",
            "Accept-Encoding": ACCEPT_ENCODING,  # only what `_BoundedDecoder` decodes
        }
        remaining = deadline - time.monotonic()
        timed_out = f"timed out after {self.policy.timeout_s:g}s fetching {url}"
        if remaining <= 0:
            raise FetchError(timed_out)
        with Watchdog(remaining) as watchdog:
            extensions: dict[str, object] = {"trace": watchdog.trace}
            if url.scheme == "https":
                extensions["sni_hostname"] = url.host
            try:
                request = self.client.build_request(
                    "GET", pinned, headers=headers, timeout=remaining, extensions=extensions
                )
                response = self.client.send(request, stream=True)
            except (httpx.HTTPError, httpx.InvalidURL) as err:
                if watchdog.fired or isinstance(err, httpx.TimeoutException):
                    raise FetchError(timed_out) from err
                raise FetchError(f"could not fetch {url}: {type(err).__name__}: {err}") from err
            outcome = self._read_response(url, response, deadline)
            if watchdog.fired:  # a shut connection can look like the end of a body
                raise FetchError(timed_out)
        return outcome

    def _read_response(self, url: httpx.URL, response: httpx.Response, deadline: float) -> FetchedPage | str:
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
            decoder = _BoundedDecoder(response.headers.get("content-encoding", ""), self.policy.max_bytes)
            body, truncated = self._read_bounded(response.iter_raw(), decoder, url, deadline)
        except httpx.TimeoutException as err:
            raise FetchError(f"timed out after {self.policy.timeout_s:g}s fetching {url}") from err
        except (httpx.HTTPError, httpx.StreamError) as err:
            if time.monotonic() >= deadline:  # the watchdog shut the connection
                raise FetchError(f"timed out after {self.policy.timeout_s:g}s fetching {url}") from err
            raise FetchError(f"could not read {url}: {type(err).__name__}: {err}") from err
        finally:
            response.close()
        return FetchedPage(str(url), response.status_code, content_type, charset, body, truncated)

    def _read_bounded(
        self, chunks: Iterable[bytes], decoder: _BoundedDecoder, url: httpx.URL, deadline: float
    ) -> tuple[bytes, bool]:
        """Read raw (still encoded) chunks until the body ends, or either budget (wire, decoded) is spent."""
        received = 0
        for chunk in chunks:
            received += len(chunk)
            decoder.feed(chunk)
            if decoder.full or received > self.policy.max_bytes:
                logger.info("page %s exceeds %d bytes; truncated", url, self.policy.max_bytes)
                return decoder.body(), True
            if time.monotonic() > deadline:  # a slow drip never trips the per-read timeout
                raise FetchError(f"timed out after {self.policy.timeout_s:g}s reading {url}")
        return decoder.finish(), False


class _BoundedDecoder:
    """Decodes a body's content encoding as it streams in, never producing more than ``limit`` bytes.

    httpx would decompress each network chunk whole: a few hundred bytes of stacked gzip become gigabytes in
    one call. Here zlib may only produce what is left of the budget, so memory stays bounded by ``limit``.
    """

    def __init__(self, content_encoding: str, limit: int):
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c not in ("", "identity")]
        if len(codings) > 1:
            raise FetchError(f"stacked content encodings are refused (a decompression bomb?): {content_encoding!r}")
        if codings and codings[0] not in DECODERS:
            raise FetchError(f"unsupported content encoding {codings[0]!r}")
        self._zlib = zlib.decompressobj(DECODERS[codings[0]]) if codings else None
        self._limit = limit
        self._body = bytearray()
        self.full = False  # the budget is spent and more would have followed

    def feed(self, chunk: bytes) -> None:
        room = self._limit - len(self._body)
        if self._zlib is None:
            decoded = chunk[: room + 1]
        else:
            try:
                decoded = self._zlib.decompress(chunk, room + 1)  # asking one byte more tells "full" apart
            except zlib.error as err:
                raise FetchError(f"the compressed body is corrupt: {err}") from err
        self.full = len(decoded) > room
        self._body += decoded[:room]

    def body(self) -> bytes:
        return bytes(self._body)

    def finish(self) -> bytes:
        """The whole body once the input has ended; zlib may still hold a last piece (cut like the rest)."""
        if self._zlib is not None:
            room = self._limit - len(self._body)
            self._body += self._zlib.flush()[:room]
        return self.body()


def _redirect_target(base: httpx.URL, location: str) -> str:
    try:
        return str(base.join(location))
    except httpx.InvalidURL as err:
        raise FetchError(f"redirect from {base} to an invalid URL {location!r}") from err


def _parse_content_type(header: str) -> tuple[str, str | None]:
    media_type, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media_type.strip().lower(), charset
