"""Turning a fetched page into what the agent reads: markdown text plus a numbered link list.

No JavaScript runs: scripts, styles and other non-content elements are dropped, the
rest is converted with markdownify. Anchors become plain text in the body (their
targets go to the link list instead, so long URLs do not eat the text budget).
Hostile pages still render: an unknown charset falls back to detection (UTF-8 for
plain text), malformed link targets are skipped, and a tree nested too deeply for
markdownify's recursion is shown as plain text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit

from bs4 import BeautifulSoup, Tag
from markdownify import markdownify

from tfgrpo_dspy.kits.web.fetch import FetchedPage

NON_CONTENT_TAGS = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed")
_BLANK_LINES = re.compile(r"\n\s*\n(\s*\n)+")


@dataclass(frozen=True)
class Link:
    text: str
    url: str


@dataclass(frozen=True)
class Page:
    """A readable page: final URL, title, markdown body and its outgoing http(s) links."""

    url: str
    title: str
    markdown: str
    links: tuple[Link, ...]
    truncated: bool = False

    def view(self, max_chars: int, max_links: int, is_allowed_link: Callable[[str], bool] | None = None) -> str:
        """The text shown to the agent: header, body cut to ``max_chars``, numbered links.

        ``is_allowed_link(url) -> bool`` hides links the browser would refuse (other sites).
        """
        body = self.markdown
        if len(body) > max_chars:
            body = body[:max_chars].rstrip() + f"\n[... page text cut at {max_chars} characters]"
        if self.truncated:
            body += "\n[... page was larger than the download limit; only its start was read]"
        links = [link for link in self.links if is_allowed_link is None or is_allowed_link(link.url)]
        shown = links[:max_links]
        lines = [f"URL: {self.url}", f"Title: {self.title or '(none)'}", "", body or "(no text)", ""]
        lines.append(f"Links ({len(links)} on this site):" if links else "Links: none on this site.")
        lines.extend(f"[{i}] {link.text} -> {link.url}" for i, link in enumerate(shown, start=1))
        if len(links) > len(shown):
            lines.append(f"[... {len(links) - len(shown)} more links not shown]")
        return "\n".join(lines)


def render_page(fetched: FetchedPage) -> Page:
    """Parse a fetched HTML or plain-text body into a `Page`."""
    charset = _known_charset(fetched.charset)
    if fetched.content_type == "text/plain":
        text = fetched.body.decode(charset or "utf-8", errors="replace")
        return Page(fetched.url, "", text.strip(), (), fetched.truncated)
    soup = BeautifulSoup(fetched.body, "html.parser", from_encoding=charset)
    for tag in soup(NON_CONTENT_TAGS):
        tag.decompose()
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    base_tag = soup.find("base", href=True)
    base_url = (join_url(fetched.url, base_tag["href"]) if base_tag else None) or fetched.url
    links = _extract_links(soup, base_url)
    markdown = _BLANK_LINES.sub("\n\n", _to_markdown(soup.body or soup)).strip()
    return Page(fetched.url, title, markdown, links, fetched.truncated)


def _known_charset(charset: str | None) -> str | None:
    """``charset`` if Python decodes text with it, else None: a page may declare anything."""
    if not charset:
        return None
    try:
        b"?".decode(charset, errors="replace")  # empty input would skip the codec lookup
    except (LookupError, ValueError):
        return None
    return charset


def _to_markdown(content: Tag) -> str:
    try:
        return markdownify(str(content), heading_style="ATX", strip=["a", "img"])
    except RecursionError:  # markdownify recurses once per nesting level; thousands of nested tags exceed it
        return content.get_text("\n", strip=True)


def join_url(base_url: str, href: str) -> str | None:
    """``href`` resolved against ``base_url``; None when it is malformed (e.g. an unclosed IPv6 bracket)."""
    try:
        return urljoin(base_url, href.strip())
    except ValueError:
        return None


def _extract_links(soup: BeautifulSoup, base_url: str) -> tuple[Link, ...]:
    seen: dict[str, Link] = {}
    for anchor in soup.find_all("a", href=True):
        joined = join_url(base_url, anchor["href"])
        if joined is None:
            continue
        url, _fragment = urldefrag(joined)
        if urlsplit(url).scheme not in ("http", "https") or url in seen:
            continue
        text = anchor.get_text(" ", strip=True) or anchor.get("title", "").strip() or url
        seen[url] = Link(" ".join(text.split()), url)
    return tuple(seen.values())
