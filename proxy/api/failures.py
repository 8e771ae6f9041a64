"""How an upstream failure shows on the chat path: the kind counted in
`reasoning_proxy_upstream_errors_total`, and the error a client gets when a
body read fails (an error event in a started stream, an HTTP error before)."""

from __future__ import annotations

from proxy.errors import ProxyError, UpstreamError, UpstreamTimeout
from proxy.reasoning.normalizer import StreamFailure
from proxy.upstream import UpstreamReadError

# stream failure code -> upstream error kind
FAILURE_KIND = {
    "malformed_upstream_event": "malformed",
    "upstream_line_too_long": "malformed",
    "upstream_empty_response": "malformed",
    "upstream_timeout": "timeout",
    "upstream_disconnected": "disconnected",
    "upstream_closed": "disconnected",
    "upstream_bad_response": "malformed",
}

# proxy error code -> upstream error kind (timeouts are told by their class)
_ERROR_KIND = {
    "upstream_unreachable": "connect",
    "upstream_dns_failure": "connect",
    "upstream_tls_failure": "connect",
    "upstream_redirect": "status",
    "upstream_busy": "busy",
    "upstream_disconnected": "disconnected",
    "upstream_bad_response": "malformed",
    "upstream_request_invalid": "connect",  # the request could not be written
}

IDLE_MESSAGE = "The upstream sent nothing within the route's idle timeout (timeouts.idle)."
UNREADABLE_MESSAGE = "The upstream's response body cannot be read (bad framing or encoding)."


def upstream_status(status: int) -> str | None:
    """The upstream error kind a response status is (None for none), once the
    status is in: a redirect is an error (redirects are not followed)."""
    if 300 <= status < 400:
        raise UpstreamError(
            "The upstream answered with a redirect; redirects are not followed.",
            code="upstream_redirect",
        )
    return "status" if status >= 400 else None


def error_kind(exc: ProxyError) -> str:
    if isinstance(exc, UpstreamTimeout):
        return "timeout"
    return _ERROR_KIND.get(exc.code or "", "malformed")


def read_failure(exc: UpstreamReadError) -> StreamFailure:
    """A body read that failed mid-stream, as the stream's error event."""
    if exc.kind == "timeout":
        return StreamFailure("upstream_timeout", IDLE_MESSAGE, "timeout_error")
    if exc.kind == "malformed":
        return StreamFailure("upstream_bad_response", UNREADABLE_MESSAGE)
    return StreamFailure("upstream_disconnected", "The upstream connection broke mid-stream.")


def read_failure_error(exc: UpstreamReadError) -> ProxyError:
    """A body read that failed before the response started, as an HTTP error."""
    if exc.kind == "timeout":
        return UpstreamTimeout(IDLE_MESSAGE)
    if exc.kind == "malformed":
        return UpstreamError(UNREADABLE_MESSAGE, code="upstream_bad_response")
    return UpstreamError(
        "The upstream connection broke before the response was complete.",
        code="upstream_disconnected",
    )
