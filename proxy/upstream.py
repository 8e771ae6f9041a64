"""The only module that talks to upstreams (aiohttp) and converts its errors.

One pooled `aiohttp.ClientSession` per process, opened in the app's lifespan.
Redirects are never followed, the environment's proxy settings are not read
(only the config chooses where requests go), and every aiohttp or socket
exception is turned into a ProxyError here: 502 when the upstream cannot be
reached, 504 when it goes quiet for longer than the route's idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator

import aiohttp
from yarl import URL

from proxy.config import Route
from proxy.errors import UpstreamError, UpstreamTimeout

# Headers that belong to one connection, not to the message (RFC 9110 7.6.1),
# plus the ones the proxy sets itself.
HOP_BY_HOP = frozenset(
    {
        "connection",
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


def strip_hop_by_hop(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers minus hop-by-hop ones, including those named in Connection."""
    pairs = list(headers)
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return [(n, v) for n, v in pairs if n.lower() not in HOP_BY_HOP and n.lower() not in named]


class UpstreamReadError(Exception):
    """Reading the body failed after the response started."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind  # "timeout" | "disconnected"


@contextlib.contextmanager
def upstream_read_errors() -> Iterator[None]:
    """Around reads of a response body: aiohttp's errors become UpstreamReadError."""
    try:
        yield
    except (TimeoutError, aiohttp.ServerTimeoutError):
        raise UpstreamReadError("timeout") from None
    except (aiohttp.ClientError, OSError):
        raise UpstreamReadError("disconnected") from None


class Upstream:
    """A pooled HTTP client for upstream requests."""

    def __init__(self, *, pool_size: int = 512) -> None:
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None
        self._targets: dict[tuple[str, str, float, float], tuple[URL, aiohttp.ClientTimeout]] = {}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._pool_size,
            limit_per_host=0,
            keepalive_timeout=30,
            ttl_dns_cache=60,
            enable_cleanup_closed=True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            auto_decompress=True,
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @contextlib.asynccontextmanager
    async def request(
        self,
        route: Route,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Send a request to the route's upstream; yields the response once its
        headers arrived. `path` is appended to the route's base URL."""
        if self._session is None:
            raise RuntimeError("the upstream client is not started")
        key = (route.upstream, path, route.connect_timeout, route.idle_timeout)
        cached = self._targets.get(key)
        if cached is None:
            # built once per route and path (URL parsing is not free); bounded,
            # as pass-through paths carry query strings
            cached = (
                URL(route.upstream + path, encoded=False),
                aiohttp.ClientTimeout(
                    total=None,
                    connect=None,
                    sock_connect=route.connect_timeout,
                    sock_read=route.idle_timeout,
                ),
            )
            if len(self._targets) < 1024:
                self._targets[key] = cached
        url, timeout = cached
        try:
            response = await self._session.request(
                method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=timeout,
                compress=None,
            )
        except (TimeoutError, aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(
                "The upstream did not answer within the route's timeout.", code="upstream_timeout"
            ) from None
        except (aiohttp.ClientError, OSError, ValueError):
            raise UpstreamError(
                "The upstream could not be reached.", code="upstream_unreachable"
            ) from None
        try:
            yield response
        finally:
            # back to the pool when the body was read to the end, else closed
            response.release()

    @staticmethod
    async def chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The body as it arrives, one item per socket read."""
        content = response.content
        with upstream_read_errors():
            while True:
                data = await content.readany()
                if not data:
                    return
                yield data

    @staticmethod
    async def drain(response: aiohttp.ClientResponse, limit: float) -> None:
        """Read what is left of a body (after [DONE], the chunked terminator)
        so the connection can go back to the pool; give up after `limit` seconds."""
        try:
            async with asyncio.timeout(limit):
                while await response.content.readany():
                    pass
        except (TimeoutError, aiohttp.ClientError, OSError):
            response.close()

    @staticmethod
    async def read_all(response: aiohttp.ClientResponse, limit: int) -> bytes:
        """The whole body, at most `limit` bytes (UpstreamError past it)."""
        parts: list[bytes] = []
        size = 0
        async for data in Upstream.chunks(response):
            size += len(data)
            if size > limit:
                raise UpstreamError(
                    "The upstream's response is larger than limits.max_response_bytes.",
                    code="upstream_response_too_large",
                )
            parts.append(data)
        return b"".join(parts)


def response_headers(response: aiohttp.ClientResponse) -> list[tuple[str, str]]:
    """The upstream's response headers worth passing on (the body was
    decompressed, so its encoding and length no longer apply)."""
    pairs: list[tuple[str, str]] = [(k, v) for k, v in response.headers.items()]
    return [(n, v) for n, v in strip_hop_by_hop(pairs) if n.lower() != "content-encoding"]
