"""What fetching a page raises: `FetchError` for every failure, `FetchRefused` when the policy forbids it."""

from __future__ import annotations


class FetchError(Exception):
    """A page could not be fetched (network error, HTTP error, unsupported content, time out)."""


class FetchRefused(FetchError):
    """The network policy forbids the request; nothing was sent."""
