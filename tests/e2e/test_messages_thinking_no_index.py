"""Thinking sealed by the Messages door goes back to a chat upstream without
the `index` the upstream's stream numbered its `thinking_blocks` pieces by:
LiteLLM's blocks (`type`, `thinking`, `signature`; `redacted_thinking` with
`data`) have no such key, and Anthropic, behind it, refuses unknown keys in
a block. The real proxy, the anthropic SDK, a fake upstream that numbers its
streamed thinking blocks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client
from tests.shapecases import CASES, SIG1

(NUMBERED,) = [c for c in CASES if c.id == "thinking-blocks-with-index"]
CALL = {"id": "toolu_01", "type": "function", "function": {"name": "count", "arguments": "{}"}}
REDACTED = {"index": 2, "type": "redacted_thinking", "data": "opaque-bytes"}
TOOLS = [{"name": "count", "description": "Count.", "input_schema": {"type": "object"}}]
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
    """The numbered case (and a redacted block), ending in a tool call."""
    if stream:
        chunks = copy.deepcopy(NUMBERED.chunks)
        chunks[-2]["choices"][0]["delta"] = {
            "thinking_blocks": [REDACTED],
            "tool_calls": [{"index": 0, **CALL}],
        }
        chunks[-1]["choices"][0]["finish_reason"] = "tool_calls"
        return Stream(chunks)
    completion = copy.deepcopy(NUMBERED.completion)
    choice = completion["choices"][0]
    choice["message"].update(content=None, tool_calls=[CALL])
    choice["message"]["thinking_blocks"].append(REDACTED)
    choice["finish_reason"] = "tool_calls"
    return Json(completion)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_sealed_thinking_blocks_go_back_without_their_index(
    upstream: FakeUpstream, stream: bool
) -> None:
    question: list[Any] = [{"role": "user", "content": "Count."}]
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        sdk = sdk_client(proxy.base, "sk-test")
        upstream.script(numbered_tool_turn(stream))
        first: Any
        if stream:
            with sdk.messages.stream(
                model="claude-sonnet", max_tokens=100, messages=question, tools=TOOLS
            ) as events:
                first = events.get_final_message()
        else:
            first = sdk.messages.create(
                model="claude-sonnet", max_tokens=100, messages=question, tools=TOOLS
            )
        assert [b.type for b in first.content][-1] == "tool_use"
        upstream.script(Json(DONE))
        history = [
            *question,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "3"}],
            },
        ]
        answer = sdk.messages.create(
            model="claude-sonnet", max_tokens=100, messages=history, tools=TOOLS
        )
        assert answer.content[0].type == "text"
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["thinking_blocks"] == [
        {"type": "thinking", "thinking": "One, two.", "signature": SIG1},
        {"type": "thinking", "thinking": "Three."},
        {"type": "redacted_thinking", "data": "opaque-bytes"},
    ]
