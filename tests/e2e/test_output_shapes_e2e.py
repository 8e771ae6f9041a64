"""The output shapes through the real server: chosen with X-Reasoning-Output,
per route or per profile; each streamed and non-streamed; a history that
carries each shape back is matched to the stored turn (the upstream gets the
stored thinking blocks back, signatures unchanged); a bad shape is a 400."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.outputshapes import SHAPES, deltas, read
from tests.shapecases import CASES

KEY = {"Authorization": "Bearer sk-test"}
(THINKING,) = [c for c in CASES if c.id == "litellm-thinking-blocks"]
(TOOLS,) = [c for c in CASES if c.id == "thinking-blocks-around-tool-calls"]
SIG = THINKING.blocks[0][1]  # type: ignore[index]


def ask(
    proxy: Any,
    upstream: FakeUpstream,
    case: Any,
    stream: bool,
    headers: dict[str, str],
    messages: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], httpx.Response]:
    upstream.script(
        Stream(copy.deepcopy(case.chunks)) if stream else Json(copy.deepcopy(case.completion))
    )
    request = {
        "model": "m",
        "stream": stream,
        "messages": messages or [{"role": "user", "content": "Capital of France?"}],
    }
    with httpx.Client(timeout=30) as client:
        response = client.post(
            f"{proxy.url}/chat/completions", json=request, headers={**KEY, **headers}
        )
    assert response.status_code == 200, response.text
    if stream:
        assert response.content.endswith(b"data: [DONE]\n\n")
        return deltas(response.content), response
    return [response.json()["choices"][0]["message"]], response


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_by_header(upstream: FakeUpstream, shape: str, stream: bool) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        parts, _ = ask(proxy, upstream, THINKING, stream, {"X-Reasoning-Output": shape})
        got = read(parts, shape)
        assert got["content"] == "Paris."
        assert got["reasoning"] == ("" if shape == "none" else "Let me think.")
        if shape == "none":
            assert got["fields"] == []
        if shape == "think_tags":
            assert "".join(p.get("content") or "" for p in parts).startswith(
                "<think>\nLet me think.\n</think>\n\n"
            )
        if shape == "reasoning_details":
            assert got["details"][0]["signature"] == SIG


def test_shape_per_route_and_per_profile(upstream: FakeUpstream) -> None:
    config = route_config(
        upstream,
        reasoning={"output": "reasoning"},
        top={"profiles": {"chat-ui": {"output": "think_tags"}}},
    )
    with running_proxy(config) as proxy:
        parts, _ = ask(proxy, upstream, THINKING, True, {})
        assert read(parts, "reasoning")["reasoning"] == "Let me think."
        assert "reasoning_content" not in read(parts, "reasoning")["fields"]
        parts, _ = ask(proxy, upstream, THINKING, True, {"X-Reasoning-Profile": "chat-ui"})
        assert read(parts, "think_tags")["reasoning"] == "Let me think."
        # the header wins over the profile, include-in-response false over any shape
        parts, _ = ask(
            proxy,
            upstream,
            THINKING,
            True,
            {
                "X-Reasoning-Profile": "chat-ui",
                "X-Reasoning-Output": "think_tags",
                "X-Reasoning-Include-In-Response": "false",
            },
        )
        assert read(parts, "think_tags") == {
            "content": "Paris.",
            "reasoning": "",
            "fields": [],
            "details": [],
        }


def test_an_unknown_shape_is_a_400_naming_the_header(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        response = client.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={**KEY, "X-Reasoning-Output": "<b>markdown</b>"},
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "X-Reasoning-Output"
        assert error["code"] == "invalid_reasoning_setting"
        assert error["message"] == (
            "X-Reasoning-Output must be one of: reasoning_content, reasoning, think_tags,"
            " reasoning_details, none"
        )
        assert upstream.chat_requests() == []


def carried_back(shape: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message a client of `shape` sends back: what it kept."""
    message: dict[str, Any] = {"role": "assistant"}
    content = "".join(p.get("content") or "" for p in parts)
    message["content"] = content or None
    calls: dict[int, dict[str, Any]] = {}
    for p in parts:
        for n, call in enumerate(p.get("tool_calls") or []):
            calls.setdefault(call.get("index", n), {k: v for k, v in call.items() if k != "index"})
    if calls:
        message["tool_calls"] = list(calls.values())
    if shape in ("reasoning_content", "reasoning"):
        message[shape] = "".join(p.get(shape) or "" for p in parts)
    if shape == "reasoning_details":
        message["reasoning_details"] = read(parts, shape)["details"]
    return message


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_history_carrying_each_shape_is_matched_to_the_stored_turn(
    upstream: FakeUpstream, shape: str, stream: bool
) -> None:
    """A LiteLLM upstream answers with signed thinking blocks and two tool
    calls; the client gets them in its shape and sends the turn back as such
    a client does. Upstream, the assistant message carries the stored
    thinking blocks verbatim, and no tag is left in its content."""
    config = route_config(upstream, dialect="litellm")
    headers = {"X-Reasoning-Output": shape, "X-Conversation-Id": f"carry-{shape}"}
    with running_proxy(config) as proxy:
        parts, _ = ask(proxy, upstream, TOOLS, stream, headers)
        assistant = carried_back(shape, parts)
        if shape == "think_tags":  # one block before each call streamed, one block whole
            assert assistant["content"].count("<think>") == (2 if stream else 1)
        history = [
            {"role": "user", "content": "Capital of France?"},
            assistant,
            {"role": "tool", "tool_call_id": "toolu_01", "content": "a"},
            {"role": "tool", "tool_call_id": "toolu_02", "content": "b"},
        ]
        ask(proxy, upstream, THINKING, stream, headers, history)
        sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["thinking_blocks"] == [
        {"type": "thinking", "thinking": "First look up a.", "signature": TOOLS.blocks[0][1]},  # type: ignore[index]
        {"type": "thinking", "thinking": "Then b.", "signature": TOOLS.blocks[1][1]},  # type: ignore[index]
    ]
    assert not sent.get("content")  # the <think> blocks were taken out
    assert [c["id"] for c in sent["tool_calls"]] == ["toolu_01", "toolu_02"]
    assert "reasoning" not in sent


