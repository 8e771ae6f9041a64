"""`limits.max_reasoning_bytes` bounds the reasoning a turn stores in UTF-8
bytes, not characters: reasoning in a script of two-, three- or four-byte
characters is cut at the same number of bytes as ASCII would be, at a
character's boundary, streamed or not; the client still gets all of it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

BOUND = 1024
HEADERS = {"Authorization": "Bearer sk-bytes", "X-Conversation-Id": "bytes"}


def answer(reasoning: str, stream: bool) -> Stream | Json:
    if not stream:
        message = {"role": "assistant", "content": "Done.", "reasoning_content": reasoning}
        return Json(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}

    pieces = [reasoning[i : i + 100] for i in range(0, len(reasoning), 100)]
    return Stream(
        [
            *(chunk({"reasoning_content": p}) for p in pieces),
            chunk({"content": "Done."}),
            chunk({}, "stop"),
        ]
    )


def client_reasoning(response: httpx.Response, stream: bool) -> str:
    if not stream:
        return str(response.json()["choices"][0]["message"]["reasoning_content"])
    out = ""
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                out += choice["delta"].get("reasoning_content") or ""
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("char", ["a", "é", "€", "🤔"])
def test_the_stored_reasoning_is_cut_at_the_bound_in_bytes(
    upstream: FakeUpstream, stream: bool, char: str
) -> None:
    reasoning = char * BOUND  # BOUND characters: 1 to 4 times BOUND bytes
    upstream.script(answer(reasoning, stream))
    config = route_config(upstream, top={"limits": {"max_reasoning_bytes": BOUND}})
    with running_proxy(config) as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": stream}
        response = httpx.post(
            f"{proxy.url}/chat/completions", json=body, headers=HEADERS, timeout=30
        )
        assert response.status_code == 200, response.text
        assert client_reasoning(response, stream) == reasoning  # the client gets all of it
        turn = httpx.get(f"{proxy.url}/conversations/bytes", headers=HEADERS, timeout=10).json()[
            "turns"
        ][0]
    stored = "".join(b["thought"] for b in turn["blocks"])
    size = len(char.encode())
    assert stored == char * (BOUND // size)
    assert turn["reasoningTruncated"] is (size > 1)
