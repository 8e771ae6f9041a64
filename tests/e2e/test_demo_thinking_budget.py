"""`X-Reasoning-Max-Tokens` on the demo: the proxy sends the budget in the
form the dialect takes (vLLM's `thinking_token_budget`, OpenRouter's
`reasoning.max_tokens`), and the simulated model stops its reasoning there,
as the providers do, so the header has a visible effect."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.harness import running_demo

QUESTION = [{"role": "user", "content": "What is 17 * 23?"}]
BUDGET = 5  # tokens: four characters each in the simulator


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_demo(tmp_path_factory.mktemp("demo") / "output.txt") as url:
        yield url


def reasoning_of(base: str, model: str, stream: bool, headers: dict[str, str]) -> tuple[str, str]:
    client = openai.OpenAI(
        base_url=base + "/v1", api_key="demo", max_retries=0, default_headers=headers
    )
    if not stream:
        message = client.chat.completions.create(model=model, messages=QUESTION).choices[0].message
        return (message.model_extra or {}).get("reasoning_content") or "", message.content or ""
    deltas = [
        c.choices[0].delta
        for c in client.chat.completions.create(model=model, messages=QUESTION, stream=True)
        if c.choices
    ]
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    return reasoning, "".join(d.content or "" for d in deltas)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["demo-vllm", "demo-openrouter"])
def test_the_max_tokens_header_cuts_the_reasoning_short(
    base: str, model: str, stream: bool
) -> None:
    whole, answer = reasoning_of(base, model, stream, {})
    cut, cut_answer = reasoning_of(base, model, stream, {"X-Reasoning-Max-Tokens": str(BUDGET)})
    assert len(whole) > 4 * BUDGET
    assert cut
    assert len(cut) <= 4 * BUDGET
    assert whole.startswith(cut)
    assert cut_answer == answer == "17 * 23 = 391."


def test_the_budget_bounds_the_reported_reasoning_tokens(base: str) -> None:
    response = httpx.post(
        base + "/v1/chat/completions",
        json={"model": "demo-openrouter", "messages": QUESTION},
        headers={"X-Reasoning-Max-Tokens": str(BUDGET)},
    )
    assert "x-reasoning-ignored" not in response.headers
    details = response.json()["usage"]["completion_tokens_details"]
    assert 0 < details["reasoning_tokens"] <= BUDGET
