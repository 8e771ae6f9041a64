"""A lean HTTP/1.1 client for upstream requests: asyncio protocol + httptools.

The proxy's streaming path spends most of its time moving bytes from the
upstream socket to the normalizer. aiohttp does that with several Python calls
per HTTP chunk (its stream reader's bookkeeping); this client hands the parser
(httptools, llhttp in C) the socket's bytes and keeps the body pieces of one
read in a list, so a read of 200 chunked events costs one wake-up and one join.
Measured on one core against the bench upstream, 32 concurrent streams of 200
events (`bench/clients.py`): 1.1-1.4 us of CPU per event here, 3.9-5.3 us
with aiohttp, 44 us with httpx (README, Benchmarks).

What it does: keep-alive connections pooled per origin (most recently used
first, closed after `keepalive` seconds idle), at most `limit` requests in
flight with a bounded wait for a free slot, TLS with the system's trust
store, a connect timeout and an idle timeout (the longest wait for the next
bytes, before and after the status line), gzip/deflate response bodies
decoded at most `DECODE_LIMIT` bytes per read (a small body that inflates to
gigabytes costs one read's worth of memory at a time), flow control (reading
pauses while `HIGH_WATER` bytes wait unread, and while compressed bytes wait
in the decoder).
What it does not: redirects, proxies from the environment, HTTP/2, request
bodies streamed from a generator. Errors are the classes below; `upstream.py`
turns them into the proxy's own.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

import httptools

HIGH_WATER = 1 << 20  # unread body bytes at which reading pauses
LOW_WATER = 1 << 18
MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one response
DECODE_LIMIT = 256 * 1024  # decoded bytes one read() returns at most (compressed bodies)


class HTTPClientError(Exception):
    """Base of this module's errors."""


class ConnectFailed(HTTPClientError):
    """No connection: refused, unresolvable, TLS handshake failed."""


class ConnectTimeout(HTTPClientError):
    """No connection within the connect timeout."""


class ResponseTimeout(HTTPClientError):
    """Nothing arrived within the idle timeout."""


class Disconnected(HTTPClientError):
    """The connection closed before the response was complete."""


class BadResponse(HTTPClientError):
    """The upstream's bytes are not an HTTP/1.1 response we can read."""


class PoolTimeout(HTTPClientError):
    """No request slot came free within the queue timeout (nothing was sent)."""


class Origin:
    """Where requests go: scheme, host, port (the pool's key)."""

    __slots__ = ("host", "host_header", "key", "port", "tls")

    def __init__(self, scheme: str, host: str, port: int | None) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {scheme!r}")
        self.tls = scheme == "https"
        self.host = host
        self.port = port if port is not None else (443 if self.tls else 80)
        shown = f"[{host}]" if ":" in host else host
        default = self.port == (443 if self.tls else 80)
        self.host_header = shown if default else f"{shown}:{self.port}"
        self.key = (scheme, host, self.port)


