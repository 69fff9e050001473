"""Hostile responses against the web fetcher and the browser, from a loopback server started here.

Each probe is a response a malicious site could send: decompression bombs, broken redirects, unknown
charsets, absurd nesting. The fetcher must stay within its memory budget and fail with a `FetchError`;
the browser must turn every failure into a text the agent reads, never an exception.
"""

from __future__ import annotations

import gzip
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tfgrpo_dspy.kits.web.browser import Browser
from tfgrpo_dspy.kits.web.fetch import FetchError, FetchPolicy, SafeFetcher

MAX_BYTES = 200_000
POLICY = FetchPolicy(allowed_addresses={"127.0.0.1"}, max_bytes=MAX_BYTES, timeout_s=5.0)
BOMB_BYTES = 400 << 20  # what the stacked bomb expands to
PAGE = b"<html><head><title>Fine</title></head><body><h1>Fine page</h1><p>All good here.</p></body></html>"

Route = tuple[int, dict[str, str], bytes]


def _routes() -> dict[str, Route]:
    """path -> (status, headers, body) of every hostile (and one friendly) response."""
    html = {"Content-Type": "text/html; charset=utf-8"}
    stacked_bomb = gzip.compress(_gzip_of_zeros(BOMB_BYTES), 9)  # ~5 KB -> 400 MiB
    single_bomb = _gzip_of_zeros(50 << 20)  # ~230 KB -> 50 MiB
    deep = b"<html><body>" + b"<div>" * 20_000 + b"deep text" + b"</div>" * 20_000 + b"</body></html>"
    return {
        "/stacked-gzip-bomb": (200, {**html, "Content-Encoding": "gzip, gzip"}, stacked_bomb),
        "/gzip-bomb": (200, {**html, "Content-Encoding": "gzip"}, single_bomb),
        "/gzip-page": (200, {**html, "Content-Encoding": "gzip"}, gzip.compress(PAGE)),
        "/deflate-page": (200, {**html, "Content-Encoding": "deflate"}, zlib.compress(PAGE)),
        "/corrupt-gzip": (200, {**html, "Content-Encoding": "gzip"}, b"\x1f\x8b\x08\x00garbage" * 10),
        "/brotli": (200, {**html, "Content-Encoding": "br"}, b"\x0b\x02\x80hello\x03"),
        "/bad-redirect": (302, {"Location": "x:y"}, b""),  # httpx itself raised InvalidURL on this one
        "/bad-redirect-port": (302, {"Location": "//host:abc/"}, b""),
        "/bogus-charset-html": (200, {"Content-Type": "text/html; charset=x-bogus"}, PAGE),
        "/bogus-charset-text": (200, {"Content-Type": "text/plain; charset=x-bogus"}, b"plain words"),
        "/deep-nesting": (200, html, deep),
        "/bad-links": (
            200,
            html,
            b'<html><head><base href="http://[::1"></head><body><a href="http://[oops/">broken</a>'
            b'<a href="/fine.html">fine link</a></body></html>',
        ),
    }


def _gzip_of_zeros(size: int) -> bytes:
    """gzip of ``size`` zero bytes, made a MiB at a time (the test itself must not need the memory)."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # level 1: fast enough for 400 MiB
    mebibyte = bytes(1 << 20)
    parts = [compressor.compress(mebibyte) for _ in range(size >> 20)]
    return b"".join([*parts, compressor.flush()])


class _Handler(BaseHTTPRequestHandler):
    def __init__(self, routes: dict[str, Route], *args: object) -> None:
        self.routes = routes
        super().__init__(*args)

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        status, headers, body = self.routes.get(self.path, (404, {}, b""))
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading, as it should


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    """Base URL of the hostile server on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, _routes()))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _peak_memory_of(call) -> tuple[object, int]:
    """Run ``call`` and return its outcome (value or exception) and the peak of Python allocations meanwhile."""
    tracemalloc.start()
    try:
        outcome = call()
    except Exception as err:
        outcome = err
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return outcome, peak


