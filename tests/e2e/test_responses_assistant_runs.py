"""Input a Chat upstream cannot be given as it stands, through the real
server with the openai SDK: consecutive assistant message items of one turn
(two messages in a row, an answer and its refusal, text on both sides of a
call) reach the upstream as one assistant message whose texts are joined by
a newline, as the parts of one message are, never run together; and
`conversation` (OpenAI's Conversations API, whose history the upstream
keeps) is a 400 naming it, rather than an answer without that history."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.casefiles import WEATHER_RESPONSES_TOOL, chunk
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

KEY = "sk-test-assistant-runs"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream)) as server:
        yield server


@pytest.fixture
def sdk(proxy: ProxyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client:
        yield client


def said(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


def sent_messages(upstream: FakeUpstream) -> list[Any]:
    (request,) = upstream.chat_requests()
    return list(request.json["messages"])


# -- consecutive assistant messages -----------------------------------------------------


@pytest.mark.parametrize(
    ("turn", "text"),
    [
        ([said("Hello."), said("World")], "Hello.\nWorld"),
        # the short form, and a message whose content is a string
        ([said("Hello."), {"role": "assistant", "content": "World"}], "Hello.\nWorld"),
        # an answer and its refusal: two message items of one turn
        (
            [said("Part of it:"), {**said(""), "content": [{"type": "refusal", "refusal": "No."}]}],
            "Part of it:\nNo.",
        ),
        # an empty message adds no blank line
        ([said("Hello."), said(""), said("World")], "Hello.\nWorld"),
    ],
)
def test_consecutive_assistant_messages_are_joined_by_a_newline(
    sdk: openai.OpenAI, upstream: FakeUpstream, turn: list[Any], text: str
) -> None:
    items: Any = [{"role": "user", "content": "Hi"}, *turn, {"role": "user", "content": "Again"}]
    sdk.responses.create(model="m", input=items, store=False)
    assert sent_messages(upstream) == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "Again"},
    ]


def test_text_on_both_sides_of_a_call_goes_back_as_one_message(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    """The proxy's own answer, text that came while a call was open in a
    message item after the call, sent back as the client got it."""
    upstream.script(
        Stream(
            [
                chunk({"role": "assistant", "content": "Let me look."}),
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": '},
                            }
                        ]
                    }
                ),
                chunk({"content": "One moment."}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]}),
                chunk({}, "tool_calls"),
            ]
        )
    )
    tools: Any = [WEATHER_RESPONSES_TOOL]
    with sdk.responses.stream(model="m", input="Weather?", tools=tools, store=False) as stream:
        first = stream.get_final_response()
    assert [i.type for i in first.output] == ["message", "function_call", "message"]
    upstream.reset()
    items: Any = [
        {"role": "user", "content": "Weather?"},
        *[i.model_dump(exclude_none=True) for i in first.output],
        {"type": "function_call_output", "call_id": "call_1", "output": "-3 °C"},
    ]
    sdk.responses.create(model="m", input=items, tools=tools, store=False)
    assistant = sent_messages(upstream)[1]
    assert assistant["content"] == "Let me look.\nOne moment."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1"]


# -- conversation -------------------------------------------------------------------------


@pytest.mark.parametrize("conversation", ["conv_123", {"id": "conv_123"}])
def test_conversation_to_a_chat_upstream_is_a_400_naming_it(
    sdk: openai.OpenAI, upstream: FakeUpstream, conversation: Any
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="m", input="Hi", conversation=conversation)
    error = caught.value
    assert (error.param, error.code) == ("conversation", "unsupported_parameter")
    assert "previous_response_id" in error.message
    with pytest.raises(openai.BadRequestError) as counted:
        sdk.responses.input_tokens.count(model="m", input="Hi", conversation=conversation)
    assert counted.value.param == "conversation"
    assert upstream.requests == []  # nothing went upstream


def test_a_stored_prompt_template_to_a_chat_upstream_is_a_400_naming_it(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    # the answer would come without the template's instructions
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="m", input="Hi", prompt={"id": "pmpt_1", "version": "2"})
    assert (caught.value.param, caught.value.code) == ("prompt", "unsupported_parameter")
    assert "instructions" in caught.value.message
    assert upstream.requests == []


def test_a_null_conversation_is_no_conversation(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    response = httpx.post(
        f"{proxy.url}/responses",
        headers=AUTH,
        json={"model": "m", "input": "Hi", "conversation": None},
    )
    assert response.status_code == 200, response.text
    assert "x-proxy-dropped-fields" not in response.headers
    assert len(upstream.chat_requests()) == 1


def test_conversation_goes_to_a_responses_upstream_as_sent(upstream: FakeUpstream) -> None:
    answer = {
        "id": "resp_up",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5",
        "status": "completed",
        "output": [],
        "conversation": {"id": "conv_123"},
    }
    upstream.script(Json(answer))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        response = httpx.post(
            f"{proxy.url}/responses",
            headers=AUTH,
            json={"model": "gpt-5", "input": "Hi", "conversation": "conv_123"},
        )
    assert response.status_code == 200, response.text
    (sent,) = upstream.requests
    assert sent.json["conversation"] == "conv_123"
