"""The aiohttp transport (`server.upstream_client: aiohttp`; the optional
extra `reasoning-proxy[aiohttp]`), for operators who prefer the maintained
library to the built-in client.

Configured to behave as the built-in client does: no redirects, the
built-in client's choice of egress proxy (`proxy_for`), no cookies kept
between requests (an upstream's Set-Cookie must not ride along with the
next client's request), no headers of its own (User-Agent, Accept, Content-Type),
gzip/deflate decoded in bounded pieces per read by the built-in client's
decoder (`proxy.http1.decoder`; aiohttp's own `auto_decompress` is off: it
reads a gzip body cut before its end as a whole one) and other encodings
passed on as they came, the
system's trust store for HTTPS (`SSL_CERT_FILE` honoured), the connect and
idle timeouts (`sock_read`: every wait for the next bytes, head included),
and request slots with a bounded wait, in all and per origin (the built-in
client's `Slots`; aiohttp's own pool is left unbounded). aiohttp skips 1xx
responses; a 101 is refused here. Its exceptions become `TransportError`s
here, at send and at each read. A request that a kept-alive connection's
close cut off before its response is sent again, once (aiohttp's own retry,
of idempotent methods on any connection, is turned off). Header values go
out as the bytes the client sent when those are UTF-8 (aiohttp writes UTF-8).

A body whose framing breaks after it started (a chunk size that is not
hex, in a later packet) makes aiohttp's C parser close the connection
without telling the body, which then waits for ever, its idle timer
stopped: the transport watches each connection's close, and ends such a
body there as the bad response it is.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
import zlib
from collections.abc import Awaitable, Callable
from types import SimpleNamespace

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError
from yarl import URL

from proxy.http1.connection import Ends
from proxy.http1.decoder import Decoder, decoder_for
from proxy.http1.egress import EnvProxies, ProxyURL, proxy_for
from proxy.http1.errors import PoolTimeout, Truncated
from proxy.http1.gate import Gate
from proxy.http1.slots import Slots
from proxy.upstream.errors import Cause, TransportError, os_cause
from proxy.upstream.headers import first_header
from proxy.upstream.transport import Origin, Request

# the headers aiohttp would add to every request; the client's own go as they are
_SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
_ERRORS = (aiohttp.ClientError, OSError, TimeoutError, ValueError)
_CUT_SHORT = (ContentLengthError, TransferEncodingError, OSError)


def _cause(exc: BaseException) -> Cause:
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect_timeout"
    if isinstance(exc, aiohttp.ServerTimeoutError | TimeoutError):
        return "idle_timeout"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "dns"
    if isinstance(exc, aiohttp.ClientSSLError):
        return "tls"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return os_cause(exc.os_error)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return "unreachable"  # the egress proxy refused the tunnel (a 407, no CONNECT)
    if isinstance(exc, aiohttp.ClientResponseError):
        return "bad_response"  # an unreadable head (aiohttp reports it as a 400)
    if isinstance(exc, aiohttp.ClientPayloadError):
        # a body cut short by the close, or one that cannot be read or decoded
        why = exc.__cause__
        return "reset" if why is None or isinstance(why, _CUT_SHORT) else "bad_response"
    if isinstance(exc, aiohttp.InvalidURL | ValueError):
        return "invalid_request"
    if isinstance(exc, OSError) and not isinstance(exc, aiohttp.ClientError):
        return os_cause(exc)
    return "reset"  # ServerDisconnectedError and the other connection errors


# what a kept-alive connection the upstream closed before answering raises
_CLOSED_UNANSWERED = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientOSError,
    aiohttp.ClientConnectionResetError,
)


class _Attempt:
    """One try of a request: whether aiohttp gave it a kept-alive connection."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _reused(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceConnectionReuseconnParams,
) -> None:
    attempt = context.trace_request_ctx
    if isinstance(attempt, _Attempt):
        attempt.reused = True


