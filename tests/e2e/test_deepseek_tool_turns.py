"""DeepSeek's thinking mode wants the reasoning of a whole user turn that made
tool calls back in every later request: the tool-call messages and the
answer that ends the turn (everything between two user messages). Through
the real proxy, on a route that takes its dialect from the model name, with
the default `include_in_context: auto`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

MODEL = "deepseek-v4-pro"
CALL = {"id": "call_7", "type": "function", "function": {"name": "f", "arguments": "{}"}}
QUESTION = {"role": "user", "content": "go"}


def calling(reasoning: str) -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": reasoning}, model=MODEL),
            chunk({"tool_calls": [{"index": 0, **CALL}]}, model=MODEL),
            chunk({}, "tool_calls", model=MODEL),
        ]
    )


def answering(text: str, reasoning: str) -> Json:
    message = {"role": "assistant", "content": text, "reasoning_content": reasoning}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return Json({"id": "c", "object": "chat.completion", "model": MODEL, "choices": [choice]})


def post(url: str, messages: list[Any], conversation: str) -> httpx.Response:
    response = httpx.post(
        f"{url}/chat/completions",
        json={"model": MODEL, "messages": messages},
        headers={"X-Conversation-Id": conversation},
    )
    assert response.status_code == 200
    return response


def assistants(upstream: FakeUpstream) -> list[dict[str, Any]]:
    sent = upstream.chat_requests()[-1].json["messages"]
    return [m for m in sent if m["role"] == "assistant"]


@pytest.mark.parametrize("client_keeps", [False, True], ids=["client-drops", "client-keeps"])
def test_the_answer_that_ends_a_tool_turn_keeps_its_reasoning(
    upstream: FakeUpstream, client_keeps: bool
) -> None:
    """user -> tool call -> tool -> answer -> user: the next request carries
    the reasoning of both assistant messages of the first turn, whether the
    client dropped it (from the store) or sent it itself; a later turn
    without tool calls carries none."""
    upstream.script(calling("R1"), answering("done", "R2"), answering("plain", "R3"))
    with running_proxy(route_config(upstream)) as proxy:
        post(proxy.url, [QUESTION], "ds-turn")
        called = {"role": "assistant", "content": None, "tool_calls": [CALL]}
        result = {"role": "tool", "tool_call_id": "call_7", "content": "ok"}
        post(proxy.url, [QUESTION, called, result], "ds-turn")
        done: dict[str, Any] = {"role": "assistant", "content": "done"}
        if client_keeps:
            called = {**called, "reasoning_content": "R1"}
            done = {**done, "reasoning_content": "R2"}
        history = [QUESTION, called, result, done, {"role": "user", "content": "next"}]
        post(proxy.url, history, "ds-turn")
        first, last = assistants(upstream)
        assert (first["reasoning_content"], last["reasoning_content"]) == ("R1", "R2")
        plain = {"role": "assistant", "content": "plain"}
        post(proxy.url, [*history, plain, {"role": "user", "content": "more"}], "ds-turn")
    sent = assistants(upstream)
    assert [m.get("reasoning_content") for m in sent] == ["R1", "R2", None]


def test_an_unknown_answer_in_a_tool_turn_gets_the_placeholder(upstream: FakeUpstream) -> None:
    """History the proxy never saw: the key goes on every assistant message of
    the turn that made tool calls, empty, as on the tool-call message."""
    history = [
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_7", "content": "ok"},
        {"role": "assistant", "content": "an answer from elsewhere"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "next"},
    ]
    with running_proxy(route_config(upstream)) as proxy:
        response = post(proxy.url, history, "ds-foreign")
    assert response.headers["x-reasoning-dialect"] == "deepseek"
    assert [m.get("reasoning_content") for m in assistants(upstream)] == ["", "", None]
