"""`tool_choice: {"type": "allowed_tools", ...}` through the Responses
door, end to end (the real server, a fake upstream, the openai SDK): to a
chat upstream, only the allowed tools go, with the mode as chat's
`tool_choice`; to a Responses upstream, the choice passes as it came."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.test_responses_native import BASE, message

KEY = "sk-test-tool-choice"


def function(name: str) -> Any:
    return {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}


TOOLS: Any = [
    function("read_file"),
    function("delete_file"),
    {"type": "custom", "name": "apply_patch", "description": "Patch files."},
    {"type": "namespace", "name": "git", "description": "Git.", "tools": [function("status")]},
    {"type": "web_search"},
]


def answer() -> Json:
    return Json(
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


@pytest.fixture
def sdk(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client,
    ):
        yield client


def sent_tools(upstream: FakeUpstream) -> tuple[list[str], Any]:
    sent = upstream.chat_requests()[-1].json
    return [t["function"]["name"] for t in sent.get("tools", [])], sent.get("tool_choice")


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_only_the_allowed_tools_go_to_a_chat_upstream(
    sdk: openai.OpenAI, upstream: FakeUpstream, mode: str
) -> None:
    """It used to send every tool, with `tool_choice: "required"`: the
    model could call a tool the client had ruled out."""
    upstream.script(answer())
    choice: Any = {
        "type": "allowed_tools",
        "mode": mode,
        "tools": [
            {"type": "function", "name": "read_file"},
            {"type": "custom", "name": "apply_patch"},
        ],
    }
    raw = sdk.responses.with_raw_response.create(
        model="m", input="Look.", tools=TOOLS, tool_choice=choice
    )
    assert sent_tools(upstream) == (["read_file", "apply_patch"], mode)
    assert raw.headers.get("x-proxy-dropped-fields") is None  # nothing of the choice is lost
    assert raw.headers["x-proxy-dropped-tools"] == "web_search"
    assert raw.parse().tool_choice.type == "allowed_tools"  # type: ignore[union-attr]


def test_a_namespace_entry_allows_its_members(sdk: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.script(answer())
    choice: Any = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "namespace", "name": "git"}],
    }
    sdk.responses.create(model="m", input="Status?", tools=TOOLS, tool_choice=choice)
    assert sent_tools(upstream) == (["git__status"], "auto")


def test_allowing_only_hosted_tools_sends_no_tools(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    """No tool the chat upstream can call is left: none goes, and a
    `required` it cannot honour is named."""
    upstream.script(answer())
    choice: Any = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "web_search"}]}
    raw = sdk.responses.with_raw_response.create(
        model="m", input="Search.", tools=TOOLS, tool_choice=choice
    )
    assert sent_tools(upstream) == ([], None)
    assert raw.headers["x-proxy-dropped-fields"] == "tool_choice"


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        (
            {"mode": "required", "tools": [{"type": "function", "name": "nope"}]},
            "tool_choice.tools[0].name",
        ),
        ({"mode": "none", "tools": []}, "tool_choice.mode"),
        ({"mode": "auto", "tools": "read_file"}, "tool_choice.tools"),
    ],
)
def test_a_malformed_allowed_tools_choice_is_a_400(
    sdk: openai.OpenAI, upstream: FakeUpstream, choice: Any, param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(
            model="m", input="Go.", tools=TOOLS, tool_choice={"type": "allowed_tools", **choice}
        )
    assert info.value.body["param"] == param  # type: ignore[index]
    assert upstream.requests == []


def test_a_responses_upstream_gets_the_choice_as_it_came(upstream: FakeUpstream) -> None:
    upstream.script(Json({**BASE, "status": "completed", "output": [message("OK.")]}))
    choice: Any = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "read_file"}],
    }
    with (
        running_proxy(route_config(upstream, api="responses")) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client,
    ):
        client.responses.create(model="m", input="Look.", tools=TOOLS, tool_choice=choice)
    sent = upstream.requests[-1].json
    assert sent["tool_choice"] == choice
    assert len(sent["tools"]) == len(TOOLS)
