"""Two branches of one history (an edited tool result, then the same tool
call in each, as Kimi numbers its ids per conversation) each get their own
reasoning back, with `X-Conversation-Id` and without it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

MODEL = "kimi-k2"
TOOLS = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
QUESTION = {"role": "user", "content": "Weather?"}
TOMORROW = {"role": "user", "content": "And tomorrow?"}


def call(call_id: str, args: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "get", "arguments": args}}


FIRST = call("functions.get:0", '{"day": 0}')
SECOND = call("functions.get:1", '{"day": 1}')


def answer(reasoning: str, content: str | None = None, calls: Any = None) -> Json:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return Json({"id": "c", "object": "chat.completion", "model": MODEL, "choices": [choice]})


def history(result: str, said: str) -> list[Any]:
    """The branch whose tool result was `result` and whose answer `said`."""
    return [
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [FIRST]},
        {"role": "tool", "tool_call_id": FIRST["id"], "content": result},
        {"role": "assistant", "content": said},
        TOMORROW,
    ]


@pytest.mark.parametrize("named", [False, True], ids=["auto-id", "named"])
def test_each_branch_gets_its_own_reasoning_back(upstream: FakeUpstream, named: bool) -> None:
    headers = {"Authorization": "Bearer sk-branches"}
    if named:
        headers["X-Conversation-Id"] = "branches"

    def post(messages: list[Any]) -> httpx.Response:
        body = {"model": MODEL, "messages": messages, "tools": TOOLS}
        response = httpx.post(
            f"{proxy.url}/chat/completions", headers=headers, json=body, timeout=30
        )
        assert response.status_code == 200
        return response

    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        upstream.script(answer("plan today", calls=[FIRST]))
        post([QUESTION])
        sunny, rainy = history("sunny", "Sunny."), history("rainy", "Rainy.")
        # the tool result edited: two answers to the same call
        upstream.script(answer("sunny seen", "Sunny."), answer("rainy seen", "Rainy."))
        post(sunny[:3])
        post(rainy[:3])
        # each branch goes on with the same call, under the same id
        upstream.script(answer("plan after sunny", calls=[SECOND]))
        post(sunny)
        upstream.script(answer("plan after rainy", calls=[SECOND]))
        post(rainy)
        done = {"role": "tool", "tool_call_id": SECOND["id"], "content": "mild"}
        follow = {"role": "assistant", "content": None, "tool_calls": [SECOND]}
        reasoning: dict[str, str] = {}
        for name, branch in (("sunny", sunny), ("rainy", rainy)):
            upstream.script(answer("done", "Mild."))
            post([*branch, follow, done])
            sent = upstream.chat_requests()[-1].json["messages"]
            assert sent[1]["reasoning_content"] == "plan today"
            reasoning[name] = sent[5]["reasoning_content"]
    assert reasoning == {"sunny": "plan after sunny", "rainy": "plan after rainy"}


def test_chats_whose_answers_say_the_same_keep_their_conversations(
    upstream: FakeUpstream,
) -> None:
    """Two chats without `X-Conversation-Id` whose first answers are the
    same words each continue their own conversation, with their own
    reasoning."""
    headers = {"Authorization": "Bearer sk-branches"}
    questions = ("Is 7 prime?", "Is 13 prime?")
    with running_proxy(route_config(upstream, dialect="deepseek")) as proxy:

        def post(messages: list[Any]) -> httpx.Response:
            body = {"model": "deepseek-chat", "messages": messages}
            response = httpx.post(
                f"{proxy.url}/chat/completions", headers=headers, json=body, timeout=30
            )
            assert response.status_code == 200
            return response

        opened = []
        for question in questions:
            upstream.script(answer(f"checking {question}", "Yes."))
            opened.append(post([{"role": "user", "content": question}]))
        continued = []
        for question in questions:
            upstream.script(answer("ok", "Done."))
            history = [
                {"role": "user", "content": question},
                {"role": "assistant", "content": "Yes."},
                {"role": "user", "content": "Why?"},
            ]
            continued.append(post(history).headers["x-conversation-id"])
    assert continued == [r.headers["x-conversation-id"] for r in opened]
