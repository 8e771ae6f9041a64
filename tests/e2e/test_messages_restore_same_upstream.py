"""A Messages upstream's thinking signatures are valid at that upstream only:
a tool-use turn the client sends without its thinking gets the stored
thinking back only when the turn was made through a route to the same
upstream (`api: messages`, same `upstream:`)."""

from __future__ import annotations

from typing import Any

from tests.harness import FakeUpstream, Json, running_proxy
from tests.messages_wire import sdk_client

KEY = "sk-ant-client"
QUESTION = [{"role": "user", "content": "weather in Oslo?"}]


def tool_use_message(signature: str) -> dict[str, Any]:
    return {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [
            {"type": "thinking", "thinking": "Need the weather.", "signature": signature},
            {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 6},
    }


def done_message() -> dict[str, Any]:
    return {
        "id": "msg_up2",
        "type": "message",
        "role": "assistant",
        "model": "claude-up",
        "content": [{"type": "text", "text": "Cold."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 2},
    }


def config(first: FakeUpstream, second: FakeUpstream) -> dict[str, Any]:
    return {
        "routes": [
            {"name": "a", "models": ["claude-a"], "upstream": first.url, "api": "messages"},
            # another route to the same upstream
            {"name": "a2", "models": ["claude-a2"], "upstream": first.url, "api": "messages"},
            {"name": "b", "models": ["claude-b"], "upstream": second.url, "api": "messages"},
        ]
    }


def second_turn(base: str, first_model: str, then_model: str) -> None:
    """A tool-use turn through `first_model`, then the tool's result through
    `then_model`, the assistant turn sent back without its thinking."""
    sdk = sdk_client(base, KEY)
    first = sdk.messages.create(model=first_model, max_tokens=100, messages=QUESTION)  # type: ignore[arg-type]
    history = [
        *QUESTION,
        {
            "role": "assistant",
            "content": [b.model_dump() for b in first.content if b.type != "thinking"],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "cold"}],
        },
    ]
    sdk.messages.create(model=then_model, max_tokens=100, messages=history)  # type: ignore[arg-type]


def sent_assistant(upstream: FakeUpstream) -> list[dict[str, Any]]:
    last = [r for r in upstream.requests if r.path == "/v1/messages"][-1]
    content: list[dict[str, Any]] = last.json["messages"][1]["content"]
    return content


def test_thinking_made_at_one_upstream_is_not_restored_for_another(
    upstream: FakeUpstream, other: FakeUpstream
) -> None:
    upstream.script(Json(tool_use_message("sig-from-a")))
    other.script(Json(done_message()))
    with running_proxy(config(upstream, other)) as proxy:
        second_turn(proxy.base, "claude-a", "claude-b")
    sent = sent_assistant(other)
    assert [b["type"] for b in sent] == ["tool_use"]


def test_thinking_is_restored_through_another_route_to_the_same_upstream(
    upstream: FakeUpstream, other: FakeUpstream
) -> None:
    upstream.script(Json(tool_use_message("sig-from-a")), Json(done_message()))
    with running_proxy(config(upstream, other)) as proxy:
        second_turn(proxy.base, "claude-a", "claude-a2")
    sent = sent_assistant(upstream)
    thinking = {"type": "thinking", "thinking": "Need the weather.", "signature": "sig-from-a"}
    assert sent[0] == thinking
    assert sent[1]["type"] == "tool_use"


def test_count_tokens_restores_only_the_same_upstreams_thinking(
    upstream: FakeUpstream, other: FakeUpstream
) -> None:
    upstream.script(Json(tool_use_message("sig-from-a")))
    other.script(Json({"input_tokens": 42}))
    with running_proxy(config(upstream, other)) as proxy:
        sdk = sdk_client(proxy.base, KEY)
        first = sdk.messages.create(model="claude-a", max_tokens=100, messages=QUESTION)  # type: ignore[arg-type]
        history = [
            *QUESTION,
            {
                "role": "assistant",
                "content": [b.model_dump() for b in first.content if b.type != "thinking"],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "cold"}],
            },
        ]
        count = sdk.messages.count_tokens(model="claude-b", messages=history)  # type: ignore[arg-type]
    assert count.input_tokens == 42
    counted = [r for r in other.requests if r.path == "/v1/messages/count_tokens"][-1]
    assert [b["type"] for b in counted.json["messages"][1]["content"]] == ["tool_use"]
