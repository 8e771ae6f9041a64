"""`X-Reasoning-Output: reasoning_details` through the real server, when the
upstream sends `reasoning_details` items of its own beside reasoning the
proxy numbers: a client that merges the pieces by `index` gets each item
whole (an encrypted item never merged into a text item, a signed thinking
block never joined to the next block)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.outputshapes import deltas, read
from tests.shapecases import completion

KEY = {"Authorization": "Bearer sk-test", "X-Reasoning-Output": "reasoning_details"}
SECRET = {"type": "reasoning.encrypted", "data": "gAAAA-blob", "format": "x", "index": 0}
BLOCK = {"type": "thinking", "thinking": "Check the map.", "signature": "sig-1"}


def ask(proxy: Any, stream: bool) -> list[dict[str, Any]]:
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{proxy.url}/chat/completions", json=body, headers=KEY)
    assert response.status_code == 200, response.text
    parts = deltas(response.content) if stream else [response.json()["choices"][0]["message"]]
    return read(parts, "reasoning_details")["details"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_upstream_item_and_tagged_reasoning_keep_apart(
    upstream: FakeUpstream, stream: bool
) -> None:
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_details": [SECRET]}),
        chunk({"content": "<think>Paris is the capital.</think>"}),
        chunk({"content": "Paris."}),
        chunk({}, "stop"),
    ]
    whole = completion(
        {"content": "<think>Paris is the capital.</think>Paris.", "reasoning_details": [SECRET]}
    )
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(Stream(chunks) if stream else Json(whole))
        details = ask(proxy, stream)
    assert details == [
        SECRET,
        {"type": "reasoning.text", "text": "Paris is the capital.", "index": 1},
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_signed_thinking_block_and_an_upstream_item_keep_apart(
    upstream: FakeUpstream, stream: bool
) -> None:
    chunks = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"thinking_blocks": [BLOCK]}),
        chunk({"reasoning_details": [SECRET]}),
        chunk({"content": "Paris."}),
        chunk({}, "stop"),
    ]
    whole = completion(
        {"content": "Paris.", "thinking_blocks": [BLOCK], "reasoning_details": [SECRET]}
    )
    with running_proxy(route_config(upstream)) as proxy:
        upstream.script(Stream(chunks) if stream else Json(whole))
        details = ask(proxy, stream)
    text = {"type": "reasoning.text", "text": "Check the map.", "signature": "sig-1"}
    assert sorted(details, key=lambda d: d["index"]) == (
        [{**text, "index": 0}, {**SECRET, "index": 1}] if stream else [SECRET, {**text, "index": 1}]
    )
