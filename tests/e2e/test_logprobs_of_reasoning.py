"""Reasoning an upstream writes in `content` (`<think>` tags) comes with
logprobs of its tokens, tags included; the answer's logprobs keep only the
tokens of the visible text, streamed and whole, so no reasoning and no
delimiter reaches the client through them (as the Responses door does). A
client that asked for the reasoning in `content` (`think_tags`) keeps them
all. The real proxy, a fake upstream, the `openai` SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

TOKENS = ["<think>", "Secret", " plan", "</think>", "Hello", " there", "."]
VISIBLE = ["Hello", " there", "."]


def logprob(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}


def chunk(delta: dict[str, Any], token: str | None, finish: str | None = None) -> Json | Any:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if token is not None:
        choice["logprobs"] = {"content": [logprob(token)], "refusal": None}
    return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}


def answer(stream: bool) -> Stream | Json:
    if stream:
        chunks = [chunk({"role": "assistant", "content": t}, t) for t in TOKENS]
        return Stream([*chunks, chunk({}, None, "stop")])
    message = {"role": "assistant", "content": "".join(TOKENS)}
    choice = {
        "index": 0,
        "message": message,
        "logprobs": {"content": [logprob(t) for t in TOKENS], "refusal": None},
        "finish_reason": "stop",
    }
    return Json({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})


def client_tokens(sdk: openai.OpenAI, stream: bool, headers: dict[str, str]) -> tuple[str, list]:
    messages: Any = [{"role": "user", "content": "Hi"}]
    if not stream:
        choice = sdk.chat.completions.create(
            model="m", messages=messages, logprobs=True, extra_headers=headers
        ).choices[0]
        assert choice.logprobs is not None
        assert choice.logprobs.content is not None
        return choice.message.content or "", [t.token for t in choice.logprobs.content]
    content, tokens = "", []
    with sdk.chat.completions.create(
        model="m", messages=messages, logprobs=True, stream=True, extra_headers=headers
    ) as it:
        for part in it:
            for c in part.choices:
                content += c.delta.content or ""
                if c.logprobs is not None and c.logprobs.content:
                    tokens += [t.token for t in c.logprobs.content]
    return content, tokens


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("hidden", [False, True], ids=["shown", "hidden"])
def test_the_answers_logprobs_hold_its_visible_tokens_only(
    upstream: FakeUpstream, stream: bool, hidden: bool
) -> None:
    upstream.script(answer(stream))
    headers = {"X-Reasoning-Include-In-Response": "false"} if hidden else {}
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as sdk,
    ):
        content, tokens = client_tokens(sdk, stream, headers)
    assert content == "Hello there."
    assert tokens == VISIBLE


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_think_tags_output_keeps_every_token(upstream: FakeUpstream, stream: bool) -> None:
    upstream.script(answer(stream))
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as sdk,
    ):
        content, tokens = client_tokens(sdk, stream, {"X-Reasoning-Output": "think_tags"})
    assert "Secret plan" in content
    assert tokens == TOKENS
