"""Whitespace after a `</think>` in the middle of the answer is the
answer's: `First part.<think>...</think> Second part.` answers `First part.
Second part.`, streamed (in any pieces) and whole, and so does such an
assistant message sent back in a history. After a block that leads the
answer, the templates' `</think>\\n\\n` still goes. The real proxy, a fake
upstream, the `openai` SDK."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

MID = "First part.<think>\nCheck the second.\n</think> Second part."
LEADING = "<think>\nThink first.\n</think>\n\nThe answer."


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def answer(content: str, pieces: list[str] | None) -> Stream | Json:
    if pieces is None:
        message = {"role": "assistant", "content": content}
        return Json(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )
    assert "".join(pieces) == content
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": p}) for p in pieces]
    return Stream([*chunks, chunk({}, "stop")])


# the answer in one piece, in pieces that each go through a fast path, split at the tags
SPLITS = {
    "whole": None,
    "one-piece": [MID],
    "pieces": ["First ", "part.", "<think>\nCheck the second.\n</think>", " Second", " part."],
    "space-alone": ["First part.", "<think>\nCheck the second.\n</think>", " ", "Second part."],
    "split-tag": ["First part.<thi", "nk>\nCheck the second.\n</th", "ink> Second part."],
}


def ask(upstream: FakeUpstream, stream: bool, conversation: str) -> tuple[str, str, str]:
    """One question through the real proxy with the `openai` SDK, streamed
    or not: the answer's content and reasoning as the client got them, and
    the stored turn's content."""
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as sdk,
    ):
        messages: Any = [{"role": "user", "content": "Hi"}]
        headers = {"X-Conversation-Id": conversation}
        content = reasoning = ""
        if not stream:
            message: Any = (
                sdk.chat.completions.create(model="m", messages=messages, extra_headers=headers)
                .choices[0]
                .message
            )
            content, reasoning = message.content, message.reasoning_content
        else:
            with sdk.chat.completions.create(
                model="m", messages=messages, stream=True, extra_headers=headers
            ) as it:
                for part in it:
                    for choice in part.choices:
                        delta: Any = choice.delta
                        content += delta.content or ""
                        reasoning += getattr(delta, "reasoning_content", None) or ""
        stored = httpx.get(
            f"{proxy.url}/conversations/{conversation}",
            headers={"Authorization": "Bearer sk-test"},
        ).json()["turns"][0]["content"]
    return content, reasoning, stored


@pytest.mark.parametrize("pieces", list(SPLITS.values()), ids=list(SPLITS))
def test_the_space_after_a_block_mid_answer_is_kept(
    upstream: FakeUpstream, pieces: list[str] | None
) -> None:
    upstream.script(answer(MID, pieces))
    content, reasoning, stored = ask(upstream, pieces is not None, "mid-answer")
    assert content == stored == "First part. Second part."
    assert reasoning == "Check the second."


def test_the_leading_blocks_separator_still_goes(upstream: FakeUpstream) -> None:
    upstream.script(answer(LEADING, ["<think>\nThink first.\n</think>\n\n", "The answer."]))
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as sdk,
    ):
        messages: Any = [{"role": "user", "content": "Hi"}]
        content = ""
        with sdk.chat.completions.create(model="m", messages=messages, stream=True) as it:
            for part in it:
                for choice in part.choices:
                    content += choice.delta.content or ""
    assert content == "The answer."


def test_a_history_message_keeps_the_space(upstream: FakeUpstream) -> None:
    """An assistant message a client sends back with its tags inline."""
    upstream.script(answer("Fine.", None))
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as sdk,
    ):
        sdk.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": MID},
                {"role": "user", "content": "And?"},
            ],
        )
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert sent["content"] == "First part. Second part."
