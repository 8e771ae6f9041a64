"""The one error hierarchy: every error the proxy makes, with its HTTP status
and OpenAI error `type`/`code`, rendered by `error_body` in OpenAI's shape.

Messages never contain the offending value (it may be a credential or an
attacker's string); they name the parameter and what is allowed.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson


class ProxyError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "server_error"
    default_code: ClassVar[str | None] = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.default_code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def render(self) -> bytes:
        return orjson.dumps(self.body())


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"
    default_code = "invalid_request"


_NOUNS = {str: "a string", bool: "a boolean", dict: "an object", list: "an array"}


def require_type(body: dict[str, Any], name: str, kind: type) -> None:
    """BadRequest naming `name` when the body holds it, not null, and not of
    `kind` (str, bool, dict or list)."""
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise BadRequest(f"{name} must be {_NOUNS[kind]}.", param=name)


class InvalidSetting(BadRequest):
    default_code = "invalid_reasoning_setting"


class UnknownProfile(BadRequest):
    default_code = "unknown_profile"


class InvalidConversationId(BadRequest):
    default_code = "invalid_conversation_id"


class Unauthorized(ProxyError):
    status = 401
    type = "authentication_error"
    default_code = "missing_api_key"


class Forbidden(ProxyError):
    status = 403
    type = "permission_error"
    default_code = "forbidden"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    default_code = "not_found"


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    default_code = "request_too_large"


class UnsupportedMediaType(ProxyError):
    """A request body in a form the proxy cannot read (a Content-Encoding
    other than gzip or deflate)."""

    status = 415
    type = "invalid_request_error"
    default_code = "unsupported_media_type"


class RequestTimeout(ProxyError):
    """A request's head or body stopped arriving (server.request_header_timeout,
    server.request_body_timeout); the connection is closed after it."""

    status = 408
    type = "invalid_request_error"
    default_code = "request_timeout"


class HeadersTooLarge(ProxyError):
    """A request's head is over limits.max_header_count headers or
    limits.max_head_bytes bytes; refused before the app sees it."""

    status = 431
    type = "invalid_request_error"
    default_code = "request_header_fields_too_large"


class StoreUnavailable(ProxyError):
    status = 503
    type = "server_error"
    default_code = "store_unavailable"


class LoopDetected(ProxyError):
    """The request arrived on one of this process's own upstream connections:
    a route's upstream points back at the proxy. Refused before anything is
    read, so the loop ends at its first turn."""

    status = 508
    type = "server_error"
    default_code = "loop_detected"

    def __init__(self) -> None:
        super().__init__(
            "This request came from this proxy itself: a route's upstream points back "
            "at the proxy. Fix the route's upstream URL."
        )


class UpstreamBusy(ProxyError):
    """No upstream request slot came free in time; nothing was sent (carries
    Retry-After)."""

    status = 503
    type = "server_error"
    default_code = "upstream_busy"


class ServerShuttingDown(ProxyError):
    """The process is draining before it stops: a new request is refused, and
    a request still running when the grace period ends is cut. Retry: another
    replica (or this one's successor) answers."""

    status = 503
    type = "server_error"
    default_code = "server_shutting_down"

    def __init__(self, message: str = "The server is shutting down; retry the request.") -> None:
        # `connection: close` sends a client with a pooled connection elsewhere
        super().__init__(message, headers={"Retry-After": "1", "Connection": "close"})


class UpstreamError(ProxyError):
    """The upstream could not be reached or answered in a way we cannot use."""

    status = 502
    type = "upstream_error"
    default_code = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"
    default_code = "upstream_timeout"


# An upstream error object's own words for its status, where it gives no number.
_STATUS_OF_CODE = {
    "invalid_api_key": 401,
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "permission_denied": 403,
    "not_found_error": 404,
    "model_not_found": 404,
    "rate_limit_exceeded": 429,
    "rate_limit_error": 429,
    "insufficient_quota": 429,
    "overloaded_error": 503,
    "server_error": 500,
    "api_error": 500,
}


def upstream_error_status(error: Any) -> int:
    """The HTTP status an upstream's error object asks for: its `status` or
    numeric `code` (400-599), else a known `code` or `type`, else 502."""
    if not isinstance(error, dict):
        return 502
    for key in ("status", "status_code", "code"):
        value = error.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value.lower() in _STATUS_OF_CODE:
            return _STATUS_OF_CODE[value.lower()]
    return 502


def upstream_error_body(error: Any) -> tuple[int, bytes]:
    """An upstream's error object (from a stream's first event) as an HTTP
    status and an OpenAI-shaped body keeping its message, type, param and code."""
    if isinstance(error, dict):
        message = error.get("message")
        body = {
            "message": message if isinstance(message, str) else "The upstream returned an error.",
            "type": error.get("type") if isinstance(error.get("type"), str) else "upstream_error",
            "param": error.get("param"),
            "code": error.get("code"),
        }
    else:
        text = error if isinstance(error, str) else "The upstream returned an error."
        body = {"message": text, "type": "upstream_error", "param": None, "code": None}
    return upstream_error_status(error), orjson.dumps({"error": body})


def non_json_error_body(body: bytes) -> bytes | None:
    """An upstream's error response whose body is not JSON (a load balancer's
    or gateway's HTML page, plain text, nothing) as an OpenAI-shaped error
    body, its text (at most 1,000 characters) as the message; None for a
    JSON body, which goes on as it came."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace").strip()[:1000]
        return upstream_error_body(text or None)[1]
    return None


class ConfigError(Exception):
    """A configuration file or option is invalid (a start-up error, not HTTP)."""
