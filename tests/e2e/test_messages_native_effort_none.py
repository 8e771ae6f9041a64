"""`X-Reasoning-Effort: none` on a Messages upstream (`api: messages`):
Anthropic's API has no `none` effort, so the off switch carries it
(`thinking: {type: disabled}`), as `X-Reasoning-Enabled: false` does; the
setting is never dropped without a word."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

ANSWER = {
    "id": "msg_up",
    "type": "message",
    "role": "assistant",
    "model": "claude-up",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


@pytest.mark.parametrize(
    ("headers", "body", "thinking"),
    [
        ({"X-Reasoning-Effort": "none"}, {}, {"type": "disabled"}),
        (
            {"X-Reasoning-Effort": "none"},
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
            {"type": "disabled"},
        ),
        ({"X-Reasoning-Enabled": "false"}, {}, {"type": "disabled"}),
        ({"X-Reasoning-Effort": "low"}, {}, None),
    ],
    ids=["none", "none-over-the-body", "off", "low"],
)
def test_effort_none_turns_thinking_off(
    upstream: FakeUpstream, headers: dict[str, str], body: dict[str, Any], thinking: Any
) -> None:
    upstream.script(Json(ANSWER))
    with running_proxy(route_config(upstream, api="messages")) as proxy:
        response = httpx.post(
            f"{proxy.base}/v1/messages",
            json={
                "model": "claude-up",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "hi"}],
                **body,
            },
            headers={"x-api-key": "sk-ant-client", **headers},
        )
    assert response.status_code == 200
    (sent,) = [r.json for r in upstream.requests if r.path.endswith("/messages")]
    assert sent.get("thinking") == thinking
    assert sent.get("output_config") == ({"effort": "low"} if thinking is None else None)
