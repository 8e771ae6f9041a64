"""History a client sends back in shapes beyond a plain string, through the
real server: assistant `content` as a list of text parts (valid chat input;
LangChain and the Vercel AI SDK send it), and tool calls identical to
another chat's but with ids of their own."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests import casefiles
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

KEY = "sk-test-alice"
OK = Json(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Fine."}}],
    }
)
CALL = {
    "id": "call_mm1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}
USER = {"role": "user", "content": "Weather in Paris?"}
RESULT = {"role": "tool", "tool_call_id": "call_mm1", "content": "sunny"}


def post(url: str, messages: list[Any], **headers: str) -> httpx.Response:
    r = httpx.post(
        f"{url}/chat/completions",
        headers={"authorization": f"Bearer {KEY}", **headers},
        json={"model": "m", "messages": messages},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r


def test_tags_in_text_parts_are_removed_and_never_reach_groq(upstream: FakeUpstream) -> None:
    upstream.script(OK, OK)
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "<think>private chain</think>The answer"},
            {"type": "text", "text": " is 4."},
            {"type": "text", "text": "<think>more</think>"},  # nothing left: the part goes
        ],
    }
    messages = [USER, assistant, {"role": "user", "content": "Thanks"}]
    with running_proxy(route_config(upstream, dialect="groq")) as groq:
        post(groq.url, messages)
    with running_proxy(route_config(upstream, dialect="deepseek")) as deepseek:
        post(deepseek.url, messages, **{"X-Reasoning-Include-In-Context": "true"})
    to_groq, to_deepseek = (r.json["messages"][1] for r in upstream.chat_requests())
    parts = [{"type": "text", "text": "The answer"}, {"type": "text", "text": " is 4."}]
    assert to_groq == {"role": "assistant", "content": parts}
    # the reasoning read from the parts goes where the dialect wants it
    assert to_deepseek == {
        "role": "assistant",
        "content": parts,
        "reasoning_content": "private chain\n\nmore",
    }
    assert "<think>" not in json.dumps([to_groq, to_deepseek])


def test_minimax_keeps_the_text_of_parts_after_its_think_block(upstream: FakeUpstream) -> None:
    # MiniMax M2 wants its thinking back at the start of `content` on tool turns
    upstream.script(
        Stream(
            [
                casefiles.chunk({"role": "assistant", "content": "<think>I need the weather"}),
                casefiles.chunk({"content": "</think>Let me check the weather for you."}),
                casefiles.chunk({"tool_calls": [{"index": 0, **CALL}]}),
                casefiles.chunk({}, "tool_calls"),
            ]
        ),
        OK,
    )
    with running_proxy(route_config(upstream, dialect="minimax")) as proxy:
        httpx.post(
            f"{proxy.url}/chat/completions",
            headers={"authorization": f"Bearer {KEY}"},
            json={"model": "m", "messages": [USER], "stream": True},
            timeout=30,
        ).raise_for_status()
        assistant = {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me check the weather for you."}],
            "tool_calls": [CALL],
        }
        post(proxy.url, [USER, assistant, RESULT])
    sent = upstream.chat_requests()[1].json["messages"][1]
    assert sent["content"] == (
        "<think>\nI need the weather\n</think>\n\nLet me check the weather for you."
    )
    assert sent["tool_calls"] == [CALL]


def test_a_call_like_another_chats_but_with_its_own_id_gets_none_of_its_reasoning(
    upstream: FakeUpstream,
) -> None:
    private = "PRIVATE: a surprise trip to Paris."
    upstream.script(
        Stream(
            [
                casefiles.chunk({"role": "assistant", "reasoning_content": private}),
                casefiles.chunk({"tool_calls": [{"index": 0, **CALL}]}),
                casefiles.chunk({}, "tool_calls"),
            ]
        ),
        OK,
        OK,
    )
    other = {**CALL, "id": "call_other"}
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        first = httpx.post(
            f"{proxy.url}/chat/completions",
            headers={"authorization": f"Bearer {KEY}"},
            json={"model": "m", "messages": [USER], "stream": True},
            timeout=30,
        )
        conversation = first.headers["x-conversation-id"]
        # another chat: the same call, its own id (never stored)
        r = post(
            proxy.url,
            [USER, {"role": "assistant", "content": None, "tool_calls": [other]}, RESULT],
        )
        assert r.headers["x-conversation-id"] != conversation
        # the chat that made the call, sent back without its reasoning
        r = post(
            proxy.url, [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]}, RESULT]
        )
        assert r.headers["x-conversation-id"] == conversation
    elsewhere, same = (r.json["messages"][1] for r in upstream.chat_requests()[1:])
    assert elsewhere["reasoning_content"] == " "  # Kimi's placeholder: nothing known
    assert same["reasoning_content"] == private
