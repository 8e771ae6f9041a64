"""What a route of the door's own API (`api: messages`, `api: responses`)
sent upstream of earlier turns' reasoning, as the turn's `egress` notes say
it (the inspector's "Sent upstream", the conversations API): the client's
own reasoning passed on, reasoning restored from the store and why, what
was left out. A Responses client that drops the upstream's reasoning items
before its function calls gets them back from the store, as a Messages
client gets the thinking of its tool-use turns; the usage of both is
stored as chat names it."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from proxy.sealing import PREFIX, Sealed
from tests.harness import FakeUpstream, Json, ProxyServer, route_config, running_proxy
from tests.test_responses_native import BASE, message

KEY = "sk-native-egress"
AUTH = {"Authorization": f"Bearer {KEY}"}

# -- Messages -----------------------------------------------------------------------------

TOOL_USE = {
    "id": "msg_tool",
    "type": "message",
    "role": "assistant",
    "model": "claude-up",
    "content": [
        {"type": "thinking", "thinking": "Ask the tool.", "signature": "sig-upstream"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 20, "cache_read_input_tokens": 4, "output_tokens": 9},
}
DONE = {
    **TOOL_USE,
    "id": "msg_done",
    "content": [{"type": "text", "text": "Cold."}],
    "stop_reason": "end_turn",
}
QUESTION = {"role": "user", "content": "Weather in Oslo?"}
RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3 °C"}],
}


def create(proxy: ProxyServer, messages: list[Any], conversation: str, **headers: str) -> Any:
    response = httpx.post(
        f"{proxy.url}/messages",
        headers={
            "x-api-key": KEY,
            "anthropic-version": "2023-06-01",
            "X-Conversation-Id": conversation,
            **headers,
        },
        json={"model": "claude-up", "max_tokens": 64, "messages": messages},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.json()


def turns(proxy: ProxyServer, conversation: str, auth: dict[str, str] = AUTH) -> list[Any]:
    response = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=auth, timeout=30)
    assert response.status_code == 200, response.text
    turns: list[Any] = response.json()["turns"]
    return turns


def sent_messages(upstream: FakeUpstream) -> list[Any]:
    return [r.json["messages"] for r in upstream.requests if r.path == "/v1/messages"]


def test_messages_notes_say_what_the_upstream_got(upstream: FakeUpstream) -> None:
    """Regression: the notes came from the chat planning ("1 stripped:
    include_in_context auto: the openai dialect takes none back on this
    tool-call turn") while the upstream got the thinking with its signature."""
    upstream.script(Json(TOOL_USE), Json(DONE), Json(DONE))
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        first = create(proxy, [QUESTION], "m-notes")
        kept = {"role": "assistant", "content": first["content"]}
        create(proxy, [QUESTION, kept, RESULT], "m-notes")
        dropped = {
            "role": "assistant",
            "content": [b for b in first["content"] if b["type"] != "thinking"],
        }
        create(proxy, [QUESTION, dropped, RESULT], "m-notes")
        stored = turns(proxy, "m-notes")
    thinking = {"type": "thinking", "thinking": "Ask the tool.", "signature": "sig-upstream"}
    assert [m[1]["content"][0] for m in sent_messages(upstream)[1:]] == [thinking, thinking]
    assert stored[0]["egress"]["messages"] == []
    assert stored[0]["egress"]["dialect"] == "messages"
    (passed,) = stored[1]["egress"]["messages"]
    assert (passed["index"], passed["toolCall"]) == (1, True)
    assert (passed["action"], passed["source"]) == ("passed", "message")
    assert "envelope opened to the upstream's own text and signature" in passed["why"]
    (restored,) = stored[2]["egress"]["messages"]
    assert (restored["action"], restored["source"]) == ("reinjected", "store")
    assert "restored from the stored turn with the upstream's signature" in restored["why"]
    for turn in stored:
        assert "openai" not in orjson.dumps(turn["egress"]).decode()


def test_messages_notes_name_a_signature_that_did_not_open(upstream: FakeUpstream) -> None:
    upstream.script(Json(DONE))
    forged = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "", "signature": PREFIX + "forged"},
            *TOOL_USE["content"][1:],  # type: ignore[index]
        ],
    }
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        create(proxy, [QUESTION, forged, RESULT], "m-forged")
        (turn,) = turns(proxy, "m-forged")
    assert [b["type"] for b in sent_messages(upstream)[0][1]["content"]] == ["tool_use"]
    (note,) = turn["egress"]["messages"]
    assert (note["action"], note["source"]) == ("stripped", "message")
    assert "signature did not open" in note["why"]


