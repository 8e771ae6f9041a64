"""Thinking blocks go back upstream without the `index` a stream numbered
their pieces with: LiteLLM's blocks (`type`, `thinking`, `signature`;
`redacted_thinking` with `data`) have no such key, and Anthropic, behind it,
refuses unknown keys in a block. The real proxy, a fake upstream that
numbers its streamed thinking blocks."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.shapecases import CASES, SIG1

(NUMBERED,) = [c for c in CASES if c.id == "thinking-blocks-with-index"]
CALL = {"id": "toolu_01", "type": "function", "function": {"name": "f", "arguments": "{}"}}
DONE = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}
    ],
}


def numbered_tool_turn(stream: bool) -> Any:
    """The numbered case, ending in a tool call instead of its answer."""
    if stream:
        chunks = copy.deepcopy(NUMBERED.chunks)
        chunks[-2]["choices"][0]["delta"] = {"tool_calls": [{"index": 0, **CALL}]}
        chunks[-1]["choices"][0]["finish_reason"] = "tool_calls"
        return Stream(chunks)
    completion = copy.deepcopy(NUMBERED.completion)
    choice = completion["choices"][0]
    choice["message"].update(content=None, tool_calls=[CALL])
    choice["finish_reason"] = "tool_calls"
    return Json(completion)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_numbered_thinking_blocks_go_back_without_their_index(
    upstream: FakeUpstream, stream: bool
) -> None:
    history = [{"role": "user", "content": "Count."}]
    with (
        running_proxy(route_config(upstream, dialect="litellm")) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        upstream.script(numbered_tool_turn(stream))
        first = client.post(
            f"{proxy.url}/chat/completions",
            json={"model": "claude-sonnet", "stream": stream, "messages": history},
            headers={"Authorization": "Bearer sk-test"},
        )
        assert first.status_code == 200, first.text
        upstream.script(Json(DONE))
        second = client.post(
            f"{proxy.url}/chat/completions",
            json={
                "model": "claude-sonnet",
                "messages": [
                    *history,
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "toolu_01", "content": "3"},
                ],
            },
            headers={"Authorization": "Bearer sk-test"},
        )
        assert second.status_code == 200, second.text
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["thinking_blocks"] == [
        {"type": "thinking", "thinking": "One, two.", "signature": SIG1},
        {"type": "thinking", "thinking": "Three."},
    ]


def test_a_clients_numbered_blocks_go_back_without_their_index(upstream: FakeUpstream) -> None:
    # a client that kept a stream's blocks as they came (with their index),
    # or a turn stored before blocks were kept without it
    numbered = [
        {"index": 0, "type": "thinking", "thinking": "One, two.", "signature": SIG1},
        {"index": 1, "type": "redacted_thinking", "data": "opaque"},
    ]
    upstream.script(Json(DONE))
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        response = httpx.post(
            f"{proxy.url}/chat/completions",
            json={
                "model": "claude-sonnet",
                "messages": [
                    {"role": "user", "content": "Count."},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [CALL],
                        "thinking_blocks": numbered,
                    },
                    {"role": "tool", "tool_call_id": "toolu_01", "content": "3"},
                ],
            },
            headers={"Authorization": "Bearer sk-test"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["thinking_blocks"] == [
        {"type": "thinking", "thinking": "One, two.", "signature": SIG1},
        {"type": "redacted_thinking", "data": "opaque"},
    ]
