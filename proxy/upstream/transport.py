"""The transport seam: what an upstream client must do, and the values that
cross it.

A `Transport` takes a `Request` (where to, method, target, headers, body,
timeouts) and returns a `Response` once the status and headers arrived; the
body is then read with `read()`, one item per arrival, b"" at the end.
`release()` gives the connection back (kept alive when the body was read to
its end, else closed); `close()` closes it at once.

Every transport behaves the same way, and one contract suite
(tests/transport/) holds them to it: redirects are not followed, the
environment's proxy settings are read only under `server.trust_env`, gzip
and deflate bodies are decoded at most a bounded piece per read, 1xx responses are skipped and a
101 is refused, the idle timeout bounds every wait for the next bytes (for
the head and between reads), and at most `limit` requests are in flight,
one more waiting at most the queue timeout for a slot.

Failures are `proxy.upstream.errors.TransportError` (or, for the built-in
client, its own classes, which `errors` knows): transports never make
proxy errors themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from proxy.http1.connection import Ends
from proxy.http1.egress import ProxyURL


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: scheme, host and port (defaults filled in)."""

    scheme: str  # "http" | "https"
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def address(self) -> str:
        """host:port, for log lines (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True, init=False)
class Request:
    origin: Origin
    method: str
    target: str  # path and query, sent as they are (no re-quoting)
    headers: list[tuple[str, str]]  # without Host and Content-Length (the transport's)
    body: bytes | None
    connect_timeout: float  # seconds for the connection (TCP and TLS)
    idle_timeout: float  # seconds of silence allowed, before the head and between reads
    proxy: ProxyURL | None = None  # the route's egress proxy (else the transport decides)

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
        connect_timeout: float,
        idle_timeout: float,
        proxy: ProxyURL | None = None,
    ) -> None:
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "headers", headers)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "connect_timeout", connect_timeout)
        object.__setattr__(self, "idle_timeout", idle_timeout)
        object.__setattr__(self, "proxy", proxy)


class Response(Protocol):
    """A response whose status and headers arrived (1xx ones skipped)."""

    status: int
    headers: list[tuple[str, str]]  # as received, in order, repeated names kept
    decoded: bool  # the body is decompressed here: its Content-Encoding no longer applies

    def header(self, name: str) -> str | None:
        """The first value of a header (`name` in lower case)."""
        ...

    async def read(self) -> bytes:
        """The body bytes that arrived since the last call; b"" at the end."""
        ...

    @property
    def complete(self) -> bool:
        """The whole body arrived and was read."""
        ...

    def release(self) -> None:
        """Done with the response: the connection is reused when the body
        was read to its end and the upstream keeps it alive, else closed;
        the request slot is freed. Idempotent."""
        ...

    def close(self) -> None:
        """Close the connection now (release() still frees the slot)."""
        ...


class Transport(Protocol):
    @property
    def own_connections(self) -> Mapping[Ends, int]:
        """The two ends ((host, port) here, (host, port) there) of each open
        connection, with a count, the same mapping for the transport's life:
        a request that arrives from one's near end at its far end came from
        this process (a loop). Both ends, since the kernel may give a
        connection to another address the same local port as one of these.
        Empty when the transport cannot tell."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests holding a slot (sent, response not yet released)."""
        ...

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        ...

    async def start(self) -> None:
        """Open pools (called in the running event loop, before any send)."""
        ...

    def load_tls(self) -> None:
        """Load the trust store now (it takes ~0.1 s), not on a first request."""
        ...

    async def send(self, request: Request) -> Response:
        """Send a request; return once the response's head arrived."""
        ...

    async def close(self) -> None:
        """Close every connection, idle or busy."""
        ...