def test_think_tags_history_on_a_route_without_think_tags(upstream: FakeUpstream) -> None:
    """The proxy's own <think> output comes back on a Magistral route too."""
    config = route_config(
        upstream, tags=[{"preset": "magistral"}], reasoning={"include_in_context": True}
    )
    headers = {"X-Reasoning-Output": "think_tags", "X-Conversation-Id": "magistral"}
    (magistral,) = [c for c in CASES if c.id == "magistral-think-brackets"]
    with running_proxy(config) as proxy:
        parts, _ = ask(proxy, upstream, magistral, True, headers)
        content = "".join(p.get("content") or "" for p in parts)
        assert content == "<think>\nCompute 2+2 first.\n</think>\n\nThe answer is 4."
        history = [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": content},
            {"role": "user", "content": "And 3+3?"},
        ]
        ask(proxy, upstream, magistral, True, headers, history)
        sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["content"] == "The answer is 4."
    assert sent["reasoning_content"] == "Compute 2+2 first."


def test_think_tags_content_sent_back_gives_the_upstream_the_reasoning_as_written(
    upstream: FakeUpstream,
) -> None:
    """Reasoning that holds `</think>` reaches a think_tags client escaped (a
    zero-width space after its `<`); when the client sends that content back
    on the tool-call turn, the upstream gets the reasoning as the model
    wrote it, not the escaped text."""
    thought = 'What does "</think>" do? It closes a block.'
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    completion = {
        "id": "c1",
        "object": "chat.completion",
        "model": "deepseek-chat",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "",
                    "reasoning_content": thought,
                    "tool_calls": [call],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    answer = {
        **completion,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
    }
    upstream.script(Json(completion), Json(answer))
    headers = {**KEY, "X-Reasoning-Output": "think_tags"}
    question = {"role": "user", "content": "What does the tag do?"}
    with (
        running_proxy(route_config(upstream, dialect="deepseek")) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        first = client.post(
            f"{proxy.url}/chat/completions",
            json={"model": "deepseek-chat", "messages": [question]},
            headers=headers,
        )
        message = first.json()["choices"][0]["message"]
        assert "<\u200b/think>" in message["content"]  # escaped on the way out
        assert message["content"].count("</think>") == 1
        history = [
            question,
            {"role": "assistant", "content": message["content"], "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "done"},
        ]
        second = client.post(
            f"{proxy.url}/chat/completions",
            json={"model": "deepseek-chat", "messages": history},
            headers=headers,
        )
    assert second.status_code == 200, second.text
    sent = upstream.requests[1].json["messages"][1]
    assert sent["reasoning_content"] == thought
    assert "\u200b" not in repr(upstream.requests[1].json)
