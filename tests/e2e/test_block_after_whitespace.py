"""A reasoning block cut out of the middle of an answer, with a blank line
on each side (`Intro.\\n\\n<think>...</think>\\n\\nOutro.`), leaves one blank
line, not two: whitespace after the block goes when whitespace came just
before it, however the stream is cut (the text before the block passing by
the fast paths or not), and so in the stored turn. The real proxy, a fake
upstream, the `openai` SDK."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.e2e.test_tag_close_keeps_answer_whitespace import answer
from tests.harness import FakeUpstream, route_config, running_proxy

TEXT = "Intro.\n\n<think>\nA detour.\n</think>\n\nOutro."
SPLITS = {
    "whole": None,
    "one-piece": [TEXT],
    "break-alone": ["Intro.", "\n\n", "<think>\nA detour.\n</think>", "\n\n", "Outro."],
    "many-plain": ["Int", "ro", ".", "\n", "\n", "<think>\nA detour.\n</think>\n\nOutro."],
    "split-tag": ["Intro.\n\n<thi", "nk>\nA detour.\n</th", "ink>\n", "\nOutro."],
}


@pytest.mark.parametrize("pieces", list(SPLITS.values()), ids=list(SPLITS))
def test_one_blank_line_where_a_block_was_cut_out(
    upstream: FakeUpstream, pieces: list[str] | None
) -> None:
    upstream.script(answer(TEXT, pieces))
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0) as sdk,
    ):
        messages: Any = [{"role": "user", "content": "Hi"}]
        conversation = {"X-Conversation-Id": "one-break"}
        content = reasoning = ""
        if pieces is None:
            message: Any = (
                sdk.chat.completions.create(
                    model="m", messages=messages, extra_headers=conversation
                )
                .choices[0]
                .message
            )
            content, reasoning = message.content, message.reasoning_content
        else:
            with sdk.chat.completions.create(
                model="m", messages=messages, stream=True, extra_headers=conversation
            ) as it:
                for part in it:
                    for choice in part.choices:
                        delta: Any = choice.delta
                        content += delta.content or ""
                        reasoning += getattr(delta, "reasoning_content", None) or ""
        stored = httpx.get(
            f"{proxy.url}/conversations/one-break", headers={"Authorization": "Bearer sk-test"}
        ).json()["turns"][0]
    assert content == stored["content"] == "Intro.\n\nOutro."
    assert reasoning == "A detour."
