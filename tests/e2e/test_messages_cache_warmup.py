"""`max_tokens: 0` (Anthropic's prompt-cache warm-up, no answer) is a valid
Messages request: it reaches a Messages upstream, which answers it, and a
Chat upstream, which takes or refuses it itself; the door refuses only a
negative one."""

from __future__ import annotations

import anthropic
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.messages_wire import sdk_client

ASK: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]


def test_a_messages_upstream_warms_its_cache(upstream: FakeUpstream) -> None:
    upstream.script(
        Json(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-up",
                "content": [],
                "stop_reason": "max_tokens",
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "cache_creation_input_tokens": 3, "output_tokens": 0},
            }
        )
    )
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        message = sdk_client(proxy.base, "sk-ant-test").messages.create(
            model="claude-up", max_tokens=0, messages=ASK
        )
    assert message.content == []
    assert message.stop_reason == "max_tokens"
    assert upstream.requests[0].json["max_tokens"] == 0


def test_a_chat_upstream_decides_itself(upstream: FakeUpstream) -> None:
    refusal = {"error": {"message": "max_tokens must be at least 1", "type": "invalid_request"}}
    upstream.script(Json(refusal, status=400))
    with (
        running_proxy(route_config(upstream)) as proxy,
        pytest.raises(anthropic.BadRequestError) as caught,
    ):
        sdk_client(proxy.base, "sk-ant-test").messages.create(model="m", max_tokens=0, messages=ASK)
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens must be at least 1"},
    }
    assert upstream.chat_requests()[0].json["max_tokens"] == 0


def test_a_negative_max_tokens_is_refused_before_any_upstream(upstream: FakeUpstream) -> None:
    with (
        running_proxy(route_config(upstream, api="messages")) as proxy,
        pytest.raises(anthropic.BadRequestError) as caught,
    ):
        sdk_client(proxy.base, "sk-ant-test").messages.create(
            model="m", max_tokens=-1, messages=ASK
        )
    assert "max_tokens" in caught.value.body["error"]["message"]  # type: ignore[index]
    assert upstream.requests == []
