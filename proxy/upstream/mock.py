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
from collections.abc import Awaitable, Callable

from proxy.http1.connection import Ends
from proxy.upstream.buffered import BufferedResponse
from proxy.upstream.transport import Request

# the tests' name for a response made of given bytes
MockResponse = BufferedResponse


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
