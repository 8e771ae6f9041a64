"""The Kimi K2 tool loop of the `kimi-tool-replay-include` conformance case,
split so its two requests can go to different proxy processes (or to one
proxy before and after a restart)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx

from tests.casefiles import HERE, no_ws
from tests.harness import FakeUpstream, Json, Stream

CASE = json.loads((HERE / "egress" / "kimi-tool-replay-include.json").read_text("utf-8"))
STORED_REASONING = "The user wants the weather in Paris. I should call get_weather."


def kimi_config(directory: Path, upstream: FakeUpstream) -> Path:
    """A config file with one catch-all route of dialect kimi."""
    path = directory / "kimi.yaml"
    path.write_text(
        "routes:\n"
        "  - name: kimi\n"
        '    models: ["*"]\n'
        f"    upstream: {upstream.url}\n"
        "    dialect: kimi\n",
        encoding="utf-8",
    )
    return path


def _headers(step: int, conversation: str) -> dict[str, str]:
    return {**CASE["steps"][step]["headers"], "X-Conversation-Id": conversation}


def store_tool_call_turn(base_url: str, upstream: FakeUpstream, conversation: str) -> None:
    """Step 1: a streamed tool-call turn with reasoning, stored by the proxy."""
    step = CASE["steps"][0]
    upstream.script(Stream(copy.deepcopy(step["upstream"])))
    response = httpx.post(
        f"{base_url}/v1/chat/completions",
        json=step["request"],
        headers=_headers(0, conversation),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.text.rstrip().endswith("data: [DONE]")


def replay_without_reasoning(
    base_url: str, upstream: FakeUpstream, conversation: str
) -> dict[str, Any]:
    """Step 2: the client sends the tool-call message back without its
    reasoning; returns that assistant message as the upstream received it."""
    step = CASE["steps"][1]
    upstream.script(Json(copy.deepcopy(step["upstream"][0])))
    before = len(upstream.chat_requests())
    response = httpx.post(
        f"{base_url}/v1/chat/completions",
        json=step["request"],
        headers=_headers(1, conversation),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    (received,) = upstream.chat_requests()[before:]
    assistant: dict[str, Any] = received.json["messages"][1]
    assert assistant["role"] == "assistant"
    return assistant


def assert_reinjected(assistant: dict[str, Any]) -> None:
    assert no_ws(assistant.get("reasoning_content") or "") == no_ws(STORED_REASONING)
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0"]


def stored_turns(base_url: str, conversation: str) -> httpx.Response:
    return httpx.get(
        f"{base_url}/v1/conversations/{conversation}",
        headers={"Authorization": CASE["steps"][0]["headers"]["Authorization"]},
        timeout=10,
    )
