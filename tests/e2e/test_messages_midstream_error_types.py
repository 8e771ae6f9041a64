"""An error a Chat upstream sends after its answer began (vLLM's numeric
`code`, OpenRouter's, OpenAI's `rate_limit_exceeded`) ends a Messages
stream with an `event: error` of the type its status names: the type the
same error gets as a stream's first event, where it becomes the status."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.harness import FakeUpstream, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client

ASK = [{"role": "user", "content": "hi"}]
BEGUN = {
    "id": "c1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "up",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}],
}

ERRORS = [
    ({"message": "Too many requests", "code": 429}, 429, "rate_limit_error"),
    ({"message": "busy", "type": "InternalServerError", "code": 529}, 529, "overloaded_error"),
    ({"message": "bad", "type": "BadRequestError", "code": 400}, 400, "invalid_request_error"),
    (
        {"message": "slow", "type": "requests", "code": "rate_limit_exceeded"},
        429,
        "rate_limit_error",
    ),
    ({"message": "gone", "status": "503"}, 503, "overloaded_error"),
    ({"message": "late", "type": "timeout_error"}, 502, "timeout_error"),
]


def _failure(proxy_base: str) -> Any:
    sdk = sdk_client(proxy_base, "sk-client")
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        sdk.messages.stream(model="m", max_tokens=10, messages=ASK) as stream,
    ):
        stream.get_final_message()
    return caught.value


@pytest.mark.parametrize(("error", "status", "kind"), ERRORS)
def test_an_error_after_the_answer_began_has_its_statuss_type(
    upstream: FakeUpstream, error: dict[str, Any], status: int, kind: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(Stream([BEGUN, {"error": error}], done=False))
        midway = _failure(proxy.base)
        upstream.script(Stream([{"error": error}], done=False))
        first = _failure(proxy.base)
    assert midway.body == {"type": "error", "error": {"type": kind, "message": error["message"]}}
    assert first.status_code == status
    if status != 502:  # a status the error names: the same type either way
        assert first.body["error"]["type"] == kind
