"""The pool: keep-alive connections per origin, a bounded number of requests
in flight, and the `Response` a request returns."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable, Hashable

from proxy.http1.connect import HAPPY_EYEBALLS_DELAY, Resolver, open_connection, resolve
from proxy.http1.connection import Connection, Ends
from proxy.http1.egress import EnvProxies, ProxyURL, proxy_for
from proxy.http1.errors import (
    ConnectFailed,
    ConnectTimeout,
    Disconnected,
    HTTPClientError,
    ResponseTimeout,
)
from proxy.http1.gate import Gate
from proxy.http1.request import Origin, encode_request
from proxy.http1.slots import Slots


class Response:
    """A response whose status and headers arrived; the body is read with
    `read()` (one item per socket read). On `release()` the connection goes
    back to the pool when the whole response has arrived (read or not) and
    the upstream keeps it alive; else it is closed."""

    __slots__ = ("_conn", "_idle_timeout", "_pool", "decoded", "headers", "status")

    def __init__(self, conn: Connection, pool: Pool, idle_timeout: float) -> None:
        self._conn = conn
        self._pool = pool
        self._idle_timeout = idle_timeout
        self.status = conn.status
        self.headers = conn.headers
        self.decoded = conn.decoded  # Content-Encoding no longer applies

    def header(self, name: str) -> str | None:
        """The first value of a header (`name` in lower case)."""
        return self._conn.header(name)

    async def read(self) -> bytes:
        return await self._conn.read(self._idle_timeout)

    @property
    def complete(self) -> bool:
        """The whole body arrived and was read (decoded to its end)."""
        conn = self._conn
        return conn.complete and not conn.unread

    def release(self) -> None:
        self._pool.release(self._conn)

    def close(self) -> None:
        self._conn.abandon()


class Pool:
    """Keep-alive connections per origin, and request slots.

    Slots (`slots.py`): at most `limit` requests in flight (from sending
    one until its response is released), and at most `max_per_origin` to
    one origin; a request that finds none waits at most `queue_timeout`
    seconds, then fails with PoolTimeout before anything is sent.
    `in_flight` and `waiting` count requests; `on_change(in_flight,
    waiting)`, when given, is called whenever either changes.

    Idle connections: the most recently used is taken first; one idle for
    `keepalive` seconds is closed, by a sweep timed to the next expiry
    (there is a timer only while connections are idle), and checked for the
    upstream's close before reuse. A request that fails on a reused
    connection before any byte of its response arrived (the upstream closed
    the idle connection as the request went out) is sent again, once, on a
    new connection; `retried` counts them. Never after a response byte,
    never when the connection was new, never after a timeout.

    New connections go to a host's addresses with staggered attempts
    (`connect.py`: happy eyeballs, `happy_eyeballs_delay` apart);
    `resolver` replaces the event loop's getaddrinfo; `tls` the default TLS
    context (the system's trust store).

    A request goes through the egress proxy `proxy_for` names (`egress.py`):
    the request's own `proxy`, else one of `env_proxies` (the environment's,
    given only when the operator trusts it); never for a loopback upstream.
    Connections through a proxy are pooled apart from direct ones, and per
    proxy."""

    def __init__(
        self,
        *,
        limit: int = 512,
        queue_timeout: float = 5.0,
        keepalive: float = 30.0,
        on_change: Callable[[int, int], None] | None = None,
        max_per_origin: int | None = None,
        resolver: Resolver = resolve,
        happy_eyeballs_delay: float = HAPPY_EYEBALLS_DELAY,
        env_proxies: EnvProxies | None = None,
        tls: ssl.SSLContext | None = None,
        own_connections: dict[Ends, int] | None = None,
    ) -> None:
        self._slots = Slots(limit, queue_timeout, on_change)
        self._max_per_origin = max_per_origin
        self._origin_slots: dict[Hashable, Gate] = {}
        self.retried = 0
        self._keepalive = keepalive
        self._idle: dict[Hashable, deque[Connection]] = {}
        self._sweep_timer: asyncio.TimerHandle | None = None
        # busy connections, with the origin slot each holds
        self._in_use: dict[Connection, Gate | None] = {}
        self._env_proxies = env_proxies
        self._vias: dict[tuple[Hashable, ProxyURL | None], ProxyURL | None] = {}
        self._resolver = resolver
        self._happy_eyeballs_delay = happy_eyeballs_delay
        self._ssl = tls
        self._closed = False
        # the local (host, port) of every open connection, with a count: a
        # request arriving from one of them came from this very process
        self.own_connections = {} if own_connections is None else own_connections

    async def request(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
        *,
        connect_timeout: float,
        idle_timeout: float,
        proxy: ProxyURL | None = None,
    ) -> Response:
        """Send a request; return once the response's headers arrived.
        `proxy`: the egress proxy of the request's route, if it has one."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        key: Hashable = origin.key
        via = None
        if proxy is not None or self._env_proxies is not None:
            via = self._via(origin, proxy)
            if via is not None:
                key = (origin.key, via)
                if not origin.tls:  # plain HTTP: the proxy reads the request (an https
                    # one goes through a CONNECT tunnel, never this way)
                    target = f"http://{origin.host_header}{target}"
                    if via.authorization is not None:
                        headers = [*headers, ("proxy-authorization", via.authorization)]
        data = encode_request(method, target, origin, headers, body)
        slot = await self._take_slots(origin.key)
        head_only = method == "HEAD"
        conn: Connection | None = None
        try:
            conn = self._reuse(key)
            if conn is not None:
                try:
                    await self._exchange(conn, slot, data, head_only, idle_timeout)
                except Disconnected:
                    if conn.received:
                        raise
                    del self._in_use[conn]
                    conn.abandon()
                    conn = None
                    self.retried += 1
            if conn is None:
                conn = await self._connect(key, origin, via, connect_timeout)
                await self._exchange(conn, slot, data, head_only, idle_timeout)
        except BaseException:
            if conn is not None:
                self._in_use.pop(conn, None)
                conn.abandon()
            self._slots.give(slot)
            raise
        return Response(conn, self, idle_timeout)

    def _via(self, origin: Origin, proxy: ProxyURL | None) -> ProxyURL | None:
        """The proxy of requests to `origin` (None: direct), decided once."""
        way = (origin.key, proxy)
        if way in self._vias:
            return self._vias[way]
        via = proxy_for(origin, proxy, self._env_proxies)
        if len(self._vias) < 1024:  # origins and proxies come from the config: a handful
            self._vias[way] = via
        return via

    async def _exchange(
        self,
        conn: Connection,
        slot: Gate | None,
        data: bytes,
        head_only: bool,
        idle_timeout: float,
    ) -> None:
        """Send the request on `conn`; return once the response's head arrived."""
        self._in_use[conn] = slot
        conn.send(data, head_only)
        await conn.wait_headers(idle_timeout)

    # -- request slots ---------------------------------------------------------------

    async def _take_slots(self, origin: Hashable) -> Gate | None:
        """A slot of the origin's (returned, when there is a limit) and one of
        the pool's, waiting at most the queue timeout for both."""
        slot = None
        if self._max_per_origin is not None:
            slot = self._origin_slots.get(origin)
            if slot is None:
                slot = self._origin_slots[origin] = Gate(self._max_per_origin)
        await self._slots.take(slot)
        return slot

    @property
    def in_flight(self) -> int:
        return self._slots.in_flight

    @property
    def waiting(self) -> int:
        return self._slots.waiting

    # -- idle connections --------------------------------------------------------------

    def release(self, conn: Connection) -> None:
        if conn not in self._in_use:
            return
        self._slots.give(self._in_use.pop(conn))
        if conn.reusable() and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.key, deque()).append(conn)
            if self._sweep_timer is None:
                self._sweep_at(conn.idle_since + self._keepalive)
        else:
            conn.abandon()

    def _reuse(self, key: Hashable) -> Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        cutoff = time.monotonic() - self._keepalive
        while idle and (idle[0].closed or idle[0].idle_since < cutoff):
            idle.popleft().abandon()  # the oldest first: expired or closed by the server
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest still open
            if conn.alive():
                return conn
            conn.abandon()
        return None

    def _sweep_at(self, when: float) -> None:
        loop = asyncio.get_running_loop()
        delay = max(when - time.monotonic(), 0.05)
        self._sweep_timer = loop.call_later(delay, self._sweep)

    def _sweep(self) -> None:
        """Close the idle connections that expired or were closed; come back
        at the next expiry while any are left."""
        self._sweep_timer = None
        cutoff = time.monotonic() - self._keepalive
        next_expiry = None
        for key, idle in list(self._idle.items()):
            while idle and (idle[0].closed or idle[0].idle_since <= cutoff):
                idle.popleft().abandon()
            if idle:
                oldest = idle[0].idle_since + self._keepalive
                next_expiry = oldest if next_expiry is None else min(next_expiry, oldest)
            else:
                del self._idle[key]
        if next_expiry is not None and not self._closed:
            self._sweep_at(next_expiry)

    @property
    def idle(self) -> int:
        """Idle connections kept for reuse."""
        return sum(len(idle) for idle in self._idle.values())

    # -- connections ---------------------------------------------------------------------

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context of every HTTPS connection: the pool's `tls`, else
        the system's trust store (made on first use)."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(
        self, key: Hashable, origin: Origin, via: ProxyURL | None, within: float
    ) -> Connection:
        context = self.tls_context() if origin.tls else None
        try:
            async with asyncio.timeout(within):
                return await open_connection(
                    key,
                    origin,
                    via,
                    tls=context,
                    within=within,
                    resolver=self._resolver,
                    delay=self._happy_eyeballs_delay,
                    own=self.own_connections,
                )
        except (TimeoutError, ResponseTimeout):
            raise ConnectTimeout(f"no connection to the upstream in {within:g} s") from None
        except ConnectFailed:
            raise
        except HTTPClientError as cut:  # the proxy's answer to CONNECT was cut or unreadable
            # (each handler's name is its own: compiled, a name has one type)
            raise ConnectFailed(f"no tunnel through the proxy: {cut}") from None
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ConnectFailed(f"cannot connect to the upstream: {exc}") from None

    async def close(self) -> None:
        self._closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        conns = [conn for idle in self._idle.values() for conn in idle]
        conns += self._in_use
        self._idle.clear()
        self._in_use.clear()
        for conn in conns:
            conn.abort()
        # Let their connection_lost run while the loop is still there (a TLS
        # transport's close takes a few loop turns; after the loop closed, it
        # would fail with "Event loop is closed").
        for _ in range(100):
            if all(conn.lost or conn.transport is None for conn in conns):
                break
            await asyncio.sleep(0.01)
