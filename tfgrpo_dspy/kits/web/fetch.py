"""Fetching web pages under a network policy: one site, public addresses, bounded size and time.

Every URL (the first and each redirect target) is checked before any byte is sent (`.policy`: the scheme, the
site's hosts and ports, public addresses only). The connection then goes to the checked address itself, with
the original name in the Host header and TLS SNI, so a second DNS answer (DNS rebinding) cannot redirect it.

Bodies are streamed and cut at a byte budget, counted both on the wire and after decompression (`.decoding`,
chunk by chunk, so a small compressed bomb never expands in memory). The whole fetch, redirects, headers and body
included, has one wall-clock deadline: httpx's timeouts are per read, so a watchdog shuts the connection when
the deadline passes, however slowly the server trickles. Every failure is a `FetchError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from tfgrpo_dspy.kits.web.decoding import ACCEPT_ENCODING, DECODERS, BoundedDecoder, parse_content_type
from tfgrpo_dspy.kits.web.errors import FetchError, FetchRefused
from tfgrpo_dspy.kits.web.policy import DEFAULT_PORTS, FetchPolicy, Resolver, SiteGuard, resolve_host
from tfgrpo_dspy.kits.web.watchdog import Watchdog

# The names above that moved to .errors, .policy and .decoding are still importable from here.
__all__ = [
    "ACCEPT_ENCODING", "ALLOWED_CONTENT_TYPES", "DECODERS", "DEFAULT_PORTS", "REDIRECT_CODES", "FetchError",
    "FetchPolicy", "FetchRefused", "FetchedPage", "Resolver", "SafeFetcher", "resolve_host",
]

logger = logging.getLogger(__name__)

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
ALLOWED_CONTENT_TYPES = frozenset({"text/html", "application/xhtml+xml", "text/plain"})


@dataclass(frozen=True)
class FetchedPage:
    """A fetched body. ``url`` is the final URL after redirects."""

    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool


class SafeFetcher(SiteGuard):
    """Fetches pages of one site under a `FetchPolicy`, each URL checked first (`SiteGuard.check_url`).

    Not shared between threads: one per browser.
    """

    def __init__(self, site_url: str, policy: FetchPolicy | None = None, resolver: Resolver | None = None):
        super().__init__(site_url, policy, resolver)
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
            "Accept-Encoding": ACCEPT_ENCODING,  # only what `BoundedDecoder` decodes
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
            content_type, charset = parse_content_type(response.headers.get("content-type", ""))
            if content_type not in ALLOWED_CONTENT_TYPES:
                raise FetchError(f"unsupported content type {content_type or 'unknown'!r} at {url}")
            decoder = BoundedDecoder(response.headers.get("content-encoding", ""), self.policy.max_bytes)
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
        self, chunks: Iterable[bytes], decoder: BoundedDecoder, url: httpx.URL, deadline: float
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


def _redirect_target(base: httpx.URL, location: str) -> str:
    try:
        return str(base.join(location))
    except httpx.InvalidURL as err:
        raise FetchError(f"redirect from {base} to an invalid URL {location!r}") from err
