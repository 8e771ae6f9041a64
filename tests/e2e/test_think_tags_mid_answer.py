"""`X-Reasoning-Output: think_tags`: a reasoning block that comes in the
middle of the answer closes with no blank line after it, so that the
content without its `<think>` blocks is the answer as stored; a block that
leads the answer keeps the templates' `</think>\\n\\n`. The real proxy, a
fake upstream."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

HEADERS = {"Authorization": "Bearer sk-test", "X-Reasoning-Output": "think_tags"}
BLOCK = re.compile(r"<think>\n.*?\n</think>", re.DOTALL)


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def whole(content: str) -> Json:
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


def ask(proxy: Any, stream: bool, conversation: str) -> str:
    """The content the client gets, joined over the deltas when streamed."""
    with httpx.Client(timeout=30) as client:
        response = client.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": "Hi"}]},
            headers={**HEADERS, "X-Conversation-Id": conversation},
        )
        assert response.status_code == 200, response.text
        stored = client.get(f"{proxy.url}/conversations/{conversation}", headers=HEADERS)
    assert stored.json()["turns"][0]["content"] == answer_of(content_of(response, stream))
    return content_of(response, stream)


def content_of(response: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(response.json()["choices"][0]["message"]["content"])
    out = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                out.append(choice["delta"].get("content") or "")
    return "".join(out)


def answer_of(content: str) -> str:
    """The content as a client that strips the tags reads it; a leading
    block's separator is the template's, not the answer's."""
    if content.startswith("<think>"):
        return BLOCK.sub("", content, count=1).lstrip("\n")
    return BLOCK.sub("", content)


def test_a_streamed_block_mid_answer_adds_no_blank_line(upstream: FakeUpstream) -> None:
    upstream.script(
        Stream(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "First part."}),
                chunk({"reasoning_content": "Now think."}),
                chunk({"content": " Second part."}),
                chunk({}, "stop"),
            ]
        )
    )
    with running_proxy(route_config(upstream)) as proxy:
        content = ask(proxy, True, "mid-streamed")
    assert content == "First part.<think>\nNow think.\n</think> Second part."


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_tags_mid_answer_come_back_without_a_blank_line(
    upstream: FakeUpstream, stream: bool
) -> None:
    text = "First part.<think>Now think.</think>Second part."
    if stream:
        pieces = [chunk({"role": "assistant", "content": ""})]
        pieces += [chunk({"content": c}) for c in re.split(r"(?<=\.)", text) if c]
        upstream.script(Stream([*pieces, chunk({}, "stop")]))
    else:
        upstream.script(whole(text))
    with running_proxy(route_config(upstream)) as proxy:
        content = ask(proxy, stream, f"mid-{stream}")
    assert content == "First part.<think>\nNow think.\n</think>Second part."


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_leading_block_keeps_the_templates_blank_line(
    upstream: FakeUpstream, stream: bool
) -> None:
    if stream:
        upstream.script(
            Stream(
                [
                    chunk({"role": "assistant", "content": ""}),
                    chunk({"reasoning_content": "Think first."}),
                    chunk({"content": "The answer."}),
                    chunk({}, "stop"),
                ]
            )
        )
    else:
        upstream.script(whole("<think>Think first.</think>The answer."))
    with running_proxy(route_config(upstream)) as proxy:
        content = ask(proxy, stream, f"lead-{stream}")
    assert content == "<think>\nThink first.\n</think>\n\nThe answer."
