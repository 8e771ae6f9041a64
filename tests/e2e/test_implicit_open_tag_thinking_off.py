"""A route whose prompt template opens `<think>` (`implicit_open_tag`,
demo-qwen) and a request that switches thinking off: the model then answers
with no `</think>` (Qwen3's template closes the empty block in the prompt),
so the reply is the answer, not reasoning. Through the real demo, at each
door, with the client's own off switch or the proxy's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.harness import running_demo

QUESTION = "What is 2 + 3?"
ANSWER = "2 + 3 = 5."
REASONING = "The user asks for 2 + 3."
MODEL = "demo-qwen"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_demo(tmp_path_factory.mktemp("demo") / "output.txt") as url:
        yield url


def chat(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="demo", max_retries=0)


OFF_SWITCHES: list[dict[str, Any]] = [
    {"chat_template_kwargs": {"enable_thinking": False}},
    {"reasoning_effort": "none"},
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("off", OFF_SWITCHES)
def test_the_clients_off_switch_gets_the_answer_as_the_answer(
    base: str, off: dict[str, Any], stream: bool
) -> None:
    messages: Any = [{"role": "user", "content": QUESTION}]
    if stream:
        chunks = chat(base).chat.completions.create(
            model=MODEL, messages=messages, stream=True, extra_body=off
        )
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        content = "".join(d.content or "" for d in deltas)
        reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    else:
        message = (
            chat(base)
            .chat.completions.create(model=MODEL, messages=messages, extra_body=off)
            .choices[0]
            .message
        )
        content = message.content or ""
        reasoning = (message.model_extra or {}).get("reasoning_content") or ""
    assert (content, reasoning) == (ANSWER, "")


def test_an_enabled_header_the_upstream_cannot_honour_turns_the_mode_off(base: str) -> None:
    """demo-qwen's route is the openai dialect, which has no off switch for
    an unknown model: `X-Reasoning-Enabled: false` sends none (and says so).
    The implicit mode applies only while reasoning is enabled for the
    request, so the model's `</think>` is a stray tag: removed, the text
    around it visible (DESIGN.md, Ingress)."""
    response = httpx.post(
        base + "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": QUESTION}]},
        headers={"X-Reasoning-Enabled": "false"},
    )
    assert response.headers["x-reasoning-ignored"] == "enabled"
    message = response.json()["choices"][0]["message"]
    assert message["content"].endswith(ANSWER)
    assert "</think>" not in message["content"]
    assert not message.get("reasoning_content")


@pytest.mark.parametrize("stream", [False, True])
def test_responses_effort_none_gets_a_message(base: str, stream: bool) -> None:
    client = chat(base)
    if stream:
        with client.responses.stream(
            model=MODEL, input=QUESTION, reasoning={"effort": "none"}
        ) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(
            model=MODEL, input=QUESTION, reasoning={"effort": "none"}
        )
    assert [i.type for i in response.output] == ["message"]
    assert response.output_text == ANSWER


@pytest.mark.parametrize("stream", [False, True])
def test_messages_thinking_disabled_leaves_no_delimiter(base: str, stream: bool) -> None:
    """`thinking: disabled` is `enabled: false`, which the openai dialect
    cannot send for this model: the model reasons anyway, the implicit mode
    is off, and the stray `</think>` never reaches the text."""
    client = anthropic.Anthropic(base_url=base, api_key="demo", max_retries=0)
    kwargs: Any = {
        "model": MODEL,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": QUESTION}],
        "thinking": {"type": "disabled"},
    }
    if stream:
        with client.messages.stream(**kwargs) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text.endswith(ANSWER)
    assert "</think>" not in text


def test_the_demo_model_still_reasons_when_thinking_is_on(base: str) -> None:
    message = (
        chat(base)
        .chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])
        .choices[0]
        .message
    )
    assert message.content == ANSWER
    assert (message.model_extra or {})["reasoning_content"].startswith(REASONING)
