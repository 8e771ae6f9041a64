"""Every input shape of tests/shapecases.py through the real server: the
proxy under uvicorn on a socket, the fake upstream answering streamed (one
write per event), streamed in writes of 1-3 bytes, and non-streamed; the
client reads with httpx, and the stored turn comes from the conversations
API."""

from __future__ import annotations

import copy
import random
from typing import Any

import httpx
import pytest

from tests.casefiles import read_stream, render_stream
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.shapecases import CASES, InputCase

KEY = {"Authorization": "Bearer sk-test"}


def small_writes(case: InputCase, seed: int) -> Stream:
    body = render_stream(case.chunks)
    rng = random.Random(seed)
    writes: list[Any] = []
    pos = 0
    while pos < len(body):
        size = rng.randint(1, 3)
        writes.append(body[pos : pos + size])
        pos += size
    return Stream(writes, done=False)  # the rendered body ends with [DONE] itself


def ask(proxy: Any, stream: bool, conversation: str) -> tuple[str, str]:
    request = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    headers = {**KEY, "X-Conversation-Id": conversation}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{proxy.url}/chat/completions", json=request, headers=headers)
    assert response.status_code == 200, response.text
    if stream:
        got = read_stream(response.content)
        assert got["done"]
        assert not got["errors"]
        return got["content"], got["reasoning"]
    message = response.json()["choices"][0]["message"]
    return message.get("content") or "", message.get("reasoning_content") or ""


def stored(proxy: Any, conversation: str) -> dict[str, Any]:
    data = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=KEY).json()
    (turn,) = data["turns"]
    return turn  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_input_shape_through_the_server(case: InputCase, upstream: FakeUpstream) -> None:
    top: dict[str, Any] = {}
    if case.max_reasoning_bytes is not None:
        top["limits"] = {"max_reasoning_bytes": case.max_reasoning_bytes}
    with running_proxy(route_config(upstream, **case.route, top=top)) as proxy:
        answers = {
            "streamed": (Stream(copy.deepcopy(case.chunks)), True),
            "small-writes": (small_writes(case, 1), True),
            "whole": (Json(copy.deepcopy(case.completion)), False),
        }
        seen = {}
        for name, (answer, stream) in answers.items():
            upstream.script(answer)
            content, reasoning = ask(proxy, stream, f"{case.id}-{name}")
            assert content.strip() == case.content, name
            assert "".join(reasoning.split()) == case.client_reasoning, name
            if not case.literal_tags:
                assert not any(d in content.lower() for d in case.tags().delimiters()), name
            turn = stored(proxy, f"{case.id}-{name}")
            thoughts = [b["thought"].strip() for b in turn["blocks"] if b["thought"]]
            assert thoughts == case.thinking, name
            if case.blocks is not None:
                got = [(b["sourceField"], b["signature"], b["isHidden"]) for b in turn["blocks"]]
                assert got == case.blocks, name
            assert turn["reasoningTruncated"] is case.truncated, name
            seen[name] = (content, reasoning, turn["blocks"], turn["content"])
        # streamed in any pieces or whole, the client and the store see the same
        assert seen["streamed"] == seen["small-writes"]
        assert [b["thought"] for b in seen["streamed"][2]] == [
            b["thought"] for b in seen["whole"][2]
        ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_thinking_blocks_never_reach_a_client_that_asked_for_no_reasoning(
    upstream: FakeUpstream, stream: bool
) -> None:
    (case,) = [c for c in CASES if c.id == "litellm-thinking-blocks"]
    upstream.script(Stream(copy.deepcopy(case.chunks)) if stream else Json(case.completion))
    request = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    headers = {**KEY, "X-Conversation-Id": "hidden", "X-Reasoning-Include-In-Response": "false"}
    with running_proxy(route_config(upstream)) as proxy, httpx.Client(timeout=30) as client:
        response = client.post(f"{proxy.url}/chat/completions", json=request, headers=headers)
        assert response.status_code == 200
        for secret in (b"thinking", b"signature", b"redacted", b"ENCRYPTED", b"Let me"):
            assert secret not in response.content, secret
        turn = stored(proxy, "hidden")
    assert [(b["thought"], b["isHidden"]) for b in turn["blocks"]] == [
        ("Let me think.", True),
        ("", True),
    ]
    assert turn["blocks"][0]["signature"] == case.blocks[0][1]  # type: ignore[index]
