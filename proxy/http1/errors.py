"""The client's errors: what went wrong, in terms a caller can map to its own."""

from __future__ import annotations


class HTTPClientError(Exception):
    """Base of this package's errors."""


class ConnectFailed(HTTPClientError):
    """No connection: refused, unresolvable, TLS handshake failed, refused by
    an egress proxy."""


class ConnectTimeout(HTTPClientError):
    """No connection within the connect timeout."""


class ResponseTimeout(HTTPClientError):
    """Nothing arrived within the idle timeout."""


class Disconnected(HTTPClientError):
    """The connection closed before the response was complete."""


class Truncated(Disconnected):
    """A compressed body ended before its compressed data did: the connection
    broke before the body's end, as with a plain body cut short."""


class BadResponse(HTTPClientError):
    """The upstream's bytes are not an HTTP/1.1 response we can read."""


class PoolTimeout(HTTPClientError):
    """No request slot came free within the queue timeout (nothing was sent)."""
