"""DeepSeek's highest effort, `max`, is reachable: the settings' top effort
`xhigh` goes to DeepSeek as `max` (DeepSeek's own table maps `xhigh` to
`high`), from the header on the chat door and from Anthropic's
`output_config.effort: max` on the Messages door. Lower efforts go as
given. The real proxy, a fake DeepSeek upstream."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, running_proxy
from tests.messages_wire import sdk_client

ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "deepseek-v4-pro",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "reasoning_content": "Hm.", "content": "Hi."},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 3},
}


def config(upstream: FakeUpstream) -> dict[str, Any]:
    return {
        "routes": [
            {"name": "chat", "models": ["*"], "upstream": upstream.url, "dialect": "deepseek"}
        ]
    }


@pytest.mark.parametrize(
    ("effort", "sent"),
    [("xhigh", "max"), ("high", "high"), ("medium", "medium"), ("low", "low")],
)
def test_the_effort_header_reaches_deepseeks_efforts(
    upstream: FakeUpstream, effort: str, sent: str
) -> None:
    upstream.script(Json(ANSWER))
    with running_proxy(config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        response = client.post(
            f"{proxy.url}/chat/completions",
            json={"model": "deepseek-v4-pro", "messages": [{"role": "user", "content": "Hi"}]},
            headers={"Authorization": "Bearer sk-test", "X-Reasoning-Effort": effort},
        )
    assert response.status_code == 200, response.text
    assert "x-reasoning-ignored" not in response.headers
    body = upstream.chat_requests()[-1].json
    assert body["reasoning_effort"] == sent
    assert body["thinking"] == {"type": "enabled"}


def test_a_body_effort_of_the_client_passes_as_written(upstream: FakeUpstream) -> None:
    """Only the setting is mapped: a client that writes DeepSeek's own
    `reasoning_effort` in the body gets it sent unchanged."""
    upstream.script(Json(ANSWER))
    with running_proxy(config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        response = client.post(
            f"{proxy.url}/chat/completions",
            json={
                "model": "deepseek-v4-pro",
                "messages": [{"role": "user", "content": "Hi"}],
                "reasoning_effort": "xhigh",
            },
            headers={"Authorization": "Bearer sk-test"},
        )
    assert response.status_code == 200, response.text
    assert upstream.chat_requests()[-1].json["reasoning_effort"] == "xhigh"


def test_anthropics_max_effort_reaches_deepseeks_max(upstream: FakeUpstream) -> None:
    upstream.script(Json(ANSWER))
    with running_proxy(config(upstream)) as proxy:
        message = sdk_client(proxy.base, "sk-ant-test").messages.create(
            model="deepseek-v4-pro",
            max_tokens=300,
            messages=[{"role": "user", "content": "Hi"}],
            output_config={"effort": "max"},
        )
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert upstream.chat_requests()[-1].json["reasoning_effort"] == "max"
