"""A Messages request -> a Chat Completions payload (proxy.doors.messages.request)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.doors.messages.request import Translation, effort_setting, translate
from proxy.errors import BadRequest
from proxy.sealing import Sealed, Sealer

SEALER = Sealer(b"test secret")
TENANT = "tenant-a"


def opener(token: Any) -> Sealed | None:
    return SEALER.open(TENANT, token)


def run(**body: Any) -> Translation:
    base: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    return translate({**base, **body}, opener)


def test_a_plain_request() -> None:
    t = run(system="be brief", temperature=0.5, top_p=0.9, top_k=5, stop_sequences=["END"])
    assert t.payload == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 100,
        "stop": ["END"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 5,
    }
    assert t.settings == []
    assert t.dropped_fields == t.dropped_tools == []
    assert t.stop_sequences == ("END",)


def test_system_blocks_are_joined_and_their_cache_control_dropped() -> None:
    t = run(
        system=[
            {"type": "text", "text": "one"},
            {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}},
        ]
    )
    assert t.payload["messages"][0] == {"role": "system", "content": "one\n\ntwo"}
    assert t.dropped_fields == ["cache_control"]


def test_stream_asks_for_usage() -> None:
    t = run(stream=True)
    assert t.payload["stream"] is True
    assert t.payload["stream_options"] == {"include_usage": True}


def test_user_blocks_text_and_images() -> None:
    t = run(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                ],
            }
        ]
    )
    assert t.payload["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        }
    ]


def tool_loop(extra_assistant: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                *(extra_assistant or []),
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": [{"type": "text", "text": "sunny"}],
                },
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]


def test_tool_use_and_tool_result() -> None:
    t = run(messages=tool_loop())
    assert t.payload["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "and tomorrow?"},
    ]


def test_a_tool_result_without_its_tool_use_is_refused() -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}],
        }
    ]
    with pytest.raises(BadRequest) as caught:
        run(messages=messages)
    assert caught.value.param == "messages[0].content[0].tool_use_id"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "system", "content": [{"type": "image"}]}]},
            "messages[0].content[0]",
        ),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
            "messages[0].content[0].text",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "a", "name": "f", "input": []}],
                    }
                ]
            },
            "messages[0].content[0].input",
        ),
        ({"max_tokens": "100"}, "max_tokens"),
        ({"max_tokens": None}, "max_tokens"),
        ({"model": 3}, "model"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_k": 1.5}, "top_k"),
        ({"stream": "yes"}, "stream"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"tools": [{"name": "f", "input_schema": "x"}]}, "tools[0].input_schema"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        # a tool the request does not define at all (not a dropped server tool)
        (
            {
                "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "tool", "name": "g"},
            },
            "tool_choice.name",
        ),
        # the top-level system is itself the list of blocks (it said system.content[0])
        ({"system": [{"type": "image"}]}, "system[0]"),
        ({"system": [{"text": "x"}]}, "system[0]"),
        ({"system": [{"type": "text", "text": 1}]}, "system[0].text"),
    ],
)
def test_malformed_input_is_a_bad_request_naming_where(body: dict[str, Any], where: str) -> None:
    with pytest.raises(BadRequest) as caught:
        run(**body)
    assert caught.value.param == where
    assert caught.value.status == 400


def test_tools_custom_ones_map_server_tools_are_dropped_and_named() -> None:
    t = run(
        tools=[
            {
                "name": "get_weather",
                "description": "weather",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"type": "code_execution_20250825", "name": "code_execution"},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        ],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    assert t.payload["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "description": "weather",
            },
        }
    ]
    assert t.payload["tool_choice"] == "required"
    assert t.payload["parallel_tool_calls"] is False
    assert t.dropped_tools == ["web_search", "code_execution", "str_replace_based_edit_tool"]
    assert t.dropped_fields == ["cache_control"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    assert run(tools=tools, tool_choice=choice).payload["tool_choice"] == expected


def test_a_tool_choice_naming_a_dropped_tool_is_dropped() -> None:
    t = run(
        tools=[{"type": "web_search_20250305", "name": "web_search"}],
        tool_choice={"type": "tool", "name": "web_search"},
    )
    assert "tool_choice" not in t.payload
    assert "tools" not in t.payload
    assert t.dropped_fields == ["tool_choice"]


@pytest.mark.parametrize(
    ("thinking", "settings"),
    [
        (
            {"type": "enabled", "budget_tokens": 2048},
            [("x-reasoning-enabled", "true"), ("x-reasoning-max-tokens", "2048")],
        ),
        ({"type": "adaptive", "display": "summarized"}, [("x-reasoning-enabled", "true")]),
        ({"type": "disabled"}, [("x-reasoning-enabled", "false")]),
    ],
)
def test_thinking_maps_to_the_reasoning_settings(
    thinking: dict[str, Any], settings: list[tuple[str, str]]
) -> None:
    t = run(thinking=thinking)
    assert t.settings == settings
    assert "thinking" not in t.payload
    assert t.show_thinking


def test_display_omitted_hides_the_thinking_text() -> None:
    assert not run(thinking={"type": "adaptive", "display": "omitted"}).show_thinking


def test_output_config_effort_and_format_map_and_the_rest_is_dropped() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    t = run(
        output_config={
            "effort": "max",
            "format": {"type": "json_schema", "schema": schema},
            "verbosity": "low",
        }
    )
    assert t.settings == [("x-reasoning-effort", effort_setting("max"))]
    assert effort_setting("max") in ("xhigh", "high")
    assert effort_setting("low") == "low"
    assert t.payload["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }
    assert t.dropped_fields == ["output_config.verbosity"]


def test_what_claude_code_sends_is_tolerated_and_named() -> None:
    t = run(
        context_management={"edits": [{"type": "clear_thinking_20251015"}]},
        service_tier="auto",
        metadata={"user_id": "user_abc"},
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
        brand_new_field=1,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
                    {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
                    {"type": "some_future_block"},
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "Agent types: ..."}]},
        ],
    )
    assert "user" not in t.payload
    assert t.payload["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Agent types: ..."},
    ]
    assert t.settings == [("x-reasoning-enabled", "true"), ("x-reasoning-effort", "high")]
    assert t.dropped_fields == [
        "cache_control",
        "content.document.url",
        "content.some_future_block",
        "metadata",
        "context_management",
        "service_tier",
        "brand_new_field",
    ]


def test_thinking_sent_back_is_opened_into_reasoning() -> None:
    signature = SEALER.seal(TENANT, Sealed("I should call the tool."))
    native = SEALER.seal(TENANT, Sealed("native thought", {"signature": "upstream-sig"}))
    thinking = [
        {"type": "thinking", "thinking": "edited by the client", "signature": signature},
        {"type": "thinking", "thinking": "native thought", "signature": native},
    ]
    message = run(messages=tool_loop(thinking)).payload["messages"][1]
    assert message["reasoning_content"] == "I should call the tool.\n\nnative thought"
    assert message["thinking_blocks"] == [
        {"type": "thinking", "thinking": "native thought", "signature": "upstream-sig"}
    ]


def test_thinking_blocks_of_the_upstream_go_back_verbatim() -> None:
    blocks = [
        {"type": "thinking", "thinking": "a", "signature": "s-a"},
        {"type": "redacted_thinking", "data": "opaque"},
    ]
    signature = SEALER.seal(TENANT, Sealed("a", {"thinking_blocks": blocks}))
    thinking = [{"type": "thinking", "thinking": "a", "signature": signature}]
    message = run(messages=tool_loop(thinking)).payload["messages"][1]
    assert message["thinking_blocks"] == blocks
    assert message["reasoning_content"] == "a"


def test_thinking_with_a_bad_or_foreign_signature_is_dropped_and_counted() -> None:
    foreign = SEALER.seal("another tenant", Sealed("not yours"))
    thinking = [
        {"type": "thinking", "thinking": "forged", "signature": "rp1.AAAA"},
        {"type": "thinking", "thinking": "foreign", "signature": foreign},
        {"type": "thinking", "thinking": "no signature"},
        {"type": "redacted_thinking", "data": "opaque"},
    ]
    t = run(messages=tool_loop(thinking))
    assert "reasoning_content" not in t.payload["messages"][1]
    assert t.unopened == 3
    assert t.dropped_fields == ["content.redacted_thinking"]


def test_reasoning_details_come_back_from_the_envelope() -> None:
    items = [{"type": "reasoning.encrypted", "data": "blob", "index": 0}]
    signature = SEALER.seal(TENANT, Sealed("", {"reasoning_details": items}))
    thinking = [{"type": "thinking", "thinking": "", "signature": signature}]
    message = run(messages=tool_loop(thinking)).payload["messages"][1]
    assert message["reasoning_details"] == items
    assert "reasoning_content" not in message


def test_count_tokens_needs_no_max_tokens() -> None:
    t = translate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, opener, counting=True
    )
    assert "max_tokens" not in t.payload
