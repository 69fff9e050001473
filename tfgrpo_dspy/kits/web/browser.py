"""A per-question browser: the state (current page, history, visited pages) behind the agent's tools.

One `Browser` serves one question in one thread; the agent program creates a fresh one
on every call, so parallel rollouts never share state. Tool methods return text for
the agent and never raise: refusals and errors come back as a short explanation.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from tfgrpo_dspy.kits.web.fetch import FetchError, FetchPolicy, Resolver, SafeFetcher
from tfgrpo_dspy.kits.web.page import Link, Page, join_url, render_page

logger = logging.getLogger(__name__)

_NUMBER = re.compile(r"^\[?\s*(\d+)\s*\]?$")


class Browser:
    """Browses one site starting at ``root_url`` under a `FetchPolicy`.

    Args:
        root_url: the site's start page; every visited page must belong to its host.
        policy: network limits (default `FetchPolicy()`: public addresses only).
        page_chars: budget of page text shown per page view.
        max_links: number of links listed per page view.
        resolver: host name -> addresses (tests inject one; default: the system resolver).
    """

    def __init__(
        self,
        root_url: str,
        policy: FetchPolicy | None = None,
        page_chars: int = 4000,
        max_links: int = 40,
        resolver: Resolver | None = None,
    ):
        if not isinstance(root_url, str) or not root_url.strip():
            raise ValueError(f"root_url must be a non-empty URL string, got {root_url!r}")
        if page_chars <= 0:
            raise ValueError(f"page_chars must be positive, got {page_chars}")
        if max_links <= 0:
            raise ValueError(f"max_links must be positive, got {max_links}")
        self.root_url = root_url.strip()
        self.page_chars = page_chars
        self.max_links = max_links
        self._fetcher = SafeFetcher(self.root_url, policy, resolver)
        self._pages: dict[str, Page] = {}  # requested or final URL -> page, so revisits cost nothing
        self._history: list[Page] = []
        self.visited: list[str] = []  # final URLs in visit order, for traces and feedback

    @property
    def current(self) -> Page | None:
        return self._history[-1] if self._history else None

    def close(self) -> None:
        self._fetcher.close()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tools(self) -> list[Callable[..., str]]:
        """The agent's tools, bound to this browser."""
        return [self.visit, self.back]

    def open_root(self) -> str:
        """Open the root page and return its view (or why it could not be opened)."""
        return self._open(self.root_url)

    def visit(self, link: str | int) -> str:
        """Open a page of this site by link number (e.g. "3"), link text or URL; shows text and links."""
        target = self._resolve_link(str(link))
        if target is None:
            return (
                f"No link matches {link!r} on the current page. "
                "Use a link number from the list, the exact link text, or a URL on this site."
            )
        return self._open(target)

    def back(self) -> str:
        """Go back to the previous page and show it again."""
        if len(self._history) < 2:
            return "There is no previous page." + (f"\n\n{self._view(self.current)}" if self.current else "")
        self._history.pop()
        return self._view(self.current)

    def _open(self, url: str) -> str:
        page = self._pages.get(url)
        if page is None:
            try:
                page = render_page(self._fetcher.fetch(url))
            except FetchError as err:
                logger.info("visit %s failed: %s", url, err)
                return f"Cannot open {url}: {err}"
            except Exception as err:  # whatever a hostile page triggers must reach the agent as text
                logger.warning("visit %s failed unexpectedly", url, exc_info=True)
                return f"Cannot open {url}: the page could not be read ({type(err).__name__})."
            self._pages[url] = self._pages[page.url] = page
        self._history.append(page)
        self.visited.append(page.url)
        return self._view(page)

    def _view(self, page: Page) -> str:
        return page.view(self.page_chars, self.max_links, is_allowed_link=self._is_allowed_link)

    def _is_allowed_link(self, url: str) -> bool:
        return self._fetcher.is_site_url(url)

    def _site_links(self, page: Page) -> list[Link]:
        return [link for link in page.links if self._is_allowed_link(link.url)]

    def _resolve_link(self, link: str) -> str | None:
        """A link number, link text or URL -> the URL to open (None if nothing matches)."""
        link = link.strip().strip("\"'")
        page = self.current
        links = self._site_links(page) if page else []
        if match := _NUMBER.match(link):
            index = int(match.group(1))
            return links[index - 1].url if 1 <= index <= len(links) else None
        if "://" in link:
            return link
        if link.startswith("/"):
            return join_url(page.url if page else self.root_url, link)
        wanted = link.casefold()
        by_text = [x for x in links if x.text.casefold() == wanted]
        if not by_text:
            by_text = [x for x in links if wanted and wanted in x.text.casefold()]
        if not by_text:  # a relative URL such as "team.html", as written in the link list
            by_text = [x for x in links if wanted and x.url.casefold().endswith("/" + wanted.lstrip("./"))]
        return by_text[0].url if by_text else None
