"""A Chat upstream's refusal (the `refusal` field OpenAI models fill instead
of `content` when they decline, e.g. under structured outputs) reaches the
Responses and Messages doors, streamed and whole, through the real server."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client

REFUSAL = "I can't help with that."


def refusal_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-r",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def refusal_answer(stream: bool) -> Stream | Json:
    if stream:
        return Stream(
            [
                refusal_chunk({"role": "assistant", "content": None, "refusal": ""}),
                refusal_chunk({"refusal": "I can't "}),
                refusal_chunk({"refusal": "help with that."}),
                refusal_chunk({}, "stop"),
            ]
        )
    message = {"role": "assistant", "content": None, "refusal": REFUSAL}
    return Json(
        {
            "id": "chatcmpl-r",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_a_refusal_part_on_the_responses_door(
    upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(refusal_answer(stream))
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-client", max_retries=0) as sdk,
    ):
        if stream:
            with sdk.responses.stream(model="m", input="Do it") as events:
                kinds = [event.type for event in events]
                response = events.get_final_response()
            assert kinds.count("response.refusal.delta") == 2
            assert "response.refusal.done" in kinds
        else:
            response = sdk.responses.create(model="m", input="Do it")
    (item,) = response.output
    assert item.type == "message"
    (part,) = item.content
    assert (part.type, getattr(part, "refusal", None)) == ("refusal", REFUSAL)
    assert response.status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_text_with_stop_reason_refusal_on_the_messages_door(
    upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(refusal_answer(stream))
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk_client(proxy.base, "sk-client")
        request: Any = {
            "model": "m",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Do it"}],
        }
        if stream:
            with client.messages.stream(**request) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**request)
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", REFUSAL)]
    assert message.stop_reason == "refusal"