def encode_request(
    method: str, target: str, origin: Origin, headers: list[tuple[str, str]], body: bytes | None
) -> bytes:
    """The request's bytes. ValueError for a header that could split the
    message (CR or LF in a name or value) or is not encodable."""
    lines = [f"{method} {target} HTTP/1.1", f"host: {origin.host_header}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    text = "\r\n".join(lines)
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
        raise ValueError("a header name or value holds a line break")
    if any(not name or ":" in name or " " in name for name, _ in headers):
        raise ValueError("invalid header name")
    head = text.encode("utf-8") + b"\r\n\r\n"
    return head + body if body else head


class _Connection(asyncio.Protocol):
    """One upstream connection and the response being read on it."""

    __slots__ = (
        "_body",
        "_buffered",
        "_decoder",
        "_head_bytes",
        "_head_only",
        "_loop",
        "_paused",
        "_raw_head",
        "_waiter",
        "closed",
        "complete",
        "decoded",
        "error",
        "headers",
        "headers_done",
        "idle_since",
        "keep_alive",
        "origin",
        "parser",
        "status",
        "transport",
    )

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.origin = origin
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[bool] | None = None
        self._reset(False)

    def _reset(self, head_only: bool) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False  # read at the headers (the parser forgets it at the end)
        self.error: HTTPClientError | None = None
        self._head_only = head_only
        self._head_bytes = 0
        self._raw_head = 0
        self._body: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._decoder: _Decoder | None = None
        self.decoded = False  # the body is decompressed here

    # -- asyncio callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.complete or self.error is not None:
            if data.strip():  # bytes after a complete response: not reusable
                self._close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadResponse("the upstream switched protocols"))
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, HTTPClientError) else BadResponse(str(exc)))
        except httptools.HttpParserError as exc:
            self._fail(BadResponse(f"malformed response: {exc}"))
        if not self.headers_done and self.error is None:
            self._raw_head += len(data)  # a head that never ends is bounded too
            if self._raw_head > 2 * MAX_HEAD_BYTES:
                self._fail(BadResponse("the upstream's response headers are too large"))
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.complete and self.error is None:
            if not self._framed():
                self.complete = True  # a body delimited by the close
            else:
                self.error = Disconnected("the upstream closed the connection mid-response")
        elif not self.headers_done and self.error is None:
            self.error = Disconnected("the upstream closed the connection without a response")
        self._wake()

    def pause_writing(self) -> None:  # request bodies are written whole
        pass

    def resume_writing(self) -> None:
        pass

    # -- httptools callbacks --------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise BadResponse("bytes after the end of the response")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise BadResponse("the upstream's response headers are too large")
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status == 101:
            raise BadResponse("the upstream switched protocols")
        if 100 <= status < 200:
            self.headers = []  # informational (100, 103): the real response follows
            self._head_bytes = 0
            return
        self.status = status
        self.headers_done = True
        self.keep_alive = self.parser.should_keep_alive()
        encoding = self.header("content-encoding")
        if encoding is not None:
            encoding = encoding.strip().lower()
            if encoding in ("gzip", "x-gzip"):
                self._decoder = _Decoder(16 + zlib.MAX_WBITS)
            elif encoding == "deflate":
                self._decoder = _Decoder(None)
            self.decoded = self._decoder is not None
        if self._head_only:
            self.complete = True
            self._close()  # the parser would wait for a body; the connection is spent

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        if self.headers_done:
            self.complete = True

    # -- for the pool and the response ------------------------------------------------

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def _framed(self) -> bool:
        """The body has a length or chunked encoding (else the close ends it)."""
        if self.header("content-length") is not None:
            return True
        encoding = self.header("transfer-encoding")
        return encoding is not None and "chunked" in encoding.lower()

    def send(self, data: bytes, head_only: bool) -> None:
        assert self.transport is not None
        if self._paused:  # released with its last body unread
            self.transport.resume_reading()
        self._reset(head_only)
        self.transport.write(data)

    async def wait_headers(self, idle: float) -> None:
        while not self.headers_done:
            if self.error is not None:
                raise self.error
            await self._wait(idle)

    async def read(self, idle: float) -> bytes:
        """The body bytes that arrived since the last call (of a compressed
        body, at most DECODE_LIMIT decoded bytes); b"" at the end."""
        if self._decoder is not None:
            return await self._read_decoded(self._decoder, idle)
        while not self._body:
            if self.complete:
                return b""
            if self.error is not None:
                raise self.error
            await self._wait(idle)
        return self._take()

    def _take(self) -> bytes:
        """The body bytes waiting unread, all of them (reading resumes)."""
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def _read_decoded(self, decoder: _Decoder, idle: float) -> bytes:
        # Compressed bytes leave the buffer only when the decoder has given all
        # it can from the last ones: until then the buffer stays as full as it
        # is, reading stays paused past HIGH_WATER, and no read waits on the
        # socket while decoded output is still to come.
        try:
            while True:
                if decoder.ready():
                    data = decoder.decode()
                    if data:
                        return data
                elif self._body:
                    decoder.feed(self._take())
                elif self.complete:
                    self._decoder = None
                    return decoder.flush()
                elif self.error is not None:
                    raise self.error
                else:
                    await self._wait(idle)
        except zlib.error:
            self._fail(BadResponse("the upstream's compressed body is corrupt"))
            assert self.error is not None
            raise self.error from None

    async def _wait(self, idle: float) -> None:
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_later(idle, _expire, waiter)
        try:
            woken = await waiter
        finally:
            timer.cancel()
            self._waiter = None
        if not woken:
            self._fail(ResponseTimeout(f"nothing from the upstream in {idle:g} s"))

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def _fail(self, error: HTTPClientError) -> None:
        if self.error is None:
            self.error = error
        self._close()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def reusable(self) -> bool:
        return self.complete and not self.closed and self.keep_alive

    def abandon(self) -> None:
        self._close()


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


