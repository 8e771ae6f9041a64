"""Conversations without X-Conversation-Id: chats that open the same way stay
apart (a request with no assistant message opens a new conversation), later
requests find theirs through their latest assistant message (tool-call id,
else content fingerprint), and re-injection stays right for tool loops."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests import casefiles
from tests.harness import FakeUpstream, Stream, route_config, running_proxy

KEY = {"Authorization": "Bearer sk-threads"}
INCLUDE = {**KEY, "X-Reasoning-Include-In-Context": "true"}
QUESTION = [{"role": "user", "content": "What is 17 * 23?"}]
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "parameters": {"type": "object", "properties": {"a": {}, "b": {}}},
        },
    }
]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return casefiles.chunk(delta, finish, model="m", id="chatcmpl-t")


def answer(reasoning: str, content: str) -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": reasoning}),
            chunk({"content": content}),
            chunk({}, "stop"),
        ]
    )


def tool_call(reasoning: str, call_id: str) -> Stream:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "multiply", "arguments": json.dumps({"a": 17, "b": 23})},
    }
    return Stream(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": reasoning}),
            chunk({"tool_calls": [call]}),
            chunk({}, "tool_calls"),
        ]
    )


def post(proxy_url: str, messages: list[Any], headers: dict[str, str] = KEY) -> httpx.Response:
    response = httpx.post(
        f"{proxy_url}/chat/completions",
        headers=headers,
        timeout=30,
        json={"model": "m", "stream": True, "messages": messages, "tools": TOOLS},
    )
    assert response.status_code == 200, response.text
    return response


def conversations(proxy_url: str) -> dict[str, int]:
    listed = httpx.get(f"{proxy_url}/conversations", headers=KEY, timeout=10).json()["data"]
    return {c["id"]: c["turns"] for c in listed}


def test_eight_chats_that_open_alike_stay_eight_conversations(upstream: FakeUpstream) -> None:
    for _ in range(8):
        upstream.script(answer("17 * 23 = 17 * 20 + 17 * 3 = 340 + 51.", "391"))
    with running_proxy(route_config(upstream)) as proxy:
        ids = [post(proxy.url, QUESTION).headers["x-conversation-id"] for _ in range(8)]
        listed = conversations(proxy.url)
    assert len(set(ids)) == 8
    assert all(i.startswith("auto-") for i in ids)
    assert listed == dict.fromkeys(ids, 1)


def test_later_requests_continue_their_own_conversation(upstream: FakeUpstream) -> None:
    """Two chats open alike and get different answers; each follow-up, sent
    without an id, lands in its own conversation."""
    upstream.script(
        answer("Multiply.", "391"),
        answer("Work it out.", "It is 391."),
        answer("Check.", "Yes: 391."),
        answer("Check again.", "Still 391."),
    )
    with running_proxy(route_config(upstream)) as proxy:
        first = post(proxy.url, QUESTION).headers["x-conversation-id"]
        second = post(proxy.url, QUESTION).headers["x-conversation-id"]
        follow = {"role": "user", "content": "Sure?"}
        again_first = post(proxy.url, [*QUESTION, {"role": "assistant", "content": "391"}, follow])
        again_second = post(
            proxy.url, [*QUESTION, {"role": "assistant", "content": "It is 391."}, follow]
        )
        listed = conversations(proxy.url)
    assert first != second
    assert again_first.headers["x-conversation-id"] == first
    assert again_second.headers["x-conversation-id"] == second
    assert listed == {first: 2, second: 2}


def test_tool_loops_without_ids_get_their_own_reasoning_back(upstream: FakeUpstream) -> None:
    """Two agents ask the same question at once; each tool round trip goes
    back with its own stored reasoning, and each loop stays one conversation."""
    upstream.script(
        tool_call("Agent A plans to multiply.", "call_a"),
        tool_call("Agent B plans to multiply.", "call_b"),
        answer("A reads the tool result.", "391"),
        answer("B reads the tool result.", "391"),
    )

    def follow_up(call_id: str) -> list[Any]:
        call = {
            "id": call_id,
            "type": "function",
            "function": {"name": "multiply", "arguments": json.dumps({"a": 17, "b": 23})},
        }
        return [
            *QUESTION,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "391"},
        ]

    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        a = post(proxy.url, QUESTION, INCLUDE).headers["x-conversation-id"]
        b = post(proxy.url, QUESTION, INCLUDE).headers["x-conversation-id"]
        a2 = post(proxy.url, follow_up("call_a"), INCLUDE).headers["x-conversation-id"]
        b2 = post(proxy.url, follow_up("call_b"), INCLUDE).headers["x-conversation-id"]
        listed = conversations(proxy.url)
    sent = upstream.chat_requests()
    assert sent[2].json["messages"][1]["reasoning_content"] == "Agent A plans to multiply."
    assert sent[3].json["messages"][1]["reasoning_content"] == "Agent B plans to multiply."
    assert (a2, b2) == (a, b)
    assert a != b
    assert listed == {a: 2, b: 2}


def test_a_history_the_proxy_never_stored_opens_a_conversation_it_then_keeps(
    upstream: FakeUpstream,
) -> None:
    upstream.script(answer("One.", "First reply."), answer("Two.", "Second reply."))
    elsewhere = [
        *QUESTION,
        {"role": "assistant", "content": "A reply from another gateway."},
        {"role": "user", "content": "Go on."},
    ]
    with running_proxy(route_config(upstream)) as proxy:
        opened = post(proxy.url, elsewhere).headers["x-conversation-id"]
        kept = post(
            proxy.url,
            [
                *elsewhere,
                {"role": "assistant", "content": "First reply."},
                {"role": "user", "content": "More."},
            ],
        ).headers["x-conversation-id"]
        listed = conversations(proxy.url)
    assert opened.startswith("auto-")
    assert kept == opened
    assert listed == {opened: 2}


def test_a_named_conversation_is_never_second_guessed(upstream: FakeUpstream) -> None:
    upstream.script(answer("One.", "391"), answer("Two.", "391"))
    with running_proxy(route_config(upstream)) as proxy:
        auto = post(proxy.url, QUESTION).headers["x-conversation-id"]
        named = post(
            proxy.url,
            [*QUESTION, {"role": "assistant", "content": "391"}, {"role": "user", "content": "?"}],
            {**KEY, "X-Conversation-Id": "mine"},
        ).headers["x-conversation-id"]
        listed = conversations(proxy.url)
    assert named == "mine"
    assert listed == {auto: 1, "mine": 1}


def test_a_resumed_agent_with_its_own_placeholder_stays_in_its_conversation(
    upstream: FakeUpstream,
) -> None:
    """An agent resumed after an interrupt writes its own turns into the
    history ("No response requested." as the assistant, "Continue from where
    you left off." as the user): the request still continues the
    conversation of the latest assistant message the proxy stored."""
    upstream.script(answer("One.", "First reply."), answer("Two.", "Second reply."))
    with running_proxy(route_config(upstream)) as proxy:
        opened = post(proxy.url, QUESTION).headers["x-conversation-id"]
        resumed = post(
            proxy.url,
            [
                *QUESTION,
                {"role": "assistant", "content": "First reply."},
                {"role": "user", "content": "Continue from where you left off."},
                {"role": "assistant", "content": "No response requested."},
                {"role": "user", "content": "Go on."},
            ],
        ).headers["x-conversation-id"]
        listed = conversations(proxy.url)
    assert resumed == opened
    assert listed == {opened: 2}


def test_only_the_latest_few_assistant_messages_are_looked_up(upstream: FakeUpstream) -> None:
    """Past WALK_BACK assistant messages the proxy never stored, a request
    opens a new conversation (a long history written elsewhere costs a
    bounded number of lookups)."""
    from proxy.history.threads import WALK_BACK

    upstream.script(answer("One.", "First reply."), answer("Two.", "Second reply."))
    foreign = []
    for n in range(WALK_BACK):
        foreign += [
            {"role": "assistant", "content": f"Written elsewhere {n}."},
            {"role": "user", "content": "And?"},
        ]
    with running_proxy(route_config(upstream)) as proxy:
        opened = post(proxy.url, QUESTION).headers["x-conversation-id"]
        later = post(
            proxy.url,
            [*QUESTION, {"role": "assistant", "content": "First reply."}, *foreign],
        ).headers["x-conversation-id"]
    assert later != opened
