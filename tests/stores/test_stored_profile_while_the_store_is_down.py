"""A profile written with `PUT /v1/reasoning/profiles/{name}` lives in the
store: two replicas on one real redis-server use it at once, whichever took
the PUT. While Redis is down a request naming it cannot know its settings:
it is a 503 `store_unavailable` (as `GET /v1/reasoning/profiles/{name}` is),
nothing goes upstream, and the client tries again; once Redis is back the
profile is read again. It used to be a 400 `unknown_profile`, "names no
profile of this proxy", a client error that a client does not retry."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.harness import FakeUpstream, Json
from tests.stores.servers import ProxyProcess, RedisServer, wait_until

ADMIN = {"Authorization": "Bearer admin-of-the-fleet"}
KEY = {"Authorization": "Bearer sk-profile", "X-Reasoning-Profile": "quiet"}
REASONING = "Reasoning the quiet profile keeps out of answers."


def _answer() -> Json:
    message = {"role": "assistant", "content": "Answer.", "reasoning_content": REASONING}
    return Json(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def _chat(proxy: ProxyProcess) -> httpx.Response:
    return httpx.post(
        proxy.url + "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers=KEY,
        timeout=30,
    )


def _messages(proxy: ProxyProcess) -> httpx.Response:
    return httpx.post(
        proxy.url + "/messages",
        json={"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
        headers={**KEY, "anthropic-version": "2023-06-01"},
        timeout=30,
    )


def _quiet_profile(proxy: ProxyProcess) -> None:
    response = httpx.put(
        proxy.url + "/reasoning/profiles/quiet",
        json={"include_in_response": False},
        headers=ADMIN,
        timeout=10,
    )
    assert response.status_code == 200, response.text


def test_a_stored_profile_is_a_503_while_redis_is_down_and_used_again_after(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    args = ["--upstream", upstream.url, "--store", server.url]
    env = {"REASONING_PROXY_ADMIN_TOKEN": ADMIN["Authorization"].split()[1]}
    try:
        with (
            ProxyProcess(args, log=tmp_path / "a.log", env=env) as a,
            ProxyProcess(args, log=tmp_path / "b.log", env=env) as b,
        ):
            _quiet_profile(a)
            upstream.script(_answer())
            used = _chat(b)
            assert used.status_code == 200, used.text
            assert REASONING not in used.text

            server.stop()
            sent = len(upstream.requests)
            down = _chat(b)
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == "store_unavailable"
            anthropic = _messages(b)
            assert anthropic.status_code == 503, anthropic.text
            assert anthropic.json()["type"] == "error"
            assert len(upstream.requests) == sent  # nothing went upstream

            server.start()  # empty: the profile is written again
            wait_until(lambda: httpx.get(b.base + "/readyz").status_code == 200, what="ready")
            assert _chat(b).json()["error"]["code"] == "unknown_profile"
            _quiet_profile(b)
            upstream.script(_answer())
            again = _chat(a)
            assert again.status_code == 200, again.text
            assert REASONING not in again.text
    finally:
        server.stop()