class _Decoder:
    """A gzip or deflate body, decoded at most DECODE_LIMIT bytes per call.

    `feed()` hands over compressed bytes; `decode()` returns the next piece
    of output while `ready()` says one can come without more input: the
    input is not used up, or the last piece filled the limit (zlib may hold
    more output for input it already took). Once neither holds, the output
    so far is complete and `flush()` at the end of the body gives at most a
    few bytes. `Content-Encoding: deflate` is zlib-wrapped by the standard
    and raw deflate from some servers: its first two bytes decide.
    """

    __slots__ = ("_input", "_more", "_pos", "_zlib")

    def __init__(self, wbits: int | None) -> None:
        self._zlib: Any = None if wbits is None else zlib.decompressobj(wbits)
        self._input = b""
        self._pos = 0  # how much of _input went to zlib
        self._more = False

    def feed(self, data: bytes) -> None:
        rest = self._input[self._pos :]  # one byte of deflate, at most
        self._input = rest + data if rest else data
        self._pos = 0
        if self._zlib is None and len(self._input) >= 2:
            self._start(self._input)

    def ready(self) -> bool:
        return self._more or (self._zlib is not None and self._pos < len(self._input))

    def decode(self) -> bytes:
        inflate = self._zlib
        if inflate.eof:  # bytes after the end of the compressed data are ignored
            self._input, self._pos, self._more = b"", 0, False
            return b""
        # at most DECODE_LIMIT bytes of input too: zlib copies what it leaves
        piece = memoryview(self._input)[self._pos : self._pos + DECODE_LIMIT]
        data = bytes(inflate.decompress(piece, DECODE_LIMIT))
        self._pos += len(piece) - len(inflate.unconsumed_tail)
        if self._pos == len(self._input):
            self._input, self._pos = b"", 0
        self._more = len(data) == DECODE_LIMIT
        return data

    def flush(self) -> bytes:
        if self._zlib is None:  # a body of one byte: too short to tell
            if not self._input:
                return b""
            inflate = self._start(self._input)
            return self.decode() + bytes(inflate.flush())
        return bytes(self._zlib.flush())

    def _start(self, head: bytes) -> Any:
        wrapped = len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
        self._zlib = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return self._zlib


class Response:
    """A response whose status and headers arrived; the body is read with
    `read()` (one item per socket read). On `release()` the connection goes
    back to the pool when the whole response has arrived (read or not) and
    the upstream keeps it alive; else it is closed."""

    __slots__ = ("_conn", "_idle_timeout", "_pool", "decoded", "headers", "status")

    def __init__(self, conn: _Connection, pool: Pool, idle_timeout: float) -> None:
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
        return conn.complete and not conn._body and conn._decoder is None

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
    when given, is called whenever either changes."""

    def __init__(
        self,
        *,
        limit: int = 512,
        queue_timeout: float = 5.0,
        keepalive: float = 30.0,
        on_change: Callable[[int, int], None] | None = None,
    ) -> None:
        self._limit = asyncio.Semaphore(limit)
        self._queue_timeout = queue_timeout
        self._on_change = on_change
        self.in_flight = 0
        self.waiting = 0
        self._keepalive = keepalive
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._in_use: set[_Connection] = set()
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
        conn: _Connection | None = None
        try:
            conn = self._reuse(origin) or await self._connect(origin, connect_timeout)
            self._in_use.add(conn)
            conn.send(data, head_only=method == "HEAD")
            await conn.wait_headers(idle_timeout)
        except BaseException:
            if conn is not None:
                self._in_use.discard(conn)
                conn.abandon()
            self._release_slot()
            raise
        return Response(conn, self, idle_timeout)

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

    def release(self, conn: _Connection) -> None:
        if conn not in self._in_use:
            return
        self._in_use.discard(conn)
        self._release_slot()
        if conn.reusable() and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin.key, deque()).append(conn)
        else:
            conn.abandon()

    def _reuse(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin.key)
        if not idle:
            return None
        cutoff = time.monotonic() - self._keepalive
        while idle and (idle[0].closed or idle[0].idle_since < cutoff):
            idle.popleft().abandon()  # the oldest first: expired or closed by the server
        while idle:
            conn = idle.pop()  # the most recently used: the likeliest still open
            if not conn.closed:
                return conn
        return None

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context of every HTTPS connection (the system's trust
        store, made on first use)."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(self, origin: Origin, within: float) -> _Connection:
        loop = asyncio.get_running_loop()
        context = self.tls_context() if origin.tls else None
        try:
            async with asyncio.timeout(within):
                _, conn = await loop.create_connection(
                    lambda: _Connection(origin, loop),
                    origin.host,
                    origin.port,
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
