"""The aiohttp transport (`server.upstream_client: aiohttp`; the optional
extra `reasoning-proxy[aiohttp]`), for operators who prefer the maintained
library to the built-in client.

Configured to behave as the built-in client does: no redirects, the
built-in client's choice of egress proxy (`proxy_for`), no cookies kept
between requests (an upstream's Set-Cookie must not ride along with the
next client's request), no headers of its own (User-Agent, Accept, Content-Type),
gzip/deflate decoded in bounded pieces per read (`auto_decompress`), the
system's trust store for HTTPS (`SSL_CERT_FILE` honoured), the connect and
idle timeouts (`sock_read`: every wait for the next bytes, head included),
and request slots with a bounded wait (the built-in client's `Slots`;
aiohttp's own pool is left unbounded). aiohttp skips 1xx responses; a 101 is refused here. Its
exceptions become `TransportError`s here, at send and at each read.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

import aiohttp
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError
from yarl import URL

from proxy.http1.connection import Ends
from proxy.http1.egress import EnvProxies, proxy_for
from proxy.http1.errors import PoolTimeout
from proxy.http1.slots import Slots
from proxy.upstream.errors import Cause, TransportError, os_cause
from proxy.upstream.headers import first_header
from proxy.upstream.transport import Origin, Request

# the headers aiohttp would add to every request; the client's own go as they are
_SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
# the encodings aiohttp's auto_decompress decodes (br and zstd only with their
# libraries installed; without them such a body fails as a bad response)
_DECODED = frozenset({"gzip", "deflate", "br", "zstd"})
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


def _failure(exc: BaseException) -> TransportError:
    return TransportError(_cause(exc), f"{type(exc).__name__}: {exc}")


class AiohttpResponse:
    __slots__ = ("_content", "_released", "_response", "_slots", "decoded", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse, slots: Slots) -> None:
        self._response = response
        self._content = response.content
        self._slots = slots
        self._released = False
        self.status = response.status
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.raw_headers]
        encoding = self.header("content-encoding")
        self.decoded = encoding is not None and encoding.lower() in _DECODED

    def header(self, name: str) -> str | None:
        return first_header(self.headers, name)

    async def read(self) -> bytes:
        try:
            return await self._content.readany()
        except _ERRORS as exc:
            raise _failure(exc) from None

    @property
    def complete(self) -> bool:
        return self._content.at_eof()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._content.at_eof():
            self._response.release()  # kept alive, if the upstream allows
        else:
            self._response.close()
        self._slots.give()

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
        env_proxies: EnvProxies | None = None,
    ) -> None:
        self._slots = Slots(limit, queue_timeout, on_change)
        self._own: dict[Ends, int] = {}  # never filled: see own_connections
        self._env_proxies = env_proxies
        self._keepalive = keepalive
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._urls: dict[tuple[Origin, str], URL] = {}
        self._timeouts: dict[tuple[float, float], aiohttp.ClientTimeout] = {}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=self._keepalive)
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
            skip_auto_headers=_SKIP_AUTO_HEADERS,
            requote_redirect_url=False,
            timeout=aiohttp.ClientTimeout(total=None),
        )

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
        try:
            await self._slots.take()
        except PoolTimeout as exc:
            raise TransportError("busy", str(exc)) from None
        try:
            response = await session.request(
                request.method,
                self._url(request.origin, request.target),
                headers=request.headers,
                data=request.body,
                allow_redirects=False,
                timeout=self._timeout(request.connect_timeout, request.idle_timeout),
                ssl=self._tls_context() if request.origin.tls else True,
                proxy=f"http://{proxy.address}" if proxy is not None else None,
                proxy_headers=(
                    {"Proxy-Authorization": proxy.authorization}
                    if proxy is not None and proxy.authorization is not None
                    else None
                ),
            )
        except BaseException as exc:
            self._slots.give()
            if isinstance(exc, _ERRORS):
                raise _failure(exc) from None
            raise
        if response.status == 101:
            response.close()
            self._slots.give()
            raise TransportError("bad_response", "the upstream switched protocols")
        return AiohttpResponse(response, self._slots)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
