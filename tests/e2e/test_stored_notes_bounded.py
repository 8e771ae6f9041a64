"""A stored turn tells what was done with each earlier assistant message's
reasoning; in a long conversation (a coding agent's loop of tool calls) the
latest 50 are noted one by one and the earlier ones counted by action, so
a conversation's notes grow with its length, not with its square."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.history.explain import MAX_STORED_NOTES
from tests.harness import FakeUpstream, Json, route_config, running_proxy

HEADERS = {"Authorization": "Bearer sk-long-loop", "X-Conversation-Id": "long-loop"}
EARLIER = 30
TURNS = MAX_STORED_NOTES + EARLIER  # assistant messages in the last request


def answer(text: str) -> Json:
    message = {"role": "assistant", "content": text, "reasoning_content": "Thinking."}
    return Json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        messages.append({"role": "user", "content": f"Question {n}"})
        messages.append({"role": "assistant", "content": f"Answer {n}."})
    return [*messages, {"role": "user", "content": "Last question"}]


def test_a_long_requests_earliest_notes_are_counted_not_kept(upstream: FakeUpstream) -> None:
    upstream.script(answer("Short."), answer("Last."))
    with running_proxy(route_config(upstream)) as proxy:
        for messages in (history(3), history(TURNS)):
            response = httpx.post(
                f"{proxy.url}/chat/completions",
                json={"model": "m", "messages": messages},
                headers=HEADERS,
                timeout=30,
            )
            assert response.status_code == 200, response.text
        turns = httpx.get(
            f"{proxy.url}/conversations/long-loop", headers=HEADERS, timeout=10
        ).json()["turns"]
    short, long = turns[0]["egress"], turns[1]["egress"]
    # a short request's notes are kept whole, as before
    assert [n["index"] for n in short["messages"]] == [1, 3, 5]
    assert "earlier" not in short
    # a long one's: the latest MAX_STORED_NOTES, the earlier ones counted
    assert len(long["messages"]) == MAX_STORED_NOTES
    assert [n["index"] for n in long["messages"]] == [2 * i + 1 for i in range(EARLIER, TURNS)]
    assert long["earlier"] == {"none": EARLIER}
    assert {n["action"] for n in long["messages"]} == {"none"}
