"""What a stored turn says about its exchange (GET /v1/conversations/{id}):
its tool calls with name and arguments, the request's input (only with
ui.show_prompts), and what the proxy did with each earlier assistant
message's reasoning on the way up, and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests import casefiles
from tests.harness import FakeUpstream, Stream, route_config, running_proxy

KEY = {"Authorization": "Bearer sk-exchange"}
QUESTION = {"role": "user", "content": "What is 17 * 23?"}
ARGS = json.dumps({"a": 17, "b": 23})
CALL = {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": ARGS}}
PLAN = "I will multiply with the tool."


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return casefiles.chunk(delta, finish, model="k", id="chatcmpl-x")


def tool_call_turn() -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "content": "", "reasoning_content": PLAN}),
            chunk({"tool_calls": [{"index": 0, **CALL}]}),
            chunk({}, "tool_calls"),
        ]
    )


def answer_turn(text: str = "391") -> Stream:
    return Stream(
        [chunk({"reasoning_content": "Read the result."}), chunk({"content": text}, "stop")]
    )


def loop(proxy_url: str, **headers: str) -> list[dict[str, Any]]:
    """A tool round trip under conversation `x`; the stored turns."""
    auth = {**KEY, "X-Conversation-Id": "x"}
    first = httpx.post(
        f"{proxy_url}/chat/completions",
        headers=auth,
        json={"model": "k", "stream": True, "messages": [QUESTION]},
        timeout=30,
    )
    assert first.status_code == 200
    history = [
        QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "391"},
    ]
    second = httpx.post(
        f"{proxy_url}/chat/completions",
        headers={**auth, **headers},
        json={"model": "k", "stream": True, "messages": history},
        timeout=30,
    )
    assert second.status_code == 200
    stored = httpx.get(f"{proxy_url}/conversations/x", headers=KEY, timeout=10).json()
    turns: list[dict[str, Any]] = stored["turns"]
    return turns


def test_input_tool_calls_and_reinjection_are_recorded(upstream: FakeUpstream) -> None:
    upstream.script(tool_call_turn(), answer_turn())
    config = route_config(upstream, dialect="kimi", top={"ui": {"show_prompts": True}})
    with running_proxy(config) as proxy:
        first, second = loop(proxy.url, **{"X-Reasoning-Include-In-Context": "true"})
    assert first["input"] == [{"role": "user", "text": "What is 17 * 23?"}]
    assert first["toolCalls"] == [{"id": "call_1", "name": "multiply", "arguments": ARGS}]
    assert first["egress"]["messages"] == []
    assert first["egress"]["dialect"] == "kimi"
    assert second["input"] == [{"role": "tool", "text": "391", "toolCallId": "call_1"}]
    assert second["toolCalls"] == []
    assert second["egress"]["messages"] == [
        {
            "index": 1,
            "toolCall": True,
            "source": "store",
            "action": "reinjected",
            "why": "include_in_context true, strip_from_context none keeps it",
        }
    ]
    # and it was: the upstream got the stored reasoning back
    sent = upstream.chat_requests()[1].json["messages"][1]
    assert sent["reasoning_content"] == PLAN


def test_stripped_reasoning_says_why(upstream: FakeUpstream) -> None:
    upstream.script(tool_call_turn(), answer_turn())
    with running_proxy(route_config(upstream, dialect="kimi")) as proxy:
        _, second = loop(proxy.url, **{"X-Reasoning-Include-In-Context": "false"})
    (note,) = second["egress"]["messages"]
    assert note["action"] == "stripped"
    assert note["source"] == "store"
    assert note["why"] == "include_in_context false"
    assert note["placeholder"] is True  # kimi requires the key: its placeholder went instead
    assert upstream.chat_requests()[1].json["messages"][1]["reasoning_content"].strip() == ""


def test_compression_is_named_with_the_policy_it_tightened_from(upstream: FakeUpstream) -> None:
    upstream.script(tool_call_turn(), answer_turn())
    config = route_config(upstream, dialect="kimi", context_limit=60, compression_threshold=0.5)
    with running_proxy(config) as proxy:
        _, second = loop(proxy.url, **{"X-Reasoning-Include-In-Context": "true"})
    egress = second["egress"]
    assert egress["compressed"] == "all"
    (note,) = egress["messages"]
    assert note["action"] == "stripped"
    assert note["why"] == (
        "strip_from_context all: tightened from none to fit compression_threshold x context_limit"
    )


def test_without_show_prompts_no_input_is_stored(upstream: FakeUpstream, tmp_path: Path) -> None:
    for show in (True, False):
        upstream.script(tool_call_turn(), answer_turn())
        store = tmp_path / f"history-{show}.db"
        top = {"store": {"url": f"sqlite:///{store}"}, "ui": {"show_prompts": show}}
        with running_proxy(route_config(upstream, dialect="kimi", top=top)) as proxy:
            turns = loop(proxy.url)
        written = b"".join(p.read_bytes() for p in tmp_path.glob(f"history-{show}.db*"))
        # the prompt is in the store exactly when the setting is on
        assert (b"What is 17 * 23?" in written) is show
        assert all(("input" in t) is show for t in turns)
        assert turns[0]["toolCalls"][0]["name"] == "multiply"  # the model's own: always kept
