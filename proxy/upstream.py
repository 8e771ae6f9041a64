"""The only module that talks to upstreams, and where their errors are converted.

One connection pool per process (`proxy.http1`, a lean HTTP/1.1 client),
opened in the app's lifespan. Redirects are never followed, the environment's
proxy settings are not read (only the config chooses where requests go), and
every client or socket error is turned into a ProxyError here: 502 when the
upstream cannot be reached, 504 when it goes quiet for longer than the
route's idle timeout, 503 with `Retry-After` when no request slot came free
within the queue timeout (`server.upstream_max_in_flight` requests in flight
and `server.upstream_queue_timeout`; nothing was sent).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from yarl import URL

from proxy import http1
from proxy.config import Route
from proxy.errors import UpstreamBusy, UpstreamError, UpstreamTimeout
from proxy.http1 import Response

__all__ = [
    "HOP_BY_HOP",
    "Response",
    "Upstream",
    "UpstreamReadError",
    "response_headers",
    "strip_hop_by_hop",
    "upstream_read_errors",
]

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
    """Around reads of a response body: client errors become UpstreamReadError."""
    try:
        yield
    except http1.ResponseTimeout:
        raise UpstreamReadError("timeout") from None
    except (http1.HTTPClientError, OSError):
        raise UpstreamReadError("disconnected") from None


# what the proxy asks upstreams for, and can decode
_ACCEPT_ENCODING = ("accept-encoding", "gzip, deflate")


class Upstream:
    """A pooled HTTP client for upstream requests: at most `pool_size` in
    flight; one more waits up to `queue_timeout` seconds for a slot.
    `on_load(in_flight, waiting)` is called whenever either count changes
    (for gauges that cannot be read at scrape time)."""

    def __init__(
        self,
        *,
        pool_size: int = 512,
        queue_timeout: float = 5.0,
        on_load: Callable[[int, int], None] | None = None,
    ) -> None:
        self._pool_size = pool_size
        self._queue_timeout = queue_timeout
        self._on_load = on_load
        self._pool: http1.Pool | None = None
        self._targets: dict[tuple[str, str], tuple[http1.Origin, str]] = {}
        # whole seconds, at least one: the wait that just failed was this long
        self._retry_after = str(max(1, math.ceil(queue_timeout)))

    async def start(self) -> None:
        self._pool = http1.Pool(
            limit=self._pool_size,
            queue_timeout=self._queue_timeout,
            keepalive=30.0,
            on_change=self._on_load,
        )

    @property
    def in_flight(self) -> int:
        """Upstream requests holding a slot (sent, response not yet released)."""
        return self._pool.in_flight if self._pool is not None else 0

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return self._pool.waiting if self._pool is not None else 0

    def load_tls(self) -> None:
        """Load the system's trust store ahead of the first HTTPS request."""
        if self._pool is not None:
            self._pool.tls_context()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _target(self, base: str, path: str) -> tuple[http1.Origin, str]:
        key = (base, path)
        cached = self._targets.get(key)
        if cached is None:
            # built once per route and path (URL parsing is not free); bounded,
            # as pass-through paths carry query strings
            # encoded=True: the path goes as the client wrote it (no re-quoting,
            # no dot-segment resolution; pass-through refuses dot segments)
            url = URL(base + path, encoded=True)
            if url.raw_host is None:
                raise ValueError("the upstream URL has no host")
            cached = (http1.Origin(url.scheme, url.raw_host, url.port), url.raw_path_qs)
            if len(self._targets) < 1024:
                self._targets[key] = cached
        return cached

    @contextlib.asynccontextmanager
    async def request(
        self,
        route: Route,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
    ) -> AsyncIterator[Response]:
        """Send a request to the route's upstream; yields the response once its
        headers arrived. `path` is appended to the route's base URL."""
        if self._pool is None:
            raise RuntimeError("the upstream client is not started")
        sent = [(k, v) for k, v in headers if k.lower() != "accept-encoding"]
        sent.append(_ACCEPT_ENCODING)
        try:
            origin, target = self._target(route.upstream, path)
            response = await self._pool.request(
                origin,
                method,
                target,
                sent,
                body,
                connect_timeout=route.connect_timeout,
                idle_timeout=route.idle_timeout,
            )
        except http1.PoolTimeout:
            raise UpstreamBusy(
                "The proxy has too many upstream requests in flight; retry later.",
                headers={"Retry-After": self._retry_after},
            ) from None
        except (http1.ConnectTimeout, http1.ResponseTimeout):
            raise UpstreamTimeout(
                "The upstream did not answer within the route's timeout.", code="upstream_timeout"
            ) from None
        except (http1.HTTPClientError, OSError, ValueError):
            raise UpstreamError(
                "The upstream could not be reached.", code="upstream_unreachable"
            ) from None
        try:
            yield response
        finally:
            # back to the pool when the body was read to the end, else closed
            response.release()

    @staticmethod
    async def chunks(response: Response) -> AsyncIterator[bytes]:
        """The body as it arrives, one item per socket read (of a compressed
        body, at most `http1.DECODE_LIMIT` decoded bytes each)."""
        with upstream_read_errors():
            while True:
                data = await response.read()
                if not data:
                    return
                yield data

    @staticmethod
    async def drain(response: Response, limit: float) -> None:
        """Read what is left of a body (after [DONE], the chunked terminator)
        so the connection can go back to the pool; give up after `limit` seconds."""
        if response.complete:
            return
        try:
            async with asyncio.timeout(limit):
                while await response.read():
                    pass
        except (TimeoutError, http1.HTTPClientError, OSError):
            response.close()

    @staticmethod
    async def read_all(response: Response, limit: int) -> bytes:
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


def response_headers(response: Response) -> list[tuple[str, str]]:
    """The upstream's response headers worth passing on (the body is passed
    on in its own framing, and decoded when it was gzip or deflate)."""
    headers = strip_hop_by_hop(response.headers)
    if response.decoded:
        return [(n, v) for n, v in headers if n.lower() != "content-encoding"]
    return headers
