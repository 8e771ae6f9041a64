"""A chat body that already tells the upstream how much to reason, in a
spelling or a control other than the one the dialect writes, gets no second
control from a route, profile or default (the upstream would get two that
disagree: OpenRouter takes `reasoning_effort` and `reasoning.effort`, and an
effort or a budget, not both; Gemini `reasoning_effort` or a thinking
budget; LiteLLM and Fireworks an effort or `thinking`). A header that sets
the setting wins, and the body's other spelling of it goes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, ProxyServer, running_proxy

GEMINI_BUDGET = {"google": {"thinking_config": {"thinking_budget": 1024}}}


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeUpstream, ProxyServer]]:
    upstream = FakeUpstream().start()
    routes = [
        {
            "name": name,
            "models": [f"*@{name}"],
            "upstream": upstream.url,
            "dialect": name,
            # a route whose settings would add a control of their own
            "reasoning": {"effort": "low", "max_tokens": 512},
        }
        for name in ("openrouter", "gemini", "litellm", "fireworks")
    ]
    config = {"routes": routes, "profiles": {"budget": {"effort": None, "maxTokens": 300}}}
    try:
        with running_proxy(config) as proxy:
            yield upstream, proxy
    finally:
        upstream.stop()


def send(
    served: tuple[FakeUpstream, ProxyServer],
    model: str,
    headers: dict[str, str],
    **body: Any,
) -> dict[str, Any]:
    """What the upstream got beside the model and messages (the `openai`
    SDK's `extra_body` carries the client's own controls)."""
    upstream, proxy = served
    upstream.reset()
    with openai.OpenAI(base_url=proxy.url, api_key="sk-client", max_retries=0) as client:
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers=headers,
            extra_body=body,
        )
    (sent,) = upstream.chat_requests()
    return {k: v for k, v in sent.json.items() if k not in ("model", "messages")}


EFFORT_HIGH = {"X-Reasoning-Effort": "high"}
BUDGET = {"X-Reasoning-Max-Tokens": "2048"}
BUDGET_PROFILE = {"X-Reasoning-Profile": "budget"}

CASES = [
    # the body's own control stays, and the route's effort adds none
    ("m@openrouter", {}, {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    ("m@openrouter", {}, {"reasoning": {"max_tokens": 900}}, {"reasoning": {"max_tokens": 900}}),
    (
        "m@openrouter",
        BUDGET_PROFILE,
        {"reasoning": {"effort": "high"}},
        {"reasoning": {"effort": "high"}},
    ),
    ("m@gemini", {}, GEMINI_BUDGET, GEMINI_BUDGET),
    ("m@gemini", BUDGET_PROFILE, {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    (
        "m@litellm",
        {},
        {"thinking": {"type": "enabled", "budget_tokens": 900}},
        {"thinking": {"type": "enabled", "budget_tokens": 900}},
    ),
    ("m@fireworks", BUDGET_PROFILE, {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
    # a header sets the setting: its control alone goes
    ("m@openrouter", EFFORT_HIGH, {"reasoning_effort": "low"}, {"reasoning": {"effort": "high"}}),
    (
        "m@openrouter",
        EFFORT_HIGH,
        {"reasoning": {"max_tokens": 900, "exclude": True}},
        {"reasoning": {"effort": "high", "exclude": True}},
    ),
    (
        "m@openrouter",
        {**BUDGET, **BUDGET_PROFILE},
        {"reasoning_effort": "low"},
        {"reasoning": {"max_tokens": 2048}},
    ),
    ("m@gemini", EFFORT_HIGH, GEMINI_BUDGET, {"reasoning_effort": "high"}),
    ("m@gemini", {"X-Reasoning-Enabled": "false"}, GEMINI_BUDGET, {"reasoning_effort": "minimal"}),
    (
        "m@litellm",
        EFFORT_HIGH,
        {"thinking": {"type": "enabled", "budget_tokens": 900}},
        {"reasoning_effort": "high"},
    ),
    (
        "m@fireworks",
        {**BUDGET, **BUDGET_PROFILE},
        {"reasoning_effort": "low"},
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    ),
]


@pytest.mark.parametrize(("model", "headers", "body", "sent"), CASES)
def test_the_upstream_gets_one_control_per_setting(
    served: tuple[FakeUpstream, ProxyServer],
    model: str,
    headers: dict[str, str],
    body: dict[str, Any],
    sent: dict[str, Any],
) -> None:
    assert send(served, model, headers, **body) == sent


def test_gemini_budget_in_either_spelling_is_the_bodys_own(
    served: tuple[FakeUpstream, ProxyServer],
) -> None:
    """Google's REST examples write the budget under `extra_body`; the
    `openai` SDK's `extra_body` puts it at the top. Either is the client's."""
    spelled = {"extra_body": GEMINI_BUDGET}
    assert send(served, "m@gemini", {}, **spelled) == spelled
    assert send(served, "m@gemini", EFFORT_HIGH, **spelled) == {"reasoning_effort": "high"}
