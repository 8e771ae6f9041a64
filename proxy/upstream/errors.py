"""The one place where upstream failures become proxy errors.

Transports raise `TransportError(cause)`; the built-in client raises its
own classes (`proxy.http1`: its reads reach the caller with no layer in
between, so nothing translates them on the way), and `cause_of` knows those
too, and the OS and TLS errors under them. A cause is one of a few words,
used alike in the log line and in what the client is told:

    refused, unreachable, reset              502 upstream_unreachable
    dns                                      502 upstream_dns_failure
    tls                                      502 upstream_tls_failure
    connect_timeout                          504 upstream_connect_timeout
    idle_timeout                             504 upstream_timeout
    bad_response                             502 upstream_bad_response
    invalid_request                          502 upstream_request_invalid
    busy                                     503 upstream_busy (Retry-After)

Before the response (`upstream_errors`) a failure becomes a ProxyError;
while its body is read (`upstream_read_errors`), an UpstreamReadError whose
`kind` is "timeout" (idle_timeout), "malformed" (bad_response: a body that
cannot be read, a corrupt compressed one among them) or "disconnected" (the
others: a body cut before its end, a compressed one whose data stops short
among them). Each failure but `busy` (the proxy's
own queue, counted in metrics) logs one warning on "proxy.upstream" naming
the upstream's host:port and the cause; never a path, query, header or key.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import re
import socket
import ssl
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Literal

from proxy import http1
from proxy.errors import ProxyError, UpstreamBusy, UpstreamError, UpstreamTimeout
from proxy.upstream.transport import Origin

log = logging.getLogger("proxy.upstream")

Cause = Literal[
    "refused",
    "dns",
    "tls",
    "unreachable",
    "reset",
    "connect_timeout",
    "idle_timeout",
    "bad_response",
    "invalid_request",
    "busy",
]


class TransportError(Exception):
    """A transport's failure, by cause. `detail` is for debugging only: it
    may name addresses, and never reaches a client or a log line."""

    def __init__(self, cause: Cause, detail: str = "") -> None:
        super().__init__(f"{cause}: {detail}" if detail else cause)
        self.cause: Cause = cause
        self.detail = detail


class UpstreamReadError(Exception):
    """Reading the body failed after the response started."""

    def __init__(self, kind: str, cause: Cause | None = None) -> None:
        super().__init__(kind)
        self.kind = kind  # "timeout" | "malformed" | "disconnected"
        self.cause = cause


# What may come out of a transport's send() or a response's read().
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (TransportError, http1.HTTPClientError, OSError)
# and what send() raises for a request it cannot encode (nothing sent)
SEND_ERRORS: tuple[type[Exception], ...] = (*TRANSPORT_ERRORS, ValueError)

# The built-in client's classes (ConnectFailed is told apart by what caused it).
_HTTP1_CAUSES: dict[type[Exception], Cause] = {
    http1.ConnectTimeout: "connect_timeout",
    http1.ResponseTimeout: "idle_timeout",
    http1.Disconnected: "reset",
    http1.Truncated: "reset",  # a compressed body cut before its data's end
    http1.BadResponse: "bad_response",
    http1.PoolTimeout: "busy",
}

_ERRNO_CAUSES: dict[int, Cause] = {
    errno.ECONNREFUSED: "refused",
    errno.ECONNRESET: "reset",
    errno.ECONNABORTED: "reset",
    errno.EPIPE: "reset",
    errno.ETIMEDOUT: "connect_timeout",
}

_ERRNO = re.compile(r"\[Errno (\d+)\]")


def cause_of(exc: BaseException) -> Cause | None:
    """The cause a transport's exception stands for; None when it is not one."""
    if isinstance(exc, TransportError):
        return exc.cause
    if isinstance(exc, http1.HTTPClientError):
        if isinstance(exc, http1.ConnectFailed):
            # raised `from None` inside the handler of what went wrong
            return os_cause(exc.__context__) if exc.__context__ is not None else "unreachable"
        return _HTTP1_CAUSES.get(type(exc), "bad_response")
    if isinstance(exc, OSError):
        return os_cause(exc)
    if isinstance(exc, ValueError):
        return "invalid_request"  # a header or URL that cannot be encoded; nothing was sent
    return None


