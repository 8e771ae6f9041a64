"""The pool: keep-alive connections per origin, a bounded number of requests
in flight, and the `Response` a request returns."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Callable

from proxy.http1.connect import HAPPY_EYEBALLS_DELAY, Resolver, open_socket, resolve
from proxy.http1.connection import Connection
from proxy.http1.errors import ConnectFailed, ConnectTimeout, Disconnected, PoolTimeout
from proxy.http1.request import Origin, encode_request


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
    """Keep-alive connections per origin, at most `limit` requests in flight
    (from sending one until its response is released). A request that finds
    every slot taken waits, first come first served, at most `queue_timeout`
    seconds for one, then fails with PoolTimeout before anything is sent.
    `in_flight` and `waiting` count them; `on_change(in_flight, waiting)`,
    when given, is called whenever either changes.

    A request that fails on a reused connection before any byte of its
    response arrived (the upstream closed the idle connection as the
    request went out) is sent again, once, on a new connection; `retried`
    counts them. Never after a response byte, never when the connection was
    new, never after a timeout.

    New connections go to a host's addresses with staggered attempts
    (`connect.py`: happy eyeballs, `happy_eyeballs_delay` apart);
    `resolver` replaces the event loop's getaddrinfo."""

    def __init__(
        self,
        *,
        limit: int = 512,
        queue_timeout: float = 5.0,
        keepalive: float = 30.0,
        on_change: Callable[[int, int], None] | None = None,
        resolver: Resolver = resolve,
        happy_eyeballs_delay: float = HAPPY_EYEBALLS_DELAY,
    ) -> None:
        self._limit = asyncio.Semaphore(limit)
        self._resolver = resolver
        self._happy_eyeballs_delay = happy_eyeballs_delay
        self._queue_timeout = queue_timeout
        self._on_change = on_change
        self.in_flight = 0
        self.waiting = 0
        self.retried = 0
        self._keepalive = keepalive
        self._idle: dict[tuple[str, str, int], deque[Connection]] = {}
        self._in_use: set[Connection] = set()
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

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
    ) -> Response:
        """Send a request; return once the response's headers arrived."""
        if self._closed:
            raise RuntimeError("the pool is closed")
        data = encode_request(method, target, origin, headers, body)
        if self._limit.locked():
            await self._queue()
        else:
            await self._limit.acquire()  # at once
        self.in_flight += 1
        self._changed()
        head_only = method == "HEAD"
        conn: Connection | None = None
        try:
            conn = self._reuse(origin)
            if conn is not None:
                try:
                    await self._exchange(conn, data, head_only, idle_timeout)
                except Disconnected:
                    if conn.received:
                        raise
                    self._in_use.discard(conn)
                    conn.abandon()
                    conn = None
                    self.retried += 1
            if conn is None:
                conn = await self._connect(origin, connect_timeout)
                await self._exchange(conn, data, head_only, idle_timeout)
        except BaseException:
            if conn is not None:
                self._in_use.discard(conn)
                conn.abandon()
            self._release_slot()
            raise
        return Response(conn, self, idle_timeout)

    async def _exchange(
        self, conn: Connection, data: bytes, head_only: bool, idle_timeout: float
    ) -> None:
        """Send the request on `conn`; return once the response's head arrived."""
        self._in_use.add(conn)
        conn.send(data, head_only)
        await conn.wait_headers(idle_timeout)

    async def _queue(self) -> None:
        """Wait for a free slot, at most the queue timeout."""
        self.waiting += 1
        self._changed()
        try:
            async with asyncio.timeout(self._queue_timeout):
                await self._limit.acquire()
        except TimeoutError:
            raise PoolTimeout(f"no free request slot in {self._queue_timeout:g} s") from None
        finally:
            self.waiting -= 1
            self._changed()

    def _release_slot(self) -> None:
        self._limit.release()
        self.in_flight -= 1
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.in_flight, self.waiting)

    def release(self, conn: Connection) -> None:
        if conn not in self._in_use:
            return
        self._in_use.discard(conn)
        self._release_slot()
        if conn.reusable() and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin.key, deque()).append(conn)
        else:
            conn.abandon()

    def _reuse(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin.key)
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

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context of every HTTPS connection (the system's trust
        store, made on first use)."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(self, origin: Origin, within: float) -> Connection:
        loop = asyncio.get_running_loop()
        context = self.tls_context() if origin.tls else None
        try:
            async with asyncio.timeout(within):
                sock = await open_socket(
                    origin.host,
                    origin.port,
                    resolver=self._resolver,
                    delay=self._happy_eyeballs_delay,
                )
                # the transport owns the socket from here, and closes it on failure
                _, conn = await loop.create_connection(
                    lambda: Connection(origin, loop),
                    sock=sock,
                    ssl=context,
                    server_hostname=origin.host if context is not None else None,
                )
        except TimeoutError:
            raise ConnectTimeout(f"no connection to the upstream in {within:g} s") from None
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ConnectFailed(f"cannot connect to the upstream: {exc}") from None
        return conn

    async def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.abandon()
        self._idle.clear()
        for conn in list(self._in_use):
            conn.abandon()
        self._in_use.clear()
