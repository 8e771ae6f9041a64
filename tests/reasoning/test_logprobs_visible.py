"""The logprobs of an answer whose `content` held tagged reasoning: a whole
answer keeps the tokens of its visible text; a streamed chunk whose text
all went to the reasoning keeps none. Logprobs that are not token lists,
or an answer without tags, are left as they came."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.reasoning.channels import NormalizeOptions
from proxy.reasoning.normalizer import hide_tokens, normalize_completion, visible_logprobs


def tokens(*texts: str) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": -1.0} for t in texts]


def completion(content: str, logprobs: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}}
    return {"choices": [{**choice, "logprobs": logprobs, "finish_reason": "stop"}]}


def test_a_whole_answer_keeps_its_visible_tokens() -> None:
    body = completion("<think>x</think>Hi", {"content": tokens("<think>", "x", "</think>", "Hi")})
    changed, _ = normalize_completion(body)
    assert changed
    assert body["choices"][0]["logprobs"]["content"] == tokens("Hi")


@pytest.mark.parametrize(
    "logprobs",
    [None, "text", {"content": None}, {"content": [{"token": 1}]}, {"content": ["x"]}],
)
def test_logprobs_that_are_not_token_lists_stay(logprobs: Any) -> None:
    choice = {"logprobs": logprobs}
    assert not visible_logprobs(choice, NormalizeOptions(), False)
    assert choice == {"logprobs": logprobs}


def test_tokens_that_are_all_visible_stay() -> None:
    choice = {"logprobs": {"content": tokens("Hi", " there")}}
    assert not visible_logprobs(choice, NormalizeOptions(), False)
    assert choice["logprobs"]["content"] == tokens("Hi", " there")


@pytest.mark.parametrize("logprobs", [None, {"content": []}, {"content": None}, "x"])
def test_a_chunk_without_tokens_has_none_to_hide(logprobs: Any) -> None:
    choice = {"logprobs": logprobs}
    assert not hide_tokens(choice)
    assert choice == {"logprobs": logprobs}


def test_a_chunk_with_tokens_hides_them() -> None:
    choice = {"logprobs": {"content": tokens("x"), "refusal": None}}
    assert hide_tokens(choice)
    assert choice == {"logprobs": {"content": [], "refusal": None}}
