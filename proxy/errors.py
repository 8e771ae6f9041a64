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


class StoreUnavailable(ProxyError):
    status = 503
    type = "server_error"
    default_code = "store_unavailable"


class UpstreamError(ProxyError):
    """The upstream could not be reached or answered in a way we cannot use."""

    status = 502
    type = "upstream_error"
    default_code = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"
    default_code = "upstream_timeout"


class ConfigError(Exception):
    """A configuration file or option is invalid (a start-up error, not HTTP)."""
