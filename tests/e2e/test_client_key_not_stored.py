"""A client's own key, forwarded to a route without a key of its own, that
the upstream quotes back in its answer is never stored: the stored turn
(which the admin token can read too) holds the mask, streamed and whole.
Through real sockets."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

CLIENT_KEY = "sk-client-own-0123456789"


def chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-echo",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


@pytest.mark.parametrize("stream", [False, True])
def test_a_quoted_client_key_is_not_stored(upstream: FakeUpstream, stream: bool) -> None:
    said = f"The key you sent is {CLIENT_KEY}."
    thought = f"They sent {CLIENT_KEY[:10]}{CLIENT_KEY[10:]} again."
    if stream:
        upstream.script(
            Stream(
                [
                    chunk({"reasoning_content": thought}),
                    chunk({"content": said}),
                    chunk({}, "stop"),
                ]
            )
        )
    else:
        message = {"role": "assistant", "reasoning_content": thought, "content": said}
        answer = {
            "id": "chatcmpl-echo",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
        upstream.script(Json(answer))
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "X-Conversation-Id": "echo"}
    config = route_config(upstream, top={"server": {"admin_token": "admin-token-0123456789"}})
    with running_proxy(config) as proxy:
        sent = httpx.post(
            f"{proxy.url}/chat/completions",
            headers=headers,
            json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": "?"}]},
        )
        assert sent.status_code == 200
        stored = httpx.get(f"{proxy.url}/conversations/echo", headers=headers)
        listed = httpx.get(
            f"{proxy.url}/conversations",
            headers={"Authorization": "Bearer admin-token-0123456789"},
        )
    assert upstream.chat_requests()[0].headers["authorization"] == f"Bearer {CLIENT_KEY}"
    assert stored.status_code == 200
    assert CLIENT_KEY not in stored.text
    (turn,) = stored.json()["turns"]
    assert turn["content"].startswith("The key you sent is ")
    assert turn["blocks"][0]["thought"].startswith("They sent ")
    assert CLIENT_KEY not in listed.text
