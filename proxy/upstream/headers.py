"""Which headers cross the proxy: hop-by-hop ones never do."""

from __future__ import annotations

from collections.abc import Iterable

from proxy.upstream.transport import Response

# Headers that belong to one connection, not to the message (RFC 9110 7.6.1),
# plus the ones the proxy sets itself, and `Expect`: the proxy reads the
# whole body before sending it on (its server sent the client the 100
# Continue), so the expectation ends here; passed on, it would hold aiohttp's
# request waiting for an upstream's 100 that may never come.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def first_header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    """The first value of a header (`name` in lower case), as a `Response`'s
    `header()` gives it."""
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def hop_by_hop(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The (lower-case) names of `headers` that are hop-by-hop: HOP_BY_HOP,
    and those named in Connection."""
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            named.update(token.strip().lower() for token in value.split(","))
    return HOP_BY_HOP | named if named else HOP_BY_HOP


def strip_hop_by_hop(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, including those named in Connection."""
    pairs = headers if isinstance(headers, list) else list(headers)
    drop = hop_by_hop(pairs)
    return [(n, v) for n, v in pairs if n.lower() not in drop]


def response_headers(response: Response) -> list[tuple[str, str]]:
    """The upstream's response headers worth passing on (the body is passed
    on in its own framing, and decoded when it was gzip or deflate)."""
    headers = strip_hop_by_hop(response.headers)
    if response.decoded:
        return [(n, v) for n, v in headers if n.lower() != "content-encoding"]
    return headers
