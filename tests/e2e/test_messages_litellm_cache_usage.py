"""Prompt-cache counts from LiteLLM in front of Claude: its chat usage
counts cache reads and cache writes inside `prompt_tokens`, the reads in
`prompt_tokens_details.cached_tokens` and the writes in a top-level
`cache_creation_input_tokens`. A Message's usage counts both apart from
`input_tokens`, streamed and whole."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client

USAGE = {
    "prompt_tokens": 1500,
    "completion_tokens": 7,
    "total_tokens": 1507,
    "prompt_tokens_details": {"cached_tokens": 400},
    "cache_creation_input_tokens": 1000,
    "cache_read_input_tokens": 400,
}


def chunk(**fields: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "claude",
        **fields,
    }


def answer(stream: bool) -> Any:
    if stream:
        return Stream(
            [
                chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": "Hi."}}]),
                chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
                chunk(choices=[], usage=USAGE),
            ]
        )
    message = {"role": "assistant", "content": "Hi."}
    return Json(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "claude",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": USAGE,
        }
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_cache_writes_are_counted_apart(upstream: FakeUpstream, stream: bool) -> None:
    upstream.script(answer(stream))
    system: Any = [{"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral"}}]
    question: Any = [{"role": "user", "content": "hello"}]
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk_client(proxy.base, "sk-client")
        if stream:
            with client.messages.stream(
                model="claude", max_tokens=10, system=system, messages=question
            ) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(
                model="claude", max_tokens=10, system=system, messages=question
            )
    assert message.content[0].type == "text"
    usage = message.usage
    assert usage.cache_creation_input_tokens == 1000
    assert usage.cache_read_input_tokens == 400
    assert usage.input_tokens == 100
    assert usage.output_tokens == 7
