"""The network policy and the browser, against a local static site (offline)."""

from __future__ import annotations

import time

import pytest
from fixtures.web import site_server

from tfgrpo_dspy.kits.web.browser import Browser
from tfgrpo_dspy.kits.web.fetch import FetchError, FetchPolicy, FetchRefused, SafeFetcher

LOCAL = FetchPolicy(allowed_addresses={"127.0.0.1"}, max_bytes=50_000, timeout_s=1.0)



def test_policy_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_bytes"):
        FetchPolicy(max_bytes=0)
    with pytest.raises(ValueError, match="timeout_s"):
        FetchPolicy(timeout_s=0)
    with pytest.raises(ValueError, match="allowed_addresses"):
        FetchPolicy(allowed_addresses={"not-an-ip"})
    with pytest.raises(TypeError, match="allowed_addresses"):
        FetchPolicy(allowed_addresses="127.0.0.1")
    with pytest.raises(ValueError, match="site_url"):
        SafeFetcher("ftp://example.org/")
    with pytest.raises(ValueError, match="site_url"):
        SafeFetcher("http://host:abc/")


def test_loopback_refused_by_default_and_nothing_is_sent(site):
    with SafeFetcher(site.url("/")) as fetcher:
        before = len(site.requests)
        with pytest.raises(FetchRefused, match="127.0.0.1"):
            fetcher.fetch(site.url("/about.html"))
        assert len(site.requests) == before


@pytest.mark.parametrize(
    "address",
    ["10.1.2.3", "172.16.0.9", "192.168.1.1", "169.254.169.254", "127.0.0.2", "::1", "fe80::1",
     "::ffff:10.0.0.1", "100.64.0.1", "0.0.0.0",
     # special ranges some Python versions call global
     "192.0.0.8", "192.0.0.170", "fec0::1",
     # IPv6 forms that carry a private IPv4 address: compatible, translated, NAT64, 6to4, Teredo
     "::7f00:1", "::ffff:0:7f00:1", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b:1::a00:1",
     "2002:7f00:1::1", "2002:a9fe:a9fe::", "2001:0:a00:1::5db8:d822", "2001:0:5db8:d822::f5ff:fffe"],
)
def test_private_link_local_and_loopback_addresses_refused(address):
    # The resolver is faked: no connection is ever attempted to these addresses.
    with SafeFetcher("http://site.test/", resolver=lambda host, port: [address]) as fetcher:
        with pytest.raises(FetchRefused, match="private, loopback, link-local or reserved"):
            fetcher.check_url("http://site.test/page")


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "::ffff:93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1", "2606:4700::1"]
)
def test_public_addresses_pass_in_every_form(address):
    with SafeFetcher("http://site.test/", resolver=lambda host, port: [address]) as fetcher:
        assert fetcher.check_url("http://site.test/page")[1] == address


def test_every_resolved_address_is_checked():
    resolver = lambda host, port: ["93.184.216.34", "10.0.0.5"]  # noqa: E731
    with SafeFetcher("http://site.test/", resolver=resolver) as fetcher:
        with pytest.raises(FetchRefused, match="10.0.0.5"):
            fetcher.check_url("http://site.test/")
    public_only = lambda host, port: ["93.184.216.34"]  # noqa: E731
    with SafeFetcher("http://site.test/", resolver=public_only) as fetcher:
        parsed, address = fetcher.check_url("http://www.site.test/a")
        assert (parsed.host, address) == ("www.site.test", "93.184.216.34")


def test_connects_to_the_checked_address_with_the_original_host_header(site):
    # "site.test" resolves (once, via the injected resolver) to the checked loopback address;
    # the request must go there and carry the name in the Host header.
    calls = []

    def resolver(host, port):
        calls.append(host)
        return ["127.0.0.1"]

    with SafeFetcher(f"http://site.test:{site.port}/", LOCAL, resolver=resolver) as fetcher:
        page = fetcher.fetch(f"http://site.test:{site.port}/echo-host")
    assert f"Host header: site.test:{site.port}".encode() in page.body
    assert page.url == f"http://site.test:{site.port}/echo-host"
    assert calls == ["site.test"]
    assert site.requests[-1] == ("/echo-host", f"site.test:{site.port}")


def test_other_hosts_schemes_ports_and_credentials_refused(site):
    with SafeFetcher(site.url("/"), LOCAL) as fetcher:
        for url, reason in [
            ("http://example.com/", "outside the site"),
            ("file:///etc/passwd", "only http and https"),
            ("ftp://127.0.0.1/x", "only http and https"),
            ("http://127.0.0.1:1/", "port 1"),
            (f"http://user:pw@127.0.0.1:{site.port}/", "credentials"),
        ]:
            with pytest.raises(FetchRefused, match=reason):
                fetcher.fetch(url)