def _wire(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers as aiohttp is to write them. A value holds the client's bytes,
    one character each (latin-1), and aiohttp writes every value as UTF-8:
    one whose bytes are UTF-8 is given as the text they spell, so the same
    bytes go out; other bytes above 0x7F cannot be written unchanged, and go
    as their UTF-8 encoding (a limit of this client)."""
    if all(value.isascii() for _, value in headers):
        return headers
    wire: list[tuple[str, str]] = []
    for name, value in headers:
        if value.isascii():
            wire.append((name, value))
            continue
        try:
            text = value.encode("latin-1").decode("utf-8")
        except UnicodeError:
            text = value
        wire.append((name, text))
    return wire


def _failure(exc: BaseException) -> TransportError:
    return TransportError(_cause(exc), f"{type(exc).__name__}: {exc}")


# the body being read on each watched connection, by the future of its close
_Reading = dict["asyncio.Future[None]", "AiohttpResponse"]


class AiohttpResponse:
    __slots__ = (
        "_closed",
        "_content",
        "_decoder",
        "_gate",
        "_protocol",
        "_reading",
        "_released",
        "_response",
        "_slots",
        "decoded",
        "headers",
        "status",
    )

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        slots: Slots,
        gate: Gate | None,
        reading: _Reading,
        protocol: ResponseHandler | None = None,
        closed: asyncio.Future[None] | None = None,
    ) -> None:
        self._response = response
        self._content = response.content
        self._slots = slots
        self._gate = gate  # the origin's slot, returned with the request's
        self._reading = reading
        self._protocol = protocol
        self._closed = closed
        self._released = False
        self.status = response.status
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
        self._decoder: Decoder | None = decoder_for(self.header("content-encoding"))
        self.decoded = self._decoder is not None

    def header(self, name: str) -> str | None:
        return first_header(self.headers, name)

    async def read(self) -> bytes:
        decoder = self._decoder
        try:
            if decoder is None:
                return await self._content.readany()
            # as the built-in client's: compressed bytes are read only once
            # the decoder gave all it can from the last ones
            while True:
                if decoder.ready():
                    data = decoder.decode()
                    if data:
                        return data
                    continue
                data = await self._content.readany()
                if not data:
                    data = decoder.flush()
                    self._decoder = None
                    return data
                decoder.feed(data)
        except _ERRORS as exc:
            raise _failure(exc) from None
        except zlib.error:
            raise TransportError("bad_response", "the compressed body is corrupt") from None
        except Truncated:
            raise TransportError("reset", "the compressed body ended before its end") from None

    @property
    def complete(self) -> bool:
        return self._content.at_eof() and self._decoder is None

    def lost(self) -> None:
        """The connection closed: a body aiohttp left waiting (neither ended
        nor failed) fails here, as a bad response (the parser's error)."""
        content = self._content
        if content.exception() is not None or content.at_eof():
            return
        protocol = self._protocol
        why = protocol.exception() if protocol is not None else None
        failed = aiohttp.ClientPayloadError("the connection closed mid-body")
        failed.__cause__ = why
        content.set_exception(failed)

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._closed is not None:
            self._reading.pop(self._closed, None)
        if self.complete:
            self._response.release()  # kept alive, if the upstream allows
        else:
            self._response.close()
        self._slots.give(self._gate)

    def close(self) -> None:
        self._response.close()


class AiohttpTransport:
    def __init__(
        self,
        *,
        limit: int = 512,
        queue_timeout: float = 5.0,
        keepalive: float = 30.0,
        on_change: Callable[[int, int], None] | None = None,
        max_per_origin: int | None = None,
        env_proxies: EnvProxies | None = None,
    ) -> None:
        self._slots = Slots(limit, queue_timeout, on_change)
        self._max_per_origin = max_per_origin
        self._gates: dict[Origin, Gate] = {}  # each origin's slots, with a limit
        self._own: dict[Ends, int] = {}  # never filled: see own_connections
        self._env_proxies = env_proxies
        self._keepalive = keepalive
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._urls: dict[tuple[Origin, str], URL] = {}
        self._timeouts: dict[tuple[float, float], aiohttp.ClientTimeout] = {}
        # connections whose close is watched (once each), and their bodies being read
        self._watched: weakref.WeakSet[asyncio.Future[None]] = weakref.WeakSet()
        self._reading: _Reading = {}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=self._keepalive)
        tracing = aiohttp.TraceConfig()
        tracing.on_connection_reuseconn.append(_reused)
        session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,  # decoded in read(), as the built-in client does
            skip_auto_headers=_SKIP_AUTO_HEADERS,
            requote_redirect_url=False,
            timeout=aiohttp.ClientTimeout(total=None),
            trace_configs=[tracing],
        )
        # aiohttp sends a GET again after any close before the response, even
        # on a new connection; the retry is send()'s, as the built-in client's
        session._retry_connection = False
        self._session = session

    @property
    def own_connections(self) -> dict[Ends, int]:
        """Always empty: aiohttp does not say which local address a pooled
        connection has, so a route back to this proxy is not noticed."""
        return self._own

    @property
    def in_flight(self) -> int:
        return self._slots.in_flight

    @property
    def waiting(self) -> int:
        return self._slots.waiting

    def load_tls(self) -> None:
        self._tls_context()

    def _tls_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # reads SSL_CERT_FILE / SSL_CERT_DIR
        return self._ssl

    def _url(self, origin: Origin, target: str) -> URL:
        key = (origin, target)
        url = self._urls.get(key)
        if url is None:
            url = URL(f"{origin.scheme}://{origin.address}{target}", encoded=True)
            if len(self._urls) < 1024:  # pass-through targets carry query strings
                self._urls[key] = url
        return url

    def _timeout(self, connect: float, idle: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get((connect, idle))
        if timeout is None:
            timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_read=idle)
            self._timeouts[(connect, idle)] = timeout
        return timeout

    async def send(self, request: Request) -> AiohttpResponse:
        session = self._session
        if session is None:
            raise RuntimeError("the transport is not started")
        proxy = proxy_for(request.origin, request.proxy, self._env_proxies)
        gate = None
        if self._max_per_origin is not None:
            gate = self._gates.get(request.origin)
            if gate is None:
                gate = self._gates[request.origin] = Gate(self._max_per_origin)
        try:
            await self._slots.take(gate)
        except PoolTimeout as exc:
            raise TransportError("busy", str(exc)) from None
        try:
            attempt = _Attempt()
            try:
                response = await self._request(session, request, proxy, attempt)
            except _CLOSED_UNANSWERED as cut:
                # a kept-alive connection the upstream closed as the request
                # went out: once more, on another connection
                if not attempt.reused or _cause(cut) != "reset":
                    raise
                response = await self._request(session, request, proxy, _Attempt())
        except BaseException as exc:
            self._slots.give(gate)
            if isinstance(exc, _ERRORS):
                raise _failure(exc) from None
            raise
        if response.status == 101:
            response.close()
            self._slots.give(gate)
            raise TransportError("bad_response", "the upstream switched protocols")
        connection = response.connection  # None when the body already ended
        protocol = connection.protocol if connection is not None else None
        closed = protocol.closed if protocol is not None else None
        if closed is None or closed.done():
            return AiohttpResponse(response, self._slots, gate, self._reading)
        if closed not in self._watched:
            self._watched.add(closed)
            closed.add_done_callback(self._lost)
        body = AiohttpResponse(response, self._slots, gate, self._reading, protocol, closed)
        self._reading[closed] = body
        return body

    def _request(
        self,
        session: aiohttp.ClientSession,
        request: Request,
        proxy: ProxyURL | None,
        attempt: _Attempt,
    ) -> Awaitable[aiohttp.ClientResponse]:
        headers = _wire(request.headers)
        tunnel: dict[str, str] | None = None
        if proxy is not None and proxy.authorization is not None:
            # the proxy's credentials: on the CONNECT of an https upstream, on
            # the request itself to a plain one (which the proxy reads)
            if request.origin.tls:
                tunnel = {"Proxy-Authorization": proxy.authorization}
            else:
                headers = [*headers, ("Proxy-Authorization", proxy.authorization)]
        return session.request(
            request.method,
            self._url(request.origin, request.target),
            headers=headers,
            data=request.body,
            allow_redirects=False,
            timeout=self._timeout(request.connect_timeout, request.idle_timeout),
            ssl=self._tls_context() if request.origin.tls else True,
            proxy=f"http://{proxy.address}" if proxy is not None else None,
            proxy_headers=tunnel,
            trace_request_ctx=attempt,
        )

    def _lost(self, closed: asyncio.Future[None]) -> None:
        if not closed.cancelled():
            closed.exception()  # retrieved: its cause reaches the body, if any
        body = self._reading.pop(closed, None)
        if body is not None:
            body.lost()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
