"""The output-token limit a translating door writes for the client (the
Messages door's `max_tokens`, the Responses door's `max_output_tokens`) goes
under the key the model takes: OpenAI's o-series and gpt-5 refuse
`max_tokens` ("Use 'max_completion_tokens' instead"). A chat client's own
body goes as written."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

ANSWER = Json(
    {
        "id": "chatcmpl-limit",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)
LIMITS = ("max_tokens", "max_completion_tokens")


def limit_sent(upstream: FakeUpstream) -> dict[str, Any]:
    [sent] = upstream.chat_requests()
    return {k: v for k, v in sent.json.items() if k in LIMITS}


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("gpt-5.1", "max_completion_tokens"),
        ("openai/gpt-5-mini", "max_completion_tokens"),
        ("o3-mini", "max_completion_tokens"),
        ("o4-mini", "max_completion_tokens"),
        ("gpt-4o", "max_tokens"),
        ("deepseek-chat", "max_tokens"),
        ("qwen3-32b", "max_tokens"),
    ],
)
def test_the_translating_doors_write_the_limit_the_model_takes(
    upstream: FakeUpstream, model: str, key: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(ANSWER)
        claude = anthropic.Anthropic(base_url=proxy.base, api_key="sk-limit", max_retries=0)
        claude.messages.create(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
        by_messages = limit_sent(upstream)
        upstream.reset()
        upstream.script(ANSWER)
        oai = openai.OpenAI(base_url=proxy.url, api_key="sk-limit", max_retries=0)
        oai.responses.create(model=model, input="hi", max_output_tokens=50, store=False)
        by_responses = limit_sent(upstream)
    assert by_messages == {key: 64}
    assert by_responses == {key: 50}


def test_a_chat_clients_own_limit_goes_as_written(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(ANSWER)
        httpx.post(
            f"{proxy.url}/chat/completions",
            json={
                "model": "gpt-5",
                "max_tokens": 9,
                "messages": [{"role": "user", "content": "x"}],
            },
        )
    assert limit_sent(upstream) == {"max_tokens": 9}