def test_messages_notes_with_include_false_say_nothing_was_restored(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Json(TOOL_USE), Json(DONE))
    off = {"X-Reasoning-Include-In-Context": "false"}
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        first = create(proxy, [QUESTION], "m-off", **off)
        dropped = {
            "role": "assistant",
            "content": [b for b in first["content"] if b["type"] != "thinking"],
        }
        create(proxy, [QUESTION, dropped, RESULT], "m-off", **off)
        stored = turns(proxy, "m-off")
    assert [b["type"] for b in sent_messages(upstream)[1][1]["content"]] == ["tool_use"]
    (note,) = stored[1]["egress"]["messages"]
    assert note["action"] == "none"
    assert "include_in_context false" in note["why"]


# -- Responses ----------------------------------------------------------------------------

REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Need the weather."}],
    "encrypted_content": "gAAAA-upstream-opaque",
}
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city":"Oslo"}',
    "status": "completed",
}
CALLED = {
    **BASE,
    "id": "resp_1",
    "status": "completed",
    "output": [REASONING, CALL],
    "usage": {
        "input_tokens": 11,
        "output_tokens": 7,
        "total_tokens": 18,
        "output_tokens_details": {"reasoning_tokens": 5},
    },
}
ANSWERED = {
    **BASE,
    "id": "resp_2",
    "status": "completed",
    "output": [message("Cold.")],
    "usage": {"input_tokens": 30, "output_tokens": 2, "total_tokens": 32},
}
ENCRYPTED = {"store": False, "include": ["reasoning.encrypted_content"]}
# what a framework that keeps only messages and calls sends back
WITHOUT_REASONING = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "-3 °C"},
]


