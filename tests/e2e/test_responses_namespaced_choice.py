"""A `tool_choice` naming a function or custom tool that is offered only
inside a `namespace` (the choice has no namespace field): a chat upstream
is forced to the flattened function it was offered (`<namespace>__<name>`),
never to a name it has no tool of. The real server, a fake chat upstream,
the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

KEY = "sk-test-namespaced-choice"
OK = Json(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "OK."},
                "finish_reason": "stop",
            }
        ],
    }
)
TOOLS: Any = [
    {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}},
    {
        "type": "namespace",
        "name": "git",
        "description": "Git.",
        "tools": [
            {"type": "function", "name": "status", "parameters": {"type": "object"}},
            {"type": "custom", "name": "commit", "description": "A commit message."},
        ],
    },
]


@pytest.fixture
def sdk(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client,
    ):
        yield client


@pytest.mark.parametrize(
    ("choice", "chat_name"),
    [
        ({"type": "function", "name": "status"}, "git__status"),
        ({"type": "custom", "name": "commit"}, "git__commit"),
        ({"type": "function", "name": "read_file"}, "read_file"),
    ],
)
def test_a_choice_names_the_function_the_upstream_was_offered(
    sdk: openai.OpenAI, upstream: FakeUpstream, choice: Any, chat_name: str
) -> None:
    upstream.script(OK)
    response = sdk.responses.create(model="m", input="Go", tools=TOOLS, tool_choice=choice)
    assert response.tool_choice.model_dump(exclude_none=True) == choice  # repeated as sent
    (request,) = upstream.chat_requests()
    sent = request.json
    offered = [tool["function"]["name"] for tool in sent["tools"]]
    assert chat_name in offered
    assert sent["tool_choice"] == {"type": "function", "function": {"name": chat_name}}


def test_a_name_outside_a_namespace_wins_over_the_same_name_inside_one(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    tools: Any = [
        *TOOLS,
        {"type": "function", "name": "status", "parameters": {"type": "object"}},
    ]
    upstream.script(OK)
    sdk.responses.create(
        model="m", input="Go", tools=tools, tool_choice={"type": "function", "name": "status"}
    )
    (request,) = upstream.chat_requests()
    assert request.json["tool_choice"] == {"type": "function", "function": {"name": "status"}}
