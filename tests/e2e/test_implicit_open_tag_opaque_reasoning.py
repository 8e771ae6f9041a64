"""On a route whose prompt opens the reasoning tag (`implicit_open_tag`),
native reasoning that carries no text (an encrypted `reasoning_details`
item, a redacted thinking block, a `thinking` signature alone) still says
the response is not tag-based: the answer after it is the answer, not
reasoning. The real proxy, a fake upstream, every door; streamed, in reads
of 1-3 bytes, and whole."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from tests.casefiles import chunk, read_stream, render_stream
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.shapecases import completion

KEY = {"Authorization": "Bearer sk-test"}
ANSWER = "The answer is 4."

OPAQUE: dict[str, Any] = {
    "encrypted-details": {
        "reasoning_details": [
            {"type": "reasoning.encrypted", "data": "gAAAA-opaque", "format": "x", "index": 0}
        ]
    },
    "redacted-thinking-block": {
        "thinking_blocks": [{"type": "redacted_thinking", "data": "REDACTED-BLOB"}]
    },
    "thinking-signature-alone": {"thinking": {"signature": "sig-withheld"}},
}


def answers(native: dict[str, Any]) -> dict[str, tuple[Any, bool]]:
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk(native),
        chunk({"content": ANSWER[:7]}),
        chunk({"content": ANSWER[7:]}),
        chunk({}, "stop"),
    ]
    body = render_stream(chunks)
    rng = random.Random(5)
    writes: list[Any] = []
    pos = 0
    while pos < len(body):
        size = rng.randint(1, 3)
        writes.append(body[pos : pos + size])
        pos += size
    return {
        "streamed": (Stream(chunks), True),
        "small-writes": (Stream(writes, done=False), True),
        "whole": (Json(completion({"content": ANSWER, **native})), False),
    }


def chat_answer(response: httpx.Response, stream: bool) -> str:
    if not stream:
        return response.json()["choices"][0]["message"]["content"] or ""
    got = read_stream(response.content)
    assert got["done"]
    assert not got["errors"]
    assert not got["reasoning"]
    return got["content"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("native", list(OPAQUE), ids=list(OPAQUE))
def test_the_answer_after_textless_native_reasoning_stays_the_answer(
    upstream: FakeUpstream, native: str
) -> None:
    with (
        running_proxy(route_config(upstream, implicit_open_tag=True)) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        for name, (answer, stream) in answers(OPAQUE[native]).items():
            upstream.script(answer)
            conversation = f"{native}-{name}"
            response = client.post(
                f"{proxy.url}/chat/completions",
                json={
                    "model": "m",
                    "stream": stream,
                    "messages": [{"role": "user", "content": "2+2?"}],
                },
                headers={**KEY, "X-Conversation-Id": conversation},
            )
            assert response.status_code == 200, response.text
            assert chat_answer(response, stream) == ANSWER, name
            turn = client.get(f"{proxy.url}/conversations/{conversation}", headers=KEY)
            (stored,) = turn.json()["turns"]
            assert stored["content"] == ANSWER, name
            assert not any(b["thought"] for b in stored["blocks"]), name


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_the_other_doors_show_the_answer_too(upstream: FakeUpstream, stream: bool) -> None:
    native = OPAQUE["encrypted-details"]
    with (
        running_proxy(route_config(upstream, implicit_open_tag=True)) as proxy,
        httpx.Client(timeout=30) as client,
    ):
        upstream.script(answers(native)["streamed" if stream else "whole"][0])
        response = client.post(
            f"{proxy.url}/responses",
            json={"model": "m", "input": "2+2?", "stream": stream},
            headers=KEY,
        )
        assert response.status_code == 200, response.text
        if stream:
            assert b'"delta":"The ans' in response.content
        else:
            texts = [
                part["text"]
                for item in response.json()["output"]
                if item["type"] == "message"
                for part in item["content"]
            ]
            assert texts == [ANSWER]
        upstream.script(answers(native)["streamed" if stream else "whole"][0])
        response = client.post(
            f"{proxy.url}/messages",
            json={
                "model": "m",
                "max_tokens": 64,
                "stream": stream,
                "messages": [{"role": "user", "content": "2+2?"}],
            },
            headers=KEY,
        )
        assert response.status_code == 200, response.text
        if stream:
            assert b'"text_delta","text":"The ans' in response.content
        else:
            blocks = response.json()["content"]
            assert [b["text"] for b in blocks if b["type"] == "text"] == [ANSWER]
