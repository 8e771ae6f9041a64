"""The proxy's upstream client: one per process, over the configured
transport (`server.upstream_client`), opened in the app's lifespan.

`Upstream.request(route, ...)` turns a route and a path into a `Request`,
asks for `gzip, deflate` in place of the client's Accept-Encoding (what
every transport decodes), sends it, and yields the response once its head
arrived; the response is released when the block ends (its connection back
to the pool when the body was read to the end, else closed). Failures
before the response are ProxyErrors, failures of reads UpstreamReadErrors,
both made in `proxy.upstream.errors` alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import os
from collections.abc import AsyncIterator, Callable

from yarl import URL

from proxy.config import Route, ServerModel
from proxy.errors import ConfigError, UpstreamError
from proxy.http1 import EnvProxies
from proxy.upstream.builtin import BuiltinTransport
from proxy.upstream.errors import (
    SEND_ERRORS,
    TRANSPORT_ERRORS,
    current_origin,
    send_failure,
    upstream_read_errors,
)
from proxy.upstream.transport import Origin, Request, Response, Transport

_DRAIN_ERRORS: tuple[type[Exception], ...] = (TimeoutError, *TRANSPORT_ERRORS)
# what the proxy asks upstreams for, and every transport decodes
_ACCEPT_ENCODING = ("accept-encoding", "gzip, deflate")


def check_client(name: str) -> None:
    """ConfigError when the upstream client `name` cannot run here (its
    optional package is not installed)."""
    if name == "aiohttp":
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            raise ConfigError(
                "server.upstream_client is aiohttp, but the aiohttp package is not "
                "installed: pip install 'reasoning-proxy[aiohttp]'"
            ) from None


def open_transport(
    server: ServerModel, on_load: Callable[[int, int], None] | None = None
) -> Transport:
    """The transport `server.upstream_client` names, with the server's request
    slots; `on_load(in_flight, waiting)` whenever either count changes."""
    limit, queue = server.upstream_max_in_flight, server.upstream_queue_timeout
    keepalive = server.upstream_keepalive_seconds
    # the environment's proxies only when the operator trusts it (the config checked them)
    env_proxies = EnvProxies.from_env(os.environ) if server.trust_env else None
    if server.upstream_client == "aiohttp":
        check_client("aiohttp")
        from proxy.upstream.aio import AiohttpTransport

        return AiohttpTransport(
            limit=limit,
            queue_timeout=queue,
            keepalive=keepalive,
            on_change=on_load,
            max_per_origin=server.upstream_max_connections_per_origin,
            env_proxies=env_proxies,
        )
    return BuiltinTransport(
        limit=limit,
        queue_timeout=queue,
        keepalive=keepalive,
        on_change=on_load,
        max_per_origin=server.upstream_max_connections_per_origin,
        env_proxies=env_proxies,
    )


class Upstream:
    """Requests to routes' upstreams over one transport. `queue_timeout` is
    the transport's wait for a request slot (a 503's Retry-After)."""

    def __init__(self, transport: Transport, *, queue_timeout: float = 5.0) -> None:
        self.transport = transport
        # a request from one of these came from this process (a route back to it)
        self.own_connections = transport.own_connections
        self._origins: dict[str, Origin] = {}
        self._targets: dict[tuple[str, str], str] = {}
        # whole seconds, at least one: the wait that just failed was this long
        self._retry_after = str(max(1, math.ceil(queue_timeout)))

    async def start(self) -> None:
        await self.transport.start()

    async def close(self) -> None:
        await self.transport.close()

    def load_tls(self) -> None:
        """Load the system's trust store ahead of the first HTTPS request."""
        self.transport.load_tls()

    @property
    def in_flight(self) -> int:
        """Upstream requests holding a slot (sent, response not yet released)."""
        return self.transport.in_flight

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return self.transport.waiting

    def _origin(self, base: str) -> Origin:
        origin = self._origins.get(base)
        if origin is None:
            url = URL(base, encoded=True)
            if url.raw_host is None or url.port is None:
                raise ValueError("the upstream URL has no host")
            origin = Origin(url.scheme, url.raw_host, url.port)
            self._origins[base] = origin  # one per route
        return origin

    def _target(self, base: str, path: str) -> str:
        key = (base, path)
        target = self._targets.get(key)
        if target is None:
            # built once per route and path (URL parsing is not free); bounded,
            # as pass-through paths carry query strings.
            # encoded=True: the path goes as the client wrote it (no re-quoting,
            # no dot-segment resolution; pass-through refuses dot segments)
            target = URL(base + path, encoded=True).raw_path_qs
            if len(self._targets) < 1024:
                self._targets[key] = target
        return target

    def request(
        self,
        route: Route,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
    ) -> contextlib.AbstractAsyncContextManager[Response]:
        """Send a request to the route's upstream: `async with` it for the
        response, once its head arrived. `path` is appended to the route's
        base URL."""
        origin = self._origin(route.upstream)  # the config checked the URL
        try:
            target = self._target(route.upstream, path)
        except ValueError as exc:
            raise send_failure(exc, origin, self._retry_after) from None
        sent = [(k, v) for k, v in headers if k.lower() != "accept-encoding"]
        sent.append(_ACCEPT_ENCODING)
        return self.send(
            Request(
                origin,
                method,
                target,
                sent,
                body,
                route.connect_timeout,
                route.idle_timeout,
                route.upstream_proxy,
            )
        )

    def send(self, request: Request) -> contextlib.AbstractAsyncContextManager[Response]:
        """Send `request` as it is; yields the response once its head arrived,
        releases it when the block ends."""
        return _Sent(self, request)

    @staticmethod
    async def chunks(response: Response) -> AsyncIterator[bytes]:
        """The body as it arrives, one item per read (of a compressed body, a
        bounded piece each)."""
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
        except _DRAIN_ERRORS:
            response.close()

    @staticmethod
    async def read_all(response: Response, limit: int) -> bytes:
        """The whole body, at most `limit` bytes (UpstreamError past it)."""
        parts: list[bytes] = []
        size = 0
        with upstream_read_errors():
            while data := await response.read():
                size += len(data)
                if size > limit:
                    raise UpstreamError(
                        "The upstream's response is larger than limits.max_response_bytes.",
                        code="upstream_response_too_large",
                    )
                parts.append(data)
        return b"".join(parts)  # (one part comes back as it is)


class _Sent:
    """`Upstream.send`'s block (a class, not a generator-based context
    manager: it runs once per upstream request)."""

    __slots__ = ("_request", "_response", "_token", "_upstream")
    _response: Response
    _token: contextvars.Token[Origin | None]

    def __init__(self, upstream: Upstream, request: Request) -> None:
        self._upstream = upstream
        self._request = request

    async def __aenter__(self) -> Response:
        request = self._request
        try:
            response = await self._upstream.transport.send(request)
        except SEND_ERRORS as exc:
            raise send_failure(exc, request.origin, self._upstream._retry_after) from None
        self._response = response
        self._token = current_origin.set(request.origin)  # named by read failures' log lines
        return response

    async def __aexit__(self, *exc_info: object) -> None:
        current_origin.reset(self._token)
        # back to the pool when the body was read to the end, else closed
        self._response.release()