def respond(proxy: ProxyServer, items: Any, key: str = KEY, **fields: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}", "X-Conversation-Id": fields.pop("conv", "r")}
    headers.update(fields.pop("headers", {}))
    response = httpx.post(
        f"{proxy.url}/responses",
        headers=headers,
        json={"model": "gpt-5", "input": items, **fields},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response


def sent_inputs(upstream: FakeUpstream) -> list[Any]:
    return [r.json["input"] for r in upstream.requests if r.path == "/v1/responses"]


def test_responses_reasoning_the_client_dropped_comes_back_before_its_calls(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Json(CALLED), Json(ANSWERED))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        respond(proxy, "Weather in Oslo?", **ENCRYPTED)
        respond(proxy, WITHOUT_REASONING, **ENCRYPTED)
        stored = turns(proxy, "r")
    restored = {k: v for k, v in REASONING.items() if k != "summary"}
    assert sent_inputs(upstream)[1] == [
        WITHOUT_REASONING[0],
        {**restored, "summary": []},
        *WITHOUT_REASONING[1:],
    ]
    (note,) = stored[1]["egress"]["messages"]
    assert (note["index"], note["toolCall"]) == (1, True)
    assert (note["action"], note["source"]) == ("reinjected", "store")
    assert stored[1]["egress"]["dialect"] == "responses"


def test_responses_reasoning_is_not_restored_with_include_false(upstream: FakeUpstream) -> None:
    upstream.script(Json(CALLED), Json(ANSWERED))
    off = {"X-Reasoning-Include-In-Context": "false"}
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        respond(proxy, "Weather in Oslo?", headers=off, **ENCRYPTED)
        respond(proxy, WITHOUT_REASONING, headers=off, **ENCRYPTED)
        stored = turns(proxy, "r")
    assert sent_inputs(upstream)[1] == WITHOUT_REASONING
    (note,) = stored[1]["egress"]["messages"]
    assert note["action"] == "none"
    assert "include_in_context false" in note["why"]


def test_responses_reasoning_is_restored_for_its_own_tenant_only(upstream: FakeUpstream) -> None:
    upstream.script(Json(CALLED), Json(ANSWERED))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        respond(proxy, "Weather in Oslo?", **ENCRYPTED)
        respond(proxy, WITHOUT_REASONING, key="sk-someone-else", **ENCRYPTED)
        stored = turns(proxy, "r", {"Authorization": "Bearer sk-someone-else"})
    assert sent_inputs(upstream)[1] == WITHOUT_REASONING
    (note,) = stored[0]["egress"]["messages"]
    assert note["action"] == "none"


def test_responses_reasoning_without_encrypted_content_is_not_restored(
    upstream: FakeUpstream,
) -> None:
    plain = {k: v for k, v in REASONING.items() if k != "encrypted_content"}
    upstream.script(Json({**CALLED, "output": [plain, CALL]}), Json(ANSWERED))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        # (with store on, the upstream keeps the item: its id goes back,
        # tests/e2e/test_responses_stored_reasoning_ids.py)
        respond(proxy, "Weather in Oslo?", store=False)
        respond(proxy, WITHOUT_REASONING)
        stored = turns(proxy, "r")
    assert sent_inputs(upstream)[1] == WITHOUT_REASONING
    (note,) = stored[1]["egress"]["messages"]
    assert (note["action"], note["source"]) == ("stripped", "store")
    assert "encrypted_content" in note["why"]


def test_responses_notes_say_what_the_client_sent_and_what_was_left_out(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Json(ANSWERED))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        rt = proxy.runtime
        own = rt.sealer.seal(rt.tenant(AUTH["Authorization"]), Sealed("Made on a chat route."))
        items = [
            {"role": "user", "content": "Weather in Oslo?"},
            REASONING,
            CALL,
            {"type": "function_call_output", "call_id": "call_1", "output": "-3 °C"},
            {"role": "user", "content": "And Bergen?"},
            {"type": "reasoning", "summary": [], "encrypted_content": own},
            message("Rain."),
            {"role": "user", "content": "Thanks"},
        ]
        respond(proxy, items)
        (turn,) = turns(proxy, "r")
    sent = sent_inputs(upstream)[0]
    assert sent == [*items[:5], *items[6:]]  # the upstream's own item goes, the proxy's not
    kept, left = turn["egress"]["messages"]
    assert (kept["index"], kept["action"], kept["source"]) == (1, "passed", "message")
    assert (left["index"], left["action"], left["source"]) == (5, "stripped", "message")
    assert "this proxy's own" in left["why"]


def test_native_turns_store_their_usage_as_chat_names_it(upstream: FakeUpstream) -> None:
    upstream.script(Json(ANSWERED))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        respond(proxy, "Weather in Oslo?")
        (turn,) = turns(proxy, "r")
    # no reasoning count reported: none stored (not a null one)
    assert turn["usage"] == {"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32}
    upstream.reset()
    upstream.script(Json(DONE))
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        create(proxy, [QUESTION], "m-usage")
        (turn,) = turns(proxy, "m-usage")
    assert turn["usage"] == {"prompt_tokens": 24, "completion_tokens": 9, "total_tokens": 33}


def test_responses_reasoning_is_not_restored_to_a_request_that_continues_a_stored_one(
    upstream: FakeUpstream,
) -> None:
    upstream.script(Json(CALLED), Json(ANSWERED))
    with running_proxy(route_config(upstream, api="responses")) as proxy:
        respond(proxy, "Weather in Oslo?", include=ENCRYPTED["include"])
        respond(proxy, WITHOUT_REASONING[1:], previous_response_id="resp_1")
    assert sent_inputs(upstream)[1] == WITHOUT_REASONING[1:]


def test_responses_reasoning_goes_back_to_its_own_upstream_only(upstream: FakeUpstream) -> None:
    other = FakeUpstream().start()
    try:
        upstream.script(Json(CALLED))
        other.script(Json(ANSWERED))
        config = route_config(upstream, api="responses", models=["gpt-5"])
        config["routes"].append(
            {"name": "other", "models": ["other-*"], "upstream": other.url, "api": "responses"}
        )
        with running_proxy(config) as proxy:
            respond(proxy, "Weather in Oslo?", **ENCRYPTED)
            respond(proxy, WITHOUT_REASONING, model="other-model", **ENCRYPTED)
        assert sent_inputs(other) == [WITHOUT_REASONING]
    finally:
        other.stop()
