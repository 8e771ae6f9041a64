"""A Responses request as a chat completions payload (sans-IO): messages,
reasoning items (opened envelopes), tools of every kind, the mapped and the
dropped fields, and the 400s for malformed input."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.doors.responses.request import read_options, translate
from proxy.doors.responses.tools import ClientTool, flat_name, translate_tools
from proxy.errors import BadRequest
from proxy.sealing import Sealed

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def no_envelopes(_: Any) -> Sealed | None:
    return None


def chat(body: dict[str, Any], prior: list[Any] | None = None, opener: Any = no_envelopes) -> Any:
    read_options(body)
    return translate(body, prior or [], opener)


def test_a_string_input_with_instructions() -> None:
    t = chat({"model": "m", "instructions": "Be brief.", "input": "Hi"})
    assert t.payload == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
        ],
    }
    assert t.dropped_fields == t.dropped_tools == []


def test_developer_and_system_messages_join_the_system_prompt() -> None:
    t = chat(
        {
            "instructions": "You are Codex.",
            "input": [
                {"type": "message", "role": "developer", "content": "Sandbox: read-only."},
                {"role": "user", "content": [{"type": "input_text", "text": "Fix it"}]},
                {"role": "system", "content": [{"type": "input_text", "text": "Be careful."}]},
            ],
        }
    )
    assert t.payload["messages"] == [
        {"role": "system", "content": "You are Codex.\n\nSandbox: read-only.\n\nBe careful."},
        {"role": "user", "content": "Fix it"},
    ]


def test_user_parts_with_an_image_stay_parts() -> None:
    content = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "low"},
        {"type": "input_file", "file_id": "file_1"},
    ]
    t = chat({"input": [{"role": "user", "content": content}]})
    assert t.payload["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAA", "detail": "low"},
                },
            ],
        }
    ]
    assert t.dropped_fields == ["input.content.input_file"]


def tool_loop_items(reasoning: dict[str, Any] | None) -> list[Any]:
    items: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    if reasoning is not None:
        items.append(reasoning)
    items += [
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
    ]
    return items


def test_a_tool_loop_becomes_an_assistant_message_and_a_tool_message() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "I need the tool."}],
    }
    t = chat({"input": tool_loop_items(reasoning), "tools": [WEATHER]})
    assert t.payload["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "reasoning_content": "I need the tool.",
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    ]
    assert t.payload["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather.",
                "parameters": WEATHER["parameters"],
                "strict": True,
            },
        }
    ]


def test_without_reasoning_items_the_message_carries_none() -> None:
    t = chat({"input": tool_loop_items(None)})
    assert "reasoning_content" not in t.payload["messages"][1]


def test_an_envelope_gives_the_reasoning_and_the_upstreams_artefacts_back() -> None:
    details = [{"type": "reasoning.encrypted", "data": "opaque==", "index": 0}]
    opened: list[Any] = []

    def opener(token: Any) -> Sealed | None:
        opened.append(token)
        return Sealed("the full reasoning", {"reasoning_details": details})

    reasoning = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "the shown summary"}],
        "encrypted_content": "rp1.token",
    }
    t = chat({"input": tool_loop_items(reasoning)}, opener=opener)
    assert opened == ["rp1.token"]
    message = t.payload["messages"][1]
    assert message["reasoning_content"] == "the full reasoning"
    assert message["reasoning_details"] == details


def test_an_envelope_that_does_not_open_falls_back_to_the_summary() -> None:
    reasoning = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "what the client kept"}],
        "encrypted_content": "gAAAAforeign",
    }
    t = chat({"input": tool_loop_items(reasoning)})
    assert t.payload["messages"][1]["reasoning_content"] == "what the client kept"
    assert "reasoning_details" not in t.payload["messages"][1]


def test_reasoning_alone_makes_no_message() -> None:
    t = chat({"input": [{"type": "reasoning", "summary": []}, {"role": "user", "content": "x"}]})
    assert t.payload["messages"] == [{"role": "user", "content": "x"}]


def test_the_previous_responses_items_come_first() -> None:
    prior = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": "{}",
        },
    ]
    body = {"input": [{"type": "function_call_output", "call_id": "call_1", "output": "18 C"}]}
    t = chat(body, prior)
    assert [m["role"] for m in t.payload["messages"]] == ["user", "assistant", "tool"]
    assert t.input_items == body["input"]


def test_namespace_custom_and_hosted_tools() -> None:
    tools = [
        WEATHER,
        {
            "type": "namespace",
            "name": "crm",
            "description": "Customers.",
            "tools": [
                {"type": "function", "name": "find", "description": "Find one."},
                {"type": "custom", "name": "note"},
            ],
        },
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "Edit files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
        },
        {"type": "web_search"},
        {"type": "mcp", "server_label": "x"},
        {"type": "local_shell"},
    ]
    out = translate_tools(tools)
    names = [t["function"]["name"] for t in out.tools]
    assert names == ["get_weather", "crm__find", "crm__note", "apply_patch"]
    assert out.dropped == ["web_search", "mcp", "local_shell"]
    find = out.tools[1]["function"]
    assert find["description"] == "Customers.\n\nFind one."
    assert find["parameters"] == {"type": "object", "properties": {}}
    patch = out.tools[3]["function"]
    assert patch["parameters"]["required"] == ["input"]
    assert "start: /.+/" in patch["description"]
    assert out.names.client("crm__find") == ClientTool("find", "crm")
    assert out.names.client("crm__note") == ClientTool("note", "crm", custom=True)
    assert out.names.client("apply_patch") == ClientTool("apply_patch", custom=True)
    assert out.names.client("invented") == ClientTool("invented")
    assert out.names.custom_input('{"input": "*** Begin Patch"}') == "*** Begin Patch"
    assert out.names.custom_input("not json") == "not json"


def test_namespaced_and_custom_calls_in_the_history_go_back_by_their_chat_names() -> None:
    items = [
        {"role": "user", "content": "x"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "find",
            "namespace": "crm",
            "arguments": "{}",
        },
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "diff"},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "applied"},
    ]
    t = chat({"input": items})
    calls = t.payload["messages"][1]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["crm__find", "apply_patch"]
    assert calls[1]["function"]["arguments"] == '{"input":"diff"}'


def test_long_or_odd_namespaced_names_fit_chat() -> None:
    name = flat_name("mcp server.with spaces" * 3, "tool")
    assert len(name) <= 64
    assert name.replace("_", "").replace("-", "").isalnum()
    assert flat_name("mcp server.with spaces" * 3, "tool") == name  # the same every time


def test_mapped_fields() -> None:
    t = chat(
        {
            "model": "m",
            "input": "x",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "max_output_tokens": 300,
            "temperature": 0.2,
            "top_p": 0.9,
            "stream": True,
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "reasoning": {"effort": "high", "summary": "auto"},
            "store": False,
            "metadata": {"k": "v"},
            "include": ["reasoning.encrypted_content"],
        }
    )
    assert t.payload["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert t.payload["parallel_tool_calls"] is False
    assert t.payload["max_tokens"] == 300
    assert (t.payload["temperature"], t.payload["top_p"]) == (0.2, 0.9)
    assert t.payload["stream_options"] == {"include_usage": True}
    assert t.payload["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": {"type": "object"}},
    }
    assert t.effort == "high"
    assert "store" not in t.payload
    assert "metadata" not in t.payload
    assert t.dropped_fields == []


def test_without_tools_no_tool_controls_go_upstream() -> None:
    t = chat({"input": "x", "tools": [{"type": "web_search"}], "tool_choice": "auto"})
    assert "tools" not in t.payload
    assert "tool_choice" not in t.payload
    assert t.dropped_tools == ["web_search"]


def test_fields_a_chat_upstream_has_no_use_for_are_dropped_and_named() -> None:
    t = chat(
        {
            "input": "x",
            "client_metadata": {"a": "b"},
            "prompt_cache_key": "k",
            "truncation": "auto",
            "service_tier": "auto",
            "user": "u",
            "safety_identifier": "s",
            "a_field_from_next_year": 1,
            "text": {"verbosity": "low"},
            "reasoning": {"effort": "low", "context": "all_turns"},
        }
    )
    assert t.dropped_fields == [
        "a_field_from_next_year",
        "client_metadata",
        "prompt_cache_key",
        "reasoning.context",
        "safety_identifier",
        "service_tier",
        "text.verbosity",
        "truncation",
        "user",
    ]


def test_unknown_item_types_are_dropped_and_named() -> None:
    items = [
        {"role": "user", "content": "x"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}},
        {"type": "item_reference", "id": "msg_9"},
    ]
    t = chat({"input": items})
    assert t.payload["messages"] == [{"role": "user", "content": "x"}]
    assert t.dropped_fields == ["input.item_reference", "input.web_search_call"]


def test_options() -> None:
    options = read_options({"model": "m", "input": "x"})
    assert (options.stream, options.store, options.include_encrypted) == (False, True, False)
    options = read_options(
        {"stream": True, "store": False, "include": ["reasoning.encrypted_content"]}
    )
    assert (options.stream, options.store, options.include_encrypted) == (True, False, True)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 3}, "input"),
        ({"input": []}, "input"),
        ({"input": [3]}, "input[0]"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        ({"input": [{"role": "user", "content": [7]}]}, "input[0].content[0].type"),
        ({"input": [{"type": 7}]}, "input[0].type"),
        (
            {"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]},
            "input[0].call_id",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
            "input[0].name",
        ),
        (
            {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
        ),
        (
            {"input": [{"type": "function_call", "name": "f", "call_id": "c", "arguments": 3}]},
            "input[0].arguments",
        ),
        (
            {
                "input": [
                    {"type": "function_call", "name": "f", "call_id": "c", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c", "output": 5},
                ]
            },
            "input[1].output",
        ),
        ({"input": [{"type": "reasoning", "summary": "x"}]}, "input[0].summary"),
        ({"input": "x", "tools": {}}, "tools"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "x", "tools": [{"type": "namespace", "name": "n"}]}, "tools[0].tools"),
        ({"input": "x", "stream": "yes"}, "stream"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "temperature": "hot"}, "temperature"),
        ({"input": "x", "include": [1]}, "include"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"input": "x", "reasoning": {"effort": 3}}, "reasoning.effort"),
    ],
)
def test_malformed_input_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as info:
        chat(body)
    assert info.value.param == param
    assert info.value.status == 400


def test_item_references_are_resolved_from_stored_items() -> None:
    from proxy.doors.responses.items import items_by_id, references, resolved, response_of
    from proxy.errors import BadRequest

    record = {
        "input": [{"role": "user", "content": "Hi"}],
        "response": {
            "id": "resp_abc123",
            "output": [{"type": "message", "id": "msg_abc123_0", "role": "assistant"}],
        },
    }
    found = items_by_id([record])
    question_id = next(k for k, v in found.items() if v.get("content") == "Hi")
    assert question_id.startswith("msg_")  # the id input_items lists for it
    items = [
        {"type": "item_reference", "id": question_id},
        {"type": "item_reference", "id": "msg_abc123_0"},
        {"role": "user", "content": "More"},
    ]
    assert references(items) == [question_id, "msg_abc123_0"]
    assert references("just text") == []
    assert resolved(items, found) == [
        {"role": "user", "content": "Hi"},
        {"type": "message", "id": "msg_abc123_0", "role": "assistant"},
        {"role": "user", "content": "More"},
    ]
    assert response_of("msg_abc123_0") == "resp_abc123"
    assert response_of("fc_abc123_12") == "resp_abc123"
    assert response_of("msg_abc123") is None  # not an output id
    assert response_of("resp_abc123") is None
    with pytest.raises(BadRequest) as bad:
        resolved([{"type": "item_reference", "id": "msg_gone_0"}], found)
    assert (bad.value.param, bad.value.code) == ("input", "item_not_found")
