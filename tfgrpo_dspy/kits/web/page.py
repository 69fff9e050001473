"""Turning a fetched page into what the agent reads: markdown text plus a numbered link list.

No JavaScript runs: scripts, styles and other non-content elements are dropped, the
rest is converted with markdownify. Anchors become plain text in the body (their
targets go to the link list instead, so long URLs do not eat the text budget).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urldefrag, urljoin, urlsplit

from bs4 import BeautifulSoup
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
    if fetched.content_type == "text/plain":
        text = fetched.body.decode(fetched.charset or "utf-8", errors="replace")
        return Page(fetched.url, "", text.strip(), (), fetched.truncated)
    soup = BeautifulSoup(fetched.body, "html.parser", from_encoding=fetched.charset)
    for tag in soup(NON_CONTENT_TAGS):
        tag.decompose()
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    base_tag = soup.find("base", href=True)
    base_url = urljoin(fetched.url, base_tag["href"]) if base_tag else fetched.url
    links = _extract_links(soup, base_url)
    content = soup.body or soup
    markdown = markdownify(str(content), heading_style="ATX", strip=["a", "img"])
    markdown = _BLANK_LINES.sub("\n\n", markdown).strip()
    return Page(fetched.url, title, markdown, links, fetched.truncated)


def _extract_links(soup: BeautifulSoup, base_url: str) -> tuple[Link, ...]:
    seen: dict[str, Link] = {}
    for anchor in soup.find_all("a", href=True):
        url, _fragment = urldefrag(urljoin(base_url, anchor["href"].strip()))
        if urlsplit(url).scheme not in ("http", "https") or url in seen:
            continue
        text = anchor.get_text(" ", strip=True) or anchor.get("title", "").strip() or url
        seen[url] = Link(" ".join(text.split()), url)
    return tuple(seen.values())
