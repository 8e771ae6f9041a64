"""The `litellm` dialect: thinking blocks (signed `thinking`, opaque
`redacted_thinking`) an upstream answered with go back on the matching
assistant turns exactly as they came; a client's own thinking blocks too;
never when reasoning is not to be sent. The real proxy, a fake upstream."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.shapecases import CASES

KEY = {"Authorization": "Bearer sk-test"}
(THINKING,) = [c for c in CASES if c.id == "litellm-thinking-blocks"]
(TOOLS,) = [c for c in CASES if c.id == "thinking-blocks-around-tool-calls"]
SIGNED = [
    {"type": "thinking", "thinking": "First look up a.", "signature": TOOLS.blocks[0][1]},  # type: ignore[index]
    {"type": "thinking", "thinking": "Then b.", "signature": TOOLS.blocks[1][1]},  # type: ignore[index]
]
CALLS = [
    {
        "id": "toolu_01",
        "type": "function",
        "function": {"name": "search", "arguments": '{"q": "a"}'},
    },
    {
        "id": "toolu_02",
        "type": "function",
        "function": {"name": "search", "arguments": '{"q": "b"}'},
    },
]


def post(proxy: Any, messages: list[Any], stream: bool, **headers: str) -> httpx.Response:
    body = {"model": "claude-sonnet", "stream": stream, "messages": messages}
    with httpx.Client(timeout=30) as client:
        response = client.post(
            f"{proxy.url}/chat/completions", json=body, headers={**KEY, **headers}
        )
    assert response.status_code == 200, response.text
    return response


def tool_loop(assistant: dict[str, Any]) -> list[Any]:
    return [
        {"role": "user", "content": "Look up a and b."},
        assistant,
        {"role": "tool", "tool_call_id": "toolu_01", "content": "a"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "b"},
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_stored_thinking_blocks_go_back_verbatim_on_the_tool_call_turn(
    upstream: FakeUpstream, stream: bool
) -> None:
    """The client (the OpenAI SDK, say) keeps only content and tool calls."""
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        upstream.script(Stream(copy.deepcopy(TOOLS.chunks)) if stream else Json(TOOLS.completion))
        post(proxy, [{"role": "user", "content": "Look up a and b."}], stream)
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(proxy, tool_loop({"role": "assistant", "content": None, "tool_calls": CALLS}), False)
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["thinking_blocks"] == SIGNED
    assert "reasoning_content" not in sent


def test_redacted_blocks_go_back_as_they_came(upstream: FakeUpstream) -> None:
    redacted = copy.deepcopy(TOOLS.completion)
    message = redacted["choices"][0]["message"]
    message["thinking_blocks"].insert(0, {"type": "redacted_thinking", "data": "OPAQUE=="})
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        upstream.script(Json(redacted))
        post(proxy, [{"role": "user", "content": "Look up a and b."}], False)
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(proxy, tool_loop({"role": "assistant", "content": None, "tool_calls": CALLS}), False)
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["thinking_blocks"] == [{"type": "redacted_thinking", "data": "OPAQUE=="}, *SIGNED]


def test_a_clients_own_thinking_blocks_pass_verbatim(upstream: FakeUpstream) -> None:
    own = [{"type": "thinking", "thinking": "Mine.", "signature": "client-sig"}]
    assistant = {"role": "assistant", "content": None, "tool_calls": CALLS, "thinking_blocks": own}
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(proxy, tool_loop(assistant), False)
        sent = upstream.chat_requests()[-1].json["messages"][1]
        assert sent["thinking_blocks"] == own
        # include false: no reasoning field at all, thinking blocks included
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(proxy, tool_loop(assistant), False, **{"X-Reasoning-Include-In-Context": "false"})
        sent = upstream.chat_requests()[-1].json["messages"][1]
        assert "thinking_blocks" not in sent
        assert "reasoning_content" not in sent
        # format field: the text as reasoning_content, whatever the dialect
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(
            proxy,
            tool_loop(assistant),
            False,
            **{"X-Reasoning-Include-In-Context": "true", "X-Reasoning-Format": "field"},
        )
        sent = upstream.chat_requests()[-1].json["messages"][1]
        assert sent["reasoning_content"] == "Mine."
        assert "thinking_blocks" not in sent


def test_budget_and_effort_map_to_litellms_parameters(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(
            proxy, [{"role": "user", "content": "hi"}], False, **{"X-Reasoning-Max-Tokens": "2048"}
        )
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        post(proxy, [{"role": "user", "content": "hi"}], False, **{"X-Reasoning-Effort": "minimal"})
    budget, effort = (r.json for r in upstream.chat_requests()[-2:])
    assert budget["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert effort["reasoning_effort"] == "low"
    assert "thinking" not in effort
