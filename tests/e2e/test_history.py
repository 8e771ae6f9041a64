"""Conversation history end to end: the agent loop through the openai SDK,
tenant isolation, context accounting, the conversations and profiles API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from proxy.history.context import request_tokens
from proxy.tokenizer import LONG_TEXT, TokenCounter
from tests import casefiles
from tests.casefiles import WEATHER_CHAT_TOOL
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

TOOLS: Any = [WEATHER_CHAT_TOOL]
CITIES = ["Paris", "Oslo", "Lima"]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return casefiles.chunk(delta, finish, model="kimi-k2-thinking", id="chatcmpl-k")


def call_id(round_: int, reuse: bool) -> str:
    # Kimi numbers tool calls per conversation (`functions.get_weather:0`), so
    # the same id comes back in every round
    return "functions.get_weather:0" if reuse else f"call_{round_}"


def tool_call_turn(round_: int, reuse: bool = False) -> Stream:
    city = CITIES[round_]
    call = {
        "index": 0,
        "id": call_id(round_, reuse),
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    return Stream(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": f"Plan {round_}: "}),
            chunk({"reasoning_content": f"look up {city}."}),
            chunk({"tool_calls": [call]}),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "function": {"arguments": json.dumps({"city": city})}}
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )


def answer_turn(round_: int) -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": f"Answer {round_}: "}),
            chunk({"reasoning_content": "the tool said sunny."}),
            chunk({"content": f"It is sunny in {CITIES[round_]}."}),
            chunk({}, "stop"),
        ]
    )


def expected_reasoning(history_turns: int) -> list[str]:
    """The reasoning of each assistant message, in order, for the first N turns."""
    out = []
    for n in range(history_turns):
        round_, second = divmod(n, 2)
        out.append(
            f"Answer {round_}: the tool said sunny."
            if second
            else f"Plan {round_}: look up {CITIES[round_]}."
        )
    return out


def run_agent(proxy_url: str, include: bool, reuse: bool = False) -> None:
    with openai.OpenAI(
        base_url=proxy_url,
        api_key="sk-agent",
        max_retries=0,
        default_headers={
            "X-Conversation-Id": f"agent-{include}",
            "X-Reasoning-Include-In-Context": str(include).lower(),
        },
    ) as client:
        _agent_rounds(client, reuse)


def _agent_rounds(client: openai.OpenAI, reuse: bool) -> None:
    messages: list[Any] = []
    for round_, city in enumerate(CITIES):
        messages.append({"role": "user", "content": f"Weather in {city}?"})
        for _ in range(2):
            stream = client.chat.completions.create(
                model="kimi-k2-thinking", messages=messages, tools=TOOLS, stream=True
            )
            content, calls = "", {}
            for part in stream:
                delta = part.choices[0].delta
                content += delta.content or ""
                for call in delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    if call.function:
                        entry["name"] += call.function.name or ""
                        entry["arguments"] += call.function.arguments or ""
            # like most agents: history keeps the answer and the tool calls only
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls.values()
                ]
            messages.append(message)
            if calls:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id(round_, reuse),
                        "content": "sunny, 21°C",
                    }
                )


@pytest.mark.parametrize(("include", "reuse"), [(True, False), (False, False), (True, True)])
def test_agent_loop_with_the_openai_sdk(upstream: FakeUpstream, include: bool, reuse: bool) -> None:
    for round_ in range(3):
        upstream.script(tool_call_turn(round_, reuse), answer_turn(round_))
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        run_agent(proxy.url, include, reuse)
    requests = upstream.chat_requests()
    assert len(requests) == 6
    for n, request in enumerate(requests):
        assistants = [m for m in request.json["messages"] if m["role"] == "assistant"]
        assert len(assistants) == n
        for message, reasoning in zip(assistants, expected_reasoning(n), strict=True):
            if include:
                assert message["reasoning_content"] == reasoning
            elif "tool_calls" in message:
                # kimi requires the key on tool-call turns: its placeholder, no text
                assert message["reasoning_content"].strip() == ""
            else:
                assert "reasoning_content" not in message


def test_without_conversation_id_turns_are_found_by_tool_call_and_content(
    upstream: FakeUpstream,
) -> None:
    upstream.script(
        tool_call_turn(0),
        Json(
            {
                "id": "c",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": "Sunny.",
                            "reasoning_content": "Summarize the tool output.",
                        },
                        "finish_reason": "stop",
                    }
                ],
            }
        ),
    )
    headers = {"Authorization": "Bearer sk-x", "X-Reasoning-Include-In-Context": "true"}
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        base = [{"role": "user", "content": "Weather in Paris?"}]
        httpx.post(
            f"{proxy.url}/chat/completions",
            headers=headers,
            timeout=30,
            json={"model": "k", "stream": True, "messages": base, "tools": TOOLS},
        )
        second = [
            *base,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
        ]
        httpx.post(
            f"{proxy.url}/chat/completions",
            headers=headers,
            timeout=30,
            json={"model": "k", "messages": second, "tools": TOOLS},
        )
        # a client that trims its history differently still finds the answer by content
        third = [
            {"role": "user", "content": "Something else first"},
            *second[1:],
            {"role": "assistant", "content": " Sunny. "},
            {"role": "user", "content": "ok"},
        ]
        httpx.post(
            f"{proxy.url}/chat/completions",
            headers=headers,
            timeout=30,
            json={"model": "k", "messages": third},
        )
    sent = upstream.chat_requests()
    assert sent[1].json["messages"][1]["reasoning_content"] == "Plan 0: look up Paris."
    assert sent[2].json["messages"][1]["reasoning_content"] == "Plan 0: look up Paris."
    assert sent[2].json["messages"][3]["reasoning_content"] == "Summarize the tool output."


def test_tenants_share_nothing_and_foreign_ids_look_unknown(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream([chunk({"reasoning_content": "A's plan"}), chunk({"content": "A"}, "stop")])
    )
    with running_proxy(route_config(upstream)) as proxy:
        a = {"Authorization": "Bearer sk-tenant-a", "X-Conversation-Id": "same-id"}
        b = {"Authorization": "Bearer sk-tenant-b", "X-Conversation-Id": "same-id"}
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "q"}]}
        httpx.post(f"{proxy.url}/chat/completions", headers=a, json=body, timeout=30)
        mine = httpx.get(f"{proxy.url}/conversations/same-id", headers=a)
        foreign = httpx.get(f"{proxy.url}/conversations/same-id", headers=b)
        unknown = httpx.get(f"{proxy.url}/conversations/never-used", headers=b)
        anonymous = httpx.get(f"{proxy.url}/conversations/same-id")
        delete_foreign = httpx.delete(f"{proxy.url}/conversations/same-id", headers=b)
        listed_b = httpx.get(f"{proxy.url}/conversations", headers=b).json()
        still_mine = httpx.get(f"{proxy.url}/conversations/same-id", headers=a)
    assert mine.status_code == 200
    assert mine.json()["turns"][0]["blocks"][0]["thought"] == "A's plan"
    assert foreign.status_code == unknown.status_code == anonymous.status_code == 404
    assert foreign.content == unknown.content == anonymous.content
    assert foreign.json()["error"]["type"] == "invalid_request_error"
    assert delete_foreign.status_code == 404
    assert listed_b["data"] == []
    assert still_mine.status_code == 200


def post_chat(url: str, headers: dict[str, str], messages: list[Any]) -> httpx.Response:
    """A chat completion for model `m` through the proxy at `url`."""
    body = {"model": "m", "messages": messages}
    return httpx.post(f"{url}/chat/completions", headers=headers, timeout=30, json=body)


def test_conversation_api_shape_and_delete(upstream: FakeUpstream) -> None:
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 20,
        "total_tokens": 25,
        "completion_tokens_details": {"reasoning_tokens": 12},
    }
    upstream.script(
        Json(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "<think>why</think>Because."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )
    )
    headers = {"Authorization": "Bearer sk-shape", "X-Conversation-Id": "shape-1"}
    with running_proxy(route_config(upstream)) as proxy:
        r = post_chat(proxy.url, headers, [{"role": "user", "content": "Why?"}])
        data = httpx.get(f"{proxy.url}/conversations/shape-1", headers=headers).json()
        gone = httpx.delete(f"{proxy.url}/conversations/shape-1", headers=headers)
        after = httpx.get(f"{proxy.url}/conversations/shape-1", headers=headers)
    assert set(data) == {"id", "turns", "tokens"}
    (turn,) = data["turns"]
    assert {
        "index",
        "created",
        "model",
        "route",
        "complete",
        "finishReason",
        "blocks",
        "content",
        "toolCallIds",
        "usage",
    } <= set(turn)
    assert (turn["index"], turn["model"], turn["route"], turn["complete"]) == (0, "m", "test", True)
    assert turn["content"] == "Because."
    assert turn["usage"] == usage
    assert turn["blocks"] == [
        {
            "type": "thinking",
            "thought": "why",
            "sourceField": "think_tag",
            "isHidden": False,
            "signature": None,
            "encrypted": None,
            "tokens": 12,
        }
    ]
    assert data["tokens"]["effective"] == int(r.headers["x-context-tokens-effective"])
    assert data["tokens"]["raw"] == int(r.headers["x-context-tokens-raw"])
    assert gone.status_code == 204
    assert after.status_code == 404


# -- context accounting ------------------------------------------------------------------


def history(n: int, reasoning_chars: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i}"})
        messages.append(
            {
                "role": "assistant",
                "content": f"answer {i}",
                "reasoning_content": f"step {i} " + "think " * (reasoning_chars // 6),
            }
        )
    messages.append({"role": "user", "content": "last question"})
    return messages


def test_context_tokens_effective_and_raw(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, context_limit=100_000)) as proxy:

        def tokens(headers: dict[str, str]) -> tuple[int, int, str]:
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                timeout=30,
                headers={"Authorization": "Bearer sk-c", **headers},
                json={"model": "m", "messages": history(3, 600)},
            )
            assert r.status_code == 200
            return (
                int(r.headers["x-context-tokens-effective"]),
                int(r.headers["x-context-tokens-raw"]),
                r.headers["x-context-limit"],
            )

        excluded = tokens({})
        included = tokens({"X-Reasoning-Include-In-Context": "true"})
        last_only = tokens(
            {
                "X-Reasoning-Include-In-Context": "true",
                "X-Reasoning-Strip-From-Context": "allButLast",
            }
        )
    assert excluded[2] == "100000"
    assert excluded[1] == included[1] == last_only[1]  # raw: all reasoning, always
    assert excluded[0] < last_only[0] < included[0] == included[1]
    assert included[0] - excluded[0] > 3 * 90  # three blocks of ~100 tokens each


def test_compression_tightens_the_strip_policy(upstream: FakeUpstream) -> None:
    headers = {"Authorization": "Bearer sk-c", "X-Reasoning-Include-In-Context": "true"}
    results = {}
    with running_proxy(
        route_config(upstream, context_limit=600, compression_threshold=0.5)
    ) as proxy:
        for reasoning_chars in (60, 600, 3000):
            r = httpx.post(
                f"{proxy.url}/chat/completions",
                headers=headers,
                timeout=30,
                json={"model": "m", "messages": history(3, reasoning_chars)},
            )
            results[reasoning_chars] = (
                r.headers.get("x-reasoning-compressed"),
                int(r.headers["x-context-tokens-effective"]),
            )
    sent = [m for m in upstream.chat_requests()[1].json["messages"] if m["role"] == "assistant"]
    assert results[60][0] is None  # fits: nothing tightened
    assert results[600][0] == "allButLast"
    assert results[600][1] <= 300
    assert [("reasoning_content" in m) for m in sent] == [False, False, True]
    assert results[3000][0] == "all"


# -- profiles ---------------------------------------------------------------------------


def test_profiles_api(upstream: FakeUpstream) -> None:
    config = route_config(
        upstream,
        dialect="openrouter",
        top={"profiles": {"fixed": {"effort": "low"}}, "server": {"admin_token": "adm-1"}},
    )
    admin = {"Authorization": "Bearer adm-1"}
    with running_proxy(config) as proxy:
        base = f"{proxy.url}/reasoning/profiles"
        missing_token = httpx.put(f"{base}/fast", json={"effort": "high"})
        wrong_token = httpx.put(
            f"{base}/fast", json={"effort": "high"}, headers={"Authorization": "Bearer nope"}
        )
        bad_value = httpx.put(f"{base}/fast", json={"effort": "extreme"}, headers=admin)
        read_only = httpx.put(f"{base}/fixed", json={"effort": "high"}, headers=admin)
        created = httpx.put(
            f"{base}/fast", json={"effort": "high", "includeInContext": True}, headers=admin
        )
        got = httpx.get(f"{base}/fast")
        listed = httpx.get(base).json()
        used = httpx.post(
            f"{proxy.url}/chat/completions",
            timeout=30,
            headers={"Authorization": "Bearer sk-u", "X-Reasoning-Profile": "fast"},
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        deleted = httpx.delete(f"{base}/fast", headers=admin)
        unknown = httpx.post(
            f"{proxy.url}/chat/completions",
            timeout=30,
            headers={"X-Reasoning-Profile": "fast"},
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
    assert missing_token.status_code == 401
    assert wrong_token.status_code == 403
    assert bad_value.status_code == 400
    assert "extreme" not in bad_value.text
    assert read_only.status_code == 403
    assert created.status_code == 200
    assert got.json() == {
        "name": "fast",
        "source": "store",
        "settings": {"effort": "high", "include_in_context": True},
    }
    assert {p["name"] for p in listed["data"]} == {"fixed", "fast"}
    assert used.status_code == 200
    assert upstream.chat_requests()[0].json["reasoning"] == {"effort": "high"}
    assert deleted.status_code == 204
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "unknown_profile"


def test_profile_writes_are_refused_without_an_admin_token(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.put(
            f"{proxy.url}/reasoning/profiles/x",
            json={"effort": "low"},
            headers={"Authorization": "Bearer anything"},
        )
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "admin_disabled"


def test_long_texts_count_as_short_ones_do(upstream: FakeUpstream) -> None:
    """A long tool output and a long reasoning are counted off the event
    loop (proxy.tokenizer.Count.warm): the figures are the ones counting them
    in place gives."""
    reasoning = "Consider each part of the file in turn, then the whole. " * 600
    output = "def handler(request):\n    return respond(request.body)\n" * 800
    assert min(len(reasoning), len(output)) > LONG_TEXT
    completion = {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Done.",
                    "reasoning_content": reasoning,
                },
                "finish_reason": "stop",
            }
        ],
    }
    upstream.script(Json(completion), Json(completion))
    messages: list[Any] = [{"role": "user", "content": "Summarise this file:\n" + output}]
    headers = {"Authorization": "Bearer sk-long", "X-Conversation-Id": "long-1"}
    with running_proxy(route_config(upstream)) as proxy:
        first = post_chat(proxy.url, headers, messages)
        again = [
            *messages,
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "And?"},
        ]
        second = post_chat(proxy.url, headers, again)
        data = httpx.get(f"{proxy.url}/conversations/long-1", headers=headers).json()
    count = TokenCounter().count
    thought = data["turns"][0]["blocks"][0]["thought"]
    assert thought == reasoning.strip()
    assert first.status_code == second.status_code == 200
    assert int(first.headers["x-context-tokens-effective"]) == request_tokens(messages, None, count)
    assert int(second.headers["x-context-tokens-effective"]) == request_tokens(again, None, count)
    assert int(second.headers["x-context-tokens-raw"]) == request_tokens(
        again, None, count
    ) + count(thought)
    assert [t["blocks"][0]["tokens"] for t in data["turns"]] == [count(thought)] * 2


def test_the_list_says_when_it_left_older_conversations_out(upstream: FakeUpstream) -> None:
    key = {"Authorization": "Bearer sk-listing"}
    with running_proxy(route_config(upstream)) as proxy:
        for n in range(3):
            answer = {"role": "assistant", "content": f"answer {n}"}
            upstream.script(Json({"choices": [{"message": answer, "finish_reason": "stop"}]}))
            user = {"role": "user", "content": f"question {n}"}
            r = post_chat(proxy.url, {**key, "X-Conversation-Id": f"list-{n}"}, [user])
            assert r.status_code == 200
        two = httpx.get(f"{proxy.url}/conversations?limit=2", headers=key).json()
        three = httpx.get(f"{proxy.url}/conversations?limit=3", headers=key).json()
        capped = httpx.get(f"{proxy.url}/conversations?limit=100000", headers=key).json()
        floored = httpx.get(f"{proxy.url}/conversations?limit=0", headers=key).json()
    assert [c["id"] for c in two["data"]] == ["list-2", "list-1"]  # the most recent first
    assert two["has_more"] is True
    assert [c["id"] for c in three["data"]] == ["list-2", "list-1", "list-0"]
    assert three["has_more"] is False
    assert capped["has_more"] is False
    assert len(capped["data"]) == 3
    assert [c["id"] for c in floored["data"]] == ["list-2"]  # the nearer bound, 1
    assert floored["has_more"] is True
