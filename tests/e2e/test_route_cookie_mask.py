"""A route whose credential is a `Cookie` in its `headers:` (a session
cookie some gateways take instead of a bearer key): an upstream that quotes
the cookie back, whole or one cookie's value alone, hands it to no client,
on any door, the pass-through, or in what the proxy stores."""

from __future__ import annotations

import json

import httpx

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

SESSION = "sess-0123456789abcdef"
COOKIE = f"theme=dark; session={SESSION}"
CLIENT = {"Authorization": "Bearer sk-client-cookie-route"}
MESSAGES = [{"role": "user", "content": "hi"}]


def refusal(quoted: str) -> Json:
    return Json(
        {"error": {"message": f"bad session: {quoted}", "type": "invalid_request_error"}},
        status=401,
        headers={"x-upstream-echo": quoted},
    )


def test_a_routes_cookie_quoted_back_reaches_no_client(upstream: FakeUpstream) -> None:
    """Regression: only header names holding `key`, `token`, `secret`,
    `password` or `authorization` were masked, so a route's `Cookie` (which
    makes the route keyed: the clients' own keys are not sent) came back to
    every client whenever the upstream quoted it."""
    answer = {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": f"you sent Cookie: {COOKIE}"},
                "finish_reason": "stop",
            }
        ],
    }
    streamed = Stream(
        [
            chunk({"reasoning_content": f"the session is {SESSION[:6]}"}),
            chunk({"reasoning_content": f"{SESSION[6:]}."}),
            chunk({"content": f"cookie={COOKIE}"}),
            chunk({}, "stop"),
        ],
        delay=0.05,  # each chunk its own read
    )
    with running_proxy(route_config(upstream, headers={"Cookie": COOKIE})) as proxy:
        upstream.script(
            refusal(COOKIE),
            refusal(SESSION),
            refusal(SESSION),
            Json(answer),
            streamed,
            Json({"object": "list", "data": [], "echo": SESSION}),
        )
        with httpx.Client(base_url=proxy.base, headers=CLIENT, timeout=30) as client:
            seen = [
                client.post("/v1/chat/completions", json={"model": "m", "messages": MESSAGES}),
                client.post("/v1/responses", json={"model": "m", "input": "hi"}),
                client.post(
                    "/v1/messages",
                    headers={"anthropic-version": "2023-06-01"},
                    json={"model": "m", "max_tokens": 8, "messages": MESSAGES},
                ),
                client.post(
                    "/v1/chat/completions",
                    headers={"X-Conversation-Id": "whole"},
                    json={"model": "m", "messages": MESSAGES},
                ),
                client.post(
                    "/v1/chat/completions",
                    headers={"X-Conversation-Id": "streamed"},
                    json={"model": "m", "messages": MESSAGES, "stream": True},
                ),
                client.get("/v1/models"),
            ]
            stored = [client.get(f"/v1/conversations/{c}") for c in ("whole", "streamed")]
    assert [r.status_code for r in seen] == [401, 401, 401, 200, 200, 200]
    assert [r.status_code for r in stored] == [200, 200]
    assert [r.headers["cookie"] for r in upstream.requests] == [COOKIE] * 6
    assert all("authorization" not in r.headers for r in upstream.requests)
    texts = [r.text + json.dumps(dict(r.headers)) for r in seen + stored]
    assert not [t for t in texts if SESSION in t], texts
    assert all("[REDACTED]" in t for t in texts[:4]), texts
    joined = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in seen[4].text.splitlines()
        if line.startswith("data: {")
    )
    assert joined == "cookie=[REDACTED]"