def test_subdomains_follow_the_policy():
    public = lambda host, port: ["93.184.216.34"]  # noqa: E731
    with SafeFetcher("https://www.example.org/", resolver=public) as fetcher:
        fetcher.check_url("https://docs.example.org/x")
        with pytest.raises(FetchRefused, match="outside the site"):
            fetcher.check_url("https://example.org.evil.net/")
    strict = FetchPolicy(allow_subdomains=False)
    with SafeFetcher("https://example.org/", strict, resolver=public) as fetcher:
        with pytest.raises(FetchRefused, match="outside the site"):
            fetcher.check_url("https://docs.example.org/x")


def test_redirects_are_rechecked_and_bounded(site):
    with SafeFetcher(site.url("/"), LOCAL) as fetcher:
        page = fetcher.fetch(site.url("/redirect-local"))
        assert page.url == site.url("/about.html")
        assert b"founded in 1987" in page.body
        with pytest.raises(FetchRefused, match="foreign.example.net"):
            fetcher.fetch(site.url("/redirect-foreign"))
        before = len(site.requests)
        with pytest.raises(FetchError, match="more than 5 redirects"):
            fetcher.fetch(site.url("/redirect-loop"))
        assert len(site.requests) - before == LOCAL.max_redirects + 1


def test_oversize_page_is_cut_at_the_byte_budget(site):
    with SafeFetcher(site.url("/"), LOCAL) as fetcher:
        page = fetcher.fetch(site.url("/oversize"))
    assert page.truncated
    assert len(page.body) == LOCAL.max_bytes
    assert site_server.OVERSIZE_BYTES > LOCAL.max_bytes


def test_slow_and_dripping_pages_time_out(site):
    # /drip-headers: httpx's timeouts are per read, so a byte of headers every 0.05 s never tripped them.
    with SafeFetcher(site.url("/"), LOCAL) as fetcher:
        for path in ("/slow", "/drip", "/drip-headers"):
            start = time.monotonic()
            with pytest.raises(FetchError, match="timed out"):
                fetcher.fetch(site.url(path))
            assert time.monotonic() - start < LOCAL.timeout_s + 1.0


def test_only_text_content_types(site):
    with SafeFetcher(site.url("/"), LOCAL) as fetcher:
        with pytest.raises(FetchError, match="application/json"):
            fetcher.fetch(site.url("/data.json"))
        text = fetcher.fetch(site.url("/hours.txt"))
        assert text.content_type == "text/plain"
        with pytest.raises(FetchError, match="HTTP 404"):
            fetcher.fetch(site.url("/missing.html"))


def test_browser_renders_markdown_without_scripts_and_lists_site_links(site):
    with Browser(site.url("/"), LOCAL) as browser:
        view = browser.open_root()
    assert "# Welcome to the Riverside Institute" in view
    assert "MUST_NOT_APPEAR" not in view and "#123456" not in view
    assert f"[2] About us -> {site.url('/about.html')}" in view
    assert f"[4] Contact -> {site.url('/contact.html')}" in view  # fragment dropped
    assert "partner.example.com" not in view and "mailto:" not in view  # other sites are not offered
    assert "Links (4 on this site)" in view


def test_browser_follows_links_by_text_number_and_url_and_goes_back(site):
    with Browser(site.url("/"), LOCAL) as browser:
        browser.open_root()
        assert "founded in 1987" in browser.visit("about us")  # link text, any case
        team = browser.visit("[2]")  # number on the about page, not on the home page
        assert "Ada Lovelace" in team
        assert "Open day 2024" in browser.visit(site.url("/news/index.html"))
        assert "350 visitors" in browser.visit("Open day")  # unique part of a link text
        assert browser.back().startswith(f"URL: {site.url('/news/index.html')}")
        assert "No link matches 'Nowhere'" in browser.visit("Nowhere")
        assert "founded in 1987" in browser.visit(site.url("/about.html"))
        assert "Ada Lovelace" in browser.visit("team.html")  # a relative URL from the link list
        assert "Cannot open http://example.com/" in browser.visit("http://example.com/")
        assert browser.visited == [
            site.url("/"), site.url("/about.html"), site.url("/team.html"),
            site.url("/news/index.html"), site.url("/news/2024.html"),
            site.url("/about.html"), site.url("/team.html"),
        ]


def test_browser_cuts_page_text_to_its_budget(site):
    with Browser(site.url("/"), LOCAL, page_chars=200) as browser:
        view = browser.visit(site.url("/oversize"))
    assert "[... page text cut at 200 characters]" in view
    assert "only its start was read" in view
    assert len(view) < 800


def test_browser_rejects_bad_arguments():
    with pytest.raises(ValueError, match="root_url"):
        Browser("")
    with pytest.raises(ValueError, match="page_chars"):
        Browser("http://example.org/", page_chars=0)


def test_visit_tool_accepts_a_link_number_given_as_an_integer(site):
    import dspy

    with Browser(site.url("/"), LOCAL) as browser:
        browser.open_root()
        assert "founded in 1987" in dspy.Tool(browser.visit)(link=2)  # small models often send numbers
