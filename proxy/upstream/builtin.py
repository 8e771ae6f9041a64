"""The default transport: the built-in HTTP/1.1 client (`proxy.http1`).

A thin adapter: `send()` hands the request to `http1.Pool` and returns the
pool's own `http1.Response`, whose `read()` is the streaming hot path (one
call per socket read, no wrapper between it and the caller). Its failures
are http1's own classes, which `proxy.upstream.errors` maps.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy import http1
from proxy.http1.connection import Ends
from proxy.upstream.transport import Origin, Request


class BuiltinTransport:
    def __init__(
        self,
        *,
        limit: int = 512,
        queue_timeout: float = 5.0,
        keepalive: float = 30.0,
        on_change: Callable[[int, int], None] | None = None,
        max_per_origin: int | None = None,
        env_proxies: http1.EnvProxies | None = None,
    ) -> None:
        self._limit = limit
        self._queue_timeout = queue_timeout
        self._keepalive = keepalive
        self._on_change = on_change
        self._max_per_origin = max_per_origin
        self._env_proxies = env_proxies
        self._pool: http1.Pool | None = None
        self._origins: dict[Origin, http1.Origin] = {}
        self._own: dict[Ends, int] = {}  # the pool's, from start() on

    async def start(self) -> None:
        self._pool = http1.Pool(
            limit=self._limit,
            queue_timeout=self._queue_timeout,
            keepalive=self._keepalive,
            on_change=self._on_change,
            max_per_origin=self._max_per_origin,
            env_proxies=self._env_proxies,
            own_connections=self._own,
        )

    @property
    def own_connections(self) -> dict[Ends, int]:
        return self._own

    @property
    def in_flight(self) -> int:
        return self._pool.in_flight if self._pool is not None else 0

    @property
    def waiting(self) -> int:
        return self._pool.waiting if self._pool is not None else 0

    def load_tls(self) -> None:
        if self._pool is not None:
            self._pool.tls_context()

    async def send(self, request: Request) -> http1.Response:
        if self._pool is None:
            raise RuntimeError("the transport is not started")
        origin = self._origins.get(request.origin)
        if origin is None:
            o = request.origin
            origin = http1.Origin(o.scheme, o.host, o.port)
            if len(self._origins) < 1024:  # origins come from the config: a handful
                self._origins[o] = origin
        return await self._pool.request(
            origin,
            request.method,
            request.target,
            request.headers,
            request.body,
            connect_timeout=request.connect_timeout,
            idle_timeout=request.idle_timeout,
            proxy=request.proxy,
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
