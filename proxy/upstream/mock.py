"""A transport without sockets, for tests: a handler answers each request.

    def handler(request: Request) -> MockResponse:
        return MockResponse(200, [("content-type", "application/json")], b"{}")

    runtime = Runtime(config, transport=MockTransport(handler))

The handler (a function, or a coroutine function) gets the `Request` and
returns a `MockResponse` whose body is bytes or a sequence of pieces, each
read separately; a `TransportError` among the pieces is raised at that
read (a stream that breaks). A handler that raises a `TransportError` fails
the request before the response (`TransportError("refused")`,
`TransportError("idle_timeout")`, ...). `requests` keeps every request sent.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence

from proxy.http1.connection import Ends
from proxy.upstream.errors import TransportError
from proxy.upstream.transport import Request


class MockResponse:
    __slots__ = ("_pieces", "closed", "decoded", "headers", "released", "status")

    def __init__(
        self,
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | Sequence[bytes | TransportError] = b"",
    ) -> None:
        self.status = status
        self.headers = list(headers)
        self.decoded = False
        pieces = [body] if isinstance(body, bytes) else body
        self._pieces = [p for p in pieces if p != b""]  # b"" is the end
        self._pieces.reverse()  # popped from the end
        self.released = False
        self.closed = False

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    async def read(self) -> bytes:
        if self.closed:
            raise TransportError("reset", "the connection was closed")
        if not self._pieces:
            return b""
        piece = self._pieces.pop()
        if isinstance(piece, TransportError):
            self._pieces.clear()
            self.closed = True
            raise piece
        return piece

    @property
    def complete(self) -> bool:
        return not self._pieces and not self.closed

    def release(self) -> None:
        self.released = True
        if self._pieces:
            self.closed = True

    def close(self) -> None:
        self.closed = True


Handler = Callable[[Request], MockResponse | Awaitable[MockResponse]]


class MockTransport:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.own_connections: dict[Ends, int] = {}  # no sockets
        self.requests: list[Request] = []
        self.in_flight = 0
        self.waiting = 0

    async def start(self) -> None:
        pass

    def load_tls(self) -> None:
        pass

    async def send(self, request: Request) -> MockResponse:
        self.requests.append(request)
        answer = self.handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    async def close(self) -> None:
        pass
