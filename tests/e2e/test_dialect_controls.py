"""Every reasoning control in every dialect, through the real proxy: what the
upstream receives for X-Reasoning-Enabled, -Effort and -Max-Tokens, and what
the response says it could not honour (X-Reasoning-Ignored).

One proxy serves all rows: a route per dialect (`models: ["*@<dialect>"]`),
so a row's model name is `<model>@<dialect>`; the model part picks the
family inside the dialect (gpt-5.1 and o3 take different efforts)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import httpx
import pytest

from proxy.dialects import DIALECTS
from tests.harness import FakeUpstream, Json, ProxyServer, running_proxy


class Row(NamedTuple):
    dialect: str
    model: str
    headers: dict[str, str]
    sent: dict[str, Any]  # what the settings add to the upstream body
    ignored: str | None = None  # the X-Reasoning-Ignored header, if any


OFF = {"X-Reasoning-Enabled": "false"}


def effort(value: str) -> dict[str, str]:
    return {"X-Reasoning-Effort": value}


def budget(tokens: int) -> dict[str, str]:
    return {"X-Reasoning-Max-Tokens": str(tokens)}


THINKING_ON = {"thinking": {"type": "enabled"}}
THINKING_OFF = {"thinking": {"type": "disabled"}}
TEMPLATE_ON = {"chat_template_kwargs": {"enable_thinking": True}}
TEMPLATE_OFF = {"chat_template_kwargs": {"enable_thinking": False}}
GEMINI_BUDGET = {"extra_body": {"google": {"thinking_config": {"thinking_budget": 1024}}}}

ROWS = [
    # openai: the fallback for unknown upstreams, and OpenAI's own model families
    Row("openai", "some-model", {}, {}),
    Row("openai", "some-model", OFF, {}, "enabled"),
    Row("openai", "some-model", effort("low"), {"reasoning_effort": "low"}),
    Row("openai", "some-model", effort("xhigh"), {"reasoning_effort": "xhigh"}),
    Row("openai", "some-model", budget(100), {}, "max_tokens"),
    Row(
        "openai",
        "some-model",
        {**effort("low"), **budget(100)},
        {"reasoning_effort": "low"},
        "max_tokens",
    ),
    Row("openai", "some-model", {**OFF, **effort("high"), **budget(9)}, {}, "enabled"),
    Row("openai", "gpt-5.1", OFF, {"reasoning_effort": "none"}),
    Row("openai", "gpt-5.1", effort("minimal"), {"reasoning_effort": "low"}),
    Row("openai", "gpt-5.1", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("openai", "gpt-5.2", effort("xhigh"), {"reasoning_effort": "xhigh"}),
    Row("openai", "gpt-5-mini", OFF, {"reasoning_effort": "minimal"}),
    Row("openai", "gpt-5", effort("none"), {"reasoning_effort": "minimal"}),
    Row("openai", "gpt-5", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("openai", "gpt-5-pro", effort("low"), {"reasoning_effort": "high"}),
    Row("openai", "gpt-5-chat-latest", effort("high"), {}, "effort"),
    Row("openai", "gpt-5-chat-latest", OFF, {}, "enabled"),
    Row("openai", "o3-mini", OFF, {"reasoning_effort": "low"}),
    Row("openai", "o4-mini", effort("minimal"), {"reasoning_effort": "low"}),
    Row("openai", "o3", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("openai", "gpt-oss-120b", effort("none"), {"reasoning_effort": "low"}),
    # deepseek: thinking on/off, effort, no budget
    Row("deepseek", "deepseek-v4-pro", {}, {}),
    Row("deepseek", "deepseek-v4-pro", OFF, THINKING_OFF),
    Row("deepseek", "deepseek-v4-pro", effort("high"), {**THINKING_ON, "reasoning_effort": "high"}),
    Row("deepseek", "deepseek-v4-pro", effort("xhigh"), {**THINKING_ON, "reasoning_effort": "max"}),
    Row("deepseek", "deepseek-v4-pro", effort("none"), THINKING_OFF),
    Row("deepseek", "deepseek-v4-pro", budget(100), {}, "max_tokens"),
    # kimi: K2.5 and later turn thinking off; no effort, no budget
    Row("kimi", "kimi-k2-thinking", OFF, {}, "enabled"),
    Row("kimi", "kimi-k2-thinking", effort("high"), {}, "effort"),
    Row("kimi", "kimi-k2-thinking", budget(100), {}, "max_tokens"),
    Row("kimi", "kimi-k2.6", OFF, THINKING_OFF),
    Row("kimi", "kimi-k2.5", effort("none"), THINKING_OFF),
    Row("kimi", "kimi-k2.6", {**effort("low"), **budget(5)}, {}, "effort, max_tokens"),
    # openrouter: one reasoning object
    Row("openrouter", "anthropic/claude-sonnet-4", OFF, {"reasoning": {"enabled": False}}),
    Row("openrouter", "openai/o4-mini", effort("xhigh"), {"reasoning": {"effort": "xhigh"}}),
    Row("openrouter", "openai/o4-mini", effort("minimal"), {"reasoning": {"effort": "minimal"}}),
    Row("openrouter", "openai/o4-mini", effort("none"), {"reasoning": {"enabled": False}}),
    Row("openrouter", "anthropic/claude-sonnet-4", budget(900), {"reasoning": {"max_tokens": 900}}),
    Row(
        "openrouter",
        "anthropic/claude-sonnet-4",
        {**effort("low"), **budget(900)},
        {"reasoning": {"effort": "low"}},
        "max_tokens",
    ),
    # vllm and sglang: the chat template's switch, effort and budget
    Row("vllm", "Qwen/Qwen3-8B", OFF, TEMPLATE_OFF),
    Row("vllm", "Qwen/Qwen3-8B", effort("medium"), {**TEMPLATE_ON, "reasoning_effort": "medium"}),
    Row("vllm", "Qwen/Qwen3-8B", budget(256), {**TEMPLATE_ON, "thinking_token_budget": 256}),
    Row("vllm", "Qwen/Qwen3-8B", effort("none"), TEMPLATE_OFF),
    Row("sglang", "Qwen/Qwen3-8B", OFF, TEMPLATE_OFF),
    Row("sglang", "Qwen/Qwen3-8B", effort("high"), {**TEMPLATE_ON, "reasoning_effort": "high"}),
    Row(
        "sglang",
        "Qwen/Qwen3-8B",
        budget(256),
        {"chat_template_kwargs": {"enable_thinking": True, "thinking_budget": 256}},
    ),
    # minimax: no control at all
    Row("minimax", "MiniMax-M2", OFF, {}, "enabled"),
    Row("minimax", "MiniMax-M2", effort("low"), {}, "effort"),
    Row("minimax", "MiniMax-M2", budget(100), {}, "max_tokens"),
    # groq: per model family
    Row("groq", "qwen/qwen3-32b", OFF, {"reasoning_effort": "none"}),
    Row("groq", "qwen/qwen3-32b", effort("none"), {"reasoning_effort": "none"}),
    Row("groq", "qwen/qwen3-32b", effort("high"), {}, "effort"),
    Row("groq", "openai/gpt-oss-20b", OFF, {"reasoning_effort": "low"}),
    Row("groq", "openai/gpt-oss-20b", effort("minimal"), {"reasoning_effort": "low"}),
    Row("groq", "openai/gpt-oss-20b", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("groq", "llama-3.3-70b-versatile", effort("high"), {}, "effort"),
    Row("groq", "llama-3.3-70b-versatile", OFF, {}, "enabled"),
    Row("groq", "openai/gpt-oss-20b", budget(100), {}, "max_tokens"),
    # glm: thinking off everywhere, effort on GLM-5.2
    Row("glm", "glm-4.6", OFF, THINKING_OFF),
    Row("glm", "glm-4.6", effort("high"), {}, "effort"),
    Row("glm", "glm-5.2", effort("low"), {"reasoning_effort": "high"}),
    Row("glm", "glm-5.2", effort("xhigh"), {"reasoning_effort": "max"}),
    Row("glm", "glm-5.2", effort("none"), THINKING_OFF),
    Row("glm", "glm-5.2", budget(100), {}, "max_tokens"),
    # dashscope: enable_thinking and thinking_budget, no effort
    Row("dashscope", "qwen-plus", OFF, {"enable_thinking": False}),
    Row("dashscope", "qwen-plus", budget(2048), {"enable_thinking": True, "thinking_budget": 2048}),
    Row("dashscope", "qwen-plus", effort("high"), {}, "effort"),
    # xai: per model
    Row("xai", "grok-3-mini", effort("medium"), {"reasoning_effort": "high"}),
    Row("xai", "grok-3-mini", OFF, {"reasoning_effort": "low"}),
    Row("xai", "grok-4.3", OFF, {"reasoning_effort": "none"}),
    Row("xai", "grok-4.3", effort("minimal"), {"reasoning_effort": "low"}),
    Row("xai", "grok-4.5", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("xai", "grok-4", effort("high"), {}, "effort"),
    Row("xai", "grok-4", OFF, {}, "enabled"),
    Row("xai", "grok-4.3", budget(100), {}, "max_tokens"),
    # gemini (OpenAI-compatible endpoint)
    Row("gemini", "gemini-3-pro-preview", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("gemini", "gemini-3-pro-preview", OFF, {"reasoning_effort": "minimal"}),
    Row("gemini", "gemini-2.5-flash", OFF, {"reasoning_effort": "none"}),
    Row("gemini", "gemini-2.5-pro", budget(1024), GEMINI_BUDGET),
    Row(
        "gemini",
        "gemini-2.5-pro",
        {**effort("low"), **budget(1024)},
        {"reasoning_effort": "low"},
        "max_tokens",
    ),
    # together
    Row("together", "Qwen/Qwen3.5-9B", OFF, {"reasoning": {"enabled": False}}),
    Row("together", "openai/gpt-oss-120b", effort("xhigh"), {"reasoning_effort": "high"}),
    Row("together", "openai/gpt-oss-120b", budget(100), {}, "max_tokens"),
    # fireworks
    Row(
        "fireworks",
        "accounts/fireworks/models/kimi-k2",
        effort("minimal"),
        {"reasoning_effort": "low"},
    ),
    Row(
        "fireworks",
        "accounts/fireworks/models/qwen3",
        budget(500),
        {"thinking": {"type": "enabled", "budget_tokens": 500}},
    ),
    Row("fireworks", "accounts/fireworks/models/qwen3", OFF, {}, "enabled"),
    # litellm
    Row("litellm", "anthropic/claude-sonnet-4", effort("minimal"), {"reasoning_effort": "low"}),
    Row(
        "litellm",
        "anthropic/claude-sonnet-4",
        budget(2048),
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    ),
    Row("litellm", "anthropic/claude-sonnet-4", OFF, {}, "enabled"),
]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeUpstream, ProxyServer]]:
    upstream = FakeUpstream().start()
    routes = [
        {"name": name, "models": [f"*@{name}"], "upstream": upstream.url, "dialect": name}
        for name in DIALECTS
    ]
    try:
        with running_proxy({"routes": routes}) as proxy:
            yield upstream, proxy
    finally:
        upstream.stop()


def send(
    served: tuple[FakeUpstream, ProxyServer], model: str, headers: dict[str, str], **body: Any
) -> tuple[httpx.Response, dict[str, Any]]:
    upstream, proxy = served
    upstream.reset()
    payload = {"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
    response = httpx.post(f"{proxy.url}/chat/completions", json=payload, headers=headers)
    (received,) = upstream.chat_requests()
    return response, received.json


def test_every_dialect_has_rows() -> None:
    assert {row.dialect for row in ROWS} == set(DIALECTS)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.dialect}-{r.model}-{r.headers}" for r in ROWS])
def test_controls_reach_the_upstream_as_the_dialect_says(
    served: tuple[FakeUpstream, ProxyServer], row: Row
) -> None:
    response, sent = send(served, f"{row.model}@{row.dialect}", row.headers)
    assert response.status_code == 200
    added = {k: v for k, v in sent.items() if k not in ("model", "messages")}
    assert added == row.sent
    assert response.headers.get("x-reasoning-ignored") == row.ignored
    assert response.headers["x-reasoning-dialect"] == row.dialect


def test_body_parameters_pass_through_unless_a_header_sets_the_same_control(
    served: tuple[FakeUpstream, ProxyServer],
) -> None:
    model = "deepseek-v4-pro@deepseek"
    _, sent = send(served, model, {}, reasoning_effort="low", thinking={"type": "enabled"})
    assert (sent["reasoning_effort"], sent["thinking"]) == ("low", {"type": "enabled"})
    # the header sets the effort: it wins over the body's
    _, sent = send(served, model, effort("high"), reasoning_effort="low")
    assert sent["reasoning_effort"] == "high"
    # the header turns thinking off: the body's switch yields, its effort stays
    _, sent = send(served, model, OFF, reasoning_effort="low", thinking={"type": "enabled"})
    assert (sent["reasoning_effort"], sent["thinking"]) == ("low", {"type": "disabled"})


def test_a_route_setting_does_not_override_the_body() -> None:
    upstream = FakeUpstream().start()
    route = {
        "name": "r",
        "upstream": upstream.url,
        "dialect": "openrouter",
        "reasoning": {"enabled": False},
    }
    try:
        with running_proxy({"routes": [route]}) as proxy:
            payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            httpx.post(f"{proxy.url}/chat/completions", json=payload)
            httpx.post(
                f"{proxy.url}/chat/completions",
                json={**payload, "reasoning": {"enabled": True, "effort": "high"}},
            )
        first, second = (r.json for r in upstream.chat_requests())
        assert first["reasoning"] == {"enabled": False}  # the route's off switch
        assert second["reasoning"] == {"enabled": True, "effort": "high"}  # the client's own
    finally:
        upstream.stop()


def test_include_true_where_reasoning_may_never_go_is_named(
    served: tuple[FakeUpstream, ProxyServer],
) -> None:
    headers = {"X-Reasoning-Include-In-Context": "true", **effort("high")}
    response, _ = send(served, "llama@groq", headers)
    assert response.headers["x-reasoning-ignored"] == "effort, include_in_context"
    response, _ = send(served, "m@openai", {"X-Reasoning-Include-In-Context": "true"})
    assert "x-reasoning-ignored" not in response.headers


@pytest.mark.parametrize(
    ("header", "value", "allowed"),
    [
        ("X-Reasoning-Effort", "max", "none, minimal, low, medium, high, xhigh"),
        ("X-Reasoning-Include-In-Context", "atuo", "auto, true, false"),
    ],
)
def test_values_outside_the_sets_are_a_400_naming_the_allowed_ones(
    served: tuple[FakeUpstream, ProxyServer], header: str, value: str, allowed: str
) -> None:
    upstream, proxy = served
    upstream.reset()
    payload = {"model": "m@openai", "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{proxy.url}/chat/completions", json=payload, headers={header: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == header
    assert error["code"] == "invalid_reasoning_setting"
    assert error["message"] == f"{header} must be one of: {allowed}"
    assert upstream.chat_requests() == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True}),
        ("/responses", {"input": "hi"}),
        ("/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}),
    ],
    ids=["chat", "chat-streamed", "responses", "messages"],
)
def test_an_upstream_error_still_names_what_was_ignored(
    served: tuple[FakeUpstream, ProxyServer], path: str, body: dict[str, Any]
) -> None:
    """The upstream refuses the request: its status and error go to the
    client, and so do the proxy's own headers (what was not sent for a
    setting is never silent, least of all when the request failed)."""
    upstream, proxy = served
    upstream.reset()
    refusal = {"error": {"message": "Invalid request", "type": "invalid_request_error"}}
    upstream.script(Json(refusal, status=400))
    response = httpx.post(
        proxy.url + path,
        json={"model": "MiniMax-M2@minimax", **body},
        headers=effort("high"),
    )
    assert response.status_code == 400
    assert "Invalid request" in response.text
    assert response.headers["x-reasoning-ignored"] == "effort"
    assert response.headers["x-reasoning-dialect"] == "minimax"
    assert int(response.headers["x-context-tokens-effective"]) > 0


ON = {"X-Reasoning-Enabled": "true"}


@pytest.mark.parametrize(
    ("model", "off", "on"),
    [
        ("deepseek-v4-pro@deepseek", {"thinking": {"type": "disabled"}}, {"type": "enabled"}),
        ("glm-4.6@glm", {"thinking": {"type": "disabled"}}, {"type": "enabled"}),
        ("kimi-k2.5@kimi", {"thinking": {"type": "disabled"}}, {"type": "enabled"}),
        ("m@openrouter", {"reasoning": {"enabled": False}}, {"enabled": True}),
        ("m@together", {"reasoning": {"enabled": False}}, {"enabled": True}),
        (
            "Qwen/Qwen3-8B@vllm",
            {"chat_template_kwargs": {"enable_thinking": False}},
            {"enable_thinking": True},
        ),
        (
            "Qwen/Qwen3-8B@sglang",
            {"chat_template_kwargs": {"enable_thinking": False}},
            {"enable_thinking": True},
        ),
        ("qwen-plus@dashscope", {"enable_thinking": False}, True),
    ],
)
def test_a_header_that_turns_reasoning_on_wins_over_the_bodys_off_switch(
    served: tuple[FakeUpstream, ProxyServer], model: str, off: dict[str, Any], on: Any
) -> None:
    ((key, _),) = off.items()
    # the body's own switch passes through when no header says otherwise
    _, sent = send(served, model, {}, **off)
    assert sent[key] == off[key]
    # the header sets the same setting: it wins, in the switch's own form
    response, sent = send(served, model, ON, **off)
    assert sent[key] == on
    assert "x-reasoning-ignored" not in response.headers
    # a header that turns reasoning on adds no switch where the body has none
    _, sent = send(served, model, ON)
    assert key not in sent


@pytest.mark.parametrize("model", ["some-model@openai", "llama-3@fireworks"])
@pytest.mark.parametrize("body_effort", ["high", "low", "none"])
def test_off_without_an_off_switch_leaves_the_bodys_effort_and_says_so(
    served: tuple[FakeUpstream, ProxyServer], model: str, body_effort: str
) -> None:
    """The proxy cannot turn this model's reasoning off: the body's own
    effort goes as the client sent it (dropping it would let the upstream's
    default, perhaps more reasoning, decide), and the response says the
    switch was not honoured."""
    response, sent = send(served, model, OFF, reasoning_effort=body_effort)
    assert response.status_code == 200
    assert {k: v for k, v in sent.items() if k not in ("model", "messages")} == {
        "reasoning_effort": body_effort
    }
    assert response.headers["x-reasoning-ignored"] == "enabled"


@pytest.mark.parametrize("model", ["qwen/qwen3-32b@groq", "openai/gpt-oss-20b@groq"])
def test_groq_gets_the_bodys_own_reasoning_format_and_none_added(
    served: tuple[FakeUpstream, ProxyServer], model: str
) -> None:
    """Groq's `reasoning_format` (parsed, raw, hidden) says where reasoning
    comes back; every shape is read, so the proxy adds none of its own and
    passes the client's."""
    for headers in ({}, effort("high"), OFF):
        _, sent = send(served, model, headers)
        assert "reasoning_format" not in sent
        _, sent = send(served, model, headers, reasoning_format="parsed")
        assert sent["reasoning_format"] == "parsed"
