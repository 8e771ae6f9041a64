"""The only package that talks to upstreams, and the one place where their
failures become proxy errors.

    transport.py  the seam: Origin, Request, the Response and Transport protocols
    builtin.py    the default transport, over proxy.http1 (a lean HTTP/1.1 client)
    aio.py        the aiohttp transport (`server.upstream_client: aiohttp`)
    mock.py       a transport without sockets, for tests
    errors.py     TransportError, its causes, and the map to proxy errors
    client.py     Upstream: routes -> requests over the configured transport
    headers.py    hop-by-hop headers

Flows in: a route, method, path, headers and body. Flows out: a response
(status, headers, body reads), or a ProxyError / UpstreamReadError.
Never: redirects followed, proxies taken from the environment, a key or a
path in a log line.
"""

from proxy.http1.connection import Ends
from proxy.upstream.buffered import BufferedResponse
from proxy.upstream.client import Upstream, check_client, open_transport
from proxy.upstream.errors import (
    Cause,
    TransportError,
    UpstreamReadError,
    cause_of,
    upstream_errors,
    upstream_read_errors,
)
from proxy.upstream.headers import HOP_BY_HOP, hop_by_hop, response_headers, strip_hop_by_hop
from proxy.upstream.mock import MockResponse, MockTransport
from proxy.upstream.transport import Origin, Request, Response, Transport

__all__ = [
    "HOP_BY_HOP",
    "BufferedResponse",
    "Cause",
    "Ends",
    "MockResponse",
    "MockTransport",
    "Origin",
    "Request",
    "Response",
    "Transport",
    "TransportError",
    "Upstream",
    "UpstreamReadError",
    "cause_of",
    "check_client",
    "hop_by_hop",
    "open_transport",
    "response_headers",
    "strip_hop_by_hop",
    "upstream_errors",
    "upstream_read_errors",
]
