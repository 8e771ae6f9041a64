"""Per-request dialect detection and `include_in_context: auto`, through the
real proxy: a route without `dialect:` (its fake upstream's host is unknown)
takes the dialect from each request's model name, and under the default
`auto` a tool loop gets its reasoning back where that dialect needs it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

CALL = {"id": "call_7", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def tool_turn(model: str) -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "reasoning_content": "I should call f."}, model=model),
            chunk({"tool_calls": [{"index": 0, **CALL}]}, model=model),
            chunk({}, "tool_calls", model=model),
        ]
    )


def answer(model: str) -> Json:
    message = {"role": "assistant", "content": "done"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return Json({"id": "c", "object": "chat.completion", "model": model, "choices": [choice]})


def tool_loop(
    proxy_url: str, upstream: FakeUpstream, model: str
) -> tuple[dict[str, Any], httpx.Response]:
    """Two steps of a tool loop whose client drops the reasoning; returns the
    assistant message the upstream got back in step 2, and that response."""
    headers = {
        "Authorization": "Bearer sk-test",
        "X-Conversation-Id": "loop-" + model.replace("/", "."),
    }
    upstream.script(tool_turn(model), answer(model))
    question = {"role": "user", "content": "go"}
    first = httpx.post(
        f"{proxy_url}/chat/completions",
        json={"model": model, "stream": True, "messages": [question]},
        headers=headers,
    )
    assert first.status_code == 200
    history = [
        question,
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_7", "content": "ok"},
    ]
    second = httpx.post(
        f"{proxy_url}/chat/completions",
        json={"model": model, "messages": history},
        headers=headers,
    )
    assert second.status_code == 200
    sent = upstream.chat_requests()[-1].json["messages"][1]
    return sent, second


@pytest.mark.parametrize(
    ("model", "dialect", "reasoning"),
    [
        ("kimi-k2-thinking", "kimi", {"reasoning_content": "I should call f."}),
        ("deepseek-v4-flash", "deepseek", {"reasoning_content": "I should call f."}),
        ("MiniMax-M2", "minimax", {}),  # back as <think> in content, below
        ("llama-3.3-70b", "openai", {}),
    ],
)
def test_the_model_name_picks_the_dialect_per_request(
    upstream: FakeUpstream, model: str, dialect: str, reasoning: dict[str, Any]
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        sent, response = tool_loop(proxy.url, upstream, model)
    assert response.headers["x-reasoning-dialect"] == dialect
    got = {k: v for k, v in sent.items() if k.startswith("reasoning")}
    assert got == reasoning
    if dialect == "minimax":
        assert sent["content"].startswith("<think>\nI should call f.\n</think>")


def test_an_explicit_dialect_is_not_overridden_by_the_model_name(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="openai")) as proxy:
        sent, response = tool_loop(proxy.url, upstream, "kimi-k2-thinking")
    assert response.headers["x-reasoning-dialect"] == "openai"
    assert "reasoning_content" not in sent


def test_include_false_still_strips_and_true_sends_everywhere(upstream: FakeUpstream) -> None:
    route = route_config(upstream, reasoning={"include_in_context": False})
    with running_proxy(route) as proxy:
        sent, _ = tool_loop(proxy.url, upstream, "kimi-k2-thinking")
    assert sent["reasoning_content"] == " "  # kimi's placeholder, no text
    upstream.reset()
    route = route_config(upstream, reasoning={"include_in_context": True})
    with running_proxy(route) as proxy:
        sent, _ = tool_loop(proxy.url, upstream, "llama-3.3-70b")
    assert sent["reasoning_content"] == "I should call f."


def test_multi_vendor_upstreams_re_inject_for_makers_that_need_it(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="together")) as proxy:
        kimi, response = tool_loop(proxy.url, upstream, "moonshotai/Kimi-K2-Thinking")
        qwen, _ = tool_loop(proxy.url, upstream, "Qwen/Qwen3-235B")
    assert response.headers["x-reasoning-dialect"] == "together"
    assert kimi["reasoning"] == "I should call f."  # together's own field
    assert not any(k.startswith("reasoning") for k in qwen)


def test_openrouter_gets_reasoning_details_back_on_tool_call_turns(
    upstream: FakeUpstream,
) -> None:
    details = [{"type": "reasoning.encrypted", "data": "ENC", "index": 0}]
    model = "google/gemini-3-pro"
    upstream.script(
        Stream(
            [
                chunk({"role": "assistant", "reasoning_details": details}, model=model),
                chunk({"tool_calls": [{"index": 0, **CALL}]}, model=model),
                chunk({}, "tool_calls", model=model),
            ]
        )
    )
    with running_proxy(route_config(upstream, dialect="openrouter")) as proxy:
        headers = {"X-Conversation-Id": "or-auto"}
        question = {"role": "user", "content": "go"}
        httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": model, "stream": True, "messages": [question]},
            headers=headers,
        )
        upstream.script(answer(model))
        history = [
            question,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_7", "content": "ok"},
        ]
        httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": model, "messages": history},
            headers=headers,
        )
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["reasoning_details"] == details
    assert "reasoning_content" not in sent