# ---------------------------------------------------------------- decompression bombs


def test_stacked_gzip_bomb_is_refused_without_expanding(hostile: str) -> None:
    with SafeFetcher(hostile, POLICY) as fetcher:
        fetcher.fetch(hostile + "/gzip-page")  # the client's own setup (TLS context) is not the page's cost
        outcome, peak = _peak_memory_of(lambda: fetcher.fetch(hostile + "/stacked-gzip-bomb"))
    assert isinstance(outcome, FetchError) and "stacked content encodings" in str(outcome)
    assert peak < 10 * MAX_BYTES


def test_single_gzip_bomb_is_cut_at_the_decoded_budget(hostile: str) -> None:
    with SafeFetcher(hostile, POLICY) as fetcher:
        fetcher.fetch(hostile + "/gzip-page")
        page, peak = _peak_memory_of(lambda: fetcher.fetch(hostile + "/gzip-bomb"))
    assert page.truncated and len(page.body) == MAX_BYTES and page.body == bytes(MAX_BYTES)
    assert peak < 10 * MAX_BYTES  # 50 MiB once decoded


def test_compressed_pages_still_decode(hostile: str) -> None:
    with SafeFetcher(hostile, POLICY) as fetcher:
        for path in ("/gzip-page", "/deflate-page"):
            page = fetcher.fetch(hostile + path)
            assert page.body == PAGE and not page.truncated


def test_corrupt_and_unknown_encodings_are_fetch_errors(hostile: str) -> None:
    with SafeFetcher(hostile, POLICY) as fetcher:
        with pytest.raises(FetchError, match="corrupt"):
            fetcher.fetch(hostile + "/corrupt-gzip")
        with pytest.raises(FetchError, match="unsupported content encoding 'br'"):
            fetcher.fetch(hostile + "/brotli")


def test_browser_reports_bombs_as_text(hostile: str) -> None:
    with Browser(hostile + "/stacked-gzip-bomb", POLICY) as browser:
        view = browser.open_root()
    assert view.startswith("Cannot open") and "stacked content encodings" in view


# ---------------------------------------------------------------- broken pages become observations


@pytest.mark.parametrize("path", ["/bad-redirect", "/bad-redirect-port"])
def test_redirect_to_an_invalid_url_is_a_fetch_error(hostile: str, path: str) -> None:
    with SafeFetcher(hostile, POLICY) as fetcher:
        with pytest.raises(FetchError, match="Invalid"):
            fetcher.fetch(hostile + path)
    with Browser(hostile + path, POLICY) as browser:
        assert browser.open_root().startswith(f"Cannot open {hostile}{path}: could not fetch")


def test_unknown_charsets_still_render(hostile: str) -> None:
    with Browser(hostile + "/bogus-charset-html", POLICY) as browser:
        assert "# Fine page" in browser.open_root()
        assert "plain words" in browser.visit(hostile + "/bogus-charset-text")


def test_twenty_thousand_nested_tags_render_as_text(hostile: str) -> None:
    with Browser(hostile + "/deep-nesting", POLICY) as browser:
        view = browser.open_root()
    assert "deep text" in view


def test_malformed_links_are_skipped(hostile: str) -> None:
    with Browser(hostile + "/bad-links", POLICY) as browser:
        view = browser.open_root()
        assert f"[1] fine link -> {hostile}/fine.html" in view and "oops" not in view
        assert "No link matches" in browser.visit("//[::1")  # a malformed URL typed by the agent


def test_unexpected_failures_come_back_as_text(hostile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_renderer(fetched: object) -> None:
        raise RecursionError("a parser bug this kit does not know about")

    monkeypatch.setattr("tfgrpo_dspy.kits.web.browser.render_page", broken_renderer)
    with Browser(hostile + "/gzip-page", POLICY) as browser:
        view = browser.open_root()
    assert view == f"Cannot open {hostile}/gzip-page: the page could not be read (RecursionError)."
