"""Anthropic's error objects and stop reasons (pure).

An Anthropic error body is `{"type": "error", "error": {"type": ..., "message":
...}}`; its `type` follows the HTTP status (invalid_request_error for 400,
authentication_error 401, permission_error 403, not_found_error 404,
conflict_error 409, request_too_large 413, rate_limit_error 429, api_error
500 and 502, overloaded_error 503 and 529, timeout_error 504). In a stream
the same object is the data of an `event: error`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from proxy.errors import ProxyError, upstream_error_status

MESSAGES_PATH = "/v1/messages"

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# OpenAI error types (and the proxy's own) -> Anthropic's, for errors in a stream
_TYPE_OF_TYPE = {
    "invalid_request_error": "invalid_request_error",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "not_found_error": "not_found_error",
    "conflict_error": "conflict_error",
    "rate_limit_error": "rate_limit_error",
    "insufficient_quota": "rate_limit_error",
    "overloaded_error": "overloaded_error",
    "timeout_error": "timeout_error",
    "server_error": "api_error",
    "upstream_error": "api_error",
    "api_error": "api_error",
}

# the proxy's own error codes whose Anthropic type is not their OpenAI type's:
# a stream cut by shutdown says what a refused request says (503)
_TYPE_OF_CODE = {
    "server_shutting_down": "overloaded_error",
    "upstream_busy": "overloaded_error",
}

# chat finish_reason -> Messages stop_reason
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
    # Hugging Face TGI's, for a hit of one of the request's stop sequences
    "stop_sequence": "stop_sequence",
    # Mistral's, for an answer cut at the model's context window
    "model_length": "model_context_window_exceeded",
}


def error_type_of_status(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def error_object(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def error_from_openai(error: Any, status: int | None = None) -> dict[str, Any]:
    """An OpenAI-shaped error object (the `error` member, or a bare string) in
    Anthropic's shape. With a status the type follows it; without (an error
    in a stream), it follows the status the error names (a numeric `status`
    or `code`, or a known `code` or `type`: the status the same error would
    get as a stream's first event), else the error's own type."""
    message = "The upstream returned an error."
    kind = None
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            message = error["message"]
        code = error.get("code")
        named = upstream_error_status(error)  # 502 when it names none
        if isinstance(code, str) and code in _TYPE_OF_CODE:
            kind = _TYPE_OF_CODE[code]
        elif named != 502:
            kind = error_type_of_status(named)
        elif isinstance(error.get("type"), str):
            kind = _TYPE_OF_TYPE.get(error["type"])
    elif isinstance(error, str) and error:
        message = error
    if status is not None:
        return error_object(error_type_of_status(status), message)
    return error_object(kind or "api_error", message)


def wants_anthropic(path: str, headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """An error the proxy answers before (or instead of) an endpoint comes in
    Anthropic's shape on the Messages paths (repeated and trailing slashes
    aside) and to clients that send `anthropic-version`; else in OpenAI's."""
    squeezed = "/" + "/".join(piece for piece in path.split("/") if piece)
    return squeezed.startswith(MESSAGES_PATH) or any(
        name == b"anthropic-version" for name, _ in headers
    )


def anthropic_error(exc: ProxyError) -> bytes:
    """A proxy error as an Anthropic error body."""
    return orjson.dumps(error_object(error_type_of_status(exc.status), exc.message))


def error_body(status: int, body: bytes) -> bytes:
    """A whole error response (OpenAI-shaped, Anthropic-shaped already, or
    anything else an upstream sent) as an Anthropic error body."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        inner = data.get("error")
        if (
            data.get("type") == "error"
            and isinstance(inner, dict)
            and isinstance(inner.get("type"), str)
            and isinstance(inner.get("message"), str)
        ):
            out = error_object(inner["type"], inner["message"])
            if isinstance(data.get("request_id"), str):  # Anthropic's, for its support
                out["request_id"] = data["request_id"]
            return orjson.dumps(out)
        return orjson.dumps(error_from_openai(inner if inner is not None else data, status))
    text = body.decode("utf-8", "replace").strip()[:1000]
    return orjson.dumps(error_from_openai(text or None, status))


def stop_reason(finish_reason: Any, tool_use: bool) -> str:
    """The Messages stop_reason for a chat finish_reason (None: the stream
    ended without one). An answer with tool calls that ended of itself is
    `tool_use` whatever the upstream called it: OpenAI says `stop` when
    tool_choice named the function, and some servers always do, while
    Anthropic clients run the tools only on `tool_use`."""
    reason = STOP_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    if reason is None or reason == "end_turn":
        return "tool_use" if tool_use else "end_turn"
    return reason


def matched_stop(choice: dict[str, Any], stop_sequences: tuple[str, ...]) -> str | None:
    """The stop sequence that ended a choice, where the upstream says which
    (vLLM's `stop_reason`, SGLang's `matched_stop`), or says that one did
    (TGI's finish_reason `stop_sequence`) and the request has one alone."""
    for key in ("stop_reason", "matched_stop"):
        value = choice.get(key)
        if isinstance(value, str) and value in stop_sequences:
            return value
    if choice.get("finish_reason") == "stop_sequence" and len(stop_sequences) == 1:
        return stop_sequences[0]
    return None