def os_cause(exc: BaseException) -> Cause:
    """The cause of a failed connection or read, from the OS or TLS error."""
    if isinstance(exc, socket.gaierror):
        return "dns"
    if isinstance(exc, ssl.SSLError | ssl.CertificateError):
        return "tls"
    if isinstance(exc, TimeoutError):
        return "connect_timeout"
    if isinstance(exc, OSError):
        code = exc.errno
        if code is None:
            # asyncio's create_connection over several addresses raises one
            # OSError("Multiple exceptions: [Errno 111] ..., [Errno 111] ...")
            codes = {int(n) for n in _ERRNO.findall(str(exc))}
            code = codes.pop() if len(codes) == 1 else None
        if code is not None:
            return _ERRNO_CAUSES.get(code, "unreachable")
        return "unreachable"
    return "unreachable"


# What the client is told, by cause (never an address: the cause class only).
_UNREACHABLE = "The upstream could not be reached"
_BEFORE: dict[Cause, tuple[type[UpstreamError], str, str]] = {
    "refused": (UpstreamError, "upstream_unreachable", f"{_UNREACHABLE} (connection refused)."),
    "dns": (UpstreamError, "upstream_dns_failure", f"{_UNREACHABLE} (DNS lookup failed)."),
    "tls": (UpstreamError, "upstream_tls_failure", f"{_UNREACHABLE} (TLS handshake failed)."),
    "unreachable": (UpstreamError, "upstream_unreachable", f"{_UNREACHABLE} (no route)."),
    "reset": (
        UpstreamError,
        "upstream_unreachable",
        f"{_UNREACHABLE} (connection reset or closed before a response).",
    ),
    "connect_timeout": (
        UpstreamTimeout,
        "upstream_connect_timeout",
        "The upstream did not accept a connection within the route's connect timeout "
        "(timeouts.connect).",
    ),
    "idle_timeout": (
        UpstreamTimeout,
        "upstream_timeout",
        "The upstream did not answer within the route's idle timeout (timeouts.idle).",
    ),
    "bad_response": (
        UpstreamError,
        "upstream_bad_response",
        "The upstream's response is not valid HTTP/1.1 (or switches protocols).",
    ),
    "invalid_request": (
        UpstreamError,
        "upstream_request_invalid",
        "The request cannot be sent upstream (a header or the URL cannot be encoded).",
    ),
}

# the upstream of the request in progress, for read failures' log lines
# (set by Upstream.send around its response, so the map needs no argument)
current_origin: ContextVar[Origin | None] = ContextVar("current_origin", default=None)


def proxy_error(cause: Cause, origin: Origin, retry_after: str) -> ProxyError:
    """The ProxyError for a failure before the response, logged once."""
    if cause == "busy":
        return UpstreamBusy(
            "The proxy has too many upstream requests in flight; retry later.",
            headers={"Retry-After": retry_after},
        )
    log.warning(
        "upstream %s failed before a response: %s",
        origin.address,
        cause,
        extra={"upstream": origin.address, "cause": cause},
    )
    kind, code, message = _BEFORE[cause]
    return kind(message, code=code)


def send_failure(exc: Exception, origin: Origin, retry_after: str) -> ProxyError:
    """The ProxyError for one of SEND_ERRORS, raised before the response."""
    return proxy_error(cause_of(exc) or "unreachable", origin, retry_after)


def read_error(cause: Cause) -> UpstreamReadError:
    """The UpstreamReadError for a failure while reading a body, logged once."""
    origin = current_origin.get()
    where = origin.address if origin is not None else "(unknown)"
    log.warning(
        "upstream %s failed mid-response: %s",
        where,
        cause,
        extra={"upstream": where, "cause": cause},
    )
    return UpstreamReadError(_READ_KINDS.get(cause, "disconnected"), cause)


# the kind of a failed body read, by cause ("disconnected" for the others)
_READ_KINDS: dict[Cause, str] = {"idle_timeout": "timeout", "bad_response": "malformed"}


@contextlib.contextmanager
def upstream_errors(origin: Origin, retry_after: str) -> Iterator[None]:
    """Around sending a request: a transport's failure becomes a ProxyError
    (502, 503 or 504)."""
    try:
        yield
    except SEND_ERRORS as exc:
        raise send_failure(exc, origin, retry_after) from None


@contextlib.contextmanager
def upstream_read_errors() -> Iterator[None]:
    """Around reads of a response body: a transport's failure becomes an
    UpstreamReadError."""
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise read_error(cause_of(exc) or "reset") from None
