"""vLLM's `finish_reason: "abort"` (the request aborted on the server, the
answer cut) is a failed answer on every door, through a real server, as
OpenRouter's `"error"` is: the chat door streams the chunk as it came, the
Messages door ends with `event: error`, the Responses door with
`response.failed`, a whole answer is a 502 in the door's shape, and the
stored turn is incomplete.

Regression: an aborted answer became `end_turn` / `completed` on the doors
and a complete turn in the store, so a client took a cut answer for a
whole one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

HEAD = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
CHUNKS = [
    {**HEAD, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial"}}]},
    {**HEAD, "choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]},
]
WHOLE = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "partial"},
            "finish_reason": "abort",
        }
    ],
}
USER = [{"role": "user", "content": "hi"}]
DOORS: dict[str, dict[str, Any]] = {
    "chat/completions": {"model": "m", "messages": USER},
    "messages": {"model": "m", "max_tokens": 50, "messages": USER},
    "responses": {"model": "m", "input": "hi"},
}
MESSAGE = 'The upstream ended the answer with finish_reason "abort".'


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream_server)) as server:
        yield server


def stored(proxy: ProxyServer, headers: dict[str, str]) -> list[dict[str, Any]]:
    conversation = httpx.get(
        f"{proxy.url}/conversations/{headers['X-Conversation-Id']}", headers=headers
    )
    turns: list[dict[str, Any]] = conversation.json()["turns"]
    return turns


@pytest.mark.parametrize("door", list(DOORS))
def test_an_aborted_stream_fails_in_the_doors_shape(
    upstream: FakeUpstream, proxy: ProxyServer, door: str
) -> None:
    headers = {"Authorization": "Bearer sk-abort", "X-Conversation-Id": f"stream-{door[:4]}"}
    upstream.script(Stream(CHUNKS))
    r = httpx.post(f"{proxy.url}/{door}", json={**DOORS[door], "stream": True}, headers=headers)
    assert r.status_code == 200, r.text
    events = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    if door == "chat/completions":  # the chunk as it came
        assert '"finish_reason": "abort"' in r.text
    elif door == "messages":
        assert events[-1] == "error"
        assert "message_stop" not in events
        assert MESSAGE.replace('"', '\\"') in r.text
    else:
        assert events[-1] == "response.failed"
        assert "response.completed" not in events
    (turn,) = stored(proxy, headers)
    assert turn["complete"] is False


@pytest.mark.parametrize("door", list(DOORS))
def test_an_aborted_answer_is_a_502_in_the_doors_shape(
    upstream: FakeUpstream, proxy: ProxyServer, door: str
) -> None:
    upstream.script(Json(WHOLE))
    r = httpx.post(f"{proxy.url}/{door}", json=DOORS[door], headers={"Authorization": "Bearer k"})
    assert r.status_code == 502, r.text
    if door == "messages":
        assert r.json() == {"type": "error", "error": {"type": "api_error", "message": MESSAGE}}
    else:
        assert r.json()["error"]["message"] == MESSAGE
        assert r.json()["error"]["code"] == "upstream_error"
