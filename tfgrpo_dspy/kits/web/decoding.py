"""Reading a fetched body safely: its content type, and its content encoding decoded within a byte budget.

Decoded here, chunk by chunk, so a small compressed bomb never expands in memory; stacked content encodings
are refused. `tfgrpo_dspy.kits.web.fetch` feeds it the raw bytes as they arrive.
"""

from __future__ import annotations

import zlib

from tfgrpo_dspy.kits.web.errors import FetchError

# Content encodings decoded here, with their zlib window bits (deflate: a zlib stream; +32 also accepts gzip).
DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + zlib.MAX_WBITS}
ACCEPT_ENCODING = "gzip, deflate"


class BoundedDecoder:
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


def parse_content_type(header: str) -> tuple[str, str | None]:
    """A Content-Type header's media type (lower case) and its charset, if it names one."""
    media_type, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media_type.strip().lower(), charset
